"""What the agent runtime's collaborators share: one `AgentContext` per connection (the
manifest, the revision it speaks, the connection, its sessions, the client's
capabilities, the conversation states and the manifest's models), and the `Session` and
`StateMachine` it holds.  The collaborators (turns.py, interrupts.py, providers.py,
commands.py, config.py) each take the context; none knows `AgentRuntime`."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..wire.errors import RpcError, invalid_params
from ..wire.fields import need
from ..wire.jsonrpc import log

if TYPE_CHECKING:
    from ..wire.jsonrpc import Connection
    from ..wire.revision import Revision

STATE_ERROR = -32002


def with_env_defaults(manifest: dict[str, Any]) -> dict[str, Any]:
    """`manifest` with the default of each config option that has a `default_env` taken
    from that environment variable, when it is set to one of the option's values (the
    model picker's default is `$ACP_MODEL` when it lists it); a new dict when one changed."""
    config = manifest.get("config")
    if type(config) is not dict:
        return manifest
    options = config.get("options")
    if not options or not any(type(o) is dict and o.get("default_env") for o in options):
        return manifest
    out = []
    for opt in options:
        env = opt.get("default_env") if type(opt) is dict else None
        value = os.environ.get(env, "").strip() if type(env) is str else ""
        match = [v for v in opt.get("values") or () if str(v) == value] if value else []
        out.append({**opt, "default": match[0]} if match else opt)
    return {**manifest, "config": {**config, "options": out}}


class Session:
    __slots__ = (
        "cancel_requested",
        "config",
        "config_raw",
        "cwd",
        "id",
        "mcp_servers",
        "mode",
        "model_history",
        "state",
        "task",
        "turns",
    )

    def __init__(self, sid: str, config: Any, config_raw: dict[str, Any], state: str) -> None:
        self.id = sid
        self.config = config
        self.config_raw = config_raw
        self.state = state
        self.task: asyncio.Task[Any] | None = None
        self.cancel_requested = False
        self.turns = 0
        self.cwd: str | None = None
        self.mcp_servers: Any = None  # as the client sent them (Turn.mcp_servers types them)
        self.mode: str | None = None  # the current mode's id, when the manifest has modes
        # a model's own message history (JSON, as model/history.py writes it), saved with
        # the session's state so that a loaded session continues its conversation
        self.model_history: list[Any] | None = None


class StateMachine:
    """The manifest's conversation states; types it never mentions are unrestricted."""

    def __init__(self, spec: dict[str, Any] | None) -> None:
        spec = spec or {
            "initial": "idle",
            "states": {
                "idle": [{"party": "client", "type": "user_message", "next": "running"}],
                "running": [
                    {"party": "agent", "type": "agent_message", "next": "idle"},
                    {"party": "client", "type": "cancel", "next": "idle"},
                    {"party": "agent", "type": "interrupt", "next": "running"},
                    {"party": "client", "type": "resume", "next": "running"},
                ],
            },
        }
        self.initial: str = spec.get("initial") or "idle"
        self.rules: dict[str, list[dict[str, Any]]] = dict(spec.get("states") or {})
        self.known = {
            (r.get("party"), r.get("type")) for rules in self.rules.values() for r in rules
        }

    def allowed(self, state: str) -> list[str]:
        return [f"{r.get('party')} {r.get('type')}" for r in self.rules.get(state, [])]

    def step(self, state: str, party: str, mtype: str) -> str | None:
        """The next state, or None when the message is not allowed in `state`."""
        for r in self.rules.get(state, ()):
            if r.get("party") == party and r.get("type") == mtype:
                return str(r.get("next") or state)
        if (party, mtype) not in self.known:
            return state
        return None


class AgentContext:
    """The state of one agent connection that every collaborator reads."""

    __slots__ = (
        "_load_models",
        "_models",
        "client_capabilities",
        "connection",
        "machine",
        "manifest",
        "revision",
        "sessions",
        "turn_timeout",
    )

    # the revision this connection speaks (set by the runtime: the latest until
    # `initialize` negotiates; unset on a bare runtime that serves no revision)
    revision: Revision

    def __init__(
        self,
        manifest: dict[str, Any],
        load_models: Callable[[], Any],
        turn_timeout: float | None,
    ) -> None:
        self.manifest = with_env_defaults(manifest)
        self.machine = StateMachine(manifest.get("states"))
        self.turn_timeout = turn_timeout
        self.connection: Connection | None = None
        self.sessions: dict[str, Session] = {}
        self.client_capabilities: dict[str, Any] = {}
        self._load_models = load_models  # the manifest's models module, or None
        self._models: Any = None

    def conn(self) -> Connection:
        """The connection (attached before any request is answered)."""
        conn = self.connection
        assert conn is not None
        return conn

    def models(self) -> Any:
        if self._models is None:
            self._models = self._load_models() or False
        return self._models or None

    def mclass(self, name: str) -> Any:
        """The manifest's generated model `name` (Config, Input, ...), if there is one."""
        mm = self.models()
        return getattr(mm, name, None) if mm is not None else None

    def session(self, params: Any) -> Session:
        """The session `params.sessionId` names; invalid params when it is unknown."""
        sid = need(params, "sessionId", str)
        s = self.sessions.get(sid)
        if s is None:
            raise invalid_params(
                f"unknown session {sid!r}",
                [{"loc": ["params", "sessionId"], "msg": "unknown session"}],
            )
        return s

    def transition(self, s: Session, party: str, mtype: str) -> None:
        """Move `s` by one message; a client message its state does not allow is an error,
        an agent one is logged (the handler does not follow the manifest's states)."""
        nxt = self.machine.step(s.state, party, mtype)
        if nxt is None:
            if party == "client":
                allowed = self.machine.allowed(s.state)
                raise RpcError(
                    STATE_ERROR,
                    f"{party} {mtype} is not allowed in state {s.state!r}; allowed: {', '.join(allowed) or 'nothing'}",
                    {"state": s.state, "message": f"{party} {mtype}", "allowed": allowed},
                )
            log.warning(
                "agent %s in state %s does not follow the manifest's states", mtype, s.state
            )
            return
        s.state = nxt
