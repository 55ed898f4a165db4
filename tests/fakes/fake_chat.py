"""A fake OpenAI Chat Completions API on 127.0.0.1, for driving qwen-code and opencode offline.

Standard library only, one thread per connection (test code, not run-time code):

    with FakeChat() as api:
        api.script(text("hello", chunks=3), call("run_shell_command", {"command": "ls"}), text("done"))
        api.base_url  # http://127.0.0.1:PORT/v1

``POST /v1/chat/completions`` with ``"stream": true`` (the conversation) takes the next
scripted step and streams it as ``chat.completion.chunk`` events (text deltas, or one
tool call), then a usage chunk and ``[DONE]``; with the script exhausted it answers
``default``. A request that does not stream (the agents' side calls: titles, summaries)
gets a plain ``chat.completion`` with the text "ok" and never consumes the script, nor
does a request whose ``match`` refuses it. ``GET /v1/models`` lists ``fake-model``.
Every request is logged in ``api.requests``.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)


@dataclass
class Step:
    """One assistant answer: ``text`` (streamed in ``chunks``, ``delay`` seconds apart) or
    tool ``calls`` [(name, arguments)]."""

    text: str = ""
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    chunks: int = 1
    delay: float = 0.0
    #: After the first chunk, hold the stream open until the client leaves.
    hang: bool = False


def text(value: str, chunks: int = 1, delay: float = 0.0, hang: bool = False) -> Step:
    return Step(text=value, chunks=chunks, delay=delay, hang=hang)


def call(name: str, arguments: dict[str, Any]) -> Step:
    return Step(calls=[(name, arguments)])


@dataclass
class Logged:
    method: str
    path: str
    headers: dict[str, str]
    body: Any

    @property
    def streamed(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("stream"))

    def tool_names(self) -> list[str]:
        tools = (self.body or {}).get("tools") or []
        return [t.get("function", {}).get("name", "") for t in tools if isinstance(t, dict)]

    def tool_results(self) -> list[str]:
        """The content of every ``tool`` message of the request."""
        out = []
        for message in (self.body or {}).get("messages") or []:
            if message.get("role") == "tool":
                content = message.get("content")
                out.append(content if isinstance(content, str) else json.dumps(content))
        return out

    def user_texts(self) -> list[str]:
        out = []
        for message in (self.body or {}).get("messages") or []:
            if message.get("role") != "user":
                continue
            content = message.get("content")
            if isinstance(content, str):
                out.append(content)
            elif isinstance(content, list):
                out.extend(p.get("text", "") for p in content if isinstance(p, dict))
        return out


class FakeChat:
    def __init__(self) -> None:
        self.requests: list[Logged] = []
        self.default: Step = text("ok")
        #: Which streamed requests are the conversation's (default: all).
        self.match: Callable[[Logged], bool] = lambda logged: True
        self._steps: list[Step] = []
        self._lock = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.fake = self  # type: ignore[attr-defined]
        self.port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def script(self, *steps: Step) -> FakeChat:
        with self._lock:
            self._steps.extend(steps)
        return self

    def turns(self) -> list[Logged]:
        """The conversation's requests (streamed and matched), in order."""
        with self._lock:
            return [r for r in self.requests if r.streamed and self.match(r)]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeChat:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _log(self, logged: Logged, take: bool) -> Step | None:
        with self._lock:
            self.requests.append(logged)
            self._lock.notify_all()
            if not take:
                return None
            return self._steps.pop(0) if self._steps else self.default


USAGE = {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        fake: FakeChat = self.server.fake  # type: ignore[attr-defined]
        fake._log(Logged("GET", self.path, dict(self.headers), None), take=False)
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": "fake"}]})
        else:
            self._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def do_POST(self) -> None:
        fake: FakeChat = self.server.fake  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        logged = Logged("POST", self.path, dict(self.headers), body)
        if not self.path.split("?")[0].rstrip("/").endswith("/chat/completions"):
            fake._log(logged, take=False)
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        model = (body or {}).get("model", "fake-model")
        step = fake._log(logged, take=logged.streamed and fake.match(logged))
        if not logged.streamed:
            self._json(200, {
                "id": f"chatcmpl-{next(_ids)}", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": USAGE,
            })
            return
        step = step or fake.default
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            self._stream(step, model, fake)
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def _event(self, data: Any) -> None:
        payload = data if isinstance(data, str) else json.dumps(data)
        self.wfile.write(f"data: {payload}\n\n".encode())
        self.wfile.flush()

    def _stream(self, step: Step, model: str, fake: FakeChat) -> None:
        chunk_id = f"chatcmpl-{next(_ids)}"

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": chunk_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        self._event(chunk({"role": "assistant", "content": ""}))
        if step.calls:
            for index, (name, arguments) in enumerate(step.calls):
                call_id = f"call_{next(_ids)}"
                self._event(chunk({"tool_calls": [{
                    "index": index, "id": call_id, "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }]}))
            self._event(chunk({}, "tool_calls"))
        else:
            size = max(1, -(-len(step.text) // max(1, step.chunks)))
            for n, start in enumerate(range(0, len(step.text), size)):
                if n and step.delay:
                    time.sleep(step.delay)
                self._event(chunk({"content": step.text[start : start + size]}))
                if step.hang:
                    self._hang()
                    return
            self._event(chunk({}, "stop"))
        self._event({"id": chunk_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                     "choices": [], "usage": USAGE})
        self._event("[DONE]")

    def _hang(self) -> None:
        """Until the client closes its end."""
        connection: socket.socket = self.connection
        connection.settimeout(0.05)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if connection.recv(1, socket.MSG_PEEK) == b"":
                    return
            except (TimeoutError, BlockingIOError):
                continue
            except OSError:
                return
