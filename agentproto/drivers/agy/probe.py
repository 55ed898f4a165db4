"""agy's probe: what a throwaway session (``probe``) reports, read without a conversation.

Rules of this file:
- Two commands, run side by side through the host (so a recording keeps them and a
  replay plays them back): ``agy --version`` and ``agy --output-format json models``.
- Signed in is ``models`` succeeding (its list is the model option's choices); signed out
  is its failure with agy's sign-in words (``agy_mapping.signed_out``): the login step is
  then reported; any other failure leaves the auth Unknown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from agentproto.drivers.agy.mapping import SIGNED_IN, login_methods, parse_models, signed_out
from agentproto.loopio.process_transport import run_capture

if TYPE_CHECKING:
    from agentproto.core.wire_types import ConfigChoice
    from agentproto.drivers.base import Host, Launch

    #: What the probe found: agy's version (None: unknown), its auth, its models' choices.
    Found = tuple[str | None, Any, list[ConfigChoice]]
    Probed = Callable[[str | None, Any, list[ConfigChoice]], None]


def probe(host: "Host", launch: "Launch", done: Probed) -> None:
    """Run both commands; ``done`` is called once with what they said."""
    results: dict[str, tuple[int | None, str, str]] = {}

    def ran(name: str) -> Callable[[int | None, str, str], None]:
        def finished(code: int | None, out: str, err: str) -> None:
            results[name] = (code, out, err)
            if len(results) == 2:
                done(*_read(results, launch.executable))

        return finished

    for name, args in (("version", ["--version"]), ("models", ["--output-format", "json", "models"])):
        run_capture(
            host.loop,
            [launch.executable, *args],
            ran(name),
            env=launch.child_env(),
            cwd=launch.dir,
            factory=lambda loop, spawn, record: host.spawn(spawn),
        )


def _read(results: dict[str, tuple[int | None, str, str]], executable: str) -> Found:
    code, out, _ = results["version"]
    lines = out.strip().splitlines() if code == 0 else []
    version = lines[0].strip() if lines else None
    code, out, err = results["models"]
    auth: Any = "Unknown"
    choices: list[ConfigChoice] = []
    if code == 0:
        auth, choices = SIGNED_IN, parse_models(out)
    elif signed_out(out + err):
        auth = {"Unauthenticated": {"login": login_methods(executable)}}
    return version, auth, choices
