"""Ids of new rubrics, made from their criteria: one way for the generator and the updater."""

import re
from collections.abc import Container

_SKIPPED = {"the", "a", "an", "response"}


def normal(text: str) -> str:
    """Lower-case words and digits only: two criteria that differ in case or punctuation are the same."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def new_id(criterion: str, taken: Container[str]) -> str:
    """A readable id for `criterion` (its first five words, at most 48 characters) that is not in `taken`."""
    words = [w for w in normal(criterion).split() if w not in _SKIPPED]
    base = "_".join(words[:5])[:48].rstrip("_") or "rubric"
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}_{n}", n + 1
    return candidate
