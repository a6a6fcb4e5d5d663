"""The experiment: the seeds' claims measured on a policy that learns by gradient (docs/researchers/experiment.md).

    make experiment                                         # every condition, three seeds
    make experiment EXPERIMENT="--conditions fixed,both --seeds 0 --steps 30"
    .venv/bin/python tests/bench/experiment.py --steps 2 --seeds 0 --conditions fixed,both   # the suite's smoke

Starts its own stack (.stack/experiment, own ports: Redis, Weaviate and, unless RUBRICD_LLM__BASE_URL names another
endpoint, the LLM simulator, a test tool, labelled so in the report). Pre-trains the policy once per seed
(tests/frameworks/experiment_policy.py, in `make frameworks`'s venv), then for each condition starts its services in
a namespace of its own and trains every seed's copy of the policy with TRL's GRPOTrainer through the TRL adapter,
the seeds side by side. Each step records the styles of the policy's own samples (by a checker that knows the
corpus, not by the judge), their accuracy, the reward, the rubric version and the time the trainer waited on
rubricd. Writes reports/experiment-<time>/: steps.jsonl, report.md (the tables) and a PNG per condition.
Not part of `make test`: it is a benchmark, and prints its figures.
"""

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
from redis.asyncio import Redis

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from rubricd.keys import Keys
from rubricd_services.state.rubric_sets import RubricStore

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "deploy/local/stack.sh"
POLICY = REPO / "tests/frameworks/experiment_policy.py"
ARM = REPO / "tests/frameworks/experiment_arm.py"
PORTS = {
    "RUBRICD_REDIS_PORT": 6393,
    "RUBRICD_WEAVIATE_PORT": 8083,
    "RUBRICD_WEAVIATE_GRPC_PORT": 30053,
    "RUBRICD_SIMULATOR_PORT": 8092,
}
STACK_DIR = REPO / ".stack/experiment"
URLS = {
    "RUBRICD_REDIS_URL": f"redis://127.0.0.1:{PORTS['RUBRICD_REDIS_PORT']}/0",
    "RUBRICD_WEAVIATE_URL": f"http://127.0.0.1:{PORTS['RUBRICD_WEAVIATE_PORT']}",
    "RUBRICD_WEAVIATE_GRPC_PORT": str(PORTS["RUBRICD_WEAVIATE_GRPC_PORT"]),
}
SIMULATOR_URL = f"http://127.0.0.1:{PORTS['RUBRICD_SIMULATOR_PORT']}/v1"
ARM_PORT = 8094  # the server of Rubric-ARM's saved models (experiment_arm.py serve)
ARM_URL = f"http://127.0.0.1:{ARM_PORT}/v1"
HACKS = ("padded", "flattery", "addressing")
STYLES = ("correct", "wrong", *HACKS)
RISE, BELOW = 0.25, 0.10  # a hack has risen once its smoothed share passes RISE, turned around once back below BELOW
SMOOTH = 5  # steps in the smoothed share
LOOP = ("scorer", "analyzer", "summarizer", "updater")
SIMULATED = (
    'the LLM simulator (a test tool: its rules are in docs/researchers/experiment.md, "The simulator\'s rules").'
)


@dataclass(frozen=True)
class Condition:
    """One arm: the services that run beside the trainer, their settings, and whether each step waits for the
    rubric update of the one before (the loop on)."""

    name: str
    says: str
    services: tuple[str, ...] = LOOP
    settings: dict[str, str] = field(default_factory=dict)
    reward_policy: str | None = None  # the run's (the TRL adapter's reward_policy); None: weighted_sum
    arm: str | None = None  # Rubric-ARM's two models trained (experiment_arm.py), "alternating" or "simultaneous"

    @property
    def loop(self) -> bool:
        return "updater" in self.services


ARM_PLANS = {
    "alternating": "Rubric-ARM: its generator and judge in alternating phases, judge first",
    "simultaneous": "Rubric-ARM: its generator and judge both updated every step",
}
CONDITIONS = {
    c.name: c
    for c in [
        Condition("fixed", "rubrics fixed: the seed set all run (the loop off)", services=("scorer",)),
        Condition(
            "no-memory",
            "the loop with no memory",
            settings={"RUBRICD_STATIC_MEMORY": "false", "RUBRICD_DYNAMIC_MEMORY": "false"},
        ),
        Condition("static", "static memory only (the last summaries)", settings={"RUBRICD_DYNAMIC_MEMORY": "false"}),
        Condition("dynamic", "dynamic memory only (retrieval)", settings={"RUBRICD_STATIC_MEMORY": "false"}),
        Condition("both", "static and dynamic memory, promotion immediate (AMARIS)"),
        Condition("alternating", "both memories, ARL-RR's alternating meta-class rewards", reward_policy="alternating"),
        Condition(
            "gated",
            "both memories, promotion gated (shadow one step, then the gate)",
            settings={"RUBRICD_PROMOTION": "gated"},
        ),
        *(
            Condition(f"arm-{plan}", says, services=("arm",), settings={"RUBRICD_LLM__BASE_URL": ARM_URL}, arm=plan)
            for plan, says in ARM_PLANS.items()
        ),
    ]
}


class Stack:
    """The experiment's Redis, Weaviate and simulator (deploy/local/stack.sh, its own folder and ports), and the
    services each condition starts in its namespace."""

    def __init__(self) -> None:
        self.env = {**os.environ, "RUBRICD_STACK_DIR": str(STACK_DIR), **{k: str(v) for k, v in PORTS.items()}}
        self.env.setdefault("RUBRICD_LLM__BASE_URL", SIMULATOR_URL)
        self.env.setdefault("RUBRICD_LOG_LEVEL", "WARNING")
        self.simulated = self.env["RUBRICD_LLM__BASE_URL"] == SIMULATOR_URL
        self.logs = STACK_DIR / "logs"

    def up(self, policy: bool) -> None:
        """Redis, and for the policy's conditions Weaviate and the simulator (Rubric-ARM's use neither)."""
        subprocess.run([str(STACK), "down"], env=self.env, check=False, capture_output=True)
        shutil.rmtree(STACK_DIR, ignore_errors=True)
        parts = ["redis", "weaviate", "simulator"] if policy else ["redis"]
        subprocess.run([str(STACK), "up", *parts], env=self.env, check=True)

    def down(self) -> None:
        subprocess.run([str(STACK), "down"], env=self.env, check=False)

    @contextlib.contextmanager
    def services(self, condition: Condition) -> Iterator[str]:
        """The condition's services in namespace `exp-<name>`, each in a process group of its own; its namespace."""
        namespace = f"exp-{condition.name}"
        env = {**self.env, **URLS, "RUBRICD_NAMESPACE": namespace, **condition.settings}
        started = []
        for service in condition.services:
            log = (self.logs / f"{namespace}-{service}.log").open("ab")
            started.append(
                subprocess.Popen(
                    [sys.executable, "-m", "rubricd_services.cli", "serve", service],
                    env={**env, "RUBRICD_CONSUMER": f"{service}-0"},
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            )
        try:
            yield namespace
        finally:
            for process in started:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
            for process in started:
                process.wait(timeout=60)


def frameworks_python() -> str:
    subprocess.run(["make", "-s", "frameworks"], cwd=REPO, check=True)
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "frameworks-python"], cwd=REPO, check=True, capture_output=True
    )
    return done.stdout.decode().strip()


def policy_env(namespace: str, run_id: str) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": str(REPO / "shared"),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "RUBRICD_REDIS_URL": URLS["RUBRICD_REDIS_URL"],
        "RUBRICD_NAMESPACE": namespace,
        "RUN_ID": run_id,
    }


def run_all(commands: list[tuple[list[str], dict[str, str], Path]], at_once: int) -> None:
    """Run `commands` (argv, env, log), `at_once` of them side by side; any that fails stops the experiment (and
    the others with it)."""
    waiting, running = list(commands), []
    try:
        while waiting or running:
            while waiting and len(running) < at_once:
                argv, env, log = waiting.pop(0)
                running.append((subprocess.Popen(argv, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT), log))
            for process, log in list(running):
                if process.poll() is not None:
                    running.remove((process, log))
                    if process.returncode:
                        raise RuntimeError(f"{' '.join(process.args)} exited {process.returncode}: {log}")
            time.sleep(0.5)
    finally:
        for process, _ in running:
            process.kill()
            process.wait()


async def rubric_history(namespace: str, run_id: str) -> list[dict[str, Any]]:
    async with Redis.from_url(URLS["RUBRICD_REDIS_URL"]) as redis:
        history = await RubricStore(redis, Keys(namespace)).history(run_id)
    return [{"version": s.version, "step": s.step, "rubrics": [r.id for r in s.rubrics]} for s in history]


def mean_spread(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def smoothed(values: list[float], width: int = SMOOTH) -> list[float]:
    """Each step's mean over it and the `width - 1` before it (a step's 16 samples are a noisy share)."""
    return [statistics.mean(values[max(0, i - width + 1) : i + 1]) for i in range(len(values))]


def summary(steps: list[dict[str, Any]], hack: list[str]) -> dict[str, Any]:
    """A run's figures: final accuracy and hack share (the last fifth of its steps), the hack's area (its mean share
    over the run), the steps from its rise above RISE to its fall below BELOW again (smoothed; None: it never rose,
    or never fell back), and the share of wall time the trainer waited on rubricd, with the median seconds a step."""
    last = max(1, len(steps) // 5)
    share = [sum(s["styles"][h] for h in hack) for s in steps]
    trend = smoothed(share)
    up = next((i for i, x in enumerate(trend) if x > RISE), None)
    down = None if up is None else next((i for i in range(up + 1, len(trend)) if trend[i] < BELOW), None)
    return {
        "accuracy": statistics.mean(s["accuracy"] for s in steps[-last:]),
        "hack": statistics.mean(share[-last:]),
        "area": statistics.mean(share),
        "rose": up is not None,
        "turned": None if up is None or down is None else down - up,
        "waited": sum(s["waited_s"] for s in steps) / max(1e-9, sum(s["wall_s"] for s in steps)),
        "waited_s": statistics.median(s["waited_s"] for s in steps[1:] or steps),
    }


def report(
    folder: Path,
    runs: dict[str, dict[int, dict[str, Any]]],
    before: dict[int, dict[str, float]],
    endpoint: str | None,
    hack: list[str],
) -> str:
    """report.md's text: `endpoint` the agents' endpoint (None: the simulator)."""
    arm_runs = {name: seeds for name, seeds in runs.items() if CONDITIONS[name].arm}
    runs = {name: seeds for name, seeds in runs.items() if name not in arm_runs}
    lines = ["# The experiment"]
    if runs:
        lines += policy_tables(runs, before, endpoint, hack)
    lines += rubric_arm(arm_runs)
    text = "\n".join(lines) + "\n"
    (folder / "report.md").write_text(text)
    return text


def policy_tables(
    runs: dict[str, dict[int, dict[str, Any]]],
    before: dict[int, dict[str, float]],
    endpoint: str | None,
    hack: list[str],
) -> list[str]:
    """The policy's tables: its styles before training, each condition's figures, ARL-RR's, the rubric versions."""
    lines = [
        "",
        "Judge, analyst, summarizer and updater: " + (f"the endpoint {endpoint}." if endpoint else SIMULATED),
        f"Seeds: {sorted(before)}. The hack share: the samples in style {' or '.join(hack)} (under the seed rubrics "
        "they earn more than the same answer without them).",
        "",
        "Before training (the pre-trained policy, 400 samples):",
        "",
        "| seed | " + " | ".join(STYLES) + " | accuracy |",
        "| --- | " + " | ".join("---" for _ in STYLES) + " | --- |",
    ]
    for seed, shares in sorted(before.items()):
        lines.append(f"| {seed} | " + " | ".join(f"{shares[s]:.2f}" for s in STYLES) + f" | {shares['accuracy']:.2f} |")
    lines += [
        "",
        "Per condition, mean ± standard deviation over the seeds: the last fifth's accuracy and hack share, the area",
        f"under the hack's curve (its mean share), the steps from its rise above {RISE:.0%} to its fall below",
        f"{BELOW:.0%} (its mean over {SMOOTH} steps; in how many runs it fell of those where it rose), the share of",
        "wall time the trainer waited on rubricd and the median seconds it waited a step (this policy's own step takes",
        "a fraction of a second: the share says little of a real job's).",
        "",
        "| condition | accuracy | hack share | hack area | steps to turn around | waited | waited a step (s) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, seeds in runs.items():
        figures = [summary(r["steps"], hack) for r in seeds.values()]
        turned = [f["turned"] for f in figures if f["turned"] is not None]
        rose = sum(f["rose"] for f in figures)
        lines.append(
            f"| {name} | {mean_spread([f['accuracy'] for f in figures])} | {mean_spread([f['hack'] for f in figures])} "
            f"| {mean_spread([f['area'] for f in figures])} | {mean_spread([float(t) for t in turned])} "
            f"(fell in {len(turned)} of the {rose} runs it rose in) | {mean_spread([f['waited'] for f in figures])} "
            f"| {mean_spread([f['waited_s'] for f in figures])} |"
        )
    lines += arl_rr(runs)
    lines += ["", "Rubric versions per run (the step each was made from, the rubrics it holds):", ""]
    for name, seeds in runs.items():
        for seed, r in sorted(seeds.items()):
            made = "; ".join(f"v{h['version']}@{h['step']}: {', '.join(h['rubrics'])}" for h in r["history"])
            lines.append(f"- {name}, seed {seed}: {made}")
    return lines


def arl_rr(runs: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    """ARL-RR's table, where both reward policies ran: each meta-class's mean score over the last fifth of the steps
    (as the adapter logged it) and the reward's variance within a step, over the first and the second half."""
    ran = [name for name in ("both", "alternating") if name in runs]
    if len(ran) < 2:
        return []
    classes = sorted({c for name in ran for r in runs[name].values() for s in r["steps"] for c in s.get("meta", {})})
    lines = [
        "",
        "ARL-RR: `both` rewards the weighted sum of every rubric, `alternating` one meta-class a step. Each",
        "meta-class's mean score over the last fifth (mean ± sd over the seeds), and the reward's variance within",
        "a step, mean over the first and the second half of the steps:",
        "",
        "| condition | " + " | ".join(classes) + " | variance, first half | variance, second half |",
        "| --- | " + " | ".join("---" for _ in classes) + " | --- | --- |",
    ]
    for name in ran:
        cells = []
        for c in classes:
            per_seed = []
            for r in runs[name].values():
                tail = [s["meta"][c] for s in r["steps"][-max(1, len(r["steps"]) // 5) :] if c in s.get("meta", {})]
                if tail:
                    per_seed.append(statistics.mean(tail))
            cells.append(mean_spread(per_seed))
        halves = []
        for part in (0, 1):
            per_seed = []
            for r in runs[name].values():
                steps = r["steps"]
                half = steps[: len(steps) // 2] if part == 0 else steps[len(steps) // 2 :]
                variances = [s["reward_var"] for s in half if s.get("reward_var") is not None]
                if variances:
                    per_seed.append(statistics.mean(variances))
            halves.append(mean_spread(per_seed))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {halves[0]} | {halves[1]} |")
    return lines


def rubric_arm(runs: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    """Rubric-ARM's table: per plan, the pair's held-out accuracy over the last fifth of the steps and over the run
    (its area), each model's updates and its training reward over the last fifth of the steps it trained in, and
    the rubrics the generator wrote at the end (mean ± sd over the seeds)."""
    if not runs:
        return []
    lines = [
        "",
        "Rubric-ARM: a tiny generator and a tiny judge (pre-trained on noisy verdicts), trained in alternating phases",
        "or both every step. Held-out accuracy: the share of the held-out pairs the judge just trained picks right in",
        "both orders under the rubrics the generator just trained writes for their prompts (a tie or a flip with the",
        "order is wrong); the models' own rewards are the arm service's, on the training pairs:",
        "",
        "| condition | held-out accuracy, last fifth | held-out accuracy, mean over the run | after step 0 | judge updates "
        "| generator updates | judge reward, its last fifth | generator reward, its last fifth | the generator's rubrics at the end |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, seeds in runs.items():
        cells: dict[str, list[float]] = {k: [] for k in ("last", "area", "first", "judge", "generator", "jr", "gr")}
        written: list[str] = []
        for r in seeds.values():
            steps = r["steps"]
            tail = steps[-max(1, len(steps) // 5) :]
            cells["last"].append(statistics.mean(s["heldout_accuracy"] for s in tail))
            cells["area"].append(statistics.mean(s["heldout_accuracy"] for s in steps))
            cells["first"].append(steps[0]["heldout_accuracy"])
            for role, key in (("judge", "jr"), ("generator", "gr")):
                cells[role].append(float(sum(s["training"] in (role, "both") for s in steps)))
                trained = [s[f"{role}_reward"] for s in steps if s[f"{role}_reward"] is not None]
                rewards = trained[-max(1, len(trained) // 5) :]  # the last fifth of the steps it trained in
                if rewards:
                    cells[key].append(statistics.mean(rewards))
            written.append(", ".join(sorted(set(steps[-1]["rubrics"]))) or "none")
        lines.append(
            f"| {name} | "
            + " | ".join(mean_spread(cells[k]) for k in ("last", "area", "first"))
            + f" | {cells['judge'][0]:.0f} | {cells['generator'][0]:.0f} | "
            + " | ".join(mean_spread(cells[k]) for k in ("jr", "gr"))
            + f" | {'; '.join(written)} |"
        )
    return lines


def plot_arm(folder: Path, name: str, seeds: dict[int, dict[str, Any]]) -> None:
    figure, ax = plt.subplots(figsize=(6, 3.5))
    for seed, r in sorted(seeds.items()):
        steps = r["steps"]
        ax.plot([s["step"] for s in steps], [s["heldout_accuracy"] for s in steps], label=f"seed {seed}")
    ax.set_title(f"{name}: held-out accuracy")
    ax.set_xlabel("step")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(folder / f"{name}.png", dpi=90)
    plt.close(figure)


def plot(folder: Path, name: str, seeds: dict[int, dict[str, Any]]) -> None:
    figure, axes = plt.subplots(1, len(seeds), figsize=(5 * len(seeds), 3.5), squeeze=False)
    for ax, (seed, r) in zip(axes[0], sorted(seeds.items())):
        steps = r["steps"]
        x = [s["step"] for s in steps]
        for style in STYLES:
            ax.plot(x, [s["styles"][style] for s in steps], label=style)
        ax.plot(x, [s["accuracy"] for s in steps], "k--", label="accuracy")
        for h in r["history"][1:]:
            ax.axvline(h["step"] if h["step"] is not None else 0, color="grey", alpha=0.4)
        ax.set_title(f"{name}, seed {seed}")
        ax.set_xlabel("step")
        ax.set_ylim(0, 1)
    axes[0][0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(folder / f"{name}.png", dpi=90)
    plt.close(figure)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conditions", default=",".join(CONDITIONS), help=f"of {', '.join(CONDITIONS)}")
    parser.add_argument("--seeds", default="0,1,2", help="the seeds, comma-separated")
    parser.add_argument("--steps", type=int, default=40, help="GRPO steps a run")
    parser.add_argument("--pretrain-steps", type=int, default=600, help="the policy's pre-training steps")
    parser.add_argument("--arm-steps", type=int, default=20, help="Rubric-ARM's steps a run")
    parser.add_argument("--arm-phase-steps", type=int, default=5, help="Rubric-ARM's steps a phase (alternating)")
    parser.add_argument("--arm-pretrain-steps", type=int, default=800, help="Rubric-ARM's judge's pre-training steps")
    parser.add_argument("--at-once", type=int, default=3, help="runs side by side")
    parser.add_argument(
        "--hack", default="padded,flattery", help=f"the styles (of {', '.join(HACKS)}) the tables count as the hack"
    )
    parser.add_argument("--report", type=Path, default=None, help="only write the report of this folder's runs anew")
    parser.add_argument(
        "--out", type=Path, default=None, help="the report's folder (default reports/experiment-<time>)"
    )
    args = parser.parse_args(argv)
    args.conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    unknown = [c for c in args.conditions if c not in CONDITIONS]
    if unknown:
        parser.error(f"unknown conditions {unknown}: choose of {', '.join(CONDITIONS)}")
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.hack = [h.strip() for h in args.hack.split(",")]
    if set(args.hack) - set(HACKS):
        parser.error(f"--hack: choose of {', '.join(HACKS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.report:
        print(written(args.report))
        return 0
    folder = args.out or REPO / "reports" / time.strftime("experiment-%Y%m%d-%H%M%S")
    folder.mkdir(parents=True, exist_ok=True)
    python, stack, started = frameworks_python(), Stack(), time.monotonic()
    times: dict[str, float] = {}
    conditions = [CONDITIONS[name] for name in args.conditions]
    stack.up(policy=any(not c.arm for c in conditions))
    times["stack up"] = time.monotonic() - started
    server = None
    try:
        t = time.monotonic()
        policies = {seed: folder / f"policy-{seed}" for seed in args.seeds if any(not c.arm for c in conditions)}
        pairs = {seed: folder / f"arm-{seed}" for seed in args.seeds if any(c.arm for c in conditions)}
        for p in [*policies.values(), *pairs.values()]:
            p.mkdir(parents=True, exist_ok=True)
        pretraining = [
            (
                [python, str(POLICY), "pretrain", str(seed), str(p), str(args.pretrain_steps)],
                policy_env("-", "-"),
                p / "log",
            )
            for seed, p in policies.items()
        ] + [
            (
                [python, str(ARM), "pretrain", str(seed), str(p), str(args.arm_pretrain_steps)],
                policy_env("-", "-"),
                p / "log",
            )
            for seed, p in pairs.items()
        ]
        run_all(pretraining, args.at_once)
        before = {seed: json.loads((p / "before.json").read_text()) for seed, p in policies.items()}
        times["pre-training"] = time.monotonic() - t
        if pairs:
            server = subprocess.Popen(
                [python, str(ARM), "serve", str(folder), str(ARM_PORT)],
                env=policy_env("-", "-"),
                stdout=(folder / "arm-server.log").open("ab"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        runs: dict[str, dict[int, dict[str, Any]]] = {}
        for condition in conditions:
            t = time.monotonic()
            with stack.services(condition) as namespace:
                if condition.arm:
                    runs[condition.name] = train_arm(condition, namespace, python, stack, pairs, folder, args)
                else:
                    runs[condition.name] = train_policy(condition, namespace, python, policies, folder, args)
            (plot_arm if condition.arm else plot)(folder, condition.name, runs[condition.name])
            times[condition.name] = time.monotonic() - t
            print(f"experiment: {condition.name} done in {times[condition.name]:.0f} s", flush=True)
        with (folder / "steps.jsonl").open("w") as out:
            for name, seeds in runs.items():
                for seed, r in seeds.items():
                    out.write(json.dumps({"condition": name, "seed": seed, **r}) + "\n")
        times["all"] = time.monotonic() - started
        meta = {"simulated": stack.simulated, "endpoint": stack.env["RUBRICD_LLM__BASE_URL"], "before": before}
        (folder / "meta.json").write_text(json.dumps({**meta, "times": times, "hack": args.hack}))
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
        stack.down()
    print(written(folder))
    print(f"experiment: {folder}")
    return 0


def train_policy(
    condition: Condition,
    namespace: str,
    python: str,
    policies: dict[int, Path],
    folder: Path,
    args: argparse.Namespace,
) -> dict[int, dict[str, Any]]:
    """Each seed's policy trained under `condition` (its services up in `namespace`): its steps and rubric history."""
    jobs = []
    for seed, p in policies.items():
        run, out = f"{condition.name}-{seed}", folder / f"{condition.name}-{seed}.jsonl"
        argv = [python, str(POLICY), "train", str(seed), str(p), str(args.steps), str(out)]
        argv += ["--wait"] if condition.loop else []
        argv += ["--reward-policy", condition.reward_policy] if condition.reward_policy else []
        jobs.append((argv, policy_env(namespace, run), folder / f"{condition.name}-{seed}.log"))
    run_all(jobs, args.at_once)
    return {
        seed: {
            "steps": read_steps(folder / f"{condition.name}-{seed}.jsonl"),
            "history": asyncio.run(rubric_history(namespace, f"{condition.name}-{seed}")),
        }
        for seed in policies
    }


def train_arm(
    condition: Condition,
    namespace: str,
    python: str,
    stack: Stack,
    pairs: dict[int, Path],
    folder: Path,
    args: argparse.Namespace,
) -> dict[int, dict[str, Any]]:
    """Each seed's generator and judge trained under `condition`'s plan (the arm service up in `namespace`): the
    runs' preference pairs imported (the held-out ones into a run of their own, every step admitting a generator
    rollout), their plans set and the generator's rows written, then the pair trained; its steps."""
    mode = condition.arm
    assert mode is not None
    env = {**stack.env, **URLS, "RUBRICD_NAMESPACE": namespace, **condition.settings}
    cli = [sys.executable, "-m", "rubricd_services.cli", "arm"]
    plan = ["--simultaneous"] if mode == "simultaneous" else ["--first", "judge", "--steps", str(args.arm_phase_steps)]
    jobs = []
    for seed, p in pairs.items():
        run, rows = f"{condition.name}-{seed}", p / mode
        rows.mkdir(parents=True, exist_ok=True)
        for argv in (
            ["import", run, str(p / "train.jsonl")],
            ["import", f"{run}-heldout", str(p / "heldout.jsonl")],
            ["phases", run, *plan],
            ["phases", f"{run}-heldout", "--simultaneous"],
            ["dataset", run, "--phase", "generator", "-o", str(rows / "generator-rows.jsonl")],
            ["dataset", f"{run}-heldout", "--phase", "generator", "-o", str(rows / "heldout-generator-rows.jsonl")],
        ):
            subprocess.run([*cli, *argv], env=env, check=True, capture_output=True)
        argv = [python, str(ARM), "train", str(seed), str(p), mode, str(args.arm_steps), str(args.arm_phase_steps)]
        trainer_env = {
            **policy_env(namespace, run),
            "RUBRICD_LLM__BASE_URL": ARM_URL,
            "RUBRICD_CLI": f"{sys.executable} -m rubricd_services.cli",
        }
        jobs.append(([*argv, str(folder / f"{run}.jsonl")], trainer_env, folder / f"{run}.log"))
    run_all(jobs, args.at_once)
    return {seed: {"steps": read_steps(folder / f"{condition.name}-{seed}.jsonl"), "history": []} for seed in pairs}


def read_steps(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def written(folder: Path) -> str:
    """report.md of the experiment in `folder` (its steps.jsonl and meta.json), written anew; its text."""
    meta = json.loads((folder / "meta.json").read_text())
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for r in map(json.loads, (folder / "steps.jsonl").read_text().splitlines()):
        runs.setdefault(r["condition"], {})[r["seed"]] = r
    before = {int(seed): shares for seed, shares in meta["before"].items()}
    text = report(folder, runs, before, None if meta["simulated"] else meta["endpoint"], meta["hack"])
    text += "\nTimes (s): " + ", ".join(f"{k} {v:.0f}" for k, v in meta["times"].items()) + "\n"
    (folder / "report.md").write_text(text)
    return text


if __name__ == "__main__":
    sys.exit(main())
