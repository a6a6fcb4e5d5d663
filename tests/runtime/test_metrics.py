"""A service's metrics: the LLM client's usage as Prometheus counters, and a consumer group's backlog from the real Redis."""

import uuid

from rubricd.messages import RubricKind
from rubricd_services.judges import rollouts, verdicts
from rubricd_services.llm import LLMClient, LLMError
from rubricd_services.runtime import prompts
from rubricd_services.runtime.metrics import Metrics, backlog
from rubricd_services.settings import LLMSettings
from tests.factories import rollout, rubric, rubric_set
from tests.prometheus import sample

VERDICT = verdicts.verdict_type(("correct",))


def messages(response: str) -> list[dict[str, str]]:
    rubrics = rubric_set(
        rubric("correct", criterion="The response states the correct final answer.", kind=RubricKind.ADAPTIVE)
    )
    system = rollouts.system_message(prompts.load("rubricd_services.judges", verdicts.JUDGE), rubrics)
    asked = rollout(
        rollout_id="r", prompt=f"What is 6 x 7? ({uuid.uuid4().hex[:8]})", response=response, reference="42"
    )
    return rollouts.messages(system, asked)


async def test_the_llm_clients_usage_is_scraped_per_agent(simulator, sim) -> None:
    metrics = Metrics("scorer")
    llm = LLMSettings(base_url=simulator[0], max_retries=1, backoff_s=0.01)
    async with LLMClient({"judge": llm, "analyzer": llm}) as llm:
        metrics.watch_llm(llm)
        await llm.structured("judge", messages("42 [sim:fail=500,times=1]"), VERDICT)
        try:
            await llm.structured("judge", messages("42 [sim:fail=500,times=2]"), VERDICT)
        except LLMError:
            pass
    assert sample(metrics, "rubricd_llm_calls_total", agent="judge") == 2
    assert sample(metrics, "rubricd_llm_retries_total", agent="judge") == 2
    assert sample(metrics, "rubricd_llm_failures_total", agent="judge") == 1
    assert sample(metrics, "rubricd_llm_tokens_total", agent="judge", kind="prompt") > 0
    assert sample(metrics, "rubricd_llm_calls_total", agent="analyzer") == 0


async def test_backlog_is_pending_and_lag_of_the_group(redis) -> None:
    assert await backlog(redis, "s", "g") == (0, 0)  # no stream yet
    await redis.xgroup_create("s", "g", id="0", mkstream=True)
    for i in range(5):
        await redis.xadd("s", {"n": i})
    await redis.xreadgroup("g", "c", {"s": ">"}, count=3)  # 3 delivered, not acked
    [[_, entries]] = await redis.xreadgroup("g", "c", {"s": "0"}, count=1)
    await redis.xack("s", "g", entries[0][0])
    assert await backlog(redis, "s", "g") == (2, 2)
    assert await backlog(redis, "s", "other") == (0, 0)
