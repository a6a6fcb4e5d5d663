"""Group judging and votes without a broker: every response of a group in one call, read back to its member
whatever the order shown; sub-groups; a verdict changed only by a majority of votes."""

import json
import re

import msgspec
import pytest

from rubricd.messages import JudgeStatus, Rollout, Rubric
from rubricd_services.judges import groups, verdicts
from rubricd_services.judges.caller import JudgeFailed
from rubricd_services.judges.scoring import Judging, Scoring, score_group, score_rollout
from rubricd_services.judges.verdicts import Decided
from rubricd_services.judges.votes import majority
from rubricd_services.rubrics.sets import InForce
from rubricd_services.runtime import prompts
from rubricd_services.settings import LLMSettings
from tests.factories import rollout, rubric_set

SET = rubric_set(
    Rubric(id="correct", criterion="The final answer is 42.", points=5, kind="anchor"),
    Rubric(id="pads", criterion="The response pads with filler.", points=-3),
    version=3,
)
QUESTION = "What is 17 + 25? Show the sum."


def prepared(prompt_chars: int | None = None, group_members: int = groups.MAX_MEMBERS):
    template = prompts.load("rubricd_services.judges", verdicts.JUDGE)
    # prompt_chars of a judge whose answer may take any length (LLMSettings.prompt_chars)
    llm = (
        LLMSettings()
        if prompt_chars is None
        else LLMSettings(max_tokens=10**6, context_tokens=10**6 + prompt_chars * 2 // 5)
    )
    return Judging(llm=llm, template=template, group_members=group_members).prepare(InForce(SET))


def member(i: int, response: str) -> Rollout:
    return rollout(rollout_id=f"r{i}", step=1, prompt=QUESTION, response=response, group="g", group_size=8)


RESPONSES = ["42.", "41.", "It is 42, " + "truly " * 30, "40.", "42!", "Maybe 43.", "42", "Answer: 42 " + "so " * 20]
GROUP = [member(i, r) for i, r in enumerate(RESPONSES)]


def by_content(asked: list[list[dict[str, str]]]):
    """A judge that reads a group's block and decides each response by its content, as a careful judge would."""

    def decide(response: str) -> dict[str, dict[str, object]]:
        return {
            "correct": {"explanation": "says 42" if "42" in response else "not 42", "met": "42" in response},
            "pads": {"explanation": "", "met": len(response) > 60},
        }

    async def call(messages, verdict):
        asked.append(messages)
        user = messages[1]["content"]
        if "<group>" in user:
            block = json.loads(re.search(r"<group>\n(.*)\n</group>", user, re.S)[1])
            answer = {r["label"]: decide(r["response"]) for r in block["responses"]}
        else:
            answer = decide(json.loads(re.search(r"<rollout>\n(.*)\n</rollout>", user, re.S)[1])["response"])
        return msgspec.convert(answer, verdict)

    return call


async def test_a_group_is_judged_in_one_call_and_each_member_gets_its_own_verdicts_whatever_the_order():
    asked: list = []
    scores = await score_group(GROUP, Scoring(prepared(), "weighted_sum"), by_content(asked), group="run/1/g")
    assert len(asked) == 1
    user = asked[0][1]["content"]
    assert user.count(QUESTION) == 1  # the prompt once, for all eight
    alone = [await score_rollout(m, Scoring(prepared(), "weighted_sum"), by_content([])) for m in GROUP]
    assert [s.rollout_id for s in scores] == [m.rollout_id for m in GROUP]
    assert [s.reward for s in scores] == [s.reward for s in alone]  # the same verdicts as one by one
    assert all(s.status is JudgeStatus.OK and s.grouping and s.grouping.members == 8 for s in scores)
    assert sorted(s.grouping.label for s in scores) == list("ABCDEFGH")
    positions = [s.grouping.positions[0] for s in scores]
    assert sorted(positions) == list(range(8)) and positions != list(range(8))  # shuffled, every place once
    for score in scores:  # the label is where the response stood
        assert score.grouping.label == groups.LABELS[score.grouping.positions[0]]
    assert all(s.group == "g" for s in scores)


async def test_the_order_is_the_same_on_a_retry_differs_by_group_and_each_vote_moves_every_member():
    assert groups.order("run/1/g", 0, 8) == groups.order("run/1/g", 0, 8)
    assert groups.order("run/1/g", 0, 8) != groups.order("run/1/h", 0, 8)
    votes = [groups.order("run/1/g", v, 8) for v in range(3)]
    for member in range(8):
        assert len({shown.index(member) for shown in votes}) == 3


async def test_a_group_larger_than_a_call_is_judged_in_sub_groups_and_one_left_over_alone():
    asked: list = []
    scores = await score_group(
        GROUP[:7], Scoring(prepared(group_members=3), "weighted_sum"), by_content(asked), group="g"
    )
    assert sorted(len(re.findall(r'"label"', m[1]["content"])) for m in asked) == [0, 3, 3]
    assert [s.grouping.members if s.grouping else 1 for s in scores] == [3, 3, 3, 3, 3, 3, 1]
    assert scores[6].grouping is None  # judged alone, as a rollout without a group
    assert all(s.status is JudgeStatus.OK for s in scores)


async def test_the_judges_budget_splits_a_group_the_prompt_counted_once():
    rubrics = prepared()
    system = len(rubrics.grouping(GROUP[0]).system)
    whole = groups.user_message(GROUP, range(8))
    # Room for the system message and about half the group's block.
    tight = prepared(prompt_chars=system + len(whole) // 2)
    subs = tight.grouping(GROUP[0]).sub_groups(GROUP)
    assert len(subs) >= 2 and sorted(i for sub in subs for i in sub) == list(range(8))
    assert rubrics.grouping(GROUP[0]).sub_groups(GROUP) == [list(range(8))]


async def test_a_failed_call_fails_its_sub_group_only():
    async def call(messages, verdict):
        if '"response":"41."' in messages[1]["content"]:
            raise JudgeFailed("LLM agent 'judge' failed after 3 attempt(s): HTTP 500")
        return await by_content([])(messages, verdict)

    scores = await score_group(GROUP[:6], Scoring(prepared(group_members=3), "weighted_sum"), call, group="g")
    failed = [s.rollout_id for s in scores if s.status is JudgeStatus.JUDGE_FAILED]
    assert "r1" in failed and len(failed) == 3
    assert all(s.reward is None and "HTTP 500" in (s.error or "") for s in scores if s.rollout_id in failed)
    assert all(s.reward is not None for s in scores if s.rollout_id not in failed)


def test_votes_change_a_verdict_only_by_a_strict_majority():
    def vote(met: bool) -> dict[str, Decided]:
        return {"correct": Decided(met, f"said {met}")}

    assert majority([vote(True), vote(False), vote(False)]).decided["correct"] == Decided(False, "said False")
    assert majority([vote(True), vote(False), vote(False)]).agreement["correct"] == pytest.approx(2 / 3)
    assert majority([vote(True), vote(False)]).decided["correct"].met is True  # a tie keeps the first vote's
    assert majority([vote(False), vote(True)]).decided["correct"].met is False
    assert majority([vote(True), vote(True), vote(False)]).decided["correct"].met is True
    assert majority([vote(True)]).agreement == {"correct": 1.0}


async def test_votes_on_a_rollout_ask_k_times_in_other_rubric_orders_and_take_the_majority():
    systems: list[str] = []
    said = iter([False, True, True])  # the first call misses the answer; two of three say it is met

    async def call(messages, verdict):
        systems.append(messages[0]["content"])
        met = next(said)
        return msgspec.convert(
            {"correct": {"explanation": "", "met": met}, "pads": {"explanation": "", "met": False}}, verdict
        )

    score = await score_rollout(GROUP[0], Scoring(prepared(), "weighted_sum"), call, votes=3)
    assert len(systems) == 3 and score.votes == 3
    assert [(r.rubric_id, r.met, r.agreement) for r in score.results] == [
        ("correct", True, pytest.approx(2 / 3)),
        ("pads", False, 1.0),
    ]
    assert score.agreement == pytest.approx((2 / 3 + 1) / 2)
    orders = [re.findall(r'"id":"(\w+)"', s) for s in systems]
    assert all(sorted(o) == ["correct", "pads"] for o in orders)
    assert orders == [["correct", "pads"], ["pads", "correct"], ["correct", "pads"]]  # turned a place a vote


async def test_votes_on_a_group_shuffle_its_order_each_time():
    asked: list = []
    scores = await score_group(GROUP, Scoring(prepared(), "weighted_sum"), by_content(asked), group="g", votes=3)
    assert len(asked) == 3
    assert all(len(s.grouping.positions) == 3 and s.votes == 3 and s.agreement == 1.0 for s in scores)
    assert len({tuple(s.grouping.positions[v] for s in scores) for v in range(3)}) == 3  # three orders


async def test_group_judging_sends_at_least_twice_fewer_prompt_characters_per_rollout_at_g8():
    rubrics = prepared()
    single = [sum(len(m["content"]) for m in rubrics.calls(r)[0].messages(r)) for r in GROUP]
    call = rubrics.grouping(GROUP[0])
    grouped = sum(len(m["content"]) for m in call.messages(GROUP, range(8)))
    assert sum(single) / len(GROUP) >= 2 * grouped / len(GROUP)


async def test_a_group_of_trajectories_shows_the_shared_turns_once_and_each_members_turns():
    def agent(i: int, answer: str) -> Rollout:
        turns = [
            {"role": "user", "content": QUESTION},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"c{i}", "function": {"name": "add", "arguments": '{"a":17,"b":25}'}}],
            },
            {"role": "tool", "tool_call_id": f"c{i}", "content": "42"},
            {"role": "assistant", "content": answer},
        ]
        return msgspec.convert(
            {"run_id": "run", "rollout_id": f"t{i}", "step": 1, "trajectory": turns, "prompt_turns": 1, "group": "g"},
            Rollout,
        )

    members = [agent(0, "It is 42."), agent(1, "It is 41.")]
    asked: list = []

    async def call(messages, verdict):
        asked.append(messages)
        block = json.loads(re.search(r"<group>\n(.*)\n</group>", messages[1]["content"], re.S)[1])
        answer = {}
        for r in block["responses"]:
            final = r["turns"][-1]["content"]
            answer[r["label"]] = {
                k: {"explanation": "", "met": k == "correct" and "42" in final} for k in ("correct", "pads")
            }
        return msgspec.convert(answer, verdict)

    scores = await score_group(members, Scoring(prepared(), "weighted_sum"), call, group="g")
    block = json.loads(re.search(r"<group>\n(.*)\n</group>", asked[0][1]["content"], re.S)[1])
    assert [t["turn"] for t in block["prompt_turns"]] == [0]
    assert all([t["turn"] for t in r["turns"]] == [1, 2, 3] for r in block["responses"])
    assert [s.reward for s in scores] == [1.0, 0.0]


def test_a_group_verdict_names_every_label_and_no_other():
    verdict = groups.verdict_type(2, ("correct",))
    one = {"correct": {"explanation": "", "met": True}}
    assert msgspec.convert({"A": one, "B": one}, verdict)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"A": one}, verdict)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"A": one, "B": one, "C": one}, verdict)


def test_a_call_holds_no_more_responses_than_the_judges_answer_holds_verdicts_for():
    def members(rubrics: int, answer_tokens: int | None, explain: bool = True) -> int:
        many = rubric_set(*(Rubric(id=f"r{i}", criterion="c", points=1) for i in range(rubrics)))
        return groups.group_call("judge", many, None, explain, 8, False, answer_tokens=answer_tokens).max_members

    assert members(3, 2048) == 8  # 3 x 60 tokens a response: 11 fit, the setting's 8 taken
    assert members(6, 2048) == 5  # 2048 // 360
    assert members(20, 2048) == 1  # not even two: each response judged alone
    assert members(20, 2048, explain=False) == 8  # bare verdicts, 10 tokens each
    assert members(20, None) == 8


async def test_members_with_the_same_response_are_shown_once_and_share_its_verdicts():
    asked: list = []
    twice = [member(0, "42."), member(1, "41."), member(2, "42."), member(3, "42.")]
    scores = await score_group(twice, Scoring(prepared(), "weighted_sum"), by_content(asked), group="g")
    [call] = asked
    assert len(re.findall(r'"label"', call[1]["content"])) == 2  # "42." once, "41." once
    assert [s.rollout_id for s in scores] == ["r0", "r1", "r2", "r3"]
    assert scores[2].results == scores[3].results == scores[0].results and scores[2].grouping == scores[0].grouping
    assert scores[1].reward < scores[0].reward == scores[2].reward
