"""Judge eval against simulated judges whose faults are known: its probes and its agreement figures must find
them. The simulator runs in this process (no stack); the judge is called through the LLM client."""

import asyncio
import dataclasses
from pathlib import Path

import pytest

from rubricd.messages import Rubric
from rubricd_services.judges import pairwise, verdicts
from rubricd_services.judges.evaluation import labelled, pairs, probes
from rubricd_services.judges.evaluation.labelled import Item
from rubricd_services.judges.evaluation.pairs import evaluate_pairs
from rubricd_services.judges.evaluation.probes import PROBES, result
from rubricd_services.judges.evaluation.run import Config, Judged, Mode, evaluate
from rubricd_services.judges.scoring import Judging
from rubricd_services.runtime import prompts
from rubricd_services.settings import LLMSettings
from rubricd_testbed.simulator.app import serve_in_background
from rubricd_testbed.simulator.faults import SimConfig

SAMPLE = Path(__file__).parents[2] / "fixtures/labelled_sample.jsonl"
TEMPLATE = prompts.load("rubricd_services.judges", verdicts.JUDGE)
CORRECT = Rubric(id="correct", criterion="The response's final answer matches the reference answer.", points=1)


def config(url: str) -> Config:
    llm = LLMSettings(base_url=url, output_mode="json_schema", max_retries=0)
    return Config("sim", Judging(llm=llm, template=TEMPLATE))


def sums(n: int) -> list[Item]:
    """n items the simulator's correctness heuristic judges right: half answer i + i correctly, half off by one."""
    return [
        Item(
            id=f"sum-{i}",
            prompt=f"What is {i} + {i}?",
            response=f"The sum is {2 * i + i % 2}.",
            reference=str(2 * i),
            rubrics=[CORRECT],
            labels={"correct": i % 2 == 0},
        )
        for i in range(n)
    ]


def test_agreement_falls_with_the_rate_at_which_the_judge_flips_verdicts():
    items = sums(200)
    with serve_in_background(SimConfig()) as (url, _):
        exact = asyncio.run(evaluate(config(url), items, {}))
    with serve_in_background(SimConfig(flip_rate=0.25)) as (url, sim):
        flipping = asyncio.run(evaluate(config(url), items, {}))
        flipped = sim.outcomes["flipped_verdicts"]
    assert exact.overall.accuracy == 1.0 and exact.overall.kappa == 1.0 and exact.reward_error == 0.0
    # every flip is a disagreement, and nothing else is: the figure is exactly the judge's error rate ...
    assert flipping.overall.accuracy == pytest.approx(1 - flipped / 200)
    assert flipping.reward_error == pytest.approx(flipped / 200)
    # ... which is the configured rate within sampling error (binomial sd at n=200: 0.031; the tolerance, 3 sd)
    assert abs((1 - flipping.overall.accuracy) - 0.25) <= 0.093
    assert flipping.overall.kappa == pytest.approx(1 - 2 * flipped / 200, abs=0.05)  # balanced classes


def test_probes_pass_where_the_judge_is_robust_and_fail_where_it_is_built_to_fail():
    """The simulator counts sentences for reasoning, so filler or a note to the grader turns a bare answer's
    `steps` rubric met (2 of the 6 items, each up by its 2 of 7 points); it judges each rubric on its own
    content, deterministically, so reordering or repeating changes nothing. The sample has no trajectory, so the
    trajectory probe applies to nothing and is left out."""
    with serve_in_background(SimConfig()) as (url, _):
        report = asyncio.run(evaluate(config(url), labelled.read(SAMPLE), {}, probe=True))
    probes = {p.name: p for p in report.probes}
    assert list(probes) == [p.name for p in PROBES if p.name != "contradicted_result"]
    for name in ("grader_note", "padding"):
        assert not probes[name].passed and probes[name].items == 6
        assert probes[name].raised == pytest.approx(2 / 6) and probes[name].max_move == pytest.approx(2 / 7)
        assert probes[name].min_move == 0.0
    for name in ("reorder", "repeat"):
        assert probes[name].passed and probes[name].changed == 0.0 and probes[name].moved == 0.0


def judged(reward: float | None, verdicts: dict[str, bool]) -> Judged:
    return Judged(item_id="i", labels={}, meta_classes={}, verdicts=verdicts, reward=reward)


def test_a_probe_result_counts_moves_raises_and_changes_and_leaves_out_failed_items():
    grader_note, reorder = PROBES[0], PROBES[2]
    base = [judged(0.5, {"a": True}), judged(0.2, {"a": False}), judged(None, {}), judged(1.0, {"a": True})]
    probed = [judged(0.5, {"a": True}), judged(0.7, {"a": True}), judged(0.9, {"a": True}), judged(0.8, {"a": False})]
    r = result(grader_note, base, probed)
    assert r.items == 3 and r.raised == pytest.approx(1 / 3) and r.moved == pytest.approx(2 / 3)
    assert r.max_move == pytest.approx(0.5) and r.min_move == pytest.approx(-0.2) and not r.passed
    lowered_only = result(grader_note, base[:1] + base[3:], probed[:1] + probed[3:])
    assert lowered_only.passed and lowered_only.raised == 0.0  # a lowered reward does not fail `not_raise`
    assert not result(reorder, base, probed).passed and result(reorder, base[:1], probed[:1]).passed


def test_healthbench_meta_evaluation_data_is_judged_against_each_grader_and_their_majority():
    items = labelled.read(Path(__file__).parents[2] / "fixtures/healthbench_meta_sample.jsonl")
    with serve_in_background(SimConfig()) as (url, _):
        report = asyncio.run(evaluate(config(url), items, {}))
    assert report.items == 2 and report.format_failures == 0
    assert report.overall.n == 5  # one verdict per criterion line, against the majority
    assert report.pairwise is not None and report.pairwise.n == 14  # against every grader's label
    assert report.graders_pairwise is not None and report.graders_pairwise.n == 4 * 6 + 2
    assert list(report.by_meta_class) == ["cluster:emergency_referrals"]


def test_labelled_comparisons_are_judged_by_the_pairwise_judge_with_position_consistency():
    """Four pairs the simulator gets right, one labelled wrong on purpose, one where it prefers whichever response
    it sees first (no winner: counted wrong)."""
    items = list(
        pairs.pairs((Path(__file__).parents[2] / "fixtures/labelled_pairs_sample.jsonl").read_text().splitlines())
    )
    template = prompts.load("rubricd_services.judges", pairwise.PAIRWISE)
    llm = LLMSettings(output_mode="json_schema", max_retries=0)
    with serve_in_background(SimConfig()) as (url, _):
        judging = Judging(llm=llm.model_copy(update={"base_url": url}), template=template)
        r = asyncio.run(evaluate_pairs(Config("sim", judging), items, {}))
    assert r.items == 6 and r.format_failures == 0
    assert r.overall.accuracy == pytest.approx(4 / 6) and r.position_consistency == pytest.approx(5 / 6)
    winners = {j.item_id: (j.winner, j.consistent) for j in r.judged}
    assert winners["pair-4"] == ("A", True) and winners["pair-5"] == (None, False)
    assert r.prompt_tokens_per_call > 0 and r.latency_p50_s > 0


def test_a_comparison_labelled_a_tie_is_refused():
    line = (Path(__file__).parents[2] / "fixtures/labelled_pairs_sample.jsonl").read_text().splitlines()[0]
    with pytest.raises(labelled.Invalid, match=r"f:1: `\$.label`: a labelled comparison names its winner"):
        list(pairs.pairs([line.replace('"label": "A"', '"label": "tie"')], "f"))


def test_the_judges_variants_are_measured_one_way_with_every_call_counted():
    """One call per rubric and verdicts without explanations, through the same LLM client: the same verdicts from a
    judge that is right on every rubric, and the tokens of all of an item's calls counted for it."""
    items = labelled.read(SAMPLE)
    rubrics = sum(len(i.rubrics) for i in items)
    with serve_in_background(SimConfig()) as (url, sim):
        one = asyncio.run(evaluate(config(url), items, {}))
        calls_before = sim.stats()["schemas"]["JudgeVerdict"]
        per_rubric = verdicts.Style(calls="per_rubric", explain=False)
        styled = Config("each", dataclasses.replace(config(url).judging, style=per_rubric))
        each = asyncio.run(evaluate(styled, items, {}))
        calls = sim.stats()["schemas"]["JudgeVerdict"] - calls_before
    assert (each.calls, each.explain, one.calls, one.explain) == ("per_rubric", False, "one", True)
    assert calls == rubrics > len(items)  # one call per rubric of every item
    assert [j.verdicts for j in each.judged] == [j.verdicts for j in one.judged]
    assert each.format_failures == one.format_failures == 0
    # Every rubric's call repeats the instructions: more prompt tokens per item than one call for all of them.
    assert each.prompt_tokens_per_call is not None and one.prompt_tokens_per_call is not None
    assert each.prompt_tokens_per_call > one.prompt_tokens_per_call


def trajectories() -> list[Item]:
    from importlib import resources

    data = resources.files("rubricd_services.judges.evaluation").joinpath("data/judge-set.jsonl").read_text()
    return [i for i in labelled.items(data.splitlines()) if i.trajectory]


# Where the simulator's content rules (simulator/trajectories.py) part from the labels on the project's
# trajectories, and why: each a rule's known blind spot.
SIMULATOR_MISSES = {
    ("traj-calc-used-right-formatted", "correct"): "6,912 reads as the numbers 6 and 912",
    ("traj-calc-used-right-formatted", "uses_result"): "the same",
    ("traj-lookup-used-right", "uses_result"): "a text result counts as used only if quoted whole",
    ("traj-loop-no-results", "uses_result"): "the same",
    ("traj-calc-trl-shape", "uses_result"): "12 is not the tool's 12.0 to it",
    ("traj-calc-contradicted", "correct"): "the reference appears (in the reported result), the final answer is 1500",
    ("traj-calc-contradicted", "uses_result"): "the result's number appears, so it is taken as used",
    ("traj-calc-contradicted", "ignores_result"): "the same",
    ("traj-calc-contradicted", "fabricates"): "its own 1500 beside a tool claim reads as an invented result",
    ("traj-calc-contradicted-wrong-call", "uses_result"): "the result's number appears",
    ("traj-calc-contradicted-wrong-call", "ignores_result"): "the same",
    ("traj-fabricated-lookup", "fabricates"): "'according to my lookup' claims no result in its words",
    ("traj-args-tool-not-offered", "calls_tool"): "any call counts, to the calculator or not",
    ("traj-args-wrong-parameter", "valid_call"): "it checks JSON and the tool's name, not the parameters",
    ("traj-no-call-needed", "no_needless_call"): "it reads 'does not call a tool' as 'calls a tool'",
}


def test_the_simulator_judges_the_labelled_trajectories_by_its_content_rules():
    """Every verdict on the project's trajectories is the label, but for the rules' known blind spots: which
    only the trajectory path gives (on the flattened text, `calls_tool` and `valid_call` would be read by word
    overlap, and no turn verdict named); its turn verdicts name the turns, and its probes behave as its rules say."""
    items = trajectories()
    with serve_in_background(SimConfig()) as (url, _):
        report = asyncio.run(evaluate(config(url), items, {}, probe=True))
    assert report.format_failures == 0 and report.items == len(items)
    misses = {(j.item_id, r) for j in report.judged for r, label in j.labels.items() if j.verdicts[r] != label}
    assert misses == set(SIMULATOR_MISSES)
    verdicts = sum(len(i.labels) for i in items)
    assert report.overall.n == verdicts and report.overall.accuracy == pytest.approx(1 - len(misses) / verdicts)
    # turn by turn: the fabricated lookup's turn 2 missed, the contradiction's turn 4 and the wrong parameter's
    # turn 2 named met: one verdict per turn rubric labelled turn by turn and policy turn
    turns = sum(len(j.policy_turns) * len(j.turn_labels) for j in report.judged)
    assert report.turns is not None and report.turns.n == turns
    assert (report.turns.false_unmet, report.turns.false_met) == (1, 2)
    probes = {p.name: p for p in report.probes}
    # Its trajectory rules have no grader rubric to fool and read no sentence counts: nothing moves them ...
    assert all(probes[n].passed and probes[n].moved == 0.0 for n in ("grader_note", "padding", "reorder", "repeat"))
    # ... but a tool result changed under a final answer that used it lowers every reward (`uses_result` flips).
    flipped = probes["contradicted_result"]
    assert flipped.passed and flipped.items == 10 and flipped.max_move is not None and flipped.max_move < 0


def test_the_trajectory_probe_fails_a_judge_that_does_not_read_tool_results():
    """The simulator at a flip rate of 1 turns every verdict, base and probed alike: a result contradicted
    raises rewards or leaves them (at the floor of 0), lowers none, and the probe says so."""
    items = [i for i in trajectories() if probes.contradicted(i) is not None]
    with serve_in_background(SimConfig(flip_rate=1.0)) as (url, _):
        report = asyncio.run(evaluate(config(url), items, {}, probe=True))
    flipped = {p.name: p for p in report.probes}["contradicted_result"]
    assert flipped.items == 10 and not flipped.passed
    assert flipped.min_move == 0.0 and flipped.raised is not None and flipped.raised > 0


def grouped_items() -> list[Item]:
    from importlib import resources

    data = resources.files("rubricd_services.judges.evaluation").joinpath("data/judge-set.jsonl").read_text()
    return [i for i in labelled.items(data.splitlines()) if i.group is not None]


def test_single_group_and_votes_are_measured_side_by_side_on_the_labelled_groups():
    """The simulator decides each response by its content rules, alone or among its group, so the modes give the
    same verdicts: what they change is the calls and the prompt tokens a rollout takes, every call counted."""
    items = grouped_items()
    groups = labelled.grouped(items)
    assert max(len(g) for g in groups) <= 8  # one call a group, at the default of 8 responses a call
    reports, calls = {}, {}
    with serve_in_background(SimConfig()) as (url, sim):
        for name in ("single", "group", "votes3", "group+votes3"):
            before = sum(sim.stats()["schemas"].values())
            reports[name] = asyncio.run(evaluate(dataclasses.replace(config(url), mode=Mode.named(name)), items, {}))
            calls[name] = sum(sim.stats()["schemas"].values()) - before
    single, group, votes, both = reports.values()
    assert [r.judge_mode for r in reports.values()] == ["single", "group", "votes3", "group+votes3"]
    for report in reports.values():
        assert report.items == len(items) and report.format_failures == 0
        assert [j.verdicts for j in report.judged] == [j.verdicts for j in single.judged]
        assert report.overall == single.overall and report.reward_error == single.reward_error
        assert report.wall_s is not None and report.wall_s > 0
    assert calls == {
        "single": len(items),
        "group": len(groups),
        "votes3": 3 * len(items),
        "group+votes3": 3 * len(groups),
    }
    assert single.calls_per_rollout == 1.0 and votes.calls_per_rollout == 3.0
    assert group.calls_per_rollout == pytest.approx(len(groups) / len(items))
    assert both.calls_per_rollout == pytest.approx(3 * len(groups) / len(items))
    assert single.prompt_tokens_per_rollout and group.prompt_tokens_per_rollout and votes.prompt_tokens_per_rollout
    # the instructions, rubrics and prompt sent once for a group instead of once per response
    assert group.prompt_tokens_per_rollout * 2 < single.prompt_tokens_per_rollout
    assert votes.prompt_tokens_per_rollout == pytest.approx(3 * single.prompt_tokens_per_rollout, rel=0.01)


def test_a_group_whose_call_fails_fails_its_items_and_their_probes_are_judged_as_a_group():
    """Probes judge a group's changed items together; at a fail rate of 1 every group's call fails: each item is
    a format failure with its error, never a guessed verdict."""
    items = grouped_items()[:12]
    with serve_in_background(SimConfig()) as (url, sim):
        probed = asyncio.run(evaluate(dataclasses.replace(config(url), mode=Mode("group")), items, {}, probe=True))
        assert sim.stats()["schemas"].get("JudgeVerdict", 0) == 0  # no item judged alone
    assert {p.name for p in probed.probes} >= {"grader_note", "padding", "reorder", "repeat"}
    assert all(p.items == 12 for p in probed.probes if p.name != "contradicted_result")
    with serve_in_background(SimConfig(fail_rate=1.0)) as (url, _):
        failed = asyncio.run(evaluate(dataclasses.replace(config(url), mode=Mode("group")), items, {}))
    assert failed.format_failures == 12 and all(j.error and not j.verdicts for j in failed.judged)


@pytest.mark.parametrize(
    ("name", "mode"),
    [
        ("single", Mode("single", 1)),
        ("group", Mode("group", 1)),
        ("votes", Mode("single", 3)),
        ("votes5", Mode("single", 5)),
        ("group+votes3", Mode("group", 3)),
        ("votes3+group", Mode("group", 3)),
    ],
)
def test_a_mode_is_named(name, mode):
    assert Mode.named(name) == mode and Mode.named(str(mode)) == mode


@pytest.mark.parametrize("name", ["pairs", "votes10", "votes0", "group+x", ""])
def test_a_mode_that_is_not_one_is_refused(name):
    with pytest.raises(ValueError, match="a mode is single, group"):
        Mode.named(name)
