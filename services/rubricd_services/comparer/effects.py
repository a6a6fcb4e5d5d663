"""What the comparer's commit writes besides the answering runtime's (runtime.answering): the run's judge
accuracy and the prompt of the Preference's instance (for `rubricd export`), with the first Preference only.
What is kept: docs/researchers/rubric-arm.md, "Accuracy" and "Training records".
"""

from rubricd.keys import Keys
from rubricd.messages import Comparison, Preference
from rubricd_services.runtime import answering
from rubricd_services.runtime.answering import ScriptValues
from rubricd_services.state.accuracy import accuracy_increments

# `instance` is '' for a rubric set without an instance.
SCRIPT = answering.script(
    keys="accuracy instance_prompts",
    args="instance prompt",
    maps="accuracy",
    with_first="""
  if a_instance ~= '' then
    redis.call('HSETNX', k_instance_prompts, a_instance, a_prompt)
    redis.call('EXPIRE', k_instance_prompts, a_kept_ttl)
  end
  hincrby(k_accuracy, m_accuracy)
""",
)


def values(keys: Keys, comparison: Comparison, preference: Preference) -> ScriptValues:
    """The comparer's own effects of committing `preference`."""
    return ScriptValues(
        keys={
            "accuracy": keys.accuracy(comparison.run_id),
            "instance_prompts": keys.instance_prompts(comparison.run_id),
        },
        args={"instance": preference.instance_key or "", "prompt": comparison.prompt},
        maps={"accuracy": accuracy_increments(preference)},
    )
