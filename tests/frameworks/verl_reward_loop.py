"""verl's reward loop scoring a batch through rubricd's VerlReward: verl 0.9.1's RewardLoopManager, as its
trainer builds it from its own default config (with `reward.custom_reward_function` pointing at
tests/frameworks/verl_compute_score.py), two RewardLoopWorker Ray actors on a local Ray, and its naive reward
manager, turning a DataProto of prompts and responses into `rm_scores` and the reward extra info.

    python tests/frameworks/verl_reward_loop.py OUT_DIR FUNCTION... < cases.json

cases: [{"prompt", "response", "label", "step"}, ...]. For each FUNCTION (compute_score, compute_score_async)
and each step, in step order, one batch of that step's cases (as a trainer's steps follow each other) and one JSON
line: the function, the step, each sample's reward (its rm_scores summed over the response), the extra info, and
what verl's validation logs of them (its process_validation_metrics, per key: mean@1 ...).
The tokenizer is built here (word level, no download); nothing else is a stand-in.
"""

import json
import sys
from importlib.resources import files
from pathlib import Path

import numpy as np
import ray
import torch
from omegaconf import OmegaConf
from transformers import PreTrainedTokenizerFast
from verl import DataProto
from verl.experimental.reward_loop.reward_loop import RewardLoopManager
from verl.trainer.ppo.metric_utils import process_validation_metrics
from word_level import tokenizer

FUNCTIONS = Path(__file__).with_name("verl_compute_score.py")


def batch(tok: PreTrainedTokenizerFast, cases: list[dict]) -> DataProto:
    """What verl's rollout hands the reward loop: left-padded prompts, right-padded responses, their attention
    mask, and the dataset's non-tensor fields (data_source, reward_model.ground_truth, extra_info)."""
    prompts = [tok(c["prompt"], add_special_tokens=False)["input_ids"] for c in cases]
    responses = [tok(c["response"], add_special_tokens=False)["input_ids"] for c in cases]
    p_len, r_len, pad = max(map(len, prompts)), max(map(len, responses)), tok.pad_token_id
    return DataProto.from_dict(
        tensors={
            "prompts": torch.tensor([[pad] * (p_len - len(p)) + p for p in prompts]),
            "responses": torch.tensor([r + [pad] * (r_len - len(r)) for r in responses]),
            "attention_mask": torch.tensor(
                [
                    [0] * (p_len - len(p)) + [1] * (len(p) + len(r)) + [0] * (r_len - len(r))
                    for p, r in zip(prompts, responses)
                ]
            ),
        },
        non_tensors={
            "data_source": np.array(["arithmetic"] * len(cases), dtype=object),
            "reward_model": np.array([{"ground_truth": c["label"]} for c in cases], dtype=object),
            "extra_info": np.array([{"question": c["prompt"], "global_step": c["step"]} for c in cases], dtype=object),
        },
    )


def main(out: Path, functions: list[str], cases: list[dict]) -> None:
    tok = tokenizer(w for c in cases for w in (c["prompt"] + " " + c["response"]).split())
    tok.save_pretrained(out / "tokenizer")
    for name in functions:  # a Ray of its own each: a manager's workers are named actors (reward_loop_worker_0...)
        ray.init(num_cpus=2, include_dashboard=False)
        try:
            config = OmegaConf.load(str(files("verl.trainer.config") / "_generated_ppo_trainer.yaml"))
            overrides = [
                f"actor_rollout_ref.model.path={out / 'tokenizer'}",
                f"reward.custom_reward_function.path={FUNCTIONS}",
                f"reward.custom_reward_function.name={name}",
                "reward.num_workers=2",
            ]
            manager = RewardLoopManager(OmegaConf.merge(config, OmegaConf.from_dotlist(overrides)))
            for step in sorted({c["step"] for c in cases}):
                result = manager.compute_rm_score(batch(tok, [c for c in cases if c["step"] == step]))
                extra = {k: np.asarray(v).tolist() for k, v in result.non_tensor_batch.items()}
                rewards = result.batch["rm_scores"].sum(-1).tolist()
                # What verl's validation logs of them: its own metrics per data source and key (one sample a uid).
                n = len(rewards)
                logged = process_validation_metrics(
                    ["arithmetic"] * n, list(map(str, range(n))), {"reward": rewards, **extra}
                )
                validation = {k: {m: float(v) for m, v in ms.items()} for k, ms in logged["arithmetic"].items()}
                line = {"function": name, "step": step, "rewards": rewards, "extra": extra, "validation": validation}
                print(json.dumps(line), flush=True)
        finally:
            ray.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:], json.load(sys.stdin))
