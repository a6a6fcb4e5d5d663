"""The judge's calls: one caller for every judging mode, and the usage they add to a run.

`caller` makes a judge call through the LLM client and turns an LLMError (every
attempt failed) into `JudgeFailed`, which each mode turns into its own failed
result (a Score or Preference with status judge_failed, never a guess).
`Tally` counts the calls made for one judged thing (a rollout, a comparison).
"""

import collections
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from rubricd_services.llm import Completion, LLMClient, LLMError, usage


class JudgeFailed(Exception):
    """The judge gave no usable answer (after its own retries)."""


# (messages, the answer's type) -> the completion; raises JudgeFailed
Caller = Callable[[list[dict[str, str]], type[msgspec.Struct]], Awaitable[Completion[msgspec.Struct]]]


@dataclass
class Tally:
    """The judge calls made for one judged thing under `agent`: their completions."""

    agent: str
    completions: list[Completion[Any]] = field(default_factory=list)

    def usage(self, model: str, *, cached: bool = False) -> dict[str, int]:
        """What they add to the run's usage (llm.usage); `cached`: a verdict reused from the judge cache (no
        call)."""
        if cached:
            return usage.increments(self.agent, model, cached=True)
        spent: collections.Counter[str] = collections.Counter()
        for c in self.completions:
            spent.update(
                usage.increments(
                    self.agent,
                    model,
                    prompt_tokens=c.prompt_tokens,
                    completion_tokens=c.completion_tokens,
                    elapsed_s=c.elapsed_s,
                )
            )
        return dict(spent)


def caller(llm: LLMClient, tally: Tally, *, model: str | None = None) -> Caller:
    """Judge calls of `tally`'s agent through `llm` (`model`: another model its endpoint serves), each counted
    in `tally`."""

    async def call(messages: list[dict[str, str]], answer: type[msgspec.Struct]) -> Completion[msgspec.Struct]:
        try:
            done = await llm.structured(tally.agent, messages, answer, model=model)
        except LLMError as e:
            raise JudgeFailed(str(e)) from None
        tally.completions.append(done)
        return done

    return call
