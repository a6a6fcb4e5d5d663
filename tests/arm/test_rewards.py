"""Rubric-ARM's rewards by hand, without a broker: candidates, the generator's reward, the judge's, the phases."""

import json

import msgspec
import pytest

from rubricd.messages import HEALTHBENCH_AXES, Comparison, PhaseDecision, Plan, Preference, Rubric
from rubricd_services.arm import rewards
from rubricd_services.judges import pairwise
from rubricd_services.state.arm import InvalidPreferences, read_preferences
from rubricd_testbed.simulator import pairwise as simulated
from tests.factories import rubric, rubric_set

from .examples import CONCISE, PADDED, POLITE, QUESTION, REASONING, SHORT, completion

ANCHORS = [rubric("correct")]


def pairs(n: int = 4) -> list[Comparison]:
    """Labelled pairs where the short answer is preferred, shown first or second in turn, without a reference
    (so the `correct` anchor separates none of them)."""
    out = []
    for i in range(n):
        short_first = i % 2 == 0
        out.append(
            Comparison(
                run_id="arm",
                comparison_id=f"c{i}",
                prompt=QUESTION,
                response_a=SHORT if short_first else PADDED,
                response_b=PADDED if short_first else SHORT,
                label="A" if short_first else "B",
            )
        )
    return out


async def simulated_judge(messages: list[dict[str, str]], answer: type[msgspec.Struct]) -> tuple[msgspec.Struct, int]:
    """The simulated pairwise judge, called in this process (no HTTP)."""
    return msgspec.convert(simulated.verdict(messages[0]["content"], messages[1]["content"]), answer), 1


async def generator_reward(text: str, tie_reward: float = 0.0) -> tuple[float | None, rewards.GeneratedSet]:
    """The reward of a generator's completion, judged by the simulated pairwise judge in this process."""
    candidate = rewards.generated(text, ANCHORS, HEALTHBENCH_AXES, max_rubrics=8)
    if candidate.problem is not None:
        return None, candidate
    rubric_set = rewards.shown_set("arm", "p", candidate.rubrics)
    system = pairwise.system_message("Judge the pair.", rubric_set)

    judged = [
        await pairwise.judge_comparison(c, rubric_set, system, simulated_judge, both_orders=True) for c in pairs()
    ]
    return rewards.generator_reward([rewards.outcome(p, tie_reward) for p in judged]), candidate


async def test_a_set_that_separates_every_labelled_pair_earns_1() -> None:
    reward, candidate = await generator_reward(completion(CONCISE))
    assert reward == 1.0
    assert [r.id for r in candidate.rubrics][0] == "correct"  # the anchors first, kept
    assert candidate.rubrics[1].criterion == CONCISE["criterion"] and candidate.rubrics[1].kind == "adaptive"


async def test_a_set_that_prefers_the_wrong_response_earns_0() -> None:
    reward, _ = await generator_reward(completion(REASONING))
    assert reward == 0.0


@pytest.mark.parametrize("tie_reward", [0.0, 0.5])
async def test_a_set_that_cannot_tell_the_pairs_apart_earns_its_tie_rule(tie_reward: float) -> None:
    reward, _ = await generator_reward(completion(POLITE), tie_reward)
    assert reward == tie_reward


async def test_half_right_earns_half() -> None:
    """The concision rubric picks the short answer; the labels prefer the padded one on every other pair."""
    rubric_set = rewards.shown_set(
        "arm", "p", rewards.generated(completion(CONCISE), ANCHORS, HEALTHBENCH_AXES, 8).rubrics
    )
    system = pairwise.system_message("Judge the pair.", rubric_set)

    flipped = [
        msgspec.structs.replace(c, label="B" if c.label == "A" else "A") if i % 2 else c for i, c in enumerate(pairs())
    ]
    judged = [await pairwise.judge_comparison(c, rubric_set, system, simulated_judge) for c in flipped]
    outcomes = [rewards.outcome(p, 0.0) for p in judged]
    assert [o.credit for o in outcomes] == [1.0, 0.0, 1.0, 0.0]
    assert rewards.generator_reward(outcomes) == 0.5


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("I would grade on clarity and accuracy.", "not a rubric set"),
        (completion({**CONCISE, "criterion": "Is concise and brief."}), "not phrased 'The response'"),
        (completion({**CONCISE, "meta_class": "style"}), "meta_class 'style' is not declared"),
        (completion({**CONCISE, "points": 0}), "points 0 outside"),
    ],
)
def test_an_invalid_set_is_refused_with_its_reason(text: str, reason: str) -> None:
    candidate = rewards.generated(text, ANCHORS, HEALTHBENCH_AXES, max_rubrics=8)
    assert candidate.rubrics == [] and candidate.problem is not None
    assert reason in candidate.problem


def test_a_rubric_that_breaks_a_rule_is_dropped_and_the_rest_kept() -> None:
    candidate = rewards.generated(
        completion(CONCISE, {**REASONING, "criterion": "Shows steps."}), ANCHORS, HEALTHBENCH_AXES, 8
    )
    assert candidate.problem is None and len(candidate.rubrics) == 2
    assert candidate.dropped == ["rubric 2 ('Shows steps.'): not phrased 'The response' + a criterion"]


def test_a_judge_that_failed_is_left_out_and_a_judge_that_answered_nothing_gives_no_reward() -> None:
    failed = rewards.outcome(
        msgspec.convert(
            {"run_id": "arm", "comparison_id": "c0", "status": "judge_failed", "label": "A", "error": "timeout"},
            Preference,
        ),
        0.0,
    )
    assert (failed.credit, failed.error) == (None, "timeout")
    right = rewards.outcome(
        msgspec.convert(
            {"run_id": "arm", "comparison_id": "c1", "status": "ok", "label": "A", "winner": "A", "consistent": True},
            Preference,
        ),
        0.0,
    )
    assert rewards.generator_reward([failed, right]) == 1.0
    assert rewards.generator_reward([failed]) is None


def test_a_preference_that_flips_with_the_order_earns_nothing() -> None:
    flipped = msgspec.convert(
        {"run_id": "arm", "comparison_id": "c0", "status": "ok", "label": "A", "consistent": False},
        Preference,
    )
    assert rewards.outcome(flipped, 0.5).credit == 0.0


# --- the judge's reward -------------------------------------------------------------------------------------------

JUDGED_SET = rubric_set(
    *ANCHORS,
    Rubric(id="concise", criterion=CONCISE["criterion"], points=3, meta_class="accuracy"),
    run_id="arm",
    instance_key="p",
)
PAIR = Comparison(run_id="arm", comparison_id="c0", prompt=QUESTION, response_a=SHORT, response_b=PADDED, label="A")


def judge_says(first_concise: bool, second_concise: bool) -> str:
    """A judge's completion: the pairwise verdict format for JUDGED_SET."""
    return json.dumps(
        {
            "verdicts": {
                "correct": {"explanation": "no reference", "first": False, "second": False},
                "concise": {"explanation": "length", "first": first_concise, "second": second_concise},
            },
            "gatekeeper": "concise",
            "preferred": "first" if first_concise else "second",
            "justification": "the shorter one",
        }
    )


@pytest.mark.parametrize(
    ("order", "first", "second", "winner", "reward"),
    [
        ("AB", True, False, "A", 1.0),  # A (the short, labelled) shown first and judged concise: right
        ("AB", False, True, "B", 0.0),  # wrong
        ("BA", False, True, "A", 1.0),  # B shown first: the second shown is A; judged concise: right
        ("BA", True, False, "B", 0.0),  # the first shown (B) judged concise: wrong
    ],
)
def test_the_judges_verdict_is_read_in_its_order_and_rewarded_against_the_label(
    order: str, first: bool, second: bool, winner: str, reward: float
) -> None:
    read = rewards.verdict(judge_says(first, second), JUDGED_SET, order, ties=True)  # type: ignore[arg-type]
    assert read.problem is None and read.judgment is not None
    assert read.judgment.winner == winner
    assert rewards.judge_reward(read.judgment, PAIR) == reward


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("A is better.", "not a verdict in the judge's format"),
        (json.dumps({"verdicts": {"concise": {"explanation": "", "first": True, "second": False}}}), "correct"),
    ],
)
def test_an_unparsable_verdict_is_refused_with_its_reason(text: str, reason: str) -> None:
    read = rewards.verdict(text, JUDGED_SET, "AB", ties=True)
    assert read.judgment is None and read.problem is not None and reason in read.problem


# --- preferences and phases ---------------------------------------------------------------------------------------


def test_preferences_are_grouped_by_prompt_with_the_chosen_response_on_either_side() -> None:
    lines = [{"prompt": f"q{i % 3}", "chosen": f"good {i}", "rejected": f"bad {i}"} for i in range(12)]
    lines[0]["id"] = "first"
    found = read_preferences("\n".join(json.dumps(x) for x in lines).encode(), "arm")
    assert [len(p.comparisons) for p in found] == [4, 4, 4]
    assert found[0].comparisons[0].comparison_id == "first"
    assert found[0].comparisons[1].comparison_id == f"{found[0].prompt_id}-1"
    for p in found:
        for c in p.comparisons:
            chosen = c.response_a if c.label == "A" else c.response_b
            assert chosen.startswith("good") and c.prompt == p.prompt
    assert {c.label for p in found for c in p.comparisons} == {"A", "B"}


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"prompt": "q", "chosen": "a", "rejected": "b"}\n{"prompt": "q", "chosen": "a"}', "prefs.jsonl:2: "),
        ('{"prompt": "q", "chosen": "a", "rejected": 3}', "`$.rejected`"),
        ('{"prompt": "q", "chosen": "a", "rejected": "b", "id": "x"}\n' * 2, "id 'x' appears twice"),
        ('{"prompt": "q", "chosen": "a", "rejected": "b", "id": "a b"}', "`$.id`"),
        ("", "no preference pair"),
    ],
)
def test_a_malformed_preference_line_is_refused_with_its_line_and_field(text: str, where: str) -> None:
    with pytest.raises(InvalidPreferences, match="prefs.jsonl") as e:
        read_preferences(text.encode(), "arm", "prefs.jsonl")
    assert where in str(e.value)


def test_the_plan_alternates_from_the_first_phase_after_its_warm_up() -> None:
    plan = Plan(first="judge", phase_steps=3, warm_up_steps=2)
    trains = [plan.training(s)[0] for s in range(11)]
    assert trains == ["judge"] * 5 + ["generator"] * 3 + ["judge"] * 3
    assert [plan.training(s)[1] for s in (0, 1, 2)] == ["warm_up", "warm_up", "phase"]
    assert plan.span(6) == (5, 7) and plan.span(1) == (0, 4)
    both = Plan(simultaneous=True)
    assert {both.training(s) for s in range(5)} == {("both", "simultaneous")}
    decision = PhaseDecision(step=6, training="generator", why="phase", plan=plan)
    assert decision.admits("generator") and not decision.admits("judge")


def test_a_reward_function_trains_one_model_only() -> None:
    from rubricd.adapters import trl_arm_reward

    with pytest.raises(ValueError, match="its own, over the same steps"):
        trl_arm_reward(None, "arm", phase="both")  # type: ignore[arg-type]
