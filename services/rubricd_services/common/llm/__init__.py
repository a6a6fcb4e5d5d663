"""The one way services talk to an LLM: typed structured output with bounded retries.

Every agent (judge, analyzer, summarizer, ...) has its own `LLMSettings`, so one
service can point agents at different endpoints and models. The gateway turns a
msgspec Struct into a JSON Schema, asks the endpoint for it in the endpoint's
dialect (`output_mode`), validates the answer with msgspec, and retries what a
retry can fix (timeouts, connection errors, 429, 5xx, invalid or truncated
output). A refusal a retry cannot fix (4xx, or a 5xx that says the request is
invalid) fails the call at once with the server's reason. It counts retries
itself (the openai client's own retries are off) so usage and failures are
visible per agent.

One module per concept:
- `gateway`: `LLMGateway`, an agent's call from request to typed answer, its
  attempts and what they used;
- `dialects`: how an endpoint is asked for a schema and its answer read (pure);
- `endpoints`: an agent's endpoints (replicas), routing, failover and pauses;
- `errors`: what a failed attempt says, `LLMError`, and redaction.
"""

from .dialects import DIALECTS, ENFORCING
from .endpoints import EndpointHealth
from .errors import LLMError, redact
from .gateway import Completion, LLMGateway, Usage

__all__ = ["DIALECTS", "ENFORCING", "Completion", "EndpointHealth", "LLMError", "LLMGateway", "Usage", "redact"]
