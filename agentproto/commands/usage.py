"""The usage errors that name the nearest valid word: a mistyped command, flag or choice,
answered with ``Did you mean 'list'?`` (after ``unknown command 'lst'``). Imported by cli_args.py and cli.py only
once there is such an error: difflib and this module cost a start nothing otherwise. Each
error goes out through the parser whose command it is (its one-line usage error, exit 2).
"""

from __future__ import annotations

import argparse

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, NoReturn


def did_you_mean(word: str, choices: Any) -> str:
    """`` Did you mean 'X'?`` for the choice nearest ``word``, or nothing."""
    import difflib

    near = difflib.get_close_matches(word, [str(choice) for choice in choices], n=1, cutoff=0.6)
    return f" Did you mean '{near[0]}'?" if near else ""


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each command's parser, by name."""
    for action in parser._actions:  # argparse keeps its subparsers here, and only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def shown_flags(parser: argparse.ArgumentParser) -> list[str]:
    """The flags a parser shows in its help (hidden ones are never suggested)."""
    return [flag for a in parser._actions if a.help != argparse.SUPPRESS for flag in a.option_strings]


def not_a_choice(parser: argparse.ArgumentParser, action: argparse.Action, value: Any) -> NoReturn:
    """``value`` is not one of ``action``'s choices: an unknown command, or a bad choice."""
    choices = action.choices or ()
    near = did_you_mean(str(value), choices)
    if isinstance(action, argparse._SubParsersAction):
        parser.error(f"unknown command '{value}'.{near}")
    where = "/".join(action.option_strings) or action.metavar or action.dest
    parser.error(f"argument {where}: invalid choice: '{value}'.{near} Choose from {', '.join(map(str, choices))}")


def unknown_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: list[str]) -> NoReturn:
    """What argparse left over (``parse_known_args``): a usage error from the command's own
    parser, naming the first unknown flag and the nearest one that command has (or the
    commands that have it)."""
    sub = subparsers(parser).get(args.command, parser) if args.command else parser
    first = extras[0]
    if not first.startswith("-") or first == "-":
        sub.error(f"unexpected argument '{first}'")
    flag = first.split("=", 1)[0]
    near = did_you_mean(flag, shown_flags(sub))
    if not near:
        owners = [name for name, command in subparsers(parser).items() if flag in shown_flags(command)]
        if owners:
            near = f" It is a flag of: {', '.join(owners)} (`{parser.prog} {owners[0]} {flag}`)"
    sub.error(f"unknown flag '{flag}'.{near}")
