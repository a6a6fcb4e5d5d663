"""OpenRLHF's own remote-reward client against rubricd's gateway: the single-turn agent executor that each of
OpenRLHF's vLLM engine actors runs for `--reward.remote_url` (openrlhf.utils.agent.SingleTurnAgentExecutor),
with a tokenizer built here (no download).

    python tests/frameworks/openrlhf_reward.py URL < cases.json     # cases: [{"prompt", "response", "label"}, ...]

Prints, per case, what the executor hands OpenRLHF's trainer (its reward, scores and extra_logs), one JSON
line each. The one stand-in is the vLLM engine (there is no GPU here): it answers each prompt with its case's
response tokens. Every case runs at once, as an engine actor runs its prompts.
"""

import asyncio
import json
import sys
from types import SimpleNamespace

from openrlhf.utils.agent import SingleTurnAgentExecutor
from word_level import tokenizer


class Engine:
    """Stands in for vLLM's engine: `generate` answers with fixed response tokens, as a RequestOutput reads."""

    def __init__(self, response_ids: list[int]) -> None:
        self.response_ids = response_ids

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        return SimpleNamespace(
            outputs=[SimpleNamespace(token_ids=self.response_ids, finish_reason="stop", logprobs=None)]
        )


async def main(url: str, cases: list[dict[str, str]]) -> None:
    tok = tokenizer(w for c in cases for w in (c["prompt"] + " " + c["response"]).split())
    executor = SingleTurnAgentExecutor(url)
    sampling = SimpleNamespace(max_tokens=32, logprobs=None)  # what the executor reads of vLLM's SamplingParams

    async def one(case: dict[str, str]) -> dict:
        engine = Engine(tok(case["response"], add_special_tokens=False)["input_ids"])
        out = await executor.execute(case["prompt"], case["label"], sampling, 128, tok, engine)
        return {k: out[k] for k in ("prompt", "label", "reward", "scores", "extra_logs")}

    for output in await asyncio.gather(*map(one, cases)):
        print(json.dumps(output), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], json.load(sys.stdin)))
