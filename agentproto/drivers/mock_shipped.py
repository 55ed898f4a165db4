"""The mock scripts shipped in the package (``agentproto/mock_scripts/``): ``--mock NAME``
plays one by name. They are read as package data (importlib.resources), so a zipapp reads
them from inside the archive and a vendored or installed copy from beside its modules.

Rules of this file: nothing is imported at start-up (importlib.resources and difflib load
only when a name is looked up); an unknown name is a ScriptError listing the names, never
another script.
"""

from __future__ import annotations

from agentproto.drivers.mock import ScriptError

#: The package-data directory of the shipped scripts (``--mock NAME``).
SHIPPED = "mock_scripts"


def shipped_names() -> list[str]:
    """The names ``--mock NAME`` takes: the shipped scripts' file names without ``.json``."""
    from importlib import resources  # only here: it costs start-up time

    folder = resources.files("agentproto").joinpath(SHIPPED)
    return sorted(entry.name[: -len(".json")] for entry in folder.iterdir() if entry.name.endswith(".json"))


def shipped_script(name: str) -> tuple[str, bytes]:
    """The shipped script ``name`` (``turn``): where it lives (a file, or a place inside a
    zipapp: only ever shown, never reopened) and its bytes. An unknown name (``turn.json``
    included: a file that is not there must not play a shipped script instead) is a
    ScriptError that lists the names, nearest first."""
    from importlib import resources

    names = shipped_names()
    if name not in names:
        import difflib

        near = difflib.get_close_matches(name.removesuffix(".json"), names, n=1)
        hint = f" Did you mean '{near[0]}'?" if near else ""
        raise ScriptError(
            f"no such file, nor a shipped mock script of that name.{hint} "
            f"The shipped ones: {', '.join(names)} (or give a path)"
        )
    entry = resources.files("agentproto").joinpath(SHIPPED).joinpath(name + ".json")
    return str(entry), entry.read_bytes()
