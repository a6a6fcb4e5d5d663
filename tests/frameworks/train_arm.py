"""Rubric-ARM's two models trained in turns with GRPO on CPU (tiny models built here, no download), each rewarded by
rubricd's arm service through the TRL adapter.

    python tests/frameworks/train_arm.py RUN GENERATOR_ROWS JUDGE_ROWS FROZEN_GENERATOR OUT_DIR

The rows are `rubricd arm dataset`'s for each phase. RUBRICD_REDIS_URL and RUBRICD_NAMESPACE say where rubricd is.
The run's plan (judge first, one step each) is the one `rubricd arm phases RUN --first judge --steps 1` set; each
turn trains its model for its steps from its first step, and OUT_DIR/turns.json holds what TRL logged per turn.
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
from rubricd.adapters import trl_arm_reward
from rubricd.messages import Plan

# A generator's answer the arm service accepts (one rubric that tells a short answer from a padded one), and
# filler: a tiny random model emits it among the rest, so a group's rewards differ.
DRAFT = json.dumps(
    {"rubrics": [{"criterion": "The response is concise.", "points": 3, "meta_class": "accuracy", "rule": "principle"}]}
)
WORDS = [DRAFT, "A", "B", "first", "second", "tie", "{", "}", "rubrics", "verdicts", "The", "response", "is"]


def rows(path: Path) -> Dataset:
    """The dataset rows with their chat made one plain-text prompt (the tiny tokenizer has no chat template)."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return Dataset.from_list([{**r, "prompt": "\n\n".join(m["content"] for m in r["prompt"])} for r in lines])


def main(run_id: str, generator_rows: Path, judge_rows: Path, frozen: str, out: Path) -> None:
    torch.manual_seed(0)
    tok = tokenizer(WORDS)
    config = llama_config(tok, max_positions=4096)  # a judge's prompt is a few hundred words
    models = {"generator": LlamaForCausalLM(config), "judge": LlamaForCausalLM(config)}
    data = {"generator": rows(generator_rows), "judge": rows(judge_rows)}
    logged = []
    with SyncRubricdClient(os.environ["RUBRICD_REDIS_URL"], namespace=os.environ["RUBRICD_NAMESPACE"]) as client:
        for phase, first_step, steps in Plan(first="judge", phase_steps=1).turns(2):
            assert phase != "both"
            reward = trl_arm_reward(client, run_id, phase=phase, first_step=first_step, generator_model=frozen)
            args = grpo_config(
                str(out / f"{phase}-{first_step}"),
                per_device_train_batch_size=4,
                num_generations=4,
                max_completion_length=6,
                max_steps=steps,
            )
            trainer = GRPOTrainer(
                model=models[phase], processing_class=tok, reward_funcs=[reward], args=args, train_dataset=data[phase]
            )
            trainer.train()
            logged.append({"phase": phase, "first_step": first_step, "log": trainer.state.log_history})
    (out / "turns.json").write_text(json.dumps(logged))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], Path(sys.argv[5]))
