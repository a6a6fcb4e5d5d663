"""The Redis ACL users of a locked-down deployment: what each service, the CLI and a trainer may do.

Redis checks every command, each `redis.call` of a script included, and every key it names against the user's
rules, so each user lists the commands its code issues and the key families it touches, built from the
deployment's `Keys`; `rubricd acl` writes them as an ACL file (passwords as SHA-256 hashes).
The users and what each may do: docs/operators/secure.md, "Locked-down deployments".
"""

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rubricd.keys import Keys

SERVICES = ("scorer", "comparer", "arm", "analyzer", "summarizer", "updater", "gateway")
ADMIN, CLI, KEDA = "admin", "cli", "keda"
# A trainer's name prefixes its client ids (`<name>-<random>`), so it may hold no '-': the pattern of
# trainer `a` must not match the reply streams of a trainer `a-b`.
TRAINER_NAME = re.compile(r"^[A-Za-z0-9_]{1,64}$")

# What every consuming service does through the template (runtime.service, runtime.intake, runtime.dead_letters,
# runtime.consumer_groups, runtime.metrics) and FastStream: consumer groups, reading, reclaiming (XAUTOCLAIM) and holding (XCLAIM JUSTID) entries,
# the backlog gauges, trimming, failure records (MULTI), dead letters and events (a script), the health
# PING; scripts run by EVALSHA, loaded on a miss.
CONSUMER = (
    "ping",
    "xgroup|create",
    "xreadgroup",
    "xautoclaim",
    "xclaim",
    "xack",
    "xpending",
    "xinfo|groups",
    "xrange",
    "xtrim",
    "xadd",
    "type",
    "expire",
    "hset",
    "hincrby",
    "hgetall",
    "multi",
    "exec",
    "evalsha",
    "script|load",
)


# What every service's LLM client does with an endpoint's shared slots (llm.slots): its lease script and
# giving a lease back; and with its rate limits (llm.limits): the booking and correcting scripts.
LLM_SLOTS = ("time", "zremrangebyscore", "zcard", "zadd", "pexpire", "zrem", "hmget", "hset")


@dataclass(frozen=True)
class User:
    """One ACL user: the commands it may issue and the keys it may read and write, read, or write."""

    name: str
    commands: Sequence[str]
    keys: Sequence[str] = ()
    read: Sequence[str] = ()
    write: Sequence[str] = ()

    def rules(self) -> str:
        """The user's ACL rules, from nothing: no command, key or channel but those listed."""
        rules = ["resetkeys", "resetchannels", "-@all", *(f"+{c}" for c in self.commands)]
        rules += [f"~{k}" for k in self.keys] + [f"%R~{k}" for k in self.read] + [f"%W~{k}" for k in self.write]
        return " ".join(rules)


def family(key: str) -> str:
    """Every key of the family `key` belongs to: `<namespace>:<kind>:*` (e.g. every step hash)."""
    namespace, kind, _ = key.split(":", 2)
    return f"{namespace}:{kind}:*"


def consuming(keys: Keys, *streams: str) -> list[str]:
    """The streams a service reads in a group and the failure records of their entries."""
    return [*streams, *(keys.failure(stream, "*") for stream in streams)]


def services(keys: Keys) -> list[User]:
    k = keys
    rubric_sets = family(k.rubric_set("run"))
    # what a rubric set's write indexes (RubricStore.publish): its run, and an instance set's version
    indexed = [k.runs, family(k.rubric_instances("run"))]
    llm = [family(k.llm_slots("endpoint")), family(k.llm_rate("endpoint"))]
    every = [k.events, k.dead_letters, family(k.usage("run")), *llm]  # what all services write (usage: HINCRBY)
    generating = [family(k.generation_lock("run", "instance")), family(k.generation_failure("run", "instance"))]
    return [
        User(
            "scorer",
            # listen: XREVRANGE (the last entry at start), XREAD; score records and kept verdicts: GET, SET, and one MGET of both before judging; rubric
            # sets: HGET, and the store's seed script: HGET, HSET; the commit script adds to the run's usage: HINCRBY, and to the step's class
            # statistics: HINCRBYFLOAT, and to its rubric health: HINCRBY (its index: TIME, ZADD, ZREMRANGEBYSCORE); the meta-class schedule: HGET, HGETALL, its decide script's HSETNX; rubric
            # generation: its lock (redis-py's Lock: SET NX PX, scripts with GET, PEXPIRE, DEL) and failure record
            # (GET, SET, DEL); canaries: the commit's HSETNX of a step's start and XADD to the canary-steps stream,
            # their consumer group on it (the template's commands, failure records of its entries), the run's own
            # set (GET), a step's claim (MULTI: HSETNX, EXPIRE), and its
            # commit (WATCH, HGETALL, MULTI: HSET, EXPIRE, HINCRBY of the usage, XADD of its events); group judging's
            # gathering (runtime.gathering: TIME, HEXISTS, HGET, HSETNX, HSET, HINCRBY, EXPIRE, ZADD, XACK; ZSCORE,
            # EXISTS, ZREM, HGETALL, HKEYS) and its sweep (ZRANGEBYSCORE)
            (*CONSUMER, *LLM_SLOTS, "xrevrange", "xread", "get", "mget", "set", "del", "hget", "hincrbyfloat", "hsetnx")
            + ("watch", "unwatch", "hexists", "zscore", "exists", "hkeys", "hdel", "zrangebyscore"),
            keys=[
                *consuming(k, k.rollouts),
                *consuming(k, k.canary_steps),  # the canaries
                family(k.score("run", "rollout")),
                family(k.schedule("run")),
                family(k.class_stats("run", 0)),
                family(k.rubric_health("run", 0)),
                family(k.rubric_health_steps("run")),
                family(k.shadow_scores("run", 0)),
                family(k.kept_rollouts("run")),
                family(k.verdict("digest")),
                family(k.canaries("run")),
                family(k.canary_marks("run")),
                family(k.group("run", 0, "group")),
                k.groups_due,
                *generating,
                rubric_sets,
                *indexed,
                family(k.replies("c")),
                k.scored,
                *every,
            ],
            read=[k.rubrics_updated, k.rubric_candidates, family(k.canary_set("run"))],
        ),
        User(
            "comparer",
            # listen: XREVRANGE (the last entry at start), XREAD; the stored preference: MGET (runtime.answering); rubric sets and generation as the
            # scorer's; the preference commit script's GET, SET, XADD, EXPIRE, HSETNX (instance prompts), HINCRBY
            # (accuracy), then HGETALL of the accuracy
            (*CONSUMER, *LLM_SLOTS, "xrevrange", "xread", "get", "mget", "set", "del", "hget", "hsetnx"),
            keys=[
                *consuming(k, k.comparisons),
                family(k.preference("run", "comparison")),
                family(k.kept_comparisons("run")),
                family(k.instance_prompts("run")),
                family(k.accuracy("run")),
                *generating,
                rubric_sets,
                *indexed,
                family(k.replies("c")),
                *every,
            ],
            read=[k.rubrics_updated],
        ),
        User(
            "arm",
            # the phase script's HSETNX, HGET (and HMGET before it); the run's plan, pairs and frozen generators'
            # rubrics: GET, HGET; the stored reward: MGET (runtime.answering); the reward commit script: GET, SET,
            # XADD, EXPIRE, HINCRBY (usage)
            (*CONSUMER, *LLM_SLOTS, "get", "mget", "set", "hget", "hmget", "hsetnx"),
            keys=[
                *consuming(k, k.arm),
                family(k.arm_reward("run", "rollout")),
                family(k.kept_arm_rollouts("run")),
                family(k.arm_phases("run")),
                k.runs,  # the commit's ZADD
                family(k.replies("c")),
                *every,
            ],
            read=[
                family(k.arm_plan("run")),
                family(k.arm_pairs("run")),
                family(k.arm_index("run")),
                family(k.arm_rubrics("run", "model")),
            ],
        ),
        User(
            "analyzer",
            # the announce script's SADD; the rollout's rubric set version (HGET); the analysis sample's scripts
            # (HGET, HINCRBY; its gathering's, as the scorer's) and its sweep (ZRANGEBYSCORE)
            (*CONSUMER, *LLM_SLOTS, "sadd", "hget", "hsetnx", "hexists", "hkeys", "exists", "zscore", "zrangebyscore"),
            keys=[
                *consuming(k, k.scored),
                family(k.step_analyses("run", 0)),
                family(k.step_given_up("run", 0)),  # given_up: SADD, EXPIRE
                family(k.step_unsampled("run", 0)),
                family(k.analysis_group("run", 0, "group")),
                k.analysis_groups,
                k.analyses,
                *every,
            ],
            read=[rubric_sets],
        ),
        User(
            "summarizer",
            # the step book's scripts and reads, its steps' gathering (as the scorer's); a step's rubric health:
            # HGETALL
            (*CONSUMER, *LLM_SLOTS, "hget", "hsetnx", "hexists", "hkeys")
            + ("exists", "zscore", "sadd", "smembers", "zrange"),
            keys=[
                *consuming(k, k.steps, k.analyses),
                family(k.step("run", 0)),
                family(k.step_analyses("run", 0)),
                family(k.step_given_up("run", 0)),
                family(k.step_unsampled("run", 0)),  # read: HGETALL
                k.open_steps,
                k.summaries,
                *every,
            ],
            read=[family(k.rubric_health("run", 0))],
        ),
        User(
            "updater",
            # the run lock (redis-py's Lock: SET NX PX, scripts with GET, PEXPIRE, PTTL, DEL); the store: HGET,
            # HMGET, HGETALL, its publish script (HGET, HSET) and its step script (ZADD, GET, SET, XADD, EXPIRE);
            # promotion gated: the run's own promotion (GET), the store's propose (HGET, HEXISTS, HSET) and decide
            # (HGET, HSET, ZADD, HDEL, DEL) scripts, its candidates (HGET, HMGET), their shadow scores (HGETALL), the
            # canaries of their shadow steps (HMGET)
            (*CONSUMER, *LLM_SLOTS, "set", "get", "pttl", "del", "hget", "hexists", "hdel"),
            keys=[
                *consuming(k, k.summaries),
                family(k.update_lock("run")),
                family(k.shadow_scores("run", 0)),
                family(k.candidates("run")),
                rubric_sets,
                *indexed,
                family(k.rubric_step("run")),
                family(k.rubric_steps("run")),
                family(k.rubric_step_log("run")),
                k.rubrics_updated,
                k.rubric_candidates,
                *every,
            ],
            read=[family(k.promotion("run")), family(k.canaries("run"))],
        ),
    ]


def cli(keys: Keys) -> User:
    """`rubricd`: reads every stream and rubric set of the namespace and its indexes (tail, status, rubrics, dlq list);
    `dlq replay` writes a stream the letter came from, deletes the letter and logs an event (a script);
    `rubrics import` seeds rubric sets (the store's script: HGET, HSET); `judge canaries` sets a run's canary set
    (SET, DEL); `rescore` seeds the re-scored run's sets,
    publishes its rollouts and reads their Scores as a trainer does (a reply stream it deletes: DEL); `arm import`
    replaces a run's preference pairs (MULTI: DEL, HSET), `arm phases` sets its plan (SET), `arm dataset` keeps a
    frozen generator's rubric sets (HSETNX), asking the generator through the LLM client (its slots and limits);
    `archive` reads each key of a run by its type (TYPE, PTTL, SMEMBERS, LRANGE), then deletes them (DEL) and the
    run from the runs index (ZSCORE, ZREM)."""
    streams = ("xrange", "xrevrange", "xread", "xlen", "xinfo|groups", "xinfo|consumers", "xpending")
    reads = (*streams, "scan", "hget", "hgetall", "hvals", "hkeys", "get", "time", "zrange", "zrangebyscore", "zscore")
    archive = ("type", "pttl", "smembers", "lrange")
    writes = ("xadd", "xdel", "del", "set", "hset", "hsetnx", "multi", "exec", "evalsha", "script|load", "zrem")
    return User(CLI, ("ping", *reads, *archive, *writes, *LLM_SLOTS), keys=[f"{keys.namespace}:*"])


def trainer(keys: Keys, name: str) -> User:
    """A trainer (RubricdClient, the TRL and verl adapters): publishes rollouts, comparisons, arm rollouts and step
    closures, reads rubric
    sets, their announcements and done steps (wait_for_rubrics), the run's meta-class schedule (alternating:
    why each step's class was chosen), and reads and deletes its own reply streams."""
    if not TRAINER_NAME.fullmatch(name):
        raise ValueError(f"trainer name {name!r} must match {TRAINER_NAME.pattern}")
    k = keys
    return User(
        name,
        ("ping", "xadd", "xread", "xrevrange", "xdel", "del", "hget", "hgetall", "zmscore", "get"),
        keys=[k.replies(f"{name}-") + "*"],
        read=[
            k.rubrics_updated,
            family(k.rubric_set("run")),
            family(k.rubric_step("run")),
            family(k.rubric_steps("run")),
            family(k.rubric_step_log("run")),
            family(k.schedule("run")),
        ],
        write=[k.rollouts, k.steps, k.comparisons, k.arm],
    )


def gateway(keys: Keys) -> User:
    """The HTTP reward gateway: a trainer (its clients' reply streams are `gateway-*`) that also reads the scorers'
    stored Scores (MGET: a retried request is answered from them) and logs its events (service_started)."""
    as_trainer = trainer(keys, "gateway")
    return User(
        "gateway",
        (*as_trainer.commands, "mget"),
        keys=as_trainer.keys,
        read=[*as_trainer.read, family(keys.score("run", "rollout"))],
        write=[*as_trainer.write, keys.events],
    )


def keda(keys: Keys) -> User:
    """KEDA's redis-streams scaler (deploy/k8s/components/keda): the backlog of each consumer group, read only.
    Its commands, from the scaler's source (KEDA v2.21, pkg/scalers/redis_streams_scaler.go, redis_scaler.go):
    PING on connecting, XPENDING (pendingEntriesCount), XLEN (streamLength), INFO (lagCount: the server's
    version) and XINFO GROUPS (lagCount). Its client's HELLO needs no right (Redis lets anyone say it)."""
    k = keys
    return User(
        KEDA,
        ("ping", "info", "xinfo|groups", "xlen", "xpending"),
        read=[k.rollouts, k.comparisons, k.arm, k.scored, k.steps, k.analyses, k.summaries],
    )


def users(keys: Keys, trainers: Sequence[str] = ("trainer",)) -> list[User]:
    """Every user of a deployment but `admin` and `default`."""
    return [*services(keys), gateway(keys), cli(keys), keda(keys), *(trainer(keys, name) for name in trainers)]


def acl_file(keys: Keys, passwords: Mapping[str, str], trainers: Sequence[str] = ("trainer",)) -> str:
    """The ACL file: `default` off, `admin` with every right, then `users`; `passwords` holds one per user."""
    lines = ["user default off resetpass resetkeys resetchannels -@all"]
    for user in [User(ADMIN, ["@all"], keys=["*"]), *users(keys, trainers)]:
        lines.append(f"user {user.name} on #{_sha256(passwords[user.name])} {user.rules()}")
    return "\n".join(lines) + "\n"


def _sha256(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()
