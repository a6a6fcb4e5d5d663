"""Deterministic embeddings for the simulator (test/demo tool, not a semantic model).

A hashed bag of words: each word adds ±(1 + log count) to one of `dims`
coordinates chosen by its hash, and the vector is L2-normalised. Texts that
share words get close vectors; the same text always gets the same vector.
"""

import base64
import hashlib
import math
import re
import struct
from collections import Counter
from functools import lru_cache

DIMS = 384
_WORD = re.compile(r"[a-z0-9]+")


@lru_cache(maxsize=65536)
def _slot(word: str, dims: int) -> tuple[int, float]:
    h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
    return h % dims, (1.0 if (h >> 63) & 1 else -1.0)


def embed(text: str, dims: int = DIMS) -> list[float]:
    vec = [0.0] * dims
    for word, count in Counter(_WORD.findall(text.lower())).items():
        i, sign = _slot(word, dims)
        vec[i] += sign * (1.0 + math.log(count))
    norm = math.sqrt(sum(x * x for x in vec))
    if norm == 0:
        vec[0], norm = 1.0, 1.0  # empty text: a fixed unit vector, never NaN
    return [x / norm for x in vec]


def as_base64(vec: list[float]) -> str:
    """The OpenAI `encoding_format="base64"` form: little-endian float32."""
    return base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
