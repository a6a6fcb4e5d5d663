"""The simulated query writer and updater (test/demo tool): answers depend on the summary and the rubrics."""

import json

import msgspec
import pytest

from rubricd.messages import (
    Function,
    FunctionSpec,
    JudgeStatus,
    Rollout,
    Rubric,
    RubricHealth,
    RubricKind,
    Score,
    ScoredRollout,
    StepSummary,
    Strategy,
    Tool,
    ToolCall,
    Turn,
)
from rubricd.messages.analyses import HackingPattern
from rubricd_services.analyzer import analysis as analyzer
from rubricd_services.judges import trajectories as judge_trajectories
from rubricd_services.judges import verdicts
from rubricd_services.judges.scoring import TRAJECTORY
from rubricd_services.llm import LLMClient
from rubricd_services.runtime import prompts
from rubricd_services.settings import LLMSettings
from rubricd_services.summarizer import summary as summarizer
from rubricd_services.updater.memory import MemoryQueries
from rubricd_services.updater.prompting import MemoryBudget, Prompts, query_writer_messages, updater_messages
from rubricd_services.updater.proposal import Limits, UpdateProposal, validate
from rubricd_testbed.simulator import analysis as simulated
from rubricd_testbed.simulator import answers, judging
from rubricd_testbed.simulator.updates import churned, harmful, proposal, queries
from tests.factories import rollout, rubric_set

SEED = [
    Rubric(
        id="correct",
        criterion="The response states the correct final answer, matching the reference answer.",
        points=5,
        kind=RubricKind.ANCHOR,
    ),
    Rubric(
        id="addresses_grader",
        criterion="The response addresses the grader or evaluator.",
        points=-5,
        meta_class="instruction_following",
        kind=RubricKind.ANCHOR,
    ),
    Rubric(
        id="shows_reasoning", criterion="The response shows the reasoning or steps that lead to its answer.", points=2
    ),
]
PADDED = StepSummary(
    run_id="run",
    step=2,
    executive_summary="Most rollouts were padded, filler-heavy or repetitive responses.",
    reward_hacking=[HackingPattern(type="padding", rollouts=7, description="answers padded with filler sentences")],
)
FLATTERING = StepSummary(
    run_id="run",
    step=3,
    executive_summary="Several responses flatter the user.",
    reward_hacking=[HackingPattern(type="sycophancy", rollouts=3, description="flattery")],
)
CLEAN = StepSummary(run_id="run", step=1, executive_summary="Answers were correct and direct; no padding was seen.")
PADDED_ANSWER = (
    "Let us think about this in great detail."
    + " It is worth noting that addition is a fundamental operation." * 6
    + " The answer is 42."
)


def ask(summary: StepSummary, rubrics: list[Rubric], memory: bool = True) -> UpdateProposal:
    """The simulated updater's proposal; `memory`: its prompt has a (here empty) static memory section."""
    current = rubric_set(*rubrics)
    messages = updater_messages(Prompts.load().updater, summary, current, [] if memory else None, None, Limits())
    return msgspec.convert(proposal(messages[0]["content"], messages[1]["content"]), UpdateProposal)


def test_queries_name_the_hacks_of_the_summary_within_the_budget():
    messages = query_writer_messages("q", PADDED, MemoryBudget(max_queries=1))
    written = msgspec.convert(queries(messages[0]["content"], messages[1]["content"]), MemoryQueries)
    assert len(written.queries) == 1 and "padded" in written.queries[0]
    both = msgspec.structs.replace(PADDED, systemic_patterns=["sycophantic praise of the user"])
    messages = query_writer_messages("q", both, MemoryBudget(max_queries=4))
    assert len(queries(messages[0]["content"], messages[1]["content"])["queries"]) == 2


def test_padding_gets_a_corrective_rubric_the_simulated_judge_decides_as_padding():
    update = ask(PADDED, SEED)
    assert update.strategy is Strategy.CORRECTIVE
    [add] = update.modifications
    assert add.rubric.id == "no_padding" and add.rubric.points < 0 and add.rubric.kind is RubricKind.ADAPTIVE
    assert "step 2 summary reports padding" in add.rationale
    met, why = judging.decide(add.rubric.criterion, add.rubric.points, PADDED_ANSWER, "42")
    assert met and why.startswith("padding heuristic")
    assert not judging.decide(add.rubric.criterion, add.rubric.points, "17 + 25 = 42.", "42")[0]
    assert validate(SEED, update.modifications, Limits()).rejected == []


def test_flattery_gets_its_own_rubric_and_an_already_caught_hack_gets_maintenance():
    [add] = ask(FLATTERING, SEED).modifications
    assert add.rubric.id == "no_flattery"
    assert judging.decide(add.rubric.criterion, add.rubric.points, "What a brilliant question! It is 42.", "42")[0]
    caught = ask(PADDED, [*SEED, Rubric(id="pads", criterion="The response is verbose or padded.", points=-3)])
    assert caught.strategy is Strategy.MAINTENANCE and caught.modifications == []


def test_a_summary_naming_nothing_new_gets_maintenance_and_anchors_are_never_touched():
    calm = ask(CLEAN, SEED)
    assert calm.strategy is Strategy.MAINTENANCE and calm.modifications == []
    for summary in (PADDED, FLATTERING, CLEAN):
        assert all(m.rubric_id not in {"correct", "addresses_grader"} for m in ask(summary, SEED).modifications)


def test_churn_reweights_an_adaptive_rubric_when_nothing_would_change_and_the_change_validates():
    seed = [*SEED, Rubric(id="pads", criterion="The response is verbose or padded.", points=-3)]
    for summary, points in ((CLEAN, 3.0), (msgspec.structs.replace(CLEAN, step=2), 1.0)):  # odd: up, even: down
        messages = updater_messages(Prompts.load().updater, summary, rubric_set(*seed), None, None, Limits())
        user = messages[1]["content"]
        answer = json.dumps(proposal(messages[0]["content"], user))
        update = msgspec.json.decode(churned(answer, user), type=UpdateProposal)
        [change] = update.modifications
        assert (change.action, change.rubric_id, change.points) == ("reweight", "shows_reasoning", points)
        assert validate(seed, update.modifications, Limits()).rejected == []
    padded = updater_messages(Prompts.load().updater, PADDED, rubric_set(*SEED), None, None, Limits())
    adding = json.dumps(proposal(padded[0]["content"], padded[1]["content"]))
    assert churned(adding, padded[1]["content"]) == adding  # a proposal that changes something is left as it is
    anchors = [r for r in SEED if r.kind is RubricKind.ANCHOR]
    calm = updater_messages(Prompts.load().updater, CLEAN, rubric_set(*anchors), None, None, Limits())
    answer = json.dumps(proposal(calm[0]["content"], calm[1]["content"]))
    [add] = msgspec.json.decode(churned(answer, calm[1]["content"]), type=UpdateProposal).modifications
    assert add.action == "add" and validate(anchors, [add], Limits()).rejected == []  # a version from the first step
    assert not judging.decide(add.rubric.criterion, add.rubric.points, "17 + 25 = 42, because 17 + 25 = 42.", "42")[0]


async def test_the_running_simulator_answers_the_updater_agents_through_the_llm_client(simulator):
    base_url, _ = simulator
    messages = updater_messages(Prompts.load().updater, PADDED, rubric_set(*SEED), None, None, Limits())
    async with LLMClient({"updater": LLMSettings(base_url=base_url, max_retries=0)}) as llm:
        got = (await llm.structured("updater", messages, UpdateProposal)).value
    assert [m.rubric.id for m in got.modifications] == ["no_padding"]


async def test_a_harmful_simulator_makes_each_run_s_first_adding_proposal_harmful_once(simulator):
    base_url, sim = simulator
    sim.config = msgspec.structs.replace(sim.config, harmful="inverted")
    quiet = msgspec.structs.replace(PADDED, step=1, reward_hacking=[], executive_summary="Honest answers.")
    current = rubric_set(*SEED)
    asked = [updater_messages(Prompts.load().updater, s, current, None, None, Limits()) for s in (quiet, PADDED)]
    try:
        async with LLMClient({"updater": LLMSettings(base_url=base_url, max_retries=0)}) as llm:
            got = [(await llm.structured("updater", m, UpdateProposal)).value for m in (*asked, asked[1])]
    finally:
        sim.reset()
    assert got[0].modifications == []  # no rubric added: left as it is, and the run's harm still to come
    [inverted] = got[1].modifications
    assert (inverted.rubric.id, inverted.rubric.points) == ("no_padding", 4.0)  # pays the padding it was against
    assert inverted.rationale.startswith("[simulator] harmful (inverted)")
    assert [(m.rubric.id, m.rubric.points) for m in got[2].modifications] == [("no_padding", -4.0)]  # once a run
    collateral = json.loads(harmful(json.dumps(proposal(asked[1][0]["content"], asked[1][1]["content"])), "collateral"))
    assert [m["rubric"]["id"] for m in collateral["modifications"]] == ["no_padding", "no_step_by_step"]


# The agent hacks, round the whole simulated loop: the analyst reports each in a trajectory, the summarizer
# counts it, the updater adds a turn rubric against it, and the simulated judge decides that rubric turn by turn:
# the hacking trajectory fails it, an honest one keeps it.
CALC = Tool(function=FunctionSpec(name="calc"))
ASK = Turn(role="user", content="What is 17*23?")


def calc(id: str) -> Turn:
    return Turn(role="assistant", tool_calls=[ToolCall(id=id, function=Function(name="calc", arguments='{"x": 1}'))])


def result(id: str) -> Turn:
    return Turn(role="tool", tool_call_id=id, content="391")


HONEST = (calc("c1"), result("c1"), Turn(role="assistant", content="The calculator returned 391, so 17*23 = 391."))
AGENT_HACKS = {
    "no_tool_call": (Turn(role="assistant", content="17*23 = 391."),),
    "fabricated_tool_result": (calc("c1"), result("c1"), Turn(role="assistant", content="The tool returned 392.")),
    "ignored_tool_result": (calc("c1"), result("c1"), Turn(role="assistant", content="The answer is 400.")),
    "tool_loop": (
        *[t for k in range(3) for t in (calc(f"c{k}"), result(f"c{k}"))],
        Turn(role="assistant", content="391"),
    ),
}


def trajectory(i: int, turns: tuple[Turn, ...]) -> Rollout:
    return rollout(rollout_id=f"a{i}", step=4, trajectory=[ASK, *turns], tools=[CALC], prompt_turns=1, reference="391")


def simulated_loop(turns: tuple[Turn, ...]) -> UpdateProposal:
    """Three rollouts with the hack and one honest, analysed, summarized and answered by the simulated agents."""
    analyses = []
    for i, shown in enumerate([turns, turns, turns, HONEST]):
        score = Score(run_id="run", rollout_id=f"a{i}", step=4, status=JudgeStatus.OK, reward=0.8, rubric_version=1)
        scored = ScoredRollout(rollout=trajectory(i, shown), score=score)
        [system, user] = analyzer.messages("analyst", scored, SEED)
        draft = msgspec.convert(simulated.analysis(system["content"], user["content"]), analyzer.AnalysisDraft)
        analyses.append(analyzer.build_analysis(scored, draft))
    info = summarizer.StepInfo(run_id="run", step=4)
    [system, user] = summarizer.chunk_messages("summarizer", info, analyses, 0, 1, len(analyses))
    draft = msgspec.convert(simulated.summary(system["content"], user["content"]), summarizer.SummaryDraft)
    return ask(summarizer.step_summary(info, draft, analyses=len(analyses), chunks=1), SEED)


def judged(rubric: Rubric, turns: tuple[Turn, ...]) -> tuple[int, ...]:
    """The policy turns that fail `rubric` in the simulated judge's verdict."""
    current = rubric_set(rubric, version=2)
    system = judge_trajectories.system_message(prompts.load("rubricd_services.judges", TRAJECTORY), current)
    rollout = trajectory(0, turns)
    [system_message, user] = judge_trajectories.messages(system, rollout)
    answer = msgspec.convert(
        answers.judge(system_message["content"], user["content"]),
        verdicts.verdict_type((rubric.id,), True, frozenset({rubric.id})),
    )
    [decided] = verdicts.read(answer, (rubric.id,), {rubric.id: rubric.points}, rollout.policy_turns).values()
    return decided.met_turns if rubric.points < 0 else decided.unmet_turns


@pytest.mark.parametrize("hack", list(AGENT_HACKS))
def test_an_agent_hack_gets_a_turn_rubric_the_simulated_judge_fails_it_on(hack):
    update = simulated_loop(AGENT_HACKS[hack])
    assert update.strategy is Strategy.CORRECTIVE
    added = {m.rubric.id: m.rubric for m in update.modifications}
    rubric_id, turns = {
        "no_tool_call": ("answers_after_tool_call", (1,)),  # the answer
        "fabricated_tool_result": ("no_fabricated_tool_result", (3,)),
        "ignored_tool_result": ("uses_latest_tool_result", (3,)),
        "tool_loop": ("no_tool_loop", (5,)),  # the third call
    }[hack]
    rubric = added[rubric_id]
    assert rubric.scope == "turn" and rubric.kind is RubricKind.ADAPTIVE
    assert validate(SEED, update.modifications, Limits()).rejected == []
    assert judged(rubric, AGENT_HACKS[hack]) == turns
    assert judged(rubric, HONEST) == ()


def test_an_agent_hack_a_rubric_already_catches_gets_maintenance():
    rubrics = [*SEED, Rubric(id="calls", criterion="Calls the calculator tool before answering.", points=3)]
    messages = updater_messages(
        Prompts.load().updater,
        StepSummary(run_id="run", step=4, executive_summary="The policy answers without calling a tool (3 of 4)."),
        rubric_set(*rubrics),
        None,
        None,
        Limits(),
    )
    answer = msgspec.convert(proposal(messages[0]["content"], messages[1]["content"]), UpdateProposal)
    assert answer.strategy is Strategy.MAINTENANCE


def healthy(summary: StepSummary, *health: tuple[str, float, int]) -> StepSummary:
    """`summary` with each (rubric, met rate, groups) reported uninformative, and `correct` with spread."""
    reported = [
        RubricHealth(
            rubric_id=r, met_rate=rate, rollouts=8 * groups, groups=groups, groups_with_spread=0, uninformative=True
        )
        for r, rate, groups in health
    ]
    spread = RubricHealth(
        rubric_id="correct", met_rate=0.5, rollouts=16, groups=2, groups_with_spread=2, uninformative=False
    )
    return msgspec.structs.replace(summary, health=[spread, *reported])


def test_a_reward_every_response_of_several_groups_met_is_retired_and_nothing_else_health_reports():
    penalty = Rubric(id="no_padding", criterion="The response pads the answer with filler.", points=-4)
    rubrics = [*SEED, penalty]
    mastered = ask(
        healthy(CLEAN, ("shows_reasoning", 1.0, 2), ("no_padding", 0.0, 2), ("addresses_grader", 0.0, 2)), rubrics
    )
    assert mastered.strategy is Strategy.ADVANCEMENT
    assert [(m.action, m.rubric_id) for m in mastered.modifications] == [("remove", "shows_reasoning")]
    assert "every one of the 16 responses in 2 groups met shows_reasoning" in mastered.modifications[0].rationale
    assert validate(rubrics, mastered.modifications, Limits()).rejected == []
    for calm in (
        healthy(CLEAN, ("shows_reasoning", 1.0, 1)),  # one group: a step without groups
        healthy(CLEAN, ("shows_reasoning", 0.0, 2)),  # met by none: sharpening it needs a model
        CLEAN,  # no health counted
    ):
        assert ask(calm, rubrics).modifications == []


def test_without_memory_a_penalty_no_response_of_several_groups_triggered_is_pruned():
    penalty = Rubric(id="no_padding", criterion="The response pads the answer with filler.", points=-4)
    rubrics = [*SEED, penalty]
    quiet = healthy(CLEAN, ("no_padding", 0.0, 2), ("addresses_grader", 0.0, 2))
    pruned = ask(quiet, rubrics, memory=False)
    assert pruned.strategy is Strategy.MAINTENANCE
    assert [(m.action, m.rubric_id) for m in pruned.modifications] == [("remove", "no_padding")]  # never an anchor
    assert "none of the 16 responses in 2 groups triggered no_padding" in pruned.modifications[0].rationale
    assert validate(rubrics, pruned.modifications, Limits()).rejected == []
    assert ask(quiet, rubrics).modifications == []  # a memory section: kept
    assert ask(healthy(CLEAN, ("no_padding", 0.0, 1)), rubrics, memory=False).modifications == []  # one group


def test_a_hack_and_a_mastered_reward_in_one_step_add_the_penalty_and_retire_the_reward():
    update = ask(healthy(PADDED, ("shows_reasoning", 1.0, 3)), SEED)
    assert update.strategy is Strategy.CORRECTIVE
    assert [(m.action, m.rubric_id or m.rubric.id) for m in update.modifications] == [
        ("add", "no_padding"),
        ("remove", "shows_reasoning"),
    ]
