"""The scorer service: judges each rollout against the rubric set in force for its run and replies with its Score."""
