"""The ACP session's settings: its details and configuration as reported to the engine,
the launch's ``configure`` applied while it opens, and ``configure`` later.

Rules of this file:
- An option is one of three kinds, by how the agent takes it: a config option
  (``session/set_config_option``), a mode (``session/set_mode``) or a model
  (``session/set_model``); ``acp_mapping.map_config_options`` tells which.
- A config option's answer may carry the agent's whole new list of config options (one
  change can change others): it replaces ours, and a change the app did not make is
  reported as an update of the session's details.
- An option the agent refuses is ``InvalidConfiguration`` (an auth error stays
  ``AuthRequired``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from agentproto.core.errors import AgentError, Kind
from agentproto.core.jsonrpc import OnResponse, RpcError
from agentproto.drivers.acp.mapping import map_config_options
from agentproto.drivers.fields import obj, opt_text

if TYPE_CHECKING:
    from agentproto.core.wire_types import AgentDetails, ConfigOption, SlashCommand
    from agentproto.drivers.base import Host, Lifecycle


class AcpSettings:
    """The settings half of ``AcpDriver`` (a mixin of it)."""

    # What it shares with the driver (drivers/acp/driver.py sets each one).
    host: "Host"
    life: "Lifecycle"
    _session: str | None
    _init: dict[str, Any]
    _auth: Any
    _options: list[tuple[ConfigOption, str, str]]
    _commands: list[SlashCommand]
    _features_seen: set[str]
    _reported: AgentDetails | dict[str, Any]
    # Methods of the driver's and its base's, as this half calls them: annotations only
    # (a stub here would hide Driver.validate_config, a later base of AcpDriver).
    validate_config: "Callable[[ConfigOption, Any], str | None]"
    _request: "Callable[[str, dict[str, Any], OnResponse], int]"
    _caps: "Callable[[], dict[str, Any]]"
    _error: "Callable[[str, RpcError], AgentError]"
    _opened: "Callable[[], None]"
    _open_failed: "Callable[[AgentError], None]"


    # -- what the engine is told -----------------------------------------------------

    def details(self) -> AgentDetails:
        caps = self._caps()
        session_caps = obj(caps.get("sessionCapabilities"))
        prompt_caps = obj(caps.get("promptCapabilities"))
        mcp = obj(caps.get("mcpCapabilities"))
        features = ["Permissions", "Plan"]
        if prompt_caps.get("image"):
            features.append("Images")
        if caps.get("loadSession") or session_caps.get("resume") is not None:
            features.append("Resume")
        if session_caps.get("fork") is not None:
            features.append("Fork")
        if self._commands:
            features.append("SlashCommands")
        features += sorted(self._features_seen)
        transports = ["Stdio"] + [t for t, on in (("Http", mcp.get("http")), ("Sse", mcp.get("sse"))) if on]
        return {
            "version": opt_text(obj(self._init.get("agentInfo")).get("version")),
            "auth": self._auth,
            "capabilities": {"features": features, "mcp_transports": transports},
            "config_options": [{**o} for o, _, _ in self._options],
            "commands": list(self._commands),
        }

    def configuration(self) -> dict[str, Any]:
        return {"options": {o["id"]: o["current"] for o, _, _ in self._options if o["current"] is not None}}

    def _changed(self) -> None:
        """Report the session's details and configuration, if they differ from the last."""
        if self.life.state != "open":
            return
        details = self.details()
        if details != self._reported:
            self._reported = details
            # The engine keeps what it is given: hand it its own copy.
            self.host.update(details=self.details(), configuration=self.configuration())

    # -- the launch's settings, and configure --------------------------------------

    def _apply_launch_configure(self, pending: list[tuple[str, Any]]) -> None:
        if self.life.state != "opening":
            return
        if not pending:
            self._opened()
            return
        (option, value), rest = pending[0], pending[1:]

        def done(error: AgentError | None) -> None:
            if error is not None:
                self._open_failed(error)
            else:
                self._apply_launch_configure(rest)

        entry = self._option(option)
        if entry is None:
            known = ", ".join(o["id"] for o, _, _ in self._options) or "none"
            done(AgentError.detail(Kind.INVALID_CONFIGURATION, f"unknown option {option} (options: {known})"))
            return
        problem = self.validate_config(entry[0], value)
        if problem:
            done(AgentError.detail(Kind.INVALID_CONFIGURATION, f"{option} {problem}"))
            return
        self._set_option(entry, value, done)

    def _option(self, option_id: str) -> tuple[ConfigOption, str, str] | None:
        for entry in self._options:
            if entry[0]["id"] == option_id:
                return entry
        return None

    def configure(self, option: str, value: Any, done: Callable[[AgentError | None], None]) -> None:
        entry = self._option(option)
        if entry is None:
            done(AgentError.detail(Kind.INVALID_CONFIGURATION, f"unknown option {option}"))
            return

        def finished(error: AgentError | None) -> None:
            if error is None:
                # The engine records the new value and says SessionUpdated itself; only a
                # dependent change (another option the agent changed with it) is ours to say.
                for reported in self._reported.get("config_options", []):
                    if reported["id"] == option:
                        reported["current"] = value
                self._changed()
            done(error)

        self._set_option(entry, value, finished)

    def _set_option(
        self, entry: tuple[ConfigOption, str, str], value: Any, done: Callable[[AgentError | None], None]
    ) -> None:
        option, how, acp_id = entry

        def on_answer(result: Any, error: RpcError | None) -> None:
            if error is not None:
                err = self._error(f"set {option['id']}", error)
                if err.kind == Kind.PROTOCOL_FAILED:
                    err = AgentError.detail(Kind.INVALID_CONFIGURATION, f"{option['id']}: {error.message}")
                done(err)
                return
            if how == "config" and isinstance(result, dict) and isinstance(result.get("configOptions"), list):
                self._replace_config_options(result["configOptions"])
            else:
                option["current"] = value
            done(None)

        if how == "config":
            params: dict[str, Any] = {"sessionId": self._session, "configId": acp_id, "value": value}
            if isinstance(value, bool):
                params["type"] = "boolean"
            self._request("session/set_config_option", params, on_answer)
        elif how == "mode":
            self._request("session/set_mode", {"sessionId": self._session, "modeId": value}, on_answer)
        else:
            self._request("session/set_model", {"sessionId": self._session, "modelId": value}, on_answer)

    def _replace_config_options(self, config_options: Any) -> None:
        kept = [(o, how, acp_id) for o, how, acp_id in self._options if how != "config"]
        fresh = map_config_options(config_options)
        taken = {o["id"] for o, _, _ in fresh}
        self._options = fresh + [entry for entry in kept if entry[0]["id"] not in taken]
