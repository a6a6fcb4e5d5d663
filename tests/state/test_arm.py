"""Rubric-ARM's state on a real Redis: a frozen generator's rubric set, kept once per prompt and version."""

from rubricd.keys import Keys
from rubricd_services.state.arm import keep_frozen_set, read_frozen_set, read_frozen_sets
from tests.factories import rubric_set


async def test_the_first_set_kept_for_a_prompt_is_the_one_every_reader_gets(redis, keys: Keys) -> None:
    first, late = rubric_set("correct", instance_key="p1"), rubric_set("addresses_grader", instance_key="p1")
    assert await read_frozen_set(redis, keys, "run", "gen-v1", "p1") is None
    assert await keep_frozen_set(redis, keys, "run", "gen-v1", "p1", first) == first
    assert await keep_frozen_set(redis, keys, "run", "gen-v1", "p1", late) == first  # another command came second
    assert await read_frozen_set(redis, keys, "run", "gen-v1", "p1") == first
    assert await read_frozen_sets(redis, keys, "run", "gen-v1") == {"p1": first}
    assert await read_frozen_sets(redis, keys, "run", "gen-v2") == {}  # each version its own
