"""`rubricd rescore` against the real Redis and a scorer: a kept run re-scored under an earlier rubric version."""

import json

from rubricd import RubricdClient, wire
from rubricd.messages import Rollout, ScoredRollout
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import rollout, rubric, rubric_set

CORRECT = rubric()
PADDING = rubric("pads", id="no_padding", points=-5, meta_class="accuracy")  # as it was: one class
ANSWERS = {
    "short": "The sum is 42.",
    "padded": "The sum is 42. " + "Let me say it once more to be sure. " * 8,
    "wrong": "The sum is 41.",
}


def rollouts(step: int) -> list[Rollout]:
    return [
        rollout(
            run_id="rec",
            step=step,
            rollout_id=f"s{step}-{name}",
            prompt="What is 17 + 25?",
            response=text,
            reference="42",
        )
        for name, text in ANSWERS.items()
    ]


async def test_a_run_rescored_under_its_first_version_differs_where_the_update_changed_the_reward(
    stack, redis, keys, cli, start_service
):
    start_service("scorer")
    store = RubricStore(redis, keys)
    assert await store.publish(rubric_set(CORRECT, run_id="rec"))
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        first = await client.score(rollouts(0), timeout=60)
        assert await store.publish(rubric_set(CORRECT, PADDING, run_id="rec", version=2, step=0))
        second = await client.score(rollouts(1), timeout=60)  # a later step: the scorer reads version 2
    assert [(s.rubric_version, s.reward) for s in first] == [(1, 1.0), (1, 1.0), (1, 0.0)]
    assert [(s.rubric_version, s.reward) for s in second] == [(2, 1.0), (2, 0.0), (2, 0.0)]  # padding penalised

    out = cli("rescore", "rec", "--version", "1", "--steps", "1").stdout
    assert "re-scored 3 rollouts of rec under its rubric version 1 as rec.rescore-v1 (steps 1-1)" in out
    rows = [json.loads(line) for line in cli("rescore", "diff", "rec", "rec.rescore-v1", "--json").stdout.splitlines()]
    changed = {
        r["rollout_id"]: (r["before"], r["after"]) for r in rows if "rollout_id" in r and r["before"] != r["after"]
    }
    assert changed == {"s1-padded": (0.0, 1.0)}  # only the rollout the update's penalty caught
    [step] = [r for r in rows if "rollout_id" not in r]
    assert (step["step"], step["rollouts"], step["changed"]) == (1, 3, 1)
    assert (step["mean_before"], step["mean_after"]) == (1 / 3, 2 / 3)

    # The re-scored run's set is the run's version 1; its rollouts were evaluation rollouts: scored, kept out of the loop.
    rescored_set = await store.current("rec.rescore-v1")
    assert rescored_set is not None and rescored_set.rubrics == [CORRECT]
    handed = [wire.decode(wire.payload(f), ScoredRollout) for _, f in await redis.xrange(keys.scored)]
    assert {h.rollout.run_id for h in handed} == {"rec"} and len(handed) == 6  # nothing of the re-scored run analyzed
    kept = [
        wire.decode(wire.payload(f), ScoredRollout) for _, f in await redis.xrange(keys.kept_rollouts("rec.rescore-v1"))
    ]
    assert len(kept) == 3 and all(r.rollout.evaluation and r.score.evaluation for r in kept)
    assert not await redis.xlen(keys.steps)

    again = cli("rescore", "rec", "--version", "1", "--steps", "1").stdout  # published again: its first scores
    assert again == out
    missing = cli("rescore", "rec", "--version", "9", check=False)
    assert missing.returncode == 1 and "has no rubric version 9" in missing.stderr
    bad = cli("rescore", "rec", "--version", "1", "--steps", "3-1", check=False)
    assert bad.returncode == 1 and "--steps '3-1': 1 is before 3" in bad.stderr
