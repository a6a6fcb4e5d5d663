"""One ART group judged by RULER (`ruler_score_group`, its LiteLLM call sent to JUDGE_URL) and by rubricd
(rubricd.adapters.art, judged as a group, then each trajectory alone), for docs/integrators/art.md.

    python tests/frameworks/art_vs_ruler.py JUDGE_URL OUT.json < scenario.json    # {"question", "answers": [...]}

OUT.json holds, for RULER, its calls and prompt tokens as LiteLLM reported them and what it returned (a group,
or None where it could not read the judge's answer), and for each rubricd run id what it returned; rubricd's calls
and tokens are in its usage hash, which the test reads.
"""

import asyncio
import json
import os
import sys
from typing import Any

import art
import litellm
from art.rewards.ruler import ruler_score_group
from art_groups import rollout  # beside this script

from rubricd import RubricdClient
from rubricd.adapters import ArtReward

calls: list[dict[str, int]] = []


async def counted(**request: Any) -> Any:
    """RULER's LiteLLM call, its usage recorded as the judge's endpoint reported it."""
    response = await litellm.acompletion(**request)
    calls.append({"prompt_tokens": response.usage.prompt_tokens, "completion_tokens": response.usage.completion_tokens})
    return response


def returned(group: art.TrajectoryGroup | None) -> list[dict[str, Any]] | None:
    return None if group is None else [{"reward": t.reward, "metrics": t.metrics} for t in group.trajectories]


async def main(judge_url: str, out: str, scenario: dict[str, Any]) -> None:
    group = art.TrajectoryGroup([await rollout(scenario["question"], a) for a in scenario["answers"]])
    sys.modules["art.rewards.ruler"].acompletion = counted  # RULER calls the acompletion it imported
    judge = {"api_base": judge_url, "api_key": "unused"}
    by_ruler = await ruler_score_group(group, "openai/judge", extra_litellm_params=judge, swallow_exceptions=True)
    by_rubricd = {}
    async with RubricdClient(os.environ["RUBRICD_REDIS_URL"], namespace=os.environ["RUBRICD_NAMESPACE"]) as client:
        for run_id, mode in ((os.environ["RUN_ID"], "group"), (os.environ["RUN_ID"] + "-single", "single")):
            reward = ArtReward(client, run_id, judge_mode=mode, timeout=120)
            by_rubricd[run_id] = returned(await reward.score_group(group, step=0))
            await reward.finish()
    with open(out, "w") as f:
        json.dump({"ruler": {"calls": calls, "returned": returned(by_ruler)}, "rubricd": by_rubricd}, f)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], json.load(sys.stdin)))
