"""Pairwise judging's domain logic without a broker: one order's winner, both orders, accuracy."""

import msgspec
import pytest

from rubricd.messages import Comparison, JudgeStatus, OrderJudgment, Preference, Rubric
from rubricd_services.judges import pairwise
from rubricd_services.judges.caller import JudgeFailed
from rubricd_services.judges.pairwise import Answer, aggregate, decide, judgment
from rubricd_services.runtime import prompts
from rubricd_services.state.accuracy import accuracy_increments, parse_accuracy
from rubricd_testbed.simulator import pairwise as simulated
from tests.factories import rubric_set

RUBRICS = [
    Rubric(id="correct", criterion="The response states the correct final answer.", points=5, meta_class="accuracy"),
    Rubric(id="grader", criterion="The response addresses the grader.", points=-5, meta_class="instruction_following"),
    Rubric(id="reasoning", criterion="The response shows its reasoning.", points=2, meta_class="completeness"),
]


def met(**verdicts: tuple[bool, bool]) -> dict[str, tuple[bool, bool]]:
    return {r.id: verdicts.get(r.id, (False, False)) for r in RUBRICS}


def test_the_higher_net_points_win_and_the_heaviest_separating_rubric_is_the_gatekeeper() -> None:
    assert decide(RUBRICS, met(correct=(True, False), reasoning=(False, True)), ties=True) == ("A", "correct")
    assert decide(RUBRICS, met(reasoning=(False, True)), ties=True) == ("B", "reasoning")


def test_a_met_penalty_loses_even_when_neither_earns_a_point() -> None:
    # Clipped scores would both be 0; net points are -5 and 0.
    assert decide(RUBRICS, met(grader=(True, False)), ties=True) == ("B", "grader")


def test_equal_points_tie_when_ties_are_allowed() -> None:
    assert decide(RUBRICS, met(correct=(True, True)), ties=True) == ("tie", None)


def test_equal_points_without_ties_go_to_the_judges_gatekeeper_then_its_preference_then_tie() -> None:
    rubrics = [*RUBRICS, Rubric(id="cites", criterion="The response cites a source.", points=2)]
    verdicts = {**met(reasoning=(True, False)), "cites": (False, True)}
    assert decide(rubrics, verdicts, ties=False, judge_gatekeeper="cites") == ("B", "cites")
    # A gatekeeper that separates nothing does not decide; the judge's preference does, without a gatekeeper.
    assert decide(rubrics, verdicts, ties=False, judge_gatekeeper="correct", judge_preferred="A") == ("A", None)
    assert decide(rubrics, verdicts, ties=False, judge_preferred="tie") == ("tie", None)


def test_a_broken_hard_rule_decides_before_points() -> None:
    rubrics = [
        Rubric(id="points", criterion="The response is thorough.", points=10, rule="principle"),
        Rubric(id="format", criterion="The response is in French.", points=1, rule="hard_rule"),
    ]
    verdicts = {"points": (True, False), "format": (False, True)}
    assert decide(rubrics, verdicts, ties=True) == ("B", "format")


def answer(verdicts: dict[str, tuple[bool, bool]], preferred: str = "tie", gatekeeper: str | None = None) -> Answer:
    return Answer({k: (*v, f"why {k}") for k, v in verdicts.items()}, gatekeeper, preferred, "because", 1)  # type: ignore[arg-type]


def test_the_second_order_is_read_back_in_a_b_terms() -> None:
    # Shown B first: "first" is B. B meets `correct`, so B wins in A/B terms.
    j = judgment("BA", RUBRICS, answer(met(correct=(True, False)), preferred="first"), ties=True)
    assert (j.winner, j.gatekeeper, j.points_a, j.points_b, j.judge_preferred) == ("B", "correct", 0, 5, "B")
    assert {r.rubric_id: (r.a_met, r.b_met) for r in j.results}["correct"] == (False, True)


def order(o: str, winner: str, gatekeeper: str | None = None) -> OrderJudgment:
    return OrderJudgment(order=o, winner=winner, gatekeeper=gatekeeper, points_a=0, points_b=0)  # type: ignore[arg-type]


def test_both_orders_agreeing_is_a_consistent_win_with_the_first_orders_gatekeeper() -> None:
    decided = aggregate([order("AB", "A", "correct"), order("BA", "A", "reasoning")])
    assert (decided.winner, decided.consistent, decided.gatekeeper) == ("A", True, "correct")


@pytest.mark.parametrize(("first", "second"), [("A", "B"), ("A", "tie"), ("tie", "B")])
def test_a_preference_that_flips_with_the_order_is_inconsistent_with_no_winner(first: str, second: str) -> None:
    decided = aggregate([order("AB", first, "correct"), order("BA", second, "correct")])
    assert (decided.winner, decided.consistent, decided.gatekeeper) == (None, False, None)
    assert "inconsistent" in decided.justification and f"B shown first: {second}" in decided.justification


def test_one_order_only_has_no_consistency() -> None:
    decided = aggregate([order("AB", "B", "correct")])
    assert (decided.winner, decided.consistent) == ("B", None)


COMPARISON = Comparison(
    run_id="run",
    comparison_id="c1",
    prompt="What is 17 + 25?",
    response_a="The sum is 42.",
    response_b="The sum is 41.",
    reference="42",
    label="A",
)
SET = rubric_set(*RUBRICS, version=3)


def simulator_judge(calls: list[str]) -> pairwise.PairJudge:
    """The simulator's pairwise heuristics as the judge, recording which response each call showed first."""

    async def call(messages: list[dict[str, str]], answer_type: type[msgspec.Struct]) -> tuple[msgspec.Struct, int]:
        calls.append(messages[1]["content"])
        value = simulated.verdict(messages[0]["content"], messages[1]["content"])
        return msgspec.convert(value, answer_type), 1

    return call


async def test_a_comparison_judged_in_both_orders_names_the_winner_and_whether_the_label_was_right() -> None:
    calls: list[str] = []
    system = pairwise.system_message(prompts.load("rubricd_services.judges", pairwise.PAIRWISE), SET)
    p = await pairwise.judge_comparison(COMPARISON, SET, system, simulator_judge(calls))
    assert (p.status, p.winner, p.consistent, p.correct, p.gatekeeper, p.meta_class) == (
        JudgeStatus.OK,
        "A",
        True,
        True,
        "correct",
        "accuracy",
    )
    assert [o.order for o in p.orders] == ["AB", "BA"] and p.rubric_version == 3 and p.format_ok
    assert calls[0].index("sum is 42") < calls[0].index("sum is 41")
    assert calls[1].index("sum is 41") < calls[1].index("sum is 42")
    wrong = msgspec.structs.replace(COMPARISON, label="B")
    assert (await pairwise.judge_comparison(wrong, SET, system, simulator_judge([]))).correct is False


async def test_a_position_biased_judge_is_caught_and_a_failed_order_fails_the_preference() -> None:
    biased = msgspec.structs.replace(COMPARISON, prompt=f"{simulated.PREFER_FIRST} What is 17 + 25?")
    system = pairwise.system_message(prompts.load("rubricd_services.judges", pairwise.PAIRWISE), SET)
    p = await pairwise.judge_comparison(biased, SET, system, simulator_judge([]))
    assert (p.winner, p.consistent, p.correct) == (None, False, False)
    assert [o.winner for o in p.orders] == ["A", "B"]
    once = await pairwise.judge_comparison(biased, SET, system, simulator_judge([]), both_orders=False)
    assert (once.winner, once.consistent, len(once.orders)) == ("A", None, 1)

    async def failing(messages: list[dict[str, str]], answer_type: type[msgspec.Struct]) -> tuple[msgspec.Struct, int]:
        if "sum is 41" in messages[1]["content"].split("first")[1][:30]:
            raise JudgeFailed("no answer")
        return await simulator_judge([])(messages, answer_type)

    failed = await pairwise.judge_comparison(COMPARISON, SET, system, failing)
    assert (failed.status, failed.winner, failed.correct, failed.format_ok) == (
        JudgeStatus.JUDGE_FAILED,
        None,
        None,
        False,
    )
    assert "BA: no answer" in (failed.error or "")


def test_the_answer_schema_requires_every_rubric_and_lists_the_gatekeepers() -> None:
    schema = msgspec.json.schema(pairwise.answer_type(("correct", "grader")))
    verdicts = schema["$defs"]["PairVerdicts"]
    assert verdicts["required"] == ["correct", "grader"] and verdicts["additionalProperties"] is False
    root = schema["$defs"]["PairwiseVerdict"]
    assert {"enum": ["correct", "grader"], "type": "string"} in root["properties"]["gatekeeper"]["anyOf"]
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(
            {
                "verdicts": {"correct": {"explanation": "", "first": True, "second": False}},
                "gatekeeper": None,
                "preferred": "first",
                "justification": "",
            },
            pairwise.answer_type(("correct", "grader")),
        )


def preference(**fields: object) -> Preference:
    base: dict[str, object] = {"run_id": "run", "comparison_id": "c", "status": JudgeStatus.OK, "rubric_version": 2}
    return Preference(**{**base, **fields})  # type: ignore[arg-type]


def test_accuracy_counts_add_up_per_version_class_and_set() -> None:
    committed = [
        preference(label="A", winner="A", consistent=True, correct=True, gatekeeper="correct", meta_class="accuracy"),
        preference(label="A", winner="B", consistent=True, correct=False, gatekeeper="r", meta_class="completeness"),
        preference(label="B", winner=None, consistent=False, correct=False),  # inconsistent: labelled, not right
        preference(winner="tie", consistent=True),  # unlabelled
        preference(status=JudgeStatus.JUDGE_FAILED, label="A"),  # failed: not counted as wrong
        preference(
            label="A",
            winner="A",
            consistent=True,
            correct=True,
            meta_class="accuracy",
            instance_key="p1",
            rubric_version=1,
        ),
    ]
    fields: dict[str, int] = {}
    for p in committed:
        for name, n in accuracy_increments(p).items():
            fields[name] = fields.get(name, 0) + n
    run = parse_accuracy({k.encode(): str(v).encode() for k, v in fields.items()})
    v2 = run.versions[2]
    assert (v2.judged, v2.failed, v2.labelled, v2.correct, v2.both_orders, v2.consistent, v2.ties) == (
        4,
        1,
        3,
        1,
        4,
        3,
        1,
    )
    assert v2.accuracy == pytest.approx(1 / 3) and v2.consistency == pytest.approx(3 / 4)
    assert v2.class_accuracy() == {"accuracy": 1.0, "completeness": 0.0, "none": 0.0}
    assert run.sets[(None, 2)].labelled == 3 and run.sets[("p1", 1)].accuracy == 1.0
    total = run.total
    assert (total.labelled, total.correct) == (4, 2) and total.accuracy == 0.5
    assert accuracy_increments(preference(status=JudgeStatus.REJECTED)) == {}
