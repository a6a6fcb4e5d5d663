"""The ACL users' key patterns match the keys each role uses, and only those (no server needed; the
commands themselves are checked against a real Redis in tests/system/test_secure.py)."""

from fnmatch import fnmatchcase

import pytest

from rubricd.keys import Keys
from rubricd_services.cli.redis_acl import acl_file, cli, services, trainer
from tests.redis_users import USERS

keys = Keys("ns")


def patterns(name: str) -> list[str]:
    user = next(u for u in [*services(keys), cli(keys), trainer(keys, "trainer")] if u.name == name)
    return [*user.keys, *user.read, *user.write]


def allows(name: str, key: str) -> bool:
    return any(fnmatchcase(key, pattern) for pattern in patterns(name))


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("scorer", keys.failure(keys.rollouts, "1-0")),
        ("scorer", keys.score("run", "r1")),
        ("scorer", keys.rubric_set("run", "instance")),
        ("scorer", keys.replies("trainer-abc")),
        ("scorer", keys.verdict("ab12")),
        ("scorer", keys.usage("run")),
        ("scorer", keys.schedule("run")),
        ("scorer", keys.class_stats("run", 3)),
        ("scorer", keys.rubric_health("run", 3)),
        ("scorer", keys.group("run", 3, "s3-p0")),
        ("scorer", keys.groups_due),
        ("summarizer", keys.rubric_health("run", 3, "instance")),
        ("cli", keys.rubric_health("run", 3)),
        ("scorer", keys.kept_rollouts("run")),
        ("scorer", keys.generation_lock("run", "instance")),
        ("scorer", keys.generation_failure("run", "instance")),
        ("comparer", keys.failure(keys.comparisons, "1-0")),
        ("comparer", keys.preference("run", "c1")),
        ("comparer", keys.kept_comparisons("run")),
        ("comparer", keys.instance_prompts("run")),
        ("comparer", keys.accuracy("run")),
        ("comparer", keys.rubric_set("run", "instance")),
        ("comparer", keys.generation_lock("run", "instance")),
        ("comparer", keys.replies("trainer-abc")),
        ("trainer", keys.comparisons),
        ("arm", keys.failure(keys.arm, "1-0")),
        ("arm", keys.arm_reward("run", "r1")),
        ("arm", keys.kept_arm_rollouts("run")),
        ("arm", keys.arm_phases("run")),
        ("arm", keys.arm_plan("run")),
        ("arm", keys.arm_pairs("run")),
        ("arm", keys.arm_index("run")),
        ("arm", keys.arm_rubrics("run", "Qwen/Qwen2.5-7B-Instruct")),
        ("arm", keys.replies("trainer-abc")),
        ("arm", keys.usage("run")),
        ("trainer", keys.arm),
        ("cli", keys.arm_pairs("run")),
        ("cli", keys.arm_rubrics("run", "gen-v1")),
        ("cli", keys.kept_comparisons("run")),
        ("cli", keys.accuracy("run")),
        ("cli", keys.schedule("run")),
        ("analyzer", keys.usage("run")),  # every agent's calls add to the run's usage
        ("summarizer", keys.usage("run")),
        ("updater", keys.usage("run")),
        ("analyzer", keys.step_analyses("run", 3)),
        ("analyzer", keys.rubric_set("run")),
        ("analyzer", keys.step_given_up("run", 3)),
        ("summarizer", keys.step_given_up("run", 3)),
        ("analyzer", keys.step_unsampled("run", 3)),  # the analysis sample: the rollouts it left out
        ("analyzer", keys.analysis_group("run", 3, "g1")),
        ("analyzer", keys.analysis_groups),
        ("summarizer", keys.step_unsampled("run", 3)),
        ("summarizer", keys.step("run", 3, "instance")),
        ("summarizer", keys.failure(keys.analyses, "1-0")),
        ("summarizer", keys.open_steps),
        ("updater", keys.update_lock("run")),
        ("updater", keys.rubric_step("run")),
        ("updater", keys.rubric_steps("run")),
        ("trainer", keys.replies("trainer-abc")),
        ("trainer", keys.rubric_steps("run")),
        ("trainer", keys.schedule("run")),  # why its steps' classes were chosen (the demo's report)
        ("cli", keys.step("run", 3)),
    ],
)
def test_each_role_reaches_the_keys_it_uses(name: str, key: str) -> None:
    assert allows(name, key)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("scorer", keys.step("run", 3)),
        ("scorer", keys.failure(keys.scored, "1-0")),  # another service's failure records
        ("analyzer", keys.score("run", "r1")),
        ("analyzer", keys.schedule("run")),
        ("updater", keys.generation_lock("run", "instance")),  # generation is the scorer's and the comparer's
        ("scorer", keys.comparisons),  # comparisons are the comparer's
        ("scorer", keys.accuracy("run")),
        ("comparer", keys.rollouts),
        ("comparer", keys.score("run", "r1")),
        ("trainer", keys.class_stats("run", 3)),
        ("analyzer", keys.rubric_health("run", 3)),
        ("arm", keys.rollouts),  # rollouts and comparisons are the scorer's and the comparer's
        ("arm", keys.preference("run", "c1")),
        ("arm", keys.rubric_set("run", "instance")),  # a candidate rubric set is never stored as a prompt's set
        ("trainer", keys.arm_pairs("run")),  # the labels are the arm service's to read
        ("scorer", keys.arm),
        ("trainer", keys.kept_comparisons("run")),  # a run's judged comparisons are read by `rubricd export`
        ("analyzer", keys.accuracy("run")),
        ("summarizer", keys.rubric_set("run")),
        ("summarizer", keys.analysis_group("run", 3, "g1")),  # groups are the analyzers' to decide
        ("updater", keys.replies("trainer-abc")),
        ("trainer", keys.replies("c-abc")),
        ("trainer", keys.replies("trainer_b-abc")),  # trainer `trainer_b`'s, though it starts with `trainer`
        ("trainer", keys.scored),
        ("cli", Keys("other").events),
    ],
)
def test_no_role_reaches_keys_it_does_not_use(name: str, key: str) -> None:
    assert not allows(name, key)


def test_a_trainer_name_that_could_prefix_another_s_is_refused() -> None:
    with pytest.raises(ValueError, match="trainer name"):
        trainer(keys, "team-a")


def test_the_acl_file_turns_default_off_and_holds_hashes_not_passwords() -> None:
    users = [*USERS, "other"]
    passwords = {name: f"password-of-{name}" for name in users}
    text = acl_file(keys, passwords, trainers=["trainer", "other"])
    lines = text.splitlines()
    assert lines[0].startswith("user default off ") and " +@all" not in lines[0]
    assert [line.split()[1] for line in lines[1:]] == users
    assert all(line.split()[2] == "on" and line.split()[3].startswith("#") for line in lines[1:])
    assert "password-of-" not in text
    assert " ~ns:replies:other-* " in lines[-1]
