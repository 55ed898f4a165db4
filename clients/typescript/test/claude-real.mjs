// Run by tests/test_ts_client.py (not by `node --test`): one turn of the pinned Claude Code CLI
// through the TypeScript client, against the fake Anthropic API the test started. The test
// passes the launch options as JSON in AGENTPROTO_TS_OPEN; this prints what it saw as JSON.
import { Runtime, is, kindOf } from "../dist/index.js";

const options = JSON.parse(process.env.AGENTPROTO_TS_OPEN ?? "{}");
const rt = await Runtime.start({ bin: JSON.parse(process.env.AGENTPROTO_TS_SIDECAR ?? '["python3", "-m", "agentproto"]') });
const seen = { version: "", permissions: [], text: "", stop: null, kinds: [] };
try {
  const session = await rt.open("claude", options);
  seen.version = session.info.details.version;
  await session.prompt("write a file");
  for await (const ev of session.events()) {
    seen.kinds.push(kindOf(ev));
    if (is(ev, "TextDelta")) seen.text += ev.kind.TextDelta.text;
    if (is(ev, "RequestOpened") && "Permission" in ev.kind.RequestOpened) {
      const request = ev.kind.RequestOpened.Permission;
      seen.permissions.push(request.tool.input);
      await session.answer(request.id, { Permission: "AllowOnce" });
    }
    if (is(ev, "TurnEnded")) {
      seen.stop = ev.kind.TurnEnded.stop;
      break;
    }
  }
  await session.close();
} finally {
  seen.exit = await rt.close(15_000);
}
process.stdout.write(JSON.stringify(seen) + "\n");
