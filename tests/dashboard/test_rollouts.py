"""One kept rollout as the dashboard shows it: its turns numbered with the verdicts that name them (rollouts.py,
no server), and the routes that list a step's rollouts and return one, against the real Redis."""

import httpx
import msgspec

from rubricd import wire
from rubricd.messages import (
    Function,
    GroupJudged,
    JudgeStatus,
    RubricResult,
    ToolCall,
    Turn,
)
from rubricd.messages.trajectories import NOT_JSON, NOT_OFFERED, UNANSWERED
from rubricd_services.dashboard import rollouts
from tests.factories import group, rollout, scored


def test_a_trajectory_is_shown_turn_by_turn_with_the_verdicts_naming_each_turn(scored_trajectory):
    view = rollouts.view(scored_trajectory)
    shown = view["trajectory"]
    assert [(t["turn"], t["role"], t["policy"]) for t in shown] == [
        (0, "system", False),
        (1, "user", False),
        (2, "assistant", True),
        (3, "tool", False),
        (4, "assistant", True),
        (5, "assistant", True),
    ]
    assert shown[2]["tool_calls"] == [
        {"call": "call_1", "tool": "multiply", "arguments": '{"a": 12, "b": 7}', "problems": []}
    ]
    assert shown[3]["answers"] == "call_1" and shown[3]["content"] == "84"
    # What the policy got wrong is named: a call without an id is labelled by its turn and place.
    assert shown[4]["tool_calls"] == [
        {"call": "4.0", "tool": "lookup", "arguments": "{12*7", "problems": [NOT_JSON, NOT_OFFERED, UNANSWERED]}
    ]
    assert shown[5]["reasoning"] == "The tool said 84."
    # Beside each policy turn: the verdicts naming it, met or failed, and its points; none beside the others.
    verdicts = {t["turn"]: [(v["rubric_id"], v["met"]) for v in t["verdicts"]] for t in shown}
    assert verdicts == {
        0: [],
        1: [],
        2: [("valid_tool_calls", True)],
        3: [],
        4: [("valid_tool_calls", False)],
        5: [("uses_tool_result", True)],
    }
    assert [t["points"] for t in shown] == [None, None, 2.0, None, 0.0, 3.0]
    # The trajectory's own verdicts as the score has them, and the offered tools.
    assert [(r["rubric_id"], r["met"], r["met_turns"], r["unmet_turns"]) for r in view["results"]] == [
        ("correct", True, [], []),
        ("uses_tool_result", True, [5], []),
        ("valid_tool_calls", False, [2], [4]),
    ]
    assert [t["name"] for t in view["tools"]] == ["multiply"]
    assert (view["status"], view["reward"], view["prompt_turns"]) == ("ok", 0.8, 2)


def test_trl_tool_calls_are_labelled_and_answered_by_the_tool_they_name():
    """TRL's shape: no call ids, arguments an object, each tool turn naming its tool (the oldest open call of that
    tool is the one it answers)."""
    trajectory = [
        Turn(role="user", content="Weather in Paris and Rome, and the time?"),
        Turn(
            role="assistant",
            content="",
            tool_calls=[
                ToolCall(function=Function(name="weather", arguments={"city": "Paris"})),
                ToolCall(function=Function(name="clock", arguments={})),
                ToolCall(function=Function(name="weather", arguments={"city": "Rome"})),
            ],
        ),
        Turn(role="tool", name="weather", content="sunny"),
        Turn(role="tool", name="weather", content="rain"),
        Turn(role="assistant", content="Sunny in Paris, rain in Rome."),
    ]
    shown = rollouts.view(scored(rollout(trajectory=trajectory, prompt_turns=1)))["trajectory"]
    assert [(c["call"], c["arguments"], c["problems"]) for c in shown[1]["tool_calls"]] == [
        ("1.0", '{"city": "Paris"}', []),
        ("1.1", "{}", [UNANSWERED]),  # no tools offered: none is "not offered"
        ("1.2", '{"city": "Rome"}', []),
    ]
    assert [t["answers"] for t in shown] == [None, None, "1.0", "1.2", None]


def test_a_text_rollout_is_its_prompt_and_response():
    view = rollouts.view(scored(rollout(), None, status=JudgeStatus.JUDGE_FAILED))
    assert (view["prompt"], view["response"], view["trajectory"], view["tools"]) == ("What is 2 + 2?", "4", [], [])
    assert (view["status"], view["reward"], view["results"]) == ("judge_failed", None, [])


def test_a_rollout_judged_with_its_group_by_votes_says_so_and_where_the_votes_split():
    [member, *_] = group(["a"] * 8)
    results = [
        RubricResult(rubric_id="correct", met=True, points=5, agreement=2 / 3),
        RubricResult(rubric_id="pads", met=False, points=-3, agreement=1.0),
    ]
    grouping = GroupJudged(members=8, label="C", positions=[2, 5, 0])
    view = rollouts.view(scored(member, results=results, grouping=grouping, votes=3, agreement=5 / 6))
    assert view["group"] == "g" and view["grouping"] == {"members": 8, "label": "C", "positions": [2, 5, 0]}
    assert (view["votes"], view["agreement"]) == (3, 5 / 6)
    assert [(r["rubric_id"], r["agreement"]) for r in view["results"]] == [("correct", 2 / 3), ("pads", 1.0)]


async def test_the_routes_list_a_steps_rollouts_and_return_one_with_its_turns_and_turn_results(
    redis, keys, dashboard, scored_trajectory
):
    text = scored(rollout(run_id="agent", step=3, rollout_id="t/1"), 0.5, rubric_version=2)
    earlier = msgspec.structs.replace(
        text,
        rollout=msgspec.structs.replace(text.rollout, rollout_id="t/2", step=2),
        score=msgspec.structs.replace(text.score, rollout_id="t/2", step=2),
    )
    for kept in (earlier, scored_trajectory, text):
        await redis.xadd(keys.kept_rollouts("agent"), {wire.FIELD: wire.encode(kept)})
    async with httpx.AsyncClient(base_url=dashboard) as http:
        latest = (await http.get("api/runs/agent/rollouts")).json()
        assert latest == {
            "step": 3,
            "rollouts": [
                {"rollout_id": "t/0", "status": "ok", "reward": 0.8, "turns": 6, "evaluation": False},
                {"rollout_id": "t/1", "status": "ok", "reward": 0.5, "turns": 0, "evaluation": False},
            ],
            "more": 0,
        }
        assert [r["rollout_id"] for r in (await http.get("api/runs/agent/rollouts?step=2")).json()["rollouts"]] == [
            "t/2"
        ]
        shown = await http.get("api/runs/agent/rollout", params={"id": "t/0"})
        assert shown.status_code == 200
        assert shown.json() == msgspec.json.decode(msgspec.json.encode(rollouts.view(scored_trajectory)))
        assert [t["turn"] for t in shown.json()["turns"]] == [2, 4, 5]  # Score.turns, as the trainer got them
        assert (await http.get("api/runs/agent/rollout", params={"id": "t/9"})).status_code == 404
        assert (await http.get("api/runs/agent/rollouts?step=x")).status_code == 400
