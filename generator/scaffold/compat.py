"""Which user handlers a regenerated dispatcher breaks, found with `ast` (nothing runs).

The dispatcher's base classes (`AgentBase`, `ClientBase`, any class named `*Base`)
have one method per protocol method, annotated with the model classes of its params
and result. A user class that derives from one of them and defines a method of the
same name is a handler. Comparing the old and the new dispatcher and models:

- the handler's method is gone from the new base: the protocol dropped the method;
- its signature changed (parameters, annotations, return annotation);
- a model in its signature lost a field, or gained a required one: the handler is
  named, and so is every line of it that uses the lost field (as `name=`, `.name` or
  the wire name as a string).

From the schemas (no generated text): a field newly required in a message the project
sends (`newly_required_to_send`), and the messages its tests write by hand that the new
revision would refuse (`check_tests`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import pysource, schemas


@dataclass(frozen=True)
class Signature:
    params: tuple[str, ...]  # "name: annotation" after self
    returns: str
    models: frozenset[str]  # names used in the annotations

    def text(self) -> str:
        return f"({', '.join(self.params)}) -> {self.returns}"


@dataclass(frozen=True)
class Field:
    name: str  # python attribute
    wire: str  # JSON name (alias)
    required: bool


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    message: str

    def __str__(self) -> str:  # line 0: about a file as a whole (the protocol schema)
        if self.line == 0:
            return f"{self.path}: {self.message}"
        return f"{self.path}:{self.line}: {self.message}"


def _names(node: ast.AST | None) -> set[str]:
    out: set[str] = set()
    if node is None:
        return out
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            # string annotations ("PromptRequest")
            try:
                out |= _names(pysource.parse_expression(sub.value))
            except SyntaxError:
                pass
    return out


def _signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Signature:
    args = fn.args
    positional = [*args.posonlyargs, *args.args][1:]  # drop self
    params = [
        f"{a.arg}: {ast.unparse(a.annotation)}" if a.annotation else a.arg
        for a in [*positional, *args.kwonlyargs]
    ]
    if args.vararg:
        params.append("*" + args.vararg.arg)
    if args.kwarg:
        params.append("**" + args.kwarg.arg)
    models: set[str] = set()
    for a in [*positional, *args.kwonlyargs]:
        models |= _names(a.annotation)
    models |= _names(fn.returns)
    returns = ast.unparse(fn.returns) if fn.returns else "None"
    return Signature(tuple(params), returns, frozenset(models))


def base_methods(dispatcher_src: str) -> dict[str, dict[str, Signature]]:
    """`{base class: {method: signature}}` for the dispatcher's `*Base` classes."""
    tree = pysource.parse(dispatcher_src)
    out: dict[str, dict[str, Signature]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name.endswith("Base"):
            out[node.name] = {
                fn.name: _signature(fn)
                for fn in node.body
                if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
                and not fn.name.startswith("_")
            }
    return out


def _field_info(value: ast.expr | None, annotation: ast.expr) -> tuple[str | None, bool]:
    """(alias, required) from `x: T = Field(...)` or `x: Annotated[T, Field(...)]`."""
    alias: str | None = None
    required = value is None
    calls: list[ast.Call] = []
    if isinstance(value, ast.Call):
        calls.append(value)
    if isinstance(annotation, ast.Subscript) and "Annotated" in _names(annotation.value):
        for sub in ast.walk(annotation.slice):
            if isinstance(sub, ast.Call):
                calls.append(sub)
    for call in calls:
        if "Field" not in _names(call.func):
            continue
        for kw in call.keywords:
            if kw.arg in ("alias", "validation_alias") and isinstance(kw.value, ast.Constant):
                alias = str(kw.value.value)
        if call is value:
            has_default = any(kw.arg in ("default", "default_factory") for kw in call.keywords)
            first = call.args[0] if call.args else None
            required = not has_default and (
                first is None or (isinstance(first, ast.Constant) and first.value is Ellipsis)
            )
    return alias, required


def model_fields(models_src: str) -> dict[str, dict[str, Field]]:
    """`{class: {wire name: Field}}` for every class of a generated models module."""
    tree = pysource.parse(models_src)
    out: dict[str, dict[str, Field]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields: dict[str, Field] = {}
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                name = stmt.target.id
                if name == "model_config" or name.startswith("_"):
                    continue
                alias, required = _field_info(stmt.value, stmt.annotation)
                fields[alias or name] = Field(name, alias or name, required)
        out[node.name] = fields
    return out


@dataclass(frozen=True)
class UserMethod:
    path: Path
    cls: str
    base: str
    name: str
    node: ast.FunctionDef | ast.AsyncFunctionDef


_UserClass = tuple[Path, ast.ClassDef, set[str]]  # file, class, names in its bases


def _user_classes(package_dir: Path) -> list[_UserClass]:
    """Every class of the package's modules outside `_generated/`, with the names its
    bases use; modules that do not parse are skipped."""
    classes: list[_UserClass] = []
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(package_dir)
        if rel.parts[0] == "_generated" or "__pycache__" in rel.parts:
            continue
        try:
            tree = pysource.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # not ours to judge; their own tools will say
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes.append((path, node, {n for b in node.bases for n in _names(b)}))
    return classes


def _root_bases(classes: list[_UserClass], bases: set[str]) -> dict[str, str]:
    """Which dispatcher base each class ends up deriving from, by class name."""
    root_of: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for _, node, names in classes:
            if node.name in root_of:
                continue
            direct = sorted(names & bases)
            inherited = sorted(root_of[n] for n in names if n in root_of)
            if direct or inherited:
                root_of[node.name] = (direct or inherited)[0]
                changed = True
    return root_of


def user_methods(package_dir: Path, bases: set[str]) -> list[UserMethod]:
    """Methods of user classes deriving (at any depth) from one of `bases`,
    in the package's modules outside `_generated/`."""
    classes = _user_classes(package_dir)
    root_of = _root_bases(classes, bases)
    found: list[UserMethod] = []
    for path, node, _ in classes:
        base = root_of.get(node.name)
        if base is None:
            continue
        for fn in node.body:
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append(UserMethod(path, node.name, base, fn.name, fn))
    return found


def _uses(fn: ast.AST, field: Field) -> list[int]:
    lines: set[int] = set()
    for sub in ast.walk(fn):
        if isinstance(sub, ast.keyword) and sub.arg == field.name:
            lines.add(sub.value.lineno)
        elif (isinstance(sub, ast.Attribute) and sub.attr == field.name) or (
            isinstance(sub, ast.Constant) and sub.value == field.wire
        ):
            lines.add(sub.lineno)
    return sorted(lines)


def _field_findings(
    where: str,
    um: UserMethod,
    model: str,
    before: dict[str, Field],
    after: dict[str, Field],
) -> list[Finding]:
    """A model in a handler's signature that lost a field (and each line of the handler
    using it) or gained a required one."""
    label = f"{um.cls}.{um.name}"
    findings: list[Finding] = []
    for wire, field in sorted(before.items()):
        if wire not in after:
            findings.append(Finding(where, um.node.lineno, f"{label}: {model} lost field {wire!r}"))
            for line in _uses(um.node, field):
                findings.append(
                    Finding(where, line, f"{label}: uses {model}.{wire}, which is gone")
                )
    for wire, field in sorted(after.items()):
        if field.required and (wire not in before or not before[wire].required):
            findings.append(
                Finding(
                    where,
                    um.node.lineno,
                    f"{label}: {model} has a new required field {wire!r}",
                )
            )
    return findings


def _method_findings(
    where: str,
    um: UserMethod,
    old_sig: Signature,
    new_sig: Signature,
    old_fields: dict[str, dict[str, Field]],
    new_fields: dict[str, dict[str, Field]],
) -> list[Finding]:
    """What breaks a handler whose base method is in both dispatchers: a changed
    signature, and the fields the models of either signature lost or made required."""
    findings: list[Finding] = []
    if old_sig.params != new_sig.params or old_sig.returns != new_sig.returns:
        findings.append(
            Finding(
                where,
                um.node.lineno,
                f"{um.cls}.{um.name}: signature changed from {old_sig.text()} to {new_sig.text()}",
            )
        )
    for model in sorted(old_sig.models | new_sig.models):
        before = old_fields.get(model)
        after = new_fields.get(model)
        if before is None or after is None:
            continue
        findings += _field_findings(where, um, model, before, after)
    return findings


def find_breakage(
    *,
    package_dir: Path,
    root: Path,
    old_dispatcher: str,
    new_dispatcher: str,
    old_models: str,
    new_models: str,
) -> list[Finding]:
    old_bases = base_methods(old_dispatcher)
    new_bases = base_methods(new_dispatcher)
    old_fields = model_fields(old_models)
    new_fields = model_fields(new_models)
    findings: list[Finding] = []

    def rel(path: Path) -> str:
        try:
            return path.relative_to(root).as_posix()
        except ValueError:
            return path.as_posix()

    for um in user_methods(package_dir, set(old_bases) | set(new_bases)):
        old_sig = old_bases.get(um.base, {}).get(um.name)
        new_sig = new_bases.get(um.base, {}).get(um.name)
        where = rel(um.path)
        if old_sig is None:
            continue  # the user's own helper, or a method new in this revision
        if new_sig is None:
            findings.append(
                Finding(
                    where,
                    um.node.lineno,
                    f"{um.cls}.{um.name}: {um.base}.{um.name} is gone from the new dispatcher "
                    "(the protocol revision removed this method)",
                )
            )
            continue
        findings += _method_findings(where, um, old_sig, new_sig, old_fields, new_fields)
    return sorted(set(findings), key=lambda f: (f.path, f.line, f.message))


# -- what the project sends, and what its tests send ---------------------------------------

# (role of the project, side of the method) -> the part of the method this project sends
_SENDS = {
    ("agent", "agent"): "result",
    ("agent", "client"): "params",
    ("client", "agent"): "params",
    ("client", "client"): "result",
}


def sent_definitions(schema: dict[str, Any], role: str) -> dict[str, list[str]]:
    """`{definition: ["initialize params", ...]}`: every definition reachable from what a
    project of `role` ("agent" or "client") sends (params of the requests it makes,
    results of those it answers; both for protocol methods)."""
    from ..protocol.diff import _reachable
    from ..protocol.methods import method_table

    defs = schemas.defs(schema)
    out: dict[str, set[str]] = {}
    for m in method_table(schema).methods:
        parts: tuple[str, ...] = ("params",) if m.side == "protocol" else ()
        part = _SENDS.get((role, m.side))
        parts += (part,) if part else ()
        for part in parts:
            root = m.params if part == "params" else m.result
            for name in _reachable(defs, root):
                out.setdefault(name, set()).add(f"{m.name} {part}")
    return {k: sorted(v) for k, v in out.items()}


@dataclass(frozen=True)
class Required:
    """A field newly required in a message the project sends."""

    owner: str  # the definition (model class) that holds it
    subject: str  # as the revision report names it: "InitializeResponse.info"
    where: str  # the messages it travels in: "initialize result, ..."


def required_to_send(entries: list[Any], schema: dict[str, Any], role: str) -> list[Required]:
    """Each field the new revision requires (added required, or made required) in a
    message a project of `role` sends."""
    sent = sent_definitions(schema, role)
    found: list[Required] = []
    for c in entries:
        required = (c.kind == "field-added" and c.breaking) or c.kind == "field-required"
        if not required:
            continue
        owner = re.split(r"[.\[]", c.subject, maxsplit=1)[0]
        if owner in sent:
            found.append(Required(owner, c.subject, ", ".join(sent[owner][:3])))
    return found


def newly_required_to_send(
    entries: list[Any], schema: dict[str, Any], role: str, source: str
) -> list[Finding]:
    """`required_to_send` as findings about the schema file (no user code consulted)."""
    return [
        Finding(
            source,
            0,
            f"{r.subject} is newly required in what this {role} sends ({r.where}): "
            f"the runtime and any code of yours that builds {r.owner} must send it",
        )
        for r in required_to_send(entries, schema, role)
    ]


def user_references(package_dir: Path, root: Path, names: set[str]) -> dict[str, list[Finding]]:
    """Where the package's own modules (outside `_generated/`) name one of `names`
    (`ContentChunk(...)`, `models.ContentChunk`): code of the user's that builds that
    message. `{name: [Finding(path, line, "")]}`; a name nobody uses is absent."""
    found: dict[str, list[Finding]] = {}
    if not names:
        return found
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(package_dir)
        if rel.parts[0] == "_generated" or "__pycache__" in rel.parts:
            continue
        parsed = _parsed(path, root)
        if parsed is None:
            continue
        tree, shown = parsed
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                name: str | None = node.id
            elif isinstance(node, ast.Attribute):
                name = node.attr
            else:
                continue
            if name in names:
                found.setdefault(name, []).append(Finding(shown, node.lineno, ""))
    return {k: sorted(set(v), key=lambda f: (f.path, f.line)) for k, v in found.items()}


def _parsed(path: Path, root: Path) -> tuple[ast.Module, str] | None:
    """A Python file of the user's, parsed, and its path as shown (relative to the
    project where it can be); None when it cannot be read or parsed."""
    try:
        tree = pysource.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    try:
        return tree, path.relative_to(root).as_posix()
    except ValueError:
        return tree, path.as_posix()


_CALLS = frozenset({"call", "notify", "request", "send_request", "send_notification"})


def check_tests(
    test_files: list[Path], root: Path, old: dict[str, Any] | None, new: dict[str, Any]
) -> list[Finding]:
    """Wire messages the project's tests write by hand (`x.call("initialize", {...})` with
    a literal dict): a field the new revision requires that the dict lacks, or a field it
    sends that the new revision no longer has."""
    from ..protocol.methods import method_table

    new_defs, old_defs = schemas.defs(new), schemas.defs(old or {})
    params = {m.name: m.params for m in method_table(new).methods if m.params}
    old_params = {m.name: m.params for m in method_table(old).methods if m.params} if old else {}
    found: list[Finding] = []
    for path in test_files:
        parsed = _parsed(path, root)
        if parsed is None:
            continue
        tree, shown = parsed
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _CALLS
                and len(node.args) > 1
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and isinstance(node.args[1], ast.Dict)
            ):
                continue
            method, body = node.args[0].value, node.args[1]
            if any(k is None for k in body.keys):  # `**spread`: not ours to judge
                continue
            keys = {
                k.value
                for k in body.keys
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            }
            # a key computed at run time (`rev.init.request_info`) may be any field: what
            # the message lacks is unknown; the constant keys can still be gone
            computed = any(not isinstance(k, ast.Constant) for k in body.keys)
            target = new_defs.get(params.get(method) or "")
            if not isinstance(target, dict) or not isinstance(target.get("properties"), dict):
                continue
            props = target["properties"]
            for name in [] if computed else sorted(set(target.get("required") or []) - keys):
                found.append(
                    Finding(
                        shown,
                        node.lineno,
                        f"sends {method} without {name!r}, which the new revision requires "
                        f"({params[method]}.{name}): add it to the test's message",
                    )
                )
            before = old_defs.get(old_params.get(method) or "")
            before_props = before.get("properties") if isinstance(before, dict) else None
            for name in sorted(keys - set(props)):
                if isinstance(before_props, dict) and name in before_props:
                    found.append(
                        Finding(
                            shown,
                            node.lineno,
                            f"sends {method} with {name!r}, which the new revision no longer "
                            f"has in {params[method]}: remove or rename it in the test",
                        )
                    )
    return sorted(set(found), key=lambda f: (f.path, f.line, f.message))


# what a generated module's third-party import needs, as the project templates declare it
_DISTRIBUTION = {"pydantic_core": "pydantic", "psycopg_pool": "psycopg"}
_MODEL = "pydantic-ai-slim[openai,anthropic,mcp]>=2.78"  # the model's (manifest `llm`)
_REQUIREMENT = {
    "pydantic": "pydantic>=2.11,<3",
    "orjson": "orjson>=3.10",
    "httpx": "httpx>=0.27",
    "starlette": "starlette>=0.40",
    "hypercorn": "hypercorn>=0.17",
    "websockets": "websockets>=13",
    "psycopg": "psycopg[binary,pool]>=3.2",
    "redis": "redis>=5",
    "pydantic_ai": _MODEL,
    "openai": _MODEL,
    "anthropic": _MODEL,
    "mcp": "mcp>=2.0",
}
# an import -> the (distribution, extra) pairs that install it (extra None: the
# distribution alone); an import not listed: the distribution of its own name
_PROVIDERS: dict[str, tuple[tuple[str, str | None], ...]] = {
    "pydantic_ai": (("pydantic-ai-slim", None), ("pydantic-ai", None)),
    **{
        name: ((name, None), ("pydantic-ai-slim", name), ("pydantic-ai", None))
        for name in ("openai", "anthropic", "mcp")
    },
}
# imports of a feature the runtime turns off when they are absent (telemetry: the `otel`
# extra): never a missing dependency
_OPTIONAL = frozenset({"opentelemetry", "prometheus_client"})
_REQ = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(pyproject: dict[str, Any]) -> dict[str, set[str]]:
    """Distribution names in [project] dependencies and every optional group, normalized,
    each with the extras asked of it (`pydantic-ai-slim[openai,mcp]`: openai, mcp)."""
    project = pyproject.get("project") or {}
    reqs = list(project.get("dependencies") or [])
    for group in (project.get("optional-dependencies") or {}).values():
        reqs += list(group or [])
    out: dict[str, set[str]] = {}
    for req in reqs:
        m = _REQ.match(str(req))
        if m:
            extras = {_normal(e.strip()) for e in (m.group(2) or "").split(",") if e.strip()}
            out.setdefault(_normal(m.group(1)), set()).update(extras)
    return out


def _provides(declared: dict[str, set[str]], module: str) -> bool:
    """Whether what the project declares installs `module`."""
    dist = _DISTRIBUTION.get(module, module)
    for name, extra in _PROVIDERS.get(module, ((dist, None),)):
        extras = declared.get(_normal(name))
        if extras is not None and (extra is None or _normal(extra) in extras):
            return True
    return False


def _advice(declared: dict[str, set[str]], module: str) -> str:
    """What to add to [project] dependencies for `module`: the extra of a distribution
    the project declares already, else the template's requirement."""
    for name, extra in _PROVIDERS.get(module, ()):
        if extra is not None and _normal(name) in declared:
            return f'add the extra "{extra}" to "{name}" in [project] dependencies'
    dist = _DISTRIBUTION.get(module, module)
    return f'add "{_REQUIREMENT.get(module, dist)}" to [project] dependencies'


def missing_dependencies(
    pyproject_path: Path, files: dict[str, str], package: str, generated_prefix: str
) -> list[Finding]:
    """One finding per requirement the new generated files need that the project's
    pyproject.toml does not declare (e.g. `runtime/sessions/callbacks.py` and httpx, once
    the manifest declares async output to a callback): the project would install but fail
    at run time.  A distribution's extras count (`pydantic-ai-slim[openai]` installs
    openai); the imports one requirement provides are one finding.  The project's
    pyproject.toml is the user's; it is not edited."""
    import sys
    import tomllib

    try:
        pyproject = tomllib.loads(pyproject_path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return []  # no (readable) pyproject: nothing to compare with
    declared = _declared(pyproject)
    needed: dict[str, str] = {}  # imported top-level module -> the first file importing it
    for rel, src in sorted(files.items()):
        if not rel.endswith(".py"):
            continue
        for node in ast.walk(pysource.parse(src, rel)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in ("__future__", package, *_OPTIONAL):
                    continue
                needed.setdefault(top, rel)
    advice: dict[str, list[str]] = {}  # what to add -> what imports need it
    for module, rel in sorted(needed.items()):
        if not _provides(declared, module):
            shown = _DISTRIBUTION.get(module, module)
            advice.setdefault(_advice(declared, module), []).append(
                f"{generated_prefix}{rel} imports {shown}"
            )
    return [
        Finding(pyproject_path.name, 0, f"{what}: {', '.join(why)}") for what, why in advice.items()
    ]
