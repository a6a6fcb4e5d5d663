"""A run's usage (tokens per agent and model, added up in the real Redis) and its cost at configured prices."""

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from rubricd.messages import Rubric
from rubricd_services.judges import rollouts, verdicts
from rubricd_services.llm import Completion, LLMClient
from rubricd_services.llm import usage as recording
from rubricd_services.runtime import prompts
from rubricd_services.runtime.metrics import Metrics
from rubricd_services.settings import LLMSettings, Price, ServiceSettings
from rubricd_services.state import usage
from rubricd_services.state.usage import AgentUsage
from tests.factories import rollout, rubric_set

GPT = Price(prompt_per_mtok=0.15, completion_per_mtok=0.60)


def test_a_price_is_per_million_tokens_prompt_and_completion_apart():
    assert GPT.cost(1_000_000, 0) == pytest.approx(0.15)
    assert GPT.cost(2_000, 500) == pytest.approx((2_000 * 0.15 + 500 * 0.60) / 1e6)
    used = AgentUsage("judge", "gpt", calls=3, prompt_tokens=10_000, completion_tokens=2_000)
    assert used.cost({"gpt": GPT}) == pytest.approx(0.0027)
    assert used.cost({"other": GPT}) is None  # no price for its model: no cost, never 0
    free = AgentUsage("analyzer", "local", calls=1, prompt_tokens=5)
    assert usage.total_cost([used, free], {"gpt": GPT}) == pytest.approx(0.0027)
    assert usage.total_cost([free], {"gpt": GPT}) is None


def test_prices_are_a_setting_per_model(monkeypatch):
    monkeypatch.setenv("RUBRICD_PRICES", '{"gpt-4o-mini": {"prompt_per_mtok": 0.15, "completion_per_mtok": 0.6}}')
    assert ServiceSettings().prices == {"gpt-4o-mini": GPT}
    monkeypatch.setenv("RUBRICD_PRICES", '{"m": {"prompt_per_mtok": -1, "completion_per_mtok": 0}}')
    with pytest.raises(ValidationError):
        ServiceSettings()


async def test_calls_add_up_per_run_agent_and_model(redis, keys):
    await recording.record(redis, keys, "run", "analyzer", "org/model:8b", Completion(None, 1, 1.5, 100, 20))
    await recording.record(redis, keys, "run", "analyzer", "org/model:8b", Completion(None, 2, 0.25, 50, 10))
    await redis.hset(keys.usage("run"), mapping=recording.increments("judge", "gpt", cached=True))
    await recording.record(redis, keys, "other", "judge", "gpt", Completion(None, 1, 1.0, 1, 1))
    used = await usage.read(redis, keys, "run")
    assert used == [
        AgentUsage("analyzer", "org/model:8b", calls=2, prompt_tokens=150, completion_tokens=30, ms=1750),
        AgentUsage("judge", "gpt", cache_hits=1),
    ]
    assert used[0].seconds_per_call == 0.875 and used[1].seconds_per_call is None
    assert await usage.read(redis, keys, "none") == []


async def test_the_llm_clients_cost_is_scraped_per_agent_and_priced_model(simulator, sim):
    metrics = Metrics("scorer")
    llm = LLMSettings(base_url=simulator[0], max_retries=0)
    current = rubric_set(Rubric(id="correct", criterion="Correct.", points=5))
    asked = rollout(rollout_id="r", prompt="2 + 2?", reference="4")
    messages = rollouts.messages(
        rollouts.system_message(prompts.load("rubricd_services.judges", verdicts.JUDGE), current), asked
    )
    async with LLMClient({"judge": llm, "analyzer": llm}) as llm:
        metrics.watch_llm(llm, {"priced": GPT}, {"judge": "priced", "analyzer": "unpriced"})
        await llm.structured("judge", messages, verdicts.verdict_type(("correct",)))
        await llm.structured("analyzer", messages, verdicts.verdict_type(("correct",)))
        used = llm.usage("judge")
    page = generate_latest(metrics.registry).decode()
    costs = {
        tuple(s.labels.values()): s.value
        for family in text_string_to_metric_families(page)
        for s in family.samples
        if s.name == "rubricd_llm_cost_total"
    }
    assert used.prompt_tokens > 0
    assert costs == {("judge", "priced"): pytest.approx(GPT.cost(used.prompt_tokens, used.completion_tokens))}
