"""Chat messages as plain text."""

import pytest

from rubricd.chat import NotTurns, text, turns


def test_text_of_standard_and_conversational_inputs() -> None:
    assert text("What is 2 + 2?") == "What is 2 + 2?"
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]
    assert text(prompt) == "system: Be brief.\n\nuser: What is 2 + 2?"
    assert text([{"role": "assistant", "content": "4"}], roles=False) == "4"
    assert (
        text([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "and this?"}]}])
        == "user: and this?"
    )


# A tool-calling completion as TRL's GRPOTrainer builds it (no call ids, the arguments an object, the tool
# answering by name) and as the OpenAI API and vLLM return it (content None, ids, the arguments a JSON string).
TRL_COMPLETION = [
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}],
    },
    {"role": "tool", "name": "add", "content": "4"},
    {"role": "assistant", "content": "The answer is 4."},
]
OPENAI_COMPLETION = [
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "4"},
    {"role": "assistant", "content": "The answer is 4."},
]


def test_a_tool_calling_completion_shows_each_call_with_its_arguments_and_each_result_with_its_tool() -> None:
    assert text(TRL_COMPLETION, roles=False) == (
        'assistant: [tool_call add({"a": 2, "b": 2})]\n\ntool add: 4\n\nassistant: The answer is 4.'
    )
    assert text(OPENAI_COMPLETION, roles=False) == (
        'assistant: [tool_call add({"a": 2, "b": 2})]\n\ntool call_1: 4\n\nassistant: The answer is 4.'
    )


def test_an_assistant_turn_with_no_content_and_calls_beside_text_reads_as_both() -> None:
    turn = {"role": "assistant", "content": "Let me add.", "tool_calls": OPENAI_COMPLETION[0]["tool_calls"]}
    assert text([turn], roles=False) == 'Let me add.\n[tool_call add({"a": 2, "b": 2})]'
    assert text([{"role": "assistant", "content": None}], roles=False) == ""


# verl's tool agent loop: the arguments an object (a JSON string it could not decode), the call id where its parser
# gave one, the tool message answering by id or, without one, by nothing but its place.
VERL_COMPLETION = [
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}],
    },
    {"role": "tool", "content": "4"},
    {"role": "assistant", "content": "The answer is 4."},
]


def test_trl_openai_and_verl_completions_are_turns_with_their_calls_and_results() -> None:
    prompt = [{"role": "user", "content": "What is 2 + 2?"}]
    for completion in (TRL_COMPLETION, OPENAI_COMPLETION, VERL_COMPLETION):
        trajectory = turns([*prompt, *completion], prompt_turns=1)
        assert [t.role for t in trajectory] == ["user", "assistant", "tool", "assistant"]
        [call] = trajectory[1].tool_calls
        assert call.function.name == "add" and call.function.arguments in ({"a": 2, "b": 2}, '{"a": 2, "b": 2}')
        assert trajectory[2].text == "4" and trajectory[3].text == "The answer is 4."
    assert turns(OPENAI_COMPLETION)[1].tool_call_id == "call_1" and turns(TRL_COMPLETION)[1].name == "add"


def test_an_assistant_turn_keeps_its_reasoning_under_each_name_trainers_give_it() -> None:
    for key in ("reasoning", "reasoning_content", "thinking"):
        [turn] = turns([{"role": "assistant", "content": "4", key: "2 and 2 make 4."}])
        assert turn.reasoning == "2 and 2 make 4."
    assert turns([{"role": "assistant", "content": "4"}])[0].reasoning is None


def test_messages_that_cannot_be_turns_are_refused_naming_the_turn_and_field() -> None:
    user = {"role": "user", "content": "What is 2 + 2?"}
    with pytest.raises(NotTurns, match=r"Invalid enum value 'ipython' - at `trajectory\[1\].role`"):
        turns([user, {"role": "ipython", "content": "4"}])
    with pytest.raises(NotTurns, match=r"trajectory\[1\]: a tool turn answers no earlier tool call"):
        turns([user, {"role": "tool", "content": "4"}])
    with pytest.raises(NotTurns, match=r"Expected `object`, got `str` - at `trajectory\[0\]`"):
        turns(["What is 2 + 2?"])
    with pytest.raises(NotTurns, match="prompt_turns 3 is beyond"):
        turns([user], prompt_turns=3)
