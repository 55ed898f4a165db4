#!/usr/bin/env python3
"""The import graph of agentproto/, read from its source, and the README's layer list checked
against it.

    python3 scripts/import_graph.py                 # every module by level, with what it imports
    python3 scripts/import_graph.py --check README.md

A module's imports are every ``import agentproto...`` and ``from agentproto... import`` in it:
in function bodies (a lazy import still ties two layers) and under ``if TYPE_CHECKING:`` (a
layer that names an upper layer's types depends on it all the same). A module's level is the
longest chain of imports below it (0: it imports no other module of the package).

``--check`` reads the README's ``## Architecture`` section: each top-level bullet is a layer,
bottom first, and names its modules in backticks (``drivers/base.py``). It fails (exit 1)
when a module of the package is missing from it, is named twice or does not exist, or
imports a module of a later layer than its own. tests/test_layers.py runs the same check.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "agentproto"


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """``agentproto/drivers/base.py`` -> ``agentproto.drivers.base``."""
    parts = [package.name, *path.relative_to(package).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def file_name(name: str, found: dict[str, Path], package: Path = PACKAGE) -> str:
    """How the README names a module: its file under the package (``drivers/base.py``)."""
    return found[name].relative_to(package).as_posix()


def imports_of(name: str, found: dict[str, Path]) -> set[str]:
    """The package modules ``name`` imports when it runs (or when mypy reads it)."""
    tree = ast.parse(found[name].read_text(encoding="utf-8"))
    result: set[str] = set()
    package = name if found[name].name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # ``from agentproto import record`` imports a module, not a name.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in found else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in found:
                target = target.rpartition(".")[0]
            if target and target != name:
                result.add(target)
    return result


def graph(package: Path = PACKAGE) -> tuple[dict[str, set[str]], dict[str, Path]]:
    found = modules(package)
    return {name: imports_of(name, found) for name in found}, found


def levels(edges: dict[str, set[str]]) -> dict[str, int]:
    """Each module's longest chain of imports below it (the graph has no cycle: test_layers)."""
    level: dict[str, int] = {}

    def visit(name: str) -> int:
        if name not in level:
            level[name] = 0  # a cycle would stop here rather than recurse for ever
            level[name] = 1 + max((visit(dep) for dep in edges[name]), default=-1)
        return level[name]

    for name in edges:
        visit(name)
    return level


def readme_layers(text: str) -> list[tuple[str, list[str]]]:
    """The layers of the README's ``## Architecture`` section: (title, module files), bottom first."""
    match = re.search(r"^## Architecture\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if match is None:
        return []
    layers: list[tuple[str, list[str]]] = []
    for line in match.group(1).splitlines():
        if line.startswith("- "):
            title = re.match(r"- \*\*(.+?)\*\*", line)
            layers.append((title.group(1) if title else line[2:40], []))
        if layers and line.startswith(("- ", "  ")):
            layers[-1][1].extend(re.findall(r"`([\w/]+\.py)`", line))
    return layers


def problems(edges: dict[str, set[str]], found: dict[str, Path], layers: list[tuple[str, list[str]]]) -> list[str]:
    """What the README's layer list gets wrong about the code (empty: nothing)."""
    if not layers:
        return ["the README has no ## Architecture section with a layer list"]
    out: list[str] = []
    where: dict[str, int] = {}
    for index, (title, files) in enumerate(layers):
        for file in files:
            if file in where:
                out.append(f"{file} is named in two layers ({layers[where[file]][0]}, {title})")
            where[file] = index
    known = {file_name(name, found): name for name in found}
    for file in sorted(set(where) - set(known)):
        out.append(f"{file} is in the README's layers but not in the package")
    for file, name in sorted(known.items()):
        if file not in where and found[name].read_text(encoding="utf-8").strip():
            out.append(f"{file} is missing from the README's layers")
    for name in sorted(edges):
        file = file_name(name, found)
        for dep in sorted(edges[name]):
            dep_file = file_name(dep, found)
            if file in where and dep_file in where and where[dep_file] > where[file]:
                out.append(
                    f"{file} ({layers[where[file]][0]}) imports {dep_file}, listed in a later layer"
                    f" ({layers[where[dep_file]][0]})"
                )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", type=Path, metavar="README", help="check this README's layer list against the graph")
    args = parser.parse_args()
    edges, found = graph()
    if args.check:
        found_problems = problems(edges, found, readme_layers(args.check.read_text(encoding="utf-8")))
        for problem in found_problems:
            print(problem)
        if not found_problems:
            print(f"{args.check}: its layers match the imports of all {len(found)} modules")
        return 1 if found_problems else 0
    level = levels(edges)
    for depth in range(max(level.values()) + 1):
        print(f"level {depth}")
        for name in sorted(n for n in edges if level[n] == depth):
            deps = " ".join(sorted(file_name(d, found) for d in edges[name]))
            print(f"  {file_name(name, found):<26} -> {deps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
