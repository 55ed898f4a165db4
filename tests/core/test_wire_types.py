"""The wire's TypedDicts (core/wire_types.py, core/mcp_types.py, drivers/<family>/types.py):
mypy checks the fields of protocol 1's values and of the agents' messages through them, and
they cost nothing at run time (imported under TYPE_CHECKING alone, bodies mypy-only)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "agentproto"
TYPES_MODULES = re.compile(r"^agentproto\.(core\.(wire_types|mcp_types)|drivers\.\w+\.types)$")


def _type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _imports_outside_type_checking(tree: ast.Module) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []

    def walk(node: ast.AST, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = guarded or (_type_checking_block(node) and child in getattr(node, "body", []))
            if isinstance(child, ast.ImportFrom) and child.module and TYPES_MODULES.match(child.module):
                if not inside:
                    found.append((child.lineno, child.module))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if TYPES_MODULES.match(alias.name) and not inside:
                        found.append((child.lineno, alias.name))
            walk(child, inside)

    walk(tree, False)
    return found


def test_the_types_modules_are_imported_only_under_type_checking() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    typed = [m for m in modules if TYPES_MODULES.match(".".join(m.relative_to(ROOT).with_suffix("").parts))]
    assert len(typed) == 6, typed  # wire_types, mcp_types and the four families' types.py
    importers = []
    outside = []
    for path in modules:
        tree = ast.parse(path.read_text(), str(path))
        text = path.read_text()
        if re.search(r"agentproto\.(core\.(wire_types|mcp_types)|drivers\.\w+\.types)\b", text):
            importers.append(path)
        outside += [(str(path.relative_to(ROOT)), line, name) for line, name in _imports_outside_type_checking(tree)]
    assert len(importers) > 20, importers  # the mappings, the engine, the frontends use them
    assert outside == [], outside


def test_the_types_modules_define_nothing_at_run_time() -> None:
    probe = (
        "import importlib, sys\n"
        "names = ['agentproto.core.wire_types', 'agentproto.core.mcp_types']\n"
        "names += [f'agentproto.drivers.{f}.types' for f in ('claude', 'codex', 'acp', 'agy')]\n"
        "for name in names:\n"
        "    module = importlib.import_module(name)\n"
        "    public = [n for n in vars(module) if not n.startswith('_') and n not in ('TYPE_CHECKING', 'annotations')]\n"
        "    assert not public, (name, public)\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def test_start_up_loads_no_types_module() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "agentproto", "--version"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    loaded = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line]
    assert "agentproto.cli" in loaded, loaded
    assert not [name for name in loaded if TYPES_MODULES.match(name) or name == "typing_extensions"], loaded


PROBE = '''\
from __future__ import annotations

from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.drivers.claude.mapping import stop_reason, turn_usage

if TYPE_CHECKING:
    from agentproto.core.wire_types import Failed, TurnUsage


def usage() -> TurnUsage:
    return {"input_tokens": 1, "cached_input_tokens": 0, "output_token": 2}


def failed() -> Failed:
    return {"Failed": {"mesage": "a misspelled member"}}


def claude_result() -> None:
    turn_usage({"type": "result", "usage": 5})
    stop_reason({"subtype": "success", "is_error": "no"}, False)
'''


def test_mypy_checks_the_fields_of_wire_values_and_agent_messages(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
         str(probe)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    errors = [line for line in out.splitlines() if ": error:" in line and line.startswith(str(probe))]
    lines = {int(line.split(":")[1]) for line in errors}
    # A protocol 1 value with a misspelled member, a variant's body with one, and a Claude
    # stream-json message whose members have the wrong types: each is an error.
    assert {11, 15, 19, 20} <= lines, out
    assert any('"output_token"' in line for line in errors), out
    assert any('"mesage"' in line for line in errors), out


def test_dict_str_any_stays_under_the_budget() -> None:
    """Issue 20: at most 246 occurrences of the text in the package (497 before the types)."""
    count = sum(len(re.findall(r"dict\[str, Any\]", path.read_text())) for path in PACKAGE.rglob("*.py"))
    assert count <= 246, count
