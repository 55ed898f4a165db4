"""Sans-IO HTTP/1.1 for the listeners: the request parser, response heads, and who may
talk to a server. httpserver.py does the I/O.

Rules of this file:
- No I/O and no state outside the objects: ``RequestParser`` takes bytes and gives one
  ``Request`` or raises ``HttpError`` (never anything else), and its result does not depend
  on how the bytes were split. Sizes are parsed strictly (ASCII digits, bounded lengths).
- The checks are pure functions of a request head and the bound address, returning None
  (accepted) or an HTTP status and message, so every listener applies the same rules: a
  web page must not be able to drive a local server, by a cross-site "simple" request or
  through DNS rebinding.
- A connection is kept alive as HTTP/1.1 says (unless ``Connection: close``; HTTP/1.0 only
  with ``Connection: keep-alive``); the bytes after a request (the next one, pipelined)
  stay with its parser (``leftover``) for the next parser to start from.
"""

from __future__ import annotations

import hmac
import ipaddress
import re

MAX_HEAD = 64 * 1024
MAX_BODY = 16 * 1024 * 1024
MAX_CHUNK_LINE = 1024
MIN_TOKEN = 16


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    421: "Misdirected Request",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


def keep_alive(version: str, headers: dict[str, str]) -> bool:
    """Whether the client wants the connection kept after this request's response."""
    options = {option.strip(" \t").lower() for option in headers.get("connection", "").split(",")}
    if version == "HTTP/1.0":
        return "keep-alive" in options
    return "close" not in options


def response_head(status: int, fields: list[tuple[str, str]]) -> bytes:
    """The status line and header fields of a response, up to its blank line."""
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, '')}", *(f"{name}: {value}" for name, value in fields)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (an empty ``data`` would end the body: never pass one)."""
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"


class Request:
    __slots__ = ("method", "target", "path", "version", "headers", "body")

    def __init__(self, method: str, target: str, version: str, headers: dict[str, str]) -> None:
        self.method = method
        self.target = target
        self.path = target.split("?", 1)[0]
        self.version = version
        self.headers = headers
        self.body = b""


# -- who may talk to the server: pure functions of a request head ------------------------
# Each returns None (accepted) or (HTTP status, message). ``headers`` has lower-case keys,
# repeated fields joined with ", " (so a repeated Host or Content-Type never matches).
# ``bound`` is the (host, port) the listener is bound to, as getsockname() gives it.

Problem = tuple[int, str]

#: The Content-Types a POST may carry (or none at all): JSON and NDJSON. Allowing only
#: these, rather than refusing the three a browser may send cross-site without a CORS
#: preflight (text/plain, application/x-www-form-urlencoded, multipart/form-data), means
#: no quirk of how a browser spells those three can slip through.
JSON_TYPES = frozenset(
    {
        "application/json",
        "application/x-ndjson",
        "application/ndjson",
        "application/jsonl",
        "application/x-jsonl",
        "application/jsonlines",
        "application/x-jsonlines",
    }
)


def is_loopback(host: str) -> bool:
    """An address literal in 127.0.0.0/8 or ::1 (a name is not resolved: not loopback)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _with_port(names: list[str], port: int) -> set[str]:
    # The default port may be left out of Host and Origin (RFC 9110 sections 4.2.1, 7.2).
    return {f"{name}:{port}" for name in names} | (set(names) if port == 80 else set())


def check_host(headers: dict[str, str], bound: tuple[str, int], version: str = "HTTP/1.1") -> Problem | None:
    """On a loopback bind, ``Host`` must name this listener: its address or ``localhost``,
    with its port. A DNS-rebound page reaches 127.0.0.1 with its own name in Host, so
    that name is refused (421, as the MCP SDK's guard does). Other binds are not checked."""
    host, port = bound
    if not is_loopback(host):
        return None
    value = headers.get("host")
    if value is None:
        # HTTP/1.0 clients may leave Host out; browsers never do.
        return None if version == "HTTP/1.0" else (421, "missing Host header")
    literal = f"[{host}]" if ":" in host else host
    allowed = _with_port([literal, "localhost"], port)
    if value.lower() in allowed:
        return None
    return 421, f"Host {value[:100]!r} is not this server: use {literal}:{port} or localhost:{port}"


def check_origin(headers: dict[str, str], bound: tuple[str, int]) -> Problem | None:
    """``Origin`` (sent by browsers, never needed by programs) must be absent or a page of
    this very server: http on a loopback name with the server's port. A page of any other
    local server (another port), ``null`` (file:, sandboxed frames) and https are refused."""
    value = headers.get("origin")
    if value is None:
        return None
    names = ["http://127.0.0.1", "http://localhost", "http://[::1]"]
    if is_loopback(bound[0]):
        names.append(f"http://[{bound[0]}]" if ":" in bound[0] else f"http://{bound[0]}")
    if value.lower() in _with_port(names, bound[1]):
        return None
    return 403, f"Origin {value[:100]!r} is not allowed: only a loopback origin of this server (or none)"


def check_content_type(method: str, headers: dict[str, str]) -> Problem | None:
    """A POST carries JSON or NDJSON, or no Content-Type: never a type a browser page may
    send cross-site without asking first (parameters such as ``; charset=`` are ignored)."""
    if method != "POST" or "content-type" not in headers:
        return None
    essence = headers["content-type"].split(";", 1)[0].strip(" \t").lower()
    structured_json = essence.startswith("application/") and essence.endswith("+json") and len(essence) > 17
    if essence in JSON_TYPES or structured_json:
        return None
    shown = essence[:100] or "(empty)"
    return 415, (
        f"Content-Type {shown} is not accepted: send application/json (or application/x-ndjson, or no Content-Type)"
    )


def check_request(method: str, version: str, headers: dict[str, str], bound: tuple[str, int]) -> Problem | None:
    """The checks against web pages, in order: Host, Origin, Content-Type (the token is next)."""
    return check_host(headers, bound, version) or check_origin(headers, bound) or check_content_type(method, headers)


def check_token(token: str) -> str | None:
    """Why a bearer token cannot be used (None: it can). The message never shows the token."""
    if not token:
        return "is empty"
    if len(token) < MIN_TOKEN:
        return f"is shorter than {MIN_TOKEN} characters"
    if any(c.isspace() or not c.isprintable() for c in token):
        return "contains whitespace or control characters"
    return None


def authorized(header: str | None, token: str) -> bool:
    """``Authorization: Bearer TOKEN``: scheme case-insensitive, constant-time compare.
    An empty value (``Bearer`` alone) never passes, whatever the token."""
    if header is None or not token:
        return False
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value:
        return False
    # The head was decoded as latin-1: encoding back gives the bytes the client sent, so a
    # UTF-8 token compares as the bytes it is.
    try:
        sent = value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return hmac.compare_digest(sent, token.encode("utf-8"))


# -- the request parser --------------------------------------------------------------------
_TOKEN_CHARS = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_REQUEST_LINE = re.compile(rf"({_TOKEN_CHARS}) ([\x21-\x7e]+) (HTTP/1\.[01])")
_FIELD_LINE = re.compile(rf"({_TOKEN_CHARS}):([\t\x20-\x7e\x80-\xff]*)")
#: A Content-Length value, and a chunk-size line (its size, then extensions, ignored): the
#: strict grammar of both parsers of HTTP bodies, this file's requests and the MCP client's
#: responses (tools/mcp_client.py). ASCII only: str.isdigit() and int() also take "²", "١",
#: "+1", "-1", "0x1", "1_0".
CONTENT_LENGTH = re.compile(r"[0-9]{1,19}")
CHUNK_SIZE_LINE = re.compile(r"([0-9A-Fa-f]{1,16})[ \t]*(?:;[\t\x20-\x7e\x80-\xff]*)?")


class MessageParser:
    """What the request parser here and the client's response parser (mcp_client) keep of
    one HTTP/1.1 message while it comes in: the bounds on its head and body, the bytes not
    parsed yet, how its body is framed (``length`` or ``chunked``) and the body so far."""

    def __init__(self, max_head: int, max_body: int) -> None:
        self.max_head = max_head
        self.max_body = max_body
        self.buf = bytearray()
        self.length: int | None = None
        self.chunked = False
        self.body = bytearray()
        self.done = False


class RequestParser(MessageParser):
    """Sans-IO HTTP/1.1 request reader: ``feed(bytes)`` returns the Request once complete,
    None while more is needed, or raises ``HttpError`` (and nothing else).

    The result never depends on how the bytes were split: every limit is checked so that a
    prefix is refused only when every request starting with it would be. Each search resumes
    where the last one stopped, so a request fed one byte at a time costs linear time."""

    def __init__(self, max_head: int = MAX_HEAD, max_body: int = MAX_BODY) -> None:
        super().__init__(max_head, max_body)
        self.scanned = 0  # how much of buf is known not to hold the separator looked for
        self.request: Request | None = None
        self.remaining = 0  # bytes of the current chunk still to come
        self.state = "head"  # head, length, size, data, data_end, trailer, done
        self.trailer = 0  # bytes of trailer fields so far

    def leftover(self) -> bytes:
        """Once the request is complete: the bytes received after it (a pipelined request)."""
        return bytes(self.buf) if self.done else b""

    def feed(self, data: bytes) -> Request | None:
        if self.done:
            return None
        self.buf += data
        if self.request is None:
            end = self._find(b"\r\n\r\n")
            # No head longer than max_head, whatever the split: a prefix is refused once
            # the blank line could no longer start within the limit.
            if end > self.max_head or (end < 0 and len(self.buf) - 3 > self.max_head):
                raise HttpError(431, "request head too large")
            if end < 0:
                return None
            self._head(bytes(self.buf[:end]))
            self._consume(end + 4)
        return self._body()

    def _find(self, sep: bytes) -> int:
        at = self.buf.find(sep, self.scanned)
        if at < 0:
            self.scanned = max(0, len(self.buf) - len(sep) + 1)
        return at

    def _consume(self, n: int) -> None:
        del self.buf[:n]
        self.scanned = 0

    def _line(self, limit: int, status: int, message: str) -> bytes | None:
        """The next CRLF-ended line (without it), at most ``limit`` bytes long."""
        end = self._find(b"\r\n")
        if end > limit or (end < 0 and len(self.buf) - 1 > limit):
            raise HttpError(status, message)
        if end < 0:
            return None
        line = bytes(self.buf[:end])
        self._consume(end + 2)
        return line

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        match = _REQUEST_LINE.fullmatch(lines[0])
        if match is None:
            raise HttpError(400, "bad request line")
        method, target, version = match.groups()
        headers: dict[str, str] = {}
        for line in lines[1:]:
            field = _FIELD_LINE.fullmatch(line)
            if field is None:  # also a bare CR or LF, a NUL, obs-fold
                raise HttpError(400, "bad header line")
            key, value = field.group(1).lower(), field.group(2).strip(" \t")
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        self.request = Request(method, target, version, headers)
        if "transfer-encoding" in headers:
            # Both framings at once is how requests are smuggled past a proxy: refuse it.
            if "content-length" in headers:
                raise HttpError(400, "both Content-Length and Transfer-Encoding")
            encoding = headers["transfer-encoding"].lower()
            if encoding != "chunked":
                raise HttpError(501, f"transfer-encoding {encoding[:100]!r} is not supported")
            self.chunked, self.state = True, "size"
        elif "content-length" in headers:
            # Repeated fields arrive joined: identical values are one length, others conflict.
            values = [v.strip(" \t") for v in headers["content-length"].split(",")]
            if not all(CONTENT_LENGTH.fullmatch(v) for v in values):
                raise HttpError(400, "bad content-length")
            lengths = {int(v) for v in values}
            if len(lengths) != 1:
                raise HttpError(400, "conflicting content-length values")
            self.length = lengths.pop()
            if self.length > self.max_body:
                raise HttpError(413, f"request body over {self.max_body} bytes")
            self.state = "length"
        else:
            self.length, self.state = 0, "length"

    def _finish(self, body: bytes) -> Request:
        assert self.request is not None
        self.request.body = body
        self.state, self.done = "done", True
        return self.request

    def _body(self) -> Request | None:
        if self.state == "length":
            assert self.length is not None
            if len(self.buf) < self.length:
                return None
            body = bytes(self.buf[: self.length])
            self._consume(self.length)
            return self._finish(body)
        while True:
            if self.state == "size":
                line = self._line(MAX_CHUNK_LINE, 400, "bad chunk size line")
                if line is None:
                    return None
                match = CHUNK_SIZE_LINE.fullmatch(line.decode("latin-1"))
                if match is None:
                    raise HttpError(400, "bad chunk size")
                size = int(match.group(1), 16)
                if size == 0:
                    self.state = "trailer"
                    continue
                if len(self.body) + size > self.max_body:
                    raise HttpError(413, f"request body over {self.max_body} bytes")
                self.remaining, self.state = size, "data"
            elif self.state == "data":
                take = min(self.remaining, len(self.buf))
                if not take:
                    return None
                self.body += self.buf[:take]
                self._consume(take)
                self.remaining -= take
                if self.remaining:
                    return None
                self.state = "data_end"
            elif self.state == "data_end":
                if not b"\r\n".startswith(bytes(self.buf[:2])):
                    raise HttpError(400, "chunk data not followed by CRLF")
                if len(self.buf) < 2:
                    return None
                self._consume(2)
                self.state = "size"
            else:  # trailer fields (read, checked, dropped) up to an empty line
                line = self._line(self.max_head - self.trailer, 431, "request trailers too large")
                if line is None:
                    return None
                if not line:
                    return self._finish(bytes(self.body))
                if _FIELD_LINE.fullmatch(line.decode("latin-1")) is None:
                    raise HttpError(400, "bad trailer line")
                self.trailer += len(line) + 2
