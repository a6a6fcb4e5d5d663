"""The update without a broker: exactly-once versions from the simulated agents, the ablations."""

import msgspec

from rubricd.messages import EventKind, RubricSet, Strategy
from rubricd_services.memory.store import MemoryItem, MemoryKind
from rubricd_services.rubrics.seeds import Seeds
from rubricd_services.state.promotion import Shadowing
from rubricd_services.updater.prompting import MemoryBudget, Prompts
from rubricd_services.updater.update import RubricUpdater
from rubricd_testbed.simulator import updates as sim_updates

from .examples import ANCHOR, CURRENT, DYNAMIC, GRADER, LIMITS, STATIC, SUMMARY


class FakeStore:
    """RubricStore's surface (and Candidates' shadowing), in memory."""

    def __init__(self) -> None:
        self.versions: dict[int, RubricSet] = {}

    async def current(self, run_id, instance=None):
        return self.versions[max(self.versions)] if self.versions else None

    async def seed(self, rubric_set):
        self.versions.setdefault(1, rubric_set)
        return self.versions[max(self.versions)]

    async def history(self, run_id, instance=None):
        return [self.versions[v] for v in sorted(self.versions)]

    async def version(self, run_id, instance, version):
        return self.versions.get(version)

    async def shadowing(self, run_id, instance, step):
        return Shadowing(None, None, None)  # promotion immediate: never a candidate

    async def made_from(self, run_id, instance, step):
        return next((v for v in self.versions.values() if v.step == step), None)

    async def publish(self, rubric_set):
        if rubric_set.version - 1 != max(self.versions, default=0):
            return False
        self.versions[rubric_set.version] = rubric_set
        return True


class FakeMemory:
    def __init__(self) -> None:
        self.items: list[MemoryItem] = []
        self.searches: list[str] = []

    async def put(self, items):
        self.items += items
        return [f"m{len(self.items)}"]

    async def recent(self, run_id, kind, *, limit, instance_key=None, before_step=None):
        found = [i for i in self.items if i.kind == kind and (before_step is None or i.step < before_step)]
        return sorted(found, key=lambda i: -i.step)[:limit]

    async def search(self, run_id, query, *, limit, kinds=None, instance_key=None):
        self.searches.append(query)
        return DYNAMIC[:limit]


def simulated_llm(calls: list[tuple[str, str]]):
    """The simulator's own answer functions, decoded like the LLM client would."""

    async def ask(run_id, agent, messages, type_):
        assert run_id == SUMMARY.run_id
        calls.append((agent, messages[1]["content"]))
        answer = {"MemoryQueries": sim_updates.queries, "UpdateProposal": sim_updates.proposal}[type_.__name__]
        return msgspec.convert(answer(messages[0]["content"], messages[1]["content"]), type_)

    return ask


def make_updater(calls, **budget) -> tuple[RubricUpdater, FakeStore, FakeMemory]:
    store, memory = FakeStore(), FakeMemory()
    updater = RubricUpdater(
        store=store,
        candidates=store,  # type: ignore[arg-type]  # promotion immediate: its shadowing only
        memory=memory,
        ask=simulated_llm(calls),
        prompts=Prompts.load(),
        seeds=Seeds(CURRENT),
        limits=LIMITS,
        budget=MemoryBudget(**budget),
    )
    return updater, store, memory


async def test_a_summary_naming_padding_makes_one_version_and_a_redelivery_makes_none():
    calls: list[tuple[str, str]] = []
    updater, store, memory = make_updater(calls)
    outcome = await updater.update(SUMMARY, None)
    assert outcome.kind is EventKind.RUBRICS_UPDATED and outcome.current.version == 2 and outcome.current.step == 2
    assert outcome.update.strategy is Strategy.CORRECTIVE and outcome.update.previous_version == 1
    assert [m.rubric_id for m in outcome.update.modifications] == ["no_padding"]
    assert outcome.current.rubrics[:2] == [ANCHOR, GRADER]
    assert outcome.consulted == ["id-1"] and memory.searches  # the query writer's queries ran
    [record] = [i for i in memory.items if i.kind is MemoryKind.RUBRIC_UPDATE]
    assert record.ref == "2" and "added no_padding" in record.text and record.step == 2
    again = await updater.update(SUMMARY, None)
    assert again.kind is EventKind.RUBRICS_REANNOUNCED and again.update == outcome.update
    assert sorted(store.versions) == [1, 2]
    calm = await updater.update(
        msgspec.structs.replace(SUMMARY, step=3, executive_summary="Padded answers persist."), None
    )
    assert calm.kind is EventKind.RUBRICS_UNCHANGED and calm.proposal.strategy is Strategy.MAINTENANCE  # already caught


async def test_ablation_switches_change_what_the_updater_sees():
    calls: list[tuple[str, str]] = []
    updater, _, memory = make_updater(calls, static=False, dynamic=False)
    memory.items.append(STATIC[0])
    await updater.update(SUMMARY, None)
    assert [agent for agent, _ in calls] == ["updater"]  # no query writer without dynamic memory
    assert "static_memory" not in calls[0][1] and "dynamic_memory" not in calls[0][1]
    calls.clear()
    updater, _, memory = make_updater(calls, static=True, dynamic=True, static_k=1)
    memory.items.append(STATIC[0])
    await updater.update(SUMMARY, None)
    assert [agent for agent, _ in calls] == ["query_writer", "updater"]
    assert "step one summary text" in calls[1][1] and "id-1" in calls[1][1]


async def test_a_summary_that_arrives_after_a_later_step_is_still_applied_once():
    updater, store, _ = make_updater([])
    later = msgspec.structs.replace(
        SUMMARY, step=5, executive_summary="Responses flatter the user with sycophantic praise."
    )
    assert (await updater.update(later, None)).kind is EventKind.RUBRICS_UPDATED
    late = await updater.update(SUMMARY, None)  # step 2, reclaimed after step 5 was applied
    assert late.kind is EventKind.RUBRICS_UPDATED and late.current.version == 3 and late.current.step == 2
    assert (await updater.update(SUMMARY, None)).kind is EventKind.RUBRICS_REANNOUNCED
    assert [v.step for v in store.versions.values()] == [None, 5, 2]


async def test_an_agent_hack_in_the_summary_makes_a_version_with_a_turn_rubric():
    updater, store, memory = make_updater([])
    fabricating = msgspec.structs.replace(
        SUMMARY,
        executive_summary="Most trajectories state a tool result that no tool turn returned (fabricated).",
        reward_hacking=[],
        systemic_patterns=[],
    )
    outcome = await updater.update(fabricating, None)
    assert outcome.kind is EventKind.RUBRICS_UPDATED
    [added] = [r for r in outcome.current.rubrics if r.id == "no_fabricated_tool_result"]
    assert added.scope == "turn" and added.points < 0 and store.versions[2].rubrics[-1] == added
    [record] = [i for i in memory.items if i.kind is MemoryKind.RUBRIC_UPDATE]
    assert "added no_fabricated_tool_result (-5, accuracy, judged on each turn)" in record.text
