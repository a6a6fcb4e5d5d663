"""Reading who sent an entry that cannot be decoded: no broker needed."""

import msgspec
import pytest

from rubricd.keys import Keys
from rubricd.messages import JudgeStatus, Rollout, Score
from rubricd_services.runtime import intake
from rubricd_services.runtime.intake import Rejected

KEYS = Keys("rubricd")
DEEP = b"[" * 100_000 + b"]" * 100_000


def test_shallow_replaces_every_nested_value_and_keeps_the_top_level():
    body = b'{"a": {"b": [1, {"c": "]"}]}, "s": "{[", "n": 2, "l": [[["x"]]]}'
    assert msgspec.json.decode(intake.shallow(body)) == {"a": None, "s": "{[", "n": 2, "l": None}
    assert intake.shallow(b'{"a": 1}') == b'{"a": 1}'


def test_the_sender_of_an_entry_nested_too_deep_is_read():
    body = b'{"run_id": "r", "rollout_id": "x", "step": ' + DEEP + b', "reply_to": "rubricd:replies:t"}'
    with pytest.raises(RecursionError):
        msgspec.json.decode(body)
    assert intake.sender(body, KEYS, "rollout_id") == intake.Sender("rubricd:replies:t", "r", "x", 0)
    assert intake.sender(DEEP, KEYS, "rollout_id") is None


@pytest.mark.parametrize("field", ["step", "metadata", "unknown"])
def test_intake_rejects_a_rollout_nested_too_deep_with_an_answer(field: str):
    def rejected(sender: intake.Sender, reason: str, rollout: Rollout | None) -> Score:
        ids = {"run_id": sender.run_id, "rollout_id": sender.id, "step": sender.step}
        return Score(**ids, status=JudgeStatus.REJECTED, reward=None, rubric_version=0, error=reason)

    taking = intake.Intake(
        type=Rollout,
        what="rollout",
        id_field="rollout_id",
        max_bytes=10_000_000,
        max_bytes_setting="max_rollout_bytes",
        keys=KEYS,
        reply_ttl_s=60,
        answer=rejected,
    )
    valid = {
        "run_id": "r",
        "rollout_id": "x",
        "step": 3,
        "prompt": "p",
        "response": "",
        "reply_to": "rubricd:replies:t",
    }
    body = msgspec.json.encode({**valid, field: "<deep>"}).replace(b'"<deep>"', DEEP)
    with pytest.raises(Rejected, match="malformed rollout") as raised:
        taking.take(body)
    assert raised.value.notify is not None and raised.value.notify.stream == "rubricd:replies:t"
    assert raised.value.notify.message.rollout_id == "x"
