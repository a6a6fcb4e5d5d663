"""The arm service against the real Redis and the LLM simulator: both phases' rewards, the shared phases,
rejections, and the training prompts `rubricd arm dataset` writes."""

import asyncio
import json

import pytest

from rubricd import RubricdClient, wire
from rubricd.messages import ArmRollout, DeadLetter, Event, EventKind, RubricSet
from rubricd_services.state import usage
from rubricd_services.state.arm import parse_decisions, prompt_key, read_prompt
from rubricd_testbed.simulator import pairwise as simulated
from tests.factories import arm_rollout

from .examples import CONCISE, PADDED, POLITE, QUESTION, REASONING, SHORT, completion

pytestmark = pytest.mark.integration

PAIRS = [
    {"prompt": QUESTION, "chosen": SHORT, "rejected": PADDED, "id": "c0"},
    {"prompt": QUESTION, "chosen": "It is Paris.", "rejected": PADDED.replace("Paris", "Paris, France"), "id": "c1"},
    {"prompt": "Name the largest planet.", "chosen": "Jupiter.", "rejected": "Saturn is. " * 30, "id": "c2"},
]
PROMPT = prompt_key(QUESTION)


def generator(i: int, text: str, *, step: int = 0, prompt_id: str = PROMPT) -> ArmRollout:
    return arm_rollout("generator", i, step=step, completion=text, prompt_id=prompt_id)


def events(raw: list) -> list[Event]:
    return [wire.decode(wire.payload(fields), Event) for _, fields in raw]


async def test_a_generator_rollout_earns_the_frozen_judges_accuracy_with_its_rubrics(
    stack, redis, keys, start_arm, rubricd, preferences
) -> None:
    assert "3 preference pairs over 2 prompts" in rubricd("arm", "import", "arm", str(preferences(PAIRS))).stdout
    start_arm(arm_simultaneous="true", arm_tie_reward="0.5")
    sent = [
        generator(0, completion(CONCISE)),
        generator(1, completion(REASONING)),
        generator(2, completion(POLITE)),
        generator(3, "Rubrics: be accurate and clear."),
    ]
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        right, wrong, blind, invalid = await client.arm_rewards(sent, timeout=60)
        again = await client.arm_rewards([sent[0]], timeout=60)  # published twice: its first reward, no new calls
    assert (right.status, right.reward, right.judged, right.correct, right.penalty) == ("ok", 1.0, 2, 2, None)
    assert [o.comparison_id for o in right.outcomes] == ["c0", "c1"]  # this prompt's pairs only
    assert [r.id for r in right.rubrics][:2] == ["correct", "addresses_grader"]  # the seed's anchors kept first
    assert right.judge_model == "rubricd-simulator" and right.phase == "generator" and right.prompt_id == PROMPT
    assert (wrong.reward, wrong.correct) == (0.0, 0)
    assert (blind.reward, {o.winner for o in blind.outcomes}) == (0.5, {"tie"})  # RUBRICD_ARM_TIE_REWARD
    assert (invalid.status, invalid.reward, invalid.rubrics) == ("ok", -1.0, [])
    assert invalid.penalty is not None and invalid.penalty.startswith("not a rubric set")
    assert again == [right]

    spent = {(u.agent, u.model): u.calls for u in await usage.read(redis, keys, "arm")}
    assert spent == {("pairwise", "rubricd-simulator"): 3 * 2 * 2}  # 3 valid candidates x 2 pairs x 2 orders
    rewarded = [e for e in events(await redis.xrange(keys.events)) if e.kind == EventKind.ARM_REWARDED]
    assert sorted(e.rollout_id for e in rewarded) == ["g0-0", "g0-1", "g0-2", "g0-3"]  # once each
    records = [json.loads(line) for line in rubricd("export", "arm", "--only", "arm").stdout.splitlines()]
    assert {r["record"] for r in records} == {"arm"}
    assert sorted((r["rollout_id"], r["reward"]) for r in records) == [
        ("g0-0", 1.0),
        ("g0-1", 0.0),
        ("g0-2", 0.5),
        ("g0-3", -1.0),
    ]
    assert records[0]["completion"] == sent[int(records[0]["rollout_id"][-1])].completion
    assert {(r["judge_model"], r["phase"]) for r in records} == {("rubricd-simulator", "generator")}


async def test_a_judge_rollout_earns_1_for_the_labelled_winner_under_the_frozen_generators_rubrics(
    stack, redis, keys, start_arm, rubricd, preferences, tmp_path
) -> None:
    rubricd("arm", "import", "arm", str(preferences(PAIRS)))
    out = tmp_path / "judge.jsonl"
    rubricd("arm", "dataset", "arm", "--phase", "judge", "--generator", "gen-v1", "-o", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["comparison_id"], r["order"]) for r in rows) == [
        (c, o) for c in ("c0", "c1", "c2") for o in ("AB", "BA")
    ]
    assert {r["generator_model"] for r in rows} == {"gen-v1"}
    sets = {
        k.decode(): wire.decode(v, RubricSet)
        for k, v in (await redis.hgetall(keys.arm_rubrics("arm", "gen-v1"))).items()
    }
    assert sorted(sets) == sorted({PROMPT, prompt_key("Name the largest planet.")})
    assert all(s.generated_by is not None and s.generated_by.model == "gen-v1" for s in sets.values())
    row = next(r for r in rows if r["comparison_id"] == "c2" and r["order"] == "BA")
    system, user = (m["content"] for m in row["prompt"])
    assert '"verdicts"' in system  # the answer's schema is in the prompt

    start_arm(arm_first_phase="judge")
    # The simulator's verdict under the simulated generator's rubrics (one against padding): the short answer wins.
    fair = json.dumps(simulated.verdict(system, user))
    turned = simulated.verdict(system, user)
    turned["verdicts"] = {k: {**v, "first": v["second"], "second": v["first"]} for k, v in turned["verdicts"].items()}

    def judge(i: int, text: str) -> ArmRollout:
        return arm_rollout("judge", rollout_id=f"j{i}", completion=text, comparison_id="c2", order="BA")

    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        right, wrong, garbled = await client.arm_rewards(
            [judge(0, fair), judge(1, json.dumps(turned)), judge(2, "B, clearly.")], timeout=60
        )
    found = await read_prompt(redis, keys, "arm", prompt_key("Name the largest planet."))
    assert found is not None
    [label] = [c.label for c in found.comparisons if c.comparison_id == "c2"]
    assert (right.status, right.reward, right.winner, right.label, right.order) == ("ok", 1.0, label, label, "BA")
    assert (wrong.reward, wrong.winner) == (0.0, "B" if label == "A" else "A")
    assert garbled.reward == -1.0 and garbled.penalty is not None and "judge's format" in garbled.penalty
    assert right.generator_model == "gen-v1"
    assert await usage.read(redis, keys, "arm") == []  # no LLM call rewards a judge


async def test_every_process_gives_a_step_the_same_phase_and_a_rollout_of_the_other_phase_is_rejected(
    stack, redis, keys, start_arm, start_service, rubricd, preferences
) -> None:
    rubricd("arm", "import", "arm", str(preferences(PAIRS)))
    rubricd("arm", "dataset", "arm", "--phase", "judge", "--generator", "gen-v1", "-o", "/dev/null")
    assert "judge first, 2 steps each" in rubricd("arm", "phases", "arm", "--first", "judge", "--steps", "2").stdout
    start_arm(arm_first_phase="generator", arm_phase_steps="5")  # the run's own plan wins over the settings
    start_arm(arm_first_phase="generator", arm_phase_steps="5")

    def both(step: int) -> list[ArmRollout]:
        return [
            generator(0, completion(CONCISE), step=step),
            arm_rollout("judge", rollout_id=f"j{step}", step=step),
        ]

    clients = [RubricdClient(stack.redis_url, namespace=keys.namespace) for _ in range(3)]
    try:
        # Three trainer processes publish both phases of steps 0-5 at once.
        answered = await asyncio.gather(
            *(c.arm_rewards([r for s in range(6) for r in both(s)], timeout=90) for c in clients)
        )
    finally:
        for c in clients:
            await c.close()
    by_step = {(r.step, r.phase): r for r in answered[0]}
    for step in range(6):
        trains = "judge" if step in (0, 1, 4, 5) else "generator"
        other = "generator" if trains == "judge" else "judge"
        assert by_step[(step, trains)].status == "ok", by_step[(step, trains)]
        refused = by_step[(step, other)]
        assert refused.status == "rejected" and refused.reward is None
        assert refused.error is not None and f"step {step} trains the {trains}" in refused.error
    decided = parse_decisions(await redis.hgetall(keys.arm_phases("arm")))
    assert {s: d.training for s, d in decided.items()} == {
        0: "judge",
        1: "judge",
        2: "generator",
        3: "generator",
        4: "judge",
        5: "judge",
    }
    switches = [e for e in events(await redis.xrange(keys.events)) if e.kind == EventKind.ARM_PHASE]
    # One event per switch, whichever process decided it (in the order the steps were decided).
    assert sorted((e.step, e.fields["training"]) for e in switches) == [(0, "judge"), (2, "generator"), (4, "judge")]
    letters = [wire.decode(wire.payload(f), DeadLetter) for _, f in await redis.xrange(keys.dead_letters)]
    assert len(letters) == 3 * 6 and all("is not rewarded in it" in d.reason for d in letters)  # each one sent
    shown = rubricd("arm", "phases", "arm").stdout
    assert "judge first, 2 steps each in turn" in shown and "generator: steps 2-3" in shown
    status = json.loads(rubricd("status", "--json").stdout)["arm_phases"]
    assert status == [
        {
            "run_id": "arm",
            "step": 5,
            "training": "judge",
            "why": "phase",
            "phase": "judge: steps 4-5",
            "decided_steps": 6,
        }
    ]


async def test_a_rollout_naming_what_the_run_never_imported_is_rejected_with_the_reason(
    stack, redis, keys, start_arm, rubricd, preferences
) -> None:
    rubricd("arm", "import", "arm", str(preferences(PAIRS)))
    start_arm(arm_simultaneous="true")
    unknown_judge = arm_rollout("judge", rollout_id="j", generator_model="v9")
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        no_prompt, no_rubrics = await client.arm_rewards(
            [generator(0, completion(CONCISE), prompt_id="nope"), unknown_judge], timeout=60
        )
    assert no_prompt.status == "rejected" and "no preference prompt 'nope'" in (no_prompt.error or "")
    assert no_rubrics.status == "rejected" and "no rubrics of generator 'v9'" in (no_rubrics.error or "")
    raw = await redis.xrange(keys.dead_letters)
    assert len(raw) == 2


async def test_the_generators_dataset_asks_in_the_format_the_rewards_read(
    stack, redis, keys, rubricd, preferences
) -> None:
    rubricd("arm", "import", "arm", str(preferences(PAIRS)))
    rows = [json.loads(line) for line in rubricd("arm", "dataset", "arm", "--phase", "generator").stdout.splitlines()]
    assert sorted(r["prompt_id"] for r in rows) == sorted({PROMPT, prompt_key("Name the largest planet.")})
    system, user = (m["content"] for m in rows[0]["prompt"])
    assert "<anchors>" in user and "rubrics" in system
    missing = rubricd("arm", "dataset", "arm", "--phase", "judge", ok=False)
    assert missing.returncode == 1 and "--generator MODEL" in missing.stderr
    unreadable = rubricd("arm", "import", "other", "/nonexistent", ok=False)
    assert unreadable.returncode == 1 and "/nonexistent" in unreadable.stderr
