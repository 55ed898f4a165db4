"""Fuzz target: the HTTP/1.1 request parser (httpcore.RequestParser) and the checks every
listener applies to a parsed head.

The contract: fed whole, one byte at a time or in random pieces, the parser gives the same
outcome (the same request and the same bytes left over for the next one, the same
HttpError, or "more, please"), raises nothing but HttpError, answers only statuses it has
a reason phrase for, and does a bounded amount of work per byte it is given (counted in
function calls, not time). The checks (Host, Origin, Content-Type, the token, keep-alive)
never raise on any head the parser produced.
"""

from __future__ import annotations

import sys
from typing import Any

from fuzz.gen import damaged
from fuzz.harness import regression, target
from fuzz.mutate import mutate_bytes
from hypothesis import strategies as st

from agentproto.core import http1 as httpcore
from agentproto.core.http1 import HttpError, RequestParser

#: Function calls (Python and C) the parser may make per byte fed, one byte per feed.
CALLS_PER_BYTE = 80

METHODS = st.sampled_from(["GET", "POST", "PUT", "OPTIONS", "G\x00T", "post", ""])
TARGETS = st.sampled_from(["/", "/v1/agent", "/mcp?x=1", "*", "http://127.0.0.1/x", "/\x7f", "/a b"])
VERSIONS = st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1x", "http/1.1"])
NAMES = st.sampled_from(
    ["Host", "Content-Length", "Transfer-Encoding", "Content-Type", "Origin", "Connection", "Authorization", "X", "Bad Name", ""]
)
VALUES = st.sampled_from(
    [
        "127.0.0.1:8080", "localhost:8080", "evil.example", "[::1]:8080", "5", "0", "-1", "+5", "0x5", "1_0", "\xb2",
        "5, 5", "5, 6", "9" * 25, "chunked", "gzip", "chunked, chunked", "application/json", "text/plain",
        "application/x-ndjson; charset=utf-8", "http://127.0.0.1:8080", "null", "close", "keep-alive",
        "Bearer 0123456789abcdef", "Bearer", "bearer  0123456789abcdef ", "", " \t", "\x80\xff",
    ]
) | st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=255), max_size=8)
CHUNK_SIZES = st.sampled_from(["0", "1", "5", "f", "F", "10", "-1", "-6", "+5", " 5", "5 ", "5;ext=1", "0x5", "ffffffffffffffffff", "", "g"])


@st.composite
def chunked_body(draw: Any) -> bytes:
    out = b""
    for _ in range(draw(st.integers(0, 3))):
        data = draw(st.binary(max_size=12))
        size = draw(st.sampled_from([format(len(data), "x"), format(len(data), "X")]) | CHUNK_SIZES)
        out += size.encode("latin-1") + b"\r\n" + data + draw(st.sampled_from([b"\r\n", b"\r\n", b"\n", b"XX", b""]))
    if draw(st.integers(0, 3)):
        out += b"0\r\n" + draw(st.sampled_from([b"", b"X-T: 1\r\n", b"bad trailer\r\n"])) + b"\r\n"
    return out


@st.composite
def requests(draw: Any) -> bytes:
    line = f"{draw(METHODS)} {draw(TARGETS)} {draw(VERSIONS)}"
    if draw(st.integers(0, 9)) == 0:
        line = draw(st.sampled_from(["GET  / HTTP/1.1", "", "GET /", "GET / HTTP/1.1 x"]))
    fields = draw(st.lists(st.tuples(NAMES, VALUES), max_size=5))
    body = draw(st.binary(max_size=20))
    how = draw(st.sampled_from(["length", "length", "chunked", "none", "raw"]))
    if how == "length":
        fields.append(("Content-Length", str(len(body))))
    elif how == "chunked":
        fields.append(("Transfer-Encoding", "chunked"))
        body = draw(chunked_body())
    elif how == "none":
        body = b""
    head = line + "".join(f"\r\n{name}:{draw(st.sampled_from(['', ' ', '  ', chr(9)]))}{value}" for name, value in fields)
    data = head.encode("latin-1") + draw(st.sampled_from([b"\r\n\r\n", b"\r\n\r\n", b"\n\n", b"\r\n", b"\r\n\r"])) + body
    data += draw(st.sampled_from([b"", b"GET / HTTP/1.1\r\n\r\n", b"garbage"]))  # the next, pipelined
    if draw(st.integers(0, 4)) == 0:
        data = draw(damaged(data))
    return data


class TooMuchWork(Exception):
    pass


def _outcome(data: bytes, pieces: list[bytes], max_head: int, max_body: int, meter: bool = False) -> tuple[Any, ...]:
    """What the parser made of ``pieces``: the request (and all the bytes after it), its
    HttpError, or ("incomplete",)."""
    parser = RequestParser(max_head=max_head, max_body=max_body)
    fed = 0
    calls = [0]
    limit = [0]

    def count(frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            calls[0] += 1
            if calls[0] > limit[0]:
                sys.setprofile(None)
                raise TooMuchWork(f"over {CALLS_PER_BYTE} calls per byte fed ({fed} bytes fed)")

    for piece in pieces:
        fed += len(piece)
        try:
            if meter:
                limit[0] = CALLS_PER_BYTE * (fed + 1)
                sys.setprofile(count)
            try:
                request = parser.feed(piece)
            finally:
                sys.setprofile(None)
        except HttpError as error:
            assert error.status in httpcore.REASONS and isinstance(error.message, str) and error.message
            return ("error", error.status, error.message)
        if request is not None:
            assert parser.done and not parser.feed(b"more")
            return ("request", request.method, request.target, request.version, request.headers, request.body,
                    parser.leftover() + data[fed:])
    return ("incomplete",)


def _check_head(request: tuple[Any, ...]) -> None:
    _, method, target_, version, headers, body, _rest = request
    assert isinstance(headers, dict) and all(k == k.lower() for k in headers)
    for bound in (("127.0.0.1", 8080), ("::1", 80), ("0.0.0.0", 9)):
        problem = httpcore.check_request(method, version, headers, bound)
        assert problem is None or (problem[0] in httpcore.REASONS and isinstance(problem[1], str))
    httpcore.keep_alive(version, headers)
    httpcore.authorized(headers.get("authorization"), "0123456789abcdef")


@target(
    "http_requests",
    st.tuples(requests(), st.lists(st.integers(0, 400), max_size=6), st.sampled_from([(4096, 65536), (40, 8)])),
    examples=250,
    mutate=lambda v, rng: (mutate_bytes(v[0], rng), v[1], v[2]),
)
def http_requests(case: tuple[bytes, list[int], tuple[int, int]]) -> None:
    """HTTP requests: the same outcome however split, HttpError only, bounded work per byte."""
    data, cuts, (max_head, max_body) = case
    whole = _outcome(data, [data], max_head, max_body)
    one_by_one = _outcome(data, [data[i : i + 1] for i in range(len(data))], max_head, max_body, meter=True)
    assert one_by_one == whole, "byte-by-byte feeding differs from one feed"
    points = sorted({min(c, len(data)) for c in cuts})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]
    assert _outcome(data, pieces, max_head, max_body) == whole, "a split feeding differs from one feed"
    if whole[0] == "request":
        _check_head(whole)


regression(
    "http_requests",
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n-6\r\nab", [], (4096, 65536)),
    (b"POST / HTTP/1.1\r\nContent-Length: \xb2\r\n\r\n", [], (4096, 65536)),
)
