"""Agent prompts: the instructions a reader can find as prose, and rollout text kept as data.

Each agent's instructions are `prompts/<agent>.md` in the package of the
service that uses it, overridable by a setting naming another file (checked at
start: a missing one stops the service, named). Whatever comes from a rollout,
or from memory written about rollouts, goes into the chat as JSON inside a
`<tag>` block with `<` escaped, so it can never close its block or pose as an
instruction.
"""

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


def as_data(obj: object) -> str:
    """JSON with '<' written as its escape `\\u003c`: the text can never contain a closing tag."""
    return msgspec.json.encode(obj).decode().replace("<", "\\u003c")


def block(tag: str, obj: object) -> str:
    """`obj` as a delimited data block: `<tag>`, its JSON, `</tag>`."""
    return f"<{tag}>\n{as_data(obj)}\n</{tag}>"
