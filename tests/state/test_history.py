"""The rubric diff: one comparison, explained for readers (`changes`) and as the updater's modifications."""

import msgspec

from rubricd.messages import Action, Rubric, RubricModification, RubricsUpdated
from rubricd_services.state.history import changes, modifications, render_change, summary
from tests.factories import BRIEF, PADDING, rubric_set

ANCHOR, GRADER, STEPS = CURRENT = BRIEF


def test_changes_take_the_latest_rationale_between_the_versions_else_the_rubrics_own():
    a = rubric_set(Rubric(id="x", criterion="X", points=1), Rubric(id="y", criterion="Y", points=1), run_id="r")
    b = rubric_set(
        Rubric(id="x", criterion="X", points=3, meta_class="style"),
        Rubric(id="z", criterion="Z", points=-2, rationale="own reason"),
        run_id="r",
        version=3,
    )
    updates = [
        RubricsUpdated(
            run_id="r",
            version=3,
            previous_version=2,
            modifications=[RubricModification(action=Action.REWEIGHT, rubric_id="x", points=3, rationale="later")],
        ),
        RubricsUpdated(
            run_id="r",
            version=2,
            previous_version=1,
            modifications=[
                RubricModification(action=Action.REWEIGHT, rubric_id="x", points=2, rationale="earlier"),
                RubricModification(action=Action.REMOVE, rubric_id="y", rationale="unused"),
            ],
        ),
    ]
    found = {c.rubric_id: c for c in changes(a, b, updates)}
    assert found["x"].change == "modified" and found["x"].rationale == "later"
    assert found["x"].fields == [("points", 1, 3), ("meta_class", "accuracy", "style")]
    assert (found["y"].change, found["y"].rationale) == ("removed", "unused")
    assert (found["z"].change, found["z"].rationale) == ("added", "own reason")
    assert summary(changes(a, b, updates)) == "-y ~x(points,meta_class) +z"
    assert changes(a, a, []) == [] and summary([]) == "no change"


def test_modifications_name_what_changed_between_versions():
    after = [ANCHOR, GRADER, msgspec.structs.replace(STEPS, points=4), PADDING]
    found = {(m.action, m.rubric_id) for m in modifications(CURRENT, after)}
    assert found == {(Action.REWEIGHT, "shows_reasoning"), (Action.ADD, "no_padding")}


def test_modifications_remove_add_reweight_and_modify_in_order():
    reweighted = msgspec.structs.replace(STEPS, points=4, rationale="worth more")
    reworded = msgspec.structs.replace(GRADER, criterion="The response flatters the grader.", rationale="sharper")
    found = modifications(CURRENT, [reworded, reweighted, PADDING])
    assert found == [
        RubricModification(action=Action.REMOVE, rubric_id="correct", rationale=""),
        RubricModification(action=Action.MODIFY, rubric_id="addresses_grader", rubric=reworded, rationale="sharper"),
        RubricModification(action=Action.REWEIGHT, rubric_id="shows_reasoning", points=4, rationale="worth more"),
        RubricModification(action=Action.ADD, rubric_id="no_padding", rubric=PADDING, rationale=""),
    ]
    assert modifications(CURRENT, CURRENT) == []


def test_a_change_outside_the_compared_fields_is_a_modification_but_no_readers_change():
    tagged = msgspec.structs.replace(STEPS, tags=["level:example"])
    assert modifications([STEPS], [tagged]) == [
        RubricModification(action=Action.MODIFY, rubric_id="shows_reasoning", rubric=tagged, rationale="")
    ]
    a, b = (rubric_set(r, run_id="r", version=v) for v, r in ((1, STEPS), (2, tagged)))
    assert changes(a, b, []) == []


def test_a_turn_rubric_reads_as_one_and_a_change_of_scope_alone_is_a_change():
    per_turn = Rubric(
        id="uses_result", criterion="Each final answer uses the latest tool result.", points=3, scope="turn"
    )
    a = rubric_set(STEPS, run_id="r")
    b = rubric_set(msgspec.structs.replace(STEPS, scope="turn"), per_turn, run_id="r", version=2)
    found = changes(a, b, [])
    assert summary(found) == "~shows_reasoning(scope) +uses_result"
    assert render_change(found[0]).startswith("~ shows_reasoning: scope 'trajectory' -> 'turn'")
    assert render_change(found[1]).startswith(
        "+ uses_result (adaptive, accuracy, +3, turn): Each final answer uses the latest tool result."
    )
    assert render_change(changes(b, a, [])[0]).startswith("- uses_result (adaptive, accuracy, +3, turn)")
    assert "turn" not in render_change(changes(a, rubric_set(STEPS, PADDING, run_id="r", version=2), [])[0])
