"""GRPO with a tool on CPU: TRL's GRPOTrainer (its tool loop: `tools=`, `parse_response`, `_tool_call_loop`) with a
tiny model built here whose sampling is steered, by transformers' `sequence_bias`, to call the tool and then answer
from its result; rewarded by rubricd through the TRL adapter, the trainer's tools read by the adapter itself:
`trl_reward` on a SyncRubricdClient (run RUN) and `async_trl_reward` on a RubricdClient, awaited on TRL's own loop
(run RUN-async).

    python tests/frameworks/train_grpo_tools.py RUN OUT_DIR

RUBRICD_REDIS_URL and RUBRICD_NAMESPACE say where rubricd is. It trains 2 steps and writes the completions TRL
handed the reward function, whether the async one was awaited on TRL's loop, the threads started while training and
each client's reply stream to OUT_DIR/completions.json. The tokenizer and its chat template are word_level's (one token per word, no download);
the model is random: only the bias makes it call the tool.
"""

import asyncio
import json
import os
import sys
import threading
from pathlib import Path

import torch
from datasets import Dataset
from tiny_trl import grpo_config, llama_config
from transformers import LlamaForCausalLM
from trl import GRPOTrainer
from word_level import chat_tokenizer

from rubricd import RubricdClient, SyncRubricdClient
from rubricd.adapters import async_trl_reward, trl_reward

# How TRL parses a completion into a message (transformers' response template, as TRL's own for Qwen3).
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|> assistant",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<eos>\s*", "content": "text"},
    },
}
QUESTION = "What is 17 + 25 ?"
CALL = '<tool_call> {"name": "add", "arguments": {"a": 17, "b": 25}} </tool_call> <eos>'
ANSWER = "The answer is 42 . <eos>"
WORDS = [*CALL.split()[:-1], *ANSWER.split()[:-1], *QUESTION.split()]  # the eos token is the tokenizer's own


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


def steering(tok) -> list:
    """transformers' `sequence_bias`: after the question's generation prompt, the tool call; after the tool's
    result, the answer; each next word of them once begun."""
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    chains = [
        ids(f"? <eos> <|im_start|> assistant {CALL}"),
        ids(f"</tool_response> <eos> <|im_start|> assistant {ANSWER}"),
    ]
    bias = [[ids("? <eos> <|im_start|> assistant <tool_call>"), 100.0]]
    bias += [[ids("</tool_response> <eos> <|im_start|> assistant The"), 100.0]]
    bias += [[chain[i : i + 2], 100.0] for chain in chains for i in range(4, len(chain) - 1)]
    return bias


def main(run_id: str, out: Path) -> None:
    torch.manual_seed(0)
    tok = chat_tokenizer(WORDS)
    tok.response_template = RESPONSE_TEMPLATE
    config = llama_config(tok, max_positions=128)
    args = grpo_config(
        str(out / "trainer"),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=48,
        max_steps=2,
        generation_kwargs={"sequence_bias": steering(tok)},
    )
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": QUESTION}], "answer": "42"}] * 8)
    handed: list = []
    loops: set[int] = set()  # the event loops the async reward function was awaited on
    url, namespace = os.environ["RUBRICD_REDIS_URL"], os.environ["RUBRICD_NAMESPACE"]
    aio = RubricdClient(url, namespace=namespace)  # connects on TRL's loop, at the first call
    with SyncRubricdClient(url, namespace=namespace) as client:
        reward = trl_reward(client, run_id, reference_column="answer")
        on_trls_loop = async_trl_reward(aio, f"{run_id}-async", reference_column="answer")

        def rubricd(prompts, completions, **columns):  # records what TRL handed the adapter
            handed.extend(completions)
            return reward(prompts=prompts, completions=completions, **columns)

        async def rubricd_async(prompts, completions, **columns):
            loops.add(id(asyncio.get_running_loop()))
            return await on_trls_loop(prompts=prompts, completions=completions, **columns)

        trainer = GRPOTrainer(
            model=LlamaForCausalLM(config),
            processing_class=tok,
            reward_funcs=[rubricd, rubricd_async],
            args=args,
            train_dataset=dataset,
            tools=[add],
        )
        before = {t.name for t in threading.enumerate()}  # TRL's loop thread among them

        async def finish() -> None:  # on TRL's loop, where the async client scored
            await on_trls_loop.finish()  # type: ignore[attr-defined]
            await aio.close()

        try:
            trainer.train()
        finally:
            reward.finish()  # type: ignore[attr-defined]
            asyncio.run_coroutine_threadsafe(finish(), trainer.async_loop).result()
        started = sorted({t.name for t in threading.enumerate()} - before)
    on_trls = loops == {id(trainer.async_loop)}
    found = {"completions": handed, "log": trainer.state.log_history, "on_trls_loop": on_trls, "started": started}
    found |= {"replies": {"sync": client.reply_stream, "async": aio.reply_stream}}  # which client scored which
    (out / "completions.json").write_text(json.dumps(found))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
