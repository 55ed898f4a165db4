"""Sans-IO cores: they take bytes and values and return values, so each is tested without a
process or a socket.

What lives here: the error kinds and the one writer of stderr (errors.py), protocol 1's
commands and line decoder (commands.py, wire.py), line framing (lines.py), the one JSON-RPC 2.0 peer
(jsonrpc.py), the MCP server endpoint over a tool set (mcp.py), HTTP/1.1 messages, heads and
Host/Origin/token checks (http1.py), generate's output_schema check (regex_lite.py,
jsonschema_lite.py), whether an answer fits its request (answers.py), SessionInfo
(session_info.py), the explain op's text (explain.py), secrets out of a record (redact.py) and
the names that say a value is one (secret_keys.py), a recording read and normalized for replay
(recording.py), protocol 1 as the Python client reads it (client_protocol.py), TYPE_CHECKING
and Protocol without typing at run time (typecheck.py), and the wire's values as TypedDicts for
mypy only: protocol 1's (wire_types.py; the inspect op's views, inspect_types.py), MCP's and
JSON-RPC's (mcp_types.py), imported under TYPE_CHECKING alone.

May import: the package root (the version) and core/ itself. No I/O of its own.
"""
