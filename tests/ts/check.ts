// Compiled by tests/core/test_typegen.py with `tsc --noEmit --strict` next to agentproto.d.ts, which
// json-schema-to-typescript generates from agentproto/schema.json. It must compile: an app in
// TypeScript builds frames and tells lines and events apart with nothing but these types.
import type {
  Answer,
  ErrorBody,
  ErrorKind,
  Event,
  EventKind,
  Frame,
  Line,
  OpsLine,
  OpsRequest,
  Request,
} from "./agentproto";

// -- frames an app writes -------------------------------------------------------------------
export const frames: Frame[] = [
  { id: 1, cmd: "discover" },
  { id: 2, cmd: "open", agent: "mock", dir: ".", permission_mode: "Ask" },
  { id: 3, cmd: "open", agent: { acp: { name: "mine", path: "/opt/mine", args: ["--acp"] } }, dir: "." },
  { id: 4, cmd: "prompt", session: "s1", text: "run the tests" },
  { id: 5, cmd: "answer", session: "s1", request: "r1", answer: { Permission: "AllowOnce" } },
  { id: 6, cmd: "answer", session: "s1", request: "r2", answer: { Deny: { message: "not here" } } },
  { id: 7, cmd: "cancel", session: "s1" },
];
// @ts-expect-error: an unknown command is not a frame
export const unknownCommand: Frame = { id: 8, cmd: "launch" };
// @ts-expect-error: a prompt needs its session
export const noSession: Frame = { id: 9, cmd: "prompt", text: "hi" };

export const ops: OpsRequest[] = [{ op: "capabilities" }, { op: "open", agent: "mock", dir: "." }, { op: "prompt", text: "hi" }];

// -- lines an app reads: each kind of line, told apart by its key ----------------------------
export function describeLine(line: Line): string {
  if ("hello" in line) return `protocol ${line.hello.protocol}`;
  if ("event" in line) {
    const event: Event = line.event; // an EventLine's event, not `unknown`
    return `#${event.sequence} ${describeKind(event.kind)}`;
  }
  if ("closed" in line) {
    // @ts-expect-error: a closed line has nothing else (no index signature to hide a typo)
    line.event;
    return `closed ${line.closed}`;
  }
  if ("session" in line) {
    const error: ErrorBody = line.error; // a session error's body
    return `session ${line.session} failed: ${error.kind}: ${error.message}`;
  }
  if ("error" in line) {
    const error: ErrorBody = line.error; // a reply's error body
    return `reply ${line.id ?? "?"} failed: ${error.kind}`;
  }
  return `reply ${line.id}`;
}

export const busy: ErrorKind = "SessionBusy";
// @ts-expect-error: not an error kind
export const oops: ErrorKind = "Oops";

// -- events, narrowed by kind ----------------------------------------------------------------
export function describeKind(kind: EventKind): string {
  if (typeof kind === "string") return kind;
  if ("TextDelta" in kind) return kind.TextDelta.text;
  if ("ToolUpdated" in kind) return `${kind.ToolUpdated.kind} ${kind.ToolUpdated.status}`;
  if ("RequestOpened" in kind) return describeRequest(kind.RequestOpened);
  if ("TurnEnded" in kind) return `ended ${JSON.stringify(kind.TurnEnded.stop)}`;
  return Object.keys(kind)[0];
}

function describeRequest(request: Request): string {
  if ("Permission" in request) {
    const answer: Answer = { Permission: request.Permission.options[0] };
    return `permission ${request.Permission.id} → ${JSON.stringify(answer)}`;
  }
  if ("ToolCall" in request) {
    const answer: Answer = { ToolResult: { content: [{ type: "text", text: "ok" }], is_error: false } };
    return `tool ${request.ToolCall.tool} → ${JSON.stringify(answer)}`;
  }
  if ("Hook" in request) {
    const answer: Answer = { HookResult: {} };
    return `hook ${request.Hook.event} → ${JSON.stringify(answer)}`;
  }
  return `question ${request.Question.id}`;
}

// -- ops lines, narrowed by `kind` -----------------------------------------------------------
export function describeOps(line: OpsLine): string {
  switch (line.kind) {
    case "event":
      return describeKind(line.event.kind);
    case "done":
      return `done ${line.exit_code}`;
    case "result":
      if (line.ok && line.op === "open") return `opened ${line.session.id}`;
      if (!line.ok) return `failed: ${line.error.kind}`;
      return `${line.op} ok`;
    default:
      return line.kind;
  }
}
