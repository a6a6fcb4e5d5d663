"""`rubricd arm dataset`'s prompts by hand, without a broker: the generator's rows, and the rubric set a frozen
generator writes for a prompt (the seed rubrics when it fails)."""

import json
from typing import Any

import msgspec
import pytest

from rubricd.messages import RubricKind
from rubricd_services.arm import rewards
from rubricd_services.arm.dataset import Dataset
from rubricd_services.arm.settings import DatasetSettings
from rubricd_services.llm import Completion, LLMError
from rubricd_services.state.arm import read_preferences

from .examples import CONCISE, PADDED, QUESTION, SHORT, completion

PREFERENCES = "".join(
    json.dumps(line) + "\n"
    for line in (
        {"prompt": QUESTION, "chosen": SHORT, "rejected": PADDED, "id": "c0"},
        {"prompt": QUESTION, "chosen": "It is Paris.", "rejected": PADDED, "id": "c1"},
        {"prompt": "Name the largest planet.", "chosen": "Jupiter.", "rejected": "Saturn.", "id": "c2"},
    )
).encode()


class Generator:
    """The generator agent's endpoint, in this process: it answers `draft` (a draft's JSON), or fails."""

    def __init__(self, draft: dict[str, Any] | None) -> None:
        self.draft, self.asked = draft, list[tuple[str, str | None]]()

    async def structured(self, agent: str, messages: list[dict[str, str]], answer: type, *, model: str | None = None):
        self.asked.append((agent, model))
        if self.draft is None:
            raise LLMError(agent, 3, "unreachable", transient=True)
        return Completion(value=msgspec.convert(self.draft, answer), attempts=1, elapsed_s=0.0)


@pytest.fixture
def made() -> Dataset:
    return Dataset(DatasetSettings())


def test_the_generators_rows_are_one_per_prompt_in_the_format_its_reward_reads(made: Dataset) -> None:
    found = read_preferences(PREFERENCES, "arm")
    rows = made.generator_rows(found)
    assert [r["prompt_id"] for r in rows] == [p.prompt_id for p in found]
    system, user = (m["content"] for m in rows[0]["prompt"])
    assert "<anchors>" in user and QUESTION in user
    assert '"title":"RubricDraft"' in system and '"maxItems":8' in system  # the answer's schema, with its limits
    read = rewards.generated(completion(CONCISE), made.anchors, made.settings.meta_classes, max_rubrics=8)
    assert read.problem is None  # what a generator answering the row writes, its reward reads


async def test_a_frozen_generators_set_keeps_the_anchors_first_and_names_its_version(made: Dataset) -> None:
    [first, _] = read_preferences(PREFERENCES, "arm")
    llm = Generator({"rubrics": [{**CONCISE, "rule": "principle"}]})
    written = await made.generated_set(llm, "arm", first, "gen-v1")
    assert llm.asked == [("generator", "gen-v1")]
    assert written.instance_key == first.prompt_id and written.version == 1
    assert written.rubrics[: len(made.anchors)] == made.anchors
    assert [(r.criterion, r.kind) for r in written.rubrics[len(made.anchors) :]] == [
        (CONCISE["criterion"], RubricKind.ADAPTIVE)
    ]
    assert written.generated_by is not None and written.generated_by.model == "gen-v1"


async def test_a_generator_that_fails_gives_the_seed_rubrics(made: Dataset) -> None:
    [first, _] = read_preferences(PREFERENCES, "arm")
    written = await made.generated_set(Generator(None), "arm", first, "gen-v1")
    assert written.rubrics == made.seed and written.generated_by is None
