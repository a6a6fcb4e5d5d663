"""`rubricd tail`: the scorer's events, filtered, as JSON lines or one readable line each."""

import json
import subprocess
import sys

from rubricd import wire
from rubricd.messages import Event, EventKind
from tests.factories import rollout


async def test_tail_json_shows_the_scorers_events_of_one_run(stack, redis, keys, cli, start_service):
    start_service("scorer")
    for run, n in (("a", 3), ("b", 2)):
        for i in range(n):
            await redis.xadd(keys.rollouts, wire.entry(rollout(i, run_id=run, step=2, rollout_id=f"{run}-r{i}")))

    done = cli(
        "tail", "--since", "0", "--run", "a", "--kind", "rollout_scored", "--count", "3", "--json", "--timeout", "60"
    )
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted(e["rollout_id"] for e in events) == ["a-r0", "a-r1", "a-r2"]
    assert {(e["service"], e["kind"], e["run_id"], e["step"]) for e in events} == {("scorer", "rollout_scored", "a", 2)}
    assert all(e["id"] and "reward" in e["fields"] and e["fields"]["rubric_version"] == 1 for e in events)

    started = cli("tail", "--since", "0", "--service", "scorer", "--kind", "service_started", "--count", "1").stdout
    assert "scorer" in started and "service_started" in started and "consumer=scorer-0" in started

    short = cli("tail", "--since", "0", "--run", "nobody", "--count", "1", "--timeout", "1", check=False)
    assert short.returncode == 1 and "0 of 1 events" in short.stderr


async def test_tail_follows_new_events_live(stack, redis, keys, service_env, start_service):
    start_service("scorer")
    tail = subprocess.Popen(
        [sys.executable, "-m", "rubricd_services.cli", "tail", "--run", "b", "--count", "2", "--timeout", "60"],
        env=service_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert tail.stderr is not None and tail.stderr.readline().startswith(f"following {keys.events}")
        for run, i in (("a", 0), ("b", 0), ("b", 1)):
            await redis.xadd(keys.rollouts, wire.entry(rollout(i, run_id=run, step=2, rollout_id=f"{run}-r{i}")))
        out, _ = tail.communicate(timeout=60)
    finally:
        tail.kill()
    lines = out.splitlines()
    assert tail.returncode == 0 and len(lines) == 2
    assert all("scorer" in ln and "rollout_scored" in ln and "b/2/b-r" in ln and "reward=" in ln for ln in lines)


async def test_tail_knows_every_event_kind_and_the_old_names(redis, keys, cli):
    for kind in (
        "rollout_analysed",
        EventKind.ROLLOUT_ANALYZED,
        EventKind.ROLLOUT_SCORED,
    ):  # an old stream's, and today's
        await redis.xadd(keys.events, wire.entry(Event(service="analyzer", kind=kind, run_id="a", at=1.0)))
    for name in ("rollout_analysed", "rollout_analyzed"):
        done = cli("tail", "--since", "0", "--kind", name, "--count", "2", "--json", "--timeout", "10")
        assert [json.loads(line)["kind"] for line in done.stdout.splitlines()] == [
            "rollout_analysed",
            "rollout_analyzed",
        ]
    unknown = cli("tail", "--kind", "rollout_judged", "--timeout", "1", check=False)
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr and "rubrics_reloaded" in unknown.stderr
