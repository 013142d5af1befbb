// A client on the official TypeScript SDK 2.4.0 that behaves as the SDK's example client
// (src/examples/client.ts) does, written on 2.4.0's `client().onRequest(...)` API: the npm
// package leaves its examples out (`!dist/examples`), and the example as the repository
// holds it now uses a builder (`.requestPermission(...)`) 2.4.0 does not have.
//
//   node ts_example_client.mjs -- <agent command...>
//
// What it keeps of the example: fs read and write declared at initialize with
// PROTOCOL_VERSION, one session in the process's folder, the fixed prompt "Hello, agent!",
// the permission question put to the user on stdin (a number picks an option, anything
// else asks again), a file read answered with fixed text, a write accepted and dropped,
// the agent killed and exit 0 at the end.  The only change: the agent is the command
// after `--`, where the example starts its own agent with `npx tsx agent.ts`.

import { spawn } from "node:child_process";
import readline from "node:readline/promises";
import { Readable, Writable } from "node:stream";

import * as acp from "@agentclientprotocol/sdk";

const command = process.argv.slice(process.argv.indexOf("--") + 1);

async function askUser(params) {
  console.log(`\nPermission requested: ${params.toolCall.title}`);
  params.options.forEach((option, n) => console.log(`   ${n + 1}. ${option.name} (${option.kind})`));
  for (;;) {
    const rl = readline.createInterface({ input: process.stdin, output: process.stdout });
    const picked = Number.parseInt((await rl.question("\nChoose an option: ")).trim()) - 1;
    if (picked >= 0 && picked < params.options.length) {
      return { outcome: { outcome: "selected", optionId: params.options[picked].optionId } };
    }
    console.log("Invalid option. Please try again.");
  }
}

function show(update) {
  if (update.sessionUpdate === "agent_message_chunk") {
    console.log(update.content.type === "text" ? update.content.text : `[${update.content.type}]`);
  } else if (["plan", "agent_thought_chunk", "user_message_chunk"].includes(update.sessionUpdate)) {
    console.log(`[${update.sessionUpdate}]`);
  }
}

const agent = spawn(command[0], command.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));
const M = acp.CLIENT_METHODS;

try {
  const result = await acp
    .client({ name: "example-client" })
    .onRequest(M.session_request_permission, ({ params }) => askUser(params))
    .onRequest(M.fs_write_text_file, () => ({}))
    .onRequest(M.fs_read_text_file, () => ({ content: "Mock file content" }))
    .connectWith(stream, async (ctx) => {
      const init = await ctx.request(acp.AGENT_METHODS.initialize, {
        protocolVersion: acp.PROTOCOL_VERSION,
        clientCapabilities: { fs: { readTextFile: true, writeTextFile: true } },
      });
      console.log(`Connected to agent (protocol v${init.protocolVersion})`);
      return ctx.buildSession(process.cwd()).withSession(async (session) => {
        session.prompt("Hello, agent!");
        for (;;) {
          const message = await session.nextUpdate();
          if (message.kind === "stop") return message.response;
          show(message.notification.update);
        }
      });
    });
  console.log(`\nAgent completed with: ${result.stopReason}`);
} catch (error) {
  console.error("[Client] Error:", error);
} finally {
  agent.kill();
  process.exit(0);
}
