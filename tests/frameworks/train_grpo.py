"""GRPO on CPU with a tiny model built here (no download), rewarded by rubricd through the TRL adapter.

    python tests/frameworks/train_grpo.py RUN OUT_DIR                 # one process
    torchrun --nproc_per_node 2 tests/frameworks/train_grpo.py RUN OUT_DIR   # two ranks (gloo)

RUBRICD_REDIS_URL and RUBRICD_NAMESPACE say where rubricd is. It trains 3 steps on arithmetic prompts, evaluates
every 2 steps and at the end, and writes what each rank's reward function returned to OUT_DIR/rank-<r>.json.
"""

import json
import os
import sys
from pathlib import Path

import torch
from datasets import Dataset
from tiny_trl import grpo_config, llama_config
from transformers import LlamaForCausalLM
from trl import GRPOTrainer
from word_level import tokenizer

from rubricd import SyncRubricdClient
from rubricd.adapters import trl_reward

WORDS = ["What", "is", "+", "?", "The", "answer", "sum", "=", *map(str, range(60))]


def dataset(n: int, offset: int) -> Dataset:
    pairs = [(a % 30, (a * 7) % 29) for a in range(offset, offset + n)]
    return Dataset.from_list([{"prompt": f"What is {a} + {b} ?", "answer": str(a + b)} for a, b in pairs])


def main(run_id: str, out: Path) -> None:
    torch.manual_seed(0)
    tok = tokenizer(WORDS)
    config = llama_config(tok, max_positions=64)
    model = LlamaForCausalLM(config)
    args = grpo_config(
        str(out / "trainer"),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=3,
        eval_strategy="steps",
        eval_steps=2,
    )
    with SyncRubricdClient(os.environ["RUBRICD_REDIS_URL"], namespace=os.environ["RUBRICD_NAMESPACE"]) as client:
        reward = trl_reward(client, run_id, reference_column="answer")
        trainer = GRPOTrainer(
            model=model,
            processing_class=tok,
            reward_funcs=[reward],
            args=args,
            train_dataset=dataset(32, 0),
            eval_dataset=dataset(8, 100),
        )
        try:
            trainer.train()
            metrics = trainer.evaluate()
        finally:
            reward.finish()  # type: ignore[attr-defined]
    rank = int(os.environ.get("RANK", 0))
    (out / f"rank-{rank}.json").write_text(json.dumps({"eval": metrics, "log": trainer.state.log_history}))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
