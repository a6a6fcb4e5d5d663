"""The scorer's own figures, beside FastStream's and the LLM client's: scores, judge latency, rewards, the judge
cache, the active meta-class and the canaries."""

from rubricd.canaries import CanaryStep
from rubricd.messages import Score
from rubricd_services.common.metrics import Metrics

from .schedule import Decision

JUDGE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64)
REWARD_BUCKETS = tuple(i / 10 for i in range(11))


class ScorerMetrics:
    """The scorer's own figures, beside FastStream's and the LLM client's."""

    def __init__(self, metrics: Metrics) -> None:
        self.scores = metrics.counter(
            "rubricd_scores", "rollouts scored, by status (ok, judge_failed, rejected)", ["status"]
        )
        self.judge_seconds = metrics.histogram(
            "rubricd_judge_seconds", "judge latency, retries included", JUDGE_BUCKETS
        )
        self.reward = metrics.histogram("rubricd_reward", "rewards given (status ok)", REWARD_BUCKETS)
        self.scored_rubric_version = metrics.gauge(
            "rubricd_scored_rubric_version",
            "the rubric version the run's latest score (this scorer's) was judged under (global sets)",
            ["run_id"],
        )
        self.judge_cache = metrics.counter(
            "rubricd_judge_cache", "verdicts given, by result: hit (reused), miss (the judge was asked)", ["result"]
        )
        self.active_meta_class = metrics.gauge(
            "rubricd_active_meta_class",
            "alternating rewards: 1 for the active meta-class of the run's latest step this scorer scored "
            "(weighted_total: none, the weighted total is the reward), 0 for the classes active before it",
            ["run_id", "meta_class"],
        )
        self._active: dict[str, tuple[int, str]] = {}  # run -> (its latest step seen, that step's class)
        self.canary_agreement = metrics.gauge(
            "rubricd_canary_agreement",
            "the judge's agreement with the labels on the canary items of the run's latest canary step, as this "
            "scorer last saw it (when it recorded one)",
            ["run_id"],
        )
        self.canary_step = metrics.gauge("rubricd_canary_step", "that canary step", ["run_id"])
        self._canary_steps: dict[str, int] = {}  # run -> its latest canary step seen
        self.judge_drift = metrics.gauge(
            "rubricd_judge_drift", "1 while that step's canary agreement is drift (judge_drift), else 0", ["run_id"]
        )

    def observe(self, score: Score) -> None:
        self.scores.labels(score.status).inc()
        if score.judge_ms is not None:
            self.judge_seconds.observe(score.judge_ms / 1000)
        if score.reward is not None:
            self.reward.observe(score.reward)
        if score.instance_key is None:  # per-instance sets would make one series per prompt
            self.scored_rubric_version.labels(score.run_id).set(score.rubric_version)

    def canaries(self, run_id: str, canary: CanaryStep) -> None:
        if canary.step < self._canary_steps.get(run_id, -1):
            return
        self._canary_steps[run_id] = canary.step
        self.canary_step.labels(run_id).set(canary.step)
        self.judge_drift.labels(run_id).set(int(canary.drift))
        if canary.agreement is not None:
            self.canary_agreement.labels(run_id).set(canary.agreement)

    def active(self, run_id: str, decision: Decision) -> None:
        latest = self._active.get(run_id)
        if latest is not None and latest[0] >= decision.step:
            return
        name = decision.meta_class or "weighted_total"
        if latest is not None:
            self.active_meta_class.labels(run_id, latest[1]).set(0)
        self.active_meta_class.labels(run_id, name).set(1)
        self._active[run_id] = (decision.step, name)
