"""Rubric-ARM's two models for the experiment (`make experiment`, docs/researchers/experiment.md): a rubric generator
and a pairwise judge, tiny causal LMs built and pre-trained here (no download), trained with TRL's GRPOTrainer through
rubricd's arm service in alternating phases or with simultaneous updates; and the OpenAI-compatible server that
serves every saved version by name, as the frozen model the arm service and `rubricd arm dataset` ask.

    python tests/frameworks/experiment_arm.py pretrain SEED DIR [STEPS]   # DIR/pretrained, DIR/{train,heldout}.jsonl
    python tests/frameworks/experiment_arm.py serve FOLDER PORT           # model "<mode>-<seed>-<role>-<version>"
    python tests/frameworks/experiment_arm.py train SEED DIR MODE STEPS PHASE_STEPS OUT.jsonl   # MODE: alternating,
                                                                  # simultaneous; DIR/MODE/*generator-rows.jsonl read

The models read a compact view of their chat (the generator: the question; the judge: the rubric ids, both
responses and the reference) and write a compact code that `generator_answer` and `judge_answer` spell out in the
formats the arm service reads: a capable model would read and write the chats themselves. `train` (RUN_ID,
RUBRICD_REDIS_URL, RUBRICD_NAMESPACE and RUBRICD_CLI, the command that runs `rubricd`, say where rubricd is) trains
one step at a time by the run's plan, then scores the pair on held-out labelled pairs (run RUN_ID-heldout): the
greedy generator's rubrics for each held-out prompt, judged in both orders by the judge just trained, as the arm
service rewards a generator. One JSON line a step goes to OUT.jsonl.
"""

import json
import os
import random
import re
import shlex
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from experiment_policy import LARGEST, STYLES, encode, fit, near_miss, tiny_llama
from experiment_policy import words as answer_words
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

from rubricd import ArmRollout, SyncRubricdClient
from rubricd.adapters import trl_arm_reward
from rubricd.messages import Plan

# The generator's code words and the rubric each spells out. Under the truth below, `concise` and `flatters` tell
# the preferred answer from each rejected one, `reasoning` prefers the padded and flattering ones, `polite` the
# flattering one.
POOL = {
    "concise": ("The response is concise.", 3, "communication_quality"),
    "flatters": ("The response flatters the user.", -3, "communication_quality"),
    "reasoning": ("The response shows its reasoning.", 3, "completeness"),
    "polite": ("The response is polite.", 2, "communication_quality"),
}
# What each rubric's id (the seed's anchors, then the pool's, as rubricd names them) holds of an answer's style:
# the judge is pre-trained on it with noise, and then learns from the labels alone.
TRUTH = {
    "correct": {"correct", "padded", "flattery"},
    "addresses_grader": {"addressing"},
    "is_concise": {"correct", "wrong"},
    "flatters_user": {"flattery"},
    "shows_its_reasoning": {"padded", "flattery"},
    "is_polite": {"flattery"},
}
ANCHORS = ("correct", "addresses_grader")
VERDICTS = {"TT": (True, True), "TF": (True, False), "FT": (False, True), "FF": (False, False)}
REJECTED = ("wrong", "padded", "flattery")  # each prompt's pairs: the correct answer against each
TRAIN_PROMPTS, HELDOUT_PROMPTS = 8, 4
NOISE = 0.25  # the share of the judge's pre-training verdicts flipped
PRETRAIN_STEPS = 800  # the judge's, in batches of 64 (the generator's: a quarter)
BATCH = 16
GENERATIONS = {"generator": 8, "judge": 4}
MAX_TOKENS = {"generator": 3, "judge": len(TRUTH) + 1}


def vocabulary() -> list[str]:
    view = ["question", ":", "rubrics", "first", "second", "reference", "none", "verdicts"]
    return [*answer_words(), "What", "is", "+", "?", *view, *TRUTH, *POOL, *VERDICTS]


def build(seed: int) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    return tiny_llama(seed, vocabulary(), max_positions=96)


# --- the views and the codes ----------------------------------------------------------------------------------


def blocks(messages: list[dict[str, str]]) -> dict[str, Any]:
    """The chat's data blocks (`<tag>` JSON `</tag>`, as rubricd writes them), by tag."""
    text = "\n".join(m.get("content") or "" for m in messages)
    return {tag: json.loads(body) for tag, body in re.findall(r"<(\w+)>\n(.*?)\n</\1>", text, re.S)}


def generator_view(messages: list[dict[str, str]]) -> str:
    return f"question : {blocks(messages)['prompt']['prompt']} rubrics :"


def judge_view(messages: list[dict[str, str]]) -> tuple[str, list[str]]:
    """The judge's view of a pairwise chat, and the ids of the rubrics it must answer for, in order."""
    found = blocks(messages)
    ids = [r["id"] for r in found["rubrics"]]
    pair = found["comparison"]
    return judge_text(ids, pair["first"], pair["second"], pair.get("reference") or "none"), ids


def judge_text(ids: list[str], first: str, second: str, reference: str) -> str:
    """The judge's view: the reference before the responses, so that a response's answer can be matched with it."""
    return f"rubrics : {' '.join(ids)} reference : {reference} first : {first} second : {second} verdicts :"


def generator_answer(code: str) -> str:
    """The generator's code (pool words) as its answer: `{"rubrics": [...]}`, each word once; none valid: none."""
    chosen = [w for w in dict.fromkeys(code.split()) if w in POOL]
    rubrics = [
        {"criterion": POOL[w][0], "points": POOL[w][1], "meta_class": POOL[w][2], "rule": "principle"} for w in chosen
    ]
    return json.dumps({"rubrics": rubrics})


def judge_answer(code: str, ids: list[str]) -> str:
    """The judge's code (a verdict word per rubric, in order) as its answer; a missing verdict stays missing (the
    arm service penalises the answer)."""
    said = [VERDICTS[w] for w in code.split() if w in VERDICTS]
    verdicts = {i: {"explanation": "", "first": f, "second": s} for i, (f, s) in zip(ids, said)}
    return json.dumps({"verdicts": verdicts, "gatekeeper": None, "preferred": "tie", "justification": ""})


# --- pre-training -----------------------------------------------------------------------------------------------


def answer(style: str, a: int, b: int) -> str:
    return STYLES[style].format(right=a + b, wrong=near_miss(a, b))


def pairs(rng: random.Random, questions: list[tuple[int, int]]) -> list[dict[str, str]]:
    """The preference lines of `questions`: the correct answer chosen over each rejected style."""
    return [
        {
            "prompt": f"What is {a} + {b} ?",
            "chosen": answer("correct", a, b),
            "rejected": answer(r, a, b),
            "reference": str(a + b),
        }
        for a, b in questions
        for r in REJECTED
    ]


def encoded(tok: PreTrainedTokenizerFast, examples: list[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
    """(view, code) examples as the token ids `fit` trains on, each code ending with eos."""
    return [(encode(tok, view), encode(tok, code) + [tok.eos_token_id]) for view, code in examples]


def pretrain(seed: int, folder: Path, steps: int = PRETRAIN_STEPS) -> None:
    """The generator on random pool words (one or two: the format, no preference), the judge on every style pair
    under random rubric sets with the truth's verdicts, a NOISE share of them flipped; the preference pairs of
    TRAIN_PROMPTS and HELDOUT_PROMPTS distinct questions."""
    rng = random.Random(seed)
    questions = rng.sample([(a, b) for a in range(LARGEST) for b in range(LARGEST)], TRAIN_PROMPTS + HELDOUT_PROMPTS)
    for name, part in (("train", questions[:TRAIN_PROMPTS]), ("heldout", questions[TRAIN_PROMPTS:])):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs(rng, part)))
    generator, tok = build(seed)
    examples = []
    for _ in range(5000):
        a, b = rng.randrange(LARGEST), rng.randrange(LARGEST)
        examples.append(
            (f"question : What is {a} + {b} ? rubrics :", " ".join(rng.sample(list(POOL), rng.choice([1, 2]))))
        )
    fit(generator, tok, encoded(tok, examples), steps // 4, random.Random(0))
    judge, _ = build(seed + 1000)
    examples = []
    for _ in range(20_000):
        a, b = rng.randrange(LARGEST), rng.randrange(LARGEST)
        first, second = rng.choice(list(STYLES)), rng.choice(list(STYLES))
        ids = [*ANCHORS, *rng.sample([i for i in TRUTH if i not in ANCHORS], rng.randrange(4))]
        view = judge_text(ids, answer(first, a, b), answer(second, a, b), str(a + b))
        code = []
        for i in ids:
            f, s = first in TRUTH[i], second in TRUTH[i]
            f, s = f ^ (rng.random() < NOISE), s ^ (rng.random() < NOISE)
            code.append(next(w for w, v in VERDICTS.items() if v == (f, s)))
        examples.append((view, " ".join(code)))
    fit(judge, tok, encoded(tok, examples), steps, random.Random(0))
    for role, model in (("generator", generator), ("judge", judge)):
        model.save_pretrained(folder / "pretrained" / role)
        tok.save_pretrained(folder / "pretrained" / role)


# --- serving ----------------------------------------------------------------------------------------------------


def greedy(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast, view: str, role: str) -> str:
    ids = torch.tensor([tok(view, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        out = model.generate(
            ids,
            do_sample=False,
            max_new_tokens=MAX_TOKENS[role],
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
    return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def model_path(folder: Path, name: str) -> Path:
    """Where model `<mode>-<seed>-<role>-<version>` is saved under the experiment's `folder`."""
    mode, seed, role, version = name.rsplit("-", 3)
    return folder / f"arm-{seed}" / mode / f"{role}-{version}"


def serve(folder: Path, port: int) -> None:
    """An OpenAI-compatible chat completions endpoint answering as the named saved model, greedily, in the format
    its role's chat asks for (the request's response_format is not read: the codes always spell out valid JSON)."""
    loaded: OrderedDict[str, tuple[LlamaForCausalLM, PreTrainedTokenizerFast]] = OrderedDict()
    lock = threading.Lock()

    def complete(name: str, messages: list[dict[str, str]]) -> str:
        with lock:
            if name not in loaded:
                path = model_path(folder, name)
                loaded[name] = (
                    LlamaForCausalLM.from_pretrained(path).eval(),
                    PreTrainedTokenizerFast.from_pretrained(path),
                )
                while len(loaded) > 64:
                    loaded.popitem(last=False)
            model, tok = loaded[name]
            if "-generator-" in name:
                return generator_answer(greedy(model, tok, generator_view(messages), "generator"))
            view, ids = judge_view(messages)
            return judge_answer(greedy(model, tok, view, "judge"), ids)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self.reply(200, {"object": "list", "data": []})

        def do_POST(self) -> None:
            asked = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            try:
                content = complete(asked["model"], asked["messages"])
            except (OSError, KeyError, ValueError) as e:
                self.reply(404, {"error": {"message": f"{asked.get('model')}: {e}", "type": "invalid_request_error"}})
                return
            usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
            choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            self.reply(
                200,
                {
                    "id": "arm",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": asked["model"],
                    "choices": [choice],
                    "usage": usage,
                },
            )

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


# --- training ---------------------------------------------------------------------------------------------------


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def rubricd_cli(*args: str) -> None:
    subprocess.run([*shlex.split(os.environ["RUBRICD_CLI"]), *args], check=True, capture_output=True)


class Pair:
    """One run's generator and judge, each saved under a new name after each step it trained."""

    def __init__(self, seed: int, folder: Path, mode: str, client: SyncRubricdClient, run_id: str) -> None:
        self.seed, self.folder, self.mode, self.client, self.run_id = seed, folder, mode, client, run_id
        self.tok = PreTrainedTokenizerFast.from_pretrained(folder / "pretrained" / "judge")
        self.models = {r: LlamaForCausalLM.from_pretrained(folder / "pretrained" / r) for r in ("generator", "judge")}
        self.optimizers = {r: torch.optim.AdamW(m.parameters(), lr=1e-3) for r, m in self.models.items()}
        self.version = {"generator": 0, "judge": 0}
        self.rows: dict[str, list[dict[str, Any]]] = {}  # the judge's, per frozen generator
        for role in self.models:
            self.save(role)

    def name(self, role: str) -> str:
        return f"{self.mode}-{self.seed}-{role}-{self.version[role]}"

    def save(self, role: str) -> None:
        path = model_path(self.folder.parent, self.name(role))
        self.models[role].save_pretrained(path)
        self.tok.save_pretrained(path)

    def train(
        self, role: str, step: int, rows: list[dict[str, Any]], frozen: dict[str, str]
    ) -> tuple[list[float], float]:
        """One GRPO step of `role` on `rows`, rewarded by the arm service against the `frozen` versions (the
        optimizer's state kept across steps); the rewards, and the seconds the reward function waited on rubricd."""
        inner = trl_arm_reward(
            self.client,
            self.run_id,
            phase=role,
            first_step=step,
            judge_model=frozen["judge"],
            generator_model=frozen["generator"],
            timeout=600,
        )
        rewarded: list[float] = []
        waited = [0.0]

        def reward(prompts, completions, **columns):
            began = time.perf_counter()
            if role == "generator":
                texts = [generator_answer(c) for c in completions]
            else:
                texts = [judge_answer(c, ids.split()) for c, ids in zip(completions, columns["ids"])]
            got = inner(prompts, texts, **columns)
            waited[0] += time.perf_counter() - began
            rewarded.extend(g for g in got if g is not None)
            return got

        reward.__name__ = f"arm_{role}"
        args = GRPOConfig(
            output_dir=str(self.folder / self.mode / "trainer"),
            per_device_train_batch_size=BATCH,
            num_generations=GENERATIONS[role],
            max_completion_length=MAX_TOKENS[role],
            max_steps=1,
            learning_rate=1e-3,
            lr_scheduler_type="constant",
            beta=0.0,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            seed=self.seed * 10_000 + step,  # each step's trainer draws other rows
        )
        GRPOTrainer(
            model=self.models[role],
            processing_class=self.tok,
            reward_funcs=[reward],
            args=args,
            train_dataset=Dataset.from_list(rows),
            optimizers=(self.optimizers[role], None),
        ).train()
        return rewarded, waited[0]

    def judge_rows(self, generator: str) -> list[dict[str, Any]]:
        """The judge's rows under `generator`'s rubrics (`rubricd arm dataset` asks it through the server, once)."""
        if generator not in self.rows:
            path = self.folder / self.mode / f"judge-rows-{generator}.jsonl"
            rubricd_cli("arm", "dataset", self.run_id, "--phase", "judge", "--generator", generator, "-o", str(path))
            self.rows[generator] = []
            for r in read_rows(path):
                view, ids = judge_view(r["prompt"])
                self.rows[generator].append({**r, "prompt": view, "ids": " ".join(ids)})
        return self.rows[generator]


def train(seed: int, folder: Path, mode: str, steps: int, phase_steps: int, out: Path) -> None:
    run_id = os.environ["RUN_ID"]
    plan = Plan(simultaneous=True) if mode == "simultaneous" else Plan(first="judge", phase_steps=phase_steps)
    generator_rows = [
        {"prompt": generator_view(r["prompt"]), "prompt_id": r["prompt_id"]}
        for r in read_rows(folder / mode / "generator-rows.jsonl")
    ]
    heldout_rows = read_rows(folder / mode / "heldout-generator-rows.jsonl")
    client = SyncRubricdClient(os.environ["RUBRICD_REDIS_URL"], namespace=os.environ["RUBRICD_NAMESPACE"])
    with client, out.open("w") as lines:
        pair = Pair(seed, folder, mode, client, run_id)
        for step in range(steps):
            started = time.perf_counter()
            training = plan.training(step)[0]
            frozen = {r: pair.name(r) for r in pair.models}
            record: dict[str, Any] = {"step": step, "training": training, "waited_s": 0.0}
            for role in ("judge", "generator"):
                record[f"{role}_reward"] = None
                if training in (role, "both"):
                    rows = generator_rows if role == "generator" else pair.judge_rows(frozen["generator"])
                    rewards, waited = pair.train(role, step, rows, frozen)
                    record[f"{role}_reward"] = sum(rewards) / len(rewards) if rewards else None
                    record["waited_s"] += waited
            for role in pair.models:
                if training in (role, "both"):
                    pair.version[role] = step + 1
                    pair.save(role)
            record.update(evaluate(pair, step, heldout_rows))
            record["wall_s"] = time.perf_counter() - started
            lines.write(json.dumps(record) + "\n")
            lines.flush()


def evaluate(pair: Pair, step: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The pair's accuracy on the held-out pairs: each held-out prompt's rubrics by the greedy generator, its pairs
    judged in both orders by the judge (the arm service's generator reward on run RUN_ID-heldout); a pair picked
    right in both orders counts, a tie or a flip with the order does not, nor do the pairs of a prompt whose
    rubrics were no valid set."""
    codes = [greedy(pair.models["generator"], pair.tok, generator_view(r["prompt"]), "generator") for r in rows]
    rollouts = [
        ArmRollout(
            run_id=f"{pair.run_id}-heldout",
            rollout_id=f"heldout{step}-{i}",
            step=step,
            phase="generator",
            completion=generator_answer(code),
            prompt_id=r["prompt_id"],
            judge_model=pair.name("judge"),
            generator_model=pair.name("generator"),
        )
        for i, (code, r) in enumerate(zip(codes, rows))
    ]
    rewards = pair.client.arm_rewards(rollouts, timeout=600)
    return {
        "heldout_accuracy": sum(r.correct or 0 for r in rewards) / (len(rows) * len(REJECTED)),
        "heldout_judged": sum(r.judged or 0 for r in rewards),
        "rubrics": [" ".join(w for w in dict.fromkeys(c.split()) if w in POOL) for c in codes],
    }


if __name__ == "__main__":
    torch.set_num_threads(1)
    command = sys.argv[1]
    if command == "pretrain":
        pretrain(int(sys.argv[2]), Path(sys.argv[3]), *map(int, sys.argv[4:5]))
    elif command == "serve":
        serve(Path(sys.argv[2]), int(sys.argv[3]))
    else:
        seed, folder, mode, steps, phase_steps, out = sys.argv[2:8]
        train(int(seed), Path(folder), mode, int(steps), int(phase_steps), Path(out))
