"""Every secret the suite hands agentproto. conftest.py checks that none of them is in any
record (``--record``, ``record_wire``) written during the run, nor in fixtures/recordings/."""

API_KEY = "sk-test-redact-0123456789abcdef"
PASSWORD = "hunter2-but-longer"
ACP_HEADER = "x-api-header-value-42"
MCP_ENV = "mcp-server-env-secret"
AUTH_TOKEN = "http-bearer-token-0123456789"
SHORT = "abc"  # too short to scrub every occurrence of: scrubbed where it stands
#: The fake model APIs' keys (tests/fakes/fake_anthropic.py, tests/fakes/fake_openai.py).
FAKE_API_KEYS = ("sk-ant-fake", "sk-fake")

#: One per spelling the key rule and the URL rule must catch (tests/core/test_redact.py's
#: ``SPELLINGS`` puts each where it belongs in one request; all of them 8 characters or
#: more, so an echo of any of them is carried over too).
DB_URL_PASSWORD = "pg-url-password-5150"  # env DATABASE_URL=postgres://u:THIS@h/db
GITHUB_TOKEN = "ghp_suiteGithubToken0123"
NESTED_DB_SECRET = "nested-db-secret-7788"
BARE_TOKEN = "bare-token-value-4455"
BARE_SECRET = "bare-secret-value-3344"
RUN_TOGETHER_APIKEY = "apikey-run-together-99"
GITHUB_PAT = "github_pat_suite_0123456789"
MY_PAT = "my-pat-value-24680"
GCP_CREDENTIALS = "gcp-credentials-blob-1122"
CAMEL_API_KEY = "camel-apikey-value-8899"
CAMEL_ACCESS_TOKEN = "camel-access-token-7766"
CAMEL_CLIENT_SECRET = "camel-client-secret-5544"
URL_PASSWORD = "url-userinfo-pass-3141"
QUERY_TOKEN = "query-token-value-2718"
QUERY_KEY = "query-key-value-1618"
QUERY_API_KEY = "query-api-key-1414"
SPELLED = (DB_URL_PASSWORD, GITHUB_TOKEN, NESTED_DB_SECRET, BARE_TOKEN, BARE_SECRET, RUN_TOGETHER_APIKEY,
           GITHUB_PAT, MY_PAT, GCP_CREDENTIALS, CAMEL_API_KEY, CAMEL_ACCESS_TOKEN, CAMEL_CLIENT_SECRET,
           URL_PASSWORD, QUERY_TOKEN, QUERY_KEY, QUERY_API_KEY)  # fmt: skip

ALL = (API_KEY, PASSWORD, ACP_HEADER, MCP_ENV, AUTH_TOKEN, *FAKE_API_KEYS, *SPELLED)
