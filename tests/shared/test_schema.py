"""The exported JSON Schema is the one the code validates with."""

import json
from pathlib import Path

from rubricd import schema
from rubricd.messages import MESSAGES


def test_one_schema_for_every_message_and_the_committed_copy_is_current(tmp_path):
    schema.main([str(tmp_path / "rubricd.schema.json")])
    written = json.loads((tmp_path / "rubricd.schema.json").read_text())
    assert {ref["$ref"].removeprefix("#/$defs/") for ref in written["oneOf"]} == {m.__name__ for m in MESSAGES}
    rollout = written["$defs"]["Rollout"]
    assert {"run_id", "rollout_id", "step"} <= set(rollout["required"])
    assert {"prompt", "response", "trajectory", "tools", "prompt_turns"} <= set(rollout["properties"])
    assert set(written["$defs"]["Turn"]["properties"]["role"]["enum"]) == {
        "system",
        "developer",
        "user",
        "assistant",
        "tool",
    }

    committed = Path(__file__).parents[2] / schema.PATH
    assert json.loads(committed.read_text()) == written, "run `make schemas`"
