#!/usr/bin/env python3
"""Write docs/protocol.md from agentproto/schema.json: every line, command, event kind,
error kind and ops line, and the types they use. Generated, so it cannot drift from the
schema; tests/test_docs.py checks that the committed file is what this script writes.

    python scripts/gen_docs.py          # rewrite docs/protocol.md
    python scripts/gen_docs.py --check  # exit 1 if the committed file is stale
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "agentproto" / "schema.json"
TARGET = ROOT / "docs" / "protocol.md"

Schema = dict[str, Any]


def ref_name(schema: Schema) -> str | None:
    ref = schema.get("$ref") if isinstance(schema, dict) else None
    return ref.rsplit("/", 1)[-1] if ref else None


#: Definitions with a section of their own; every other one is under Types as "`Name` (type)".
SECTIONS = {
    "Line": "lines-agentproto-writes",
    "Frame": "commands-frames-the-app-writes",
    "Event": "events",
    "EventKind": "event-kinds",
    "ErrorKind": "error-kinds",
    "OpsRequest": "ops-requests",
    "OpsLine": "ops-lines",
    "OpsResult": "result-opsresult",
}


def link(name: str) -> str:
    return f"[`{name}`](#{SECTIONS.get(name, name.lower() + '-type')})"


def type_of(schema: Any) -> str:
    """A short, readable type: `string | null`, [`Event`](#event), `"Idle"`, `T[]`, ..."""
    if schema is True or schema == {}:
        return "any"
    if schema is False:
        return "nothing"
    if name := ref_name(schema):
        return link(name)
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " \\| ".join(dict.fromkeys(type_of(s) for s in schema[key]))
    if "allOf" in schema:
        return " & ".join(type_of(s) for s in schema["allOf"])
    types = schema.get("type")
    names = types if isinstance(types, list) else [types] if types else []
    out = []
    for t in names:
        if t == "array":
            out.append(f"{type_of(schema.get('items', True))}[]")
        elif t == "object" and isinstance(schema.get("additionalProperties"), dict) and not schema.get("properties"):
            out.append(f"{{string: {type_of(schema['additionalProperties'])}}}")
        elif t == "integer" and schema.get("minimum") == 0:
            out.append("`integer ≥ 0`")
        else:
            out.append(f"`{t}`")
    return " \\| ".join(out) or "any"


def shape(schema: Any) -> str:
    """``a TYPE``, or for an inline object its fields (``?`` when optional)."""
    if isinstance(schema, dict) and schema.get("properties") and not ref_name(schema):
        required = set(schema.get("required", []))
        fields = ", ".join(f"`{k}`{'' if k in required else '?'}: {type_of(v)}" for k, v in schema["properties"].items())
        return f"an object with {fields}"
    return f"a {type_of(schema)}"


def one_line(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def fields_table(schema: Schema, skip: tuple[str, ...] = ()) -> list[str]:
    props = {k: v for k, v in schema.get("properties", {}).items() if k not in skip}
    if not props:
        return []
    required = set(schema.get("required", []))
    rows = ["| field | type | required | meaning |", "|---|---|---|---|"]
    for name, prop in props.items():
        meaning = one_line(prop.get("description") if isinstance(prop, dict) else "")
        rows.append(f"| `{name}` | {type_of(prop)} | {'yes' if name in required else ''} | {meaning} |")
    return rows + [""]


def variant_key(variant: Schema) -> str:
    """The one key that names an externally tagged variant, or the const of a string one."""
    if "properties" in variant:
        return next(iter(variant["properties"]))
    return str(variant.get("const", variant.get("enum", ["?"])[0]))


class Doc:
    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.d: dict[str, Schema] = schema["definitions"]
        self.out: list[str] = []
        self.used: set[str] = set()

    def add(self, *lines: str) -> None:
        self.out.extend(lines)

    def note_refs(self, node: Any) -> None:
        """Every definition reachable from ``node`` goes into the Types section."""
        if isinstance(node, dict):
            if (name := ref_name(node)) and name not in self.used:
                self.used.add(name)
                self.note_refs(self.d[name])
            for value in node.values():
                self.note_refs(value)
        elif isinstance(node, list):
            for value in node:
                self.note_refs(value)

    def lines(self) -> None:
        self.add("## Lines agentproto writes", "", one_line(self.d["Line"].get("description")), "")
        self.add("| line | fields |", "|---|---|")
        for variant in self.d["Line"]["anyOf"]:
            required = set(variant.get("required", []))
            fields = ", ".join(
                f"`{k}`{'' if k in required else '?'}: {type_of(v)}" for k, v in variant["properties"].items()
            )
            self.add(f"| {variant.get('title', '')} | {fields} |")
            self.note_refs(variant)
        self.add("")

    def commands(self) -> None:
        frame = self.d["Frame"]
        ops = {v["properties"]["op"]["const"]: v for v in self.d["OpsRequest"]["oneOf"]}
        self.add(
            "## Commands (frames the app writes)",
            "",
            one_line(frame.get("description")) + " Every frame is `{\"id\": N, \"cmd\": NAME, ...fields}`.",
            "",
        )
        for variant in frame["oneOf"]:
            cmd = variant["properties"]["cmd"]["const"]
            self.add(f"### `{cmd}`", "")
            if cmd in ops:
                self.add(one_line(ops[cmd].get("description")), "")
            self.add(*fields_table(variant, skip=("cmd",)) or ["No fields.", ""])
            self.note_refs(variant)

    def events(self) -> None:
        event = self.d["Event"]
        self.add("## Events", "", one_line(event.get("description")), "", *fields_table(event))
        self.note_refs(event)
        self.add("### Event kinds", "", "`kind` is one of these: a string, or an object with one key, the kind's name.", "")
        for variant in self.d["EventKind"]["oneOf"]:
            name = variant_key(variant)
            self.add(f"#### `{name}`", "")
            if variant.get("description"):
                self.add(one_line(variant["description"]), "")
            if "properties" not in variant:
                self.add(f'The string `"{name}"`, no fields.', "")
                continue
            payload = variant["properties"][name]
            if ref_name(payload):
                self.add(f"`{{\"{name}\": …}}` where … is a {type_of(payload)}.", "")
            else:
                self.add(*fields_table(payload) or ["No fields.", ""])
            self.note_refs(variant)

    def errors(self) -> None:
        self.add("## Error kinds", "", one_line(self.d["ErrorKind"].get("description")), "")
        self.add(*fields_table(self.d["ErrorBody"]))
        self.add("| kind | meaning |", "|---|---|")
        for variant in self.d["ErrorKind"]["anyOf"]:
            self.add(f"| `{variant['const']}` | {one_line(variant.get('description'))} |")
        self.add("")

    def ops(self) -> None:
        self.add("## The ops framing", "", one_line(self.d["OpsRequest"].get("description")), "")
        self.add("### Ops requests", "")
        for variant in self.d["OpsRequest"]["oneOf"]:
            op = variant["properties"]["op"]["const"]
            self.add(f"#### `{op}`", "", one_line(variant.get("description")), "")
            self.add(*fields_table(variant, skip=("op",)) or ["No fields.", ""])
            self.note_refs(variant)
        self.add("### Ops lines", "", one_line(self.d["OpsLine"].get("description")), "")
        for member in self.d["OpsLine"]["oneOf"]:
            name = ref_name(member)
            assert name
            definition = self.d[name]
            if name == "OpsResult":
                self.add(f"#### `result` ({name})", "", one_line(definition.get("description")), "")
                self.add("| op | ok | payload |", "|---|---|---|")
                for result in definition["oneOf"]:
                    props = result["properties"]
                    payload = [f"`{k}`: {type_of(v)}" for k, v in props.items() if k not in ("kind", "op", "ok")]
                    payload += [f"the fields of {type_of(s)}" for s in result.get("allOf", [])]
                    op = type_of(props["op"]) if "const" in props["op"] else "any op"
                    self.add(f"| {op} | `{json.dumps(props['ok']['const'])}` | {', '.join(payload) or 'nothing'} |")
                    self.note_refs(result)
                self.add("")
                continue
            kind = definition["properties"]["kind"]["const"]
            self.add(f"#### `{kind}` ({name})", "", one_line(definition.get("description")), "")
            self.add(*fields_table(definition, skip=("kind",)))
            self.note_refs(definition)
        version = self.d["OpsVersion"]
        self.add("### `GET /v1/agent/version` (OpsVersion)", "", one_line(version.get("description")), "")
        self.add(*fields_table(version))

    def types(self) -> None:
        self.add("## Types", "", "Every type the sections above refer to, in alphabetical order.", "")
        for name in sorted(self.used - set(SECTIONS)):
            schema = self.d[name]
            self.add(f"### `{name}` (type)", "")
            if schema.get("description"):
                self.add(one_line(schema["description"]), "")
            variants = schema.get("oneOf") or schema.get("anyOf")
            if variants:
                self.add("One of:", "")
                for variant in variants:
                    described = f" — {one_line(variant['description'])}" if variant.get("description") else ""
                    if "properties" in variant and len(variant["properties"]) == 1 and "title" not in variant:
                        key = variant_key(variant)
                        self.add(f"- `{{\"{key}\": …}}`, … {shape(variant['properties'][key])}{described}")
                    elif "properties" in variant:
                        self.add(f"- {shape(variant)}{described}")
                    else:
                        self.add(f"- {type_of(variant)}{described}")
                self.add("")
            if "enum" in schema:
                self.add(f"One of {type_of(schema)}.", "")
            if schema.get("properties"):
                self.add(*fields_table(schema))
            elif not variants and "enum" not in schema:
                self.add(f"{type_of(schema)}", "")

    def render(self) -> str:
        self.add(
            "# The agentproto protocol",
            "",
            "<!-- Generated by scripts/gen_docs.py from agentproto/schema.json: do not edit by hand. -->",
            "",
            f"{one_line(self.schema.get('description'))} Protocol 1 lines (anyagent's) and the ops framing "
            "(`agentproto/1`); see docs/protocol-guide.md for the guarantees and the versioning rule, docs/transports.md for the transports. "
            "A `?` after a field name, or an empty *required* cell, means the field may be absent.",
            "",
            "- [Lines agentproto writes](#lines-agentproto-writes)",
            "- [Commands](#commands-frames-the-app-writes)",
            "- [Events](#events) and [event kinds](#event-kinds)",
            "- [Error kinds](#error-kinds)",
            "- [The ops framing](#the-ops-framing): [requests](#ops-requests), [lines](#ops-lines)",
            "- [Types](#types)",
            "",
        )
        self.lines()
        self.commands()
        self.events()
        self.errors()
        self.ops()
        self.types()
        while self.out and self.out[-1] == "":
            self.out.pop()
        return "\n".join(self.out) + "\n"


def render() -> str:
    return Doc(json.loads(SCHEMA.read_text(encoding="utf-8"))).render()


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print("docs/protocol.md is stale: run python scripts/gen_docs.py", file=sys.stderr)
            return 1
        return 0
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
