"""Chat messages as plain text: the prompts and completions trainers send, in rubricd's one text form."""

from typing import Any


def text(value: Any, roles: bool = True) -> str:
    """Plain text of a TRL prompt or completion: a string, or conversational messages ({"role", "content"})."""
    if isinstance(value, str):
        return value
    parts = []
    for message in value:
        content = message.get("content", "")
        if not isinstance(content, str):  # multimodal content: keep the text parts
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        parts.append(f"{message.get('role', 'user')}: {content}" if roles else content)
    return "\n\n".join(parts)
