"""Test helpers for the ops framing and its transports: real processes, schema-checked lines."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterable

import jsonschema
from sidecar import ROOT, base_env, script  # noqa: F401  (re-exported)

SCHEMA = json.loads((ROOT / "agentproto" / "schema.json").read_text())


def validator(definition: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator({"$ref": f"#/definitions/{definition}", "definitions": SCHEMA["definitions"]})


OPS_LINE = validator("OpsLine")
OPS_REQUEST = validator("OpsRequest")
OPS_VERSION = validator("OpsVersion")


def check_ops_line(obj: Any) -> None:
    errors = sorted(OPS_LINE.iter_errors(obj), key=lambda e: list(e.path))
    assert not errors, f"ops line does not match schema.json OpsLine: {errors[0].message}\n{json.dumps(obj)[:1500]}"


def check_ops_request(obj: Any) -> None:
    errors = list(OPS_REQUEST.iter_errors(obj))
    assert not errors, f"request does not match OpsRequest: {errors[0].message}\n{json.dumps(obj)[:500]}"


def kind_name(kind: Any) -> str:
    return kind if isinstance(kind, str) else next(iter(kind))


def write_script(tmp_path: Path, name: str, turns: list[Any], **fields: Any) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"turns": turns, **fields}))
    return str(path)


#: A turn that streams one word, then waits (so the test can cancel it), then ends.
SLOW_TURN = [
    {"Emit": {"TextDelta": {"message_id": "m1", "text": "thinking"}}},
    {"Sleep": 20000},
    {"End": {"Completed": {"source": "Protocol"}}},
]


class Proc:
    """``python -m agentproto ARGS`` with stdout lines read by a thread."""

    def __init__(self, args: Iterable[str], stdin: Any = subprocess.PIPE, env: dict[str, str] | None = None,
                 command: list[str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [*(command or [sys.executable, "-m", "agentproto"]), *args],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=base_env(env),
            cwd=str(ROOT),
        )
        self.lines: queue.Queue[Any] = queue.Queue()
        self.stderr_lines: queue.Queue[str] = queue.Queue()
        self.stderr = ""
        threading.Thread(target=self._read, daemon=True).start()
        self._err_reader = threading.Thread(target=self._read_err, daemon=True)
        self._err_reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(raw)
        self.lines.put(EOFError)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            text = raw.decode("utf-8", "replace")
            self.stderr += text
            self.stderr_lines.put(text)

    def banner(self, pattern: str, timeout: float = 15.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.stderr_lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no banner matching {pattern!r}; stderr: {self.stderr!r}") from None
            match = re.search(pattern, line)
            if match:
                return match

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, obj: Any) -> None:
        self.write((json.dumps(obj) + "\n").encode())

    def raw_line(self, timeout: float = 15.0) -> bytes:
        try:
            raw = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout} s; stderr: {self.stderr[-2000:]!r}") from None
        if raw is EOFError:
            self.lines.put(EOFError)
            raise EOFError("stdout ended")
        return raw

    def line(self, timeout: float = 15.0) -> Any:
        return json.loads(self.raw_line(timeout))

    def ops(self, timeout: float = 15.0) -> list[dict[str, Any]]:
        """The lines of one request, up to and including its ``done``; each schema-checked."""
        out = []
        while True:
            obj = self.line(timeout)
            check_ops_line(obj)
            out.append(obj)
            if obj["kind"] == "done":
                return out

    def request(self, obj: Any, timeout: float = 15.0) -> list[dict[str, Any]]:
        self.send(obj)
        return self.ops(timeout)

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass

    def rest(self, timeout: float = 15.0) -> list[bytes]:
        out = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                out.append(self.raw_line(max(0.01, deadline - time.monotonic())))
            except EOFError:
                return out

    def wait(self, timeout: float = 15.0) -> int:
        """The exit status, once stderr is read to its end too (or ``timeout`` is up): the
        process can exit before the reading thread took its last lines."""
        deadline = time.monotonic() + timeout
        status = self.proc.wait(timeout)
        self._err_reader.join(max(0.0, deadline - time.monotonic()))
        return status

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


def closing(request: bytes) -> bytes:
    """A raw HTTP/1.1 request that asks the server to close after answering (HTTP/1.1
    keeps the connection by default), so a test can read the answer to EOF."""
    line, sep, rest = request.partition(b"\r\n")
    return line + sep + b"Connection: close\r\n" + rest if sep else request


def single_shot(body: bytes | str, *args: str, via_agent: bool = False) -> tuple[int, list[dict[str, Any]]]:
    """``agentproto --single-shot ARGS`` (or ``agentproto agent --single-shot ARGS``)."""
    data = body.encode() if isinstance(body, str) else body
    command = ["agent", "--single-shot", *args] if via_agent else ["--single-shot", *args]
    done = subprocess.run(
        [sys.executable, "-m", "agentproto", *command],
        input=data,
        capture_output=True,
        env=base_env(),
        cwd=str(ROOT),
        timeout=60,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    for line in lines:
        check_ops_line(line)
    return done.returncode, lines


def result_of(lines: list[dict[str, Any]]) -> dict[str, Any]:
    results = [line for line in lines if line["kind"] == "result"]
    assert len(results) == 1, lines
    return results[0]


def done_of(lines: list[dict[str, Any]]) -> int:
    assert lines[-1]["kind"] == "done", lines
    assert sum(1 for line in lines if line["kind"] == "done") == 1
    return lines[-1]["exit_code"]


def events_of(lines: list[dict[str, Any]]) -> list[str]:
    return [kind_name(line["event"]["kind"]) for line in lines if line["kind"] == "event"]


def text_of(lines: list[dict[str, Any]]) -> str:
    return "".join(
        line["event"]["kind"]["TextDelta"]["text"]
        for line in lines
        if line["kind"] == "event" and isinstance(line["event"]["kind"], dict) and "TextDelta" in line["event"]["kind"]
    )


def no_process_left(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
