"""Protocol fuzzing of a generated agent (hypothesis, bounded for CI).

Most frames go in process through the stdio framing (``read_frames``) into the
transport-agnostic ``Connection`` core of a generated agent; a smaller share goes to the
same agent as a real stdio subprocess and as a real HTTP server on 127.0.0.1.  Frames:
random bytes, truncated and oversized JSON, wrong JSON-RPC shapes, wrong types in every
required field of every method's params (methods from the generated dispatcher's
METHODS table, fields and types from the upstream schema), unknown methods and
``_``-aliases of protocol methods, duplicate and reused ids, responses to requests never
sent, notifications with ids, batches, ``$/cancel_request`` with junk ids.

Invariants (an independent oracle computes what each frame must get):
* every request with a valid id gets exactly one answer with the right code: -32700 with
  id null for a parse error, -32600 for a wrong shape / oversized frame / empty batch
  (a batch's entries are answered each in one array, JSON-RPC's rules), -32601
  for an unknown method, -32602 with ``params`` field locations for wrong params, never
  -32603 (an internal error means the runtime tripped over input);
* a wrong-typed required field is refused (-32602) whenever the same method with valid
  params is implemented (not -32601): never silently accepted;
* notifications and responses get no answer; every output line is a JSON object;
* the agent never dies or hangs (every wait has a timeout) and a well-formed prompt sent
  afterwards still streams its text and answers ``end_turn``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import math
import os
import random
import time
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import Any

import hardening_support as hs
import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wait_support import Arrivals

pytestmark = pytest.mark.slow  # fuzzer: `make test`, not `make test-fast`

MAX_SIZE = 4096  # the in-process agent's message size limit (oversized frames exceed it)
ID_POOL = [0, 1, 2, 3, 7, "a", "b", "dup"]
KNOWN_EXTENSIONS = {"_agent/info"}
EXAMPLES = int(
    os.environ.get("FUZZ_EXAMPLES", "250")
)  # hypothesis examples of the in-process test; each is fed REPLAYS times
REPLAYS = int(os.environ.get("FUZZ_REPLAYS", "8"))
SPECS = (40, 80)


# ---- the schema side: required fields, their JSON types, a minimal valid instance ----------


class SchemaView:
    def __init__(self, schema: dict[str, Any]) -> None:
        self.defs: dict[str, Any] = schema.get("$defs") or {}

    def resolve(self, s: Any) -> Any:
        seen = 0
        while isinstance(s, dict) and "$ref" in s and seen < 50:
            s = self.defs.get(s["$ref"].rsplit("/", 1)[-1], {})
            seen += 1
        return s

    def types(self, s: Any, depth: int = 0) -> set[str] | None:
        """The JSON types an instance may have (None: any)."""
        s = self.resolve(s)
        if not isinstance(s, dict) or depth > 20:
            return None
        if "const" in s:
            return {_json_type(s["const"])}
        if "enum" in s:
            return {_json_type(v) for v in s["enum"]}
        t = s.get("type")
        if isinstance(t, str):
            return {t} | ({"number"} if t == "integer" else set())
        if isinstance(t, list):
            return set(t) | ({"number"} if "integer" in t else set())
        for key in ("anyOf", "oneOf"):
            if key in s:
                out: set[str] = set()
                for branch in s[key]:
                    bt = self.types(branch, depth + 1)
                    if bt is None:
                        return None
                    out |= bt
                return out
        if "allOf" in s:
            for branch in s["allOf"]:
                bt = self.types(branch, depth + 1)
                if bt is not None:
                    return bt
        if "properties" in s:
            return {"object"}
        return None

    def minimal(self, s: Any, depth: int = 0) -> Any:
        s = self.resolve(s)
        if not isinstance(s, dict) or depth > 20:
            return None
        if "const" in s:
            return s["const"]
        if "enum" in s:
            return s["enum"][0]
        if "allOf" in s and "type" not in s:
            return self.minimal(s["allOf"][0], depth + 1)
        branch: Any = None
        for key in ("anyOf", "oneOf"):
            if key in s:
                branches = [b for b in s[key] if self.resolve(b).get("type") != "null"]
                branch = self.minimal((branches or s[key])[0], depth + 1)
                if "properties" not in s:
                    return branch
        t = s.get("type")
        if isinstance(t, list):
            t = next((x for x in t if x != "null"), "null")
        if t == "object" or (t is None and "properties" in s):
            props = s.get("properties") or {}
            out = {k: self.minimal(props.get(k, {}), depth + 1) for k in s.get("required") or ()}
            return {**out, **branch} if isinstance(branch, dict) else out
        if t == "array":
            n = int(s.get("minItems") or 0)
            return [self.minimal(s.get("items") or {}, depth + 1) for _ in range(n)]
        if t == "string":
            return "x"
        if t in ("integer", "number"):
            return max(int(s.get("minimum") or 0), 1)
        if t == "boolean":
            return False
        return None


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


WRONG_VALUES: list[tuple[str, Any]] = [
    ("object", {"zz": [1]}),
    ("array", [{"zz": 1}]),
    ("string", "zz-not-valid"),
    ("number", 3.25),
    ("null", None),
]


def mutations(view: SchemaView, methods: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(method, params) with one required field of a wrong JSON type, for every request
    method of the table and every required field whose schema constrains its type (fields
    marked ``x-deserialize-default-on-error`` fall back to a default by the schema's word)."""
    out = []
    for name, entry in sorted(methods.items()):
        kind, pcls = entry.kind, entry.params
        if kind != "request" or not pcls or pcls not in view.defs:
            continue
        schema = view.resolve(view.defs[pcls])
        base = view.minimal(schema)
        if not isinstance(base, dict):
            continue
        props = schema.get("properties") or {}
        for field in schema.get("required") or ():
            prop = props.get(field, {})
            if isinstance(prop, dict) and prop.get("x-deserialize-default-on-error"):
                continue
            allowed = view.types(prop)
            if allowed is None:
                continue
            for jtype, value in WRONG_VALUES:
                if jtype not in allowed:
                    out.append((name, {**base, field: value}))
    return out


def minimal_requests(view: SchemaView, methods: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, entry in sorted(methods.items()):
        kind, pcls = entry.kind, entry.params
        if kind == "request" and pcls in view.defs:
            out[name] = view.minimal(view.defs[pcls])
    return out


# ---- the oracle ---------------------------------------------------------------------------


class Expect:
    """What one frame must get back: nothing, or one answer with an allowed code."""

    __slots__ = ("codes", "id", "kind", "method", "must_reject")

    def __init__(
        self,
        kind: str,
        rid: Any = None,
        codes: frozenset[Any] = frozenset(),
        method: str | None = None,
        must_reject: bool = False,
    ) -> None:
        self.kind = kind  # "none" | "answer"
        self.id = rid
        self.codes = codes  # allowed error codes; "result" when a result is allowed
        self.method = method
        self.must_reject = must_reject


NONE = Expect("none")
REQUEST_CODES = frozenset({"result", -32602, -32601, -32002, -32800, -32000})


def _parse(line: bytes) -> tuple[bool, Any]:
    """Strict JSON (no NaN/Infinity, UTF-8, 64-bit integers, nesting the core accepts)."""

    def bad_constant(name: str) -> Any:
        raise ValueError(name)

    try:
        value = json.loads(line.decode("utf-8"), parse_constant=bad_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False, None
    if not _plain(value, 0):
        return False, None
    return True, value


def _plain(v: Any, depth: int) -> bool:
    if depth > 250:
        return False
    if isinstance(v, bool) or v is None:
        return True
    if isinstance(v, int):
        return -(2**63) <= v < 2**64
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(v, list):
        return all(_plain(x, depth + 1) for x in v)
    return all(_plain(k, depth + 1) and _plain(x, depth + 1) for k, x in v.items())


def expect(line: bytes, methods: dict[str, Any], max_size: int | None) -> Expect:
    if max_size is not None and len(line) > max_size:
        return Expect("answer", None, frozenset({-32600}))
    if not line.strip():
        return NONE
    ok, msg = _parse(line)
    if not ok:
        return Expect("answer", None, frozenset({-32700}))
    if type(msg) is not dict:  # `[]` too; a non-empty batch: see expect_all
        return Expect("answer", None, frozenset({-32600}))
    return _expect_msg(msg, methods)


def expect_all(line: bytes, methods: dict[str, Any], max_size: int | None) -> list[Expect]:
    """What one frame must get back, entry by entry: a JSON-RPC batch is answered per
    entry (in one array; an entry that is not an object: -32600 with id null)."""
    if max_size is None or len(line) <= max_size:
        ok, msg = _parse(line) if line.strip() else (False, None)
        if ok and type(msg) is list and msg:
            return [
                _expect_msg(m, methods)
                if type(m) is dict
                else Expect("answer", None, frozenset({-32600}))
                for m in msg
            ]
    return [expect(line, methods, max_size)]


def _expect_msg(msg: dict[str, Any], methods: dict[str, Any]) -> Expect:
    has_id = "id" in msg
    rid = msg.get("id")
    if has_id and not (rid is None or type(rid) in (int, str)):
        return Expect("answer", None, frozenset({-32600}))
    method = msg.get("method")
    is_response = method is None and ("result" in msg or "error" in msg)
    if msg.get("jsonrpc") != "2.0" and not is_response:
        return Expect("answer", rid, frozenset({-32600}))
    if is_response:
        return NONE
    if method is None or type(method) is not str:
        return Expect("answer", rid, frozenset({-32600}))
    params = msg.get("params")
    if params is not None and type(params) not in (dict, list):
        return Expect("answer", rid, frozenset({-32600})) if has_id else NONE
    if not has_id:
        return NONE
    if method in methods or method in KNOWN_EXTENSIONS:
        return Expect("answer", rid, REQUEST_CODES, method)
    return Expect("answer", rid, frozenset({-32601}), method)


def cancelled_ids(frames: list[bytes]) -> set[str]:
    """The ids (as JSON) that some `$/cancel_request` among `frames` names."""
    out = set()
    for f in frames:
        ok, msg = _parse(f)
        if ok and type(msg) is dict and msg.get("method") == "$/cancel_request":
            params = msg.get("params")
            if type(params) is dict and type(params.get("requestId")) in (int, str):
                out.add(json.dumps(params["requestId"]))
    return out


def check_answers(
    expects: list[Expect],
    answers: list[dict[str, Any]],
    baseline: dict[str, Any],
    cancelled: Collection[str] = (),
) -> None:
    """Exactly one answer per request, each with an allowed code (see module doc); a
    request a `$/cancel_request` names may answer -32800 instead (if it was in flight)."""
    want: dict[str, list[Expect]] = {}
    for e in expects:
        if e.kind == "answer":
            want.setdefault(json.dumps(e.id), []).append(e)
    got: dict[str, list[dict[str, Any]]] = {}
    for a in answers:
        got.setdefault(json.dumps(a.get("id")), []).append(a)
    assert {k: len(v) for k, v in got.items()} == {k: len(v) for k, v in want.items()}, (
        "answers per id differ from requests per id"
    )
    for key, group in want.items():
        replies = got[key]
        allowed: set[Any] = set()
        for e in group:
            allowed |= e.codes
        if len(group) > 1 and key != "null":
            allowed.add(-32600)  # the same id twice in flight: the second is refused
        if key in cancelled and any(e.method is not None for e in group):
            allowed.add(-32800)
        codes = Counter(_code(a) for a in replies)
        for code in codes:
            assert code in allowed, (key, code, allowed, replies[:3])
        if key == "null":  # parse errors: exactly as many -32700 as unparsable frames
            parse_errors = sum(1 for e in group if e.codes == frozenset({-32700}))
            assert codes[-32700] == parse_errors
        for a in replies:
            err = a.get("error")
            if err is not None and err.get("code") == -32602:
                locs = [e.get("loc") for e in (err.get("data") or {}).get("errors") or ()]
                assert locs and all(
                    isinstance(loc, list) and loc and loc[0] in ("params", "input") for loc in locs
                ), err
        if len(group) == 1 and group[0].must_reject and key not in cancelled:
            method = group[0].method
            base = baseline.get(method or "")
            code = _code(replies[0])
            if base == -32601:
                assert code == -32601, (method, replies[0])
            else:
                assert code == -32602, (method, "wrong-typed field accepted", replies[0])


def _code(answer: dict[str, Any]) -> Any:
    if "error" in answer and isinstance(answer["error"], dict):
        return answer["error"].get("code")
    assert "result" in answer, answer
    return "result"


# ---- frame strategies ---------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_leaf_or_list = scalars | st.lists(scalars, max_size=3)
json_values = (  # two levels deep, cheap to draw (st.recursive costs ~10x more per frame)
    scalars
    | st.lists(scalars, max_size=3)
    | st.dictionaries(st.text(max_size=6), _leaf_or_list, max_size=3)
    | st.dictionaries(
        st.sampled_from(["sessionId", "prompt", "type", "text", "requestId"]),
        _leaf_or_list,
        max_size=3,
    )
)
good_ids = st.sampled_from(ID_POOL)
bad_ids = st.one_of(
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.integers(-5, 5), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(-5, 5), max_size=2),
)


def _msg(**kw: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", **kw})


def frame_strategy(methods: dict[str, Any], muts: list[Any], minimal: dict[str, Any]) -> Any:
    names = sorted(methods)
    method_names = st.sampled_from(names)
    unknown = st.text(min_size=1, max_size=16).filter(
        lambda m: m not in methods and m not in KNOWN_EXTENSIONS
    )
    aliases = st.sampled_from(["_" + n for n in names])

    valid_request = st.builds(
        lambda rid, m: _msg(id=rid, method=m, params=minimal.get(m) or {}),
        good_ids,
        st.sampled_from(sorted(minimal)),
    )
    random_bytes = st.binary(max_size=48).map(lambda b: b.replace(b"\n", b" "))
    truncated = st.builds(
        lambda f, cut: f[: max(1, int(len(f) * cut))],
        valid_request,
        st.floats(0.0, 0.98),
    )
    oversized = st.builds(
        lambda rid: _msg(id=rid, method="initialize", params={"pad": "x" * (MAX_SIZE + 10)}),
        good_ids,
    )
    shapes = st.dictionaries(
        st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error"]),
        json_values,
        max_size=5,
    ).map(orjson.dumps)
    bad_version = st.builds(
        lambda rid, v, m: orjson.dumps({"jsonrpc": v, "id": rid, "method": m}),
        good_ids,
        st.sampled_from(["1.0", 2, None, "2"]),
        method_names,
    )
    wrong_id = st.builds(lambda rid, m: _msg(id=rid, method=m), bad_ids, method_names)
    random_params = st.builds(
        lambda rid, m, p: _msg(id=rid, method=m, params=p),
        good_ids,
        method_names,
        json_values,
    )
    mutated = st.builds(
        lambda rid, mp: (_msg(id=rid, method=mp[0], params=mp[1]), mp[0]),
        st.integers(1000, 10**9),  # unique ids: the reply is checked against the baseline
        st.sampled_from(muts),
    )
    unknown_methods = st.builds(
        lambda rid, m, p: _msg(id=rid, method=m, params=p),
        good_ids,
        unknown | aliases,
        st.none() | st.dictionaries(st.text(max_size=4), scalars, max_size=2),
    )
    responses = st.builds(
        lambda rid, v, err: _msg(id=rid, **({"error": {"code": v}} if err else {"result": v})),
        good_ids | st.integers(-(2**63), 2**63 - 1),
        json_values,
        st.booleans(),
    )
    notifications = st.builds(
        lambda m, p: _msg(method=m, params=p),
        method_names,
        st.none() | st.dictionaries(st.text(max_size=4), json_values, max_size=2),
    )
    cancels = st.builds(
        lambda r: _msg(method="$/cancel_request", params={"requestId": r}),
        json_values,
    )
    batches = st.lists(valid_request, max_size=3).map(lambda fs: b"[" + b",".join(fs) + b"]")
    plain = st.one_of(
        random_bytes,
        truncated,
        oversized,
        shapes,
        bad_version,
        wrong_id,
        random_params,
        unknown_methods,
        responses,
        notifications,
        cancels,
        batches,
        valid_request,
    ).map(lambda f: (f, None))
    return st.one_of(plain, mutated, mutated)


# ---- the agent under test -----------------------------------------------------------------


def prepare(tmp: Path, shared_acp: Path, package: str, rev: str, unstable: bool) -> dict[str, Any]:
    """A generated agent of one schema revision plus what the fuzzer derives from it."""
    env = hs.build(tmp, shared_acp, package, rev=rev, unstable=unstable)
    handlers = hs.load(tmp, package)
    dispatcher = importlib.import_module(f"{package}._generated.dispatcher")
    suffix = ".unstable" if unstable else ""
    schema = json.loads((shared_acp / rev / f"schema{suffix}.json").read_text())
    view = SchemaView(schema)
    methods = dict(dispatcher.AGENT_METHODS)
    muts = mutations(view, methods)
    assert len(muts) >= 20, "too few wrong-type mutations derived from the schema"
    return {
        "env": env,
        "package": package,
        "rev": rev,
        "agent": handlers.Agent,
        "methods": methods,
        "muts": muts,
        "minimal": minimal_requests(view, methods),
        "serve": hs.runtime_of(package, "serve"),
        "stdio": hs.runtime_of(package, "stdio"),
    }


@pytest.fixture(scope="module")
def fuzz_agent(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, Any]:
    return prepare(tmp_path_factory.mktemp("fuzz"), shared_acp, "fuzzagent", "v1", True)


@pytest.fixture(scope="module")
def fuzz_agent_v2(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, Any]:
    return prepare(tmp_path_factory.mktemp("fuzz2"), shared_acp, "fuzzagent2", "v2", False)


class InProcess:
    """A generated agent behind the stdio framing, in this process."""

    def __init__(self, fa: dict[str, Any]) -> None:
        self.out: list[dict[str, Any]] = []
        self.answers: list[dict[str, Any]] = []
        self.arrivals = Arrivals()

        async def sink(batch: list[tuple[bytes, Any]]) -> None:
            for frame, _sid in batch:
                msg = orjson.loads(frame)  # every frame the agent writes is JSON
                if type(msg) is list:  # a batch's answers: a non-empty array of answers
                    assert msg and all(type(m) is dict and "method" not in m for m in msg)
                    self.answers.extend(msg)
                    continue
                assert type(msg) is dict
                (self.answers if "method" not in msg else self.out).append(msg)
            self.arrivals.arrived()

        self.agent = fa["agent"]()
        self.conn = fa["serve"].agent_connection(self.agent, sink, MAX_SIZE)
        self.reader = asyncio.StreamReader()
        self.task = asyncio.get_running_loop().create_task(
            fa["stdio"].read_frames(self.reader, self.conn, MAX_SIZE)
        )
        self.task.add_done_callback(lambda _: self.arrivals.arrived())

    async def until(self, what: str, pred: Any, timeout: float = 10) -> None:
        """Wake on each write (and on the reader's end) until `pred()` holds."""

        def ready() -> bool:
            assert not self.task.done(), f"the reader died: {self.task}"
            return bool(pred())

        await self.arrivals.until(what, ready, timeout)

    async def wait_for(self, n: int, timeout: float = 10) -> None:
        await self.until(f"{n} answers (hang)", lambda: len(self.answers) >= n, timeout)

    async def call(self, rid: Any, method: str, params: Any) -> dict[str, Any]:
        self.reader.feed_data(_msg(id=rid, method=method, params=params) + b"\n")

        def answer() -> dict[str, Any] | None:
            return next((a for a in self.answers if a.get("id") == rid), None)

        await self.until(f"an answer to {method} (hang)", answer)
        a = answer()
        assert a is not None
        self.answers.remove(a)
        return a

    async def session(self) -> str:
        r = await self.call("s-init", "initialize", {"protocolVersion": 1})
        assert "result" in r, r
        r = await self.call("s-new", "session/new", {"cwd": "/tmp", "mcpServers": []})
        return str(r["result"]["sessionId"])

    async def still_works(self) -> None:
        """A well-formed prompt after the fuzz: its text streams, then end_turn."""
        sid = await self.session()
        self.out.clear()
        r = await self.call("s-prompt", "session/prompt", hs.text_prompt(sid, "alive?"))
        assert r == {"jsonrpc": "2.0", "id": "s-prompt", "result": {"stopReason": "end_turn"}}
        chunks = [
            m["params"]["update"]["content"]["text"]
            for m in self.out
            if m.get("method") == "session/update" and m["params"].get("sessionId") == sid
        ]
        assert chunks == ["alive?"]

    async def still_works_typed(self) -> None:
        """With every method overridden: a valid prompt is still answered."""
        r = await self.call("t-prompt", "session/prompt", hs.text_prompt("any", "alive?"))
        assert r == {"jsonrpc": "2.0", "id": "t-prompt", "result": {}}, r

    async def close(self) -> None:
        self.reader.feed_eof()
        await asyncio.wait_for(self.task, 10)
        await asyncio.wait_for(self.conn.close(), 10)


async def baseline_codes(fa: dict[str, Any]) -> dict[str, Any]:
    """The code each request method gets with minimal valid params (a real session id)."""
    p = InProcess(fa)
    sid = await p.session()
    out = {}
    for i, (name, minimal) in enumerate(sorted(fa["minimal"].items())):
        params = minimal
        if isinstance(params, dict) and "sessionId" in params:
            params = {**params, "sessionId": sid}
        out[name] = _code(await p.call(f"base-{i}", name, params))
    await p.close()
    return out


def _with_session(frame: bytes, sid: str) -> bytes:
    msg = orjson.loads(frame)
    params = msg.get("params")
    if isinstance(params, dict) and params.get("sessionId") == "x":  # not the mutated field
        params["sessionId"] = sid
    return orjson.dumps(msg)


TOTAL: Counter[str] = Counter()


class ErrorCount(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


@pytest.mark.wire_check_send_only  # the fuzzer sends malformed frames
def test_fuzz_in_process(fuzz_agent: dict[str, Any]) -> None:
    """>= 100,000 fuzzed frames through the stdio framing into a generated agent's core:
    every request answered exactly once with the right code, notifications and responses
    unanswered, the reader never dies, no hang, and a well-formed prompt still works."""
    fa = fuzz_agent
    methods = fa["methods"]
    runtime_log = logging.getLogger("acp.runtime")
    level_before = runtime_log.level
    runtime_log.setLevel(logging.ERROR)  # one warning per junk response; errors are counted
    errors = ErrorCount()
    runtime_log.addHandler(errors)
    runner = asyncio.Runner()
    baseline = runner.run(baseline_codes(fa))
    assert "result" in baseline.values(), baseline  # some methods are implemented
    frames_fed = 0
    started = time.perf_counter()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        specs=st.lists(
            frame_strategy(methods, fa["muts"], fa["minimal"]), min_size=SPECS[0], max_size=SPECS[1]
        ),
        cuts=st.lists(st.integers(1, 4000), max_size=4),
    )
    def run(specs: list[tuple[bytes, str | None]], cuts: list[int]) -> None:
        nonlocal frames_fed

        async def go() -> None:
            nonlocal frames_fed
            oracle: dict[bytes, list[Expect]] = {}
            p = InProcess(fa)
            sid = await p.session()
            p.answers.clear()
            lines: list[bytes] = []
            expects: list[Expect] = []
            for replay in range(REPLAYS):  # the same frames again: ids reused and duplicated
                for spec_frame, mutated_method in specs:
                    frame = spec_frame
                    if mutated_method is not None:
                        if replay:
                            continue  # unique ids: fed once
                        frame = _with_session(frame, sid)
                        e = expect(frame, methods, MAX_SIZE)
                        e.must_reject = True
                        got = [e]
                    else:
                        got = oracle.get(frame) or oracle.setdefault(
                            frame, expect_all(frame, methods, MAX_SIZE)
                        )
                    lines.append(frame)
                    expects.extend(got)
            blob = b"\n".join(lines) + b"\n"
            pos = 0
            for cut in sorted(cuts):  # arbitrary read boundaries, even inside a frame
                p.reader.feed_data(blob[pos : pos + cut])
                pos += cut
                await asyncio.sleep(0)
            p.reader.feed_data(blob[pos:])
            want = sum(1 for e in expects if e.kind == "answer")
            await p.wait_for(want)
            await asyncio.sleep(0.005)  # nothing more may come
            check_answers(expects, p.answers, baseline, cancelled_ids(lines))
            frames_fed += len(lines)
            # requests still in flight (prompts) finish; then a clean prompt works
            p.answers.clear()
            await p.still_works()
            await p.close()

        runner.run(go())

    try:
        run()
    finally:
        runner.close()
        runtime_log.removeHandler(errors)
        runtime_log.setLevel(level_before)  # the logger is shared by every test in this worker
    assert errors.records == [], "the runtime logged errors (it tripped over input)"
    elapsed = time.perf_counter() - started
    TOTAL["in_process"] += frames_fed
    print(
        f"\nfuzz in process: {frames_fed} frames in {elapsed:.1f} s "
        f"({frames_fed / elapsed:.0f} frames/s)"
    )
    assert frames_fed >= 100_000


TYPED_HANDLERS = """
from __future__ import annotations

from typing import Any

from ._generated.dispatcher import AGENT_METHODS, AgentBase


class Agent(AgentBase):
    pass


def _typed(attr: str) -> Any:
    async def method(self: Agent, params: Any) -> None:
        return None

    method.__name__ = attr
    return method


for _method in AGENT_METHODS.values():
    setattr(Agent, _method.attr, _typed(_method.attr))
"""


@pytest.fixture(scope="module")
def typed_agent(
    tmp_path_factory: pytest.TempPathFactory, shared_acp: Path, fuzz_agent: dict[str, Any]
) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("fuzztyped")
    hs.build(tmp, shared_acp, "fuzztyped", handlers=TYPED_HANDLERS)
    handlers = hs.load(tmp, "fuzztyped")
    return {
        **fuzz_agent,
        "agent": handlers.Agent,
        "serve": hs.runtime_of("fuzztyped", "serve"),
        "stdio": hs.runtime_of("fuzztyped", "stdio"),
    }


@pytest.mark.wire_check_send_only  # the fuzzer sends malformed frames
@pytest.mark.wire_check_known(
    r"agent sent\): \S+ result \(\w+\) /\w+: Field required -- frame: \S+\"result\":\{\}\}",
    reason="a typed override returning None is answered {}, an invalid result where the "
    "schema requires fields (session/new, session/prompt...): dispatch should refuse it "
    "(helper `revision`)",
)
def test_fuzz_typed_overrides(typed_agent: dict[str, Any]) -> None:
    """A handlers.py that overrides every method of the METHODS table gets typed params:
    each wrong-typed required field (every method, every field, every wrong JSON type) is
    refused with -32602 located at that field under ``params``, before user code runs; minimal
    valid params are accepted; random params never produce -32603."""
    fa = typed_agent

    async def main() -> int:
        p = InProcess(fa)
        for i, (name, params) in enumerate(sorted(fa["minimal"].items())):
            r = await p.call(f"ok-{i}", name, params)
            assert "result" in r, (name, params, r)
        for i, (name, params) in enumerate(fa["muts"]):
            r = await p.call(f"m-{i}", name, params)
            err = r.get("error") or {}
            assert err.get("code") == -32602, (name, params, r)
            field = next(k for k, v in params.items() if v in [w for _, w in WRONG_VALUES])
            locs = [e["loc"] for e in err["data"]["errors"]]
            # located at the field (a union's branch name may come between)
            assert any(loc[0] == "params" and field in loc for loc in locs), (name, field, locs)
        rng = random.Random(3)
        lines = _junk_lines(rng, fa, 3000)
        expects = [e for f in lines for e in expect_all(f, fa["methods"], MAX_SIZE)]
        p.answers.clear()
        p.reader.feed_data(b"\n".join(lines) + b"\n")
        await p.wait_for(sum(1 for e in expects if e.kind == "answer"))
        assert -32603 not in {_code(a) for a in p.answers}
        await p.still_works_typed()
        await p.close()
        return len(fa["minimal"]) + len(fa["muts"]) + len(lines)

    runner = asyncio.Runner()
    try:
        n = runner.run(main())
    finally:
        runner.close()
    TOTAL["typed"] += n
    print(f"\nfuzz typed overrides: {n} frames")


def _junk_lines(rng: random.Random, fa: dict[str, Any], n: int) -> list[bytes]:
    """Seeded mix of the same frame kinds, for the subprocess transports."""
    names = sorted(fa["methods"])
    out: list[bytes] = []
    for _ in range(n):
        k = rng.randrange(11)
        rid = rng.choice(ID_POOL)
        m = rng.choice(names)
        if k == 0:
            out.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))))
        elif k == 1:
            f = _msg(id=rid, method=m, params=fa["minimal"].get(m) or {})
            out.append(f[: rng.randrange(1, len(f))])
        elif k == 2:
            out.append(_msg(id=rid, method="zz/" + str(rng.random())))
        elif k == 3:
            out.append(_msg(id=rid, result={"x": 1}))
        elif k == 4:
            out.append(_msg(method=m, params={"sessionId": rng.random()}))
        elif k == 5:
            out.append(_msg(id=[rid], method=m))
        elif k == 6:
            out.append(b"[" + _msg(id=rid, method=m) + b"]")
        elif k == 7:
            mm, params = rng.choice(fa["muts"])
            out.append(_msg(id=rid, method=mm, params=params))
        elif k == 8:
            out.append(_msg(method="$/cancel_request", params={"requestId": [rid]}))
        elif k == 9:
            out.append(_msg(id=rid, method=m, params=[rng.random()]))
        else:  # over the agent's size limit (MAX_SIZE: set for the subprocesses too)
            out.append(_msg(id=rid, method=m, params={"pad": "x" * (MAX_SIZE + 10)}))
    return [f.replace(b"\n", b" ") for f in out]


@pytest.mark.wire_check_send_only  # the fuzzer sends malformed frames
@pytest.mark.slow
@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_fuzz_stdio_subprocess(rev: str, request: pytest.FixtureRequest) -> None:
    """The generated agent (v1 unstable and v2 schema) as a real stdio subprocess gets a
    share of junk frames: one answer per request (ids counted), only JSON lines on stdout,
    still alive, and a well-formed prompt afterwards works (v2: accepted, then the
    lifecycle updates); EOF then ends it with exit code 0."""
    fa = request.getfixturevalue("fuzz_agent" if rev == "v1" else "fuzz_agent_v2")
    rng = random.Random(7)
    lines = _junk_lines(rng, fa, 6000)
    expects = [e for f in lines for e in expect_all(f, fa["methods"], MAX_SIZE)]

    async def main() -> int:
        env = {**fa["env"], "ACP_MAX_MESSAGE_SIZE": str(MAX_SIZE)}
        peer = await hs.StdioPeer.start(env, fa["package"])
        started = time.perf_counter()
        await peer.send_bytes(b"\n".join(lines) + b"\n")
        want = sum(1 for e in expects if e.kind == "answer")
        answers: list[dict[str, Any]] = []
        while len(answers) < want:
            m = await peer.recv(15)
            if "method" not in m:
                answers.append(m)
        elapsed = time.perf_counter() - started
        codes = Counter(_code(a) for a in answers)
        assert -32603 not in codes, codes
        got = Counter(json.dumps(a.get("id")) for a in answers)
        assert got == Counter(json.dumps(e.id) for e in expects if e.kind == "answer")
        assert codes[-32700] == sum(1 for e in expects if e.codes == frozenset({-32700}))
        if rev == "v1":
            sid = await hs.open_session(peer, 10_000)
        else:
            init = {"protocolVersion": 2, "info": {"name": "fuzz", "version": "1"}}
            assert "result" in await peer.call(10_000, "initialize", init)
            r = await peer.call(10_001, "session/new", {"cwd": "/tmp"})
            sid = r["result"]["sessionId"]
        await peer.send(
            {
                "jsonrpc": "2.0",
                "id": "ok",
                "method": "session/prompt",
                "params": hs.text_prompt(sid, "hello"),
            }
        )
        r, seen = await peer.until_id("ok")
        if rev == "v1":
            assert r["result"] == {"stopReason": "end_turn"}
            assert [m["params"]["update"]["content"]["text"] for m in seen] == ["hello"]
        else:
            assert list(r["result"]) == ["messageId"]  # v2: the accepted message's id
            kinds: list[tuple[str, Any]] = []
            while not kinds or kinds[-1] != ("state_update", "idle"):
                u = (await peer.recv())["params"]["update"]
                c = u.get("content")
                kinds.append(
                    (
                        u["sessionUpdate"],
                        u.get("state") or (c.get("text") if type(c) is dict else None),
                    )
                )
            assert kinds[1:] == [
                ("state_update", "running"),
                ("agent_message_chunk", "hello"),
                ("state_update", "idle"),
            ]
        assert peer.bad_lines == []
        rc, err = await peer.close()
        assert rc == 0 and b"Traceback" not in err, err[-2000:]
        print(
            f"\nfuzz stdio {rev}: {len(lines)} frames in {elapsed:.2f} s ({len(lines) / elapsed:.0f}/s)"
        )
        return len(lines)

    TOTAL["stdio_" + rev] += asyncio.run(main())


def _http_ok(status: int, body: bytes) -> bool:
    """2xx/4xx; 501 only for a batch (a JSON array: not supported, as in the SDK)."""
    return 200 <= status < 500 or (status == 501 and body.lstrip().startswith(b"["))


@pytest.mark.wire_check_send_only  # the fuzzer sends malformed frames
@pytest.mark.slow
def test_fuzz_http_server(fuzz_agent: dict[str, Any], tmp_path: Path) -> None:
    """The generated agent over HTTP (uvicorn, 127.0.0.1) gets junk POSTs: each one an
    HTTP answer (never a 500, never a hang), every JSON-RPC request on the connection
    answered exactly once on the SSE stream, and a well-formed prompt still works."""
    fa = fuzz_agent
    rng = random.Random(11)
    port = hs.free_port()
    proc = hs.start_http(
        fa["env"],
        "fuzzagent",
        port,
        ACP_SESSION_DB=str(tmp_path / "s.db"),
        ACP_MAX_MESSAGE_SIZE=str(MAX_SIZE),
    )
    url = f"http://127.0.0.1:{port}/acp"
    sent = 0
    started = time.perf_counter()
    try:
        with httpx.Client(timeout=10) as c:
            # junk before any connection exists: refused with 4xx, never 5xx
            for f in _junk_lines(rng, fa, 300):
                r = c.post(url, content=f, headers={"Content-Type": "application/json"})
                sent += 1
                assert _http_ok(r.status_code, f), (r.status_code, f[:200], r.text[:300])
                if r.status_code == 200:  # an initialize answer: a connection iff it succeeded
                    assert ("Acp-Connection-Id" in r.headers) == ("result" in r.json()), r.text
            r = c.post(
                url,
                json={
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {"protocolVersion": 1},
                },
            )
            assert r.status_code == 200
            h = {"Acp-Connection-Id": r.headers["Acp-Connection-Id"]}
            lines = _junk_lines(rng, fa, 1500)
            answered: Counter[str] = Counter()
            wanted: Counter[str] = Counter()
            for f in lines:
                r = c.post(url, content=f, headers={**h, "Content-Type": "application/json"})
                sent += 1
                assert _http_ok(r.status_code, f), (r.status_code, f[:200], r.text[:300])
                if r.status_code == 202:
                    e = expect(f, fa["methods"], MAX_SIZE)
                    if e.kind == "answer":
                        wanted[json.dumps(e.id)] += 1
            # a session and a prompt after the junk; then read the connection stream
            r = c.post(
                url,
                json={
                    "jsonrpc": "2.0",
                    "id": "new",
                    "method": "session/new",
                    "params": {"cwd": "/tmp", "mcpServers": []},
                },
                headers=h,
            )
            assert r.status_code == 202
            wanted[json.dumps("new")] += 1
            sid = None
            with c.stream("GET", url, headers={**h, "Accept": "text/event-stream"}) as s:
                for line in s.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    msg = json.loads(line[5:])
                    if "method" in msg:
                        continue
                    assert _code(msg) != -32603, msg
                    answered[json.dumps(msg.get("id"))] += 1
                    if msg.get("id") == "new":
                        sid = msg["result"]["sessionId"]
                    if sum(answered.values()) >= sum(wanted.values()):
                        break
            assert answered == wanted
            assert sid is not None
            sh = {**h, "Acp-Session-Id": sid}
            r = c.post(
                url,
                json={
                    "jsonrpc": "2.0",
                    "id": "p",
                    "method": "session/prompt",
                    "params": hs.text_prompt(sid, "hello"),
                },
                headers=sh,
            )
            assert r.status_code == 202
            seen = []
            with c.stream("GET", url, headers={**sh, "Accept": "text/event-stream"}) as s:
                for line in s.iter_lines():
                    if line.startswith("data:"):
                        msg = json.loads(line[5:])
                        seen.append(msg)
                        if msg.get("id") == "p":
                            break
            assert seen[-1]["result"] == {"stopReason": "end_turn"}
            assert [m["params"]["update"]["content"]["text"] for m in seen[:-1]] == ["hello"]
        ws_frames = asyncio.run(_fuzz_websocket(fa, port, rng))
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    elapsed = time.perf_counter() - started
    assert b"Traceback" not in err, err.decode()[-3000:]
    TOTAL["http"] += sent + ws_frames
    print(
        f"\nfuzz http: {sent} POSTs + {ws_frames} WebSocket frames in {elapsed:.1f} s "
        f"({(sent + ws_frames) / elapsed:.0f}/s)"
    )


async def _fuzz_websocket(fa: dict[str, Any], port: int, rng: random.Random) -> int:
    """Junk text and binary frames on a WebSocket: every request answered exactly once
    (binary frames are ignored), then a prompt on the same socket still works."""
    import websockets

    lines = _junk_lines(rng, fa, 2000)
    async with websockets.connect(f"ws://127.0.0.1:{port}/acp", max_size=None) as ws:
        for f in lines:
            await ws.send(f.decode("utf-8", "replace"))
            await ws.send(b"\x00binary ignored")
        want: Counter[str] = Counter()
        for f in lines:  # what the text frame (invalid UTF-8 replaced) must get
            raw = expect_all(f, fa["methods"], MAX_SIZE)
            if len(raw) == 1 and raw[0].kind != "answer":
                continue
            text = expect_all(f.decode("utf-8", "replace").encode(), fa["methods"], MAX_SIZE)
            want.update(json.dumps(e.id) for e in text if e.kind == "answer")
        got: Counter[str] = Counter()
        while sum(got.values()) < sum(want.values()):
            m = json.loads(await asyncio.wait_for(ws.recv(), 15))
            for a in m if type(m) is list else [m]:  # a batch's answers come in one array
                if "method" not in a:
                    assert _code(a) != -32603, a
                    got[json.dumps(a.get("id"))] += 1
        assert got == want
        init = {"protocolVersion": 1}
        await ws.send(
            json.dumps({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": init})
        )
        await ws.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": "n",
                    "method": "session/new",
                    "params": {"cwd": "/tmp", "mcpServers": []},
                }
            )
        )
        sid = None
        while sid is None:
            m = json.loads(await asyncio.wait_for(ws.recv(), 15))
            if m.get("id") == "n":
                sid = m["result"]["sessionId"]
        await ws.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": "p",
                    "method": "session/prompt",
                    "params": hs.text_prompt(sid, "hello"),
                }
            )
        )
        texts = []
        while True:
            m = json.loads(await asyncio.wait_for(ws.recv(), 15))
            if m.get("method") == "session/update":
                texts.append(m["params"]["update"]["content"]["text"])
            elif m.get("id") == "p":
                assert m["result"] == {"stopReason": "end_turn"} and texts == ["hello"]
                break
    return 2 * len(lines)


@pytest.mark.wire_check_send_only  # an unknown method on purpose
def test_request_cancelled_before_it_starts_is_answered(fuzz_agent: dict[str, Any]) -> None:
    """Found by the fuzzer: a request and a `$/cancel_request` for it in the same read
    (the request's task cancelled before it ever ran) got no answer at all and stayed in
    the in-flight table.  Now: exactly one answer, -32800, and the id is free again."""

    async def main() -> None:
        p = InProcess(fuzz_agent)
        for method in ("zz/unknown", "initialize"):
            p.answers.clear()
            p.reader.feed_data(
                _msg(id=0, method=method, params={"protocolVersion": 1})
                + b"\n"
                + _msg(method="$/cancel_request", params={"requestId": 0})
                + b"\n"
            )
            await p.wait_for(1)
            await asyncio.sleep(0.01)  # a window for a second answer: none may come
            assert p.answers == [
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "error": {"code": -32800, "message": "request cancelled"},
                }
            ]
        p.answers.clear()
        r = await p.call(0, "initialize", {"protocolVersion": 1})  # the id is free again
        assert "result" in r
        await p.close()

    asyncio.run(main())


def test_v2_turn_cancelled_before_it_starts_still_ends(fuzz_agent_v2: dict[str, Any]) -> None:
    """v2 lifecycle: a prompt and a session/cancel in the same read (the accepted turn's
    task cancelled before it ran) sent no update at all, so a client waiting for the
    turn's end waited forever.  Now: user_message, then idle with stopReason cancelled,
    and the session takes the next prompt (running, the chunk, idle end_turn)."""

    async def main() -> None:
        p = InProcess(fuzz_agent_v2)
        init = {"protocolVersion": 2, "info": {"name": "t", "version": "1"}}
        assert "result" in await p.call(1, "initialize", init)
        sid = (await p.call(2, "session/new", {"cwd": "/tmp"}))["result"]["sessionId"]
        p.reader.feed_data(
            _msg(id=3, method="session/prompt", params=hs.text_prompt(sid, "hi"))
            + b"\n"
            + _msg(method="session/cancel", params={"sessionId": sid})
            + b"\n"
        )
        await p.wait_for(1)
        await p.until("user_message and idle", lambda: len(p.out) >= 2)
        kinds = [
            (m["params"]["update"]["sessionUpdate"], m["params"]["update"].get("stopReason"))
            for m in p.out
        ]
        assert kinds == [("user_message", None), ("state_update", "cancelled")], kinds
        p.out.clear()
        again = await p.call(4, "session/prompt", hs.text_prompt(sid, "again"))
        assert list(again["result"]) == ["messageId"]
        await p.until("the second turn's four updates", lambda: len(p.out) >= 4)
        updates = [m["params"]["update"] for m in p.out]
        assert [u.get("state") or u["sessionUpdate"] for u in updates] == [
            "user_message",
            "running",
            "agent_message_chunk",
            "idle",
        ]
        assert updates[-1]["stopReason"] == "end_turn"
        await p.close()

    asyncio.run(main())
