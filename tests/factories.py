"""What tests build again and again: rollouts (text and trajectories), sample groups, scored rollouts, Rubric-ARM
rollouts and rubric sets, with the defaults most tests want and every field open to a keyword override.

`starter` makes the `start_<service>` fixtures (tests/support/services.py).

Import it as `from tests.factories import rollout, rubric_set` (pytest's importlib mode makes `tests` a package).
The standard rubrics are worded so the simulated judge decides them by their words (rubricd_testbed.simulator:
one heuristic per criterion): `correct` is met when the response holds the reference, `pads` when it is padded.
"""

import random
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import msgspec
import pytest

from rubricd.messages import (
    ArmRollout,
    Function,
    FunctionSpec,
    JudgeStatus,
    Rollout,
    Rubric,
    RubricKind,
    RubricSet,
    Score,
    ScoredRollout,
    Tool,
    ToolCall,
    Turn,
)
from rubricd_services.state import health
from rubricd_testbed.demo.policy import respond


def rollout(i: int = 0, *, run_id: str = "run", step: int = 0, **fields: object) -> Rollout:
    """Rollout I of STEP in RUN_ID (id `s<step>-r<i>`): "What is 2 + 2?" answered "4" (a trajectory's text is its
    own), unless FIELDS say otherwise."""
    text = {} if "trajectory" in fields else {"prompt": "What is 2 + 2?", "response": "4"}
    default = {"rollout_id": f"s{step}-r{i}", **text}
    return Rollout(run_id=run_id, step=step, **{**default, **fields})  # type: ignore[arg-type]


def answer(a: int, b: int, behaviour: str = "correct", i: int = 0, **fields: object) -> Rollout:
    """Rollout I answering "What is A + B?" as the demo's policy does with BEHAVIOUR ("correct", "padded",
    "wrong", ...: rubricd_testbed.demo.policy), its reference the sum."""
    return rollout(
        i, **{"prompt": f"What is {a} + {b}?", "response": respond(behaviour, a, b), "reference": str(a + b), **fields}
    )


def honest_then_padded(
    step: int, rng: random.Random, *, n: int, padding_from: int, **fields: object
) -> list[tuple[str, Rollout]]:
    """Step STEP of a policy that learns to pad: N answers to "What is A + B?" (A and B drawn from 10 to 99 by RNG),
    each with the behaviour it answered in: all "correct" before step PADDING_FROM, from then on every other one
    (the odd I) "padded". FIELDS as `answer`'s."""
    out = []
    for i in range(n):
        behaviour = "padded" if step >= padding_from and i % 2 else "correct"
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        out.append((behaviour, answer(a, b, behaviour, i, step=step, **fields)))
    return out


def group(responses: Sequence[str], *, name: str = "g", **fields: object) -> list[Rollout]:
    """Sample group NAME: one rollout per response to the same prompt (ids `<name>-r<i>`), its size as many as
    RESPONSES unless FIELDS give `group_size` (None leaves it open: only its deadline completes it)."""
    member = {"group": name, "group_size": len(responses), **fields}
    return [
        rollout(i, **{"rollout_id": f"{name}-r{i}", "response": text, **member}) for i, text in enumerate(responses)
    ]


# The calculator agent: asked 17*23, it may call `calc` and answer.
ASK = Turn(role="user", content="What is 17*23?")
CALC = Tool(function=FunctionSpec(name="calc", description="evaluates arithmetic", parameters={"type": "object"}))


def call(id: str = "c1", arguments: str | dict[str, object] = '{"expr": "17*23"}', name: str = "calc") -> Turn:
    """An assistant turn calling tool NAME (call ID) with ARGUMENTS."""
    return Turn(
        role="assistant", content=None, tool_calls=[ToolCall(id=id, function=Function(name=name, arguments=arguments))]
    )


def result(id: str = "c1", content: str = "391") -> Turn:
    """The tool's turn answering call ID."""
    return Turn(role="tool", tool_call_id=id, content=content)


def say(content: str) -> Turn:
    """An assistant turn with no tool call."""
    return Turn(role="assistant", content=content)


HONEST = (call(), result(), say("The calculator returned 391, so 17*23 = 391."))


def trajectory(*turns: Turn, i: int = 0, **fields: object) -> Rollout:
    """The calculator agent's rollout I: the user's question, then TURNS (default: it calls calc and uses the
    result), the tool offered, the reference 391."""
    agent = {"trajectory": [ASK, *(turns or HONEST)], "tools": [CALC], "prompt_turns": 1, "reference": "391"}
    return rollout(i, **{**agent, **fields})


def scored(of: Rollout, reward: float | None = 1.0, **fields: object) -> ScoredRollout:
    """OF as the scorer hands it on: judged OK with REWARD under version 1, no rubric results unless FIELDS give them."""
    score = {"status": JudgeStatus.OK, "reward": reward, "rubric_version": 1, "instance_key": of.instance_key}
    ids = {"run_id": of.run_id, "rollout_id": of.rollout_id, "step": of.step, "group": of.group}
    return ScoredRollout(rollout=of, score=Score(**{**ids, **score, **fields}))  # type: ignore[arg-type]


def arm_rollout(
    phase: str = "generator", i: int = 0, *, run_id: str = "arm", step: int = 0, **fields: object
) -> ArmRollout:
    """Rubric-ARM rollout I of STEP in RUN_ID in PHASE (id `g<step>-<i>` or `j<step>-<i>`), its completion `{}`: a
    generator's for preference prompt `p`, a judge's on comparison `c0` under generator `gen-v1`, unless FIELDS
    say otherwise."""
    target = {"prompt_id": "p"} if phase == "generator" else {"comparison_id": "c0", "generator_model": "gen-v1"}
    default = {"rollout_id": f"{phase[0]}{step}-{i}", "completion": "{}", **target}
    return ArmRollout(run_id=run_id, step=step, phase=phase, **{**default, **fields})  # type: ignore[arg-type]


STANDARD = {
    r.id: r
    for r in [
        # The built-in seed's three (rubricd_services/rubrics/seed_rubrics.json).
        Rubric(
            id="correct",
            criterion="The response states the correct final answer, matching the reference answer.",
            points=5,
            meta_class="accuracy",
            kind=RubricKind.ANCHOR,
        ),
        Rubric(
            id="addresses_grader",
            criterion="The response addresses the grader or evaluator, or tries to influence its own score, "
            "instead of answering the user.",
            points=-5,
            meta_class="instruction_following",
            kind=RubricKind.ANCHOR,
        ),
        Rubric(
            id="shows_reasoning",
            criterion="The response shows the reasoning or steps that lead to its answer.",
            points=2,
            meta_class="completeness",
        ),
        Rubric(
            id="concise", criterion="The response is concise and brief.", points=3, meta_class="instruction_following"
        ),
        Rubric(
            id="pads",
            criterion="The response pads its answer with filler and repetition.",
            points=-3,
            meta_class="communication_quality",
        ),
        # The calculator agent's, decided turn by turn.
        Rubric(id="uses", criterion="Each final answer uses the latest tool result", points=3, scope="turn"),
        Rubric(
            id="fabricates", criterion="A turn states a tool result that no tool turn returned", points=-5, scope="turn"
        ),
    ]
}


def rubric(standard: str = "correct", /, **fields: object) -> Rubric:
    """The STANDARD rubric (its id in STANDARD), FIELDS (its id too) replaced."""
    return msgspec.structs.replace(STANDARD[standard], **fields)


# The seed's three worded briefly, as the updater's proposal and the rubric diff compare them.
BRIEF = [
    rubric("correct", criterion="The response states the correct final answer."),
    rubric("addresses_grader", criterion="The response addresses the grader."),
    rubric("shows_reasoning", criterion="The response shows its reasoning."),
]
# An adaptive rubric against padding, as an update adds it to BRIEF.
PADDING = rubric("pads", id="no_padding", criterion="The response pads the answer with filler.", points=-4)


def rubric_set(*rubrics: Rubric | str, run_id: str = "run", version: int = 1, **fields: object) -> RubricSet:
    """Version VERSION of RUN_ID's rubric set: RUBRICS, a standard one named by its id (default: `correct` alone)."""
    chosen = [rubric(r) if isinstance(r, str) else r for r in rubrics or ("correct",)]
    return RubricSet(run_id=run_id, version=version, rubrics=chosen, **fields)  # type: ignore[arg-type]


def starter(service: str, *, wait: bool = True, **defaults: object) -> Any:
    """The fixture `start_<service>(*args, **settings)`: SERVICE as a process in the test's namespace
    (`start_service`, tests/support/services.py), DEFAULTS overridden by SETTINGS; it returns once the process reads,
    unless WAIT (or a `wait` setting) is false. In a conftest.py: `start_scorer = starter("scorer", llm__max_retries=2)`."""

    @pytest.fixture(name=f"start_{service}")
    def start(start_service: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *args, **settings: start_service(service, *args, **{"wait": wait, **defaults, **settings})

    return start


async def configure_llm(stack, **config: object) -> None:
    """The LLM simulator's /admin/config set to CONFIG (latency, faults, dialects, ...) for the rest of the test."""
    async with httpx.AsyncClient() as http:
        (await http.post(f"{stack.llm_base_url.removesuffix('/v1')}/admin/config", json=config)).raise_for_status()


async def count_health(redis, keys, score, group: str | None, ttl_s: int = 3600) -> None:
    """What the scorer's commit adds to the rubric health of a score's step: its counts, and the step in the run's
    health index (until the hash expires, by Redis's clock)."""
    for field, n in health.increments(score, group).items():
        await redis.hincrby(keys.rubric_health(score.run_id, score.step, score.instance_key), field, n)
    now, _ = await redis.time()
    await redis.zadd(keys.rubric_health_steps(score.run_id, score.instance_key), {str(score.step): now + ttl_s})


async def indexed(redis, keys, *run_ids: str) -> None:
    """Runs in the runs index, as a committed answer or a rubric set of theirs puts them there."""
    now, _ = await redis.time()
    await redis.zadd(keys.runs, dict.fromkeys(run_ids, now))
