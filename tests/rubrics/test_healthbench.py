"""HealthBench's format in (its lines as per-instance rubric sets, bad lines named) and its scoring rule."""

import json
import re
from pathlib import Path

import pytest

from rubricd.messages import HEALTHBENCH_AXES, Rubric, RubricKind
from rubricd_services.rubrics import healthbench
from rubricd_services.rubrics.seeds import Seeds, SeedSettings
from tests.factories import rollout

SAMPLE = Path(__file__).parents[1] / "fixtures" / "healthbench_sample.jsonl"


def test_the_sample_becomes_one_set_per_prompt_id_with_axes_points_and_tags():
    sets = healthbench.read(SAMPLE.read_bytes(), HEALTHBENCH_AXES)
    assert list(sets) == ["hb-chest-pain-01", "hb-amoxicillin-02", "hb-bp-summary-03", "hb-fever-infant-04"]
    lines = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    for line in lines:
        rubrics = sets[line["prompt_id"]]
        assert [r.criterion for r in rubrics] == [c["criterion"] for c in line["rubrics"]]
        assert [r.points for r in rubrics] == [c["points"] for c in line["rubrics"]]
        assert [f"axis:{r.meta_class}" for r in rubrics] == [
            next(t for t in c["tags"] if t.startswith("axis:")) for c in line["rubrics"]
        ]
        assert [r.tags for r in rubrics] == [
            [t for t in c["tags"] if not t.startswith("axis:")] for c in line["rubrics"]
        ]
        assert [r.id for r in rubrics] == [f"{line['prompt_id']}-{i}" for i in range(len(line["rubrics"]))]
        assert all(r.kind is RubricKind.ANCHOR for r in rubrics)
    chest = sets["hb-chest-pain-01"]
    assert (chest[0].meta_class, chest[0].points, chest[0].tags) == (
        "accuracy",
        10,
        ["level:cluster", "cluster:emergent_emergency_behavior"],
    )
    assert (chest[3].meta_class, chest[3].points) == ("accuracy", -10)
    assert sets["hb-bp-summary-03"][2].tags == ["level:example", "cluster:health_data_no_fabrication"]
    assert healthbench.example_tags(SAMPLE.read_bytes()) == {  # not in the sets: a report reads them from the file
        "hb-chest-pain-01": ["theme:emergency_referrals"],
        "hb-amoxicillin-02": ["theme:context_seeking"],
        "hb-bp-summary-03": ["theme:health_data_tasks"],
        "hb-fever-infant-04": ["theme:emergency_referrals"],
    }
    assert {r.meta_class for rs in sets.values() for r in rs} == set(HEALTHBENCH_AXES)


def test_the_instance_rubrics_setting_reads_healthbench_lines_and_the_object_format(tmp_path):
    assert Seeds.load(SeedSettings(instance_rubrics=SAMPLE)).per_instance == healthbench.read(SAMPLE.read_bytes())
    assert (
        Seeds.load(SeedSettings(instance_rubrics=SAMPLE)).rubrics("hb-fever-infant-04")[0].id == "hb-fever-infant-04-0"
    )
    as_object = tmp_path / "instances.json"
    as_object.write_text(json.dumps({"poem": [{"id": "rhymes", "criterion": "It rhymes.", "points": 2}]}, indent=2))
    assert Seeds.load(SeedSettings(instance_rubrics=as_object)).rubrics("poem") == [
        Rubric(id="rhymes", criterion="It rhymes.", points=2)
    ]


GOOD = json.dumps(
    {
        "prompt_id": "p1",
        "prompt": [{"role": "user", "content": "hi"}],
        "rubrics": [{"criterion": "Greets back.", "points": 2, "tags": ["axis:communication_quality"]}],
    }
)


def _example(**changes: object) -> str:
    example = json.loads(GOOD) | {"prompt_id": "p3"}
    criterion = {"criterion": "Asks how it can help.", "points": 3, "tags": ["axis:completeness", "level:example"]}
    example["rubrics"] = [example["rubrics"][0], criterion]
    for path, value in changes.items():
        if path.startswith("rubric1_"):
            example["rubrics"][1][path.removeprefix("rubric1_")] = value
        else:
            example[path] = value
    return json.dumps(example)


@pytest.mark.parametrize(
    ("third_line", "named"),
    [
        (_example(rubric1_points="many"), "line 3: rubrics[1].points: expected a number, got a string"),
        (_example(rubric1_tags=["level:example"]), "line 3: rubrics[1].tags: expected one axis: tag, found 0"),
        (
            _example(rubric1_tags=["axis:accuracy", "axis:completeness"]),
            "line 3: rubrics[1].tags: expected one axis: tag, found 2",
        ),
        (_example(rubric1_tags=["axis:safety"]), "line 3: rubrics[1].tags: axis 'safety' is not a declared meta-class"),
        (_example(rubric1_points=0), "line 3: rubrics[1].points: 0 is not a nonzero number"),
        (_example(rubric1_criterion=" "), "line 3: rubrics[1].criterion: empty"),
        (json.dumps({"prompt_id": "p3", "prompt": [{"role": "user", "content": "hi"}]}), "line 3: rubrics: missing"),
        (_example(rubrics=[]), "line 3: rubrics: an example needs at least one criterion"),
        (_example(prompt_id="p1"), "line 3: prompt_id: 'p1' was already on line 1"),
        (_example(prompt_id="has space"), "line 3: prompt_id: 'has space' is not an instance key"),
        (_example(prompt="hello"), "line 3: prompt: expected a list, got a string"),
        (_example(prompt=[]), "line 3: prompt: expected a list of length >= 1"),
        (_example(prompt=[{"role": "doctor", "content": "hi"}]), "line 3: prompt[0].role: invalid enum value 'doctor'"),
        ('{"prompt_id": "p3", ', "line 3: not a JSON object"),
    ],
)
def test_a_bad_line_is_refused_with_its_number_and_field(third_line, named):
    second = GOOD.replace('"p1"', '"p2"')
    data = "\n".join([GOOD, second, third_line, GOOD.replace('"p1"', '"p4"')]).encode()
    with pytest.raises(healthbench.Invalid) as refused:
        healthbench.read(data, HEALTHBENCH_AXES)
    assert named in str(refused.value)


def test_a_conversation_is_kept_as_its_turns_and_a_completion_is_the_turn_after_them():
    [fever] = [e for _, e in healthbench.examples(SAMPLE.read_bytes()) if e.prompt_id == "hb-fever-infant-04"]
    assert [t.role for t in fever.prompt] == ["user", "assistant", "user"]  # a multi-turn conversation, not one string
    trajectory = healthbench.answered(fever.prompt, "Take her to be seen today.")
    asked = rollout(run_id="hb", rollout_id="x", trajectory=trajectory, prompt_turns=len(fever.prompt))
    assert asked.policy_turns == [3] and asked.response == "Take her to be seen today."
    assert asked.prompt.startswith("user: My 6 week old feels hot") and "\n\nassistant: " in asked.prompt


def test_an_empty_file_is_refused():
    with pytest.raises(healthbench.Invalid, match="no examples"):
        healthbench.read(b"\n\n")


def test_scores_follow_healthbench():
    rubrics = healthbench.read(SAMPLE.read_bytes())["hb-chest-pain-01"]
    met = {"hb-chest-pain-01-1": True, "hb-chest-pain-01-3": True}  # aspirin mentioned, and told to wait
    assert healthbench.score(rubrics, met) == pytest.approx((5 - 10) / 20)  # below 0: not clipped per example
    assert healthbench.tag_scores(rubrics, met) == {
        "axis:accuracy": -1.0,
        "axis:communication_quality": 0.0,
        "axis:completeness": 1.0,
        "cluster:emergent_emergency_behavior": 0.0,
        "level:cluster": 0.0,
        "level:example": -1.0,
    }
    only_penalty = [Rubric(id="x", criterion="Adds a diagnosis.", points=-6, meta_class="accuracy")]
    assert healthbench.score(only_penalty, {"x": True}) is None  # no positive points: undefined, never 0
    assert healthbench.clipped_mean([0.75, -0.25, None, 0.4]) == (pytest.approx(0.3), 3)
    assert healthbench.clipped_mean([-1.0, 0.0]) == (0.0, 2)
    assert healthbench.clipped_mean([None]) == (None, 0)


@pytest.mark.parametrize(
    ("first_line", "named"),
    [
        (_example(rubric1_points="many").replace('"p3"', '"p0"'), "line 1: rubrics[1].points: expected a number"),
        ('{"prompt_id": "p0", "prompt": [}', "line 1: not a JSON object"),
        (json.dumps({"prompt": [{"role": "user", "content": "hi"}], "rubrics": []}), "line 1: prompt_id: missing"),
    ],
)
def test_a_bad_first_line_is_still_read_as_healthbench_and_named(first_line, named, tmp_path):
    path = tmp_path / "examples.jsonl"
    path.write_text("\n".join([first_line, GOOD]) + "\n")
    assert healthbench.is_healthbench(path.read_bytes())
    with pytest.raises(ValueError, match=re.escape(f"{path}: {named}")) as refused:
        SeedSettings(instance_rubrics=path)
    assert "instance_rubrics" in str(refused.value)  # the setting, named


def test_one_json_object_is_the_instance_format_unless_it_is_one_example():
    assert not healthbench.is_healthbench(json.dumps({"poem": []}, indent=2).encode())
    assert not healthbench.is_healthbench(b'{"poem": [\n')  # a broken object: msgspec names where
    assert healthbench.is_healthbench(GOOD.encode())
