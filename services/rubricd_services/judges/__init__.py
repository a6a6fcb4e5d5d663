"""Judging, for every service and command that judges: a rollout against a rubric set, or two responses pairwise.

One module per kind of judged thing (`rollouts`: a text rollout as the judge sees it) and per judging mode
(`scoring`: a rollout alone into a Score; `pairwise`: a comparison into a Preference); `verdicts` the judge's
answer and style, `caller` the one caller (an LLM failure becomes `JudgeFailed`) and the usage tally, `settings`
the mixins of the settings that judge, `prompts/` the judges' instructions, `evaluation` how well a judge agrees
with labels (`rubricd judge eval`).
"""
