#!/usr/bin/env python3
"""Benchmark: one turn of each real ACP agent through agentproto vs the agent driven raw.

Each agent is the pinned one of .cache/acp-agents (tests/acp-agents), against its fake
model API on 127.0.0.1 (tests/fakes: Gemini's, Anthropic's Messages, OpenAI's Responses and
Chat Completions), streaming the same answer in ``--chunks`` text deltas, with a temp HOME:

- raw: the minimum an ACP client needs: spawn the agent, ``initialize``, ``session/new``,
  then per turn ``session/prompt`` and read lines until its answer (no update is decoded
  beyond the JSON);
- agentproto: ``python -m agentproto serve`` driven by the Python client: prompt, read
  events until TurnEnded.

Turns are interleaved (raw, agentproto, then the other way round) so drift hits both;
times are medians, the overhead is the median of the per-pair differences.

    python3 scripts/bench_acp_agents.py [--agents gemini,claude-acp,...] [--turns 15] [--chunks 50]
"""

from __future__ import annotations

import bench_state  # noqa: F401  (first: the sidecars' database in a temp dir)

import argparse
import json
import os
import selectors
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agentproto.client import Runtime, kind_of
from tests.fakes import fake_anthropic, fake_chat, fake_gemini, fake_openai

BIN = os.path.join(ROOT, ".cache", "acp-agents", "node_modules", ".bin")
ANSWER = "The quick brown fox jumps over the lazy dog. " * 4


class Agent:
    """One agent's world: its fake API (answering every turn with ANSWER), HOME, env, argv."""

    def __init__(self, agent_id: str, chunks: int) -> None:
        self.id = agent_id
        self.tmp = tempfile.mkdtemp(prefix=f"bench-{agent_id}-")
        self.home = os.path.join(self.tmp, "home")
        self.work = os.path.join(self.tmp, "work")
        os.makedirs(self.work)
        os.makedirs(self.home)
        env: dict[str, str] = {"HOME": self.home, "XDG_CONFIG_HOME": os.path.join(self.home, ".config")}
        self.stop: Callable[[], None]
        if agent_id == "gemini":
            api = fake_gemini.FakeGemini()
            api.default = fake_gemini.text(ANSWER, chunks=chunks)
            env.update(api.cli_env(self.home))
            self.stop, self.argv = api.close, ["gemini", "--acp"]
        elif agent_id == "claude-acp":
            anthropic = fake_anthropic.FakeAnthropic().start()
            anthropic.default_reply = fake_anthropic.text(ANSWER, chunk=max(1, len(ANSWER) // chunks))
            config = os.path.join(self.home, ".claude")
            os.makedirs(config)
            env.update(anthropic.cli_env(config))
            if os.geteuid() == 0:
                env["IS_SANDBOX"] = "1"
            self.stop, self.argv = anthropic.stop, ["claude-agent-acp"]
        elif agent_id == "codex-acp":
            responses = fake_openai.FakeOpenAI()
            responses.default = lambda request: fake_openai.text(ANSWER, chunks=chunks)
            codex_home = os.path.join(self.home, ".codex")
            os.makedirs(codex_home)
            with open(os.path.join(codex_home, "config.toml"), "w") as f:
                f.write(fake_openai.codex_config(responses.base_url, model="gpt-5.3-codex"))
            env.update({"CODEX_HOME": codex_home, "FAKE_OPENAI_API_KEY": "sk-fake"})
            self.stop, self.argv = responses.close, ["codex-acp"]
        else:
            chat = fake_chat.FakeChat()
            chat.default = fake_chat.text(ANSWER, chunks=chunks)
            self.stop = chat.close
            if agent_id == "qwen":
                os.makedirs(os.path.join(self.home, ".qwen"))
                with open(os.path.join(self.home, ".qwen", "settings.json"), "w") as f:
                    json.dump({"security": {"auth": {"selectedType": "openai"}},
                               "memory": {"enableManagedAutoMemory": False}}, f)
                env.update({"OPENAI_BASE_URL": chat.base_url, "OPENAI_API_KEY": "sk-fake", "OPENAI_MODEL": "fake-model"})
                self.argv = ["qwen", "--acp"]
            else:
                config = os.path.join(self.home, ".config", "opencode")
                os.makedirs(config)
                provider = {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
                            "options": {"baseURL": chat.base_url, "apiKey": "sk-fake"},
                            "models": {"fake-model": {"name": "Fake model", "tool_call": True}}}
                with open(os.path.join(config, "opencode.json"), "w") as f:
                    json.dump({"autoupdate": False, "share": "disabled", "provider": {"fake": provider},
                               "model": "fake/fake-model", "small_model": "fake/fake-model"}, f)
                env.update({"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1"})
                self.argv = ["opencode", "acp"]
        self.argv[0] = os.path.join(BIN, self.argv[0])
        self.env = env

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Raw:
    """The agent spoken to directly in ACP (JSON-RPC lines)."""

    def __init__(self, agent: Agent) -> None:
        self.proc = subprocess.Popen(
            agent.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={**os.environ, **agent.env}, cwd=agent.work, start_new_session=True,
        )  # fmt: skip
        self.sel = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.buf = b""
        self.next_id = 0
        # The capabilities agentproto declares (an agent may work differently without them);
        # a text turn asks for none of them, and a request would be refused here.
        caps = {"fs": {"readTextFile": agent.id != "gemini", "writeTextFile": True}, "terminal": True}
        self.call("initialize", {"protocolVersion": 1, "clientCapabilities": caps})
        self.session = self.call("session/new", {"cwd": agent.work, "mcpServers": []})["sessionId"]

    def call(self, method: str, params: dict[str, Any]) -> Any:
        self.next_id += 1
        wanted = self.next_id
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": wanted, "method": method, "params": params}).encode() + b"\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                message = json.loads(line) if line.strip().startswith(b"{") else {}
                if message.get("id") == wanted and "method" not in message:
                    if "error" in message:
                        raise RuntimeError(f"{method}: {message['error']}")
                    return message.get("result")
                if "method" in message and "id" in message:  # a request of the agent's: refused
                    reply = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no"}}
                    self.proc.stdin.write(json.dumps(reply).encode() + b"\n")
                    self.proc.stdin.flush()
            for key, _ in self.sel.select(1):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"{method}: the agent exited")
                self.buf += chunk
        raise RuntimeError(f"{method}: no answer")

    def turn(self, prompt: str) -> None:
        self.call("session/prompt", {"sessionId": self.session, "prompt": [{"type": "text", "text": prompt}]})

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, 15)
        except OSError:
            pass
        self.proc.wait(10)


class Through:
    """The agent through ``agentproto serve`` and the Python client."""

    def __init__(self, agent: Agent) -> None:
        self.rt = Runtime.start(env={**os.environ, **agent.env})
        self.session = self.rt.open({"id": agent.id, "path": agent.argv[0]}, dir=agent.work)
        self.events = self.session.events(timeout=120)

    def turn(self, prompt: str) -> None:
        self.session.prompt(prompt)
        for event in self.events:
            if kind_of(event) == "TurnEnded":
                return

    def close(self) -> None:
        self.session.close()
        self.rt.close()


def bench(agent_id: str, turns: int, chunks: int) -> tuple[float, float, float]:
    agent = Agent(agent_id, chunks)
    raw = through = None
    try:
        raw, through = Raw(agent), Through(agent)
        for side in (raw, through):  # warm-up: the first turn pays for lazy starts
            side.turn("warm up")
        times: dict[str, list[float]] = {"raw": [], "ap": []}
        for n in range(turns):
            order = [("raw", raw), ("ap", through)]
            for name, side in order if n % 2 == 0 else reversed(order):
                start = time.perf_counter()
                side.turn(f"turn {n}")
                times[name].append(time.perf_counter() - start)
        diffs = [a - r for a, r in zip(times["ap"], times["raw"])]
        return statistics.median(times["raw"]), statistics.median(times["ap"]), statistics.median(diffs)
    finally:
        for side in (through, raw):
            if side is not None:
                side.close()
        agent.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", default="gemini,claude-acp,codex-acp,qwen,opencode")
    parser.add_argument("--turns", type=int, default=15)
    parser.add_argument("--chunks", type=int, default=50, help="text deltas per answer")
    args = parser.parse_args()
    print(f"{'agent':<12} {'raw (ms)':>10} {'agentproto (ms)':>16} {'overhead (ms)':>14}")
    for agent_id in args.agents.split(","):
        raw, ap, diff = bench(agent_id, args.turns, args.chunks)
        print(f"{agent_id:<12} {raw * 1000:>10.1f} {ap * 1000:>16.1f} {diff * 1000:>14.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
