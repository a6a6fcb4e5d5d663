"""The one way services talk to an LLM: typed structured output with bounded retries.

Every agent (judge, analyzer, summarizer, ...) has its own `LLMSettings`. The gateway (`LLMGateway`) turns a
msgspec Struct into a JSON Schema, asks for it in the endpoint's dialect (`dialects`), across the agent's
replicas (`endpoints`), validates the answer and retries what a retry can fix (`errors` says what can).
What real endpoints differ in, and the settings: docs/operators/real-model.md.
"""

from .dialects import DIALECTS, ENFORCING
from .endpoints import EndpointHealth
from .errors import LLMError, redact
from .gateway import Completion, LLMGateway, Usage

__all__ = ["DIALECTS", "ENFORCING", "Completion", "EndpointHealth", "LLMError", "LLMGateway", "Usage", "redact"]
