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

from agentproto.errors import ERROR_KINDS, LINE_EXCERPT  # noqa: E402
from agentproto.explain import EXPLANATIONS  # noqa: E402

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
                "description": "generate: a JSON Schema the answer must validate against.",
                "type": ["object", "boolean", "null"],
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
        "The error's kind; agentproto sends these (agentproto/errors.py): " + ", ".join(ERROR_KINDS) + "."
    )
    body["kind"]["examples"] = list(ERROR_KINDS)
    body["line"] = {
        "description": (
            f"ProtocolFailed: the agent line that caused it, cut after {LINE_EXCERPT} characters "
            "(then the line's length follows)."
        ),
        "type": "string",
    }

    # AgentInstallation: the version `discover` read from the executable.
    d["AgentInstallation"]["properties"]["version"] = {
        "description": "What the executable's --version printed (first line), when it could be read.",
        "type": ["string", "null"],
    }

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
