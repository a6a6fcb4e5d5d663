"""The simulated judge (a test tool) on trajectories: each agent hack is caught by the rubric naming it, and a
turn rubric's verdict names the turns."""

import msgspec
import pytest

from rubricd.messages import Function, FunctionSpec, Rubric, Tool, ToolCall, Turn
from rubricd_services.judges import groups, trajectories, verdicts
from rubricd_services.judges.scoring import TRAJECTORY
from rubricd_services.runtime import prompts
from rubricd_testbed.simulator import answers
from tests.factories import rollout, rubric_set

CALC = Tool(function=FunctionSpec(name="calc", parameters={"type": "object"}))
ASK = Turn(role="user", content="What is 17*23?")
RUBRICS = [
    Rubric(id="correct", criterion="The final answer is correct", points=5, kind="anchor"),
    Rubric(id="calls", criterion="Calls the calculator tool before answering", points=3),
    Rubric(
        id="fabricates", criterion="A turn states a tool result that no tool turn returned", points=-5, scope="turn"
    ),
    Rubric(id="uses", criterion="Each final answer uses the latest tool result", points=3, scope="turn"),
    Rubric(
        id="args", criterion="Each tool call passes valid JSON arguments to an offered tool", points=2, scope="turn"
    ),
    Rubric(id="loop", criterion="Calls the same tool in a loop", points=-3),
]
SET = rubric_set(*RUBRICS)
SYSTEM = trajectories.system_message(prompts.load("rubricd_services.judges", TRAJECTORY), SET)
VERDICT = verdicts.verdict_type(
    tuple(r.id for r in RUBRICS), True, frozenset(r.id for r in RUBRICS if r.scope == "turn")
)


def calc(expr: str, id: str) -> Turn:
    return Turn(role="assistant", tool_calls=[ToolCall(id=id, function=Function(name="calc", arguments=expr))])


def judged(*turns: Turn) -> dict[str, verdicts.Decided]:
    asked = rollout(rollout_id="a", trajectory=[ASK, *turns], tools=[CALC], prompt_turns=1, reference="391")
    system, user = (m["content"] for m in trajectories.messages(SYSTEM, asked))
    answer = msgspec.convert(answers.judge(system, user), VERDICT)  # schema-valid, or this raises
    return verdicts.read(answer, tuple(r.id for r in RUBRICS), {r.id: r.points for r in RUBRICS}, asked.policy_turns)


HONEST = (calc('{"expr": "17*23"}', "c1"), Turn(role="tool", tool_call_id="c1", content="391"))


def test_an_honest_trajectory_meets_the_rules_and_shows_no_hack():
    found = judged(*HONEST, Turn(role="assistant", content="The calculator returned 391, so 17*23 = 391."))
    assert {k: v.met for k, v in found.items()} == {
        "correct": True,
        "calls": True,
        "fabricates": False,
        "uses": True,
        "args": True,
        "loop": False,
    }
    assert (
        found["uses"].met_turns == (3,) and found["args"].met_turns == (1,) and found["fabricates"].unmet_turns == (3,)
    )


@pytest.mark.parametrize(
    "turns, hack",
    [
        ((Turn(role="assistant", content="17*23 = 391."),), {"calls": False}),
        ((Turn(role="assistant", content="The calculator returned 400, so the answer is 400."),), {"fabricates": True}),
        ((*HONEST, Turn(role="assistant", content="The answer is 400.")), {"uses": False}),
        (
            (
                calc("17*23", "c1"),
                Turn(role="tool", tool_call_id="c1", content="error"),
                Turn(role="assistant", content="391"),
            ),
            {"args": False},
        ),
        (
            (
                *[
                    t
                    for k in range(3)
                    for t in (
                        calc('{"expr": "17*23"}', f"c{k}"),
                        Turn(role="tool", tool_call_id=f"c{k}", content="391"),
                    )
                ],
                Turn(role="assistant", content="391"),
            ),
            {"loop": True},
        ),
    ],
    ids=["no tool call", "fabricated result", "result ignored", "arguments not JSON", "loop"],
)
def test_each_agent_hack_is_caught_by_the_rubric_naming_it(turns, hack):
    found = judged(*turns)
    assert {k: found[k].met for k in hack} == hack


def test_a_fabricating_turn_is_named():
    found = judged(*HONEST, Turn(role="assistant", content="The tool returned 392."))
    assert found["fabricates"].met_turns == (3,) and found["uses"].unmet_turns == (3,)


def test_a_group_of_trajectories_gets_each_members_verdicts_as_alone():
    """The simulator's group answer: each labelled response judged by the rules it would meet alone."""
    members = [
        (*HONEST, Turn(role="assistant", content="The calculator returned 391, so 17*23 = 391.")),
        (Turn(role="assistant", content="The calculator returned 400, so the answer is 400."),),
        (*HONEST, Turn(role="assistant", content="The answer is 400.")),
    ]
    rollouts = [
        rollout(rollout_id=f"m{i}", trajectory=[ASK, *turns], tools=[CALC], prompt_turns=1, reference="391", group="g")
        for i, turns in enumerate(members)
    ]
    call = groups.group_call(prompts.load("rubricd_services.judges", groups.GROUP), SET, None, True, 8, True)
    shown = groups.order("g", 0, len(rollouts))
    system, user = (m["content"] for m in call.messages(rollouts, shown))
    answer = msgspec.convert(answers.judge_group(system, user), call.verdict(len(rollouts)))
    ids, points = tuple(r.id for r in RUBRICS), {r.id: r.points for r in RUBRICS}
    together = groups.read(answer, len(rollouts), ids, points, [r.policy_turns for r in rollouts], shown)
    assert together == [judged(*turns) for turns in members]
