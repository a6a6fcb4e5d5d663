"""Agent prompts: the instructions a reader can find as prose, and rollout text kept as data.

Each agent's instructions are `prompts/<agent>.md` in the package of the
service that uses it, overridable by a setting naming another file (checked at
start: a missing one stops the service, named). Whatever comes from a rollout,
or from memory written about rollouts, goes into the chat as JSON inside a
`<tag>` block with `<` escaped, so it can never close its block or pose as an
instruction.
"""

from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Annotated

import msgspec
from pydantic import AfterValidator


def _is_file(path: Path | None) -> Path | None:
    if path is not None and not path.is_file():
        raise ValueError(f"no such file: {path}")
    return path


# A setting naming a prompt file that replaces an agent's default instructions.
PromptFile = Annotated[Path | None, AfterValidator(_is_file)]


def load(package: str, agent: str, path: Path | None = None) -> str:
    """The agent's instructions: the file `path`, else `prompts/<agent>.md` of `package`."""
    if path is not None:
        return path.read_text()
    return resources.files(package).joinpath(f"prompts/{agent}.md").read_text()


def one_of(names: Sequence[str]) -> object:
    """A string whose JSON Schema lists `names` (plain str where there are none). In the schema only: a server
    that enforces it keeps the model to them, while an answer from one that does not still decodes, and the
    caller drops just what names another, with a reason."""
    return Annotated[str, msgspec.Meta(extra_json_schema={"enum": list(names)})] if names else str


def as_data(obj: object) -> str:
    """JSON with '<' written as its escape `\\u003c`: the text can never contain a closing tag."""
    return msgspec.json.encode(obj).decode().replace("<", "\\u003c")


def block(tag: str, obj: object) -> str:
    """`obj` as a delimited data block: `<tag>`, its JSON, `</tag>`."""
    return f"<{tag}>\n{as_data(obj)}\n</{tag}>"


def size(text: str) -> int:
    """What `text` takes inside a data block: its JSON string's length without the quotes (a `<` takes 6
    characters, a quote or newline 2)."""
    return len(as_data(text)) - 2


def cut(text: str, limit: int) -> str:
    """`text` cut so that it takes at most `limit` characters in a data block (`size`); a cut one ends with a
    marker saying how much was left out (or is only "…" where even the marker does not fit)."""
    if size(text) <= limit:
        return text
    marker = f"… [cut to fit: {len(text)} of {len(text)} characters]"
    if limit < len(marker):
        return "…"[: max(0, limit)]
    low, high = 0, len(text)  # the longest prefix whose size leaves room for the marker
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if size(text[:mid]) <= limit - len(marker) else (low, mid - 1)
    return f"{text[:low]}… [cut to fit: {low} of {len(text)} characters]"


def fit(texts: Sequence[str], budget: int) -> list[str]:
    """Cut the longest of `texts` to one common size so that together they take at most `budget` characters in a
    data block: short texts stay whole, and the long ones share what is left equally, each cut with a marker."""
    sizes = [size(t) for t in texts]
    if sum(sizes) <= budget:
        return list(texts)
    left, longer = max(0, budget), len(texts)
    for length in sorted(sizes):
        if length * longer > left:
            break
        left, longer = left - length, longer - 1
    share = left // longer
    return [cut(text, share) for text in texts]


# Bounds in an answer's JSON Schema only (not checked on decode): a server that enforces the schema by grammar
# stops a small model that would run on to max_tokens, while an answer beyond them is still accepted.
def max_chars(n: int) -> msgspec.Meta:
    return msgspec.Meta(extra_json_schema={"maxLength": n})


def max_items(n: int) -> msgspec.Meta:
    return msgspec.Meta(extra_json_schema={"maxItems": n})
