"""The client's handlers: the one module agentgen never rewrites.

`ClientBase` (from `_generated/acp.py`, the generated package's public face) has one async method per method the
agent may call on the client (session updates, permission requests, files,
terminals, elicitation); override the ones your client handles. Those you leave
are answered by the runtime: in the console script every session update is
rendered (text and the typed output on stdout, the rest on stderr), files are read
and written inside the session folder, terminal commands run there, questions are
asked on the terminal. `agentgen regen` lists every method here that a new
protocol revision removes or changes.
"""

from __future__ import annotations

from ._generated.acp import ClientBase


class Client(ClientBase):
    """echo-agent-client's client-side handlers."""
