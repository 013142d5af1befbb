"""AGNTCY Agent Connect manifests read into agentgen's manifest shape (contract 3).

Two published shapes are recognised:

* the ACP descriptor: `metadata.ref.{name,version,url}`, `metadata.description` and
  `specs.{capabilities,input,output,config,thread_state,interrupts[]}`;
* the OASF agent record: top-level `name`, `version`, `description`, `authors`,
  `locators`, and an `extensions[]` entry whose name ends in `runtime/manifest` holding
  `data.acp` (the same specs) and `data.deployment`.

Each converted node keeps the position of the node it came from, and `origin` maps the
converted pointer back to the pointer in the file, so diagnostics point at what the user
wrote. `notes` says what such a manifest lacks compared with an agentgen manifest.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from ..pointer import tokens as pointer_tokens
from ..pointer import unescape
from .positions import Parsed, Pos, child

DESCRIPTOR = "agntcy-descriptor"
OASF = "agntcy-oasf"

# the names OASF records give the extension holding the ACP specs (older, newer)
RUNTIME_EXTENSIONS = (
    "oasf.agntcy.org/feature/runtime/manifest",
    "schema.oasf.agntcy.org/features/runtime/manifest",
)
_AGENT_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
_INTERRUPT_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")

# What an agentgen manifest carries that neither AGNTCY shape has.
_LACKS = (
    ("errors", "agent errors (codes, transient flags, data schemas)"),
    ("providers", "LLM providers"),
    ("auth", "auth schemes"),
    ("states", "conversation states"),
)


def detect(doc: Any) -> str | None:
    """The AGNTCY shape of a parsed document, or None for an agentgen manifest."""
    if not isinstance(doc, dict):
        return None
    meta = doc.get("metadata")
    if isinstance(meta, dict) and ("specs" in doc or "ref" in meta):
        return DESCRIPTOR
    if "extensions" in doc or ("schema_version" in doc and "locators" in doc):
        return OASF
    return None


def agent_name(raw: str) -> str:
    """`org.agntcy.echo_agent` -> `echo-agent` (the last dotted part, lowercase, hyphens)."""
    last = raw.rsplit(".", 1)[-1] if "." in raw.strip(".") else raw
    name = re.sub(r"[^a-z0-9]+", "-", last.lower()).strip("-")
    if name and not name[0].isalpha():
        name = "agent-" + name
    return name or raw


def interrupt_name(raw: str) -> str:
    name = re.sub(r"[^a-z0-9_]+", "_", raw.lower()).strip("_")
    if name and not name[0].isalpha():
        name = "i_" + name
    return name or raw


@dataclass
class Converted:
    data: dict[str, Any]
    positions: dict[str, Pos] = field(default_factory=dict)
    key_positions: dict[str, Pos] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (source pointer, message)


class _Converter:
    def __init__(self, parsed: Parsed) -> None:
        self.src = parsed
        self.doc: dict[str, Any] = parsed.value
        self.out = Converted({})
        self.out.positions[""] = parsed.positions.get("", (1, 1))
        self.out.origin[""] = ""

    # -- the one mechanism: copy a source subtree (value + positions) to a new pointer --
    def get(self, pointer: str) -> Any:
        node: Any = self.doc
        for raw in pointer.split("/")[1:]:
            token = unescape(raw)
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                return _MISSING
        return node

    def place(self, dst: str, src: str, *, convert: Any = None) -> bool:
        """Put the value at `src` (converted by `convert`) at `dst`; False if absent."""
        found = self.get(src)
        if found is _MISSING:
            return False
        new = convert(found) if convert is not None else found
        self._set(dst, new)
        for table, out in (
            (self.src.positions, self.out.positions),
            (self.src.key_positions, self.out.key_positions),
        ):
            for ptr, pos in table.items():
                if ptr == src or ptr.startswith(src + "/"):
                    out[dst + ptr[len(src) :]] = pos
        for ptr in list(self.src.positions):
            if ptr == src or ptr.startswith(src + "/"):
                self.out.origin[dst + ptr[len(src) :]] = ptr
        return True

    def synth(self, dst: str, value: Any, at: str) -> None:
        """A node that has no source of its own: located at the source node `at`."""
        self._set(dst, value)
        if at in self.src.positions:
            self.out.positions[dst] = self.src.positions[at]
            self.out.origin[dst] = at

    def locate(self, dst: str, src: str) -> None:
        """Give the existing node `dst` the position of the source node `src`."""
        if src in self.src.positions:
            self.out.positions[dst] = self.src.positions[src]
            self.out.origin[dst] = src

    def _set(self, dst: str, value: Any) -> None:
        tokens = pointer_tokens(dst)
        node: Any = self.out.data
        for token in tokens[:-1]:
            node = node[int(token)] if isinstance(node, list) else node.setdefault(token, {})
        if isinstance(node, list):
            node.append(value)
        else:
            node[tokens[-1]] = value

    def note(self, text: str) -> None:
        self.out.notes.append(text)

    # -- the shapes -----------------------------------------------------------------
    def name(self, src: str) -> None:
        raw = self.get(src)
        if isinstance(raw, str) and not _AGENT_NAME.match(raw):
            self.place("/name", src, convert=agent_name)
            self.note(f"name {raw!r} read as {agent_name(raw)!r}")
        else:
            self.place("/name", src)

    def version(self, src: str) -> None:
        def text(v: Any) -> Any:
            return str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v

        self.place("/version", src, convert=text)

    def descriptor(self) -> Converted:
        self.name("/metadata/ref/name")
        self.version("/metadata/ref/version")
        self.place("/description", "/metadata/description")
        if isinstance(self.get("/metadata/ref/url"), str):
            self.synth("/links", {}, "/metadata/ref")
            self.place("/links/homepage", "/metadata/ref/url")
        self.ignored("", ("metadata", "specs"), "descriptor")
        self.ignored("/metadata", ("ref", "description"), "metadata")
        if "specs" in self.doc:
            self.acp("/specs")
        self.lacks("the AGNTCY ACP descriptor")
        return self.out

    def oasf(self) -> Converted:
        self.name("/name")
        self.version("/version")
        self.place("/description", "/description")
        self.place("/authors", "/authors")
        locators = self.doc.get("locators")
        if isinstance(locators, list):
            for i, loc in enumerate(locators):
                if not isinstance(loc, dict) or not isinstance(loc.get("url"), str):
                    continue
                kind = str(loc.get("type", "")).replace("_", "-")
                if kind == "source-code" and "links" not in self.out.data:
                    self.synth("/links", {}, f"/locators/{i}")
                    self.place("/links/repository", f"/locators/{i}/url")
                else:
                    self.note(f"locator {kind or '?'} ({loc['url']}) is not carried")
        known = ("name", "version", "description", "authors", "locators", "extensions")
        self.ignored("", known, "record")
        ext = self.runtime_extension()
        if ext is None:
            self.note("no runtime/manifest extension: no input, output, config or interrupts")
        else:
            if self.get(f"{ext}/data/acp") is not _MISSING:
                self.acp(f"{ext}/data/acp")
            if self.get(f"{ext}/data/deployment") is not _MISSING:
                self.note("data.deployment is not carried: agentgen scaffolds its own deployment")
        self.lacks("the OASF agent record")
        return self.out

    def runtime_extension(self) -> str | None:
        exts = self.doc.get("extensions")
        if not isinstance(exts, list):
            if "extensions" in self.doc:
                self.note("extensions is not a list: ignored")
            return None
        for i, ext in enumerate(exts):
            name = ext.get("name") if isinstance(ext, dict) else None
            if isinstance(name, str) and name.rstrip("/").endswith("runtime/manifest"):
                return f"/extensions/{i}"
        for i, ext in enumerate(exts):  # a near miss is a typo, not "no manifest"
            name = ext.get("name") if isinstance(ext, dict) else None
            if isinstance(name, str):
                close = difflib.get_close_matches(name, RUNTIME_EXTENSIONS, n=1, cutoff=0.8)
                if close:
                    self.out.problems.append(
                        (
                            f"/extensions/{i}/name",
                            (
                                f"unknown extension {name!r}: did you mean {close[0]!r}? "
                                "(the runtime manifest extension, read for input, output, config "
                                "and interrupts)"
                            ),
                        )
                    )
        return None

    def acp(self, base: str) -> None:
        specs = self.get(base)
        if not isinstance(specs, dict):
            self.out.problems.append((base, f"{base.rsplit('/', 1)[-1]} must be a mapping"))
            return
        self.place("/input", f"{base}/input")
        self.place("/output", f"{base}/output")
        if "config" in specs:
            self.synth("/config", {}, f"{base}/config")
            self.place("/config/schema", f"{base}/config")
            self.config_options(f"{base}/config")
        self.capabilities(f"{base}/capabilities")
        self.contradictions(base, specs)
        self.interrupts(f"{base}/interrupts")
        if "thread_state" in specs:
            self.note("thread_state is not carried: an ACP session holds the thread's state")
        known = ("input", "output", "config", "capabilities", "interrupts", "thread_state")
        self.ignored(base, known, "specs")

    def config_options(self, src: str) -> None:
        """ACP session config options from the config schema's scalar properties."""
        props = self.get(f"{src}/properties")
        if not isinstance(props, dict):
            return
        options: list[dict[str, Any]] = []
        for key, prop in props.items():
            option = _option(key, prop)
            if option is not None:
                options.append(option)
        if options:
            self.synth("/config/options", [], f"{src}/properties")
            for i, option in enumerate(options):
                prop = child(f"{src}/properties", option["id"])
                self.synth(f"/config/options/{i}", option, prop)
                for ours, theirs in _OPTION_FROM.items():
                    if ours in option:
                        at = f"{prop}/{theirs}" if theirs else prop
                        self.locate(f"/config/options/{i}/{ours}", at)
            ids = ", ".join(o["id"] for o in options)
            self.note(f"config options derived from the config schema's scalar properties: {ids}")

    def capabilities(self, src: str) -> None:
        caps = self.get(src)
        if caps is _MISSING:
            return
        if not isinstance(caps, dict):
            self.place("/output_modes", src)
            return
        modes: dict[str, Any] = {"sync": True}
        if caps.get("streaming"):
            modes["streaming"] = True
        if caps.get("callbacks") is True:
            modes["async"] = {"callback": True}
        self.synth("/output_modes", modes, src)

    def contradictions(self, base: str, specs: dict[str, Any]) -> None:
        """Specs the declared capabilities rule out, refused as AGNTCY's own validator
        (agntcy-acp) refuses them; a capability left out means false."""
        caps = specs.get("capabilities", {})
        if not isinstance(caps, dict):
            return  # the wrong shape is reported where capabilities are read
        streaming = caps.get("streaming")
        custom = isinstance(streaming, dict) and streaming.get("custom") is True
        at = f"{base}/capabilities"
        if "custom_streaming_update" in specs and not custom:
            self.out.problems.append(
                (
                    f"{base}/custom_streaming_update",
                    (
                        f"custom_streaming_update is declared but {at}/streaming/custom is not true: "
                        "set it to true or drop custom_streaming_update"
                    ),
                )
            )
        if custom and "custom_streaming_update" not in specs:
            self.out.problems.append(
                (
                    f"{at}/streaming/custom",
                    "streaming.custom is true but specs has no custom_streaming_update schema",
                )
            )
        if "thread_state" in specs and caps.get("threads") is not True:
            self.out.problems.append(
                (
                    f"{base}/thread_state",
                    (
                        f"thread_state is declared but {at}/threads is not true: "
                        "set it to true or drop thread_state"
                    ),
                )
            )
        declared = specs.get("interrupts")
        if isinstance(declared, list) and declared and caps.get("interrupts") is not True:
            self.out.problems.append(
                (
                    f"{base}/interrupts",
                    (
                        f"interrupts are declared but {at}/interrupts is not true: "
                        "set it to true or drop the interrupts"
                    ),
                )
            )

    def interrupts(self, src: str) -> None:
        items = self.get(src)
        if items is _MISSING:
            return
        if not isinstance(items, list):
            self.place("/interrupts", src)
            return
        self.synth("/interrupts", [], src)
        for i, item in enumerate(items):
            at, dst = child(src, i), f"/interrupts/{i}"
            if not isinstance(item, dict):
                self.place(dst, at)
                continue
            self.synth(dst, {}, at)
            raw = item.get("interrupt_type")
            if isinstance(raw, str) and not _INTERRUPT_NAME.match(raw):
                self.place(f"{dst}/name", f"{at}/interrupt_type", convert=interrupt_name)
                self.note(f"interrupt {raw!r} read as {interrupt_name(raw)!r}")
            else:
                self.place(f"{dst}/name", f"{at}/interrupt_type")
            self.place(f"{dst}/description", f"{at}/description")
            for ours, theirs in (("payload", "interrupt_payload"), ("resume", "resume_payload")):
                if theirs in item:
                    self.synth(f"{dst}/{ours}", {}, f"{at}/{theirs}")
                    self.place(f"{dst}/{ours}/schema", f"{at}/{theirs}")
            known = ("interrupt_type", "description", "interrupt_payload", "resume_payload")
            self.ignored(at, known, "interrupt")

    def ignored(self, base: str, known: tuple[str, ...], what: str) -> None:
        node = self.get(base)
        if isinstance(node, dict):
            extra = sorted(k for k in node if k not in known)
            if extra:
                self.note(f"{what} keys not carried: {', '.join(extra)}")

    def lacks(self, shape: str) -> None:
        for key, what in _LACKS:
            if key not in self.out.data:
                self.note(f"{shape} has no {what}")


_SCALARS = ("boolean", "string", "integer", "number")


def _option(key: str, prop: Any) -> dict[str, Any] | None:
    if not isinstance(prop, dict) or not re.match(r"^[A-Za-z_][A-Za-z0-9_.-]*$", key):
        return None
    kind = prop.get("type")
    values = prop.get("enum")
    option: dict[str, Any] = {"id": key}
    if isinstance(values, list) and values and all(isinstance(v, str) for v in values):
        option.update(type="choice", values=list(dict.fromkeys(values)))
    elif kind in _SCALARS:
        option["type"] = kind
    else:
        return None
    if isinstance(prop.get("title"), str):
        option["name"] = prop["title"]
    if isinstance(prop.get("description"), str):
        option["description"] = prop["description"]
    default = prop.get("default", _MISSING)
    if default is not _MISSING and (default in option.get("values", [default])):
        option["default"] = default  # a default outside the enum: the schema check reports it
    return option


# option key -> the config schema property's key it is read from
_OPTION_FROM = {"id": "", "type": "type", "values": "enum", "name": "title", "default": "default"}


class _Missing:
    pass


_MISSING: Any = _Missing()


def convert(parsed: Parsed, shape: str) -> Converted:
    """Read a parsed AGNTCY document (`shape` from `detect`) into contract 3."""
    conv = _Converter(parsed)
    return conv.descriptor() if shape == DESCRIPTOR else conv.oasf()
