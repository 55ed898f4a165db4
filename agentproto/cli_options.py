"""The flags several commands share (``--record`` and ``--db``, the listener's bounds, ``--mock``,
``--max-terminals``, ``--timeout``), and the types of their values: each a usage error
(exit 2) naming the flag when its value is not one. cli_args.py builds the command line
with them; like it, nothing here imports more than argparse (start-up time)."""

from __future__ import annotations

import argparse


def record_option(parser: argparse.ArgumentParser, control: bool = True) -> None:
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
    parser.add_argument(
        "--db-keep", metavar="SPAN", help="prune observations older than SPAN (90d, 12w, 36h, or days; "
        "default: AGENTPROTO_DB_KEEP, else 90d; 0 or none keeps every row)"
    )  # fmt: skip
    if control:
        parser.add_argument(
            "--control", metavar="PATH", help="answer inspect on a 0600 Unix socket at PATH (or AGENTPROTO_CONTROL); "
            "default: <pid>.sock in the user's control directory, where `inspect` finds every sidecar"
        )  # fmt: skip
        parser.add_argument(
            "--no-control", action="store_true", help="open no control socket (`inspect` will not list this sidecar)"
        )


def idle_seconds(text: str) -> float:
    """A ``--session-idle-timeout``: a finite number of seconds, 0 for never."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (0 <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more, got {text}")
    return value


def count(text: str) -> int:
    """A bound: a whole number above 0."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number above 0, got {text!r}")
    return int(text)


def listener_options(parser: argparse.ArgumentParser) -> None:
    """The per-session bounds of the loopback listener (the app's tools and hooks)."""
    parser.add_argument(
        "--tool-connections", type=count, default=32, metavar="N",
        help="the app's tools: the listener connections one session's agent may hold (default 32 of 256)",
    )  # fmt: skip
    parser.add_argument(
        "--tool-calls", type=count, default=32, metavar="N",
        help="the app's tools: the tool calls one session may have unanswered (default 32)",
    )  # fmt: skip


def mock_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mock", metavar="SCRIPT", help="play this mock script as the `mock` agent: a path, or the name of a "
        "shipped one (turn, question, tools, plan, ...; a wrong name lists them)",
    )  # fmt: skip


def terminals_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-terminals",
        type=count,
        default=16,
        metavar="N",
        help="live terminals one ACP session may hold (default 16); one more is an error to the agent",
    )


def probe_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout", type=seconds, default=10.0, metavar="SECONDS",
        help="how long one agent's probe may take (default 10)",
    )  # fmt: skip


def seconds(text: str) -> float:
    """A ``--stall-timeout``: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text}")
    return value


def http_session_options(parser: argparse.ArgumentParser, scope: str = "") -> None:
    """What serve's HTTP transport and the console share (``scope``: which transports of the
    command a flag is for, when not all): the idle timeout, the event streams' ring, the
    listener's bounds, the terminals, ``--record``/``--db``/``--control``."""
    parser.add_argument(
        "--session-idle-timeout", type=idle_seconds, metavar="SECONDS",
        help=f"{scope and scope + ', mcp over HTTP: '}close a session idle this long (no turn, no open request, "
        "no request or event stream for it; default 1800, 0 never)",
    )  # fmt: skip
    parser.add_argument(
        "--ring-events", type=count, metavar="N",
        help=f"{scope and scope + ': '}the events of each session its event streams keep for a reconnect "
        "(default 2000; 4 MiB at most)",
    )  # fmt: skip
    listener_options(parser)
    terminals_option(parser)
    record_option(parser)
