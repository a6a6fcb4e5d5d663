"""The comparer service: judges each comparison (two responses to one prompt) pairwise against the prompt's rubric set into a Preference (Rubric-ARM)."""
