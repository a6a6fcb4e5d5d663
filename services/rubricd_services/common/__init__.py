"""What every service shares: the service template, settings, the LLM client, the memory, intake, dead letters,
consumer groups, events and commits."""
