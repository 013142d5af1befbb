"""Render a project's `_generated/` package (contract 4).

`render_generated(...)` returns `{path relative to _generated/: text}`: dispatcher.py
(from the Jinja template beside this module), revision.py (the typed description of
the protocol revision, generator/protocol/revision.py), models.py (contract 2),
manifest_models.py, manifest.json, __init__.py and runtime/ (copied verbatim from
templates/runtime).  SOURCE.json is written by the scaffold, which knows the origins;
pass `source=` to have it rendered here.  Deterministic: same inputs, same bytes.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import pysource
from ..codegen import ruff_format
from ..errors import AgentgenError
from ..packaged import data_dir

if TYPE_CHECKING:
    from ..protocol.runtime_revision import Revision

HERE = Path(__file__).resolve().parent

__all__ = ["render_generated", "runtime_files", "uses_callbacks", "uses_model"]


# the transport module a project's console script loads by name (serve._transport_module)
# modules a transport loads by name (never imported statically, so other projects lack them):
# an HTTP agent also ships the replicas' PostgreSQL store and Redis router
# What the generated package itself imports (dispatcher.py, acp.py, the console script),
# per role: an agent's sessions and entry points (serve.py), a client's client and console.
_ROLE_MODULES = {
    "agent": ("serve", "agent/agent"),
    "client": ("client/client", "client/content", "console/main"),
}
# What only an agent's own tests import (`_generated/testing/`: the client they drive it
# with): written beside the runtime, left out of the agent's wheel (its pyproject.toml).
_TESTING_MODULES = {"agent": ("client/client", "client/content")}
_TRANSPORT_MODULES = {
    ("agent", "http"): ("http/http_server", "sessions/store_postgres", "http/redis_router"),
    # a client speaks both transports (`-- CMD` and `--url`), whatever --transport it
    # was made with
    ("client", "http"): ("client/http_client",),
    ("client", "stdio"): ("client/http_client",),
}


def runtime_files(
    transport: str | None = None,
    role: str = "agent",
    *,
    callbacks: bool = False,
    model: bool = False,
    testing: bool = False,
) -> dict[str, str]:
    """The runtime package, copied verbatim (sorted, .py only), rooms as subpackages.

    With a transport, only the modules that project imports: the package, what the
    generated package imports for its role (`_ROLE_MODULES`) and every module they import (at any depth, module level or inside functions; a room's
    `__init__` with any of its modules), plus the modules its console script loads by
    name (the HTTP server, the PostgreSQL store and the Redis router for an HTTP agent;
    the console and the HTTP client for a client), and sessions/callbacks.py when the
    manifest declares async output with a callback (`callbacks`; the session core loads
    it by name). A stdio agent then ships no `http` room, no console and no client, a
    client no `sessions` room. `testing`: also what the project's tests import
    (`_TESTING_MODULES`: an agent's tests drive it with the client). Without a transport,
    every module."""
    root = data_dir("templates") / "runtime"
    sources = {
        path.relative_to(root).with_suffix("").as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(root.rglob("*.py"))
        if "__pycache__" not in path.parts
    }
    wanted = set(sources)
    if transport is not None:
        todo = ["__init__", *_ROLE_MODULES[role]]
        todo += _TRANSPORT_MODULES.get((role, transport), ())
        if callbacks:
            todo.append("sessions/callbacks")
        if model:  # the manifest's `llm`: the model room (acp.py exports run_model)
            todo.append("model/adapter")
        if testing:
            todo += _TESTING_MODULES.get(role, ())
        wanted = set()
        while todo:
            name = todo.pop()
            if name in wanted or name not in sources:
                continue
            wanted.add(name)
            package = name.split("/")[:-1]  # the module's package, relative to runtime/
            if package:
                todo.append("/".join([*package, "__init__"]))
            for level, module, names in _relative_imports(sources[name]):
                todo += _imported(package, level, module, names, sources)
    return {f"runtime/{name}.py": sources[name] for name in sorted(wanted)}


@functools.lru_cache(maxsize=512)
def _relative_imports(source: str) -> tuple[tuple[int, str | None, tuple[str, ...]], ...]:
    """Every relative `from ... import ...` of a module (level, module, names), at any
    depth: parsed once per source text (a process that renders several projects, or
    `regen` rendering the recorded and the new revision, reads the same runtime)."""
    import ast

    return tuple(
        (node.level, node.module, tuple(alias.name for alias in node.names))
        for node in ast.walk(pysource.parse(source))
        if isinstance(node, ast.ImportFrom) and node.level >= 1
    )


def _imported(
    package: list[str],
    level: int,
    module: str | None,
    names: tuple[str, ...],
    sources: dict[str, str],
) -> list[str]:
    """The runtime modules a relative `from ... import ...` in `package` names."""
    base = package[: len(package) - (level - 1)] if level > 1 else package
    target = [*base, *(module.split(".") if module else [])]
    path = "/".join(target)
    if path in sources:  # from .room.module import name
        return [path]
    # from .room import module, ... (or from . import module, or from .. import room)
    named = ["/".join([*target, alias]) for alias in names]
    return [
        "/".join([*target, "__init__"]),
        *(name if name in sources else f"{name}/__init__" for name in named),
    ]


def _method_rows(rev: Revision) -> list[dict[str, Any]]:
    """The revision's method table as template rows."""
    return [m._asdict() for m in rev.methods]


def uses_model(manifest: dict[str, Any], role: str) -> bool:
    """An agent whose manifest has `llm`: its runtime carries the model room."""
    return role == "agent" and bool(manifest.get("llm"))


def text_input(manifest: dict[str, Any]) -> bool:
    """The manifest's input is plain text (`type: string`, no enum, const or format): the
    handler gets it as `str` (the runtime's agent/turns.py `_text_input` unwraps the
    validated model; the two say the same)."""
    schema = manifest.get("input")
    return (
        type(schema) is dict
        and schema.get("type") == "string"
        and not {"enum", "const", "format"} & schema.keys()
    )


def input_kind(manifest: dict[str, Any]) -> str:
    """What `prompt` receives: "blocks" (no input schema: the ACP content blocks), "text"
    (a `str`, `text_input`) or "typed" (the manifest's `Input` model)."""
    if not manifest.get("input"):
        return "blocks"
    return "text" if text_input(manifest) else "typed"


def uses_callbacks(manifest: dict[str, Any]) -> bool:
    """Whether the manifest declares async output delivered to a callback URL."""
    modes = manifest.get("output_modes")
    async_mode = modes.get("async") if isinstance(modes, dict) else None
    return isinstance(async_mode, dict) and bool(async_mode.get("callback"))


def _interrupt_rows(manifest: dict[str, Any], mm_names: set[str]) -> list[dict[str, str]]:
    """The client's handler of each manifest interrupt: `interrupt_<name>(payload,
    message) -> <Name>Resume | None`, typed by the manifest models."""
    from ..names import camel, snake

    rows = []
    for spec in manifest.get("interrupts") or ():
        name = str(spec["name"])
        stem = camel(name)
        payload, resume = stem + "Payload", stem + "Resume"
        doc = " ".join(str(spec.get("description") or name).split())
        rows.append(
            {
                "name": name,
                "attr": snake(name, prefix="interrupt_"),
                "doc": doc.replace("\\", "\\\\").replace('"' * 3, "'" * 3),
                "payload_type": f"manifest_models.{payload}" if payload in mm_names else "Any",
                "resume_type": f"manifest_models.{resume}" if resume in mm_names else "Any",
            }
        )
    return rows


def _ptype(cls: str | None, has_models: bool, model_names: set[str]) -> str:
    if cls and has_models and cls in model_names:
        return f"models.{cls}"
    return "dict[str, Any]"


def _model_names(src: str) -> set[str]:
    return set(re.findall(r"^class (\w+)\(", src, flags=re.MULTILINE)) | set(
        re.findall(r"^(\w+) = ", src, flags=re.MULTILINE)
    )


# the names acp.py gives of its own, per role (a manifest model of one of these names stays
# in `manifest_models` only); `Input` / `Output` are the prompt's types there.  An agent's
# client side moved to `_generated/testing/` (its acp.py still answers these names, from
# there, for code written before)
_MOVED_TO_TESTING = frozenset(
    {"AgentConnection", "ClientBase", "content", "prompt_turn", "spawn_agent"}
)
_FACE_NAMES = {
    "agent": {
        "AgentBase", "AgentError", "AgentExited", "BlockContent",
        "ClientCapabilityMissing", "ClientTerminal", "ConnectionClosed",
        "DiffContent", "ExitStatus", "InterruptDeclined", "Location", "McpServer", "McpTool",
        "McpToolError", "McpToolResult", "PermissionKind", "PermissionOption",
        "PermissionOutcome", "PlanEntry", "PlanPriority", "PlanStatus", "ProviderRoute",
        "RpcError", "Session", "SlashCommand", "TerminalContent", "TerminalOutput",
        "TextContent", "ToolCall", "ToolContent", "ToolKind", "ToolStatus", "Turn",
        "git_patch", "mask_url", "run_agent", "run_model",
    },
    "client": {
        "AgentConnection", "AgentError", "AgentExited", "ClientBase", "ConnectionClosed",
        "RpcError", "connect_http", "content", "json_input", "json_of", "negotiate",
        "output_of", "prompt_turn", "spawn_agent", "text_of", "update_of",
    },
}  # fmt: skip


def _face_all(role: str, model: bool, manifest_exports: list[str]) -> list[str]:
    """acp.py's `__all__`, in ruff's order (RUF022: CONSTANTS, Classes, then the rest)."""
    names = (_FACE_NAMES[role] - ({"run_model"} if not model else set())) | set(manifest_exports)
    return sorted(names, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n))


def _manifest_exports(
    mm_names: set[str], input_type: str, output_type: str, role: str
) -> tuple[list[str], list[str]]:
    """The manifest's typed models acp.py re-exports (the public face holds them too), and
    which of `Input` / `Output` are the manifest's own classes (then exported as such,
    else `Input` / `Output` stay the prompt's type aliases, for annotations)."""
    typed_io = [
        name
        for name, alias in (("Input", input_type), ("Output", output_type))
        if alias == f"manifest_models.{name}"
    ]
    taken = _FACE_NAMES[role] | _MOVED_TO_TESTING | {"Input", "Output"}
    exports = {n for n in mm_names if not n.startswith("_") and n not in taken}
    return sorted(exports | set(typed_io)), typed_io


def _models_source(schema: dict[str, Any], meta: Any, label: str) -> str:
    try:
        from ..protocol.models import generate_models
    except ImportError:  # pragma: no cover - until the protocol module lands
        return f'"""Protocol models from {label}: not generated (generator.protocol.models missing)."""\n'
    return str(generate_models(schema, meta=meta, source_label=label))


def _manifest_models_source(manifest: dict[str, Any], label: str) -> str:
    try:
        from ..manifest.models import generate_manifest_models
    except ImportError:  # pragma: no cover - until the manifest module lands
        return f'"""Manifest models from {label}: not generated (generator.manifest.models missing)."""\n'
    return str(generate_manifest_models(manifest, source_label=label))


def render_generated(
    *,
    schema: dict[str, Any],
    meta: dict[str, Any] | None,
    manifest: dict[str, Any],
    role: str,
    transport: str,
    package: str = "agent",
    source_label: str | None = None,
    source: dict[str, Any] | None = None,
    also: tuple[tuple[dict[str, Any], dict[str, Any] | None, str], ...] = (),
) -> dict[str, str]:
    """Every file of `_generated/`, keyed by path relative to it.

    `also`: more protocol revisions the agent serves, as (schema, meta, label).  The
    highest protocol version is the primary one (its models and revision at the top of
    `_generated/`, the typed dispatcher from its method table); each other revision gets
    `_generated/v<N>/` with its own `models.py` and `revision.py`."""
    import jinja2

    if role not in ("agent", "client"):
        raise AgentgenError(f"unknown role {role!r} (agent or client)")
    if transport not in ("stdio", "http"):
        raise AgentgenError(f"unknown transport {transport!r} (stdio or http)")
    from ..manifest.llm import with_llm_options

    # the manifest as the agent serves it: the config options `llm` makes (the model
    # picker, the reasoning level) are its own, in manifest.json and the Config model
    manifest = with_llm_options(manifest)
    label = source_label or "the ACP schema"
    from ..protocol.revision import describe, doc_text, revision_source

    given = [(schema, meta, label), *also]
    described = sorted(
        ((describe(s, m, label=lb), s, m, lb) for s, m, lb in given),
        key=lambda item: item[0].protocol_version,
    )
    versions = [d[0].protocol_version for d in described]
    dup = sorted({v for v in versions if versions.count(v) > 1})
    if dup:
        raise AgentgenError(
            f"more than one schema of protocol version {dup[0]}",
            hint="give one --schema per protocol version (e.g. one v1 and one v2 schema)",
        )
    rev, schema, meta, label = described[-1]
    files: dict[str, str] = {}
    extra_revisions: list[dict[str, str]] = []
    for older, old_schema, old_meta, old_label in described[:-1]:
        pkg = f"v{older.protocol_version}"
        old_rev = describe(old_schema, old_meta, label=old_label, package=pkg)
        files[f"{pkg}/__init__.py"] = (
            f'"""Protocol revision {old_rev.protocol_version} ({doc_text(old_label)}): '
            'its models and revision description. Generated by agentgen: do not edit."""\n'
        )
        files[f"{pkg}/models.py"] = _models_source(old_schema, old_meta, old_label)
        files[f"{pkg}/revision.py"] = ruff_format(
            revision_source(old_rev, runtime="..runtime"), "revision.py"
        )
        extra_revisions.append({"package": pkg, "alias": f"REVISION_{pkg.upper()}"})
    models_src = _models_source(schema, meta, label)
    files["models.py"] = models_src
    mm_src = _manifest_models_source(manifest, "agent.yaml")
    files["manifest_models.py"] = mm_src
    names = _model_names(models_src)
    has_models = bool(names)
    mm_names = _model_names(mm_src)
    files["revision.py"] = ruff_format(revision_source(rev), "revision.py")
    table = _method_rows(rev)
    for m in table:
        m["params_type"] = _ptype(m["params"], has_models, names)
        m["result_type"] = (
            "None" if m["kind"] == "notification" else _ptype(m["result"], has_models, names)
        )
    agent_methods = [m for m in table if m["side"] == "agent"]
    client_methods = [m for m in table if m["side"] == "client"]
    has_mm = bool(mm_names)
    input_type = (
        "str"
        if text_input(manifest) and "Input" in mm_names
        else "manifest_models.Input"
        if manifest.get("input") and "Input" in mm_names
        else ("Any" if manifest.get("input") else "list[dict[str, Any]]")
    )
    output_type = (
        "manifest_models.Output" if manifest.get("output") and "Output" in mm_names else "Any"
    )
    interrupts = _interrupt_rows(manifest, mm_names)
    init_rows = [m for m in agent_methods if m["name"] == "initialize"]
    init_type = init_rows[0]["result_type"] if init_rows else "dict[str, Any]"
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")),
        autoescape=False,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["pyrepr"] = lambda v: json.dumps(v) if isinstance(v, str) else repr(v)
    manifest_exports, typed_io = _manifest_exports(mm_names, input_type, output_type, role)
    ctx = {
        "manifest_exports": manifest_exports,
        "local_testing": [
            *(["manifest_models"] if interrupts and has_mm else []),
            *(["models"] if has_models else []),
        ],
        "face_all": _face_all(role, uses_model(manifest, role), manifest_exports),
        "typed_io": typed_io,
        "source_label": label.replace('"""', "'''"),
        "agent_methods": agent_methods,
        "client_methods": client_methods,
        "has_models": has_models,
        "has_manifest_models": has_mm,
        "input_type": input_type,
        "output_type": output_type,
        "extra_revisions": extra_revisions,
        "interrupts": interrupts,
        "init_type": init_type,
        "role": role,
        "model": uses_model(manifest, role),
    }
    files["dispatcher.py"] = ruff_format(
        env.get_template("dispatcher.py.jinja").render(**ctx), "dispatcher.py"
    )
    files["__init__.py"] = ruff_format(
        env.get_template("init.py.jinja").render(**ctx), "__init__.py"
    )
    files["acp.py"] = ruff_format(env.get_template("acp.py.jinja").render(**ctx), "acp.py")
    # in the author's order: an interrupt form asks its fields in the order written
    files["manifest.json"] = json.dumps(manifest, indent=2, ensure_ascii=False, default=str) + "\n"
    callbacks = role == "agent" and uses_callbacks(manifest)
    files.update(
        runtime_files(
            transport, role, callbacks=callbacks, model=uses_model(manifest, role), testing=True
        )
    )
    if role == "agent":
        files["testing/__init__.py"] = ruff_format(
            env.get_template("testing.py.jinja").render(**ctx), "testing/__init__.py"
        )
    if source is not None:
        files["SOURCE.json"] = json.dumps(source, indent=2, sort_keys=True) + "\n"
    return dict(sorted(files.items()))
