"""Chat messages as plain text."""

from rubricd.chat import text


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
