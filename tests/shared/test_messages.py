"""Messages validate on decode, evolve additively, and export JSON Schema."""

import msgspec
import pytest

from rubricd import wire
from rubricd.messages import MESSAGES, PublishedRollout, Rollout, Score, instance_key
from tests.factories import rollout


def test_a_minimal_rollout_from_any_language_decodes():
    raw = b'{"run_id":"run-1","rollout_id":"s0-r1","step":0,"prompt":"2+2?","response":"4"}'
    rollout = wire.decode(raw, Rollout)
    assert rollout.reference is None and rollout.context.goal == ""


@pytest.mark.parametrize(
    "raw, where",
    [
        (b'{"run_id":"run 1","rollout_id":"a","step":0,"prompt":"p","response":"r"}', "run_id"),
        (b'{"run_id":"r","rollout_id":"a","step":-1,"prompt":"p","response":"r"}', "step"),
        (b'{"run_id":"r","rollout_id":"a","step":0}', "`prompt` is missing"),
        (b'{"run_id":"r","rollout_id":"a","step":0,"prompt":"p"}', "`response` is missing"),
        (b'{"run_id":"r","rollout_id":"a","step":0,"promt":"p","response":"r"}', "`prompt` is missing"),
        (b'{"type":"score","run_id":"r","rollout_id":"a","step":0,"prompt":"p","response":"r"}', "type"),
        # A trailing newline (which Python's `$` would let through) is no part of an id.
        (b'{"run_id":"r\\n","rollout_id":"a","step":0,"prompt":"p","response":"r"}', "run_id"),
        (b'{"run_id":"r","rollout_id":"a\\n","step":0,"prompt":"p","response":"r"}', "rollout_id"),
        (b'{"run_id":"r","rollout_id":"a","step":0,"prompt":"p","response":"r","instance_key":"k\\n"}', "instance_key"),
    ],
)
def test_invalid_rollouts_name_the_field(raw, where):
    with pytest.raises(msgspec.ValidationError, match=where):
        wire.decode(raw, Rollout)


def test_an_empty_response_is_a_response():
    raw = b'{"run_id":"r","rollout_id":"a","step":0,"prompt":"p","response":""}'
    assert wire.decode(raw, Rollout).response == ""


def test_unknown_fields_are_ignored_so_schemas_can_grow_but_refused_on_a_published_rollout():
    score = b'{"run_id":"r","rollout_id":"a","step":1,"status":"ok","reward":0.5,"rubric_version":2,"future":1}'
    assert wire.decode(score, Score).reward == 0.5
    raw = b'{"run_id":"r","rollout_id":"a","step":0,"prompt":"p","response":"r","future_field":1}'
    assert wire.decode(raw, Rollout).rollout_id == "a"  # read back from the services' own streams
    for misspelled in (raw, b'{"run_id":"r","rollout_id":"a","step":0,"prompt":"p","response":"r","judge_mdoe":"x"}'):
        with pytest.raises(msgspec.ValidationError, match="unknown field `(future_field|judge_mdoe)`"):
            wire.decode(misspelled, PublishedRollout)  # as the scorer takes it in from a trainer
    turns = b'[{"role":"user","content":"2+2?","future":1},{"role":"assistant","content":"4","refusal":null}]'
    raw = b'{"run_id":"r","rollout_id":"a","step":0,"prompt_turns":1,"trajectory":' + turns + b"}"
    assert wire.decode(raw, PublishedRollout).response == "4"  # a turn's unknown fields: OpenAI's messages carry more


def test_instance_key_defaults_to_a_hash_of_the_prompt():
    a = rollout(1, prompt="same", response="x")
    b = rollout(2, prompt="same", response="y")
    c = rollout(3, prompt="other", response="y", instance_key="mine")
    assert instance_key(a) == instance_key(b) != instance_key(c) == "mine"


def test_every_message_has_a_json_schema_and_round_trips():
    for message in MESSAGES:
        schema = msgspec.json.schema(message)
        assert message.__name__ in schema["$defs"]
    score = Score(run_id="r", rollout_id="a", step=1, status="ok", reward=0.5, rubric_version=2)
    assert wire.decode(wire.encode(score), Score) == score


def test_messages_have_no_top_level_data_field():
    # FastStream would read a top-level string "data" as its own envelope.
    for message in MESSAGES:
        assert "data" not in message.__struct_fields__


@pytest.mark.parametrize(
    "raw",
    [b'{"run_id": "\xff"}', b'{"a":' * 100_000 + b"1" + b"}" * 100_000, b"[" * 100_000],
    ids=["not UTF-8", "objects nested too deeply", "arrays nested too deeply"],
)
def test_any_bytes_decode_to_a_message_or_a_decode_error(raw):
    with pytest.raises(msgspec.DecodeError):
        wire.decode(raw, Rollout)
