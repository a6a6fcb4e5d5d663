"""The Rubric-ARM demo: a pretend rubric generator and a pretend judge, trained in turns through the arm service.

`python -m rubricd_testbed.demo --method rubric-arm` (a stack up: `make demo METHOD=rubric-arm`) imports a small
preference set into a run (`rubricd arm import`), sets its phases (`rubricd arm phases`: the judge first,
`--phase-steps` each), writes the judge's prompts once (`rubricd arm dataset --phase judge`), then each step the
model the step trains answers with canned completions, the arm service rewards them, and the mix follows the
rewards (as the demo's pretend policy does). The generator's rewards come from a frozen judge: the simulator
playing a judge as accurate as the pretend judge was when it was last trained (a model named `sim-judge@<q>`).
The same seed then runs with simultaneous updates: both models every step, each rewarded through the other's
current version. A test and demo tool: the models are not models. The rules: docs/researchers/demo.md.
"""

import asyncio
import json
import math
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from rubricd import RubricdClient
from rubricd.messages import ArmReward, ArmRollout, Phase, Plan
from rubricd_services.state.arm import prompt_key, read_prompts

from .policy import respond


def _draft(criterion: str, points: float, meta_class: str) -> str:
    rubric = {"criterion": criterion, "points": points, "meta_class": meta_class, "rule": "principle"}
    return json.dumps({"rubrics": [rubric]})


# The generator's canned candidate rubric sets for every prompt. The preferred responses are short, the rejected
# ones padded: `concise` and `no_padding` tell them apart, `reasoning` prefers the padded one, `vague` cannot tell,
# `garbled` is no rubric set.
CANDIDATES = {
    "concise": _draft("The response is concise and brief.", 3, "communication_quality"),
    "no_padding": _draft("The response pads its answer with filler and repetition.", -3, "communication_quality"),
    "reasoning": _draft("The response shows the reasoning or steps that lead to its answer.", 2, "completeness"),
    "vague": _draft("The response is polite to the user.", 2, "communication_quality"),
    "garbled": "Judge them on quality and accuracy.",
}
GOOD = ("concise", "no_padding")
GENERATOR_START = {"reasoning": 0.35, "vague": 0.3, "garbled": 0.2, "concise": 0.1, "no_padding": 0.05}
# The judge's canned behaviours on a comparison: a fair verdict (the labelled response passes every rubric), always
# the response shown first (right in one order of two), or no verdict at all.
VERDICTS = ("fair", "first", "garbled")
JUDGE_START = {"first": 0.5, "garbled": 0.35, "fair": 0.15}


def preferences(n: int = 8, seed: int = 7) -> list[dict[str, str]]:
    """`n` sums, two preference pairs each: a short right answer preferred to a padded one."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        prompt = f"What is {a} + {b}?"
        out.append({"prompt": prompt, "chosen": respond("correct", a, b), "rejected": respond("padded", a, b)})
        out.append({"prompt": prompt, "chosen": respond("terse", a, b), "rejected": respond("padded", a, b)})
    return [{**p, "id": f"pair-{i}"} for i, p in enumerate(out)]


@dataclass
class Mix:
    """A softmax over canned answers, moved after each step by its rewards (as the demo's Policy)."""

    start: dict[str, float]
    learning_rate: float = 1.0
    logits: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.logits = self.logits or {name: math.log(p) for name, p in self.start.items()}

    def shares(self) -> dict[str, float]:
        z = sum(math.exp(v) for v in self.logits.values())
        return {name: math.exp(v) / z for name, v in self.logits.items()}

    def sample(self, rng: random.Random, n: int) -> list[str]:
        names, weights = zip(*self.shares().items())
        return rng.choices(names, weights, k=n)

    def learn(self, tried: list[str], rewards: list[float]) -> None:
        """Each answer tried moves by its mean reward's advantage over the batch's."""
        if not rewards:
            return
        baseline = sum(rewards) / len(rewards)
        by_name: dict[str, list[float]] = {}
        for name, reward in zip(tried, rewards):
            by_name.setdefault(name, []).append(reward)
        for name, got in by_name.items():
            self.logits[name] += self.learning_rate * (sum(got) / len(got) - baseline)


def judge_accuracy(shares: dict[str, float]) -> float:
    """The pretend judge's expected accuracy on the verdicts it gives (a garbled one is no verdict)."""
    answered = shares["fair"] + shares["first"]
    return (shares["fair"] + 0.5 * shares["first"]) / answered if answered else 0.0


def verdict(behaviour: str, row: dict[str, Any], label: str) -> str:
    """The judge's completion for a `rubricd arm dataset --phase judge` row whose comparison's label is `label`:
    `fair` has the labelled response pass every rubric and the other fail it, `first` the response shown first."""
    if behaviour == "garbled":
        return "The first one is better."
    system = row["prompt"][0]["content"]
    rubrics = json.loads(system[system.rfind("<rubrics>") + len("<rubrics>") : system.rfind("</rubrics>")])
    first_wins = behaviour == "first" or (label == "A") == (row["order"] == "AB")
    verdicts = {}
    for r in rubrics:
        passes_first = first_wins == (r["points"] >= 0)  # a penalty is passed by not meeting it
        verdicts[r["id"]] = {"explanation": "(pretend judge)", "first": passes_first, "second": not passes_first}
    preferred = "first" if first_wins else "second"
    return json.dumps({"verdicts": verdicts, "gatekeeper": None, "preferred": preferred, "justification": ""})


@dataclass
class ArmStep:
    """What one step trained and what each model got."""

    step: int
    training: str
    generator_reward: float | None  # the mean reward of the generator's rollouts (None: it did not train)
    judge_accuracy: float | None  # the share of the judge's verdicts that picked the label (None: it did not train)
    frozen_judge: str | None  # the judge the generator's rewards came from
    good_share: float  # the generator's share of candidate sets that tell the pairs apart, after the step
    expected_accuracy: float  # the judge's expected accuracy, after the step
    penalized: int = 0


@dataclass
class ArmRun:
    run_id: str
    simultaneous: bool
    steps: int
    rollouts: int
    phase_steps: int
    seed: int
    records: list[ArmStep] = field(default_factory=list)
    error: str | None = None

    @property
    def plan(self) -> Plan:
        return Plan(first="judge", phase_steps=self.phase_steps, simultaneous=self.simultaneous)


def rubricd(redis_url: str, namespace: str, *args: str) -> str:
    """`rubricd ARGS` against the demo's stack; its stdout, or RuntimeError with its stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "rubricd_services.cli", "--redis-url", redis_url, "--namespace", namespace, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"rubricd {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


async def train(
    client: RubricdClient, run: ArmRun, redis_url: str, *, on_step: Callable[[ArmStep], None] | None = None
) -> None:
    """Set the run up through `rubricd arm`, then train both models over its steps."""
    pairs = preferences(seed=run.seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "preferences.jsonl"
        path.write_text("".join(json.dumps(p) + "\n" for p in pairs))
        ns = client.keys.namespace
        rubricd(redis_url, ns, "arm", "import", run.run_id, str(path))
        phases = ["--simultaneous"] if run.simultaneous else ["--first", "judge", "--steps", str(run.phase_steps)]
        rubricd(redis_url, ns, "arm", "phases", run.run_id, *phases)
        rubricd(
            redis_url,
            ns,
            "arm",
            "dataset",
            run.run_id,
            "--phase",
            "judge",
            "--generator",
            "sim-gen",
            "-o",
            str(Path(tmp) / "judge.jsonl"),
        )
        judge_rows = [json.loads(line) for line in (Path(tmp) / "judge.jsonl").read_text().splitlines()]
    prompt_ids = sorted({prompt_key(p["prompt"]) for p in pairs})
    labels = {
        c.comparison_id: c.label
        for p in await read_prompts(client.redis, client.keys, run.run_id)
        for c in p.comparisons
    }
    rng = random.Random(run.seed)
    generator, judge = Mix(GENERATOR_START), Mix(JUDGE_START)
    frozen = judge_accuracy(judge.shares())  # the judge as it was when last trained

    def shown(phase: Phase, name: str, judge_model: str) -> dict[str, Any]:
        """What a rollout of `phase` answering `name` shows: a generator's rubric, or a judge's verdict."""
        if phase == "generator":
            prompt_id = rng.choice(prompt_ids)
            return {
                "completion": CANDIDATES[name],
                "prompt_id": prompt_id,
                "judge_model": judge_model,
                "generator_model": "sim-gen",
            }
        row = rng.choice(judge_rows)
        shows = {k: row[k] for k in ("comparison_id", "order", "generator_model")}
        return {"completion": verdict(name, row, str(labels[row["comparison_id"]]))} | shows

    for step in range(run.steps):
        training = run.plan.training(step)[0]
        sent: list[ArmRollout] = []
        tried: list[tuple[str, str]] = []  # (model, answer) per rollout
        quality = judge_accuracy(judge.shares()) if run.simultaneous else frozen
        judge_model = f"sim-judge@{quality:.2f}"
        models: tuple[tuple[Phase, Mix], ...] = (("generator", generator), ("judge", judge))
        for phase, mix in models:
            if training not in (phase, "both"):
                continue
            for i, name in enumerate(mix.sample(rng, run.rollouts)):
                rollout_id = f"s{step}-{phase[0]}{i}"
                sent.append(
                    ArmRollout(
                        run_id=run.run_id,
                        rollout_id=rollout_id,
                        step=step,
                        phase=phase,
                        **shown(phase, name, judge_model),
                    )
                )
                tried.append((phase, name))
        rewards = await client.arm_rewards(sent, timeout=300)
        run.records.append(learn(step, training, tried, rewards, generator, judge, judge_model))
        if training in ("judge", "both"):
            frozen = judge_accuracy(judge.shares())
        if on_step is not None:
            on_step(run.records[-1])


def learn(
    step: int,
    training: str,
    tried: list[tuple[str, str]],
    rewards: list[ArmReward],
    generator: Mix,
    judge: Mix,
    judge_model: str,
) -> ArmStep:
    """Move each model's mix by its rewards and record the step."""
    got: dict[str, tuple[list[str], list[float]]] = {"generator": ([], []), "judge": ([], [])}
    right: list[float] = []
    for (model, name), reward in zip(tried, rewards):
        if reward.reward is None:
            continue  # the frozen judge failed: no reward, left out
        got[model][0].append(name)
        got[model][1].append(reward.reward)
        if model == "judge" and reward.penalty is None:
            right.append(float(reward.winner == reward.label))
    generator.learn(*got["generator"])
    judge.learn(*got["judge"])
    g = got["generator"][1]
    return ArmStep(
        step=step,
        training=training,
        generator_reward=sum(g) / len(g) if g else None,
        judge_accuracy=sum(right) / len(right) if right else None,
        frozen_judge=judge_model if g else None,
        good_share=sum(generator.shares()[n] for n in GOOD),
        expected_accuracy=judge_accuracy(judge.shares()),
        penalized=sum(1 for r in rewards if r.penalty is not None),
    )


def step_line(r: ArmStep) -> str:
    cell = lambda v: "  -  " if v is None else f"{v:5.2f}"  # noqa: E731
    return (
        f"step {r.step:>2}  trains {r.training:<9}  generator reward {cell(r.generator_reward)}"
        f"  judge accuracy {cell(r.judge_accuracy)}  |  good rubric sets {r.good_share:4.0%}"
        f"  judge expected {r.expected_accuracy:4.2f}"
        + (f"  (frozen judge {r.frozen_judge})" if r.frozen_judge else "")
    )


def table(alternating: ArmRun, simultaneous: ArmRun) -> str:
    """The report's table: per step, each run's phase, generator reward and judge accuracy."""
    cell = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    lines = [
        "| step | alternating: trains | generator reward | judge accuracy | simultaneous: generator reward | judge accuracy |",
        "|---|---|---|---|---|---|",
    ]
    for a, s in zip(alternating.records, simultaneous.records):
        lines.append(
            f"| {a.step} | {a.training} | {cell(a.generator_reward)} | {cell(a.judge_accuracy)} | "
            f"{cell(s.generator_reward)} | {cell(s.judge_accuracy)} |"
        )
    return "\n".join(lines)


def plot(runs: list[ArmRun], path: Path) -> None:
    """Generator reward and judge accuracy per step, one panel per run; the alternating run's phases shaded. The
    data drawn is in the PNG's `rubricd` text chunk."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4), sharey=True)
    for ax, run in zip(axes, runs):
        xs = [r.step for r in run.records]
        for r in run.records:
            if r.training == "generator":
                ax.axvspan(r.step - 0.5, r.step + 0.5, color="tab:blue", alpha=0.08, lw=0)
            elif r.training == "judge":
                ax.axvspan(r.step - 0.5, r.step + 0.5, color="tab:orange", alpha=0.08, lw=0)
        nan = lambda v: math.nan if v is None else v  # noqa: E731
        ax.plot(xs, [nan(r.generator_reward) for r in run.records], "o-", color="tab:blue", label="generator reward")
        ax.plot(xs, [nan(r.judge_accuracy) for r in run.records], "s-", color="tab:orange", label="judge accuracy")
        ax.plot(xs, [r.good_share for r in run.records], ":", color="tab:blue", label="good rubric sets (share)")
        ax.plot(
            xs, [r.expected_accuracy for r in run.records], ":", color="tab:orange", label="judge expected accuracy"
        )
        ax.set_title("simultaneous updates" if run.simultaneous else f"alternating, {run.phase_steps} steps a phase")
        ax.set_xlabel("step (shaded: the model trained)" if not run.simultaneous else "step (both models every step)")
        ax.set_ylim(-1.05, 1.05)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("reward / accuracy")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    data = json.dumps({run.run_id: [msgspec.to_builtins(r) for r in run.records] for run in runs})
    fig.savefig(path, dpi=110, metadata={"rubricd": data})
    plt.close(fig)


def report(alternating: ArmRun, simultaneous: ArmRun, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    plot([alternating, simultaneous], folder / "arm.png")
    (folder / "run.json").write_bytes(msgspec.json.format(msgspec.json.encode([alternating, simultaneous])))
    last = lambda run, attr: getattr(run.records[-1], attr) if run.records else None  # noqa: E731
    text = [
        f"# Rubric-ARM demo: {alternating.run_id}",
        "",
        f"{alternating.steps} steps x {alternating.rollouts} rollouts of each trained model, seed {alternating.seed}; "
        f"the judge first, {alternating.phase_steps} steps a phase, beside the same seed with simultaneous updates "
        f"({simultaneous.run_id}). A pretend generator and judge (canned answers whose mix follows the rewards); "
        "the frozen judge is the simulator playing the pretend judge's accuracy when last trained.",
        "",
        "![generator reward and judge accuracy per step](arm.png)",
        "",
        table(alternating, simultaneous),
        "",
        f"After the last step: good rubric sets {last(alternating, 'good_share'):.0%} (alternating) vs "
        f"{last(simultaneous, 'good_share'):.0%} (simultaneous); judge expected accuracy "
        f"{last(alternating, 'expected_accuracy'):.2f} vs {last(simultaneous, 'expected_accuracy'):.2f}.",
    ]
    (folder / "report.md").write_text("\n".join(text) + "\n")
    return folder / "report.md"


async def run_both(args: Any) -> tuple[ArmRun, ArmRun]:
    base = args.run_id or time.strftime("arm-%Y%m%d-%H%M%S", time.gmtime())
    runs = tuple(
        ArmRun(f"{base}{suffix}", simultaneous, args.steps, args.rollouts, args.phase_steps, args.seed)
        for suffix, simultaneous in (("", False), ("-simultaneous", True))
    )
    async with RubricdClient(args.redis_url, namespace=args.namespace) as client:
        for run in runs:
            print(f"run {run.run_id}: {'simultaneous updates' if run.simultaneous else 'alternating phases'}")
            try:
                await train(client, run, args.redis_url, on_step=lambda r: print(step_line(r), flush=True))
            except Exception as e:  # reported with the steps done; the exit status says it failed
                run.error = f"{type(e).__name__}: {e}"
                print(f"stopped: {run.error}")
    return runs[0], runs[1]


def main(args: Any) -> int:
    alternating, simultaneous = asyncio.run(run_both(args))
    if alternating.records and simultaneous.records:
        path = report(alternating, simultaneous, args.reports / alternating.run_id)
        print(f"\nreport: {path}")
    return 0 if alternating.error is None and simultaneous.error is None else 1
