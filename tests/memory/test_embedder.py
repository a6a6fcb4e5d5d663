"""Embedders: MiniLM in numpy is genuinely semantic; the openai one goes through the LLM client."""

import math

import pytest

from rubricd_services.llm import LLMClient
from rubricd_services.memory.embedder import MiniLMEmbedder, OpenAIEmbedder, make_embedder
from rubricd_services.settings import LLMSettings, ServiceSettings
from rubricd_testbed.simulator.app import Simulator


def cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


async def test_minilm_puts_paraphrases_closer_than_unrelated_sentences() -> None:
    pad, pad_paraphrase, maths, cooking, cat, kitten = await MiniLMEmbedder().embed(
        [
            "The response is padded with filler to look thorough.",
            "The answer is stuffed with needless fluff so it seems complete.",
            "The arithmetic is correct: 17 + 25 = 42.",
            "Boil the pasta for nine minutes in salted water.",
            "A cat sits on the mat.",
            "A kitten is resting on a rug.",
        ]
    )
    assert cos(cat, kitten) > 0.6 and max(cos(cat, pad), cos(cat, maths), cos(cat, cooking)) < 0.1
    assert cos(pad, pad_paraphrase) > 0.3
    assert cos(pad, pad_paraphrase) > max(cos(pad, maths), cos(pad, cooking)) + 0.2
    assert cos(pad_paraphrase, pad) > cos(pad_paraphrase, maths)


async def test_minilm_vectors_are_384_unit_deterministic_and_batch_independent() -> None:
    embedder = MiniLMEmbedder()
    texts = ["short", "a somewhat longer sentence about rubrics and rewards", "word " * 1000, ""]
    vectors = await embedder.embed(texts)
    assert embedder.dimensions == 384 and [len(v) for v in vectors] == [384] * 4
    assert all(math.isclose(math.sqrt(cos(v, v)), 1.0, abs_tol=1e-5) for v in vectors)
    assert await embedder.embed(texts) == vectors
    alone = [(await embedder.embed([t]))[0] for t in texts]  # padding in a batch changes nothing
    assert all(cos(a, b) > 0.99999 for a, b in zip(alone, vectors))
    assert await embedder.embed([]) == []


async def test_minilm_matches_sentence_transformers() -> None:
    """The first coordinates sentence-transformers 6.2 (torch 2.15) gives for the same model."""
    pad, cat = await MiniLMEmbedder().embed(
        ["The response is padded with filler to look thorough.", "A cat sits on the mat."]
    )
    assert pad[:8] == pytest.approx(
        [-0.05059, 0.059388, 0.017297, 0.045355, 0.017868, -0.080798, 0.017849, 0.047332], abs=2e-6
    )
    assert cat[:8] == pytest.approx(
        [0.126535, -0.032851, -0.02906, 0.044407, -0.043445, 0.032097, 0.048111, 0.027675], abs=2e-6
    )


async def test_openai_embedder_asks_the_llm_clients_embedder_agent(
    simulator: tuple[str, Simulator], sim: Simulator
) -> None:
    settings = ServiceSettings(embedder="openai", agents={"embedder": {"base_url": simulator[0], "model": "emb"}})
    async with LLMClient.from_settings(settings, ["embedder"]) as llm:
        embedder = make_embedder(settings, llm)
        assert isinstance(embedder, OpenAIEmbedder) and embedder.dimensions is None
        vectors = await embedder.embed(["padded answer", "padded answer", "arithmetic"])
        assert await embedder.embed([]) == []
    assert len(vectors) == 3 and embedder.dimensions == len(vectors[0]) == 384
    assert vectors[0] == vectors[1] != vectors[2]
    assert sim.stats()["embeddings"] == 3


def test_make_embedder_defaults_to_minilm_and_openai_needs_an_llm_client() -> None:
    assert isinstance(make_embedder(ServiceSettings()), MiniLMEmbedder)
    with pytest.raises(ValueError, match="embedder"):
        make_embedder(ServiceSettings(embedder="openai"))
    assert ServiceSettings().agent("embedder") == LLMSettings()
