"""The recorded sessions: fixtures/recordings/<name>.ndjson, made with ``--record`` itself.

Each scenario below drives a real ``python -m agentproto`` process with ``--record`` the
way an app would, against the mock, the ACP test agent, or the pinned ``claude`` and
``codex`` CLIs talking to the fake model APIs in tests/; tests/commands/test_replay.py replays
every file (add a file, gain a test).

    python -m tests.recordings capture [NAME ...]   # re-record (all, or these)
    python -m tests.recordings list

Run it as scripts/test runs pytest: the venv's bin on PATH, inside ``unshare -n``. A
recording holds the recording machine's temp paths (replay moves them into its own
temp directory) and never a secret (conftest.py checks every file).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "fixtures" / "recordings"
sys.path.insert(0, str(ROOT / "tests" / "fakes"))

from ops_support import Proc, closing, script  # noqa: E402
from sidecar import Sidecar, base_env  # noqa: E402
from suite_secrets import API_KEY  # noqa: E402

ACP_AGENT = ROOT / "tests" / "fakes" / "acp_test_agent.py"


def files() -> list[Path]:
    return sorted(RECORDINGS.glob("*.ndjson"))


def _work(root: str) -> str:
    work = os.path.join(root, "work")
    os.makedirs(work, exist_ok=True)
    return work


# -- the scenarios: each records into ``out`` -------------------------------------------------


def mock_serve(out: Path, root: str) -> None:
    """Protocol 1 on stdio with a mock script: a permission asked and answered, a key in env."""
    with Sidecar(["--mock", script("turn"), "--record", str(out)]) as sc:
        session = sc.open(dir=_work(root), env={"SERVICE_API_KEY": API_KEY})
        sc.ok({"cmd": "prompt", "session": session, "text": "run the tests"})
        sc.events(session, until="RequestOpened")
        sc.ok({"cmd": "answer", "session": session, "request": "r1", "answer": {"Permission": "AllowOnce"}})
        sc.events(session, until="TurnEnded")
        sc.ok({"cmd": "info", "session": session})
        sc.close_stdin()
        sc.drain()


LOOKUP = {"name": "lookup", "description": "Look a word up",
          "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}}}  # fmt: skip


def mock_tools(out: Path, root: str) -> None:
    """Protocol 1 with the app's own tool: the mock calls it through the listener, the app
    answers; the session's tools_url (its token) is redacted."""
    with Sidecar(["--mock", script("tools"), "--record", str(out)], reference=False) as sc:  # ToolCall is ours
        session = sc.open(dir=_work(root), tools=[LOOKUP])
        sc.ok({"cmd": "prompt", "session": session, "text": "look it up"})
        opened = next(e for e in sc.events(session, until="RequestOpened", timeout=30) if "RequestOpened" in e["kind"])
        call = opened["kind"]["RequestOpened"]["ToolCall"]
        result = {"ToolResult": {"content": [{"type": "text", "text": "a program that acts"}], "is_error": False}}
        sc.ok({"cmd": "answer", "session": session, "request": call["id"], "answer": result})
        sc.events(session, until="TurnEnded", timeout=30)
        sc.close_stdin()
        sc.drain()


def mock_ops(out: Path, root: str) -> None:
    """The ops loop: open, a prompt that waits for an answer, the answer, explain, close."""
    p = Proc(["agent", "--mock", script("turn"), "--record", str(out)])
    try:
        p.request({"op": "open", "agent": "mock", "dir": _work(root)})
        p.request({"op": "prompt", "text": "run the tests"})
        p.request({"op": "answer", "request": "r1", "answer": {"Permission": "AllowOnce"}})
        p.request({"op": "explain", "code": "BadFrame"})
        p.request({"op": "nope"})
        p.request({"op": "close"})
        p.close_stdin()
        p.wait()
    finally:
        p.stop()


def single_shot(out: Path, root: str) -> None:
    """``--single-shot``: one generate on the echo mock."""
    request = json.dumps({"op": "generate", "agent": "mock", "dir": _work(root), "prompt": "two words"})
    subprocess.run([sys.executable, "-m", "agentproto", "--single-shot", "--record", str(out)], input=request.encode(),
                   env=base_env(), cwd=str(ROOT), capture_output=True, timeout=60, check=True)  # fmt: skip


def jsonrpc(out: Path, root: str) -> None:
    """JSON-RPC 2.0 on stdio: a call, a batch, a notification, an unknown method."""
    p = Proc(["serve", "--transport", "jsonrpc", "--mock", script("turn"), "--record", str(out)])
    try:
        p.send({"jsonrpc": "2.0", "id": 1, "method": "open", "params": {"agent": "mock", "dir": _work(root)}})
        p.line()
        p.send([{"jsonrpc": "2.0", "id": 2, "method": "info", "params": {}},
                {"jsonrpc": "2.0", "id": 3, "method": "explain", "params": {"code": "SessionBusy"}}])  # fmt: skip
        p.line()
        p.send({"jsonrpc": "2.0", "method": "info", "params": {}})
        p.send({"jsonrpc": "2.0", "id": 4, "method": "nope"})
        p.line()
        p.send({"jsonrpc": "2.0", "id": 5, "method": "close", "params": {}})
        p.line()
        p.close_stdin()
        p.wait()
    finally:
        p.stop()


def mcp(out: Path, root: str) -> None:
    """MCP on stdio: initialize, list the tools, one agentproto_generate call on the mock."""
    p = Proc(["serve", "--transport", "mcp", "--record", str(out)])
    try:
        p.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "rec", "version": "1"}}})
        p.line()
        p.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        p.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        p.line()
        args = {"agent": "mock", "dir": _work(root), "prompt": "hello mcp"}
        p.send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "agentproto_generate", "arguments": args}})
        p.line(30)
        p.close_stdin()
        p.wait()
    finally:
        p.stop()


def http(out: Path, root: str) -> None:
    """HTTP: a batch that opens and prompts (one default session), then a POST that names it."""
    p = Proc(["serve", "--transport", "http", "--port", "0", "--record", str(out)])
    try:
        port = int(p.banner(r"listening on http://[\d.]+:(\d+)/").group(1))
        batch = "\n".join(json.dumps(r) for r in (
            {"op": "open", "agent": "mock", "dir": _work(root)}, {"op": "prompt", "text": "batched words"}))  # fmt: skip
        _post(port, "/v1/agent/batch", batch.encode())
        _post(port, "/v1/agent", json.dumps({"op": "info", "session": "s1"}).encode())
        _post(port, "/v1/agent", json.dumps({"op": "info"}).encode())  # a new POST has no default session
        _post(port, "/v1/agent", json.dumps({"op": "close", "session": "s1"}).encode())
    finally:
        p.stop()


def _post(port: int, path: str, body: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(closing(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (path.encode(), port, len(body), body)))  # fmt: skip
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def unix(out: Path, root: str) -> None:
    """Protocol 1 on a Unix socket: two connections, each its own session."""
    path = os.path.join(root, "ap.sock")
    p = Proc(["serve", "--transport", "unix", "--listen", path, "--record", str(out)])
    try:
        p.banner(r"listening on")
        for text in ("first client", "second client"):
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(path)
                reader = sock.makefile("rb")
                reader.readline()  # hello
                for frame in ({"id": 1, "cmd": "open", "agent": "mock", "dir": _work(root)},
                              {"id": 2, "cmd": "prompt", "session": "s1" if text == "first client" else "s2", "text": text}):  # fmt: skip
                    sock.sendall((json.dumps(frame) + "\n").encode())
                while b"TurnEnded" not in reader.readline():
                    pass
                sock.shutdown(socket.SHUT_WR)
                while reader.readline():
                    pass
    finally:
        p.stop()


def acp(out: Path, root: str) -> None:
    """The ops loop with the ACP test agent: its wire in the same file, tied to its session."""
    agent = {"acp": {"name": "acp-test", "path": str(ACP_AGENT), "args": []}}
    p = Proc(["agent", "--record", str(out)])
    try:
        p.request({"op": "open", "agent": agent, "dir": _work(root)}, timeout=30)
        p.request({"op": "prompt", "text": "chunks"}, timeout=30)
        p.request({"op": "close"}, timeout=30)
        p.close_stdin()
        p.wait(30)
    finally:
        p.stop()


def claude(out: Path, root: str, executable: str | None = None) -> None:
    """Protocol 1 with the pinned Claude Code against the fake Anthropic API: one turn."""
    from fake_anthropic import FakeAnthropic, claude_bin, text

    with FakeAnthropic() as api:
        api.push(text("Hello from a recorded Claude.", chunk=6))
        config = os.path.join(root, "config")
        os.makedirs(config)
        env = api.cli_env(config)
        with Sidecar(["--record", str(out)]) as sc:
            session = sc.open({"id": "claude", "path": executable or claude_bin()}, dir=_work(root), env=env)
            sc.ok({"cmd": "prompt", "session": session, "text": "say hello"})
            sc.events(session, until="TurnEnded", timeout=60)
            sc.ok({"cmd": "close", "session": session}, timeout=30)
            sc.wait_for(lambda line: line.get("closed") == session, 30)
            sc.close_stdin()
            sc.drain()


def codex(out: Path, root: str, executable: str | None = None) -> None:
    """Protocol 1 with the pinned Codex app-server against the fake Responses API: one turn."""
    import fake_openai as fo

    world = fo.CodexWorld(root)
    try:
        world.api.script(fo.text("Hello from a recorded Codex", chunks=4, reasoning="thinking it over"))
        env = {k: v for k, v in world.env.items() if k != "AGENTPROTO_CODEX_BIN"}
        with Sidecar(["--record", str(out)], env={"AGENTPROTO_TEST_MARKER": world.marker}) as sc:
            session = sc.open({"id": "codex", "path": executable or fo.pinned_codex()}, dir=world.work, env=env)
            sc.ok({"cmd": "prompt", "session": session, "text": "say hello"})
            sc.events(session, until="TurnEnded", timeout=60)
            sc.ok({"cmd": "close", "session": session}, timeout=30)
            sc.wait_for(lambda line: line.get("closed") == session, 30)
            sc.close_stdin()
            sc.drain()
    finally:
        world.close()


SCENARIOS: dict[str, Callable[[Path, str], None]] = {
    "mock-serve": mock_serve,
    "mock-tools": mock_tools,
    "mock-ops": mock_ops,
    "single-shot": single_shot,
    "jsonrpc": jsonrpc,
    "mcp": mcp,
    "http": http,
    "unix": unix,
    "acp": acp,
    "claude": claude,
    "codex": codex,
}


def record(name: str, out: Path) -> Path:
    """Run scenario ``name``, recording into ``out`` (made fresh)."""
    if out.exists():
        out.unlink()
    with tempfile.TemporaryDirectory(prefix="recording-") as root:
        SCENARIOS[name](out, root)
    for _ in range(50):  # the recorder writes as its process ends
        if out.exists():
            break
        time.sleep(0.1)
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["list"]:
        for name, scenario in SCENARIOS.items():
            print(f"{name}: {(scenario.__doc__ or '').strip()}")
        return 0
    if argv[:1] != ["capture"]:
        print(__doc__, file=sys.stderr)
        return 2
    RECORDINGS.mkdir(parents=True, exist_ok=True)
    for name in argv[1:] or list(SCENARIOS):
        path = record(name, RECORDINGS / f"{name}.ndjson")
        print("recorded", path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

