"""The agent's Streamable HTTP and WebSocket server: the Starlette app (`http_app`,
`http_requests`), one ACP connection's frames onto its SSE streams (`http_connection`,
`http_streams`), Hypercorn (`http_launch`), the server a generated agent runs
(`http_server`) and the Redis relay between replicas (`redis_router`).  Imports `wire`,
`agent` and `sessions`; only HTTP agents carry it."""
