"""Every stream, consumer group and key name, built from one namespace.

Nothing else in rubricd spells a Redis name. Names a message carries (its
`reply_to`) are checked here, so a publisher can never make a service write
outside the namespace.
"""

import hashlib
import re

DEFAULT_NAMESPACE = "rubricd"
GLOBAL = "_global"  # instance slot of a run's global rubric set

# Consumer groups, one per service; a group name is scoped by its stream.
SCORERS = "scorers"
ANALYZERS = "analyzers"
SUMMARIZERS = "summarizers"
UPDATERS = "updaters"
COMPARERS = "comparers"
ARM = "arm"  # the arm service's group on the arm stream
CANARIES = "canaries"  # the scorers' canaries' group on the canary-steps stream (one entry per run and step)

_NAMESPACE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_CLIENT_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def endpoint_id(base_url: str) -> str:
    """A short name for an LLM endpoint in key names (a hash of its URL: no host or credentials in key names)."""
    return hashlib.sha256(base_url.encode()).hexdigest()[:16]


class InvalidKey(ValueError):
    """A name outside the namespace, or not of the expected form."""


class Keys:
    """The names of one rubricd deployment."""

    def __init__(self, namespace: str = DEFAULT_NAMESPACE) -> None:
        if not _NAMESPACE.fullmatch(namespace):
            raise InvalidKey(f"namespace {namespace!r} must match {_NAMESPACE.pattern}")
        self.namespace = namespace
        ns = namespace
        # Streams
        self.rollouts = f"{ns}:rollouts"  # Rollout, from trainers
        self.comparisons = f"{ns}:comparisons"  # Comparison, from trainers (pairwise judging)
        self.arm = f"{ns}:arm"  # ArmRollout, from trainers (Rubric-ARM training)
        self.steps = f"{ns}:steps"  # StepClosed, from trainers
        self.scored = f"{ns}:scored"  # ScoredRollout, scorer -> analyzers
        self.analyses = f"{ns}:analyses"  # RolloutAnalysis, analyzers -> summarizer
        self.summaries = f"{ns}:summaries"  # StepSummary, summarizer -> updater
        self.rubrics_updated = f"{ns}:rubrics-updated"  # RubricsUpdated, updater -> all
        # Candidate, updater -> scorers (promotion gated): one put in shadow, or rejected (a promoted one is announced
        # on rubrics-updated), so that each scorer reloads the run's set at once, mid-step.
        self.rubric_candidates = f"{ns}:rubric-candidates"
        self.events = f"{ns}:events"  # Event, every service -> `tail`
        self.canary_steps = f"{ns}:canary-steps"  # Event, scorer commit -> the canaries: a step's first score's
        self.dead_letters = f"{ns}:dead-letters"  # DeadLetter
        # Sorted set of the sample groups gathering for group judging (their `group` keys), each by when it is
        # due: its deadline, at once when complete, or when a claim on it runs out (a gathering: scorer.groups).
        self.groups_due = f"{ns}:groups-due"
        # Sorted set of the namespace's runs, each by when it was last active (an answer committed for it, or a
        # rubric set of its written): what `rubricd status` and the dashboard list, instead of scanning.
        self.runs = f"{ns}:runs"
        self._replies = f"{ns}:replies:"

    def replies(self, client_id: str) -> str:
        """The reply stream of one trainer client."""
        if not _CLIENT_ID.fullmatch(client_id):
            raise InvalidKey(f"client id {client_id!r} must match {_CLIENT_ID.pattern}")
        return self._replies + client_id

    def check_reply_to(self, name: str) -> str:
        """Return `name` if it is one of this namespace's reply streams."""
        if not name.startswith(self._replies):
            raise InvalidKey(f"reply_to {name!r} is not under {self._replies!r}")
        self.replies(name.removeprefix(self._replies))
        return name

    def rubric_set(self, run_id: str, instance_key: str | None = None) -> str:
        """Hash of a run's rubric set versions: `v<N>` -> RubricSet N, `current` -> the newest's copy, `s<step>` ->
        the version made from that step; with promotion gated, `candidate` -> the Candidate in shadow."""
        return f"{self.namespace}:rubric-set:{run_id}:{instance_key or GLOBAL}"

    def candidates(self, run_id: str, instance_key: str | None = None) -> str:
        """Hash of a rubric set's candidates (promotion gated): `p<step>` -> the Candidate proposed at that step,
        with its decision once made; `d<step>` -> the step of the one decided at that step."""
        return f"{self.namespace}:candidates:{run_id}:{instance_key or GLOBAL}"

    def shadow_scores(self, run_id: str, step: int, instance_key: str | None = None) -> str:
        """Hash of the shadow scores of the candidate proposed at `step` (rubricd_services.state.promotion): rollout id -> its
        verdicts under the set in force and the candidate's changed rubrics; deleted by its decision."""
        return f"{self.namespace}:shadow-scores:{run_id}:{step}:{instance_key or GLOBAL}"

    def promotion(self, run_id: str) -> str:
        """A run's PromotionPlan (`rubricd rubrics promotion`), in place of the updater's settings; no expiry."""
        return f"{self.namespace}:promotion:{run_id}"

    def rubric_instances(self, run_id: str) -> str:
        """Hash of a run's per-instance rubric sets: instance key -> its current version (written with each)."""
        return f"{self.namespace}:rubric-instances:{run_id}"

    def rubric_step(self, run_id: str) -> str:
        """The last step whose rubric update (or decision not to) is complete."""
        return f"{self.namespace}:rubric-step:{run_id}"

    def rubric_steps(self, run_id: str) -> str:
        """Sorted set of the steps whose rubric update (or decision not to) is complete; member and score: the step."""
        return f"{self.namespace}:rubric-steps:{run_id}"

    def rubric_step_log(self, run_id: str) -> str:
        """Stream of a run's steps as their rubric update (or decision not to) completes, one entry each (`step`;
        the newest hundred, kept a day after the last): what a trainer waiting on them blocks on."""
        return f"{self.namespace}:rubric-step-log:{run_id}"

    def failure(self, stream: str, entry_id: str) -> str:
        """Hash of a stream entry's failures, kept for its retries and its dead letter: `error` (the last one),
        `failed` (how often it failed for a reason of its own), `transient` (how often an outage failed it)."""
        return f"{self.namespace}:failure:{stream}:{entry_id}"

    def step(self, run_id: str, step: int, instance_key: str | None = None) -> str:
        """Hash of one step's accounting (expected rollouts, deadline, summarized) for the summarizer."""
        return f"{self.namespace}:step:{run_id}:{step}:{instance_key or GLOBAL}"

    def step_analyses(self, run_id: str, step: int) -> str:
        """Set of the rollout ids of a step whose analysis is in memory."""
        return f"{self.namespace}:step-analyses:{run_id}:{step}"

    def step_given_up(self, run_id: str, step: int) -> str:
        """Set of the rollout ids of a step whose analysis was given up on (dead-lettered): not waited for."""
        return f"{self.namespace}:step-given-up:{run_id}:{step}"

    def step_unsampled(self, run_id: str, step: int) -> str:
        """Hash of the rollout ids of a step that the analysis sample left out (field) and the rule that did
        (value, e.g. `extremes`): scored, not analyzed, not waited for."""
        return f"{self.namespace}:step-unsampled:{run_id}:{step}"

    def analysis_group(self, run_id: str, step: int, group: str) -> str:
        """Hash of one sample group as the analysis sample sees it: under `extremes` a gathering, `m:<rollout id>`
        its ScoredRollout ('' once decided), `~n` members arrived, `~opened`, `~claimed` once an analyzer first
        claimed it (a member arriving later is left out), `~claimer`, `~claims`, `~failed` decisions; under k per
        group, `p:<rollout id>` 1 if picked, else 0, and `n` members arrived."""
        return f"{self.namespace}:analysis-group:{run_id}:{step}:{group}"

    @property
    def analysis_groups(self) -> str:
        """Sorted set of the sample groups the analyzers have yet to decide (JSON [run_id, step, group]), scored
        by when one may: the group's deadline, now once it is complete, when a claim on it ends, or a retry."""
        return f"{self.namespace}:analysis-groups"

    @property
    def open_steps(self) -> str:
        """Sorted set of open steps ('run_id|step'), scored by when one may be claimed: its summary deadline, when
        a claim on it ends, or a retry."""
        return f"{self.namespace}:open-steps"

    def update_lock(self, run_id: str, instance_key: str | None = None) -> str:
        """Serializes rubric updates of one run (and instance)."""
        return f"{self.namespace}:update-lock:{run_id}:{instance_key or GLOBAL}"

    def generation_lock(self, run_id: str, instance_key: str) -> str:
        """Held (SET NX PX, renewed while it lives) by the one process (a scorer or a comparer) writing an instance's rubric set with the
        generator; the others wait for the set, and take the lock over if it expires (its holder died)."""
        return f"{self.namespace}:generation-lock:{run_id}:{instance_key}"

    def generation_failure(self, run_id: str, instance_key: str) -> str:
        """An instance's last failed rubric generation, JSON {step, error, at}: its rollouts of that step get the
        seed rubrics, a later step's retries; deleted when a generation succeeds. No expiry, like the sets."""
        return f"{self.namespace}:generation-failure:{run_id}:{instance_key}"

    def score(self, run_id: str, rollout_id: str) -> str:
        """The Score given to a rollout; makes redelivery idempotent (kept the scorer's `answer_ttl_s`)."""
        return f"{self.namespace}:score:{run_id}:{rollout_id}"

    def group(self, run_id: str, step: int, group: str) -> str:
        """Hash of a sample group gathering for group judging: `m:<rollout id>` -> the member's rollout (wire
        bytes; '' once judged), `~n` members, `~opened` when the first arrived, `~claimed` once its judging started
        (a member that arrives later is judged alone), `~claimer` (the consumer of the latest claim), `~claims`;
        expires with the scores (`answer_ttl_s`)."""
        return f"{self.namespace}:group:{run_id}:{step}:{group}"

    def preference(self, run_id: str, comparison_id: str) -> str:
        """The Preference given to a comparison; makes redelivery idempotent (kept the comparer's `answer_ttl_s`)."""
        return f"{self.namespace}:preference:{run_id}:{comparison_id}"

    # The kept requests: a run's requests, each kept with its first answer. Their key names are the ones deployed
    # services wrote before the word was "kept" (recorded, preferences, arm-rewarded): renaming them would lose
    # what is stored.
    def kept_rollouts(self, run_id: str) -> str:
        """Stream of a run's kept rollouts, each with its first Score (ScoredRollout), oldest first, for `rubricd
        rescore`: capped at the scorer's `kept_maxlen` entries and expiring `kept_ttl_s` after the run's last
        score."""
        return f"{self.namespace}:recorded:{run_id}"

    def kept_comparisons(self, run_id: str) -> str:
        """Stream of a run's kept comparisons, each with its first Preference (JudgedComparison), oldest first, for
        `rubricd export`: capped at the comparer's `kept_maxlen` entries and expiring `kept_ttl_s` after the
        last."""
        return f"{self.namespace}:preferences:{run_id}"

    def instance_prompts(self, run_id: str) -> str:
        """Hash of the prompt of each instance whose rubric set judged a run's comparisons (field: instance key),
        for the generator records of `rubricd export`; expires with the run's kept comparisons (`kept_ttl_s`)."""
        return f"{self.namespace}:instance-prompts:{run_id}"

    def accuracy(self, run_id: str) -> str:
        """Hash of a run's judge accuracy counts (rubricd_services.state.accuracy.accuracy_increments), added with each committed
        Preference: `v<version>:<count>`, `v<version>:class:<meta-class>:<count>` and `set:<instance>:<version>:
        <count>`; no expiry, like the run's rubric sets."""
        return f"{self.namespace}:accuracy:{run_id}"

    def schedule(self, run_id: str) -> str:
        """Hash of a run's meta-class schedule (alternating rewards): field <step> -> its decision (rubricd_services.state.schedule reads it),
        written once (HSETNX)."""
        return f"{self.namespace}:schedule:{run_id}"

    def class_stats(self, run_id: str, step: int) -> str:
        """Hash of one step's per-meta-class statistics from its committed scores: `count:<class>`, `sum:<class>`."""
        return f"{self.namespace}:class-stats:{run_id}:{step}"

    def rubric_health(self, run_id: str, step: int, instance_key: str | None = None) -> str:
        """Hash of one step's rubric health (rubricd_services.state.health) from its committed scores: `n:<group>:<rubric>` and
        `m:<group>:<rubric>`, the verdicts on a rubric in a sample group and those met; kept the scorer's
        `schedule_stats_ttl_s` after the step's last score."""
        return f"{self.namespace}:rubric-health:{run_id}:{step}:{instance_key or GLOBAL}"

    def rubric_health_steps(self, run_id: str, instance_key: str | None = None) -> str:
        """Sorted set of a run's (and instance's) steps with a rubric health hash, each scored by when its hash
        expires (Redis's clock): the index its readers take instead of scanning the keyspace."""
        return f"{self.namespace}:rubric-health-steps:{run_id}:{instance_key or GLOBAL}"

    def canaries(self, run_id: str) -> str:
        """Hash of a run's judge canaries (rubricd_services.state.canaries reads it): field <step> -> that step's `CanaryStep`,
        written once. Expires the scorer's `kept_ttl_s` after its last write."""
        return f"{self.namespace}:canaries:{run_id}"

    def canary_marks(self, run_id: str) -> str:
        """Hash of where a run's canary steps are: `started:<step>`, set by the commit of the step's first score
        (HSETNX), which alone puts the step on the canary-steps stream; `claimed:<step>` -> the scorer judging it
        (HSETNX). Apart from the canaries, whose readers then read results only. Expires as they do."""
        return f"{self.namespace}:canary-marks:{run_id}"

    def canary_set(self, run_id: str) -> str:
        """A run's own labelled set for its canaries (JSONL, `rubricd judge canaries`), in place of the scorers'
        RUBRICD_CANARY_SET; no expiry."""
        return f"{self.namespace}:canary-set:{run_id}"

    def verdict(self, digest: str) -> str:
        """A judge's verdict, kept for `judge_cache_ttl_s`, by the sha256 of everything that decided it: the judge
        call's messages (instructions, rubrics, rollout), the judge's model and temperature, and the rubric set and
        version (scorer.cache)."""
        return f"{self.namespace}:verdict:{digest}"

    def usage(self, run_id: str) -> str:
        """Hash of what a run's LLM calls used: field `<agent>:<model>:<kind>` -> a count, kinds `calls`,
        `prompt_tokens`, `completion_tokens`, `ms` (the calls' wall time, waits for rate limits and slots included)
        and `cache_hits` (verdicts reused: no call, no tokens); kept as long as the run's rubric sets (no expiry);
        llm.usage."""
        return f"{self.namespace}:usage:{run_id}"

    def arm_pairs(self, run_id: str) -> str:
        """Hash of a run's imported preference pairs (`rubricd arm import`): field <prompt id> -> its ArmPrompt
        (the prompt and its labelled comparisons); no expiry, like the run's rubric sets."""
        return f"{self.namespace}:arm-pairs:{run_id}"

    def arm_index(self, run_id: str) -> str:
        """Hash of a run's imported comparisons: field <comparison id> -> the prompt id it belongs to."""
        return f"{self.namespace}:arm-index:{run_id}"

    def arm_rubrics(self, run_id: str, generator_model: str) -> str:
        """Hash of the rubric sets a frozen generator wrote for a run's preference prompts (`rubricd arm dataset
        --phase judge`): field <prompt id> -> RubricSet; the judge phase's rewards read them. No expiry."""
        return f"{self.namespace}:arm-rubrics:{run_id}:{generator_model}"

    def arm_plan(self, run_id: str) -> str:
        """A run's own Rubric-ARM phase plan (`rubricd arm phases`, JSON rubricd.messages.Plan), in place of the arm
        service's RUBRICD_ARM_* settings; no expiry."""
        return f"{self.namespace}:arm-plan:{run_id}"

    def arm_phases(self, run_id: str) -> str:
        """Hash of a run's Rubric-ARM phase per step: field <step> -> its rubricd.messages.PhaseDecision, written once
        (HSETNX) by the first arm process to reward a rollout of that step."""
        return f"{self.namespace}:arm-phases:{run_id}"

    def arm_reward(self, run_id: str, rollout_id: str) -> str:
        """The ArmReward given to an ArmRollout; makes redelivery idempotent (kept the arm service's
        `answer_ttl_s`)."""
        return f"{self.namespace}:arm-reward:{run_id}:{rollout_id}"

    def kept_arm_rollouts(self, run_id: str) -> str:
        """Stream of a run's kept ArmRollouts, each with its first ArmReward (RewardedArmRollout), oldest first, for
        `rubricd export`: capped at the arm service's `kept_maxlen` entries and expiring `kept_ttl_s` after the
        last."""
        return f"{self.namespace}:arm-rewarded:{run_id}"

    def llm_slots(self, base_url: str) -> str:
        """Sorted set of an LLM endpoint's shared slots (`shared_slots`) held: member a lease id, score its expiry
        (ms, Redis's clock); one per replica, each serves its own slots (llm.slots)."""
        return f"{self.namespace}:llm-slots:{endpoint_id(base_url)}"

    def llm_rate(self, base_url: str) -> str:
        """Hash of an LLM endpoint's rate limits (`rpm`, `tpm`): `requests` and `tokens`, when the next call may
        start by each, and `paused`, no call before (a 429's Retry-After); µs of Redis's clock (llm.limits)."""
        return f"{self.namespace}:llm-rate:{endpoint_id(base_url)}"
