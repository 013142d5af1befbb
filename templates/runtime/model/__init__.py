"""A model in the agent: a pydantic-ai `Agent` run as an ACP turn (`adapter.run_model`:
text and thinking streamed as chunks, each model tool call shown as a tool call, usage
reported, cancel honoured, model errors as clear JSON-RPC errors), the endpoint the
editor routes with `providers/set`, else the environment (`route`), and the model's own
message history kept with the session (`history`).  Imports `wire` and `agent`; only
projects whose code imports it carry it (pydantic-ai is their dependency)."""

import contextlib

# pydantic-ai's first-run banner (a logo and links on stderr, to a terminal or a coding
# agent) would land in the editor's log of the agent, or glued to the answer on a screen
# the client shares: an ACP agent owns its stderr.
with contextlib.suppress(ImportError):
    import pydantic_ai

    pydantic_ai.BANNER_ENABLED = False
