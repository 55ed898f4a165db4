// Each rule of seed 004's "Writing a wrapper" table, tested through the real client; where the
// mock cannot show a rule, a fake sidecar (node running a small script) stands in for it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { AgentProtoError, Runtime, is, kindOf } from "../dist/index.js";
import { alive, drain, fakeBin, rejects, sidecarEnv, SIDECAR, start, tempDir, until } from "./support.mjs";

const HELLO = `{"hello":{"protocol":1,"anyagent":"0.0.5"}}`;
const INFO = { id: "s1", agent: { id: "mock" }, details: {}, configuration: { options: {} }, status: "Idle" };
const event = (sequence, kind) => ({ event: { sequence, session_id: "s1", kind, extensions: {} } });

/** A fake sidecar that says hello, then answers each frame with `reply(frame)`: lines to write
 * in ONE write (so they reach the client in one chunk). */
function scripted(t, reply) {
  return fakeBin(
    t,
    `import { createInterface } from "node:readline";
     process.stdout.write(${JSON.stringify(HELLO)} + "\\n");
     const reply = ${reply};
     createInterface({ input: process.stdin }).on("line", (text) => {
       const lines = reply(JSON.parse(text));
       if (lines.length) process.stdout.write(lines.map((l) => JSON.stringify(l) + "\\n").join(""));
     });`,
  );
}

test("rule: a session is registered inside the line reader, before the next line is read", async (t) => {
  // The open reply, an event and closed arrive in one chunk: all three are read before the
  // app's `await rt.open()` resumes, so the session must exist when the event line is routed.
  const bin = scripted(t, `(f) => f.cmd === "open" ? [{ id: f.id, ok: ${JSON.stringify(INFO)} }, ${JSON.stringify(event(1, { TextDelta: { message_id: "m1", text: "early" } }))}, { closed: "s1" }] : []`);
  const rt = await Runtime.start({ bin });
  t.after(() => rt.close(1000));
  const session = await rt.open("mock", { dir: "." });
  const seen = await drain(session);
  assert.deepEqual(seen.map((ev) => ev.kind.TextDelta.text), ["early"]);
});

test("rule: info and status stay live from SessionUpdated and StatusChanged", async (t) => {
  const rt = await start(t, "turn");
  const session = await rt.open("mock", { dir: tempDir(t) });
  assert.equal(session.status, "Idle");
  await session.prompt("hi");
  const seen = await until(session, "RequestOpened");
  assert.ok(seen.some((ev) => is(ev, "StatusChanged") && ev.kind.StatusChanged === "Working"));
  await until(session, "StatusChanged");
  assert.equal(session.status, "NeedsInput");
  // A SessionUpdated replaces the info whole (configure's test is S10).
  const bin = scripted(t, `(f) => f.cmd === "open" ? [{ id: f.id, ok: ${JSON.stringify(INFO)} }, ${JSON.stringify(event(1, { SessionUpdated: { ...INFO, title: "renamed", status: "Working" } }))}, { closed: "s1" }] : []`);
  const fake = await Runtime.start({ bin });
  t.after(() => fake.close(1000));
  const other = await fake.open("mock", {});
  await drain(other);
  assert.equal(other.info.title, "renamed");
  assert.equal(other.status, "Working");
});

test("rule: a session error makes the iterator throw, then ends (a later iterator too)", async (t) => {
  const bin = scripted(
    t,
    `(f) => f.cmd === "open" ? [{ id: f.id, ok: ${JSON.stringify(INFO)} }]
      : f.cmd === "prompt" ? [{ id: f.id, ok: { prompt_id: "p1", kind: { Started: { turn_id: "t1" } } } },
          ${JSON.stringify(event(1, "ContextCompacted"))},
          { session: "s1", error: { kind: "AuthRequired", message: "log in", login: { command: "claude /login" } } },
          { closed: "s1" }]
      : [{ id: f.id, error: { kind: "SessionClosed", message: "closed" } }]`,
  );
  const rt = await Runtime.start({ bin });
  t.after(() => rt.close(1000));
  const session = await rt.open("mock", {});
  await session.prompt("hi");
  const seen = [];
  const error = await rejects(
    (async () => {
      for await (const ev of session.events()) seen.push(kindOf(ev));
    })(),
    "AuthRequired",
  );
  assert.deepEqual(seen, ["ContextCompacted"]); // kindOf takes the string form too
  assert.deepEqual(error.body, { kind: "AuthRequired", message: "log in", login: { command: "claude /login" } });
  assert.deepEqual(error.fields, { login: { command: "claude /login" } });
  assert.deepEqual(await drain(session), []); // then it ends, for every later iterator too
  await session.close(); // a closed session: no error
});

test("rule: errors keep kind, message and every extra field (a reply's error)", async (t) => {
  const rt = await start(t, "turn");
  const error = await rejects(rt.open("mock", { dir: join(tempDir(t), "missing") }), "InvalidConfiguration");
  assert.ok(error instanceof AgentProtoError && error.message.includes(error.body.message));
  assert.ok(Object.keys(error.fields).length > 0, JSON.stringify(error.body));
  assert.deepEqual({ ...error.fields, kind: error.kind, message: error.body.message }, error.body);
});

test("rule: the sidecar's death rejects pending calls and fails iterators with ProcessExited and its stderr", async (t) => {
  const bin = scripted(t, `(f) => { if (f.cmd === "open") return [{ id: f.id, ok: ${JSON.stringify(INFO)} }]; process.stderr.write("boom: the last words\\n"); process.exit(3); }`);
  const rt = await Runtime.start({ bin });
  const session = await rt.open("mock", {});
  const iterating = drain(session);
  const error = await rejects(rt.discover(), "ProcessExited");
  assert.equal(error.body.status, "3");
  assert.match(error.body.stderr, /boom: the last words/);
  await rejects(iterating, "ProcessExited");
  await rejects(session.prompt("x"), "ProcessExited");
  assert.equal(await rt.close(), 3);
});

test("rule: close() is graceful (stdin closed, the sidecar exits 0) and idempotent", async (t) => {
  const rt = await start(t, "turn");
  const session = await rt.open("mock", { dir: tempDir(t) });
  const [first, second] = await Promise.all([rt.close(), rt.close()]);
  assert.equal(first, 0);
  assert.equal(second, 0);
  assert.equal(await rt.close(), 0);
  assert.deepEqual(await drain(session), []); // its `closed` came: no ProcessExited after our own close
});

test("rule: close() kills a sidecar that ignores EOF once the wait is over", async (t) => {
  const bin = fakeBin(t, `process.stdout.write(${JSON.stringify(HELLO)} + "\\n"); process.stdin.resume(); process.stdin.on("end", () => {}); setInterval(() => {}, 1000);`);
  const rt = await Runtime.start({ bin });
  const pid = rt.pid;
  assert.equal(await rt.close(300), null); // killed: no exit code
  assert.equal(alive(pid), false);
});

test("rule: a first line that is not the hello, or silence, fails start with ProtocolFailed", async (t) => {
  // (S11 covers another protocol and a non-JSON line; here: a JSON line that is no hello, and silence.)
  const notHello = fakeBin(t, `process.stdout.write(JSON.stringify({id: 1, ok: process.pid}) + "\\n"); setInterval(() => {}, 1000);`);
  const error = await rejects(Runtime.start({ bin: notHello }), "ProtocolFailed");
  assert.match(error.message, /first line was/);
  assert.equal(alive(Number(error.body.detail.match(/"ok":(\d+)/)[1])), false);
  const pidFile = join(tempDir(t), "pid");
  const silent = fakeBin(t, `(await import("node:fs")).writeFileSync(${JSON.stringify(pidFile)}, String(process.pid)); setInterval(() => {}, 1000);`);
  await rejects(Runtime.start({ bin: silent, startTimeout: 2000 }), "ProtocolFailed");
  // Killed, not left running (start rejects only once the child is gone; on a loaded machine
  // node may not have written its pid in 2 s, and then there is nothing more to check).
  if (existsSync(pidFile)) assert.equal(alive(Number(readFileSync(pidFile, "utf8"))), false);
});

test("start: a sidecar that exits before its hello says why; a missing binary is SpawnFailed", async (t) => {
  const home = tempDir(t);
  const error = await rejects(Runtime.start({ bin: SIDECAR, mock: join(home, "missing.json"), env: sidecarEnv(home) }), "ProcessExited");
  assert.match(error.message, /before its hello: .*missing\.json/);
  await rejects(Runtime.start({ bin: join(home, "no-such-agentproto") }), "SpawnFailed");
});

test("rule: kindOf reads both forms of kind, and is() narrows", () => {
  assert.equal(kindOf({ sequence: 1, session_id: "s1", kind: "ContextCompacted", extensions: {} }), "ContextCompacted");
  assert.equal(kindOf({ TextDelta: { message_id: "m", text: "t" } }), "TextDelta");
  assert.equal(kindOf("ContextCompacted"), "ContextCompacted");
  const ev = { sequence: 1, session_id: "s1", kind: { TextDelta: { message_id: "m", text: "t" } }, extensions: {} };
  assert.ok(is(ev, "TextDelta") && !is(ev, "TurnEnded"));
});

test("every session command sends its frame: answerTool, answerHook, cancel, rollback, dequeue, compact, refresh", async (t) => {
  // The fake answers each frame and echoes it back as an event (a kind the client passes through).
  const bin = scripted(
    t,
    `(f) => f.cmd === "open" ? [{ id: f.id, ok: ${JSON.stringify(INFO)} }]
      : f.cmd === "close" ? [{ closed: "s1" }, { id: f.id, ok: null }]
      : [{ id: f.id, ok: f.cmd === "info" ? { ...${JSON.stringify(INFO)}, title: "fresh" } : null },
         { event: { sequence: f.id, session_id: "s1", kind: { Echo: f }, extensions: {} } }]`,
  );
  const rt = await Runtime.start({ bin });
  t.after(() => rt.close(1000));
  const session = await rt.open("mock", {});
  await session.answerTool("c1", "plain text");
  await session.answerTool("c2", { content: [{ type: "text", text: "item" }], isError: true, structured: { n: 1 } });
  await session.answerHook("h1");
  await session.answerHook("h2", { decision: "block" });
  await session.cancel();
  await session.cancel({ clearQueue: true, turn: "t2" });
  await session.rollback(2);
  await session.dequeue("p3");
  await session.compact();
  assert.equal((await session.refresh()).title, "fresh");
  assert.equal(session.info.title, "fresh");
  await session.close();
  const frames = (await drain(session)).map((ev) => {
    const { id: _id, ...frame } = ev.kind.Echo;
    return frame;
  });
  assert.deepEqual(frames, [
    { cmd: "answer", session: "s1", request: "c1", answer: { ToolResult: { content: [{ type: "text", text: "plain text" }], is_error: false } } },
    { cmd: "answer", session: "s1", request: "c2", answer: { ToolResult: { content: [{ type: "text", text: "item" }], is_error: true, structured: { n: 1 } } } },
    { cmd: "answer", session: "s1", request: "h1", answer: { HookResult: {} } },
    { cmd: "answer", session: "s1", request: "h2", answer: { HookResult: { decision: "block" } } },
    { cmd: "cancel", session: "s1", clear_queue: false },
    { cmd: "cancel", session: "s1", clear_queue: true, turn: "t2" },
    { cmd: "rollback", session: "s1", turns: 2, scope: "Conversation" },
    { cmd: "dequeue", session: "s1", prompt: "p3" },
    { cmd: "compact", session: "s1" },
    { cmd: "info", session: "s1" },
  ]);
});

test("a call without a reply within callTimeout rejects with Timeout; the runtime goes on", async (t) => {
  const bin = scripted(t, `(f) => f.cmd === "discover" ? [] : [{ id: f.id, ok: { agents: [], missing: [], diagnostics: [] } }]`);
  const rt = await Runtime.start({ bin, callTimeout: 200 });
  t.after(() => rt.close(1000));
  await rejects(rt.discover(), "Timeout");
  assert.deepEqual((await rt.request("probe", { agent: "mock" })).agents, []);
});

test("start: AGENTPROTO_BIN, else `agentproto` on PATH, else `python3 -m agentproto`", async (t) => {
  // Each stand-in says a hello naming itself, and its arguments, then waits for EOF.
  const dir = tempDir(t);
  const standIn = (path, name) => {
    mkdirSync(join(path, ".."), { recursive: true });
    writeFileSync(path, `#!/bin/sh\nprintf '{"hello":{"protocol":1,"anyagent":"${name} %s"}}\\n' "$*"\nexec cat >/dev/null\n`);
    chmodSync(path, 0o755);
  };
  standIn(join(dir, "env", "sidecar"), "env");
  standIn(join(dir, "path", "agentproto"), "path");
  standIn(join(dir, "python", "python3"), "python3");
  const hello = async (env) => {
    const rt = await Runtime.start({ env: { HOME: dir, ...env }, args: ["--log-level", "debug"] });
    t.after(() => rt.close(1000));
    return rt.hello.anyagent;
  };
  const both = `${join(dir, "path")}:${join(dir, "python")}`;
  assert.equal(await hello({ AGENTPROTO_BIN: join(dir, "env", "sidecar"), PATH: both }), "env serve --log-level debug");
  assert.equal(await hello({ PATH: both }), "path serve --log-level debug");
  assert.equal(await hello({ PATH: join(dir, "python") }), "python3 -m agentproto serve --log-level debug");
});

test("a mock script given as an object is a private file (0600 in a 0700 dir), removed at close", async (t) => {
  const rt = await start(t, { turns: [[{ End: { Completed: { source: "Protocol" } } }]] });
  const argv = readFileSync(`/proc/${rt.pid}/cmdline`, "utf8").split("\0");
  const path = argv[argv.indexOf("--mock") + 1];
  assert.equal(statSync(path).mode & 0o777, 0o600);
  assert.equal(statSync(join(path, "..")).mode & 0o777, 0o700);
  assert.equal(await rt.close(), 0);
  assert.equal(existsSync(join(path, "..")), false);
});
