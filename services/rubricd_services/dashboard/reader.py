"""What the dashboard's routes read: each run's steps tallied from its kept rollouts, one kept rollout with its
verdicts (rollouts.py), its rubric versions, schedule and latest step's rubric health, the consumer groups and the
event tail; and what is kept between polls."""

import asyncio
import bisect
import contextlib
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import msgspec
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import (
    ArmReward,
    Candidate,
    Event,
    JudgeStatus,
    Message,
    RewardedArmRollout,
    RubricSet,
    RubricsUpdated,
    ScoredRollout,
)
from rubricd.views import RubricView
from rubricd.wire import StreamEntry
from rubricd_services.runtime.status import stream_status, streams
from rubricd_services.settings import ServiceSettings
from rubricd_services.state import arm, canaries, health, runs
from rubricd_services.state.announcements import announcements
from rubricd_services.state.events import matches
from rubricd_services.state.history import changes, render_change, rubric_versions
from rubricd_services.state.promotion import Candidates
from rubricd_services.state.schedule import parse_history
from rubricd_services.state.usage import run_usage

from . import rollouts

EPOCH = uuid.uuid4().hex[:8]  # this process's: a cursor of another's (before a restart) reads every step

PAGE = 1000  # kept entries read at a time
EVENTS_SCANNED = 5000  # the newest events searched for matches, at most
EVENTS_SHOWN = 100
MISSING_RETRY_S = 30.0  # how often an announcement not found (stream trimmed, memory down) is looked for again
RUNS_EVERY_S = 15.0  # how often the run list is read again (a read per run of the runs index)
ROLLOUTS_LISTED = 500  # a step's kept rollouts listed for the page to pick one, at most
CANDIDATES_LISTED = 50  # a run's newest candidates (promotion gated) in its view


M = TypeVar("M", bound=Message)

# --- Rewards per step: a tally of the kept scores, read incrementally ---


@dataclass
class Mean:
    """A running mean: a sum and a count, whatever the number of values."""

    total: float = 0.0
    n: int = 0

    def add(self, value: float) -> None:
        self.total += value
        self.n += 1

    def value(self) -> float | None:
        return self.total / self.n if self.n else None


@dataclass
class StepTally:
    """What one step's kept scores add up to (training rollouts; evaluation ones counted apart)."""

    scored: int = 0  # every score but rejected ones
    failed: int = 0  # judge_failed: no reward
    rejected: int = 0
    masked: int = 0
    reward: Mean = field(default_factory=Mean)
    evaluation: Mean = field(default_factory=Mean)  # evaluation rollouts' rewards
    classes: dict[str, Mean] = field(default_factory=dict)  # meta-class -> its scores
    met: dict[str, Mean] = field(default_factory=dict)  # rubric id -> its verdicts (1.0 met)
    points: dict[str, float] = field(default_factory=dict)  # rubric id -> its points (the latest seen)
    versions: set[int] = field(default_factory=set)

    def add(self, s: ScoredRollout) -> None:
        score = s.score
        if score.status is JudgeStatus.REJECTED:
            self.rejected += 1
            return
        if score.evaluation:
            if score.reward is not None:
                self.evaluation.add(score.reward)
            return
        self.scored += 1
        self.versions.add(score.rubric_version)
        if score.status is JudgeStatus.JUDGE_FAILED:
            self.failed += 1
            return
        if score.masked:
            self.masked += 1
        elif score.reward is not None:
            self.reward.add(score.reward)
        for meta_class, value in score.meta_class_scores.items():
            self.classes.setdefault(meta_class, Mean()).add(value)
        for r in score.results:
            self.met.setdefault(r.rubric_id, Mean()).add(float(r.met))
            self.points[r.rubric_id] = r.points

    def row(self, step: int) -> dict[str, Any]:
        return {
            "step": step,
            "scored": self.scored,
            "failed": self.failed,
            "rejected": self.rejected,
            "masked": self.masked,
            "failure_rate": self.failed / self.scored if self.scored else None,
            "reward": self.reward.value(),
            "evaluation_reward": self.evaluation.value(),
            "evaluation_rollouts": self.evaluation.n,
            "meta_classes": {c: m.value() for c, m in sorted(self.classes.items())},
            "rubrics": {r: {"met": m.value(), "judged": m.n, "points": self.points[r]} for r, m in self.met.items()},
            "versions": sorted(self.versions),
        }


@dataclass
class Following:
    """Where a tally stopped reading its stream: each read returns only what came since, decoded, with each
    entry's id (an entry that does not decode is passed over); two reads at once (two tabs, a poll and a click)
    read each entry once."""

    last_id: str = "-"
    reading: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def new(self, redis: Redis, stream: str, type_: type[M]) -> list[tuple[str, M]]:
        found: list[tuple[str, M]] = []
        async with self.reading:
            while entries := cast(list[StreamEntry], await redis.xrange(stream, min=self.last_id, count=PAGE)):
                for entry_id, fields in entries:
                    with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                        found.append((entry_id.decode(), wire.decode(wire.payload(fields), type_)))
                self.last_id = "(" + entries[-1][0].decode()
        return found


@dataclass(frozen=True, slots=True)
class Kept:
    """One kept rollout as the page lists it, and where its stream keeps it (read again when it is shown)."""

    entry_id: str
    rollout_id: str
    status: str
    reward: float | None
    turns: int  # its trajectory's; 0 for a text rollout
    evaluation: bool

    def row(self) -> dict[str, Any]:
        return {
            "rollout_id": self.rollout_id,
            "status": self.status,
            "reward": self.reward,
            "turns": self.turns,
            "evaluation": self.evaluation,
        }


@dataclass
class RunTally:
    """A run's steps from its kept rollouts, and where each rollout is kept, read from where the last read
    stopped."""

    steps: dict[int, StepTally] = field(default_factory=dict)
    changed: list[tuple[int, int]] = field(default_factory=list)  # (read, step) for each step a read changed
    reads: int = 0  # the reads that found something new
    latest: int | None = None  # the latest step with a kept rollout
    kept: dict[str, Kept] = field(default_factory=dict)  # rollout id -> where it is kept
    listed: dict[int, list[Kept]] = field(default_factory=dict)  # step -> its kept rollouts, oldest first
    following: Following = field(default_factory=Following)

    async def catch_up(self, redis: Redis, keys: Keys, run_id: str) -> None:
        new = await self.following.new(redis, keys.kept_rollouts(run_id), ScoredRollout)
        self.reads += bool(new)
        for step in sorted({scored.rollout.step for _, scored in new}):
            self.changed.append((self.reads, step))
        for entry_id, scored in new:
            rollout, score = scored.rollout, scored.score
            self.steps.setdefault(rollout.step, StepTally()).add(scored)
            self.latest = max(rollout.step, self.latest if self.latest is not None else rollout.step)
            kept = Kept(
                entry_id, rollout.rollout_id, str(score.status), score.reward, len(rollout.trajectory), score.evaluation
            )
            self.kept[rollout.rollout_id] = kept
            self.listed.setdefault(rollout.step, []).append(kept)

    def rows(self, after: int = 0) -> list[dict[str, Any]]:
        """The steps changed by the reads after `after` (0: every step), found from the end of the reads' log: a
        poll costs what changed since, not the run's length."""
        if not after:
            return [t.row(step) for step, t in sorted(self.steps.items())]
        since = bisect.bisect_right(self.changed, (after, math.inf))
        return [self.steps[step].row(step) for step in sorted({step for _, step in self.changed[since:]})]


@dataclass
class ArmStep:
    """What one step's Rubric-ARM rewards add up to, per phase: the mean reward (penalties included: what the
    trainer trained on), how many were penalized, and for the judge how many verdicts picked the labelled winner."""

    generator: Mean = field(default_factory=Mean)
    judge: Mean = field(default_factory=Mean)
    right: Mean = field(default_factory=Mean)  # judge verdicts that parsed: 1.0 picked the labelled winner
    penalized: int = 0
    failed: int = 0

    def add(self, r: ArmReward) -> None:
        if r.status is JudgeStatus.JUDGE_FAILED:
            self.failed += 1
        if r.reward is None:
            return
        (self.generator if r.phase == "generator" else self.judge).add(r.reward)
        if r.penalty is not None:
            self.penalized += 1
        elif r.phase == "judge":
            self.right.add(float(r.winner == r.label))

    def row(self, step: int) -> dict[str, Any]:
        return {
            "step": step,
            "generator_reward": self.generator.value(),
            "generator_rollouts": self.generator.n,
            "judge_reward": self.judge.value(),
            "judge_accuracy": self.right.value(),
            "judge_rollouts": self.judge.n,
            "penalized": self.penalized,
            "failed": self.failed,
        }


@dataclass
class ArmTally:
    """A Rubric-ARM run's steps from its kept rewards (Keys.kept_arm_rollouts), read from where the last read stopped."""

    steps: dict[int, ArmStep] = field(default_factory=dict)
    following: Following = field(default_factory=Following)

    async def catch_up(self, redis: Redis, keys: Keys, run_id: str) -> None:
        for _, kept in await self.following.new(redis, keys.kept_arm_rollouts(run_id), RewardedArmRollout):
            self.steps.setdefault(kept.rollout.step, ArmStep()).add(kept.reward)


# --- The rest of a run: rubric versions, schedule, canaries, usage ---


class Reader:
    """What the page's routes read, with what may be kept between polls (the tallies, the announcements found)."""

    def __init__(self, settings: ServiceSettings, keys: Keys, redis: Redis) -> None:
        self.settings, self.keys, self.redis = settings, keys, redis
        self.store, self.promotion = RubricView(redis, keys), Candidates(redis, keys)  # made once, not per poll
        self.tallies: dict[str, RunTally] = {}
        self.arm: dict[str, ArmTally] = {}
        self.updates: dict[str, dict[int, RubricsUpdated]] = {}
        self.sets: dict[str, list[RubricSet]] = {}  # run -> its global set's versions read so far, v1 first
        self.decided: dict[str, dict[int, Candidate]] = {}  # run -> its decided candidates read so far, by step
        self.looked_up: dict[str, float] = {}  # run -> when missing announcements were last looked for
        self.looked_for: dict[str, int] = {}  # run -> the newest version whose announcement was looked for
        self.listed: tuple[float, list[dict[str, Any]]] | None = None  # when the run list was read, and it
        self.written: dict[str, dict[bytes, bytes]] = {}  # a write-once hash's fields read so far, by key

    async def runs(self) -> list[dict[str, Any]]:
        """Every run with a rubric set or a record: its current version, kept rollouts, and LLM cost (read
        again RUNS_EVERY_S after the last read)."""
        if self.listed is None or time.monotonic() - self.listed[0] >= RUNS_EVERY_S:
            self.listed = (time.monotonic(), await self.list_runs())
        return self.listed[1]

    async def list_runs(self) -> list[dict[str, Any]]:
        """The runs index's runs with a rubric set, kept rollouts or usage."""
        run_ids = await runs.listed(self.redis, self.keys)
        found = {r["run_id"]: r for r in await rubric_versions(self.redis, self.keys, run_ids)}
        kept = await runs.each(
            self.redis,
            run_ids,
            lambda pipe, run: pipe.xlen(self.keys.kept_rollouts(run)),
            lambda pipe, run: pipe.xlen(self.keys.kept_arm_rollouts(run)),
        )
        usage = await run_usage(self.redis, self.keys, self.settings.prices, run_ids)
        costs = {u["run_id"]: u["cost"] for u in usage}
        return [
            {
                "run_id": run_id,
                "version": found[run_id]["version"] if run_id in found else None,
                "instance_sets": found[run_id]["instance_sets"] if run_id in found else 0,
                "kept_rollouts": n,
                "kept_arm_rollouts": n_arm,
                "cost": costs.get(run_id),
            }
            for run_id, (n, n_arm) in zip(run_ids, kept, strict=True)
            if run_id in found or n or n_arm or run_id in costs
        ]

    async def tally(self, run_id: str) -> RunTally | None:
        """The run's tally, caught up; None for a run without kept rollouts (kept only for one with them)."""
        tally = self.tallies.get(run_id)
        if tally is None and await self.redis.xlen(self.keys.kept_rollouts(run_id)):
            tally = self.tallies[run_id] = RunTally()
        if tally is not None:
            await tally.catch_up(self.redis, self.keys, run_id)
        return tally

    async def step_rollouts(self, run_id: str, step: int | None) -> dict[str, Any]:
        """The kept rollouts of `step` (the run's latest by default), oldest first, ROLLOUTS_LISTED at most: for
        the page to pick one to show."""
        tally = await self.tally(run_id)
        step = tally.latest if tally is not None and step is None else step
        if tally is None or step is None:
            return {"step": step, "rollouts": [], "more": 0}
        listed = tally.listed.get(step, [])
        return {
            "step": step,
            "rollouts": [k.row() for k in listed[:ROLLOUTS_LISTED]],
            "more": max(0, len(listed) - ROLLOUTS_LISTED),
        }

    async def rollout(self, run_id: str, rollout_id: str) -> dict[str, Any] | None:
        """One kept rollout with its score, verdicts and turns (rollouts.view); None if the run never kept it or
        its stream has trimmed it since."""
        tally = await self.tally(run_id)
        kept = tally.kept.get(rollout_id) if tally is not None else None
        if kept is None:
            return None
        stream = self.keys.kept_rollouts(run_id)
        entries = cast(list[StreamEntry], await self.redis.xrange(stream, min=kept.entry_id, max=kept.entry_id))
        if not entries:
            return None
        return rollouts.view(wire.decode(wire.payload(entries[0][1]), ScoredRollout))

    async def run(self, run_id: str, cursor: str = "") -> dict[str, Any]:
        """The run's view. Its `steps` and `versions` are the changed and new ones only (`partial`) when `cursor`,
        the `cursor` of an earlier view of this process's, says which the page has: a poll's answer does not grow
        with the run."""
        tally = await self.tally(run_id)
        epoch, seen, seen_versions = (cursor.split(".") + ["", "", ""])[:3]
        partial = epoch == EPOCH and seen.isdigit() and seen_versions.isdigit() and tally is not None
        after, after_version = (int(seen), int(seen_versions)) if partial else (0, 0)
        versions, complete = await self.versions(run_id, after_version)
        schedule = parse_history(await self.write_once(self.keys.schedule(run_id)))
        judged = canaries.parse(await self.write_once(self.keys.canaries(run_id)))
        arm_tally = self.arm.get(run_id)
        if arm_tally is None and await self.redis.xlen(self.keys.kept_arm_rollouts(run_id)):
            arm_tally = self.arm[run_id] = ArmTally()
        if arm_tally is not None:
            await arm_tally.catch_up(self.redis, self.keys, run_id)
        phases = await arm.read_decisions(self.redis, self.keys, run_id)
        return {
            "run_id": run_id,
            "cursor": f"{EPOCH}.{tally.reads if tally is not None else 0}.{complete}",
            "partial": partial,
            "steps": tally.rows(after) if tally is not None else [],
            "versions": versions,
            "candidates": await self.candidates(run_id),
            "health": await self.health(run_id, tally.latest if tally is not None else None),
            "schedule": [
                {"step": d.step, "meta_class": d.meta_class, "reason": d.reason, "strategy": d.strategy}
                for d in schedule.values()
            ],
            "step_ready": _int(await self.redis.get(self.keys.rubric_step(run_id))),
            "canary_drift_since": canaries.drifting_since(judged),
            "canaries": [
                {
                    "step": c.step,
                    "agreement": c.agreement,
                    "baseline": c.baseline,
                    "drift": c.drift,
                    "verdicts": c.verdicts,
                    "failures": c.failures,
                    "rubric_version": c.rubric_version,
                }
                for c in judged
            ],
            "arm": [t.row(step) for step, t in sorted(arm_tally.steps.items())] if arm_tally else [],
            "arm_phases": [{"step": d.step, "training": d.training, "phase": arm.explain(d)} for d in phases.values()],
        }

    async def write_once(self, key: str) -> dict[bytes, bytes]:
        """The fields of a hash whose fields are written once and never change (a run's schedule decisions, its
        canary steps), as HGETALL gives them: each poll reads the field names and only the values not read yet,
        so a poll of a long run does not read its every step again."""
        names = cast(list[bytes], await self.redis.hkeys(key))
        kept = self.written.get(key, {})
        missing = [n for n in names if n not in kept]
        values = cast(list[bytes | None], await self.redis.hmget(key, missing)) if missing else []
        kept = {n: kept[n] for n in names if n in kept} | {n: v for n, v in zip(missing, values) if v is not None}
        self.written[key] = kept
        return kept

    async def candidates(self, run_id: str) -> list[dict[str, Any]]:
        """The global set's newest candidates (promotion gated), oldest first: in shadow, or decided with the gate's
        figures. A decided one is read once (it never changes); each poll reads the field names."""
        decided = self.decided.setdefault(run_id, {})
        steps = (await self.promotion.steps(run_id))[-CANDIDATES_LISTED:]
        found = {c.step: c for c in await self.promotion.proposed(run_id, None, [s for s in steps if s not in decided])}
        decided.update({step: c for step, c in found.items() if c.decision is not None})
        return [_candidate(c) for c in (decided.get(s) or found.get(s) for s in steps) if c is not None]

    async def health(self, run_id: str, step: int | None) -> dict[str, Any] | None:
        """The rubric health of the run's latest step with kept rollouts (global sets), counted so far; None
        before any."""
        if step is None:
            return None
        found = await health.read(self.redis, self.keys, run_id, step)
        return {"step": step, "rubrics": [msgspec.to_builtins(h) for h in found]} if found else None

    async def versions(self, run_id: str, after: int = 0) -> tuple[list[dict[str, Any]], int]:
        """The global set's versions after `after`, each with the update that made it (step, strategy, changes and
        why), and up to which version they are complete (every update found: a page keeps those). Only versions
        not read before are read (a version never changes)."""
        history = self.sets.setdefault(run_id, [])
        current = await self.store.current(run_id)
        if current is not None and current.version > len(history):
            read = await self.store.versions(run_id, None, range(len(history) + 1, current.version + 1))
            history += [v for v in read if v.version > len(history)]  # another poll may have read them meanwhile
        known = self.updates.setdefault(run_id, {})
        missing = [v.version for v in history[1:] if v.version not in known]
        # A new version's update is looked for at once; one looked for and not found, again after MISSING_RETRY_S.
        retry = time.monotonic() - self.looked_up.get(run_id, -MISSING_RETRY_S) >= MISSING_RETRY_S
        if missing and (retry or max(missing) > self.looked_for.get(run_id, 0)):
            self.looked_up[run_id], self.looked_for[run_id] = time.monotonic(), max(missing)
            known.update(await announcements(self.redis, self.keys, self.settings, run_id, None, missing))
        complete = min([v - 1 for v in missing if v not in known], default=len(history))
        out = []
        start = min(after, complete)  # history[i] is version i + 1: those the page keeps are skipped, not walked
        for before, version in zip([None, *history][start:], history[start:]):
            update = known.get(version.version)
            found = [] if before is None else changes(before, version, [update] if update else [])
            out.append(
                {
                    "version": version.version,
                    "step": version.step,
                    "at": version.created_at,
                    "rubrics": [
                        {"id": r.id, "points": r.points, "meta_class": r.meta_class, "kind": r.kind}
                        for r in version.rubrics
                    ],
                    "strategy": str(update.strategy) if update else None,
                    "changes": [
                        {
                            "change": c.change,
                            "rubric_id": c.rubric_id,
                            "text": render_change(c).partition("\n")[0],
                            "rationale": c.rationale,
                        }
                        for c in found
                    ],
                }
            )
        return out, complete

    async def groups(self) -> list[dict[str, Any]]:
        """Each consumer group of the namespace: its stream, consumers, pending entries and lag."""
        out = []
        for name in streams(self.keys):
            s = await stream_status(self.redis, name)
            for g in s["groups"]:
                out.append(
                    {
                        "stream": name.removeprefix(self.keys.namespace + ":"),
                        "length": s["length"],
                        "group": g["group"],
                        "consumers": len(g["consumers"]),
                        "pending": g["pending"],
                        "lag": g["lag"],
                        "oldest_pending_age_s": g["oldest_pending_age_s"],
                    }
                )
        return out

    async def events(self, run: str | None, service: str | None, kind: str | None) -> list[dict[str, Any]]:
        """The newest matching events, newest first (EVENTS_SHOWN at most, among the newest EVENTS_SCANNED)."""
        shown: list[dict[str, Any]] = []
        last, scanned = "+", 0
        while len(shown) < EVENTS_SHOWN and scanned < EVENTS_SCANNED:
            entries = cast(list[StreamEntry], await self.redis.xrevrange(self.keys.events, max=last, count=500))
            if not entries:
                break
            for entry_id, fields in entries:
                with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                    event = wire.decode(wire.payload(fields), Event)
                    if matches(event, run, [service] if service else None, [kind] if kind else None):
                        shown.append({"id": entry_id.decode(), **msgspec.to_builtins(event)})
            scanned += len(entries)
            last = "(" + entries[-1][0].decode()
        return shown[:EVENTS_SHOWN]


def _int(raw: bytes | str | None) -> int | None:
    return None if raw is None else int(raw)


def _candidate(c: Candidate) -> dict[str, Any]:
    """A candidate as the page shows it."""
    d = c.decision
    return {
        "step": c.step,
        "until": c.until,
        "base_version": c.base_version,
        "outcome": d.outcome if d else "in shadow",
        "decided_at_step": d.step if d else None,
        "version": d.version if d else None,
        "reason": d.reason if d else "",
        "rationale": c.rationale,
        "checks": [msgspec.to_builtins(check) for check in d.checks] if d else [],
        "canaries": msgspec.to_builtins(d.canaries) if d and d.canaries else None,
        "changes": [f"{m.action} {m.rubric_id}" for m in c.modifications],
    }
