"""A session's ``SessionInfo``, sans-IO: what ``open`` and ``info`` return and what every
``SessionUpdated`` carries.

The info is a plain dict in the wire's shape, so a snapshot is a deep copy and nothing
converts it on the way out. The engine owns ``id``, ``agent`` and ``status``; a driver
reports the rest (``details``, ``resume_token``, ``title``, ``configuration``). Options are
checked here the same way whether the app sets them at ``open`` (``configure``) or later.
"""

from __future__ import annotations

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.core.wire_types import (
        AgentDetails,
        AgentInstallation,
        ConfigChoice,
        ConfigOption,
        ConfigValue,
        SessionInfo,
    )

#: Members only the engine sets: a driver's report never overwrites them.
ENGINE_MEMBERS = frozenset({"id", "agent", "status", "tools_url", "hook_urls"})

if TYPE_CHECKING:
    #: ``Driver.validate_config``: a problem with a value for an option, or None.
    Validate = Callable[[ConfigOption, Any], "str | None"]


def new_info(session_id: str, installation: AgentInstallation) -> SessionInfo:
    """The info of a session that is still opening."""
    return {
        "id": session_id,
        "agent": installation,
        "details": {
            "version": None,
            "auth": "Unknown",
            "capabilities": {"features": [], "mcp_transports": []},
            "config_options": [],
            "commands": [],
        },
        "configuration": {"options": {}},
        "resume_token": None,
        "title": None,
        "status": "Idle",
        #: The session's MCP endpoint of the app's tools (apptools.py), when it has tools.
        "tools_url": None,
    }


def add_features(info: SessionInfo, features: list[str]) -> None:
    """Capabilities the engine gives a session whatever its agent reports (Tools, Hooks)."""
    have = info["details"]["capabilities"]["features"]
    have.extend(feature for feature in features if feature not in have)


def features(info: SessionInfo) -> list[str]:
    """What the agent offers in this session (``details.capabilities.features``)."""
    offered = info["details"]["capabilities"]["features"]
    return offered


def merge(info: SessionInfo, members: dict[str, Any]) -> bool:
    """Take the SessionInfo members a driver reported (unknown names are ignored); whether
    anything changed."""
    changed = False
    for key, value in members.items():
        # A reported name, checked against the info's own (a driver's extra names are ignored).
        if key in info and key not in ENGINE_MEMBERS and info[key] != value:  # type: ignore[literal-required]
            info[key] = value  # type: ignore[literal-required]
            changed = True
    return changed


def select_option(
    option_id: str, name: str, choices: list[ConfigChoice], current: ConfigValue | None, category: str | None = None
) -> ConfigOption:
    """A ``ConfigOption`` of kind ``Select`` (what every driver offers: model, mode, effort ...),
    settable during the session."""
    return {
        "id": option_id,
        "name": name,
        "category": category,
        "kind": {"Select": {"choices": choices}},
        "current": current,
        "live": True,
    }


def find_option(info: SessionInfo, option_id: str) -> ConfigOption | None:
    return next((o for o in info["details"]["config_options"] if o.get("id") == option_id), None)


def set_option(info: SessionInfo, option_id: str, value: ConfigValue) -> None:
    option = find_option(info, option_id)
    if option is not None:
        option["current"] = value
    info["configuration"]["options"][option_id] = value


def option_problem(info: SessionInfo, option_id: str, value: Any, validate: Validate, live: bool) -> str | None:
    """Why ``value`` cannot be set for ``option_id`` now (``live``: during the session)."""
    option = find_option(info, option_id)
    if option is None:
        return f"{option_id}: the agent does not offer it"
    if live and not option.get("live"):
        return f"{option_id}: cannot change during a session"
    problem = validate(option, value)
    return None if problem is None else f"{option_id}: {problem}"


def adopt_details(
    info: SessionInfo, details: AgentDetails, configure: dict[str, ConfigValue], validate: Validate
) -> str | None:
    """The agent is ready with ``details``: record them, its current settings, then the
    settings the app asked for at open. A problem with one of those, or None."""
    info["details"] = details
    for option in details.get("config_options", []):
        current = option.get("current")
        if current is not None:
            info["configuration"]["options"][option["id"]] = current
    for key, value in configure.items():
        problem = option_problem(info, key, value, validate, live=False)
        if problem is not None:
            return problem
        set_option(info, key, value)
    return None
