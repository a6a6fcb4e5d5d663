"""A trainer's chat messages (OpenAI's, TRL's, verl's) as a rollout's turns, taken as the trainers write them."""

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from ..messages.trajectories import Turn, Turns, malformed

# Where trainers put an assistant message's reasoning: OpenAI-compatible servers (vLLM's `reasoning_content`,
# later `reasoning`), TRL's parsed responses (`reasoning_content`; Gemma's and gpt-oss's `thinking`).
REASONING_KEYS = ("reasoning", "reasoning_content", "thinking")


class NotTurns(ValueError):
    """Messages that cannot be a trajectory's turns; the message names the turn and the field
    (`trajectory[i].field`), as a rollout refused at intake would."""


def turns(messages: Iterable[Any], prompt_turns: int = 0) -> list[Turn]:
    """Conversational messages as a trajectory's turns (`prompt_turns`: how many lead in as the policy's input).

    Lenient where trainers are: content None or empty beside tool calls, arguments a JSON string or an object,
    calls without ids, a tool message answering by id, by name or by its place, the reasoning under any of
    REASONING_KEYS. Raises NotTurns where a rollout carrying them would be refused: an unknown role, a wrong
    type, a tool message answering no earlier call, a tool call on a message that is not the assistant's.
    """
    try:
        converted = msgspec.convert([_with_reasoning(m) for m in messages], Turns)
    except msgspec.ValidationError as e:
        raise NotTurns(str(e).replace("`$[", "`trajectory[")) from None
    if (why := malformed(converted, prompt_turns)) is not None:
        raise NotTurns(why)
    return converted


def _with_reasoning(message: Any) -> Any:
    if not isinstance(message, Mapping):
        return message  # refused by the conversion, naming the turn
    reasoning = next((message[k] for k in REASONING_KEYS if message.get(k)), None)
    return {**message, "reasoning": reasoning}
