"""The command line's grammar: every command, flag, help text and example, the one-line usage
errors (exit 2), and the flags that would be silently ignored refused as usage errors.
cli.py runs what this parses; nothing here imports more than argparse (start-up time).

- The program is named as it was typed (``program_name``: ``python3 -m agentproto``,
  ``agentproto``, ``python3 agentproto.pyz``) in usage lines, errors and every help example,
  so each example runs as shown from a checkout, a zipapp or an install.
- A mistyped command, flag or choice is one usage line with the nearest valid one
  (``Did you mean 'list'?``): commands/usage.py, imported (with difflib) only then.
- The top-level ``--help`` lists each command once (generated from the commands defined
  here); ``completion bash|zsh`` prints a completion script generated from the same parser
  (completion.py)."""

from __future__ import annotations

import argparse
import os
import sys

from agentproto.cli_fast import version_stamp
from agentproto.cli_options import (
    http_session_options,
    listener_options,
    mock_option,
    probe_timeout,
    record_option,
    seconds,
    terminals_option,
)
from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, Callable, NoReturn

EXIT_USAGE = 2


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
        sys.stdout.write(f"agentproto {version_stamp()}\n")
        parser.exit()


def program_name(argv0: str | None = None) -> str:
    """The program as it was typed: ``python3 -m agentproto`` (argv[0] is the package's
    __main__.py), ``python3 X`` for a zipapp or the package directory run as a script, else
    ``agentproto`` (the installed launcher, a wheel's console script, an embedder)."""
    arg0 = sys.argv[0] if argv0 is None else argv0
    if os.path.basename(arg0) == "__main__.py":
        return "python3 -m agentproto"
    if arg0.endswith(".pyz") or (arg0 not in ("", "-c") and os.path.isdir(arg0)):
        return f"python3 {arg0}"
    return "agentproto"


def translations_once() -> Callable[[], None]:
    """While the parser is built, each of argparse's own texts ("options", "show this help
    message and exit", ...) is translated once, not once per command: gettext searches the
    locale's files on every call, 2 ms of every start. The results are gettext's own; the
    returned function puts argparse's lookup back (help and errors translate as before)."""
    translate: Callable[[str], str] = argparse._  # type: ignore[attr-defined]
    seen: dict[str, str] = {}

    def once(text: str) -> str:
        found = seen.get(text)
        if found is None:
            found = seen[text] = translate(text)
        return found

    def restore() -> None:
        argparse._ = translate  # type: ignore[attr-defined]

    argparse._ = once  # type: ignore[attr-defined]
    return restore


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (what was wrong, and where to look), exit 2;
    its help formatter is told the width without shutil (``_Formatter``)."""

    #: A command's one-line summary (the top-level help's list, the zsh completion).
    summary = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see `{self.prog} --help`)\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A command or a choice that is not one: the nearest valid one named (usage.py)."""
        if action.choices is not None and value not in action.choices:
            from agentproto.commands.usage import not_a_choice

            not_a_choice(self, action, value)


EPILOG = """examples:
  echo 'hello' | python3 -m agentproto chat mock
  python3 -m agentproto serve --mock turn
  echo '{"op":"capabilities"}' | python3 -m agentproto --single-shot

Each command's --help has more. Exit codes: 0 success, 1 failure, 2 usage error,
130 interrupted (Ctrl-C; 128 + the signal number for other signals)."""


def build_parser(
    commands: dict[str, Callable[[argparse.Namespace], int]], prog: str = "agentproto"
) -> argparse.ArgumentParser:
    """The whole command line; ``commands`` maps each subcommand to the function that runs it;
    ``prog`` is the program as typed (``program_name``), which every example is rewritten to."""

    def typed(text: str) -> str:
        return text.replace("python3 -m agentproto", prog)

    parser = Parser(
        prog=prog,
        description="One line-delimited JSON contract between programs and coding agents.",
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
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=Parser, help="one of the commands below"
    )
    summaries: dict[str, str] = {}  # the top-level help's one list of the commands

    def command(name: str, summary: str, description: str, examples: str) -> argparse.ArgumentParser:
        """A subcommand: its help, its examples, and the function in ``commands`` that runs it."""
        summaries[name] = summary
        found: Parser = sub.add_parser(
            name,
            description=typed(description),
            epilog="examples:\n" + typed(examples),
            formatter_class=_RawFormatter,
        )
        found.summary = summary
        found.set_defaults(func=commands[name])
        return found

    serve = command(
        "serve", "speak protocol 1 (anyagent's sidecar protocol) on stdin/stdout",
        "Protocol 1 on stdin/stdout: one JSON command per line in; the hello, replies, events, session\n"
        "errors and closed lines out. --transport serves the same operations another way.",
        "  echo '{\"id\": 1, \"cmd\": \"discover\"}' | python3 -m agentproto serve\n"
        "  python3 -m agentproto serve --mock turn\n"
        "  python3 -m agentproto serve --transport unix --listen /tmp/agentproto.sock\n"
        "  AGENTPROTO_AUTH_TOKEN=$(openssl rand -hex 16) python3 -m agentproto serve --transport http --port 8080\n"
        "  python3 -m agentproto serve --transport mcp     # register it with an MCP host (or: mcp)\n"
        "  python3 -m agentproto serve --transport mcp --port 8090   # the same over HTTP: POST /mcp",
    )
    mock_option(serve)
    serve.add_argument(
        "--stall-timeout",
        type=seconds,
        default=60.0,
        metavar="SECONDS",
        help="close a session none of whose events could be written for this long (default 60)",
    )
    serve.add_argument(
        "--transport",
        choices=("stdio", "unix", "http", "jsonrpc", "mcp"),
        default="stdio",
        help="stdio: protocol 1 frames (default); unix: protocol 1 per connection on a socket; "
        "http: the ops framing over HTTP; jsonrpc: JSON-RPC 2.0 on stdio; mcp: an MCP server on stdio "
        "(over HTTP at /mcp with --listen or --port)",
    )
    serve.add_argument(
        "--listen", metavar="ADDR", help="unix: the socket PATH; http, mcp: HOST:PORT (port 0 picks one)"
    )
    serve.add_argument("--socket", metavar="PATH", help="unix: alias of --listen")
    serve.add_argument("--port", type=int, metavar="N", help="http, mcp: shortcut for --listen 127.0.0.1:N")
    serve.add_argument(
        "--auth-token",
        metavar="TOKEN",
        help="http, mcp over HTTP: require Authorization: Bearer TOKEN (at least 16 characters; required unless the "
        "listen address is loopback). Better: set AGENTPROTO_AUTH_TOKEN, which stays out of ps; "
        "this flag wins over it",
    )
    http_session_options(serve, "http")

    agent = command(
        "agent", "the ops framing ({\"op\": ...} requests, kind lines, done) on stdin/stdout",
        "The ops framing: one {\"op\": NAME, ...} request per line, each answered by kind lines\n"
        "(event, log, progress, result, error) and one {\"kind\": \"done\", \"exit_code\": N}.",
        "  printf '%s\\n' '{\"op\":\"open\",\"agent\":\"mock\",\"dir\":\".\"}' '{\"op\":\"prompt\",\"text\":\"hi\"}' "
        "| python3 -m agentproto agent\n"
        "  echo '{\"op\":\"capabilities\"}' | python3 -m agentproto agent --single-shot",
    )
    agent.add_argument("--single-shot", action="store_true", help="read all of stdin as one request, answer, exit")
    mock_option(agent)
    agent.add_argument("--stall-timeout", type=seconds, default=60.0, metavar="SECONDS", help=argparse.SUPPRESS)
    listener_options(agent)
    terminals_option(agent)
    record_option(agent)

    lister = command(
        "list", "the agents this machine has: login, models, commands, capabilities",
        "The catalog: each agent installed here with its version and path, and what it says of\n"
        "itself (login state, models and other options, commands, capabilities), all probed in\n"
        "parallel (a throwaway session each, closed once open: nothing is prompted, no model is\n"
        "called); the missing ones in one line (--all: where each was searched, how to install it).",
        "  python3 -m agentproto list\n"
        "  python3 -m agentproto list --all --no-probe\n"
        "  python3 -m agentproto list --json | jq -r '.agents[] | [.id, .details.auth] | @json'\n"
        "  AGENTPROTO_CLAUDE_BIN=/opt/claude/bin/claude python3 -m agentproto list",
    )
    lister.add_argument("--json", action="store_true", help="print the discovery report as JSON (probes added)")
    lister.add_argument("--all", action="store_true", help="a row for each missing agent too")
    lister.add_argument("--no-probe", action="store_true", help="versions and paths only: start no agent session")
    probe_timeout(lister)

    prober = command(
        "probe", "one agent's details: login, models, options, commands, capabilities",
        "Probe one agent: a throwaway session in an empty temp dir, closed once open (nothing is prompted,\n"
        "no model is called), and what it said: version, login state (and how to log in), each\n"
        "option with its values, commands, capabilities. Exit 1 when it cannot be probed.",
        "  python3 -m agentproto probe claude\n"
        "  python3 -m agentproto probe codex --json | jq .auth\n"
        "  python3 -m agentproto probe '{\"acp\": {\"name\": \"mine\", \"path\": \"/opt/mine\", \"args\": []}}'",
    )
    prober.add_argument("agent", metavar="AGENT", help="catalog id or JSON agent reference")
    prober.add_argument("--json", action="store_true", help="print the AgentDetails as JSON")
    probe_timeout(prober)

    chat = command(
        "chat", "chat with an agent in the terminal; from a pipe, run one turn",
        "Chat with an agent. In a terminal: type a prompt, answer its questions; /help lists the\n"
        "commands (/model, /mode, /set, /cancel, /info, /quit); Ctrl-C cancels a turn, and at the\n"
        "prompt ends the chat. From a pipe: all of stdin is one prompt, the agent's answer goes to\n"
        "stdout and everything else to stderr; permission requests are denied. AGENT is a catalog\n"
        "id or a JSON agent reference ('{\"acp\": {\"name\": ..., \"path\": ..., \"args\": [...]}}' or\n"
        "'{\"id\": \"claude\", \"path\": ...}'). NO_COLOR (or --color never) turns colour off.",
        "  python3 -m agentproto chat claude\n"
        "  echo 'title for this diff' | python3 -m agentproto chat codex > title.txt\n"
        "  python3 -m agentproto chat --mock question\n"
        "  python3 -m agentproto chat '{\"acp\": {\"name\": \"mine\", \"path\": \"/opt/mine\", \"args\": []}}'\n"
        "  echo hi | python3 -m agentproto chat --json mock | jq -c .kind",
    )
    chat.add_argument("agent", nargs="?", default="mock", help="catalog id or JSON agent reference (default: mock)")
    mock_option(chat)
    chat.add_argument("--dir", metavar="DIR", help="the directory the agent works in (default: the current one)")
    chat.add_argument("--tools", metavar="FILE", help="a JSON array of the app's own tools to give the agent")
    chat.add_argument("--policy", metavar="FILE", help="a JSON permission policy (docs/guard-rails.md) for the session")
    chat.add_argument("--json", action="store_true", help="print the raw events, one JSON line each, for scripts")
    chat.add_argument(
        "--color", choices=("auto", "always", "never"), default="auto",
        help="auto: on a terminal that is not TERM=dumb (default); NO_COLOR set turns it off in every case",
    )

    command(
        "schema", "print the JSON Schema of every line agentproto reads and writes",
        "The JSON Schema (draft 7) of every line: protocol 1 frames and events, and the ops framing.",
        "  python3 -m agentproto schema > agentproto.schema.json\n"
        "  npx json-schema-to-typescript -i agentproto.schema.json -o agentproto.d.ts",
    )

    bridge = command(
        "mcp-bridge", "a stdio MCP server relayed to a session's tools_url (HTTP)",
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

    replay = command(
        "replay", "re-run recordings (--record) and check every response: exit 0 same, 1 drift, 2 bad file",
        "Re-runs a file written by --record with no agent CLI and no network: the agents' recorded wire\n"
        "stands in for them, and every response must come out as it was recorded (times, ids and\n"
        "ports normalized). Exit 0: the same; 1: a drift, shown; 2: not a readable recording.\n"
        "Several files: each replayed in turn, a line per file, and the worst code (2 > 1 > 0).",
        "  python3 -m agentproto serve --record session.ndjson < commands.ndjson\n"
        "  python3 -m agentproto replay session.ndjson\n"
        "  python3 -m agentproto replay recordings/*.ndjson    # a line per file, the worst exit code\n"
        "  python3 -m agentproto replay --update session.ndjson   # accept an intended change",
    )
    replay.add_argument("path", metavar="PATH", nargs="+", help="one recording or several (a glob: rec/*.ndjson)")
    replay.add_argument(
        "--update", action="store_true", help="rewrite the recorded responses from this run (keeps the agent wire)"
    )

    console = command(
        "console", "the live console in a browser: sessions, events, requests, what turns cost",
        "Serves the HTTP transport on a loopback port and prints a URL to open: the console page, with\n"
        "the ops endpoints and the event streams (docs/console.md). Without --auth-token or\n"
        "AGENTPROTO_AUTH_TOKEN it mints a token; the URL's #secret is good once, for 60 s.",
        "  python3 -m agentproto console\n"
        "  python3 -m agentproto console --mock turn --port 8080",
    )
    mock_option(console)
    console.add_argument("--stall-timeout", type=seconds, default=60.0, metavar="SECONDS", help=argparse.SUPPRESS)
    console.add_argument("--port", type=int, default=0, metavar="N", help="the loopback port (default 0: a free one)")
    console.add_argument(
        "--listen", metavar="HOST:PORT", help="where to listen instead (a non-loopback address needs a token)"
    )
    console.add_argument(
        "--auth-token", metavar="TOKEN",
        help="the bearer token programs use (better: AGENTPROTO_AUTH_TOKEN); default: a fresh one",
    )  # fmt: skip
    http_session_options(console)

    inspect = command(
        "inspect", "the live sessions of every sidecar you run, or what turns cost (--view cost)",
        "The live sessions of every sidecar this user runs (each serve opens a control socket in\n"
        "$AGENTPROTO_CONTROL_DIR, else $XDG_RUNTIME_DIR/agentproto, else /tmp/agentproto-UID), one\n"
        "section each; of one sidecar with --sock; one session's snapshot with --session ID; or, with\n"
        "--view cost, what turns cost, from the observations database.",
        "  python3 -m agentproto inspect\n"
        "  python3 -m agentproto inspect --session s1\n"
        "  python3 -m agentproto serve --control /tmp/ap.ctl &\n"
        "  python3 -m agentproto inspect --sock /tmp/ap.ctl\n"
        "  python3 -m agentproto inspect --view cost --since 7d --by model --top 5",
    )
    inspect.add_argument("--view", choices=("agents", "cost"), default="agents")
    inspect.add_argument("--sock", metavar="PATH", help="a sidecar's control socket (default: AGENTPROTO_CONTROL)")
    inspect.add_argument("--session", metavar="ID", help="one session's full snapshot (whichever sidecar has it)")
    inspect.add_argument("--agent", metavar="ID", help="the same as --session (the seed's name)")
    inspect.add_argument("--since", default="24h", help="cost window: 30m, 24h, 7d, or an ISO date (default 24h)")
    inspect.add_argument("--by", choices=("agent", "model", "day", "session", "db"), default="agent")
    inspect.add_argument("--top", type=int, metavar="N", help="also list the N most expensive turns")
    inspect.add_argument(
        "--db", metavar="PATH", action="append", help="the observations database (default: AGENTPROTO_DB, else "
        "the XDG state dir); again to unite several (one per machine)"
    )
    inspect.add_argument("--format", choices=("table", "json"), help="default: table on a terminal, else json")

    mcp = command(
        "mcp", "an MCP server on stdin/stdout (the same as serve --transport mcp)",
        "An MCP server on stdin/stdout: the same as `serve --transport mcp`, without the --transport\n"
        "flag that some MCP hosts (the MCP Inspector) take as their own. It takes serve's other options.",
        "  python3 -m agentproto mcp --mock turn\n"
        "  claude mcp add agentproto -- ~/.local/bin/agentproto mcp   # installed by scripts/install.py",
    )
    transport_only = {
        "help", "transport", "listen", "socket", "port", "auth_token", "session_idle_timeout", "ring_events",
    }  # fmt: skip
    for action in serve._actions:  # serve's options, whoever added them, but the other transports'
        if action.dest not in transport_only:
            mcp._add_action(action)
    mcp.set_defaults(transport="mcp", **dict.fromkeys(transport_only - {"help", "transport"}))

    completion = command(
        "completion", "print a shell completion script (bash or zsh)",
        "Prints a completion script for the agentproto command: its commands, flags and choices.",
        "  source <(python3 -m agentproto completion bash)      # or in ~/.bashrc\n"
        "  python3 -m agentproto completion zsh > ~/.zfunc/_agentproto   # a directory on $fpath",
    )
    completion.add_argument("shell", choices=("bash", "zsh"))

    # The one list of the commands, in the order they are shown (mcp next to serve).
    order = list(summaries)
    order.insert(order.index("serve") + 1, order.pop(order.index("mcp")))
    width = max(map(len, order)) + 3
    listing = "\n".join(f"  {name:<{width}}{summaries[name]}" for name in order)
    parser.epilog = f"commands:\n{listing}\n\n" + typed(EPILOG)
    return parser


def check_usage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The flags argparse accepts but that would be silently ignored: each a usage error."""
    command = args.command
    flag = "--mock" if args.top_mock is not None else "--record" if args.top_record is not None else None
    if args.top_replay is not None and (command or args.top_single_shot or flag):
        parser.error(f"--replay PATH goes alone (it is `replay PATH`), not with {command or flag or '--single-shot'}")
    if args.top_single_shot and command not in (None, "agent"):
        parser.error(f"--single-shot is the ops framing's, not {command}'s: use `{parser.prog} --single-shot` alone")
    if command is None:
        if flag and not args.top_single_shot:
            parser.error(f"{flag} without a command needs --single-shot (or goes after one: serve {flag} …)")
        return
    if flag:
        parser.error(f"{flag} goes after the command: {parser.prog} {command} {flag} …")
    sub = _subparser(parser, command)
    if getattr(args, "no_control", False) and getattr(args, "control", None):
        sub.error("--no-control and --control PATH contradict each other: give one")
    if command == "serve":
        transport = args.transport
        allowed = {
            "--port": ("http", "mcp"),
            "--socket": ("unix",),
            "--listen": ("unix", "http", "mcp"),
            "--auth-token": ("http", "mcp"),
            "--session-idle-timeout": ("http", "mcp"),
            "--ring-events": ("http",),
        }
        given = {
            "--port": args.port,
            "--socket": args.socket,
            "--listen": args.listen,
            "--auth-token": args.auth_token,
            "--session-idle-timeout": args.session_idle_timeout,
            "--ring-events": args.ring_events,
        }
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
