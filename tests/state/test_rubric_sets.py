"""The rubric store on a real Redis: the version made from a step, found by its field however many versions exist."""

from rubricd.keys import Keys
from rubricd.messages import Rubric, RubricSet
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import rubric_set

RUBRIC = Rubric(id="correct", criterion="The response states the correct final answer.", points=5)


def made(version: int, step: int | None) -> RubricSet:
    return rubric_set(RUBRIC, version=version, step=step)


async def test_the_version_made_from_a_step_is_found_by_its_step_in_any_order(redis, keys: Keys) -> None:
    store = RubricStore(redis, keys)
    for version, step in [(1, None), (2, 5), (3, 2), (4, 9)]:  # step 2's summary handled after step 5's
        assert await store.publish(made(version, step))
    assert (await store.made_from("run", None, 2)) == made(3, 2)
    assert (await store.made_from("run", None, 9)) == made(4, 9)
    assert await store.made_from("run", None, 7) is None
    assert await store.made_from("other", None, 2) is None
    assert [v.version for v in await store.history("run")] == [1, 2, 3, 4]  # the step fields are not versions


async def test_a_set_written_before_the_step_fields_finds_its_current_version_only(redis, keys: Keys) -> None:
    store = RubricStore(redis, keys)
    for version, step in [(1, None), (2, 3), (3, 4)]:
        assert await store.publish(made(version, step))
    await redis.hdel(keys.rubric_set("run"), "s3", "s4")  # as an older rubricd wrote it
    assert (await store.made_from("run", None, 4)) == made(3, 4)  # a redelivery of the latest step's summary
    assert await store.made_from("run", None, 3) is None
