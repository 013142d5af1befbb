// agentgen inspect: the page. One WebSocket to the inspector (the cookie set with the page
// carries the token); events in, operations out. No framework, no build step.
"use strict";

const $ = (id) => document.getElementById(id);
const el = (tag, cls, text) => {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
};

const state = {
  facts: null, init: null, cwd: "", session: null, frames: [], refs: 0, waiting: new Map(),
  tools: new Map(), messages: new Map(), lastMessage: null, lastThought: null, terminals: new Map(),
  plan: null, configOptions: [], modes: null, turnRunning: false,
  ownPrompt: null, // the prompt this page sent and shows, until the agent's echo of it (v2)
};

// ---- the socket ----------------------------------------------------------------------
const socket = new WebSocket(`ws://${location.host}/ws`);
socket.onmessage = (msg) => handle(JSON.parse(msg.data));
socket.onclose = () => setStatus("inspector gone", "bad");

function op(kind, data) {
  const ref = ++state.refs;
  return new Promise((resolve, reject) => {
    state.waiting.set(ref, { resolve, reject });
    socket.send(JSON.stringify({ op: kind, ref, ...data }));
  });
}
const call = (method, params) => op("call", { method, params });
const notify = (method, params) => op("notify", { method, params });

function setStatus(text, cls) {
  const badge = $("status");
  badge.textContent = text;
  badge.className = "badge " + (cls || "");
}

function handle(ev) {
  switch (ev.kind) {
    case "connecting":
      $("target").textContent = `${ev.transport}: ${ev.target}`;
      state.cwd = ev.cwd;
      break;
    case "initialized": initialized(ev); break;
    case "frame": frame(ev); break;
    case "stderr": stderrLine(ev.line); break;
    case "terminal": terminalOutput(ev.terminalId, ev.output); break;
    case "question": question(ev); break;
    case "answered": answered(ev.id); break;
    case "write": writeShown(ev); break;
    case "command": transcriptNote(`${ev.allowed ? "ran" : "refused to run"} ${ev.argv.join(" ")}${ev.auto ? " (auto-approved)" : ""}`); break;
    case "exited": setStatus(`agent exited (${ev.status})`, "bad"); break;
    case "closed": setStatus("disconnected", "bad"); transcriptNote(`connection ended: ${ev.reason}`, "error"); break;
    case "reply": {
      const w = state.waiting.get(ev.ref);
      if (!w) break;
      state.waiting.delete(ev.ref);
      if (ev.error) w.reject(ev.error); else w.resolve(ev.result);
      break;
    }
  }
}

// ---- initialize: the agent, its capabilities, auth -------------------------------------
function initialized(ev) {
  const f = ev.facts, r = ev.result || {};
  state.facts = f;
  state.init = r;
  setStatus("connected", "ok");
  $("version").textContent = `protocol v${r.protocolVersion}`;
  const info = r[f.responseInfo] || {};
  $("agent-info").textContent = [info.title || info.name, info.version].filter(Boolean).join(" ") || "(no agent info)";
  $("agent-info").className = "";
  $("agent-caps").textContent = JSON.stringify(r[f.responseCapabilities] || {}, null, 2);
  const auth = $("auth-methods");
  auth.replaceChildren();
  const methods = (f.authMethods && r[f.authMethods]) || [];
  if (methods.length) auth.append(el("h3", null, "Auth methods"));
  for (const m of methods) {
    const id = m[f.authMethodId] ?? m.id;
    const row = el("div", "row");
    const button = el("button", null, "Authenticate");
    button.onclick = () => call("authenticate", { methodId: id })
      .then(() => transcriptNote(`authenticated with ${id}`), (e) => transcriptNote(`authenticate ${id}: ${e.message}`, "error"));
    row.append(el("span", null, `${m.name || id}${m.description ? " — " + m.description : ""}`), button);
    auth.append(row);
  }
  $("new-session").disabled = false;
  const caps = r[f.responseCapabilities] || {};
  const sess = caps.sessionCapabilities || caps.session || {};
  $("list-sessions").hidden = !(f.list && ("list" in sess || f.agentMethods.includes("session/list")));
  $("list-sessions").disabled = false;
}

// ---- sessions ----------------------------------------------------------------------------
$("new-session").onclick = () => call("session/new", { cwd: state.cwd, mcpServers: [] })
  .then(opened, (e) => transcriptNote(`session/new: ${e.message}`, "error"));

$("list-sessions").onclick = () => call("session/list", {}).then((res) => {
  const list = $("session-list");
  list.replaceChildren();
  for (const s of (res && res.sessions) || []) {
    const li = el("li", null, `${s.title || s.sessionId} `);
    const f = state.facts;
    const actions = [
      [f.load, "load", () => call("session/load", { sessionId: s.sessionId, cwd: s.cwd || state.cwd, mcpServers: [] })],
      [f.resume, "resume", () => call("session/resume", { sessionId: s.sessionId, cwd: s.cwd || state.cwd })],
      [f.close, "close", () => call("session/close", { sessionId: s.sessionId })],
      [f.delete, "delete", () => call("session/delete", { sessionId: s.sessionId })],
    ];
    for (const [offered, name, act] of actions) {
      if (!offered) continue;
      const b = el("button", null, name);
      b.onclick = () => {
        if (name === "load" || name === "resume") { clearTranscript(); state.session = s.sessionId; }
        act().then((res2) => {
          if (name === "load" || name === "resume") opened({ sessionId: s.sessionId, ...(res2 || {}) });
          else { transcriptNote(`session ${name}d: ${s.sessionId}`); $("list-sessions").click(); }
        }, (e) => transcriptNote(`session/${name}: ${e.message}`, "error"));
      };
      li.append(b);
    }
    list.append(li);
  }
}, (e) => transcriptNote(`session/list: ${e.message}`, "error"));

function opened(res) {
  state.session = res.sessionId;
  $("session-current").textContent = `session ${res.sessionId}`;
  $("session-current").className = "";
  $("send").disabled = false;
  const f = state.facts;
  if (res.configOptions) showConfig(res.configOptions);
  if (f.modes && res[f.modes]) showModes(res[f.modes]);
}

function showModes(modes) {
  state.modes = modes;
  const box = $("modes");
  box.replaceChildren();
  if (!modes || !modes.availableModes) return;
  const select = el("select");
  select.id = "mode-select";
  for (const m of modes.availableModes) {
    const o = el("option", null, m.name || m.id);
    o.value = m.id;
    o.title = m.description || "";
    select.append(o);
  }
  select.value = modes.currentModeId;
  select.onchange = () => call("session/set_mode", { sessionId: state.session, modeId: select.value })
    .then(() => transcriptNote(`mode: ${select.value}`), (e) => transcriptNote(`set_mode: ${e.message}`, "error"));
  const row = el("div", "row");
  row.append(el("span", null, "Mode"), select);
  box.append(row);
}

function showConfig(options) {
  state.configOptions = options || [];
  const f = state.facts, box = $("config-options");
  box.replaceChildren();
  for (const o of state.configOptions) {
    const id = o[f.configId] ?? o.id ?? o.configId;
    const row = el("div", "row");
    row.append(el("span", null, o.name || id));
    let input;
    const set = (params) => call("session/set_config_option", { sessionId: state.session, configId: id, ...params })
      .then((res) => { if (res && res.configOptions) showConfig(res.configOptions); },
        (e) => transcriptNote(`set_config_option ${id}: ${e.message}`, "error"));
    if (o.type === "boolean") {
      input = el("input");
      input.type = "checkbox";
      input.checked = !!o[f.configCurrent];
      input.onchange = () => set({ type: "boolean", value: input.checked });
    } else {
      input = el("select");
      const flat = [];
      for (const item of o[f.configOptions] || []) {
        if (item.options) flat.push(...item.options); else flat.push(item);
      }
      for (const v of flat) {
        const opt = el("option", null, v.name || v.value);
        opt.value = v.value;
        input.append(opt);
      }
      input.value = o[f.configCurrent];
      input.onchange = () => set(f.configValueType ? { type: f.configValueType, value: input.value } : { value: input.value });
    }
    input.dataset.configId = id;
    row.append(input);
    box.append(row);
  }
}

function showCommands(commands) {
  const list = $("commands");
  list.replaceChildren();
  for (const c of commands || []) {
    const li = el("li");
    const b = el("button", null, "/" + c.name);
    b.onclick = () => { $("prompt-text").value = "/" + c.name + " "; $("prompt-text").focus(); };
    li.append(b, el("span", "muted", " " + (c.description || "")));
    list.append(li);
  }
}

// ---- the prompt ----------------------------------------------------------------------------
function readFile(file, asData) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    if (asData) reader.readAsDataURL(file); else reader.readAsText(file);
  });
}

$("prompt-form").onsubmit = async (e) => {
  e.preventDefault();
  if (!state.session) return;
  const text = $("prompt-text").value;
  const blocks = [];
  if (text) blocks.push({ type: "text", text });
  const file = $("prompt-file").files[0];
  if (file) {
    blocks.push({ type: "resource", resource: { uri: "file://" + state.cwd + "/" + file.name,
      mimeType: file.type || "text/plain", text: await readFile(file, false) } });
  }
  const image = $("prompt-image").files[0];
  if (image) {
    const data = String(await readFile(image, true));
    blocks.push({ type: "image", mimeType: image.type || "image/png", data: data.slice(data.indexOf(",") + 1) });
  }
  if (!blocks.length) return;
  $("prompt-text").value = "";
  $("prompt-file").value = "";
  $("prompt-image").value = "";
  const user = el("div", "msg-user", text || "(attachments)");
  for (const b of blocks.slice(text ? 1 : 0)) user.append(el("div", "muted", b.type === "image" ? "[image]" : `[resource ${b.resource.uri}]`));
  $("transcript").append(user);
  state.ownPrompt = user;
  state.lastMessage = state.lastThought = null;
  turnRunning(true);
  call("session/prompt", { sessionId: state.session, prompt: blocks }).then((res) => {
    if (res && res.stopReason) turnEnded(res.stopReason, res.usage);
  }, (err) => { transcriptNote(`session/prompt: ${err.message}`, "error"); turnRunning(false); });
};
$("prompt-text").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("prompt-form").requestSubmit();
});
$("cancel").onclick = () => notify("session/cancel", { sessionId: state.session });

function turnRunning(on) {
  state.turnRunning = on;
  $("cancel").disabled = !on;
  $("send").disabled = on || !state.session;
}

function turnEnded(stop, usage) {
  state.ownPrompt = null; // a v1 agent echoes nothing
  transcriptNote(`turn ended: ${stop}`, "stop");
  if (usage) showUsage(usage);
  turnRunning(false);
  scrollDown();
}

// ---- the turn, rendered from the agent's session/update frames -------------------------------
function clearTranscript() {
  $("transcript").replaceChildren();
  state.tools.clear();
  state.lastMessage = state.lastThought = state.plan = null;
}

function transcriptNote(text, cls) {
  $("transcript").append(el("div", cls || "muted", text));
  scrollDown();
}

function scrollDown() { const p = $("turn-panel"); p.scrollTop = p.scrollHeight; }

function blockText(block) {
  if (!block) return "";
  if (block.type === "text") return block.text;
  if (block.type === "resource_link") return `[${block.name || block.uri}]`;
  if (block.type === "resource") return block.resource && block.resource.text !== undefined ? block.resource.text : `[resource]`;
  return `[${block.type}]`;
}

function appendStream(kind, update) {
  const key = update.messageId;
  const cls = kind === "thought" ? "thought" : kind === "user" ? "msg-user" : "msg-agent";
  let node = key ? state.messages.get(kind + key) : (kind === "thought" ? state.lastThought : state.lastMessage);
  if (!node || !node.isConnected) {
    node = el("div", cls);
    $("transcript").append(node);
    if (key) state.messages.set(kind + key, node);
  }
  if (kind === "thought") { state.lastThought = node; state.lastMessage = null; }
  else if (kind === "agent") { state.lastMessage = node; state.lastThought = null; }
  const content = Array.isArray(update.content) ? update.content : [update.content];
  node.textContent += content.map(blockText).join("");
}

// A v2 agent acknowledges a prompt with a user_message update: the page shows that prompt
// already, so the echo names it (its messageId) instead of adding it a second time; any
// other user message (a session/load replay) is shown.
function ownOrReplayed(update) {
  const own = state.ownPrompt;
  if (own && own.isConnected) {
    state.ownPrompt = null;
    if (update.messageId) state.messages.set("user" + update.messageId, own);
    return;
  }
  appendStream("user", update);
}

function sessionUpdate(params) {
  if (!params || (state.session && params.sessionId !== state.session)) return;
  const u = params.update || {};
  const tag = u.sessionUpdate || "";
  if (tag.startsWith("agent_message")) appendStream("agent", u);
  else if (tag.startsWith("agent_thought")) appendStream("thought", u);
  else if (tag.startsWith("user_message")) ownOrReplayed(u);
  else if (tag === "tool_call" || tag === "tool_call_update") toolCall(u);
  else if (tag === "tool_call_content_chunk") toolCall({ toolCallId: u.toolCallId, content: [u.content], append: true });
  else if (tag === "plan" || tag === "plan_update") showPlan(u.entries || (u.plan && u.plan.entries) || []);
  else if (tag === "available_commands_update") showCommands(u.availableCommands);
  else if (tag === "current_mode_update") { const s = $("mode-select"); if (s) s.value = u.currentModeId; }
  else if (tag === "config_option_update") showConfig(u.configOptions);
  else if (tag === "session_info_update") { if (u.title !== undefined) $("title").textContent = u.title ? "— " + u.title : ""; }
  else if (tag === "usage_update") showUsage(u);
  else if (tag === "state_update") {
    if (u.state === "running") turnRunning(true);
    else if (u.state === "idle") turnEnded(u.stopReason || "idle", u.usage);
    else transcriptNote(`state: ${u.state}`);
  } else if (tag === "terminal_output_chunk") terminalOutput(u.terminalId, ((state.terminals.get(u.terminalId) || {}).text || "") + (u.data || u.output || ""));
  else if (tag === "terminal_update" && u.exitStatus) terminalOutput(u.terminalId, (state.terminals.get(u.terminalId) || {}).text || "", u.exitStatus.exitCode ?? u.exitStatus.signal);
  else transcriptNote(`update ${tag}`);
  scrollDown();
}

function showUsage(u) {
  const parts = [];
  for (const [k, v] of Object.entries(u)) if (k !== "sessionUpdate" && typeof v !== "object") parts.push(`${k} ${v}`);
  if (u.cost) parts.push(`cost ${u.cost.amount} ${u.cost.currency}`);
  $("usage").textContent = "usage: " + parts.join(", ");
}

function showPlan(entries) {
  if (!state.plan || !state.plan.isConnected) {
    const box = el("div", "tool");
    box.append(el("div", "head", "Plan"));
    state.plan = el("ul", "plan");
    box.append(state.plan);
    $("transcript").append(box);
  }
  state.plan.replaceChildren();
  for (const e of entries) {
    const li = el("li", e.status, e.content);
    li.title = `${e.priority || ""} ${e.status || ""}`;
    state.plan.append(li);
  }
}

function toolCall(u) {
  let t = state.tools.get(u.toolCallId);
  if (!t) {
    const box = el("div", "tool");
    box.dataset.toolCallId = u.toolCallId;
    const head = el("div", "head");
    t = { box, title: el("strong"), kind: el("span", "muted"), status: el("span", "status"), body: el("div") };
    head.append(t.status, t.title, t.kind);
    box.append(head, t.body);
    $("transcript").append(box);
    state.tools.set(u.toolCallId, t);
    state.lastMessage = state.lastThought = null;
  }
  if (u.title !== undefined) t.title.textContent = u.title;
  if (u.kind !== undefined) t.kind.textContent = u.kind;
  if (u.status !== undefined) { t.status.textContent = u.status; t.status.className = "status " + u.status; }
  if (u.content !== undefined && u.content !== null) {
    if (!u.append) t.body.replaceChildren();
    for (const item of u.content) t.body.append(toolContent(item));
  }
}

function toolContent(item) {
  if (!item) return el("span");
  if (item.type === "diff" && item.patch && typeof item.patch.text === "string") return patchView(item);
  if (item.type === "diff") return diffView(item.path, item.oldText, item.newText, item);
  if (item.type === "terminal") {
    const pre = el("pre", "term", terminalText(state.terminals.get(item.terminalId)));
    pre.dataset.terminalId = item.terminalId;
    return pre;
  }
  if (item.type === "content") return el("div", "msg-agent", blockText(item.content));
  return el("pre", "muted", JSON.stringify(item, null, 2));
}

function terminalOutput(id, text, exit) {
  const known = state.terminals.get(id) || {};
  const t = { text, exit: exit === undefined ? known.exit : exit };
  state.terminals.set(id, t);
  for (const pre of document.querySelectorAll(`pre.term[data-terminal-id="${CSS.escape(id)}"]`)) pre.textContent = terminalText(t);
}

function terminalText(t) {
  if (!t) return "(no output yet)";
  const ended = t.exit === undefined || t.exit === null ? "" : `[exit ${t.exit}]`;
  return (t.text || (ended ? "(no output)" : "(no output yet)")) + (ended ? (t.text && !t.text.endsWith("\n") ? "\n" : t.text ? "" : "\n") + ended : "");
}

// a line diff (longest common subsequence; large files fall back to old/new in full)
function lineDiff(a, b) {
  const x = (a || "").split("\n"), y = (b || "").split("\n");
  if (x.length * y.length > 4e6) return [...x.map((l) => ["-", l]), ...y.map((l) => ["+", l])];
  const n = x.length, m = y.length, dp = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--)
    dp[i][j] = x[i] === y[j] ? dp[i + 1][j + 1] + 1 : Math.max(dp[i + 1][j], dp[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { out.push([" ", x[i]]); i++; j++; }
    else if (dp[i + 1][j] >= dp[i][j + 1]) out.push(["-", x[i++]]);
    else out.push(["+", y[j++]]);
  }
  while (i < n) out.push(["-", x[i++]]);
  while (j < m) out.push(["+", y[j++]]);
  return out;
}

// v2: the changed paths, and the patch text (git format) when the agent sends one
function patchView(item) {
  const box = el("div", "diff");
  box.append(el("div", "path", (item.changes || []).map((c) => c.path || c.newPath || c.oldPath).join(", ") || "(diff)"));
  const pre = el("pre");
  for (const line of item.patch.text.split("\n")) {
    const hunk = line.startsWith("+++") || line.startsWith("---") || line.startsWith("@@") || line.startsWith("diff ");
    const cls = hunk ? "muted" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "";
    pre.append(el("div", cls, hunk ? line : line.slice(0, 1) + " " + line.slice(1)));
  }
  box.append(pre);
  return box;
}

function diffView(path, oldText, newText, raw) {
  const box = el("div", "diff");
  box.append(el("div", "path", path || "(diff)"));
  const pre = el("pre");
  if (oldText === undefined && newText === undefined && raw) {
    pre.textContent = JSON.stringify(raw, null, 2);
  } else {
    const lines = lineDiff(oldText === null ? "" : oldText, newText);
    let shown = 0;
    lines.forEach(([sign, text], k) => {
      const near = lines.slice(Math.max(0, k - 2), k + 3).some(([s]) => s !== " ");
      if (!near) return;
      const row = el("div", sign === "+" ? "add" : sign === "-" ? "del" : "", `${sign} ${text}`);
      pre.append(row);
      shown++;
    });
    if (!shown) pre.textContent = "(no change)";
  }
  box.append(pre);
  return box;
}

// ---- the agent's questions: permission, file writes, elicitation --------------------------------
function question(ev) {
  const dialog = $("dialog"), body = $("dialog-body"), buttons = $("dialog-buttons");
  body.replaceChildren();
  buttons.replaceChildren();
  dialog.dataset.question = ev.id;
  const reply = (value) => { op("answer", { id: ev.id, value }); dialog.close(); };
  const button = (text, value, extra) => {
    const b = el("button", null, text);
    b.type = "button";
    if (extra) b.dataset.kind = extra;
    b.onclick = () => reply(typeof value === "function" ? value() : value);
    buttons.append(b);
  };
  if (ev.question === "permission") {
    const p = ev.params || {};
    const subject = p.subject || {};
    const tool = p.toolCall || subject.toolCall || {};
    const shown = state.tools.get(tool.toolCallId || subject.toolCallId);
    $("dialog-title").textContent = "Permission: " + (p.title || tool.title || (shown && shown.title.textContent) || "the agent asks");
    if (p.description) body.append(el("p", null, p.description));
    if (subject.type === "command") body.append(el("pre", "term", subject.command || ""), el("div", "muted", subject.cwd ? `in ${subject.cwd}` : ""));
    if (shown) body.append(shown.body.cloneNode(true));
    for (const o of p.options || []) button(`${o.name} (${o.kind})`, { optionId: o.optionId }, o.kind);
    button("Cancel", null, "cancelled");
  } else if (ev.question === "write") {
    $("dialog-title").textContent = `The agent writes ${ev.path}`;
    body.append(diffView(ev.path, ev.old, ev.new));
    button("Allow write", { allow: true }, "allow");
    button("Refuse", { allow: false }, "refuse");
  } else if (ev.question === "command") {
    $("dialog-title").textContent = "The agent runs a command";
    body.append(el("pre", "term", ev.argv.join(" ")), el("div", "muted", `in ${ev.cwd}`));
    button("Run it", { allow: true }, "allow");
    button("Refuse", { allow: false }, "refuse");
  } else {
    const p = ev.params || {};
    $("dialog-title").textContent = "The agent asks: " + (p.message || "");
    const payload = p._meta && p._meta.payload;
    if (payload !== undefined) body.append(el("h3", null, "payload"), el("pre", null, JSON.stringify(payload, null, 2)));
    body.append(el("h3", null, "requested schema"), el("pre", "muted", JSON.stringify(p.requestedSchema || {}, null, 2)), el("h3", null, "your answer (JSON)"));
    const area = el("textarea");
    area.rows = 6;
    area.value = "{}";
    body.append(area);
    button("Accept", () => { try { return { action: "accept", content: JSON.parse(area.value) }; } catch { return { action: "decline" }; } }, "accept");
    button("Decline", { action: "decline" }, "decline");
  }
  if (!dialog.open) dialog.showModal();
}

function answered(id) {
  const dialog = $("dialog");
  if (dialog.open && dialog.dataset.question === id) dialog.close();
}

function writeShown(ev) {
  transcriptNote(`${ev.allowed ? "wrote" : "refused to write"} ${ev.path}${ev.auto ? " (auto-approved)" : ""}`);
}

function stderrLine(line) {
  const pre = $("stderr");
  pre.textContent += line + "\n";
  pre.scrollTop = pre.scrollHeight;
}

// ---- the wire ----------------------------------------------------------------------------------
function summary(msg) {
  if (!msg) return "";
  if (msg.method) return `${msg.method}${"id" in msg ? " #" + msg.id : ""}`;
  if ("error" in msg) return `error #${msg.id}: ${(msg.error && msg.error.message) || ""}`;
  return `result #${msg.id}`;
}

const waits = new Map(); // terminal/wait_for_exit request id -> terminal id

function frame(ev) {
  state.frames.push(ev);
  const msg = ev.msg;
  if (ev.dir === "in" && msg && msg.method === "terminal/wait_for_exit" && msg.params) waits.set(msg.id, msg.params.terminalId);
  if (ev.dir === "out" && msg && waits.has(msg.id)) {
    const tid = waits.get(msg.id);
    waits.delete(msg.id);
    if (msg.result) terminalOutput(tid, (state.terminals.get(tid) || {}).text || "", msg.result.exitCode ?? msg.result.signal);
  }
  if (ev.dir === "in" && msg && msg.method === "session/update") sessionUpdate(msg.params);
  addWireRow(ev);
  $("wire-count").textContent = `${state.frames.length} frames, ${state.frames.filter((f) => f.problems.length).length} invalid`;
}

function addWireRow(ev) {
  const tr = el("tr", "frame" + (ev.problems.length ? " invalid" : ""));
  tr.dataset.dir = ev.dir;
  tr.dataset.method = ev.method || "";
  const time = new Date(ev.t * 1000).toISOString().slice(11, 23);
  const method = ev.msg ? summary(ev.msg) : "(not JSON)";
  tr.append(el("td", "muted", time), el("td", null, ev.dir === "out" ? "→" : "←"), el("td", "muted", String(ev.size)),
    el("td", null, method + (ev.method && !(ev.msg && ev.msg.method) ? ` (${ev.method})` : "")));
  const check = el("td", ev.problems.length ? "bad" : "ok", ev.problems.length ? ev.problems.map((p) => p.pointer || "/").join(" ") : "valid");
  check.title = ev.problems.map((p) => p.message).join("\n");
  tr.append(check);
  tr.onclick = () => {
    const next = tr.nextElementSibling;
    if (next && next.classList.contains("detail")) { next.remove(); return; }
    const d = el("tr", "detail"), td = el("td");
    td.colSpan = 5;
    for (const p of ev.problems) td.append(el("div", "error", `${p.pointer || "/"}: ${p.message}`));
    td.append(el("pre", null, ev.msg ? JSON.stringify(ev.msg, null, 2) : ev.text));
    d.append(td);
    tr.after(d);
  };
  tr.hidden = !visible(ev);
  tr.wireEvent = ev;
  document.querySelector("#wire tbody").append(tr);
}

function visible(ev) {
  const text = $("wire-filter").value.trim().toLowerCase(), dir = $("wire-dir").value;
  if (dir && ev.dir !== dir) return false;
  if ($("wire-invalid").checked && !ev.problems.length) return false;
  if (text && !JSON.stringify(ev.msg || ev.text).toLowerCase().includes(text) && !(ev.method || "").toLowerCase().includes(text)) return false;
  return true;
}

function refilter() {
  for (const tr of document.querySelectorAll("#wire tr.frame")) tr.hidden = !visible(tr.wireEvent);
  for (const d of document.querySelectorAll("#wire tr.detail")) d.remove();
}
$("wire-filter").oninput = refilter;
$("wire-dir").onchange = refilter;
$("wire-invalid").onchange = refilter;

$("wire-export").onclick = () => {
  const lines = state.frames.map((f) => JSON.stringify({ t: f.t, dir: f.dir, size: f.size, method: f.method,
    valid: !f.problems.length, problems: f.problems, frame: f.msg ?? f.text }));
  const blob = new Blob([lines.join("\n") + "\n"], { type: "application/jsonl" });
  const a = el("a");
  a.href = URL.createObjectURL(blob);
  a.download = "acp-wire.jsonl";
  document.body.append(a);
  a.click();
  a.remove();
};
