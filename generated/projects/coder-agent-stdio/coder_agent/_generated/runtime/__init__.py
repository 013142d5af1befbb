"""The agentgen runtime, copied verbatim into each generated project.

Depends only on pydantic (lazily, for typed models), orjson and the standard
library.  Modules: `jsonrpc` (transport-agnostic connection: the seam every
transport plugs into), `stdio`, `agent` (protocol plumbing from the manifest),
`client`, `serve` (entry points), `errors`.
"""

from .agent import AgentRuntime, InterruptDeclined, ProviderRoute, Turn
from .errors import AgentError, RpcError

__all__ = ["AgentError", "AgentRuntime", "InterruptDeclined", "ProviderRoute", "RpcError", "Turn"]
