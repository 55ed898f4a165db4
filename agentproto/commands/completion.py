"""``completion bash|zsh``: a shell completion script for the ``agentproto`` command, generated
from the parser that cli_args.py builds (its commands, each command's flags, the flags' fixed
choices), so a command or flag added there completes with no change here.

Rules: the script is printed, never installed (the user sources it or puts it on $fpath); it
completes the program name ``agentproto`` (the installed launcher's); a flag that takes a
value completes that value's choices, the shipped mock scripts' names (``--mock``) plus files,
or files; nothing in it runs agentproto (a completion never starts a process).
"""

from __future__ import annotations

import argparse

from agentproto.commands.usage import subparsers
from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Iterator


def _options(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The parser's shown flags (hidden ones are not offered)."""
    for action in parser._actions:
        if action.option_strings and action.help != argparse.SUPPRESS:
            yield action


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _summary(parser: argparse.ArgumentParser) -> str:
    """The command's one-line summary (cli_args.Parser keeps it), else its description's first line."""
    return str(getattr(parser, "summary", "") or (parser.description or "").split("\n")[0])


def _values(action: argparse.Action, mock_names: list[str]) -> tuple[list[str], bool]:
    """What a flag's value completes to: fixed words, and whether files too."""
    if action.choices is not None:
        return [str(choice) for choice in action.choices], False
    if action.dest in ("mock", "top_mock"):
        return mock_names, True
    return [], True


def bash(parser: argparse.ArgumentParser, mock_names: list[str]) -> str:
    commands = subparsers(parser)
    lines = [
        "# bash completion for agentproto: source <(agentproto completion bash)",
        "_agentproto() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" cmd="" i words flags',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        case "${COMP_WORDS[i]}" in',
        f"            {'|'.join(commands)}) cmd=\"${{COMP_WORDS[i]}}\"; break ;;",
        "        esac",
        "    done",
        '    case "$cmd $prev" in',
    ]
    for name, sub in [("", parser), *commands.items()]:
        for action in _options(sub):
            if not _takes_value(action):
                continue
            words, files = _values(action, mock_names)
            pattern = "|".join(f'"{name} {flag}"' for flag in action.option_strings)
            found = ([f'$(compgen -W "{" ".join(words)}" -- "$cur")'] if words else []) + (
                ['$(compgen -f -- "$cur")'] if files else []
            )
            reply = f"COMPREPLY=({' '.join(found)})"
            lines.append(f"        {pattern}) {reply}; return ;;")
    lines += ["    esac", '    case "$cmd" in']
    for name, sub in [("", parser), *commands.items()]:
        flags = [flag for action in _options(sub) for flag in action.option_strings]
        if name == "":
            others = list(commands)
        else:
            others = [str(c) for a in sub._actions if not a.option_strings and a.choices for c in a.choices]
        lines.append(f'        "{name}") flags="{" ".join(flags)}" words="{" ".join(others)}" ;;')
    lines += [
        "    esac",
        '    [[ "$cur" == -* ]] && words=$flags',  # a flag once one is begun, else commands or values
        '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "}",
        "complete -o default -F _agentproto agentproto",
        "",
    ]
    return "\n".join(lines)


def _zsh_quote(text: str) -> str:
    """Text inside a single-quoted _arguments spec: no quote, no brackets, no colons."""
    for bad, good in (("'", ""), ("[", "("), ("]", ")"), (":", " -"), ("\\", "/"), ("`", ""), ("$", "")):
        text = text.replace(bad, good)
    return text


def _zsh_specs(parser: argparse.ArgumentParser, mock_names: list[str]) -> list[str]:
    specs = []
    for action in _options(parser):
        helped = _zsh_quote(str(action.help or "").split(";")[0].split(". ")[0])
        if len(helped) > 70:
            helped = helped[:70].rsplit(" ", 1)[0] + " ..."
        for flag in action.option_strings:
            if not _takes_value(action):
                specs.append(f"'{flag}[{helped}]'")
                continue
            words, files = _values(action, mock_names)
            metavar = _zsh_quote(str(action.metavar or action.dest))
            if words and files:
                then = f'{{_alternative "names:{metavar}:({" ".join(words)})" "files:file:_files"}}'
            elif words:
                then = f"({' '.join(words)})"
            else:
                then = "_files"
            specs.append(f"'{flag}[{helped}]:{metavar}:{then}'")
    for action in parser._actions:
        if action.option_strings or isinstance(action, argparse._SubParsersAction):
            continue
        values = f"({' '.join(map(str, action.choices))})" if action.choices else "_files"
        specs.append(f"'1:{action.dest}:{values}'")  # the one positional a command has
    return specs


def zsh(parser: argparse.ArgumentParser, mock_names: list[str]) -> str:
    commands = subparsers(parser)
    described = " ".join(f"'{name}:{_zsh_quote(_summary(sub))}'" for name, sub in commands.items())
    lines = [
        "#compdef agentproto",
        "# zsh completion for agentproto: agentproto completion zsh > a directory on $fpath/_agentproto",
        "_agentproto() {",
        "    local curcontext=\"$curcontext\" state line",
        "    typeset -A opt_args",
        "    local -a commands",
        f"    commands=({described})",
        "    _arguments -C \\",
        *(f"        {spec} \\" for spec in _zsh_specs(parser, mock_names)),
        "        '1:command:->command' \\",
        "        '*::argument:->argument'",
        "    case $state in",
        "        command) _describe -t commands 'agentproto command' commands ;;",
        "        argument)",
        "            case $line[1] in",
    ]
    for name, sub in commands.items():
        specs = " ".join(_zsh_specs(sub, mock_names))
        lines.append(f"                {name}) _arguments {specs} ;;")
    lines += [
        "            esac ;;",
        "    esac",
        "}",
        'if [ "$funcstack[1]" = "_agentproto" ]; then',
        '    _agentproto "$@"',
        "else",
        "    compdef _agentproto agentproto",
        "fi",
        "",
    ]
    return "\n".join(lines)


def run(parser: argparse.ArgumentParser, shell: str) -> int:
    import sys

    from agentproto.drivers.mock_shipped import shipped_names

    write = bash if shell == "bash" else zsh
    sys.stdout.write(write(parser, shipped_names()))
    return 0
