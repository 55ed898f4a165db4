"""Every secret the suite hands agentproto. conftest.py checks that none of them is in any
record (``--record``, ``record_wire``) written during the run, nor in fixtures/recordings/."""

API_KEY = "sk-test-redact-0123456789abcdef"
PASSWORD = "hunter2-but-longer"
ACP_HEADER = "x-api-header-value-42"
MCP_ENV = "mcp-server-env-secret"
AUTH_TOKEN = "http-bearer-token-0123456789"
SHORT = "abc"  # too short to scrub every occurrence of: scrubbed where it stands
#: The fake model APIs' keys (tests/fake_anthropic.py, tests/fake_openai.py).
FAKE_API_KEYS = ("sk-ant-fake", "sk-fake")

ALL = (API_KEY, PASSWORD, ACP_HEADER, MCP_ENV, AUTH_TOKEN, *FAKE_API_KEYS)
