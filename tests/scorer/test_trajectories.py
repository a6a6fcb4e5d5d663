"""Trajectories through the scorer, against the real Redis and the LLM simulator: a trajectory is judged turn
by turn; a malformed one is dead-lettered and answered, naming the turn and the field."""

import msgspec
import pytest

from rubricd import RubricdClient, wire
from rubricd.messages import (
    DeadLetter,
    Function,
    FunctionSpec,
    JudgeStatus,
    Rollout,
    Rubric,
    Score,
    Tool,
    ToolCall,
    Turn,
)
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import rollout, rubric_set

pytestmark = pytest.mark.integration

RUBRICS = [
    Rubric(id="correct", criterion="The final answer is correct, matching the reference.", points=5, kind="anchor"),
    Rubric(
        id="fabricates", criterion="A turn states a tool result that no tool turn returned", points=-5, scope="turn"
    ),
    Rubric(id="uses", criterion="Each final answer uses the latest tool result", points=3, scope="turn"),
]
ASK = Turn(role="user", content="What is 17*23?")
CALL = Turn(
    role="assistant", tool_calls=[ToolCall(id="c1", function=Function(name="calc", arguments='{"e": "17*23"}'))]
)


def agent(rollout_id: str, *turns: Turn) -> Rollout:
    return rollout(
        run_id="agents",
        rollout_id=rollout_id,
        trajectory=[ASK, *turns],
        tools=[Tool(function=FunctionSpec(name="calc"))],
        prompt_turns=1,
        reference="391",
    )


async def test_a_trajectory_is_judged_turn_by_turn(stack, redis, keys, start_scorer):
    start_scorer()
    assert await RubricStore(redis, keys).publish(rubric_set(*RUBRICS, run_id="agents"))
    honest = agent(
        "honest", CALL, Turn(role="tool", tool_call_id="c1", content="391"), Turn(role="assistant", content="391")
    )
    invented = agent("invented", Turn(role="assistant", content="The calculator returned 391, so: 391."))
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        good, bad = await client.score([honest, invented], timeout=30)
    assert good.status is JudgeStatus.OK and bad.status is JudgeStatus.OK
    assert [(t.turn, t.points, t.met) for t in good.turns] == [(1, 0.0, []), (3, 3.0, ["uses"])]
    assert [(t.turn, t.points, t.met) for t in bad.turns] == [(1, -5.0, ["fabricates"])]
    assert good.reward == 1.0 and bad.reward == 0.0  # (5 + 3) / 8; (5 - 5) / 8
    kept = {r.rubric_id: r for r in bad.results}
    assert kept["fabricates"].met_turns == [1] and "[simulator]" in kept["fabricates"].explanation


MALFORMED = {
    "unknown-role": ({"trajectory": [{"role": "robot", "content": "hi"}]}, "`$.trajectory[0].role`"),
    "orphan-tool": (
        {"trajectory": [{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "c9", "content": "4"}]},
        "trajectory[1].tool_call_id: 'c9' answers no earlier tool call",
    ),
    "user-calls": (
        {"trajectory": [{"role": "user", "tool_calls": [{"function": {"name": "calc", "arguments": "{}"}}]}]},
        "trajectory[0].tool_calls: only an assistant turn calls tools",
    ),
    "content-type": ({"trajectory": [{"role": "assistant", "content": 42}]}, "`$.trajectory[0].content`"),
    "no-name": (
        {"trajectory": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]},
        "`$.trajectory[0].tool_calls[0].function`",
    ),
    "prompt-turns": ({"trajectory": [{"role": "user", "content": "q"}], "prompt_turns": 2}, "prompt_turns 2 is beyond"),
    "too-many-turns": ({"trajectory": [{"role": "user", "content": "q"}] * 1025}, "`$.trajectory`"),
}


async def test_malformed_trajectories_are_dead_lettered_and_answered_naming_the_turn_and_field(
    stack, redis, keys, start_scorer, eventually
):
    start_scorer()
    reply_to = keys.replies("trainer-1")
    for rollout_id, (broken, _) in MALFORMED.items():
        raw = {"run_id": "agents", "rollout_id": rollout_id, "step": 0, "reply_to": reply_to, **broken}
        await redis.xadd(keys.rollouts, {wire.FIELD: msgspec.json.encode(raw)})

    async def answered() -> bool:
        return await redis.xlen(reply_to) >= len(MALFORMED)

    await eventually(answered, f"{len(MALFORMED)} replies on {reply_to}")
    replies = {s.rollout_id: s for s in (wire.decode(wire.payload(f), Score) for _, f in await redis.xrange(reply_to))}
    letters = [msgspec.json.decode(f[b"__data__"], type=DeadLetter) for _, f in await redis.xrange(keys.dead_letters)]
    assert len(letters) == len(MALFORMED)
    for rollout_id, (_, why) in MALFORMED.items():
        score = replies[rollout_id]
        print(f"{rollout_id}: {score.error}")
        assert score.status is JudgeStatus.REJECTED and score.reward is None
        assert score.error.startswith("malformed rollout") and why in score.error
