"""The agentgen runtime, copied into each generated project (`_generated/runtime/`).

Private to the generated package: handlers import from `_generated/acp.py`, the public
face, whose names stay put when the rooms below move.  Rooms, lowest first (a room
imports only rooms listed before it; ARCHITECTURE.md draws them, and
tests/generator/test_import_graph.py holds the rule):

- `wire`: JSON-RPC framing, the route table, the revision description, errors, the
  schema check, log redaction, stdio and the HTTP wire facts (both sides use it);
- `agent`: the agent side: the runtime behind `AgentBase`, turns and their authoring
  surface, the client calls a turn makes, config, modes, commands, providers, interrupts;
- `client`: the client side: `ClientBase`'s runtime, the agent's process, what a client
  serves (files, terminals), the HTTP client;
- `sessions`: the session layer every transport shares, and the session stores;
- `console`: a generated client's console script;
- `http`: the agent's Streamable HTTP and WebSocket server;
- `serve.py`: a generated agent's entry points (stdio; HTTP loaded by name).

A project carries only the rooms (and modules) it uses: a stdio agent no `http` and no
`console`, a client no `sessions` (generator/render: `runtime_files`).
"""
