"""The updater service: evolves a run's adaptive rubrics from its evaluation memory into new versions.

`app` wires it (broker, subscribers, lifespan); `handler` decodes, updates and
publishes; `update` makes the new version from `memory` (static and dynamic),
the agents' chats (`prompting`) and the validated `proposal`; `prompts/` holds
the query writer's and the updater's instructions.
"""
