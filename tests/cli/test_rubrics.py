"""`rubricd rubrics show | history | diff | health`: versions written by the store, explained by their announcements or
memory; each step's rubric health from its health hash."""

import json
import time

import msgspec

from rubricd import wire
from rubricd.messages import (
    Action,
    GeneratedBy,
    HackingPattern,
    JudgeStatus,
    Rubric,
    RubricKind,
    RubricModification,
    RubricResult,
    RubricSet,
    RubricsUpdated,
    Score,
    StepSummary,
    Strategy,
)
from rubricd_services.memory.store import Memory, MemoryItem, MemoryKind
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import count_health, rubric_set

ANCHOR = Rubric(id="correct", criterion="The final answer is correct.", points=5, kind=RubricKind.ANCHOR)
CONCISE = Rubric(id="concise", criterion="The answer is short.", points=1, meta_class="style")
OLD = Rubric(id="old_rule", criterion="Mentions units.", points=1)
PADDING = Rubric(
    id="no_padding", criterion="The response pads with filler.", points=-3, meta_class="style", scope="turn"
)
CONCISE_2 = Rubric(id="concise", criterion="The answer is short and direct.", points=2, meta_class="style")


def v1(run: str = "run") -> RubricSet:
    return rubric_set(ANCHOR, CONCISE, OLD, run_id=run, created_at=time.time())


def v2(run: str = "run") -> RubricSet:
    return rubric_set(ANCHOR, CONCISE_2, PADDING, run_id=run, version=2, step=3, created_at=time.time())


def update_2(run: str = "run") -> RubricsUpdated:
    return RubricsUpdated(
        run_id=run,
        version=2,
        previous_version=1,
        step=3,
        strategy=Strategy.CORRECTIVE,
        modifications=[
            RubricModification(
                action=Action.ADD, rubric=PADDING, rationale="padding seen in 7 of 8 rollouts at step 3"
            ),
            RubricModification(
                action=Action.MODIFY, rubric_id="concise", rubric=CONCISE_2, rationale="short but evasive answers"
            ),
            RubricModification(action=Action.REMOVE, rubric_id="old_rule", rationale="no task here has units"),
        ],
    )


async def publish_two_versions(redis, keys) -> None:
    store = RubricStore(redis, keys)
    assert await store.publish(v1()) and await store.publish(v2())
    await redis.xadd(keys.rubrics_updated, wire.entry(update_2()))
    await redis.xadd(keys.rubrics_updated, wire.entry(RubricsUpdated(run_id="other", version=2, previous_version=1)))


async def test_show_prints_the_current_set_or_one_version(stack, redis, keys, cli):
    await publish_two_versions(redis, keys)
    current = cli("rubrics", "show", "run").stdout
    assert "version 2" in current and "from step 3" in current
    [row] = [ln for ln in current.splitlines() if ln.startswith("no_padding")]
    assert row.split()[:6] == ["no_padding", "adaptive", "-", "turn", "style", "-3"] and row.endswith(
        "The response pads with filler."
    )
    assert "old_rule" in cli("rubrics", "show", "run", "--version", "1").stdout
    shown = wire.decode(cli("rubrics", "show", "run", "--json").stdout, RubricSet)
    assert (shown.version, shown.step, shown.rubrics) == (2, 3, v2().rubrics)
    missing = cli("rubrics", "show", "nobody", check=False)
    assert missing.returncode == 1 and "no rubric set" in missing.stderr


async def test_show_says_a_generated_set_was_written_by_the_generator_and_each_rubrics_rule(stack, redis, keys, cli):
    rule = Rubric(id="short", criterion="The response has at most 20 words.", points=4, rule="hard_rule")
    written = rubric_set(
        ANCHOR,
        rule,
        run_id="gen",
        instance_key="p1",
        generated_by=GeneratedBy(model="m-7b", prompt_sha256="ab" * 32, generated_at=time.time()),
    )
    assert await RubricStore(redis, keys).publish(written)
    shown = cli("rubrics", "show", "gen", "--instance-key", "p1").stdout
    assert "written by the rubric generator: model m-7b, instructions sha256 abababababab" in shown
    [row] = [ln for ln in shown.splitlines() if ln.startswith("short")]
    assert row.split()[:3] == ["short", "adaptive", "hard_rule"]
    assert "written by" not in cli("rubrics", "show", "run", check=False).stdout


async def test_history_lists_versions_with_strategy_and_changes(stack, redis, keys, cli):
    await publish_two_versions(redis, keys)
    rows = [json.loads(ln) for ln in cli("rubrics", "history", "run", "--json").stdout.splitlines()]
    assert [(r["version"], r["step"], r["rubrics"], r["strategy"]) for r in rows] == [
        (1, None, 3, None),
        (2, 3, 3, "corrective"),
    ]
    assert rows[0]["changes"] == "seed"
    assert rows[1]["changes"] == "-old_rule ~concise(criterion,points) +no_padding"
    text = cli("rubrics", "history", "run").stdout.splitlines()
    assert text[0].split() == ["VERSION", "STEP", "TIME", "RUBRICS", "STRATEGY", "CHANGES"]
    assert text[2].split()[0:2] == ["2", "3"] and "corrective" in text[2] and "+no_padding" in text[2]


async def test_diff_names_each_change_with_its_rationale(stack, redis, keys, cli):
    await publish_two_versions(redis, keys)
    text = cli("rubrics", "diff", "run", "1", "2").stdout
    assert "version 1 -> 2 (v2: corrective after step 3)" in text
    assert (
        "+ no_padding (adaptive, style, -3, turn): The response pads with filler.\n    why: padding seen in 7 of 8 rollouts at step 3"
        in text
    )
    assert (
        "~ concise: criterion 'The answer is short.' -> 'The answer is short and direct.'; points +1 -> +2\n    why: short but evasive answers"
        in text
    )
    assert "- old_rule (adaptive, accuracy, +1): Mentions units.\n    why: no task here has units" in text
    assert "correct" not in text.replace("(v2: corrective", "")  # the anchor did not change
    changes = [json.loads(ln) for ln in cli("rubrics", "diff", "run", "1", "2", "--json").stdout.splitlines()]
    assert {(c["change"], c["rubric_id"]) for c in changes} == {
        ("added", "no_padding"),
        ("modified", "concise"),
        ("removed", "old_rule"),
    }
    assert "no difference" in cli("rubrics", "diff", "run", "2", "2").stdout


async def test_a_version_whose_announcement_was_trimmed_is_explained_from_memory(
    stack, redis, keys, cli, memory: Memory
):
    await publish_two_versions(redis, keys)
    louder = msgspec.structs.replace(PADDING, points=-6)  # a reweight keeps the rest, its scope too
    v3 = rubric_set(ANCHOR, CONCISE_2, louder, version=3, step=5, created_at=time.time())
    update = RubricsUpdated(
        run_id="run",
        version=3,
        previous_version=2,
        step=5,
        strategy=Strategy.MAINTENANCE,
        modifications=[
            RubricModification(
                action=Action.REWEIGHT, rubric_id="no_padding", points=-6, rationale="padding persists at -3"
            )
        ],
    )
    assert await RubricStore(redis, keys).publish(v3)
    await memory.put(
        [
            MemoryItem(
                kind=MemoryKind.RUBRIC_UPDATE, run_id="run", step=5, ref="3", text="v3", message=wire.encode(update)
            )
        ]
    )
    text = cli("rubrics", "diff", "run", "2", "3").stdout
    assert "(v3: maintenance after step 5)" in text
    assert "~ no_padding: points -3 -> -6\n    why: padding persists at -3" in text
    rows = [json.loads(ln) for ln in cli("rubrics", "history", "run", "--json").stdout.splitlines()]
    assert [r["strategy"] for r in rows] == [None, "corrective", "maintenance"]


async def test_diff_shows_a_change_the_updater_made_with_its_rationale(
    stack, redis, keys, cli, memory: Memory, start_service, eventually
):
    start_service("updater")
    summary = StepSummary(
        run_id="run",
        step=0,
        executive_summary="Most rollouts were padded, filler-heavy or repetitive responses.",
        reward_hacking=[HackingPattern(type="padding", rollouts=5, description="Most rollouts were padded.")],
        memory_entry="Step 0: most rollouts were padded",
        analyses=12,
    )
    await memory.put(
        [
            MemoryItem(
                kind=MemoryKind.STEP_SUMMARY,
                run_id="run",
                step=0,
                text=summary.memory_entry,
                message=wire.encode(summary),
            )
        ]
    )
    await redis.xadd(keys.summaries, wire.entry(summary))
    store = RubricStore(redis, keys)

    async def updated() -> bool:
        return await store.step("run") is not None

    await eventually(updated, "the updater to update run's rubrics after step 0")
    assert (await store.current("run")).version == 2

    text = cli("rubrics", "diff", "run", "1", "2").stdout
    assert "(v2: corrective after step 0)" in text
    added = text[text.index("+ no_padding") :]
    assert "why: " in added and "summary reports padding" in added.splitlines()[1]
    history = cli("rubrics", "history", "run").stdout
    assert "corrective" in history and "+no_padding" in history


async def counted(redis, keys, run: str, step: int, scored: list[tuple[str | None, dict[str, bool]]]) -> None:
    """What the scorer's commit adds for each (group, verdicts) of a step."""
    for group, verdicts in scored:
        results = [RubricResult(rubric_id=r, met=m, points=1) for r, m in verdicts.items()]
        score = Score(
            run_id=run, rollout_id="r", step=step, status=JudgeStatus.OK, reward=1.0, rubric_version=1, results=results
        )
        await count_health(redis, keys, score, group)


async def test_health_shows_each_step_s_rubrics_marking_the_uninformative_ones(stack, redis, keys, cli):
    await counted(
        redis,
        keys,
        "run",
        2,
        [("a", {"correct": True, "concise": True}), ("a", {"correct": False, "concise": True})]
        + [("b", {"correct": True, "concise": True})] * 2,
    )
    await counted(redis, keys, "run", 5, [(None, {"correct": True}), (None, {"correct": False})])
    text = cli("rubrics", "health", "run").stdout
    assert text.index("step 2: 2 rubrics, 1 uninformative") < text.index("step 5: 1 rubrics, 0 uninformative")
    rows = [ln.split() for ln in text.splitlines()]
    assert ["RUBRIC", "MET", "ROLLOUTS", "SPREAD", "UNINFORMATIVE", "VOTES", "SPLIT"] in rows
    assert ["concise", "1.00", "4", "0/2", "yes", "-"] in rows and ["correct", "0.75", "4", "1/2", "-", "-"] in rows
    lines = [json.loads(ln) for ln in cli("rubrics", "health", "run", "--step", "5", "--json").stdout.splitlines()]
    assert lines == [
        {
            "step": 5,
            "rubric_id": "correct",
            "met_rate": 0.5,
            "rollouts": 2,
            "groups": 1,
            "groups_with_spread": 1,
            "uninformative": False,
            "voted": 0,
            "votes_split": 0,
        }
    ]
    missing = cli("rubrics", "health", "run", "--step", "3", check=False)
    assert missing.returncode == 1 and "no rubric health" in missing.stderr
