"""Command line: ``serve``, ``agent``, ``list``, ``chat``, ``schema``, ``mcp-bridge``: argparse and
the commands.

Each command builds its runtime and hands it to its frontend's module (serve.py,
ops_stdio.py, jsonrpc_server.py, mcp_stdio.py, unix.py, http_ops.py, chat.py); the
modules only the other commands need are imported by those commands, so ``serve``
starts with protocol 1's own.

Exit codes: 0 success; 1 a failure at run time (a script that does not load, a turn that
failed, stdout closed under us); 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable

from agentproto import __version__, private
from agentproto.errors import log
from agentproto.loop import Loop
from agentproto.runtime import Runtime
from agentproto.serve import P1Connection
from agentproto.stdio import run_stdio
from agentproto.streams import Output

if TYPE_CHECKING:
    from agentproto.record import Recorder

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _load_mock(path: str | None) -> dict[str, Any] | None:
    if path is None:
        return None
    from agentproto.drivers.mock import ScriptError, load_script

    try:
        with open(path, encoding="utf-8") as f:
            return load_script(f.read())
    except OSError as exc:
        raise SystemExit(_fail(f"cannot read mock script {path}: {exc.strerror}")) from None
    except ScriptError as exc:
        raise SystemExit(_fail(f"mock script {path}: {exc}")) from None


def _fail(message: str) -> int:
    log(message)
    return EXIT_FAILED


class _Sidecar:
    """One command's runtime with what comes with it: the ``--record`` file (its header
    naming the frontend and the mock script), the observations database, the control
    socket. ``close`` lets each go in order once the frontend is done."""

    def __init__(self, args: argparse.Namespace, frontend: str) -> None:
        from agentproto.observations import Observer, db_path

        loop = Loop()
        self.recorder: "Recorder | None" = None
        if args.record:
            from agentproto.record import Recorder

            self.recorder = Recorder(args.record, loop=loop, frontend=frontend, mock=args.mock)
        self.observer = Observer(loop, db_path(getattr(args, "db", None)))
        self.runtime = Runtime(
            loop,
            mock_script=_load_mock(args.mock),
            stall_timeout=args.stall_timeout,
            recorder=self.recorder,
            observer=self.observer,
        )
        self.control = None
        control = getattr(args, "control", None) or os.environ.get("AGENTPROTO_CONTROL")
        if control:
            from agentproto.control import start_control

            try:
                self.control = start_control(self.runtime, control)
            except OSError as exc:
                log(f"--control {control}: {exc.strerror or exc}")
                raise SystemExit(EXIT_USAGE) from None

    def close(self) -> None:
        if self.control is not None:
            self.control.close()
        self.observer.close()
        if self.recorder is not None:
            self.recorder.close()
        self.runtime.loop.close()


def cmd_serve(args: argparse.Namespace) -> int:
    if args.transport != "stdio":
        return _serve_transport(args)
    sidecar = _Sidecar(args, "serve")
    runtime, recorder = sidecar.runtime, sidecar.recorder

    def make(output: Output, finished: Callable[[], None]) -> P1Connection:
        return P1Connection(runtime, sys.stdin.fileno(), output, lambda _conn: finished(), recorder=recorder)

    try:
        return run_stdio(runtime.loop, make)
    finally:
        sidecar.close()


def _serve_transport(args: argparse.Namespace) -> int:
    """``serve --transport unix|http|jsonrpc|mcp`` (unix.py, http_ops.py, jsonrpc_server.py, mcp_stdio.py)."""
    if args.auth_token is not None and args.transport != "http":
        log("--auth-token applies to --transport http only")
        return EXIT_USAGE
    if args.transport == "unix":
        path = args.listen or args.socket
        if not path:
            log("--transport unix needs --listen PATH (or --socket PATH)")
            return EXIT_USAGE
    elif args.transport == "http":
        from agentproto.http_ops import parse_listen

        listen = args.listen or (f"127.0.0.1:{args.port}" if args.port is not None else None)
        if not listen:
            log("--transport http needs --listen HOST:PORT (or --port N)")
            return EXIT_USAGE
        try:
            address = parse_listen(listen)
        except ValueError as exc:
            log(str(exc))
            return EXIT_USAGE
        token = _auth_token(args.auth_token)
    sidecar = _Sidecar(args, args.transport)
    runtime, recorder = sidecar.runtime, sidecar.recorder
    try:
        if args.transport == "unix":
            from agentproto.unix import run_unix

            return run_unix(runtime, path, recorder)
        if args.transport == "http":
            from agentproto.http_ops import run_http

            return run_http(runtime, address, token, recorder)
        if args.transport == "jsonrpc":
            from agentproto.jsonrpc_server import JsonRpcServer as server
        else:
            from agentproto.mcp_stdio import McpStdio as server  # type: ignore[assignment]
        return _run_stdio_frontend(runtime, server, recorder)
    finally:
        sidecar.close()


def _auth_token(flag: str | None) -> str | None:
    """The HTTP bearer token: ``--auth-token`` if given, else ``AGENTPROTO_AUTH_TOKEN`` (which
    keeps it out of ``ps``), else None. An unusable one is a usage error (exit 2): an empty or
    short token, even from the environment, is a mistake, never "no token"."""
    from agentproto.httpcore import check_token

    # Out of the environment that every agent process inherits: agents are not trusted.
    from_env = os.environ.pop("AGENTPROTO_AUTH_TOKEN", None)
    source, token = ("--auth-token", flag) if flag is not None else ("AGENTPROTO_AUTH_TOKEN", from_env)
    if token is None:
        return None
    problem = check_token(token)
    if problem is not None:
        log(f"{source}: the token {problem}")  # never the token itself
        raise SystemExit(EXIT_USAGE)
    from agentproto import redact

    redact.SECRETS.add(token)  # a request that echoes it is recorded without it
    return token


def cmd_agent(args: argparse.Namespace) -> int:
    """``agent``: the ops loop on stdio; with --single-shot, one request from all of stdin."""
    from agentproto.ops_stdio import OpsStream, SingleShot

    sidecar = _Sidecar(args, "single-shot" if args.single_shot else "agent")
    try:
        return _run_stdio_frontend(sidecar.runtime, SingleShot if args.single_shot else OpsStream, sidecar.recorder)
    finally:
        sidecar.close()


def _run_stdio_frontend(runtime: Runtime, server: Any, recorder: "Recorder | None") -> int:
    """One of the ops frontends on stdin/stdout: ``server(runtime, in_fd, output, finished, recorder)``."""

    def make(output: Output, finished: Callable[[], None]) -> Any:
        return server(runtime, sys.stdin.fileno(), output, finished, recorder)

    return run_stdio(runtime.loop, make)


def cmd_schema(_args: argparse.Namespace) -> int:
    from importlib import resources  # only here: it costs start-up time on every other path

    text = resources.files("agentproto").joinpath("schema.json").read_text(encoding="utf-8")
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


def _run_discover() -> dict[str, Any]:
    loop = Loop()
    runtime = Runtime(loop)
    result: list[dict[str, Any]] = []
    runtime.discover(lambda value, error: result.append(value))
    loop.run(until=lambda: bool(result))
    loop.close()
    return result[0]


def cmd_list(_args: argparse.Namespace) -> int:
    report = _run_discover()
    rows = [("AGENT", "STATUS", "VERSION", "WHERE")]
    for agent in report["agents"]:
        rows.append((agent["id"], "installed", agent.get("version") or "?", agent["executable_path"]))
    for agent in report["missing"]:
        rows.append((agent["id"], "missing", "-", f"install: {agent['install_hint']}"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3])
    for diagnostic in report["diagnostics"]:
        log(diagnostic["message"])
    return EXIT_OK


def cmd_chat(args: argparse.Namespace) -> int:
    agent: Any = args.agent
    if agent.startswith("{"):
        try:
            agent = json.loads(agent)
        except ValueError as exc:
            log(f"AGENT is a catalog id or a JSON agent reference: {exc}")
            return EXIT_USAGE
    tools = None
    if args.tools:
        try:
            with open(args.tools, encoding="utf-8") as handle:
                tools = json.load(handle)
        except (OSError, ValueError) as exc:
            log(f"cannot read tools from {args.tools}: {exc}")
            return EXIT_FAILED
    from agentproto.chat import Chat

    return Chat(agent, interactive=sys.stdin.isatty(), mock_script=_load_mock(args.mock), tools=tools).run()


def cmd_replay(args: argparse.Namespace) -> int:
    from agentproto.replay import main as replay_main

    return replay_main(args.path, update=args.update)


def cmd_inspect(args: argparse.Namespace) -> int:
    from agentproto.control import main as inspect_main

    request = {key: getattr(args, key) for key in ("view", "sock", "agent", "since", "by", "top", "db")}
    request["sock"] = request["sock"] or os.environ.get("AGENTPROTO_CONTROL")
    return inspect_main(request, args.format or ("table" if sys.stdout.isatty() else "json"))


def _record_option(parser: argparse.ArgumentParser, control: bool = True) -> None:
    parser.add_argument(
        "--record",
        metavar="PATH",
        help="append this run to PATH (ops: request/response pairs; protocol 1: every line in and out; "
        "every session's agent wire), secrets redacted, best effort; `replay PATH` checks it",
    )
    parser.add_argument(
        "--db", metavar="PATH", help="the observations database (default: AGENTPROTO_DB, else "
        "$XDG_STATE_HOME/agentproto/observations.db; off disables it)"
    )  # fmt: skip
    if control:
        parser.add_argument(
            "--control", metavar="PATH", help="answer inspect on a 0600 Unix socket at PATH (or AGENTPROTO_CONTROL)"
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentproto",
        description="One line-delimited JSON contract between programs and coding agents.",
    )
    parser.add_argument("--version", action="version", version=f"agentproto {__version__}")
    parser.add_argument(
        "--single-shot", action="store_true", help="the ops framing: read all of stdin as one request, answer, exit"
    )
    parser.add_argument("--mock", dest="top_mock", metavar="SCRIPT", help="with --single-shot: play this mock script")
    parser.add_argument(
        "--record", dest="top_record", metavar="PATH", help="with --single-shot: append the pair to PATH"
    )
    parser.add_argument("--replay", dest="top_replay", metavar="PATH", help="replay a recording (as `replay PATH`)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="speak protocol 1 (anyagent's sidecar protocol) on stdin/stdout")
    serve.add_argument("--mock", metavar="SCRIPT", help="play this mock script as the `mock` agent")
    serve.add_argument(
        "--stall-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="close a session none of whose events could be written for this long (default 60)",
    )
    serve.add_argument(
        "--transport",
        choices=("stdio", "unix", "http", "jsonrpc", "mcp"),
        default="stdio",
        help="stdio: protocol 1 frames (default); unix: protocol 1 per connection on a socket; "
        "http: the ops framing over HTTP; jsonrpc: JSON-RPC 2.0 on stdio; mcp: an MCP server on stdio",
    )
    serve.add_argument("--listen", metavar="ADDR", help="unix: the socket PATH; http: HOST:PORT (port 0 picks one)")
    serve.add_argument("--socket", metavar="PATH", help="unix: alias of --listen")
    serve.add_argument("--port", type=int, metavar="N", help="http: shortcut for --listen 127.0.0.1:N")
    serve.add_argument(
        "--auth-token",
        metavar="TOKEN",
        help="http: require Authorization: Bearer TOKEN (at least 16 characters; required unless the "
        "listen address is loopback). Better: set AGENTPROTO_AUTH_TOKEN, which stays out of ps; "
        "this flag wins over it",
    )
    _record_option(serve)
    serve.set_defaults(func=cmd_serve)

    agent = sub.add_parser("agent", help="the ops framing ({\"op\": ...} requests, kind lines, done) on stdin/stdout")
    agent.add_argument("--single-shot", action="store_true", help="read all of stdin as one request, answer, exit")
    agent.add_argument("--mock", metavar="SCRIPT", help="play this mock script as the `mock` agent")
    agent.add_argument("--stall-timeout", type=float, default=60.0, metavar="SECONDS", help=argparse.SUPPRESS)
    _record_option(agent)
    agent.set_defaults(func=cmd_agent)

    lister = sub.add_parser("list", help="the agents this machine has, and how to install the others")
    lister.set_defaults(func=cmd_list)

    chat = sub.add_parser("chat", help="chat with an agent in the terminal; from a pipe, run one turn")
    chat.add_argument("agent", nargs="?", default="mock", help="catalog id (default: mock)")
    chat.add_argument("--mock", metavar="SCRIPT", help="play this mock script as the `mock` agent")
    chat.add_argument("--tools", metavar="FILE", help="a JSON array of the app's own tools to give the agent")
    chat.set_defaults(func=cmd_chat)

    schema = sub.add_parser("schema", help="print the JSON Schema of every line agentproto reads and writes")
    schema.set_defaults(func=cmd_schema)

    bridge = sub.add_parser("mcp-bridge", help="a stdio MCP server relayed to a session's tools_url (HTTP)")
    bridge.add_argument(
        "url",
        metavar="URL",
        nargs="?",
        help="the session's tools_url; better in AGENTPROTO_TOOLS_URL: the URL holds a secret token, "
        "and a command line is visible to every local user",
    )
    bridge.set_defaults(func=cmd_mcp_bridge)

    replay = sub.add_parser(
        "replay", help="re-run a recording (--record) and check every response: exit 0 same, 1 drift, 2 bad file"
    )
    replay.add_argument("path", metavar="PATH")
    replay.add_argument(
        "--update", action="store_true", help="rewrite the recorded responses from this run (keeps the agent wire)"
    )
    replay.set_defaults(func=cmd_replay)

    inspect = sub.add_parser(
        "inspect", help="a running sidecar's live sessions (--sock), or what turns cost (--view cost)"
    )
    inspect.add_argument("--view", choices=("agents", "cost"), default="agents")
    inspect.add_argument("--sock", metavar="PATH", help="a sidecar's control socket (default: AGENTPROTO_CONTROL)")
    inspect.add_argument("--agent", metavar="SESSION", help="one session's full snapshot")
    inspect.add_argument("--since", default="24h", help="cost window: 30m, 24h, 7d, or an ISO date (default 24h)")
    inspect.add_argument("--by", choices=("agent", "model", "day", "session"), default="agent")
    inspect.add_argument("--top", type=int, metavar="N", help="also list the N most expensive turns")
    inspect.add_argument(
        "--db", metavar="PATH", help="the observations database (default: AGENTPROTO_DB, else the XDG state dir)"
    )
    inspect.add_argument("--format", choices=("table", "json"), help="default: table on a terminal, else json")
    inspect.set_defaults(func=cmd_inspect)
    return parser


def cmd_mcp_bridge(args: argparse.Namespace) -> int:
    from agentproto.mcp_bridge import TOOLS_URL, run_bridge  # the bridge's own process needs nothing else

    url = args.url or os.environ.get(TOOLS_URL)
    if not url:
        sys.stderr.write(f"agentproto mcp-bridge: give the tools_url in {TOOLS_URL} (or as URL)\n")
        return EXIT_USAGE
    return run_bridge(url)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.top_replay and not getattr(args, "func", None):
        args.func, args.path, args.update = cmd_replay, args.top_replay, False
    if args.single_shot and not getattr(args, "func", None):
        args.func, args.mock, args.record, args.stall_timeout = cmd_agent, args.top_mock, args.top_record, 60.0
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    finally:
        private.cleanup()  # the sessions' MCP configs and the like (atexit too, for embedders)
