"""The question, answers and generated rubrics Rubric-ARM's reward and service tests share."""

import json

QUESTION = "What is the capital of France?"
SHORT = "Paris."
PADDED = "The capital of France is Paris. " + "Let me say it once more to be sure. " * 8
CONCISE = {"criterion": "The response is concise and brief.", "points": 3, "meta_class": "communication_quality"}
REASONING = {
    "criterion": "The response shows the reasoning or steps that lead to its answer.",
    "points": 2,
    "meta_class": "completeness",
}
POLITE = {"criterion": "The response is polite to the user.", "points": 2, "meta_class": "communication_quality"}


def completion(*rubrics: dict[str, object], rule: str = "principle") -> str:
    """A generator's completion: its rubric set as JSON, as a model writes it (in prose, fenced)."""
    body = json.dumps({"rubrics": [{**r, "rule": rule} for r in rubrics]})
    return f"Here are the rubrics:\n```json\n{body}\n```"
