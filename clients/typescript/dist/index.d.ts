import { type ChildProcess } from "node:child_process";
import type { AgentDetails, AgentPlanUsage, AgentRef, Answer, AppTool, Delivery, DiscoveryReport, ErrorBody, ErrorKind, Event, EventKind, Frame, Hello, PlanUsage, SessionInfo, SessionStatus, ToolContent } from "./protocol.js";
export type * from "./protocol.js";
/** The most events a session keeps unconsumed before it fails with `ConsumerLagged`. */
export declare const QUEUE_CAP = 4096;
/** Every variant name of an event's kind: `"TextDelta"`, `"ContextCompacted"`, ... */
export type EventKindName = EventKind extends infer K ? (K extends string ? K : keyof K & string) : never;
/** The kind variant called `N`. */
export type KindOf<N extends EventKindName> = Extract<EventKind, N | {
    [P in N]: unknown;
}>;
/** An event whose kind is the variant `N`. */
export type EventOf<N extends EventKindName> = Event & {
    kind: KindOf<N>;
};
/** The variant name of an event's kind (or of a kind), for both the object and the string form. */
export declare function kindOf(event: Event | EventKind): EventKindName;
/** True when `event`'s kind is `name`, narrowing it: `if (is(ev, "TextDelta")) ev.kind.TextDelta.text`. */
export declare function is<N extends EventKindName>(event: Event, name: N): event is EventOf<N>;
type Known<T> = {
    [K in keyof T as string extends K ? never : number extends K ? never : K]: T[K];
};
/** Each command's frame, by `cmd`, without `id` and its open index signature. */
export type Command<C extends Frame["cmd"]> = Known<Extract<Frame, {
    cmd: C;
}>>;
/** The launch options of `open` (the frame's fields but `cmd` and `agent`). */
type DirOptional<T> = Omit<T, "dir"> & {
    dir?: string;
};
export type OpenOptions = DirOptional<Omit<Command<"open">, "cmd" | "agent" | "id">>;
export type GenerateOptions = DirOptional<Omit<Command<"generate">, "cmd" | "agent" | "id" | "prompt">>;
export type ProbeOptions = Omit<Command<"probe">, "cmd" | "agent" | "id">;
export type PlanUsageOptions = Omit<Command<"plan_usage">, "cmd" | "agent" | "id">;
export type PlanUsageAllOptions = Omit<Command<"plan_usage_all">, "cmd" | "id">;
export type CancelOptions = {
    clearQueue?: boolean;
    turn?: string;
};
/** A `ToolCall`'s answer: `text` (one text item) and/or MCP `content` items. */
export type ToolAnswer = {
    text?: string;
    content?: ToolContent[];
    isError?: boolean;
    structured?: Record<string, unknown>;
};
export type { AppTool };
/** An ErrorBody from the sidecar (or the client's own): `kind`, `message`, every extra field. */
export declare class AgentProtoError extends Error {
    readonly kind: ErrorKind | (string & {});
    /** The error body as sent: `kind`, `message` and the variant's own fields. */
    readonly body: ErrorBody;
    constructor(body: ErrorBody);
    /** The fields beyond `kind` and `message` (`status`, `stderr`, `detail`, `login`, ...). */
    get fields(): Record<string, unknown>;
}
/** One open session: its events, and the commands that act on it. */
export declare class Session {
    #private;
    readonly id: string;
    /** Made by `Runtime.open`, inside the line reader: an app does not construct one. */
    constructor(runtime: Runtime, info: SessionInfo);
    /** The session's info, kept live from `SessionUpdated` and `StatusChanged`. */
    get info(): SessionInfo;
    get status(): SessionStatus;
    get resumeToken(): string | null;
    /** The MCP endpoint of the app's tools (`open` with `tools`): it holds a secret. */
    get toolsUrl(): string | null;
    /** How many events wait unconsumed (at most QUEUE_CAP). */
    get queued(): number;
    /** The session's events until it closes; a session error throws, then the stream ends.
     * A plain async iterator (no generator): an event that waits costs one resolved promise. */
    events(): AsyncIterableIterator<Event>;
    prompt(text: string, attachments?: string[]): Promise<Delivery>;
    answer(requestId: string, answer: Answer): Promise<void>;
    /** Answer a `ToolCall` with text and/or MCP content items (and `structured`). */
    answerTool(requestId: string, result: ToolAnswer | string): Promise<void>;
    /** Answer a `Hook` with the agent's hook output (none: the neutral `{}`). */
    answerHook(requestId: string, output?: Record<string, unknown>): Promise<void>;
    configure(option: string, value: string | boolean): Promise<void>;
    cancel(options?: CancelOptions): Promise<void>;
    rollback(turns: number, scope?: "Conversation" | "ConversationAndFiles"): Promise<void>;
    dequeue(promptId: string): Promise<void>;
    compact(): Promise<void>;
    /** Ask the sidecar for the session's info now (it is kept live anyway). */
    refresh(): Promise<SessionInfo>;
    /** Close the session; idempotent (a closed session, or one whose sidecar is gone, is no error). */
    close(): Promise<void>;
}
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
/** One sidecar process and its sessions. */
export declare class Runtime {
    #private;
    /** The sidecar's hello (`protocol`, `agentproto`, `anyagent`). */
    hello: Hello;
    /** Resolves with the exit code when the sidecar is gone (null: ended by a signal). */
    readonly exited: Promise<number | null>;
    private constructor();
    /** The sidecar's process id. */
    get pid(): number | undefined;
    /** The sidecar's child process (for its pid, or to write a raw line in a test). */
    get process(): ChildProcess;
    /** Spawn `BIN serve [--mock SCRIPT] [ARGS]` and check its hello. */
    static start(options?: StartOptions): Promise<Runtime>;
    /** Send any protocol 1 command (`cmd` and its fields) and wait for its `ok`. */
    request(cmd: string, fields?: Record<string, unknown>, onOk?: (value: unknown) => unknown): Promise<unknown>;
    discover(): Promise<DiscoveryReport>;
    probe(agent: AgentRef, options?: ProbeOptions): Promise<AgentDetails>;
    planUsage(agent: AgentRef, options?: PlanUsageOptions): Promise<PlanUsage>;
    /** Every discovered agent, in discover's order: its `plan_usage`, or the `error` saying why it has none. */
    planUsageAll(options?: PlanUsageAllOptions): Promise<AgentPlanUsage[]>;
    /** One throwaway turn, tools refused: the answer's text. */
    generate(agent: AgentRef, options: GenerateOptions, prompt: string): Promise<string>;
    /** Open a session (`dir` defaults to the current directory); `tools` are the app's own. */
    open(agent: AgentRef, options?: OpenOptions): Promise<Session>;
    /** Close stdin, wait up to `timeoutMs` for the sidecar to exit, then kill it. Idempotent:
     * resolves with the exit code (null: killed by a signal). */
    close(timeoutMs?: number): Promise<number | null>;
}
