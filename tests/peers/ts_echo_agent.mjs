// An echo agent written with the official TypeScript SDK's `agent()` app, on stdio:
// each text block of a prompt comes back as one agent_message_chunk.
//
//   node ts_echo_agent.mjs v1|v1-unstable|v2
//
// v1: session/prompt answers {stopReason: "end_turn"} after the chunks. v2 (the prompt
// lifecycle): the prompt answers {messageId} once accepted, then user_message, state_update
// running, the chunks (each with a messageId), state_update idle with end_turn.
// A prompt whose text is "fail" is refused with a transient agent error (code 1001).

import { randomUUID } from "node:crypto";
import { Readable, Writable } from "node:stream";

const ENTRIES = {
  v1: "@agentclientprotocol/sdk",
  "v1-unstable": "@agentclientprotocol/sdk/unstable",
  v2: "@agentclientprotocol/sdk/experimental/v2",
};
const api = process.argv[2];
if (!(api in ENTRIES)) {
  process.stderr.write("usage: node ts_echo_agent.mjs v1|v1-unstable|v2\n");
  process.exit(2);
}
const acp = await import(ENTRIES[api]);
const v2 = api === "v2";

const texts = (prompt) => prompt.filter((b) => b.type === "text").map((b) => b.text);

function quota() {
  return new acp.RequestError(1001, "quota exceeded", {
    name: "QuotaExceeded",
    transient: true,
    details: { retry_after: 0 },
  });
}

let app = acp
  .agent({ name: "ts-echo-agent" })
  .onRequest("initialize", ({ params }) =>
    v2
      ? {
          protocolVersion: 2,
          info: { name: "ts-echo", version: "2.4.0" },
          capabilities: { session: {} },
        }
      : {
          protocolVersion: Math.min(params.protocolVersion, 1),
          agentInfo: { name: "ts-echo", version: "2.4.0" },
          agentCapabilities: {},
          authMethods: [],
        },
  )
  .onRequest("session/new", () => ({ sessionId: "ts-" + randomUUID() }))
  .onNotification("session/cancel", () => {});

if (v2) {
  app = app.onRequest("session/prompt", ({ params, client }) => {
    const userId = randomUUID();
    const sessionId = params.sessionId;
    if (texts(params.prompt).includes("fail")) throw quota();
    const update = (u) => client.notify("session/update", { sessionId, update: u });
    setImmediate(async () => {
      await update({ sessionUpdate: "user_message", messageId: userId, content: params.prompt });
      await update({ sessionUpdate: "state_update", state: "running" });
      const messageId = randomUUID();
      for (const text of texts(params.prompt)) {
        await update({
          sessionUpdate: "agent_message_chunk",
          messageId,
          content: { type: "text", text },
        });
      }
      await update({ sessionUpdate: "state_update", state: "idle", stopReason: "end_turn" });
    });
    return { messageId: userId };
  });
} else {
  app = app.onRequest("session/prompt", async ({ params, client }) => {
    if (texts(params.prompt).includes("fail")) throw quota();
    for (const text of texts(params.prompt)) {
      await client.notify("session/update", {
        sessionId: params.sessionId,
        update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text } },
      });
    }
    return { stopReason: "end_turn" };
  });
}

const stream = acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
const connection = app.connect(stream);
await connection.closed;
