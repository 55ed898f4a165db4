"""The TypeScript client (clients/typescript/), from the test command: its node tests (S1-S11,
the app's tools, a test per wrapper rule) under ``node --test``; its build fresh against
agentproto/schema.json; ``tsc --strict`` of the package and of the quickstart (docs/typescript.md
and clients/typescript/example/, the same text); ``npm pack`` into a tarball that
installs offline into a fresh project, whose quickstart compiles and runs; and one turn of the
pinned Claude Code CLI through the client against the fake Anthropic API.

Needs node, npm and the pinned npm tools of scripts/install-test-deps (.cache/typegen for tsc
and json2ts, .cache/tsclient for Node's types), so it is not core (tests/conftest.py). Every
npm and node run gets a temp HOME and an npm cache in the test's temp dir: nothing under ~.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_anthropic import FakeAnthropic, claude_bin, pinned_claude_version, processes_with_env, text, tool_use
from sidecar import ROOT

PACKAGE = ROOT / "clients" / "typescript"
TSC = ROOT / ".cache" / "typegen" / "node_modules" / ".bin" / "tsc"
NODE_TYPES = ROOT / ".cache" / "tsclient" / "node_modules" / "@types"
DOC = ROOT / "docs" / "typescript.md"


def node() -> str:
    found = shutil.which("node")
    assert found, "node is needed for this test (see the README's Testing section)"
    return found


def npm() -> str:
    found = shutil.which("npm")
    assert found, "npm is needed for this test (see the README's Testing section)"
    return found


def tsc_argv() -> list[str]:
    for path in (TSC, NODE_TYPES / "node" / "package.json"):
        if not path.exists():
            pytest.fail(f"{path} is missing: run scripts/install-test-deps (it needs node and npm)")
    return [
        str(TSC),
        "--strict",
        "--target",
        "es2022",
        "--module",
        "nodenext",
        "--moduleResolution",
        "nodenext",
        "--typeRoots",
        str(NODE_TYPES),
        "--types",
        "node",
    ]


def home_env(tmp_path: Path) -> dict[str, str]:
    """This environment with a HOME, XDG dirs and an npm cache of the test's own."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, HOME=str(home), npm_config_cache=str(tmp_path / "npm-cache"))
    env.update(
        {
            name: str(home / sub)
            for name, sub in (
                ("XDG_CONFIG_HOME", ".config"),
                ("XDG_CACHE_HOME", ".cache"),
                ("XDG_DATA_HOME", ".local/share"),
                ("XDG_STATE_HOME", ".local/state"),
            )
        }
    )
    env.update(npm_config_update_notifier="false", npm_config_audit="false", npm_config_fund="false")
    return env


def launcher(tmp_path: Path) -> str:
    """An ``agentproto`` executable for AGENTPROTO_BIN: this interpreter with this checkout."""
    path = tmp_path / "bin" / "agentproto"
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(ROOT))} exec {shlex.quote(sys.executable)} -m agentproto "$@"\n'
    )
    path.chmod(0o755)
    return str(path)


def examples() -> list[str]:
    """The docs page's TypeScript blocks: the quickstart, then the app's tools (their markers
    for tests/test_docs_blocks.py: "ts-quickstart", "ts-tools")."""
    marked = re.findall(r"<!-- cookbook: (\S+) -->\n```ts\n(.*?)```", DOC.read_text(), re.S)
    assert [name for name, _ in marked] == ["ts-quickstart", "ts-tools"]
    return [text for _, text in marked]


def quickstart() -> str:
    return examples()[0]


def test_the_readme_shows_the_quickstart_the_tests_run() -> None:
    """README.md's TypeScript quickstart ("readme-ts-quickstart") is docs/typescript.md's, which
    test_npm_pack_installs_offline_and_runs_the_quickstart compiles and runs from the tarball."""
    readme = (ROOT / "README.md").read_text()
    [shown] = re.findall(r"<!-- cookbook: readme-ts-quickstart -->\n```ts\n(.*?)```", readme, re.S)
    assert shown == quickstart()


def test_node_tests_pass(tmp_path: Path) -> None:
    """S1-S11, the app's tools and every wrapper rule (clients/typescript/test/*.test.mjs)."""
    tests = sorted(str(path) for path in (PACKAGE / "test").glob("*.test.mjs"))
    assert len(tests) >= 2, tests
    env = home_env(tmp_path)
    env["AGENTPROTO_TEST_PYTHON"] = sys.executable
    done = subprocess.run(
        [node(), "--test", "--test-timeout=120000", *tests],
        cwd=PACKAGE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = done.stdout.splitlines()
    summary = "\n".join(line for line in lines if line.startswith(("not ok", "# ")))
    failed = "\n".join(
        lines[i] + "\n" + "\n".join(lines[i + 1 : i + 12]) for i, line in enumerate(lines) if "not ok" in line
    )
    assert done.returncode == 0, failed[-8000:] + done.stderr[-2000:]
    assert re.search(r"^# fail 0$", done.stdout, re.M) and re.search(r"^# pass [1-9]\d+$", done.stdout, re.M), summary


def test_the_build_is_fresh() -> None:
    """src/protocol.d.ts and dist/ are what scripts/build_ts_client.py writes from the schema."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_ts_client.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_stale_build_is_found(tmp_path: Path) -> None:
    """--check fails when the schema changed under the committed types (a copy of the tree)."""
    copy = tmp_path / "repo"
    for part in ("agentproto/schema.json", "scripts/build_ts_client.py", "clients/typescript"):
        source, target = ROOT / part, copy / part
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
    (copy / ".cache").symlink_to(ROOT / ".cache")
    schema = json.loads((copy / "agentproto/schema.json").read_text())
    schema["definitions"]["ErrorKind"]["anyOf"].append({"const": "Newly"})
    (copy / "agentproto/schema.json").write_text(json.dumps(schema))
    done = subprocess.run(
        [sys.executable, str(copy / "scripts" / "build_ts_client.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1 and "protocol.d.ts" in done.stderr, done.stdout + done.stderr


def test_the_version_is_agentproto_s() -> None:
    import agentproto

    assert json.loads((PACKAGE / "package.json").read_text())["version"] == agentproto.__version__


def test_the_package_has_no_runtime_dependency() -> None:
    manifest = json.loads((PACKAGE / "package.json").read_text())
    assert not manifest.get("dependencies") and not manifest.get("peerDependencies"), manifest
    assert manifest["type"] == "module" and manifest["engines"]["node"] == ">=20"
    imports = re.findall(r'^import .* from "([^"]+)";$', (PACKAGE / "dist" / "index.js").read_text(), re.M)
    assert imports and all(name.startswith("node:") for name in imports), imports


def test_the_docs_examples_are_the_example_files() -> None:
    """docs/typescript.md shows example/quickstart.ts and example/tools.ts as they are (both
    compiled and run from the packed tarball below)."""
    assert examples() == [(PACKAGE / "example" / name).read_text() for name in ("quickstart.ts", "tools.ts")]
    assert len(quickstart().strip().splitlines()) <= 26


def test_tsc_strict_refuses_a_misuse(tmp_path: Path) -> None:
    """The package's types really check: a wrong answer and a kind's typo are refused."""
    project = tmp_path / "app"
    (project / "node_modules").mkdir(parents=True)
    (project / "node_modules" / "agentproto").symlink_to(PACKAGE)
    (project / "package.json").write_text('{"type": "module"}\n')
    (project / "wrong.ts").write_text(
        'import { Runtime, is } from "agentproto";\n'
        "const rt = await Runtime.start();\n"
        'const session = await rt.open("mock");\n'
        "for await (const ev of session.events()) {\n"
        '  if (is(ev, "TextDelta")) { const n: number = ev.kind.TextDelta.text; console.log(n); }\n'
        '  await session.answer("r1", { Permission: "Sure" });\n'
        '  if (is(ev, "TurnEnd")) break;\n'
        "}\n"
    )
    done = subprocess.run(
        [*tsc_argv(), "--noEmit", "wrong.ts"], cwd=project, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    for line in (5, 6, 7):
        assert f"wrong.ts({line}," in done.stdout, done.stdout


def test_npm_pack_installs_offline_and_runs_the_quickstart(tmp_path: Path) -> None:
    """`npm pack` → a tarball; a fresh project installs it offline, compiles the quickstart and
    the tools example under tsc --strict (the package's .d.ts checked too) and runs them."""
    env = home_env(tmp_path)
    packed = subprocess.run(
        [npm(), "pack", "--json", "--pack-destination", str(tmp_path)],
        cwd=PACKAGE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert packed.returncode == 0, packed.stderr
    report = json.loads(packed.stdout)[0]
    import agentproto

    assert report["filename"] == f"agentproto-{agentproto.__version__}.tgz"
    assert sorted(entry["path"] for entry in report["files"]) == [
        "README.md",
        "dist/index.d.ts",
        "dist/index.js",
        "dist/protocol.d.ts",
        "package.json",
    ]
    project = tmp_path / "fresh"
    project.mkdir()
    (project / "package.json").write_text('{"name": "fresh", "private": true, "type": "module"}\n')
    installed = subprocess.run(
        [npm(), "install", "--offline", "--no-audit", "--no-fund", str(tmp_path / report["filename"])],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert (project / "node_modules" / "agentproto" / "dist" / "index.js").is_file()
    assert sorted(os.listdir(project / "node_modules")) in (["agentproto"], [".package-lock.json", "agentproto"])
    quick, tools = examples()
    (project / "quickstart.ts").write_text(quick)
    (project / "tools.ts").write_text(tools)
    compiled = subprocess.run(
        [*tsc_argv(), "--outDir", "out", "quickstart.ts", "tools.ts"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    env["AGENTPROTO_BIN"] = launcher(tmp_path)
    outputs = {}
    for name in ("quickstart", "tools"):
        ran = subprocess.run(
            [node(), f"out/{name}.js"], cwd=project, env=env, capture_output=True, text=True, timeout=120
        )
        assert ran.returncode == 0, ran.stderr
        outputs[name] = ran.stdout
    assert outputs["quickstart"] == "Let me check. [allowing cargo test]\nDone.\n"
    assert outputs["tools"] == 'lookup({"word":"agent"})\n"agent: a program that acts"\n'


def test_a_real_claude_turn_through_the_client(tmp_path: Path) -> None:
    """The pinned Claude Code CLI, one turn with a permission, through the TypeScript client,
    against the fake Anthropic API (the CLI's endpoint and key only in the open options)."""
    work, config = tmp_path / "work", tmp_path / "config"
    work.mkdir()
    config.mkdir()
    env = home_env(tmp_path)
    for name in [name for name in env if name.startswith("ANTHROPIC_")]:
        del env[name]
    env["AGENTPROTO_CLAUDE_BIN"] = claude_bin()
    env["AGENTPROTO_TS_SIDECAR"] = json.dumps([launcher(tmp_path)])
    with FakeAnthropic() as api:
        api.push(tool_use("Bash", {"command": "echo from-ts > out.txt"}), text("Wrote out.txt."))
        cli_env = api.cli_env(str(config))
        del cli_env["CLAUDE_CONFIG_DIR"]
        env["AGENTPROTO_TS_OPEN"] = json.dumps({"dir": str(work), "env": cli_env, "config_home": str(config)})
        try:
            done = subprocess.run(
                [node(), str(PACKAGE / "test" / "claude-real.mjs")],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
            )
        finally:
            deadline = time.monotonic() + 5
            while processes_with_env(str(config)) and time.monotonic() < deadline:
                time.sleep(0.1)
            left = processes_with_env(str(config))
            for pid in left:
                os.kill(pid, signal.SIGKILL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not left, f"claude processes left behind: {left}"
    seen = json.loads(done.stdout)
    assert seen["version"] == pinned_claude_version()
    assert (
        seen["permissions"] == [{"Command": {"command": "echo from-ts > out.txt", "cwd": None}}]
        or seen["permissions"][0]["Command"]["command"] == "echo from-ts > out.txt"
    ), seen
    assert seen["text"] == "Wrote out.txt.", seen
    assert seen["stop"] == {"Completed": {"source": "Protocol"}}, seen
    assert seen["exit"] == 0
    assert (work / "out.txt").read_text() == "from-ts\n"
