// S1–S11: the scenarios anyagent's packages test, here against `agentproto serve --mock`,
// plus the app's own tools. Run: node --test clients/typescript/test/
import { test } from "node:test";
import assert from "node:assert/strict";

import { QUEUE_CAP, Runtime, is, kindOf } from "../dist/index.js";
import { alive, drain, fakeBin, rejects, start, tempDir, texts, until } from "./support.mjs";

test("S1 open, prompt, answer the permission, see the turn end, close", async (t) => {
  const rt = await start(t, "turn");
  const dir = tempDir(t);
  const session = await rt.open("mock", { dir });
  assert.equal(session.info.id, session.id);
  const delivery = await session.prompt("hi");
  assert.ok(typeof delivery.kind === "object" && "Started" in delivery.kind, JSON.stringify(delivery));
  const opened = await until(session, "RequestOpened");
  const last = opened.at(-1);
  assert.ok(is(last, "RequestOpened") && "Permission" in last.kind.RequestOpened);
  await session.answer(last.kind.RequestOpened.Permission.id, { Permission: "AllowOnce" });
  const rest = await until(session, "TurnEnded");
  assert.deepEqual(texts(rest), ["Done."]);
  await until(session, "StatusChanged");
  assert.equal(session.status, "Idle");
  await session.close();
  assert.deepEqual(await drain(session), []);
  assert.equal(await rt.close(), 0);
});

test("S2 events that arrive before the app iterates are all delivered", async (t) => {
  const rt = await start(t, "turn");
  const session = await rt.open("mock", { dir: tempDir(t) });
  await session.prompt("hi");
  await rt.discover(); // a round trip: the turn's first events are in by now, unread
  const seen = await until(session, "RequestOpened");
  assert.deepEqual(texts(seen), ["Let me check. "]);
  assert.equal(kindOf(seen[0]), "TurnStarted");
});

test("S3 a prompt after close rejects with SessionClosed", async (t) => {
  const rt = await start(t, "turn");
  const session = await rt.open("mock", { dir: tempDir(t) });
  await session.close();
  await session.close(); // idempotent
  await rejects(session.prompt("x"), "SessionClosed");
});

test("S4 two sessions see only their own events, in order", async (t) => {
  const rt = await start(t, "chatter");
  const dir = tempDir(t);
  const [a, b] = await Promise.all([rt.open("mock", { dir }), rt.open("mock", { dir })]);
  assert.notEqual(a.id, b.id);
  await Promise.all([a.prompt("x"), b.prompt("y")]);
  const [ea, eb] = await Promise.all([until(a, "TurnEnded"), until(b, "TurnEnded")]);
  for (const [session, events] of [[a, ea], [b, eb]]) {
    assert.ok(events.every((ev) => ev.session_id === session.id));
    const seqs = events.map((ev) => ev.sequence);
    assert.deepEqual(seqs, [...seqs].sort((x, y) => x - y));
    assert.deepEqual(texts(events), ["one", "two", "three"]);
  }
});

test("S5 a malformed line is answered with BadFrame and the runtime goes on", async (t) => {
  const rt = await start(t, "turn");
  rt.process.stdin.write("not json\n");
  await rejects(rt.request("launch"), "BadFrame"); // an unknown command: its reply names it
  const report = await rt.discover();
  assert.equal(report.agents[0].id, "mock");
});

test("S6 process death rejects pending calls, fails iterators, and later calls", async (t) => {
  const rt = await start(t, "turn");
  const dir = tempDir(t);
  const session = await rt.open("mock", { dir });
  const iterating = drain(session);
  rt.process.kill("SIGKILL"); // first: nothing written from here on can be answered
  const pending = [rt.discover(), rt.open("mock", { dir })];
  for (const p of pending) await rejects(p, "ProcessExited");
  const error = await rejects(iterating, "ProcessExited");
  assert.equal(error.body.status, "-9");
  await rejects(rt.discover(), "ProcessExited");
  await rejects(session.prompt("x"), "ProcessExited");
  assert.equal(await rt.exited, null); // killed by a signal: no exit code
  assert.equal(await rt.close(), null);
});

test("S7 the agent dying mid-turn: the turn fails, the stream throws ProcessExited, then ends", async (t) => {
  const rt = await start(t, "die");
  const session = await rt.open("mock", { dir: tempDir(t) });
  await session.prompt("go");
  const ended = (await until(session, "TurnEnded")).at(-1);
  assert.ok(typeof ended.kind.TurnEnded.stop === "object" && "Failed" in ended.kind.TurnEnded.stop, JSON.stringify(ended));
  const error = await rejects(drain(session), "ProcessExited");
  assert.ok(error.message.length > 0);
  assert.deepEqual(await drain(session), []); // ended: a new iterator does not restart it
  assert.equal((await rt.discover()).agents[0].id, "mock"); // the runtime goes on
});

test("S8a a 20 000-event flood arrives whole and in order", async (t) => {
  const rt = await start(t, "flood");
  const session = await rt.open("mock", { dir: tempDir(t) });
  await session.prompt("go");
  let deltas = 0;
  let last = 0;
  for await (const ev of session.events()) {
    assert.ok(ev.sequence > last);
    last = ev.sequence;
    if (kindOf(ev) === "TextDelta") deltas++;
    if (kindOf(ev) === "TurnEnded") break;
  }
  assert.equal(deltas, 20_000);
});

test("S8b a consumer that stops reading gets ConsumerLagged, and the runtime and others survive", async (t) => {
  const script = { turns: [[{ Repeat: { times: QUEUE_CAP + 500, steps: [{ Emit: { TextDelta: { message_id: "m1", text: "x" } } }] } }, { End: { Completed: { source: "Protocol" } } }]] };
  const rt = await start(t, script);
  const dir = tempDir(t);
  const [slow, other] = await Promise.all([rt.open("mock", { dir }), rt.open("mock", { dir })]);
  await slow.prompt("go");
  while (slow.queued < QUEUE_CAP) await new Promise((resolve) => setTimeout(resolve, 20)); // nobody reads it
  const error = await rejects(drain(slow), "ConsumerLagged");
  assert.equal(error.body.session, slow.id);
  await other.prompt("go");
  const seen = await until(other, "TurnEnded");
  assert.equal(texts(seen).length, QUEUE_CAP + 500); // its reader never waited for the slow one
  assert.equal((await rt.discover()).agents[0].id, "mock");
});

test("S9 close with a session open: closed arrives, the process exits 0 and is gone", async (t) => {
  const rt = await start(t, "turn");
  const session = await rt.open("mock", { dir: tempDir(t) });
  const pid = rt.pid;
  assert.equal(await rt.close(), 0);
  assert.deepEqual(await drain(session), []); // closed ended it, with no error
  assert.equal(alive(pid), false);
});

test("S10 configure sends `option` and SessionUpdated updates info", async (t) => {
  const rt = await start(t, "configure");
  const session = await rt.open("mock", { dir: tempDir(t) });
  await session.configure("model", "opus");
  await until(session, "SessionUpdated");
  assert.equal(session.info.configuration.options["model"], "opus");
});

test("S11 a binary that does not speak the protocol fails start with ProtocolFailed and is killed", async (t) => {
  for (const first of ["'nope '+process.pid", "JSON.stringify({hello:{protocol:99,anyagent:'x'},pid:process.pid})"]) {
    // It prints its pid in its one line, then stays: start must kill it.
    const bin = fakeBin(t, `process.stdout.write(${first}+"\\n"); setInterval(() => {}, 1000);`);
    const error = await rejects(Runtime.start({ bin }), "ProtocolFailed");
    const pid = Number(/(\d+)/.exec(error.body.detail)[1]);
    assert.equal(alive(pid), false, `${pid} still runs`);
  }
});

test("the app's tools: a ToolCall answered with answerTool, the agent goes on", async (t) => {
  const rt = await start(t, "tools");
  const lookup = {
    name: "lookup",
    description: "Look a word up",
    input_schema: { type: "object", properties: { word: { type: "string" } }, required: ["word"] },
  };
  const session = await rt.open("mock", { dir: tempDir(t), tools: [lookup] });
  assert.match(session.toolsUrl ?? "", /^http:\/\/127\.0\.0\.1:\d+\/.+\/mcp\/agentproto$/);
  await session.prompt("look it up");
  const calls = [];
  const seen = [];
  for await (const ev of session.events()) {
    seen.push(ev);
    if (is(ev, "RequestOpened") && "ToolCall" in ev.kind.RequestOpened) {
      const call = ev.kind.RequestOpened.ToolCall;
      calls.push([call.tool, call.arguments]);
      await session.answerTool(call.id, { text: `${call.arguments.word}: a program that acts` });
    }
    if (is(ev, "TurnEnded")) break;
  }
  assert.deepEqual(calls, [["lookup", { word: "agent" }]]);
  assert.deepEqual(texts(seen), ["Looking it up.", " Done."]);
  const tool = seen.find((ev) => is(ev, "ToolUpdated") && ev.kind.ToolUpdated.status === "Completed");
  assert.ok(tool, "the call's result reached the agent");
  assert.match(JSON.stringify(tool.kind.ToolUpdated), /a program that acts/);
});

test("generate, discover, probe and planUsage on the mock", async (t) => {
  const rt = await start(t, { turns: [[{ Emit: { TextDelta: { message_id: "m1", text: "one shot" } } }, { End: { Completed: { source: "Protocol" } } }]] });
  const dir = tempDir(t);
  assert.equal(await rt.generate("mock", { dir }, "say it"), "one shot");
  const report = await rt.discover();
  assert.deepEqual(report.agents.map((a) => a.id), ["mock"]);
  const details = await rt.probe("mock", { dir });
  assert.equal(details.version, "mock");
  // The mock reports no plan usage: the command is sent, and its refusal comes back whole.
  const refused = await rejects(rt.planUsage("mock", {}), "UnsupportedFeature");
  assert.match(refused.message, /plan usage/);
  // planUsageAll: one row per discovered agent, here the mock's typed reason.
  const rows = await rt.planUsageAll({ dir });
  assert.deepEqual(rows.map((row) => [row.agent.id, row.error?.kind]), [["mock", "UnsupportedFeature"]]);
});

test("planUsageAll on a mock with a plan", async (t) => {
  const windows = [{ label: "Session", used_percent: 12, resets_at: null }];
  const rt = await start(t, { plan_usage: { plan: "max", windows } });
  const rows = await rt.planUsageAll({ agent_timeout: 5 });
  assert.equal(rows.length, 1);
  assert.deepEqual(rows[0].agent, (await rt.discover()).agents[0]);
  assert.deepEqual(rows[0].plan_usage?.windows, windows);
  assert.equal(rows[0].plan_usage?.plan, "max");
});
