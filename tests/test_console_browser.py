"""The console in a real browser: headless Chromium (Debian's chromium and chromium-driver,
installed by scripts/install-test-deps) driven by selenium (pinned in tests/requirements.txt)
loads the page from a live `agentproto console` running the mock.

Chromium keeps its profile in a temp dir and gets a temp HOME; it talks to 127.0.0.1 only.
Screenshots go to $AGENTPROTO_ARTIFACTS (else the test's temp dir)."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from console_support import TOKEN, Sidecar
from ops_support import ROOT, script, write_script

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1400,900")  # fmt: skip
WAIT = 20.0


@pytest.fixture
def browser(tmp_path, monkeypatch):
    if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
        pytest.fail("headless Chromium is missing: run scripts/install-test-deps (apt: chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium manager: never fetch a driver
    options = webdriver.ChromeOptions()
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'profile'}")
    options.binary_location = CHROMIUM
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    driver.set_script_timeout(WAIT)
    yield driver
    driver.quit()


def artifacts(tmp_path: Path) -> Path:
    where = Path(os.environ.get("AGENTPROTO_ARTIFACTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where


def until(driver, check, what: str):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, WAIT, poll_frequency=0.05).until(lambda d: check(d))
    except TimeoutException:
        raise AssertionError(f"the page never showed {what}; page text: {driver.find_element('tag name', 'body').text[:2000]!r}") from None


def by_text(driver, tag: str, text: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.XPATH, f"//{tag}[normalize-space(.)={json.dumps(text)}]")


def labelled(driver, label: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.XPATH, f"//label[starts-with(normalize-space(.), {json.dumps(label)})]//*[self::input or self::textarea or self::select]")


def events_text(driver) -> str:
    return driver.execute_script("return document.getElementById('events').textContent")


def login(driver, sidecar: Sidecar) -> None:
    url = sidecar.url_line.split("open ", 1)[1].strip()
    driver.get(url)
    until(driver, lambda d: d.execute_script("return sessionStorage.getItem('agentproto.token')"), "the token")
    assert "#" not in driver.current_url  # the fragment is gone from the address and the history
    sidecar.token = driver.execute_script("return sessionStorage.getItem('agentproto.token')")


def test_a_session_streams_into_the_page_and_its_permission_is_answered_there(browser, tmp_path):
    s = Sidecar("--mock", script("turn"), "--db", str(tmp_path / "obs.db"))
    try:
        login(browser, s)
        assert browser.get_cookies() == []
        labelled(browser, "Agent").clear()
        labelled(browser, "Agent").send_keys("mock")
        labelled(browser, "Directory").clear()
        labelled(browser, "Directory").send_keys(".")
        by_text(browser, "button", "Open session").click()
        row = until(browser, lambda d: d.find_elements("css selector", "#sessions tbody tr[data-session]"), "the session")
        sid = row[0].get_attribute("data-session")
        until(browser, lambda d: d.find_element("id", "session-title").text == f"Session {sid}", "the session's view")
        labelled(browser, "Prompt").send_keys("run the tests")
        by_text(browser, "button", "Send").click()
        until(browser, lambda d: "Let me check." in events_text(d), "the turn's text")
        request = until(browser, lambda d: d.find_elements("css selector", ".request"), "the permission request")[0]
        assert "$ cargo test" in request.text
        assert [b.text for b in request.find_elements("tag name", "button")] == ["Allow", "Deny"]
        until(browser, lambda d: "NeedsInput" in d.find_element("id", "sessions").text, "NeedsInput in the list")
        by_text(browser, "button", "Allow").click()
        until(browser, lambda d: "turn ended: Completed" in events_text(d), "the turn's end")
        text = browser.find_element("css selector", ".ev.text").text
        assert text == "Let me check. Done."  # in order, once
        assert not browser.find_elements("css selector", ".request")
        browser.save_screenshot(str(artifacts(tmp_path) / "console-session.png"))
        # Another client answering the same request now gets InvalidRequest: the page's answer won.
        late = s.result({"op": "answer", "session": sid, "request": "r1", "answer": {"Permission": "DenyOnce"}})
        assert late["error"]["kind"] == "InvalidRequest"
        by_text(browser, "button", "Close session").click()
        until(browser, lambda d: "session closed" in events_text(d), "the session's close")
        until(browser, lambda d: not d.find_elements("css selector", "#sessions tbody tr"), "the list without it")
    finally:
        s.stop()


def slow_turn(words: int) -> list:
    steps: list = []
    for i in range(words):
        steps += [{"Emit": {"TextDelta": {"message_id": "m1", "text": f"w{i} "}}}, {"Sleep": 60}]
    return [*steps, {"End": {"Completed": {"source": "Protocol"}}}]


def test_a_reload_mid_turn_resumes_the_stream_with_nothing_lost_or_twice(browser, tmp_path):
    words = 40
    s = Sidecar("--mock", write_script(tmp_path, "slow", [slow_turn(words)]), "--db", "off")
    try:
        login(browser, s)
        sid = s.open()
        until(browser, lambda d: d.find_elements("css selector", f"#sessions tr[data-session='{sid}']"), "the session")
        browser.find_element("css selector", f"#sessions tr[data-session='{sid}'] button").click()
        turn = threading.Thread(target=s.result, args=({"op": "prompt", "session": sid, "text": "go"},))
        turn.start()
        until(browser, lambda d: "w5 " in events_text(d), "the first words")
        assert "w39" not in events_text(browser)
        browser.refresh()  # mid-turn
        until(browser, lambda d: "turn ended: Completed" in events_text(d), "the turn's end after the reload")
        turn.join(30)
        expected = "".join(f"w{i} " for i in range(words))
        assert browser.find_element("css selector", ".ev.text").get_attribute("textContent") == expected
        seqs = browser.execute_script("return Array.from(document.querySelectorAll('[data-seq]'), e => e.dataset.seq)")
        assert len(seqs) == len(set(seqs))
    finally:
        s.stop()


HOSTILE = [
    '<img src=x onerror="window.__xss=1">',
    "<script>window.__xss=2</script>",
    '<a href="javascript:window.__xss=3">click me</a>',
    "javascript:window.__xss=4",
    "\u202etxt.exe\u202c and \u2066isolated\u2069",
    '"><svg onload="window.__xss=5">',
]


def hostile_turn() -> list:
    payload = " ".join(HOSTILE)
    tool = {"id": "t1", "kind": "Execute", "title": HOSTILE[0], "status": "Completed",
            "input": {"Command": {"command": HOSTILE[1], "cwd": None}}, "output": HOSTILE[5],
            "diffs": [], "locations": [], "raw": None}  # fmt: skip
    return [
        {"Emit": {"TextDelta": {"message_id": "m1", "text": payload}}},
        {"Emit": {"ReasoningDelta": {"message_id": "m2", "text": payload}}},
        {"Emit": {"ToolUpdated": tool}},
        {"Emit": {"ToolOutputDelta": {"tool_id": "t1", "text": HOSTILE[2]}}},
        {"Emit": {"Diagnostic": {"level": "Warning", "message": payload}}},
        {"Emit": {"PlanUpdated": {"entries": [{"text": HOSTILE[0], "status": "Pending"}]}}},
        {"Emit": {"RequestOpened": {"Permission": {"id": "r1", "tool": {**tool, "status": "Pending"},
                                                   "options": ["AllowOnce", "DenyOnce"], "detail": payload}}}},
        "AwaitAnswer",
        {"End": {"Completed": {"source": "Protocol"}}},
    ]  # fmt: skip


def test_hostile_agent_output_stays_inert_text(browser, tmp_path):
    s = Sidecar("--mock", write_script(tmp_path, "hostile", [hostile_turn()]), "--db", "off")
    try:
        login(browser, s)
        sid = s.open()
        until(browser, lambda d: d.find_elements("css selector", f"#sessions tr[data-session='{sid}']"), "the session")
        browser.find_element("css selector", f"#sessions tr[data-session='{sid}'] button").click()
        threading.Thread(target=s.result, args=({"op": "prompt", "session": sid, "text": "go"},), daemon=True).start()
        until(browser, lambda d: d.find_elements("css selector", ".request button"), "the permission")
        time.sleep(0.5)  # give any injected handler (onerror, onload) its chance to run: none may
        assert browser.execute_script("return window.__xss") is None
        for tag in ("img", "script", "svg", "a", "iframe"):
            found = browser.execute_script(f"return document.querySelectorAll('#events {tag}, #requests {tag}').length")
            assert found == 0, tag
        shown = events_text(browser)
        assert '<img src=x onerror="window.__xss=1">' in shown and "<script>window.__xss=2</script>" in shown
        assert "\u202e" not in shown and "\u2066" not in shown and "\ufffdtxt.exe" in shown  # bidi: visible, inert
        assert "<img src=x" in browser.find_element("css selector", ".request").text
        by_text(browser, "button", "Deny").click()
        until(browser, lambda d: "turn ended" in events_text(d), "the turn's end")
        assert browser.execute_script("return window.__xss") is None
        browser.save_screenshot(str(artifacts(tmp_path) / "console-hostile.png"))
    finally:
        s.stop()


def seed_database(path: Path) -> list[tuple]:
    from agentproto.engine.observations import COLUMNS, connect

    now = time.time()
    rows = []
    for day, agent, model, cost, tin, tout in [
        (0, "claude", "opus", 0.75, 1200, 300), (0, "codex", "gpt-5", 0.25, 800, 200), (0, "claude", "opus", 0.5, 100, 50),
        (1, "claude", "sonnet", 0.125, 400, 100), (2, "codex", "gpt-5", 1.5, 5000, 900), (2, "mock", None, None, 10, 5),
    ]:  # fmt: skip
        ended = now - day * 86400 - 60
        rows.append((ended, agent, model, "run1", f"s{len(rows)}", "t1", tin, tout, 0, cost, 1000, "Completed"))
    db = connect(str(path), create=True)
    db.executemany(f"INSERT INTO turns ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})", rows)
    db.commit()
    db.close()
    return rows


def test_the_cost_charts_match_the_database_and_inspect(browser, tmp_path):
    db = tmp_path / "obs.db"
    seed_database(db)
    s = Sidecar("--mock", script("turn"), "--db", str(db))
    try:
        login(browser, s)
        by_text(browser, "button", "Cost").click()
        bars = until(browser, lambda d: d.find_elements("css selector", "#chart-day g.bar"), "the spend chart")
        shown = {b.get_attribute("data-day"): round(float(b.get_attribute("data-cost")), 6) for b in bars}
        run = subprocess.run(
            [sys.executable, "-m", "agentproto", "inspect", "--view", "cost", "--by", "day", "--since", "7d",
             "--db", str(db), "--format", "json"], capture_output=True, text=True, cwd=ROOT, timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        view = json.loads(run.stdout)
        assert shown == {g["key"]: round(g["cost_usd"] or 0.0, 6) for g in view["groups"]}
        assert len(shown) == 3
        # Each day's bar is stacked by agent: its segments add up to the day.
        for bar in bars:
            parts = [float(r.get_attribute("data-cost")) for r in bar.find_elements("tag name", "rect")]
            assert round(sum(parts), 6) == shown[bar.get_attribute("data-day")]
        models = {b.get_attribute("data-model"): int(b.get_attribute("data-tokens"))
                  for b in browser.find_elements("css selector", "#chart-model g.bar")}  # fmt: skip
        assert models == {"opus": 1650, "gpt-5": 6900, "sonnet": 500, "(unknown)": 15}
        top = browser.find_elements("css selector", "#top-turns tbody tr")
        assert top[0].find_elements("tag name", "td")[6].text == "$1.5000"
        browser.save_screenshot(str(artifacts(tmp_path) / "console-cost.png"))
    finally:
        s.stop()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_a_page_of_another_origin_cannot_read_the_stream_even_with_the_token(browser, tmp_path):
    s = Sidecar("--mock", script("turn"), "--db", "off", env={"AGENTPROTO_AUTH_TOKEN": TOKEN})
    s.token = TOKEN
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "index.html").write_text("<!doctype html><title>elsewhere</title>")
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            lambda *a: _Quiet(*a, directory=str(tmp_path / "www")))  # fmt: skip
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        sid = s.open()
        browser.get(f"http://127.0.0.1:{other.server_address[1]}/index.html")
        outcome = browser.execute_async_script(
            """const [url, token, done] = arguments;
            const tries = [fetch(url, {headers: {Authorization: "Bearer " + token}}),
                           fetch(url), fetch(url, {mode: "no-cors"})];
            Promise.allSettled(tries.map(p => p.then(r => r.type === "opaque" ? "opaque" : r.text()))).then(
                all => done(all.map(r => r.status === "fulfilled" ? r.value : "blocked")));""",
            f"http://127.0.0.1:{s.port}/v1/sessions/{sid}/events", TOKEN,
        )
        assert outcome == ["blocked", "blocked", "opaque"], outcome  # never a byte of the stream
        # And the page itself cannot be framed: X-Frame-Options DENY, frame-ancestors 'none'.
        status, head, _body = s.request("GET", "/")
        assert head["X-Frame-Options"] == "DENY" and "frame-ancestors 'none'" in head["Content-Security-Policy"]
    finally:
        other.shutdown()
        s.stop()


def test_the_docs_browser_example_follows_a_session(browser, tmp_path):
    """docs/console.md's ten-line example, run as written in a page of the sidecar."""
    from tests.test_cookbook import recipe

    example = recipe("console-stream.js")
    turn = [{"Emit": {"TextDelta": {"message_id": "m1", "text": "streamed"}}}, {"End": {"Completed": {"source": "Protocol"}}}]
    s = Sidecar("--mock", write_script(tmp_path, "one", [turn]), "--db", "off")
    try:
        login(browser, s)
        sid = s.open()
        browser.execute_script("window.lines = []; window.finished = false;" + example +
                               "; window.getLast = () => last;"
                               "follow(arguments[0], (line) => lines.push(line)).then(() => { finished = true; });", sid)
        assert s.result({"op": "prompt", "session": sid, "text": "go"})["ok"]
        s.result({"op": "close", "session": sid})
        until(browser, lambda d: d.execute_script("return finished"), "the example's end")
        lines = browser.execute_script("return lines")
        texts = [line["event"]["kind"]["TextDelta"]["text"] for line in lines
                 if "event" in line and isinstance(line["event"]["kind"], dict) and "TextDelta" in line["event"]["kind"]]
        assert texts == ["streamed"] and lines[-1] == {"closed": sid}
        assert browser.execute_script("return getLast()") == len(lines)  # the id to resume after
    finally:
        s.stop()


def test_a_question_is_answered_from_the_page_and_cancel_ends_a_turn(browser, tmp_path):
    from selenium.webdriver.support.ui import Select

    slow = [{"Emit": {"TextDelta": {"message_id": "m9", "text": "working"}}}, {"Sleep": 30000},
            {"End": {"Completed": {"source": "Protocol"}}}]  # fmt: skip
    question = json.loads((ROOT / "fixtures" / "mock-scripts" / "question.json").read_text())["turns"][0]
    s = Sidecar("--mock", write_script(tmp_path, "qa", [question, slow]), "--db", "off")
    try:
        login(browser, s)
        sid = s.open()
        until(browser, lambda d: d.find_elements("css selector", f"#sessions tr[data-session='{sid}']"), "the session")
        browser.find_element("css selector", f"#sessions tr[data-session='{sid}'] button").click()
        labelled(browser, "Prompt").send_keys("pick")
        by_text(browser, "button", "Send").click()
        request = until(browser, lambda d: d.find_elements("css selector", ".request"), "the question")[0]
        assert "Color: Which color?" in request.text and "Name it" in request.text
        Select(request.find_element("css selector", "select[aria-label='Which color?']")).select_by_visible_text("Blue")
        request.find_element("css selector", "input[aria-label='Name it']").send_keys("sky")
        by_text(browser, "button", "Answer").click()
        until(browser, lambda d: "turn ended: Completed" in events_text(d), "the turn's end")
        labelled(browser, "Prompt").send_keys("take your time")
        by_text(browser, "button", "Send").click()
        until(browser, lambda d: "working" in events_text(d), "the slow turn")
        by_text(browser, "button", "Cancel").click()
        until(browser, lambda d: "turn ended: Cancelled" in events_text(d), "the cancelled turn")
    finally:
        s.stop()


def set_hidden(driver, hidden: bool) -> None:
    driver.execute_script(
        "Object.defineProperty(document, 'hidden', {value: arguments[0], configurable: true});"
        "document.dispatchEvent(new Event('visibilitychange'));", hidden)


def test_a_hidden_tab_lets_its_streams_go_and_resumes_after_the_last_id_it_read(browser, tmp_path):
    from tests.frontends.test_console import wait_gone

    s = Sidecar("--mock", script("turn"), "--db", "off", "--session-idle-timeout", "1")
    try:
        login(browser, s)
        sid = s.open()
        until(browser, lambda d: d.find_elements("css selector", f"#sessions tr[data-session='{sid}']"), "the session")
        browser.find_element("css selector", f"#sessions tr[data-session='{sid}'] button").click()
        labelled(browser, "Prompt").send_keys("go")
        by_text(browser, "button", "Send").click()
        until(browser, lambda d: d.find_elements("css selector", ".request"), "the permission")
        by_text(browser, "button", "Allow").click()
        until(browser, lambda d: "status: Idle" in events_text(d), "the turn's end")
        shown = events_text(browser)
        set_hidden(browser, True)
        wait_gone(s, sid)  # no stream keeps it any more: it idles out
        assert events_text(browser) == shown
        set_hidden(browser, False)
        until(browser, lambda d: "session closed" in events_text(d), "the close, read after the last id")
        assert events_text(browser) == shown + "session closed"  # nothing before it again
    finally:
        s.stop()
