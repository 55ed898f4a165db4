import { Runtime, is, type AppTool } from "agentproto";

// The app's own tool: the agent calls it, the app answers. The mock calls it as an agent would.
const lookup: AppTool = {
  name: "lookup",
  description: "Look a word up",
  input_schema: { type: "object", properties: { word: { type: "string" } }, required: ["word"] },
};
const script = { turns: [[{ CallTool: { tool: "lookup", arguments: { word: "agent" } } }, { End: { Completed: { source: "Protocol" } } }]] };

const rt = await Runtime.start({ mock: script });
const session = await rt.open("mock", { tools: [lookup] });
await session.prompt("look it up");
for await (const ev of session.events()) {
  if (is(ev, "RequestOpened") && "ToolCall" in ev.kind.RequestOpened) {
    const call = ev.kind.RequestOpened.ToolCall;
    console.log(`${call.tool}(${JSON.stringify(call.arguments)})`);
    await session.answerTool(call.id, { text: `${String(call.arguments["word"])}: a program that acts` });
  }
  if (is(ev, "ToolUpdated") && ev.kind.ToolUpdated.status === "Completed") console.log(JSON.stringify(ev.kind.ToolUpdated.output));
  if (is(ev, "TurnEnded")) break;
}
await session.close();
await rt.close();
