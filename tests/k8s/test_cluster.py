"""deploy/k8s on a real Kubernetes cluster: `make k8s-test`, its own suite (not `make test`).

`make k8s-cluster` builds (once, cached outside the repo) and starts a single-node cluster on this machine
(deploy/local/cluster.sh: Kubernetes, etcd, CoreDNS and KEDA from their Go modules, Debian's containerd, runc and
CNI plugins) and loads deploy/docker/images.sh's images onto its node; the tests apply overlays/local (the demo with
KEDA and monitoring) and check what an operator would: every workload Ready, a trainer on the host (through
`kubectl port-forward`) scoring a step and getting its rubric update, a scorer pod deleted while it holds entries,
KEDA's metric against Redis's own lag and the scorer scaled up and down on a backlog, Redis's pod restarted, and the
cluster removed with nothing left. The tests run in order, each on what the one before left: the steps of one
operator's session. Figures go to .stack/artifacts/k8s/ (steps.tsv, scaling.tsv) and the output.
"""

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from rubricd import Rollout, RubricdClient, wire
from rubricd.keys import SCORERS, Keys
from rubricd.messages import ScoredRollout
from rubricd_services.cli.plan import Load, plan
from tests.sessions import Session, docker_daemon, sh

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800, func_only=True)]

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "rubricd-demo"
OVERLAY = ROOT / "deploy/k8s/overlays/local"
REDIS_PORT, SIMULATOR_PORT = 16479, 18199  # the port-forwards', on 127.0.0.1
REDIS_URL = f"redis://127.0.0.1:{REDIS_PORT}/0"
RUN = "k8s-1"
ARTIFACTS = ROOT / ".stack/artifacts/k8s"
KEYS = Keys()
SESSION = Session(RUN, REDIS_URL, ARTIFACTS)


class PortForward:
    """`kubectl port-forward` to a Service on 127.0.0.1, in a process group of its own (stopped by it)."""

    def __init__(self, cluster: "Cluster", target: str, port: int, remote: int) -> None:
        self.cluster, self.args, self.port = cluster, [target, f"{port}:{remote}"], port
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.stop()
        self.process = subprocess.Popen(
            [self.cluster.kubectl_path, "-n", NAMESPACE, "port-forward", "--address", "127.0.0.1", *self.args],
            env=self.cluster.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            assert self.process.poll() is None, f"port-forward {self.args} exited {self.process.returncode}"
            assert time.monotonic() < deadline, f"port-forward {self.args} did not listen within 60 s"
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(10)
        self.process = None


class Cluster:
    """kubectl on the cluster deploy/local/cluster.sh started, and the host's port-forwards into it."""

    def __init__(self, exports: str) -> None:
        settings = dict(line.removeprefix("export ").split("=", 1) for line in exports.splitlines() if "=" in line)
        path = settings["PATH"].replace("$PATH", os.environ["PATH"])
        self.env = {**os.environ, "KUBECONFIG": settings["KUBECONFIG"], "PATH": path}
        self.kubectl_path = path.split(":")[0] + "/kubectl"
        self.redis = PortForward(self, "svc/redis", REDIS_PORT, 6379)
        self.simulator = PortForward(self, "svc/simulator", SIMULATOR_PORT, 8099)

    def kubectl(self, *args: str, timeout: float = 300) -> str:
        return sh(self.kubectl_path, *args, env=self.env, timeout=timeout)

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("-n", NAMESPACE, "get", *args, "-o", "json"))

    def replicas(self, deployment: str) -> tuple[int, int]:
        """(desired, ready) replicas of DEPLOYMENT."""
        d = self.get("deployment", deployment)
        return d["spec"].get("replicas", 0), d["status"].get("readyReplicas", 0)

    def external_metric(self, scaled_object: str, trigger: int) -> float:
        """The value KEDA's metrics API gives the HPA for SCALED_OBJECT's TRIGGER (its index)."""
        hpa = self.get("hpa", f"keda-hpa-{scaled_object}")
        name = hpa["spec"]["metrics"][trigger]["external"]["metric"]["name"]
        raw = self.kubectl(
            "get", "--raw",
            f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/{name}"
            f"?labelSelector=scaledobject.keda.sh%2Fname%3D{scaled_object}",
        )  # fmt: skip
        (item,) = json.loads(raw)["items"]
        return quantity(item["value"])

    def pods(self, name: str) -> list[str]:
        """The running pods of service NAME."""
        pods = self.get("pods", "-l", f"app.kubernetes.io/name={name}")["items"]
        return sorted(p["metadata"]["name"] for p in pods if p["status"]["phase"] == "Running")

    def scraped(self, pod: str) -> dict[str, float]:
        """POD's /metrics (port 9100, through the API server's proxy): each sample's name, summed over labels."""
        text = self.kubectl("get", "--raw", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}:9100/proxy/metrics")
        sums: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
        return sums

    def ready(self, within_s: float = 600) -> None:
        """Every Deployment and StatefulSet of the namespace rolled out."""
        for kind in ("statefulset", "deployment"):
            for name in self.kubectl("-n", NAMESPACE, "get", kind, "-o", "name").split():
                self.kubectl(
                    "-n", NAMESPACE, "rollout", "status", name, f"--timeout={within_s:.0f}s", timeout=within_s + 30
                )

    def logs(self) -> str:
        return subprocess.run(
            [self.kubectl_path, "-n", NAMESPACE, "get", "pods,events", "-o", "wide"],
            capture_output=True, text=True, env=self.env, timeout=60,
        ).stdout  # fmt: skip

    def latency(self, ms: float) -> None:
        """The simulator's added latency per call (its admin API, live): slow calls keep entries held."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{SIMULATOR_PORT}/admin/config",
            data=json.dumps({"latency_ms": ms}).encode(), headers={"content-type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read())["latency_ms"] == ms


def quantity(value: str) -> float:
    """A Kubernetes quantity ("12", "1500m", "2k") as a number."""
    scale = {"m": 1e-3, "k": 1e3, "M": 1e6}
    return float(value[:-1]) * scale[value[-1]] if value[-1] in scale else float(value)


def cluster_sh(*args: str, timeout: float = 600) -> str:
    return sh(ROOT / "deploy/local/cluster.sh", *args, timeout=timeout)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    SESSION.steps.unlink(missing_ok=True)
    with docker_daemon():  # only the images need it
        started = time.monotonic()
        the: Cluster | None = None
        try:
            sh("make", "-s", "k8s-cluster", timeout=3600)  # builds on the first run: about 14 minutes on 2 cores
            SESSION.timed("make k8s-cluster (build if not cached, up, CoreDNS, KEDA, images loaded)", started)
            the = Cluster(cluster_sh("env"))
            yield the
        finally:
            if the:
                the.redis.stop()
                the.simulator.stop()
            cluster_sh("down", timeout=600)  # a cluster half started too


async def scorers_group() -> dict[str, Any]:
    async with Redis.from_url(REDIS_URL) as redis:
        (group,) = [g for g in await redis.xinfo_groups(KEYS.rollouts) if g["name"].decode() == SCORERS]
        return {"lag": int(group["lag"] or 0), "pending": int(group["pending"])}


async def handed_on() -> list[str]:
    """The rollout id of every entry the scorers handed to the analyzers (one per scored rollout)."""
    async with Redis.from_url(REDIS_URL) as redis:
        return [
            wire.decode(wire.payload(f), ScoredRollout).rollout.rollout_id for _, f in await redis.xrange(KEYS.scored)
        ]


def test_the_demo_overlay_comes_up_ready(cluster: Cluster) -> None:
    started = time.monotonic()
    cluster.kubectl("apply", "-k", str(OVERLAY))
    try:
        cluster.ready()
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n{cluster.logs()}") from None
    SESSION.timed("kubectl apply -k overlays/local until every Deployment and StatefulSet is Ready", started)
    pods = cluster.get("pods")["items"]
    assert all(p["status"]["phase"] == "Running" for p in pods), [
        (p["metadata"]["name"], p["status"]["phase"]) for p in pods
    ]
    claims = {c["metadata"]["name"]: c["status"]["phase"] for c in cluster.get("pvc")["items"]}
    assert claims == {"data-redis-0": "Bound", "data-weaviate-0": "Bound"}
    cluster.redis.start()
    cluster.simulator.start()


async def test_a_trainer_on_the_host_scores_a_step_and_the_rubrics_update(cluster: Cluster) -> None:
    started = time.monotonic()
    scores = await SESSION.step(0, 8, "a")
    SESSION.timed("a step scored through the port-forward, closed, its rubric update in place", started)
    assert [s.status for s in scores] == ["ok"] * 8, [s.error for s in scores]
    assert await SESSION.history() == [1, 2], "the step's update made version 2"


async def test_a_scorer_pod_deleted_while_it_holds_entries_loses_none(cluster: Cluster) -> None:
    batch = SESSION.rollouts(1, 24, "k")
    (pod,) = cluster.get("pods", "-l", "app.kubernetes.io/name=scorer")["items"]
    started = time.monotonic()
    cluster.latency(120_000)  # every judge call hangs: the scorer holds what it read
    async with RubricdClient(REDIS_URL, timeout=600) as client:
        scores = asyncio.create_task(client.score(batch))
        while (held := (await scorers_group())["pending"]) < len(batch):
            assert not scores.done(), f"the batch ended before the scorer held it: {scores}"
            await asyncio.sleep(0.2)
        # A second to stop, then SIGKILL: the calls in flight cannot finish, the entries stay pending.
        cluster.kubectl("-n", NAMESPACE, "delete", "pod", pod["metadata"]["name"], "--grace-period=1")
        cluster.latency(0)
        result = await scores
    SESSION.timed(f"24 rollouts, the scorer pod deleted holding {held}, all scored by its replacement", started)
    assert sorted(s.rollout_id for s in result) == sorted(r.rollout_id for r in batch)
    assert all(s.status == "ok" for s in result), [s.error for s in result if s.status != "ok"]
    handed = [r for r in await handed_on() if r.startswith("k-")]
    assert sorted(handed) == sorted(r.rollout_id for r in batch), "each rollout scored once, none twice"
    assert (await scorers_group())["pending"] == 0
    (replacement,) = cluster.get("pods", "-l", "app.kubernetes.io/name=scorer")["items"]
    assert replacement["metadata"]["uid"] != pod["metadata"]["uid"]


def backlog(n: int) -> list[Rollout]:
    """A run of its own, in sample groups of 24 with one analysis each: the scorers' backlog, not the analyzers'
    (1200 analyses, each embedded on this machine's two cores, would hold up the next tests' steps)."""
    return [
        msgspec.structs.replace(r, run_id="k8s-backlog", group=f"g{i // 24}", group_size=24, analysis_sample=1)
        for i, r in enumerate(SESSION.rollouts(2, n, "b"))
    ]


async def test_keda_scales_the_scorer_on_its_lag_and_back(cluster: Cluster) -> None:
    """A backlog with slow judge calls: KEDA's metrics are Redis's lag and pending count, the scorer Deployment
    scales up on the lag and keeps its replicas while they hold the backlog; the calls made fast, it drains and
    scales back to one."""
    batch = backlog(1200)
    in_flight = 256  # the scorer's RUBRICD_MAX_IN_FLIGHT, the pending trigger's count per replica
    timeline: list[tuple[float, int, int, float, float, int, int]] = []
    agreed: list[tuple[int, int, float, float]] = []
    started = time.monotonic()

    async def sample() -> tuple[int, int]:
        before = await scorers_group()
        lag_metric, pending_metric = cluster.external_metric("scorer", 0), cluster.external_metric("scorer", 1)
        after = await scorers_group()
        if before == after:  # Redis's figures held still around KEDA's reading of them
            agreed.append((after["lag"], after["pending"], lag_metric, pending_metric))
        desired, ready = cluster.replicas("scorer")
        at = time.monotonic() - started
        timeline.append((at, after["lag"], after["pending"], lag_metric, pending_metric, desired, ready))
        return desired, after["lag"] + after["pending"]

    cluster.latency(45_000)  # under the judge's 60 s timeout
    async with RubricdClient(REDIS_URL, timeout=1200) as client:
        scores = asyncio.create_task(client.score(batch))
        async with Redis.from_url(REDIS_URL) as redis:  # all published (the stream is trimmed once acked)
            while (await redis.xinfo_stream(KEYS.rollouts))["entries-added"] < 8 + 24 + len(batch):
                await asyncio.sleep(0.2)
        peak = 1
        while peak < 3:  # scaled up
            desired, _ = await sample()
            peak = max(peak, desired)
            assert time.monotonic() - started < 300, timeline
            await asyncio.sleep(2)
        while timeline[-1][1]:  # until the replicas have read the whole backlog: the lag is 0 from here
            await sample()
            assert time.monotonic() - started < 400, timeline
            await asyncio.sleep(2)
        read_at = len(timeline)
        # Held by the replicas for the calls' 45 s with no lag: longer than the HPA's 30 s scale-down window and a
        # sync, so only the pending trigger keeps them.
        while timeline[-1][2] > in_flight:
            await sample()
            assert time.monotonic() - started < 400, timeline
            await asyncio.sleep(2)
        held_s = timeline[-1][0] - timeline[read_at - 1][0]
        cluster.latency(0)
        while (await sample())[1] or cluster.replicas("scorer") != (1, 1):  # drained, then back to one
            assert time.monotonic() - started < 600, timeline
            await asyncio.sleep(2)
        result = await scores
    SESSION.timed(f"1200 rollouts: scaled to {max(t[5] for t in timeline)} scorers and back to 1", started)
    with (ARTIFACTS / "scaling.tsv").open("w") as out:
        out.write("s\tlag\tpending\tkeda_lag\tkeda_pending\tdesired\tready\n")
        for row in timeline:
            out.write("\t".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in row) + "\n")
    print("\n" + (ARTIFACTS / "scaling.tsv").read_text())
    assert any(lag > 0 for lag, *_ in agreed), f"no still moment with a backlog: {timeline}"
    assert all((lm, pm) == (lag, pending) for lag, pending, lm, pm in agreed), f"KEDA's metrics differ: {agreed}"
    # Held work keeps its replicas: never down to one while the group holds more than one replica's worth, for
    # longer than the lag alone would have kept them.
    assert held_s > 35, f"the backlog was held {held_s:.0f} s: too short to tell the pending trigger's effect"
    assert all(row[5] > 1 for row in timeline[read_at - 1 :] if row[2] > in_flight), timeline
    assert all(s.status == "ok" for s in result), [s.error for s in result if s.status != "ok"][:5]
    handed = [r for r in await handed_on() if r.startswith("b-")]
    assert len(handed) == len(set(handed)) == len(batch), "each rollout scored once across the replicas"


async def durable(redis: Redis) -> dict[str, object]:
    """What a restart of Redis must keep (not a stream's length, which the scorers' trim of acked entries changes
    at any time): each consumer group's unacked entries, the run's scores, and its kept rollouts."""
    pending = {}
    for stream in (KEYS.rollouts, KEYS.scored, KEYS.analyses, KEYS.summaries):
        for group in await redis.xinfo_groups(stream):
            summary = await redis.xpending(stream, group["name"])
            pending[f"{stream} {group['name'].decode()}"] = summary["pending"]
    return {
        "pending": pending,
        "scores": sorted([key async for key in redis.scan_iter(match=KEYS.score(RUN, "*"), count=1000)]),
        "kept": [entry_id for entry_id, _ in await redis.xrange(KEYS.kept_rollouts(RUN))],
    }


async def test_redis_restarted_keeps_the_run_history(cluster: Cluster) -> None:
    async with Redis.from_url(REDIS_URL) as redis:
        kept = await durable(redis)
    versions = await SESSION.history()
    (pod,) = cluster.get("pods", "-l", "app.kubernetes.io/name=redis")["items"]
    started = time.monotonic()
    cluster.kubectl("-n", NAMESPACE, "delete", "pod", pod["metadata"]["name"])  # SIGTERM: Redis writes its AOF
    deadline = time.monotonic() + 300
    while True:  # the new pod (another uid) Ready: its readiness probe is a PING, answered once the AOF is loaded
        pods = cluster.get("pods", "-l", "app.kubernetes.io/name=redis")["items"]
        ready = [
            p
            for p in pods
            if p["metadata"]["uid"] != pod["metadata"]["uid"]
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
        ]
        if ready:
            break
        assert time.monotonic() < deadline, pods
        time.sleep(1)
    cluster.redis.start()  # the old forward went with the old pod
    SESSION.timed("Redis's pod deleted and back Ready", started)
    async with Redis.from_url(REDIS_URL) as redis:
        assert await durable(redis) == kept
    assert await SESSION.history() == versions
    started = time.monotonic()
    scores = await SESSION.step(3, 8, "r")  # the services found the new Redis
    SESSION.timed("a step after the restart, scored and its rubric update in place", started)
    assert all(s.status == "ok" for s in scores), [s.error for s in scores]
    assert (await SESSION.history())[: len(versions)] == versions


PLANNED = ("scorer", "analyzer", "summarizer", "updater")


async def test_two_scorers_and_two_analyzers_cost_what_the_plan_says(cluster: Cluster) -> None:
    """The capacity plan against a measured run (docs/operators/capacity.md): KEDA keeps two scorers and two
    analyzers (their ScaledObjects' minimum raised), a trainer runs 20 steps of 8 rollouts, and each pod's CPU
    seconds over them (its process_cpu_seconds_total) are set beside `rubricd plan` at the run's measured rate.
    Every rollout scored once between the two scorers; the figures go to plan.tsv and the output."""
    for name in ("scorer", "analyzer"):
        cluster.kubectl("-n", NAMESPACE, "patch", "scaledobject", name, "--type=merge", "-p", '{"spec": {"minReplicaCount": 2}}')  # fmt: skip
    deadline = time.monotonic() + 300
    while any(cluster.replicas(n) != (2, 2) or len(cluster.pods(n)) != 2 for n in ("scorer", "analyzer")):
        assert time.monotonic() < deadline, [cluster.replicas(n) for n in ("scorer", "analyzer")]
        time.sleep(2)
    pods = {name: cluster.pods(name) for name in PLANNED}
    before = {pod: cluster.scraped(pod) for names in pods.values() for pod in names}
    steps, per_step = 20, 8
    started = time.monotonic()
    for step in range(steps):
        scores = await SESSION.step(10 + step, per_step, "p")
        assert all(s.status == "ok" for s in scores), [s.error for s in scores]
    wall = time.monotonic() - started
    SESSION.timed(f"{steps} steps of {per_step} rollouts with two scorers and two analyzers", started)
    after = {pod: cluster.scraped(pod) for pod in before}

    def spent(pod: str, sample: str) -> float:
        return after[pod].get(sample, 0.0) - before[pod].get(sample, 0.0)

    rate = steps * per_step / wall
    planned = plan(Load(rate, per_step, judge_latency_s=0.01, analyst_latency_s=0.01))
    rows = ["service\tpods\twork\tcpu_s\tcores\tplan_cores\tratio"]
    for name, names in pods.items():
        cpu = sum(spent(pod, "process_cpu_seconds_total") for pod in names)
        work = "/".join(
            f"{spent(pod, 'rubricd_scores_total' if name == 'scorer' else 'rubricd_analyses_total'):.0f}"
            for pod in names
        )
        cores = cpu / wall
        rows.append(
            f"{name}\t{len(names)}\t{work if name in ('scorer', 'analyzer') else '-'}\t{cpu:.1f}\t{cores:.3f}"
            f"\t{planned.cores[name]:.3f}\t{cores / planned.cores[name]:.2f}"
        )
    (ARTIFACTS / "plan.tsv").write_text("\n".join(rows) + "\n")
    print(f"\n{rate:.2f} rollouts/s over {wall:.0f} s\n" + (ARTIFACTS / "plan.tsv").read_text())
    scored = [spent(pod, "rubricd_scores_total") for pod in pods["scorer"]]
    assert sum(scored) == steps * per_step, f"each rollout scored once between the two scorers: {scored}"
    assert all(spent(pod, "process_cpu_seconds_total") > 0 for names in pods.values() for pod in names)


def test_teardown_leaves_nothing(cluster: Cluster) -> None:
    cluster.redis.stop()
    cluster.simulator.stop()
    started = time.monotonic()
    out = cluster_sh("down", timeout=600)
    SESSION.timed("deploy/local/cluster.sh down", started)
    assert out.splitlines()[-1] == "cluster: nothing of the cluster left", out
    # Asked again, apart from down: processes, mounts, netns, iptables chains, the bridge, cgroups, directories.
    assert cluster_sh("leftovers") == "cluster: nothing of the cluster left\n"
