// A coding agent written with the official TypeScript SDK's `agent()` app (v1, stdio):
// a prompt `edit PATH OLD NEW` (PATH relative to the session cwd) makes a plan, reads PATH
// through the client (fs/read_text_file), shows an `edit` tool call with a diff, asks
// session/request_permission, writes PATH through the client when allowed, runs
// `python3 -c "print('checked')"` in a client terminal shown as an `execute` tool call,
// then says "done".  Used to test the generated client (tests/e2e/test_client_serves.py).
//
//   node ts_coder_agent.mjs

import { Readable, Writable } from "node:stream";

const acp = await import("@agentclientprotocol/sdk");
const sessions = new Map();

const app = acp
  .agent({ name: "ts-coder-agent" })
  .onRequest("initialize", ({ params }) => ({
    protocolVersion: Math.min(params.protocolVersion, 1),
    agentInfo: { name: "ts-coder", version: "2.4.0" },
    agentCapabilities: {},
    authMethods: [],
  }))
  .onRequest("session/new", ({ params }) => {
    const sessionId = "ts-" + sessions.size;
    sessions.set(sessionId, params.cwd);
    return { sessionId };
  })
  .onNotification("session/cancel", () => {})
  .onRequest("session/prompt", async ({ params, client }) => {
    const sessionId = params.sessionId;
    const update = (u) => client.notify("session/update", { sessionId, update: u });
    const say = (text) => update({ sessionUpdate: "agent_message_chunk", content: { type: "text", text } });
    const plan = (done) =>
      update({
        sessionUpdate: "plan",
        entries: ["read", "edit", "check"].map((content, i) => ({
          content,
          priority: "medium",
          status: i < done ? "completed" : "pending",
        })),
      });
    const text = params.prompt.filter((b) => b.type === "text").map((b) => b.text).join("");
    const [, rel, oldText, newText] = text.split(/\s+/);
    const path = sessions.get(sessionId) + "/" + rel;
    await plan(0);
    await update({ sessionUpdate: "agent_thought_chunk", content: { type: "text", text: "reading " + rel } });
    const { content } = await client.request("fs/read_text_file", { sessionId, path });
    const changed = content.split(oldText).join(newText);
    await update({
      sessionUpdate: "tool_call",
      toolCallId: "t1",
      title: "Edit " + rel,
      kind: "edit",
      status: "pending",
      locations: [{ path }],
      content: [{ type: "diff", path, oldText: content, newText: changed }],
    });
    const answer = await client.request("session/request_permission", {
      sessionId,
      toolCall: { toolCallId: "t1" },
      options: [
        { optionId: "allow", name: "Allow", kind: "allow_once" },
        { optionId: "reject", name: "Reject", kind: "reject_once" },
      ],
    });
    if (answer.outcome.optionId !== "allow") {
      await update({ sessionUpdate: "tool_call_update", toolCallId: "t1", status: "failed" });
      await say("edit rejected");
      return { stopReason: "end_turn" };
    }
    await client.request("fs/write_text_file", { sessionId, path, content: changed });
    await update({ sessionUpdate: "tool_call_update", toolCallId: "t1", status: "completed" });
    await plan(2);
    const { terminalId } = await client.request("terminal/create", {
      sessionId,
      command: "python3",
      args: ["-c", "print('checked')"],
      outputByteLimit: 1000,
    });
    await update({
      sessionUpdate: "tool_call",
      toolCallId: "t2",
      title: "Check " + rel,
      kind: "execute",
      status: "in_progress",
      content: [{ type: "terminal", terminalId }],
    });
    await client.request("terminal/wait_for_exit", { sessionId, terminalId });
    await client.request("terminal/release", { sessionId, terminalId });
    await update({ sessionUpdate: "tool_call_update", toolCallId: "t2", status: "completed" });
    await plan(3);
    await say("done");
    return { stopReason: "end_turn" };
  });

const stream = acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
const connection = app.connect(stream);
await connection.closed;
