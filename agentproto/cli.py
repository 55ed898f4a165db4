"""Command line: ``serve``, ``agent``, ``list``, ``chat``, ``schema``, ``mcp-bridge``: argparse and
the commands.

Each command builds its runtime and hands it to its frontend's module (serve.py,
ops_stdio.py, jsonrpc_server.py, mcp_stdio.py, unix.py, http_ops.py, chat.py). Start-up
time is part of the product (a CI job may run ``--single-shot`` thousands of times), so
this module imports only argparse at the top: each command imports what it runs, and
``--version`` nothing more. The same rule holds below: no module on a start path imports
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

import argparse
import gc
import os
import sys

from agentproto import __version__, private
from agentproto.errors import log

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, NoReturn

    from agentproto.record import Recorder
    from agentproto.runtime import Runtime
    from agentproto.serve import P1Connection
    from agentproto.streams import Output

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _settle() -> None:
    """The command's modules are in: what exists now lives as long as the process, so it is
    frozen out of every later collection (the interpreter's last one at exit included), and
    collection, off while they loaded (``main``), starts again. A start creates tens of
    thousands of such objects; collecting among them was a third of what it cost."""
    gc.freeze()
    gc.enable()


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
        from agentproto.loop import Loop
        from agentproto.observations import Observer, db_path
        from agentproto.runtime import Runtime

        loop = Loop(adopt_orphans=True)  # nothing an agent detaches outlives its session
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
    from agentproto.serve import P1Connection
    from agentproto.stdio import run_stdio

    sidecar = _Sidecar(args, "serve")
    runtime, recorder = sidecar.runtime, sidecar.recorder

    def make(output: Output, finished: Callable[[], None]) -> P1Connection:
        return P1Connection(runtime, sys.stdin.fileno(), output, lambda _conn: finished(), recorder=recorder)

    _settle()
    try:
        return run_stdio(runtime.loop, make, runtime.kill_all)
    finally:
        sidecar.close()


def _serve_transport(args: argparse.Namespace) -> int:
    """``serve --transport unix|http|jsonrpc|mcp`` (unix.py, http_ops.py, jsonrpc_server.py, mcp_stdio.py)."""
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

            _settle()
            return run_unix(runtime, path, recorder)
        if args.transport == "http":
            from agentproto.http_ops import run_http

            _settle()
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
    from agentproto.stdio import run_stdio

    def make(output: Output, finished: Callable[[], None]) -> Any:
        return server(runtime, sys.stdin.fileno(), output, finished, recorder)

    _settle()
    return run_stdio(runtime.loop, make, runtime.kill_all)


def cmd_schema(_args: argparse.Namespace) -> int:
    from importlib import resources  # only here: it costs start-up time on every other path

    text = resources.files("agentproto").joinpath("schema.json").read_text(encoding="utf-8")
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    from agentproto.listing import run

    return run(args.json)


def cmd_chat(args: argparse.Namespace) -> int:
    import json  # here: no other command parses JSON in this module

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

    script = _load_mock(args.mock)
    return Chat(agent, sys.stdin.isatty(), script, tools, json_events=args.json, color=args.color).run()


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


def _seconds(text: str) -> float:
    """A ``--stall-timeout``: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text}")
    return value


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` works it out, without importing
    shutil (and bz2, lzma, fnmatch with it): argparse makes a help formatter for every
    ``add_argument`` and would import it on every start for a width no help is printed at."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Formatter(argparse.HelpFormatter):
    """argparse's help formatter, told the width (``_columns``)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=_columns() - 2)


class _RawFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's formatter that keeps descriptions and epilogs as written, told the width."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=_columns() - 2)


class _Version(argparse.Action):
    """``--version``: one line and exit 0, as argparse's own action prints it, without its
    text-wrapping machinery (textwrap) for a line that never wraps."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> None:
        sys.stdout.write(f"agentproto {__version__}\n")
        parser.exit()


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (what was wrong, and where to look), exit 2;
    its help formatter is told the width without shutil (``_Formatter``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def _sub(sub: Any, name: str, summary: str, description: str, examples: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog="examples:\n" + examples,
        formatter_class=_RawFormatter,
    )
    return parser


EPILOG = """commands:
  serve        speak protocol 1 (anyagent's sidecar protocol) on stdin/stdout, or another transport
  agent        the ops framing: {"op": ...} requests answered by kind lines and a done line
  list         the agents this machine has, their versions, and how to install the others
  chat         chat with an agent in the terminal; from a pipe, one turn
  schema       print the JSON Schema of every line
  mcp-bridge   a stdio MCP server relayed to a session's tools_url
  replay       re-run a recording made with --record, offline, and check every response
  inspect      a running sidecar's live sessions, or what turns cost

examples:
  echo 'hello' | python3 -m agentproto chat mock
  python3 -m agentproto serve --mock fixtures/mock-scripts/turn.json
  echo '{"op":"capabilities"}' | python3 -m agentproto --single-shot

Each command's --help has more. Exit codes: 0 success, 1 failure, 2 usage error,
130 interrupted (Ctrl-C; 128 + the signal number for other signals)."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="agentproto",
        description="One line-delimited JSON contract between programs and coding agents.",
        epilog=EPILOG,
        formatter_class=_RawFormatter,
    )
    parser.add_argument("--version", action=_Version, default=argparse.SUPPRESS)
    parser.add_argument(
        "--single-shot", dest="top_single_shot", action="store_true",
        help="the ops framing: read all of stdin as one request, answer, exit",
    )
    parser.add_argument("--mock", dest="top_mock", metavar="SCRIPT", help="with --single-shot: play this mock script")
    parser.add_argument(
        "--record", dest="top_record", metavar="PATH", help="with --single-shot: append the pair to PATH"
    )
    parser.add_argument("--replay", dest="top_replay", metavar="PATH", help="replay a recording (as `replay PATH`)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    serve = _sub(
        sub, "serve", "speak protocol 1 (anyagent's sidecar protocol) on stdin/stdout",
        "Protocol 1 on stdin/stdout: one JSON command per line in; the hello, replies, events, session\n"
        "errors and closed lines out. --transport serves the same operations another way.",
        "  echo '{\"id\": 1, \"cmd\": \"discover\"}' | python3 -m agentproto serve\n"
        "  python3 -m agentproto serve --mock fixtures/mock-scripts/turn.json\n"
        "  python3 -m agentproto serve --transport unix --listen /tmp/agentproto.sock\n"
        "  AGENTPROTO_AUTH_TOKEN=$(openssl rand -hex 16) python3 -m agentproto serve --transport http --port 8080\n"
        "  python3 -m agentproto serve --transport mcp     # register it with an MCP host",
    )
    serve.add_argument("--mock", metavar="SCRIPT", help="play this mock script as the `mock` agent")
    serve.add_argument(
        "--stall-timeout",
        type=_seconds,
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

    agent = _sub(
        sub, "agent", "the ops framing ({\"op\": ...} requests, kind lines, done) on stdin/stdout",
        "The ops framing: one {\"op\": NAME, ...} request per line, each answered by kind lines\n"
        "(event, log, progress, result, error) and one {\"kind\": \"done\", \"exit_code\": N}.",
        "  printf '%s\\n' '{\"op\":\"open\",\"agent\":\"mock\",\"dir\":\".\"}' '{\"op\":\"prompt\",\"text\":\"hi\"}' "
        "| python3 -m agentproto agent\n"
        "  echo '{\"op\":\"capabilities\"}' | python3 -m agentproto agent --single-shot",
    )
    agent.add_argument("--single-shot", action="store_true", help="read all of stdin as one request, answer, exit")
    agent.add_argument("--mock", metavar="SCRIPT", help="play this mock script as the `mock` agent")
    agent.add_argument("--stall-timeout", type=_seconds, default=60.0, metavar="SECONDS", help=argparse.SUPPRESS)
    _record_option(agent)
    agent.set_defaults(func=cmd_agent)

    lister = _sub(
        sub, "list", "the agents this machine has, and how to install the others",
        "The catalog: each agent installed here with its version and path (versions are read in\n"
        "parallel), each missing one with where it was searched and how to install it.",
        "  python3 -m agentproto list\n"
        "  python3 -m agentproto list --json | jq -r '.agents[].id'\n"
        "  AGENTPROTO_CLAUDE_BIN=/opt/claude/bin/claude python3 -m agentproto list",
    )
    lister.add_argument("--json", action="store_true", help="print the discovery report as JSON")
    lister.set_defaults(func=cmd_list)

    chat = _sub(
        sub, "chat", "chat with an agent in the terminal; from a pipe, run one turn",
        "Chat with an agent. In a terminal: type a prompt, answer its questions; /help lists the\n"
        "commands (/model, /mode, /set, /cancel, /info, /quit); Ctrl-C cancels a turn, and at the\n"
        "prompt ends the chat. From a pipe: all of stdin is one prompt, the agent's answer goes to\n"
        "stdout and everything else to stderr; permission requests are denied. AGENT is a catalog\n"
        "id or a JSON agent reference ('{\"acp\": {\"name\": ..., \"path\": ..., \"args\": [...]}}' or\n"
        "'{\"id\": \"claude\", \"path\": ...}'). NO_COLOR (or --color never) turns colour off.",
        "  python3 -m agentproto chat claude\n"
        "  echo 'title for this diff' | python3 -m agentproto chat codex > title.txt\n"
        "  python3 -m agentproto chat --mock fixtures/mock-scripts/turn.json\n"
        "  python3 -m agentproto chat '{\"acp\": {\"name\": \"mine\", \"path\": \"/opt/mine\", \"args\": []}}'\n"
        "  echo hi | python3 -m agentproto chat --json mock | jq -c .kind",
    )
    chat.add_argument("agent", nargs="?", default="mock", help="catalog id or JSON agent reference (default: mock)")
    chat.add_argument("--mock", metavar="SCRIPT", help="play this mock script as the `mock` agent")
    chat.add_argument("--tools", metavar="FILE", help="a JSON array of the app's own tools to give the agent")
    chat.add_argument("--json", action="store_true", help="print the raw events, one JSON line each, for scripts")
    chat.add_argument(
        "--color", choices=("auto", "always", "never"), default="auto",
        help="auto: on a terminal that is not TERM=dumb (default); NO_COLOR set turns it off in every case",
    )
    chat.set_defaults(func=cmd_chat)

    schema = _sub(
        sub, "schema", "print the JSON Schema of every line agentproto reads and writes",
        "The JSON Schema (draft 7) of every line: protocol 1 frames and events, and the ops framing.",
        "  python3 -m agentproto schema > agentproto.schema.json\n"
        "  npx json-schema-to-typescript -i agentproto.schema.json -o agentproto.d.ts",
    )
    schema.set_defaults(func=cmd_schema)

    bridge = _sub(
        sub, "mcp-bridge", "a stdio MCP server relayed to a session's tools_url (HTTP)",
        "A stdio MCP server that relays every message to a session's tools_url, for agents that\n"
        "take only stdio MCP servers. It exits 0 at the end of its input, 1 once the session is gone.",
        "  AGENTPROTO_TOOLS_URL=http://127.0.0.1:PORT/TOKEN/mcp/agentproto python3 -m agentproto mcp-bridge",
    )
    bridge.add_argument(
        "url",
        metavar="URL",
        nargs="?",
        help="the session's tools_url; better in AGENTPROTO_TOOLS_URL: the URL holds a secret token, "
        "and a command line is visible to every local user",
    )
    bridge.set_defaults(func=cmd_mcp_bridge)

    replay = _sub(
        sub, "replay", "re-run a recording (--record) and check every response: exit 0 same, 1 drift, 2 bad file",
        "Re-runs a file written by --record with no agent CLI and no network: the agents' recorded wire\n"
        "stands in for them, and every response must come out as it was recorded (times, ids and\n"
        "ports normalized). Exit 0: the same; 1: a drift, shown; 2: not a readable recording.",
        "  python3 -m agentproto serve --record session.ndjson < commands.ndjson\n"
        "  python3 -m agentproto replay session.ndjson\n"
        "  python3 -m agentproto replay --update session.ndjson   # accept an intended change",
    )
    replay.add_argument("path", metavar="PATH")
    replay.add_argument(
        "--update", action="store_true", help="rewrite the recorded responses from this run (keeps the agent wire)"
    )
    replay.set_defaults(func=cmd_replay)

    inspect = _sub(
        sub, "inspect", "a running sidecar's live sessions (--sock), or what turns cost (--view cost)",
        "The live sessions of a sidecar started with --control (or AGENTPROTO_CONTROL), read through\n"
        "that socket; or, with --view cost, what turns cost, from the observations database.",
        "  python3 -m agentproto serve --control /tmp/ap.ctl &\n"
        "  python3 -m agentproto inspect --sock /tmp/ap.ctl\n"
        "  python3 -m agentproto inspect --view cost --since 7d --by model --top 5",
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


def _check_usage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The flags argparse accepts but that would be silently ignored: each a usage error."""
    command = args.command
    flag = "--mock" if args.top_mock is not None else "--record" if args.top_record is not None else None
    if args.top_replay is not None and (command or args.top_single_shot or flag):
        parser.error(f"--replay PATH goes alone (it is `replay PATH`), not with {command or flag or '--single-shot'}")
    if args.top_single_shot and command not in (None, "agent"):
        parser.error(f"--single-shot is the ops framing's, not {command}'s: use `agentproto --single-shot` alone")
    if command is None:
        if flag and not args.top_single_shot:
            parser.error(f"{flag} without a command needs --single-shot (or goes after one: serve {flag} …)")
        return
    if flag:
        parser.error(f"{flag} goes after the command: agentproto {command} {flag} …")
    sub = _subparser(parser, command)
    if command == "serve":
        transport = args.transport
        allowed = {"--port": ("http",), "--socket": ("unix",), "--listen": ("unix", "http"), "--auth-token": ("http",)}
        given = {"--port": args.port, "--socket": args.socket, "--listen": args.listen, "--auth-token": args.auth_token}
        for flag, transports in allowed.items():
            if given[flag] is not None and transport not in transports:
                needs = " or ".join(f"--transport {t}" for t in transports)
                sub.error(f"{flag} needs {needs} (the transport is {transport})")
    elif command == "chat":
        if args.mock is not None and args.agent != "mock":
            sub.error(f"--mock plays a script as the mock agent; it does not go with {args.agent}")


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:  # argparse keeps its subparsers here, and only here
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[name]
            return found
    return parser


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
        parser = build_parser()
        args = parser.parse_args(argv)
        _check_usage(parser, args)
        if args.top_replay and not getattr(args, "func", None):
            args.func, args.path, args.update = cmd_replay, args.top_replay, False
        elif args.top_single_shot and not getattr(args, "func", None):
            args.func, args.mock, args.record, args.stall_timeout = cmd_agent, args.top_mock, args.top_record, 60.0
            args.single_shot = True
        elif args.top_single_shot:
            args.single_shot = True  # `--single-shot agent`: the same as `agent --single-shot`
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            commands = "serve, agent, list, chat, schema, mcp-bridge, replay, inspect"
            sys.stderr.write(f"\nagentproto: give a command ({commands})\n")
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
