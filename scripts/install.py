#!/usr/bin/env python3
"""Install agentproto for this user: `agentproto …` from any directory, started fast.

    python3 scripts/install.py                   # ~/.local/bin/agentproto, ~/.local/lib/agentproto/
    python3 scripts/install.py --prefix /opt/ap  # /opt/ap/bin/agentproto, /opt/ap/lib/agentproto/
    python3 scripts/install.py --uninstall       # removes exactly what it wrote

What it writes, under PREFIX (default ~/.local):
- lib/agentproto/<version>/agentproto/: the package as scripts/vendor.py copies it (modules,
  package data: the schema and the mock scripts, a VERSION stamp that `--version` shows),
  compiled to bytecode by the interpreter that runs this script (compileall), so no start
  pays for compiling. One directory per version: an upgrade writes the new copy beside the
  old one and switches the launcher (an atomic rename), so a sidecar an MCP host started
  before the upgrade keeps the files it still imports lazily. The version before the new
  one stays; older ones are removed.
- bin/agentproto: the launcher, a Python script whose first line runs this interpreter with
  -I (isolated: no PYTHON* variables, no user site, no current directory on sys.path) and -S
  (no site module: the package is stdlib only), which puts the version's directory first on
  sys.path and runs agentproto's __main__: one interpreter start, as `python3 -m agentproto`
  in a checkout (an interpreter path that a #! line cannot hold gets a /bin/sh launcher
  that execs it).
- lib/agentproto/install-manifest.json: every file and directory written, the launcher's
  sha256. --uninstall removes those (the launcher only while it is unchanged) and the
  directories it created once empty, nothing else.

It refuses to overwrite what it did not write: a bin/agentproto or a version directory the
manifest does not list is left alone (exit 1, nothing written). It warns when bin/ is not on
PATH. Run it again to update (the same version is replaced, the launcher last).
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
import json
import os
import shlex
import shutil
import sys
from pathlib import Path

if sys.version_info < (3, 10):  # the launcher runs this interpreter: it must run agentproto
    sys.exit("install.py: agentproto needs Python 3.10 or newer (this is %d.%d.%d): run it with a newer python3"
             % tuple(sys.version_info[:3]))  # fmt: skip

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from vendor import copy_package, version_stamp  # noqa: E402

MANIFEST = "install-manifest.json"
#: The versions kept: the new one and the one before it (see the module's docstring).
KEEP = 2


class Refused(Exception):
    """Something in the way that this script did not write: nothing is touched."""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def launcher_text(python: str, lib: Path) -> str:
    """The launcher: one interpreter start, the version's directory first on sys.path."""
    body = f"import sys; sys.path.insert(0, {str(lib)!r}); import agentproto.__main__"
    shebang = f"#!{python} -IS"
    if len(shebang) <= 120 and not any(c.isspace() for c in python) and python.isprintable():
        return (
            f"{shebang}\n"
            f"# agentproto, installed by scripts/install.py: runs the copy in {lib}.\n"
            "import sys\n\n"
            f"sys.path.insert(0, {str(lib)!r})\n"
            "import agentproto.__main__  # noqa: E402,F401  (it runs the command line)\n"
        )
    # A path no #! line holds (spaces, too long): /bin/sh execs the interpreter instead.
    code = f'import sys; sys.argv[0] = "agentproto"; {body}'
    return (
        "#!/bin/sh\n"
        f"# agentproto, installed by scripts/install.py: runs the copy in {lib}.\n"
        f'exec {shlex.quote(python)} -IS -c {shlex.quote(code)} "$@"\n'
    )


class Install:
    def __init__(self, prefix: Path) -> None:
        self.prefix = prefix
        self.bin = prefix / "bin"
        self.home = prefix / "lib" / "agentproto"
        self.launcher = self.bin / "agentproto"
        self.manifest_path = self.home / MANIFEST

    def manifest(self) -> dict[str, object] | None:
        try:
            data = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise Refused(f"{self.manifest_path}: not a manifest this script can read ({exc})") from None
        if not isinstance(data, dict) or data.get("installed_by") != "scripts/install.py":
            raise Refused(f"{self.manifest_path}: not written by scripts/install.py")
        return data

    # -- install ------------------------------------------------------------------------------

    def install(self, python: str) -> Path:
        old = self.manifest() or {}
        versions: list[dict[str, object]] = list(old.get("versions", []))  # type: ignore[arg-type]
        launcher: dict[str, str] | None = old.get("launcher")  # type: ignore[assignment]
        created: list[str] = list(old.get("created", []))  # type: ignore[arg-type]
        stamp = version_stamp()
        target = self.home / stamp
        ours = {v["dir"] for v in versions}
        # What is in the way and not ours: refuse before writing anything.
        if self.launcher.exists() or self.launcher.is_symlink():
            if launcher is None:
                raise Refused(f"{self.launcher} exists and was not written by scripts/install.py: not touching it")
            if self.launcher.is_symlink() or sha256(self.launcher) != launcher["sha256"]:
                raise Refused(f"{self.launcher} changed since scripts/install.py wrote it: not touching it")
        if target.exists() and str(target) not in ours:
            raise Refused(f"{target} exists and was not written by scripts/install.py: not touching it")

        for directory in (self.prefix, self.bin, self.prefix / "lib", self.home):
            if not directory.exists():
                directory.mkdir(parents=True)
                if str(directory) not in created:
                    created.append(str(directory))

        # The copy, compiled, written beside the place it goes and renamed into it.
        partial = self.home / f".{stamp}.partial"
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir()
        copy_package(partial)
        if not compileall.compile_dir(str(partial / "agentproto"), quiet=1, ddir=str(target / "agentproto")):
            shutil.rmtree(partial)
            raise Refused("compileall failed on the copy: not installed")
        files = sorted(str(target / p.relative_to(partial)) for p in partial.rglob("*") if p.is_file())
        dirs = sorted(str(target / p.relative_to(partial)) for p in partial.rglob("*") if p.is_dir())
        if target.exists():  # the same version again: replaced
            retired = self.home / f".{stamp}.old"
            if retired.exists():
                shutil.rmtree(retired)
            target.rename(retired)
            partial.rename(target)
            shutil.rmtree(retired)
        else:
            partial.rename(target)
        versions = [v for v in versions if v["dir"] != str(target)]
        versions.append({"version": stamp, "dir": str(target), "files": files, "dirs": dirs})

        # The launcher last, atomically: a start sees the old one or the new one.
        text = launcher_text(python, target)
        fresh = self.bin / ".agentproto.partial"
        fresh.unlink(missing_ok=True)  # never written through: created anew, no symlink followed
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(fresh, 0o755)  # whatever the umask
        fresh.replace(self.launcher)
        launcher = {"path": str(self.launcher), "sha256": sha256(self.launcher)}

        # Versions beyond the last KEEP go (their directories only: each is ours).
        for gone in versions[:-KEEP]:
            self._remove_version(gone)
        versions = versions[-KEEP:]
        self._write_manifest({"installed_by": "scripts/install.py", "python": python, "launcher": launcher,
                              "versions": versions, "created": created})  # fmt: skip
        return target

    def _write_manifest(self, data: dict[str, object]) -> None:
        partial = self.manifest_path.with_name(MANIFEST + ".partial")
        partial.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        partial.replace(self.manifest_path)

    def _remove_version(self, version: dict[str, object]) -> None:
        for name in version["files"]:  # type: ignore[attr-defined]
            Path(name).unlink(missing_ok=True)
        for name in sorted(version["dirs"], key=len, reverse=True):  # type: ignore[arg-type]
            _rmdir(Path(name))
        _rmdir(Path(str(version["dir"])))

    # -- uninstall ----------------------------------------------------------------------------

    def uninstall(self) -> list[str]:
        """Remove what the manifest lists; the notes to print (what was kept, and why)."""
        data = self.manifest()
        if data is None:
            raise Refused(f"nothing to uninstall: no {self.manifest_path}")
        notes = []
        launcher: dict[str, str] | None = data.get("launcher")  # type: ignore[assignment]
        if launcher is not None:
            path = Path(launcher["path"])
            if path.is_file() and not path.is_symlink() and sha256(path) == launcher["sha256"]:
                path.unlink()
            elif path.exists() or path.is_symlink():
                notes.append(f"kept {path}: it changed since scripts/install.py wrote it")
        for version in data.get("versions", []):  # type: ignore[attr-defined]
            self._remove_version(version)
        self.manifest_path.unlink()
        for name in sorted(data.get("created", []), key=len, reverse=True):  # type: ignore[arg-type]
            _rmdir(Path(name))
        return notes


def _rmdir(path: Path) -> None:
    """Remove a directory if it is empty (what is left in it is not ours)."""
    try:
        path.rmdir()
    except OSError:
        pass


def on_path(directory: Path) -> bool:
    wanted = os.path.realpath(directory)
    return any(p and os.path.realpath(os.path.expanduser(p)) == wanted for p in os.environ.get("PATH", "").split(os.pathsep))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--prefix", type=Path, help="where bin/ and lib/ are (default: ~/.local)")
    parser.add_argument("--uninstall", action="store_true", help="remove what an earlier install wrote")
    args = parser.parse_args(argv)
    prefix = (args.prefix or Path.home() / ".local").expanduser().absolute()
    install = Install(prefix)
    try:
        if args.uninstall:
            for note in install.uninstall():
                print(f"install.py: {note}", file=sys.stderr)
            print(f"removed agentproto from {prefix}")
            return 0
        target = install.install(sys.executable)
    except Refused as exc:
        print(f"install.py: {exc}", file=sys.stderr)
        return 1
    print(f"installed agentproto {target.name}: {install.launcher} (the package in {target})")
    if not on_path(install.bin):
        print(
            f"install.py: {install.bin} is not on your PATH: add it (e.g. in ~/.profile: "
            f'export PATH="{install.bin}:$PATH"), or run {install.launcher}',
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
