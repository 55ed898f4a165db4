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
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sidecar import ROOT, base_env

PACKAGE = ROOT / "agentproto"
#: The design card: no module over ~600 lines, 650 at most.
MAX_LINES = 650


def _import_graph() -> Any:
    """scripts/import_graph.py: the one reading of the package's imports (and of the README's
    layer list) that the tool prints and these tests check."""
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GRAPH = _import_graph()
MODULES: dict[str, Path] = GRAPH.modules(PACKAGE)


def imports_of(name: str) -> set[str]:
    """The package modules ``name`` imports when it runs."""
    found: set[str] = GRAPH.imports_of(name, MODULES)
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


def test_the_readme_lists_every_module_in_a_layer_its_imports_allow() -> None:
    edges = {name: imports_of(name) for name in MODULES}
    layers = GRAPH.readme_layers((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(layers) >= 5, "the README's layer list is really read"
    assert GRAPH.problems(edges, MODULES, layers) == []


def test_the_readme_check_finds_a_missing_module_and_an_import_of_a_later_layer() -> None:
    edges = {name: imports_of(name) for name in MODULES}
    layers = GRAPH.readme_layers((ROOT / "README.md").read_text(encoding="utf-8"))
    without_wire = [(title, [f for f in files if f != "wire.py"]) for title, files in layers]
    assert "wire.py is missing from the README's layers" in GRAPH.problems(edges, MODULES, without_wire)
    # engine.py listed first: it imports the loop, the seams and more, all of them later now.
    engine_first = [("Engine", ["engine.py"])] + [(t, [f for f in fs if f != "engine.py"]) for t, fs in layers]
    found = GRAPH.problems(edges, MODULES, engine_first)
    assert "engine.py (Engine) imports loop.py, listed in a later layer (The loop, its clock and files)" in found
    assert GRAPH.problems(edges, MODULES, []) == ["the README has no ## Architecture section with a layer list"]
