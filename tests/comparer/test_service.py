"""Pairwise judging against the real Redis and the LLM simulator: preferences, accuracy, dead letters, export."""

import asyncio
import json
import subprocess

import httpx
import msgspec
import pytest

from rubricd import InvalidRollout, RubricdClient, SyncRubricdClient, wire
from rubricd.keys import COMPARERS
from rubricd.messages import (
    Comparison,
    DeadLetter,
    Event,
    EventKind,
    GeneratedBy,
    JudgeStatus,
    Preference,
    Rubric,
    RubricsUpdated,
)
from rubricd_services.state.rubric_sets import RubricStore
from rubricd_testbed.simulator.pairwise import PREFER_FIRST
from tests import forks
from tests.factories import rubric_set

pytestmark = pytest.mark.integration

QUESTION = "What is 17 + 25?"
RIGHT, WRONG = "The sum is 42.", "The sum is 41."


def comparison(i: int, *, right_first: bool, label_right: bool = True, prompt: str = QUESTION) -> Comparison:
    """A pair where exactly one response holds the reference; labelled with the right one unless `label_right`
    is false (then with the wrong one: a judge that is right disagrees with the label)."""
    a, b = (RIGHT, WRONG) if right_first else (WRONG, RIGHT)
    right = "A" if right_first else "B"
    wrong = "B" if right_first else "A"
    return Comparison(
        run_id="pairs",
        comparison_id=f"c{i}",
        step=1,
        prompt=prompt,
        response_a=a,
        response_b=b,
        reference="42",
        label=right if label_right else wrong,
    )


def events(raw: list) -> list[Event]:
    return [wire.decode(wire.payload(fields), Event) for _, fields in raw]


def cli(service_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = forks.run(*args, env=service_env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


async def test_labelled_comparisons_give_the_accuracy_the_labels_imply(
    stack, redis, keys, start_comparer, service_env, fresh_ports, metric
) -> None:
    port = fresh_ports["RUBRICD_METRICS_BASE_PORT"]
    start_comparer(metrics_port=port)
    # 6 pairs, the right response in either position; 4 labelled right, 2 labelled wrong: accuracy 4/6.
    batch = [comparison(i, right_first=i % 2 == 0, label_right=i < 4) for i in range(6)]
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        preferences = await client.compare(batch, timeout=60)
    for sent, p in zip(batch, preferences):
        right = "A" if sent.response_a == RIGHT else "B"
        assert (p.comparison_id, p.status, p.winner, p.consistent) == (sent.comparison_id, "ok", right, True)
        assert p.correct is (sent.label == right)
        assert (p.gatekeeper, p.meta_class, p.rubric_version, p.format_ok) == ("correct", "accuracy", 1, True)
        assert [o.order for o in p.orders] == ["AB", "BA"]
        assert {r.rubric_id: (r.a_met, r.b_met) for r in p.results}["correct"] == (right == "A", right == "B")

    report = json.loads(cli(service_env, "accuracy", "pairs", "--json").stdout)
    v1 = report["versions"]["1"]
    assert (v1["judged"], v1["labelled"], v1["correct"]) == (6, 6, 4)
    assert v1["accuracy"] == pytest.approx(4 / 6) and v1["consistency"] == 1.0
    assert v1["by_meta_class"] == {"accuracy": {"labelled": 6, "correct": 4, "accuracy": pytest.approx(4 / 6)}}
    assert "0.667" in cli(service_env, "accuracy", "pairs").stdout

    async with httpx.AsyncClient() as http:
        page = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    assert metric(page, "rubricd_judge_accuracy", run_id="pairs", rubric_version="1") == pytest.approx(4 / 6)
    assert metric(page, "rubricd_judge_consistency", run_id="pairs", rubric_version="1") == 1.0
    assert metric(page, "rubricd_preferences_total", status="ok", outcome="correct") == 4
    assert metric(page, "rubricd_preferences_total", status="ok", outcome="wrong") == 2
    assert metric(page, "rubricd_llm_calls_total", agent="pairwise") == 12  # both orders of 6

    seen = events(await redis.xrange(keys.events))
    judged = [e for e in seen if e.kind == EventKind.COMPARISON_JUDGED]
    assert sorted(e.fields["comparison_id"] for e in judged) == [f"c{i}" for i in range(6)]
    last = [e for e in seen if e.kind == EventKind.JUDGE_ACCURACY][-1]
    assert (last.fields["labelled"], last.fields["accuracy"]) == (6, pytest.approx(4 / 6))


async def test_an_order_dependent_preference_is_reported_inconsistent_not_as_a_win(
    stack, redis, keys, start_comparer, service_env
) -> None:
    start_comparer()
    biased = comparison(0, right_first=True, prompt=f"{PREFER_FIRST} {QUESTION}")
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        [p, fair] = await client.compare([biased, comparison(1, right_first=True)], timeout=60)
    assert (p.status, p.winner, p.consistent, p.correct, p.gatekeeper) == ("ok", None, False, False, None)
    assert [(o.order, o.winner) for o in p.orders] == [("AB", "A"), ("BA", "B")]
    assert "inconsistent" in p.justification
    assert (fair.winner, fair.consistent) == ("A", True)
    v1 = json.loads(cli(service_env, "accuracy", "pairs", "--json").stdout)["versions"]["1"]
    assert (v1["both_orders"], v1["consistent"], v1["consistency"]) == (2, 1, 0.5)
    assert (v1["labelled"], v1["correct"], v1["by_meta_class"]["none"]["correct"]) == (2, 1, 0)


async def test_a_malformed_comparison_is_dead_lettered_and_its_publisher_told(
    stack, redis, keys, start_comparer, service_env, tmp_path, eventually
) -> None:
    start_comparer()
    reply_to = keys.replies("raw-publisher")
    bad = {
        **msgspec.to_builtins(comparison(0, right_first=True)),
        "label": "C",
        "reply_to": reply_to,
    }
    with pytest.raises(InvalidRollout, match="label"):
        async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
            await client.compare([msgspec.structs.replace(comparison(0, right_first=True), label="C")])  # type: ignore[arg-type]
    await redis.xadd(keys.comparisons, {wire.FIELD: msgspec.json.encode(bad)})
    [(_, fields)] = await eventually(lambda: redis.xrange(reply_to), f"a reply on {reply_to}")
    rejected = wire.decode(wire.payload(fields), Preference)
    assert (rejected.comparison_id, rejected.status, rejected.winner) == ("c0", JudgeStatus.REJECTED, None)
    assert "malformed comparison" in (rejected.error or "") and "label" in (rejected.error or "")
    [(_, letter_fields)] = await redis.xrange(keys.dead_letters)
    letter = wire.decode(wire.payload(letter_fields), DeadLetter)
    assert (letter.stream, letter.group, letter.service) == (keys.comparisons, COMPARERS, "comparer")
    assert letter.reason == rejected.error
    pending = await redis.xpending(keys.comparisons, COMPARERS)
    assert pending["pending"] == 0
    assert await redis.xlen(keys.kept_comparisons("pairs")) == 0

    # Fixed and replayed (`rubricd dlq replay --fix-file`), it is judged.
    fix = tmp_path / "fixed.json"
    fix.write_bytes(msgspec.json.encode({**bad, "label": "A"}))
    [listed] = [json.loads(line) for line in cli(service_env, "dlq", "list", "--json").stdout.splitlines()]
    assert f"onto {keys.comparisons}" in cli(service_env, "dlq", "replay", listed["id"], "--fix-file", str(fix)).stdout

    async def two_replies() -> list:
        replies = await redis.xrange(reply_to)
        return replies if len(replies) == 2 else []

    replies = await eventually(two_replies, f"a second reply on {reply_to}, to the replayed comparison")
    judged = wire.decode(wire.payload(replies[-1][1]), Preference)
    assert (judged.status, judged.winner, judged.correct) == (JudgeStatus.OK, "A", True)


async def test_a_comparison_published_twice_is_judged_once(stack, redis, keys, start_comparer, service_env):
    start_comparer()
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        first = await client.compare_one(comparison(0, right_first=True), timeout=30)
        # The same id with other content: the first Preference again, not a new judgment.
        again = await client.compare_one(comparison(0, right_first=False), timeout=30)
    assert again == first and first.winner == "A"
    assert await redis.xlen(keys.kept_comparisons("pairs")) == 1
    v1 = json.loads(cli(service_env, "accuracy", "pairs", "--json").stdout)["versions"]["1"]
    assert (v1["judged"], v1["labelled"]) == (1, 1)
    usage = await redis.hgetall(keys.usage("pairs"))
    assert int(usage[b"pairwise:rubricd-simulator:calls"]) == 2  # both orders of one judgment


async def test_export_writes_the_judged_comparisons_as_judge_records(
    stack, redis, keys, start_comparer, service_env, tmp_path
) -> None:
    start_comparer(pairwise_both_orders="false")
    batch = [comparison(i, right_first=i % 2 == 0, label_right=i != 2) for i in range(5)]
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        preferences = await client.compare(batch, timeout=60)
    out = tmp_path / "export.jsonl"
    # --page 2: the records come from three reads of the kept comparisons.
    cli(service_env, "export", "pairs", "--output", str(out), "--page", "2", "--only", "judge")
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    records = {r["comparison_id"]: r for r in lines}  # in commit order: judged concurrently
    seed = await RubricStore(redis, keys).current("pairs")
    assert seed is not None
    assert len(lines) == 5 and sorted(records) == [c.comparison_id for c in batch]
    for sent, p in zip(batch, preferences):
        r = records[sent.comparison_id]
        assert r["record"] == "judge" and r["label"] == sent.label and r["prompt"] == sent.prompt
        assert (r["response_a"], r["response_b"]) == (sent.response_a, sent.response_b)
        assert r["output"]["winner"] == p.winner and r["correct"] == p.correct and r["format_ok"] is True
        assert r["output"]["consistent"] is None and len(r["output"]["orders"]) == 1
        assert r["rubric_set"]["version"] == 1
        assert [x["id"] for x in r["rubric_set"]["rubrics"]] == [x.id for x in seed.rubrics]
        assert r["output"]["results"] == msgspec.to_builtins(p.results)
    assert [records[c.comparison_id]["correct"] for c in batch] == [True, True, False, True, True]
    stdout = cli(service_env, "export", "pairs").stdout.splitlines()
    assert [json.loads(line) for line in stdout] == lines


async def test_export_rewards_a_generated_rubric_set_with_the_accuracy_it_led_to(
    stack, redis, keys, start_comparer, service_env
) -> None:
    start_comparer(rubrics_mode="per_instance")
    rubrics = [Rubric(id="correct", criterion="The response states the correct final answer.", points=5)]
    generated = rubric_set(
        *rubrics,
        run_id="pairs",
        instance_key="sum",
        generated_by=GeneratedBy(model="sim", prompt_sha256="0" * 64, generated_at=1.0),
    )
    assert await RubricStore(redis, keys).publish(generated)
    batch = [
        msgspec.structs.replace(comparison(i, right_first=True, label_right=i != 0), instance_key="sum")
        for i in range(4)
    ]
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        await client.compare(batch, timeout=60)
    lines = cli(service_env, "export", "pairs", "--only", "generator").stdout.splitlines()
    [record] = [json.loads(line) for line in lines]
    assert (record["record"], record["instance_key"], record["prompt"]) == ("generator", "sum", QUESTION)
    assert record["rubric_set"]["generated_by"]["model"] == "sim"
    assert (record["labelled"], record["correct"], record["reward"]) == (4, 3, 0.75)
    judged = [json.loads(line) for line in cli(service_env, "export", "pairs", "--only", "judge").stdout.splitlines()]
    assert len(judged) == 4
    assert all(r["instance_key"] == "sum" and r["rubric_set"]["generated_by"]["model"] == "sim" for r in judged)
    assert sum(r["correct"] for r in judged) == 3


async def test_the_sync_client_compares_a_batch(stack, keys, start_comparer) -> None:
    start_comparer()
    batch = [comparison(i, right_first=i == 0) for i in range(2)]

    def compare() -> list[Preference]:
        with SyncRubricdClient(stack.redis_url, namespace=keys.namespace) as client:
            return client.compare(batch, timeout=60)

    preferences = await asyncio.to_thread(compare)
    assert [(p.comparison_id, p.winner, p.correct) for p in preferences] == [("c0", "A", True), ("c1", "B", True)]


async def test_a_failed_judge_is_a_status_never_a_winner(stack, redis, keys, start_comparer, service_env) -> None:
    start_comparer()
    failing = msgspec.structs.replace(comparison(0, right_first=True), response_b="[sim:fail=500] The sum is 41.")
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        [p] = await client.compare([failing], timeout=60)
    assert (p.status, p.winner, p.correct, p.format_ok) == (JudgeStatus.JUDGE_FAILED, None, None, False)
    assert "500" in (p.error or "")
    v1 = json.loads(cli(service_env, "accuracy", "pairs", "--json").stdout)["versions"]["1"]
    assert (v1["judged"], v1["failed"], v1["labelled"], v1["accuracy"]) == (0, 1, 0, None)
    [event] = [e for e in events(await redis.xrange(keys.events)) if e.kind == EventKind.JUDGE_FAILED]
    assert event.fields["comparison_id"] == "c0"


async def test_comparisons_of_a_new_prompt_are_judged_under_its_generated_set_and_reward_the_generator(
    stack, redis, keys, start_comparer, service_env
) -> None:
    start_comparer(rubrics_mode="per_instance", generate_rubrics="true")
    # 4 pairs of a prompt never seen: the first comparison has the generator write its set; 3 labels are right.
    batch = [
        msgspec.structs.replace(comparison(i, right_first=i % 2 == 0, label_right=i != 3), instance_key="gen")
        for i in range(4)
    ]
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        preferences = await client.compare(batch, timeout=60)
    current = await RubricStore(redis, keys).current("pairs", "gen")
    assert current is not None and current.generated_by is not None and current.version == 1
    for p in preferences:
        assert (p.rubrics_generation, p.rubric_version, p.instance_key) == ("generated", 1, "gen")
    assert [p.correct for p in preferences] == [True, True, True, False]
    generated = [e for e in events(await redis.xrange(keys.events)) if e.kind == EventKind.RUBRICS_GENERATED]
    assert len(generated) == 1
    lines = cli(service_env, "export", "pairs", "--only", "generator").stdout.splitlines()
    [record] = [json.loads(line) for line in lines]
    assert (record["instance_key"], record["prompt"], record["reward"], record["labelled"]) == (
        "gen",
        QUESTION,
        0.75,
        4,
    )
    assert [r["id"] for r in record["rubric_set"]["rubrics"]] == [r.id for r in current.rubrics]
    judged = [json.loads(line) for line in cli(service_env, "export", "pairs", "--only", "judge").stdout.splitlines()]
    assert [r["rubrics_generation"] for r in judged] == ["generated"] * 4


async def test_a_reply_to_outside_the_reply_streams_or_not_a_stream_is_dead_lettered(
    stack, redis, keys, start_comparer, eventually
):
    start_comparer()
    squatted = keys.replies("squatted")
    await redis.set(squatted, "not a stream")
    sent = [
        {**msgspec.to_builtins(comparison(0, right_first=True)), "reply_to": f"{keys.namespace}:events"},
        {**msgspec.to_builtins(comparison(1, right_first=True)), "reply_to": squatted},
    ]
    for body in sent:
        await redis.xadd(keys.comparisons, {wire.FIELD: msgspec.json.encode(body)})

    async def two_letters() -> list[DeadLetter]:
        letters = [wire.decode(wire.payload(f), DeadLetter) for _, f in await redis.xrange(keys.dead_letters)]
        return letters if len(letters) == 2 else []

    letters = await eventually(two_letters, "both comparisons dead-lettered")
    reasons = [letter.reason for letter in letters]
    assert any("is not under" in r for r in reasons)
    assert any(f"{squatted} holds a string, not a stream" in r for r in reasons)
    assert await redis.get(squatted) == b"not a stream"  # left alone
    assert await redis.xlen(keys.kept_comparisons("pairs")) == 0 and not await redis.exists(keys.accuracy("pairs"))


async def test_a_rubric_update_reaches_the_next_comparison_and_is_logged(
    stack, redis, keys, start_comparer, eventually
) -> None:
    start_comparer()
    store = RubricStore(redis, keys)
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        first = await client.compare_one(comparison(0, right_first=True), timeout=60)
        v1 = await store.current("pairs")
        assert v1 is not None and first.rubric_version == v1.version == 1
        assert await store.publish(msgspec.structs.replace(v1, version=2))

        async def reloaded() -> list[Event]:
            found = [
                e
                for e in events(await redis.xrange(keys.events))
                if e.kind == EventKind.RUBRICS_RELOADED and e.service == "comparer" and e.fields.get("version") == 2
            ]
            return found

        await redis.xadd(
            keys.rubrics_updated, wire.entry(RubricsUpdated(run_id="pairs", version=2, previous_version=1))
        )
        [event] = await eventually(reloaded, "the comparer to reload the rubrics of run pairs at v2")
        second = await client.compare_one(comparison(1, right_first=False), timeout=60)
    assert event.run_id == "pairs" and "from the next comparison" in event.detail
    assert second.rubric_version == 2 and second.winner == "B"
