"""The simulated query writer and updater (test/demo tool): answers depend on the summary and the rubrics."""

import msgspec

from rubricd.messages import Rubric, RubricKind, RubricSet, StepSummary, Strategy
from rubricd.messages.analyses import HackingPattern
from rubricd_services.common.llm import LLMClient
from rubricd_services.common.settings import LLMSettings
from rubricd_services.simulator import judging
from rubricd_services.simulator.updates import proposal, queries
from rubricd_services.updater.memory import MemoryQueries
from rubricd_services.updater.prompting import MemoryBudget, Prompts, query_writer_messages, updater_messages
from rubricd_services.updater.proposal import Limits, UpdateProposal, validate

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


def ask(summary: StepSummary, rubrics: list[Rubric]) -> UpdateProposal:
    messages = updater_messages(
        Prompts.load().updater, summary, RubricSet(run_id="run", version=1, rubrics=rubrics), None, None, Limits()
    )
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


async def test_the_running_simulator_answers_the_updater_agents_through_the_llm_client(simulator):
    base_url, _ = simulator
    messages = updater_messages(
        Prompts.load().updater, PADDED, RubricSet(run_id="run", version=1, rubrics=SEED), None, None, Limits()
    )
    async with LLMClient({"updater": LLMSettings(base_url=base_url, max_retries=0)}) as llm:
        got = (await llm.structured("updater", messages, UpdateProposal)).value
    assert [m.rubric.id for m in got.modifications] == ["no_padding"]
