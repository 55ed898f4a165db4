// agentproto's TypeScript client: drives `agentproto serve` (protocol 1 on stdio) from Node.
//
// Rules of this file (seed 004's "Writing a wrapper", each covered by test/wrapper.test.mjs):
// - The line reader never pauses: stdout is read as it comes and each line is routed at once.
// - A session is registered inside the line reader, when its `open` reply is read, before the
//   next line is: an event right after the reply always finds its session.
// - `session.info` and `session.status` stay live from `SessionUpdated` and `StatusChanged`;
//   nothing else in an event is interpreted.
// - A session error makes that session's iterator throw it, then the stream ends; `closed`
//   ends it cleanly. Every iterator of a session reads the one queue.
// - The sidecar's death rejects every pending call and fails every open iterator with
//   `ProcessExited` (its status and the tail of its stderr); later calls reject the same way.
// - `close()` is graceful and idempotent: close stdin, wait up to 5 s, then kill the group.
// - A session's queue holds at most 4096 unconsumed events: past that the session fails with
//   `ConsumerLagged` and is closed; the other sessions never wait for it.
// - Errors keep `kind`, `message` and every extra field (`error.body`, `error.fields`).
// - The first line must be a protocol 1 hello: anything else, or silence for `startTimeout`
//   ms, fails start with `ProtocolFailed` and kills the child.
// Zero runtime dependencies: node's own modules only. The wire types come from
// protocol.d.ts, generated from agentproto/schema.json (scripts/build_ts_client.py).

import { spawn, type ChildProcess } from "node:child_process";
import { constants as osConstants } from "node:os";
import { accessSync, constants as fsConstants, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import type {
  AgentDetails,
  AgentPlanUsage,
  AgentRef,
  Answer,
  AppTool,
  Delivery,
  DiscoveryReport,
  ErrorBody,
  ErrorKind,
  Event,
  EventKind,
  Frame,
  Hello,
  Line,
  PlanUsage,
  SessionInfo,
  SessionStatus,
  ToolContent,
} from "./protocol.js";

export type * from "./protocol.js";

/** The most events a session keeps unconsumed before it fails with `ConsumerLagged`. */
export const QUEUE_CAP = 4096;

// -- names and narrowing ------------------------------------------------------------------------

/** Every variant name of an event's kind: `"TextDelta"`, `"ContextCompacted"`, ... */
export type EventKindName = EventKind extends infer K ? (K extends string ? K : keyof K & string) : never;
/** The kind variant called `N`. */
export type KindOf<N extends EventKindName> = Extract<EventKind, N | { [P in N]: unknown }>;
/** An event whose kind is the variant `N`. */
export type EventOf<N extends EventKindName> = Event & { kind: KindOf<N> };

/** The variant name of an event's kind (or of a kind), for both the object and the string form. */
export function kindOf(event: Event | EventKind): EventKindName {
  const kind: unknown = typeof event === "object" && event !== null && "kind" in event ? event.kind : event;
  if (typeof kind === "string") return kind as EventKindName;
  if (typeof kind === "object" && kind !== null) return (Object.keys(kind)[0] ?? "") as EventKindName;
  return "" as EventKindName;
}

/** True when `event`'s kind is `name`, narrowing it: `if (is(ev, "TextDelta")) ev.kind.TextDelta.text`. */
export function is<N extends EventKindName>(event: Event, name: N): event is EventOf<N> {
  return kindOf(event) === name;
}

// -- commands -----------------------------------------------------------------------------------

type Known<T> = { [K in keyof T as string extends K ? never : number extends K ? never : K]: T[K] };
/** Each command's frame, by `cmd`, without `id` and its open index signature. */
export type Command<C extends Frame["cmd"]> = Known<Extract<Frame, { cmd: C }>>;
/** The launch options of `open` (the frame's fields but `cmd` and `agent`). */
type DirOptional<T> = Omit<T, "dir"> & { dir?: string };
export type OpenOptions = DirOptional<Omit<Command<"open">, "cmd" | "agent" | "id">>;
export type GenerateOptions = DirOptional<Omit<Command<"generate">, "cmd" | "agent" | "id" | "prompt">>;
export type ProbeOptions = Omit<Command<"probe">, "cmd" | "agent" | "id">;
export type PlanUsageOptions = Omit<Command<"plan_usage">, "cmd" | "agent" | "id">;
export type PlanUsageAllOptions = Omit<Command<"plan_usage_all">, "cmd" | "id">;
export type CancelOptions = { clearQueue?: boolean; turn?: string };
/** A `ToolCall`'s answer: `text` (one text item) and/or MCP `content` items. */
export type ToolAnswer = {
  text?: string;
  content?: ToolContent[];
  isError?: boolean;
  structured?: Record<string, unknown>;
};
export type { AppTool };

// -- errors -------------------------------------------------------------------------------------

/** An ErrorBody from the sidecar (or the client's own): `kind`, `message`, every extra field. */
export class AgentProtoError extends Error {
  readonly kind: ErrorKind | (string & {});
  /** The error body as sent: `kind`, `message` and the variant's own fields. */
  readonly body: ErrorBody;

  constructor(body: ErrorBody) {
    super(`${body.kind}: ${body.message}`);
    this.name = "AgentProtoError";
    this.kind = body.kind;
    this.body = body;
  }

  /** The fields beyond `kind` and `message` (`status`, `stderr`, `detail`, `login`, ...). */
  get fields(): Record<string, unknown> {
    const { kind: _kind, message: _message, ...rest } = this.body;
    return rest;
  }
}

function failure(kind: ErrorKind | "Timeout", message: string, fields: Record<string, unknown> = {}): AgentProtoError {
  return new AgentProtoError({ ...fields, kind, message });
}

// -- sessions -----------------------------------------------------------------------------------

const END = Symbol("end");
type Item = Event | AgentProtoError | typeof END;

/** One open session: its events, and the commands that act on it. */
export class Session {
  readonly id: string;
  #info: SessionInfo;
  readonly #runtime: Runtime;
  readonly #queue: Item[] = [];
  #head = 0;
  #waiter: ((item: Item) => void) | null = null;
  #ended = false;
  #gone = false;

  /** Made by `Runtime.open`, inside the line reader: an app does not construct one. */
  constructor(runtime: Runtime, info: SessionInfo) {
    this.#runtime = runtime;
    this.id = info.id;
    this.#info = info;
  }

  /** The session's info, kept live from `SessionUpdated` and `StatusChanged`. */
  get info(): SessionInfo {
    return this.#info;
  }

  get status(): SessionStatus {
    return this.#info.status ?? "Idle";
  }

  get resumeToken(): string | null {
    return this.#info.resume_token ?? null;
  }

  /** The MCP endpoint of the app's tools (`open` with `tools`): it holds a secret. */
  get toolsUrl(): string | null {
    return this.#info.tools_url ?? null;
  }

  /** How many events wait unconsumed (at most QUEUE_CAP). */
  get queued(): number {
    let count = 0;
    for (let i = this.#head; i < this.#queue.length; i++) if (!(this.#queue[i] === END || this.#queue[i] instanceof AgentProtoError)) count++;
    return count;
  }

  /** @internal Reader side: one event, session error or end. */
  push(item: Item): void {
    if (this.#ended) return;
    if (item !== END && !(item instanceof AgentProtoError)) {
      const kind = item.kind;
      if (typeof kind === "object") {
        if ("SessionUpdated" in kind) this.#info = kind.SessionUpdated;
        else if ("StatusChanged" in kind) this.#info = { ...this.#info, status: kind.StatusChanged };
      }
    }
    if (this.#waiter !== null) {
      const waiter = this.#waiter;
      this.#waiter = null;
      if (item === END) this.#ended = true;
      waiter(item);
      return;
    }
    if (item !== END && this.#queue.length - this.#head >= QUEUE_CAP) {
      this.#queue.push(failure("ConsumerLagged", `more than ${QUEUE_CAP} events of session ${this.id} were not consumed`, { session: this.id }), END);
      this.#ended = true;
      this.#runtime.sendNoWait({ cmd: "close", session: this.id });
      return;
    }
    this.#queue.push(item);
    if (item === END) this.#ended = true;
  }

  /** @internal `closed` was read, or the sidecar is gone (`error`, unless the app closed it). */
  end(error?: AgentProtoError): void {
    this.#gone = true;
    if (error !== undefined) this.push(error);
    this.push(END);
  }

  /** The next item if one waits (END stays, so later iterators end at once too), else null. */
  #next(): Item | null {
    if (this.#head < this.#queue.length) {
      const item = this.#queue[this.#head] as Item;
      if (item === END) return END;
      this.#head++;
      if (this.#head > 1024 && this.#head * 2 > this.#queue.length) {
        this.#queue.splice(0, this.#head);
        this.#head = 0;
      }
      return item;
    }
    return this.#ended ? END : null;
  }

  /** The session's events until it closes; a session error throws, then the stream ends.
   * A plain async iterator (no generator): an event that waits costs one resolved promise. */
  events(): AsyncIterableIterator<Event> {
    let finished = false;
    const step = (item: Item): IteratorResult<Event, undefined> => {
      if (item === END) {
        finished = true;
        if (this.#head >= this.#queue.length) this.#queue.push(END);
        return { value: undefined, done: true };
      }
      if (item instanceof AgentProtoError) {
        finished = true;
        throw item;
      }
      return { value: item, done: false };
    };
    const iterator: AsyncIterableIterator<Event> = {
      next: (): Promise<IteratorResult<Event, undefined>> => {
        if (finished) return Promise.resolve({ value: undefined, done: true });
        const item = this.#next();
        if (item !== null) {
          try {
            return Promise.resolve(step(item));
          } catch (error) {
            return Promise.reject(error);
          }
        }
        return new Promise<Item>((resolve) => (this.#waiter = resolve)).then(step);
      },
      return: (): Promise<IteratorResult<Event, undefined>> => {
        finished = true; // `break`: this iterator is done, the session's queue stays for the next
        return Promise.resolve({ value: undefined, done: true });
      },
      [Symbol.asyncIterator]: () => iterator,
    };
    return iterator;
  }

  prompt(text: string, attachments: string[] = []): Promise<Delivery> {
    return this.#runtime.request("prompt", { session: this.id, text, attachments }) as Promise<Delivery>;
  }

  async answer(requestId: string, answer: Answer): Promise<void> {
    await this.#runtime.request("answer", { session: this.id, request: requestId, answer });
  }

  /** Answer a `ToolCall` with text and/or MCP content items (and `structured`). */
  answerTool(requestId: string, result: ToolAnswer | string): Promise<void> {
    const spec: ToolAnswer = typeof result === "string" ? { text: result } : result;
    const content: ToolContent[] = [...(spec.text !== undefined ? [{ type: "text" as const, text: spec.text }] : []), ...(spec.content ?? [])];
    const body: Extract<Answer, { ToolResult: unknown }>["ToolResult"] = { content, is_error: spec.isError ?? false };
    if (spec.structured !== undefined) body.structured = spec.structured;
    return this.answer(requestId, { ToolResult: body });
  }

  /** Answer a `Hook` with the agent's hook output (none: the neutral `{}`). */
  answerHook(requestId: string, output: Record<string, unknown> = {}): Promise<void> {
    return this.answer(requestId, { HookResult: output });
  }

  async configure(option: string, value: string | boolean): Promise<void> {
    await this.#runtime.request("configure", { session: this.id, option, value });
  }

  async cancel(options: CancelOptions = {}): Promise<void> {
    await this.#runtime.request("cancel", { session: this.id, clear_queue: options.clearQueue ?? false, ...(options.turn ? { turn: options.turn } : {}) });
  }

  async rollback(turns: number, scope: "Conversation" | "ConversationAndFiles" = "Conversation"): Promise<void> {
    await this.#runtime.request("rollback", { session: this.id, turns, scope });
  }

  async dequeue(promptId: string): Promise<void> {
    await this.#runtime.request("dequeue", { session: this.id, prompt: promptId });
  }

  async compact(): Promise<void> {
    await this.#runtime.request("compact", { session: this.id });
  }

  /** Ask the sidecar for the session's info now (it is kept live anyway). */
  async refresh(): Promise<SessionInfo> {
    this.#info = (await this.#runtime.request("info", { session: this.id })) as SessionInfo;
    return this.#info;
  }

  /** Close the session; idempotent (a closed session, or one whose sidecar is gone, is no error). */
  async close(): Promise<void> {
    if (this.#gone || this.#runtime.dead !== null) return;
    try {
      await this.#runtime.request("close", { session: this.id });
    } catch (error) {
      if (!(error instanceof AgentProtoError) || (error.kind !== "SessionClosed" && error.kind !== "UnknownSession")) throw error;
    }
  }
}

// -- the runtime --------------------------------------------------------------------------------

export type StartOptions = {
  /** The sidecar's command: a path, or argv words (`["python3", "-m", "agentproto"]`). Default:
   * `AGENTPROTO_BIN` (a path), else `agentproto` on PATH, else `python3 -m agentproto`. */
  bin?: string | string[];
  /** More arguments after `serve` (`["--log-level", "debug"]`). */
  args?: string[];
  /** A mock script: its path, or the script itself, written to a private temp file. */
  mock?: string | Record<string, unknown>;
  /** The sidecar's environment (default: this process's). */
  env?: NodeJS.ProcessEnv;
  /** The sidecar's working directory. */
  cwd?: string;
  /** Milliseconds to wait for the hello (default 15000). */
  startTimeout?: number;
  /** Milliseconds a call waits for its reply (default 120000; 0: no limit). */
  callTimeout?: number;
};

type Pending = { resolve: (value: unknown) => void; reject: (error: AgentProtoError) => void; onOk?: (value: unknown) => unknown; timer?: NodeJS.Timeout };

function onPath(name: string, env: NodeJS.ProcessEnv): boolean {
  for (const dir of (env["PATH"] ?? "").split(":")) {
    if (!dir) continue;
    try {
      accessSync(join(dir, name), fsConstants.X_OK);
      return true;
    } catch {
      // not here
    }
  }
  return false;
}

function defaultCommand(env: NodeJS.ProcessEnv): string[] {
  const bin = env["AGENTPROTO_BIN"];
  if (bin) return [bin];
  if (onPath("agentproto", env)) return ["agentproto"];
  return ["python3", "-m", "agentproto"];
}

function signalStatus(code: number | null, signal: NodeJS.Signals | null): number | null {
  if (code !== null) return code;
  const number = signal ? osConstants.signals[signal] : undefined;
  return number !== undefined ? -number : null;
}

/** One sidecar process and its sessions. */
export class Runtime {
  /** The sidecar's hello (`protocol`, `agentproto`, `anyagent`). */
  hello: Hello = { protocol: 1, anyagent: "" };
  /** Resolves with the exit code when the sidecar is gone (null: ended by a signal). */
  readonly exited: Promise<number | null>;
  /** @internal */
  dead: AgentProtoError | null = null;
  readonly #child: ChildProcess;
  readonly #callTimeout: number;
  readonly #calls = new Map<number, Pending>();
  readonly #sessions = new Map<string, Session>();
  #nextId = 0;
  #closing = false;
  #closed: Promise<number | null> | null = null;
  #stderr = "";
  #buffer = "";
  #started: ((error?: AgentProtoError) => void) | null = null;
  #scriptDir: string | null = null;

  private constructor(child: ChildProcess, callTimeout: number) {
    this.#child = child;
    this.#callTimeout = callTimeout;
    this.exited = new Promise((resolve) => {
      child.on("close", (code, signal) => {
        this.#die(code, signal);
        resolve(code);
      });
    });
    child.stdout?.setEncoding("utf8");
    child.stdout?.on("data", (chunk: string) => this.#read(chunk));
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (chunk: string) => {
      this.#stderr = (this.#stderr + chunk).slice(-8192);
    });
    child.stdin?.on("error", () => {}); // EPIPE after death: the close handler reports it
  }

  /** The sidecar's process id. */
  get pid(): number | undefined {
    return this.#child.pid;
  }

  /** The sidecar's child process (for its pid, or to write a raw line in a test). */
  get process(): ChildProcess {
    return this.#child;
  }

  /** Spawn `BIN serve [--mock SCRIPT] [ARGS]` and check its hello. */
  static start(options: StartOptions = {}): Promise<Runtime> {
    const env = options.env ?? process.env;
    const argv = options.bin === undefined ? defaultCommand(env) : typeof options.bin === "string" ? [options.bin] : [...options.bin];
    let scriptDir: string | null = null;
    let mock = options.mock;
    if (mock !== undefined && typeof mock !== "string") {
      scriptDir = mkdtempSync(join(tmpdir(), "agentproto-mock-")); // 0700: only we read it
      writeFileSync(join(scriptDir, "script.json"), JSON.stringify(mock), { mode: 0o600 });
      mock = join(scriptDir, "script.json");
    }
    argv.push("serve", ...(mock !== undefined ? ["--mock", mock] : []), ...(options.args ?? []));
    const [command, ...args] = argv as [string, ...string[]];
    const child = spawn(command, args, { env, cwd: options.cwd, stdio: ["pipe", "pipe", "pipe"], detached: true });
    const runtime = new Runtime(child, options.callTimeout ?? 120_000);
    runtime.#scriptDir = scriptDir;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        runtime.#started?.(failure("ProtocolFailed", `not a protocol 1 sidecar: no hello within ${options.startTimeout ?? 15000} ms`, { detail: "(nothing)" }));
      }, options.startTimeout ?? 15_000);
      runtime.#started = (error) => {
        runtime.#started = null;
        clearTimeout(timer);
        if (error === undefined) {
          resolve(runtime);
          return;
        }
        runtime.#kill();
        void runtime.exited.then(() => {
          runtime.#removeScript();
          reject(error);
        });
      };
      child.on("error", (error: NodeJS.ErrnoException) => {
        runtime.#started?.(failure("SpawnFailed", `cannot start ${command}: ${error.message}`, { detail: error.code ?? String(error) }));
      });
    });
  }

  // -- the line reader (never paused)
  #read(chunk: string): void {
    this.#buffer += chunk;
    let start = 0;
    for (;;) {
      const end = this.#buffer.indexOf("\n", start);
      if (end < 0) break;
      const text = this.#buffer.slice(start, end);
      start = end + 1;
      if (this.#started !== null) {
        this.#hello(text);
        continue;
      }
      if (this.dead !== null) continue;
      let line: unknown;
      try {
        line = JSON.parse(text);
      } catch {
        continue;
      }
      if (typeof line === "object" && line !== null) this.#route(line as Line);
    }
    this.#buffer = this.#buffer.slice(start);
  }

  #hello(text: string): void {
    let hello: unknown;
    try {
      hello = (JSON.parse(text) as { hello?: unknown }).hello;
    } catch {
      hello = undefined;
    }
    if (typeof hello === "object" && hello !== null && (hello as Hello).protocol === 1) {
      this.hello = hello as Hello;
      this.#started?.();
      return;
    }
    const shown = text.slice(0, 200);
    this.#started?.(failure("ProtocolFailed", `not a protocol 1 sidecar: first line was ${JSON.stringify(shown)}`, { detail: shown }));
  }

  #route(line: Line): void {
    if ("event" in line) {
      this.#sessions.get(line.event.session_id)?.push(line.event);
    } else if ("closed" in line) {
      const session = this.#sessions.get(line.closed);
      this.#sessions.delete(line.closed);
      session?.end();
    } else if ("session" in line) {
      this.#sessions.get(line.session)?.push(new AgentProtoError(line.error));
    } else if ("id" in line && typeof line.id === "number") {
      const call = this.#calls.get(line.id);
      if (call === undefined) return;
      this.#calls.delete(line.id);
      if (call.timer !== undefined) clearTimeout(call.timer);
      if ("error" in line) call.reject(new AgentProtoError(line.error));
      else if ("ok" in line) call.resolve(call.onOk !== undefined ? call.onOk(line.ok) : line.ok); // registration: before the next line
    }
  }

  #die(code: number | null, signal: NodeJS.Signals | null): void {
    const status = signalStatus(code, signal);
    const error = failure("ProcessExited", `the sidecar exited (status ${status})`, { status: String(status), stderr: this.#stderr });
    if (this.#started !== null) {
      const said = this.#stderr.split("\n").map((l) => l.trim()).filter(Boolean);
      const why = `the sidecar exited (status ${status}) before its hello${said.length ? `: ${said[said.length - 1]!.replace(/^agentproto: /, "")}` : ""}`;
      this.#started(failure("ProcessExited", why, { status: String(status), stderr: this.#stderr }));
    }
    this.dead = error;
    const calls = [...this.#calls.values()];
    this.#calls.clear();
    const sessions = [...this.#sessions.values()];
    this.#sessions.clear();
    for (const call of calls) {
      if (call.timer !== undefined) clearTimeout(call.timer);
      call.reject(error);
    }
    for (const session of sessions) session.end(this.#closing ? undefined : error);
  }

  // -- calls
  /** @internal Write a frame without waiting for its reply (errors ignored). */
  sendNoWait(fields: Record<string, unknown>): void {
    this.request(String(fields["cmd"]), fields).catch(() => {});
  }

  /** Send any protocol 1 command (`cmd` and its fields) and wait for its `ok`. */
  request(cmd: string, fields: Record<string, unknown> = {}, onOk?: (value: unknown) => unknown): Promise<unknown> {
    if (this.dead !== null) return Promise.reject(this.dead);
    const stdin = this.#child.stdin;
    if (stdin === null || stdin.destroyed || stdin.writableEnded) {
      return Promise.reject(failure("ProcessExited", "the sidecar's stdin is closed", { status: null, stderr: "" }));
    }
    const id = ++this.#nextId;
    return new Promise((resolve, reject) => {
      const call: Pending = { resolve, reject, ...(onOk ? { onOk } : {}) };
      if (this.#callTimeout > 0) {
        call.timer = setTimeout(() => {
          this.#calls.delete(id);
          reject(failure("Timeout", `${cmd}: no reply within ${this.#callTimeout} ms`));
        }, this.#callTimeout);
      }
      this.#calls.set(id, call);
      stdin.write(JSON.stringify({ ...fields, id, cmd }) + "\n");
    });
  }

  discover(): Promise<DiscoveryReport> {
    return this.request("discover") as Promise<DiscoveryReport>;
  }

  probe(agent: AgentRef, options: ProbeOptions = {}): Promise<AgentDetails> {
    return this.request("probe", { ...options, agent }) as Promise<AgentDetails>;
  }

  planUsage(agent: AgentRef, options: PlanUsageOptions = {}): Promise<PlanUsage> {
    return this.request("plan_usage", { ...options, agent }) as Promise<PlanUsage>;
  }

  /** Every discovered agent, in discover's order: its `plan_usage`, or the `error` saying why it has none. */
  planUsageAll(options: PlanUsageAllOptions = {}): Promise<AgentPlanUsage[]> {
    return this.request("plan_usage_all", { ...options }) as Promise<AgentPlanUsage[]>;
  }

  /** One throwaway turn, tools refused: the answer's text. */
  async generate(agent: AgentRef, options: GenerateOptions, prompt: string): Promise<string> {
    return String(await this.request("generate", { ...options, dir: options.dir ?? process.cwd(), agent, prompt }));
  }

  /** Open a session (`dir` defaults to the current directory); `tools` are the app's own. */
  open(agent: AgentRef, options: OpenOptions = {}): Promise<Session> {
    const register = (info: unknown): Session => {
      const session = new Session(this, info as SessionInfo);
      this.#sessions.set(session.id, session);
      return session;
    };
    return this.request("open", { ...options, dir: options.dir ?? process.cwd(), agent }, register) as Promise<Session>;
  }

  /** Close stdin, wait up to `timeoutMs` for the sidecar to exit, then kill it. Idempotent:
   * resolves with the exit code (null: killed by a signal). */
  close(timeoutMs = 5000): Promise<number | null> {
    if (this.#closed === null) {
      this.#closing = true;
      this.#child.stdin?.end();
      this.#closed = (async () => {
        let timer: NodeJS.Timeout | undefined;
        const late = new Promise<"late">((resolve) => {
          timer = setTimeout(() => resolve("late"), timeoutMs);
        });
        const first = await Promise.race([this.exited, late]);
        clearTimeout(timer);
        if (first === "late") this.#kill();
        const code = await this.exited;
        this.#removeScript();
        return code;
      })();
    }
    return this.#closed;
  }

  #kill(): void {
    if (this.#child.exitCode !== null || this.#child.signalCode !== null) return;
    const pid = this.#child.pid;
    try {
      if (pid !== undefined) process.kill(-pid, "SIGKILL");
    } catch {
      this.#child.kill("SIGKILL");
    }
  }

  #removeScript(): void {
    if (this.#scriptDir !== null) rmSync(this.#scriptDir, { recursive: true, force: true });
    this.#scriptDir = null;
  }
}
