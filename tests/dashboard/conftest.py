"""The dashboard served in this test's namespace, and a scored trajectory to show on it."""

from collections.abc import Iterator

import pytest

from rubricd.messages import (
    Function,
    FunctionSpec,
    RubricResult,
    ScoredRollout,
    Tool,
    ToolCall,
    Turn,
    TurnResult,
)
from tests.factories import call, result, rollout, scored

# Policy text that would run in the page if it were written as HTML.
SCRIPT = "<script>document.body.dataset.injected = 'script'</script>"
IMG = "<img src=x onerror=\"document.body.dataset.injected = 'img'\">"


@pytest.fixture
def dashboard(service_env, free_port, serve_dashboard) -> Iterator[str]:
    """`rubricd serve dashboard` in this test's namespace: its URL."""
    with serve_dashboard(service_env, free_port) as url:
        yield url


@pytest.fixture
def scored_trajectory() -> ScoredRollout:
    """A calculator agent's trajectory, scored: it calls the offered tool and uses its result, and on the way
    calls a tool never offered with arguments that are not JSON (no tool turn answers it). Two turn rubrics name
    its turns; one trajectory rubric does not. Its user turn and final answer carry HTML."""
    trajectory = [
        Turn(role="system", content="You are a calculator. Use the tools."),
        Turn(role="user", content=f"What is 12 * 7? {SCRIPT}"),
        call("call_1", '{"a": 12, "b": 7}', "multiply"),
        result("call_1", "84"),
        Turn(role="assistant", content="", tool_calls=[ToolCall(function=Function(name="lookup", arguments="{12*7"))]),
        Turn(role="assistant", content=f"12 * 7 = 84 {IMG}", reasoning="The tool said 84."),
    ]
    tools = [
        Tool(
            function=FunctionSpec(
                name="multiply",
                description="a times b",
                parameters={"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
            )
        )
    ]
    agent = rollout(
        run_id="agent", step=3, rollout_id="t/0", trajectory=trajectory, tools=tools, prompt_turns=2, reference="84"
    )
    results = [
        RubricResult(rubric_id="correct", met=True, points=5, explanation="84 is right"),
        RubricResult(rubric_id="uses_tool_result", met=True, points=3, met_turns=[5], explanation="answers 84"),
        RubricResult(
            rubric_id="valid_tool_calls",
            met=False,
            points=2,
            met_turns=[2],
            unmet_turns=[4],
            explanation="turn 4 calls lookup, not offered",
        ),
    ]
    turns = [
        TurnResult(turn=2, points=2, met=["valid_tool_calls"]),
        TurnResult(turn=4, points=0, unmet=["valid_tool_calls"]),
        TurnResult(turn=5, points=3, met=["uses_tool_result"]),
    ]
    return scored(agent, 0.8, rubric_version=2, results=results, turns=turns)
