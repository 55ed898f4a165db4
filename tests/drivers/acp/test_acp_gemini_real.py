"""The real pinned Gemini CLI (``gemini --acp``, @google/gemini-cli 0.61.0) through
``serve``, against the fake Gemini API on 127.0.0.1 (tests/fakes/fake_gemini.py): what is
Gemini's own, folder trust (the tests trust folders only inside their temp HOME). The
scenarios it shares with the other ACP agents (probe, a streamed turn, a shell command
behind a permission, files, cancel, EOF, the app's tool) are test_acp_scenarios_real.py's.

Gemini runs shell commands itself (no terminal/*); it reads and writes files through fs/*.
"""

from __future__ import annotations

import json

from acp_real_support import GeminiWorld, running, stop_of
from listener_support import LOOKUP


def test_tools_in_an_untrusted_folder_fail_naming_the_fix(tmp_path):
    with running(GeminiWorld, tmp_path, trust=False) as world:
        error = world.open_error(tools=[LOOKUP])
        assert error["kind"] == "UnsupportedFeature", error
        assert "does not trust" in error["message"] and "TRUST_FOLDER" in error["message"]
        assert str(world.trust_file) in error["message"]
        assert not world.trust_file.exists()  # agentproto never trusts a folder itself
        assert world.processes() == []  # refused before any process started
        # Declared MCP servers would be dropped alike.
        server = {"name": "notes", "connection": {"Stdio": {"command": "/bin/true", "args": [], "env": {}}}}
        assert world.open_error(mcp_servers=[server])["kind"] == "UnsupportedFeature"
        # Without tools the session opens: nothing would be lost.
        session = world.open()["id"]
        world.prompt(session, "hi")
        assert stop_of(world.turn(session)) == "Completed"
        assert not world.trust_file.exists()


def test_a_distrusted_subfolder_of_a_trusted_one_is_refused(tmp_path):
    with running(GeminiWorld, tmp_path) as world:
        world.trust_file.write_text(json.dumps({str(tmp_path): "TRUST_FOLDER", str(world.work): "DO_NOT_TRUST"}))
        assert world.open_error(tools=[LOOKUP])["kind"] == "UnsupportedFeature"
        # The session's env can trust it instead (Gemini's own variable).
        info = world.open(tools=[LOOKUP], env={"GEMINI_CLI_TRUST_WORKSPACE": "true"})
        assert info["tools_url"]
