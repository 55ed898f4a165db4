#!/usr/bin/env python3
"""A test double of Google's Antigravity CLI ``agy``, after seed 003 (stdlib only).

The real ``agy`` cannot be installed here; this program behaves as seed 003 and the public
captures of agy 1.x's stream say it does, so a driver that works against it should work
against the real CLI. Where both are silent the choice is marked CHOICE.

Command line (Go ``flag`` rules, as agy parses them): ``-x``/``--x``, ``--x=v`` or ``--x v``;
a string flag takes the next argument whatever it looks like (``-p --model x`` is the prompt
"--model", then ``x`` is ``Error: unexpected argument "x".``); parsing stops at the first
positional (the subcommand); an unknown flag is ``flag provided but not defined: -x`` and a
value flag at the end is ``flag needs an argument: -x``; usage errors exit 2 (stderr only).
``--version`` prints the version (``FAKE_AGY_VERSION``, default 1.1.24). ``agy models``
prints ``id<TAB>name`` lines; with ``--output-format json`` one object ``{"models":
[{"id","name"}]}`` (CHOICE). ``FAKE_AGY_MODELS=id[=Name],...`` replaces the list; the first
is the default model. ``agy changelog`` prints notes. agy with no ``--print`` would start
the interactive UI: refused (exit 1).

Signed out: ``FAKE_AGY_SIGNED_OUT=1`` (CHOICE). ``models`` then fails "Please sign in" (exit
1); print mode fails at startup: stderr, one ERROR ``result`` (error "authentication failed
or timed out", conversation_id "", zero usage) and no ``init``, exit 1. An unknown
``--model`` or ``--conversation`` fails the same way. ``FAKE_AGY_SIGNED_OUT=stderr``: print
mode says "Please sign in" on stderr only (no ``result``), exit 1; any other value is the
ERROR result's error text (the CLI's wording may change).

Print mode, ``--input-format stream-json --output-format stream-json``: ``init`` is written
at launch, before any input: ``{"event":"init","conversation_id":ID,"init":{"model","cwd",
"tools","permission_mode"}}`` (the id beside ``init``, as the real CLI writes it). A resumed
conversation then gets a DONE ``system_message`` step (with ``text``, CHOICE). Then MCP
servers are connected and SessionStart hooks run, and each stdin line is handled in turn
until EOF (exit 0). Every step/result carries ``conversation_id`` inside its body. Text
input (``--print PROMPT`` alone) runs one turn; ``--output-format json`` then prints the
result object, ``text`` the response. A non-empty prompt with stream-json input is a first turn.

Input lines: ``{"event":"user","message":{"role":"user","content":"..."|[text blocks]}}``
(blocks joined with "\\n").
A failing line writes ``error: ...`` on stderr AND an ERROR ``result`` with that error, then
the process goes on (CHOICE: "fails the line"): not JSON, no ``event``, ``control_request``
("not supported yet"), no ``message``, no content, a non-text block (``stream input content
block type "image" is not supported``). Any other ``event`` is ignored with a warning, as
the real CLI does. Content starting with ``/settings``, ``/hooks`` or ``/usage`` (slash
commands, unless ``--disable-slash-commands``) ends the process: stderr, exit 2, as observed.

Steps (``step_update``): ``step_index`` counts the whole conversation; ``user_input`` (DONE,
no text, as captured; also for a hook-injected message); ``agent_response`` (ACTIVE updates
with ``text_delta``, then DONE with the last delta, always the trailing "\\n" the real model
ends with, plus ``duration_seconds`` and ``usage``; a tool-only call is one DONE without
text); ``tool`` (ACTIVE with ``tool_name`` and ``tool_info`` {name, parameters}; DONE adds
``output``; a failure is state ERROR with ``tool_info.error`` {type TOOL_ERROR, message};
file contents are left out of the shown parameters, as captured). ``result``: status,
response (the turn's last text), error (ERROR only), duration_seconds, num_turns (user turns
of the whole conversation), usage (sums of the conversation, earlier processes included;
total = input + output, thinking counted inside output). Without
``--dangerously-skip-permissions`` (``request-review``) a run_command/write/replace/MCP call is
auto-denied: no tool step, the turn ends SUCCESS with ``denied_actions``, a note on stderr.

The model: each turn's script, from a line ``FAKE_AGY_TURN: <json>`` in the user text, else
entry N of ``FAKE_AGY_SCRIPT`` (a JSON file, re-read each turn: a list of turns, or
``{"turns": [...], "default": turn}``) where N counts the conversation's earlier user turns (so
a restarted process goes on with the script), else ``"{echo}"``. A turn is a string (one reply),
a list of items, or ``{"calls": [items]}``. An item is a string (a reply) or an object:
  model call  {"text", "deltas": 3, "delta_delay": 0, "delay": 0 (before replying; SIGINT
              cuts it), "thinking_tokens", "usage": {overrides}, "hidden_steps": n (indexes
              consumed unseen, as the real stream skips some), "tools": [{"name",
              "parameters"}]}; PreInvocation hooks run before it, PostInvocation after;
              tools: run_command {CommandLine, Cwd} (really run with /bin/sh in the cwd, in
              this process group, environment inherited), view_file {AbsolutePath,
              StartLine, EndLine}, write_to_file {TargetFile, CodeContent, Overwrite},
              replace_file_content {TargetFile, TargetContent, ReplacementContent,
              AllowMultiple}, list_dir {DirectoryPath}, call_mcp_tool {ServerName, ToolName,
              Arguments}
  {"error": "msg"}   end the turn with an ERROR result (the process goes on)
  {"exit": 3}        exit now with that status, no result (an unexpected death)
  {"sleep": s}  {"raw": ["line", ...]} (written to stdout as is)  {"stderr": "text"}
Placeholders in texts and tool parameters: {user} {echo} ("echo: <user>" plus " [injected:
...]" when a hook injected messages) {injected} {history} (earlier user turns) {previous}
(the previous user text) {steps} {model} {cwd} {conversation} {permission_mode} {rules}
(always-on rule texts) {rule_files} {mcp_tools} ({server}/{tool}, ...) {tool_output}
{invocation} {workspaces} {env:NAME}.

Plugins (rules, ``mcp_config.json``, ``hooks.json``): see tests/fakes/fake_agy_world.py, which must
sit beside this file. ``FAKE_AGY_DUMP=PATH`` writes what was loaded to PATH (mode 0600).

State: ``FAKE_AGY_STATE``, else ``$HOME/.gemini/antigravity-cli``; conversations in
``conversations/ID.json`` (0600), saved after every step. ``--conversation ID`` resumes one
(``--continue`` the newest); the model still comes from ``--model`` (or the default).

Signals: SIGINT during a turn kills what the turn runs (with its descendants), prints ``error:
interrupted`` on stderr, writes an ERROR result with error "interrupted" (a cut-off tool step
gets no DONE) and exits 130; idle, it prints the same and exits 130 with no result. SIGTERM and
SIGHUP kill the children and exit 128+signal, silently.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from fake_agy_world import SIGNALS, Stop, ToolError, World, on_signal, critical, warn, write_private  # noqa: E402

VERSION = os.environ.get("FAKE_AGY_VERSION") or "1.1.24"
MODELS = [("gemini-3.1-pro-high", "Gemini 3.1 Pro (High)"), ("gemini-3.1-pro-low", "Gemini 3.1 Pro (Low)"),
          ("gemini-3-flash", "Gemini 3 Flash"), ("claude-sonnet-4-6", "Claude Sonnet 4.6 (Thinking)"),
          ("gpt-oss-120b-medium", "GPT-OSS 120B (Medium)")]
TOOLS = ["call_mcp_tool", "command_status", "find_by_name", "grep_search", "list_dir", "read_url_content",
         "replace_file_content", "run_command", "search_web", "view_file", "write_to_file"]
GATED = {"run_command": ("command", "RunCommand"), "write_to_file": ("write_file", "WriteToFile"),
         "replace_file_content": ("write_file", "ReplaceFileContent"), "call_mcp_tool": ("mcp", "CallMcpTool")}
HIDDEN_PARAMS = {"CodeContent", "TargetContent", "ReplacementContent"}
SLASH_COMMANDS = {"settings", "hooks", "usage"}
USAGE_KEYS = ("input_tokens", "output_tokens", "thinking_tokens", "cache_read_tokens", "total_tokens")
FLAGS = {"add-dir": "list", "agent": "str", "continue": "bool", "conversation": "str",
         "dangerously-skip-permissions": "bool", "disable-slash-commands": "bool", "effort": "str", "help": "bool",
         "h": "bool", "input-format": "str", "json-schema": "str", "log-file": "str", "mode": "str", "model": "str",
         "new-project": "bool", "output-format": "str", "p": "str", "print": "str", "print-timeout": "str",
         "project": "str", "prompt-interactive": "str", "sandbox": "bool", "version": "bool"}
ALIASES = {"p": "print", "h": "help"}
BOOLS = {"1": True, "t": True, "true": True, "0": False, "f": False, "false": False}
USAGE = ("Usage: agy [flags] [command]\n\nCommands: changelog, help, models\n\nFlags:\n"
         + "".join(f"  --{name}{'' if kind == 'bool' else ' value'}\n" for name, kind in FLAGS.items() if len(name) > 1)
         + "  -p value  (short for --print)\n")
PLACEHOLDER = re.compile(r"\{(env:[A-Za-z_][A-Za-z0-9_]*|[a-z_]+)\}")


class UsageError(Exception):
    """A command line agy refuses before doing anything: stderr, exit 2."""


class InputError(Exception):
    """A stdin line that fails: ``error: ...`` and an ERROR result."""


class TurnError(Exception):
    """A scripted model error: the turn ends with an ERROR result."""


def gotype(value: Any) -> str:
    return {str: "string", list: "array", bool: "bool", dict: "object"}.get(type(value), "number")


def model_list() -> list[tuple[str, str]]:
    spec = os.environ.get("FAKE_AGY_MODELS")
    if not spec:
        return MODELS
    return [(part.partition("=")[0], part.partition("=")[2] or part.partition("=")[0])
            for part in spec.split(",") if part.strip()]


def signed_out() -> bool:
    return os.environ.get("FAKE_AGY_SIGNED_OUT", "") not in ("", "0")


PLEASE_SIGN_IN = "error: Please sign in: run `agy` once in a terminal and sign in\n"


def state_dir() -> Path:
    return Path(os.environ.get("FAKE_AGY_STATE") or Path.home() / ".gemini" / "antigravity-cli")


def parse_flags(args: list[str], opts: dict[str, Any]) -> list[str]:
    """Go's ``flag`` package: returns the positional arguments left after the flags."""
    i = 0
    while i < len(args):
        arg = args[i]
        if len(arg) < 2 or arg[0] != "-":
            break
        i += 1
        if arg == "--":
            break
        name = arg[2:] if arg.startswith("--") else arg[1:]
        if not name or name[0] in "-=":
            raise UsageError(f"bad flag syntax: {arg}")
        name, eq, value = name.partition("=")
        kind = FLAGS.get(name)
        if kind is None:
            raise UsageError(f"flag provided but not defined: -{name}")
        key = ALIASES.get(name, name)
        if kind == "bool":
            if eq and value.lower() not in BOOLS:
                raise UsageError(f'invalid boolean value "{value}" for -{name}: parse error')
            opts[key] = BOOLS[value.lower()] if eq else True
            continue
        if not eq:
            if i >= len(args):
                raise UsageError(f"flag needs an argument: -{name}")
            value, i = args[i], i + 1
        if kind == "list":
            opts.setdefault(key, []).append(value)
        else:
            opts[key] = value
    return args[i:]


class Agy:
    """One print-mode process: its conversation, plugins, model and turns."""

    def __init__(self, opts: dict[str, Any]) -> None:
        self.opts = opts
        self.out_format = opts.get("output-format", "text")
        self.in_format = opts.get("input-format", "text")
        self.cwd = os.getcwd()
        self.dirs = [self.cwd] + [os.path.abspath(d) for d in opts.get("add-dir", [])]
        self.permission = "always-proceed" if opts.get("dangerously-skip-permissions") else "request-review"
        self.model = opts.get("model") or model_list()[0][0]
        self.conv_id, self.resumed = str(uuid.uuid4()), False
        self.steps: list[dict[str, Any]] = []
        self.world = World(self.cwd, self.dirs, state_dir(), VERSION)
        self.t: dict[str, Any] = {}
        self.final: dict[str, Any] | None = None

    # -- launch
    def run(self) -> int:
        for flag, value, valid in (("input-format", self.in_format, ("text", "stream-json")),
                                   ("output-format", self.out_format, ("text", "json", "stream-json"))):
            if value not in valid:
                raise UsageError(f'error: invalid --{flag} "{value}" (valid: {", ".join(valid)})')
        if self.in_format == "stream-json" and self.out_format != "stream-json":
            raise UsageError("error: --input-format stream-json requires --output-format stream-json")
        prompt = self.opts["print"]
        if self.in_format == "text" and not prompt.strip():
            raise UsageError("error: empty prompt (pass it to --print, or use --input-format stream-json)")
        failure = self.startup()
        if failure:
            sys.stderr.write(f"error: {failure}\n")
            if os.environ.get("FAKE_AGY_SIGNED_OUT") == "stderr":
                return 1  # no result line: the stderr is all it says
            self.emit("result", {"conversation_id": "", "status": "ERROR", "response": "", "error": failure,
                                 "duration_seconds": 0, "num_turns": 0, "usage": dict.fromkeys(USAGE_KEYS, 0)})
            return self.flush_final(1)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, on_signal)
        try:
            self.emit("init", {"model": self.model, "cwd": self.cwd, "tools": TOOLS,
                               "permission_mode": self.permission}, conversation_id=self.conv_id)
            if self.resumed:
                text = f"Resumed conversation {self.conv_id} ({len(self.steps)} earlier steps)."
                self.step(self.new_step({"type": "system_message", "text": text}), "DONE", "system_message", text=text)
            self.world.load_plugins()
            if os.environ.get("FAKE_AGY_DUMP"):
                write_private(Path(os.environ["FAKE_AGY_DUMP"]), json.dumps({
                    "argv": sys.argv[1:], "cwd": self.cwd, "workspaces": self.dirs, "model": self.model,
                    "permission_mode": self.permission, "conversation_id": self.conv_id, "resumed": self.resumed,
                    **self.world.summary()}, indent=2))
            self.run_hooks("SessionStart", {"source": "resume" if self.resumed else "startup"})
            if self.in_format == "text":
                return self.flush_final(0 if self.turn(prompt) == "SUCCESS" else 1)
            if prompt:
                self.turn(prompt)
            while True:
                line = sys.stdin.buffer.readline()
                if not line:
                    return 0
                self.handle_line(line)
        except Stop as stop:
            SIGNALS["frozen"] = True
            self.world.kill_children()
            if stop.signum == signal.SIGINT:
                sys.stderr.write("error: interrupted\n")
                return 130
            return 128 + stop.signum
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            return 1
        finally:
            SIGNALS["frozen"] = True
            self.world.close()

    def startup(self) -> str | None:
        if signed_out():
            how = os.environ["FAKE_AGY_SIGNED_OUT"]
            if how == "stderr":
                return PLEASE_SIGN_IN[len("error: "):].strip()
            sys.stderr.write("Authentication required (FAKE_AGY_SIGNED_OUT is set).\n")
            return "authentication failed or timed out" if how == "1" else how
        ids = [m for m, _ in model_list()]
        if self.model not in ids:
            return f'model "{self.model}" is not recognized; available models: {", ".join(ids)}'
        wanted, store = self.opts.get("conversation"), state_dir() / "conversations"
        if not wanted and self.opts.get("continue"):
            found = sorted(store.glob("*.json"), key=lambda p: p.stat().st_mtime) if store.is_dir() else []
            wanted = found[-1].stem if found else None
        if wanted:
            try:
                if not re.fullmatch(r"[A-Za-z0-9._-]{1,128}", wanted):
                    raise OSError
                record = json.loads((store / f"{wanted}.json").read_text(encoding="utf-8"))
                steps = record["steps"]
                assert isinstance(steps, list)
            except (OSError, ValueError, KeyError, TypeError, AssertionError):
                return f'conversation "{wanted}" not found'
            self.conv_id, self.steps, self.resumed = wanted, steps, True
        return None

    def flush_final(self, code: int) -> int:
        if self.final is not None and self.out_format == "json":
            print(json.dumps(self.final))
        elif self.final is not None and self.out_format == "text":
            sys.stdout.write(self.final["response"] if self.final["status"] == "SUCCESS" else "")
        return code

    # -- plugins: rules, hooks, MCP servers
    # -- output and the conversation record
    def emit(self, event: str, body: dict[str, Any], **top: Any) -> None:
        if event == "result":
            self.final = body
        if self.out_format == "stream-json":
            self.write(json.dumps({"event": event, **top, event: body}, separators=(",", ":")))

    def write(self, line: str) -> None:
        with critical():
            sys.stdout.buffer.write(line.encode() + b"\n")
            sys.stdout.buffer.flush()

    def step(self, index: int, state: str, step_type: str, **fields: Any) -> None:
        self.emit("step_update", {"conversation_id": self.conv_id, "step_index": index, "state": state,
                                  "step_type": step_type, **fields})

    def new_step(self, record: dict[str, Any]) -> int:
        self.steps.append(record)
        self.save()
        return len(self.steps) - 1

    def save(self) -> None:
        with critical():
            write_private(state_dir() / "conversations" / f"{self.conv_id}.json",
                          json.dumps({"id": self.conv_id, "steps": self.steps}))

    def user_turns(self) -> list[str]:
        return [s["text"] for s in self.steps if s.get("type") == "user_input" and s.get("source") == "user"]

    def totals(self) -> dict[str, int]:
        usage = dict.fromkeys(USAGE_KEYS, 0)
        for s in self.steps:
            for key, value in (s.get("usage") or {}).items():
                usage[key] = usage.get(key, 0) + int(value)
        return usage

    # -- input
    def handle_line(self, raw: bytes) -> None:
        try:
            text = self.parse_input(raw)
        except InputError as e:
            sys.stderr.write(f"error: {e}\n")
            self.emit("result", {"conversation_id": self.conv_id, "status": "ERROR", "response": "", "error": str(e),
                                 "duration_seconds": 0, "num_turns": len(self.user_turns()), "usage": self.totals()})
            return
        if text is not None:
            self.turn(text)

    def parse_input(self, raw: bytes) -> str | None:
        try:
            line = raw.decode("utf-8")
            if not line.strip():
                return None
            msg = json.loads(line)
        except ValueError as e:
            raise InputError(f"invalid stream input message: {e}") from None
        if not isinstance(msg, dict):
            raise InputError(f"json: cannot unmarshal {gotype(msg)} into Go value of type printmode.streamInputMessage")
        event = msg.get("event")
        if event is None:
            raise InputError('stream input message is missing the "event" field')
        if event == "control_request":
            raise InputError('stream input "control_request" messages are not supported yet')
        if event != "user":
            warn(f'ignoring unsupported stream input message event "{event}"')
            return None
        if "message" not in msg:
            raise InputError('stream input "user" message is missing the "message" field')
        message = msg["message"]
        if not isinstance(message, dict):
            raise InputError(f"json: cannot unmarshal {gotype(message)} into Go struct field streamInputMessage.message"
                             " of type printmode.streamInputUserMessage")
        if message.get("role", "user") != "user":
            raise InputError(f'stream input message role "{message.get("role")}" is not supported')
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for block in content:
                kind = block.get("type") if isinstance(block, dict) else gotype(block)
                if kind != "text":
                    raise InputError(f'stream input content block type "{kind}" is not supported')
                if not isinstance(block.get("text"), str):
                    raise InputError('stream input "text" content block has no "text" string')
                parts.append(block["text"])
            content = "\n".join(parts)
        if content is not None and not isinstance(content, str):
            raise InputError(f"json: cannot unmarshal {gotype(content)} into Go struct field"
                             " streamInputUserMessage.message.content of type []printmode.contentBlock")
        if not content or not content.strip():
            raise InputError('stream input "user" message has no content')
        command = re.match(r"/(\w+)", content.lstrip())
        if command and command.group(1) in SLASH_COMMANDS and not self.opts.get("disable-slash-commands"):
            sys.stderr.write(f"error: /{command.group(1)} is answered by the CLI itself and is unavailable with"
                             " --input-format stream-json\n")
            raise SystemExit(2)
        return content

    # -- the model
    def turn(self, text: str) -> str:
        start = time.monotonic()
        earlier = self.user_turns()
        self.t = {"user": text, "injected": [], "tool_output": "", "response": "", "invocation": 0,
                  "history": len(earlier), "previous": earlier[-1] if earlier else "", "steps": len(self.steps)}
        status, error, denied = "SUCCESS", None, None
        try:
            self.step(self.new_step({"type": "user_input", "source": "user", "text": text}), "DONE", "user_input")
            try:
                denied = self.run_items(self.script(text))
            except (ToolError, ValueError, TypeError, AttributeError) as e:  # a broken script, not agy's error
                status, error = "ERROR", f"fake_agy script: {e}"
            except TurnError as e:
                status, error = "ERROR", str(e)
            self.run_hooks("Stop", {"numSteps": len(self.steps)})
        except Stop as stop:
            SIGNALS["frozen"] = True
            self.world.kill_children()
            if stop.signum == signal.SIGINT:
                self.result(start, "ERROR", "interrupted", None)
            raise
        with critical():  # the turn is over: a signal from here on finds it idle
            self.result(start, status, error, denied)
        return status

    def run_items(self, items: list[dict[str, Any]]) -> list[Any] | None:
        invocation = 0
        for item in items:
            if "exit" in item:
                sys.stderr.write(str(item.get("stderr", "")))
                raise SystemExit(int(item["exit"]))
            if "error" in item:
                sys.stderr.write(f"error: {item['error']}\n")
                raise TurnError(str(item["error"]))
            if "sleep" in item:
                time.sleep(float(item["sleep"]))
            elif "raw" in item or "stderr" in item:
                for line in item.get("raw", []):
                    self.write(str(line))
                sys.stderr.write(str(item.get("stderr", "")))
                sys.stderr.flush()
            else:
                denied = self.call(item, invocation)
                invocation += 1
                if denied:
                    return denied
        return None

    def result(self, start: float, status: str, error: str | None, denied: list[Any] | None) -> None:
        self.save()
        body: dict[str, Any] = {"conversation_id": self.conv_id, "status": status, "response": self.t["response"]}
        if error is not None:
            body["error"] = error
        body.update(duration_seconds=round(time.monotonic() - start, 6), num_turns=len(self.user_turns()),
                    usage=self.totals())
        if denied:
            body["denied_actions"] = denied
        self.emit("result", body)

    def script(self, text: str) -> list[dict[str, Any]]:
        try:
            directive = re.search(r"^FAKE_AGY_TURN:(.*)$", text, re.M)
            turn: Any = None
            if directive:
                turn = json.loads(directive.group(1))
            elif os.environ.get("FAKE_AGY_SCRIPT"):
                data = json.loads(Path(os.environ["FAKE_AGY_SCRIPT"]).read_text(encoding="utf-8"))
                turns = data if isinstance(data, list) else data.get("turns", [])
                n = self.t["history"]
                turn = turns[n] if n < len(turns) else None if isinstance(data, list) else data.get("default")
        except (OSError, ValueError, AttributeError) as e:
            raise ToolError(f"cannot read the turn: {e}") from None
        turn = "{echo}" if turn is None else turn
        if isinstance(turn, dict) and "calls" in turn:
            turn = turn["calls"]
        items = turn if isinstance(turn, list) else [turn]
        items = [{"text": item} if isinstance(item, str) else item for item in items]
        if not all(isinstance(item, dict) for item in items):
            raise ToolError("a turn is a string, a list of items, or {\"calls\": [...]}")
        return items

    def call(self, call: dict[str, Any], invocation: int) -> list[Any] | None:
        self.t["invocation"] = invocation
        for output in self.run_hooks("PreInvocation", {"invocationNum": invocation,
                                                       "initialNumSteps": self.t["steps"]}):
            for injected in output.get("injectSteps") or []:
                if isinstance(injected, dict) and isinstance(injected.get("userMessage"), str):
                    self.t["injected"].append(injected["userMessage"])
                    self.step(self.new_step({"type": "user_input", "source": "hook", "text": injected["userMessage"]}),
                              "DONE", "user_input")
        for _ in range(int(call.get("hidden_steps", 0))):
            self.new_step({"type": "hidden"})
        time.sleep(float(call.get("delay", 0)))
        text = self.expand(str(call.get("text", "")))
        text += "\n" if text and not text.endswith("\n") else ""
        began = time.monotonic()
        record: dict[str, Any] = {"type": "agent_response", "model": self.model, "text": ""}
        index = self.new_step(record)
        tokens = re.findall(r"\S+\s*|\s+", text[:-1])
        size = max(1, -(-len(tokens) // max(1, int(call.get("deltas", 3)))))
        for i in range(0, len(tokens), size):
            piece = "".join(tokens[i:i + size])
            record["text"] += piece
            self.step(index, "ACTIVE", "agent_response", text_delta=piece)
            time.sleep(float(call.get("delta_delay", 0)))
        thinking = int(call.get("thinking_tokens", 0))
        usage = {"input_tokens": 100 + 10 * index, "output_tokens": len(text.split()) + thinking,
                 "thinking_tokens": thinking, "cache_read_tokens": 0}
        usage.update({k: int(v) for k, v in (call.get("usage") or {}).items() if k in USAGE_KEYS})
        usage.setdefault("total_tokens", usage["input_tokens"] + usage["output_tokens"])
        record.update(text=text, usage=usage)
        self.save()
        last = {"text_delta": text[-1:]} if text else {}
        self.step(index, "DONE", "agent_response", **last, duration_seconds=round(time.monotonic() - began, 6),
                  usage=usage)
        self.t["response"] = text or self.t["response"]
        self.run_hooks("PostInvocation", {"invocationNum": invocation})
        for tool in call.get("tools") or []:
            denied = self.tool(tool)
            if denied:
                return denied
        return None

    def expand(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.expand(v) for v in value]
        if isinstance(value, dict):
            return {k: self.expand(v) for k, v in value.items()}
        return PLACEHOLDER.sub(self._placeholder, value) if isinstance(value, str) else value

    def run_hooks(self, event: str, fields: dict[str, Any], tool: str | None = None) -> list[dict[str, Any]]:
        return self.world.run_hooks(event, {"hookEventName": event, "conversationId": self.conv_id, "cwd": self.cwd,
                                            "workspacePaths": self.dirs, "model": self.model, **fields}, tool)

    def _placeholder(self, match: re.Match[str]) -> str:
        key, t = match.group(1), self.t
        if key.startswith("env:"):
            return os.environ.get(key[4:], "")
        on = [r for r in self.world.rules if r["trigger"] == "always_on"]
        injected = " | ".join(t["injected"])
        values = {"user": t["user"], "injected": injected, "history": t["history"], "previous": t["previous"],
                  "echo": f"echo: {t['user']}" + (f" [injected: {injected}]" if injected else ""),
                  "steps": t["steps"], "model": self.model, "cwd": self.cwd, "conversation": self.conv_id,
                  "permission_mode": self.permission, "rules": "\n".join(r["text"] for r in on),
                  "rule_files": ", ".join(r["file"] for r in on), "tool_output": t["tool_output"],
                  "mcp_tools": ", ".join(f"{n}/{x['name']}" for n, s in self.world.mcp.items() for x in s.tools),
                  "invocation": t["invocation"], "workspaces": ",".join(self.dirs[1:])}
        return str(values.get(key, match.group(0)))

    # -- tools
    def tool(self, tool: Any) -> list[Any] | None:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise ToolError('a tool is {"name": ..., "parameters": {...}}')
        name, params = tool["name"], self.expand(tool.get("parameters") or {})
        if self.permission != "always-proceed" and name in GATED:
            action, display = GATED[name]
            sys.stderr.write(f'agy: no output produced: a tool required the "{action}" permission that headless mode'
                             " cannot prompt for, so it was auto-denied; re-run with --dangerously-skip-permissions\n")
            return [{"action": action, "display_name": display}]
        info = {"name": name, "parameters": {k: v for k, v in params.items() if k not in HIDDEN_PARAMS}}
        index, began = self.new_step({"type": "tool", "name": name, "parameters": params}), time.monotonic()
        self.step(index, "ACTIVE", "tool", tool_name=name, tool_info=info)
        error: str | None = None
        for output in self.run_hooks("PreToolUse", {"toolCall": {"name": name, "args": params}, "stepIdx": index},
                                     tool=name):
            if output.get("decision") == "deny":
                error = f"tool call denied by pre-tool hook: {output.get('reason', '')}"
        try:
            output_text = self.world.run_tool(name, params) if error is None else ""
        except ToolError as e:
            error = str(e)
        done = {"tool_name": name, "duration_seconds": round(time.monotonic() - began, 6)}
        if error is None:
            self.steps[index]["output"] = self.t["tool_output"] = output_text
            self.step(index, "DONE", "tool", **done, tool_info={**info, "output": output_text})
        else:
            self.steps[index]["error"] = self.t["tool_output"] = error
            self.step(index, "ERROR", "tool", **done, tool_info={**info, "error": {"type": "TOOL_ERROR",
                                                                                  "message": error}})
        self.save()
        self.run_hooks("PostToolUse", {"stepIdx": index, "error": error or ""}, tool=name)
        return None

def main(argv: list[str] | None = None) -> int:
    opts: dict[str, Any] = {}
    try:
        rest = parse_flags(sys.argv[1:] if argv is None else argv, opts)
        if opts.get("help") or rest[:1] == ["help"]:
            sys.stdout.write(USAGE)
            return 0
        if opts.get("version"):
            print(VERSION)
            return 0
        if rest:
            extra = parse_flags(rest[1:], opts)
            if rest[0] not in ("models", "changelog") or extra:
                raise UsageError(f'Error: unexpected argument "{(extra or rest)[0]}".')
            if rest[0] == "changelog":
                print(f"{VERSION}\n  - the agentproto test double of agy")
                return 0
            if signed_out():
                sys.stderr.write(PLEASE_SIGN_IN)
                return 1
            if opts.get("output-format") == "json":
                print(json.dumps({"models": [{"id": i, "name": n} for i, n in model_list()]}))
            else:
                sys.stdout.write("".join(f"{i}\t{n}\n" for i, n in model_list()))
            return 0
        if "print" not in opts:
            sys.stderr.write("error: the interactive UI needs a terminal; this double only has print mode (--print)\n")
            return 1
        return Agy(opts).run()
    except UsageError as e:
        sys.stderr.write(f"{e}\nRun 'agy --help' for usage.\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
