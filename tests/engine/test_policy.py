"""The permission policy (issue 24) on the mock, through ``serve``: the first matching rule
answers, the app still sees the request opened and closed with who answered it, ``ask`` and
no match go to the app, ``configure`` replaces the policy, ``info`` shows it, and a bad
policy is refused naming the rule and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from policy_support import answered_by, permission, run_turn, script
from sidecar import Sidecar, kinds

POLICY: list[dict[str, Any]] = [
    {"action": "allow", "command": ["git status **"]},
    {"action": "deny", "command": ["rm **"], "reason": "no deleting here"},
    {"action": "allow", "kind": ["Edit"], "path": ["src/**"]},
    {"action": "allow", "tool": ["github/get_*"]},
    {"action": "ask", "kind": ["Execute"], "command": ["make **"]},
]


def test_the_first_matching_rule_answers_and_the_app_sees_it_opened_and_closed(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    requests = [
        permission("git", "Execute", "git status --short"),
        permission("rm", "Execute", "rm -rf build"),
        permission("chained", "Execute", "git status; rm -rf /"),
        permission("wrapped", "Execute", "/bin/bash -lc 'git status'"),
        permission("edit-in", "Edit", paths=(str(work / "src" / "new" / "a.py"),)),
        permission("edit-mixed", "Edit", paths=(str(work / "src" / "a.py"), str(work / "README"))),
        permission("edit-out", "Edit", paths=("../outside.py",)),
        permission("mcp", {"Mcp": {"server": "github", "tool": "get_issue"}}),
        permission("make", "Execute", "make test"),
        permission("other", "Execute", "ls"),
    ]
    with Sidecar(["--mock", script(tmp_path, requests)]) as sc:
        sid = sc.open(dir=str(work), policy=POLICY, permission_mode="AutoApprove")
        events = run_turn(sc, sid)
        by = answered_by(events)
        assert by == {
            "git": {"policy": 0, "action": "allow"},
            "rm": {"policy": 1, "action": "deny"},
            "chained": {"policy": 1, "action": "deny"},  # never an allow; its rm is denied
            "wrapped": {"policy": 0, "action": "allow"},  # the shell's inner command
            "edit-in": {"policy": 2, "action": "allow"},  # a new file: its nearest parent
            "mcp": {"policy": 3, "action": "allow"},
            "make": "app",  # ask: the app, even under AutoApprove
        }
        shown = [e["kind"]["RequestOpened"]["Permission"]["id"] for e in events if kinds([e]) == ["RequestOpened"]]
        # AutoApprove (after the policy) answered the unmatched ones unseen; ask reached the app.
        assert shown == ["git", "rm", "chained", "wrapped", "edit-in", "mcp", "make"], shown
        for rid in ("git", "rm", "chained", "wrapped", "edit-in", "mcp"):
            opened = next(
                i for i, e in enumerate(events)
                if kinds([e]) == ["RequestOpened"] and e["kind"]["RequestOpened"]["Permission"]["id"] == rid
            )  # fmt: skip
            assert kinds([events[opened + 1]]) == ["RequestClosed"], rid  # back to back
            assert events[opened]["extensions"] == events[opened + 1]["extensions"]
        statuses = [e["kind"]["StatusChanged"] for e in events if kinds([e]) == ["StatusChanged"]]
        assert statuses == ["Working", "NeedsInput", "Working"], statuses  # only `make` waited


def test_no_match_goes_to_the_app_under_ask(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "src").mkdir()
    requests = [
        permission("other", "Execute", "ls"),
        permission("edit-out", "Edit", paths=("../x.py",)),  # outside dir never matches an allow
        permission("edit-mixed", "Edit", paths=("src/a.py", "README")),  # every path must match
        permission("link", "Edit", paths=("src/link/x.py",)),  # src/link -> outside: its realpath
    ]
    (work / "src" / "link").symlink_to(tmp_path)
    with Sidecar(["--mock", script(tmp_path, requests)]) as sc:
        sid = sc.open(dir=str(work), policy=POLICY)
        assert answered_by(run_turn(sc, sid)) == {"other": "app", "edit-out": "app", "edit-mixed": "app", "link": "app"}


def test_configure_replaces_the_policy_and_info_shows_it(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    requests = [permission("ls", "Execute", "ls -la")]
    with Sidecar(["--mock", script(tmp_path, requests)]) as sc:
        sid = sc.open(dir=str(work), policy=POLICY)
        assert sc.ok({"cmd": "info", "session": sid})["policy"] == POLICY
        assert answered_by(run_turn(sc, sid)) == {"ls": "app"}
        new = [{"action": "allow", "command": ["ls **"]}]
        assert sc.ok({"cmd": "configure", "session": sid, "option": "policy", "value": json.dumps(new)}) is None
        assert sc.ok({"cmd": "info", "session": sid})["policy"] == new
        assert answered_by(run_turn(sc, sid)) == {"ls": {"policy": 0, "action": "allow"}}
        bad = sc.error({"cmd": "configure", "session": sid, "option": "policy", "value": '[{"action": "maybe"}]'})
        assert bad["kind"] == "InvalidConfiguration" and "policy[0].action" in bad["message"], bad
        assert sc.ok({"cmd": "info", "session": sid})["policy"] == new  # unchanged by the refusal


def test_a_bad_policy_is_refused_at_open_naming_the_rule_and_field(tmp_path: Path) -> None:
    cases = [
        ([{"action": "allow", "kind": ["Bash"]}], "policy[0].kind"),
        ([{"action": "allow"}, {"action": "deny", "command": "rm"}], "policy[1].command"),
        ([{"action": "deny", "paths": ["x"]}], "policy[0].paths"),
        ([{"action": "allow", "command": ["git 'status"]}], "policy[0].command"),
        ({"action": "allow"}, "policy"),
    ]
    with Sidecar() as sc:
        for policy, named in cases:
            error = sc.error({"cmd": "open", "agent": "mock", "dir": str(tmp_path), "policy": policy})
            assert error["kind"] in ("InvalidConfiguration", "BadFrame"), error
            assert named in error["message"], error


def test_an_agent_that_cannot_ask_refuses_deny_and_ask_rules(tmp_path: Path) -> None:
    path = tmp_path / "noperm.json"
    path.write_text(json.dumps({"permissions": False, "turns": []}))
    with Sidecar(["--mock", str(path)]) as sc:
        deny = [{"action": "deny", "command": ["rm **"]}]
        error = sc.error({"cmd": "open", "agent": "mock", "dir": str(tmp_path), "policy": deny})
        assert error["kind"] == "UnsupportedFeature" and "policy" in error["message"], error
        sid = sc.open(dir=str(tmp_path), policy=[{"action": "allow", "command": ["ls"]}])  # allow-only: fine
        error = sc.error({"cmd": "configure", "session": sid, "option": "policy", "value": '[{"action": "ask"}]'})
        assert error["kind"] == "UnsupportedFeature", error
