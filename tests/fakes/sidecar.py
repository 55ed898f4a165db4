"""Test helper: a real ``python -m agentproto serve`` process, spoken to in raw frames.

Every line the sidecar writes is parsed and validated against agentproto/schema.json's
``Line`` and against anyagent's reference ``Line`` (compatibility), so every test that
uses this helper also checks the wire shapes.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import jsonschema

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "fixtures" / "mock-scripts"

_SCHEMA = json.loads((ROOT / "agentproto" / "schema.json").read_text())
_REFERENCE = json.loads((ROOT / "fixtures" / "anyagent-schema.json").read_text())


def _validator(schema: dict[str, Any], definition: str) -> jsonschema.Draft7Validator:
    wrapped = {"$ref": f"#/definitions/{definition}", "definitions": schema["definitions"]}
    return jsonschema.Draft7Validator(wrapped)


LINE = _validator(_SCHEMA, "Line")
REFERENCE_LINE = _validator(_REFERENCE, "Line")
#: Every line validated during the test run, counted (the schema test reports it).
VALIDATED = {"lines": 0}


def check_line(obj: Any, reference: bool = True) -> None:
    """Assert ``obj`` is a valid output line of agentproto (and of the reference schema)."""
    errors = sorted(LINE.iter_errors(obj), key=lambda e: e.path)
    assert not errors, f"line does not match agentproto/schema.json: {errors[0].message}\n{json.dumps(obj)[:2000]}"
    if reference:
        errors = sorted(REFERENCE_LINE.iter_errors(obj), key=lambda e: e.path)
        assert not errors, f"line does not match the reference schema: {errors[0].message}\n{json.dumps(obj)[:2000]}"
    VALIDATED["lines"] += 1


def script(name: str) -> str:
    return str(SCRIPTS / f"{name}.json")


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "CODEX_", "AGENTPROTO_"))}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTHONUNBUFFERED", None)  # agentproto must flush by itself
    if extra:
        env.update(extra)
    return env


class Sidecar:
    """``python -m agentproto serve ARGS`` with a reader thread and validated lines."""

    def __init__(
        self,
        args: Iterable[str] = (),
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        validate: bool = True,
        reference: bool = True,
        command: list[str] | None = None,
    ) -> None:
        # ``command``: what runs agentproto (default ``python -m agentproto``), e.g. a wrapper.
        self.proc = subprocess.Popen(
            [*(command or [sys.executable, "-m", "agentproto"]), "serve", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=base_env(env),
            cwd=cwd or str(ROOT),
        )
        self.validate = validate
        self.reference = reference
        self.lines: queue.Queue[Any] = queue.Queue()
        self.seen: list[Any] = []
        self.backlog: list[Any] = []
        self.stderr = b""
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._err = threading.Thread(target=self._read_err, daemon=True)
        self._err.start()
        self.hello = self.next_line(10)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            obj = json.loads(raw)
            self.lines.put(obj)
        self.lines.put(EOFError)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def write_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, cmd: dict[str, Any]) -> int:
        if "id" not in cmd:
            self._next_id += 1
            cmd = {"id": 1000 + self._next_id, **cmd}
        self.write_raw((json.dumps(cmd) + "\n").encode())
        return cmd["id"]

    def next_line(self, timeout: float = 10.0) -> Any:
        if self.backlog:
            return self.backlog.pop(0)
        try:
            obj = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line from the sidecar within {timeout} s; stderr: {self.stderr[-2000:]!r}") from None
        if obj is EOFError:
            self.lines.put(EOFError)
            raise EOFError("sidecar stdout ended")
        if self.validate:
            check_line(obj, self.reference)
        self.seen.append(obj)
        return obj

    def wait_for(self, match: Callable[[Any], bool], timeout: float = 10.0) -> Any:
        """The first line matching ``match``; earlier lines stay readable, in order."""
        deadline = time.monotonic() + timeout
        skipped = []
        try:
            for i, line in enumerate(self.backlog):
                if match(line):
                    del self.backlog[i]
                    return line
            skipped = self.backlog
            self.backlog = []
            while True:
                remaining = deadline - time.monotonic()
                line = self.next_line(max(0.01, remaining))
                if match(line):
                    return line
                skipped.append(line)
                if remaining <= 0:
                    raise AssertionError("timed out")
        finally:
            self.backlog = skipped + self.backlog

    def reply(self, frame_id: int, timeout: float = 10.0) -> Any:
        return self.wait_for(lambda l: l.get("id") == frame_id and ("ok" in l or "error" in l), timeout)

    def ok(self, cmd: dict[str, Any], timeout: float = 10.0) -> Any:
        line = self.reply(self.send(cmd), timeout)
        assert "ok" in line, f"{cmd.get('cmd')} failed: {line}"
        return line["ok"]

    def error(self, cmd: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        line = self.reply(self.send(cmd), timeout)
        assert "error" in line, f"{cmd.get('cmd')} should fail: {line}"
        return line["error"]

    def open(self, agent: Any = "mock", dir: str | None = None, **options: Any) -> str:
        info = self.ok({"cmd": "open", "agent": agent, "dir": dir or str(ROOT), **options}, timeout=60)
        return info["id"]

    def events(self, session: str, until: str = "TurnEnded", timeout: float = 10.0) -> list[dict[str, Any]]:
        """This session's events up to and including the first of kind ``until``."""
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout

        def mine(line: Any) -> bool:
            return "event" in line and line["event"]["session_id"] == session

        while True:
            line = self.wait_for(mine, max(0.01, deadline - time.monotonic()))
            out.append(line["event"])
            if kind_name(line["event"]["kind"]) == until:
                return out

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass

    def drain(self, timeout: float = 15.0) -> list[Any]:
        """Every line until stdout ends."""
        out = list(self.backlog)
        self.backlog = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                out.append(self.next_line(max(0.01, deadline - time.monotonic())))
            except EOFError:
                return out

    def close(self, timeout: float = 15.0) -> int:
        self.close_stdin()
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            # The process is gone, but its stderr is read by a thread: ``self.stderr`` is whole
            # only once that thread has seen the EOF (a test reading it at once saw b"").
            self._err.join(10)

    def __enter__(self) -> "Sidecar":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.proc.poll() is None:
            self.close()


def kill_each(pids: Iterable[int]) -> int:
    """SIGKILL each of ``pids``; one that exited since it was listed (a CLI's short-lived
    child) is passed over. Returns how many were killed."""
    killed = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        killed += 1
    return killed


def kind_name(kind: Any) -> str:
    return kind if isinstance(kind, str) else next(iter(kind))


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [kind_name(e["kind"]) for e in events]
