"""The one way services talk to an LLM: typed structured output with bounded retries.

Every agent (judge, analyzer, summarizer, ...) has its own `LLMSettings`. The LLM client (`LLMClient`) turns a
msgspec Struct into a JSON Schema, asks for it in the endpoint's dialect (`dialects`), across the agent's
replicas (`endpoints`), validates the answer and retries what a retry can fix (`errors` says what can).
What real endpoints differ in, and the settings: docs/operators/real-model.md.
"""

from rubricd_services.llm.client import Completion, LLMClient, Usage
from rubricd_services.llm.dialects import DIALECTS, ENFORCING
from rubricd_services.llm.endpoints import EndpointHealth
from rubricd_services.llm.errors import LLMError, redact

__all__ = ["DIALECTS", "ENFORCING", "Completion", "EndpointHealth", "LLMError", "LLMClient", "Usage", "redact"]
