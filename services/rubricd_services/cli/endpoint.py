"""rubricd endpoint: what an OpenAI-compatible endpoint serves and honours, and the settings every agent needs."""

import argparse

import msgspec

from rubricd_services.llm.check import Findings, Setting, Unreachable, answer_s, probe, recommend
from rubricd_services.llm.dialects import DIALECTS
from rubricd_services.settings import AGENT_DEFAULTS, LLMSettings

from .context import Context, Failed, table

SUMMARY = "probe an OpenAI-compatible endpoint and print the settings to use for every agent"
HELP = """\
Asks the endpoint (an agent's RUBRICD_LLM__BASE_URL, RUBRICD_LLM__API_KEY and RUBRICD_LLM__MODEL, or --base-url
and --model) which models it serves, their context window and its slots where it says, which structured-output
mode (output_mode) it honours and whether it holds a length bound, its latency alone and at --concurrency calls
at once, and whether a repeated prefix comes back cached; then prints the settings that follow, for every agent
(docs/operators/real-model.md). About 10 calls plus --concurrency; each dialect refused costs one.
"""


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent", default="judge", help="whose endpoint and key, as its settings say (default judge)")
    p.add_argument("--base-url", help="the endpoint instead (e.g. http://127.0.0.1:8000/v1)")
    p.add_argument("--model", help="the model to check (default: the agent's, or the one the endpoint serves)")
    p.add_argument("--concurrency", type=int, default=4, help="calls at once for the latency at load (default 4)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S", help="one call's timeout (default 120 s)")
    p.add_argument("--env", action="store_true", help="only the settings, as NAME=VALUE lines (an env file)")
    p.add_argument("--json", action="store_true", help="the findings and the settings as one JSON object")
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace, ctx: Context) -> int:
    if args.agent not in AGENT_DEFAULTS or args.agent == "embedder":
        raise Failed(f"--agent: one of {sorted(set(AGENT_DEFAULTS) - {'embedder'})}")
    if args.concurrency < 1:
        raise Failed("--concurrency: at least 1")
    asked = {"base_url": args.base_url, "timeout_s": args.timeout}
    s = ctx.settings.agent(args.agent).model_copy(update={k: v for k, v in asked.items() if v is not None})
    try:
        found = await probe(s, model=args.model, concurrency=args.concurrency)
    except Unreachable as e:
        raise Failed(str(e)) from None
    agents = {name: ctx.settings.agent(name) for name in AGENT_DEFAULTS if name != "embedder"}
    try:
        settings = recommend(found, agents)
    except ValueError as e:
        raise Failed(f"{found.base_url}: {e}") from None
    if args.json:
        print(msgspec.json.encode({"findings": found, "output_mode": found.output_mode, "settings": settings}).decode())
    elif args.env:
        print("\n".join(f"{s.name}={s.value}" for s in settings))
    else:
        print(render(found, settings, agents))
    return 0


def render(found: Findings, settings: list[Setting], agents: dict[str, LLMSettings]) -> str:
    said = lambda value, unit="": "not said" if value is None else f"{value}{unit}"  # noqa: E731
    cached = (
        "not said (no usage.prompt_tokens_details)"
        if found.cached_tokens is None
        else f"{found.cached_tokens} of {found.prompt_tokens} prompt tokens of a repeated prefix"
    )
    lines = [
        f"endpoint  {found.base_url}",
        f"models    {', '.join(found.models)} (checking {found.model})",
        f"context   {said(found.context_tokens, ' tokens a request')}"
        + (f" ({found.context_from})" if found.context_from else ""),
        f"slots     {said(found.slots)}",
        "dialects  " + "; ".join(f"{m}: {found.dialects[m] or 'works'}" for m in DIALECTS if m in found.dialects),
        f"bounds    {_bounds(found.bounds_held)}",
    ]
    if found.latency_s is not None and found.latency_at_once_s is not None and found.wall_at_once_s is not None:
        lines += [
            f"latency   {found.latency_s:.2f} s alone; {found.latency_at_once_s:.2f} s a call at "
            f"{found.concurrency} at once ({found.wall_at_once_s:.2f} s together: about {found.at_once:.1f} served at once)",
            f"speed     {said(found.tokens_per_s and round(found.tokens_per_s), ' answer tokens a second, one call')}",
            f"cache     {cached}",
            f"limits    {said(found.rpm, ' requests')} / {said(found.tpm, ' tokens')} a minute",
        ]
    chosen = {s.name: s.value for s in settings}
    budget = []
    for name, a in agents.items():
        max_tokens = int(chosen.get(f"RUBRICD_AGENTS__{name.upper()}__MAX_TOKENS", a.max_tokens or 0))
        timeout = chosen.get(f"RUBRICD_AGENTS__{name.upper()}__TIMEOUT_S", f"{a.timeout_s:.0f}")
        needed = answer_s(found, max_tokens)
        budget.append((name, max_tokens, timeout, "-" if needed is None else f"{needed:.1f}"))
    rows = [(s.name, s.value, s.why) for s in settings]
    return "\n".join(
        [
            *lines,
            "",
            table(budget, ("agent", "max_tokens", "timeout_s", "s to write max_tokens here")),
            "",
            table(rows, ("setting", "value", "why")),
        ]
    )


def _bounds(held: bool | None) -> str:
    if held is None:
        return "not checked (json_schema does not work)"
    return "a maxLength held (the whole schema enforced)" if held else "a maxLength not held"
