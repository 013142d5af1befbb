"""The registry's rules for one entry, as its FORMAT.md, agent.schema.json and the ACP RFD
"acp-agent-registry" publish them (our own implementation, not a copy of its CI).

Each check yields `Finding(pointer, message)` (or, for the icon, a line and column); the
caller turns them into `file:line:col: /pointer: message` lines.
"""

from __future__ import annotations

import re
import xml.parsers.expat
from collections.abc import Iterator
from typing import Any, NamedTuple

ID = re.compile(r"[a-z][a-z0-9-]*")
# Semantic Versioning 2.0.0 (semver.org), pre-release and build metadata included
SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(?:\+[0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*)?"
)
REQUIRED = ("id", "name", "version", "description", "distribution")
OPTIONAL = ("repository", "authors", "license", "icon")
PLATFORMS = (
    "darwin-aarch64",
    "darwin-x86_64",
    "linux-aarch64",
    "linux-x86_64",
    "windows-aarch64",
    "windows-x86_64",
)
OS_FAMILIES = ("darwin", "linux", "windows")
ICON_SIZE = 16
ICON_COLOURS = ("currentcolor", "none", "inherit")  # what fill/stroke may say


class Finding(NamedTuple):
    pointer: str
    message: str
    line: int | None = None
    col: int | None = None


def id_problem(value: str) -> str | None:
    if ID.fullmatch(value):
        return None
    return (
        f"id {value!r} must be lowercase letters, digits and hyphens, starting with a letter "
        "(^[a-z][a-z0-9-]*$)"
    )


def version_problem(value: str) -> str | None:
    if SEMVER.fullmatch(value):
        return None
    return f"version {value!r} is not a semantic version (MAJOR.MINOR.PATCH, e.g. 1.0.0)"


def license_problem(value: str) -> str | None:
    """None when `value` is `proprietary` or a valid SPDX license expression."""
    if value == "proprietary":
        return None
    from packaging.licenses import InvalidLicenseExpression, canonicalize_license_expression

    try:
        canonicalize_license_expression(value)
    except InvalidLicenseExpression:
        return (
            f"license {value!r} is neither an SPDX license identifier (e.g. MIT, Apache-2.0) "
            "nor 'proprietary'"
        )
    return None


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _env(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _package(dist: Any, where: str) -> Iterator[Finding]:
    if not isinstance(dist, dict):
        yield Finding(where, "must be an object {package, args?, env?}")
        return
    package = dist.get("package")
    if not isinstance(package, str) or not package:
        yield Finding(where, "has no 'package' (the package name, with an optional version)")
    for key in dist:
        if key not in ("package", "args", "env"):
            yield Finding(f"{where}/{key}", "unknown field (package, args, env are allowed)")
    if "args" in dist and not _strings(dist["args"]):
        yield Finding(f"{where}/args", "must be a list of strings")
    if "env" in dist and not _env(dist["env"]):
        yield Finding(f"{where}/env", "must be an object of string values")
    if isinstance(package, str) and "@latest" in package.lower():
        yield Finding(f"{where}/package", "uses '@latest': pin the entry's version instead")


def _binary(dist: Any, where: str) -> Iterator[Finding]:
    if not isinstance(dist, dict) or not dist:
        yield Finding(where, "must be a non-empty object keyed by platform")
        return
    for platform, target in dist.items():
        at = f"{where}/{platform}"
        if platform not in PLATFORMS:
            yield Finding(at, f"unknown platform (one of {', '.join(PLATFORMS)})")
            continue
        if not isinstance(target, dict):
            yield Finding(at, "must be an object {archive, cmd, args?, env?}")
            continue
        for key in ("archive", "cmd"):
            if not isinstance(target.get(key), str) or not target.get(key):
                yield Finding(at, f"has no '{key}'")
    families = {p.split("-")[0] for p in dist if p in PLATFORMS}
    missing = [f for f in OS_FAMILIES if f not in families]
    if missing:
        yield Finding(where, "needs a build for every OS: missing " + ", ".join(missing))


def entry_findings(entry: Any, folder: str) -> Iterator[Finding]:
    """Problems of `agent.json` (already parsed) in the folder named `folder`."""
    if not isinstance(entry, dict):
        yield Finding("", "agent.json must be a JSON object")
        return
    yield from _fields(entry)
    yield from _values(entry, folder)
    if "distribution" in entry:
        yield from _distribution(entry["distribution"], entry.get("version"))


def _fields(entry: dict[str, Any]) -> Iterator[Finding]:
    """Required fields present, no unknown one, the string fields non-empty strings."""
    for key in REQUIRED:
        if key not in entry:
            yield Finding("", f"missing required field '{key}'")
    for key in entry:
        if key not in REQUIRED and key not in OPTIONAL:
            yield Finding(f"/{key}", "unknown field")
    for key in ("id", "name", "version", "description", "license", "icon", "repository"):
        if key in entry and (not isinstance(entry[key], str) or not entry[key]):
            yield Finding(f"/{key}", "must be a non-empty string")
    if "authors" in entry and not _strings(entry["authors"]):
        yield Finding("/authors", "must be a list of strings")


def _text(entry: dict[str, Any], key: str) -> str | None:
    value = entry.get(key)
    return value if isinstance(value, str) and value else None


def _values(entry: dict[str, Any], folder: str) -> Iterator[Finding]:
    """The id (its pattern, equal to the folder), semver, the license, the repository URL."""
    agent_id = _text(entry, "id")
    if agent_id is not None:
        problem = id_problem(agent_id)
        if problem:
            yield Finding("/id", problem)
        elif agent_id != folder:
            yield Finding("/id", f"id {agent_id!r} must equal its folder's name {folder!r}")
    for key, check in (("version", version_problem), ("license", license_problem)):
        value = _text(entry, key)
        problem = check(value) if value is not None else None
        if problem:
            yield Finding(f"/{key}", problem)
    repo = _text(entry, "repository")
    if repo is not None and not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*://\S+$", repo):
        yield Finding("/repository", f"repository {repo!r} is not a URL")


def _distribution(dist: Any, version: Any) -> Iterator[Finding]:
    """At least one known distribution, each well formed; a uvx pin equal to the version."""
    if not isinstance(dist, dict) or not dist:
        yield Finding("/distribution", "must name at least one of binary, npx, uvx")
        return
    for kind, value in dist.items():
        where = f"/distribution/{kind}"
        if kind == "binary":
            yield from _binary(value, where)
        elif kind in ("npx", "uvx"):
            yield from _package(value, where)
        else:
            yield Finding(where, "unknown distribution (binary, npx, uvx)")
    uvx = dist.get("uvx")
    if isinstance(uvx, dict) and isinstance(uvx.get("package"), str) and isinstance(version, str):
        pinned = re.search(r"(?:==|@)([0-9][^\s,;]*)", uvx["package"])
        if pinned and pinned.group(1) != version:
            yield Finding(
                "/distribution/uvx/package",
                f"pins version {pinned.group(1)} but the entry's version is {version}",
            )


def _size(value: str | None) -> float | None:
    if value is None:
        return None
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(?:px)?\s*", value)
    return float(m.group(1)) if m else None


def _icon_size(attrs: dict[str, str], line: int, col: int) -> Iterator[Finding]:
    """16x16 by width/height, else by the viewBox."""
    width, height = _size(attrs.get("width")), _size(attrs.get("height"))
    if width is None or height is None:
        box = (attrs.get("viewBox") or "").replace(",", " ").split()
        try:
            width, height = float(box[2]), float(box[3])
        except (IndexError, ValueError):
            yield Finding("", "the <svg> has no width/height and no viewBox", line, col)
            width = height = None
    if width is not None and height is not None and (width, height) != (ICON_SIZE, ICON_SIZE):
        yield Finding(
            "",
            f"the icon is {width:g}x{height:g}: it must be {ICON_SIZE}x{ICON_SIZE} "
            "(width/height, else viewBox)",
            line,
            col,
        )


def icon_findings(text: str) -> Iterator[Finding]:
    """Problems of an icon.svg: SVG, 16x16 (width/height, else viewBox), monochrome: every
    fill and stroke `currentColor` or `none` (in attributes and style attributes), and
    `currentColor` used."""
    root: list[tuple[str, dict[str, str], int, int]] = []
    colours: list[Finding] = []
    used = False
    parser = xml.parsers.expat.ParserCreate()

    def start(name: str, attrs: dict[str, str]) -> None:
        nonlocal used
        line, col = parser.CurrentLineNumber, parser.CurrentColumnNumber + 1
        if not root:
            root.append((name, attrs, line, col))
        paints = [(k, v) for k, v in attrs.items() if k in ("fill", "stroke")]
        for decl in (attrs.get("style") or "").split(";"):
            key, _, value = decl.partition(":")
            if key.strip().lower() in ("fill", "stroke"):
                paints.append((f"style {key.strip().lower()}", value))
        for key, value in paints:
            v = value.strip().lower()
            used = used or v == "currentcolor"
            if v not in ICON_COLOURS:
                colours.append(
                    Finding(
                        "",
                        f"<{name}> has {key}={value.strip()!r}: an icon is monochrome "
                        "(currentColor or none)",
                        line,
                        col,
                    )
                )

    parser.StartElementHandler = start
    try:
        parser.Parse(text, True)
    except xml.parsers.expat.ExpatError as exc:
        yield Finding(
            "",
            f"not well-formed SVG: {xml.parsers.expat.errors.messages[exc.code]}",
            exc.lineno,
            exc.offset + 1,
        )
        return
    if not root or root[0][0].rpartition(":")[2] != "svg":
        yield Finding("", "the icon is not an SVG (its root element is not <svg>)", 1, 1)
        return
    _, attrs, line, col = root[0]
    yield from _icon_size(attrs, line, col)
    yield from colours
    if not used and "currentcolor" not in text.lower():
        yield Finding(
            "", "the icon never uses currentColor (fill or stroke): clients theme it", line, col
        )
