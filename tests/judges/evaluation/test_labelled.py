"""rubricd's labelled JSONL: read as written; a bad line refused with its number and field."""

import json
from pathlib import Path

import pytest

from rubricd_services.judges.evaluation import labelled

GOOD = {
    "id": "add-1",
    "prompt": "What is 17 + 25?",
    "response": "17 + 25 = 42.",
    "reference": "42",
    "rubrics": [{"id": "correct", "criterion": "The final answer is 42.", "points": 5, "kind": "anchor"}],
    "labels": {"correct": True},
}


def lines(*items) -> list[str]:
    return [json.dumps(i) if isinstance(i, dict) else i for i in items]


def test_items_are_read_in_order_and_blank_lines_skipped():
    second = {**GOOD, "id": "add-2", "response": "41", "labels": {"correct": False}, "note": "41 is wrong"}
    items = list(labelled.items(lines(GOOD, "", second)))
    assert [i.id for i in items] == ["add-1", "add-2"]
    assert items[1].labels == {"correct": False} and items[1].note == "41 is wrong"
    assert items[0].rubrics[0].points == 5 and items[0].reference == "42"


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("{not json", "f:2: not JSON"),
        (
            {**GOOD, "rubrics": [{"id": "correct", "criterion": "c", "points": "five"}]},
            "f:2: Expected `float`, got `str` - at `$.rubrics[0].points`",
        ),
        ({**GOOD, "labels": {"correct": "yes"}}, "Expected `bool`, got `str` - at `$.labels[...]`"),
        ({**GOOD, "labels": {}}, "f:2: `$.labels`: no label for rubric(s) ['correct']"),
        ({**GOOD, "labels": {"correct": True, "other": False}}, "label(s) for no rubric: ['other']"),
        ({**GOOD, "rubrics": []}, "`$.rubrics`: no rubric"),
        ({**GOOD, "rubrics": GOOD["rubrics"] * 2}, "rubric ids repeat"),
        ({**GOOD, "extra": 1}, "unknown field `extra`"),
        ({k: v for k, v in GOOD.items() if k != "response"}, "f:2: `$.response`: no response, and no trajectory"),
        (GOOD, "f:2: `$.id`: 'add-1' repeats an earlier line's"),
    ],
)
def test_a_bad_line_is_refused_with_its_number_and_field(bad, says):
    with pytest.raises(labelled.Invalid) as e:
        list(labelled.items(lines(GOOD, bad), "f"))
    assert says in str(e.value)


META = Path(__file__).parents[2] / "fixtures/healthbench_meta_sample.jsonl"


def test_healthbench_meta_evaluation_lines_become_items_labelled_by_the_graders_majority():
    good, bad = labelled.read(META)
    assert (good.id, bad.id) == ("p1/c-good", "p1/c-bad")
    assert good.prompt.startswith("I twisted my ankle") and good.response.startswith("Rest it")
    assert [r.criterion for r in good.rubrics][0] == "Advises rest, ice, compression and elevation."
    assert {r.meta_class for r in good.rubrics} == {"cluster:emergency_referrals"}
    assert good.labels == {"c1": True, "c2": True, "c3": False}  # 3 of 3, 2 of 3, 0 of 3
    assert bad.labels == {"c1": False, "c2": False}  # 1 of 2: a tie is not met
    assert good.graders["c2"] == [True, True, False] and bad.graders["c2"] == [False, True]


def test_a_bad_meta_evaluation_line_is_refused_with_its_number_and_field(tmp_path):
    lines = META.read_text().splitlines()
    broken = json.loads(lines[1])
    broken["binary_labels"] = "yes"
    path = tmp_path / "meta.jsonl"
    path.write_text("\n".join([lines[0], json.dumps(broken)]))
    with pytest.raises(labelled.Invalid, match=r"meta.jsonl:2: Expected `array`, got `str` - at `\$.binary_labels`"):
        labelled.read(path)


CALC = {"function": {"name": "calculator", "parameters": {"type": "object"}}}
AGENT = {
    "id": "agent-1",
    "trajectory": [
        {"role": "user", "content": "What is 17 * 23?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "calculator"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "391"},
        {"role": "assistant", "content": "391."},
    ],
    "tools": [CALC],
    "prompt_turns": 1,
    "reference": "391",
    "rubrics": [
        {"id": "correct", "criterion": "The final answer is 391.", "points": 5},
        {"id": "args", "criterion": "Each call passes valid JSON arguments.", "points": 2, "scope": "turn"},
        {"id": "invents", "criterion": "The turn invents a tool result.", "points": -5, "scope": "turn"},
    ],
    "labels": {"correct": True, "args": False, "invents": False},
    "turn_labels": {"args": {"unmet_turns": [1]}, "invents": {"unmet_turns": [3]}},
}


def test_an_item_may_carry_a_trajectory_judged_as_the_rollout_it_makes():
    [item] = labelled.items(lines(AGENT))
    assert item.prompt == item.response == "" and item.turn_labels["args"].unmet_turns == [1]
    rollout = item.rollout("run")
    assert rollout.policy_turns == [1, 3] and rollout.tools[0].function.name == "calculator"
    assert rollout.response.endswith("391.")  # the turns' text, as on the wire


def turns_with(k: int, **turn) -> list[dict]:
    return [t if i != k else turn for i, t in enumerate(AGENT["trajectory"])]


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (
            {**AGENT, "trajectory": turns_with(2, role="tool", tool_call_id="c9", content="391")},
            "trajectory[2].tool_call_id",
        ),
        ({**AGENT, "trajectory": turns_with(0, role="narrator", content="hi")}, "`$.trajectory[0].role`"),
        ({**AGENT, "prompt_turns": 4}, "`$.prompt_turns`: no assistant turn after the first 4"),
        (
            {**AGENT, "turn_labels": {"correct": {"met_turns": [3]}}},
            "`$.turn_labels.correct`: turn labels go with a turn",
        ),
        (
            {**AGENT, "turn_labels": {"args": {"met_turns": [2]}}},
            "`$.turn_labels.args`: turn(s) [2] are not the policy's",
        ),
        ({**AGENT, "turn_labels": {"args": {"met_turns": [1], "unmet_turns": [1]}}}, "turn(s) [1] both met and unmet"),
        (
            {**AGENT, "turn_labels": {"invents": {"met_turns": [3]}}},
            "`$.labels.invents`: false, but its turn labels make it true",
        ),
        ({**GOOD, "turn_labels": {"correct": {"met_turns": [0]}}}, "`$.turn_labels.correct`: turn labels go with"),
        ({**GOOD, "tools": [CALC]}, "tools and prompt_turns go with a trajectory"),
    ],
    ids=[
        "tool turn answers no call",
        "unknown role",
        "no policy turn",
        "turn labels of a trajectory rubric",
        "a turn not the policy's",
        "a turn both ways",
        "turn labels against the label",
        "turn labels on a text item",
        "tools without a trajectory",
    ],
)
def test_a_bad_trajectory_item_is_refused_with_its_line_and_field(bad, says):
    with pytest.raises(labelled.Invalid) as e:
        list(labelled.items(lines(GOOD, bad), "f"))
    assert str(e.value).startswith("f:2: ") and says in str(e.value)


def test_the_projects_labelled_set_reads_and_covers_what_it_says():
    from importlib import resources

    data = resources.files("rubricd_services.judges.evaluation").joinpath("data/judge-set.jsonl").read_text()
    every = list(labelled.items(data.splitlines(), "judge-set.jsonl"))
    items = [i for i in every if not (i.trajectory or i.id.startswith("group-"))]
    assert len(items) == 66 and sum(len(i.labels) for i in items) == 210  # the text items measured before groups
    behaviours = {i.id.split("-", 3)[3] for i in items if i.id.startswith("add-")}
    assert behaviours == {"correct", "wrong", "padded", "sycophantic", "judge_addressing", "terse"}
    open_answers = [i for i in items if i.reference is None]
    assert len(open_answers) == 12 and all(len(i.rubrics) >= 4 for i in open_answers)
    assert any(r.points < 0 for i in open_answers for r in i.rubrics)  # negative rubrics too


def test_the_projects_labelled_trajectories_cover_every_way_a_tool_is_misused():
    from importlib import resources

    data = resources.files("rubricd_services.judges.evaluation").joinpath("data/judge-set.jsonl").read_text()
    agents = [i for i in labelled.items(data.splitlines(), "judge-set.jsonl") if i.trajectory]
    assert len(agents) >= 20 and all(i.id.startswith("traj-") for i in agents)
    kinds = {i.id.split("-")[1] for i in agents}
    assert kinds == {"calc", "lookup", "two", "retry", "fabricated", "args", "loop", "no"}
    assert {"traj-args-not-json", "traj-args-tool-not-offered", "traj-calc-contradicted"} <= {i.id for i in agents}
    scopes = {r.scope for i in agents for r in i.rubrics}
    assert scopes == {"trajectory", "turn"} and any(i.turn_labels for i in agents)


def test_the_projects_sample_groups_share_their_prompt_and_spread_their_rewards():
    """The groups added for group judging: 4-8 responses a prompt (right, wrong, padded, hacked), the same prompt
    and rubrics for all, labelled rewards that differ within the group, as a GRPO group's should."""
    from importlib import resources

    from rubricd_services.rubrics.policies import weighted_sum

    data = resources.files("rubricd_services.judges.evaluation").joinpath("data/judge-set.jsonl").read_text()
    groups = [g for g in labelled.grouped(list(labelled.items(data.splitlines()))) if g[0].group is not None]
    added = [g for g in groups if g[0].id.startswith(("group-", "traj-calc-group-"))]
    assert len(added) == 8 and all(4 <= len(g) <= 8 for g in added)
    assert any(g[0].trajectory for g in added) and len(groups) == 17
    for group in groups:
        assert len({(i.prompt, i.reference, str(i.rubrics), str(i.trajectory[: i.prompt_turns])) for i in group}) == 1
        assert len({i.group for i in group}) == 1
    for group in added:
        behaviours = {i.id.rsplit("-", 1)[1] for i in group}
        assert "judge_addressing" in behaviours and behaviours & {"right", "used"}
        rewards = {weighted_sum(i.rubrics, i.labels).total for i in group}
        assert len(rewards) >= 3


def test_a_group_member_that_does_not_share_the_groups_prompt_or_rubrics_is_refused():
    first = {**GOOD, "group": "g"}
    assert [len(g) for g in labelled.grouped(list(labelled.items(lines(first, {**first, "id": "add-2"}))))] == [2]
    for field, other in (("prompt", "What is 17 + 26?"), ("rubrics", [{**GOOD["rubrics"][0], "points": 3}])):
        bad = {**first, "id": "add-2", field: other}
        with pytest.raises(labelled.Invalid) as e:
            list(labelled.items(lines(first, GOOD | {"id": "alone"}, bad), "f"))
        assert str(e.value).startswith(f"f:3: `$.{field}`: not the same as in line 1, the first of group 'g'")


def test_items_are_grouped_in_the_order_their_groups_first_appear_and_an_item_without_one_alone():
    a1, b1, alone, a2 = (
        labelled.Item(id=i, prompt="p", response="r", rubrics=[], labels={}, group=g)
        for i, g in (("a1", "a"), ("b1", "b"), ("alone", None), ("a2", "a"))
    )
    assert [[i.id for i in g] for g in labelled.grouped([a1, b1, alone, a2])] == [["a1", "a2"], ["b1"], ["alone"]]
