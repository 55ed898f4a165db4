"""A driver's whole conversation in-process: the real Engine, EngineSession and driver, with
the agent's side played by the test through a scripted line transport.

``ScriptedTransport`` is a ``LineTransport`` (agentproto/loopio/transport.py) plugged in
through ``Engine(transport_factory=...)``: what the driver writes lands in ``written``
(decoded), and ``feed`` delivers agent lines the way the child-process transport does,
the lines of one read one after another in one loop callback. ``Conversation`` opens a
session on it through the runtime's dispatcher (the path every frontend takes) and
records what the app would see, in order: replies, events, the session error, closed.

No private attribute of a driver is touched: a test only writes agent lines, sends
commands, and reads what came out on either side.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

from agentproto.loopio.transport import Spawn
from agentproto.loopio.record import Wire
from agentproto.engine.session import EngineSession
from agentproto.loopio.loop import Loop
from agentproto.engine.runtime import Engine, Scope
from agentproto.core.wire import AgentError, event_kind_name

#: An executable for the agent's path: the scripted transport never runs it.
NEVER_RUN = sys.executable


def encode(line: Any) -> bytes:
    """An agent line: bytes as they are, anything else as its JSON."""
    if isinstance(line, bytes):
        return line
    if isinstance(line, str):
        return line.encode("utf-8", "surrogatepass")
    return json.dumps(line, separators=(",", ":")).encode()


class ScriptedTransport:
    """The agent's end of a driver's line conversation, held by a test."""

    def __init__(self, loop: Loop, spawn: Spawn, record_wire: "Wire | None", auto_exit: bool = True) -> None:
        self.loop = loop
        self.spawn = spawn
        #: Exit as soon as the driver shuts the agent down or kills it (a replay says
        #: when the agent exited instead).
        self.auto_exit = auto_exit
        self.record_wire = record_wire
        self.pid: int | None = None
        self.tree = None  # no process: nothing to reap
        self.raw: list[bytes] = []
        self.written: list[Any] = []
        #: Called with each decoded line the driver writes (an agent that answers).
        self.on_write: Callable[[Any], None] | None = None
        self.stdin_closed = False
        self.paused = False
        self.killed = False
        self.signals: list[int] = []
        self.shutdown_grace: float | None = None
        self.exited = False
        self._held: list[list[bytes]] = []
        self._stderr = ""

    # -- the LineTransport the driver sees
    def write(self, data: bytes) -> None:
        assert data.endswith(b"\n"), data
        if self.stdin_closed:
            return
        for line in data.split(b"\n")[:-1]:
            self.raw.append(line)
            message = json.loads(line)
            self.written.append(message)
            if self.on_write is not None:
                self.on_write(message)

    def write_json(self, obj: Any) -> None:
        self.write(json.dumps(obj, separators=(",", ":")).encode("utf-8", "surrogatepass") + b"\n")

    def close_stdin(self) -> None:
        self.stdin_closed = True

    def shutdown(self, grace: float) -> None:
        self.close_stdin()
        self.shutdown_grace = grace
        if self.auto_exit:
            self.exit("0")  # an agent that ends when its input does

    def kill(self) -> None:
        self.killed = True
        self.close_stdin()
        if self.auto_exit:
            self.exit("SIGKILL")

    def signal(self, signum: int) -> None:
        self.signals.append(signum)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        held, self._held = self._held, []
        for chunk in held:
            self.loop.call_soon(lambda chunk=chunk: self._deliver(chunk))

    @property
    def running(self) -> bool:
        return not self.exited

    @property
    def stderr_tail(self) -> str:
        return self._stderr

    # -- the agent's side, played by the test
    def feed(self, *lines: Any) -> None:
        """One read of the agent's output: these lines, delivered in one loop callback.

        As in the child-process transport, an exception that escapes the driver ends
        that callback (the loop logs it), so the rest of the read is lost unless the
        driver guards each line.
        """
        chunk = [encode(line) for line in lines]
        self.loop.call_soon(lambda: self._deliver(chunk))

    def _deliver(self, chunk: list[bytes]) -> None:
        if self.exited:
            return
        if self.paused:
            self._held.append(chunk)
            return
        for line in chunk:
            self.spawn.on_line(line)

    def exit(self, status: str | None = "0", stderr: str = "") -> None:
        """The agent exits (once), after what was fed before."""
        if self.exited:
            return
        self._stderr = stderr

        def report() -> None:
            if not self.exited:
                self.exited = True
                self.spawn.on_exit(status, stderr)

        self.loop.call_soon(report)

    def sent(self, method: str) -> dict[str, Any]:
        """The last JSON-RPC message the driver wrote with this method."""
        for message in reversed(self.written):
            if isinstance(message, dict) and message.get("method") == method:
                return message
        raise AssertionError(f"the driver wrote no {method}: {[m.get('method') for m in self.written]}")


class Conversation:
    """One session on the real runtime, its agent scripted: what the app sees, in order."""

    def __init__(self, auto_exit: bool = True, loop: Loop | None = None, **runtime_args: Any) -> None:
        self.loop = loop if loop is not None else Loop()
        self.auto_exit = auto_exit
        self.transports: list[ScriptedTransport] = []
        self.runtime = Engine(self.loop, transport_factory=self._factory, **runtime_args)
        self.scope = Scope(self.runtime)
        #: ("reply", command, ok, error) / ("event", event) / ("error", AgentError) / ("closed",)
        self.out: list[tuple[Any, ...]] = []
        self.session_id: str | None = None
        #: Fault injection: the app's sink raises on the events this picks (a bug
        #: anywhere while a driver handles one agent line).
        self.raise_on: Callable[[dict[str, Any]], bool] | None = None

    def _factory(self, loop: Loop, spawn: Spawn, record_wire: "Wire | None") -> ScriptedTransport:
        transport = ScriptedTransport(loop, spawn, record_wire, self.auto_exit)
        self.transports.append(transport)
        return transport

    @property
    def transport(self) -> ScriptedTransport:
        assert self.transports, "no agent was spawned"
        return self.transports[-1]

    # -- the EventSink
    def event(self, session: EngineSession, event: dict[str, Any]) -> None:
        session.delivered(1)
        if self.raise_on is not None and self.raise_on(event):
            raise RuntimeError("injected: the sink failed")
        self.out.append(("event", event))

    def session_error(self, session: EngineSession, error: AgentError) -> None:
        self.out.append(("error", error))

    def session_closed(self, session: EngineSession) -> None:
        self.out.append(("closed",))

    # -- the app's side
    def command(self, name: str, **args: Any) -> None:
        """Send one command (session commands name this session unless told)."""
        if name not in ("open", "probe", "generate", "discover", "plan_usage") and "session" not in args:
            args["session"] = self.session_id

        def done(value: Any, error: AgentError | None) -> None:
            if name == "open" and error is None:
                self.session_id = value["id"]
            self.out.append(("reply", name, value, error))

        self.runtime.execute(name, args, self, self.scope, done)
        self.settle()

    def open(self, agent: Any, dir: str = "/", **args: Any) -> None:
        self.command("open", agent=agent, dir=dir, **args)

    def feed(self, *lines: Any) -> None:
        """One read of agent output, then everything it sets off."""
        self.transport.feed(*lines)
        self.settle()

    def settle(self) -> None:
        """Run every callback that is ready (and those they schedule), then return."""
        self.loop.call_soon(self.loop.stop)
        self.loop.run()

    def run_until(self, done: Callable[[], bool], timeout: float = 5.0) -> None:
        deadline = self.loop.time() + timeout
        wake = self.loop.call_later(timeout, lambda: None)  # the loop looks again by then
        self.loop.run(until=lambda: done() or self.loop.time() > deadline)
        wake.cancel()
        assert done(), "timed out"

    def wait(self, seconds: float) -> None:
        """Let ``seconds`` pass on the loop (its timers run meanwhile)."""
        until = self.loop.time() + seconds
        self.loop.call_later(seconds, lambda: None)
        self.loop.run(until=lambda: self.loop.time() >= until)

    # -- what came out
    def replies(self, name: str | None = None) -> list[tuple[Any, AgentError | None]]:
        return [(o[2], o[3]) for o in self.out if o[0] == "reply" and (name is None or o[1] == name)]

    def reply(self, name: str) -> Any:
        """The ok value of the last reply to ``name`` (failing on an error reply)."""
        replies = self.replies(name)
        assert replies, f"no reply to {name}"
        value, error = replies[-1]
        assert error is None, error
        return value

    def events(self, name: str | None = None) -> list[Any]:
        """Event kinds in order (the bodies of ``name`` if given)."""
        kinds = [o[1]["kind"] for o in self.out if o[0] == "event"]
        if name is None:
            return kinds
        return [k[name] if isinstance(k, dict) else k for k in kinds if event_kind_name(k) == name]

    def names(self) -> list[str]:
        return [event_kind_name(k) for k in self.events()]

    def diagnostics(self) -> list[str]:
        return [d["message"] for d in self.events("Diagnostic")]

    def errors(self) -> list[AgentError]:
        return [o[1] for o in self.out if o[0] == "error"]

    def close(self) -> None:
        """Close the session (if any) and the loop."""
        self.raise_on = None
        if self.session_id is not None and not any(o[0] == "closed" for o in self.out):
            self.command("close")
            self.run_until(lambda: any(o[0] == "closed" for o in self.out))
        self.runtime.close_all()
        self.settle()
        self.loop.close()
