"""A fake OpenAI Responses API on 127.0.0.1, for driving the real ``codex`` CLI offline.

Standard library only. The server answers ``POST /v1/responses`` (and ``/responses``) with
the server-sent events the Responses API streams, one scripted *step* per request:

    api = FakeOpenAI()             # binds 127.0.0.1 on a free port, serves on a thread
    api.script(text("hello"), exec_command("touch f", escalated=True), text("done"))
    ... codex posts; api.requests holds every request body (parsed JSON) in order
    api.close()

A step is a list of ``Event`` (an SSE event name and its payload, or a pause) or an
``Error`` (an HTTP status with a JSON body), or a callable ``step(request) -> step``
computed from the request. With the script exhausted, every request gets ``text("ok")``.
``Hang()`` holds the response open without a byte until the client goes away or
``api.release()`` is called, which is how an unreachable-but-accepting provider looks.

It is also the ChatGPT backend a ChatGPT login talks to (``chatgpt_base_url``, see
``CodexWorld.login_chatgpt``): ``GET /backend-api/wham/usage`` answers ``api.usage`` (the
login's rate limits, in the backend's snake_case shape) and
``GET /backend-api/wham/rate-limit-reset-credits`` answers ``api.reset_credits``; None (the
default) is a 404, an ``Error`` its status, a ``Hang`` no answer. Every other backend path
is a 404.

``python -m tests.fake_openai`` serves until interrupted, printing its base URL.
"""

from __future__ import annotations

import base64
import http.server
import itertools
import json
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Event:
    name: str
    data: dict[str, Any]


@dataclass
class Pause:
    seconds: float


@dataclass
class Error:
    status: int
    message: str = "error"
    code: str | None = None

    def body(self) -> dict[str, Any]:
        kind = {400: "invalid_request_error", 401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(
            self.status, "server_error"
        )
        return {"error": {"message": self.message, "type": kind, "param": None, "code": self.code or kind}}


@dataclass
class Hang:
    """Accept the request and never answer (until released or the client disconnects)."""

    headers_first: bool = False


Step = list[Event | Pause] | Error | Hang | Callable[[dict[str, Any]], Any]

_ids = itertools.count(1)


def _next_id(prefix: str) -> str:
    return f"{prefix}_{next(_ids)}"


def usage(input_tokens: int = 100, output_tokens: int = 10, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


def _envelope(items: list[list[Event | Pause]], usage_: dict[str, Any] | None = None) -> list[Event | Pause]:
    """response.created, the items' events with their output indexes, response.completed."""
    resp_id = _next_id("resp")
    events: list[Event | Pause] = [
        Event("response.created", {"type": "response.created", "response": {"id": resp_id, "status": "in_progress"}})
    ]
    for index, item_events in enumerate(items):
        for ev in item_events:
            if isinstance(ev, Event) and "output_index" in ev.data:
                ev.data["output_index"] = index
            events.append(ev)
    events.append(
        Event(
            "response.completed",
            {
                "type": "response.completed",
                "response": {"id": resp_id, "status": "completed", "usage": usage_ or usage()},
            },
        )
    )
    return events


def message_item(text: str, chunks: int = 1, delay: float = 0.0) -> list[Event | Pause]:
    """An assistant message streamed as ``chunks`` text deltas, ``delay`` seconds apart."""
    item_id = _next_id("msg")
    added = {"type": "message", "id": item_id, "role": "assistant", "status": "in_progress", "content": []}
    done = {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    events: list[Event | Pause] = [
        Event("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": added})
    ]
    size = max(1, -(-len(text) // max(1, chunks)))
    for start in range(0, len(text), size):
        if delay and start:
            events.append(Pause(delay))
        events.append(
            Event(
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "item_id": item_id,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": text[start : start + size],
                },
            )
        )
    events.append(Event("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": done}))
    return events


def reasoning_item(summary: str) -> list[Event | Pause]:
    item_id = _next_id("rs")
    item = {"type": "reasoning", "id": item_id, "summary": [{"type": "summary_text", "text": summary}]}
    return [
        Event(
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": 0, "item": {**item, "summary": []}},
        ),
        Event(
            "response.reasoning_summary_part.added",
            {
                "type": "response.reasoning_summary_part.added",
                "item_id": item_id,
                "output_index": 0,
                "summary_index": 0,
                "part": {"type": "summary_text", "text": ""},
            },
        ),
        Event(
            "response.reasoning_summary_text.delta",
            {
                "type": "response.reasoning_summary_text.delta",
                "item_id": item_id,
                "output_index": 0,
                "summary_index": 0,
                "delta": summary,
            },
        ),
        Event("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
    ]


def function_call_item(name: str, arguments: dict[str, Any], namespace: str | None = None) -> list[Event | Pause]:
    item = {
        "type": "function_call",
        "id": _next_id("fc"),
        "call_id": _next_id("call"),
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }
    if namespace is not None:
        # Codex offers an MCP server's tools as a namespace ``mcp__<server>`` of functions.
        item["namespace"] = namespace
    return [
        Event("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": item}),
        Event("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
    ]


def custom_tool_call_item(name: str, payload: str) -> list[Event | Pause]:
    item = {
        "type": "custom_tool_call",
        "id": _next_id("ctc"),
        "call_id": _next_id("call"),
        "name": name,
        "input": payload,
        "status": "completed",
    }
    return [
        Event("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": item}),
        Event("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
    ]


# -- steps ------------------------------------------------------------------------------


def text(message: str, chunks: int = 1, delay: float = 0.0, reasoning: str | None = None) -> list[Event | Pause]:
    """One response carrying an assistant message (optionally after a reasoning summary)."""
    items = [message_item(message, chunks, delay)]
    if reasoning is not None:
        items.insert(0, reasoning_item(reasoning))
    return _envelope(items)


def slow_text(message: str, chunks: int, delay: float) -> list[Event | Pause]:
    return text(message, chunks=chunks, delay=delay)


def exec_command(
    cmd: str, escalated: bool = False, justification: str = "needs to write outside the sandbox", **extra: Any
) -> list[Event | Pause]:
    """A response asking Codex to run ``cmd`` through its ``exec_command`` tool."""
    args: dict[str, Any] = {"cmd": cmd, "yield_time_ms": 10000, **extra}
    if escalated:
        args["sandbox_permissions"] = "require_escalated"
        args["justification"] = justification
    return _envelope([function_call_item("exec_command", args)])


def apply_patch(patch: str, freeform: bool = True) -> list[Event | Pause]:
    """A response asking Codex to apply ``patch`` (the ``*** Begin Patch`` format)."""
    if freeform:
        return _envelope([custom_tool_call_item("apply_patch", patch)])
    return _envelope([function_call_item("apply_patch", {"input": patch})])


def add_file_patch(path: str, content: str) -> str:
    lines = "".join(f"+{line}\n" for line in content.splitlines())
    return f"*** Begin Patch\n*** Add File: {path}\n{lines}*** End Patch\n"


def mcp_call(server: str, tool: str, arguments: dict[str, Any]) -> list[Event | Pause]:
    """A response calling ``tool`` of the MCP server ``server`` (Codex's namespace form)."""
    return _envelope([function_call_item(tool, arguments, namespace=f"mcp__{server}")])


def update_plan(steps: list[tuple[str, str]]) -> list[Event | Pause]:
    return _envelope(
        [function_call_item("update_plan", {"plan": [{"step": s, "status": st} for s, st in steps]})]
    )


# -- requests ---------------------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    time: float = field(default_factory=time.monotonic)

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None

    def input_texts(self) -> list[str]:
        """Every text of the request's ``input`` items, in order (history included)."""
        out: list[str] = []
        if not isinstance(self.body, dict):
            return out
        for item in self.body.get("input") or []:
            content = item.get("content") if isinstance(item, dict) else None
            if isinstance(content, str):
                out.append(content)
            elif isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        out.append(part["text"])
            if isinstance(item, dict) and isinstance(item.get("output"), str):
                out.append(item["output"])
        return out

    def user_texts(self) -> list[str]:
        out: list[str] = []
        for item in (self.body or {}).get("input") or []:
            if isinstance(item, dict) and item.get("role") == "user":
                for part in item.get("content") or []:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        out.append(part["text"])
        return out

    def function_outputs(self) -> dict[str, Any]:
        """call_id -> the ``output`` of each function_call_output item of the request."""
        out: dict[str, Any] = {}
        for item in (self.body or {}).get("input") or []:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                out[str(item.get("call_id"))] = item.get("output")
        return out

    def function_calls(self) -> list[dict[str, Any]]:
        """The function_call items of the request's history."""
        items = (self.body or {}).get("input") or []
        return [i for i in items if isinstance(i, dict) and i.get("type") == "function_call"]

    def namespaces(self) -> dict[str, list[dict[str, Any]]]:
        """The tool namespaces offered to the model (``mcp__<server>`` -> its functions)."""
        out = {}
        for tool in (self.body or {}).get("tools") or []:
            if isinstance(tool, dict) and tool.get("type") == "namespace":
                out[str(tool.get("name"))] = list(tool.get("tools") or [])
        return out

    def tool_names(self) -> list[str]:
        names = []
        for tool in (self.body or {}).get("tools") or []:
            if isinstance(tool, dict):
                names.append(tool.get("name") or tool.get("type") or "")
        return names


class FakeOpenAI:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self._lock = threading.Condition()
        self._steps: list[Step] = []
        self._released = False
        self.requests: list[Request] = []
        self.default: Step = lambda request: text("ok")
        #: The ChatGPT backend's answers (see the module's docstring).
        self.usage: dict[str, Any] | Error | Hang | None = None
        self.reset_credits: dict[str, Any] | Error | Hang | None = None
        server = http.server.ThreadingHTTPServer((host, 0), _Handler)
        server.daemon_threads = True
        server.fake = self  # type: ignore[attr-defined]
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def chatgpt_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/backend-api/"

    def backend_requests(self) -> list[Request]:
        """The ChatGPT backend's requests (``/backend-api/...``), in order."""
        with self._lock:
            return [r for r in self.requests if r.path.startswith("/backend-api/")]

    def script(self, *steps: Step) -> FakeOpenAI:
        with self._lock:
            self._steps.extend(steps)
        return self

    def release(self) -> None:
        """End every ``Hang`` in progress (their clients see the connection close)."""
        with self._lock:
            self._released = True
            self._lock.notify_all()

    def response_requests(self) -> list[Request]:
        return [r for r in self.requests if r.method == "POST" and r.path.rstrip("/").endswith("/responses")]

    def wait_requests(self, count: int, timeout: float = 10.0) -> list[Request]:
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self.response_requests()) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"fake API: {len(self.response_requests())} requests, expected {count}")
                self._lock.wait(left)
        return self.response_requests()

    def close(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeOpenAI:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- called on handler threads
    def _record(self, request: Request) -> Step:
        with self._lock:
            self.requests.append(request)
            self._lock.notify_all()
            step = self._steps.pop(0) if self._steps else self.default
        while callable(step):
            step = step(request.body if isinstance(request.body, dict) else {})
        return step

    def _hang(self, connection: socket.socket) -> None:
        """Wait until released or until the client closes its end."""
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


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-openai/1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.headers.get("Content-Encoding") == "zstd":
            return {"_raw": raw.hex()}
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return {"_raw": raw.decode("utf-8", "replace")}

    def _json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        fake: FakeOpenAI = self.server.fake  # type: ignore[attr-defined]
        with fake._lock:
            fake.requests.append(Request("GET", self.path, dict(self.headers), None))
        path = self.path.split("?")[0].rstrip("/")
        backend = {"/backend-api/wham/usage": fake.usage, "/backend-api/wham/rate-limit-reset-credits": fake.reset_credits}
        if path in backend:
            answer = backend[path]
            if isinstance(answer, Hang):
                fake._hang(self.connection)
                self.close_connection = True
            elif isinstance(answer, Error):
                self._json(answer.status, {"detail": answer.message})
            elif answer is None:
                self._json(404, {"detail": "not found"})
            else:
                self._json(200, answer)
        elif path.endswith("/models"):
            self._json(200, {"object": "list", "data": [], "models": []})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_HEAD(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        fake: FakeOpenAI = self.server.fake  # type: ignore[attr-defined]
        body = self._body()
        if not self.path.split("?")[0].rstrip("/").endswith("/responses"):
            with fake._lock:
                fake.requests.append(Request("POST", self.path, dict(self.headers), body))
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        step = fake._record(Request("POST", self.path, dict(self.headers), body))
        if isinstance(step, Error):
            self._json(step.status, step.body())
            return
        if isinstance(step, Hang):
            if step.headers_first:
                self._start_stream()
            fake._hang(self.connection)
            self.close_connection = True
            return
        self._start_stream()
        try:
            for ev in step:
                if isinstance(ev, Pause):
                    self.wfile.flush()
                    time.sleep(ev.seconds)
                    continue
                self.wfile.write(f"event: {ev.name}\ndata: {json.dumps(ev.data)}\n\n".encode())
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()


# -- Codex configuration for the fake -------------------------------------------------------


def codex_config(base_url: str, model: str = "fake-model", extra: str = "") -> str:
    """A ``config.toml`` pointing Codex at the fake provider, with no retries."""
    return (
        f'model = "{model}"\n'
        'model_provider = "fake"\n'
        "[model_providers.fake]\n"
        'name = "Fake OpenAI"\n'
        f'base_url = "{base_url}"\n'
        'env_key = "FAKE_OPENAI_API_KEY"\n'
        'wire_api = "responses"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
        "stream_idle_timeout_ms = 300000\n"
        f"{extra}"
    )


# -- a whole offline Codex world for the tests ---------------------------------------------


def _jwt(claims: dict[str, Any]) -> str:
    """An unsigned JWT carrying ``claims`` (Codex reads its claims, it checks no signature)."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}.{part({'fake': True})}"

CODEX_BIN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".cache", "agents", "node_modules", ".bin", "codex")


def pinned_codex() -> str:
    """The pinned real ``codex`` CLI; a clear failure (never a skip) when it is missing."""
    if not os.access(CODEX_BIN, os.X_OK):
        raise AssertionError(f"the pinned codex CLI is not installed at {CODEX_BIN}: run .ci/run (or scripts/install-test-deps)")
    return CODEX_BIN


class CodexWorld:
    """A fake API, a temporary HOME and CODEX_HOME naming it, a work dir and an env marker.

    ``env`` is what a sidecar (or ``open``'s ``env``) needs: the pinned binary, HOME,
    the fake key and a unique marker that every process of the world inherits, so a test
    can find (and count) them in /proc.
    """

    def __init__(self, root: str, extra_config: str = "", model: str = "fake-model") -> None:
        self.api = FakeOpenAI()
        self.home = os.path.join(root, "home")
        self.codex_home = os.path.join(self.home, ".codex")
        self.work = os.path.join(root, "work")
        self.outside = os.path.join(root, "outside")
        for path in (self.codex_home, self.work, self.outside):
            os.makedirs(path, exist_ok=True)
        self.write_config(extra_config, model)
        self.marker = f"codex-test-{uuid.uuid4().hex}"
        self.env = {
            "AGENTPROTO_CODEX_BIN": pinned_codex(),
            "HOME": self.home,
            "CODEX_HOME": self.codex_home,
            "FAKE_OPENAI_API_KEY": "sk-fake",
            "AGENTPROTO_TEST_MARKER": self.marker,
        }

    def write_config(self, extra: str = "", model: str = "fake-model") -> None:
        with open(os.path.join(self.codex_home, "config.toml"), "w", encoding="utf-8") as f:
            f.write(codex_config(self.api.base_url, model=model, extra=extra))

    def login_chatgpt(self, plan: str = "pro", account_id: str = "acct-test") -> None:
        """Log Codex in with ChatGPT, against the fake's backend: an ``auth.json`` (0600)
        holding unsigned JWTs with the claims Codex reads (never sent anywhere but the
        fake), and ``chatgpt_base_url`` naming the fake."""
        now = int(time.time())
        claims = {"chatgpt_plan_type": plan, "chatgpt_account_id": account_id, "chatgpt_user_id": "user-test"}
        token = {"exp": now + 30 * 86400, "iat": now, "https://api.openai.com/auth": claims}
        auth = {
            "OPENAI_API_KEY": None,
            "tokens": {
                "id_token": _jwt({**token, "email": "someone@example.com"}),
                "access_token": _jwt(token),
                "refresh_token": "fake-refresh-token",
                "account_id": account_id,
            },
            "last_refresh": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        }
        path = os.path.join(self.codex_home, "auth.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(auth, f)
        with open(os.path.join(self.codex_home, "config.toml"), "w", encoding="utf-8") as f:
            f.write(f'chatgpt_base_url = "{self.api.chatgpt_base_url}"\n' + codex_config(self.api.base_url))

    def processes(self) -> list[int]:
        """Pids of live (non-zombie) processes carrying this world's marker."""
        found = []
        needle = f"AGENTPROTO_TEST_MARKER={self.marker}".encode()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle not in f.read().split(b"\0"):
                        continue
                with open(f"/proc/{entry}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except OSError:
                continue
            if state != b"Z":
                found.append(int(entry))
        return found

    def codex_processes(self) -> list[int]:
        """Marked processes that are Codex (the npm launcher or the native binary)."""
        out = []
        for pid in self.processes():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if b"codex" in cmdline and b"agentproto" not in cmdline.split(b"\0")[0]:
                out.append(pid)
        return out

    def describe(self, pids: list[int]) -> list[str]:
        out = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    out.append(f"{pid}: " + f.read().replace(b"\0", b" ").decode("utf-8", "replace")[:200])
            except OSError:
                out.append(f"{pid}: gone")
        return out

    def wait_no_codex(self, timeout: float = 10.0) -> list[int]:
        deadline = time.monotonic() + timeout
        while True:
            left = self.codex_processes()
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)

    def close(self) -> None:
        for pid in self.codex_processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.api.close()


if __name__ == "__main__":  # pragma: no cover - manual use
    api = FakeOpenAI()
    print(api.base_url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        api.close()
