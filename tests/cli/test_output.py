"""The pure parts of the command line: a rubric diff, the column printing, an unreachable Redis (no server
needed)."""

from rubricd.messages import Action, Rubric, RubricModification, RubricSet, RubricsUpdated
from rubricd_services.cli.__main__ import main
from rubricd_services.cli.context import ago, table
from rubricd_services.cli.rubrics import changes, summary


def test_changes_take_the_latest_rationale_between_the_versions_else_the_rubrics_own():
    a = RubricSet(
        run_id="r",
        version=1,
        rubrics=[Rubric(id="x", criterion="X", points=1), Rubric(id="y", criterion="Y", points=1)],
    )
    b = RubricSet(
        run_id="r",
        version=3,
        rubrics=[
            Rubric(id="x", criterion="X", points=3, meta_class="style"),
            Rubric(id="z", criterion="Z", points=-2, rationale="own reason"),
        ],
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


def test_table_aligns_columns_and_durations_read_short():
    assert table([["a", 10, None], ["bbb", 2, "last"]], ["N", "COUNT", "X"]).splitlines() == [
        "N    COUNT  X",
        "a    10",
        "bbb  2      last",
    ]
    assert [ago(0.25), ago(12.34), ago(245), ago(7620), ago(None)] == ["250ms", "12.3s", "4m05s", "2h07m", "-"]


def test_an_unreachable_redis_is_named_without_its_password(capsys) -> None:
    assert main(["--redis-url", "redis://cli:s3cret-pw@127.0.0.1:1/0", "status"]) == 1
    error = capsys.readouterr().err
    assert "cannot reach Redis at redis://***@127.0.0.1:1/0" in error and "s3cret-pw" not in error
