"""What a run keeps in Redis, one module per aggregate: each owns its keys' reads and writes.

Rubric sets with their candidates (promotion: the shadow scores), the per-step decisions (the meta-class
schedule, Rubric-ARM's phases), canaries, rubric health, judge accuracy, LLM usage, rubric history and the runs
index. The services, the CLI and the dashboard read and write through these; a trainer needs none of them (the
contract and the client are the shared package, rubricd).
"""
