#!/usr/bin/env python3
"""Regenerate agentproto/schema_ops.json (the ops framing's requests and lines), then schema.json.

The ops requests are derived from protocol 1's ``Frame`` variants (``op`` in place of
``cmd``, no ``id``, ``session`` optional since a default session may stand in), so the two
framings cannot drift apart; only what is new to the ops framing is written out here:
the ``capabilities``/``explain``/``halt`` requests, the ``kind`` lines and the per-op
result payloads. MCP tool input schemas are derived from these requests at run time.

    python scripts/gen_schema_ops.py          # rewrite schema_ops.json and schema.json
    python scripts/gen_schema_ops.py --check  # exit 1 if either committed file is stale
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

import gen_schema  # noqa: E402

from agentproto.frontends.ops_framing import OPERATIONS  # noqa: E402

TARGET = ROOT / "agentproto" / "schema_ops.json"

DESCRIPTIONS = {
    "capabilities": "The contract, protocol, version, operations, agents and transports this server offers. Check it before using an op.",
    "discover": "Which agents are installed (with their versions) and how to install the missing ones.",
    "probe": "Start an agent just long enough to report its details (auth, features, config options, commands).",
    "plan_usage": "The agent account's plan usage windows, when the agent reports them.",
    "plan_usage_all": "One call for a usage page: every discovered agent with its plan usage, or the typed reason "
    "it has none (one row each, in discover's order; the agents are asked concurrently).",
    "generate": "One throwaway turn with tools refused: send `prompt`, get the answer's `text` (optionally checked against `output_schema`).",
    "open": "Open a session with an agent in `dir`; it becomes the default session of this connection.",
    "prompt": "Send a prompt and stream the turn until it ends (`stop`) or the agent waits for an answer (`waiting`).",
    "dequeue": "Withdraw a queued prompt.",
    "answer": "Answer the agent's open request (permission or question), then stream the turn on like `prompt`.",
    "configure": "Change a live config option of the session (see its details.config_options).",
    "rollback": "Undo the last `turns` turns of the conversation (and files, when supported).",
    "compact": "Ask the agent to compact its context.",
    "cancel": "Cancel the running turn (and the queued prompts with clear_queue).",
    "info": "The session's SessionInfo.",
    "close": "Close the session.",
    "explain": "Long-form help for an error kind (`code`): what it means and what to do.",
    "inspect": "A sidecar's live sessions (`view` agents, this process or the control socket `sock`), or what "
    "turns cost (`view` cost, from the observations database), also streamed as `log` lines in `format`.",
    "halt": "End the interactive loop.",
}

#: The payload of each op's successful result (besides kind, op, ok).
_SESSION_ID = {"session_id": {"type": "string"}}
_TURN_OUTCOME = {
    "session_id": {"type": "string"},
    "prompt_id": {"type": "string"},
    "turn_id": {"type": "string"},
    "stop": {"$ref": "#/definitions/StopReason"},
    "usage": {"anyOf": [{"$ref": "#/definitions/TurnUsage"}, {"type": "null"}]},
    "waiting": {"$ref": "#/definitions/Request"},
}
SUCCESS: dict[str, tuple[dict, list[str]]] = {
    "capabilities": ({"$ref": "#/definitions/OpsCapabilities"}, []),
    "discover": ({"discovery": {"$ref": "#/definitions/DiscoveryReport"}}, ["discovery"]),
    "probe": ({"details": {"$ref": "#/definitions/AgentDetails"}}, ["details"]),
    "plan_usage": ({"plan_usage": {"$ref": "#/definitions/PlanUsage"}}, ["plan_usage"]),
    "plan_usage_all": ({"plan_usage_all": {"type": "array", "items": {"$ref": "#/definitions/AgentPlanUsage"}}}, ["plan_usage_all"]),
    "generate": ({"text": {"type": "string"}}, ["text"]),
    "open": ({"session": {"$ref": "#/definitions/SessionInfo"}}, ["session"]),
    "prompt": (_TURN_OUTCOME, ["session_id", "prompt_id"]),
    "answer": (_TURN_OUTCOME, ["session_id"]),
    "info": ({"session": {"$ref": "#/definitions/SessionInfo"}}, ["session"]),
    "explain": ({"code": {"type": "string"}, "text": {"type": "string"}}, ["code", "text"]),
    "inspect": ({"$ref": "#/definitions/InspectView"}, []),
    "halt": ({}, []),
}
for _name in ("dequeue", "configure", "rollback", "compact", "cancel", "close"):
    SUCCESS[_name] = (_SESSION_ID, ["session_id"])


INSPECT_KEYS = {
    "view": {"description": "agents (default): the live sessions; cost: the observations database.", "type": "string", "enum": ["agents", "cost"]},
    "sock": {"description": "agents: a running sidecar's control socket (serve --control PATH); default: this process.", "type": "string"},
    "agent": {"description": "agents: one session's full snapshot (its id).", "type": ["string", "integer"]},
    "since": {"description": "cost: the window, a span back from now (30m, 24h, 7d) or an ISO date; default 24h.", "type": "string"},
    "by": {"description": "cost: group by agent (default), model, day, session or db.", "type": "string", "enum": ["agent", "model", "day", "session", "db", "provider"]},
    "top": {"description": "cost: also list the N most expensive turns.", "type": "integer", "minimum": 0},
    "db": {"description": "cost: the observations database, or a list of them (their rows united); default: this server's (AGENTPROTO_DB, the XDG state dir).",
           "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]},
    "format": {"description": "How the log lines render the view: json (default) or table (80 columns).", "type": "string", "enum": ["json", "table"]},
}
_TOKENS = {
    "type": "object",
    "properties": {k: {"type": "integer", "minimum": 0} for k in ("input", "output", "cached_input")},
    "required": ["input", "output", "cached_input"],
}
_SESSION_ROW = {
    "description": "One live session.",
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "agent": {"type": "string"},
        "model": {"type": ["string", "null"]},
        "status": {"type": "string"},
        "turns": {"type": "integer", "minimum": 0},
        "tokens": _TOKENS,
        "cost_usd": {"description": "The agent's running total, when it reports one.", "type": ["number", "null"]},
        "open_requests": {"type": "integer", "minimum": 0},
        "age_s": {"type": "number", "minimum": 0},
        "pid": {"description": "The agent's process (and group) id; null when no process carries it.", "type": ["integer", "null"]},
        "info": {"$ref": "#/definitions/SessionInfo"},
    },
    "required": ["id", "agent", "model", "status", "turns", "tokens", "cost_usd", "open_requests", "age_s", "pid"],
}
_FIGURES = {
    "turns": {"type": "integer", "minimum": 0},
    "input_tokens": {"type": "integer", "minimum": 0},
    "output_tokens": {"type": "integer", "minimum": 0},
    "cached_input_tokens": {"type": "integer", "minimum": 0},
    "cost_usd": {"description": "null: no turn in it reported a cost.", "type": ["number", "null"]},
    "duration_ms": {"type": "integer", "minimum": 0},
}
_TURN_ROW = {
    "description": "One ended turn (a row of the observations database; never prompt or output text).",
    "type": "object",
    "properties": {
        "ended_at": {"type": "string", "description": "ISO 8601, UTC."},
        "agent": {"type": "string"},
        "model": {"type": ["string", "null"]},
        "run": {"type": "string", "description": "The sidecar process that ran it."},
        "session": {"type": "string"},
        "turn": {"type": "string"},
        **{k: v for k, v in _FIGURES.items() if k != "turns"},
        "stop": {"type": "string", "description": "The StopReason's name."},
        "db": {"type": "string", "description": "The database it was read from."},
    },
    "required": ["ended_at", "agent", "model", "run", "session", "turn", "input_tokens", "output_tokens",
                 "cached_input_tokens", "cost_usd", "duration_ms", "stop"],
}
INSPECT_DEFINITIONS = {
    "InspectView": {"description": "What `inspect` answers (its result's members).", "oneOf": [
        {"$ref": "#/definitions/InspectAgents"}, {"$ref": "#/definitions/InspectCost"}]},
    "InspectAgents": {
        "description": "view agents: the live sessions (`agents`), or one (`agent`, with its SessionInfo).",
        "type": "object",
        "properties": {
            "view": {"type": "string", "const": "agents"},
            "pid": {"type": "integer", "description": "The sidecar's process id."},
            "agents": {"type": "array", "items": _SESSION_ROW},
            "agent": _SESSION_ROW,
            "started_at": {"type": "string", "description": "When the sidecar started (ISO 8601, UTC); in an "
                           "answer through its control socket."},
            "command": {"type": "string", "description": "What the sidecar runs (`serve`, `serve --transport mcp`, "
                        "`agent`); in an answer through its control socket."},
        },
        "required": ["view", "pid"],
    },
    "InspectCost": {
        "description": "view cost: the ended turns since `since`, grouped `by`, with totals (and `top`).",
        "type": "object",
        "properties": {
            "view": {"type": "string", "const": "cost"},
            "db": {"type": "string", "description": "The (first) database read."},
            "dbs": {"type": "array", "items": {"type": "string"}, "description": "Every database read, in order."},
            "since": {"type": "string", "description": "ISO 8601, UTC."},
            "by": {"type": "string", "enum": ["agent", "model", "day", "session", "db"]},
            "groups": {"type": "array", "items": {"type": "object", "properties": {"key": {"type": "string"}, **_FIGURES},
                                                  "required": ["key", *_FIGURES]}},
            "total": {"type": "object", "properties": _FIGURES, "required": list(_FIGURES)},
            "top": {"type": "array", "items": _TURN_ROW},
        },
        "required": ["view", "db", "since", "by", "groups", "total"],
    },
}


def _line(kind: str, props: dict, required: list[str], description: str) -> dict:
    return {
        "description": description,
        "type": "object",
        "properties": {"kind": {"type": "string", "const": kind}, **props},
        "required": ["kind", *required],
    }


def requests(frame: dict) -> list[dict]:
    variants = {v["properties"]["cmd"]["const"]: v for v in frame["oneOf"]}
    out = []
    for op in OPERATIONS:
        if op in variants:
            variant = copy.deepcopy(variants[op])
            props = variant["properties"]
            del props["cmd"]
            required = [r for r in variant.get("required", []) if r not in ("cmd", "id")]
            if "session" in props:
                props["session"] = {
                    "description": "The session id; default: the session the last `open` of this connection opened.",
                    "type": "string",
                }
                required.remove("session")
        elif op == "explain":
            props = {"code": {"description": "An error kind, e.g. NotInstalled.", "type": "string"}}
            required = ["code"]
        elif op == "inspect":
            props, required = copy.deepcopy(INSPECT_KEYS), []
        else:
            props, required = {}, []
        out.append(
            {
                "title": op,
                "description": DESCRIPTIONS[op],
                "type": "object",
                "properties": {"op": {"type": "string", "const": op}, **props},
                "required": ["op", *required],
            }
        )
    return out


def results() -> list[dict]:
    variants = []
    for op in OPERATIONS:
        payload, required = SUCCESS[op]
        variant = {
            "title": f"{op} ok",
            "type": "object",
            "properties": {
                "kind": {"type": "string", "const": "result"},
                "op": {"type": "string", "const": op},
                "ok": {"type": "boolean", "const": True},
            },
            "required": ["kind", "op", "ok", *required],
        }
        if "$ref" in payload:
            variant["allOf"] = [payload]
        else:
            variant["properties"].update(payload)
        if op in ("prompt", "answer"):
            variant["anyOf"] = [{"required": ["stop"]}, {"required": ["waiting"]}]
        if op == "answer":
            # The answer to a tool call or hook outside any turn: no turn to stream, no turn_id.
            variant["anyOf"].append({"not": {"required": ["turn_id"]}})
        variants.append(variant)
    variants.append(
        {
            "title": "refused",
            "description": "A command that failed (done 1): the ErrorBody, and for turns the stop.",
            "type": "object",
            "properties": {
                "kind": {"type": "string", "const": "result"},
                "op": {"type": "string", "enum": list(OPERATIONS)},
                "ok": {"type": "boolean", "const": False},
                "error": {"$ref": "#/definitions/ErrorBody"},
                **{k: v for k, v in _TURN_OUTCOME.items() if k != "waiting"},
            },
            "required": ["kind", "op", "ok", "error"],
        }
    )
    return variants


def build_extra(frame: dict) -> dict:
    definitions = {
        **INSPECT_DEFINITIONS,
        "OpsRequest": {
            "description": "One ops request: `op` and the protocol 1 command's fields (no `id`). Unknown keys are ignored.",
            "oneOf": requests(frame),
        },
        "OpsLine": {
            "description": "One line answering an ops request. Clients must ignore unknown kinds; `done` is always last.",
            "oneOf": [
                {"$ref": "#/definitions/OpsEventLine"},
                {"$ref": "#/definitions/OpsLog"},
                {"$ref": "#/definitions/OpsProgress"},
                {"$ref": "#/definitions/OpsResult"},
                {"$ref": "#/definitions/OpsError"},
                {"$ref": "#/definitions/OpsDone"},
            ],
        },
        "OpsEventLine": _line("event", {"event": {"$ref": "#/definitions/Event"}}, ["event"], "One session event."),
        "OpsLog": _line(
            "log",
            {"stream": {"type": "string"}, "text": {"type": "string"}},
            ["stream", "text"],
            "One line of diagnostic text (a session's failure, for example).",
        ),
        "OpsProgress": _line(
            "progress",
            {"phase": {"type": "string"}, "pct": {"type": "number", "minimum": 0, "maximum": 1}},
            ["phase"],
            "Optional progress; clients may ignore it.",
        ),
        "OpsResult": {
            "description": "The request's outcome: `ok` and the op's payload, or `ok: false` and `error`.",
            "oneOf": results(),
        },
        "OpsError": _line(
            "error",
            {"message": {"type": "string"}},
            ["message"],
            'A protocol error (done 2): "malformed JSON: …", "unknown op: X", "missing required `FIELD`", "invalid `FIELD`: …".',
        ),
        "OpsDone": _line(
            "done",
            {"exit_code": {"type": "integer", "enum": [0, 1, 2]}},
            ["exit_code"],
            "Always last: 0 success, 1 the command failed, 2 protocol error.",
        ),
        "OpsCapabilities": {
            "description": "The negotiation step: what this server offers.",
            "type": "object",
            "properties": {
                "contract": {"type": "string", "description": "agentproto/1"},
                "protocol": {"type": "integer"},
                "agentproto": {"type": "string"},
                "operations": {"type": "array", "items": {"type": "string"}},
                "agents": {"type": "array", "items": {"type": "string"}},
                "transports": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["contract", "protocol", "agentproto", "operations", "agents", "transports"],
        },
        "OpsVersion": {
            "description": "GET /v1/agent/version.",
            "type": "object",
            "properties": {
                "agentproto": {"type": "string"},
                "protocol": {"type": "integer"},
                "contract": {"type": "string"},
            },
            "required": ["agentproto", "protocol", "contract"],
        },
    }
    return {
        "definitions": definitions,
        "properties": {
            "ops_request": {"$ref": "#/definitions/OpsRequest"},
            "ops_line": {"$ref": "#/definitions/OpsLine"},
            "ops_version": {"$ref": "#/definitions/OpsVersion"},
        },
    }


def render() -> str:
    # The Frame is the reference's plus gen_schema's edits; schema_ops.json never touches it.
    frame = gen_schema.build()["definitions"]["Frame"]
    return json.dumps(build_extra(frame), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print("agentproto/schema_ops.json is stale: run python scripts/gen_schema_ops.py", file=sys.stderr)
            return 1
        return gen_schema.main()
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return gen_schema.main()


if __name__ == "__main__":
    sys.exit(main())
