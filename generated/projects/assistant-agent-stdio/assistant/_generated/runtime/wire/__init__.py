"""The wire: JSON-RPC 2.0 connections and framing (`jsonrpc`, `frames`, `inbox`, `outbox`,
`stdio`), the route table (`routes`), the typed revision description (`revision`), errors,
the schema-checked wire (`wirecheck`), secrets kept out of logs (`logsafe`, `masking`),
the HTTP transport's shared facts and auth schemes (`http_wire`, `auth`) and the params
helpers every room uses (`fields`).  Imports no other room but `observe` (a leaf: a served request's span and a sent one's trace
context): both sides build on it."""
