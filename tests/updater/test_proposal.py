"""The updater's proposal without an LLM: its schema, and validation applying or dropping each modification."""

import json

import msgspec
import pytest

from rubricd.messages import HEALTHBENCH_AXES, Action, Rubric, RubricKind, RubricModification
from rubricd_services.updater.proposal import Limits, UpdateProposal, proposal_type, validate
from tests.factories import PADDING

from .examples import ANCHOR, CURRENT, GRADER, LIMITS, STEPS


def mod(action: str, **fields: object) -> RubricModification:
    return RubricModification(action=Action(action), rationale=f"because {action}", **fields)  # type: ignore[arg-type]


def test_valid_modifications_are_applied_in_order():
    checked = validate(
        CURRENT,
        [
            mod("add", rubric=PADDING),
            mod("reweight", rubric_id="shows_reasoning", points=3),
            mod("modify", rubric_id="no_padding", rubric=msgspec.structs.replace(PADDING, points=-6)),
        ],
        LIMITS,
    )
    assert checked.rejected == []
    by_id = {r.id: r for r in checked.rubrics}
    assert [r.id for r in checked.rubrics] == ["correct", "addresses_grader", "shows_reasoning", "no_padding"]
    assert by_id["shows_reasoning"].points == 3 and by_id["no_padding"].points == -6
    assert by_id["no_padding"].kind is RubricKind.ADAPTIVE and by_id["no_padding"].rationale
    assert [m.rubric_id for m in checked.accepted] == ["no_padding", "shows_reasoning", "no_padding"]
    removed = validate(checked.rubrics, [mod("remove", rubric_id="no_padding")], LIMITS).rubrics
    assert [r.id for r in removed] == ["correct", "addresses_grader", "shows_reasoning"]


def test_a_rubric_of_an_undeclared_meta_class_is_dropped_with_the_reason():
    safety = msgspec.structs.replace(PADDING, meta_class="safety")
    checked = validate(
        CURRENT,
        [
            mod("add", rubric=safety),
            mod("modify", rubric_id="shows_reasoning", rubric=msgspec.structs.replace(STEPS, meta_class="style")),
        ],
        LIMITS,
    )
    assert checked.accepted == [] and checked.rubrics == CURRENT
    assert [(r.action, r.rubric_id) for r in checked.rejected] == [("add", "no_padding"), ("modify", "shows_reasoning")]
    assert "meta_class 'safety' is not declared" in checked.rejected[0].reason
    assert "'communication_quality'" in checked.rejected[0].reason  # the declared list is named
    own = Limits(min_points=-10, max_points=10, max_adaptive=3, meta_classes=("safety", "completeness"))
    assert [r.id for r in validate(CURRENT, [mod("add", rubric=safety)], own).rubrics][-1] == "no_padding"


def test_the_proposal_schema_restricts_meta_classes_to_the_declared_ones():
    answer_type = proposal_type((), (), ("accuracy", "safety"))
    schema = msgspec.json.schema(answer_type)
    [rubric] = [d for name, d in schema["$defs"].items() if name == "Rubric"]
    assert rubric["properties"]["meta_class"]["enum"] == ["accuracy", "safety"]

    def added(meta_class: str) -> dict[str, object]:
        rubric = {"id": "x", "criterion": "c", "points": -2, "meta_class": meta_class}
        return {
            "strategy": "corrective",
            "rationale": "r",
            "modifications": [{"action": "add", "rationale": "r", "rubric": rubric}],
        }

    assert msgspec.convert(added("safety"), answer_type).modifications[0].rubric.meta_class == "safety"
    # In the schema only: another class still decodes, and `validate` drops that modification with a reason.
    assert msgspec.convert(added("communication"), answer_type).modifications[0].rubric.meta_class == "communication"
    default = msgspec.json.schema(proposal_type((), ()))["$defs"]["Rubric"]["properties"]["meta_class"]
    assert default["enum"] == sorted(HEALTHBENCH_AXES)


@pytest.mark.parametrize(
    ("proposed", "reason"),
    [
        (
            mod(
                "modify",
                rubric_id="correct",
                rubric=msgspec.structs.replace(ANCHOR, points=1, kind=RubricKind.ADAPTIVE),
            ),
            "anchors never change",
        ),
        (mod("remove", rubric_id="addresses_grader"), "anchors never change"),
        (mod("reweight", rubric_id="correct", points=9), "anchors never change"),
        (mod("add", rubric=msgspec.structs.replace(PADDING, kind=RubricKind.ANCHOR)), "an anchor"),
        (mod("add", rubric=msgspec.structs.replace(PADDING, points=-40)), "outside [-10, 10]"),
        (mod("reweight", rubric_id="shows_reasoning", points=11), "outside [-10, 10]"),
        (mod("reweight", rubric_id="shows_reasoning"), "no points"),
        (mod("remove", rubric_id="nope"), "no such rubric"),
        (mod("modify", rubric_id="nope", rubric=PADDING), "no such rubric"),
        (mod("add", rubric=msgspec.structs.replace(PADDING, id="shows_reasoning")), "exists"),
        (mod("add"), "no rubric given"),
    ],
)
def test_an_invalid_modification_is_dropped_with_its_reason_and_the_rest_applies(proposed, reason):
    checked = validate(CURRENT, [proposed, mod("add", rubric=PADDING)], LIMITS)
    assert len(checked.rejected) == 1 and reason in checked.rejected[0].reason, checked.rejected
    assert [m.rubric_id for m in checked.accepted] == ["no_padding"]
    assert checked.rubrics[:2] == [ANCHOR, GRADER]  # anchors identical


def test_the_adaptive_set_stays_within_its_size_limit_and_missing_ids_are_generated():
    adds = [
        mod("add", rubric=Rubric(id="", criterion=f"The response cites source number {i}.", points=1)) for i in range(4)
    ]
    checked = validate(CURRENT, adds, LIMITS)  # one adaptive already: room for two
    assert len(checked.accepted) == 2 and len(checked.rejected) == 2
    assert "max_adaptive=3" in checked.rejected[0].reason
    new_ids = [r.id for r in checked.rubrics[3:]]
    assert new_ids == ["cites_source_number_0", "cites_source_number_1"]


def test_the_proposal_schema_names_only_adaptive_rubrics_and_the_memories_shown():
    answer_type = proposal_type(("shows_reasoning",), ("id-1",))
    assert issubclass(answer_type, UpdateProposal) and answer_type.__name__ == "UpdateProposal"

    def answer(rubric_id: str | None, consulted: list[str]) -> dict[str, object]:
        change = {"action": "reweight", "rationale": "r", "rubric_id": rubric_id, "points": 3}
        return {"strategy": "corrective", "rationale": "r", "modifications": [change], "consulted": consulted}

    schema = json.dumps(msgspec.json.schema(answer_type))
    assert '"enum": ["shows_reasoning"]' in schema and '"enum": ["id-1"]' in schema  # what a grammar allows
    assert msgspec.convert(answer("shows_reasoning", ["id-1"]), answer_type).consulted == ["id-1"]
    # An endpoint that does not enforce the schema may answer otherwise: the answer still decodes, and only the
    # modification naming an anchor or an unknown rubric is dropped, with a reason (and unshown memories ignored).
    proposal = msgspec.convert(
        {
            **answer("correct", ["id-2"]),
            "modifications": [
                {"action": "reweight", "rationale": "r", "rubric_id": rubric_id, "points": 3}
                for rubric_id in ("correct", "invented", "shows_reasoning")
            ],
        },
        answer_type,
    )
    checked = validate(CURRENT, proposal.modifications, LIMITS)
    assert [m.rubric_id for m in checked.accepted] == ["shows_reasoning"]
    assert [(r.rubric_id, r.reason.split(":")[1].strip()) for r in checked.rejected] == [
        ("correct", "anchors never change"),
        ("invented", "no such rubric"),
    ]
    nothing = msgspec.json.schema(proposal_type((), ()))["$defs"]  # no adaptive rubric, no memory
    assert nothing["UpdateProposal"]["properties"]["consulted"]["maxItems"] == 0  # it can cite nothing
    assert nothing["RubricModification"]["properties"]["rubric_id"]["anyOf"] == [{"type": "string"}, {"type": "null"}]


def test_a_turn_rubric_is_added_and_keeps_its_scope_when_modified_or_reweighted():
    per_turn = Rubric(
        id="uses_result", criterion="Each final answer uses the latest tool result.", points=3, scope="turn"
    )
    assert '"scope"' in json.dumps(msgspec.json.schema(proposal_type(("shows_reasoning",), ())))  # may be proposed
    added = validate(CURRENT, [mod("add", rubric=per_turn)], LIMITS)
    assert added.rejected == [] and added.rubrics[-1].scope == "turn" and added.accepted[0].rubric.scope == "turn"
    # A modification that leaves the scope out (its default, "trajectory") does not turn it into another rubric.
    reworded = Rubric(id="uses_result", criterion="Each answer uses the latest tool result.", points=4)
    changed = validate(added.rubrics, [mod("modify", rubric_id="uses_result", rubric=reworded)], LIMITS)
    assert changed.rubrics[-1].scope == "turn" and changed.rubrics[-1].criterion.startswith("Each answer")
    assert changed.accepted[0].rubric.scope == "turn"  # what is announced is what was stored
    reweighted = validate(changed.rubrics, [mod("reweight", rubric_id="uses_result", points=5)], LIMITS)
    assert reweighted.rubrics[-1].scope == "turn" and reweighted.rubrics[-1].points == 5
    turn_anchor = msgspec.structs.replace(ANCHOR, scope="turn")
    kept = validate([turn_anchor], [mod("reweight", rubric_id="correct", points=1)], LIMITS)
    assert kept.rubrics == [turn_anchor] and "anchors never change" in kept.rejected[0].reason
