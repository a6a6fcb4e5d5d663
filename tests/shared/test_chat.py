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
