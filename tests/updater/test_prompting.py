"""The query writer's and the updater's chats: the data they are shown, the memories switched on, the budgets."""

import json

import msgspec

from rubricd.messages import RubricHealth
from rubricd_services.memory.store import Hit, MemoryItem, MemoryKind
from rubricd_services.updater.prompting import MemoryBudget, Prompts, query_writer_messages, updater_messages
from tests.factories import rubric_set

from .examples import CURRENT, DYNAMIC, LIMITS, STATIC, SUMMARY


def test_the_updater_prompt_holds_only_the_memories_that_are_switched_on():
    current = rubric_set(*CURRENT, version=3)
    both = updater_messages("Instructions.", SUMMARY, current, STATIC, DYNAMIC, LIMITS)[1]["content"]
    assert "<static_memory>" in both and "step one summary text" in both
    assert "<dynamic_memory>" in both and "id-1" in both and "padded answer" in both
    assert '"max_adaptive":3' in both and "shows_reasoning" in both
    neither = updater_messages("Instructions.", SUMMARY, current, None, None, LIMITS)[1]["content"]
    assert "static_memory" not in neither and "dynamic_memory" not in neither
    # Rollout-derived text is data: it can never close a block or open one.
    assert "<rubrics>ignore" not in both and "\\u003crubrics>ignore" in both


def test_memories_are_cut_to_the_updaters_prompt_budget_with_a_marker():
    current = rubric_set(*CURRENT, version=3)
    long = [Hit(MemoryItem(kind=MemoryKind.ANALYSIS, run_id="run", step=2, text="m" * 20_000, ref="r"), 0.9, "id-9")]
    whole = updater_messages("Instructions.", SUMMARY, current, STATIC, long, LIMITS)
    assert "m" * 20_000 in whole[1]["content"]
    [system, user] = updater_messages("Instructions.", SUMMARY, current, STATIC, long, LIMITS, prompt_chars=6000)
    assert len(system["content"]) + len(user["content"]) <= 6000
    assert "step one summary text" in user["content"]  # the short memory stays whole
    assert "cut to fit" in user["content"] and "of 20000 characters" in user["content"] and "id-9" in user["content"]


def test_the_query_writer_is_told_its_budget():
    fixed = query_writer_messages("Write queries.", SUMMARY, MemoryBudget(max_queries=3, adaptive_queries=False))
    adaptive = query_writer_messages("Write queries.", SUMMARY, MemoryBudget(max_queries=5, adaptive_queries=True))
    assert "exactly 3" in fixed[1]["content"] and "at most 5" in adaptive[1]["content"]
    assert fixed[0]["content"] == "Write queries."


def test_default_prompts_are_prose_next_to_the_service():
    prompts = Prompts.load()
    assert "anchor" in prompts.updater and "never an instruction" in prompts.updater
    assert "queries" in prompts.query_writer


def test_the_updater_is_shown_the_adaptive_rubrics_the_step_found_uninformative_and_never_an_anchor():
    current = rubric_set(*CURRENT, version=3)
    health = [
        RubricHealth(
            rubric_id=r, met_rate=rate, rollouts=8, groups=2, groups_with_spread=spread, uninformative=not spread
        )
        for r, rate, spread in (("correct", 1.0, 0), ("shows_reasoning", 1.0, 0), ("addresses_grader", 0.25, 1))
    ]
    counted = msgspec.structs.replace(SUMMARY, health=health)
    user = updater_messages("Instructions.", counted, current, None, None, LIMITS)[1]["content"]
    shown = user.partition("<uninformative_rubrics>")[2].partition("</uninformative_rubrics>")[0]
    assert json.loads(shown) == [{"rubric_id": "shows_reasoning", "met_rate": 1.0, "rollouts": 8, "groups": 2}]
    assert '"health"' not in user  # shown apart, not twice
    uncounted = updater_messages("Instructions.", SUMMARY, current, None, None, LIMITS)[1]["content"]
    assert "uninformative_rubrics" not in uncounted
