"""What every service shares: the service template, settings, the LLM gateway, the memory, stream entries and commits."""
