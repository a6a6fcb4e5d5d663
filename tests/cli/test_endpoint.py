"""`rubricd endpoint`: the settings an endpoint calls for, found by asking it. Against the simulator here (labelled:
our own server, each dialect it honours configured); against llama.cpp's server in tests/system/test_real_model.py.
What follows from the findings is checked without a server (`recommend`)."""

import json

import pytest

from rubricd.messages import Rubric
from rubricd_services.judges import rollouts, verdicts
from rubricd_services.llm import LLMClient
from rubricd_services.llm.check import Findings, recommend
from rubricd_services.runtime import prompts
from rubricd_services.settings import AGENT_DEFAULTS, ServiceSettings
from rubricd_testbed.simulator.faults import SimConfig
from tests.factories import rollout, rubric_set

CHAT_AGENTS = sorted(set(AGENT_DEFAULTS) - {"embedder"})


@pytest.fixture
def url(simulator) -> str:
    return simulator[0]


def settings_of(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.splitlines())


@pytest.mark.parametrize(
    ("honoured", "mode"),
    [
        (None, "json_schema"),  # every dialect: OpenAI, vLLM, llama-server
        (["json_object_schema", "json_object", "text"], "json_object_schema"),  # llama-cpp-python's server
        (["json_object", "text"], "json_object"),  # none enforced: the schema in the prompt
    ],
)
async def test_the_settings_it_prints_are_the_endpoints_dialect_and_a_judge_call_works_with_them(
    url, sim, cli, honoured, mode
):
    if honoured:
        sim.config = SimConfig(dialects=honoured)
    env = settings_of(cli("endpoint", "--base-url", url, "--env").stdout)
    assert env["RUBRICD_LLM__BASE_URL"] == url and env["RUBRICD_LLM__MODEL"] == "rubricd-simulator"
    assert env["RUBRICD_LLM__OUTPUT_MODE"] == mode
    assert env.get("RUBRICD_LLM__STRICT") == ("false" if mode == "json_schema" else None)  # its grammar holds bounds
    service = ServiceSettings(llm={k.removeprefix("RUBRICD_LLM__").lower(): v for k, v in env.items()})
    rubrics = rubric_set(Rubric(id="correct", criterion="Says 42", points=5))
    system = rollouts.system_message(prompts.load("rubricd_services.judges", verdicts.JUDGE), rubrics)
    asked = rollout(rollout_id="r", prompt="What is 6 x 7?", response="42", reference="42")
    async with LLMClient.from_settings(service, ["judge"]) as llm:
        verdict = await llm.structured("judge", rollouts.messages(system, asked), verdicts.verdict_type(("correct",)))
    assert verdict.attempts == 1 and set(verdicts.read(verdict.value, ("correct",))) == {"correct"}  # first try


async def test_it_says_what_it_found_for_each_dialect_and_how_fast_the_endpoint_is(url, sim, cli):
    sim.config = SimConfig(dialects=["json_object", "text"])
    out = cli("endpoint", "--base-url", url, "--concurrency", "3").stdout
    assert "json_schema: Error code: 500" in out and "json_object: works" in out
    assert "no dialect enforces the schema: answers are parsed tolerantly" in out
    found = json.loads(cli("endpoint", "--base-url", url, "--json").stdout)
    assert found["output_mode"] == "json_object"
    f = found["findings"]
    assert f["latency_s"] > 0 and f["latency_at_once_s"] > 0 and f["tokens_per_s"] > 0
    assert f["cached_tokens"] > 0 and f["cached_tokens"] <= f["prompt_tokens"]  # the simulator caches a system prompt
    assert [row for row in out.splitlines() if row.split(" ")[0] in CHAT_AGENTS]  # every agent's budget


def test_a_model_it_does_not_serve_or_an_endpoint_that_does_not_answer_fails_naming_it(url, cli, free_port):
    done = cli("endpoint", "--base-url", url, "--model", "gpt-9", check=False)
    assert done.returncode == 1 and "serves ['rubricd-simulator'], not 'gpt-9'" in done.stderr
    down = f"http://127.0.0.1:{free_port}/v1"
    done = cli("endpoint", "--base-url", down, check=False)
    assert done.returncode == 1 and f"GET {down}/models" in done.stderr


def agents(**overrides: object) -> dict:
    service = ServiceSettings(llm=overrides) if overrides else ServiceSettings()
    return {name: service.agent(name) for name in CHAT_AGENTS}


def findings(**fields: object) -> Findings:
    base = {"base_url": "http://m/v1", "model": "m", "models": ["m"], "dialects": {"json_schema": None}}
    return Findings(**{**base, **fields})  # type: ignore[arg-type]


def test_a_window_the_server_states_becomes_context_tokens_and_shrinks_a_max_tokens_that_would_not_fit():
    said = {s.name: s.value for s in recommend(findings(context_tokens=3000, context_from="meta.n_ctx"), agents())}
    assert said["RUBRICD_LLM__CONTEXT_TOKENS"] == "3000"
    budgets = {name: int(said.get(f"RUBRICD_AGENTS__{name.upper()}__MAX_TOKENS", -1)) for name in CHAT_AGENTS}
    # 3,000 less the 1,024 a prompt needs: the judge's 2,048 and the summarizers' 3,072 shrink, the 512 stays.
    assert budgets["judge"] == 1976 and budgets["summarizer"] == 1976 and budgets["query_writer"] == -1
    ServiceSettings(llm={"context_tokens": 3000, "max_tokens": 1976})  # which the settings accept


def test_a_slow_endpoint_raises_the_timeouts_of_the_agents_that_would_outlast_theirs():
    slow = findings(tokens_per_s=20.0, latency_s=1.0, latency_at_once_s=2.0, wall_at_once_s=2.0)
    said = {s.name: s.value for s in recommend(slow, agents())}
    # The judge writes 2,048 tokens at 20 a second, twice as slow at once: 205 s, so a timeout of 1.5x that.
    assert said["RUBRICD_AGENTS__JUDGE__TIMEOUT_S"] == "310"
    assert "RUBRICD_AGENTS__QUERY_WRITER__TIMEOUT_S" not in said  # 512 tokens: 51 s, within its 120
    fast = findings(tokens_per_s=500.0, latency_s=1.0, latency_at_once_s=1.0, wall_at_once_s=1.0)
    assert not [s for s in recommend(fast, agents()) if s.name.endswith("TIMEOUT_S")]


def test_rate_limit_headers_slots_and_an_unenforced_bound_become_their_settings():
    said = {s.name: s.value for s in recommend(findings(rpm=500, tpm=200_000, slots=4, bounds_held=False), agents())}
    assert (said["RUBRICD_LLM__RPM"], said["RUBRICD_LLM__TPM"], said["RUBRICD_LLM__SHARED_SLOTS"]) == (
        "500",
        "200000",
        "4",
    )
    assert said["RUBRICD_LLM__STRICT"] == "true"  # OpenAI's strict form, since bounds are not held anyway
    with pytest.raises(ValueError, match="no output_mode works: json_schema: 401"):
        recommend(findings(dialects={"json_schema": "401", "text": "401"}), agents())
