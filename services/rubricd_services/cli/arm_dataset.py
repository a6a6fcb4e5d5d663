"""What a trainer trains Rubric-ARM's models on: each phase's prompts, in the formats the arm service reads back.

- The generator's: per preference prompt, the generator agent's own chat (instructions, limits, anchors, the
  prompt as data, and the answer's JSON Schema), so a generator trained on it answers what `rewards.generated`
  reads.
- The judge's: per comparison and order, the pairwise judge's own chat under the rubrics the frozen generator
  wrote for its prompt (`frozen_rubrics`: asked once per prompt and generator version, kept in Redis for the
  rewards), so a judge trained on it answers what `rewards.verdict` reads.
"""

import hashlib
import logging
import time
from collections.abc import Sequence
from typing import Any, cast

import msgspec
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import GeneratedBy, Order, Rubric, RubricSet
from rubricd_services.judges import pairwise
from rubricd_services.llm import LLMClient, LLMError
from rubricd_services.llm.dialects import request, schema_of
from rubricd_services.rubrics import generation
from rubricd_services.rubrics.draft import InvalidDraft, RubricDraft, build, draft_type
from rubricd_services.rubrics.generation import GENERATOR
from rubricd_services.rubrics.prompting import messages as generator_messages
from rubricd_services.rubrics.validation import RubricLimits
from rubricd_services.settings import LLMSettings
from rubricd_services.state.arm import ArmPrompt

log = logging.getLogger("rubricd.arm")
ORDERS: tuple[Order, ...] = ("AB", "BA")
_INSTRUCTED = LLMSettings(output_mode="text")  # a chat that states its answer's schema, whatever the server


def with_schema(messages: list[dict[str, str]], answer: type) -> list[dict[str, str]]:
    """`messages` with the answer's JSON Schema stated in the system message (as for a server that cannot
    enforce one), so the model being trained sees the format it is rewarded for."""
    return request(_INSTRUCTED, schema_of(answer), messages)[1]


def generator_rows(
    found: Sequence[ArmPrompt],
    template: str,
    anchors: Sequence[Rubric],
    meta_classes: Sequence[str],
    max_rubrics: int,
    max_points: float = RubricLimits.max_points,
) -> list[dict[str, Any]]:
    """One row per prompt: `prompt` (the chat), `prompt_id`."""
    answer = draft_type(tuple(meta_classes), max_rubrics, max_points)
    return [
        {
            "prompt": with_schema(
                generator_messages(
                    template, p.comparisons[0], anchors, meta_classes, max_rubrics, max_points=max_points
                ),
                answer,
            ),
            "prompt_id": p.prompt_id,
        }
        for p in found
    ]


def judge_rows(
    found: Sequence[ArmPrompt], rubric_sets: dict[str, RubricSet], template: str, generator_model: str
) -> list[dict[str, Any]]:
    """One row per comparison and order: `prompt` (the chat), `comparison_id`, `order`, `prompt_id`,
    `generator_model`."""
    rows = []
    for p in found:
        rubric_set = rubric_sets[p.prompt_id]
        system = pairwise.system_message(template, rubric_set)
        answer = pairwise.answer_type(tuple(r.id for r in rubric_set.rubrics))
        for comparison in p.comparisons:
            for order in ORDERS:
                rows.append(
                    {
                        "prompt": with_schema(pairwise.messages(system, comparison, order), answer),
                        "comparison_id": comparison.comparison_id,
                        "order": order,
                        "prompt_id": p.prompt_id,
                        "generator_model": generator_model,
                    }
                )
    return rows


async def frozen_rubrics(
    redis: Redis,
    keys: Keys,
    llm: LLMClient,
    run_id: str,
    found: Sequence[ArmPrompt],
    generator_model: str,
    *,
    template: str,
    seed: Sequence[Rubric],
    meta_classes: Sequence[str],
    max_rubrics: int,
    max_points: float = RubricLimits.max_points,
) -> dict[str, RubricSet]:
    """Each prompt's rubric set by the frozen generator `generator_model` (the generator agent's endpoint serving
    it): the one kept in Redis, else asked now and kept. A draft that fails (the call, or every rubric broke the
    rules) gives the seed rubrics, logged and kept as the version's: the judge's rows and its rewards must read
    the same set."""
    stored = cast(dict[bytes, bytes], await redis.hgetall(keys.arm_rubrics(run_id, generator_model)))
    sets = {k.decode(): wire.decode(v, RubricSet) for k, v in stored.items()}
    first = generation.anchors(seed)
    answer = draft_type(tuple(meta_classes), max_rubrics, max_points)
    for p in found:
        if p.prompt_id in sets:
            continue
        asked = generator_messages(template, p.comparisons[0], first, meta_classes, max_rubrics, max_points=max_points)
        now = time.time()
        try:
            done = await llm.structured(GENERATOR, asked, answer, model=generator_model)
            draft = msgspec.convert(msgspec.to_builtins(done.value), RubricDraft)
            rubrics = build(draft, first, meta_classes, max_rubrics, max_points).rubrics
            made = GeneratedBy(
                model=generator_model, prompt_sha256=hashlib.sha256(template.encode()).hexdigest(), generated_at=now
            )
        except (LLMError, InvalidDraft) as e:
            log.warning(
                "prompt %s: generator %s wrote no usable rubrics (%s): the seed rubrics, kept as this version's (the "
                "judge's rows and rewards read the same set); to ask again, name another version",
                p.prompt_id,
                generator_model,
                e,
            )
            rubrics, made = list(seed), None
        rubric_set = RubricSet(
            run_id=run_id, instance_key=p.prompt_id, version=1, rubrics=rubrics, created_at=now, generated_by=made
        )
        key = keys.arm_rubrics(run_id, generator_model)
        if not await redis.hsetnx(key, p.prompt_id, wire.encode(rubric_set)):  # another command wrote it meanwhile
            rubric_set = wire.decode(cast(bytes, await redis.hget(key, p.prompt_id)), RubricSet)
        sets[p.prompt_id] = rubric_set
    return sets
