"""rubricd's services and tools, one sub-package each.

Services (each run with `rubricd serve NAME`): `scorer`, `comparer`, `arm`, `analyzer`, `summarizer`, `updater`,
`gateway`.
Tools: `cli` (the `rubricd` command), `demo` (a simulated trainer), `simulator` (an OpenAI-compatible LLM
stand-in for tests and the demo, not a model). `common` holds what every service shares: the service
template, settings, the LLM client, the memory; `rubrics` finds the rubric set in force for a prompt
(stored, seeded or generated) for the scorer and the comparer.
"""
