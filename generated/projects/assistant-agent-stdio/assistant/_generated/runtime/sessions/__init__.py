"""Sessions, one layer for every transport (`sessions`: `SessionCore`, `SessionConnection`):
leases, each session's turn slot and the prompts waiting for it (`turn_slots`), the
recorded turn and its save, the session methods (load, resume, list, close, delete), and
the stores (`store`: the interface and the memory store; SQLite by default, PostgreSQL for
replicas), plus async-output callbacks.  Imports `wire` and `agent`."""
