"""`rubricd memory show | search`: what a run's memory holds; its memories, found by meaning, kind and instance,
never another run's."""

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


async def test_memory_show_counts_each_kind_and_its_steps(stack, redis, cli, memory: Memory):
    await memory.put(
        [
            MemoryItem(kind=MemoryKind.ANALYSIS, run_id="run", step=s, ref=f"r{i}", text="x")
            for s in (3, 4)
            for i in (1, 2)
        ]
        + [MemoryItem(kind=MemoryKind.RUBRIC_UPDATE, run_id="run", step=1, ref="2", text="v2")]
    )
    shown = [json.loads(ln) for ln in cli("memory", "show", "run", "--json").stdout.splitlines()]
    assert shown == [
        {"kind": "analysis", "count": 4, "first_step": 3, "last_step": 4},
        {"kind": "rubric_update", "count": 1, "first_step": 1, "last_step": 1},
    ]
    text = cli("memory", "show", "run").stdout.splitlines()
    assert text[0].split() == ["KIND", "MEMORIES", "FROM", "STEP", "TO", "STEP"] and text[1].split() == [
        "analysis",
        "4",
        "3",
        "4",
    ]
    missing = cli("memory", "show", "nothing", check=False)
    assert missing.returncode == 1 and "run 'nothing' has no memories" in missing.stderr
