#!/usr/bin/env python3
"""Run the fuzz targets long: ``python scripts/fuzz.py --minutes N [--target NAME ...]``.

The time is shared between the targets by their weight. For each target it prints the
inputs tried, the distinct crashes found, and each crash's minimal input (shrunk by
hypothesis), and writes the same report to ``--out`` (default .cache/fuzz/report.txt).
A crash is not fatal: once found it is known, and the run goes on looking for others.
Run it at low priority on a shared machine: ``nice -n 19 python scripts/fuzz.py ...``.

The targets live in tests/fuzz/ (each also runs in the suite with a small budget); this
needs the test dependencies (hypothesis): use the checkout's .venv/bin/python.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "fakes")]

from fuzz.harness import iter_report, load, run_long  # noqa: E402


def main() -> int:
    targets = load()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=1.0, help="total time, shared by the targets (default 1)")
    parser.add_argument("--target", action="append", choices=sorted(targets), help="only this target (repeatable)")
    parser.add_argument("--out", default=str(ROOT / ".cache" / "fuzz" / "report.txt"), help="where the report goes")
    parser.add_argument("--round", type=int, default=1000, help="examples per hypothesis round (default 1000)")
    parser.add_argument(
        "--mutants", type=int, default=20, help="mutants tried after each input (targets with a mutator; default 20)"
    )
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    args = parser.parse_args()
    if args.list:
        for name, t in sorted(targets.items()):
            mutated = "mutants" if t.mutate else "       "
            print(f"{name:<20} weight {t.weight:<4g} {mutated} {t.doc.splitlines()[0] if t.doc else ''}")
        return 0
    chosen = [targets[name] for name in (args.target or sorted(targets))]
    total_weight = sum(t.weight for t in chosen)
    results = []
    started = time.monotonic()
    for t in chosen:
        seconds = args.minutes * 60 * t.weight / total_weight

        def progress(stats: object, name: str = t.name) -> None:
            s = stats  # type: ignore[assignment]
            print(f"  {name}: {s.tried} inputs, {len(s.crashes)} crashes, {s.seconds:.0f} s", file=sys.stderr)  # type: ignore[attr-defined]

        print(f"{t.name}: fuzzing for {seconds:.0f} s", file=sys.stderr)
        results.append(run_long(t, seconds, args.round, progress, args.mutants))
    report = "\n".join(iter_report(results)) + f"\n\n{time.monotonic() - started:.0f} s in all\n"
    print(report)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    print(f"report written to {out}", file=sys.stderr)
    return 1 if any(s.crashes for s in results) else 0


if __name__ == "__main__":
    sys.exit(main())
