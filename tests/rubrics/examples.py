"""The anchors, meta-classes and question the generator's tests share."""

import functools

from rubricd.messages import HEALTHBENCH_AXES
from tests.factories import BRIEF, rollout

CLASSES = HEALTHBENCH_AXES
ANCHORS = BRIEF[:2]  # `correct` and `addresses_grader`, worded briefly
PROMPT = "List three prime numbers in at most 15 words."

# The generator's question answered: a rollout of PROMPT, its response and reference these unless given.
primes = functools.partial(rollout, prompt=PROMPT, response="2, 3 and 5.", reference="2, 3, 5")
