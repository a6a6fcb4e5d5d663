"""The calculator tool the agent frameworks' scripted policies are offered (an OpenAI function spec)."""

CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate arithmetic.",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
    },
}
