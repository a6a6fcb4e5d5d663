"""`rubricd judge eval` end to end: the labelled sample judged by the simulator through the LLM client.

The simulator's heuristics are known, so its verdicts are: it takes `17 + 25 = 41.` (an `=`) for reasoning, and
`It is not 42; the answer is 41.` (the reference appears) for a correct answer; every other verdict agrees.
"""

import json
from pathlib import Path

import pytest

from rubricd_services.rubrics.policies import policy
from tests.factories import rubric

SAMPLE = Path(__file__).parents[1] / "fixtures/labelled_sample.jsonl"
SET = str(Path(__file__).parents[2] / "services/rubricd_services/judges/evaluation/data/judge-set.jsonl")
RUBRICS = [rubric(), rubric("shows_reasoning", id="steps")]  # 5 and 2 points


def weighted(met: dict[str, bool]) -> float:
    total = policy("weighted_sum")(RUBRICS, met).total
    assert total is not None
    return total


def test_the_sample_judged_by_the_simulator_gives_the_figures_its_heuristics_imply(cli, tmp_path):
    done = cli("judge", "eval", str(SAMPLE), "--judge", "name=sim", "--judge", "name=warm,temperature=0.7", "--json")
    sim, warm = json.loads(done.stdout)
    assert (sim["name"], warm["name"], warm["temperature"]) == ("sim", "warm", 0.7)
    assert sim["items"] == 6 and sim["format_failures"] == 0
    overall = sim["overall"]
    # 12 verdicts: 6 met and 6 unmet labelled; the simulator says met for 2 unmet ones
    assert (overall["true_met"], overall["false_met"], overall["true_unmet"], overall["false_unmet"]) == (6, 2, 4, 0)
    assert overall["accuracy"] == pytest.approx(10 / 12)
    assert overall["kappa"] == pytest.approx((10 / 12 - 0.5) / 0.5)
    assert sim["by_meta_class"]["accuracy"]["accuracy"] == pytest.approx(5 / 6)
    assert sim["by_meta_class"]["reasoning"]["accuracy"] == pytest.approx(5 / 6)
    wrong = weighted({"correct": False, "steps": True}) + weighted({"correct": True, "steps": False})
    assert sim["reward_error"] == pytest.approx(wrong / 6)
    assert sim["output_mode"] == "json_schema" and sim["prompt_tokens_per_call"] > 0
    assert sim["latency_p50_s"] > 0 and sim["latency_p95_s"] >= sim["latency_p50_s"]
    assert {j["item_id"]: j["verdicts"] for j in sim["judged"]}["sum-rejects-reference"] == {
        "correct": True,
        "steps": False,
    }
    assert warm["overall"] == overall  # the simulator's heuristics ignore the temperature

    table = cli(
        "judge", "eval", str(SAMPLE), "--judge", "name=sim", "--probes", "--png", str(tmp_path / "e.png")
    ).stdout
    assert table.splitlines()[0].split()[:5] == ["judge", "model", "mode", "items", "failed"]
    assert "0.833" in table and "reasoning" in table
    probes = {line.split()[1]: line.split()[-1] for line in table.split("probes\n")[1].splitlines()[1:]}
    assert probes == {"grader_note": "FAILED", "padding": "FAILED", "reorder": "ok", "repeat": "ok"}
    assert (tmp_path / "e.png").read_bytes().startswith(b"\x89PNG")


def test_a_bad_labelled_line_or_judge_setting_is_refused_naming_it(cli, tmp_path):
    bad = tmp_path / "bad.jsonl"
    lines = SAMPLE.read_text().splitlines()
    bad.write_text("\n".join([lines[0], lines[1].replace('"steps": false', '"steps": "no"')]) + "\n")
    done = cli("judge", "eval", str(bad), check=False)
    assert done.returncode == 1 and f"{bad}:2: Expected `bool`, got `str`" in done.stderr
    done = cli("judge", "eval", str(SAMPLE), "--judge", "name=hot,temperature=9", check=False)
    assert done.returncode == 1 and "temperature" in done.stderr and "hot" in done.stderr
    done = cli("judge", "eval", str(SAMPLE), "--judge", "name=each,calls=every", check=False)
    assert done.returncode == 1 and "calls" in done.stderr and "'one' or 'per_rubric'" in done.stderr, done.stderr


def test_labelled_comparisons_go_to_the_pairwise_judge(cli):
    pairs = Path(__file__).parents[1] / "fixtures/labelled_pairs_sample.jsonl"
    [report] = json.loads(cli("judge", "eval", str(pairs), "--json").stdout)
    assert report["name"] == "pairwise" and report["items"] == 6
    assert report["overall"]["accuracy"] == pytest.approx(4 / 6)
    assert report["position_consistency"] == pytest.approx(5 / 6)
    table = cli("judge", "eval", str(pairs)).stdout
    assert "consistency" in table.splitlines()[0] and "0.833" in table
    refused = cli("judge", "eval", str(pairs), "--probes", check=False)
    assert refused.returncode == 1 and "--probes applies to labelled rollouts" in refused.stderr


def test_the_projects_trajectories_alone_with_the_trajectory_probe(cli):
    """--only trajectories judges the labelled set's agent items through the trajectory prompt: the turn verdicts
    get their table, and a tool result contradicted under a final answer lowers the simulator's reward."""
    done = cli("judge", "eval", SET, "--only", "trajectories", "--probes", "--json")
    [report] = json.loads(done.stdout)
    assert report["items"] >= 20 and report["format_failures"] == 0
    assert report["turns"]["n"] > 0 and "tool_use" in report["by_meta_class"]
    table = cli("judge", "eval", SET, "--only", "trajectories", "--probes").stdout
    assert "turn verdicts" in table
    probes = {line.split()[1]: line.split()[-1] for line in table.split("probes\n")[1].splitlines()[1:]}
    assert probes["contradicted_result"] == "ok"
    text = json.loads(cli("judge", "eval", SET, "--only", "text", "--json").stdout)[0]
    assert text["items"] == 113 and text["turns"] is None


def test_judge_modes_side_by_side_on_the_projects_sample_groups(cli):
    """--modes judges the labelled groups once per mode: the same verdicts from the simulator (its content rules
    see one response at a time), and a group's call judging its six to eight responses at once."""
    done = cli("judge", "eval", SET, "--only", "groups", "--modes", "single,group,votes", "--json")
    single, group, votes = json.loads(done.stdout)
    assert [r["name"] for r in (single, group, votes)] == ["judge/single", "judge/group", "judge/votes3"]
    assert {r["items"] for r in (single, group, votes)} == {101} and group["overall"] == single["overall"]
    assert (single["calls_per_rollout"], votes["calls_per_rollout"]) == (1.0, 3.0)
    assert group["calls_per_rollout"] == pytest.approx(17 / 101)  # one call for each of the 17 groups
    assert group["prompt_tokens_per_rollout"] * 2 < single["prompt_tokens_per_rollout"]
    table = cli("judge", "eval", SET, "--only", "groups", "--modes", "single,group+votes3").stdout
    side = table.split("judge modes side by side (per rollout: an item)\n")[1].split("\n\n")[0].splitlines()
    assert side[0].split() == [
        *("judge", "judge_mode", "items", "failed", "acc", "kappa", "reward_err"),
        *("calls/rollout", "prompt_tok/rollout", "wall_s"),
    ]
    assert [line.split()[:3] for line in side[1:]] == [
        ["judge/single", "single", "101"],
        ["judge/group+votes3", "group+votes3", "101"],
    ]
    refused = cli("judge", "eval", SET, "--modes", "single,pairs", check=False)
    assert refused.returncode == 2 and "a mode is single, group" in refused.stderr
    picked = cli("judge", "eval", SET, "--group", "group-prime-91", "--group", "fever", "--modes", "group", "--json")
    [only] = json.loads(picked.stdout)
    assert only["items"] == 11 and only["calls_per_rollout"] == pytest.approx(2 / 11)  # 7 + 4, a call each
