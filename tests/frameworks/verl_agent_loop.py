"""verl's tool agent loop for real (verl 0.9.1's ToolAgentLoop: its hermes tool parser, a function tool, its
Continuous Token builder), as the docs' agent loop file subclasses it (tests/frameworks/verl_tool_agent.py), on a
scripted policy: the LLM server is the one stand-in, returning a tool call, then an answer after the tool's result.

    python tests/frameworks/verl_agent_loop.py OUT_DIR

Prints one JSON object: the conversation the loop kept (`messages`); `reward_loop`, what verl's reward loop (its
RewardLoopManager, a Ray worker, its naive reward manager, the docs' reward function file) made of the rollout as
verl's agent loop worker sends it (`_compute_score`: the loop's extra fields as `tool_extra_fields`); and
`agent_loop`, what the loop that scores itself set on its output (reward_score, turn_scores, reward_extra_info).
"""

import asyncio
import json
import sys
from importlib.resources import files
from pathlib import Path

import numpy as np
import ray
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
from verl.experimental.reward_loop.reward_loop import RewardLoopManager
from verl.tools.function_tool import get_function_tool
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput
from verl_add_tool import add  # noqa: F401 (registers the tool)
from verl_tool_agent import ConversationToolAgentLoop, RubricdToolAgentLoop
from word_level import chat_tokenizer

FUNCTIONS = Path(__file__).with_name("verl_compute_score.py")
QUESTION = "What is 17 + 25 ?"
POLICY = ['<tool_call> {"name": "add", "arguments": {"a": 17, "b": 25}} </tool_call>', "The answer is 42 ."]
# What verl's dataset gives an agent loop's `run` (RLHFDataset's fields for a tool agent).
SAMPLE = {
    "data_source": "arithmetic",
    "reward_model": {"ground_truth": "42"},
    "extra_info": {"question": QUESTION, "global_step": 2},
    "raw_prompt": [{"role": "user", "content": QUESTION}],
    "agent_name": "tool_agent",
}


class ScriptedServer:
    """The LLM server's one call verl's loop makes, `generate`, answering each turn with the policy's next tokens."""

    def __init__(self, tok) -> None:
        self.tok, self.turn = tok, 0

    async def generate(self, request_id, prompt_ids, sampling_params, **_) -> TokenOutput:
        text, self.turn = POLICY[self.turn], self.turn + 1
        return TokenOutput(token_ids=self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id])


async def run(loop_class, tok, config):
    loop = loop_class(
        trainer_config=DictConfigWrap(config),
        server_manager=ScriptedServer(tok),
        tokenizer=tok,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([get_function_tool("add")]),
    )
    return await loop.run({}, **SAMPLE)


def as_sent(output) -> DataProto:
    """The DataProto verl's agent loop worker sends its reward loop for one rollout (`_compute_score`, after
    `_agent_loop_postprocess` put the raw prompt in its extra fields)."""
    output.extra_fields["raw_prompt"] = SAMPLE["raw_prompt"]
    prompt, response = torch.tensor([output.prompt_ids]), torch.tensor([output.response_ids])
    return DataProto.from_dict(
        tensors={
            "prompts": prompt,
            "responses": response,
            "attention_mask": torch.ones(1, prompt.shape[1] + response.shape[1], dtype=torch.int64),
        },
        non_tensors={
            **{k: np.array([v]) for k, v in SAMPLE.items()},
            "__num_turns__": np.array([output.num_turns]),
            "tool_extra_fields": np.array([output.extra_fields], dtype=object),
        },
    )


def main(out: Path) -> None:
    tok = chat_tokenizer([w for text in (QUESTION, *POLICY) for w in text.split()])
    tok.save_pretrained(out / "tokenizer")
    overrides = [
        f"actor_rollout_ref.model.path={out / 'tokenizer'}",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4",
        "actor_rollout_ref.rollout.prompt_length=128",
        "actor_rollout_ref.rollout.response_length=128",
        f"reward.custom_reward_function.path={FUNCTIONS}",
        "reward.custom_reward_function.name=compute_score",
        "reward.num_workers=1",
    ]
    config = OmegaConf.load(str(files("verl.trainer.config") / "_generated_ppo_trainer.yaml"))
    config = OmegaConf.merge(config, OmegaConf.from_dotlist(overrides))
    conversation = asyncio.run(run(ConversationToolAgentLoop, tok, config))
    ray.init(num_cpus=1, include_dashboard=False)
    try:
        scored = RewardLoopManager(config).compute_rm_score(as_sent(conversation))
    finally:
        ray.shutdown()
    scoring = asyncio.run(run(RubricdToolAgentLoop, tok, config))
    extra = {k: np.asarray(v).tolist() for k, v in scored.non_tensor_batch.items()}
    result = {
        "messages": conversation.extra_fields["messages"],
        "reward_loop": {"rewards": scored.batch["rm_scores"].sum(-1).tolist(), "extra": extra},
        "agent_loop": {
            "reward_score": scoring.reward_score,
            "turn_scores": scoring.extra_fields["turn_scores"],
            "reward_extra_info": scoring.extra_fields["reward_extra_info"],
        },
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
