"""`agentgen inspect` in a real browser: the system's headless Chromium, driven by Playwright,
against the coder and echo examples over stdio and HTTP, and a broken agent whose frame
the wire view must mark at its JSON pointer.  Every frame is schema-checked twice: by the
page's own wire view (asserted here) and by the suite's wire check in the inspector
process (tests/conftest.py)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from coder_support import build_coder
from inspect_support import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PY,
    build_example,
    http_agent,
    inspector,
    load_schema_file,
    schema_path,
    write_broken_agent,
)

pytestmark = pytest.mark.slow

APP = "def greet():\n    return 'hello'\n"
TIMEOUT = 20_000  # ms, for each wait on the page


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing (.ci/run installs Debian's chromium)")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    with sync_api.sync_playwright() as pw:
        found = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield found
        found.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1500, "height": 900}, accept_downloads=True)
    found = context.new_page()
    errors: list[str] = []
    found.on("pageerror", lambda exc: errors.append(str(exc)))
    yield found
    context.close()
    assert not errors, errors


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("inspect-cache")


def _work(tmp: Path) -> Path:
    work = tmp / "work"
    work.mkdir()
    (work / "app.py").write_text(APP)
    return work


def _open_session(page: Any, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("#status.ok", timeout=TIMEOUT)
    page.click("#new-session")
    page.wait_for_selector("#session-current:not(.muted)", timeout=TIMEOUT)


def _prompt(page: Any, text: str) -> None:
    page.fill("#prompt-text", text)
    page.click("#send")


def _wire_is_valid(page: Any) -> list[str]:
    """Every row of the wire view marked valid; the rows' frame summaries."""
    checks = page.locator("#wire tr.frame td:nth-child(5)").all_inner_texts()
    assert checks and set(checks) == {"valid"}, checks
    return list(page.locator("#wire tr.frame td:nth-child(4)").all_inner_texts())


def _coder_turn(page: Any, work: Path, *, asked: bool, shot: str | None = None) -> None:
    """One coder turn: plan, thought, the edit's diff, permission allowed, the write and
    the terminal command allowed (`asked`), the compile check in a terminal, the summary."""
    _prompt(page, "replace `'hello'` with `'hi'` in app.py")
    dialog = page.wait_for_selector("dialog[open]", timeout=TIMEOUT)
    assert "Permission: Edit app.py" in page.inner_text("#dialog-title")
    # the agent's own options, by their kinds
    kinds = page.locator("#dialog-buttons button").evaluate_all("bs => bs.map(b => b.dataset.kind)")
    assert kinds == ["allow_once", "reject_once", "cancelled"], kinds
    assert "+     return 'hi'" in dialog.inner_text()
    if shot:
        page.screenshot(path=shot)
    page.click("dialog button[data-kind=allow_once]")
    if asked:
        page.wait_for_selector("dialog[open] button[data-kind=allow]", timeout=TIMEOUT)
        assert "The agent writes" in page.inner_text("#dialog-title")
        assert "-     return 'hello'" in page.inner_text("#dialog-body")
        page.click("dialog button[data-kind=allow]")
        # the check's command runs only once allowed
        page.wait_for_selector("dialog[open] pre.term", timeout=TIMEOUT)
        assert "The agent runs a command" in page.inner_text("#dialog-title")
        shown = page.inner_text("dialog pre.term")
        assert "compile(" in shown and shown.endswith(f" {work / 'app.py'}"), shown
        page.click("dialog button[data-kind=allow]")
    page.wait_for_selector("#transcript .stop", timeout=TIMEOUT)
    transcript = page.inner_text("#transcript")
    assert "turn ended: end_turn" in transcript
    assert "Replaced 1 occurrence" in transcript
    # the plan as a checklist, all done; the diff as a diff; the terminal with its command
    assert page.locator(".plan li.completed").count() == 3
    assert page.locator(".diff .add").first.inner_text() == "+     return 'hi'"
    assert page.locator(".diff .del").first.inner_text() == "-     return 'hello'"
    assert page.locator(".tool pre.term").count() == 1
    assert page.inner_text(".tool pre.term") == "(no output)\n[exit 0]"  # compile: quiet
    assert "python: compile" in transcript
    statuses = page.locator(".tool .status").all_inner_texts()
    assert statuses and set(statuses) == {"completed"}, statuses
    assert (work / "app.py").read_text() == "def greet():\n    return 'hi'\n"


def test_the_coder_turn_renders_over_stdio(
    page: Any, tmp_path: Path, shared_acp: Path, cache: Path
) -> None:
    schema = schema_path(shared_acp)
    env = build_coder(tmp_path, load_schema_file(schema), "coder_inspect")
    work = _work(tmp_path)
    shot = os.environ.get("AGENTGEN_INSPECT_SCREENSHOT")
    with inspector(
        "--schema", str(schema), "--", PY, "-m", "coder_inspect", cwd=work, cache=cache, env=env
    ) as running:
        _open_session(page, running.url)
        assert page.inner_text("#agent-info") == "Coder 0.1.0"
        assert page.inner_text("#version") == "protocol v1"
        # modes and slash commands as live controls
        assert page.locator("#mode-select option").all_inner_texts() == ["Code", "Ask"]
        page.wait_for_selector("#commands button", timeout=TIMEOUT)
        assert page.locator("#commands button").all_inner_texts() == ["/help", "/undo"]
        _coder_turn(page, work, asked=True, shot=shot)
        frames = _wire_is_valid(page)
        for method in ("fs/read_text_file", "session/request_permission", "terminal/create"):
            assert any(f.startswith(method) for f in frames), (method, frames)
        # export as JSON lines: every frame, each with its verdict
        with page.expect_download() as download:
            page.click("#wire-export")
        lines = Path(download.value.path()).read_text().splitlines()
        assert len(lines) == len(frames)
        rows = [json.loads(line) for line in lines]
        assert all(r["valid"] and r["dir"] in ("in", "out") and r["size"] > 0 for r in rows)
        assert rows[0]["frame"]["method"] == "initialize"
        # the ask mode, switched from the page, shows the diff and writes nothing
        page.select_option("#mode-select", "ask")
        page.wait_for_selector("text=mode: ask", timeout=TIMEOUT)
        page.evaluate("document.getElementById('transcript').replaceChildren()")
        _prompt(page, "replace `'hi'` with `'hey'` in app.py")
        page.wait_for_selector("#transcript .stop", timeout=TIMEOUT)
        assert "nothing written" in page.inner_text("#transcript")
        assert (work / "app.py").read_text() == "def greet():\n    return 'hi'\n"
        _wire_is_valid(page)


def test_a_rejected_permission_leaves_the_file_and_fails_the_tool_call(
    page: Any, tmp_path: Path, shared_acp: Path, cache: Path
) -> None:
    schema = schema_path(shared_acp)
    env = build_coder(tmp_path, load_schema_file(schema), "coder_reject")
    work = _work(tmp_path)
    with inspector(
        "--schema", str(schema), "--", PY, "-m", "coder_reject", cwd=work, cache=cache, env=env
    ) as running:
        _open_session(page, running.url)
        _prompt(page, "replace `'hello'` with `'hi'` in app.py")
        page.wait_for_selector("dialog[open]", timeout=TIMEOUT)
        page.click("dialog button[data-kind=reject_once]")
        page.wait_for_selector("#transcript .stop", timeout=TIMEOUT)
        assert "rejected: the file is untouched" in page.inner_text("#transcript")
        assert page.locator(".tool .status").first.inner_text() == "failed"
        assert (work / "app.py").read_text() == APP
        _wire_is_valid(page)


def test_the_coder_turn_renders_over_http_with_auto_approve(
    page: Any, tmp_path: Path, shared_acp: Path, cache: Path
) -> None:
    schema = schema_path(shared_acp)
    env = build_coder(tmp_path, load_schema_file(schema), "coder_inspect_http", transport="http")
    work = _work(tmp_path)
    with (
        http_agent(env, "coder_inspect_http", tmp_path) as url,
        inspector(
            "--schema", str(schema), "--auto-approve", "--url", url, cwd=work, cache=cache
        ) as running,
    ):
        _open_session(page, running.url)
        assert page.inner_text("#target") == f"http: {url}"
        _coder_turn(page, work, asked=False)
        assert "/work/app.py (auto-approved)" in page.inner_text("#transcript")
        _wire_is_valid(page)


@pytest.mark.parametrize("transport", ["stdio", "http", "websocket"])
def test_the_echo_agent_answers_in_the_page(
    page: Any, tmp_path: Path, shared_acp: Path, cache: Path, transport: str
) -> None:
    schema = schema_path(shared_acp)
    package = f"echo_inspect_{transport}"
    served = "stdio" if transport == "stdio" else "http"
    env = build_example(tmp_path, load_schema_file(schema), "echo", package, served)
    with contextlib.ExitStack() as stack:
        target = stack.enter_context(_agent_args(transport, env, package, tmp_path))
        r = stack.enter_context(
            inspector("--schema", str(schema), *target, cwd=tmp_path, cache=cache, env=env)
        )
        _open_session(page, r.url)
        assert page.inner_text("#target").startswith(f"{transport}: ")
        _prompt(page, "hello from the page")
        page.wait_for_selector("#transcript .stop", timeout=TIMEOUT)
        assert page.locator("#transcript .msg-agent").first.inner_text() == "hello from the page"
        frames = _wire_is_valid(page)
        assert any(f.startswith("session/update") for f in frames)


def _agent_args(transport: str, env: dict[str, str], package: str, tmp: Path) -> Any:
    """The inspector's agent arguments: `-- python -m PKG` (stdio) or `--url` (HTTP, and
    one WebSocket with `--websocket`)."""
    if transport == "stdio":
        return contextlib.nullcontext(["--", PY, "-m", package])

    @contextlib.contextmanager
    def remote() -> Iterator[list[str]]:
        with http_agent(env, package, tmp) as url:
            yield ["--url", url, *(["--websocket"] if transport == "websocket" else [])]

    return remote()


@pytest.mark.wire_check_send_only  # the broken agent's frame is wrong on purpose
def test_the_wire_view_marks_an_invalid_frame_at_its_pointer(
    page: Any, tmp_path: Path, shared_acp: Path, cache: Path
) -> None:
    agent = write_broken_agent(tmp_path)
    with inspector(
        "--schema", str(schema_path(shared_acp)), "--", PY, str(agent), cwd=tmp_path, cache=cache
    ) as running:
        page.goto(running.url)
        page.wait_for_selector("#status.ok", timeout=TIMEOUT)
        # the agent's auth method, and `authenticate` from its button
        assert page.inner_text("#auth-methods .row span") == "Log in — a test"
        page.click("#auth-methods button")
        page.wait_for_selector("text=authenticated with login", timeout=TIMEOUT)
        page.click("#new-session")
        page.wait_for_selector("#session-current:not(.muted)", timeout=TIMEOUT)
        _prompt(page, "anything")
        page.wait_for_selector("#wire tr.invalid", timeout=TIMEOUT)
        row = page.locator("#wire tr.invalid")
        assert row.count() == 1
        assert row.locator("td:nth-child(4)").inner_text() == "session/update"
        assert row.locator("td:nth-child(5)").inner_text() == "/params/update/content/text"
        row.click()
        detail = page.inner_text("#wire tr.detail")
        assert "/params/update/content/text: session/update params" in detail
        assert "Input should be a valid string" in detail
        page.check("#wire-invalid")
        assert page.locator("#wire tr.frame:not([hidden])").count() == 1
        assert page.inner_text("#wire-count") == "9 frames, 1 invalid"
        # the agent's stderr
        assert "broken agent: up" in page.inner_text("#stderr")


def test_a_v2_coder_turn_renders(page: Any, tmp_path: Path, shared_acp: Path, cache: Path) -> None:
    """v2: the prompt answers on acceptance and the turn ends with an idle state_update; the
    plan is a plan_update, the diff a patch, the permission request carries a title; v2 has
    no fs/* or terminal/*, so the coder writes on disk and compiles nothing."""
    schema = schema_path(shared_acp, "v2")
    env = build_coder(tmp_path, load_schema_file(schema), "coder_inspect_v2")
    work = _work(tmp_path)
    with inspector(
        "--schema", str(schema), "--", PY, "-m", "coder_inspect_v2", cwd=work, cache=cache, env=env
    ) as running:
        _open_session(page, running.url)
        assert page.inner_text("#version") == "protocol v2"
        _prompt(page, "replace `'hello'` with `'hi'` in app.py")
        dialog = page.wait_for_selector("dialog[open]", timeout=TIMEOUT)
        assert "+     return 'hi'" in dialog.inner_text()
        page.click("dialog button[data-kind=allow_once]")
        page.wait_for_selector("#transcript .stop", timeout=TIMEOUT)
        transcript = page.inner_text("#transcript")
        assert "turn ended: end_turn" in transcript
        assert "not compiled: the client has no terminal" in transcript
        assert page.locator(".plan li.completed").count() == 3
        assert page.locator(".diff .add").first.inner_text() == "+     return 'hi'"
        assert (work / "app.py").read_text() == "def greet():\n    return 'hi'\n"
        # issue 37 item 11: the prompt once (v2's user_message echo is not a second copy),
        # and the session id inside its panel
        users = page.locator("#transcript .msg-user").all_inner_texts()
        assert users == ["replace `'hello'` with `'hi'` in app.py"], users
        page.evaluate(
            "document.getElementById('session-current').textContent = 'session ' + 'x'.repeat(120)"
        )
        wide = page.evaluate(
            "(() => { const p = document.getElementById('session-panel');"
            " return [p.scrollWidth, p.clientWidth]; })()"
        )
        assert wide[0] <= wide[1], wide
        # v2 modes are a config option (category mode): a live select on the page
        select = page.locator("#config-options select")
        assert select.locator("option").all_inner_texts() == ["Code", "Ask"]
        select.select_option("ask")
        expect = pytest.importorskip("playwright.sync_api").expect
        expect(page.locator("#wire")).to_contain_text("session/set_config_option")
        expect(page.locator("#wire")).to_contain_text("(session/set_config_option)")
        page.evaluate("document.getElementById('transcript').replaceChildren()")
        _prompt(page, "replace `'hi'` with `'hey'` in app.py")
        page.wait_for_selector("#transcript .stop", timeout=TIMEOUT)
        assert "nothing written" in page.inner_text("#transcript")
        assert (work / "app.py").read_text() == "def greet():\n    return 'hi'\n"
        _wire_is_valid(page)


def test_sessions_are_listed_loaded_and_deleted_from_the_page(
    page: Any, tmp_path: Path, shared_acp: Path, cache: Path
) -> None:
    schema = schema_path(shared_acp)
    env = build_example(tmp_path, load_schema_file(schema), "echo", "echo_sessions")
    expect = pytest.importorskip("playwright.sync_api").expect
    with inspector(
        "--schema", str(schema), "--", PY, "-m", "echo_sessions", cwd=tmp_path, cache=cache, env=env
    ) as running:
        _open_session(page, running.url)
        first = page.inner_text("#session-current").split()[-1]
        _prompt(page, "remember me")
        page.wait_for_selector("#transcript .stop", timeout=TIMEOUT)
        page.click("#new-session")
        expect(page.locator("#session-current")).not_to_have_text(f"session {first}")
        second = page.inner_text("#session-current").split()[-1]
        # the agent offers list, load, resume, close and delete (v1 sessionCapabilities)
        page.click("#list-sessions")
        row = page.locator("#session-list li", has_text=first)
        expect(row).to_have_count(1, timeout=TIMEOUT)
        assert row.locator("button").all_inner_texts() == ["load", "resume", "close", "delete"]
        expect(page.locator("#session-list li", has_text=second)).to_have_count(1)
        # load: the first session's history replayed into the turn view
        row.locator("button", has_text="load").click()
        expect(page.locator("#session-current")).to_have_text(f"session {first}", timeout=TIMEOUT)
        expect(page.locator("#transcript .msg-agent")).to_have_text(["remember me"])
        expect(page.locator("#transcript .msg-user")).to_have_text(["remember me"])
        # delete the other one: gone from the list
        page.click("#list-sessions")
        other = page.locator("#session-list li", has_text=second)
        other.locator("button", has_text="delete").click()
        expect(page.locator("#transcript")).to_contain_text(f"session deleted: {second}")
        expect(page.locator("#session-list li", has_text=second)).to_have_count(0, timeout=TIMEOUT)
        _wire_is_valid(page)


def test_a_terminal_shows_its_output_and_exit_status(
    page: Any, tmp_path: Path, shared_acp: Path, cache: Path
) -> None:
    """The coder's check fails on the file it broke: compile()'s error in the terminal."""
    schema = schema_path(shared_acp)
    env = build_coder(tmp_path, load_schema_file(schema), "coder_terminal")
    work = _work(tmp_path)
    with inspector(
        "--schema",
        str(schema),
        "--auto-approve",
        "--",
        PY,
        "-m",
        "coder_terminal",
        cwd=work,
        cache=cache,
        env=env,
    ) as running:
        _open_session(page, running.url)
        _prompt(page, "replace `'hello'` with `'hi` in app.py")
        page.wait_for_selector("dialog[open]", timeout=TIMEOUT)
        page.click("dialog button[data-kind=allow_once]")
        page.wait_for_selector("#transcript .stop", timeout=TIMEOUT)
        term = page.inner_text(".tool pre.term")
        assert "SyntaxError" in term and term.endswith("[exit 1]"), term
        assert page.locator(".tool .status").last.inner_text() == "failed"
        assert "compile failed with exit code 1" in page.inner_text("#transcript")
        assert "(auto-approved)" in page.inner_text("#transcript")
        _wire_is_valid(page)


def test_cancel_ends_a_running_turn_and_attachments_are_sent(
    page: Any, tmp_path: Path, shared_acp: Path, cache: Path
) -> None:
    agent = write_broken_agent(tmp_path)
    (tmp_path / "notes.txt").write_text("some notes\n")
    (tmp_path / "dot.png").write_bytes(bytes.fromhex("89504e470d0a1a0a"))
    with inspector(
        "--schema", str(schema_path(shared_acp)), "--", PY, str(agent), cwd=tmp_path, cache=cache
    ) as running:
        _open_session(page, running.url)
        page.set_input_files("#prompt-file", str(tmp_path / "notes.txt"))
        page.set_input_files("#prompt-image", str(tmp_path / "dot.png"))
        _prompt(page, "wait")
        page.wait_for_selector("#cancel:not([disabled])", timeout=TIMEOUT)
        page.click("#cancel")
        page.wait_for_selector("text=turn ended: cancelled", timeout=TIMEOUT)
        with page.expect_download() as download:
            page.click("#wire-export")
        rows = [json.loads(line) for line in Path(download.value.path()).read_text().splitlines()]
        (prompt,) = [r["frame"] for r in rows if r["frame"].get("method") == "session/prompt"]
        blocks = prompt["params"]["prompt"]
        assert [b["type"] for b in blocks] == ["text", "resource", "image"]
        assert blocks[1]["resource"]["text"] == "some notes\n"
        assert blocks[1]["resource"]["uri"].endswith("/notes.txt")
        assert blocks[2]["mimeType"] == "image/png" and blocks[2]["data"] == "iVBORw0KGgo="
        assert any(r["frame"].get("method") == "session/cancel" for r in rows)
        assert all(r["valid"] for r in rows), [r for r in rows if not r["valid"]]


def test_config_options_and_an_elicitation_with_the_mail_composer(
    page: Any, tmp_path: Path, shared_acp: Path, cache: Path
) -> None:
    """A choice config option set from the page (the draft's tone changes), and the
    approval interrupt asked as an elicitation, answered in its dialog."""
    schema = schema_path(shared_acp)
    env = build_example(tmp_path, load_schema_file(schema), "mail-composer", "mail_inspect")
    expect = pytest.importorskip("playwright.sync_api").expect
    with inspector(
        "--schema", str(schema), "--", PY, "-m", "mail_inspect", cwd=tmp_path, cache=cache, env=env
    ) as running:
        _open_session(page, running.url)
        tone = page.locator("#config-options select[data-config-id=tone]")
        assert tone.locator("option").all_inner_texts() == ["formal", "friendly", "terse"]
        tone.select_option("formal")
        expect(page.locator("#wire")).to_contain_text("result #3 (session/set_config_option)")
        brief = {"brief": "The meeting moves to Friday.", "recipients": ["ann.lee@example.org"]}
        _prompt(page, json.dumps(brief))
        page.wait_for_selector("dialog[open] textarea", timeout=TIMEOUT)
        assert page.inner_text("#dialog-title") == (
            "The agent asks: Approve the draft before it is final."
        )
        assert "The meeting moves to Friday." in page.inner_text("#dialog-body")  # the payload
        page.fill("dialog textarea", '{"approved": true, "comment": "fine"}')
        page.click("dialog button[data-kind=accept]")
        page.wait_for_selector("#transcript .stop", timeout=TIMEOUT)
        transcript = page.inner_text("#transcript")
        assert "Dear Ann Lee," in transcript and "Kind regards," in transcript
        assert '"approved":true' in transcript.replace(" ", "")
        _wire_is_valid(page)
