"""What every service shares: the service template, settings, the LLM client, the memory, stream entries and commits."""
