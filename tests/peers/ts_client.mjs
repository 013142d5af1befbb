// The official TypeScript SDK's client as a test peer, remote-controlled by a Python test.
//
//   node ts_client.mjs <api> -- <agent command...>
//
// <api> picks the SDK entry point: v1 (the package root), v1-unstable (/unstable), v2
// (/experimental/v2), v2-unstable (/experimental/v2/unstable). The agent command runs as a
// child process; the SDK's `client()` app talks to it over `ndJsonStream` on its stdio.
//
// Commands (one JSON object per line on stdin; each answered by {"id", "result"|"error"}):
//   {"id", "op": "request", "method", "params"}   ctx.request(...); the SDK parses the answer
//   {"id", "op": "cancel", "target"}              abort request `target`: $/cancel_request
//   {"id", "op": "notify", "method", "params"}    ctx.notify(...)
//   {"id", "op": "answer", "method", "result"}    how to answer the agent's `method` requests
//                                                 (a result, or {"error": {code, message}})
//   {"id", "op": "session", "request"}           ctx.buildSession(request).start()
//   {"id", "op": "session_prompt", "session", "text"}   ActiveSession.prompt + the SDK's
//                                                 text reader (v1 readText, v2 readTextUntilIdle)
//   {"id", "op": "close"}                         end the connection; the agent's exit code
//   {"id", "op": "reply", "rid", "result"|"error"} the answer to a forwarded agent request
// The env variable ACP_TS_FORWARD (comma-separated methods, e.g. fs/read_text_file) makes
// the client serve those agent requests by forwarding them to the test:
// {"event": "forwarded", "rid", "method", "params"}, answered with the "reply" op.
// Events (stdout lines without "id"): {"event": "update", "params"} for each session/update
// the SDK accepted, {"event": "request", "method", "params"} for each agent request,
// {"event": "sdk_error", "text"} for anything the SDK logged as an error, {"event": "closed"}.

import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { Readable, Writable } from "node:stream";
import { format } from "node:util";

const ENTRIES = {
  v1: "@agentclientprotocol/sdk",
  "v1-unstable": "@agentclientprotocol/sdk/unstable",
  v2: "@agentclientprotocol/sdk/experimental/v2",
  "v2-unstable": "@agentclientprotocol/sdk/experimental/v2/unstable",
};

const api = process.argv[2];
const sep = process.argv.indexOf("--");
const command = process.argv.slice(sep + 1);
if (!(api in ENTRIES) || sep < 0 || command.length === 0) {
  process.stderr.write("usage: node ts_client.mjs v1|v1-unstable|v2|v2-unstable -- AGENT...\n");
  process.exit(2);
}
const acp = await import(ENTRIES[api]);

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

// what the SDK reports as errors (an update it refused, an invalid message) reaches the test
for (const level of ["error", "warn"]) {
  const original = console[level].bind(console);
  console[level] = (...args) => {
    emit({ event: "sdk_error", level, text: format(...args) });
    original(...args);
  };
}

function wireError(err) {
  if (err && typeof err === "object" && typeof err.code === "number") {
    return { code: err.code, message: String(err.message ?? ""), data: err.data ?? null };
  }
  return { code: -1, message: String(err?.stack ?? err), data: null };
}

const child = spawn(command[0], command.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

const answers = new Map();
const clientMethods = new Set(Object.values(acp.CLIENT_METHODS));

async function answerAgent(method, params) {
  emit({ event: "request", method, params });
  const answer = answers.get(method);
  if (answer === undefined) {
    throw acp.RequestError.methodNotFound(method);
  }
  if (answer && typeof answer === "object" && "error" in answer) {
    throw new acp.RequestError(answer.error.code, answer.error.message, answer.error.data);
  }
  return answer;
}

let app = acp.client({ name: "ts-sdk-peer" }).onNotification("session/update", ({ params }) => {
  emit({ event: "update", params });
});
for (const method of ["session/request_permission", "elicitation/create"]) {
  if (clientMethods.has(method)) {
    app = app.onRequest(method, ({ params }) => answerAgent(method, params));
  }
}

const forwarded = new Map(); // rid -> {resolve, reject}
let nextRid = 0;
for (const method of (process.env.ACP_TS_FORWARD ?? "").split(",").filter(Boolean)) {
  if (!clientMethods.has(method)) continue;
  app = app.onRequest(method, ({ params }) => {
    const rid = ++nextRid;
    emit({ event: "forwarded", rid, method, params });
    return new Promise((resolve, reject) => forwarded.set(rid, { resolve, reject }));
  });
}

const connection = app.connect(stream);
const ctx = connection.agent;
connection.closed.then(() => emit({ event: "closed" }));

const inflight = new Map(); // command id -> AbortController
const sessions = new Map(); // sessionId -> ActiveSession

async function run(cmd) {
  switch (cmd.op) {
    case "request": {
      const controller = new AbortController();
      inflight.set(cmd.id, controller);
      try {
        return await ctx.request(cmd.method, cmd.params ?? {}, {
          cancellationSignal: controller.signal,
        });
      } finally {
        inflight.delete(cmd.id);
      }
    }
    case "cancel":
      inflight.get(cmd.target)?.abort();
      return null;
    case "notify":
      await ctx.notify(cmd.method, cmd.params ?? {});
      return null;
    case "answer":
      answers.set(cmd.method, cmd.result);
      return null;
    case "reply": {
      const waiting = forwarded.get(cmd.rid);
      forwarded.delete(cmd.rid);
      if (cmd.error) {
        waiting?.reject(new acp.RequestError(cmd.error.code, cmd.error.message));
      } else {
        waiting?.resolve(cmd.result ?? {});
      }
      return null;
    }
    case "session": {
      const session = await ctx.buildSession(cmd.request).start();
      sessions.set(session.sessionId, session);
      return session.newSessionResponse;
    }
    case "session_prompt": {
      const session = sessions.get(cmd.session);
      const reply = session.prompt(cmd.text);
      const text = session.readText ? await session.readText() : await session.readTextUntilIdle();
      return { text, response: await reply };
    }
    case "close": {
      connection.close();
      child.stdin.end();
      const code = await new Promise((resolve) => {
        if (child.exitCode !== null) resolve(child.exitCode);
        else child.on("exit", (c) => resolve(c));
      });
      return { exitCode: code };
    }
    default:
      throw new Error(`unknown op ${cmd.op}`);
  }
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const cmd = JSON.parse(line);
  run(cmd).then(
    (result) => {
      emit({ id: cmd.id, result: result ?? null });
      if (cmd.op === "close") process.exit(0);
    },
    (err) => emit({ id: cmd.id, error: wireError(err) }),
  );
}
child.kill();
process.exit(0);
