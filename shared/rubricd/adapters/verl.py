"""verl's custom reward function (`compute_score`), in its three call forms, and the scoring of an agent loop's
rollout with its per-turn rewards (`score_agent_loop`). Details: docs/integrators/verl.md."""

from collections.abc import Mapping, Sequence
from typing import Any

from ..chat import text
from ..client import SyncRubricdClient
from ..messages import JudgeStatus, Score
from .reward import RewardOptions, Sample, SyncReward, group_id, optional_str


class VerlReward:
    """verl's custom reward function, in its three call forms.

    - `compute_score(data_source, solution_str, ground_truth, extra_info)`: one sample
      (thread-safe: many threads may wait at once);
    - `compute_score_async(...)`: the same, awaitable (verl's reward loop awaits coroutine functions);
    - `compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos)`: verl's
      batch reward manager; the whole batch in one round trip.

    Each returns {"score": reward, "judge_ok": 1.0 or 0.0, "masked": 1.0 or 0.0, "rubric_version": v,
    "weighted_total": w}, and one key per rubric id in `rubrics` ("rubric/<id>": 1.0 met, 0.0 not met, not
    judged or failed) and per meta-class in `meta_classes` ("meta/<class>": its score, `failed_score` where it
    is undefined or failed): the same keys for every sample of the run (see `result`), which verl's validation
    logs per data source (`val-aux/<source>/rubric/<id>/mean@N`) and its rollout dumps keep per sample.
    A failed judge scores `failed_score` with judge_ok 0.0 (verl needs a number); so does a sample the
    `alternating` policy masks (its step's meta-class is undefined for it), with masked 1.0: drop it.
    The prompt comes from extra_info[prompt_field]; the step from extra_info[step_field],
    else from `self.step`, which a trainer callback may set.
    The rollout's instance key comes from extra_info[instance_key_field]. (The old
    keyword names prompt_key, step_key and instance_key are still accepted.)
    An agent loop's conversation, where it puts it in its extra fields (verl hands them to the reward function in
    extra_info): extra_info[messages_field], the whole conversation (its first len(extra_info["raw_prompt"]) the
    prompt), and extra_info[tools_field], the tools offered (OpenAI function specs), make the rollout's trajectory.
    The rollout's sample group is extra_info[group_field] (verl's `uid`, one per prompt, shared by its
    rollout.n responses; an agent loop puts it there, and `score_agent_loop` reads it from the dataset
    fields), of `group_size` (rollout.n; None: unknown, a group is then judged at its deadline).
    The other keywords are the run's options (RewardOptions).

        reward = VerlReward(SyncRubricdClient(url), run_id="ppo-1")
        compute_score = reward.compute_score   # custom_reward_function.name=compute_score
    """

    def __init__(
        self,
        client: SyncRubricdClient,
        run_id: str,
        *,
        prompt_field: str = "question",
        step_field: str = "global_step",
        instance_key_field: str = "instance_key",
        messages_field: str = "messages",
        tools_field: str = "tools",
        group_field: str = "uid",
        group_size: int | None = None,
        failed_score: float = 0.0,
        rubrics: Sequence[str] = (),
        meta_classes: Sequence[str] = (),
        **options: Any,
    ) -> None:
        # The names these fields had before (`instance_key` named a field, not a key).
        prompt_field = options.pop("prompt_key", prompt_field)
        step_field = options.pop("step_key", step_field)
        instance_key_field = options.pop("instance_key", instance_key_field)
        self.reward = SyncReward(client, run_id, RewardOptions(**options))
        self.prompt_field, self.step_field, self.instance_key_field = prompt_field, step_field, instance_key_field
        self.messages_field, self.tools_field = messages_field, tools_field
        self.group_field, self.group_size = group_field, group_size
        self.failed_score = failed_score
        self.rubrics, self.meta_classes = tuple(rubrics), tuple(meta_classes)
        self.step = 0

    def compute_score(
        self, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None, **_: Any
    ) -> dict[str, float]:
        [score] = self.reward.score(*self._one(data_source, solution_str, ground_truth, extra_info))
        return self.result(score)

    async def compute_score_async(
        self, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None, **_: Any
    ) -> dict[str, float]:
        [score] = await self.reward.score_async(*self._one(data_source, solution_str, ground_truth, extra_info))
        return self.result(score)

    def compute_score_batch(
        self,
        data_sources: Sequence[str],
        solution_strs: Sequence[str],
        ground_truths: Sequence[Any],
        extra_infos: Sequence[dict[str, Any] | None],
        **_: Any,
    ) -> list[dict[str, float]]:
        infos = [info or {} for info in extra_infos]
        by_step: dict[int, list[int]] = {}
        for i, info in enumerate(infos):
            by_step.setdefault(self._step(info), []).append(i)
        results: list[dict[str, float]] = [{} for _ in infos]
        for step, indices in sorted(by_step.items()):
            samples = [self._sample(data_sources[i], solution_strs[i], ground_truths[i], infos[i]) for i in indices]
            for i, score in zip(indices, self.reward.score(step, samples)):
                results[i] = self.result(score)
        return results

    async def score_agent_loop(self, output: Any, sample: Mapping[str, Any]) -> Score:
        """Score an agent loop's rollout in the loop itself, where verl takes a reward and per-turn rewards: sets
        `output.reward_score` (verl then calls no reward function for it), `output.extra_fields["turn_scores"]`
        (see `turn_scores`) and `["reward_extra_info"]` (`result`'s keys); returns the Score.

        `output`: the AgentLoopOutput `run` returns, its extra fields holding the conversation (messages_field,
        tools_field); `sample`: the dataset fields `run` was called with (data_source, reward_model, extra_info,
        raw_prompt, and uid: the rollout's group)."""
        info = {
            **(sample.get("extra_info") or {}),
            "uid": sample.get("uid"),  # verl's group of the prompt's rollout.n responses
            **output.extra_fields,
            "raw_prompt": sample["raw_prompt"],
        }
        if info.get(self.messages_field) is None:
            raise ValueError(
                f"the agent loop's output has no {self.messages_field!r} extra field: put its conversation there "
                "(docs/integrators/verl.md)"
            )
        messages, truth = _listed(info[self.messages_field]), (sample.get("reward_model") or {}).get("ground_truth")
        response = text(messages[len(info["raw_prompt"]) :], roles=False)  # the text, should the turns be refused
        [score] = await self.reward.score_async(
            self._step(info), [self._sample(str(sample.get("data_source", "")), response, truth, info)]
        )
        output.reward_score = self.result(score)["score"]
        output.extra_fields.update(turn_scores=self.turn_scores(score), reward_extra_info=self.result(score))
        return score

    def finish(self) -> None:
        self.reward.finish()

    def result(self, score: Score) -> dict[str, float]:
        """The same keys for every sample of a run, whatever its status or rubric set: verl's reward loop takes a
        batch's keys from its first sample (a later sample without one fails the step), and its validation wants
        every key of every batch for every sample (a number: it takes their mean). So the rubrics and meta-classes
        followed are named up front; every rubric and meta-class of every step: `rubricd serve dashboard`."""
        met = {r.rubric_id for r in score.results if r.met}
        return {
            "score": self.failed_score if score.reward is None else score.reward,
            "judge_ok": float(score.status is JudgeStatus.OK),
            "masked": float(score.masked),
            "rubric_version": float(score.rubric_version),
            "weighted_total": self.failed_score if score.weighted_total is None else score.weighted_total,
            **{f"rubric/{r}": float(r in met) for r in self.rubrics},
            **{f"meta/{c}": score.meta_class_scores.get(c, self.failed_score) for c in self.meta_classes},
        }

    @staticmethod
    def turn_scores(score: Score) -> list[float]:
        """verl's `turn_scores`: the points of each policy turn, in order (Score.turns); none where the run's rubrics
        have no turn rubric or the judge failed."""
        return [t.points for t in score.turns]

    def _one(
        self, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None
    ) -> tuple[int, list[Sample]]:
        info = extra_info or {}
        return self._step(info), [self._sample(data_source, solution_str, ground_truth, info)]

    def _step(self, info: dict[str, Any]) -> int:
        step = info.get(self.step_field)
        return self.step if step is None else int(step)

    def _sample(self, data_source: str, solution_str: str, ground_truth: Any, info: Mapping[str, Any]) -> Sample:
        sample = Sample(
            str(info.get(self.prompt_field, "")),
            solution_str,
            optional_str(ground_truth),
            optional_str(info.get(self.instance_key_field)),
            {"data_source": str(data_source)},
        )
        group = group_id(info.get(self.group_field))
        if group is not None:
            sample = sample._replace(group=group, group_size=self.group_size)
        messages = _listed(info.get(self.messages_field))
        if not messages:
            return sample
        prompt = info.get("raw_prompt")
        prompt_turns = len(prompt) if prompt is not None else _leading_input(messages)
        return sample._replace(messages=messages, prompt_turns=prompt_turns, tools=_listed(info.get(self.tools_field)))


def _listed(value: Any) -> list[Any]:
    """A list of what verl holds as a list, a tuple or a numpy array (never tested for truth: an array has none)."""
    return [] if value is None else list(value)


def _leading_input(messages: list[Any]) -> int:
    """How many messages come before the first assistant message (the prompt, where verl does not say)."""
    return next(
        (i for i, m in enumerate(messages) if isinstance(m, Mapping) and m.get("role") == "assistant"), len(messages)
    )
