"""The package's layering, read from its source: no import cycle, no module past the size
limit (650 lines), and the engine and runtime call their seams' documented members (no
probing).

The import graph is every ``import agentproto...`` and ``from agentproto... import``
anywhere in a module: in function bodies (a lazy import still ties two layers) and under
``if TYPE_CHECKING:`` (a layer that names an upper layer's types depends on it all the
same: that is how engine and runtime were tied in a circle).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from sidecar import ROOT, base_env

PACKAGE = ROOT / "agentproto"
#: The design card: no module over ~600 lines, 650 at most.
MAX_LINES = 650


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The package modules ``name`` imports when it runs."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    found: set[str] = set()
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # ``from agentproto import transports`` imports a module, not a name.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path (first module repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_package_has_no_import_cycle() -> None:
    graph = {name: imports_of(name) for name in MODULES}
    # The graph is really read: the engine's own imports are found.
    assert {"agentproto.drivers.base", "agentproto.errors", "agentproto.loop"} <= graph["agentproto.engine"]
    assert "agentproto.engine" in graph["agentproto.runtime"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


@pytest.mark.parametrize("name", sorted(set(MODULES) - {"agentproto.__main__"}))  # __main__ runs the CLI
def test_every_module_imports_first_in_a_fresh_interpreter(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {name}"], capture_output=True, text=True, env=base_env(), cwd=str(ROOT), timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_no_module_passes_the_size_limit() -> None:
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in MODULES.items()}
    assert sizes["agentproto.engine"] > 100, "the sizes are really read"
    too_long = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not too_long, f"split these along a seam: {too_long}"


@pytest.mark.parametrize("name", ["agentproto.engine", "agentproto.runtime"])
def test_the_engine_and_runtime_do_not_probe_for_members(name: str) -> None:
    """They call the Driver/Host/Sink seams' documented members, never getattr/hasattr:
    a hook a driver forgot to define must be a type error, not a silent default."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    probes = [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
    ]
    assert not probes, probes
