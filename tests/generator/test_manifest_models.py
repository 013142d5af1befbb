"""Manifest models: generated from manifests, imported and run; names, refs, errors."""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import sys
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import mypy_support
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from generator.errors import AgentgenError
from generator.manifest.load import load_manifest
from generator.manifest.models import generate_manifest_models
from generator.names import camel

REPO = Path(__file__).resolve().parents[2]


def example(name: str) -> dict[str, Any]:
    return load_manifest(REPO / "examples" / name / "agent.yaml").data


def load_module(tmp: Path, src: str, name: str) -> ModuleType:
    path = tmp / f"{name}.py"
    path.write_text(src, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


MAIL = load_manifest(REPO / "examples" / "mail-composer" / "agent.yaml").data


def build(tmp: Path, manifest: dict[str, Any], name: str) -> ModuleType:
    return load_module(tmp, generate_manifest_models(manifest), name)


def classes(mod: ModuleType) -> set[str]:
    return {
        k
        for k, v in vars(mod).items()
        if k.isidentifier() and isinstance(v, type) and v.__module__ == mod.__name__
    }


# A manifest that stresses naming and references: nested definitions whose names clash
# with the section classes, refs of every local kind, errors named like imports,
# keywords and sections, a recursive schema.
TRICKY: dict[str, Any] = {
    "name": "tricky",
    "version": "1",
    "config": {
        "schema": {
            "type": "object",
            "properties": {
                "mode": {"$ref": "#/$defs/Input"},
                "other": {"$ref": "#/definitions/Output"},
                "same": {"$ref": "#/properties/mode"},
                "child": {"$ref": "#"},
                # an inline object named Config + Data, like error Config's data class
                "data": {"type": "object", "properties": {"q": {"type": "integer"}}},
            },
            "$defs": {"Input": {"enum": ["a", "b"]}},
            "definitions": {"Output": {"type": "integer", "minimum": 0}},
        }
    },
    "input": {
        "type": "object",
        "required": ["config"],
        "properties": {
            "config": {"type": "object", "properties": {"deep": {"type": "string"}}},
            "class": {"type": "string"},
            "camelName": {"type": "integer"},
        },
    },
    "output": {"type": "string", "maxLength": 5},
    "interrupts": [
        {
            "name": "needs-review",
            "payload": {"schema": {"type": "object"}},
            "resume": {"schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}},
        }
    ],
    "errors": [
        {
            "code": 1,
            "name": "Config",
            "description": "clashes with a section",
            "data": {"schema": {"type": "object", "properties": {"z": {"type": "string"}}}},
        },
        {"code": 2, "name": "None"},
        {"code": 3, "name": "BaseModel", "data": {"schema": {"type": "integer"}}},
        {"code": 4, "name": "Exception", "transient": True},
        {"code": 5, "name": "ManifestError"},
    ],
}


def test_camel_matches_the_runtime() -> None:
    from runtime.wire.fields import camel as runtime_camel

    for name in ("approval", "needs-review", "needs_review", "a-b_c", "x", "two--dashes", "v2-ok"):
        assert camel(name) == runtime_camel(name), name
    assert camel("needs-review") == "NeedsReview"


def test_mail_composer_models_run(tmp_path: Path) -> None:
    mm = build(tmp_path, example("mail-composer"), "mm_mail")
    assert {"Config", "Input", "Output", "ApprovalPayload", "ApprovalResume"} <= classes(mm)

    cfg = mm.Config.model_validate({})
    assert (cfg.tone, cfg.max_length, cfg.signature) == ("friendly", 800, None)
    assert mm.Config.model_validate({"tone": "formal"}).tone == "formal"
    with pytest.raises(ValidationError) as bad:
        mm.Config.model_validate({"tone": "shouty", "max_length": 10})
    assert {e["loc"] for e in bad.value.errors()} == {("tone",), ("max_length",)}
    with pytest.raises(ValidationError) as extra:
        mm.Config.model_validate({"colour": "red"})  # additionalProperties: false
    assert extra.value.errors()[0]["loc"] == ("colour",)

    inp = mm.Input.model_validate({"brief": "Lunch", "recipients": ["a@example.org"]})
    assert inp.language == "en" and [r.root for r in inp.recipients] == ["a@example.org"]
    with pytest.raises(ValidationError) as bad_in:
        mm.Input.model_validate({"brief": "", "recipients": []})
    assert {e["loc"] for e in bad_in.value.errors()} == {("brief",), ("recipients",)}

    out = mm.Output(subject="s", body="b", recipients=["a@example.org"], approved=True)
    assert out.model_dump(by_alias=True) == {
        "subject": "s",
        "body": "b",
        "recipients": ["a@example.org"],
        "approved": True,
    }
    with pytest.raises(ValidationError):
        mm.Output.model_validate({"subject": "s"})

    assert mm.ApprovalPayload(subject="s", body="b").body == "b"
    assert mm.ApprovalResume.model_validate({"approved": False}).approved is False
    with pytest.raises(ValidationError) as bad_resume:
        mm.ApprovalResume.model_validate({"comment": "no"})
    assert bad_resume.value.errors()[0]["loc"] == ("approved",)


def test_error_classes_carry_code_transient_and_typed_data(tmp_path: Path) -> None:
    mm = build(tmp_path, example("mail-composer"), "mm_mail_err")
    q = mm.QuotaExceeded(data=mm.QuotaExceededData(retry_after=5, used=2))
    assert isinstance(q, mm.ManifestError) and isinstance(q, Exception)
    assert (q.code, q.error_name, q.transient) == (1001, "QuotaExceeded", True)
    assert str(q) == "The daily quota of drafts is used up; retry later."
    assert q.data.retry_after == 5.0
    u = mm.UnknownRecipient("bob@x.invalid is not allowed")
    assert (u.code, u.transient, u.data, str(u)) == (
        1002,
        False,
        None,
        "bob@x.invalid is not allowed",
    )
    assert mm.ERRORS == {1001: mm.QuotaExceeded, 1002: mm.UnknownRecipient}
    with pytest.raises(ValidationError):
        mm.QuotaExceededData.model_validate({"retry_after": -1})

    # the runtime turns them into JSON-RPC errors with exactly these attributes
    from runtime.agent.turns import agent_error

    err = agent_error(q)
    assert err is not None
    assert (err.code, err.message, err.data) == (
        1001,
        "The daily quota of drafts is used up; retry later.",
        {"name": "QuotaExceeded", "transient": True, "details": {"retry_after": 5.0, "used": 2}},
    )
    err2 = agent_error(u)
    assert err2 is not None and err2.data == {
        "name": "UnknownRecipient",
        "transient": False,
        "details": None,
    }


def test_absent_sections_produce_no_class(tmp_path: Path) -> None:
    echo = build(tmp_path, example("echo"), "mm_echo")
    assert classes(echo) == {"ManifestError"} and echo.ERRORS == {}
    research = build(tmp_path, example("research"), "mm_research")
    assert classes(research) == {"ManifestError"}
    only_out = build(
        tmp_path, {"name": "o", "version": "1", "output": {"type": "integer"}}, "mm_out"
    )
    assert classes(only_out) == {"Output", "ManifestError"}
    assert only_out.Output.model_validate(3).root == 3


def test_names_and_refs_are_handled_generally(tmp_path: Path) -> None:
    mm = build(tmp_path, TRICKY, "mm_tricky")
    names = classes(mm)
    # the sections keep the names the runtime looks up
    assert {"Config", "Input", "Output", "NeedsReviewPayload", "NeedsReviewResume"} <= names
    # the error classes step aside, keep their wire names
    by_code = {code: cls for code, cls in mm.ERRORS.items()}
    assert {c: cls.__name__ for c, cls in by_code.items()} == {
        1: "ConfigError",
        2: "NoneError",
        3: "BaseModelError",
        4: "ExceptionError",
        5: "ManifestErrorError",
    }
    assert [by_code[c].error_name for c in range(1, 6)] == [
        "Config",
        "None",
        "BaseModel",
        "Exception",
        "ManifestError",
    ]
    assert issubclass(by_code[5], mm.ManifestError) and by_code[4].transient is True
    assert by_code[3](data=mm.BaseModelData(7)).data.root == 7
    # error Config's data is its own class, not Config's inline `data` object
    assert by_code[1](data=mm.ConfigData(z="x")).data.z == "x"
    assert mm.Config.model_validate({"data": {"q": 1}}).data.q == 1
    inline = typing.get_args(mm.Config.model_fields["data"].annotation)[0]
    assert inline is not mm.ConfigData and "q" in inline.model_fields

    # hoisted $defs/definitions, a pointer ref and a recursive ref all resolve
    cfg = mm.Config.model_validate(
        {"mode": "a", "other": 3, "same": "b", "child": {"mode": "b", "child": {}}}
    )
    assert cfg.child.child is not None
    with pytest.raises(ValidationError) as bad:
        mm.Config.model_validate({"mode": "c", "other": -1, "same": "z"})
    assert {e["loc"][0] for e in bad.value.errors()} == {"mode", "other", "same"}

    # the section Input is the manifest's input, not the nested definition
    inp = mm.Input.model_validate({"config": {"deep": "x"}, "class": "k", "camelName": 1})
    assert (inp.config.deep, inp.class_, inp.camel_name) == ("x", "k", 1)
    assert inp.model_dump(by_alias=True, exclude_none=True) == {
        "config": {"deep": "x"},
        "class": "k",
        "camelName": 1,
    }
    with pytest.raises(ValidationError):
        mm.Output.model_validate("toolong")
    # a free-form object schema keeps what it is given
    assert mm.NeedsReviewPayload.model_validate({"any": [1]}).model_dump() == {"any": [1]}


def test_agntcy_manifests_get_the_same_models(tmp_path: Path, shared_agntcy: Path) -> None:
    """Both published AGNTCY shapes, read by the loader, give working modules."""
    desc = load_manifest(shared_agntcy / "acp-spec_mailcomposer_descriptor.json").data
    mail = build(tmp_path, desc, "mm_agntcy_mail")
    assert {"Config", "Input", "Output"} <= classes(mail)
    pay = [i["name"] for i in desc["interrupts"]]
    for name in pay:
        assert {camel(name) + "Payload", camel(name) + "Resume"} <= classes(mail)
    record = load_manifest(shared_agntcy / "sdk_echo-agent-manifest.json").data
    echo = build(tmp_path, record, "mm_agntcy_echo")
    msg = {"type": "human", "content": "hi"}
    inp = echo.Input.model_validate({"messages": [msg]})
    assert inp.messages[0].content == "hi"
    with pytest.raises(ValidationError) as bad:
        echo.Input.model_validate({"messages": [{"type": "robot", "content": "hi"}]})
    assert bad.value.errors()[0]["loc"][:3] == ("messages", 0, "type")
    # the Input's and the Output's own `$defs` (both name a `Message`) stay apart
    out = echo.Output.model_validate({"messages": [msg]})
    assert type(out.messages[0]).__name__ != type(inp.messages[0]).__name__


def test_config_options_refine_the_config_schema(tmp_path: Path) -> None:
    """A value must satisfy both the config schema and the config options (what the
    runtime checks without a model, the Config model checks with one)."""
    choice = {"id": "model", "type": "choice", "values": ["small", "large"], "default": "small"}
    flag = {"id": "verbose", "type": "boolean", "default": False}
    base = {"name": "c", "version": "1"}
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"model": {"type": "string"}, "fixed": {"const": "x"}},
    }
    with_schema = {**base, "config": {"schema": schema, "options": [choice, flag]}}
    mm = build(tmp_path, with_schema, "mm_opts")
    cfg = mm.Config.model_validate({})
    assert (cfg.model, cfg.verbose) == ("small", False)
    with pytest.raises(ValidationError) as bad:
        mm.Config.model_validate({"model": "huge", "verbose": "loud"})
    assert [e["loc"] for e in bad.value.errors()] == [("model",), ("verbose",)]
    with pytest.raises(ValidationError):
        mm.Config.model_validate({"other": 1})  # the schema's additionalProperties: false

    only_options = build(tmp_path, {**base, "config": {"options": [choice, flag]}}, "mm_opts2")
    cfg2 = only_options.Config.model_validate({"model": "large", "extra": 1})
    assert (cfg2.model, cfg2.verbose, cfg2.model_extra) == ("large", False, {"extra": 1})
    with pytest.raises(ValidationError):
        only_options.Config.model_validate({"model": "huge"})


def test_hostile_text_stays_data(tmp_path: Path) -> None:
    """Quotes, backslashes, newlines and control characters in descriptions, defaults
    and the label cannot break (or inject into) the module."""
    bad = 'end """ quote \\ back \\" x\nnew line \u2713 \u0000 \u2028 )\nimport os'
    manifest = {
        "name": "p",
        "version": "1",
        "input": {
            "type": "object",
            "description": bad,
            "properties": {"a": {"type": "string", "description": bad, "default": bad}},
        },
        "errors": [{"code": 5, "name": "Q", "description": bad}],
    }
    src = generate_manifest_models(manifest, source_label='we"""ird\\.yaml\nimport os')
    assert "\x00" not in src and "\nimport os" not in src
    mm = load_module(tmp_path, src, "mm_hostile")
    assert mm.Input().a == bad
    assert mm.ERRORS[5].description == bad and str(mm.ERRORS[5]()) == bad


def test_generation_is_deterministic() -> None:
    for manifest in (example("mail-composer"), TRICKY, example("echo")):
        first = generate_manifest_models(copy.deepcopy(manifest))
        assert generate_manifest_models(copy.deepcopy(manifest)) == first


@pytest.mark.parametrize(
    ("mutate", "pointer", "fragment"),
    [
        (lambda m: m["errors"][0].update(code="x"), "/errors/0/code", "integer"),
        (lambda m: m["interrupts"][0].pop("resume"), "/interrupts/0/resume", "required"),
        (lambda m: m.update(input=[1]), "/input", "dictionary"),
        (
            lambda m: m["config"]["schema"]["properties"].update(x={"$ref": "other.json#/a"}),
            "/config/schema",
            "outside the manifest",
        ),
        (
            lambda m: m["interrupts"].append(
                {**m["interrupts"][0], "name": "approval_"}  # camel: Approval again
            ),
            "/interrupts/1/name",
            "already used",
        ),
    ],
)
def test_bad_manifests_are_located_errors(mutate: Any, pointer: str, fragment: str) -> None:
    manifest = copy.deepcopy(example("mail-composer"))
    mutate(manifest)
    with pytest.raises(AgentgenError) as err:
        generate_manifest_models(manifest, source_label="agent.yaml")
    assert err.value.pointer == pointer and err.value.source == "agent.yaml"
    assert fragment in err.value.message


def test_cli_writes_the_module_and_locates_errors(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "mm.py"
    agentgen = [sys.executable, "-m", "agentgen"]
    ok = subprocess.run(
        [*agentgen, "models", "--manifest", "examples/mail-composer/agent.yaml", "-o", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert (
        out.read_text()
        == (REPO / "generated" / "examples" / "mail-composer" / "manifest_models.py").read_text()
    )
    bad = tmp_path / "agent.yaml"
    bad.write_text("name: bad\nversion: '1'\nerrors:\n  - code: nope\n    name: Oops\n")
    r = subprocess.run(
        [*agentgen, "models", "--manifest", str(bad), "-o", str(tmp_path / "x.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"{bad}:4:11: /errors/0/code:" in r.stderr, r.stderr
    assert not (tmp_path / "x.py").exists()


def test_generated_modules_pass_mypy_strict(tmp_path: Path, shared_agntcy: Path) -> None:
    files = []
    for name, manifest in [
        ("echo_mm", example("echo")),
        ("mail_mm", example("mail-composer")),
        ("research_mm", example("research")),
        ("tricky_mm", TRICKY),
        (
            "agntcy_mm",
            load_manifest(shared_agntcy / "sdk_echo-agent-manifest.json").data,
        ),
    ]:
        path = tmp_path / f"{name}.py"
        path.write_text(generate_manifest_models(manifest))
        files.append(str(path))
    files.append(str(REPO / "generator" / "manifest" / "format_models.py"))
    r = mypy_support.run(
        [sys.executable, "-m", "mypy", "--strict", *files], kind="strict", cwd=tmp_path
    )
    assert r.returncode == 0, r.stdout + r.stderr


TRICKY_NAMES = ["Config", "Input", "Output", "None", "True", "Any", "ClassVar", "Field"]
TRICKY_NAMES += ["BaseModel", "ManifestError", "ERRORS", "ApprovalPayload", "ConfigData"]


@st.composite
def named_manifests(draw: st.DrawFn) -> dict[str, Any]:
    err_names = draw(
        st.lists(
            st.sampled_from(TRICKY_NAMES) | st.from_regex(r"[A-Z][A-Za-z0-9]{0,6}", fullmatch=True),
            max_size=5,
            unique=True,
        )
    )
    stems = draw(
        st.lists(
            st.sampled_from(["approval", "config", "input", "none", "class"])
            | st.from_regex(r"[a-z][a-z0-9_-]{0,6}", fullmatch=True),
            max_size=3,
            unique_by=camel,
        )
    )
    props = draw(
        st.lists(
            st.sampled_from(["class", "def", "None", "from", "camelCase", "data", "model_config"])
            | st.from_regex(r"[a-z_][A-Za-z0-9_]{0,6}", fullmatch=True),
            max_size=4,
            unique=True,
        )
    )
    obj = {"type": "object", "properties": {p: {"type": "string"} for p in props}}
    return {
        "name": "prop",
        "version": "1",
        "input": obj,
        "config": {"schema": obj},
        "interrupts": [
            {"name": n, "payload": {"schema": obj}, "resume": {"schema": obj}} for n in stems
        ],
        "errors": [
            {"code": 100 + i, "name": n, "transient": i % 2 == 0}
            | ({"data": {"schema": obj}} if i % 2 else {})
            for i, n in enumerate(err_names)
        ],
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(named_manifests())
def test_any_valid_names_give_a_working_module(manifest: dict[str, Any]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        mm = build(Path(tmp), manifest, "mm_prop")
    props = list(manifest["input"]["properties"])
    sample = {p: f"v{i}" for i, p in enumerate(props)}
    for cls in ["Input", "Config"] + [
        camel(i["name"]) + part for i in manifest["interrupts"] for part in ("Payload", "Resume")
    ]:
        obj = getattr(mm, cls).model_validate(sample)
        assert obj.model_dump(by_alias=True) == sample, cls
    assert sorted(mm.ERRORS) == [e["code"] for e in manifest["errors"]]
    for e in manifest["errors"]:
        cls = mm.ERRORS[e["code"]]
        assert issubclass(cls, mm.ManifestError)
        assert (cls.error_name, cls.transient, cls.code) == (e["name"], e["transient"], e["code"])
        if "data" in e:
            data_cls = typing.get_type_hints(cls.__init__, vars(mm))["data"]
            typed = typing.get_args(data_cls)[0].model_validate(sample)
            assert cls(data=typed).data.model_dump(by_alias=True) == sample


def test_too_deep_a_schema_is_an_error_not_a_crash() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(3000):
        schema = {"type": "object", "properties": {"a": schema}}
    with pytest.raises(AgentgenError) as err:
        generate_manifest_models({"name": "a", "version": "1", "input": schema})
    assert "too deeply" in err.value.message


def _pointers(node: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [here]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _pointers(v, (*here, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _pointers(v, (*here, i))
    return out


JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.sampled_from(["", "object", "string", "#", "#/$defs/X", "#/properties", "$ref", "x y"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                ["type", "properties", "$ref", "$defs", "items", "enum", "anyOf", "required", "x"]
            ),
            inner,
            max_size=3,
        )
    ),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_manifests_give_a_module_or_a_located_error(data: st.DataObject) -> None:
    """Replace one node anywhere in a valid manifest: the result compiles, or the
    generator says what is wrong (AgentgenError); nothing else escapes."""
    manifest = copy.deepcopy(MAIL)
    where = data.draw(st.sampled_from(_pointers(manifest)[1:]))
    parent = manifest
    for part in where[:-1]:
        parent = parent[part]
    parent[where[-1]] = data.draw(JSONISH)
    try:
        src = generate_manifest_models(manifest)
    except AgentgenError as err:
        assert err.message and err.source == "agent.yaml"
        return
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        load_module(Path(tmp), src, "mm_mutated")  # the module imports


def test_typographic_marks_in_a_manifest_do_not_break_the_projects_ruff() -> None:
    """Issue 37 item 10, the manifest's side: a description with a right single quotation
    mark or a no-break space reaches manifest_models.py's docstrings and `description=`
    strings as ASCII (RUF001-RUF003 pass); the manifest itself is left as written."""
    from numbered import ambiguous_unicode

    manifest = {
        "name": "quotes",
        "version": "0.1.0",
        "input": {
            "type": "object",
            "description": "The user\u2019s request",
            "properties": {"topic": {"type": "string", "description": "what it\u2019s\u00a0about"}},
        },
        "errors": [
            {"code": 1001, "name": "TooLong", "description": "it\u2019s too long \u2013 cut it"}
        ],
    }
    before = copy.deepcopy(manifest)
    code = generate_manifest_models(manifest)
    assert ambiguous_unicode(code) == "", code
    assert "what it's about" in code
    assert manifest == before
