"""`rubricd serve dashboard` in Debian's headless chromium (driven by selenium), against the real stack and the four
services of the loop running an alternating-reward run; and its step tally without a broker.

The browser test keeps a screenshot: .stack/artifacts/dashboard.png.
"""

import asyncio
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from rubricd import RubricdClient, wire
from rubricd.messages import (
    Action,
    ArmReward,
    Candidate,
    GateCheck,
    GateDecision,
    Interference,
    JudgeStatus,
    PhaseDecision,
    Plan,
    RewardedArmRollout,
    Rollout,
    Rubric,
    RubricModification,
    RubricResult,
    RubricsUpdated,
    Score,
    ScoredRollout,
    Strategy,
)
from rubricd_services.dashboard.reader import PAGE, Reader, RunTally, StepTally
from rubricd_services.settings import ServiceSettings
from rubricd_services.state.canaries import CanaryStep
from rubricd_services.state.promotion import Candidates
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import answer, arm_rollout, count_health, rollout, rubric_set, scored

from .conftest import IMG, SCRIPT

pytestmark = pytest.mark.integration

RUN, PER_STEP = "dash", 6
FAIL_JUDGE = " [sim:fail=500,times=99,agent=JudgeVerdict]"  # every judge call on this prompt fails, nothing else
ARTIFACTS = Path(__file__).resolve().parents[2] / ".stack" / "artifacts"


def rollouts(step: int) -> list[Rollout]:
    """Honest answers at step 0; from step 1 every other one is padded; at step 2 one judge call fails."""
    out = [
        answer(10 + step, 20 + i, "padded" if step >= 1 and i % 2 else "correct", i, run_id=RUN, step=step)
        for i in range(PER_STEP)
    ]
    if step == 2:
        out[0] = msgspec.structs.replace(out[0], prompt=out[0].prompt + FAIL_JUDGE)
    return out


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    profile = tempfile.mkdtemp(prefix="rubricd-chromium-")
    # Headless, as root, on a machine without network: no sandbox, no background calls home.
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,2000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def until(driver: WebDriver, found: Callable[[WebDriver], object], timeout: float = 30) -> None:
    WebDriverWait(driver, timeout, poll_frequency=0.2, ignored_exceptions=[WebDriverException]).until(found)


# The page redraws every half second: each read takes what it needs in one script, never an element to read later.
def texts(driver: WebDriver, css: str) -> list[str]:
    """The rendered text of each element CSS selects."""
    return driver.execute_script("return [...document.querySelectorAll(arguments[0])].map(e => e.innerText)", css)


def attributes(driver: WebDriver, css: str, name: str) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.getAttribute(arguments[1]))", css, name
    )


def titles(driver: WebDriver, css: str, key: str) -> dict[str, list[str]]:
    """Each element's `key` attribute -> the tooltips (SVG titles) inside it."""
    return driver.execute_script(
        "return Object.fromEntries([...document.querySelectorAll(arguments[0])].map("
        "e => [e.getAttribute(arguments[1]), [...e.querySelectorAll('title')].map(t => t.textContent)]))",
        css,
        key,
    )


@pytest.mark.timeout(600)
async def test_the_dashboard_shows_a_live_run(stack, keys, start_service, redis, dashboard, browser):
    services = [
        start_service(
            "scorer", wait=False, reward_policy="alternating", schedule_strategy="round_robin", warmup_steps=1
        ),
        *(start_service(name, wait=False, step_deadline_s=120) for name in ("analyzer", "summarizer", "updater")),
    ]
    for service in services:
        service.wait_consuming(stack.redis_url, keys)
    scores: dict[int, list[Score]] = {}
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        for step in range(3):
            scores[step] = await client.score(rollouts(step), timeout=120)
            await client.close_step(RUN, step, rollouts=PER_STEP)
            await client.wait_for_rubrics(RUN, step, timeout=300)
        evaluation = rollout(run_id=RUN, step=2, rollout_id="eval-0", reference="4", evaluation=True)
        [evaluated] = await client.score([evaluation], timeout=60)
    assert [s.status for s in scores[2]].count(JudgeStatus.JUDGE_FAILED) == 1
    updates = [wire.decode(wire.payload(f), RubricsUpdated) for _, f in await redis.xrange(keys.rubrics_updated)]
    [made] = [u for u in updates if u.version == 2]  # the padding from step 1 gave version 2
    [added] = [m for m in made.modifications if m.rubric is not None]

    # The scorer records a score in the same commit that replies it: every score the client got is on the page.
    browser.get(dashboard + f"#run={RUN}")
    until(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "true")
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#versions li[data-version='2']"))
    assert browser.execute_script("return document.getElementById('run').value") == RUN

    # Reward per step: the total (each step's mean), each meta-class, and the evaluation rollout.
    series = titles(browser, "#rewards g.series", "data-series")
    classes = set(scores[0][0].meta_class_scores)
    assert set(series) == {"total", "evaluation", *classes}
    for step in range(3):
        rewarded = [s.reward for s in scores[step] if s.reward is not None]
        assert f"total, step {step}: {sum(rewarded) / len(rewarded):.3f}" in series["total"]
    assert series["evaluation"] == [f"evaluation, step 2: {evaluated.reward:.3f}"]

    # The judge failure rate: one of six at step 2, none before.
    assert titles(browser, "#failures rect.bar", "data-step") == {
        "0": ["step 0: 0 of 6 judge calls failed"],
        "1": ["step 1: 0 of 6 judge calls failed"],
        "2": ["step 2: 1 of 6 judge calls failed"],
    }
    assert "1 of 18 scores failed" in texts(browser, "#failure-total")[0]

    # The active meta-class of each step: the weighted total while warming up, then the scorer's choice.
    active = [scores[step][-1].active_meta_class for step in range(3)]
    assert active[0] is None and active[1] in classes
    assert texts(browser, "#classes .strip span") == [f"{s}: {c or 'total'}" for s, c in enumerate(active)]

    # Each rubric's met rate per step; the rubric version 2 added is judged from the step after it was made.
    correct = texts(browser, "#rubrics tr[data-rubric='correct'] td")
    met = [
        [r.met for s in scores[step] for r in s.results if r.rubric_id == "correct"] for step in range(3)
    ]  # the failed judge gave no verdicts
    assert correct == ["correct", "+5", *(f"{sum(m) / len(m):.2f}" for m in met)]
    new_row = texts(browser, f"#rubrics tr[data-rubric='{added.rubric.id}'] td")
    assert made.step is not None and made.step <= 1
    judged_from = 2 + made.step + 1  # the cells after the rubric and points columns: steps 0, 1, ...
    assert set(new_row[2:judged_from]) == {""} and new_row[judged_from] != ""

    # The version timeline: version 2, the step it was made from, its change and why.
    [version] = texts(browser, "#versions li[data-version='2']")
    assert f"v2 · from step {made.step}" in version and f"+ {added.rubric.id}" in version
    assert "why: " + " ".join(added.rationale.split()) in " ".join(version.split())

    # Consumer groups of every service of the loop.
    groups = set(attributes(browser, "#groups tr[data-group]", "data-group"))
    assert {"rollouts/scorers", "scored/analyzers", "analyses/summarizers", "steps/summarizers"} <= groups
    assert "summaries/updaters" in groups

    # The event tail, filtered by kind and then by service.
    Select(browser.find_element(By.ID, "event-kind")).select_by_value("judge_failed")
    until(browser, lambda d: set(texts(d, "#events td:nth-child(3)")) == {"judge_failed"})
    assert texts(browser, "#events td:nth-child(4)") == [f"{RUN}/2/s2-r0"]
    Select(browser.find_element(By.ID, "event-kind")).select_by_value("")
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#event-service option[value='updater']"))
    Select(browser.find_element(By.ID, "event-service")).select_by_value("updater")
    until(
        browser,
        lambda d: texts(d, "#events td:nth-child(2)") and set(texts(d, "#events td:nth-child(2)")) == {"updater"},
    )
    Select(browser.find_element(By.ID, "event-service")).select_by_value("")

    # Live: a new step shows up without reloading the page.
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        await client.score(rollouts(3), timeout=120)
    until(
        browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#rewards g.series[data-series='total'] circle")) == 4
    )

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "dashboard.png"))
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert not errors, errors


def tallied(step: int, status: JudgeStatus, reward: float | None, **score: object) -> ScoredRollout:
    return scored(rollout(run_id="r", step=step, rollout_id=f"x{reward}"), reward, status=status, **score)


def test_a_step_tally_keeps_failures_rejections_masks_and_evaluation_apart():
    tally = StepTally()
    results = [
        RubricResult(rubric_id="correct", met=True, points=5),
        RubricResult(rubric_id="pad", met=False, points=-2),
    ]
    tally.add(tallied(0, JudgeStatus.OK, 1.0, results=results, meta_class_scores={"accuracy": 1.0}))
    tally.add(tallied(0, JudgeStatus.OK, 0.0, meta_class_scores={"accuracy": 0.0}))
    tally.add(tallied(0, JudgeStatus.JUDGE_FAILED, None))
    tally.add(tallied(0, JudgeStatus.REJECTED, None))
    tally.add(tallied(0, JudgeStatus.OK, None, masked=True))
    tally.add(tallied(0, JudgeStatus.OK, 0.25, evaluation=True))
    row = tally.row(0)
    assert (row["scored"], row["failed"], row["rejected"], row["masked"]) == (4, 1, 1, 1)
    assert row["failure_rate"] == 0.25
    assert row["reward"] == 0.5  # the two rewarded training rollouts only
    assert (row["evaluation_reward"], row["evaluation_rollouts"]) == (0.25, 1)
    assert row["meta_classes"] == {"accuracy": 0.5}
    assert row["rubrics"] == {
        "correct": {"met": 1.0, "judged": 1, "points": 5.0},
        "pad": {"met": 0.0, "judged": 1, "points": -2.0},
    }


async def test_two_reads_at_once_count_each_kept_score_once(redis, keys):
    entries = [tallied(0, JudgeStatus.OK, i / 10) for i in range(PAGE + 5)]  # more than one page
    for entry in entries:
        await redis.xadd(keys.kept_rollouts("r"), {wire.FIELD: wire.encode(entry)})
    tally = RunTally()
    await asyncio.gather(*(tally.catch_up(redis, keys, "r") for _ in range(3)))  # two tabs, a poll and a click
    [row] = tally.rows()
    assert row["scored"] == len(entries)
    await redis.xadd(keys.kept_rollouts("r"), {wire.FIELD: wire.encode(tallied(1, JudgeStatus.OK, 1.0))})
    await tally.catch_up(redis, keys, "r")  # only what came since
    assert [r["scored"] for r in tally.rows()] == [len(entries), 1]


async def test_a_poll_with_its_last_cursor_reads_only_the_steps_that_changed(redis, keys):
    async def keep(step: int, reward: float) -> None:
        await redis.xadd(keys.kept_rollouts("r"), {wire.FIELD: wire.encode(tallied(step, JudgeStatus.OK, reward))})

    await keep(0, 0.1)
    await keep(1, 0.2)
    reader = Reader(ServiceSettings.model_construct(), keys, redis)
    first = await reader.run("r")
    assert [r["step"] for r in first["steps"]] == [0, 1] and not first["partial"]
    unchanged = await reader.run("r", first["cursor"])
    assert unchanged["steps"] == [] and unchanged["partial"] and unchanged["cursor"] == first["cursor"]
    await keep(1, 0.3)  # a late score of step 1, and a new step
    await keep(2, 0.4)
    changed = await reader.run("r", unchanged["cursor"])
    assert [(r["step"], r["scored"]) for r in changed["steps"]] == [(1, 2), (2, 1)] and changed["partial"]
    restarted = await reader.run("r", "another-process.1.0")  # a cursor of a dashboard since restarted: every step
    assert [r["step"] for r in restarted["steps"]] == [0, 1, 2] and not restarted["partial"]


async def test_a_poll_with_its_last_cursor_reads_only_the_new_versions_and_those_missing_their_update(redis, keys):
    """A version never changes: a poll answers the versions made since its cursor, and again any whose update
    (its strategy and changes' reasons) was not found yet."""
    store = RubricStore(redis, keys)
    rubric = Rubric(id="correct", criterion="The response states the correct final answer.", points=5)
    await redis.xadd(keys.kept_rollouts("r"), {wire.FIELD: wire.encode(tallied(0, JudgeStatus.OK, 0.5))})

    async def made(version: int, announced: bool) -> None:
        points = rubric.points + version
        await store.publish(
            rubric_set(msgspec.structs.replace(rubric, points=points), run_id="r", version=version, step=version)
        )
        if announced:
            mod = RubricModification(
                action=Action.REWEIGHT, rubric_id="correct", points=points, rationale=f"why {version}"
            )
            update = RubricsUpdated(
                run_id="r",
                version=version,
                previous_version=version - 1,
                step=version,
                strategy=Strategy.MAINTENANCE,
                modifications=[mod],
            )
            await redis.xadd(keys.rubrics_updated, wire.entry(update))

    await store.seed(rubric_set(rubric, run_id="r"))
    await made(2, True)
    reader = Reader(ServiceSettings.model_construct(), keys, redis)
    first = await reader.run("r")
    assert [v["version"] for v in first["versions"]] == [1, 2] and first["versions"][1]["strategy"] == "maintenance"
    again = await reader.run("r", first["cursor"])
    assert again["versions"] == [] and again["partial"]
    await made(3, False)  # its update not found (yet)
    await made(4, True)
    newer = await reader.run("r", again["cursor"])
    assert [(v["version"], v["strategy"]) for v in newer["versions"]] == [(3, None), (4, "maintenance")]
    assert [v["version"] for v in (await reader.run("r", newer["cursor"]))["versions"]] == [3, 4]  # 3 asked again
    assert [v["version"] for v in (await reader.run("r"))["versions"]] == [1, 2, 3, 4]


async def test_the_canaries_panel_shows_each_steps_agreement_and_where_the_judge_drifts(
    keys, redis, dashboard, browser
):
    """What the scorers record of a run's canaries (tests/evaluation/test_canaries.py makes them for real), drawn:
    the agreement per step against the baseline, the drifting steps marked, since when it drifts."""
    agreements = [1.0, 0.75, 1.0, 0.25, 0.0]
    for step, agreement in enumerate(agreements):
        canary = CanaryStep(
            step=step,
            rubric_version=1,
            items=["a", "b"],
            verdicts=4,
            agreed=round(4 * agreement),
            agreement=agreement,
            baseline=None if step < 3 else 0.917,
            drift=step >= 3,
        )
        await redis.hset(keys.canaries("canaried"), str(step), msgspec.json.encode(canary))
    await redis.hset(keys.canaries("canaried"), "claimed:5", "scorer-0")  # being judged: not a step yet
    browser.get(dashboard + "#run=canaried")
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#canaries g.series[data-series='agreement'] circle"))
    series = titles(browser, "#canaries g.series", "data-series")
    assert series["agreement"] == [f"agreement, step {s}: {a:.3f}" for s, a in enumerate(agreements)]
    assert series["baseline"] == ["baseline, step 3: 0.917", "baseline, step 4: 0.917"]
    drifting = browser.execute_script(
        "return [...document.querySelectorAll('#canaries circle.drift')].map(c => c.textContent)"
    )
    assert drifting == ["agreement, step 3: 0.250", "agreement, step 4: 0.000"]
    [note] = texts(browser, "#canary-note")
    assert note == "step 4: agreement 0.00 over 4 verdicts, baseline 0.92 · judge drift since step 3"
    assert attributes(browser, "#canary-note", "class") == ["note drift"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "dashboard-canaries.png"))
    # A canary step is written once: a poll reads only the steps it has not read yet.
    reader = Reader(ServiceSettings.model_construct(), keys, redis)
    assert [c["step"] for c in (await reader.run("canaried"))["canaries"]] == [0, 1, 2, 3, 4]
    await redis.hset(keys.canaries("canaried"), "0", b"not read again")
    await redis.hset(keys.canaries("canaried"), "5", msgspec.json.encode(msgspec.structs.replace(canary, step=5)))
    again = (await reader.run("canaried"))["canaries"]
    assert [c["step"] for c in again] == [0, 1, 2, 3, 4, 5] and again[0]["agreement"] == 1.0


async def test_the_rubric_arm_panel_shows_each_phase_and_both_models_rewards(keys, redis, dashboard, browser):
    """What the arm service keeps of a run (tests/arm/test_service.py makes it for real), drawn: the generator's mean
    reward and the judge's accuracy per step, and what each step trained."""
    plan = Plan(first="judge", phase_steps=2)
    for step in range(4):
        training, why = plan.training(step)
        decision = PhaseDecision(step=step, training=training, why=why, plan=plan)
        await redis.hset(keys.arm_phases("armed"), str(step), msgspec.json.encode(decision))
        for i in range(2):
            rollout = arm_rollout(training, run_id="armed", rollout_id=f"{step}-{i}", step=step, completion="...")
            ids = {"run_id": "armed", "rollout_id": rollout.rollout_id, "step": step, "phase": training}
            if training == "generator":  # 0.5 and 1.0 at step 2, 1.0 and 1.0 at step 3
                reward = ArmReward(**ids, status=JudgeStatus.OK, reward=1.0 if i or step == 3 else 0.5)
            else:  # one right verdict and one unparsable at step 0; both right at step 1
                penalized = step == 0 and i == 1
                reward = ArmReward(
                    **ids,
                    status=JudgeStatus.OK,
                    reward=-1.0 if penalized else 1.0,
                    penalty="not a verdict" if penalized else None,
                    winner=None if penalized else "A",
                    label="A",
                )
            await redis.xadd(
                keys.kept_arm_rollouts("armed"),
                {wire.FIELD: wire.encode(RewardedArmRollout(rollout=rollout, reward=reward))},
            )
    browser.get(dashboard + "#run=armed")
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#arm g.series[data-series='judge accuracy'] circle"))
    series = titles(browser, "#arm g.series", "data-series")
    assert series["judge accuracy"] == ["judge accuracy, step 0: 1.000", "judge accuracy, step 1: 1.000"]
    assert series["generator reward"] == ["generator reward, step 2: 0.750", "generator reward, step 3: 1.000"]
    assert attributes(browser, "#arm .strip span", "data-training") == ["judge", "judge", "generator", "generator"]
    [note] = texts(browser, "#arm-note")
    assert (
        note
        == "step 3 trains generator: steps 2-3 · 1 completions penalized (invalid rubric sets, unparsable verdicts)"
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "dashboard-arm.png"))


async def test_a_scored_trajectory_is_shown_turn_by_turn_with_the_verdicts_naming_each_turn(
    keys, redis, dashboard, browser, scored_trajectory
):
    """A kept trajectory (its score as the scorer keeps it), drawn: each turn numbered with its role, the policy's
    marked, tool calls with what the policy got wrong, tool results with the call they answer, beside each turn
    the verdicts naming it and its points; the policy's HTML shown as text. A text rollout of the step as before."""
    text = scored(rollout(run_id="agent", step=3, rollout_id="t/1"), rubric_version=2)
    for kept in (text, scored_trajectory):  # the step's first trajectory is shown, not its first rollout
        await redis.xadd(keys.kept_rollouts("agent"), {wire.FIELD: wire.encode(kept)})
    browser.get(dashboard + "#run=agent")
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#rollout .turn"))
    assert texts(browser, "#rollout .turn .who") == [
        "#0 system",
        "#1 user",
        "#2 assistant policy",
        "#3 tool",
        "#4 assistant policy",
        "#5 assistant policy",
    ]
    assert attributes(browser, "#rollout .turn.policy", "data-turn") == ["2", "4", "5"]
    assert texts(browser, "#rollout .turn[data-turn='2'] .call") == ['call call_1: multiply({"a": 12, "b": 7})']
    assert texts(browser, "#rollout .turn[data-turn='3'] .answers") == ["answers call_1"]
    assert texts(browser, "#rollout .turn[data-turn='4'] .call .problem") == [
        "its arguments are not valid JSON",
        "this tool was not offered",
        "no tool turn answers this call",
    ]
    assert texts(browser, "#rollout .tools li") == [
        'multiply · a times b · {"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}}}'
    ]

    # Beside each policy turn the verdicts naming it, coloured by what they do to the reward, and its points.
    verdicts = browser.execute_script(
        "return [...document.querySelectorAll('#rollout .turn')].map(t => [t.dataset.turn, "
        "[...t.querySelectorAll('.verdict')].map(v => [v.className, v.innerText, getComputedStyle(v).backgroundColor]),"
        " t.querySelector('.turn-points')?.innerText ?? null])"
    )
    met, failed = "rgb(220, 252, 231)", "rgb(254, 226, 226)"
    assert verdicts == [
        ["0", [], None],
        ["1", [], None],
        ["2", [["verdict met good", "✓ valid_tool_calls", met]], "points +2"],
        ["3", [], None],
        ["4", [["verdict unmet bad", "✗ valid_tool_calls", failed]], "points 0"],
        ["5", [["verdict met good", "✓ uses_tool_result", met]], "points +3"],
    ]
    # The trajectory's verdicts, each with the turns it names.
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#rollout table.results tbody tr')]"
        ".map(r => [...r.cells].map(c => c.innerText))"
    )
    assert rows == [
        ["correct", "+5", "met", "", "84 is right"],
        ["uses_tool_result", "+3", "met", "met 5", "answers 84"],
        ["valid_tool_calls", "+2", "not met", "met 2; failed 4", "turn 4 calls lookup, not offered"],
    ]

    # The policy's HTML is text: no element made of it, nothing of it run.
    assert texts(browser, "#rollout .turn[data-turn='1'] .content") == [f"What is 12 * 7? {SCRIPT}"]
    assert texts(browser, "#rollout .turn[data-turn='5'] .content") == [f"12 * 7 = 84 {IMG}"]
    assert browser.execute_script("return document.querySelectorAll('#rollout script, #rollout img').length") == 0
    assert browser.execute_script("return document.body.dataset.injected ?? null") is None
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "dashboard-trajectory.png"))

    # The step's text rollout, picked: its prompt and response, as before; the page's address names it.
    Select(browser.find_element(By.ID, "rollout-id")).select_by_value("t/1")
    until(browser, lambda d: texts(d, "#rollout .response") == ["4"])
    assert texts(browser, "#rollout .prompt") == ["What is 2 + 2?"]
    assert not browser.find_elements(By.CSS_SELECTOR, "#rollout .turn")
    assert "rollout=t%2F1" in browser.current_url
    assert browser.execute_script("return document.body.dataset.injected ?? null") is None
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert not errors, errors


async def test_the_health_panel_shows_the_latest_step_marking_its_uninformative_rubrics(
    keys, redis, dashboard, browser
):
    """What the scorers count of a step's rubric health (tests/summarizer/test_service.py counts it for real), drawn
    for the run's latest step with kept rollouts: the rubrics no group's responses differ on marked."""
    for step in (0, 1):
        verdicts = [("a", True, True), ("a", False, True), ("b", True, True), ("b", True, True)]
        for i, (group, correct, reasons) in enumerate(verdicts):
            results = [
                RubricResult(rubric_id="correct", met=correct, points=5),
                RubricResult(rubric_id="shows_reasoning", met=reasons, points=2),
            ]
            member = rollout(run_id="healthy", step=step, rollout_id=f"s{step}-{i}", group=group)
            kept = scored(member, results=results)
            await redis.xadd(keys.kept_rollouts("healthy"), wire.entry(kept))
            if step == 1:  # the step before has expired: only the latest is shown
                await count_health(redis, keys, kept.score, group)
    browser.get(dashboard + "#run=healthy")
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#health tr[data-rubric]"))
    assert texts(browser, "#health .note") == ["step 1: 1 of 2 rubrics uninformative"]
    rows = {r.split("\t")[0]: r.split("\t")[1:] for r in texts(browser, "#health tr[data-rubric]")}
    assert rows == {"correct": ["0.75", "4", "1 of 2", ""], "shows_reasoning": ["1.00", "4", "0 of 2", "uninformative"]}
    assert attributes(browser, "#health tr.uninformative", "data-rubric") == ["shows_reasoning"]


async def test_the_candidates_panel_shows_the_one_in_shadow_and_each_decision_with_the_gate_s_figures(
    keys, redis, dashboard, browser
):
    """What the updater's gate records of a gated run (tests/system/test_promotion.py makes it for real), drawn:
    the candidate in shadow, and a rejected one with the check that failed and why; a decided one is read once."""
    store = RubricStore(redis, keys)
    rubric = Rubric(id="correct", criterion="The response states the correct final answer.", points=5)
    await store.seed(rubric_set(rubric, run_id="gated"))
    pays = Rubric(id="no_padding", criterion="The response pads the answer.", points=4)
    add = RubricModification(action=Action.ADD, rationale="padding seen", rubric_id="no_padding", rubric=pays)
    proposed = rubric_set(rubric, pays, run_id="gated", version=2, step=2)
    harmful = Candidate(run_id="gated", step=2, until=3, base_version=1, rubrics=proposed, modifications=[add])
    check = GateCheck(
        action=Action.ADD,
        rubric_id="no_padding",
        passed=False,
        reasons=["favours the rollouts flagged for hacking over the honest ones by +0.294"],
        groups=4,
        groups_with_spread=3,
        flagged=4,
        flagged_delta=0.0,
        honest=12,
        honest_delta=-0.294,
    )
    canaries = Interference(steps=[3], verdicts=8, agreement=0.875, with_candidate=0.75, passed=False)
    decision = GateDecision(
        outcome="rejected", step=3, checks=[check], shadow_scores=24, canaries=canaries, reason="no modification passed"
    )
    assert await Candidates(redis, keys).propose(harmful)
    assert await Candidates(redis, keys).decide(msgspec.structs.replace(harmful, decision=decision), None)
    assert await Candidates(redis, keys).propose(msgspec.structs.replace(harmful, step=4, until=5))
    browser.get(dashboard + "#run=gated")
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#candidates li[data-candidate]"))
    heads = texts(browser, "#candidates li[data-candidate] > strong")
    assert heads == [
        "proposed after step 4 on v1 · in shadow until step 5",
        "proposed after step 2 on v1 · rejected at step 3: no modification passed",
    ]
    failed, interfering = texts(browser, "#candidates li[data-candidate='2'] li.removed")
    assert interfering == (
        "canaries (8 labelled verdicts): agreement 0.875 alone, 0.750 with the candidate in the calls: failed"
    )
    assert failed.startswith("add no_padding: failed (flagged +0.000, honest -0.294, spread 3/4)")
    assert "favours the rollouts flagged for hacking" in failed
    reader = Reader(ServiceSettings.model_construct(), keys, redis)
    assert [c["outcome"] for c in await reader.candidates("gated")] == ["rejected", "in shadow"]
    await redis.hset(keys.candidates("gated"), "p2", b"not read again")  # decided: kept in the process
    assert [c["outcome"] for c in await reader.candidates("gated")] == ["rejected", "in shadow"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "dashboard-candidates.png"))
