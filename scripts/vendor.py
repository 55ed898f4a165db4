#!/usr/bin/env python3
"""Copy agentproto into another project's tree: DIR/agentproto/, runnable as `python -m agentproto`.

    python scripts/vendor.py third_party/        # writes third_party/agentproto/
    cd third_party && python3 -m agentproto serve

Only the package is copied (its modules and the package data the wheel ships: the schema and
the mock scripts; no tests, no scripts, no bytecode), plus agentproto/VERSION: the version,
and the git commit it was copied from when this checkout is a git repository
(`0.1.0+g<commit>`, `.dirty` when the package had uncommitted changes); the copy's
`--version` shows it. Running it again replaces a copy it made before; it never
overwrites a directory named agentproto that it did not write.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "agentproto"

#: The package data, as in pyproject.toml's [tool.setuptools.package-data] (the packaging
#: tests check that the wheel, the zipapp and a vendored copy hold the same files).
DATA_FILES = (
    "schema.json",
    "mock_scripts/*.json",
    "frontends/console/index.html",
    "frontends/console/console.js",
    "frontends/console/console.css",
)


def package_files() -> list[Path]:
    """The files that make up the package, relative to agentproto/."""
    files = [p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts]
    data = [p.relative_to(PACKAGE) for pattern in DATA_FILES for p in PACKAGE.glob(pattern)]
    return sorted(files + data)


def version_stamp() -> str:
    text = (PACKAGE / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if not match:
        raise SystemExit("agentproto/__init__.py has no __version__")
    version = match.group(1)
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30
        )
        if commit.returncode != 0:
            return version
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "agentproto"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return version  # no git here: the version alone
    stamp = f"{version}+g{commit.stdout.strip()}"
    return stamp + ".dirty" if dirty.returncode == 0 and dirty.stdout.strip() else stamp


def copy_package(dest_root: Path) -> Path:
    """Write dest_root/agentproto (the package and its VERSION); return that directory."""
    dest = dest_root / "agentproto"
    if dest.exists():
        if not (dest / "VERSION").is_file():
            raise SystemExit(f"{dest} exists and is not a copy made by scripts/vendor.py: not touching it")
        shutil.rmtree(dest)
    for rel in package_files():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PACKAGE / rel, dest / rel)
    (dest / "VERSION").write_text(version_stamp() + "\n", encoding="utf-8")
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("dir", type=Path, help="the directory that gets agentproto/ (created if missing)")
    args = parser.parse_args(argv)
    dest_root = args.dir.resolve()
    if dest_root == ROOT:
        print("vendor.py: DIR is this checkout; pick another project's directory", file=sys.stderr)
        return 2
    dest_root.mkdir(parents=True, exist_ok=True)
    dest = copy_package(dest_root)
    print(f"wrote {dest} ({(dest / 'VERSION').read_text(encoding='utf-8').strip()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
