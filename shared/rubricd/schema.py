"""Export the JSON Schema of the wire format: `python -m rubricd.schema [FILE]`.

One document (`shared/schemas/rubricd.schema.json`): every message and every type they share, once, under
`$defs`; the top-level `oneOf` lists the messages (each tagged by its `type`). For trainers written in other
languages and for validators on the wire.
"""

import inspect
import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from .messages import MESSAGES

PATH = "shared/schemas/rubricd.schema.json"


def _cleaned(node: Any) -> Any:
    """Every description as `inspect.cleandoc` makes it: msgspec from 0.23 cleans docstrings, before it did not,
    and the document must not depend on which is installed."""
    if isinstance(node, dict):
        return {
            k: inspect.cleandoc(v) if k == "description" and isinstance(v, str) else _cleaned(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_cleaned(v) for v in node]
    return node


def document() -> dict[str, Any]:
    _, components = msgspec.json.schema_components(MESSAGES, ref_template="#/$defs/{name}")
    components = _cleaned(components)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "rubricd messages",
        "description": "A stream entry's `__data__`: one of the messages (each stream carries the one its docs name).",
        "oneOf": [{"$ref": f"#/$defs/{message.__name__}"} for message in MESSAGES],
        "$defs": components,
    }


def main(argv: list[str]) -> None:
    target = Path(argv[0] if argv else PATH)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(document(), indent=2, sort_keys=True) + "\n")
    print(f"wrote {len(MESSAGES)} messages' schema to {target}")


if __name__ == "__main__":
    main(sys.argv[1:])
