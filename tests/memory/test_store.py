"""The evaluation memory against the real Weaviate, with real (MiniLM) vectors."""

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from rubricd_services.memory.embedder import MiniLMEmbedder
from rubricd_services.memory.store import Hit, Memory, MemoryItem, MemoryKind, collection_name
from rubricd_services.settings import ServiceSettings

A, S, U = MemoryKind.ANALYSIS, MemoryKind.STEP_SUMMARY, MemoryKind.RUBRIC_UPDATE
PADDING = [
    "Reward hacking: the response pads a one-line answer with filler paragraphs so it looks thorough.",
    "Verbose padding: repeated restatements and boilerplate inflate length to game the completeness criterion.",
]
UNRELATED = [
    "The arithmetic is correct: 17 + 25 = 42, matching the reference answer.",
    "Formatting is clean: a numbered list with bold headings and consistent markdown.",
    "The model refused a harmless request about cooking pasta.",
    "Units were converted wrongly from miles to kilometres in the final step.",
]


@pytest.fixture
async def memory(stack) -> AsyncIterator[Memory]:
    """A Memory in its own namespace (its own collection), deleted after the test."""
    settings = ServiceSettings(
        namespace=f"t{uuid.uuid4().hex[:8]}-mem",
        weaviate_url=stack.weaviate_url,
        weaviate_grpc_port=stack.weaviate_grpc_port,
    )
    memory = await Memory.connect(settings, MiniLMEmbedder())
    yield memory
    await memory.drop()
    await memory.close()


def analysis(run: str, step: int, text: str, ref: str = "", **kw: object) -> MemoryItem:
    return MemoryItem(kind=A, run_id=run, step=step, text=text, ref=ref or uuid.uuid4().hex[:6], **kw)


def texts(hits: list[Hit]) -> list[str]:
    return [h.item.text for h in hits]


async def test_put_then_recent_search_count_round_trip(memory: Memory) -> None:
    item = MemoryItem(
        kind=S,
        run_id="run-a",
        step=3,
        text="Step 3: answers got longer.",
        ref="",
        instance_key="inst-1",
        message=b'{"step": 3, "note": "\xc3\xa9"}',
    )
    [id_] = await memory.put([item])
    assert await memory.count("run-a") == 1 and await memory.count("run-a", S) == 1
    assert await memory.count("run-a", A) == 0
    assert await memory.recent("run-a", S, limit=5) == [item]
    [hit] = await memory.search("run-a", "longer answers", limit=5)
    assert hit.item == item and hit.id == id_ and hit.score > 0
    assert await memory.put([]) == []


async def test_a_re_put_overwrites_instead_of_duplicating(memory: Memory) -> None:
    first = analysis("run-a", 1, "first version of the analysis", ref="r-1")
    ids = await memory.put([first])
    again = await memory.put([first])  # a re-delivered message
    assert again == ids and await memory.count("run-a") == 1
    changed = MemoryItem(kind=A, run_id="run-a", step=1, ref="r-1", text="recomputed analysis", message=b"{}")
    assert await memory.put([changed]) == ids
    assert await memory.count("run-a") == 1
    assert await memory.recent("run-a", A, limit=5) == [changed]
    # A different ref, step, kind or instance is a different memory.
    others = [
        analysis("run-a", 1, "x", ref="r-2"),
        analysis("run-a", 2, "x", ref="r-1"),
        analysis("run-a", 1, "x", ref="r-1", instance_key="i"),
        MemoryItem(kind=S, run_id="run-a", step=1, ref="r-1", text="x"),
    ]
    assert len(set(await memory.put(others)) | set(ids)) == 5
    assert await memory.count("run-a") == 5


async def test_two_runs_never_see_each_others_memory(memory: Memory) -> None:
    await memory.put(
        [analysis("run-a", 0, PADDING[0]), analysis("run-b", 0, PADDING[1]), analysis("run-b", 1, UNRELATED[0])]
    )
    assert await memory.count("run-a") == 1 and await memory.count("run-b") == 2
    assert await memory.count("run-c") == 0
    assert texts(await memory.search("run-a", "padding filler", limit=10, alpha=0.0)) == [PADDING[0]]
    assert texts(await memory.search("run-a", "padding filler", limit=10, alpha=1.0)) == [PADDING[0]]
    assert {i.run_id for i in await memory.recent("run-b", A, limit=10)} == {"run-b"}
    assert await memory.search("run-c", "padding", limit=10) == []
    # Run ids are matched whole, not as words: "run" is not "run-a".
    assert await memory.count("run") == 0 and await memory.recent("run", A, limit=5) == []


async def test_a_query_about_the_hack_retrieves_its_memories_first(memory: Memory) -> None:
    items = [analysis("run-a", i, t) for i, t in enumerate(UNRELATED + PADDING)]
    await memory.put(items)
    hits = await memory.search("run-a", "responses padded with filler to look thorough", limit=6)
    assert set(texts(hits)[:2]) == set(PADDING), texts(hits)
    assert hits[0].score >= hits[1].score >= hits[2].score


async def test_semantic_retrieval_works_without_shared_keywords(memory: Memory) -> None:
    """No word of the query appears in any memory: only the vector part can rank them."""
    await memory.put([analysis("run-a", i, t) for i, t in enumerate(UNRELATED + PADDING)])
    query = "replies stuffed full of fluff, needlessly wordy"
    assert not set(query.replace(",", "").split()) & {
        w.strip(".:,").lower() for t in UNRELATED + PADDING for w in t.split()
    }
    hits = await memory.search("run-a", query, limit=6)
    assert set(texts(hits)[:2]) == set(PADDING), texts(hits)
    vector_only = await memory.search("run-a", query, limit=6, alpha=1.0)
    assert set(texts(vector_only)[:2]) == set(PADDING)


async def test_kind_and_instance_filters(memory: Memory) -> None:
    await memory.put(
        [
            analysis("run-a", 0, "padding seen in instance one", instance_key="one"),
            analysis("run-a", 0, "padding seen in instance two", instance_key="two"),
            MemoryItem(kind=S, run_id="run-a", step=0, text="step summary: padding spreads", instance_key="one"),
            MemoryItem(kind=U, run_id="run-a", step=0, ref="2", text="rubric update: penalise padding"),
        ]
    )
    hits = await memory.search("run-a", "padding", limit=10, kinds=[A])
    assert {h.item.kind for h in hits} == {A} and len(hits) == 2
    hits = await memory.search("run-a", "padding", limit=10, kinds=[S, U])
    assert {h.item.kind for h in hits} == {S, U}
    hits = await memory.search("run-a", "padding", limit=10, instance_key="one")
    assert {h.item.instance_key for h in hits} == {"one"} and len(hits) == 2
    assert len(await memory.search("run-a", "padding", limit=10)) == 4
    assert [i.text for i in await memory.recent("run-a", A, limit=5, instance_key="two")] == [
        "padding seen in instance two"
    ]
    assert await memory.count("run-a", U) == 1 and await memory.count("run-a", MemoryKind.CHUNK_SUMMARY) == 0
    [update] = await memory.recent("run-a", U, limit=1)
    assert update.ref == "2" and update.instance_key is None


async def test_recent_is_highest_step_first_and_honours_before_step(memory: Memory) -> None:
    await memory.put([MemoryItem(kind=S, run_id="run-a", step=s, text=f"summary of step {s}") for s in (2, 0, 4, 1, 3)])
    assert [i.step for i in await memory.recent("run-a", S, limit=10)] == [4, 3, 2, 1, 0]
    assert [i.step for i in await memory.recent("run-a", S, limit=2)] == [4, 3]
    assert [i.step for i in await memory.recent("run-a", S, limit=2, before_step=3)] == [2, 1]
    assert await memory.recent("run-a", S, limit=2, before_step=0) == []


async def test_recent_before_a_step_looks_back_past_gaps_of_any_length_and_stops_at_after_step(memory: Memory) -> None:
    """The read looks back a window of steps at a time (Weaviate is never asked to sort): steps far apart are
    found all the same, the latest first."""
    steps = (0, 1, 50, 200, 260, 300)
    await memory.put([MemoryItem(kind=S, run_id="run-a", step=s, text=f"summary of step {s}") for s in steps])
    assert [i.step for i in await memory.recent("run-a", S, limit=3, before_step=300)] == [260, 200, 50]
    assert [i.step for i in await memory.recent("run-a", S, limit=10, before_step=1000)] == [300, 260, 200, 50, 1, 0]
    assert [i.step for i in await memory.recent("run-a", S, limit=10, before_step=300, after_step=50)] == [260, 200]
    assert [i.step for i in await memory.recent("run-a", S, limit=2, after_step=50)] == [300, 260]


async def test_recent_of_one_step_holds_that_step_only(memory: Memory) -> None:
    await memory.put([analysis("run-a", s, f"analysis {i} of step {s}") for s in (0, 1, 2) for i in range(2)])
    assert sorted(i.text for i in await memory.recent("run-a", A, limit=10, step=1)) == [
        "analysis 0 of step 1",
        "analysis 1 of step 1",
    ]


async def test_forget_deletes_one_kinds_older_steps_of_one_run_and_never_the_rubric_history(memory: Memory) -> None:
    await memory.put(
        [
            analysis(run, s, f"{run} analysis {i} of step {s}")
            for run in ("run-a", "run-b")
            for s in range(4)
            for i in range(3)
        ]
        + [
            MemoryItem(kind=kind, run_id="run-a", step=s, text=f"{kind} of step {s}")
            for kind in (S, U)
            for s in range(4)
        ]
    )
    assert await memory.forget("run-a", A, before_step=2) == 6  # steps 0 and 1, three each
    kept = await memory.kept("run-a")
    assert (kept[A].count, kept[A].first_step, kept[A].last_step) == (6, 2, 3)
    assert (kept[S].count, kept[S].first_step, kept[U].count) == (4, 0, 4)  # other kinds untouched
    assert (await memory.kept("run-b"))[A].count == 12  # and another run's
    assert await memory.forget("run-a", A, before_step=2) == 0  # again: nothing more
    with pytest.raises(ValueError, match="rubric history"):
        await memory.forget("run-a", U, before_step=4)
    assert (await memory.kept("run-a"))[U].count == 4
    assert await memory.kept("no-such-run") == {}


def test_collection_names_are_valid_weaviate_class_names() -> None:
    assert collection_name("rubricd") == "Memory_rubricd"
    assert collection_name("t-1_x") == "Memory_t_1_x"


async def test_services_starting_together_share_one_collection(stack) -> None:
    settings = ServiceSettings(
        namespace=f"t{uuid.uuid4().hex[:8]}",
        weaviate_url=stack.weaviate_url,
        weaviate_grpc_port=stack.weaviate_grpc_port,
    )
    memories = await asyncio.gather(*(Memory.connect(settings, MiniLMEmbedder()) for _ in range(4)))
    try:
        await memories[0].put([analysis("run-a", 0, "seen by every service", ref="r")])
        assert [await m.count("run-a") for m in memories] == [1, 1, 1, 1]
    finally:
        await memories[0].drop()
        for m in memories:
            await m.close()


async def test_a_collection_made_with_another_index_is_used_with_a_warning(stack, caplog) -> None:
    """A collection made before the flat index (HNSW, by the same properties) still works; starting on it warns
    once, naming its index; the flat one rubricd makes does not warn."""
    settings = ServiceSettings(
        namespace=f"t{uuid.uuid4().hex[:8]}",
        weaviate_url=stack.weaviate_url,
        weaviate_grpc_port=stack.weaviate_grpc_port,
    )
    flat = await Memory.connect(settings, MiniLMEmbedder())
    try:
        assert await flat.other_index() == [] and "vector index" not in caplog.text
    finally:
        await flat.drop()
        await flat.close()
    made = await Memory.connect(settings, MiniLMEmbedder())  # as before 2026-11-29: HNSW, the properties alike
    config = (await made.collection.config.get()).to_dict()
    await made.drop()
    config["vectorConfig"]["default"]["vectorIndexType"] = "hnsw"
    config["vectorConfig"]["default"]["vectorIndexConfig"] = {}
    await made.client.collections.create_from_dict(config)
    await made.close()
    with caplog.at_level("WARNING", logger="rubricd.memory"):
        old = await Memory.connect(settings, MiniLMEmbedder())
    try:
        assert await old.other_index() == ["hnsw"]
        assert f"collection {collection_name(settings.namespace)} has a hnsw vector index" in caplog.text
        await old.put([analysis("run-a", 0, "still stored and found", ref="r")])
        assert texts(await old.search("run-a", "stored", limit=1)) == ["still stored and found"]
    finally:
        await old.drop()
        await old.close()
