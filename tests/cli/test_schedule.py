"""`rubricd schedule RUN`: each step's meta-class and the statistics that chose it, as the scorer decided them."""

import json

from rubricd import RubricdClient
from rubricd.messages import Rollout
from rubricd_services.cli.schedule import undefined
from rubricd_services.state.schedule import ClassStats
from tests.factories import rollout


def rollouts(step: int) -> list[Rollout]:
    answers = ["42.", "It is 41.", "17 + 25 = 42, because 17 + 20 = 37 and then 37 + 5 = 42."]
    return [
        rollout(i, run_id="sched", step=step, prompt="What is 17 + 25?", response=a, reference="42")
        for i, a in enumerate(answers)
    ]


async def test_schedule_shows_each_step_its_class_and_statistics(stack, keys, cli, start_service):
    start_service("scorer", reward_policy="alternating", schedule_strategy="most_room", warmup_steps=1)
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        first = await client.score(rollouts(0), timeout=60)
        second = await client.score(rollouts(1), timeout=60)
    steps = [json.loads(line) for line in cli("schedule", "sched", "--json").stdout.splitlines()]
    assert [(s["step"], s["meta_class"], s["reason"]) for s in steps] == [
        (0, None, "warm_up"),
        (1, second[0].active_meta_class, "most_room"),
    ]
    classes = first[0].meta_class_scores.keys()
    for c in classes:
        mean = sum(s.meta_class_scores[c] for s in first) / len(first)
        assert steps[0]["stats"][c]["count"] == 3
        assert abs(steps[0]["stats"][c]["mean"] - mean) < 1e-9
        assert abs(steps[1]["means"][c] - mean) < 1e-9  # what chose step 1's class: step 0's means
    text = cli("schedule", "sched").stdout
    assert "warm_up" in text and "lowest recent mean over steps [0]" in text
    missing = cli("schedule", "nothing", check=False)
    assert missing.returncode == 1 and "has no schedule" in missing.stderr


def test_the_undefined_column_counts_the_active_class_fallbacks_and_masks():
    assert undefined(ClassStats(3, 1.5)) == "-" and undefined(None) == "-"
    assert undefined(ClassStats(1, 0.5, fallback=2)) == "2 fallback"
    assert undefined(ClassStats(0, 0.0, fallback=1, masked=4)) == "1 fallback, 4 masked"
