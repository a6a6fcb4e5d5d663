"""rubricd's services and tools, one sub-package each.

Services (each run with `rubricd serve NAME`): `scorer`, `comparer`, `arm`, `analyzer`, `summarizer`, `updater`,
`gateway`.
Tools: `cli` (the `rubricd` command), `demo` (a simulated trainer), `simulator` (an OpenAI-compatible LLM
stand-in for tests and the demo, not a model), `dashboard` (a live page of the runs). What the services share:
`runtime` (the service template, intake, commits, the answering runtime, gatherings, dead letters, consumer
groups), `memory` (the evaluation memory in Weaviate), `llm` (the LLM client, its rate limits and usage),
`settings` (the settings every service shares), `rubrics` (the rubric set in force for a prompt: stored, seeded or
generated; validating proposed rubrics) and `judges` (judging a rollout or a comparison, and measuring the judge).
The layers: docs/development.md, "Layers".
"""
