"""A rollout may carry a trajectory: malformed turns are rejected naming the turn and field; what the policy
got wrong is kept to be judged."""

import msgspec
import pytest

from rubricd import wire
from rubricd.messages import Rollout
from tests.factories import rollout as text_rollout

HEAD = '"run_id":"r","rollout_id":"a","step":0'
USER = '{"role":"user","content":"What is 17*23?"}'
CALL = '{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"calc","arguments":"{\\"expr\\":\\"17*23\\"}"}}]}'
RESULT = '{"role":"tool","tool_call_id":"c1","content":"391"}'
ANSWER = '{"role":"assistant","content":"391"}'
NO_NAME = CALL.replace('{"name"', '{"nom"')


def rollout(turns: str, extra: str = "") -> bytes:
    return f'{{{HEAD},"trajectory":[{turns}]{extra}}}'.encode()


def test_an_openai_trajectory_decodes_with_its_text_filled():
    r = wire.decode(rollout(f"{USER},{CALL},{RESULT},{ANSWER}", ',"prompt_turns":1'), Rollout)
    assert r.policy_turns == [1, 3]
    assert r.prompt == "What is 17*23?"
    assert r.response == 'assistant: [tool_call calc({"expr":"17*23"})]\n\ntool c1: 391\n\nassistant: 391'


def test_a_trl_trajectory_decodes():
    # TRL's tool loop: arguments an object, no call id, the tool turn naming its tool.
    call = '{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"calc","arguments":{"expr":"17*23"}}}]}'
    r = wire.decode(rollout(f'{USER},{call},{{"role":"tool","name":"calc","content":"391"}},{ANSWER}'), Rollout)
    assert r.trajectory[1].tool_calls[0].function.arguments == {"expr": "17*23"}
    assert r.policy_turns == [1, 3]


def test_what_the_policy_got_wrong_is_not_a_wire_error():
    bad_json = CALL.replace('\\"expr\\":\\"17*23\\"', "17*23 please")
    unoffered = CALL.replace('"calc"', '"web_search"')
    unanswered = f"{USER},{CALL},{ANSWER}"
    for turns in (f"{USER},{bad_json},{RESULT},{ANSWER}", f"{USER},{unoffered},{RESULT},{ANSWER}", unanswered):
        extra = ',"tools":[{"type":"function","function":{"name":"calc","parameters":{"type":"object"}}}]'
        assert wire.decode(rollout(turns, extra), Rollout).trajectory


@pytest.mark.parametrize(
    "turns, extra, where",
    [
        (f'{USER},{{"role":"robot","content":"hi"}}', "", r"\$.trajectory\[1\].role"),
        (f"{USER},{RESULT}", "", r"trajectory\[1\].tool_call_id: 'c1' answers no earlier tool call"),
        (f'{USER},{{"role":"tool","name":"calc","content":"4"}}', "", r"trajectory\[1\].name"),
        (f'{USER},{{"role":"tool","content":"4"}}', "", r"trajectory\[1\]: a tool turn answers no earlier"),
        (f"{CALL.replace('assistant', 'user')}", "", r"trajectory\[0\].tool_calls: only an assistant turn"),
        (f'{USER},{{"role":"assistant","content":5}}', "", r"\$.trajectory\[1\].content"),
        (f"{USER},{NO_NAME}", "", r"\$.trajectory\[1\].tool_calls\[0\].function"),
        (f"{USER},{ANSWER}", ',"prompt_turns":3', "prompt_turns 3 is beyond"),
        ("", ',"tools":[{"type":"function","function":{"name":"calc"}}]', "tools and prompt_turns go with"),
    ],
)
def test_a_malformed_trajectory_names_the_turn_and_the_field(turns, extra, where):
    with pytest.raises(msgspec.ValidationError, match=where):
        wire.decode(rollout(turns, extra), Rollout)


def test_a_text_rollout_is_unchanged():
    r = text_rollout(prompt="p")
    assert r.trajectory == [] and r.policy_turns == [] and msgspec.json.decode(wire.encode(r))["prompt"] == "p"
