"""Export the JSON Schema of every message: `python -m rubricd.schema DIR`.

One file per message type (`Rollout.json`, ...), for trainers written in other
languages and for validators on the wire.
"""

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from .messages import MESSAGES


def schemas() -> dict[str, dict[str, Any]]:
    _, components = msgspec.json.schema_components(MESSAGES, ref_template="#/$defs/{name}")
    out: dict[str, dict[str, Any]] = {}
    for message in MESSAGES:
        name = message.__name__
        out[name] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": name,
            "$ref": f"#/$defs/{name}",
            "$defs": components,
        }
    return out


def main(argv: list[str]) -> None:
    target = Path(argv[0] if argv else "shared/schemas")
    target.mkdir(parents=True, exist_ok=True)
    for name, schema in schemas().items():
        (target / f"{name}.json").write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
    print(f"wrote {len(MESSAGES)} schemas to {target}/")


if __name__ == "__main__":
    main(sys.argv[1:])
