"""OpenRLHF's own remote-reward client (openrlhf 0.11.2's single-turn agent executor, in `make frameworks`'s venv)
against the gateway and a scorer on the real stack: what it hands OpenRLHF's trainer for a right, a wrong and
an unjudgeable response, and where the rollouts went (tests/frameworks/openrlhf_reward.py)."""

import json
import subprocess
from pathlib import Path

import pytest

from rubricd import wire
from rubricd.messages import JudgeStatus, ScoredRollout
from tests.threads import one_thread

from .conftest import RUN

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parents[1] / "frameworks" / "openrlhf_reward.py"
PROMPT = "What is 17 + 25 ?"
CASES = [
    {"prompt": PROMPT, "response": "The sum is 42 .", "label": "42"},
    {"prompt": PROMPT, "response": "The sum is 41 .", "label": "42"},
    # The judge's every call on this prompt fails (the simulator's marker), and nothing else's.
    {"prompt": "What is 3 + 4 ? [sim:fail=500,times=99,agent=JudgeVerdict]", "response": "It is 7 .", "label": "7"},
]


def flags(judge_ok: float, no_reward: float) -> dict[str, list[float]]:
    return {
        "rubricd/judge_ok": [judge_ok],
        "rubricd/masked": [0.0],
        "rubricd/timed_out": [0.0],
        "rubricd/no_reward": [no_reward],
    }


@pytest.mark.timeout(600)
async def test_openrlhf_s_own_client_gets_each_reward_and_its_flags(
    run_rubrics, start_scorer, start_gateway, redis, keys, frameworks_python
):
    start_scorer()
    url = start_gateway(failed_reward=-1.0)  # a failure value OpenRLHF's trainer cannot take for a real 0
    done = subprocess.run(
        [frameworks_python, str(SCRIPT), f"{url}/get_reward?run={run_rubrics}&step=2"],
        input=json.dumps(CASES),
        env={"PATH": "/usr/bin:/bin", **one_thread(), "HOME": "/tmp"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    outputs = [json.loads(line) for line in done.stdout.splitlines()]
    # What OpenRLHF's executor hands its trainer for each rollout (one query a request, lists of one).
    assert [(o["prompt"], o["reward"], o["scores"], o["extra_logs"]) for o in outputs] == [
        (PROMPT, [1.0], [1.0], flags(1.0, 0.0)),
        (PROMPT, [0.0], [0.0], flags(1.0, 0.0)),
        (CASES[2]["prompt"], [-1.0], [0.0], flags(0.0, 1.0)),  # the failure value, scores clipped to [0, 1], flagged
    ]
    # The rollouts went to the URL's run and step: the response is the decoded query after its prompt.
    kept = [wire.decode(wire.payload(f), ScoredRollout) for _, f in await redis.xrange(keys.kept_rollouts(RUN))]
    by_response = {r.rollout.response.strip(): r for r in kept}
    assert set(by_response) == {c["response"] for c in CASES}
    assert {(r.rollout.step, r.rollout.reference) for r in kept} == {(2, "42"), (2, "7")}
    assert by_response["It is 7 ."].score.status is JudgeStatus.JUDGE_FAILED
