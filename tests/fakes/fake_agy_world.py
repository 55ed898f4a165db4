"""The world of the ``agy`` test double (tests/fakes/fake_agy.py): what its agent touches outside the conversation.

Plugins: each ``D/.agents/plugins/P/`` with a valid ``plugin.json`` {"name"}, for D the cwd and
each ``--add-dir`` (others are skipped with a warning).

- ``rules/*.md`` are cut at 24,000 bytes (front matter included), as the real CLI does silently;
  those with no ``trigger`` or ``trigger: always_on`` are always on (the model's {rules}).
- ``mcp_config.json`` ``{"mcpServers": {S: {"url"|"serverUrl", "headers"} | {"command", "args",
  "env"}}}``: server ``P_S``, connected at launch: Streamable HTTP (initialize,
  notifications/initialized, tools/list, then tools/call, keeping ``Mcp-Session-Id``; JSON or SSE
  replies, no proxy) or newline JSON-RPC on stdio; each tool's schema is written to
  ``STATE/mcp/P_S/<tool>.json`` for the model to ``view_file``. A server that fails is a warning,
  and a call of it a failed tool step.
- ``hooks.json``: ``{event: [handler]}`` or ``{set: {"enabled", event: [handler]}}``; lifecycle
  events (SessionStart, PreInvocation, PostInvocation, Stop) take flat handlers ``{"type":
  "command", "command", "timeout"}`` (seconds, default 30), PreToolUse/PostToolUse matcher groups
  ``{"matcher", "hooks": [handler]}``; the wrong shape is skipped with a warning. A handler runs
  with /bin/sh in the cwd, its camelCase input on stdin (hookEventName, conversationId, cwd,
  workspacePaths, model, and: SessionStart source "startup"|"resume"; PreInvocation
  invocationNum (0 for a turn's first model call), initialNumSteps; PostInvocation invocationNum;
  PreToolUse toolCall {name, args}, stepIdx; PostToolUse stepIdx, error; Stop numSteps); its
  stdout is read as a JSON object. PreInvocation ``{"injectSteps": [{"userMessage"}]}`` adds
  user_input steps the model reads ({injected}); PreToolUse ``{"decision": "deny", "reason"}``
  fails the tool. A handler that fails, times out or prints no object is a warning naming its
  set and event, never its command (it may hold a token), and counts as ``{}``.

Signals: the double's turn is cut by ``Stop`` (raised from the signal handler) at any point
except inside ``critical()``, so a line on stdout is never half written and a child is never
started unregistered: an interrupt always finds, and kills, what is running (the whole tree
stopped first, then killed, so no part of a command runs on after another part died).
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

RULE_LIMIT = 24_000  # the real CLI cuts each rule file here, silently
FLAT_EVENTS = {"SessionStart", "PreInvocation", "PostInvocation", "Stop"}
TOOL_EVENTS = {"PreToolUse", "PostToolUse"}
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only: never an env proxy


class ToolError(Exception):
    """A tool call (or an MCP server) that fails: the step ends in state ERROR with this message."""


class Stop(BaseException):
    """A signal: raised at the next safe point (never in the middle of an output line)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


SIGNALS: dict[str, Any] = {"depth": 0, "pending": None, "frozen": False}


def on_signal(signum: int, _frame: Any) -> None:
    if SIGNALS["depth"] or SIGNALS["frozen"]:
        SIGNALS["pending"] = SIGNALS["pending"] or signum
        return
    raise Stop(signum)


@contextmanager
def critical() -> Iterator[None]:
    """Hold signals while a line is written or a child is registered: they land right after."""
    SIGNALS["depth"] += 1
    try:
        yield
    finally:
        SIGNALS["depth"] -= 1
        if not SIGNALS["depth"] and SIGNALS["pending"] and not SIGNALS["frozen"]:
            signum, SIGNALS["pending"] = SIGNALS["pending"], None
            raise Stop(signum)


def warn(message: str) -> None:
    sys.stderr.write(f"warning: {message}\n")
    sys.stderr.flush()


def write_private(path: Path, text: str) -> None:
    """Atomically, mode 0600 (conversations and schemas may hold what the user typed)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), so an interrupt also kills ``sh -c 'a; b'``'s children."""
    parents: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class McpServer:
    """One MCP server of a plugin, as agy's client: Streamable HTTP (JSON or SSE replies) or stdio."""

    def __init__(self, name: str, config: dict[str, Any], cwd: str, version: str) -> None:
        self.name, self.config, self.cwd, self.version = name, config, cwd, version
        self.url = config.get("url") or config.get("serverUrl")
        self.session: str | None = None
        self.protocol: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.buffer = b""
        self.next_id = 0
        self.tools: list[dict[str, Any]] = []
        self.error: str | None = None

    def connect(self) -> None:
        if not self.url:
            command = self.config.get("command")
            if not isinstance(command, str):
                raise ToolError("neither url nor command")
            args = [str(a) for a in self.config.get("args") or []]
            env = {**os.environ, **{str(k): str(v) for k, v in (self.config.get("env") or {}).items()}}
            with critical():
                self.proc = subprocess.Popen([command, *args], cwd=self.cwd, env=env, stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        init = self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                           "clientInfo": {"name": "antigravity-cli", "version": self.version}}, 10)
        self.protocol = str(init.get("protocolVersion") or "2025-06-18")
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"}, 10)
        listed = self.request("tools/list", {}, 10)
        self.tools = [t for t in listed.get("tools") or [] if isinstance(t, dict) and isinstance(t.get("name"), str)]

    def request(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.next_id += 1
        reply = self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}, timeout)
        if not isinstance(reply, dict):
            raise ToolError(f"{method}: no JSON-RPC response")
        if isinstance(reply.get("error"), dict):
            raise ToolError(f"{method}: {reply['error'].get('message')} ({reply['error'].get('code')})")
        result = reply.get("result")
        return result if isinstance(result, dict) else {}

    def send(self, message: dict[str, Any], timeout: float) -> Any:
        return self._http(message, timeout) if self.url else self._stdio(message, timeout)

    def _http(self, message: dict[str, Any], timeout: float) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   **{str(k): str(v) for k, v in (self.config.get("headers") or {}).items()}}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        if self.protocol:
            headers["MCP-Protocol-Version"] = self.protocol
        request = urllib.request.Request(str(self.url), json.dumps(message).encode(), headers, method="POST")
        try:
            with DIRECT.open(request, timeout=timeout) as response:
                self.session = response.headers.get("Mcp-Session-Id") or self.session
                if "id" not in message:
                    return None
                if "text/event-stream" not in (response.headers.get("Content-Type") or ""):
                    return json.loads(response.read(16 << 20))
                data: list[str] = []
                for raw in response:  # SSE: events end at a blank line; the reply is the one with our id
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    if line.startswith("data:"):
                        data.append(line[5:].lstrip())
                    elif not line and data:
                        event, data = json.loads("\n".join(data)), []
                        if isinstance(event, dict) and event.get("id") == message["id"]:
                            return event
                return None
        except urllib.error.HTTPError as e:
            raise ToolError(f"HTTP {e.code} from the MCP server") from None
        except (OSError, ValueError) as e:  # refused, timed out, not JSON
            raise ToolError(f"MCP server unreachable: {e}") from None

    def _stdio(self, message: dict[str, Any], timeout: float) -> Any:
        assert self.proc and self.proc.stdin and self.proc.stdout
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            raise ToolError("the MCP server's stdin is closed") from None
        deadline = time.monotonic() + timeout
        while "id" in message:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                try:
                    reply = json.loads(line)
                except ValueError:
                    continue
                if isinstance(reply, dict) and reply.get("id") == message["id"] and "method" not in reply:
                    return reply
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise ToolError(f"no answer within {timeout:g}s")
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise ToolError("the MCP server exited")
            self.buffer += chunk
        return None

    def close(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class World:
    """The plugins of every workspace (the cwd and each ``--add-dir``), and the children that run."""

    def __init__(self, cwd: str, dirs: list[str], state: Path, version: str) -> None:
        self.cwd, self.dirs, self.state, self.version = cwd, dirs, state, version
        self.children: set[subprocess.Popen[bytes]] = set()
        self.rules: list[dict[str, Any]] = []
        self.hooks: dict[str, list[dict[str, Any]]] = {}
        self.mcp: dict[str, McpServer] = {}
        self.plugins: list[tuple[str, Path]] = []
        self.warnings: list[str] = []

    def load_plugins(self) -> None:
        seen: set[Path] = set()
        for workspace in self.dirs:
            root = Path(workspace) / ".agents" / "plugins"
            for pdir in sorted(root.iterdir()) if root.is_dir() else []:
                if not pdir.is_dir() or pdir.resolve() in seen:
                    continue
                seen.add(pdir.resolve())
                try:
                    name = json.loads((pdir / "plugin.json").read_text(encoding="utf-8"))["name"]
                    assert isinstance(name, str) and name
                except (OSError, ValueError, KeyError, TypeError, AssertionError):
                    self.warn(f"skipping plugin {pdir.name}: no valid plugin.json")
                    continue
                self.plugins.append((name, pdir))
                self.load_rules(name, pdir)
                self.load_hooks(name, pdir)
                self.load_mcp(name, pdir)

    def load_rules(self, plugin: str, pdir: Path) -> None:
        for path in sorted((pdir / "rules").glob("*.md")):
            raw = path.read_bytes()
            text = raw[:RULE_LIMIT].decode("utf-8", "ignore")  # the real CLI cuts silently, mid-line too
            meta: dict[str, str] = {}
            if text.startswith("---\n") and "\n---" in text[3:]:
                head, _, text = text[4:].partition("\n---")
                text = text.partition("\n")[2]
                for line in head.splitlines():
                    key, sep, value = line.partition(":")
                    if sep:
                        meta[key.strip()] = value.strip().strip("\"'")
            self.rules.append({"plugin": plugin, "file": f"{pdir.name}/rules/{path.name}", "bytes": len(raw),
                               "loaded_bytes": min(len(raw), RULE_LIMIT), "trigger": meta.get("trigger", "always_on"),
                               "text": text})

    def load_hooks(self, plugin: str, pdir: Path) -> None:
        path = pdir / "hooks.json"
        if not path.exists():
            return
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            assert isinstance(data, dict)
        except (OSError, ValueError, AssertionError):
            return self.warn(f"plugin {plugin}: hooks.json is not a JSON object")
        sets = {plugin: data} if set(data) & (FLAT_EVENTS | TOOL_EVENTS) else data
        for set_name, hooks in sets.items():
            if not isinstance(hooks, dict) or hooks.get("enabled", True) is False:
                continue
            for event, entries in hooks.items():
                if event == "enabled":
                    continue
                if event not in FLAT_EVENTS | TOOL_EVENTS or not isinstance(entries, list):
                    self.warn(f'hooks {set_name}: unsupported event "{event}" (or not a list)')
                    continue
                for entry in entries:
                    grouped = isinstance(entry, dict) and ("hooks" in entry or "matcher" in entry)
                    if grouped != (event in TOOL_EVENTS):
                        self.warn(f"hooks {set_name}.{event}: " + ("tool events take matcher groups" if grouped is False
                                                                   else "lifecycle events take flat handlers"))
                        continue
                    for handler in entry["hooks"] if grouped and isinstance(entry["hooks"], list) else [entry]:
                        if not isinstance(handler, dict) or not isinstance(handler.get("command"), str) \
                                or handler.get("type", "command") != "command":
                            self.warn(f"hooks {set_name}.{event}: a handler needs a command")
                            continue
                        self.hooks.setdefault(event, []).append({
                            "set": set_name, "command": handler["command"], "timeout": float(handler.get("timeout", 30)),
                            "matcher": entry.get("matcher", "*") if grouped else "*"})

    def load_mcp(self, plugin: str, pdir: Path) -> None:
        path = pdir / "mcp_config.json"
        if not path.exists():
            return
        try:
            servers = json.loads(path.read_text(encoding="utf-8"))["mcpServers"]
            assert isinstance(servers, dict)
        except (OSError, ValueError, KeyError, TypeError, AssertionError):
            return self.warn(f"plugin {plugin}: mcp_config.json has no mcpServers object")
        for short, config in servers.items():
            if not isinstance(config, dict) or config.get("disabled"):
                continue
            server = self.mcp[f"{plugin}_{short}"] = McpServer(f"{plugin}_{short}", config, self.cwd, self.version)
            try:
                server.connect()
            except ToolError as e:
                server.error = str(e)
                self.warn(f"MCP server {server.name}: {e}")
                continue
            for tool in server.tools:
                safe = re.sub(r"[^A-Za-z0-9._-]", "_", tool["name"])
                write_private(self.state / "mcp" / server.name / f"{safe}.json", json.dumps(tool, indent=2))

    def warn(self, message: str) -> None:
        self.warnings.append(message)
        warn(message)

    def summary(self) -> dict[str, Any]:
        """What was loaded, for FAKE_AGY_DUMP: never a URL, a header or a command (they may hold tokens)."""
        return {"plugins": [name for name, _ in self.plugins], "rules": self.rules,
                "mcp_servers": {n: {"transport": "http" if s.url else "stdio", "tools": [t["name"] for t in s.tools],
                                    "error": s.error} for n, s in self.mcp.items()},
                "hooks": {event: [h["set"] for h in hs] for event, hs in self.hooks.items()}, "warnings": self.warnings}

    def close(self) -> None:
        self.kill_children()
        for server in self.mcp.values():
            server.close()

    def run_tool(self, name: str, p: dict[str, Any]) -> str:
        def arg(key: str, default: Any = None) -> Any:
            if p.get(key, default) is None:
                raise ToolError(f"missing parameter {key}")
            return p.get(key, default)

        def path(key: str) -> Path:
            return Path(self.cwd, str(arg(key)))

        try:
            if name == "run_command":
                return self.run_child(["/bin/sh", "-c", str(arg("CommandLine"))], str(p.get("Cwd") or self.cwd),
                                      None, None)[1]
            if name == "view_file":
                lines = path("AbsolutePath").read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
                first, last = int(p.get("StartLine") or 1), int(p.get("EndLine") or len(lines))
                return "".join(lines[first - 1:last])
            if name == "write_to_file":
                target = path("TargetFile")
                if target.exists() and not p.get("Overwrite"):
                    raise ToolError(f"{target} already exists (set Overwrite to replace it)")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(str(p.get("CodeContent", "")), encoding="utf-8")
                return f"Wrote {target}"
            if name == "replace_file_content":
                target = path("TargetFile")
                old, new, body = str(arg("TargetContent")), str(arg("ReplacementContent")), target.read_text("utf-8")
                count = body.count(old) if old else 0
                if count == 0 or (count > 1 and not p.get("AllowMultiple")):
                    raise ToolError(f"TargetContent found {count} times in {target}")
                target.write_text(body.replace(old, new), encoding="utf-8")
                return f"Edited {target}"
            if name == "list_dir":
                entries = sorted(path("DirectoryPath").iterdir())
                return "".join(e.name + ("/" if e.is_dir() else "") + "\n" for e in entries)
            if name == "call_mcp_tool":
                return self.call_mcp(str(arg("ServerName")), str(arg("ToolName")), p.get("Arguments") or {})
        except FileNotFoundError as e:
            raise ToolError(f"open {e.filename}: no such file or directory") from None
        except (OSError, ValueError) as e:
            raise ToolError(str(e)) from None
        raise ToolError(f'tool "{name}" is not available in the test double')

    def call_mcp(self, server_name: str, tool: str, arguments: Any) -> str:
        server = self.mcp.get(server_name)
        if server is None or server.error:
            raise ToolError(f'MCP server "{server_name}" is not connected'
                            + (f": {server.error}" if server else f" (servers: {', '.join(self.mcp) or 'none'})"))
        result = server.request("tools/call", {"name": tool, "arguments": arguments}, 300)
        content = result.get("content") or []
        text = "\n".join(c["text"] for c in content if isinstance(c, dict) and isinstance(c.get("text"), str))
        if not text and "structuredContent" in result:
            text = json.dumps(result["structuredContent"])
        if result.get("isError"):
            raise ToolError(text or "the MCP tool failed")
        return text

    def run_child(self, argv: list[str], cwd: str, stdin: bytes | None, timeout: float | None) -> tuple[int, str]:
        with critical():  # registered before any signal can land, so an interrupt finds and kills it
            proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT if stdin is None else
                                    subprocess.DEVNULL)
            self.children.add(proc)
        try:
            out, _ = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(proc)
            raise ToolError(f"timed out after {timeout:g}s") from None
        self.children.discard(proc)
        return proc.returncode, out.decode("utf-8", "replace")

    def kill_children(self) -> None:
        for proc in list(self.children):
            self.kill(proc)

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        # Freeze the whole tree, top down, before anything dies: killed one by one, a shell
        # whose child died first could run its next command (``sleep 9; touch late``)
        # before its own kill landed. A stopped process neither goes on nor forks, so the
        # tree is listed again until no new process shows up.
        frozen: list[int] = []
        todo = [proc.pid]
        while todo:
            for pid in todo:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except OSError:
                    pass
                frozen.append(pid)
            todo = [pid for pid in descendants(proc.pid) if pid not in frozen]
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        proc.wait()
        self.children.discard(proc)

    def run_hooks(self, event: str, payload: dict[str, Any], tool: str | None = None) -> list[dict[str, Any]]:
        """Each handler of ``event`` (whose matcher takes ``tool``), fed ``payload``; their JSON outputs."""
        outputs = []
        for hook in self.hooks.get(event, []):
            matcher = hook["matcher"]
            try:
                if tool is not None and matcher not in ("", "*") and not re.fullmatch(matcher, tool):
                    continue
            except re.error:
                continue
            try:
                code, out = self.run_child(["/bin/sh", "-c", hook["command"]], self.cwd,
                                           json.dumps(payload).encode(), hook["timeout"])
                if code != 0:
                    raise ToolError(f"command failed: exit status {code}")
                output = json.loads(out) if out.strip() else {}
                if not isinstance(output, dict):
                    raise ValueError("not a JSON object")
            except (ToolError, ValueError) as e:
                warn(f'hook {hook["set"]}.{event} failed: {e}')  # never its command: it may hold a token
                continue
            outputs.append(output)
        return outputs
