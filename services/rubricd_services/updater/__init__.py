"""The updater service: evolves a run's adaptive rubrics from its evaluation memory into new versions.

`app` wires it (broker, subscribers, lifespan); `update` is the domain (static
and dynamic memory, the proposal, validation, the new version); `prompts/`
holds the query writer's and the updater's instructions.
"""
