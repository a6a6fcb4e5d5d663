"""`rubricd archive RUN`: a finished run's keys and memory written to a file, then deleted; never another run's,
never a run still active, never over an existing file."""

import json
import time

from rubricd import wire
from rubricd.messages import Rubric, ScoredRollout
from rubricd_services.memory.store import Memory, MemoryItem, MemoryKind
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import rollout, rubric_set, scored

RUBRICS = [Rubric(id="correct", criterion="The answer is correct.", points=5, kind="anchor")]


async def a_run(redis, keys, memory: Memory, run_id: str) -> None:
    """A run's keys (rubric set, kept rollout, usage, a score record) and memories (an analysis, its history)."""
    await RubricStore(redis, keys).seed(rubric_set(*RUBRICS, run_id=run_id))
    kept = scored(rollout(run_id=run_id, rollout_id="done", step=0), 1.0)
    await redis.xadd(keys.kept_rollouts(run_id), {wire.FIELD: wire.encode(kept)})
    await redis.hset(keys.usage(run_id), "judge:prompt_tokens", 120)
    await redis.set(keys.score(run_id, "done"), wire.encode(kept.score), ex=3600)
    await memory.put(
        [
            MemoryItem(kind=MemoryKind.ANALYSIS, run_id=run_id, step=0, ref="done", text=f"analysis of {run_id}"),
            MemoryItem(kind=MemoryKind.RUBRIC_UPDATE, run_id=run_id, step=0, ref="2", text=f"v2 of {run_id}"),
        ]
    )


async def test_archive_writes_a_runs_keys_and_memories_then_deletes_only_them(
    stack, redis, keys, cli, memory: Memory, tmp_path
):
    for run_id in ("done", "other", "done-2"):  # "other" has a rollout named "done"; "done-2" starts like it
        await a_run(redis, keys, memory, run_id)
    await redis.zadd(keys.runs, {"done": time.time() - 3600, "other": time.time()})
    every = sorted(k.decode() for k in await redis.keys(f"{keys.namespace}:*"))
    ours = [k for k in every if k.split(":")[2:3] == ["done"]]  # <namespace>:<family>:<run>[:...]
    others = [k for k in every if k not in ours]
    assert keys.score("other", "done") in others and len(ours) >= 4

    archive = tmp_path / "done.jsonl"
    kept = cli("archive", "done", "-o", str(archive), "--keep").stdout
    assert f"{archive}: {len(ours)} keys, 2 memories" in kept and await memory.count("done") == 2
    lines = [json.loads(line) for line in archive.read_text().splitlines()]
    assert sorted(line["key"] for line in lines if "key" in line) == ours
    by_key = {line["key"]: line for line in lines if "key" in line}
    usage = by_key[keys.usage("done")]
    assert (usage["type"], usage["value"]) == ("hash", {"judge:prompt_tokens": "120"}) and usage["ttl_ms"] == -1
    [stream] = by_key[keys.kept_rollouts("done")]["value"]
    assert wire.decode(stream[1][wire.FIELD].encode(), ScoredRollout).rollout.rollout_id == "done"
    assert sorted(line["memory"]["kind"] for line in lines if "memory" in line) == ["analysis", "rubric_update"]

    refused = cli("archive", "done", "-o", str(archive), check=False)
    assert refused.returncode == 1 and "exists: an archive is never overwritten" in refused.stderr
    active = cli("archive", "other", "-o", str(tmp_path / "other.jsonl"), check=False)
    assert active.returncode == 1 and "was active" in active.stderr and "--idle 600" in active.stderr

    archive.unlink()
    done = cli("archive", "done", "-o", str(archive)).stdout
    assert f"deleted {len(ours)} keys and 2 memories" in done and archive.exists()
    assert not await redis.exists(*ours) and await redis.zscore(keys.runs, "done") is None
    assert sorted(k.decode() for k in await redis.keys(f"{keys.namespace}:*")) == others  # every other key
    assert await memory.count("done") == 0 and await memory.count("other") == 2 and await memory.count("done-2") == 2
    empty = cli("archive", "done", "-o", str(tmp_path / "again.jsonl"), check=False)
    assert empty.returncode == 1 and "has no keys and no memories" in empty.stderr
    assert not (tmp_path / "again.jsonl").exists()
