#!/usr/bin/env python3
"""Regenerate agentproto/schema.json from anyagent's reference schema plus our additions.

agentproto's schema must accept every shape of the reference (fixtures/anyagent-schema.json)
and add only optional members, new variants and new entry points. This script makes that
rule mechanical: it starts from the reference and applies the additive edits below.
tests/test_schema.py checks that the committed file is what this script produces.

    python scripts/gen_schema.py          # rewrite agentproto/schema.json (and docs/protocol.md)
    python scripts/gen_schema.py --check  # exit 1 if the committed file is stale
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentproto.core.errors import ERROR_KINDS, LINE_EXCERPT  # noqa: E402
from agentproto.core.explain import EXPLANATIONS  # noqa: E402

REFERENCE = ROOT / "fixtures" / "anyagent-schema.json"
TARGET = ROOT / "agentproto" / "schema.json"
EXTRA = ROOT / "agentproto" / "schema_ops.json"


def _variant(name: str, props: dict, required: list[str], description: str) -> dict:
    return {
        "description": description,
        "type": "object",
        "properties": {name: {"type": "object", "properties": props, "required": required}},
        "required": [name],
        "additionalProperties": False,
    }


def build() -> dict:
    ref = json.loads(REFERENCE.read_text(encoding="utf-8"))
    schema = copy.deepcopy(ref)
    schema["title"] = "agentproto"
    schema["description"] = (
        "Every line agentproto reads and writes. Derived from anyagent's protocol 1 reference "
        "schema by additive edits only (scripts/gen_schema.py)."
    )
    d = schema["definitions"]

    # Hello: agentproto names itself; `anyagent` stays for anyagent's clients.
    d["Hello"]["properties"]["agentproto"] = {"type": "string", "description": "agentproto's version."}

    # Line: the envelopes say exactly what they hold, so generated types can tell the lines
    # apart. The reference leaves each envelope open and its `error` untyped, so that
    # json-schema-to-typescript gives every variant an index signature (`"event" in line`
    # narrows nothing, `line.event` is `unknown`) and `error: unknown`. Closing the
    # envelopes and typing `error` as ErrorBody only narrows what the schema says about
    # lines agentproto writes (every line the suite reads still validates against both
    # schemas); the payloads inside (Hello, Event, ErrorBody, ...) stay open to additions.
    titles = {
        ("hello",): "HelloLine",
        ("id", "ok"): "ReplyLine",
        ("id", "error"): "ErrorReplyLine",
        ("event",): "EventLine",
        ("session", "error"): "SessionErrorLine",
        ("closed",): "ClosedLine",
    }
    for variant in d["Line"]["anyOf"]:
        props = variant["properties"]
        variant["title"] = titles[tuple(props)]
        variant["additionalProperties"] = False
        if "error" in props:
            props["error"] = {"$ref": "#/definitions/ErrorBody"}

    # ErrorKind: the error kinds, named and explained (what it means, before "What to do"),
    # for docs and generated types. ErrorBody.kind stays an open string (below): a reader
    # must accept a kind it does not know yet.
    d["ErrorKind"] = {
        "description": "The `kind` of an ErrorBody. Readers must accept kinds they do not know.",
        "anyOf": [{"const": k, "description": EXPLANATIONS[k].split(" What to do:")[0]} for k in ERROR_KINDS],
    }
    schema["properties"]["error_kind"] = {"$ref": "#/definitions/ErrorKind"}

    # Frame: output_schema on every command that takes the session options.
    for variant in d["Frame"]["oneOf"]:
        props = variant["properties"]
        if "agent" in props:
            props["output_schema"] = {
                "description": "generate: a JSON Schema the answer must validate against (checked for every "
                "agent). open, generate, probe: an agent that honours it natively constrains every turn to it and "
                "lists OutputSchema (Codex); the others ignore it on open.",
                "type": ["object", "boolean", "null"],
            }

    # Frame: notes and reminder beside instructions, on every command that takes the session
    # options (a driver that cannot honour one refuses it: UnsupportedFeature).
    for variant in d["Frame"]["oneOf"]:
        props = variant["properties"]
        if "agent" in props:
            props["notes"] = {
                "description": "Notes kept beside the instructions for the whole session (agy: an always-on "
                "rules file). Agents that cannot take them refuse them (UnsupportedFeature).",
                "type": ["string", "null"],
            }
            props["reminder"] = {
                "description": "Text that starts every user message, inside <system-reminder> tags (agy). "
                "Agents that cannot take it refuse it (UnsupportedFeature).",
                "type": ["string", "null"],
            }

    # Answer: deny with a reason, and withdraw.
    d["Answer"]["oneOf"] += [
        {
            "description": "Deny once, telling the agent why.",
            "type": "object",
            "properties": {
                "Deny": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}
            },
            "required": ["Deny"],
            "additionalProperties": False,
        },
        {"description": "Withdraw the request.", "type": "string", "const": "Cancel"},
    ]

    # Newer event kinds (additive variants).
    d["EventKind"]["oneOf"] += [
        _variant(
            "ToolProgress",
            {
                "tool_id": {"type": "string"},
                "message": {"type": "string"},
                "elapsed_ms": {"type": ["integer", "null"], "minimum": 0},
            },
            ["tool_id", "message"],
            "Progress of a running tool.",
        ),
        _variant(
            "TurnDiff",
            {"unified": {"type": "string"}},
            ["unified"],
            "The turn's cumulative file changes as a unified diff.",
        ),
        _variant(
            "ModelRerouted",
            {"from": {"type": "string"}, "to": {"type": "string"}, "reason": {"type": ["string", "null"]}},
            ["from", "to"],
            "The provider served the turn with another model.",
        ),
    ]

    # ToolUpdate: subagent facts.
    d["ToolUpdate"]["properties"]["subagent"] = {
        "description": "For Subagent tools: who runs it and how far it got.",
        "type": ["object", "null"],
        "properties": {
            "role": {"type": ["string", "null"]},
            "model": {"type": ["string", "null"]},
            "summary": {"type": ["string", "null"]},
            "tokens": {"type": ["integer", "null"], "minimum": 0},
        },
    }

    # ErrorBody: the kinds agentproto sends, documented (`kind` stays any string, as in the
    # reference: Internal and ConsumerLagged are additive), and ProtocolFailed's `line`.
    body = d["ErrorBody"]["properties"]
    body["kind"]["description"] = (
        "The error's kind; agentproto sends these (agentproto/core/errors.py): " + ", ".join(ERROR_KINDS) + "."
    )
    body["kind"]["examples"] = list(ERROR_KINDS)
    body["line"] = {
        "description": (
            f"ProtocolFailed: the agent line that caused it, cut after {LINE_EXCERPT} characters "
            "(then the line's length follows)."
        ),
        "type": "string",
    }

    # The app's own tools and hooks (issue 10): declared at open/generate, served to the
    # agent as the MCP server `agentproto` on the loopback listener, each call and hook
    # invocation a request the app answers.
    _tools_and_hooks(d)
    _guard_rails(d)

    # AgentInstallation: the version `discover` read from the executable.
    d["AgentInstallation"]["properties"]["version"] = {
        "description": "The version number the executable's --version printed (`2.1.332` of `2.1.332 (Claude Code)`; the first line as printed when it holds no number), when it could be read.",
        "type": ["string", "null"],
    }

    _plan_usage_all(schema)

    # Capability: OutputSchema, from anyagent's HEAD (agentproto's reading of its docs; the
    # HEAD schema could not be fetched). Listed only when the command carried an output_schema
    # that the agent honours natively (Codex), so anyagent's clients, which never send one,
    # never read it; anyagent-py 0.0.4 parses it all the same (tests/test_anyagent_compat.py).
    d["Capability"]["oneOf"].append(
        {
            "description": "The session's agent honours the `output_schema` its open, generate or probe "
            "carried: it constrains every turn's answer natively (Codex). Listed only then. `generate` "
            "also checks the answer against it, for every agent.",
            "type": "string",
            "const": "OutputSchema",
        }
    )

    # Entry points and types of the other framings (ops, JSON-RPC, MCP), when present.
    if EXTRA.exists():
        extra = json.loads(EXTRA.read_text(encoding="utf-8"))
        for name, definition in extra.get("definitions", {}).items():
            if name in d:
                raise SystemExit(f"schema_ops.json redefines {name}")
            d[name] = definition
        for name, prop in extra.get("properties", {}).items():
            schema["properties"][name] = prop
    return schema


def _plan_usage_all(schema: dict) -> None:
    """anyagent HEAD's `plan_usage_all`, as agentproto reads its Rust API (the HEAD schema could
    not be fetched, so the wire shape may differ from anyagent's): one row per discovered agent."""
    from agentproto.engine.oneshots import PLAN_USAGE_TIMEOUT

    d = schema["definitions"]
    variant = {
        "type": "object",
        "properties": {
            "cmd": {"type": "string", "const": "plan_usage_all"},
            "dir": {"description": "Where each agent is asked from. Default: the temp dir.", "type": ["string", "null"]},
            "agent_timeout": {
                "description": f"Seconds each agent has to answer (default {PLAN_USAGE_TIMEOUT:g}); "
                "a later one's row is HandshakeTimeout.",
                "type": ["number", "null"],
                "exclusiveMinimum": 0,
            },
        },
        "required": ["cmd"],
    }
    variants = d["Frame"]["oneOf"]
    after = next(i for i, v in enumerate(variants) if v["properties"]["cmd"].get("const") == "plan_usage")
    variants.insert(after + 1, variant)
    d["AgentPlanUsage"] = {
        "description": "One row of `plan_usage_all`: a discovered agent, and either its `plan_usage` or the "
        "`error` of why it has none (UnsupportedFeature: the agent reports no plan usage).",
        "type": "object",
        "properties": {
            "agent": {"$ref": "#/definitions/AgentInstallation"},
            "plan_usage": {"$ref": "#/definitions/PlanUsage"},
            "error": {"$ref": "#/definitions/ErrorBody"},
        },
        "required": ["agent"],
    }
    schema["properties"]["plan_usage_all"] = {
        "description": "What `plan_usage_all` answers: one row per discovered agent, in discover's order.",
        "type": "array",
        "items": {"$ref": "#/definitions/AgentPlanUsage"},
    }


def _tools_and_hooks(d: dict) -> None:
    from agentproto.tools.apptools import HOOK_TIMEOUT, TOOL_TIMEOUT

    name = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}
    d["AppTool"] = {
        "description": "One of the app's own tools, offered to the agent as `agentproto`'s MCP tool `name`.",
        "type": "object",
        "properties": {
            "name": {**name, "description": "Unique in the session."},
            "description": {"type": "string"},
            "input_schema": {
                "description": 'A JSON Schema of the arguments (an object); default {"type": "object"}.',
                "type": ["object", "null"],
            },
            "output_schema": {
                "description": "A JSON Schema of the result's `structured` object; a result that breaks it is refused.",
                "type": ["object", "null"],
            },
        },
        "required": ["name", "description"],
        "additionalProperties": False,
    }
    options = {
        "tools": {
            "description": "The app's own tools: each call is a ToolCall request. Bad entries are InvalidConfiguration.",
            "type": ["array", "null"],
            "items": {"$ref": "#/definitions/AppTool"},
        },
        "tool_timeout": {
            "description": f"Seconds a ToolCall waits for its answer (default {TOOL_TIMEOUT:g}); then the agent gets a timed-out error.",
            "type": ["number", "null"],
            "exclusiveMinimum": 0,
        },
        "hooks": {
            "description": "The hook events the app answers (Hook requests); an agent without them is UnsupportedFeature.",
            "type": ["array", "null"],
            "items": name,
        },
        "hook_timeout": {
            "description": f"Seconds a Hook waits for its answer (default {HOOK_TIMEOUT:g}); then the agent gets {{}}.",
            "type": ["number", "null"],
            "exclusiveMinimum": 0,
        },
    }
    for variant in d["Frame"]["oneOf"]:
        if variant["properties"]["cmd"].get("const") in ("open", "generate"):
            variant["properties"].update(copy.deepcopy(options))
    d["ToolContent"] = {
        "description": "One content item of a tool result (MCP's text and image content).",
        "oneOf": [
            {
                "type": "object",
                "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
                "required": ["type", "text"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {
                    "type": {"const": "image"},
                    "data": {"description": "Base64.", "type": "string"},
                    "mime_type": {"type": "string"},
                },
                "required": ["type", "data", "mime_type"],
                "additionalProperties": False,
            },
        ],
    }
    d["Answer"]["oneOf"] += [
        _variant(
            "ToolResult",
            {
                "content": {"type": "array", "items": {"$ref": "#/definitions/ToolContent"}},
                "is_error": {"description": "Left out: false.", "type": "boolean"},
                "structured": {"description": "Required by a tool with an output_schema (unless is_error).", "type": ["object", "null"]},
            },
            ["content"],
            "The result of a ToolCall. Deny gives the agent an error result with its message, Cancel one saying cancelled.",
        ),
        _variant("HookResult", {}, [], "The hook's output, passed to the agent as it is. Cancel gives it the neutral {}."),
    ]
    d["Request"]["oneOf"] += [
        _variant(
            "ToolCall",
            {"id": {"type": "string"}, "tool": {"type": "string"}, "arguments": {"type": "object"}},
            ["id", "tool", "arguments"],
            "The agent called one of the app's tools. RequestClosed follows exactly once: on the answer, the "
            "turn's end or cancel, the session's close, or tool_timeout (the agent then gets an error result).",
        ),
        _variant(
            "Hook",
            {"id": {"type": "string"}, "event": {"type": "string"}, "input": {"description": "The hook's input, as the agent gave it."}},
            ["id", "event", "input"],
            "The agent invoked one of the app's hooks (outside a turn: turn_info null, at the session's level).",
        ),
    ]
    d["SessionInfo"]["properties"]["tools_url"] = {
        "description": (
            "The session's MCP endpoint of the app's tools (http://127.0.0.1:PORT/TOKEN/mcp/agentproto), "
            "or null without tools. It holds the session's secret token."
        ),
        "type": ["string", "null"],
    }
    d["SessionInfo"]["properties"]["hook_urls"] = {
        "description": (
            "With `hooks` (with or without tools): each hook event's URL on the loopback listener "
            "(http://127.0.0.1:PORT/TOKEN/hook/EVENT), where a hook command POSTs its input and reads its output. "
            "They hold the session's secret token."
        ),
        "type": "object",
        "additionalProperties": {"type": "string"},
    }
    d["Capability"]["oneOf"] += [
        {"description": "The session serves the app's tools to its agent.", "type": "string", "const": "Tools"},
        {"description": "The session asks the app its hooks.", "type": "string", "const": "Hooks"},
    ]


def _guard_rails(d: dict) -> None:
    """Issue 24: the permission policy, budgets and the rate-limit retry on open and generate,
    output_retries on generate, and what SessionInfo shows of them (all optional)."""
    from agentproto.core.policy import KINDS

    strings = {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}
    d["PolicyRule"] = {
        "description": "One rule of a permission policy: the first rule whose every given field matches a "
        "permission request decides; a field the request lacks does not match (docs/guard-rails.md).",
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["allow", "deny", "ask"]},
            "kind": {**strings, "description": "Tool kinds (Mcp: any MCP tool).", "items": {"type": "string", "enum": list(KINDS)}},
            "command": {**strings, "description": "Shell-word patterns over one simple command's argv (a last ** takes the rest)."},
            "path": {**strings, "description": "Globs over the targets' real paths relative to dir (* in a segment, ** across)."},
            "tool": {**strings, "description": "Globs over an MCP tool's server/tool."},
            "reason": {"type": "string", "description": "deny: what the agent is told."},
        },
        "required": ["action"],
        "additionalProperties": False,
    }
    number = {"type": "number", "exclusiveMinimum": 0}
    d["Budget"] = {
        "description": "Bounds on what a session spends, counted from the agent's own usage reports "
        "(usd: its cost, else tokens at the price table's); crossing one fails the turn (BudgetExceeded).",
        "type": "object",
        "properties": {
            "usd": number,
            "input_tokens": {"type": "integer", "minimum": 1},
            "output_tokens": {"type": "integer", "minimum": 1},
            "turns": {"type": "integer", "minimum": 1},
            "wall_s": {**number, "description": "The sum of turn times."},
        },
        "additionalProperties": False,
    }
    options = {
        "policy": {
            "description": "A permission policy: ordered rules answering permission requests before the "
            "permission mode and the app. Bad rules are InvalidConfiguration naming the rule and field.",
            "type": ["array", "null"],
            "items": {"$ref": "#/definitions/PolicyRule"},
        },
        "budget": {"description": "Bounds on the session's spending.", "anyOf": [{"$ref": "#/definitions/Budget"}, {"type": "null"}]},
        "retry": {
            "description": "Re-send a turn that failed on a rate limit before any tool call, once the limit resets within max_wait_s.",
            "type": ["object", "null"],
            "properties": {"max_wait_s": {**number, "maximum": 86400}},
            "required": ["max_wait_s"],
            "additionalProperties": False,
        },
    }
    for variant in d["Frame"]["oneOf"]:
        cmd = variant["properties"]["cmd"].get("const")
        if cmd in ("open", "generate"):
            variant["properties"].update(copy.deepcopy(options))
        if cmd == "generate":
            variant["properties"]["output_retries"] = {
                "description": "With output_schema: an answer that fails it is sent back with the errors named, up to N times.",
                "type": ["integer", "null"],
                "minimum": 0,
                "maximum": 100,
            }
    d["SessionInfo"]["properties"]["policy"] = {
        "description": "The permission policy in force (absent without one).",
        "type": "array",
        "items": {"$ref": "#/definitions/PolicyRule"},
    }
    d["SessionInfo"]["properties"]["budget"] = {
        "description": "With a budget: its bounds, what was spent, what is left, and the price table counted with.",
        "type": "object",
        "properties": {
            "limits": {"$ref": "#/definitions/Budget"},
            "spent": {"type": "object", "additionalProperties": {"type": "number"}},
            "left": {"type": "object", "additionalProperties": {"type": "number"}},
            "prices": {
                "type": "object",
                "properties": {"version": {"type": "string"}, "model": {"type": ["string", "null"]}},
            },
        },
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print("agentproto/schema.json is stale: run python scripts/gen_schema.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    # docs/protocol.md is generated from the schema: rewrite it with it.
    sys.path.insert(0, str(ROOT / "scripts"))
    import gen_docs

    gen_docs.TARGET.parent.mkdir(parents=True, exist_ok=True)
    gen_docs.TARGET.write_text(gen_docs.render(), encoding="utf-8")
    print(f"wrote {gen_docs.TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
