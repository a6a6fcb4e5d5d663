"""A real model behind a real OpenAI-compatible server: the stack's `model` component (`make up LLM=local`),
SmolLM2-135M-Instruct served by llama.cpp's own server, which stack.sh builds from source.

A scorer with `output_mode=auto` finds the server's dialect at start (json_schema), and judges four rollouts
(clearly right, clearly wrong, padded, talking to the grader) with a schema-valid verdict on every rubric:
the two failures seen with real servers (every call refused; rubrics skipped) cannot recur. The verdicts,
rewards and judge latencies are printed (`-s`). A model this small follows the schema (the server enforces it)
but grades poorly, so the test does not ask it to rank the four right.
"""

import pytest

from demo.policy import respond
from rubricd import RubricdClient
from rubricd.messages import JudgeStatus, Rollout

pytestmark = pytest.mark.integration

BEHAVIOURS = ("correct", "wrong", "padded", "judge_addressing")
MODEL = "smollm2-135m-instruct"  # the name stack.sh serves it under


@pytest.mark.timeout(1200)
async def test_a_real_server_judges_every_rubric_with_schema_valid_verdicts(
    stack, keys, start_stack, fresh_ports, start_service
):
    model = start_stack(fresh_ports, "model", env={"RUBRICD_STACK_LLM": "local"})
    scorer = start_service(
        "scorer",
        llm__base_url=f"http://127.0.0.1:{model.ports['RUBRICD_MODEL_PORT']}/v1",
        llm__model=MODEL,
        llm__output_mode="auto",
        llm__strict="false",  # the whole schema: the server bounds each explanation's length
        llm__shared_slots=2,
        llm__max_tokens=1024,
        llm__timeout_s=300,
    )
    rollouts = [
        Rollout(
            run_id="real",
            rollout_id=behaviour,
            step=0,
            prompt="What is 17 + 25?",
            response=respond(behaviour, 17, 25),
            reference="42",
        )
        for behaviour in BEHAVIOURS
    ]
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        scores = await client.score(rollouts, timeout=900)

    print(f"\nreal model ({MODEL}, llama.cpp's server):")
    for score in scores:
        verdicts = {r.rubric_id: r.met for r in score.results}
        print(f"  {score.rollout_id:17} reward {score.reward} in {score.judge_ms:.0f} ms {verdicts}")
    assert "agent judge speaks output_mode json_schema" in scorer.log.read_text()
    assert all(s.status is JudgeStatus.OK and s.reward is not None for s in scores), [s.error for s in scores]
    assert all(s.error is None and len(s.results) == 3 for s in scores)  # the seed set's three rubrics, all judged
    assert all(r.explanation for s in scores for r in s.results)
