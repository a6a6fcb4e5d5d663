"""Rubric-ARM training as Redis holds it: a run's preference pairs, its phase plan, and each step's phase.

Shared by the arm service, `rubricd arm`, `rubricd status` and the dashboard: `read_preferences` turns a
preference set (JSONL: prompt, chosen, rejected, optional reference and id) into labelled comparisons grouped by
prompt; the frozen generators' rubric sets are kept once per prompt and generator version (`keep_frozen_set`);
`Phases` decides once per step, for every arm process, which model the step trains (state.decisions),
following the run's plan (`rubricd arm phases`, rubricd.messages.Plan) or the service's RUBRICD_ARM_* settings;
the decision whose step trains something else than the step before carries the `arm_phase` event: one event per
switch. The rules:
docs/researchers/rubric-arm.md, "Training the generator and the judge".
"""

import hashlib
import time
from collections.abc import Mapping
from typing import cast

import msgspec
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import (
    Comparison,
    Event,
    EventKind,
    InstanceKey,
    PhaseDecision,
    Plan,
    RolloutId,
    RubricSet,
)
from rubricd_services.runtime import events

from .decisions import StepDecisions


class PreferenceLine(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a preference set, the common JSONL shape of preference datasets."""

    prompt: str
    chosen: str
    rejected: str
    reference: str | None = None
    id: RolloutId | None = None


class ArmPrompt(msgspec.Struct, frozen=True, kw_only=True):
    """A preference prompt of a run and its labelled comparisons (the generator's reward judges them all)."""

    prompt_id: InstanceKey
    prompt: str
    reference: str | None = None
    comparisons: list[Comparison]


class InvalidPreferences(ValueError):
    """A preference set that cannot be imported; the message names the line and the field."""


_line_decoder = msgspec.json.Decoder(PreferenceLine)


def read_preferences(data: bytes, run_id: str, source: str = "preferences") -> list[ArmPrompt]:
    """The preference set's lines as labelled comparisons grouped by prompt (in the order first seen).

    A comparison's id is the line's `id`, or `<prompt id>-<n>` (its n-th pair); its prompt id the hash a rollout's
    instance key would be (rubricd.messages.instance_key). The chosen response is shown as A or as B by the id's
    hash, so a judge cannot learn a position from the labels. Raise InvalidPreferences naming `source`, the line
    and the field.
    """
    prompts: dict[str, ArmPrompt] = {}
    seen: set[str] = set()
    for n, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = _line_decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise InvalidPreferences(f"{source}:{n}: {e}") from None
        prompt_id = prompt_key(line.prompt)
        found = prompts.get(prompt_id)
        comparison_id = line.id or f"{prompt_id}-{len(found.comparisons) if found else 0}"
        if comparison_id in seen:
            raise InvalidPreferences(f"{source}:{n}: id {comparison_id!r} appears twice - at `$.id`")
        seen.add(comparison_id)
        try:
            comparison = msgspec.convert(_comparison(run_id, comparison_id, line), Comparison)
        except msgspec.ValidationError as e:
            raise InvalidPreferences(f"{source}:{n}: {e}") from None
        if found is None:
            prompts[prompt_id] = ArmPrompt(
                prompt_id=prompt_id, prompt=line.prompt, reference=line.reference, comparisons=[comparison]
            )
        else:
            found.comparisons.append(comparison)
    if not prompts:
        raise InvalidPreferences(f"{source}: no preference pair")
    return list(prompts.values())


def prompt_key(prompt: str) -> str:
    """A preference prompt's id: the instance key a rollout of that prompt gets (rubricd.messages.instance_key)."""
    return hashlib.sha256(prompt.encode()).hexdigest()[:16]


def _comparison(run_id: str, comparison_id: str, line: PreferenceLine) -> dict[str, object]:
    chosen_first = hashlib.sha256(comparison_id.encode()).digest()[0] % 2 == 0
    return {
        "run_id": run_id,
        "comparison_id": comparison_id,
        "prompt": line.prompt,
        "response_a": line.chosen if chosen_first else line.rejected,
        "response_b": line.rejected if chosen_first else line.chosen,
        "reference": line.reference,
        "label": "A" if chosen_first else "B",
    }


def explain(d: PhaseDecision) -> str:
    """One line: what the step trains, and why."""
    if d.why == "simultaneous":
        return "both models (simultaneous updates)"
    first, last = d.plan.span(d.step)
    return f"{d.training}: {'warm-up, ' if d.why == 'warm_up' else ''}steps {first}-{last}"


async def read_plan(redis: Redis, keys: Keys, run_id: str) -> Plan | None:
    """The run's own plan (`rubricd arm phases`), or None: the arm service's settings."""
    raw = cast(bytes | None, await redis.get(keys.arm_plan(run_id)))
    return None if raw is None else msgspec.json.decode(raw, type=Plan)


async def write_plan(redis: Redis, keys: Keys, run_id: str, plan: Plan) -> None:
    """Set the run's own plan; steps already decided keep their phase."""
    await redis.set(keys.arm_plan(run_id), msgspec.json.encode(plan))


async def read_decisions(redis: Redis, keys: Keys, run_id: str) -> dict[int, PhaseDecision]:
    """Every decided step of the run, in order."""
    return parse_decisions(cast(dict[bytes, bytes], await redis.hgetall(keys.arm_phases(run_id))))


def parse_decisions(fields: Mapping[bytes, bytes]) -> dict[int, PhaseDecision]:
    decided = {int(step): msgspec.json.decode(raw, type=PhaseDecision) for step, raw in fields.items()}
    return dict(sorted(decided.items()))


async def write_prompts(redis: Redis, keys: Keys, run_id: str, prompts: list[ArmPrompt]) -> None:
    """Replace the run's preference prompts with PROMPTS, and the index of their comparisons, in one transaction."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.delete(keys.arm_pairs(run_id), keys.arm_index(run_id))
        pipe.hset(keys.arm_pairs(run_id), mapping={p.prompt_id: msgspec.json.encode(p) for p in prompts})
        pipe.hset(
            keys.arm_index(run_id), mapping={c.comparison_id: p.prompt_id for p in prompts for c in p.comparisons}
        )
        await pipe.execute()


async def read_prompt(redis: Redis, keys: Keys, run_id: str, prompt_id: str) -> ArmPrompt | None:
    raw = cast(bytes | None, await redis.hget(keys.arm_pairs(run_id), prompt_id))
    return None if raw is None else msgspec.json.decode(raw, type=ArmPrompt)


async def read_prompts(redis: Redis, keys: Keys, run_id: str) -> list[ArmPrompt]:
    """The run's imported preference prompts, by prompt id."""
    fields = cast(dict[bytes, bytes], await redis.hgetall(keys.arm_pairs(run_id)))
    return [msgspec.json.decode(fields[k], type=ArmPrompt) for k in sorted(fields)]


async def read_comparison(
    redis: Redis, keys: Keys, run_id: str, comparison_id: str
) -> tuple[ArmPrompt, Comparison] | None:
    """The imported comparison and its prompt, or None."""
    indexed = cast(bytes | None, await redis.hget(keys.arm_index(run_id), comparison_id))
    found = None if indexed is None else await read_prompt(redis, keys, run_id, indexed.decode())
    comparison = next((c for c in found.comparisons if c.comparison_id == comparison_id), None) if found else None
    return None if found is None or comparison is None else (found, comparison)


async def read_frozen_sets(redis: Redis, keys: Keys, run_id: str, generator_model: str) -> dict[str, RubricSet]:
    """The rubric sets kept of the frozen generator `generator_model`, by prompt id (`rubricd arm dataset`)."""
    stored = cast(dict[bytes, bytes], await redis.hgetall(keys.arm_rubrics(run_id, generator_model)))
    return {k.decode(): wire.decode(v, RubricSet) for k, v in stored.items()}


async def read_frozen_set(
    redis: Redis, keys: Keys, run_id: str, generator_model: str, prompt_id: str
) -> RubricSet | None:
    """The prompt's rubric set kept of the frozen generator `generator_model`, or None: never written."""
    raw = cast(bytes | None, await redis.hget(keys.arm_rubrics(run_id, generator_model), prompt_id))
    return None if raw is None else wire.decode(raw, RubricSet)


async def keep_frozen_set(
    redis: Redis, keys: Keys, run_id: str, generator_model: str, prompt_id: str, rubric_set: RubricSet
) -> RubricSet:
    """Keep `rubric_set` as the frozen generator's for the prompt unless one is kept already (another command wrote
    it meanwhile): the one kept, which the judge's rows and rewards all read."""
    key = keys.arm_rubrics(run_id, generator_model)
    if await redis.hsetnx(key, prompt_id, wire.encode(rubric_set)):
        return rubric_set
    return wire.decode(cast(bytes, await redis.hget(key, prompt_id)), RubricSet)


class Phases:
    """The phase decisions of every run, in Redis (state.decisions: each read or made once per process)."""

    def __init__(self, redis: Redis, keys: Keys, plan: Plan, *, maxlen: int, service: str = "arm") -> None:
        """`plan`: a run's plan unless it has its own."""
        self.redis, self.keys, self.plan, self.service = redis, keys, plan, service
        self._decisions = StepDecisions(redis, PhaseDecision, keys.arm_phases, events=keys.events, maxlen=maxlen)

    async def decision(self, run_id: str, step: int) -> PhaseDecision:
        async def make() -> tuple[PhaseDecision, Event | None]:
            plan = await read_plan(self.redis, self.keys, run_id) or self.plan
            training, why = plan.training(step)
            decision = PhaseDecision(step=step, training=training, why=why, plan=plan, decided_at=time.time())
            before = await self.redis.hget(self.keys.arm_phases(run_id), str(step - 1)) if step > 0 else None
            previous = (
                msgspec.json.decode(before, type=PhaseDecision).training
                if before is not None
                else plan.training(step - 1)[0]
                if step > 0
                else None
            )
            if training == previous:
                return decision, None
            event = events.event(
                self.service,
                EventKind.ARM_PHASE,
                run_id=run_id,
                step=step,
                detail=explain(decision),
                training=training,
                previous=previous,
            )
            return decision, event

        return await self._decisions.get(run_id, step, make)
