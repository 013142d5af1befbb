"""Load an agent manifest (YAML or JSON, agentgen or AGNTCY shape) with node positions.

`load_manifest(path)` returns a `LoadedManifest`: `.data` in the shape of contract 3
(ARCHITECTURE.md), `.positions` (JSON pointer -> (line, col), 1-based, of each node in the
file), `.source` (the path as given), `.shape` ("agentgen", "agntcy-descriptor" or
"agntcy-oasf") and `.notes` (what an AGNTCY manifest lacks). Unreadable files and syntax
errors raise `AgentgenError` with the file, line and column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AgentgenError, InvalidInput
from . import agntcy
from .positions import Pos, parse_text

AGENTGEN = "agentgen"
MAX_BYTES = 10 * 1024 * 1024


@dataclass
class LoadedManifest:
    data: dict[str, Any]
    positions: dict[str, Pos]
    source: str
    shape: str = AGENTGEN
    notes: list[str] = field(default_factory=list)
    key_positions: dict[str, Pos] = field(default_factory=dict)
    # converted pointer -> pointer in the file (identity for agentgen manifests)
    origin: dict[str, str] = field(default_factory=dict)
    # (pointer in the file, message): shape problems found while converting
    problems: list[tuple[str, str]] = field(default_factory=list)
    # pointer in the file -> position (AGNTCY manifests: the file before conversion)
    source_positions: dict[str, Pos] = field(default_factory=dict)

    def position(self, pointer: str, *, key: bool = False) -> Pos:
        """Where the node at `pointer` is; its nearest located ancestor when it is absent."""
        if key and pointer in self.key_positions:
            return self.key_positions[pointer]
        while pointer not in self.positions and pointer:
            pointer = pointer.rsplit("/", 1)[0]
        return self.positions.get(pointer, (1, 1))

    def file_pointer(self, pointer: str) -> str:
        """The pointer as the file spells it (differs for converted AGNTCY manifests)."""
        return self.origin.get(pointer, pointer)


def read_text(path: Path, source: str) -> str:
    try:
        if path.is_dir():
            raise AgentgenError("is a directory, not a manifest file", source=source)
        if path.stat().st_size > MAX_BYTES:
            raise InvalidInput(f"larger than {MAX_BYTES} bytes", source=source)
        raw = path.read_bytes()
    except FileNotFoundError:
        raise AgentgenError("file not found", source=source) from None
    except OSError as err:
        raise AgentgenError(f"cannot read the file: {err.strerror}", source=source) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        before = raw[: err.start]
        line = before.count(b"\n") + 1
        col = len(before[before.rfind(b"\n") + 1 :].decode("utf-8", "replace")) + 1
        raise InvalidInput("not UTF-8 text", source=source, line=line, col=col) from None


def parse_manifest_text(text: str, *, source: str, as_json: bool) -> LoadedManifest:
    parsed = parse_text(text, source=source, as_json=as_json)
    doc = parsed.value
    if not isinstance(doc, dict):
        line, col = parsed.positions.get("", (1, 1))
        kind = "a list" if isinstance(doc, list) else f"a {type(doc).__name__} scalar"
        raise InvalidInput(
            f"the manifest must be a mapping, not {kind}", source=source, line=line, col=col
        )
    shape = agntcy.detect(doc)
    if shape is None:
        return LoadedManifest(
            data=doc,
            positions=parsed.positions,
            source=source,
            key_positions=parsed.key_positions,
        )
    conv = agntcy.convert(parsed, shape)
    return LoadedManifest(
        data=conv.data,
        positions=conv.positions,
        source=source,
        shape=shape,
        notes=conv.notes,
        key_positions=conv.key_positions,
        origin=conv.origin,
        problems=conv.problems,
        source_positions=parsed.positions,
    )


def load_manifest(path: str | Path) -> LoadedManifest:
    """Read and parse a manifest file; `.json` files are strict JSON, others YAML."""
    source = str(path)
    path = Path(path)
    text = read_text(path, source)
    return parse_manifest_text(text, source=source, as_json=path.suffix.lower() == ".json")
