"""The catalog of known agents and discovery of their executables.

Discovery order, per agent: the ``AGENTPROTO_<ID>_BIN`` override, then ``PATH``, then the
agent's known locations and the npm global prefix. Nothing here spawns a process; the
engine asks for versions separately, through the loop.

The catalog is the built-in agents (``MOCK``, ``CATALOG``) and then the ACP agents the user
declares in agents.json (agents_file.py: its rules), read only when the catalog is
consulted (``all_specs``, ``spec_for`` of an id the built-ins lack, ``problems``): never at
start-up, and a declared id never shadows a built-in one.
"""

from __future__ import annotations

import importlib
import os
import re

from agentproto.core.errors import AgentError
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.core.wire import Record

if TYPE_CHECKING:
    from typing import Any, Mapping

    from agentproto.core.wire_types import AgentInstallation, MissingAgent
    from agentproto.drivers.agents_file import Loaded
    from agentproto.drivers.base import Driver


class AgentSpec(Record):
    """A catalog agent (treat it as immutable: specs are shared)."""

    id: str
    name: str
    #: Executable names to look for, first match wins.
    commands: tuple[str, ...]
    install_hint: str
    #: "module:Class" of the driver, imported on first use.
    driver: str
    #: For ACP agents: the arguments that make the executable speak ACP.
    acp_args: tuple[str, ...] | None = None
    #: Extra places to look (``~`` expanded), before the npm global prefix.
    known_locations: tuple[str, ...] = ()
    version_args: tuple[str, ...] = ("--version",)
    extra: dict[str, Any] = {}

    @property
    def env_override(self) -> str:
        return "AGENTPROTO_" + re.sub(r"[^A-Za-z0-9]", "_", self.id).upper() + "_BIN"

    def driver_class(self) -> "type[Driver]":
        module, _, name = self.driver.partition(":")
        driver: type[Driver] = getattr(importlib.import_module(module), name)
        return driver


MOCK = AgentSpec(
    id="mock",
    name="Mock",
    commands=(),
    install_hint="built in: nothing to install",
    driver="agentproto.drivers.mock:MockDriver",
)

#: Every catalog agent after ``mock``: the agents with their own driver, then the ACP
#: agents (below). Driver issues add their entries here.
CATALOG: list[AgentSpec] = [
    AgentSpec("claude", "Claude Code", ("claude",), "npm install -g @anthropic-ai/claude-code",
              "agentproto.drivers.claude.driver:ClaudeDriver", known_locations=("~/.claude/local", "~/.local/bin")),
    AgentSpec("codex", "Codex", ("codex",), "npm install -g @openai/codex",
              "agentproto.drivers.codex.driver:CodexDriver", known_locations=("~/.local/bin",)),
    # Antigravity's cask links ``agy`` into Homebrew's bin (macOS and Linuxbrew); a manual
    # install puts it in ~/.local/bin.
    AgentSpec("agy", "Antigravity", ("agy",), "brew install --cask antigravity-cli",
              "agentproto.drivers.agy.driver:AgyDriver",
              known_locations=("~/.local/bin", "/opt/homebrew/bin", "/home/linuxbrew/.linuxbrew/bin",
                               "/usr/local/bin")),
]


def _acp(
    agent_id: str,
    name: str,
    command: str,
    acp_args: tuple[str, ...],
    install_hint: str,
    known_locations: tuple[str, ...] = (),
    **extra: Any,
) -> AgentSpec:
    """A catalog agent spoken to over ACP (the Agent Client Protocol) by the ACP driver."""
    return AgentSpec(
        id=agent_id,
        name=name,
        commands=(command,),
        install_hint=install_hint,
        driver="agentproto.drivers.acp.driver:AcpDriver",
        acp_args=acp_args,
        known_locations=known_locations,
        extra=extra,
    )


# ACP agents. ``login`` maps an ACP auth method id of the "agent" type (a login the agent
# runs itself, which ACP cannot show) to the login step a person can take instead;
# ``env`` holds variables the agent needs under a sidecar (the session's env wins).
CATALOG += [
    _acp(
        "gemini", "Gemini CLI", "gemini", ("--acp",), "npm install -g @google/gemini-cli",
        env={"GEMINI_CLI_NO_RELAUNCH": "true"},
        # No MCP server in a folder Gemini does not trust (acp/folder_trust.py).
        folder_trust="gemini",
        # Gemini CLI 0.61.0 reads a file before writing it and takes only a thrown Error
        # as "no such file"; the ACP SDK rejects with the plain JSON-RPC error object, so
        # no answer to fs/read_text_file lets it create a file. Not offered that method, it
        # reads with its own rights (as its shell does) and still writes through fs/*.
        fs_read=False,
        login={
            "oauth-personal": {"Terminal": {"command": ["gemini"], "env": {},
                                            "description": "Run gemini and choose Login with Google"}},
            "gemini-api-key": {"EnvVar": {"name": "GEMINI_API_KEY"}},
            "vertex-ai": {"EnvVar": {"name": "GOOGLE_API_KEY"}},
        },
    ),
    _acp("claude-acp", "Claude Agent (ACP)", "claude-agent-acp", (), "npm install -g @zed-industries/claude-agent-acp"),
    _acp(
        "codex-acp", "Codex (ACP)", "codex-acp", (), "npm install -g @zed-industries/codex-acp",
        login={"chatgpt": {"Terminal": {"command": ["codex", "login"], "env": {},
                                        "description": "Log in with ChatGPT (needs the codex CLI)"}}},
    ),
    _acp("cursor", "Cursor Agent", "cursor-agent", ("acp",), "curl https://cursor.com/install -fsS | bash",
         ("~/.local/bin",)),
    _acp("qwen", "Qwen Code", "qwen", ("--acp",), "npm install -g @qwen-code/qwen-code"),
    _acp("kiro", "Kiro CLI", "kiro-cli", ("acp",), "curl -fsSL https://cli.kiro.dev/install | bash", ("~/.local/bin",)),
    _acp("opencode", "opencode", "opencode", ("acp",), "npm install -g opencode-ai", ("~/.opencode/bin",)),
    _acp("goose", "goose", "goose", ("acp",),
         "curl -fsSL https://github.com/block/goose/releases/download/stable/download_cli.sh | bash",
         ("~/.local/bin",)),
]


#: Compiled on first use (``re`` caches it), never by a start.
_VERSION = r"\d+(?:\.\d+)+(?:[-+][0-9A-Za-z.-]+)?"


def clean_version(text: str) -> str:
    """The version number in what ``--version`` printed (``2.1.332 (Claude Code)`` and
    ``codex-cli 0.171.0`` both name one), or the text itself when it holds none."""
    match = re.search(_VERSION, text)
    return match.group(0) if match else text.strip()


def _declared() -> "Loaded":
    from agentproto.drivers import agents_file  # only when the catalog is consulted

    return agents_file.load([MOCK.id, *(spec.id for spec in CATALOG)])


def user_specs() -> list[AgentSpec]:
    """The ACP agents the user declares in agents.json (the valid entries)."""
    return [
        AgentSpec(
            id=d.id,
            name=d.name,
            commands=(d.command,),
            install_hint=d.install_hint,
            driver="agentproto.drivers.acp.driver:AcpDriver",
            acp_args=d.args,
            version_args=d.version_args,
            extra={"env": d.env, "declared": True},
        )
        for d in _declared().agents
    ]


def all_specs() -> list[AgentSpec]:
    """Every catalog agent after ``mock``: the built-ins, then the user's."""
    return [*CATALOG, *user_specs()]


def problems() -> list[str]:
    """What is wrong with the user's agents.json (each a sentence naming the file)."""
    return list(_declared().problems)


def agent_ids() -> list[str]:
    return [MOCK.id, *(spec.id for spec in all_specs())]


def unknown_agent(agent_id: str) -> AgentError:
    """``NotInstalled`` for an id the catalog does not have, suggesting the closest one."""
    import difflib  # only on this path: it is not free at start-up

    known = agent_ids()
    close = difflib.get_close_matches(agent_id.lower(), known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    # An entry of agents.json that was refused: say why, not only that the id is unknown.
    mine = (f": agents.{agent_id}:", f": agents.{agent_id}.")
    why = [p for p in problems() if ": agents." not in p or any(m in p for m in mine)]
    said = "".join(f"; {p}" for p in why[:3])
    return AgentError.not_installed(agent_id, f"unknown agent: {agent_id}{hint} (known: {', '.join(known)}){said}")


def spec_for(agent_id: str) -> AgentSpec | None:
    if agent_id == "mock":
        return MOCK
    for spec in CATALOG:
        if spec.id == agent_id:
            return spec
    for spec in user_specs():
        if spec.id == agent_id:
            return spec
    return None


def npm_global_bins(environ: Mapping[str, str] | None = None) -> list[str]:
    """Where ``npm install -g`` puts executables, worked out without running npm."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    prefixes: list[str] = []
    if env.get("NPM_CONFIG_PREFIX"):
        prefixes.append(env["NPM_CONFIG_PREFIX"])
    npmrc = os.path.expanduser("~/.npmrc")
    try:
        with open(npmrc, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition("=")
                if key.strip() == "prefix" and value.strip():
                    prefixes.append(os.path.expanduser(value.strip()))
    except OSError:
        pass
    import shutil  # here, not at the top: a start that looks nothing up must not pay for it

    node = shutil.which("node", path=env.get("PATH"))
    if node:
        prefixes.append(os.path.dirname(os.path.dirname(os.path.realpath(node))))
    prefixes += [os.path.expanduser("~/.npm-global"), "/usr/local"]
    bins: list[str] = []
    for prefix in prefixes:
        path = os.path.join(prefix, "bin")
        if path not in bins:
            bins.append(path)
    return bins


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def locate(spec: AgentSpec, environ: Mapping[str, str] | None = None) -> tuple[str, str] | list[str]:
    """``(path, source)`` of the agent's executable, or the places searched."""
    import shutil  # here, not at the top: a start that looks nothing up must not pay for it

    env: Mapping[str, str] = os.environ if environ is None else environ
    searched: list[str] = []
    override = env.get(spec.env_override)
    if override:
        searched.append(f"${spec.env_override}={override}")
        if _executable(override):
            return os.path.abspath(override), "EnvOverride"
        found = shutil.which(override, path=env.get("PATH"))
        if found:
            return found, "EnvOverride"
    path_var = env.get("PATH", os.defpath)
    for command in spec.commands:
        found = shutil.which(command, path=path_var)
        if found:
            return found, "Path"
    searched.append("PATH")
    # The agent's own install places first, then wherever npm puts global executables.
    for directory in [*(os.path.expanduser(d) for d in spec.known_locations), *npm_global_bins(env)]:
        for command in spec.commands:
            candidate = os.path.join(directory, command)
            if candidate in searched:
                continue  # a known location that is also npm's bin: once
            searched.append(candidate)
            if _executable(candidate):
                return candidate, "KnownLocation"
    return searched


def installation(spec: AgentSpec, path: str, source: str) -> AgentInstallation:
    return {
        "id": spec.id,
        "name": spec.name,
        "executable_path": path,
        "source": source,
        "upgrade": None,
        "acp_args": list(spec.acp_args) if spec.acp_args is not None else None,
    }


def missing(spec: AgentSpec, searched: list[str]) -> MissingAgent:
    return {"id": spec.id, "name": spec.name, "searched": searched, "install_hint": spec.install_hint}


def resolve_ref(agent: Any) -> tuple[AgentSpec, AgentInstallation]:
    """Turn an AgentRef into its spec and AgentInstallation, or raise ``NotInstalled``."""
    if isinstance(agent, str):
        spec = spec_for(agent)
        if spec is None:
            raise unknown_agent(agent)
        if spec is MOCK:
            return spec, installation(spec, "mock", "Pinned")
        found = locate(spec)
        if isinstance(found, list):
            raise AgentError.not_installed(
                agent, f"agent not installed: {agent}; install it with: {spec.install_hint}"
            )
        return spec, installation(spec, *found)
    if "acp" in agent:
        acp = agent["acp"]
        spec = AgentSpec(
            id=acp["name"],
            name=acp["name"],
            commands=(),
            install_hint="",
            driver="agentproto.drivers.acp.driver:AcpDriver",
            acp_args=tuple(acp.get("args", [])),
        )
        return _pinned(spec, acp["name"], acp["path"])
    found_spec = spec_for(agent["id"])
    if found_spec is None:
        raise unknown_agent(agent["id"])
    return _pinned(found_spec, agent["id"], agent["path"])


def _pinned(spec: AgentSpec, name: str, path: str) -> tuple[AgentSpec, AgentInstallation]:
    """An agent at the exact path the app gave."""
    if not _executable(path):
        raise AgentError.not_installed(name, f"agent not installed: no executable at {path}")
    return spec, installation(spec, path, "Pinned")
