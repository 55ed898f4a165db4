"""Long-form help for every error kind: what it means and what to do (the `explain` op).

The keys are ``errors.ERROR_KINDS`` exactly (a test checks it), so a new error kind
cannot ship without its explanation.
"""

from __future__ import annotations

from agentproto.core.errors import Kind

EXPLANATIONS: dict[str, str] = {
    Kind.NOT_INSTALLED: (
        "The agent's executable was not found. agentproto looks, in order, at the "
        "AGENTPROTO_<ID>_BIN variable, PATH, the agent's known install locations and the npm "
        "global prefix. The error's `agent` field names the agent. What to do: install it "
        "(run `discover`: each missing agent carries an install hint), or pass the agent as "
        '{"id": ID, "path": PATH} to use an executable at an exact path.'
    ),
    Kind.SPAWN_FAILED: (
        "The agent's executable was found but could not be started, or it exited during "
        "start-up before it finished its handshake. `detail` says why (permission denied, "
        "a missing interpreter, a crash on start). What to do: run the executable by hand "
        "with --version to see its own error; check `env`, `args` and `config_home`."
    ),
    Kind.AUTH_REQUIRED: (
        "The agent is installed but not logged in, so it cannot take a turn. `login` lists "
        "the ways to log in (a command to run, an environment variable to set). What to do: "
        "follow one of them outside agentproto, then open the session again."
    ),
    Kind.HANDSHAKE_TIMEOUT: (
        "The agent started but did not finish its handshake in time (it printed nothing "
        "agentproto understands). Usually an agent version agentproto does not know, or an "
        "agent waiting for input on a terminal (a first-run prompt, an update question). "
        "What to do: run the agent once by hand, check its version against `discover`, retry."
    ),
    Kind.UNSUPPORTED_FEATURE: (
        "The command needs a feature this agent (or this agent version) does not offer: "
        "rollback, compact, file rollback, plan usage, or tool refusal for `generate`. The "
        "session's `details.capabilities.features` lists what it offers. What to do: check "
        "the features before sending the command; nothing was changed."
    ),
    Kind.INVALID_CONFIGURATION: (
        "A launch option or a `configure` value was refused: an option the agent does not "
        "offer, a value outside its choices, an option that cannot change during a session, "
        "a `dir` that is not a directory, or `resume`/`fork` given to probe or plan_usage. "
        "`detail` names the option. What to do: read `details.config_options` (probe the "
        "agent) and send a value it lists."
    ),
    Kind.INVALID_REQUEST: (
        "The command was well formed but does not fit the session's state: an answer to a "
        "request that is not open (already answered, cancelled, or of another turn), an "
        "answer that picks a choice the request did not offer, or a prompt id that is not "
        "queued. `detail` says which. What to do: re-read the session's events; answer only "
        "the open request with one of its options."
    ),
    Kind.RESUME_FAILED: (
        "`resume` or `fork` named a conversation the agent could not load (unknown token, "
        "deleted history, another directory). What to do: open without resume to start a "
        "fresh conversation, or use the `resume_token` from a SessionInfo of this agent."
    ),
    Kind.SESSION_BUSY: (
        "The command needs an idle session (rollback, compact) but a turn is running or "
        "prompts are queued. What to do: wait for the turn to end (or cancel it with "
        "clear_queue), then retry."
    ),
    Kind.PROTOCOL_FAILED: (
        "The agent broke its own protocol, or a throwaway run (generate) did not produce an "
        "answer: the agent sent a message agentproto cannot use, refused the handshake, used "
        "a tool or asked a question during generate, the answer did not match "
        "`output_schema`, or the turn failed. `detail` says which, and `line` quotes the "
        "start of the agent's offending line when one line caused it. What to do: read the "
        "detail; for generate, retry or loosen the schema; a session closed by this error "
        "must be opened again."
    ),
    Kind.PROCESS_EXITED: (
        "The agent's process exited while the session was open. `status` is its exit status "
        "(or signal) and `stderr` the tail of what it printed. The running turn ended Failed "
        "and the session is closed. What to do: read `stderr` (an expired login, a crash, "
        "an out-of-memory kill), then open a new session, with `resume` to continue."
    ),
    Kind.SESSION_CLOSED: (
        "The session named by the command is closed: closed by the app, failed, or ended "
        "when its connection ended. Nothing more can be sent to it. What to do: open a new "
        "session (with `resume` and the old resume_token to keep the conversation)."
    ),
    Kind.BAD_FRAME: (
        "A protocol 1 line that is not a valid command: not JSON, not an object, no `id` or "
        "`cmd`, an unknown command, a missing or mistyped field, or a line over the size "
        "limit. The message names the field and the expected type; `id` is echoed when it "
        "could be read. Nothing was run. What to do: fix the frame and send it again."
    ),
    Kind.UNKNOWN_SESSION: (
        "The command names a session this connection never opened (a typo, a session of "
        "another connection, or of a previous sidecar process). `session` echoes the id. "
        "What to do: use the `id` from the SessionInfo that `open` returned on this "
        "connection."
    ),
    Kind.BUDGET_EXCEEDED: (
        "A bound of the session's `budget` (usd, input_tokens, output_tokens, turns, wall_s) "
        "was reached. The running turn that crossed it was cancelled and ended Failed; the "
        "message names the bound, the amount spent and the overshoot. The numbers come from "
        "the agent's own usage reports (cost: its own figure, or tokens times agentproto's "
        "price table). What to do: `configure` the option `budget` (a JSON string) with a "
        "higher bound to go on, or close the session."
    ),
    Kind.CONSUMER_LAGGED: (
        "The app stopped reading: none of the session's events could be written for the "
        "stall timeout (`serve --stall-timeout`, 60 s by default) while the agent kept "
        "producing, so agentproto closed that session rather than buffer without bound. "
        "Other sessions go on. What to do: read every line the sidecar writes, promptly "
        "(a reader thread, or a loop that never blocks elsewhere); then open the session "
        "again, with `resume` to continue the conversation."
    ),
    Kind.INTERNAL: (
        "A bug in agentproto: a command or a session hit an error agentproto did not "
        "expect. The message names the command and the exception; the full traceback is on "
        "the sidecar's stderr. Only that command failed; the sidecar and its other sessions "
        "go on. What to do: retry; if it happens again, report it with the stderr "
        "traceback and the command that caused it."
    ),
}


def explain(code: str) -> str | None:
    """The explanation of an error kind (case-insensitive), or None."""
    text = EXPLANATIONS.get(code)
    if text is None:
        for kind, value in EXPLANATIONS.items():
            if kind.lower() == code.lower():
                return value
    return text


def canonical(code: str) -> str | None:
    for kind in EXPLANATIONS:
        if kind.lower() == code.lower():
            return kind
    return None
