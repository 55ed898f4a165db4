#!/usr/bin/env python3
"""Benchmark: one Claude Code turn through agentproto vs the raw CLI vs claude-agent-sdk.

All three drive the same pinned ``claude`` CLI against the same fake Anthropic Messages
API on 127.0.0.1 (tests/fakes/fake_anthropic.py), streaming the same answer:

- raw: the minimum a program needs: spawn the CLI with stream-json in and out, write
  initialize and the user message, read lines until ``result``;
- agentproto: ``python -m agentproto serve`` driven by the Python client: prompt, read
  events until TurnEnded;
- ap-frames: the same sidecar spoken to in raw protocol 1 frames (no client library);
  its one-shot includes starting the sidecar itself, the others reuse a running one;
- sdk: ``claude-agent-sdk`` (PyPI) with ``ClaudeSDKClient``, ``cli_path`` set to the
  same CLI and the ``claude_code`` system prompt preset: query, read messages until
  ``ResultMessage``.

Two measures, interleaved round by round with the order rotated each round (going first
in a round costs), so drift hits all alike; times are medians, ratios are medians of the per-round ratios:
- turn: prompt to end of turn in an open session;
- one-shot: start the session, one turn, closed (what ``generate`` or a script pays).

The SDK is imported from .cache/bench-sdk (pip install --target .cache/bench-sdk
claude-agent-sdk) or the interpreter's site-packages; without it its column is skipped.

    python3 scripts/bench_claude.py [--turns 30] [--oneshots 8] [--chunks 100]
"""

from __future__ import annotations

import bench_state  # noqa: F401  (first: the sidecars' database in a temp dir)

import argparse
import asyncio
import json
import os
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agentproto.client import Runtime, kind_of
from tests.fakes import fake_anthropic as fa

SDK_DIR = os.path.join(ROOT, ".cache", "bench-sdk")


def cli_argv(claude: str) -> list[str]:
    """The same flags the agentproto driver passes."""
    return [
        claude, "--output-format", "stream-json", "--input-format", "stream-json", "--verbose",
        "--include-partial-messages", "--permission-prompt-tool", "stdio", f"--session-id={uuid.uuid4()}",
    ]  # fmt: skip


class RawCli:
    def __init__(self, claude: str, cwd: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            cli_argv(claude), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=cwd, env=env, start_new_session=True,
        )  # fmt: skip
        assert self.proc.stdin and self.proc.stdout
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.buf = b""
        self.write(
            {
                "type": "control_request",
                "request_id": "init",
                "request": {"subtype": "initialize", "hooks": None},
            }
        )
        self.until(lambda m: m.get("type") == "control_response")

    def write(self, obj: dict) -> None:
        assert self.proc.stdin
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()

    def until(self, match) -> dict:
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                msg = json.loads(line)
                if match(msg):
                    return msg
            self.sel.select(30)
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise EOFError("claude exited")
            self.buf += chunk

    def turn(self, prompt: str) -> None:
        self.write(
            {
                "type": "user",
                "session_id": "",
                "message": {"role": "user", "content": prompt},
                "parent_tool_use_id": None,
            }
        )
        self.until(lambda m: m.get("type") == "result")

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(15)


class ViaAgentproto:
    def __init__(self, rt: Runtime, cwd: str, env: dict[str, str]) -> None:
        self.session = rt.open("claude", dir=cwd, env=env)
        self.events = self.session.events(timeout=60)

    def turn(self, prompt: str) -> None:
        self.session.prompt(prompt)
        for event in self.events:
            if kind_of(event) == "TurnEnded":
                return

    def close(self) -> None:
        self.session.close()


class ViaFrames:
    """``agentproto serve`` spoken to in raw protocol 1 frames (no client library)."""

    def __init__(self, claude: str, cwd: str, env: dict[str, str]) -> None:
        child_env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", "/tmp"),
            "AGENTPROTO_CLAUDE_BIN": claude,
            "PYTHONPATH": ROOT,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentproto", "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=child_env,
        )
        assert self.proc.stdout
        self.proc.stdout.readline()  # hello
        self.next_id = 0
        opened = self.call({"cmd": "open", "agent": "claude", "dir": cwd, "env": env})
        self.session = opened["ok"]["id"]

    def send(self, cmd: dict) -> int:
        assert self.proc.stdin
        self.next_id += 1
        self.proc.stdin.write((json.dumps({"id": self.next_id, **cmd}) + "\n").encode())
        self.proc.stdin.flush()
        return self.next_id

    def call(self, cmd: dict) -> dict:
        frame_id = self.send(cmd)
        while True:
            line = json.loads(self.proc.stdout.readline())  # type: ignore[union-attr]
            if line.get("id") == frame_id:
                return line

    def turn(self, prompt: str) -> None:
        self.send({"cmd": "prompt", "session": self.session, "text": prompt})
        while b'"TurnEnded"' not in self.proc.stdout.readline():  # type: ignore[union-attr]
            pass

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(15)


class ViaSdk:
    """claude-agent-sdk's ClaudeSDKClient on its own asyncio loop, driven step by step."""

    def __init__(self, sdk, claude: str, cwd: str, env: dict[str, str]) -> None:
        self.sdk = sdk
        self.loop = asyncio.new_event_loop()
        # The claude_code preset: without it the SDK sends an empty system prompt, a
        # different (and cheaper) turn than the CLI's own.
        options = sdk.ClaudeAgentOptions(
            cli_path=claude, cwd=cwd, env=env, include_partial_messages=True,
            system_prompt={"type": "preset", "preset": "claude_code"},
        )  # fmt: skip
        self.client = sdk.ClaudeSDKClient(options)
        self.loop.run_until_complete(self.client.connect())

    def turn(self, prompt: str) -> None:
        async def run() -> None:
            await self.client.query(prompt)
            async for message in self.client.receive_response():
                if isinstance(message, self.sdk.ResultMessage):
                    return

        self.loop.run_until_complete(run())

    def close(self) -> None:
        self.loop.run_until_complete(self.client.disconnect())
        self.loop.close()


def load_sdk():
    if os.path.isdir(SDK_DIR):
        sys.path.insert(0, SDK_DIR)
    os.environ["CLAUDE_AGENT_SDK_SKIP_VERSION_CHECK"] = "1"
    try:
        import claude_agent_sdk  # type: ignore[import-not-found]
    except ImportError:
        return None
    return claude_agent_sdk


def rotated(names: list[str], i: int) -> list[str]:
    """Each round starts with the next runner: going first costs (the machine wakes up)."""
    k = i % len(names)
    return names[k:] + names[:k]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--oneshots", type=int, default=12)
    parser.add_argument(
        "--chunks", type=int, default=100, help="text deltas per answer"
    )
    parser.add_argument(
        "--sdk-entrypoint",
        action="store_true",
        help="let the SDK tag the CLI as sdk-py",
    )
    args = parser.parse_args()
    claude = str(fa.PINNED_CLAUDE)
    if not os.path.exists(claude):
        print(
            f"the pinned Claude Code CLI is missing at {claude}: run .ci/run",
            file=sys.stderr,
        )
        return 1
    sdk = load_sdk()
    answer = " ".join(f"word{i}" for i in range(args.chunks))
    work = tempfile.mkdtemp(prefix="bench-claude-")
    config = tempfile.mkdtemp(prefix="bench-claude-config-")
    with fa.FakeAnthropic() as api:
        api.default_reply = fa.text(answer, chunk=max(1, len(answer) // args.chunks))
        cli_env = api.cli_env(config)
        raw_env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", "/tmp"),
            **cli_env,
        }
        rt = Runtime.start(
            env={
                "PATH": os.environ.get("PATH", ""),
                "HOME": os.environ.get("HOME", "/tmp"),
                "AGENTPROTO_CLAUDE_BIN": claude,
            }
        )
        runners = {
            "raw": lambda: RawCli(claude, work, raw_env),
            "agentproto": lambda: ViaAgentproto(rt, work, cli_env),
            "ap-frames": lambda: ViaFrames(claude, work, cli_env),
        }
        if sdk is not None:
            # The SDK tags the CLI's environment CLAUDE_CODE_ENTRYPOINT=sdk-py, which makes
            # the CLI run its turns as an "sdk" session rather than the "sdk-cli" one every
            # other host gets; its own env option overrides that, so all three run the
            # same CLI in the same mode. (--sdk-entrypoint keeps the SDK's tag, to see it.)
            sdk_env = (
                raw_env
                if args.sdk_entrypoint
                else {**raw_env, "CLAUDE_CODE_ENTRYPOINT": "sdk-cli"}
            )
            runners["sdk"] = lambda: ViaSdk(sdk, claude, work, sdk_env)
        try:
            turn: dict[str, list[float]] = {name: [] for name in runners}
            live = {name: make() for name, make in runners.items()}
            for live_one in live.values():
                live_one.turn("warm up")
            for i in range(args.turns):
                for name in rotated(list(live), i):
                    turn[name].append(
                        timed(lambda name=name, i=i: live[name].turn(f"turn {i}"))
                    )
            for runner in live.values():
                runner.close()
            oneshot: dict[str, list[float]] = {name: [] for name in runners}

            def once(make) -> None:
                runner = make()
                runner.turn("one shot")
                runner.close()

            for i in range(args.oneshots):
                for name in rotated(list(runners), i):
                    oneshot[name].append(timed(lambda name=name: once(runners[name])))
        finally:
            rt.close()
    print(f"Claude Code {subprocess.run([claude, '--version'], capture_output=True, text=True, check=False).stdout.strip()}, "
          f"fake API on 127.0.0.1, {args.chunks} text deltas per answer; medians in ms")  # fmt: skip
    if sdk is None:
        print(
            "(claude-agent-sdk not installed: pip install --target .cache/bench-sdk claude-agent-sdk)"
        )

    def paired(samples: dict[str, list[float]], name: str, base: str) -> float:
        """Median over rounds of name/base within the same round: drift cancels out."""
        return (
            statistics.median(a / b for a, b in zip(samples[name], samples[base])) - 1
        ) * 100

    print(
        f"{'':12}{'turn':>10}{'vs raw':>9}{'one-shot':>11}{'vs raw':>9}   (vs raw: paired per round)"
    )
    for name in runners:
        t = statistics.median(turn[name])
        o = statistics.median(oneshot[name])
        print(
            f"{name:12}{t:10.1f}{paired(turn, name, 'raw'):+8.1f}%{o:11.1f}{paired(oneshot, name, 'raw'):+8.1f}%"
        )
    if sdk is not None:
        print(
            f"agentproto vs sdk, turn: {paired(turn, 'agentproto', 'sdk'):+.1f}%; "
            f"one-shot: {paired(oneshot, 'agentproto', 'sdk'):+.1f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
