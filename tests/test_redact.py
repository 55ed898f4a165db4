"""Secrets never reach a record (agentproto/redact.py): the rules one by one on the sans-IO
scrubber, then through real sidecars that record requests carrying keys, an agent that
echoes them, MCP servers' headers and the HTTP token. (conftest.py also greps every
record the suite wrote for every secret the suite used.)"""

from __future__ import annotations

import http.client
import json
import sys
from pathlib import Path

from ops_support import Proc, script
from sidecar import ROOT, Sidecar

from agentproto.redact import REDACTED, Secrets, secret_key
from suite_secrets import ACP_HEADER, API_KEY, AUTH_TOKEN, MCP_ENV, PASSWORD, SHORT

ACP_AGENT = ROOT / "tests" / "acp_test_agent.py"


def test_which_env_keys_are_secret() -> None:
    for key in ("ANTHROPIC_API_KEY", "github_token", "MY_SECRET", "DB_PASSWORD", "password", "Password"):
        assert secret_key(key), key
    for key in ("PATH", "KEYBOARD", "TOKENS", "HOME", "PASSWORD_HINT", "key"):
        assert not secret_key(key), key


def test_what_a_request_teaches_and_every_later_occurrence_is_scrubbed() -> None:
    secrets = Secrets()
    secrets.learn({
        "cmd": "open",
        "env": {"ANTHROPIC_API_KEY": API_KEY, "HOME": "/home/me", "password": PASSWORD},
        "mcp_servers": [
            {"name": "a", "connection": {"Http": {"url": "http://x", "headers": {"X-Api": ACP_HEADER}}}},
            {"name": "b", "connection": {"Stdio": {"command": "srv", "args": [], "env": {"ANY": MCP_ENV}}}},
        ],
        "nested": {"Authorization": f"Bearer {AUTH_TOKEN}"},
    })  # fmt: skip
    assert {API_KEY, PASSWORD, ACP_HEADER, MCP_ENV, AUTH_TOKEN} <= secrets.values
    assert "/home/me" not in secrets.values
    # Anywhere, at any depth of escaping: a key inside a JSON line inside a record.
    line = json.dumps({"type": "assistant", "text": f"your key is {API_KEY}!", "h": ACP_HEADER})
    record = json.dumps({"t": 1, "dir": "from_agent", "line": line})
    scrubbed = secrets.scrub(record)
    for secret in (API_KEY, ACP_HEADER):
        assert secret not in scrubbed
    assert json.loads(json.loads(scrubbed)["line"]) == {"type": "assistant", "text": f"your key is {REDACTED}!", "h": REDACTED}


def test_a_value_with_json_special_characters_is_caught_escaped() -> None:
    secrets = Secrets()
    odd = 'pa"ss\\wörd-\n-1234'
    secrets.learn({"env": {"X_SECRET": odd}})
    inner = json.dumps({"echo": odd})
    for text in (odd, inner, json.dumps({"line": inner}), json.dumps({"line": json.dumps({"line": inner})})):
        assert REDACTED in secrets.scrub(text)
        assert "pa" not in secrets.scrub(text).replace("parse", "")


def test_a_short_value_is_scrubbed_only_as_a_whole_string() -> None:
    secrets = Secrets()
    secrets.learn({"env": {"A_TOKEN": SHORT}})
    text = json.dumps({"line": json.dumps({"env": {"A_TOKEN": SHORT}, "word": f"x{SHORT}y"})})
    scrubbed = json.loads(json.loads(secrets.scrub(text))["line"])
    assert scrubbed == {"env": {"A_TOKEN": REDACTED}, "word": f"x{SHORT}y"}  # the record stays readable


def test_listener_tokens_are_learned_from_any_text() -> None:
    secrets = Secrets()
    token = "Abc_def-0123456789XYZ_abcdefgh"
    url = f"http://127.0.0.1:43121/{token}/mcp/agentproto"
    first = secrets.scrub(json.dumps({"tools_url": url}))
    assert token not in first and "http://127.0.0.1:43121/[redacted]/mcp/agentproto" in first
    assert secrets.scrub(f"later the agent says {token}") == "later the agent says [redacted]"
    # A fake API's own paths are not tokens.
    assert secrets.scrub("http://127.0.0.1:5000/v1/messages") == "http://127.0.0.1:5000/v1/messages"


def records(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_serve_records_no_key_a_mock_echoes(tmp_path: Path) -> None:
    record = tmp_path / "serve.ndjson"
    with Sidecar(["--record", str(record)]) as sc:
        sc.send({"id": 1, "cmd": "open", "agent": "mock", "dir": str(tmp_path), "env": {"ANTHROPIC_API_KEY": API_KEY}})
        session = sc.reply(1)["ok"]["id"]
        sc.send({"id": 2, "cmd": "prompt", "session": session, "text": f"repeat {API_KEY} please"})
        texts = [e["kind"]["TextDelta"]["text"] for e in sc.events(session, until="TurnEnded") if "TextDelta" in e["kind"]]
        assert API_KEY in "".join(texts)  # the app itself sees what it sent
    text = records(record)
    assert API_KEY not in text and REDACTED in text
    assert text.count(REDACTED) >= 2  # the request's env, the prompt, the echoed delta


def test_the_listener_token_of_tools_url_never_reaches_a_record(tmp_path: Path) -> None:
    from tests.recordings import LOOKUP

    record = tmp_path / "serve.ndjson"
    with Sidecar(["--mock", script("tools"), "--record", str(record)], reference=False) as sc:
        info = sc.ok({"cmd": "open", "agent": "mock", "dir": str(tmp_path), "tools": [LOOKUP]}, 30)
        token = info["tools_url"].split("/")[3]
        assert len(token) >= 16
        sc.ok({"cmd": "info", "session": info["id"]})
    text = records(record)
    assert token not in text and "/[redacted]/mcp/agentproto" in text


def test_mcp_server_headers_and_env_never_reach_the_agent_wire(tmp_path: Path) -> None:
    record = tmp_path / "serve.ndjson"
    wire = tmp_path / "wire.ndjson"
    servers = [
        {"name": "h", "connection": {"Http": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": f"Bearer {AUTH_TOKEN}"}}}},
        {"name": "s", "connection": {"Stdio": {"command": sys.executable, "args": [], "env": {"TOKEN_FILE": MCP_ENV}}}},
    ]  # fmt: skip
    agent = {"acp": {"name": "acp-test", "path": str(ACP_AGENT), "args": []}}
    with Sidecar(["--record", str(record)]) as sc:
        reply = sc.reply(sc.send({"cmd": "open", "agent": agent, "dir": str(tmp_path), "mcp_servers": servers,
                                  "record_wire": str(wire)}), 30)  # fmt: skip
        session = reply["ok"]["id"]
        sc.ok({"cmd": "close", "session": session}, 20)
        sc.wait_for(lambda line: line.get("closed") == session, 20)
    for path in (record, wire):
        text = records(path)
        assert AUTH_TOKEN not in text and MCP_ENV not in text, path
        # The agent was told about both servers (session/new), with the values redacted.
        sent = [json.loads(r["line"]) for r in map(json.loads, text.splitlines()) if r.get("dir") == "to_agent"]
        new = next(m for m in sent if m.get("method") == "session/new")
        assert REDACTED in json.dumps(new["params"]["mcpServers"])


def test_the_http_token_is_redacted_wherever_it_appears(tmp_path: Path) -> None:
    record = tmp_path / "http.ndjson"
    p = Proc(["serve", "--transport", "http", "--port", "0", "--record", str(record), "--mock", script("turn")],
             env={"AGENTPROTO_AUTH_TOKEN": AUTH_TOKEN})  # fmt: skip
    try:
        port = int(p.banner(r"listening on http://[\d.]+:(\d+)/").group(1))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        body = json.dumps({"op": "explain", "code": f"no-such-{AUTH_TOKEN}"})
        conn.request("POST", "/v1/agent", body=body, headers={"Authorization": f"Bearer {AUTH_TOKEN}",
                                                              "Content-Type": "application/json"})  # fmt: skip
        answer = conn.getresponse().read()
        conn.close()
        assert b"unknown error code" in answer and AUTH_TOKEN.encode() in answer  # echoed to its owner
    finally:
        p.stop()
    text = records(record)
    assert '"request"' in text and AUTH_TOKEN not in text and REDACTED in text


def test_a_key_in_the_sidecars_own_environment_never_reaches_a_record(tmp_path: Path) -> None:
    # The agents inherit the sidecar's environment: a key there (not in the request) that an
    # agent echoes is redacted like the request's own.
    record = tmp_path / "serve.ndjson"
    with Sidecar(["--record", str(record)], env={"DEPLOY_TOKEN": PASSWORD, "SHORT_KEY": SHORT}) as sc:
        session = sc.open(dir=str(tmp_path))
        sc.send({"id": 2, "cmd": "prompt", "session": session, "text": f"repeat {PASSWORD} and {SHORT} please"})
        texts = [e["kind"]["TextDelta"]["text"] for e in sc.events(session, until="TurnEnded") if "TextDelta" in e["kind"]]
        assert PASSWORD in "".join(texts)
    text = records(record)
    assert PASSWORD not in text and REDACTED in text
    assert f"and {SHORT} please" in text  # a short value is no key: left where it is not a whole string
