"""One operator's session against a deployed stack, as the system suites drive it (tests/system/test_compose.py
under Docker Compose, tests/k8s on a Kubernetes cluster): commands, the Docker daemon, timed steps, and a trainer
on the host scoring steps of one run and waiting for their rubric updates."""

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from redis.asyncio import Redis

from rubricd import Rollout, RubricdClient, Score
from rubricd.keys import Keys
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import answer

ROOT = Path(__file__).resolve().parents[1]


def sh(*args: str | Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    """ARGS run in the checkout: their output, or an AssertionError with the end of it."""
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args))} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done.stdout


@contextlib.contextmanager
def docker_daemon() -> Iterator[bool]:
    """A Docker daemon for the block (deploy/docker/images.sh daemon): True if it was started here, then it is
    stopped on leaving (waiting for it to exit); one already running is left alone."""
    dockerd = sh("deploy/docker/images.sh", "daemon").strip()  # a pid when it started one
    try:
        yield bool(dockerd)
    finally:
        if dockerd:
            os.kill(int(dockerd), signal.SIGTERM)
            for _ in range(300):
                if subprocess.run(["kill", "-0", dockerd], capture_output=True).returncode != 0:
                    break
                time.sleep(0.1)


class Session:
    """A trainer's run RUN on the stack whose Redis is REDIS_URL (default namespace); each step's time goes to
    ARTIFACTS/steps.tsv (the notes and the README quote these) and the output."""

    def __init__(self, run: str, redis_url: str, artifacts: Path) -> None:
        self.run, self.redis_url, self.steps = run, redis_url, artifacts / "steps.tsv"

    def timed(self, step: str, started: float) -> None:
        """Record how long STEP took since STARTED (time.monotonic())."""
        took = time.monotonic() - started
        self.steps.parent.mkdir(parents=True, exist_ok=True)
        with self.steps.open("a") as out:
            out.write(f"{step}\t{took:.1f}\n")
        print(f"\n{step}: {took:.1f} s")

    def rollouts(self, step: int, n: int, tag: str) -> list[Rollout]:
        """Honest and padded answers, in turns (ids `<tag>-s<step>-r<i>`): padding the run's rubrics miss, so its
        first step updates them."""
        return [
            answer(10 + i, 20 + step, "padded" if i % 2 else "correct", run_id=self.run, step=step,
                   rollout_id=f"{tag}-s{step}-r{i}")
            for i in range(n)
        ]  # fmt: skip

    async def history(self) -> list[int]:
        """The run's rubric versions, oldest first."""
        async with Redis.from_url(self.redis_url) as redis:
            return [r.version for r in await RubricStore(redis, Keys()).history(self.run)]

    async def close(self, client: RubricdClient, step: int, scores: list[Score]) -> None:
        """Close STEP with the rollouts SCORES answered and wait for its rubric update."""
        await client.close_step(self.run, step, rollout_ids=[s.rollout_id for s in scores])
        await client.wait_for_rubrics(self.run, step)

    async def step(self, step: int, n: int, tag: str) -> list[Score]:
        """A trainer's whole step: N rollouts scored, the step closed, its rubric update in place."""
        async with RubricdClient(self.redis_url, timeout=300) as client:
            scores = await client.score(self.rollouts(step, n, tag))
            await self.close(client, step, scores)
        return scores
