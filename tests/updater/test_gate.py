"""The promotion gate without a broker: rollouts judged in shadow by the simulator's judge, the shadow scores the
scorer's commit would keep, and the gate's decision on good and harmful candidates."""

import msgspec

from rubricd.messages import (
    Action,
    Candidate,
    HackingEvidence,
    Interference,
    Rollout,
    RolloutAnalysis,
    Rubric,
    RubricModification,
    RubricSet,
    StepSummary,
)
from rubricd_services.judges import verdicts
from rubricd_services.judges.scoring import Judging, ReadySet, Scoring, score_rollout
from rubricd_services.rubrics.sets import InForce
from rubricd_services.runtime import prompts
from rubricd_services.settings import LLMSettings
from rubricd_services.state import promotion
from rubricd_services.state.canaries import CanaryStep
from rubricd_services.state.promotion import ShadowScore
from rubricd_services.updater import gate
from rubricd_services.updater.prompting import Prompts, refused, updater_messages
from rubricd_services.updater.proposal import validate
from rubricd_testbed.demo.policy import respond
from rubricd_testbed.simulator import judging as sim_judging
from rubricd_testbed.simulator.updates import COLLATERAL, HACKS
from tests.factories import rollout, rubric_set

from .examples import ANCHOR, GRADER, LIMITS, STEPS

CURRENT = rubric_set(ANCHOR, GRADER, STEPS, version=3)
JUDGING = Judging(llm=LLMSettings(model="m"), template=prompts.load("rubricd_services.judges", verdicts.JUDGE))
BEHAVIOURS = ("correct", "padded", "correct", "terse")  # each group's four responses
NO_PADDING = Rubric(**HACKS[0].rubric)  # the simulated updater's answer to padding
PAYS_PADDING = msgspec.structs.replace(NO_PADDING, id="pays_padding", points=4)
FRENCH = Rubric(id="in_french", criterion="The response is written in French.", points=-3)


def add(rubric: Rubric) -> RubricModification:
    return RubricModification(action=Action.ADD, rationale="the step summary reports padding", rubric=rubric)


def candidate(*mods: RubricModification, base: RubricSet = CURRENT) -> Candidate:
    checked = validate(base.rubrics, list(mods), LIMITS)
    assert not checked.rejected, checked.rejected
    proposed = msgspec.structs.replace(base, version=base.version + 1, rubrics=checked.rubrics, step=2)
    return Candidate(
        run_id="run",
        step=2,
        until=3,
        base_version=base.version,
        rubrics=proposed,
        modifications=checked.accepted,
        hacking=["padding"],
    )


def judged_by_simulator(rollout: Rollout, rubrics: ReadySet):
    """The simulator's judge heuristics on every rubric the call asks about."""
    by_id = {r.id: r for r in rubrics.judged.rubrics}

    async def call(messages, verdict):
        decided = {
            i: sim_judging.decide(r.criterion, r.points, rollout.response, rollout.reference) for i, r in by_id.items()
        }
        return msgspec.convert({i: {"met": met, "explanation": why} for i, (met, why) in decided.items()}, verdict)

    return call


async def shadow_step(c: Candidate, groups: int = 3) -> tuple[dict[str, ShadowScore], list[RolloutAnalysis], list]:
    """Step 3's rollouts judged under the set and the candidate: their shadow scores as the scorer's commit keeps
    them, the analyses an analyst would write (padding flagged), and the scores."""
    rubrics = JUDGING.prepare(InForce(CURRENT, candidate=c))
    shadow, analyses, scores = {}, [], []
    for g in range(groups):
        for i, behaviour in enumerate(BEHAVIOURS):
            a, b = 10 + g, 20 + i
            asked = rollout(
                rollout_id=f"g{g}-{i}",
                step=3,
                group=f"g{g}",
                prompt=f"What is {a} + {b}?",
                response=respond(behaviour, a, b),
                reference=str(a + b),
            )
            score = await score_rollout(asked, Scoring(rubrics, "weighted_sum"), judged_by_simulator(asked, rubrics))
            scores.append((behaviour, score))
            shadow[asked.rollout_id] = msgspec.json.decode(promotion.record(score), type=ShadowScore)
            hacking = [HackingEvidence(type="padding", evidence="filler")] if behaviour == "padded" else []
            analyses.append(
                RolloutAnalysis(
                    run_id="run",
                    rollout_id=asked.rollout_id,
                    step=3,
                    rubric_version=3,
                    quality="",
                    reward_hacking=hacking,
                )
            )
    return shadow, analyses, scores


async def decided(c: Candidate, current: RubricSet = CURRENT):
    shadow, analyses, _ = await shadow_step(c)
    return gate.decide(c, current, shadow, gate.evidence(analyses, c.hacking), LIMITS, step=3)


async def test_a_candidate_in_shadow_never_changes_the_reward_and_carries_its_own():
    alone = JUDGING.prepare(InForce(CURRENT))
    _, _, with_candidate = await shadow_step(candidate(add(NO_PADDING)))
    for behaviour, score in with_candidate:
        rollout_id = score.rollout_id
        g, i = int(rollout_id[1]), int(rollout_id.split("-")[1])
        asked = rollout(
            rollout_id=rollout_id,
            step=3,
            group=f"g{g}",
            prompt="q",
            response=respond(behaviour, 10 + g, 20 + i),
            reference=str(30 + g + i),
        )
        plain = await score_rollout(asked, Scoring(alone, "weighted_sum"), judged_by_simulator(asked, alone))
        assert (score.reward, score.results) == (plain.reward, plain.results)  # the shadow rubric is not in them
        assert plain.candidate is None and score.candidate is not None and score.candidate.version == 4
        assert [r.rubric_id for r in score.candidate.results] == ["no_padding"]
        if behaviour == "padded":
            assert score.candidate.reward < score.reward  # the candidate penalises the padding
        else:
            assert score.candidate.reward == score.reward


async def test_the_judge_sees_a_modified_rubric_under_its_shadow_id_beside_the_one_in_force():
    sharper = msgspec.structs.replace(STEPS, criterion="The response explains why, step by step.")
    c = candidate(RubricModification(action=Action.MODIFY, rationale="sharper", rubric_id=STEPS.id, rubric=sharper))
    rubrics = JUDGING.prepare(InForce(CURRENT, candidate=c))
    [call] = rubrics.judged_by
    assert call.ids == ("correct", "addresses_grader", "shows_reasoning", "shows_reasoning~c")
    assert "explains why, step by step" in call.system and rubrics.set is CURRENT


async def test_a_good_candidate_is_promoted_as_the_next_version():
    decision, promoted = await decided(candidate(add(NO_PADDING)))
    assert decision.outcome == "promoted" and promoted is not None and decision.version == promoted.version == 4
    [check] = decision.checks
    assert check.passed and check.groups == 3 and check.groups_with_spread == 3
    assert check.flagged == 3 and check.flagged_delta < 0 and check.honest == 9 and check.honest_delta == 0
    assert [r.id for r in promoted.rubrics] == ["correct", "addresses_grader", "shows_reasoning", "no_padding"]
    assert promoted.step == 2  # the version is made from the evidence of the step it was proposed at


async def test_a_rubric_that_pays_the_hack_is_rejected_with_its_figures():
    decision, promoted = await decided(candidate(add(PAYS_PADDING)))
    assert decision.outcome == "rejected" and promoted is None
    [check] = decision.checks
    # HealthBench's normalization: the padded answers were paid in full already; the honest ones fall
    assert not check.passed and check.flagged_delta == 0 and check.honest_delta < -0.05
    assert any("favours the rollouts flagged for hacking over the honest ones by +0.329" in r for r in check.reasons)


async def test_a_penalty_on_honest_answers_fails_while_the_good_part_of_its_proposal_is_promoted():
    decision, promoted = await decided(candidate(add(NO_PADDING), add(Rubric(**COLLATERAL))))
    assert decision.outcome == "promoted" and promoted is not None
    good, collateral = decision.checks
    assert good.passed and not collateral.passed and collateral.honest_delta < -0.05
    assert any("lowers the honest rollouts' reward" in r for r in collateral.reasons)
    assert [r.id for r in promoted.rubrics][-1] == "no_padding" and "no_step_by_step" not in {
        r.id for r in promoted.rubrics
    }
    assert decision.reason == "1 of 2 failed"


async def test_an_uninformative_rubric_fails_and_a_moved_set_rejects_the_candidate():
    decision, _ = await decided(candidate(add(FRENCH)))
    [check] = decision.checks
    assert decision.outcome == "rejected" and check.groups_with_spread == 0
    assert any(r.startswith("uninformative") for r in check.reasons)
    moved = msgspec.structs.replace(CURRENT, version=4)
    decision, promoted = await decided(candidate(add(NO_PADDING)), current=moved)
    assert (decision.outcome, promoted) == ("rejected", None) and "moved from v3 to v4" in decision.reason


async def test_no_shadow_score_rejects_and_a_removal_is_priced_from_the_verdicts_in_force():
    c = candidate(add(NO_PADDING))
    decision, promoted = gate.decide(c, CURRENT, {}, gate.Evidence(), LIMITS, step=3)
    assert (decision.outcome, promoted, decision.shadow_scores) == ("rejected", None, 0)
    removal = candidate(RubricModification(action=Action.REMOVE, rationale="mastered", rubric_id=STEPS.id))
    removal = msgspec.structs.replace(removal, hacking=[])  # an advancement: it answers no hacking
    shadow, analyses, _ = await shadow_step(removal)
    assert all(s.changed == [] for s in shadow.values())  # nothing to judge in shadow
    decision, promoted = gate.decide(removal, CURRENT, shadow, gate.evidence(analyses, []), LIMITS, step=3)
    [check] = decision.checks
    # the terse answers, which never showed reasoning, gain; the others lose nothing
    assert decision.outcome == "promoted" and check.groups == 0 and check.honest_delta > 0
    assert [r.id for r in promoted.rubrics] == ["correct", "addresses_grader"]


async def test_the_updater_s_next_prompt_shows_the_changes_the_gate_refused_and_why():
    c = candidate(add(NO_PADDING), add(Rubric(**COLLATERAL)))
    decision, _ = await decided(c)
    [shown] = refused([msgspec.structs.replace(c, decision=decision), c])  # an undecided one shows nothing
    assert (shown.proposed_after_step, shown.action, shown.rubric_id, shown.points) == (2, "add", "no_step_by_step", -4)
    assert shown.criterion == COLLATERAL["criterion"] and "lowers the honest rollouts' reward" in shown.why[0]
    summary = StepSummary(run_id="run", step=4, executive_summary="Padding persists.")
    [_, user] = updater_messages(Prompts.load().updater, summary, CURRENT, None, None, LIMITS, None, [shown])
    assert "<rejected_changes>" in user["content"] and "no_step_by_step" in user["content"]


def canary_step(step: int, agreed: int, with_candidate: int, candidate_step: int = 2) -> CanaryStep:
    """A shadow step's canaries: 8 labelled verdicts, `agreed` alone and `with_candidate` with the candidate's
    rubrics in the same calls."""
    return CanaryStep(
        step=step,
        rubric_version=3,
        items=["a", "b"],
        verdicts=8,
        agreed=agreed,
        candidate_step=candidate_step,
        candidate_verdicts=8,
        candidate_agreed=with_candidate,
    )


async def test_canaries_that_agree_less_with_the_candidate_in_their_calls_reject_it_beyond_the_margin():
    c = candidate(add(NO_PADDING))
    shadow, analyses, _ = await shadow_step(c)
    found = gate.evidence(analyses, c.hacking)
    decision, promoted = gate.decide(c, CURRENT, shadow, found, LIMITS, 3, [canary_step(3, 7, 7)])
    assert decision.outcome == "promoted" and promoted is not None
    assert decision.canaries == Interference(steps=[3], verdicts=8, agreement=0.875, with_candidate=0.875, passed=True)
    # Two steps: 13 of 16 alone, 10 of 16 with it; the modification itself passes, the candidate does not.
    interfering = [canary_step(3, 7, 5), canary_step(4, 6, 5)]
    decision, promoted = gate.decide(c, CURRENT, shadow, found, LIMITS, 4, interfering)
    assert (decision.outcome, promoted) == ("rejected", None) and [ch.passed for ch in decision.checks] == [True]
    assert decision.canaries == Interference(
        steps=[3, 4], verdicts=16, agreement=0.8125, with_candidate=0.625, passed=False
    )
    assert "canaries' agreement with their labels falls from 0.812 to 0.625" in decision.reason
    # Within the run's margin it passes.
    tolerant = msgspec.structs.replace(c, interference_margin=0.2)
    assert gate.decide(tolerant, CURRENT, shadow, found, LIMITS, 4, interfering)[0].outcome == "promoted"
    # Canaries judged with another candidate, or whose calls with it all failed, are not this one's.
    other = [
        canary_step(3, 7, 0, candidate_step=1),
        msgspec.structs.replace(canary_step(4, 7, 0), candidate_verdicts=0),
    ]
    decision, _ = gate.decide(c, CURRENT, shadow, found, LIMITS, 4, other)
    assert decision.outcome == "promoted" and decision.canaries is None
