"""A fake Anthropic Messages API for driving the real ``claude`` CLI offline.

Stdlib only, bound to 127.0.0.1 on a free port, one thread per connection (test code,
not run-time code). Each test scripts the replies it needs:

    with FakeAnthropic() as api:
        api.push(text("hello"))
        api.push(tool_use("Bash", {"command": "touch x"}), text("done"))
        env = api.cli_env(config_dir)

Each POST /v1/messages takes the next queued reply, in order (with
CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC the CLI makes no side calls of its own, so
the queue is exactly the model's turns); a reply with ``match`` set is only taken by a
request it accepts. With nothing queued a request gets ``default_reply``. The CLI's own
one-token checks (``max_tokens: 1``, e.g. 2.1.332 checks a model ``set_model`` names) get a
one-token answer and take nothing from the queue (``Logged.is_check``). Every request
is logged in ``api.requests`` (method, path, headers, JSON body) for the test to inspect.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer to a POST /v1/messages."""

    #: Content blocks: {"type":"text","text":..}, {"type":"tool_use","name":..,"input":..},
    #: {"type":"thinking","thinking":..}.
    blocks: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    #: An HTTP error instead of a message: (status, error type, message), with these headers
    #: (a rate limit's retry-after or anthropic-ratelimit-unified-reset).
    error: tuple[int, str, str] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Seconds between SSE events (a slow stream).
    delay: float = 0.0
    #: Split each text into chunks of this many characters.
    chunk: int = 4
    #: Only a request this accepts takes the reply.
    match: Callable[[Logged], bool] | None = None
    #: Stop writing after the first content delta and hold the connection open this long.
    hang: float = 0.0
    usage: dict[str, int] = field(
        default_factory=lambda: {"input_tokens": 12, "output_tokens": 7}
    )


def text(value: str, **kw: Any) -> Reply:
    return Reply(blocks=[{"type": "text", "text": value}], **kw)


def tool_use(
    name: str, tool_input: dict[str, Any], *, tool_id: str | None = None, **kw: Any
) -> Reply:
    block = {
        "type": "tool_use",
        "name": name,
        "input": tool_input,
        "id": tool_id or "toolu_" + uuid.uuid4().hex[:20],
    }
    return Reply(blocks=[block], **kw)


def thinking(thought: str, answer: str, **kw: Any) -> Reply:
    return Reply(
        blocks=[
            {"type": "thinking", "thinking": thought},
            {"type": "text", "text": answer},
        ],
        **kw,
    )


def error(status: int, kind: str, message: str, **kw: Any) -> Reply:
    return Reply(error=(status, kind, message), **kw)


def tool_search(*names: str, **kw: Any) -> Reply:
    """The model loads deferred tools by name, as Claude Code 2.1.332 asks it to: an MCP
    server's tools (and some of its own, ExitPlanMode among them) are only named in the
    prompt until a ``ToolSearch`` call brings their schemas in."""
    return tool_use("ToolSearch", {"query": "select:" + ",".join(names)}, **kw)


def plan_file(logged: Logged) -> str:
    """The plan file plan mode tells the model to write its plan to (Claude Code 2.1.332:
    ExitPlanMode takes no plan, the CLI reads this file)."""
    found = re.search(r"plan (?:at|file exists at) (/\S+?\.md)", json.dumps(logged.body))
    if found is None:
        raise AssertionError("the request names no plan file: is the session in plan mode?")
    return found.group(1)


@dataclass
class Logged:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    #: The Reply it got (None for HEAD, count_tokens and the like).
    reply: Reply | None = None

    @property
    def is_message(self) -> bool:
        """A model call of the conversation (not one of the CLI's ``is_check`` calls)."""
        return self.is_messages_post and not self.is_check

    @property
    def is_messages_post(self) -> bool:
        return self.method == "POST" and self.path.split("?", 1)[0] == "/v1/messages"

    @property
    def is_check(self) -> bool:
        """One of the CLI's own one-token calls (``max_tokens: 1``: a model check after
        ``set_model``, a key or quota check), not a turn of the model's: it gets a one-token
        answer and takes nothing from the queue."""
        return self.is_messages_post and isinstance(self.body, dict) and self.body.get("max_tokens") == 1

    def conversation_step(self) -> str:
        """Which model call of which conversation this is, as the API sees its content: the
        CLI's session id header and the user and assistant turns, without the CLI's own
        ``<system-reminder>`` blocks, ``system`` messages and cache marks. A resend of a
        refused call keeps it, whatever headers, fields or reminders the CLI changes in
        between; the next call of the conversation (a new prompt, a tool result) does not."""
        session = next(
            (v for k, v in self.headers.items() if k.lower() == "x-claude-code-session-id"),
            None,
        )
        turns = []
        messages = self.body.get("messages") if isinstance(self.body, dict) else None
        for message in messages if isinstance(messages, list) else []:
            if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
                continue
            content = message.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            kept = [
                {k: v for k, v in block.items() if k != "cache_control"}
                for block in blocks
                if isinstance(block, dict)
                and not str(block.get("text", "")).startswith("<system-reminder>")
            ]
            turns.append((message["role"], kept))
        return json.dumps([session, turns], sort_keys=True)

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None

    def last_user_text(self) -> str:
        """The text of the last user message (tool results included, as JSON)."""
        if not isinstance(self.body, dict):
            return ""
        for message in reversed(self.body.get("messages", [])):
            if message.get("role") != "user":
                continue
            content = message.get("content")
            if isinstance(content, str):
                return content
            parts = []
            for block in content or []:
                if block.get("type") == "text":
                    parts.append(block.get("text", ""))
                elif block.get("type") == "tool_result":
                    parts.append(json.dumps(block.get("content")))
            return "\n".join(parts)
        return ""


class FakeAnthropic:
    def __init__(self) -> None:
        self.requests: list[Logged] = []
        self.default_reply: Reply | Callable[[Logged], Reply] = text("OK")
        self._queue: list[Reply | Callable[[Logged], Reply]] = []
        #: (the refused request's messages, its client-error reply): see the docstring.
        self._refused: list[tuple[str, Reply]] = []
        self._lock = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # -- lifecycle
    def start(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeAnthropic:  # noqa: PYI034
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting
    def push(self, *replies: Reply | Callable[[Logged], Reply]) -> None:
        """Queue replies; a callable is a reply made from the request it answers."""
        with self._lock:
            self._queue.extend(replies)

    def cli_env(
        self, config_dir: str, *, api_key: str | None = "sk-ant-fake", retries: int = 0
    ) -> dict[str, str]:
        """The variables that point the CLI here and keep everything else off."""
        env = {
            "ANTHROPIC_BASE_URL": self.url,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_MAX_RETRIES": str(retries),
            "CLAUDE_CONFIG_DIR": config_dir,
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }
        if api_key is not None:
            env["ANTHROPIC_API_KEY"] = api_key
        return env

    def main_requests(self) -> list[Logged]:
        """Every POST /v1/messages so far (the model calls)."""
        with self._lock:
            return [r for r in self.requests if r.is_message]

    def wait_requests(self, count: int, timeout: float = 30.0) -> list[Logged]:
        """Block until at least ``count`` model calls arrived."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                found = [r for r in self.requests if r.is_message]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"expected {count} model calls, got {len(found)}"
                    )
                self._lock.wait(left)

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    # -- serving
    def _take(self, logged: Logged) -> Reply:
        conversation = logged.conversation_step()
        with self._lock:
            for refused, reply in self._refused:
                if refused == conversation:
                    return reply
            for i, queued in enumerate(self._queue):
                if callable(queued):
                    del self._queue[i]
                    reply = queued(logged)
                    break
                if queued.match is None or queued.match(logged):
                    del self._queue[i]
                    reply = queued
                    break
            else:
                reply = None
            if reply is not None:
                if reply.error and 400 <= reply.error[0] < 500 and reply.error[0] != 429:
                    self._refused.append((conversation, reply))
                return reply
            chosen = self.default_reply
        return chosen(logged) if callable(chosen) else chosen

    def _log(self, logged: Logged) -> None:
        with self._lock:
            self.requests.append(logged)
            self._lock.notify_all()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _read_body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    return json.loads(raw) if raw else None
                except ValueError:
                    return raw.decode("utf-8", "replace")

            def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_HEAD(self) -> None:
                fake._log(Logged("HEAD", self.path, dict(self.headers), None))
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                fake._log(Logged("GET", self.path, dict(self.headers), None))
                self._send_json(
                    404,
                    {
                        "type": "error",
                        "error": {"type": "not_found_error", "message": "not here"},
                    },
                )

            def do_POST(self) -> None:
                body = self._read_body()
                logged = Logged("POST", self.path, dict(self.headers), body)
                path = self.path.split("?", 1)[0]
                if path.endswith("/count_tokens"):
                    fake._log(logged)
                    self._send_json(200, {"input_tokens": 100})
                    return
                if path != "/v1/messages":
                    fake._log(logged)
                    self._send_json(
                        404,
                        {
                            "type": "error",
                            "error": {"type": "not_found_error", "message": path},
                        },
                    )
                    return
                reply = CHECK_REPLY if logged.is_check else fake._take(logged)
                logged.reply = reply
                fake._log(logged)
                if reply.error:
                    status, kind, message = reply.error
                    self._send_json(
                        status,
                        {"type": "error", "error": {"type": kind, "message": message}},
                        reply.headers,
                    )
                    return
                model = (
                    body.get("model", "claude-fake")
                    if isinstance(body, dict)
                    else "claude-fake"
                )
                if isinstance(body, dict) and body.get("stream"):
                    try:
                        self._stream(reply, model)
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                else:
                    self._send_json(200, message_object(reply, model))

            def _stream(self, reply: Reply, model: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                first_delta = True
                for event in sse_events(reply, model):
                    name = event["type"]
                    self.wfile.write(
                        f"event: {name}\ndata: {json.dumps(event)}\n\n".encode()
                    )
                    self.wfile.flush()
                    if name == "content_block_delta" and first_delta and reply.hang:
                        first_delta = False
                        time.sleep(reply.hang)
                        return
                    if reply.delay:
                        time.sleep(reply.delay)

        return Handler


#: The answer to a one-token check (``Logged.is_check``).
CHECK_REPLY = Reply(
    blocks=[{"type": "text", "text": "OK"}],
    stop_reason="max_tokens",
    usage={"input_tokens": 8, "output_tokens": 1},
)


def _stop_reason(reply: Reply) -> str:
    if reply.stop_reason:
        return reply.stop_reason
    return (
        "tool_use" if any(b["type"] == "tool_use" for b in reply.blocks) else "end_turn"
    )


def message_object(reply: Reply, model: str) -> dict[str, Any]:
    content = []
    for block in reply.blocks:
        block = dict(block)
        if block["type"] == "thinking":
            block.setdefault("signature", "fake-signature")
        content.append(block)
    return {
        "id": "msg_" + uuid.uuid4().hex[:20],
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _stop_reason(reply),
        "stop_sequence": None,
        "usage": dict(reply.usage),
    }


def sse_events(reply: Reply, model: str) -> list[dict[str, Any]]:
    """The Messages API stream for one reply."""
    usage = dict(reply.usage)
    start = {
        "id": "msg_" + uuid.uuid4().hex[:20],
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": usage.get("input_tokens", 0), "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(reply.blocks):
        kind = block["type"]
        if kind == "text":
            events.append(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                }
            )
            body = block["text"]
            for i in range(0, len(body), max(1, reply.chunk)):
                piece = body[i : i + reply.chunk]
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    }
                )
        elif kind == "thinking":
            events.append(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {
                        "type": "thinking",
                        "thinking": "",
                        "signature": "",
                    },
                }
            )
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "thinking_delta", "thinking": block["thinking"]},
                }
            )
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": "fake-signature"},
                }
            )
        elif kind == "tool_use":
            events.append(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {
                        "type": "tool_use",
                        "id": block["id"],
                        "name": block["name"],
                        "input": {},
                    },
                }
            )
            raw = json.dumps(block["input"])
            half = len(raw) // 2
            for piece in (raw[:half], raw[half:]):
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    }
                )
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": _stop_reason(reply), "stop_sequence": None},
            "usage": {"output_tokens": usage.get("output_tokens", 0)},
        }
    )
    events.append({"type": "message_stop"})
    return events


def serve_forever() -> None:  # pragma: no cover - manual experiments
    """``python tests/fakes/fake_anthropic.py``: a fake that answers "OK" to everything."""
    api = FakeAnthropic().start()
    print(api.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        api.stop()


if __name__ == "__main__":
    serve_forever()


# -- helpers for the tests that drive the real CLI -----------------------------------------

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
PINNED_CLAUDE = ROOT / ".cache" / "agents" / "node_modules" / ".bin" / "claude"


def pinned_claude_version() -> str:
    """The Claude Code version the tests pin (tests/agents/package.json): the one place a
    real-CLI test reads it from, so moving the pin is an edit of that file alone."""
    manifest = json.loads((ROOT / "tests" / "agents" / "package.json").read_text())
    return str(manifest["dependencies"]["@anthropic-ai/claude-code"])


def claude_bin() -> str:
    """The pinned Claude Code CLI; a test that needs it fails (never skips) without it."""
    import pytest

    if not PINNED_CLAUDE.exists():
        pytest.fail(
            f"the pinned Claude Code CLI is missing at {PINNED_CLAUDE}: run .ci/run (or scripts/install-test-deps)"
        )
    return str(PINNED_CLAUDE)


def processes_with_env(marker: str) -> list[int]:
    """Pids of live processes whose environment contains ``marker`` (e.g. a config dir)."""
    import os

    needle = marker.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env and state != b"Z":
            found.append(int(entry))
    return found
