"""`rubricd rubrics import | report`: HealthBench examples in as a run's per-instance rubric sets, its scores out
as HealthBench reports them (rubrics.healthbench).

`import FILE --run RUN` reads HealthBench JSON Lines and installs each example's
set as version 1 of instance `prompt_id` of RUN, as a scorer seeds a set: an
instance that already has a set keeps it (its versions are what scores name).
The scorers use them in rubrics_mode=per_instance. To seed every run from the
same file instead, point RUBRICD_INSTANCE_RUBRICS at it: it reads the same
lines. `--dry-run` only checks the file.

`report RUN` prints JSON: each scored rollout as an example (its prompt_id is
its instance key) with its HealthBench score, per axis (meta-class) and per
tag, recomputed from the judge's verdicts and the rubric set version the score
names, over the set's anchors only (HealthBench's own criteria, as imported;
the rubrics the updater added are not HealthBench's, `--all-rubrics` counts
them too); and the run's figures: `score` (the mean of the examples' scores,
clipped to [0, 1]), `axes`, and `metrics` under HealthBench's names
(`overall_score`, `axis:<class>`, `level:...`, `cluster:...`, each with its
`:n_samples`). None where undefined: a class with no positive-point rubric in
an example has no score there, and a figure no example defines is None.
`--examples FILE` (the HealthBench file) adds its example tags (`theme:...`),
each scoring its examples' scores, as HealthBench does.
Bootstrap deviations are not computed. Scores are the committed ones, read from
the `scored` stream (capped at stream_maxlen) and the per-rollout score keys
(kept the scorer's answer_ttl_s); a rollout whose judge failed or that was rejected has no
verdicts and is counted under `skipped`.
"""

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import msgspec
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import JudgeStatus, RubricKind, RubricSet, RunId, Score, ScoredRollout
from rubricd.wire import StreamEntry
from rubricd_services.rubrics import healthbench
from rubricd_services.state.rubric_sets import RubricStore

from .context import Context, Failed


def add(sub: argparse._SubParsersAction) -> None:
    """The two actions, under `rubricd rubrics`."""
    help = "load HealthBench examples (JSON Lines) as a run's per-instance rubric sets, version 1"
    p = sub.add_parser("import", help=help, description=help)
    p.add_argument("file", metavar="FILE", type=Path)
    p.add_argument("--run", required=True, metavar="RUN", help="the run whose instance sets they become")
    p.add_argument("--dry-run", action="store_true", help="check the file and say what it holds; write nothing")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run_import)
    help = "a run's scores as HealthBench reports them: per example, per axis and tag, overall (JSON)"
    p = sub.add_parser("report", help=help, description=help)
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("--step", type=int, help="only the rollouts of this step")
    p.add_argument(
        "--all-rubrics",
        action="store_true",
        help="count the rubrics the updater added too (default: the anchors, HealthBench's own criteria)",
    )
    p.add_argument(
        "--examples",
        type=Path,
        metavar="FILE",
        help="the HealthBench file the sets came from: its example_tags (theme:...) are reported too",
    )
    p.set_defaults(handler=run_report)


async def run_import(args: argparse.Namespace, ctx: Context) -> int:
    run_id = _run_id(args.run)
    try:
        sets = healthbench.read(args.file.read_bytes(), ctx.settings.meta_classes)
    except OSError as e:
        raise Failed(f"cannot read {args.file}: {e.strerror}") from None
    except healthbench.Invalid as e:
        raise Failed(f"{args.file}: {e}") from None
    installed: list[str] = []
    kept: dict[str, int] = {}
    if not args.dry_run:
        async with ctx.redis() as redis:
            store = RubricStore(redis, ctx.keys)
            for key, rubrics in sets.items():
                current = await store.seed(RubricSet(run_id=run_id, instance_key=key, version=1, rubrics=rubrics))
                if current.version == 1 and current.rubrics == rubrics:
                    installed.append(key)
                else:
                    kept[key] = current.version
    done = {
        "run_id": run_id,
        "file": str(args.file),
        "instances": len(sets),
        "rubrics": sum(map(len, sets.values())),
        "installed": installed,
        "kept": kept,
        "dry_run": args.dry_run,
    }
    if args.json:
        print(msgspec.json.encode(done).decode())
        return 0
    print(f"{args.file}: {done['instances']} examples, {done['rubrics']} rubrics")
    if args.dry_run:
        print("dry run: nothing written")
        return 0
    print(f"run {run_id}: {len(installed)} instance sets at version 1 (scored in rubrics_mode=per_instance)")
    if kept:
        print(
            f"{len(kept)} instances already had another set, kept: " + ", ".join(f"{k} (v{v})" for k, v in kept.items())
        )
    return 0


async def run_report(args: argparse.Namespace, ctx: Context) -> int:
    run_id = _run_id(args.run_id)
    try:
        tagged = healthbench.example_tags(args.examples.read_bytes()) if args.examples else {}
    except OSError as e:
        raise Failed(f"cannot read {args.examples}: {e.strerror}") from None
    except healthbench.Invalid as e:
        raise Failed(f"{args.examples}: {e}") from None
    async with ctx.redis() as redis:
        scores = [s for s in await committed(redis, ctx.keys, run_id) if args.step is None or s.step == args.step]
        if not scores:
            raise Failed(
                f"run {run_id!r} has no committed score" + (f" at step {args.step}" if args.step is not None else "")
            )
        sets = await rubric_sets(RubricStore(redis, ctx.keys), scores)
    print(
        msgspec.json.format(
            msgspec.json.encode(
                report(run_id, scores, sets, ctx.settings.meta_classes, tagged, anchors_only=not args.all_rubrics)
            ),
            indent=2,
        ).decode()
    )
    return 0


async def committed(redis: Redis, keys: Keys, run_id: str) -> list[Score]:
    """The run's committed scores, one a rollout: from the `scored` stream and the per-rollout score keys."""
    found: dict[str, Score] = {}
    start = "-"
    while entries := cast(list[StreamEntry], await redis.xrange(keys.scored, min=start, count=1000)):
        for _, fields in entries:
            try:
                scored = wire.decode(wire.payload(fields), ScoredRollout)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if scored.score.run_id == run_id:
                found.setdefault(scored.score.rollout_id, scored.score)
        start = "(" + entries[-1][0].decode()
    names = [key async for key in redis.scan_iter(match=keys.score(run_id, "*"), count=1000)]
    for at in range(0, len(names), 500):
        pipe = redis.pipeline(transaction=False)
        for name in names[at : at + 500]:
            pipe.get(name)  # GETs, not MGET: the CLI's ACL user reads with GET
        for raw in await pipe.execute():
            if raw:
                try:
                    score = wire.decode(raw, Score)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
                found.setdefault(score.rollout_id, score)
    return sorted(found.values(), key=lambda s: (s.step, s.instance_key or "", s.rollout_id))


async def rubric_sets(store: RubricStore, scores: list[Score]) -> dict[tuple[str | None, int], RubricSet]:
    """The rubric set version each score names, by (instance key, version)."""
    out: dict[tuple[str | None, int], RubricSet] = {}
    for s in scores:
        wanted = (s.instance_key, s.rubric_version)
        if wanted not in out and (found := await store.version(s.run_id, *wanted)):
            out[wanted] = found
    return out


def report(
    run_id: str,
    scores: list[Score],
    sets: dict[tuple[str | None, int], RubricSet],
    meta_classes: list[str],
    example_tags: Mapping[str, list[str]] | None = None,
    *,
    anchors_only: bool = True,
) -> dict[str, Any]:
    """HealthBench's report of the scores (see the module's docstring); `example_tags` by prompt_id; with
    `anchors_only`, over each set's anchors alone."""
    skipped: dict[str, int] = {}
    examples: list[dict[str, Any]] = []
    for s in scores:
        rubric_set = sets.get((s.instance_key, s.rubric_version))
        if s.status is not JudgeStatus.OK or rubric_set is None:  # no verdicts, or nothing to read them by
            why = str(s.status) if s.status is not JudgeStatus.OK else "no_rubric_set"
            skipped[why] = skipped.get(why, 0) + 1
            continue
        met = {r.rubric_id: r.met for r in s.results}
        rubrics = [r for r in rubric_set.rubrics if r.kind is RubricKind.ANCHOR or not anchors_only]
        overall = healthbench.score(rubrics, met)
        tags = healthbench.tag_scores(rubrics, met)
        classes = dict.fromkeys([*meta_classes, *(r.meta_class for r in rubrics)])
        own = {t: overall for t in (example_tags or {}).get(s.instance_key or "", [])}
        examples.append(
            {
                "rollout_id": s.rollout_id,
                "prompt_id": s.instance_key,
                "step": s.step,
                "rubric_version": s.rubric_version,
                "score": overall,
                "axes": {c: tags.get(healthbench.AXIS + c) for c in classes},
                "tags": _tags(own, tags),
            }
        )
    metrics: dict[str, float | int | None] = {}
    every_class = list(dict.fromkeys([*meta_classes, *(c for e in examples for c in e["axes"])]))
    every_tag = sorted({t for e in examples for t in e["tags"]} | {healthbench.AXIS + c for c in every_class})
    names = [healthbench.OVERALL, *every_tag]
    for name in names:
        mean, n = healthbench.clipped_mean(_figure(e, name) for e in examples)
        metrics[name], metrics[f"{name}:n_samples"] = mean, n
    return {
        "run_id": run_id,
        "rubrics": "anchors" if anchors_only else "all",
        "score": metrics[healthbench.OVERALL],
        "axes": {c: metrics[healthbench.AXIS + c] for c in every_class},
        "metrics": metrics,
        "examples": examples,
        "skipped": skipped,
    }


def _tags(own: dict[str, float | None], criteria: dict[str, float | None]) -> dict[str, float | None]:
    """An example's tags as HealthBench scores them: its own (example) tags score the example's score; a criterion
    tag (not an axis) scores its criteria, and wins over an example tag of the same name where it is defined."""
    out = dict(own)
    for tag, value in criteria.items():
        if not tag.startswith(healthbench.AXIS) and (value is not None or tag not in out):
            out[tag] = value
    return out


def _figure(example: dict[str, Any], name: str) -> float | None:
    if name == healthbench.OVERALL:
        return cast(float | None, example["score"])
    if name.startswith(healthbench.AXIS):
        return cast(float | None, example["axes"].get(name.removeprefix(healthbench.AXIS)))
    return cast(float | None, example["tags"].get(name))


def _run_id(run_id: str) -> str:
    try:
        return msgspec.convert(run_id, RunId)
    except msgspec.ValidationError:
        raise Failed(f"{run_id!r} is not a run id (A-Z a-z 0-9 _ . -, up to 128)") from None
