"""rubricd's LLM simulator: a TEST AND DEMO TOOL, not a model.

An OpenAI-compatible HTTP server (chat completions, embeddings, models) that
answers with schema-valid, content-dependent JSON built by heuristics, with
configurable latency and failure injection. Tests, benchmarks and the offline
demo point the services at it; it is never a production code path. Point the
services at a real endpoint with RUBRICD_LLM__BASE_URL.
"""

BANNER = "rubricd LLM simulator — test/demo tool, not a model"
