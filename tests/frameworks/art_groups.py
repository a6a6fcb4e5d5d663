"""OpenPipe ART's own gathering of trajectory groups, rewarded by rubricd in place of RULER (rubricd.adapters.art).

    python tests/frameworks/art_groups.py OUT.json < scenarios.json    # [{"question", "answers": [...]}, ...]

A scripted policy answers each scenario's question once per answer, as an ART rollout function would: a
Trajectory of a system and a user message, a calculator call it makes and the tool's result, then the answer
(a Choice, as ART's own OpenAI calls record it). `art.gather_trajectory_groups` gathers a group per scenario,
each scored by `ArtReward.score_group` as its `after_each`, exceptions swallowed (a group rubricd could not score
is dropped, as with RULER). The last scenario, the one that fails, is then scored again without swallowing, and
a group of its own (UNTOUCHED) scored directly. OUT.json holds what ART returned: each kept group's trajectories
(reward, metrics, logs), the error the unswallowed call raised, and whether the direct call left the group it was
given as it was, the row ART's own `Model.log` wrote of the kept groups (history.jsonl), and the threads running
once the groups were scored.
"""

import asyncio
import json
import os
import sys
import threading

import art
from calc import CALC  # beside this script
from openai.types.chat.chat_completion import Choice

from rubricd import RubricdClient
from rubricd.adapters import ArtReward, NotScored

UNTOUCHED = {"question": "What is 6 + 6?", "answers": ["It is 12.", "It is 13."]}


async def rollout(question: str, answer: str) -> art.Trajectory:
    """The scripted policy's trajectory: it calls the calculator, reads the result, answers."""
    expr = question.split("What is ")[-1].split("?")[0].strip()
    call = {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": json.dumps({"expr": expr})}}
    return art.Trajectory(
        messages_and_choices=[
            {"role": "system", "content": "Answer with the calculator's help."},
            {"role": "user", "content": question},
            Choice.model_validate(
                {"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "tool_calls": [call]}}
            ),
            {"role": "tool", "tool_call_id": "c1", "content": answer.split()[-1].rstrip(".")},
            Choice.model_validate(
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": answer}}
            ),
        ],
        tools=[CALC],
        reward=0.5,  # the environment's own reward, kept by the scorer as `independent_reward`
    )


async def main(out: str, scenarios: list[dict]) -> None:
    client = RubricdClient(os.environ["RUBRICD_REDIS_URL"], namespace=os.environ["RUBRICD_NAMESPACE"])
    reward = ArtReward(client, os.environ["RUN_ID"], timeout=120)
    groups = await art.gather_trajectory_groups(
        (art.TrajectoryGroup(rollout(s["question"], a) for a in s["answers"]) for s in scenarios),
        after_each=lambda group: reward.score_group(group, step=0, swallow_exceptions=True),
        pbar_desc=None,
    )
    try:
        last = art.TrajectoryGroup([await rollout(scenarios[-1]["question"], a) for a in scenarios[-1]["answers"]])
        await reward.score_group(last, step=0)
        raised = None
    except NotScored as e:
        raised = str(e)
    given = art.TrajectoryGroup([await rollout(UNTOUCHED["question"], a) for a in UNTOUCHED["answers"]])
    got = await reward.score_group(given, step=0)
    untouched = all(not t.logs and "rubricd_reward" not in t.metrics and t.reward == 0.5 for t in given.trajectories)
    untouched = untouched and all("rubricd_reward" in t.metrics for t in got.trajectories)
    threads = sorted(t.name for t in threading.enumerate())
    await reward.finish()
    await client.close()
    kept = [
        [{"reward": t.reward, "metrics": t.metrics, "logs": t.logs, "answer": t.messages()[-1]["content"]} for t in g]
        for g in groups
    ]
    # What ART logs of the kept groups (its Model.log: each metric's mean over the trajectories, history.jsonl).
    model = art.Model(name="rubricd", project="groups", base_path=os.path.join(os.path.dirname(out), "art"))
    await model.log(groups, split="train")
    with open(os.path.join(model.base_path, "groups", "models", "rubricd", "history.jsonl")) as f:
        history = [json.loads(line) for line in f]
    with open(out, "w") as f:
        json.dump({"groups": kept, "raised": raised, "untouched": untouched, "history": history, "threads": threads}, f)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], json.load(sys.stdin)))
