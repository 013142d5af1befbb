"""The generator's shared helpers (pointer.py, names.py, schemas.py), and the alarm that
keeps each the only home of what it does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from generator import names, pointer, schemas

GENERATOR = Path(__file__).resolve().parents[2] / "generator"


@pytest.mark.parametrize("token", ["a", "a/b", "~", "~1", "~0/~1", "", "x~y/z", "0"])
def test_pointer_tokens_round_trip(token: str) -> None:
    at = pointer.child("/$defs", token)
    assert pointer.tokens(at) == ["$defs", token]
    assert pointer.unescape(pointer.escape(token)) == token


def test_pointer_escape_order() -> None:
    # `~` first when escaping and `~1` first when unescaping, or "~1" would come back "/"
    assert pointer.escape("~1") == "~01"
    assert pointer.unescape("~01") == "~1"
    assert pointer.join(["a/b", 3]) == "/a~1b/3"


def test_pointer_resolve_and_fragments() -> None:
    doc = {"$defs": {"A B": {"x": [10, 20]}, "c/d": 1}}
    assert pointer.resolve(doc, "/$defs/A B/x/1") == (True, 20)
    assert pointer.resolve(doc, "/$defs/c~1d") == (True, 1)
    assert pointer.resolve(doc, "/$defs/missing") == (False, None)
    assert pointer.resolve(doc, "/$defs/A B/x/9") == (False, None)
    assert pointer.resolve(doc, "nope") == (False, None)
    assert pointer.from_fragment("#/$defs/A%20B") == "/$defs/A B"
    assert pointer.from_fragment("#anchor") is None
    assert pointer.from_fragment("other.json#/a") is None


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("agent_message_chunk", "AgentMessageChunk"),
        ("searchAndReplace", "SearchAndReplace"),
        ("utf-16", "Utf16"),
        ("needs-review", "NeedsReview"),
        ("HTTPError", "HTTPError"),
        ("2fa", "V2fa"),
        ("", "V"),
        ("--", "V"),
    ],
)
def test_pascal(text: str, want: str) -> None:
    assert names.pascal(text) == want


def test_pascal_prefixes() -> None:
    assert names.pascal("1x", digit_prefix="M", empty="Model") == "M1x"
    assert names.pascal("", digit_prefix="M", empty="Model") == "Model"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("session/prompt", "session_prompt"),
        ("setSessionMode", "set_session_mode"),
        ("HTTPServer", "http_server"),
        ("2fa", "m_2fa"),
        ("class", "class_"),
        ("", "name"),
    ],
)
def test_snake(text: str, want: str) -> None:
    assert names.snake(text) == want


def test_words_and_word_count() -> None:
    assert names.words("CancelSessionNotification") == {"cancel", "session", "notification"}
    assert names.words("HTTPServer") == {"http", "server"}
    assert names.word_count("Text") == 1
    assert names.word_count("ToolCall") == 2


def test_ref_names() -> None:
    assert schemas.ref_name("#/$defs/A") == "A"
    assert schemas.ref_name({"$ref": "#/definitions/B"}) == "B"
    assert schemas.ref_name("#/$defs/a~1b") == "a/b"
    assert schemas.ref_name("#/$defs/A/properties/x") is None
    assert schemas.ref_name("other.json#/$defs/A") is None
    assert schemas.ref_name(3) is None
    assert schemas.def_ref("a/b") == "#/$defs/a~1b"
    assert schemas.ref_name(schemas.def_ref("x~y/z")) == "x~y/z"


def test_defs_prefers_2020_keyword() -> None:
    assert schemas.defs({"$defs": {"A": {}}, "definitions": {"B": {}}}) == {"A": {}}
    assert schemas.defs({"definitions": {"B": {}}}) == {"B": {}}
    assert schemas.defs({"$defs": []}) == {}
    assert schemas.defs([]) == {}


def test_walk_visits_schema_positions_only() -> None:
    doc = {
        "$defs": {
            "A": {
                "properties": {
                    "items": {"$ref": "#/$defs/B"},  # a property called `items`
                    "const": {"type": "string"},
                },
                "additionalProperties": {"$ref": "#/$defs/C"},
            },
            "B": {"items": [{"$ref": "#/$defs/D"}], "additionalItems": {"$ref": "#/$defs/E"}},
        },
        "const": {"$ref": "#/$defs/NotASchema"},  # data, never walked
        "default": {"anyOf": [{"$ref": "#/$defs/NotASchema"}]},
        "x-extension": {"$ref": "#/$defs/NotASchema"},
    }
    assert sorted(schemas.refs(doc)) == ["B", "C", "D", "E"]
    at = dict(schemas.walk(doc))
    assert "/$defs/A/properties/items" in at
    assert "/$defs/B/items/0" in at
    assert all("NotASchema" not in str(n.get("$ref")) for n in at.values())


def test_walk_reads_children_after_the_caller_rewrote_the_node() -> None:
    doc = {"anyOf": [{"$ref": "#/$defs/Old"}]}
    seen = []
    for _, node in schemas.walk(doc):
        if "anyOf" in node:
            node["anyOf"] = [{"$ref": "#/$defs/New"}]
        seen.append(schemas.ref_name(node))
    assert seen == [None, "New"]


# The alarm: each helper has one home.  A new hand-written copy elsewhere in generator/
# fails here (the homes themselves are excluded).
_COPIES = {
    "JSON-pointer escaping": (
        re.compile(r"""replace\(\s*["']~[01]?["']"""),
        {"pointer.py"},
    ),
    "`$defs` lookup": (
        re.compile(r"""get\(\s*["']definitions["']\)|["']#/\$defs/["']\s*\)?\s*:"""),
        {"schemas.py"},
    ),
    "PascalCase conversion": (
        re.compile(r"""\[:1\]\.upper\(\)"""),
        {"names.py"},
    ),
}


@pytest.mark.parametrize("what", sorted(_COPIES))
def test_one_home_per_helper(what: str) -> None:
    pattern, homes = _COPIES[what]
    found = []
    for path in sorted(GENERATOR.rglob("*.py")):
        if path.name in homes:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{path.relative_to(GENERATOR)}:{n}: {line.strip()}")
    assert not found, f"{what} written outside its home:\n" + "\n".join(found)
