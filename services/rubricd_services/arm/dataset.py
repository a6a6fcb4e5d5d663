"""What a trainer trains Rubric-ARM's models on (`rubricd arm dataset`): each phase's prompts, in the formats the
arm service reads back.

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
from typing import Any

import msgspec
from redis.asyncio import Redis

from rubricd.keys import Keys
from rubricd.messages import GeneratedBy, Order, RubricSet
from rubricd_services.judges import pairwise
from rubricd_services.llm import LLMClient, LLMError
from rubricd_services.llm.dialects import request, schema_of
from rubricd_services.rubrics import generation
from rubricd_services.rubrics.draft import InvalidDraft, RubricDraft, build, draft_type
from rubricd_services.rubrics.generation import GENERATOR
from rubricd_services.rubrics.prompting import messages as generator_messages
from rubricd_services.rubrics.seeds import Seeds
from rubricd_services.runtime import prompts
from rubricd_services.settings import LLMSettings
from rubricd_services.state import arm
from rubricd_services.state.arm import ArmPrompt

from .settings import DatasetSettings

log = logging.getLogger("rubricd.arm")
ORDERS: tuple[Order, ...] = ("AB", "BA")
_INSTRUCTED = LLMSettings(output_mode="text")  # a chat that states its answer's schema, whatever the server


class Dataset:
    """A run's training prompts under the settings of `rubricd arm dataset`: the generator's prompt and limits,
    the seed rubrics (their anchors first in every generated set), and the pairwise judge's prompt."""

    def __init__(self, settings: DatasetSettings) -> None:
        self.settings = settings
        self.seed = Seeds.load(settings).default
        self.anchors = generation.anchors(self.seed)
        self.template = prompts.load(generation.__package__, GENERATOR, settings.generator_prompt)
        self.draft = draft_type(
            tuple(settings.meta_classes), settings.generate_max_rubrics, settings.generate_max_points
        )

    def generator_rows(self, found: Sequence[ArmPrompt]) -> list[dict[str, Any]]:
        """One row per prompt: `prompt` (the chat), `prompt_id`."""
        return [{"prompt": with_schema(self._asked(p), self.draft), "prompt_id": p.prompt_id} for p in found]

    async def judge_rows(
        self, redis: Redis, keys: Keys, llm: LLMClient, run_id: str, found: Sequence[ArmPrompt], generator_model: str
    ) -> list[dict[str, Any]]:
        """One row per comparison and order: `prompt` (the chat), `comparison_id`, `order`, `prompt_id`,
        `generator_model`; under the rubrics of the frozen generator `generator_model` (`frozen_rubrics`)."""
        sets = await self.frozen_rubrics(redis, keys, llm, run_id, found, generator_model)
        template = prompts.load(pairwise.__package__, pairwise.PAIRWISE, self.settings.pairwise_prompt)
        rows = []
        for p in found:
            rubric_set = sets[p.prompt_id]
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
        self, redis: Redis, keys: Keys, llm: LLMClient, run_id: str, found: Sequence[ArmPrompt], generator_model: str
    ) -> dict[str, RubricSet]:
        """Each prompt's rubric set by the frozen generator `generator_model`: the one kept in Redis (state.arm),
        else asked now (`generated_set`) and kept, unless another command kept one meanwhile."""
        sets = await arm.read_frozen_sets(redis, keys, run_id, generator_model)
        for p in found:
            if p.prompt_id not in sets:
                asked = await self.generated_set(llm, run_id, p, generator_model)
                sets[p.prompt_id] = await arm.keep_frozen_set(redis, keys, run_id, generator_model, p.prompt_id, asked)
        return sets

    async def generated_set(self, llm: LLMClient, run_id: str, found: ArmPrompt, generator_model: str) -> RubricSet:
        """The rubric set the generator `generator_model` (the generator agent's endpoint serving it) writes for
        the prompt. A draft that fails (the call, or every rubric broke the rules) gives the seed rubrics, logged:
        kept as the version's, the judge's rows and its rewards read the same set."""
        s = self.settings
        now = time.time()
        try:
            done = await llm.structured(GENERATOR, self._asked(found), self.draft, model=generator_model)
            draft = msgspec.convert(msgspec.to_builtins(done.value), RubricDraft)
            rubrics = build(draft, self.anchors, s.meta_classes, s.generate_max_rubrics, s.generate_max_points).rubrics
            made = GeneratedBy(
                model=generator_model,
                prompt_sha256=hashlib.sha256(self.template.encode()).hexdigest(),
                generated_at=now,
            )
        except (LLMError, InvalidDraft) as e:
            log.warning(
                "prompt %s: generator %s wrote no usable rubrics (%s): the seed rubrics, kept as this version's (the "
                "judge's rows and rewards read the same set); to ask again, name another version",
                found.prompt_id,
                generator_model,
                e,
            )
            rubrics, made = list(self.seed), None
        return RubricSet(
            run_id=run_id, instance_key=found.prompt_id, version=1, rubrics=rubrics, created_at=now, generated_by=made
        )

    def _asked(self, found: ArmPrompt) -> list[dict[str, str]]:
        """The generator agent's chat for the prompt (its first comparison carries the prompt and reference)."""
        s = self.settings
        return generator_messages(
            self.template,
            found.comparisons[0],
            self.anchors,
            s.meta_classes,
            s.generate_max_rubrics,
            max_points=s.generate_max_points,
        )


def with_schema(messages: list[dict[str, str]], answer: type) -> list[dict[str, str]]:
    """`messages` with the answer's JSON Schema stated in the system message (as for a server that cannot
    enforce one), so the model being trained sees the format it is rewarded for."""
    return request(_INSTRUCTED, schema_of(answer), messages)[1]
