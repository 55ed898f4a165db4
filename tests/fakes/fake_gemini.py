"""A fake Gemini API (generativelanguage v1beta) on 127.0.0.1, for driving the real
``gemini --acp`` offline (``GOOGLE_GEMINI_BASE_URL`` + ``GEMINI_API_KEY``).

Standard library only, one thread per connection (test code, not run-time code):

    with FakeGemini() as api:
        api.script(text("hello"), call("run_shell_command", {"command": "touch x"}), text("done"))
        env = api.cli_env(home)

``POST /v1beta/models/M:streamGenerateContent?alt=sse`` (the conversation) takes the next
scripted *step* (a ``Step``: the parts of one model answer, streamed as SSE chunks, or a
``Hang``); with the script exhausted it answers ``default``. ``:generateContent`` (the CLI's
side calls: model routing, next-speaker checks, titles) gets a JSON answer shaped by the
request's response schema and never consumes the script. ``:countTokens`` counts words.
Every request is logged in ``api.requests``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Step:
    """One model answer: Gemini ``parts`` ({"text"} or {"functionCall"}), streamed."""

    parts: list[dict[str, Any]] = field(default_factory=list)
    #: Split each text into this many SSE chunks, ``delay`` seconds apart.
    chunks: int = 1
    delay: float = 0.0
    finish: str = "STOP"


@dataclass
class Hang:
    """Send the first chunk of ``text`` then hold the stream open until the client leaves
    (or ``api.release()``)."""

    text: str = "thinking"


def text(value: str, chunks: int = 1, delay: float = 0.0) -> Step:
    return Step([{"text": value}], chunks=chunks, delay=delay)


def call(name: str, args: dict[str, Any]) -> Step:
    return Step([{"functionCall": {"name": name, "args": args}}])


@dataclass
class Logged:
    method: str
    path: str
    headers: dict[str, str]
    body: Any

    @property
    def action(self) -> str:
        """generateContent, streamGenerateContent, countTokens, ..."""
        return self.path.split("?", 1)[0].rsplit(":", 1)[-1]

    def tool_names(self) -> list[str]:
        names: list[str] = []
        for tool in (self.body or {}).get("tools") or []:
            for decl in tool.get("functionDeclarations") or []:
                names.append(decl.get("name", ""))
        return names

    def function_responses(self) -> list[dict[str, Any]]:
        out = []
        for content in (self.body or {}).get("contents") or []:
            for part in content.get("parts") or []:
                if "functionResponse" in part:
                    out.append(part["functionResponse"])
        return out

    def user_texts(self) -> list[str]:
        out = []
        for content in (self.body or {}).get("contents") or []:
            if content.get("role") == "user":
                out.extend(p["text"] for p in content.get("parts") or [] if isinstance(p.get("text"), str))
        return out


def _schema_value(schema: Any, key: str = "") -> Any:
    """A value fitting a response schema, choosing the quiet option where it matters."""
    if not isinstance(schema, dict):
        return "ok"
    kind = str(schema.get("type", "object")).lower()
    if "enum" in schema:
        values = list(schema["enum"])
        for quiet in ("user", "flash"):  # next_speaker: the user; model routing: flash
            if quiet in values:
                return quiet
        return values[0]
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: _schema_value(sub, name) for name, sub in props.items()}
    if kind == "array":
        return []
    if kind == "boolean":
        return False
    if kind in ("integer", "number"):
        return 0
    return "ok"


class FakeGemini:
    def __init__(self) -> None:
        self.requests: list[Logged] = []
        self.default: Step | Hang = text("OK")
        self._steps: list[Step | Hang] = []
        self._lock = threading.Condition()
        self._released = False
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.fake = self  # type: ignore[attr-defined]
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def script(self, *steps: Step | Hang) -> FakeGemini:
        with self._lock:
            self._steps.extend(steps)
        return self

    def release(self) -> None:
        with self._lock:
            self._released = True
            self._lock.notify_all()

    def turns(self) -> list[Logged]:
        """The conversation's requests (streamGenerateContent), in order."""
        with self._lock:
            return [r for r in self.requests if r.action == "streamGenerateContent"]

    def wait_turns(self, count: int, timeout: float = 30.0) -> list[Logged]:
        deadline = time.monotonic() + timeout
        with self._lock:
            while len([r for r in self.requests if r.action == "streamGenerateContent"]) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"fake Gemini: fewer than {count} turns")
                self._lock.wait(left)
        return self.turns()

    def cli_env(self, home: str) -> dict[str, str]:
        return {
            "HOME": home,
            "XDG_CONFIG_HOME": f"{home}/.config",
            "GOOGLE_GEMINI_BASE_URL": self.url,
            "GEMINI_API_KEY": "fake-gemini-key",
            "GOOGLE_API_KEY": "",
            "GEMINI_CLI_NO_RELAUNCH": "true",
        }

    def close(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeGemini:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take(self, logged: Logged) -> Step | Hang:
        with self._lock:
            self.requests.append(logged)
            self._lock.notify_all()
            return self._steps.pop(0) if self._steps else self.default

    def _log(self, logged: Logged) -> None:
        with self._lock:
            self.requests.append(logged)
            self._lock.notify_all()

    def _hang(self, connection: socket.socket) -> None:
        connection.settimeout(0.05)
        while True:
            with self._lock:
                if self._released:
                    return
            try:
                if connection.recv(1, socket.MSG_PEEK) == b"":
                    return
            except (TimeoutError, BlockingIOError):
                continue
            except OSError:
                return


USAGE = {"promptTokenCount": 12, "candidatesTokenCount": 7, "totalTokenCount": 19}


def _chunk(parts: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "usageMetadata": USAGE, "modelVersion": "gemini-fake"}


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
        fake: FakeGemini = self.server.fake  # type: ignore[attr-defined]
        fake._log(Logged("GET", self.path, dict(self.headers), None))
        self._json(404, {"error": {"code": 404, "message": "not found", "status": "NOT_FOUND"}})

    def do_POST(self) -> None:
        fake: FakeGemini = self.server.fake  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        logged = Logged("POST", self.path, dict(self.headers), body)
        if logged.action == "countTokens":
            fake._log(logged)
            words = len(json.dumps(body).split())
            self._json(200, {"totalTokens": words})
            return
        if logged.action == "generateContent":
            fake._log(logged)
            config = (body or {}).get("generationConfig") or {}
            schema = config.get("responseJsonSchema") or config.get("responseSchema")
            answer = json.dumps(_schema_value(schema)) if schema else "ok"
            self._json(200, _chunk([{"text": answer}], "STOP"))
            return
        if logged.action != "streamGenerateContent":
            fake._log(logged)
            self._json(404, {"error": {"code": 404, "message": f"no route {self.path}", "status": "NOT_FOUND"}})
            return
        step = fake._take(logged)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            if isinstance(step, Hang):
                self._event(_chunk([{"text": step.text}], None))
                fake._hang(self.connection)
            else:
                self._stream(step)
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def _event(self, data: dict[str, Any]) -> None:
        self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def _stream(self, step: Step) -> None:
        chunks: list[list[dict[str, Any]]] = []
        for part in step.parts:
            value = part.get("text")
            if isinstance(value, str) and step.chunks > 1:
                size = max(1, -(-len(value) // step.chunks))
                chunks.extend([{"text": value[i : i + size]}] for i in range(0, len(value), size))
            else:
                chunks.append([part])
        for index, parts in enumerate(chunks):
            if index and step.delay:
                time.sleep(step.delay)
            self._event(_chunk(parts, step.finish if index == len(chunks) - 1 else None))
