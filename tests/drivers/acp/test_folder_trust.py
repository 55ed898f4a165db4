"""Gemini CLI's folder trust as agentproto reads it (drivers/acp/folder_trust.py): the same
rules Gemini 0.61.0 applies, read from a temp HOME, never written."""

from __future__ import annotations

import json
from pathlib import Path

from agentproto.drivers.acp.folder_trust import gemini_trusts, untrusted_message


def setup(tmp_path: Path, rules: object | None = None, settings: object | None = None) -> tuple[Path, dict[str, str]]:
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    work = tmp_path / "repo" / "sub"
    work.mkdir(parents=True, exist_ok=True)
    if rules is not None:
        (home / ".gemini" / "trustedFolders.json").write_text(json.dumps(rules))
    if settings is not None:
        (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    return work, {"HOME": str(home)}


def test_no_rule_is_no_trust(tmp_path):
    work, env = setup(tmp_path)
    assert not gemini_trusts(str(work), env)
    assert not (tmp_path / "home" / ".gemini" / "trustedFolders.json").exists()


def test_the_longest_rule_decides(tmp_path):
    work, env = setup(tmp_path, {str(tmp_path / "repo"): "TRUST_FOLDER"})
    assert gemini_trusts(str(work), env)
    work, env = setup(tmp_path / "b", {str(tmp_path / "b" / "repo"): "TRUST_FOLDER", str(tmp_path / "b" / "repo" / "sub"): "DO_NOT_TRUST"})
    assert not gemini_trusts(str(work), env)
    # A sibling whose name starts alike is not inside.
    work, env = setup(tmp_path / "c", {str(tmp_path / "c" / "rep"): "TRUST_FOLDER"})
    assert not gemini_trusts(str(work), env)


def test_trust_parent_trusts_the_rules_parent(tmp_path):
    work, env = setup(tmp_path, {str(tmp_path / "repo" / "other"): "TRUST_PARENT"})
    assert gemini_trusts(str(work), env)


def test_a_symlinked_folder_is_judged_by_its_real_path(tmp_path):
    work, env = setup(tmp_path, {str(tmp_path / "repo"): "TRUST_FOLDER"})
    link = tmp_path / "link"
    link.symlink_to(work)
    assert gemini_trusts(str(link), env)


def test_the_variables_and_the_setting(tmp_path):
    work, env = setup(tmp_path, {str(tmp_path / "repo"): "TRUST_FOLDER"})
    assert not gemini_trusts(str(work), {**env, "GEMINI_CLI_TRUST_WORKSPACE": "false"})
    assert not gemini_trusts(str(work), {**env, "GEMINI_RESTRICTED_MODE": "true"})
    work, env = setup(tmp_path / "b", settings={"security": {"folderTrust": {"enabled": False}}})
    assert gemini_trusts(str(work), env)
    assert gemini_trusts(str(work), {"HOME": env["HOME"] + "-none", "GEMINI_CLI_TRUST_WORKSPACE": "true"})


def test_the_file_gemini_is_told_to_read(tmp_path):
    work, env = setup(tmp_path)
    other = tmp_path / "elsewhere.json"
    other.write_text(json.dumps({str(work): "TRUST_FOLDER"}))
    assert gemini_trusts(str(work), {**env, "GEMINI_CLI_TRUSTED_FOLDERS_PATH": str(other)})
    assert str(other) in untrusted_message(str(work), {**env, "GEMINI_CLI_TRUSTED_FOLDERS_PATH": str(other)})


def test_a_broken_file_is_no_trust_and_never_raises(tmp_path):
    for content in ("{not json", "[1, 2]", json.dumps({"/": "TRUST_EVERYTHING"})):
        work, env = setup(tmp_path)
        (tmp_path / "home" / ".gemini" / "trustedFolders.json").write_text(content)
        assert not gemini_trusts(str(work), env)
    work, env = setup(tmp_path)
    (tmp_path / "home" / ".gemini" / "trustedFolders.json").write_text(
        "// Gemini allows comments\n" + json.dumps({str(tmp_path): "TRUST_FOLDER"})
    )
    assert gemini_trusts(str(work), env)
