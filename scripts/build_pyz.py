#!/usr/bin/env python3
"""Write dist/agentproto.pyz: the whole package as one file that any Python >= 3.10 runs.

    python scripts/build_pyz.py                 # writes dist/agentproto.pyz
    python scripts/build_pyz.py -o /tmp/ap.pyz  # somewhere else
    python3 dist/agentproto.pyz serve           # nothing else needed: stdlib only

A stdlib zipapp: the package's modules and its package data (what the wheel ships), a
VERSION stamp, and a top-level __main__.py that runs `python -m agentproto`. The package
reads its data through importlib.resources, which reads from inside the zip. Sources only,
no bytecode: compiled files are tied to one interpreter version and the archive is not.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import zipapp
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from vendor import copy_package  # noqa: E402

# Imported by name only: agentproto/__main__.py checks the Python version before anything
# 3.10-only is imported, so an old interpreter gets one line instead of a traceback.
MAIN = """\
# agentproto as a zipapp (scripts/build_pyz.py): the same as `python -m agentproto`.
import agentproto.__main__  # noqa: F401
"""


def build(target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        staging = Path(tmp) / "pyz"
        staging.mkdir()
        copy_package(staging)
        (staging / "__main__.py").write_text(MAIN, encoding="utf-8")
        # Written next to the target, then renamed: a running copy is never half-replaced.
        partial = target.with_name(target.name + ".partial")
        zipapp.create_archive(staging, partial, interpreter="/usr/bin/env python3", compressed=True)
        shutil.move(str(partial), str(target))
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "dist" / "agentproto.pyz", help="where to write it")
    args = parser.parse_args(argv)
    target = build(args.output.resolve())
    print(f"wrote {target} ({target.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
