"""The demo trainer: a simulated training job that scores its rollouts through rubricd.

A demo tool, like the LLM simulator: its "policy" is a mix of canned behaviours
whose shares shift over training, so the rewards show what the rubrics reward.
"""
