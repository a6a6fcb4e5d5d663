"""The generator's draft without an LLM: its schema, and the checks that keep or drop each rubric."""

import msgspec
import pytest

from rubricd.messages import RubricKind
from rubricd_services.rubrics import validation
from rubricd_services.rubrics.draft import DraftRubric, InvalidDraft, RubricDraft, build, draft_type

from .examples import ANCHORS, CLASSES


def drafted(*rubrics: tuple[str, float, str, str]) -> RubricDraft:
    return RubricDraft(rubrics=[DraftRubric(criterion=c, points=p, meta_class=m, rule=r) for c, p, m, r in rubrics])


def test_the_anchors_come_first_unchanged_and_the_generated_rubrics_are_adaptive_with_their_rule():
    draft = drafted(
        ("The response uses at most 15 words.", 4, "instruction_following", "hard_rule"),
        ("the response names three primes.", 6, "accuracy", "principle"),
    )
    out = build(draft, ANCHORS, CLASSES, 8)
    assert out.rubrics[:2] == ANCHORS and out.dropped == []
    generated = out.rubrics[2:]
    assert [(r.criterion, r.points, r.meta_class, r.rule, r.kind) for r in generated] == [
        ("The response uses at most 15 words.", 4, "instruction_following", "hard_rule", RubricKind.ADAPTIVE),
        ("The response names three primes.", 6, "accuracy", "principle", RubricKind.ADAPTIVE),  # phrase capitalized
    ]


def test_each_rubric_that_breaks_a_rule_is_dropped_with_why_and_the_rest_kept():
    draft = drafted(
        ("The response is short.", 3, "brevity", "principle"),  # undeclared class
        ("The response is polite.", 0, "communication_quality", "principle"),  # zero points
        ("The response is kind.", 11, "communication_quality", "principle"),  # out of bounds
        ("Uses a list.", 3, "instruction_following", "hard_rule"),  # not "The response ..."
        ("The response is in French.", 3, "instruction_following", "rule"),  # unknown rule
        ("The response states the correct final answer!", 3, "accuracy", "principle"),  # repeats an anchor
        ("The response is in English.", 2, "instruction_following", "hard_rule"),  # kept
        ("The response is in  english.", 2, "instruction_following", "hard_rule"),  # repeats the one kept
    )
    out = build(draft, ANCHORS, CLASSES, 8)
    assert [r.criterion for r in out.rubrics[2:]] == ["The response is in English."]
    reasons = "\n".join(out.dropped)
    assert len(out.dropped) == 7
    for why in ("'brevity' is not declared", "points 0", "points 11", "not phrased", "rule 'rule'", "repeats"):
        assert why in reasons


def test_ids_are_unique_beside_the_anchors_and_each_other_and_the_count_is_bounded():
    same_start = [(f"The response correct final answer variant {i}.", 2, "accuracy", "principle") for i in range(3)]
    draft = drafted(("The response correct.", 2, "accuracy", "principle"), *same_start)
    out = build(draft, ANCHORS, CLASSES, 3)
    ids = [r.id for r in out.rubrics]
    assert len(ids) == len(set(ids)) == 5  # 2 anchors + at most 3
    assert "correct" in ids and ids.count("correct") == 1  # the generated "correct" got another id
    assert "over generate_max_rubrics=3" in out.dropped[0]


def test_a_draft_without_a_valid_rubric_is_invalid_naming_why():
    with pytest.raises(InvalidDraft, match="no valid rubric.*'brevity' is not declared"):
        build(drafted(("The response is short.", 3, "brevity", "principle")), ANCHORS, CLASSES, 8)
    with pytest.raises(InvalidDraft, match="no valid rubric"):
        build(RubricDraft(rubrics=[]), ANCHORS, CLASSES, 8)


def test_the_draft_schema_names_the_declared_classes_and_bounds_what_a_model_may_write():
    schema = msgspec.json.schema(draft_type(("accuracy", "style"), 5))
    draft, rubric = schema["$defs"]["RubricDraft"], schema["$defs"]["DraftRubric"]
    assert draft["required"] == ["rubrics"]
    assert (draft["properties"]["rubrics"]["minItems"], draft["properties"]["rubrics"]["maxItems"]) == (1, 5)
    assert rubric["properties"]["meta_class"]["enum"] == ["accuracy", "style"]
    assert rubric["properties"]["rule"]["enum"] == ["hard_rule", "principle"]
    assert rubric["properties"]["criterion"]["maxLength"] == validation.MAX_CRITERION_CHARS
    assert (rubric["properties"]["points"]["minimum"], rubric["properties"]["points"]["maximum"]) == (-10, 10)
    # In the schema only: an answer from an endpoint that does not enforce it still decodes (build checks it).
    answer = b'{"rubrics": [{"criterion": "x", "points": 50, "meta_class": "other", "rule": "r"}]}'
    assert msgspec.json.decode(answer, type=draft_type(("accuracy",), 5)).rubrics[0].points == 50


def test_the_points_bound_is_the_generators_setting():
    schema = msgspec.json.schema(draft_type(("accuracy",), 5, 4.0))["$defs"]["DraftRubric"]
    assert (schema["properties"]["points"]["minimum"], schema["properties"]["points"]["maximum"]) == (-4, 4)
    draft = drafted(
        ("The response is short.", 5, "accuracy", "principle"), ("The response is kind.", -4, "accuracy", "principle")
    )
    out = build(draft, ANCHORS, CLASSES, 8, 4.0)
    assert [r.points for r in out.rubrics[2:]] == [-4] and "points 5 outside [-4, 4]" in out.dropped[0]
