"""verl's agent loop at `agent.num_workers=2` for real: verl 0.9.1's AgentLoopManager, as its trainer builds it
from its own default config, with two AgentLoopWorker Ray actors. Each loads the docs' agent loop file
(tests/frameworks/verl_tool_agent.py, by `agent.agent_loop_config_path`) and so holds a VerlReward of its own that
knows neither its rank nor the other worker: each scores its share of a step in the loop (RubricdToolAgentLoop) and
closes that share as the step moves on. The LLM server is the one stand-in: a scripted policy that calls the
function tool (tests/frameworks/verl_add_tool.py) on its question's numbers, then answers with the tool's result.

    python tests/frameworks/verl_agent_workers.py OUT_DIR STEPS SAMPLES

For each step, in order, one batch of SAMPLES questions through the manager's `generate_sequences` (as verl's
trainer calls it once a step), and one JSON line: the step and each sample's reward (rm_scores summed).
"""

import json
import os
import re
import sys
from importlib.resources import files
from pathlib import Path

import numpy as np
import ray
from omegaconf import OmegaConf
from transformers import LlamaConfig
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopManager
from verl.workers.rollout.replica import TokenOutput
from word_level import chat_tokenizer

HERE = Path(__file__).parent
CALL = '<tool_call> {{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}} </tool_call>'


def questions(steps: int, samples: int) -> list[list[tuple[int, int]]]:
    """Each step's (a, b) pairs: a fixed per step, b the sample's index."""
    return [[(17 + 6 * step, i) for i in range(samples)] for step in range(steps)]


class ScriptedServer:
    """The LLM server's one call verl's loop makes, `generate`: the tool call on the prompt's question, or, once the
    prompt holds the tool's response, the answer. Stateless, so each worker's copy answers every sample alike."""

    def __init__(self, tok) -> None:
        self.tok = tok

    async def generate(self, request_id, prompt_ids, sampling_params, **_) -> TokenOutput:
        prompt = self.tok.decode(prompt_ids)
        if found := re.search(r"<tool_response> (\d+) </tool_response>", prompt):
            text = f"The answer is {found[1]} ."
        else:
            a, b = re.findall(r"What is (\d+) \+ (\d+) \?", prompt)[-1]
            text = CALL.format(a=a, b=b)
        return TokenOutput(token_ids=self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id])


def batch(step: int, pairs: list[tuple[int, int]]) -> DataProto:
    """What verl's trainer hands the manager for a step of an agent dataset: RLHFDataset's fields per sample."""
    asked = [f"What is {a} + {b} ?" for a, b in pairs]
    fields = {
        "data_source": ["arithmetic"] * len(pairs),
        "reward_model": [{"ground_truth": str(a + b)} for a, b in pairs],
        "extra_info": [{"question": q, "global_step": step} for q in asked],
        "raw_prompt": [[{"role": "user", "content": q}] for q in asked],
        "agent_name": ["rubricd_tool_agent"] * len(pairs),
        "index": list(range(len(pairs))),
    }
    non_tensors = {}
    for key, values in fields.items():
        non_tensors[key] = np.empty(len(pairs), dtype=object)
        non_tensors[key][:] = values
    return DataProto(non_tensor_batch=non_tensors, meta_info={"global_steps": step, "validate": False})


def main(out: Path, steps: int, samples: int) -> None:
    asked = questions(steps, samples)
    words = [
        w
        for pairs in asked
        for a, b in pairs
        for text in (f"What is {a} + {b} ?", CALL.format(a=a, b=b), f"{a + b} The answer is {a + b} .")
        for w in text.split()
    ]
    tok = chat_tokenizer(words)
    model = out / "model"
    tok.save_pretrained(model)
    LlamaConfig(
        vocab_size=len(tok),
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=1,
        architectures=["LlamaForCausalLM"],
    ).save_pretrained(model)  # verl reads the model config; no weights are loaded
    (out / "agent_loops.yaml").write_text(
        "- name: rubricd_tool_agent\n  _target_: verl_tool_agent.RubricdToolAgentLoop\n"
    )
    overrides = [
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4",
        f"actor_rollout_ref.rollout.multi_turn.function_tool_path={HERE / 'verl_add_tool.py'}",
        "actor_rollout_ref.rollout.prompt_length=128",
        "actor_rollout_ref.rollout.response_length=128",
        "actor_rollout_ref.rollout.name=vllm",  # the server kind verl asks for; no vLLM runs (the scripted server)
        "actor_rollout_ref.rollout.agent.num_workers=2",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={out / 'agent_loops.yaml'}",
    ]
    config = OmegaConf.load(str(files("verl.trainer.config") / "_generated_ppo_trainer.yaml"))
    config = OmegaConf.merge(config, OmegaConf.from_dotlist(overrides))
    # The workers import the agent loop file by its module name (hydra's _target_): this folder on their path.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)  # stdout: the JSON lines only
    try:
        manager = AgentLoopManager.create(config, llm_client=ScriptedServer(tok))
        for step, pairs in enumerate(asked):
            result = manager.generate_sequences(batch(step, pairs))
            rewards = result.batch["rm_scores"].sum(-1).tolist()
            print(json.dumps({"step": step, "rewards": rewards}), flush=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
