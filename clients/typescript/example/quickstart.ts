import { Runtime, is } from "agentproto";

// A scripted agent: it says something, asks to run a command, and goes on once answered.
const tool = { id: "t1", kind: "Execute", title: "cargo test", status: "Pending", input: { Command: { command: "cargo test" } }, diffs: [], locations: [] };
const turn = [
  { Emit: { TextDelta: { message_id: "m1", text: "Let me check. " } } },
  { Emit: { RequestOpened: { Permission: { id: "r1", options: ["AllowOnce", "DenyOnce"], tool } } } },
  "AwaitAnswer",
  { Emit: { TextDelta: { message_id: "m1", text: "Done.\n" } } },
  { End: { Completed: { source: "Protocol" } } },
];

const rt = await Runtime.start({ mock: { turns: [turn] } }); // no mock: a real agent, rt.open("claude")
const session = await rt.open("mock");
await session.prompt("run the tests");
for await (const ev of session.events()) {
  if (is(ev, "TextDelta")) process.stdout.write(ev.kind.TextDelta.text);
  if (is(ev, "RequestOpened") && "Permission" in ev.kind.RequestOpened) {
    const request = ev.kind.RequestOpened.Permission;
    console.log(`[allowing ${request.tool.title}]`);
    await session.answer(request.id, { Permission: "AllowOnce" });
  }
  if (is(ev, "TurnEnded")) break;
}
await session.close();
await rt.close();
