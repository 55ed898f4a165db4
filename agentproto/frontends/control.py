"""The control socket (``serve --control PATH``, ``AGENTPROTO_CONTROL``) and the ``inspect`` op.

A running sidecar answers ``inspect`` on a Unix socket of its own, so another process
(``python -m agentproto inspect --sock PATH``, or any framing's ``inspect`` op with
``sock``) can see its live sessions and what they cost. The socket speaks the ops
framing, one request per line, and answers only ``inspect``: anything else is a protocol
error (done 2) and nothing else of the sidecar is reachable through it.

Rules of this file:
- The socket is created 0600 (listen.bind_unix), replaces only a stale socket, and is
  removed at exit only if it is still ours. Each connection is bounded like any ops
  connection (its lines, its output), and a client that never reads costs only itself.
- Asking another sidecar never blocks the loop: a non-blocking connect and exchange on
  the loop, with a deadline (``ASK_TIMEOUT``); a dead or missing socket is an error reply
  naming the path, never a hang.
- ``sock`` is not followed through a control socket (no proxy chains): the control
  socket answers about its own process.
- The client asks only a socket served by its own user (or root), by the server's
  credentials (SO_PEERCRED, where the platform has it): another user's socket planted at
  the path gets no request and is an error naming its uid.
"""

from __future__ import annotations

import errno
import os
import socket

from agentproto.core.errors import AgentError, Kind, error_from_body, log
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.core.wire import TooLong, decode_json_line, encode
from agentproto.loopio import private
from agentproto.loopio.sockets import Accepted, Exchange, UnixListener
from agentproto.loopio.streams import LineReader

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.core.inspect_types import InspectView
    from agentproto.engine.runtime import Engine
    from agentproto.loopio.loop import Loop

    Done = Callable[[Any, "AgentError | None"], None]

ASK_TIMEOUT = 10.0
#: A control request is small: a longer line is refused without being kept.
MAX_REQUEST = 64 * 1024
#: What an answer may hold (a sidecar with thousands of sessions still fits).
MAX_ANSWER = 16 * 1024 * 1024


# -- the inspect op ---------------------------------------------------------------------------


def run_inspect(runtime: "Engine", args: dict[str, Any], done: Done, follow_sock: bool = True) -> None:
    """Answer one ``inspect`` request: ``done(view, None)`` or ``done(None, error)``."""
    from agentproto.frontends import inspect_op as inspect  # here: serve opens its socket without it

    try:
        checked = inspect.check_args(args)
        for what, path in [("sock", checked["sock"]), *(("db", db) for db in checked["db"] or ())]:
            if path is not None:
                try:
                    private.check_confined(path, what)  # replay: nothing outside its own
                except private.UnsafePath as exc:
                    raise AgentError.detail(Kind.INVALID_CONFIGURATION, f"inspect: {exc.strerror}") from None
        if checked["sock"] and follow_sock:
            request = {k: v for k, v in checked.items() if k != "sock" and v is not None}
            ask(runtime.loop, checked["sock"], {**request, "op": "inspect"}, done)
            return
        view: InspectView
        if checked["view"] == "agents":
            view = inspect.agents_view(runtime, checked["agent"])
        else:
            db = checked["db"] if checked["db"] is not None else runtime.observer.path
            runtime.observer.flush()  # this process's own turns are in the view at once
            view = inspect.cost_view(db, checked["since"], checked["by"], checked["top"])
    except AgentError as error:
        done(None, error)
        return
    done(view, None)


# -- the client -------------------------------------------------------------------------------


def ask(loop: "Loop", path: str, request: dict[str, Any], done: Done) -> None:
    """Send ``request`` to the control socket at ``path`` and hand its result's view to
    ``done`` (or the error it answered, or why it could not be asked)."""
    try:
        asking = _Ask(loop, path, request, done)
    except OSError as exc:  # no socket to ask through
        error = _cannot(path, exc.strerror or str(exc))
        loop.call_soon(lambda: done(None, error))
        return
    try:
        asking.connect(path)
    except OSError as exc:
        why = exc.strerror or str(exc)  # ``exc`` is unbound once the except block ends
        loop.call_soon(lambda: asking.fail(why))


def _cannot(path: str, why: str) -> AgentError:
    return AgentError.detail(Kind.INVALID_CONFIGURATION, f"inspect: control socket {path}: {why}")


class _Ask(Exchange):
    read_size = None  # the Reader's own: an answer may be large, and is searched per read

    def __init__(self, loop: "Loop", path: str, request: dict[str, Any], done: Done) -> None:
        super().__init__(loop, socket.AF_UNIX, encode(request), done, ASK_TIMEOUT)
        self.path = path
        self.answer = bytearray()
        #: Why the connect failed (an errno), when it did: nobody listens, or nothing is there.
        self.refused_code: int | None = None

    # How it fails, in its own words.
    def fail(self, why: str) -> None:
        self.end(None, _cannot(self.path, why))

    def refused(self, code: int) -> None:
        self.refused_code = code
        self.fail(os.strerror(code))

    def unsent(self, exc: OSError) -> None:
        self.fail(exc.strerror or str(exc))

    def late(self) -> None:
        self.fail(f"no answer within {ASK_TIMEOUT:g} s")

    def check_peer(self) -> str | None:
        peercred = getattr(socket, "SO_PEERCRED", None)
        if peercred is None:
            return None  # not Linux: the socket file's owner-only mode is the guard
        import struct  # here: a serve opening its own socket does not need it

        _pid, uid, _gid = struct.unpack("3i", self.sock.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i")))
        if uid not in (os.geteuid(), 0):
            return f"served by uid {uid}, not by you; not asked"
        return None

    def received(self, data: bytes) -> None:
        self.answer += data
        if len(self.answer) > MAX_ANSWER:
            self.fail(f"an answer over {MAX_ANSWER} bytes")
            return
        for line in bytes(self.answer).split(b"\n")[:-1]:
            try:
                obj = decode_json_line(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("kind") == "done":
                self.closed()
                return

    def closed(self) -> None:
        """The answer's ``done`` is in, or the socket closed: what it answered."""
        result: dict[str, Any] | None = None
        protocol: str | None = None
        for line in bytes(self.answer).split(b"\n"):
            try:
                obj = decode_json_line(line) if line.strip() else None
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("kind") == "result":
                result = obj
            elif isinstance(obj, dict) and obj.get("kind") == "error":
                protocol = str(obj.get("message"))
        if result is None:
            self.fail(protocol or "it closed without an answer")
        elif not result.get("ok"):
            error = result.get("error")
            self.end(None, error_from_body(error if isinstance(error, dict) else {"message": "refused"}))
        else:
            self.end({k: v for k, v in result.items() if k not in ("kind", "op", "ok")}, None)


# -- the server -------------------------------------------------------------------------------


class ControlServer:
    """The control socket of one runtime."""

    def __init__(self, runtime: "Engine", path: str, about: dict[str, Any] | None = None) -> None:
        self.runtime = runtime
        self.loop = runtime.loop
        self.path = path
        #: What an agents view answered here says of the sidecar besides (``started_at``, ``command``).
        self.about = about or {}
        self.listener: UnixListener | None = None
        self.conns: dict[int, "_ControlConn"] = {}

    def start(self) -> None:
        """Listen (OSError: the path is taken by something that is not a stale socket)."""
        self.listener = UnixListener(self.loop, self.path, self._serve)  # out of descriptors: backs off

    def _serve(self, sock: socket.socket) -> None:
        conn = _ControlConn(self, sock)
        self.conns[sock.fileno()] = conn
        conn.start()

    def close(self) -> None:
        for conn in list(self.conns.values()):
            conn.close()
        if self.listener is not None:
            self.listener.close()
            self.listener = None


class _ControlConn(Accepted):
    def __init__(self, server: ControlServer, sock: socket.socket) -> None:
        super().__init__(server.loop, sock)
        self.server = server
        self.reader = LineReader(self.loop, self.fd, self._line, self._eof, lambda: len(self.output) > 64, MAX_REQUEST)

    def start(self) -> None:
        self.reader.start()

    def _send(self, obj: dict[str, Any]) -> None:
        self.output.send(encode(obj))

    def _line(self, raw: bytes | TooLong) -> None:
        if isinstance(raw, TooLong):
            self._refuse(f"request too long: more than {MAX_REQUEST} bytes; discarded")
            return
        try:
            obj = decode_json_line(raw)
        except ValueError as exc:
            self._refuse(f"malformed JSON: {str(exc).removeprefix('not JSON: ')}")
            return
        if not isinstance(obj, dict) or obj.get("op") != "inspect":
            self._refuse("the control socket answers only inspect")
            return

        def answered(view: Any, error: AgentError | None) -> None:
            if self.closed:
                return
            if error is not None:
                self._send({"kind": "result", "op": "inspect", "ok": False, "error": error.body()})
                self._send({"kind": "done", "exit_code": 1})
            else:
                if view.get("view") == "agents":
                    view = {**view, **self.server.about}
                self._send({"kind": "result", "op": "inspect", "ok": True, **view})
                self._send({"kind": "done", "exit_code": 0})

        run_inspect(self.server.runtime, obj, answered, follow_sock=False)

    def _refuse(self, message: str) -> None:
        self._send({"kind": "error", "message": message})
        self._send({"kind": "done", "exit_code": 2})

    def _eof(self) -> None:
        if not self.output.queue or self.output.failed:
            self.close()
        else:
            self.output.on_drained = self.close

    def forget(self) -> None:
        self.server.conns.pop(self.fd, None)


def start_control(runtime: "Engine", path: str | None, about: dict[str, Any] | None = None) -> ControlServer | None:
    """The control socket at ``path`` (None: none); OSError when it cannot listen."""
    if not path:
        return None
    server = ControlServer(runtime, path, about)
    server.start()
    log(f"control socket on {path}")
    return server


def start_default_control(runtime: "Engine", about: dict[str, Any]) -> ControlServer | None:
    """This sidecar's socket in the user's control directory (control_dir.py), quietly; None,
    with one line saying why, when the directory is refused or the socket cannot be bound:
    the sidecar runs on, only ``inspect`` will not find it."""
    from agentproto.loopio import control_dir

    where = control_dir.directory()
    try:
        control_dir.ensure(where)
        server = ControlServer(runtime, control_dir.socket_path(where), about)
        server.start()
    except OSError as exc:
        log(f"no control socket: {exc.strerror or exc} (inspect will not list this sidecar; --no-control: none)")
        return None
    return server


# -- inspect without --sock: every sidecar of this user ---------------------------------------


def ask_all(loop: "Loop", request: dict[str, Any], done: Done) -> None:
    """Ask every control socket in the user's control directory (in parallel, each within
    ``ASK_TIMEOUT``) and answer ``{"view": "sidecars", "dir", "sidecars": [...], "stale":
    [...], "errors": [...]}``: each sidecar's view with its ``sock``; the stale sockets
    removed (nobody listened: control_dir.remove_stale); a socket that answered an error."""
    from agentproto.loopio import control_dir

    where = control_dir.directory()
    try:
        present = control_dir.ensure(where, create=False)
        found = control_dir.sockets(where) if present else []
    except OSError as exc:
        error = AgentError.detail(Kind.INVALID_CONFIGURATION, f"inspect: {exc.strerror or exc}")
        loop.call_soon(lambda: done(None, error))
        return
    answer: dict[str, Any] = {"view": "sidecars", "dir": where, "sidecars": [], "stale": [], "errors": []}
    if not found:
        loop.call_soon(lambda: done(answer, None))
        return
    left = [len(found)]

    def answered(path: str, listed: os.stat_result, asking: _Ask, view: Any, error: AgentError | None) -> None:
        if error is None:
            answer["sidecars"].append({**view, "sock": path})
        elif asking.refused_code in (errno.ECONNREFUSED, errno.ENOENT):
            if control_dir.remove_stale(path, listed):
                answer["stale"].append(path)
        else:
            answer["errors"].append({"sock": path, **error.body()})
        left[0] -= 1
        if left[0] == 0:
            answer["sidecars"].sort(key=lambda v: v.get("pid", 0))
            done(answer, None)

    for path, listed in found:
        holder: list[_Ask] = []

        def one(view: Any, error: AgentError | None, path: str = path, listed: os.stat_result = listed,
                holder: list[_Ask] = holder) -> None:  # fmt: skip
            answered(path, listed, holder[0], view, error)

        asking = _Ask(loop, path, request, one)
        holder.append(asking)
        try:
            asking.connect(path)
        except OSError as exc:
            _refuse_soon(loop, asking, exc.errno or 0)


def _refuse_soon(loop: "Loop", asking: _Ask, code: int) -> None:
    loop.call_soon(lambda: asking.refused(code))


def main(request: dict[str, Any], fmt: str) -> int:
    """``python -m agentproto inspect``: one view, printed; 0, or 1 when it was refused.
    Without ``sock`` (and for the agents view), every sidecar of this user, one section
    each; with ``agent`` too, the one sidecar that has that session."""
    import sys

    from agentproto.engine.observations import Observer, db_path
    from agentproto.engine.runtime import Engine
    from agentproto.frontends import inspect_op as inspect
    from agentproto.loopio.loop import Loop

    loop = Loop()
    dbs = request.get("db")
    runtime = Engine(loop, observer=Observer(loop, db_path(dbs[0] if isinstance(dbs, list) else dbs)))
    answers: list[tuple[Any, AgentError | None]] = []
    args = {k: v for k, v in request.items() if v is not None}
    everyone = not request.get("sock") and (request.get("view") or "agents") == "agents"
    try:
        if everyone:
            try:
                inspect.check_args(args)
            except AgentError as refused:
                answers.append((None, refused))
            else:
                asked = {"op": "inspect", "view": "agents", **({"agent": args["agent"]} if "agent" in args else {})}
                ask_all(loop, asked, lambda v, e: answers.append((v, e)))
        else:
            run_inspect(runtime, args, lambda v, e: answers.append((v, e)))
        loop.run(until=lambda: bool(answers))
    finally:
        loop.close()
    view, error = answers[0]
    if error is not None:
        log(error.message)
        return 1
    if everyone:
        return _print_sidecars(view, request.get("agent"), fmt)
    sys.stdout.write("".join(line + "\n" for line in inspect.render(view, fmt)))
    return 0


def _print_sidecars(found: dict[str, Any], session: str | None, fmt: str) -> int:
    """Every sidecar's section (or, for ``session``, the one view that has it), printed."""
    import json
    import sys

    from agentproto.frontends import inspect_op as inspect

    for error in found["errors"]:
        if session is None or error.get("kind") != "UnknownSession":
            log(f"inspect: {error['sock']}: {error.get('message')}")
    if session is not None:
        views = [view for view in found["sidecars"] if "agent" in view]
        if not views:
            asked = len(found["sidecars"]) + len(found["errors"])
            log(f"inspect: no sidecar of yours has a session {session} ({asked} sidecar(s) asked in {found['dir']})")
            return 1
        sys.stdout.write("".join(line + "\n" for line in inspect.render(views[0], fmt)))
        return 0
    if fmt == "json":
        sys.stdout.write(json.dumps(found, separators=(",", ":")) + "\n")
        return 0
    lines: list[str] = []
    for view in found["sidecars"]:
        started = str(view.get("started_at") or "?")[:19].replace("T", " ")
        command = f"  {view['command']}" if view.get("command") else ""
        head = f"sidecar pid {view['pid']}{command}  started {started} UTC  ({view['sock']})"
        lines += [*([""] if lines else []), head]
        lines += inspect.render(view, "table")
    if not found["sidecars"]:
        lines.append(f"no sidecar of yours is running (none has a control socket in {found['dir']})")
    if found["stale"]:
        lines.append(f"removed {len(found['stale'])} stale control socket(s) (their sidecars are gone)")
    sys.stdout.write("".join(inspect.table_line(line) + "\n" for line in lines))
    return 0
