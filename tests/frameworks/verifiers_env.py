"""verifiers' own environment runtime (0.4, v1: `load_environment`, `Env.serving`, `slots`, `run_slot`) sampling
a scripted policy and scoring every trace with rubricd's reward (vf_rubricd_env.py).

    python tests/frameworks/verifiers_env.py OUT.json < rows.json   # [{"prompt", "answer", "responses": [...]}]

Each row is sampled once per response, as a trainer samples an example's group (GROUP_SIZE): the
policy, an OpenAI-compatible endpoint served here, answers the row's prompt with its responses in turn.
OUT.json holds each trace as verifiers recorded it (`traces`: its task's prompt, its answer, `ok`, `reward`, its
rewards and metrics, and its last error) and the threads running once every trace was scored (`threads`).
"""

import asyncio
import json
import os
import sys
import threading
from pathlib import Path

import verifiers.v1 as vf
import vf_rubricd_env  # beside this script: verifiers loads it by its id
from aiohttp import web


async def policy(rows: list[dict]) -> tuple[web.AppRunner, str]:
    """The scripted policy: a chat completions endpoint answering each row's prompt with its responses in turn."""
    left = {row["prompt"]: list(row["responses"]) for row in rows}

    async def complete(request: web.Request) -> web.Response:
        body = await request.json()
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        message = {"role": "assistant", "content": left[prompt].pop(0)}
        choice = {"index": 0, "finish_reason": "stop", "message": message}
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        return web.json_response(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [choice],
                "usage": usage,
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", complete)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/v1"


async def main(out: str, rows: list[dict]) -> None:
    os.environ["POLICY_KEY"] = "policy"
    runner, url = await policy(rows)
    config = vf.SingleAgentEnvConfig(
        taskset={"id": "vf_rubricd_env", "rows": [{"prompt": r["prompt"], "answer": r["answer"]} for r in rows]},
        agent=vf.AgentConfig(harness={"id": "vf_rubricd_env"}, runtime=vf.SubprocessConfig(), max_turns=1),
    )
    env = vf.load_environment(config)
    ctx = vf.ModelContext(
        model="policy",
        client=vf.EvalClientConfig(base_url=url, api_key_var="POLICY_KEY"),
        sampling=vf.SamplingConfig(max_tokens=64),
    )
    n = int(os.environ["GROUP_SIZE"])
    async with env.serving():
        slots = [slot for task in env.taskset for slot in env.slots(task, n)]
        episodes = await asyncio.gather(*(env.run_slot(slot, ctx) for slot in slots))
        threads = sorted(t.name for t in threading.enumerate())
    await vf_rubricd_env.reward.finish()
    await vf_rubricd_env.client.close()
    await runner.cleanup()
    traces = [
        {
            "prompt": trace.task.data.prompt_text,
            "reply": trace.last_reply,
            "ok": trace.ok,
            "reward": trace.reward,
            "rewards": {k: (None if r is None else r.score) for k, r in trace.rewards.items()},
            "metrics": dict(trace.metrics),
            "error": None if trace.last_error is None else f"{trace.last_error.type}: {trace.last_error.message}",
            "messages": len(trace.messages),
            "tools": [t.name for t in trace.tools],
        }
        for episode in episodes
        for trace in episode.traces
    ]
    Path(out).write_text(json.dumps({"traces": traces, "threads": threads}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], json.load(sys.stdin)))
