"""The Antigravity driver's pure mapping (agentproto/drivers/agy/mapping.py), on values as
seed 003 and the test double (tests/fakes/fake_agy.py) write them."""

from __future__ import annotations

import json

import pytest

from agentproto.drivers.agy import mapping as m
from agentproto.core.errors import AgentError


def test_the_launch_line_keeps_print_last() -> None:
    argv = m.build_argv("/bin/agy", "/tmp/s", "gemini-3-flash", "conv-1", ["--effort", "high"])
    assert argv == ["/bin/agy", "--input-format", "stream-json", "--output-format", "stream-json",
                    "--dangerously-skip-permissions", "--disable-slash-commands", "--add-dir", "/tmp/s",
                    "--model", "gemini-3-flash", "--conversation", "conv-1", "--effort", "high", "--print", ""]
    assert m.build_argv("agy", "/d", None, None, [])[-3:] == ["/d", "--print", ""]


def test_rules_files_stop_at_24000_bytes_front_matter_included() -> None:
    assert m.rules_file("instructions", "x" * 24_000) == b"x" * 24_000
    front = m.NOTES_FRONT_MATTER
    assert m.rules_file("notes", "n" * (24_000 - len(front)), front).startswith(b"---\ntrigger: always_on\n---\n")
    with pytest.raises(AgentError) as raised:
        m.rules_file("notes", "n" * (24_001 - len(front)), front)
    assert raised.value.kind == "InvalidConfiguration"
    assert "notes: 24,001 bytes" in raised.value.message and f"({len(front)} of them front matter)" in raised.value.message
    with pytest.raises(AgentError):
        m.rules_file("instructions", "é" * 12_001)  # bytes, not characters


def test_mcp_config_takes_http_and_stdio_and_refuses_sse() -> None:
    servers = [
        {"name": "web", "connection": {"Http": {"url": "http://127.0.0.1:9/mcp", "headers": {"A": "b"}}}},
        {"name": "bare", "connection": {"Http": {"url": "http://127.0.0.1:9/x", "headers": {}}}},
        {"name": "local", "connection": {"Stdio": {"command": "srv", "args": ["-v"], "env": {}}}},
    ]
    assert m.mcp_config(servers, "http://127.0.0.1:1/TOKEN/mcp/agentproto") == {"mcpServers": {
        "agentproto": {"url": "http://127.0.0.1:1/TOKEN/mcp/agentproto"},
        "web": {"url": "http://127.0.0.1:9/mcp", "headers": {"A": "b"}},
        "bare": {"url": "http://127.0.0.1:9/x"},
        "local": {"command": "srv", "args": ["-v"]},
    }}
    with pytest.raises(AgentError) as raised:
        m.mcp_config([{"name": "old", "connection": {"Sse": {"url": "u", "headers": {}}}}], None)
    assert raised.value.kind == "UnsupportedFeature" and "mcp_servers[0] (old)" in raised.value.message


def test_hooks_are_flat_handlers_and_curl_reads_its_url_from_the_file() -> None:
    config = m.curl_config("http://127.0.0.1:5/TOK/hook/Stop", 70)
    assert 'url = "http://127.0.0.1:5/TOK/hook/Stop"' in config and 'data-binary = "@-"' in config
    assert "max-time = 70\n" in config and 'noproxy = "*"' in config and "fail\n" in config
    hooks = m.hooks_config({"Stop": "'/usr/bin/curl' -K '/p/Stop.curl'"}, 70)
    assert hooks == {"Stop": [{"type": "command", "command": "'/usr/bin/curl' -K '/p/Stop.curl'", "timeout": 70}]}
    assert m.shell_quote("/a b/it's") == "'/a b/it'\\''s'"


def test_a_user_message_is_text_blocks_with_the_reminder_first() -> None:
    assert m.user_message("hi", None, []) == {"event": "user", "message": {"role": "user", "content": [
        {"type": "text", "text": "hi"}]}}
    content = m.user_message("hi", "be brief", ["[Attached file: /x]"])["message"]["content"]
    assert [b["text"] for b in content] == ["<system-reminder>\nbe brief\n</system-reminder>", "hi", "[Attached file: /x]"]


@pytest.mark.parametrize("output, choices", [
    (json.dumps({"models": [{"id": "a", "name": "A"}, {"id": "b"}]}), [("a", "A"), ("b", "b")]),
    (json.dumps(["a", {"model": "b", "display_name": "B"}, 5, {"name": "no id"}]), [("a", "a"), ("b", "B")]),
    ("a\tModel A\nb\n\n", [("a", "Model A"), ("b", "b")]),
    (json.dumps({"models": "nope"}), []),
])
def test_models_in_the_shapes_agy_may_print(output: str, choices: list[tuple[str, str]]) -> None:
    assert [(c["value"], c["label"]) for c in m.parse_models(output)] == choices


def test_the_model_option_always_offers_the_current_model() -> None:
    option = m.model_option("x", [{"value": "a", "label": "A"}])
    assert option["kind"]["Select"]["choices"][0] == {"value": "x", "label": "x"} and option["current"] == "x"
    assert option["live"] is True


@pytest.mark.parametrize("error, kind", [
    ("authentication failed or timed out", "AuthRequired"),
    ("Please sign in", "AuthRequired"),
    ("Unauthenticated", "AuthRequired"),
    ("You are not logged in", "AuthRequired"),
    ("sign-in required", "AuthRequired"),
    ("login required", "AuthRequired"),
    ('conversation "abc" not found', "ResumeFailed"),
    ('model "m" is not recognized; available models: a, b', "InvalidConfiguration"),
    ("something else", "SpawnFailed"),
])
def test_startup_errors(error: str, kind: str) -> None:
    found = m.startup_error(error, "/bin/agy", "m", "abc")
    assert found.kind == kind and error in found.message
    if kind == "AuthRequired":
        assert found.fields["login"][0]["Terminal"]["command"] == ["/bin/agy"]


def test_signed_out_matches_words_not_parts_of_words() -> None:
    assert not m.signed_out("design into the blog index")  # "sign in", "log in" only as words
    assert not m.signed_out("model \"m\" is not recognized")


def test_result_error_reads_a_string_or_an_object() -> None:
    assert m.result_error({"error": "x"}) == "x"
    assert m.result_error({"error": {"type": "AUTH", "message": "authentication failed"}}) == "authentication failed"
    assert m.result_error({"error": {"type": "AUTH"}}) == "AUTH" and m.result_error({}) == ""


@pytest.mark.parametrize(("stderr", "kind"), [
    ("error: Please sign in: run `agy` once in a terminal and sign in\n", "AuthRequired"),
    ("panic: something broke\n", "SpawnFailed"),
    ("", "SpawnFailed"),
])
def test_an_exit_before_init_without_a_result(stderr: str, kind: str) -> None:
    found = m.early_exit("exit code 1", stderr, "/bin/agy")
    assert found.kind == kind and stderr.strip() in found.message
    if kind == "AuthRequired":
        assert found.fields["login"][0]["Terminal"]["command"] == ["/bin/agy"]


def test_a_conversation_error_without_a_resume_is_not_resume_failed() -> None:
    assert m.startup_error('conversation "x" not found', "agy", None, None).kind == "SpawnFailed"


@pytest.mark.parametrize("name, params, kind, tool_input", [
    ("run_command", {"CommandLine": "ls", "Cwd": "/w"}, "Execute", {"Command": {"command": "ls", "cwd": "/w"}}),
    ("view_file", {"AbsolutePath": "/w/a"}, "Read", {"Path": "/w/a"}),
    ("write_to_file", {"TargetFile": "/w/a"}, "Edit", {"Path": "/w/a"}),
    ("replace_file_content", {"TargetFile": "/w/a"}, "Edit", {"Path": "/w/a"}),
    ("list_dir", {"DirectoryPath": "/w"}, "Search", {"Path": "/w"}),
    ("grep_search", {"Query": "TODO", "SearchPath": "/w"}, "Search", {"Pattern": "TODO"}),
    ("read_url_content", {"Url": "http://127.0.0.1/"}, "Fetch", {"Url": "http://127.0.0.1/"}),
    ("search_web", {"query": "agy"}, "Fetch", {"Query": "agy"}),
    ("call_mcp_tool", {"ServerName": "agentproto_web", "ToolName": "t"}, {"Mcp": {"server": "web", "tool": "t"}}, "None"),
    ("call_mcp_tool", {"ServerName": "elsewhere_x", "ToolName": "t"}, {"Mcp": {"server": "elsewhere_x", "tool": "t"}},
     "None"),
    ("brand_new", {"CommandLine": 5}, "Other", "None"),
])
def test_tool_steps(name: str, params: dict, kind: object, tool_input: object) -> None:
    update = m.tool_snapshot("step-3", name, {"name": name, "parameters": params}, m.server_names(["agentproto", "web"]))
    assert update["kind"] == kind and update["input"] == tool_input and update["status"] == "Running"
    assert update["raw"] == {"name": name, "input": params}


def test_tool_errors_usage_and_stops() -> None:
    assert m.tool_error({"error": {"type": "TOOL_ERROR", "message": "boom"}}) == "boom"
    assert m.tool_error({"error": "flat"}) == "flat" and m.tool_error({}) == "the tool failed"
    total: dict[str, int] = {}
    m.add_usage(total, {"input_tokens": 10, "output_tokens": 3, "cache_read_tokens": 4, "total_tokens": 13})
    m.add_usage(total, {"input_tokens": "x", "output_tokens": 2})
    assert m.turn_usage(total) == {"input_tokens": 10, "cached_input_tokens": 4, "output_tokens": 5}
    assert m.turn_usage({}) is None
    assert m.context_usage({"usage": {"total_tokens": 99}})["ContextUsage"]["used_tokens"] == 99  # type: ignore[index]
    assert m.context_usage({"usage": {"total_tokens": 0}}) is None and m.context_usage({}) is None
    assert m.stop_reason({"status": "SUCCESS"}) == {"Completed": {"source": "Protocol"}}
    assert m.stop_reason({"status": "ERROR", "error": "interrupted"}) == "Cancelled"
    assert m.stop_reason({"status": "ERROR", "error": "quota"}) == {"Failed": {"message": "quota"}}
    assert m.stop_reason({"status": "WEIRD"}) == {"Failed": {"message": 'agy ended the turn with status "WEIRD"'}}


def test_the_conversation_id_beside_init_or_inside_the_others() -> None:
    assert m.conversation_of({"event": "init", "conversation_id": "c1", "init": {}}) == "c1"
    assert m.conversation_of({"event": "result", "result": {"conversation_id": "c2"}}) == "c2"
    assert m.conversation_of({"event": "init", "init": "not an object"}) == ""
