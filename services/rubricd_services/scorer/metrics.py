"""The scorer's own figures, beside FastStream's and the LLM client's: scores, judge latency, rewards, the judge
cache, the active meta-class and the shadow scores (the canaries' are judges.evaluation.canaries')."""

from rubricd.messages import Score
from rubricd_services.runtime.metrics import Metrics
from rubricd_services.state.schedule import Decision

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
        self.shadow_scores = metrics.counter(
            "rubricd_shadow_scores", "scores that also judged a candidate rubric set in shadow (promotion gated)"
        )
        self._active: dict[str, tuple[int, str]] = {}  # run -> (its latest step seen, that step's class)

    def observe(self, score: Score) -> None:
        self.scores.labels(score.status).inc()
        if score.judge_ms is not None:
            self.judge_seconds.observe(score.judge_ms / 1000)
        if score.reward is not None:
            self.reward.observe(score.reward)
        if score.candidate is not None:
            self.shadow_scores.inc()
        if score.instance_key is None:  # per-instance sets would make one series per prompt
            self.scored_rubric_version.labels(score.run_id).set(score.rubric_version)

    def active(self, run_id: str, decision: Decision) -> None:
        latest = self._active.get(run_id)
        if latest is not None and latest[0] >= decision.step:
            return
        name = decision.meta_class or "weighted_total"
        if latest is not None:
            self.active_meta_class.labels(run_id, latest[1]).set(0)
        self.active_meta_class.labels(run_id, name).set(1)
        self._active[run_id] = (decision.step, name)
