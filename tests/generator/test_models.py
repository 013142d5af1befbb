"""Protocol models (contract 2) for every upstream schema revision.

The models are generated once per revision (module fixture), written to a temporary
directory, imported, type-checked by one mypy run, and exercised with the message
corpus of tests/cases/messages/<revision>/ (messages we wrote).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from numbered import ambiguous_unicode
from pydantic import BaseModel, RootModel, ValidationError

from generator.codegen import ruff_format
from generator.errors import AgentgenError
from generator.protocol.methods import method_table
from generator.protocol.models import generate_models, run_models

REVISIONS = {
    "legacy": "legacy/schema.json",
    "v1": "v1/schema.json",
    "v1-unstable": "v1/schema.unstable.json",
    "v2": "v2/schema.json",
    "v2-2.4.0": "v2-2.4.0/schema.json",  # the draft as users get it (npm 2.4.0)
}
CASES = Path(__file__).resolve().parents[1] / "cases" / "messages"
NUMBERED = re.compile(r"^(?:class (\w*?\d+)\(|(\w*?[A-Za-z]\d+) = )", re.MULTILINE)


def _canon(data: Any) -> str:
    return json.dumps(data, sort_keys=True, ensure_ascii=False)


def _dump(obj: BaseModel) -> Any:
    return obj.model_dump(by_alias=True, exclude_unset=True, mode="json")


class Generated:
    def __init__(
        self, rev: str, schema: dict[str, Any], source: str, module: ModuleType, path: Path
    ):
        self.rev, self.schema, self.source, self.module, self.path = (
            rev,
            schema,
            source,
            module,
            path,
        )

    @property
    def defs(self) -> dict[str, Any]:
        return dict(self.schema["$defs"])


@pytest.fixture(scope="module", autouse=True)
def _afresh() -> Iterator[None]:
    """The models' own tests render them afresh: not from the run's models cache
    (tests/conftest.py), which `test_the_models_cache_*` tests on its own."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTGEN_MODELS_CACHE", "off")
        yield


@pytest.fixture(scope="module")
def generated(shared_acp: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Generated]:
    out_dir = tmp_path_factory.mktemp("acp_models")
    result: dict[str, Generated] = {}
    for rev, rel in REVISIONS.items():
        schema = json.loads((shared_acp / rel).read_text())
        source = generate_models(schema, source_label=f"acp/{rel}")
        name = "acp_models_" + rev.replace("-", "_")
        path = out_dir / f"{name}.py"
        path.write_text(source)
        result[rev] = Generated(rev, schema, source, _load_path(name, path), path)
    return result


# ----------------------------------------------------------------------------- shape


@pytest.mark.parametrize("rev", list(REVISIONS))
def test_every_definition_is_a_class_of_the_same_name(
    generated: dict[str, Generated], rev: str
) -> None:
    g = generated[rev]
    missing = [name for name in g.defs if not isinstance(getattr(g.module, name, None), type)]
    assert missing == []
    for m in method_table(g.schema).methods:
        for cls in (m.params, m.result):
            if cls:
                assert hasattr(getattr(g.module, cls), "model_validate"), cls


@pytest.mark.parametrize("rev", list(REVISIONS))
def test_models_are_built_at_first_use_with_their_fields_read_at_import(
    generated: dict[str, Generated], rev: str
) -> None:
    """Importing the module builds no validator of an object model or tagged union (a
    process uses a few of ~400), yet every model's fields, aliases included, are read
    (classes after the classes they name): `model_fields` is right before first use."""
    g = generated[rev]
    name = f"acp_models_fresh_{rev.replace('-', '_')}"
    try:
        mod = _load_path(name, g.path)
        ours = [
            v
            for v in vars(mod).values()
            if isinstance(v, type)
            and issubclass(v, mod.AcpModel | mod.AcpUnion)
            and v not in (mod.AcpModel, mod.AcpUnion)
        ]
        assert len(ours) > 50
        assert [c.__name__ for c in ours if c.__pydantic_complete__] == []
        assert [c.__name__ for c in ours if not c.__pydantic_fields_complete__] == []
        block = mod.TextContentBlock.model_validate({"type": "text", "text": "hi"})
        assert mod.TextContentBlock.__pydantic_complete__ and block.text == "hi"
    finally:
        sys.modules.pop(name, None)


def test_a_model_that_names_itself_keeps_postponed_annotations(tmp_path: Path) -> None:
    """The protocol's classes each follow the classes they name, so their annotations
    are evaluated as they are made; a schema whose model names itself (a tree) gets
    `from __future__ import annotations` back, and its models import and validate."""
    node = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
        },
    }
    for defs, postponed in (({"Node": node}, True), ({"Id": {"type": "string"}}, False)):
        source = generate_models({"$defs": defs}, source_label="a tree")
        assert ("from __future__ import annotations" in source) is postponed
        name = f"acp_tree_{postponed}"
        try:
            mod = _load_source(name, source, tmp_path)
            if postponed:
                tree = mod.Node.model_validate({"name": "a", "children": [{"name": "b"}]})
                assert tree.children[0].name == "b"
            else:
                assert mod.Id.model_validate("x").root == "x"
        finally:
            sys.modules.pop(name, None)


@pytest.mark.parametrize("rev", list(REVISIONS))
def test_no_numbered_class_names(generated: dict[str, Generated], rev: str) -> None:
    src = generated[rev].source
    assert NUMBERED.findall(src) == []
    # the regex itself finds what it is meant to find
    assert NUMBERED.findall("class ContentBlock1(RootModel[int]):\nSessionUpdate4 = int\n")


@pytest.mark.parametrize("rev", list(REVISIONS))
def test_object_models_share_one_base(generated: dict[str, Generated], rev: str) -> None:
    mod = generated[rev].module
    base = mod.AcpModel
    assert base.model_config.get("populate_by_name") is True
    assert base.model_config.get("extra") == "allow"
    classes = [v for v in vars(mod).values() if isinstance(v, type) and issubclass(v, BaseModel)]
    others = [
        c.__name__
        for c in classes
        if c is not base
        and not issubclass(c, RootModel)
        and c.__module__ == mod.__name__
        and not issubclass(c, base)
    ]
    assert others == []
    assert sum(1 for c in classes if issubclass(c, base)) > 50


@pytest.mark.parametrize("rev", list(REVISIONS))
def test_snake_case_attributes_with_exact_aliases(
    generated: dict[str, Generated], rev: str
) -> None:
    g = generated[rev]
    snake = re.compile(r"^[a-z_][a-z0-9_]*$")
    for name, schema in g.defs.items():
        props = schema.get("properties") if isinstance(schema, dict) else None
        cls = getattr(g.module, name)
        if not props or not issubclass(cls, g.module.AcpModel):
            continue
        wire = {(f.alias or attr): attr for attr, f in cls.model_fields.items()}
        for prop in props:
            assert prop in wire, f"{name}.{prop} has no field"
            assert snake.match(wire[prop]), f"{name}.{prop} -> {wire[prop]}"
        if "_meta" in props:
            assert wire["_meta"] in ("field_meta", "meta")


@pytest.mark.parametrize("rev", list(REVISIONS))
def test_required_nullable_fields_stay_required(generated: dict[str, Generated], rev: str) -> None:
    g = generated[rev]
    checked = 0
    for name, schema in g.defs.items():
        if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
            continue
        cls = getattr(g.module, name)
        if not issubclass(cls, g.module.AcpModel):
            continue
        fields = {(f.alias or a): f for a, f in cls.model_fields.items()}
        for prop in schema.get("required", []):
            sub = schema["properties"][prop]
            types = sub.get("type")
            nullable = (isinstance(types, list) and "null" in types) or any(
                isinstance(m, dict) and m.get("type") == "null" for m in sub.get("anyOf", [])
            )
            if nullable:
                assert fields[prop].is_required(), f"{name}.{prop}"
                checked += 1
        for prop, field in fields.items():
            if prop in schema.get("required", []):
                assert field.is_required(), f"{name}.{prop}"
    assert checked >= 0  # upstream has no required-nullable field today: see the synthetic test


def _load_source(name: str, source: str, tmp_path: Path) -> ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return _load_path(name, path)


def _load_path(name: str, path: Path) -> ModuleType:
    """The module at `path`, imported as `name` (in sys.modules: pydantic resolves its
    models' names there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_required_nullable_synthetic(tmp_path: Path) -> None:
    schema = {
        "$defs": {
            "Turn": {
                "type": "object",
                "properties": {
                    "reason": {"type": ["string", "null"]},
                    "parent": {"anyOf": [{"$ref": "#/$defs/Turn"}, {"type": "null"}]},
                    "note": {"type": ["string", "null"]},
                    "port": {"type": "integer", "format": "uint16"},
                },
                "required": ["reason", "parent"],
            }
        }
    }
    mod = _load_source("acp_models_synthetic", generate_models(schema), tmp_path)
    fields = mod.Turn.model_fields
    assert fields["reason"].is_required() and fields["parent"].is_required()
    assert not fields["note"].is_required()
    with pytest.raises(ValidationError):
        mod.Turn.model_validate({"reason": None})  # parent is missing, null would do
    ok = {"reason": None, "parent": None, "port": 65535}
    assert _dump(mod.Turn.model_validate(ok)) == ok
    with pytest.raises(ValidationError):
        mod.Turn.model_validate({**ok, "port": 65536})


@pytest.mark.parametrize("rev", list(REVISIONS))
def test_integer_formats_get_ranges(generated: dict[str, Generated], rev: str) -> None:
    g = generated[rev]
    checked = 0
    for name, schema in g.defs.items():
        fmt = schema.get("format") if isinstance(schema, dict) else None
        m = re.fullmatch(r"(u?)int(\d+)", fmt or "")
        if not m or schema.get("type") != "integer":
            continue
        bits = int(m.group(2))
        lo, hi = (0, 2**bits - 1) if m.group(1) else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        cls = getattr(g.module, name)
        assert cls.model_validate(hi).root == hi
        assert cls.model_validate(lo).root == lo
        for bad in (hi + 1, lo - 1):
            with pytest.raises(ValidationError):
                cls.model_validate(bad)
        checked += 1
    assert checked > 0


def test_generation_is_deterministic_and_formatted(
    shared_acp: Path, generated: dict[str, Generated]
) -> None:
    schema = json.loads((shared_acp / REVISIONS["v1-unstable"]).read_text())
    again = generate_models(schema, source_label="acp/v1/schema.unstable.json")
    assert again == generated["v1-unstable"].source
    assert ruff_format(again, "models.py") == again
    head = again.split("\n\n", 1)[0]
    assert "agentgen" in head and "acp/v1/schema.unstable.json" in head and "Do not edit" in again
    assert not re.search(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}", head)  # no timestamp


def test_upstream_text_passes_the_projects_ruff(generated: dict[str, Generated]) -> None:
    """Issue 37 item 10: the v1 schema of npm 2.0.0 says `isn\u2019t`; a fresh project's
    `ruff check` (RUF001-RUF003) failed on its models.py."""
    for rev, gen in generated.items():
        assert ambiguous_unicode(gen.source) == "", rev
    assert "title isn't present" in generated["v1"].source


@pytest.mark.slow
def test_generated_modules_pass_mypy(generated: dict[str, Generated]) -> None:
    paths = [str(g.path) for g in generated.values()]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--follow-imports=silent",
            *paths,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


# ----------------------------------------------------------------------------- corpus


def _cases() -> list[tuple[str, Path]]:
    return [(rev, p) for rev in REVISIONS for p in sorted((CASES / rev).glob("*.json"))]


@pytest.mark.parametrize(("rev", "path"), _cases(), ids=lambda v: getattr(v, "name", v))
def test_corpus_round_trips(generated: dict[str, Generated], rev: str, path: Path) -> None:
    case = json.loads(path.read_text())
    cls = getattr(generated[rev].module, case["type"])
    obj = cls.model_validate(case["message"])
    assert _canon(_dump(obj)) == _canon(case["message"])
    if "parses_as" in case:  # the member class a union chose (its `.root`, unwrapped)
        member: Any = obj
        while isinstance(member, RootModel):
            member = member.root
        assert type(member).__name__ == case["parses_as"]


def _update_union(g: Generated) -> tuple[str, str, str]:
    """(notification params class, session update union def, content block union def)."""
    table = method_table(g.schema)
    notif = table.get("session/update")
    prompt = table.get("session/prompt")
    assert notif and notif.params and prompt and prompt.params
    defs = g.defs

    def ref_of(node: dict[str, Any]) -> str:
        if "$ref" in node:
            return str(node["$ref"]).rsplit("/", 1)[-1]
        return ref_of(node["allOf"][0])

    update = ref_of(defs[notif.params]["properties"]["update"])
    content = ref_of(defs[prompt.params]["properties"]["prompt"]["items"])
    return notif.params, update, content


def _tags(defs: dict[str, Any], union: str) -> tuple[str, set[str]]:
    node = defs[union]
    members = node.get("oneOf") or node.get("anyOf")
    found: dict[str, set[str]] = {}
    for m in members:
        for prop, sub in (m.get("properties") or {}).items():
            if isinstance(sub, dict) and isinstance(sub.get("const"), str):
                found.setdefault(prop, set()).add(sub["const"])
    prop = max(found, key=lambda p: len(found[p]))
    return prop, found[prop]


@pytest.mark.parametrize("rev", list(REVISIONS))
def test_corpus_covers_every_method_and_variant(generated: dict[str, Generated], rev: str) -> None:
    g = generated[rev]
    cases = [json.loads(p.read_text()) for p in sorted((CASES / rev).glob("*.json"))]
    types = {c["type"] for c in cases}
    table = method_table(g.schema)
    for m in table.methods:
        for cls in (m.params, m.result):
            if cls:
                assert cls in types, f"{rev}: no case for {m.name} ({cls})"
    notif, update_union, content_union = _update_union(g)
    uprop, utags = _tags(g.defs, update_union)
    cprop, ctags = _tags(g.defs, content_union)
    seen_updates = {c["message"]["update"][uprop] for c in cases if c["type"] == notif}
    seen_content = {c["message"][cprop] for c in cases if c["type"] == content_union}
    assert utags <= seen_updates, utags - seen_updates
    assert ctags <= seen_content, ctags - seen_content
    assert seen_updates - utags, "no unknown (future) session update case"
    assert seen_content - ctags, "no unknown content block case"
    assert len(utags) >= 5 and len(ctags) >= 5


# ----------------------------------------------------------------------------- unions


@pytest.mark.parametrize("rev", list(REVISIONS))
def test_tagged_unions_dispatch_on_the_tag(generated: dict[str, Generated], rev: str) -> None:
    g = generated[rev]
    notif, update_union, _ = _update_union(g)
    prop, tags = _tags(g.defs, update_union)
    mod = g.module
    for case in sorted((CASES / rev).glob("update.*.json")):
        message = json.loads(case.read_text())["message"]
        obj = getattr(mod, notif).model_validate(message)
        member = obj.update.root
        tag = message["update"][prop]
        if tag in tags:
            assert member.model_dump(by_alias=True)[prop] == tag
            assert "Other" not in type(member).__name__
    # a known tag with broken fields is an error of that variant, not an unknown variant
    known = min(tags)
    with pytest.raises(ValidationError) as err:
        getattr(mod, notif).model_validate(
            {"sessionId": "s", "update": {prop: known, "content": 5, "toolCallId": []}}
        )
    assert any(known in str(e["loc"]) for e in err.value.errors())


@pytest.mark.parametrize("rev", list(REVISIONS))
def test_unknown_variant_parses_into_the_catch_all_and_keeps_fields(
    generated: dict[str, Generated], rev: str
) -> None:
    g = generated[rev]
    notif, update_union, content_union = _update_union(g)
    prop, tags = _tags(g.defs, update_union)
    message = {
        "sessionId": "sess_1",
        "update": {prop: "_vendor/radar", "frames": [{"i": 1}], "_meta": {"k": "v"}},
        "extraTopLevel": True,
    }
    obj = getattr(g.module, notif).model_validate(message)
    member = obj.update.root
    assert type(member).__name__.startswith("Other")
    assert member.model_extra["frames"] == [{"i": 1}]
    assert _canon(_dump(obj)) == _canon(message)
    # the catch-all refuses a known tag on its own
    with pytest.raises(ValidationError):
        type(member).model_validate({prop: min(tags)})
    cprop, _ = _tags(g.defs, content_union)
    block = getattr(g.module, content_union).model_validate({cprop: "video", "frames": 24})
    assert type(block.root).__name__.startswith("Other")


def test_open_string_enum_accepts_a_new_value(generated: dict[str, Generated]) -> None:
    mod = generated["v2"].module
    defs = generated["v2"].defs
    open_enums = [
        name
        for name, d in defs.items()
        if isinstance(d.get("anyOf"), list)
        and any(m.get("const") for m in d["anyOf"] if isinstance(m, dict))
        and any(m.get("title") == "other" and m.get("type") == "string" for m in d["anyOf"])
    ]
    assert open_enums, "v2 has open string enums (an `other` string branch)"
    for name in open_enums:
        cls = getattr(mod, name)
        assert _dump(cls.model_validate("_vendor_value")) == "_vendor_value"
    closed = generated["v1"].module.StopReason
    with pytest.raises(ValidationError):
        generated["v1"].module.PromptResponse.model_validate({"stopReason": "_vendor_value"})
    assert closed("end_turn").value == "end_turn"


# ----------------------------------------------------------------------------- x-deserialize


def test_x_deserialize_default_on_error_and_skip_invalid_items(
    generated: dict[str, Generated],
) -> None:
    g = generated["v1"]
    props = g.defs["ToolCallUpdate"]["properties"]
    assert props["kind"].get("x-deserialize-default-on-error") is True
    assert props["content"].get("x-deserialize-skip-invalid-items") is True
    mod = g.module
    good = {"type": "content", "content": {"type": "text", "text": "ok"}}
    obj = mod.ToolCallUpdate.model_validate(
        {
            "toolCallId": "c1",
            "kind": "teleport",
            "title": "t",
            "content": [good, {"type": "diff"}, good],
        }
    )
    assert obj.kind is None  # the bad value fell back to the default
    assert obj.title == "t"
    assert obj.content is not None and len(obj.content) == 2  # the bad item was skipped
    # an error in a field without the keywords still fails
    with pytest.raises(ValidationError):
        mod.ToolCallUpdate.model_validate({"toolCallId": 5, "kind": "teleport"})
    # _meta of the wrong type falls back too (upstream marks every _meta so)
    assert (
        mod.PromptResponse.model_validate({"stopReason": "end_turn", "_meta": 3}).field_meta is None
    )


# ----------------------------------------------------------------------------- errors / CLI


def test_bad_schemas_raise_agentgen_error() -> None:
    with pytest.raises(AgentgenError):
        generate_models({"title": "no defs"})
    with pytest.raises(AgentgenError):
        generate_models([])  # type: ignore[arg-type]


def test_the_models_cache_gives_back_what_was_rendered_and_is_keyed_by_its_inputs(
    tmp_path: Path,
    shared_acp: Path,
    generated: dict[str, Generated],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`new`, `regen` and `check` render the same models again and again: the first
    rendering is kept (one file named by schema, label and producer), the next read back;
    another label, another schema or another producer (agentgen's code, the generator's or
    ruff's version) is another file; `off` keeps nothing."""
    from generator.protocol import models

    cache = tmp_path / "models-cache"
    monkeypatch.setenv("AGENTGEN_MODELS_CACHE", str(cache))
    schema = json.loads((shared_acp / REVISIONS["v2"]).read_text())
    first = generate_models(schema, source_label="acp/v2/schema.json")
    assert first == generated["v2"].source  # the same bytes as rendered afresh
    (kept,) = cache.iterdir()
    assert kept.read_text(encoding="utf-8") == first
    kept.write_text(first + "# read back\n", encoding="utf-8")  # proves the second is a read
    assert generate_models(schema, source_label="acp/v2/schema.json") == first + "# read back\n"
    generate_models(schema, source_label="elsewhere/schema.json")
    legacy = json.loads((shared_acp / REVISIONS["legacy"]).read_text())
    other = generate_models(legacy, source_label="acp/v2/schema.json")
    assert "class AcpModel" in other and "UpdateSessionNotification" not in other
    assert len(list(cache.iterdir())) == 3
    monkeypatch.setattr(models, "_producer", lambda: "another agentgen")
    assert generate_models(schema, source_label="acp/v2/schema.json") == first
    assert len(list(cache.iterdir())) == 4
    # bounded: the most recently used are kept (a read counts as a use)
    for i in range(models.MODELS_KEPT + 5):
        stale = cache / f"{i:064x}.py"
        stale.write_text("# an older agentgen's models\n", encoding="utf-8")
        os.utime(stale, ns=(i * 10**9, i * 10**9))  # 1970: older than what was used today
    monkeypatch.setattr(models, "_producer", lambda: "yet another agentgen")
    assert generate_models(schema, source_label="acp/v2/schema.json") == first
    kept_now = {p.name for p in cache.iterdir()}
    assert len(kept_now) == models.MODELS_KEPT
    assert kept.name in kept_now  # read back just now
    assert f"{0:064x}.py" not in kept_now and f"{models.MODELS_KEPT + 4:064x}.py" in kept_now
    monkeypatch.setenv("AGENTGEN_MODELS_CACHE", "off")
    assert models.models_cache_dir() is None
    monkeypatch.delenv("AGENTGEN_MODELS_CACHE")
    monkeypatch.setenv("AGENTGEN_CACHE_DIR", str(tmp_path / "agentgen-cache"))
    assert models.models_cache_dir() == tmp_path / "agentgen-cache" / "models"


def test_run_models_writes_the_module(
    tmp_path: Path, shared_acp: Path, generated: dict[str, Generated]
) -> None:
    out = tmp_path / "deep" / "models.py"
    assert run_models(str(shared_acp / REVISIONS["v2"]), out=out) == 0
    text = out.read_text()
    assert "class UpdateSessionNotification(AcpModel)" in text
    assert [p.name for p in out.parent.iterdir()] == ["models.py"]  # no temp file left


def test_cli_models_bad_input_is_one_located_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from generator.cli import app

    bad = tmp_path / "broken.json"
    bad.write_text('{"$defs": {"A": {"$ref": "#/$defs/Missing"}}}')
    result = CliRunner().invoke(app, ["models", str(bad), "-o", str(tmp_path / "m.py")])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "broken.json" in result.output
    assert not (tmp_path / "m.py").exists()


def test_dispatch_on_odd_tags_and_model_instances(generated: dict[str, Generated]) -> None:
    mod = generated["v1"].module
    for odd in (["x"], {"a": 1}, 5, None):
        with pytest.raises(ValidationError):
            mod.SessionNotification.model_validate(
                {"sessionId": "s", "update": {"sessionUpdate": odd}}
            )
    chunk = mod.AgentMessageChunk(
        session_update="agent_message_chunk",
        content=mod.ContentBlock(mod.TextContentBlock(type="text", text="hi")),
    )
    by_instance = mod.SessionNotification(session_id="s", update=mod.SessionUpdate(chunk))
    by_field_names = mod.SessionNotification.model_validate(
        {
            "session_id": "s",
            "update": {
                "session_update": "agent_message_chunk",
                "content": {"type": "text", "text": "hi"},
            },
        }
    )
    expected = {
        "sessionId": "s",
        "update": {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "hi"},
        },
    }
    assert _dump(by_instance) == expected
    assert type(by_field_names.update.root) is mod.AgentMessageChunk


def test_same_bytes_under_another_hash_seed(
    shared_acp: Path, generated: dict[str, Generated]
) -> None:
    code = (
        "import json, sys\n"
        "from agentgen.protocol.models import generate_models\n"
        f"s = json.load(open({str(shared_acp / REVISIONS['v2'])!r}))\n"
        "sys.stdout.write(generate_models(s, source_label='acp/v2/schema.json'))\n"
    )
    for seed in ("1", "4242"):
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed, "AGENTGEN_MODELS_CACHE": "off"},
            cwd=Path(__file__).resolve().parents[2],
        )
        assert proc.stdout == generated["v2"].source


def _model_fields_schema(schema: Any, cls: type, depth: int = 0) -> Any:
    if depth > 60:
        return None
    if isinstance(schema, dict):
        if schema.get("type") == "model" and schema.get("cls") is cls:
            inner = schema["schema"]
            while inner.get("type") != "model-fields":
                inner = inner["schema"]
            return inner["fields"]
        children = list(schema.values())
    elif isinstance(schema, list):
        children = schema
    else:
        return None
    for child in children:
        found = _model_fields_schema(child, cls, depth + 1)
        if found is not None:
            return found
    return None


@pytest.mark.parametrize("rev", list(REVISIONS))
def test_every_lenient_field_is_compiled(generated: dict[str, Generated], rev: str) -> None:
    """Every field upstream marks x-deserialize-* carries the rule in its core schema."""
    mod = generated[rev].module
    lenient = skipping = 0
    for cls in vars(mod).values():
        if not (isinstance(cls, type) and issubclass(cls, mod.AcpModel)) or cls is mod.AcpModel:
            continue
        cls.model_rebuild()  # its validator, built at first use (defer_build), built now
        fields = _model_fields_schema(cls.__pydantic_core_schema__, cls)
        assert fields is not None, cls.__name__
        for name, info in cls.model_fields.items():
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            schema = fields[name]["schema"]
            if extra.get("x-deserialize-default-on-error") and not info.is_required():
                assert schema.get("on_error") == "default", f"{cls.__name__}.{name}"
                lenient += 1
            if extra.get("x-deserialize-skip-invalid-items"):
                node = schema
                while node.get("type") in ("default", "nullable"):
                    node = node["schema"]
                assert node["type"] == "list", f"{cls.__name__}.{name}"
                assert node["items_schema"].get("on_error") == "omit", f"{cls.__name__}.{name}"
                skipping += 1
    if '"x-deserialize-' not in json.dumps(generated[rev].schema):
        # the legacy revision (npm 0.14.1) predates the markers
        assert lenient == skipping == 0
    else:
        assert lenient > 20 and skipping > 3


@pytest.mark.parametrize(("old", "new"), [("legacy", "v1"), ("v1", "v1-unstable")])
def test_an_older_revision_keeps_a_newer_revisions_updates(
    generated: dict[str, Generated], old: str, new: str
) -> None:
    """A client built on `old` receives every session update `new` (same protocol
    version, later revision) can send: new kinds land in the catch-all, intact."""
    notif_old, union_old, _ = _update_union(generated[old])
    prop, known_old = _tags(generated[old].defs, union_old)
    cls = getattr(generated[old].module, notif_old)
    newer = 0
    for path in sorted((CASES / new).glob("update.*.json")):
        message = json.loads(path.read_text())["message"]
        obj = cls.model_validate(message)
        assert _canon(_dump(obj)) == _canon(message), path.name
        if message["update"][prop] not in known_old:
            assert type(obj.update.root).__name__.startswith("Other"), path.name
            newer += 1
    assert newer > 0
