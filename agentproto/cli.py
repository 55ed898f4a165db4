"""Command line: the commands (``serve`` and ``mcp``, ``agent``, ``list``, ``probe``, ``chat``, ``schema``,
``mcp-bridge``, ``replay``, ``inspect``, ``completion``), run on what cli_args.py parsed.

Each command builds its runtime and hands it to its frontend's module (serve.py,
ops_stdio.py, jsonrpc_server.py, mcp_stdio.py, unix.py, frontends/ops_http.py, chat.py). Start-up
time is part of the product (a CI job may run ``--single-shot`` thousands of times), so
this module imports next to nothing at the top: each command imports what it runs, and
``--version`` nothing more. The commonest command lines (``serve``, ``agent``,
``--single-shot``, ``--version``) are read by cli_fast.py; argparse (cli_args.py) is
imported only for the others. The same rule holds below: no module on a start path imports
``typing`` at run time (``TYPE_CHECKING = False`` stands for it; mypy reads the block) or
``dataclasses``, and what only some sessions need (``subprocess``, ``tempfile``, ``shutil``,
every driver) is imported where it is used. tests/test_startup.py holds these to it;
``python scripts/bench_core.py -v`` shows what each start imports.

Exit codes: 0 success; 1 a failure at run time (a script that does not load, a turn that
failed, an address already in use, stdout closed under us: that one quietly, as Unix
tools end); 2 a usage error, always one line naming the flag; 130 interrupted (Ctrl-C),
128 + N for another signal N where a command reports one (chat).
"""

from __future__ import annotations

import gc
import os
import sys

from agentproto import cli_fast
from agentproto.core.errors import log
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.loopio import private

if TYPE_CHECKING:
    import argparse
    from typing import Any, Callable

    from agentproto.engine.runtime import Engine
    from agentproto.frontends.serve import P1Connection
    from agentproto.loopio.record import Recorder
    from agentproto.loopio.streams import Output

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _settle() -> None:
    """The command's modules are in: what exists now lives as long as the process, so it is
    frozen out of every later collection (the interpreter's last one at exit included), and
    collection, off while they loaded (``main``), starts again. A start creates tens of
    thousands of such objects; collecting among them was a third of what it cost."""
    gc.freeze()
    gc.enable()


def _load_mock(path: str | None) -> dict[str, Any] | None:
    return _read_mock(path)[0]


def _read_mock(spec: str | None) -> tuple[dict[str, Any] | None, str, bytes]:
    """The ``--mock`` script, checked, where it was read from, and its bytes: read once, so
    that a record's header describes the very script that is played. ``spec`` is a path if
    a file of that name exists or it holds a ``/``, else the name of a shipped script
    (``--mock turn``: drivers/mock_shipped.py's ``shipped_script``)."""
    if spec is None:
        return None, "", b""
    from agentproto.drivers.mock import ScriptError, load_script
    from agentproto.drivers.mock_shipped import shipped_script

    path = spec
    try:
        if os.path.exists(spec) or os.sep in spec or "/" in spec:
            with open(spec, "rb") as f:
                raw = f.read()
        else:
            path, raw = shipped_script(spec)
        return load_script(raw.decode("utf-8")), path, raw
    except OSError as exc:
        raise SystemExit(_fail(f"cannot read mock script {spec}: {exc.strerror}")) from None
    except UnicodeDecodeError as exc:
        raise SystemExit(_fail(f"mock script {path}: not UTF-8 text (at byte {exc.start})")) from None
    except ScriptError as exc:
        raise SystemExit(_fail(f"mock script {path}: {exc}")) from None


def _fail(message: str) -> int:
    log(message)
    return EXIT_FAILED


def _listener_bounds(args: argparse.Namespace) -> tuple[int, int] | None:
    """``--tool-connections`` and ``--tool-calls`` (None where the command has neither)."""
    connections = getattr(args, "tool_connections", None)
    return None if connections is None else (connections, args.tool_calls)


class _Sidecar:
    """One command's runtime with what comes with it: the ``--record`` file (its header
    naming the frontend and the mock script), the observations database, the control
    socket. ``close`` lets each go in order once the frontend is done."""

    def __init__(self, args: argparse.Namespace, frontend: str) -> None:
        from agentproto.engine.observations import KEEP_ENV, Observer, db_path, keep_seconds
        from agentproto.engine.runtime import Engine
        from agentproto.loopio.loop import Loop

        loop = Loop(adopt_orphans=True)  # nothing an agent detaches outlives its session
        try:
            keep = keep_seconds(getattr(args, "db_keep", None))
        except ValueError as exc:
            log(f"--db-keep (or {KEEP_ENV}) {exc}")
            raise SystemExit(EXIT_USAGE) from None
        self.observer = Observer(loop, db_path(getattr(args, "db", None)), keep)
        script, where, raw = _read_mock(args.mock)
        self.recorder: "Recorder | None" = None
        if args.record:
            from agentproto.loopio.record import Recorder, mock_facts

            mock = None if script is None else mock_facts(where, raw)
            self.recorder = Recorder(args.record, loop=loop, frontend=frontend, mock=mock)
        self.runtime = Engine(
            loop,
            mock_script=script,
            stall_timeout=args.stall_timeout,
            recorder=self.recorder,
            observer=self.observer,
            listener_bounds=_listener_bounds(args),
            max_terminals=getattr(args, "max_terminals", 16),
        )
        self.control: Any = None
        #: What ``inspect`` learns of this sidecar besides its sessions.
        self.about = {"started_at": _now_iso(), "command": _command_of(args, frontend)}
        control = getattr(args, "control", None) or os.environ.get("AGENTPROTO_CONTROL")
        if control:
            from agentproto.frontends.control import start_control

            try:
                self.control = start_control(self.runtime, control, self.about)
            except OSError as exc:
                log(f"--control {control}: {exc.strerror or exc}")
                raise SystemExit(EXIT_USAGE) from None
        elif frontend not in ("single-shot",) and not getattr(args, "no_control", True):
            # In the user's control directory, where `inspect` finds it; opened once the loop
            # runs (a timer fires after the first writes), so that the hello goes out first.
            loop.call_later(0.0, self._open_default_control)

    def _open_default_control(self) -> None:
        from agentproto.frontends.control import start_default_control

        self.control = start_default_control(self.runtime, self.about)

    def close(self) -> None:
        # Nothing a one-shot started outlives the sidecar: killed and reaped, bounded.
        self.runtime.end_oneshots()
        if self.control is not None:
            self.control.close()
        self.observer.close()
        if self.recorder is not None:
            self.recorder.close()
        self.runtime.loop.close()


def _now_iso() -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _command_of(args: argparse.Namespace, frontend: str) -> str:
    """``serve``, ``serve --transport mcp``, ``agent``: what ``inspect`` calls a sidecar."""
    if frontend in ("agent", "single-shot", "serve"):
        return "agent" if frontend != "serve" else "serve"
    return f"serve --transport {frontend}"


def cmd_serve(args: argparse.Namespace) -> int:
    if args.transport != "stdio":
        return _serve_transport(args)
    from agentproto.frontends.serve import P1Connection
    from agentproto.loopio.lifetime import run_stdio

    sidecar = _Sidecar(args, "serve")
    runtime, recorder = sidecar.runtime, sidecar.recorder

    def make(output: Output, finished: Callable[[], None]) -> P1Connection:
        return P1Connection(runtime, sys.stdin.fileno(), output, lambda _conn: finished(), recorder=recorder)

    _settle()
    try:
        return run_stdio(runtime.loop, make, runtime.kill_all)
    finally:
        sidecar.close()


def _serve_transport(args: argparse.Namespace, console: bool = False) -> int:
    """``serve --transport unix|http|jsonrpc|mcp`` (unix.py, frontends/ops_http.py, jsonrpc_server.py, mcp_stdio.py;
    mcp with --listen or --port: frontends/mcp_http.py)."""
    if args.transport == "unix":
        path = args.listen or args.socket
        if not path:
            log("--transport unix needs --listen PATH (or --socket PATH)")
            return EXIT_USAGE
    elif args.transport == "http" or (args.transport == "mcp" and (args.listen or args.port is not None)):
        from agentproto.frontends.ops_http import parse_listen

        listen = args.listen or (f"127.0.0.1:{args.port}" if args.port is not None else None)
        if not listen:
            log("--transport http needs --listen HOST:PORT (or --port N)")
            return EXIT_USAGE
        if args.transport == "mcp" and args.record:
            log("--record goes with the stdio transports, not with --transport mcp over HTTP (--listen/--port)")
            return EXIT_USAGE
        try:
            address = parse_listen(listen)
        except ValueError as exc:
            log(str(exc))
            return EXIT_USAGE
        token = _auth_token(args.auth_token, mint=console)
    sidecar = _Sidecar(args, args.transport)
    runtime, recorder = sidecar.runtime, sidecar.recorder
    try:
        if args.transport == "unix":
            from agentproto.frontends.unix import run_unix

            _settle()
            return run_unix(runtime, path, recorder)
        if args.transport == "http":
            from agentproto.frontends.ops_http import run_http

            _settle()
            idle = args.session_idle_timeout
            idle = 1800.0 if idle is None else idle
            return run_http(runtime, address, token, recorder, idle, console, args.ring_events)
        if args.transport == "mcp" and (args.listen or args.port is not None):
            from agentproto.frontends.mcp_http import run_mcp_http

            _settle()
            idle = args.session_idle_timeout
            return run_mcp_http(runtime, address, token, 1800.0 if idle is None else idle)
        if args.transport == "jsonrpc":
            from agentproto.frontends.jsonrpc_server import JsonRpcServer as server
        else:
            from agentproto.frontends.mcp_stdio import McpStdio as server  # type: ignore[assignment]
        return _run_stdio_frontend(runtime, server, recorder)
    finally:
        sidecar.close()


def cmd_console(args: argparse.Namespace) -> int:
    """``console``: the HTTP transport, on a free loopback port unless told otherwise, with a
    minted token unless given one, and the page's URL printed (frontends/ops_http.py)."""
    args.transport, args.listen = "http", args.listen or f"127.0.0.1:{args.port}"
    return _serve_transport(args, console=True)


def _auth_token(flag: str | None, mint: bool = False) -> str | None:
    """The HTTP bearer token: ``--auth-token`` if given, else ``AGENTPROTO_AUTH_TOKEN`` (which
    keeps it out of ``ps``), else a fresh one when ``mint`` (the console's), else None. An
    unusable one is a usage error (exit 2): an empty or short token, even from the
    environment, is a mistake, never "no token"."""
    from agentproto.core.http1 import check_token

    # Out of the environment that every agent process inherits: agents are not trusted.
    from_env = os.environ.pop("AGENTPROTO_AUTH_TOKEN", None)
    source, token = ("--auth-token", flag) if flag is not None else ("AGENTPROTO_AUTH_TOKEN", from_env)
    if token is None and mint:
        import secrets

        token = secrets.token_urlsafe(32)  # programs: set AGENTPROTO_AUTH_TOKEN instead, to know it
    elif token is None:
        return None
    problem = check_token(token)
    if problem is not None:
        log(f"{source}: the token {problem}")  # never the token itself
        raise SystemExit(EXIT_USAGE)
    from agentproto.core import redact

    redact.SECRETS.add(token)  # a request that echoes it is recorded without it
    return token


def cmd_agent(args: argparse.Namespace) -> int:
    """``agent``: the ops loop on stdio; with --single-shot, one request from all of stdin."""
    from agentproto.frontends.ops_stdio import OpsStream, SingleShot

    sidecar = _Sidecar(args, "single-shot" if args.single_shot else "agent")
    try:
        return _run_stdio_frontend(sidecar.runtime, SingleShot if args.single_shot else OpsStream, sidecar.recorder)
    finally:
        sidecar.close()


def _run_stdio_frontend(runtime: Engine, server: Any, recorder: "Recorder | None") -> int:
    """One of the ops frontends on stdin/stdout: ``server(runtime, in_fd, output, finished, recorder)``."""
    from agentproto.loopio.lifetime import run_stdio

    def make(output: Output, finished: Callable[[], None]) -> Any:
        return server(runtime, sys.stdin.fileno(), output, finished, recorder)

    _settle()
    return run_stdio(runtime.loop, make, runtime.kill_all)


def cmd_schema(_args: argparse.Namespace) -> int:
    from importlib import resources  # only here: it costs start-up time on every other path

    text = resources.files("agentproto").joinpath("schema.json").read_text(encoding="utf-8")
    _write_all((text if text.endswith("\n") else text + "\n").encode("utf-8"))
    return EXIT_OK


def _write_all(data: bytes) -> None:
    """All of ``data`` to stdout, or BrokenPipeError. Unbuffered (``python -u``,
    PYTHONUNBUFFERED) a write is one write(2), and a reader that goes mid-write leaves a short
    count that the text layer drops without a word: the rest is written, or fails, here."""
    sys.stdout.flush()
    out, view = sys.stdout.buffer, memoryview(data)
    while view:
        written = out.write(view)
        if written is None:  # a non-blocking stdout (its parent's doing), full: wait for room
            import select

            select.select([], [out], [])
            continue
        view = view[written:]


def cmd_list(args: argparse.Namespace) -> int:
    from agentproto.commands.listing import run

    return run(args.json, show_all=args.all, timeout=None if args.no_probe else args.timeout)


def _agent_ref(text: str) -> Any:
    """AGENT as typed: a catalog id, or a JSON agent reference (None, said why: a usage error)."""
    if not text.startswith("{"):
        return text
    import json

    try:
        return json.loads(text)
    except ValueError as exc:
        log(f"AGENT is a catalog id or a JSON agent reference: {exc}")
        return None


def cmd_probe(args: argparse.Namespace) -> int:
    agent = _agent_ref(args.agent)
    if agent is None:
        return EXIT_USAGE
    from agentproto.commands.listing import run_probe

    return run_probe(agent, args.json, args.timeout)


def cmd_chat(args: argparse.Namespace) -> int:
    import json

    agent = _agent_ref(args.agent)
    if agent is None:
        return EXIT_USAGE
    loaded: dict[str, Any] = {}
    for field, path in (("tools", args.tools), ("policy", args.policy)):
        if path:
            try:
                with open(path, encoding="utf-8") as handle:
                    loaded[field] = json.load(handle)
            except (OSError, ValueError) as exc:
                log(f"cannot read {field} from {path}: {exc}")
                return EXIT_FAILED
    from agentproto.commands.chat import Chat

    script = _load_mock(args.mock)
    if args.dir is not None and not os.path.isdir(args.dir):
        log(f"--dir {args.dir}: not a directory")
        return EXIT_USAGE
    return Chat(agent, sys.stdin.isatty(), script, loaded.get("tools"), json_events=args.json, color=args.color,
                directory=args.dir, mock_path=args.mock, policy=loaded.get("policy")).run()  # fmt: skip


def cmd_replay(args: argparse.Namespace) -> int:
    from agentproto.commands.replay import main as replay_main

    return replay_main(args.path, update=args.update)


def cmd_inspect(args: argparse.Namespace) -> int:
    from agentproto.frontends.control import main as inspect_main

    request = {key: getattr(args, key) for key in ("view", "sock", "agent", "since", "by", "top", "db")}
    request["agent"] = args.session or args.agent  # --agent: the seed's name for --session
    request["sock"] = request["sock"] or os.environ.get("AGENTPROTO_CONTROL")
    return inspect_main(request, args.format or ("table" if sys.stdout.isatty() else "json"))


def cmd_mcp_bridge(args: argparse.Namespace) -> int:
    from agentproto.tools.mcp_bridge import TOOLS_URL, run_bridge  # the bridge's own process needs nothing else

    url = args.url or os.environ.get(TOOLS_URL)
    if not url:
        sys.stderr.write(f"agentproto mcp-bridge: give the tools_url in {TOOLS_URL} (or as URL)\n")
        return EXIT_USAGE
    return run_bridge(url)


def cmd_completion(args: argparse.Namespace) -> int:
    from agentproto.commands.completion import run

    return run(build_parser(), args.shell)


def build_parser(prog: str = "agentproto") -> argparse.ArgumentParser:
    from agentproto.cli_args import build_parser as _build_parser
    from agentproto.cli_args import translations_once

    commands = {
        "serve": cmd_serve, "agent": cmd_agent, "list": cmd_list, "probe": cmd_probe, "chat": cmd_chat,
        "schema": cmd_schema,
        "mcp-bridge": cmd_mcp_bridge, "replay": cmd_replay, "inspect": cmd_inspect, "mcp": cmd_serve,
        "completion": cmd_completion, "console": cmd_console,
    }  # fmt: skip
    restore = translations_once()
    try:
        return _build_parser(commands, prog)
    finally:
        restore()


def _stdout_gone() -> int:
    """stdout's reader went away (``| head``): end quietly, status 1. Point stdout at
    /dev/null so the interpreter's last flush of it cannot complain either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return EXIT_FAILED


def main(argv: list[str] | None = None) -> int:
    gc.disable()  # until the command's modules are in (_settle)
    try:
        return _main(argv)
    finally:
        gc.enable()  # whatever happened: an embedder's process must not be left without it


def _main(argv: list[str] | None) -> int:
    try:
        args = cli_fast.parse(sys.argv[1:] if argv is None else argv, {"serve": cmd_serve, "agent": cmd_agent})
        parser = None
        if args is None:  # not one of the commonest command lines: argparse reads it
            from agentproto.cli_args import check_usage, program_name

            parser = build_parser(program_name())
            args, extras = parser.parse_known_args(argv)
            if extras:
                from agentproto.commands.usage import unknown_arguments

                unknown_arguments(parser, args, extras)
            check_usage(parser, args)
        if args.top_replay and not getattr(args, "func", None):
            args.func, args.path, args.update = cmd_replay, args.top_replay, False
        elif args.top_single_shot and not getattr(args, "func", None):
            args.func, args.mock, args.record, args.stall_timeout = cmd_agent, args.top_mock, args.top_record, 60.0
            args.single_shot = True
        elif args.top_single_shot:
            args.single_shot = True  # `--single-shot agent`: the same as `agent --single-shot`
        if not getattr(args, "func", None):
            if parser is None:
                from agentproto.cli_args import program_name

                parser = build_parser(program_name())
            parser.print_help(sys.stderr)
            sys.stderr.write(f"\n{parser.prog}: give a command (see the list above)\n")
            return EXIT_USAGE
        if args.func not in (cmd_serve, cmd_agent):
            _settle()  # serve and agent settle once their frontend's modules are in
        code = int(args.func(args))
        sys.stdout.flush()  # here, where a reader that went away is still ours to handle
        return code
    except SystemExit as exc:  # argparse's --help, --version and usage errors; _load_mock's failures
        try:
            sys.stdout.flush()  # --help's text, while a reader that went away is still ours to handle
        except BrokenPipeError:
            return _stdout_gone()
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or EXIT_OK
        sys.stderr.write(f"{exc.code}\n")
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _stdout_gone()
    finally:
        private.cleanup()  # the sessions' MCP configs and the like (atexit too, for embedders)
