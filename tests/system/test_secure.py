"""A locked-down stack (`make up SECURE=1 TLS=1`): Redis over TLS only, with an ACL user per role and the
default user off; Weaviate with an API key. A trainer with its own credentials gets its scores and rubric
updates, nobody else gets in, each user is held to its role, and no secret reaches a log, an event, a
metric or a dead letter.

One stack for the module: the fixture runs a short training run on it (and one rejected rollout), then
the tests look at what it left and try what each user may not do.
"""

import asyncio
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec
import pytest
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError, ConnectionError, NoPermissionError, TimeoutError

from rubricd import RubricdClient, wire
from rubricd.keys import ANALYZERS, ARM, CANARIES, COMPARERS, SCORERS, SUMMARIZERS, UPDATERS, Keys
from rubricd.messages import ArmReward, JudgeStatus, Score
from rubricd_services.state.arm import prompt_key
from tests.factories import arm_rollout, group
from tests.redis_users import USERS

pytestmark = pytest.mark.integration

keys = Keys()  # the stack's services run in the default namespace, which its ACL file is made for
RUN = "locked"
SAMPLE = Path(__file__).parents[1] / "fixtures" / "healthbench_sample.jsonl"
METRICS = {"scorer": 1, "summarizer": 2, "updater": 3, "analyzer-1": 11}  # offsets from the metrics base port


def settings_of(stack: Any, user: str) -> dict[str, str]:
    """What `stack.sh env USER` tells USER to use."""
    lines = stack.sh("env", user).stdout.splitlines()
    return dict(line.removeprefix("export ").split("=", 1) for line in lines)


def url_of(stack: Any, user: str) -> str:
    return settings_of(stack, user)["RUBRICD_REDIS_URL"]


@dataclass
class Run:
    """The locked-down stack, its secrets, and what a short training run on it left."""

    stack: Any
    secrets: dict[str, str]  # file name under secrets/ -> the secret
    scores: list[Score]
    notice: Score  # what the scorer told the trainer about its rejected rollout
    refused: list[dict[str, Any]]  # Redis's ACL LOG after the run: every command it refused
    metrics: dict[str, str]  # service -> its /metrics page
    status: subprocess.CompletedProcess[str]  # `rubricd status --json` as the cli user
    healthbench: list[subprocess.CompletedProcess[str]]  # `rubricd rubrics import` and `report` as the cli user
    gateway: dict[str, Any]  # the HTTP gateway's answers to an OpenRLHF request and its retry, as its own user
    dashboard: dict[str, httpx.Response]  # `rubricd serve dashboard`'s JSON routes, as the cli user
    arm: list[subprocess.CompletedProcess[str]]  # `rubricd arm import`, `phases` and `dataset`, as the cli user
    arm_rewards: list[ArmReward]  # a generator and a judge rollout, rewarded by the arm service as its own user


@pytest.fixture(scope="module")
async def run(start_module_stack, serve_dashboard) -> Run:
    env = {"RUBRICD_SECURE": "1", "RUBRICD_REDIS_TLS": "1", "RUBRICD_ANALYZER_WORKERS": "1"}
    env["RUBRICD_REWARD_POLICY"] = "alternating"  # the scorer's schedule and class statistics under its ACL too
    stack = start_module_stack("redis", "weaviate", "simulator", "services", env=env)
    secrets = {
        path.name: path.read_text().strip()
        for path in (stack.stack_dir / "secrets").iterdir()
        if path.name.startswith("redis-") or path.name == "weaviate-key"
    }
    padded = "17 + 25 = 42. " + "Let me say it once more to be sure. " * 8
    # One sample group, judged together by three votes and sampled for analysis: under the ACLs too.
    rollouts = group(
        [padded, "17 + 25 = 42."] * 2,
        name="q1",
        run_id=RUN,
        prompt="What is 17 + 25?",
        reference="42",
        judge_mode="group",
        judge_votes=3,
        analysis_sample="extremes",
    )
    probe = keys.replies("trainer-probe")  # a reply stream of the trainer's own, read without the client
    rejected = {"run_id": RUN, "rollout_id": "bad", "step": -1, "prompt": "p", "response": "r", "reply_to": probe}
    async with RubricdClient(url_of(stack, "trainer")) as client:
        scores = await client.score(rollouts, timeout=120)
        await client.redis.xadd(keys.rollouts, {wire.FIELD: msgspec.json.encode(rejected)})
        await client.close_step(RUN, 0, rollouts=len(rollouts))
        await client.wait_for_rubrics(RUN, 0, timeout=120)
        [[_, [(_, fields)]]] = await client.redis.xread({probe: "0-0"}, block=30_000)
    cli = [sys.executable, "-m", "rubricd_services.cli", "rubrics"]
    healthbench = [
        subprocess.run(
            [*cli, *args],
            env={**os.environ, **settings_of(stack, "cli")},
            capture_output=True,
            text=True,
            timeout=60,
        )
        for args in (["import", str(SAMPLE), "--run", "imported", "--json"], ["report", RUN])
    ]
    # Rubric-ARM: the cli user imports preference pairs, sets the run's phases and writes the judge's prompts
    # (asking the frozen generator); the trainer has a generator and a judge rollout rewarded.
    pairs = stack.stack_dir / "preferences.jsonl"
    pairs.write_text('{"prompt": "Name the largest planet.", "chosen": "Jupiter.", "rejected": "Mars.", "id": "p0"}\n')
    arm = [
        subprocess.run(
            [sys.executable, "-m", "rubricd_services.cli", "arm", *args],
            env={**os.environ, **settings_of(stack, "cli")},
            capture_output=True,
            text=True,
            timeout=60,
        )
        for args in (
            ["import", RUN, str(pairs)],
            ["phases", RUN, "--simultaneous"],
            ["dataset", RUN, "--phase", "judge", "--generator", "gen-v1", "-o", "/dev/null"],
        )
    ]
    drafted = '{"rubrics": [{"criterion": "The response is concise and brief.", "points": 3, "meta_class": "accuracy", '
    drafted += '"rule": "principle"}]}'
    arm_rollouts = [
        arm_rollout(run_id=RUN, rollout_id="g0", completion=drafted, prompt_id=prompt_key("Name the largest planet.")),
        arm_rollout("judge", run_id=RUN, rollout_id="j0", completion="not a verdict", comparison_id="p0"),
    ]
    async with RubricdClient(url_of(stack, "trainer")) as client:
        arm_rewards = await client.arm_rewards(arm_rollouts, timeout=120)
    base = stack.ports["RUBRICD_METRICS_BASE_PORT"]
    async with httpx.AsyncClient(timeout=60) as http:  # the HTTP gateway, as its own Redis user
        request = {"query": ["What is 17 + 25? 17 + 25 = 42."], "prompts": ["What is 17 + 25?"], "labels": ["42"]}
        asked = await http.post(f"http://127.0.0.1:{base + 4}/get_reward?run={RUN}-http", json=request)
        again = await http.post(f"http://127.0.0.1:{base + 4}/get_reward?run={RUN}-http", json=request)  # a retry
        assert asked.status_code == again.status_code == 200, (asked.text, again.text)
        gateway = {"first": asked.json(), "retried": again.json()}
    pages = {}  # `rubricd serve dashboard` as the cli user, on a port of the stack's block left free (arm: + 6)
    with serve_dashboard({**os.environ, **settings_of(stack, "cli")}, base + 7) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            routes = {"runs": "api/runs", "run": f"api/runs/{RUN}", "groups": "api/groups", "events": "api/events"}
            for name, path in routes.items():
                pages[name] = await http.get(path)
    admin = Redis.from_url(url_of(stack, "admin"))
    try:
        refused = await admin.acl_log()
    finally:
        await admin.aclose()
    async with httpx.AsyncClient(timeout=60) as http:
        metrics = {name: (await http.get(f"http://127.0.0.1:{base + i}/metrics")).text for name, i in METRICS.items()}
    status = subprocess.run(
        [sys.executable, "-m", "rubricd_services.cli", "status", "--json"],
        env={**os.environ, **settings_of(stack, "cli")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Run(
        stack,
        secrets,
        scores,
        wire.decode(wire.payload(fields), Score),
        refused,
        metrics,
        status,
        healthbench,
        gateway,
        pages,
        arm,
        arm_rewards,
    )


async def refused(url: str, *command: Any) -> bool:
    """Whether Redis refuses COMMAND from URL's user for want of permission (any other error is raised)."""
    client = Redis.from_url(url)
    try:
        await client.execute_command(*command)
    except NoPermissionError:
        return True
    finally:
        await client.aclose()
    return False


def test_a_trainer_with_its_credentials_gets_its_scores_and_rubric_updates_over_tls(run: Run) -> None:
    url = urlsplit(url_of(run.stack, "trainer"))
    assert (url.scheme, url.username) == ("rediss", "trainer") and "ssl_ca_certs=" in url.query
    assert [s.status for s in run.scores] == [JudgeStatus.OK] * 4
    # Judged together by three votes: the group's two distinct responses in one call.
    assert all(s.grouping and s.grouping.members == 2 and s.votes == 3 for s in run.scores)
    [active] = {s.active_meta_class for s in run.scores}  # one class for the step
    assert active is not None
    # Its rejected rollout: answered on its own reply stream and dead-lettered.
    assert (run.notice.rollout_id, run.notice.status) == ("bad", JudgeStatus.REJECTED)


def test_the_cli_user_imports_healthbench_sets_and_reports_the_run(run: Run) -> None:
    imported, reported = run.healthbench
    assert imported.returncode == 0, imported.stderr
    assert len(msgspec.json.decode(imported.stdout)["installed"]) == 4
    assert reported.returncode == 0, reported.stderr
    assert msgspec.json.decode(reported.stdout)["metrics"]["overall_score:n_samples"] == 4  # every rollout scored


def test_no_service_was_refused_anything_the_run_needed(run: Run) -> None:
    assert run.refused == []  # the gateway's answers below included: it publishes, waits and re-reads as itself
    assert [done.returncode for done in run.arm] == [0, 0, 0], [done.stderr for done in run.arm]
    generator, judge = run.arm_rewards
    assert (generator.status, generator.judged, judge.status, judge.reward) == ("ok", 1, "ok", -1.0)
    assert judge.penalty is not None
    assert run.gateway["first"]["rewards"] == run.gateway["retried"]["rewards"] == [1.0]
    assert run.status.returncode == 0, run.status.stderr  # the cli user reads what `rubricd status` shows
    assert {name: page.status_code for name, page in run.dashboard.items()} == dict.fromkeys(
        ("runs", "run", "groups", "events"), 200
    )  # and what the dashboard shows
    [step] = run.dashboard["run"].json()["steps"]
    assert (step["step"], step["scored"], step["failed"]) == (0, 4, 0)
    assert RUN in {r["run_id"] for r in run.dashboard["runs"].json()["runs"]}
    report = msgspec.json.decode(run.status.stdout)
    assert {s["stream"]: s["length"] for s in report["streams"]}[keys.dead_letters] == 1


async def test_a_client_without_credentials_or_tls_is_refused(run: Run) -> None:
    trainer = urlsplit(url_of(run.stack, "trainer"))
    anonymous = trainer._replace(netloc=f"127.0.0.1:{trainer.port}").geturl()
    wrong = trainer._replace(netloc=f"trainer:wrong@127.0.0.1:{trainer.port}").geturl()
    for url in (anonymous, wrong):
        client = Redis.from_url(url)
        with pytest.raises(AuthenticationError):
            await client.ping()
        await client.aclose()
    plain = Redis.from_url(trainer._replace(scheme="redis", query="").geturl(), socket_timeout=3)
    with pytest.raises((ConnectionError, TimeoutError)):  # the port speaks TLS only
        await plain.ping()
    await plain.aclose()


async def test_the_trainer_reads_only_its_own_replies_and_writes_only_rollouts_and_steps(run: Run) -> None:
    trainer = url_of(run.stack, "trainer")
    assert not await refused(trainer, "XREAD", "STREAMS", keys.replies("trainer-probe"), "0-0")
    for other in ("c-0123", "trainer_b-0123"):
        assert await refused(trainer, "XREAD", "STREAMS", keys.replies(other), "0-0")
    assert await refused(trainer, "XREAD", "STREAMS", keys.rollouts, "0-0")  # other trainers' rollouts
    assert not await refused(trainer, "HGET", keys.rubric_set(RUN), "current")
    assert await refused(trainer, "HSET", keys.rubric_set(RUN), "current", "{}")
    assert await refused(trainer, "DEL", keys.rubric_set(RUN))
    for stream in (keys.scored, keys.analyses, keys.summaries, keys.rubrics_updated, keys.events):
        assert await refused(trainer, "XADD", stream, "*", wire.FIELD, "{}"), stream
    assert await refused(trainer, "FLUSHDB")


async def test_each_service_user_is_held_to_its_role(run: Run) -> None:
    def url(user: str) -> str:
        return url_of(run.stack, user)

    assert await refused(url("scorer"), "XADD", keys.summaries, "*", wire.FIELD, "{}")
    assert await refused(url("scorer"), "HSET", keys.step(RUN, 0), "summarized", "1")
    assert await refused(url("analyzer"), "HSET", keys.rubric_set(RUN), "current", "{}")  # it only reads them
    assert await refused(url("summarizer"), "XADD", keys.rubrics_updated, "*", wire.FIELD, "{}")
    assert await refused(url("updater"), "XRANGE", keys.replies("trainer-probe"), "-", "+")  # a key, not a command
    for user in ("scorer", "cli"):
        assert await refused(url(user), "FLUSHDB")
        assert await refused(url(user), "CONFIG", "GET", "requirepass")
        assert await refused(url(user), "ACL", "LIST")


async def test_the_scorers_canaries_read_and_ack_the_canary_steps_in_their_own_consumer_group(run: Run) -> None:
    """The scorer's user may read and ack the canary steps in the canaries' group (a refused XACK would leave them
    pending), and record a failed one's retries."""
    admin = Redis.from_url(url_of(run.stack, "admin"))
    deadline = time.monotonic() + 60
    try:
        while True:
            [group] = [g for g in await admin.xinfo_groups(keys.canary_steps) if g["name"] == CANARIES.encode()]
            if group["entries-read"] and group["pending"] == 0 and not group["lag"]:
                break
            assert time.monotonic() < deadline, group
            await asyncio.sleep(0.2)
        assert not [k async for k in admin.scan_iter(match=keys.failure(keys.events, "*"))]
    finally:
        await admin.aclose()


async def test_keda_s_user_reads_each_group_s_backlog_and_nothing_else(run: Run) -> None:
    # What KEDA's redis-streams scaler sends, after its client's HELLO 3 (which redis-py says too, with protocol 3).
    consumed = {
        keys.rollouts: SCORERS,
        keys.comparisons: COMPARERS,
        keys.arm: ARM,
        keys.scored: ANALYZERS,
        keys.steps: SUMMARIZERS,
        keys.analyses: SUMMARIZERS,
        keys.summaries: UPDATERS,
    }
    client = Redis.from_url(url_of(run.stack, "keda"), protocol=3, decode_responses=True)
    try:
        assert await client.ping()
        assert (await client.info())["redis_version"]
        for stream, group in consumed.items():
            assert group in {g["name"] for g in await client.xinfo_groups(stream)}, stream
            assert await client.xlen(stream) >= 0
            assert (await client.xpending(stream, group))["pending"] >= 0
    finally:
        await client.aclose()
    keda = url_of(run.stack, "keda")
    assert await refused(keda, "XADD", keys.rollouts, "*", wire.FIELD, "{}")
    assert await refused(keda, "XREADGROUP", "GROUP", SCORERS, "keda", "COUNT", "1", "STREAMS", keys.rollouts, ">")
    assert await refused(keda, "XRANGE", keys.rollouts, "-", "+")  # the backlog's size, never its content
    assert await refused(keda, "GET", keys.score(RUN, "q1-r0"))
    assert await refused(keda, "XLEN", keys.events)  # only the streams a group consumes


def test_weaviate_refuses_requests_without_the_key(run: Run) -> None:
    schema = f"http://127.0.0.1:{run.stack.weaviate_port}/v1/schema"
    assert httpx.get(schema, timeout=10).status_code == 401
    key = settings_of(run.stack, "cli")["RUBRICD_WEAVIATE_API_KEY"]
    assert httpx.get(schema, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code == 200
    assert "RUBRICD_WEAVIATE_API_KEY" not in settings_of(run.stack, "trainer")  # a trainer needs no memory


async def test_no_secret_reaches_a_log_an_event_a_metric_or_a_dead_letter(run: Run) -> None:
    admin = Redis.from_url(url_of(run.stack, "admin"))
    try:
        events = await admin.xrange(keys.events)
        letters = await admin.xrange(keys.dead_letters)
        failures = [await admin.hgetall(k) async for k in admin.scan_iter(match=keys.failure("*", "*"))]
    finally:
        await admin.aclose()
    started = [e for _, e in events if b'"service_started"' in e[wire.FIELD.encode()]]
    assert (
        len(started) == 7 and len(letters) == 1
    )  # scorer, comparer, arm, summarizer, updater, gateway, analyzer; the rejection
    logs = {path.name: path.read_text() for path in (run.stack.stack_dir / "logs").glob("*.log")}
    assert {"scorer.log", "analyzer-1.log", "redis.log", "weaviate.log"} <= set(logs)
    places = {
        **logs,
        "events": repr(events),
        "dead letters": repr(letters),
        "failure records": repr(failures),
        **{f"{name} /metrics": page for name, page in run.metrics.items()},
        "rubricd status": run.status.stdout + run.status.stderr,
    }
    assert len(run.secrets) == 12  # eleven Redis users and the Weaviate key
    for name, secret in run.secrets.items():
        for place, text in places.items():
            assert secret not in text, f"{name} in {place}"


async def test_a_locked_down_stack_without_tls_keeps_its_secrets_to_its_owner(start_stack, fresh_ports) -> None:
    stack = start_stack(fresh_ports, "redis", env={"RUBRICD_SECURE": "1"})
    secrets = stack.stack_dir / "secrets"
    assert secrets.stat().st_mode & 0o777 == 0o700
    assert {p.name: p.stat().st_mode & 0o777 for p in secrets.glob("redis-*")} == {
        f"redis-{user}": 0o600 for user in USERS
    }
    acl = (secrets / "users.acl").read_text()  # hashes only: readable by a Redis of another uid
    assert not any(p.read_text().strip() in acl for p in secrets.glob("redis-*"))
    url = url_of(stack, "trainer")
    assert url.startswith("redis://trainer:")
    client = RubricdClient(url)
    try:
        assert client.client_id.startswith("trainer-")  # so its reply stream is one it may read
        assert await client.redis.ping()
    finally:
        await client.close()
    anonymous = Redis.from_url(stack.redis_url)
    with pytest.raises(AuthenticationError):
        await anonymous.ping()
    await anonymous.aclose()


def test_a_client_names_its_reply_stream_after_its_redis_user() -> None:
    assert RubricdClient("redis://trainer:pw@127.0.0.1:1/0").client_id.startswith("trainer-")
    assert RubricdClient("redis://127.0.0.1:1/0").client_id.startswith("c-")
    assert RubricdClient("redis://trainer:pw@127.0.0.1:1/0", client_id="mine").client_id == "mine"
