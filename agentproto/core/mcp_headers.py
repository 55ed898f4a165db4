"""MCP 2026-07-28 over HTTP, sans-IO: the headers a request mirrors from its body
(``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name``, and ``Mcp-Param-{Name}`` for the
arguments a tool's schema marks with ``x-mcp-header``), checked by a server and built by a
client, and the HTTP status of an answer.

Rules of this file:
- An ``MCP-Protocol-Version`` header that names another version than ``_meta``'s is
  -32020 before ``_meta``'s version is judged (the kit sends a served header with an
  unknown ``_meta`` version and expects the mismatch, not -32022).
- A header that is missing, or whose value (its ``=?base64?...?=`` form decoded) is not
  the body's, is -32020 (HeaderMismatch); an integer argument compares as a number.
- A value that is not plain visible ASCII (or looks like the base64 form) is sent in the
  base64 form.
- Statuses: 400 for a malformed request (-32700, -32600, -32602, -32020, -32022), 404 for
  an unknown method (-32601), 200 for the rest.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agentproto.core import jsonrpc
from agentproto.core.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, RpcError
from agentproto.core.mcp import HEADER_MISMATCH, META_VERSION, UNSUPPORTED_VERSION, is_modern

if TYPE_CHECKING:
    from agentproto.core.mcp_types import McpTool

#: The methods whose name (``params.name``) travels in the ``Mcp-Name`` header.
NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def header_value(value: str) -> str | None:
    """A ``Mcp-Name`` header's value, its ``=?base64?...?=`` form decoded (None if it is bad)."""
    if value.startswith("=?base64?") and value.endswith("?=") and len(value) >= 11:
        import base64
        import binascii

        try:
            return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
    return value


def header_problem(msg: Any, headers: Any) -> RpcError | None:
    """A 2026-07-28 request over HTTP: its headers (lower-case names) against its body.

    ``MCP-Protocol-Version`` must equal ``_meta``'s version, ``Mcp-Method`` the method and,
    for a named method, ``Mcp-Name`` the name (decoded): else -32020 (a missing one too)."""
    params = msg.get("params") if isinstance(msg, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    method = msg.get("method") if isinstance(msg, dict) else None
    version = meta.get(META_VERSION) if isinstance(meta, dict) else None
    checks = [("MCP-Protocol-Version", "mcp-protocol-version", version), ("Mcp-Method", "mcp-method", method)]
    key = NAMED.get(method) if isinstance(method, str) else None
    if key is not None and isinstance(params, dict) and params.get(key) is not None:
        checks.append(("Mcp-Name", "mcp-name", params[key]))
    for name, lower, body_value in checks:
        sent = headers.get(lower)
        if sent is None:
            return RpcError(HEADER_MISMATCH, f"Header mismatch: no {name} header (MCP 2026-07-28 requires it)")
        if (header_value(sent) if lower == "mcp-name" else sent) != body_value:
            return RpcError(HEADER_MISMATCH, f"Header mismatch: the {name} header does not match the body")
    return None


def version_mismatch(msg: Any, headers: Any) -> RpcError | None:
    """-32020 when the ``MCP-Protocol-Version`` header and ``_meta``'s version (a string)
    are both given and differ; else None (``header_problem`` judges the rest later)."""
    params = msg.get("params") if isinstance(msg, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get(META_VERSION) if isinstance(meta, dict) else None
    sent = headers.get("mcp-protocol-version")
    if isinstance(version, str) and sent is not None and sent != version:
        return RpcError(HEADER_MISMATCH, "Header mismatch: the MCP-Protocol-Version header does not match the body")
    return None


def header_params(schema: Any, path: tuple[str, ...] = ()) -> list[tuple[str, tuple[str, ...], Any]]:
    """A tool's ``x-mcp-header`` annotations: (the name of its ``Mcp-Param-`` header, the
    property's path through ``properties``, its declared ``type``), statically reachable only."""
    found: list[tuple[str, tuple[str, ...], Any]] = []
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if isinstance(properties, dict):
        for key, sub in properties.items():
            if not isinstance(sub, dict):
                continue
            name = sub.get("x-mcp-header")
            if isinstance(name, str) and name:
                found.append((name, (*path, key), sub.get("type")))
            found.extend(header_params(sub, (*path, key)))
    return found


def param_problem(msg: Any, headers: Any, tools: list[McpTool]) -> RpcError | None:
    """A 2026-07-28 ``tools/call`` over HTTP: each argument the tool's schema mirrors into
    an ``Mcp-Param-{Name}`` header (``x-mcp-header``) must come with that header, its value
    (decoded) the argument's (an integer compared as a number): else -32020."""
    params = msg.get("params") if isinstance(msg, dict) else None
    if not isinstance(params, dict) or msg.get("method") != "tools/call":
        return None
    tool = next((t for t in tools if t["name"] == params.get("name")), None)
    arguments = params.get("arguments")
    if tool is None or not isinstance(arguments, dict):
        return None
    for name, path, kind in header_params(tool["inputSchema"]):
        value: Any = arguments
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is None:
            continue  # no value: no header expected
        sent = headers.get("mcp-param-" + name.lower())
        if sent is None:
            why = f"Header mismatch: no Mcp-Param-{name} header for argument {'.'.join(path)}"
            return RpcError(HEADER_MISMATCH, why)
        got = header_value(sent)
        if isinstance(value, bool):
            same = got == ("true" if value else "false")
        elif kind == "integer" and isinstance(value, (int, float)) and got is not None:
            try:
                same = float(got) == float(value)
            except ValueError:
                same = False
        else:
            same = got == (value if isinstance(value, str) else json.dumps(value))
        if not same:
            return RpcError(HEADER_MISMATCH, f"Header mismatch: the Mcp-Param-{name} header does not match the body")
    return None


def request_headers(msg: Any, tools: dict[str, Any] | None = None) -> dict[str, str]:
    """The headers a 2026-07-28 request takes over HTTP, from its body (empty for another);
    ``tools`` (each tool's ``inputSchema`` by name) adds a ``tools/call``'s ``Mcp-Param-``."""
    if not is_modern(msg):
        return {}
    params = msg.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get(META_VERSION) if isinstance(meta, dict) else None
    headers: dict[str, str] = {}
    if isinstance(version, str) and version.isprintable() and version.isascii():
        headers["MCP-Protocol-Version"] = version
    method = msg.get("method")
    if isinstance(method, str) and method.isprintable() and method.isascii():
        headers["Mcp-Method"] = method
    key = NAMED.get(method) if isinstance(method, str) else None
    name = params.get(key) if key is not None and isinstance(params, dict) else None
    if isinstance(name, str):
        headers["Mcp-Name"] = _header_safe(name)
    tool = tools.get(name) if tools is not None and method == "tools/call" and isinstance(name, str) else None
    arguments = params.get("arguments") if isinstance(params, dict) else None
    if tool is not None and isinstance(arguments, dict):
        for header, path, _kind in header_params(tool):
            value: Any = arguments
            for step in path:
                value = value.get(step) if isinstance(value, dict) else None
            if isinstance(value, bool):
                headers[f"Mcp-Param-{header}"] = "true" if value else "false"
            elif isinstance(value, (int, str)) and header.isascii() and header.isprintable():
                headers[f"Mcp-Param-{header}"] = _header_safe(str(value))
    return headers


def _header_safe(value: str) -> str:
    """A header value as is when it is plain visible ASCII, else in its base64 form."""
    plain = value.isascii() and value.isprintable() and value == value.strip() and not (
        value.startswith("=?base64?") and value.endswith("?=")
    )
    if plain:
        return value
    import base64

    return "=?base64?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


def http_status(error: Any) -> int:
    """The HTTP status of a 2026-07-28 response: 400 for a malformed request, 404 for an
    unknown method, 200 for the rest (results, and errors of a well-formed request)."""
    code = error.get("code") if isinstance(error, dict) else None
    if code == METHOD_NOT_FOUND:
        return 404
    if code in (jsonrpc.PARSE_ERROR, jsonrpc.INVALID_REQUEST, INVALID_PARAMS, HEADER_MISMATCH, UNSUPPORTED_VERSION):
        return 400
    return 200
