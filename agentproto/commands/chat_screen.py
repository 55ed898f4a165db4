"""What ``agentproto chat`` shows, and where: the screen, and the words for each request.

Rules of this file:
- stdout carries only the agent's answer (its text, or with ``--json`` the raw events);
  everything else (prompts, questions, tool lines, notes) goes to stderr, so
  ``chat < q > answer.txt`` leaves only the answer in the file.
- stdout is written through ``streams.Output``: never blocking the loop, and a reader
  that goes away (``| head``) ends the chat through its ``on_error``, quietly. Each part
  of the answer is written at once, unless stdout is full: then the loop writes it when
  stdout takes more (a retry per part would copy what is queued: a flood's cost squared).
- Colour only when asked for or on a terminal that takes it (``--color auto``: not
  ``TERM=dumb``), never under ``NO_COLOR``. A spinner, elapsed time and the one updating
  tool line only on a live terminal (``listing.live_terminal``): never into a pipe.
- A transient status line is drawn only at the start of an empty line, and erased before
  anything else is written, so it never mixes with the agent's text.
- What is typed while a turn runs (chat_input.py) shows at the end of the status line.
- The banner is wrapped to the terminal's width.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from typing import Any, Callable

from agentproto.commands.listing import SPINNER, is_terminal, live_terminal
from agentproto.core.errors import write_stderr
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.loopio.loop import Loop
from agentproto.loopio.streams import Output

if TYPE_CHECKING:
    from agentproto.core.wire_types import (
        Answer,
        ConfigOption,
        FileDiff,
        LoginMethod,
        Question,
        SessionInfo,
        ToolUpdate,
        TurnUsage,
    )


def use_color(choice: str) -> bool:
    if os.environ.get("NO_COLOR"):
        return False  # NO_COLOR wins over everything, --color always included
    if choice in ("always", "never"):
        return choice == "always"
    return is_terminal(sys.stderr) and os.environ.get("TERM", "") != "dumb"


class Screen:
    """stdout for the answer, stderr for the rest; one idea of the cursor for both."""

    #: A status line (spinner, tool progress) appears after this long without output.
    QUIET = 0.4

    def __init__(self, loop: Loop, color: str, on_stdout_gone: Callable[[OSError], None]) -> None:
        self.loop = loop
        self.out = Output(loop, sys.stdout.fileno(), on_stdout_gone)
        self.color = use_color(color)
        self.live = live_terminal(sys.stderr)
        self.out_is_tty = is_terminal(sys.stdout)
        self.open: str | None = None  # the stream whose last line is unfinished: "out" or "err"
        self.status_shown = False
        self.last_write = loop.time()
        self.frame = 0
        self.muted = False

    def style(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color and code else text

    # -- the answer -------------------------------------------------------------------
    def answer(self, text: str) -> None:
        if not text:
            return
        self._take_line("out")
        self.out.send(text.encode("utf-8", "surrogateescape"))
        self.out.flush()  # a terminal shows it now, in order with what stderr shows
        self.open = None if text.endswith("\n") else "out"
        self.last_write = self.loop.time()

    def end_answer(self) -> None:
        """The turn is over: the answer's last line ends, whatever the stream is."""
        if self.open == "out":
            self.answer("\n")

    # -- everything else (stderr) -----------------------------------------------------
    def note(self, text: str, code: str = "") -> None:
        """One or more whole lines on stderr, on a line of their own."""
        self.fresh_line()
        self._err(self.style(code, text) + "\n")

    def stream(self, text: str, code: str = "") -> None:
        """Part of a line on stderr (reasoning as it streams)."""
        if not text:
            return
        self._take_line("err")
        self._err(self.style(code, text))
        self.open = None if text.endswith("\n") else "err"

    def ask(self, text: str, code: str = "33") -> None:
        """A question, left open on its line for the answer typed after it."""
        self.fresh_line()
        self._err(self.style(code, text))
        self.open = "err"

    def typed(self) -> None:
        """A line was typed: the terminal's echo of Enter ended the line."""
        self.open = None
        self.last_write = self.loop.time()

    def fresh_line(self) -> None:
        self.clear_status()
        if self.open == "out" and self.out_is_tty:
            self.answer("\n")  # on a terminal; into a pipe the answer stays as the agent wrote it
        elif self.open == "err":
            self._err("\n")
        self.open = None

    def _take_line(self, stream: str) -> None:
        """Before part of a line on ``stream`` ("out" or "err"): the status line goes, and the
        other stream's unfinished line ends first."""
        self.clear_status()
        if self.open not in (None, stream):
            self.fresh_line()

    def mute(self) -> None:
        """Nothing more on stderr either (stdout's reader went away: the chat ends quietly)."""
        self.live = False
        self.muted = True

    def _err(self, text: str) -> None:
        if self.muted:
            return
        write_stderr(text)  # never blocks: a stderr nobody reads costs nothing
        self.last_write = self.loop.time()

    # -- the status line (live terminals only) -----------------------------------------
    def status(self, text: str, since: float | None = None, typed: str | None = None) -> None:
        """Draw ``text`` with a spinner (and the time since ``since``) on the current empty
        line, once nothing has been written for ``QUIET`` seconds; ``typed`` (what is being
        typed meanwhile) at its end, as much of its end as fits."""
        if not self.live or self.open is not None:
            return
        if not self.status_shown and not typed and self.loop.time() - self.last_write < self.QUIET:
            return
        self.frame += 1
        line = f"{SPINNER[self.frame % len(SPINNER)]} {text}"
        if since is not None:
            line += f" {self.loop.time() - since:.0f}s"
        width = max(20, terminal_width() - 1)
        shown = self.style("2", line[:width])
        if typed:
            tail = "  > " + typed
            room = width - len(tail)
            if room < 12:  # the typing wins: the spinner alone, then as much as fits
                tail = tail if len(tail) <= width - 2 else "…" + tail[-(width - 3) :]
                room = width - len(tail)
            shown = self.style("2", line[: max(0, room)]) + tail
        write_stderr("\r\x1b[K" + shown)
        self.status_shown = True

    def clear_status(self) -> None:
        if self.status_shown:
            self.status_shown = False
            write_stderr("\r\x1b[K")


def terminal_width() -> int:
    """stderr's terminal's width (80 when it has none, or says 0)."""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns or 80
    except (OSError, ValueError):
        return 80


# -- the words ----------------------------------------------------------------------------

HELP = """commands:
  /help                 this list
  /model [NAME]         show the models, or switch to NAME
  /mode [NAME]          show the modes, or switch to NAME
  /set OPTION VALUE     set any option the agent offers (/info lists them)
  /cancel               cancel the running turn (Ctrl-C does too)
  /info                 the agent, the session and its options
  /quit                 end the chat (Ctrl-D too; Ctrl-C at the prompt)
  //TEXT                send /TEXT to the agent"""



def tool_kind(kind: Any) -> str:
    if isinstance(kind, dict) and "Mcp" in kind:
        return f"mcp {kind['Mcp']['server']}/{kind['Mcp']['tool']}"
    return str(kind)


def tool_line(tool: dict[str, Any]) -> str:
    return f"[{tool_kind(tool['kind'])}] {tool['title']} ({tool['status']})"


def what_will_run(tool: ToolUpdate) -> list[str]:
    """What a permission would let happen, as the user must see it before saying yes: the
    command line, the files and how much of them changes, the URL."""
    lines: list[str] = []
    value = tool.get("input")
    if isinstance(value, dict) and len(value) == 1:
        ((tag, body),) = value.items()
        if tag == "Command" and isinstance(body, dict):
            cwd = body.get("cwd")
            lines.append(f"$ {body.get('command', '')}" + (f"   (in {cwd})" if cwd else ""))
        elif tag == "Url":
            lines.append(f"URL: {body}")
        elif tag == "Query":
            lines.append(f"search: {body}")
        elif tag == "Pattern":
            lines.append(f"pattern: {body}")
        elif tag == "Path" and not tool.get("diffs"):
            lines.append(f"path: {body}")
        elif tag == "Text":
            lines.append(str(body))
    for diff in tool.get("diffs") or []:
        lines.append(diff_summary(diff))
    raw = tool.get("raw")
    if not lines and isinstance(raw, dict) and raw.get("input") is not None:
        shown = json.dumps(raw["input"], ensure_ascii=False)
        lines.append(shown if len(shown) <= 300 else shown[:300] + "…")
    return lines


def diff_summary(diff: FileDiff) -> str:
    """``path: +A -R lines`` (``new file``) of one FileDiff."""
    import difflib  # only when an edit is asked about

    old, new = diff.get("old_text"), diff.get("new_text") or ""
    if old is None:
        return f"{diff['path']}: new file, {len(new.splitlines())} lines"
    added = removed = 0
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0):
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return f"{diff['path']}: +{added} -{removed} lines"


def permission_keys(options: list[str]) -> str:
    keys = []
    if "AllowOnce" in options:
        keys.append("[y]es")
    if "AllowAlways" in options:
        keys.append("[a]lways")
    if any(option.startswith("Deny") for option in options):
        keys.append("[n]o (n REASON says why)")
    else:
        keys.append("[n]o")
    return ", ".join(keys)


def login_steps(login: list[LoginMethod]) -> list[str]:
    """An AuthRequired's login methods as steps a person can take."""
    steps = []
    for method in login:
        if "Terminal" in method:
            body = method["Terminal"]
            names = " ".join(f"{name}=…" for name in body.get("env") or {})
            command = (names + " " if names else "") + shlex.join(body.get("command") or [])
            described = body.get("description")
            steps.append(f"run `{command}` in a terminal" + (f" ({described})" if described else ""))
        elif "EnvVar" in method:
            steps.append(f"set {method['EnvVar']['name']} in the environment")
        else:
            steps.append(json.dumps(method))
    return steps


def usage_line(usage: TurnUsage | None, cost: float | None, seconds: float) -> str | None:
    """The end of a turn: its tokens and the agent's cost so far, when the agent told them."""
    parts = []
    if usage:
        cached = usage.get("cached_input_tokens") or 0
        tokens = f"{usage.get('input_tokens', 0):,} tokens in"
        if cached:
            tokens += f" ({cached:,} cached)"
        parts.append(tokens + f", {usage.get('output_tokens', 0):,} out")
    if cost is not None:
        parts.append(f"${cost:.4f} so far")
    if not parts:
        return None
    return "(" + " · ".join([*parts, f"{seconds:.1f}s"]) + ")"


# -- reading what was typed ----------------------------------------------------------------

def choices_named(question: Question, text: str) -> list[str]:
    """The choice ids ``text`` names: numbers (1-based) or labels, comma-separated when
    the question takes several; [] when it names none of them."""
    choices = question["choices"]
    parts = [p.strip() for p in text.split(",")] if question["multi_select"] else [text]
    picked: list[str] = []
    for part in parts:
        if part.isdigit() and 0 < int(part) <= len(choices):
            picked.append(choices[int(part) - 1]["id"])
            continue
        match = [c["id"] for c in choices if c["label"].lower() == part.lower() or c["id"] == part]
        if not match:
            return []
        picked.append(match[0])
    return picked


def permission_answer(options: list[str], line: str) -> Answer | None:
    """y once, a always, n (or nothing) deny, ``n REASON`` deny saying why; None: ask again."""
    text = line.strip()
    word, _, reason = text.partition(" ")
    word = word.lower()
    denies = [o for o in options if o.startswith("Deny")]
    if word in ("y", "yes") and "AllowOnce" in options:
        return {"Permission": "AllowOnce"}
    if word in ("a", "always") and "AllowAlways" in options:
        return {"Permission": "AllowAlways"}
    if word in ("", "n", "no"):
        if reason.strip() and denies:
            return {"Deny": {"message": reason.strip()}}
        if "DenyOnce" in options:
            return {"Permission": "DenyOnce"}
        return {"Deny": {"message": "denied"}} if denies else "Cancel"
    return None


def app_answer(request: dict[str, Any], line: str, interactive: bool) -> Answer:
    if "Hook" in request:
        return "Cancel"  # the neutral {}
    if not interactive:
        return {"Deny": {"message": "nobody at a terminal to answer this tool call"}}
    text = line.rstrip("\n")
    return {"ToolResult": {"content": [{"type": "text", "text": text}], "is_error": False}}


def event_note(name: str, body: Any, json_events: bool) -> tuple[str, str] | None:
    """The note (its text, its colour) an event kind the chat only reports gets: a
    diagnostic always, a plan and a reroute unless ``--json`` shows the raw events."""
    if name == "Diagnostic":
        return f"{body['level'].lower()}: {body['message']}", "2"
    if json_events:
        return None
    if name == "PlanUpdated":
        return "\n".join(f"  - [{e['status']}] {e['text']}" for e in body["entries"]), ""
    if name == "PlanProposed":
        return body["markdown"], ""
    if name == "ModelRerouted":
        return f"(the provider answered with {body['to']} instead of {body['from']})", "2"
    return None


def stop_note(stop: Any) -> tuple[str, str] | None:
    """What a turn's end says of its StopReason (nothing when it completed)."""
    if isinstance(stop, dict) and "Failed" in stop:
        return f"turn failed: {stop['Failed']['message']}", "31"
    if stop == "Cancelled":
        return "turn cancelled", "2"
    if stop == "Refused":
        return "the agent refused", "2"
    return None


def welcome(info: dict[str, Any], directory: str, width: int = 80, mock: str | None = None) -> str:
    """The lines an interactive chat opens with, wrapped to ``width``: the agent (its version
    when it has one of its own), the session and where it works; ``mock``: what the mock
    plays; then the keys and commands."""
    import textwrap  # only the banner needs it

    name, version = info["agent"]["name"], info["details"].get("version") or ""
    agent = name if not version or version.lower() == name.lower() or version == "mock" else f"{name} {version}"
    home = os.path.expanduser("~")
    shown = "~" + directory[len(home) :] if home not in ("", "/") and directory.startswith(home + os.sep) else directory
    lines = [f"{agent} · session {info['id']} · in {shown}"]
    if mock is not None:
        lines.append(mock)
    lines.append("/help lists the commands · Ctrl-C cancels a turn · Ctrl-D ends the chat")
    wrapped: list[str] = []
    for line in lines:
        wrapped += textwrap.wrap(line, max(20, width - 1), break_on_hyphens=False) or [""]
    return "\n".join(wrapped)


def mock_banner(script: dict[str, Any] | None, path: str | None) -> str:
    """What the mock agent will do, in words, for the banner."""
    if script is None:
        return "the mock agent echoes each prompt back (--mock SCRIPT plays a script)"
    turns = len(script.get("turns") or [])
    named = os.path.basename(path) if path else "a script"
    return f"the mock agent, playing {named}: {turns} scripted turn{'s' if turns != 1 else ''}, then nothing"


def permission_words(body: dict[str, Any]) -> tuple[str, str | None, str]:
    """A Permission request, as the chat asks it: the question, what would run (None:
    nothing to show), and the keys that answer it."""
    tool = body["tool"]
    details = what_will_run(tool) + ([body["detail"]] if body.get("detail") else [])
    shown = "\n".join("  " + line for line in details) if details else None
    return f"Allow {tool_kind(tool['kind'])}: {tool['title']}?", shown, permission_keys(body["options"]) + ": "


def question_words(q: dict[str, Any]) -> tuple[str, str | None, str]:
    """A Question's question, as the chat asks it: its text (after its header), its choices
    numbered (None without), and what the answer may be."""
    header = f"[{q['header']}] " if q.get("header") else ""
    choices = "  " + "  ".join(f"{i + 1}) {c['label']}" for i, c in enumerate(q["choices"])) if q["choices"] else None
    how = ["numbers or labels, comma-separated" if q["multi_select"] else "a number or a label"]
    if not q["choices"]:
        how = ["your answer"]
    elif q["allows_free_text"]:
        how.append("or your own answer")
    return header + q["text"], choices, f"({' '.join(how)}; empty cancels) "


# -- /info and /set: the session's options, in words --------------------------------------


def config_options(info: SessionInfo | None) -> list[ConfigOption]:
    """The agent's configuration options (its details' ``config_options``)."""
    if info is None:
        return []
    return list(info["details"].get("config_options") or [])


def describe_option(info: SessionInfo | None, option: str) -> str:
    """One option (``/set OPTION``, ``/model``): its value, its choices, how to set it;
    or which options there are (``info`` None: no session yet)."""
    options = config_options(info)
    found = next((o for o in options if o["id"] == option), None)
    if info is None or found is None:
        known = ", ".join(o["id"] for o in options) or "none"
        name = str(info["agent"]["name"]) if info is not None else "the agent"
        return f"{name} has no option {option} (options: {known})"
    current = info["configuration"]["options"].get(option)
    if current is None:
        current = found.get("current")
    kind = found["kind"]
    choices = kind["Select"]["choices"] if isinstance(kind, dict) else None
    lines = [f"{option}: {json.dumps(current)}" + ("" if found.get("live", True) else " (not live)")]
    if choices:
        lines += [f"  {c['value']}" + (f"  {c['label']}" if c["label"] != c["value"] else "") for c in choices]
    elif kind == "Boolean":
        lines.append("  true, false")
    lines.append(f"/{option} NAME switches" if option in ("model", "mode") else f"/set {option} VALUE sets it")
    return "\n".join(lines)


def session_summary(info: SessionInfo, cwd: str) -> str:
    """``/info``: the agent, the session, its resume token, options and features."""
    details = info["details"]
    lines = [
        f"agent: {info['agent']['name']} {details.get('version') or ''}".rstrip() + f" ({info['agent']['id']})",
        f"session: {info['id']} in {cwd}, {info.get('status', 'Idle')}",
    ]
    if info.get("resume_token"):
        lines.append(f"resume token: {info['resume_token']}")
    current = info["configuration"]["options"]
    for option in config_options(info):
        value = current.get(option["id"], option.get("current"))
        lines.append(f"option {option['id']}: {json.dumps(value)}")
    features = details.get("capabilities", {}).get("features") or []
    if features:
        lines.append("features: " + ", ".join(features))
    return "\n".join(lines)
