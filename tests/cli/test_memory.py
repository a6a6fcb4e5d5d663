"""`rubricd memory search`: a run's memories, found by meaning, kind and instance, never another run's."""

import json

from rubricd_services.memory.store import Memory, MemoryItem, MemoryKind


async def test_memory_search_returns_what_was_put_for_the_run(stack, redis, cli, memory: Memory):
    padding = "The response pads a correct answer with filler sentences and repeats itself."
    await memory.put(
        [
            MemoryItem(kind=MemoryKind.ANALYSIS, run_id="run", step=2, ref="r7", text=padding),
            MemoryItem(
                kind=MemoryKind.STEP_SUMMARY, run_id="run", step=1, text="Answers were correct, short and direct."
            ),
            MemoryItem(kind=MemoryKind.ANALYSIS, run_id="other", step=2, ref="r7", text=padding),
        ]
    )

    hits = [
        json.loads(ln) for ln in cli("memory", "search", "run", "verbose filler padding", "--json").stdout.splitlines()
    ]
    assert len(hits) == 2  # not the other run's
    assert (hits[0]["kind"], hits[0]["step"], hits[0]["ref"], hits[0]["text"]) == ("analysis", 2, "r7", padding)
    assert hits[0]["score"] >= hits[1]["score"]

    only = [
        json.loads(ln)
        for ln in cli("memory", "search", "run", "padding", "--kind", "step_summary", "--json").stdout.splitlines()
    ]
    assert [h["kind"] for h in only] == ["step_summary"]
    text = cli("memory", "search", "run", "verbose filler padding", "--limit", "1").stdout.splitlines()
    assert text[0].split() == ["KIND", "STEP", "SCORE", "REF", "TEXT"]
    assert text[1].startswith("analysis") and "pads a correct answer" in text[1] and len(text) == 2
