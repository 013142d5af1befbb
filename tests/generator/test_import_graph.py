"""The module graph of agentgen's own code has no import cycle.

Every import counts: at module level, under `if TYPE_CHECKING:` and inside functions
(a lazy import still ties two modules together for a reader). The graph is read with
`ast`, so nothing is imported to build it.

The agent runtime's collaborators (turns, interrupts, providers, config, commands) share
an `AgentContext` (context.py) and know nothing of `AgentRuntime`, which composes them.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# (package folder, dotted name it is imported as)
PACKAGES = [(REPO / "generator", "generator"), (REPO / "templates" / "runtime", "runtime")]

# the runtime's modules that AgentRuntime composes: none of them imports agent.py (or the
# dispatcher), so each can be read, and used, on its own
COLLABORATORS = (
    "runtime.agent.commands",
    "runtime.agent.config",
    "runtime.agent.context",
    "runtime.agent.interrupts",
    "runtime.agent.providers",
    "runtime.agent.turns",
)


def _module_name(path: Path, root: Path, dotted: str) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = [dotted, *rel.parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(current: str, is_pkg: bool, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    base = current.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def import_graph() -> dict[str, set[str]]:
    files: dict[str, Path] = {}
    for root, dotted in PACKAGES:
        for path in root.rglob("*.py"):
            if "_data" in path.parts:
                continue
            files[_module_name(path, root, dotted)] = path
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                # `from . import x` imports the module x; `from .m import f` the module m
                base = _resolve(name, is_pkg, node.level, node.module)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in files else base)
            for dotted_target in targets:
                target = dotted_target
                while target not in files and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in files and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_lazy_and_type_checking_imports() -> None:
    graph = import_graph()
    # render imports the manifest models lazily, inside a function
    assert "generator.codegen" in graph["generator.render"]
    assert "generator.names" in graph["generator.render"]


def test_cycle_finder_finds_a_planted_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == {frozenset({"a", "b", "c"})}


def test_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, [sorted(c) for c in found]


def test_the_agent_runtime_collaborators_do_not_import_it() -> None:
    graph = import_graph()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    for module in COLLABORATORS:
        assert not reach(module) & {"runtime.agent.agent", "runtime.agent.dispatch"}, module


# ---- the runtime's rooms (templates/runtime/<room>/, ARCHITECTURE.md "The runtime's rooms")
# which rooms each room may import: the dependency direction, lowest first
ROOM_MAY_IMPORT: dict[str, set[str]] = {
    "observe": set(),  # a leaf every room calls (traces and metrics: nothing else of ours)
    "wire": {"observe"},
    "agent": {"wire", "observe"},
    "client": {"wire", "observe"},
    "sessions": {"wire", "agent", "observe"},
    "console": {"wire", "client", "observe"},
    "http": {"wire", "agent", "sessions", "observe"},
    "model": {"wire", "agent", "observe"},
}
MAX_ROOM_MODULES = 15


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "runtime" and len(parts) == 2 and parts[1] in ROOM_MAY_IMPORT:
        return parts[1]  # a room's package itself (`from .. import observe`)
    return parts[1] if parts[0] == "runtime" and len(parts) > 2 else None


def room_violations(graph: dict[str, set[str]]) -> list[str]:
    """Each import from one room into a room it may not import, as `a -> b`."""
    bad = []
    for module, targets in sorted(graph.items()):
        room = _room(module)
        if room is None:
            continue  # the runtime's top (serve.py, the package face) may import any room
        for target in sorted(targets):
            other = _room(target)
            if other is None and target.startswith("runtime"):
                bad.append(f"{module} -> {target} (the top of the runtime)")
            elif other is not None and other != room and other not in ROOM_MAY_IMPORT[room]:
                bad.append(f"{module} -> {target}")
    return bad


def test_every_runtime_module_is_in_a_known_room() -> None:
    runtime = REPO / "templates" / "runtime"
    rooms = {p.name for p in runtime.iterdir() if (p / "__init__.py").is_file()}
    assert rooms == set(ROOM_MAY_IMPORT), rooms
    loose = sorted(p.name for p in runtime.glob("*.py"))
    assert loose == ["__init__.py", "serve.py"], loose


def test_no_room_imports_one_above_it() -> None:
    assert room_violations(import_graph()) == []


def test_the_room_check_finds_a_planted_upward_import() -> None:
    graph = {
        "runtime.wire.jsonrpc": {"runtime.sessions.store"},
        "runtime.agent.turns": {"runtime.wire.errors"},
        "runtime.client.client": {"runtime.serve"},
    }
    assert room_violations(graph) == [
        "runtime.client.client -> runtime.serve (the top of the runtime)",
        "runtime.wire.jsonrpc -> runtime.sessions.store",
    ]


def test_rooms_stay_small_and_say_what_they_hold() -> None:
    """At most 15 modules a room, each room's `__init__` a docstring (a module's own size
    bound: tests/generator/test_house.py)."""
    runtime = REPO / "templates" / "runtime"
    for room in ROOM_MAY_IMPORT:
        modules = [p for p in (runtime / room).glob("*.py") if p.name != "__init__.py"]
        assert len(modules) <= MAX_ROOM_MODULES, (room, len(modules))
        doc = ast.get_docstring(ast.parse((runtime / room / "__init__.py").read_text()))
        assert doc, f"{room}/__init__.py says what the room holds"


def test_an_agents_runtime_carries_no_client() -> None:
    """Issue 37 item 12: a stdio agent shipped the client core (client/client.py and 7
    more) because its generated tests drive it through it. What an agent imports at run
    time has no client room (nor console); the client its tests use is test-only
    (`testing=True`: rendered beside it, left out of its wheel by its pyproject.toml)."""
    from generator.render import runtime_files

    for transport in ("stdio", "http"):
        shipped = runtime_files(transport, "agent")
        assert not [f for f in shipped if f.startswith(("runtime/client/", "runtime/console/"))]
        test_only = set(runtime_files(transport, "agent", testing=True)) - set(shipped)
        assert test_only, transport
        assert all(f.startswith("runtime/client/") for f in test_only), sorted(test_only)
    graph = import_graph()
    agent_side = [
        m
        for m in graph
        if m.startswith(("runtime.agent", "runtime.sessions", "runtime.http", "runtime.model"))
    ]
    for module in [*agent_side, "runtime.serve"]:
        assert not [t for t in graph[module] if t.startswith("runtime.client")], module


# ---- the conformance kit (generator/conform/, ARCHITECTURE.md): a room of its own beside
# inspect/, sharing the revision description and the wire check (loaded by schema_link.py
# from the runtime's wire/ room), never the runtime's internals nor the inspector's
CONFORM_MAY_IMPORT = frozenset(
    {
        "generator.errors",
        "generator.files",
        "generator.packaged",
        "generator.protocol.models",  # the models the wire check validates with
        "generator.protocol.revision",  # describe(): the revision description
        "generator.protocol.runtime_revision",  # its types (the runtime's revision.py)
        "generator.scaffold.inputs",  # --schema, as every command reads it
        "generator.scaffold.project",  # agentgen's version (the models cache key)
    }
)


def conform_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports out of generator/conform/ beyond what it may share, and imports of it from
    anywhere but the command line."""
    bad = []
    for module, targets in sorted(graph.items()):
        inside = module.startswith("generator.conform")
        for target in sorted(targets):
            if (
                inside
                and not target.startswith("generator.conform")
                and target not in CONFORM_MAY_IMPORT
            ):
                bad.append(f"{module} -> {target}")
            if not inside and target.startswith("generator.conform") and module != "generator.cli":
                bad.append(f"{module} -> {target}")
    return bad


def test_the_conformance_kit_shares_only_the_revision_and_the_wire_check() -> None:
    graph = import_graph()
    assert "generator.conform.schema_link" in graph
    assert conform_violations(graph) == []


def test_the_conform_check_finds_a_planted_import() -> None:
    graph = {
        "generator.conform.engine": {
            "generator.inspect.runtime_link",
            "generator.conform.catalogue",
        },
        "generator.inspect.bridge": {"generator.conform.transcript"},
        "generator.conform.schema_link": {"generator.protocol.revision"},
    }
    assert conform_violations(graph) == [
        "generator.conform.engine -> generator.inspect.runtime_link",
        "generator.inspect.bridge -> generator.conform.transcript",
    ]
