#!/usr/bin/env python3
"""How long the console page takes to render, in headless Chromium, against the empty page.

    python3 scripts/bench_console.py            # needs chromium, chromedriver and selenium
    python3 scripts/bench_console.py --runs 5

One `agentproto console` (the mock, --ring-events 10000) per run; each figure is from the
page's navigation start to what the page shows (performance.now() in the page), the median
of the runs:
  - the empty page: the session list's snapshot rendered ("No live session");
  - the session list with 100 sessions: 100 rows rendered;
  - a session whose ring holds 10,000 events (streamed text, a tool call every 100 events),
    selected: its last event rendered.
Printed as milliseconds and as a multiple of the empty page measured in the same run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")  # fmt: skip
EVENTS = 10_000

WAIT_FOR = """const [check, done] = arguments;
const test = new Function(check);
(function poll() { if (test()) done(performance.now()); else setTimeout(poll, 5); })();"""


def flood(path: Path) -> str:
    steps: list = []
    # TurnStarted, StatusChanged x2, TurnEnded ... come with it: about EVENTS in all.
    for i in range(EVENTS // 100):
        steps.append({"Repeat": {"times": 98, "steps": [{"Emit": {"TextDelta": {"message_id": "m1", "text": "word "}}}]}})
        steps.append({"Emit": {"ToolUpdated": {"id": f"t{i}", "kind": "Execute", "title": f"step {i}",
                                               "status": "Completed", "input": {"Command": {"command": "true",
                                               "cwd": None}}, "output": "ok", "diffs": [], "locations": [],
                                               "raw": None}}})  # fmt: skip
        steps.append({"Emit": {"Diagnostic": {"level": "Info", "message": f"checkpoint {i}"}}})
    steps.append({"End": {"Completed": {"source": "Protocol"}}})
    path.write_text(json.dumps({"turns": [steps]}))
    return str(path)


class Console:
    def __init__(self, tmp: Path, token: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "AGENTPROTO_AUTH_TOKEN": token, "HOME": str(tmp)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentproto", "console", "--mock", flood(tmp / "flood.json"), "--db", "off",
             "--ring-events", str(EVENTS + 100)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert found, line
        self.port = int(found.group(1))
        self.token = token

    def op(self, request: dict) -> list[dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request("POST", "/v1/agent", json.dumps(request),
                     {"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"})  # fmt: skip
        lines = [json.loads(x) for x in conn.getresponse().read().splitlines()]
        conn.close()
        return lines

    def open(self) -> str:
        result = next(x for x in self.op({"op": "open", "agent": "mock", "dir": "."}) if x["kind"] == "result")
        return str(result["session"]["id"])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def browser(profile: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"))
    driver.set_script_timeout(120)
    return driver


def load(driver, console: Console, check: str, session: str | None = None) -> float:
    """Milliseconds from navigation start until ``check`` (JS returning a boolean) holds."""
    base = f"http://127.0.0.1:{console.port}/"
    driver.get(base + "console.css")  # same origin, not the page: set its sessionStorage first
    driver.execute_script("sessionStorage.setItem('agentproto.token', arguments[0]);"
                          "if (arguments[1]) sessionStorage.setItem('agentproto.session', arguments[1]);"
                          "else sessionStorage.removeItem('agentproto.session');", console.token, session)  # fmt: skip
    driver.get(base)
    return float(driver.execute_async_script(WAIT_FOR, check))


def one_run(tmp: Path, driver) -> dict[str, float]:
    console = Console(tmp, "bench-token-0123456789abcdef")
    try:
        ready = "return !document.getElementById('no-sessions').hidden"
        empty = load(driver, console, ready)
        big = console.open()
        console.op({"op": "prompt", "session": big, "text": "go"})
        ended = "return document.getElementById('events').textContent.includes('turn ended: Completed')"
        ring = load(driver, console, ended, big)
        console.op({"op": "close", "session": big})
        for _ in range(100):
            console.open()
        rows = "return document.querySelectorAll('#sessions tbody tr').length === 100"
        listed = load(driver, console, rows)
        return {"empty": empty, "list100": listed, "ring10k": ring}
    finally:
        console.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["HOME"] = str(tmp)
        os.environ["SE_OFFLINE"] = "true"
        driver = browser(str(tmp / "profile"))
        try:
            version = driver.capabilities.get("browserVersion", "?")
            runs = [one_run(tmp, driver) for _ in range(args.runs)]
        finally:
            driver.quit()
    figures = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    base = figures["empty"]
    print(f"console page render, headless Chromium {version}, median of {args.runs} runs")
    print(f"  empty page (baseline)            {base:8.1f} ms")
    print(f"  session list, 100 sessions       {figures['list100']:8.1f} ms  ({figures['list100'] / base:.2f}x)")
    print(f"  a session of {EVENTS:,} events       {figures['ring10k']:8.1f} ms  ({figures['ring10k'] / base:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
