"""Every ACP message agentproto sends is valid against ACP's official JSON schema (1.7.0).

There is no ACP conformance suite: the official ``schema/v1/schema.json`` (vendored in
fixtures/acp/, Apache-2.0) is the reference. A real ``serve`` drives the SDK-built test
agent through every kind of exchange it has (handshake, prompt, permissions answered each
way, an elicitation answered, refused and withdrawn, fs, terminals, configure of a select and a boolean option, cancel of a turn and of a
pending permission, resume, close), the session's wire is recorded (``record_wire``), and
each line agentproto wrote to the agent is checked by its method's own definition (the
schema's ``x-method``/``x-side``): a request's or notification's ``params``, a response's
``result`` by the method of the agent's request it answers, an error by ``Error``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

from sidecar import ROOT, Sidecar

from tests.drivers.acp.test_acp import agent_ref

SCHEMA = json.loads((ROOT / "fixtures" / "acp" / "schema-1.7.0.json").read_text())
DEFS: dict[str, Any] = SCHEMA["$defs"]


def _definition(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": DEFS})


def _by_method(kind: str, sides: tuple[str, ...]) -> dict[str, str]:
    """method -> the definition of its ``kind`` (Request, Notification, Response) handled by
    one of ``sides``."""
    return {
        d["x-method"]: name
        for name, d in DEFS.items()
        if "x-method" in d and d.get("x-side") in sides and name.endswith(kind)
    }


#: What agentproto (the client) may send: requests and notifications the agent handles, the
#: protocol's own notifications ($/cancel_request), and responses to the agent's requests.
REQUESTS = _by_method("Request", ("agent",))
NOTIFICATIONS = _by_method("Notification", ("agent", "protocol"))
RESPONSES = _by_method("Response", ("client",))


def problems(lines: list[dict[str, Any]], asked: dict[Any, str]) -> list[str]:
    """Every schema violation in the lines agentproto wrote, each naming the line."""
    found: list[str] = []

    def check(name: str, value: Any, line: dict[str, Any]) -> None:
        for error in _definition(name).iter_errors(value):
            found.append(f"{name}: {error.message} at {list(error.absolute_path)}: {json.dumps(line)[:300]}")

    for line in lines:
        if line.get("jsonrpc") != "2.0":
            found.append(f"no jsonrpc 2.0: {json.dumps(line)[:300]}")
        method = line.get("method")
        if isinstance(method, str) and method.startswith("_"):
            continue  # an extension method: ACP leaves its shape to the implementation
        if method is not None and "id" in line:
            if method not in REQUESTS:
                found.append(f"a request ACP does not define: {method}")
            else:
                check(REQUESTS[method], line.get("params"), line)
        elif method is not None:
            if method not in NOTIFICATIONS:
                found.append(f"a notification ACP does not define: {method}")
            else:
                check(NOTIFICATIONS[method], line.get("params"), line)
        elif "error" in line:
            check("Error", line["error"], line)
        else:
            answered = asked.get(json.dumps(line.get("id")))
            if answered is None or answered not in RESPONSES:
                found.append(f"a response to no request of the agent's ({answered}): {json.dumps(line)[:300]}")
            else:
                check(RESPONSES[answered], line.get("result"), line)
    return found


def exchanged(wire: Path) -> tuple[list[dict[str, Any]], dict[Any, str], set[str]]:
    """The lines agentproto wrote to the agent, the agent's requests (id -> method), and
    the methods written."""
    sent: list[dict[str, Any]] = []
    asked: dict[Any, str] = {}
    for raw in wire.read_text().splitlines():
        record = json.loads(raw)
        if record.get("dir") not in ("to_agent", "from_agent"):
            continue
        line = json.loads(record["line"])
        if record["dir"] == "to_agent":
            sent.append(line)
        elif "method" in line and "id" in line:
            asked[json.dumps(line["id"])] = line["method"]
    methods = {line.get("method") or f"answer to {asked.get(json.dumps(line.get('id')))}" for line in sent}
    return sent, asked, methods


def test_every_acp_message_agentproto_sends_is_valid_against_the_official_schema(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("one\ntwo\nthree\n")
    wire = tmp_path / "wire.ndjson"
    with Sidecar() as sc:
        info = sc.ok(
            {"cmd": "open", "agent": agent_ref(), "dir": str(work), "record_wire": str(wire),
             "configure": {"model": "large-2"}},
            timeout=30,
        )
        session = info["id"]

        def turn(text: str) -> list[dict[str, Any]]:
            sc.ok({"cmd": "prompt", "session": session, "text": text})
            return sc.events(session, "TurnEnded", 30)

        def permission(text: str, answer: Any) -> None:
            sc.ok({"cmd": "prompt", "session": session, "text": text})
            opened = sc.events(session, "RequestOpened", 30)[-1]["kind"]["RequestOpened"]["Permission"]
            if answer is None:
                sc.ok({"cmd": "cancel", "session": session})
            else:
                sc.ok({"cmd": "answer", "session": session, "request": opened["id"], "answer": answer})
            sc.events(session, "TurnEnded", 30)

        turn("chunks")
        permission("tool", {"Permission": "AllowOnce"})
        permission("tool", {"Deny": {"message": "not now"}})
        permission("tool", "Cancel")
        permission("slow-permission", None)
        sc.ok({"cmd": "prompt", "session": session, "text": "elicit"})
        question = sc.events(session, "RequestOpened", 30)[-1]["kind"]["RequestOpened"]["Question"]
        answer = {"Question": [{"Choices": ["bold"]}, {"Choices": ["ui"]}, {"Choices": ["true"]},
                               {"Text": "3"}, {"Text": "x"}]}
        sc.ok({"cmd": "answer", "session": session, "request": question["id"], "answer": answer})
        sc.events(session, "TurnEnded", 30)
        turn("elicit url")
        turn("withdraw")
        turn("fs notes.txt")
        turn("terminal")
        sc.ok({"cmd": "configure", "session": session, "option": "fast", "value": True})
        sc.ok({"cmd": "configure", "session": session, "option": "mode", "value": "plan"})
        sc.ok({"cmd": "prompt", "session": session, "text": "slow"})
        sc.events(session, "TextDelta", 30)
        sc.ok({"cmd": "cancel", "session": session})
        sc.events(session, "TurnEnded", 30)
        sc.ok({"cmd": "close", "session": session}, timeout=30)
        sc.wait_for(lambda line: line.get("closed") == session, 30)
        resumed = sc.ok({"cmd": "open", "agent": agent_ref(), "dir": str(work), "record_wire": str(wire),
                         "resume": info["resume_token"]}, timeout=30)
        sc.ok({"cmd": "close", "session": resumed["id"]}, timeout=30)
        sc.wait_for(lambda line: line.get("closed") == resumed["id"], 30)
    sent, asked, methods = exchanged(wire)
    # The exchange covered what agentproto sends (so that a pass means something).
    assert methods >= {
        "initialize", "session/new", "session/load", "session/prompt", "session/cancel",
        "session/set_config_option", "answer to elicitation/create",
        "answer to session/request_permission", "answer to fs/read_text_file", "answer to fs/write_text_file",
        "answer to terminal/create", "answer to terminal/output", "answer to terminal/wait_for_exit",
        "answer to terminal/release", "answer to terminal/kill",
    }, methods
    found = problems(sent, asked)
    assert found == [], "\n".join(found)


def test_the_check_itself_finds_a_malformed_message() -> None:
    # A check that cannot fail proves nothing: each of these breaks the schema.
    asked = {json.dumps(7): "fs/read_text_file", json.dumps(8): "session/request_permission"}
    bad = [
        {"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": {"sessionId": "s", "prompt": "hi"}},
        {"jsonrpc": "2.0", "method": "session/cancel", "params": {}},
        {"jsonrpc": "2.0", "id": 7, "result": {"text": 3}},
        {"jsonrpc": "2.0", "id": 8, "result": {"outcome": {"outcome": "picked"}}},
        {"jsonrpc": "2.0", "id": 9, "error": {"message": "no code"}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/unheard_of", "params": {}},
        {"id": 3, "method": "initialize", "params": {"protocolVersion": 1}},
    ]
    found = problems(bad, asked)
    assert len(found) == len(bad), found
    good = [
        {"jsonrpc": "2.0", "id": 1, "method": "session/prompt",
         "params": {"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]}},
        {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 4}},
        {"jsonrpc": "2.0", "id": 7, "result": {"content": "text"}},
        {"jsonrpc": "2.0", "id": 8, "result": {"outcome": {"outcome": "cancelled"}}},
        {"jsonrpc": "2.0", "id": 9, "error": {"code": -32800, "message": "Request cancelled"}},
    ]
    assert problems(good, asked) == []
