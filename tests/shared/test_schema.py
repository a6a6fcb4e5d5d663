"""The exported JSON Schemas are the ones the code validates with."""

import json

from rubricd import schema
from rubricd.messages import MESSAGES


def test_one_schema_per_message_and_the_committed_copies_are_current(tmp_path):
    schema.main([str(tmp_path)])
    written = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert set(written) == {m.__name__ for m in MESSAGES}
    rollout = written["Rollout"]["$defs"]["Rollout"]
    assert {"run_id", "rollout_id", "step", "prompt", "response"} <= set(rollout["required"])
    from pathlib import Path

    committed = Path(__file__).parents[2] / "shared" / "schemas"
    for name, content in written.items():
        assert json.loads((committed / f"{name}.json").read_text()) == content, f"run `make schemas` ({name})"
