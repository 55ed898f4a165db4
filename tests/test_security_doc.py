"""SECURITY.md backs every check it describes with a test it names: each named test must
exist, so that a renamed or deleted test cannot leave a claim standing unbacked."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_test_security_md_names_exists() -> None:
    text = (ROOT / "SECURITY.md").read_text(encoding="utf-8")
    named = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+)(\[[^\]`]*\])?)?`", text)
    assert len(named) > 50, "SECURITY.md names the tests behind its claims"
    missing = []
    for path, name, param in named:
        source = ROOT / path
        if not source.is_file():
            missing.append(path)
        elif name and not re.search(rf"^def {name}\(", source.read_text(encoding="utf-8"), re.M):
            missing.append(f"{path}::{name}")
        elif param and name == "test_replay":
            case = param[1:-1]
            if not (ROOT / "fixtures" / "wire" / f"{case}.jsonl").is_file():
                missing.append(f"{path}::{name}{param}")
    assert not missing, f"SECURITY.md names tests that do not exist: {missing}"
