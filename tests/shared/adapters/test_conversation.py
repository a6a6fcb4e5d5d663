"""A trainer's chat messages as a rollout's turns: each trainer's dialect taken as it writes it; what intake would
refuse refused, naming the turn and the field."""

import pytest

from rubricd.adapters.conversation import NotTurns, turns

PROMPT = [{"role": "user", "content": "What is 2 + 2?"}]
ANSWER = {"role": "assistant", "content": "The answer is 4."}
# A tool-calling completion as TRL's GRPOTrainer builds it (no call ids, the arguments an object, the tool
# answering by name), as the OpenAI API and vLLM return it (content None, ids, the arguments a JSON string), and
# as verl's tool agent loop keeps it (its hermes parser's call, no id; the tool's answer by its place).
TRL = [
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}],
    },
    {"role": "tool", "name": "add", "content": "4"},
    ANSWER,
]
OPENAI = [
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "4"},
    ANSWER,
]
VERL = [TRL[0], {"role": "tool", "content": "4"}, ANSWER]


@pytest.mark.parametrize(
    "completion, answered_by",
    [(TRL, (None, "add")), (OPENAI, ("call_1", None)), (VERL, (None, None))],
    ids=["trl", "openai", "verl"],
)
def test_each_trainers_tool_calling_completion_is_turns_with_its_call_and_result(completion, answered_by) -> None:
    trajectory = turns([*PROMPT, *completion], prompt_turns=1)
    assert [t.role for t in trajectory] == ["user", "assistant", "tool", "assistant"]
    [call] = trajectory[1].tool_calls
    assert call.function.name == "add" and call.function.arguments in ({"a": 2, "b": 2}, '{"a": 2, "b": 2}')
    assert trajectory[2].text == "4" and (trajectory[2].tool_call_id, trajectory[2].name) == answered_by
    assert trajectory[3].text == "The answer is 4."


def test_an_assistant_turn_keeps_its_reasoning_under_each_name_trainers_give_it() -> None:
    for key in ("reasoning", "reasoning_content", "thinking"):
        [turn] = turns([{"role": "assistant", "content": "4", key: "2 and 2 make 4."}])
        assert turn.reasoning == "2 and 2 make 4."
    assert turns([ANSWER])[0].reasoning is None


def test_messages_that_cannot_be_turns_are_refused_naming_the_turn_and_field() -> None:
    with pytest.raises(NotTurns, match=r"Invalid enum value 'ipython' - at `trajectory\[1\].role`"):
        turns([*PROMPT, {"role": "ipython", "content": "4"}])
    with pytest.raises(NotTurns, match=r"trajectory\[1\]: a tool turn answers no earlier tool call"):
        turns([*PROMPT, {"role": "tool", "content": "4"}])
    with pytest.raises(NotTurns, match=r"Expected `object`, got `str` - at `trajectory\[0\]`"):
        turns(["What is 2 + 2?"])
    with pytest.raises(NotTurns, match="prompt_turns 3 is beyond"):
        turns(PROMPT, prompt_turns=3)
