"""The verdict schema: one verdict per rubric id, and no other."""

import json

import msgspec
import pytest

from rubricd_services.judges import verdicts


def test_the_verdict_schema_requires_one_verdict_per_rubric_id_and_no_other():
    ids = ("correct", "addresses-grader", "shows reasoning")  # ids need not be Python names
    verdict = verdicts.verdict_type(ids)
    assert verdicts.verdict_type(ids) is verdict  # one type per rubric list: the LLM client caches its schema
    schema = msgspec.json.schema(verdict)
    root = schema["$defs"]["JudgeVerdict"]
    assert list(root["properties"]) == list(ids) and root["required"] == list(ids)
    assert root["additionalProperties"] is False
    complete = {i: {"explanation": "why", "met": n % 2 == 0} for n, i in enumerate(ids)}
    decided = verdicts.read(msgspec.json.decode(json.dumps(complete), type=verdict), ids)
    assert {i: v.met for i, v in decided.items()} == {
        "correct": True,
        "addresses-grader": False,
        "shows reasoning": True,
    }
    skipped = {k: v for k, v in complete.items() if k != "shows reasoning"}
    invented = {**complete, "invented": {"explanation": "", "met": True}}
    for answer in (skipped, invented):
        with pytest.raises(msgspec.ValidationError):
            msgspec.json.decode(json.dumps(answer), type=verdict)
