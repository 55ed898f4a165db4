"""The real pinned opencode (``opencode acp``, opencode-ai 1.18.33) through ``serve``, against
the fake Chat Completions API on 127.0.0.1 (tests/fakes/fake_chat.py) as an
OpenAI-compatible provider (``options.baseURL``) in the temp HOME's
``~/.config/opencode/opencode.json``: what is opencode's own, the app's tool when every tool
asks. The scenarios it shares with the other ACP agents (probe, a streamed turn, a shell
command behind a permission, files, cancel, EOF, the app's tool) are
test_acp_scenarios_real.py's.

opencode allows every tool by default: the config asks for ``bash`` and ``edit``. It runs
commands itself and reads files itself. Its title generator (a second model call at the
first prompt) is told apart by its system prompt: the fake takes only opencode's own.
"""

from __future__ import annotations

import json

from acp_real_support import OpencodeWorld, running, stop_of
from fake_chat import call, text
from listener_support import LOOKUP, text_result


def test_the_apps_tool_is_not_asked_about_when_every_tool_asks(tmp_path):
    """With ``"permission": {"*": "ask"}`` opencode asks for the app's tool too, titled
    ``agentproto_<tool>``: agentproto answers it itself (it used to ask the app)."""
    with running(OpencodeWorld, tmp_path, permission={"*": "ask"}) as world:
        api = world.api
        api.script(call("agentproto_lookup", {"word": "opencode"}), text("looked up"))
        session = world.open(tools=[LOOKUP])["id"]
        world.prompt(session, "look opencode up")
        request = world.request(session)
        assert list(request) == ["ToolCall"], request
        world.answer(session, request["ToolCall"]["id"], text_result("an open agent"))
        assert stop_of(world.turn(session)) == "Completed"
        assert "an open agent" in json.dumps(api.turns()[1].tool_results())
