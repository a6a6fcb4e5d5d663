"""The async adapters on the caller's event loop (ART's, through stand-ins of its Trajectory and TrajectoryGroup):
no second loop or thread; the old form, on a SyncRubricdClient, still works, with a DeprecationWarning."""

import asyncio
import threading
from typing import Any

import pydantic
import pytest

from rubricd.adapters import ArtReward

pytestmark = pytest.mark.integration


class Trajectory(pydantic.BaseModel):
    """What ArtReward reads of ART's Trajectory (a pydantic model too); every message a dict, as ART's are once
    recorded."""

    messages_and_choices: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    additional_histories: list[Any] = []
    reward: float = 0.0
    metrics: dict[str, float] = {}
    metadata: dict[str, Any] = {}
    logs: list[str] = []

    def messages(self) -> list[dict[str, Any]]:
        return list(self.messages_and_choices)

    def log(self, message: str) -> None:
        self.logs.append(message)


class TrajectoryGroup:
    def __init__(self, trajectories: list[Trajectory], *, metadata=None, metrics=None, logs=None) -> None:
        self.trajectories = trajectories
        self.metadata, self.metrics, self.logs = metadata or {}, metrics or {}, logs or []


def group(*answers: str) -> TrajectoryGroup:
    question = {"role": "user", "content": "What is 17 + 25?"}
    return TrajectoryGroup(
        [Trajectory(messages_and_choices=[question, {"role": "assistant", "content": a}]) for a in answers]
    )


async def test_an_async_adapter_scores_on_the_callers_loop_with_no_thread_of_its_own(
    redis, keys, aio, published, closed
) -> None:
    before = set(threading.enumerate())
    reward = ArtReward(aio, "art-loop", timeout=60)
    scored = await reward.score_group(group("17 + 25 = 42.", "It is 41."), step=0)
    await reward.finish()
    assert set(threading.enumerate()) == before  # no loop thread (SyncRubricdClient's "rubricd-client"), none else
    assert [t.get_name() for t in asyncio.all_tasks() if t.get_name() == "rubricd-replies"]  # its reader: this loop's
    rewards = [t.reward for t in scored.trajectories]
    assert rewards[0] > rewards[1]
    assert {(r.group_size, r.judge_mode) for r in await published(redis, keys)} == {(2, "group")}
    assert [(c.run_id, c.step, c.rollouts) for c in await closed(redis, keys)] == [("art-loop", 0, 2)]


async def test_an_async_adapter_refuses_a_second_event_loop(aio) -> None:
    reward = ArtReward(aio, "art-loops", timeout=60)
    await reward.score_group(group("42."), step=0)
    with pytest.raises(RuntimeError, match="another event loop than its client's"):
        await asyncio.to_thread(asyncio.run, reward.score_group(group("42."), step=1))


async def test_the_old_form_on_a_sync_client_still_scores_and_closes_its_steps_unawaited(
    redis, keys, client, published, closed
) -> None:
    with pytest.warns(DeprecationWarning, match="ArtReward on a SyncRubricdClient runs rubricd's calls on a second"):
        reward = ArtReward(client, "art-old", timeout=60)
    scored = await reward.score_group(group("17 + 25 = 42.", "It is 41."), step=0)
    assert all(t.reward is not None for t in scored.trajectories)
    reward.finish()  # as the old form was called: the step is closed on return
    assert [(c.run_id, c.rollouts) for c in await closed(redis, keys)] == [("art-old", 2)]
    await reward.finish()  # and awaiting it, as the new form is, does no harm
    assert len(await published(redis, keys)) == 2
