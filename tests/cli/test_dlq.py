"""`rubricd dlq list | replay`: a rollout the scorer dead-lettered, fixed and replayed, is then scored."""

import json
import time

from rubricd import wire
from rubricd.messages import DeadLetter, JudgeStatus, Rollout, ScoredRollout
from tests.factories import rollout


def big(response: str) -> Rollout:
    """The rollout `big-1` of step 4, answering RESPONSE."""
    return rollout(step=4, rollout_id="big-1", response=response)


async def test_a_fixed_oversized_rollout_is_replayed_and_then_scored(
    stack, redis, keys, cli, start_service, wait_len, tmp_path
):
    start_service("scorer", max_rollout_bytes=1024)
    await redis.xadd(keys.rollouts, wire.entry(big("4 " + "and so on " * 200)))
    await wait_len(keys.dead_letters, 1)

    [letter] = [json.loads(ln) for ln in cli("dlq", "list", "--json").stdout.splitlines()]
    assert (letter["stream"], letter["service"], letter["group"]) == (keys.rollouts, "scorer", "scorers")
    assert "oversized rollout" in letter["reason"] and '"rollout_id":"big-1"' in letter["payload"]
    text = cli("dlq", "list").stdout
    assert letter["id"] in text and "oversized rollout" in text and "rollouts" in text

    fix = tmp_path / "fixed.json"
    fix.write_bytes(wire.encode(big("4")))
    replayed = cli("dlq", "replay", letter["id"], "--fix-file", str(fix)).stdout
    assert f"{letter['id']}: replayed onto {keys.rollouts}" in replayed and "fixed payload" in replayed
    assert await redis.xlen(keys.dead_letters) == 0

    await wait_len(keys.scored, 1)
    [(_, fields)] = await redis.xrange(keys.scored)
    scored = wire.decode(wire.payload(fields), ScoredRollout)
    assert (scored.rollout.rollout_id, scored.rollout.response, scored.score.status) == ("big-1", "4", JudgeStatus.OK)
    again = cli("dlq", "replay", letter["id"], check=False)
    assert again.returncode == 1 and "no dead letter" in again.stderr
    events = cli("tail", "--since", "0", "--service", "cli", "--count", "1", "--json").stdout
    assert json.loads(events)["kind"] == "dead_letter_replayed"


async def test_replay_refuses_a_stream_outside_the_namespace_and_a_fix_that_does_not_parse(
    stack, redis, keys, cli, tmp_path
):
    def letter(stream: str) -> DeadLetter:
        return DeadLetter(
            stream=stream,
            entry_id="1-0",
            group="scorers",
            service="scorer",
            reason="test",
            deliveries=1,
            payload=wire.encode(big("4")),
            at=time.time(),
        )

    foreign = (await redis.xadd(keys.dead_letters, wire.entry(letter("elsewhere:rollouts")))).decode()
    ours = (await redis.xadd(keys.dead_letters, wire.entry(letter(keys.rollouts)))).decode()
    refused = cli("dlq", "replay", "--all", check=False)
    assert refused.returncode == 1 and "not a stream of namespace" in refused.stderr
    assert await redis.xlen(keys.dead_letters) == 2 and not await redis.exists("elsewhere:rollouts", keys.rollouts)

    bad = tmp_path / "bad.json"
    bad.write_text('{"run_id": "run"}')
    invalid = cli("dlq", "replay", ours, "--fix-file", str(bad), check=False)
    assert invalid.returncode == 1 and "not a valid Rollout" in invalid.stderr
    assert await redis.xlen(keys.dead_letters) == 2 and not await redis.exists(keys.rollouts)

    cli("dlq", "replay", ours)  # as it was: the original payload
    [(_, fields)] = await redis.xrange(keys.rollouts)
    assert wire.decode(wire.payload(fields), Rollout) == big("4")
    assert [i.decode() for i, _ in await redis.xrange(keys.dead_letters)] == [foreign]
