"""The client side: `ClientRuntime` and `AgentProxy` (`client`, the bases of the generated
`ClientBase` and `AgentConnection`), the agent's process (`agent_process`), what a client
serves and shows (`client_tools`: files, terminals, the renderer), the terminal questions
(`prompts`), retries, content helpers and the HTTP/WebSocket client (`http_client`).
Imports only `wire`.  An agent project carries its core too: its generated tests drive
the agent through it."""
