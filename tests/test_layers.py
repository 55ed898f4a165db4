"""The package's layering, read from its source: the import rule (one folder per layer, no
import goes up: scripts/import_graph.py's LAYERS table), no import cycle, no module past the
size limit (500 lines), no module touching another's underscore members, each layer's ``__init__.py`` a docstring and nothing else,
docs/architecture.md's layer list generated from the table, the engine and runtime call
their seams' documented members (no probing), and ``Session``, ``Runtime``, ``Sink`` and
``Frontend`` each name one class at most (the public client's).

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
#: Issue 20: no .py file of the package passes 500 lines (one file, one concern).
MAX_LINES = 500
#: Files still over it, each split by the helper that owns it (remove an entry once split: a
#: stale one fails). Empty once the driver splits of issue 20 are in.
OVERSIZE_PENDING: dict[str, str] = {}
#: Underscore members one module still takes from another, (importer, name): remove an entry
#: once closed (a stale one fails).
PRIVATE_PENDING: dict[tuple[str, str], str] = {}


def _import_graph() -> Any:
    """scripts/import_graph.py: the one reading of the package's imports (and the one table of
    its layers) that the tool prints and these tests check."""
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
    assert {"agentproto.drivers.base", "agentproto.core.errors", "agentproto.loopio.loop"} <= graph[
        "agentproto.engine.session"
    ]
    assert "agentproto.engine.session" in graph["agentproto.engine.runtime"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


@pytest.mark.parametrize("name", sorted(set(MODULES) - {"agentproto.__main__"}))  # __main__ runs the CLI
def test_every_module_imports_first_in_a_fresh_interpreter(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {name}"], capture_output=True, text=True, env=base_env(), cwd=str(ROOT), timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_no_module_passes_the_size_limit() -> None:
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in MODULES.items()}
    assert sizes["agentproto.engine.session"] > 100, "the sizes are really read"
    too_long = {name: n for name, n in sizes.items() if n > MAX_LINES and name not in OVERSIZE_PENDING}
    assert not too_long, f"split these along a seam: {too_long}"
    split = sorted(name for name in OVERSIZE_PENDING if sizes.get(name, 0) <= MAX_LINES)
    assert not split, f"within {MAX_LINES} lines now: remove them from OVERSIZE_PENDING: {split}"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_protocol(node: ast.ClassDef) -> bool:
    return any((isinstance(b, ast.Name) and b.id == "Protocol") or (isinstance(b, ast.Attribute) and b.attr == "Protocol")
               for b in node.bases)  # fmt: skip


def _defined(tree: ast.AST) -> dict[str | None, set[str]]:
    """The underscore names a module defines, by the class they are defined in (None: outside
    any class): defs, classes, assignments (``self._x = ...`` too, and a module's ``_`` alias
    of a name of its own), parameters, ``__slots__`` (an import defines nothing).
    A Protocol's members are an interface, not a definition: they do not count."""
    found: dict[str | None, set[str]] = {}

    def visit(node: ast.AST, owner: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = owner
            name: str | None = None
            if isinstance(child, ast.ClassDef):
                if _is_protocol(child):
                    continue
                name, inner = child.name, child.name
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = child.name
            elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                name = child.id
            elif isinstance(child, ast.Attribute) and isinstance(child.ctx, ast.Store):
                name = child.attr
            elif isinstance(child, ast.arg):
                name = child.arg
            elif isinstance(child, ast.Constant) and isinstance(child.value, str) and child.value.isidentifier():
                if isinstance(node, (ast.Tuple, ast.List)) and _in_slots(child, tree):
                    name = child.value
            if name is not None and _private(name):
                found.setdefault(owner, set()).add(name)
            visit(child, inner)

    visit(tree, None)
    return found


def _in_slots(constant: ast.Constant, tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
            if any(c is constant for c in ast.walk(node.value)):
                return True
    return False


def private_reach_ins(sources: dict[str, str]) -> list[str]:
    """Every place a module of ``sources`` (name -> text) touches another module's underscore
    member: ``x._name`` where ``x`` is not ``self`` or ``cls`` and ``_name`` is defined in
    another module but not in this one (``super()._name``: not in another class of this
    one), and ``from agentproto... import _name``. Dunders are no one's private members."""
    trees = {name: ast.parse(text) for name, text in sources.items()}
    defined = {name: _defined(tree) for name, tree in trees.items()}
    everywhere: dict[str, set[str]] = {}
    for name, owners in defined.items():
        for names in owners.values():
            for member in names:
                everywhere.setdefault(member, set()).add(name)
    found = []
    for name, tree in trees.items():
        mine = set().union(*defined[name].values()) if defined[name] else set()

        def visit(node: ast.AST, cls: str | None) -> None:
            for child in ast.iter_child_nodes(node):
                inner = child.name if isinstance(child, ast.ClassDef) else cls
                if isinstance(child, ast.ImportFrom) and (child.module or "").startswith("agentproto"):
                    found.extend(f"{name}:{child.lineno}: from {child.module} import {a.name}"
                                 for a in child.names if _private(a.name))  # fmt: skip
                elif isinstance(child, ast.Attribute) and _private(child.attr):
                    base = child.value
                    others = everywhere.get(child.attr, set()) - {name}
                    if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                        pass
                    elif isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
                        outside = {m for owner, names in defined[name].items() if owner != cls for m in names}
                        if others and child.attr not in outside:
                            found.append(f"{name}:{child.lineno}: {ast.unparse(child)}")
                    elif others and child.attr not in mine:
                        found.append(f"{name}:{child.lineno}: {ast.unparse(child)}")
                visit(child, inner)

        visit(tree, None)
    return found


def test_the_reach_in_finder_finds_reach_ins() -> None:
    sources = {
        "agentproto.a": "class A:\n    def _send(self): ...\n    def go(self, other):\n        self._send(); other._send()\n"
                        "_alias = print\n",
        "agentproto.b": "from agentproto.a import _alias\nimport agentproto.a\n"
                        "def f(session):\n    session._send()\n    agentproto.a._alias()\n    session.__class__\n",
        "agentproto.c": "from agentproto.a import A\nclass C(A):\n    def _send(self):\n        super()._send()\n",
        "agentproto.d": "from typing import Protocol\nclass Owner(Protocol):\n    def _refresh(self): ...\n"
                        "def g(owner):\n    owner._refresh()\n",
        "agentproto.e": "class E:\n    def _refresh(self): ...\n",
    }  # fmt: skip
    assert private_reach_ins(sources) == [
        "agentproto.b:1: from agentproto.a import _alias",
        "agentproto.b:4: session._send",
        "agentproto.b:5: agentproto.a._alias",
        "agentproto.c:4: super()._send",
        "agentproto.d:5: owner._refresh",
    ]


def test_no_module_touches_another_modules_underscore_members() -> None:
    sources = {name: path.read_text(encoding="utf-8") for name, path in MODULES.items()}
    found = private_reach_ins(sources)
    pending = {f"{importer}:": member for importer, member in PRIVATE_PENDING}
    left = [f for f in found if not any(f.startswith(k) and f.endswith(m) for k, m in pending.items())]
    assert not left, "make each a documented member, or move it where it belongs:\n" + "\n".join(left)
    stale = [key for key in PRIVATE_PENDING if not any(f.startswith(f"{key[0]}:") and f.endswith(key[1]) for f in found)]
    assert not stale, f"closed now: remove them from PRIVATE_PENDING: {stale}"


@pytest.mark.parametrize("name", ["agentproto.engine.session", "agentproto.engine.runtime"])
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


#: Names each defined by at most one class in the package: the public client's (anyagent's
#: ``Runtime`` and ``Session``); the internal ones have their own names (CHANGELOG: renames).
ONE_CLASS_NAMES = {"Session": "agentproto.client", "Runtime": "agentproto.client", "Sink": None, "Frontend": None}


def classes_named(sources: dict[str, str], name: str) -> list[str]:
    """The modules that define a class ``name`` (at any depth), in order."""
    return sorted(
        module
        for module, source in sources.items()
        if any(isinstance(node, ast.ClassDef) and node.name == name for node in ast.walk(ast.parse(source)))
    )


@pytest.mark.parametrize("name", sorted(ONE_CLASS_NAMES))
def test_session_runtime_sink_and_frontend_each_name_one_class_at_most(name: str) -> None:
    sources = {module: path.read_text(encoding="utf-8") for module, path in MODULES.items()}
    owners = classes_named(sources, name)
    assert len(owners) <= 1, f"class {name} is defined by {owners}: give the internal ones their own names"
    assert owners == ([] if ONE_CLASS_NAMES[name] is None else [ONE_CLASS_NAMES[name]])
    # The check sees a second definition, nested or not.
    clash = {**sources, "agentproto.elsewhere": f"def f() -> None:\n    class {name}:\n        pass\n"}
    assert classes_named(clash, name) == sorted([*owners, "agentproto.elsewhere"])


def test_no_import_goes_up_a_layer() -> None:
    edges = {name: imports_of(name) for name in MODULES}
    assert GRAPH.problems(edges, MODULES) == []


def test_the_rule_finds_an_edge_that_goes_up_a_cross_family_edge_and_a_stale_allowance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    edges = {name: imports_of(name) for name in MODULES}
    assert GRAPH.layer_of("agentproto.core.wire") == "core" and GRAPH.layer_of("agentproto.cli") == "top"
    assert GRAPH.layer_of("agentproto") == "agentproto" and GRAPH.layer_of("agentproto.drivers.claude.driver") == "drivers"
    up = {**edges, "agentproto.core.wire": edges["agentproto.core.wire"] | {"agentproto.engine.session"}}
    assert "agentproto.core.wire (core) imports agentproto.engine.session, of a layer above it (engine)" in (
        GRAPH.problems(up, MODULES)
    )
    across = {**edges, "agentproto.drivers.codex.driver": {"agentproto.drivers.claude.mapping"}}
    assert (
        "agentproto.drivers.codex.driver imports agentproto.drivers.claude.mapping: a driver family imports no other"
        " family"
    ) in GRAPH.problems(across, MODULES)
    # An allowance for an edge that goes up is stale once the edge is gone.
    monkeypatch.setattr(GRAPH, "KNOWN_VIOLATIONS", {("agentproto.core.wire", "agentproto.engine.session"): "a leak"})
    assert GRAPH.problems(up, MODULES) == []
    assert (
        "agentproto.core.wire -> agentproto.engine.session is a known violation that no longer exists: remove it"
        " from KNOWN_VIOLATIONS"
    ) in GRAPH.problems(edges, MODULES)
    monkeypatch.undo()
    unplaced = {**MODULES, "agentproto.nowhere.x": PACKAGE / "nowhere" / "x.py"}
    assert "agentproto.nowhere.x is in no layer of LAYERS (scripts/import_graph.py)" in GRAPH.problems(edges, unplaced)


def test_drivers_read_the_tools_layer_only_through_the_driver_base() -> None:
    edges = {name: imports_of(name) for name in MODULES}
    tools = {name for name in MODULES if GRAPH.layer_of(name) == "tools"}
    readers = {name for name, deps in edges.items() if GRAPH.layer_of(name) == "drivers" and deps & tools}
    # The base re-exports the constants; the mock calls the app's tools over HTTP as an agent does.
    assert readers == {"agentproto.drivers.base", "agentproto.drivers.mock"}
    mapping = "agentproto.drivers.acp.mapping"
    direct = {**edges, mapping: edges[mapping] | {"agentproto.tools.apptools"}}
    assert (
        "agentproto.drivers.acp.mapping imports agentproto.tools.apptools: a driver reads the tools layer only"
        " through agentproto.drivers.base"
    ) in GRAPH.problems(direct, MODULES)


def test_each_layer_is_a_folder_whose_init_is_a_docstring_and_nothing_else() -> None:
    """The folder listing is the architecture; an ``__init__.py`` imports nothing (start-up)."""
    inits = [PACKAGE / layer / "__init__.py" for layer in GRAPH.LAYERS if layer not in GRAPH.ROOT_LAYERS]
    inits += sorted((PACKAGE / "drivers").glob("*/__init__.py"))
    assert len(inits) >= 11
    for init in inits:
        body = ast.parse(init.read_text(encoding="utf-8")).body
        assert len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant), init
        assert "May import" in body[0].value.value, f"{init}: its docstring says what the layer may import"
    folders = {p.parent.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")} - {"."}
    assert folders <= {layer for layer in GRAPH.LAYERS} | {f"drivers/{p.parent.name}" for p in inits}, folders
    top = {p.name for p in PACKAGE.glob("*.py")}
    assert top == {"__init__.py", "__main__.py", "cli.py", "cli_args.py", "cli_options.py", "cli_fast.py", "client.py"}, top


def test_docs_architecture_lists_the_layers_of_the_table() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/import_graph.py", "--docs", "docs/architecture.md", "--check-docs"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for name, path in MODULES.items():
        if path.name != "__init__.py":
            assert f"`{path.relative_to(PACKAGE).as_posix()}`" in text, name
    assert "(docs/architecture.md)" in (ROOT / "README.md").read_text(encoding="utf-8"), "the README links to it"
