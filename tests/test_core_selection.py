"""The core selection stays true: no core test reaches for node, an npm tool, anyagent-py,
Chromium or root (tests/conftest.py's ``NOT_CORE`` and ``not_core`` marker say which tests do).

Each test file is read (its syntax tree, docstrings left out) for what only the full suite
has: the helpers that find the pinned CLIs in .cache/ (``claude_bin``, ``pinned_codex``,
``CodexWorld``, acp_real_support, anyagent_harness, recordings' ``claude``/``codex``, ...),
a path into an npm part of .cache/, a program run as ``node``/``npm``/``npx``/``chromium``,
selenium, a call only root may make (``os.chown``, ``os.setuid``, ...), or an import from a
test file that is not core (``from tests.drivers.claude.test_claude import ...``). A file in
NOT_CORE may hold any of them; elsewhere one may sit only inside a test marked
``@pytest.mark.not_core(REASON)``. A finding fails with the file, the line and what it needs.
Every helper name the check looks for must still be defined in tests/fakes/ (a renamed one
would otherwise escape it).

It reads names, not behaviour: a new helper that finds an npm tool by another name needs its
name in ``HELPERS`` here. The proof that core holds is a run without them: a fresh clone (no
.cache/, no node on PATH), ``AGENTPROTO_TEST_DEPS=core bash scripts/test -m core``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import NOT_CORE

TESTS = Path(__file__).resolve().parent
FAKES = TESTS / "fakes"

#: Modules that exist to drive what core lacks, by the name a test imports them under.
MODULES = {
    "acp_real_support": "the pinned ACP agents (.cache/acp-agents)",
    "anyagent_harness": "anyagent-py (.cache/anyagent-py)",
    "anyagent": "anyagent-py (.cache/anyagent-py)",
    "selenium": "headless Chromium and chromium-driver",
}
#: Helpers of tests/fakes/ that find (or start) a pinned npm CLI.
HELPERS = {
    "claude_bin": "the pinned Claude Code CLI (.cache/agents)",
    "PINNED_CLAUDE": "the pinned Claude Code CLI (.cache/agents)",
    "pinned_codex": "the pinned Codex CLI (.cache/agents)",
    "CODEX_BIN": "the pinned Codex CLI (.cache/agents)",
    "CodexWorld": "the pinned Codex CLI (.cache/agents)",
    "acp_agent_bin": "the pinned ACP agents (.cache/acp-agents)",
}
#: Members of a fakes module that run a pinned CLI, though their names say less.
MEMBERS = {
    ("recordings", "claude"): "the pinned Claude Code CLI (.cache/agents)",
    ("recordings", "codex"): "the pinned Codex CLI (.cache/agents)",
}
#: Programs core does not have, as the first word of a command or the name given to ``which``.
PROGRAMS = {"node", "nodejs", "npm", "npx", "tsc", "chromium", "chromedriver"}
#: The npm parts of .cache/ (scripts/install-test-deps) and anyagent-py's.
NPM_CACHE = re.compile(r"\.cache'?\s*[/,]\s*'?(agents|acp-agents|mcp-conformance|tsclient|typegen|anyagent-py)\b")
#: Calls only root may make (to another uid).
ROOT_CALLS = {"chown", "lchown", "fchown", "setuid", "setgid", "setgroups", "seteuid", "setegid", "setreuid", "setresuid"}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def _needs(node: ast.AST, docstrings: set[int]) -> str | None:
    """What ``node`` (one syntax node) needs that core lacks, or None."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.split(".")[0] in MODULES:
                return MODULES[alias.name.split(".")[0]]
    if isinstance(node, ast.ImportFrom) and node.module:
        if node.module.split(".")[0] in MODULES:
            return MODULES[node.module.split(".")[0]]
        imported = node.module.removeprefix("tests.").replace(".", "/") + ".py"
        if node.module.startswith("tests.") and imported in NOT_CORE:  # importing it runs what it needs at import
            return f"tests/{imported}, not core: {NOT_CORE[imported]}"
        for alias in node.names:
            if alias.name in HELPERS:
                return HELPERS[alias.name]
            if (node.module, alias.name) in MEMBERS:
                return MEMBERS[(node.module, alias.name)]
    if isinstance(node, ast.Name) and node.id in HELPERS:
        return HELPERS[node.id]
    if isinstance(node, ast.Attribute):
        if node.attr in HELPERS:
            return HELPERS[node.attr]
        if isinstance(node.value, ast.Name) and (node.value.id, node.attr) in MEMBERS:
            return MEMBERS[(node.value.id, node.attr)]
        if node.attr in ROOT_CALLS and isinstance(node.value, ast.Name) and node.value.id == "os":
            return f"root (os.{node.attr})"
    if isinstance(node, ast.Call):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        first = node.args[0] if node.args else None
        if name == "which" and isinstance(first, ast.Constant) and first.value in PROGRAMS:
            return f"{first.value} on PATH"
    if isinstance(node, ast.List) and node.elts:
        first = node.elts[0]
        if isinstance(first, ast.Constant) and first.value in PROGRAMS:
            return f"{first.value} on PATH"
    is_text = isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    if is_text or isinstance(node, (ast.BinOp, ast.Call)):  # a path spelt whole, or joined from parts
        match = NPM_CACHE.search(ast.unparse(node))
        if match:
            return f"the npm tools in .cache/ ({match.group(0)})"
    return None


def _marked_not_core(node: ast.AST) -> bool:
    """``node`` is a test or class decorated with ``pytest.mark.not_core(...)``."""
    decorators = getattr(node, "decorator_list", [])
    return any(
        isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "not_core" for d in decorators
    )


def findings(source: str, filename: str = "<test>") -> list[str]:
    """Every ``LINE: what it needs`` of a test file's source outside a ``not_core`` test."""
    tree = ast.parse(source, filename)
    docstrings = _docstrings(tree)
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if _marked_not_core(node):
            return
        need = _needs(node, docstrings)
        if need is not None:
            found.append(f"{filename}:{getattr(node, 'lineno', '?')}: {need}")
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def test_every_core_test_needs_only_python_and_the_pip_packages() -> None:
    found: list[str] = []
    for path in sorted(TESTS.rglob("test_*.py")):
        name = path.relative_to(TESTS).as_posix()
        if name not in NOT_CORE and path != Path(__file__).resolve():  # this file spells the needs out
            found += findings(path.read_text(encoding="utf-8"), f"tests/{name}")
    assert not found, (
        "core tests that need what core runs lack (node, npm tools, anyagent-py, Chromium, root): name the file in "
        "tests/conftest.py's NOT_CORE, or mark the test @pytest.mark.not_core(REASON):\n" + "\n".join(found)
    )


def test_the_helpers_looked_for_still_exist() -> None:
    """A helper renamed in tests/fakes/ and not here would slip past the check above."""
    fakes = {p.stem: p.read_text(encoding="utf-8") for p in FAKES.glob("*.py")}
    defined = "\n".join(fakes.values())
    for helper in HELPERS:
        assert re.search(rf"^(def|class) {helper}\b|^{helper} = ", defined, re.M), f"{helper} is defined in no tests/fakes/ file"
    for module, member in MEMBERS:
        assert re.search(rf"^def {member}\(", fakes[module], re.M), f"tests/fakes/{module}.py defines no {member}()"
    for module in ("acp_real_support", "anyagent_harness"):
        assert module in fakes, f"tests/fakes/{module}.py is gone"


@pytest.mark.parametrize(
    ("source", "need"),
    [
        ("from fake_anthropic import claude_bin\n", "Claude Code"),
        ("import fake_openai as fo\ndef test_x(tmp_path):\n    fo.CodexWorld(str(tmp_path))\n", "Codex"),
        ("from acp_real_support import GeminiWorld\n", "ACP agents"),
        ("from recordings import RECORDINGS, codex\n", "Codex"),
        ("import recordings\ndef test_x(p):\n    recordings.claude(p, '/tmp')\n", "Claude Code"),
        ("TSC = ROOT / '.cache' / 'typegen' / 'node_modules' / '.bin' / 'tsc'\n", ".cache/"),
        ("import subprocess\ndef test_x():\n    subprocess.run(['node', '-e', '1'])\n", "node on PATH"),
        ("import shutil\nassert shutil.which('chromium')\n", "chromium on PATH"),
        ("import os\ndef test_x(p):\n    os.chown(p, 65534, 65534)\n", "root"),
        ("from selenium import webdriver\n", "Chromium"),
        ("from tests.drivers.codex.test_codex import world\n", "tests/drivers/codex/test_codex.py, not core"),
        ("import pytest\n@pytest.mark.not_core('root')\ndef test_x(p):\n    os.chown(p, 1, 1)\ndef test_y(p):\n    os.chown(p, 1, 1)\n", "<test>:6: root"),
    ],
)
def test_the_check_finds_each_kind_of_need(source: str, need: str) -> None:
    found = findings(source)
    assert len(found) == 1 and need in found[0], found


@pytest.mark.parametrize(
    "source",
    [
        '"""Drives .cache/agents/node_modules/.bin/claude in another file."""\n',  # a docstring
        "CLI_DIRS = (str(ROOT / '.cache'), 'node_modules')\n",  # what a PATH must not hold
        "HOME_CACHE = home / '.cache' / 'claude-cli-nodejs'\n",
        "from wire_corpus import CORPUS, cases\nfrom recordings import RECORDINGS, files\n",
        "from tests.drivers.codex.test_codex_unit import CODEX, THREAD\n",  # a fake path: core
        "import pytest\n@pytest.mark.not_core('the pinned Codex CLI (npm)')\ndef test_x(tmp_path):\n    fo.pinned_codex()\n",
        "if tool.name not in ('npm', 'npx', 'node'):\n    pass\n",
        "argv = ['cd', 'clients/typescript', '&&', 'npm', 'pack']\n",
    ],
)
def test_the_check_lets_core_code_be(source: str) -> None:
    assert findings(source) == []
