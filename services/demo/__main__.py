"""Run the demo trainer against a running stack: `python -m demo --steps 3 --rollouts 32`."""

import argparse
import asyncio
import os
import random
import statistics
import time

from rubricd import RubricdClient

from .policy import BEHAVIOURS, sample


async def train(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    run_id = args.run_id or f"demo-{int(time.time())}"
    print(f"run {run_id}: {args.steps} steps x {args.rollouts} rollouts, scored by rubricd at {args.redis_url}")
    async with RubricdClient(args.redis_url, namespace=args.namespace) as client:
        for step in range(args.steps):
            batch = sample(run_id, step, args.steps, args.rollouts, rng)
            scores = await client.score([r for _, r in batch], timeout=300)
            await client.close_step(run_id, step, rollouts=len(batch))
            by_behaviour: dict[str, list[float]] = {}
            failed = 0
            for (behaviour, _), score in zip(batch, scores):
                if score.reward is None:
                    failed += 1
                else:
                    by_behaviour.setdefault(behaviour, []).append(score.reward)
            versions = sorted({s.rubric_version for s in scores})
            cells = "  ".join(
                f"{b}={statistics.mean(by_behaviour[b]):.2f}" if b in by_behaviour else f"{b}=  - "
                for b in BEHAVIOURS
            )
            print(f"step {step}: rubric v{','.join(map(str, versions))}  mean reward  {cells}" + (f"  ({failed} judge failures)" if failed else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description="rubricd demo trainer (simulated policy)")
    parser.add_argument("--redis-url", default=os.environ.get("RUBRICD_REDIS_URL", "redis://127.0.0.1:6399/0"))
    parser.add_argument("--namespace", default=os.environ.get("RUBRICD_NAMESPACE", "rubricd"))
    parser.add_argument("--run-id")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rollouts", type=int, default=32)
    parser.add_argument("--seed", type=int, default=7)
    asyncio.run(train(parser.parse_args()))


main()
