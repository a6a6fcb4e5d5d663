"""Names come from one namespace, and names a message carries are checked against it."""

import pytest

from rubricd.keys import InvalidKey, Keys


def test_every_name_is_under_the_namespace():
    keys = Keys("exp1")
    names = [
        keys.rollouts,
        keys.scored,
        keys.steps,
        keys.analyses,
        keys.summaries,
        keys.rubrics_updated,
        keys.events,
        keys.dead_letters,
        keys.replies("c1"),
        keys.rubric_set("run"),
        keys.score("run", "r1"),
    ]
    assert all(n.startswith("exp1:") for n in names)
    assert len(set(names)) == len(names)


def test_reply_to_must_be_a_reply_stream_of_this_namespace():
    keys = Keys("exp1")
    assert keys.check_reply_to("exp1:replies:c-1") == "exp1:replies:c-1"
    for bad in [
        "exp1:rollouts",
        "other:replies:c1",
        "exp1:replies:",
        "exp1:replies:a b",
        "exp1:replies:x:y",
        "exp1:score:r:x",
        "exp1:replies:c1\n",
    ]:
        with pytest.raises(InvalidKey):
            keys.check_reply_to(bad)


def test_bad_namespace_is_refused():
    for bad in ("has space", "ns\n", ""):
        with pytest.raises(InvalidKey):
            Keys(bad)


def test_global_and_instance_rubric_sets_differ():
    keys = Keys()
    assert keys.rubric_set("run") != keys.rubric_set("run", "inst")
