"""The sans-IO HTTP request parser (agentproto/core/http1.py): strict sizes, byte by byte,
and fuzzed. Its contract: ``feed`` returns None (more, please), one Request, or raises
HttpError, never anything else, never loops; and the result never depends on the split.

AGENTPROTO_FUZZ_EXAMPLES=N runs the hypothesis tests with N examples each (a long run).
"""

from __future__ import annotations

import os
import signal
import socket
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ops_support import Proc, closing

from agentproto.core.http1 import HttpError, RequestParser

FUZZ = settings(
    max_examples=int(os.environ.get("AGENTPROTO_FUZZ_EXAMPLES", "400")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Looped(Exception):
    pass


def _alarm(_signum: int, _frame: Any) -> None:
    raise Looped("the parser did not return")


def outcome(
    pieces: list[bytes], max_head: int = 4096, max_body: int = 65536, parser: type[RequestParser] = RequestParser, patience: float = 10.0
) -> tuple[Any, ...]:
    """Feed the pieces in order: the Request, the HttpError, or "incomplete". A feed that
    does not return within ``patience`` seconds (a loop) fails the test instead of hanging it."""
    reader = parser(max_head=max_head, max_body=max_body)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, patience)
    try:
        for piece in pieces:
            try:
                request = reader.feed(piece)
            except HttpError as error:
                return ("error", error.status, error.message)
            if request is not None:
                return ("request", request.method, request.target, request.version, request.headers, request.body)
        return ("incomplete",)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def byte_by_byte(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(max(c, 0), len(data)) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]


def same_everywhere(data: bytes, **limits: int) -> tuple[Any, ...]:
    """The outcome, asserted identical in one feed and one byte at a time."""
    whole = outcome([data], **limits)
    assert outcome(byte_by_byte(data), **limits) == whole, data[:300]
    return whole


# -- strict sizes -----------------------------------------------------------------------------

HEAD = b"POST /v1/agent HTTP/1.1\r\nHost: h\r\n"


BAD_REQUESTS = [
    # Content-Length: ASCII digits only, bounded. The head is decoded as latin-1, where
    # str.isdigit() also says yes to the bytes of "²", "³" and "¹" (int() then raised).
    (HEAD + b"Content-Length: \xb2\r\n\r\n", 400, "bad content-length"),
    (HEAD + b"Content-Length: 1\xb3\xb9\r\n\r\n", 400, "bad content-length"),
    (HEAD + "Content-Length: ١\r\n\r\n".encode(), 400, "bad content-length"),
    (HEAD + b"Content-Length: -1\r\n\r\n", 400, "bad content-length"),
    (HEAD + b"Content-Length: +5\r\n\r\nhello", 400, "bad content-length"),
    (HEAD + b"Content-Length: 0x5\r\n\r\nhello", 400, "bad content-length"),
    (HEAD + b"Content-Length: 1_0\r\n\r\n0123456789", 400, "bad content-length"),
    (HEAD + b"Content-Length: \r\n\r\n", 400, "bad content-length"),
    (HEAD + b"Content-Length: 5 5\r\n\r\nhello", 400, "bad content-length"),
    (HEAD + b"Content-Length: " + b"9" * 100 + b"\r\n\r\n", 400, "bad content-length"),
    (HEAD + b"Content-Length: " + b"1" * 3000 + b"\r\n\r\n", 400, "bad content-length"),
    (HEAD + b"Content-Length: 999999999999\r\n\r\n", 413, "request body over 65536 bytes"),
    (HEAD + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400, "conflicting content-length values"),
    (HEAD + b"Content-Length: 5, 6\r\n\r\nhello!", 400, "conflicting content-length values"),
    (HEAD + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400, "both Content-Length and Transfer-Encoding"),
    (HEAD + b"Transfer-Encoding: gzip\r\n\r\n", 501, "transfer-encoding 'gzip' is not supported"),
    # Chunk sizes: ASCII hex digits only, bounded; what follows a chunk is CRLF.
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n-1\r\nx\r\n0\r\n\r\n", 400, "bad chunk size"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n-6\r\nab", 400, "bad chunk size"),  # spun forever
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n1_0\r\n" + b"x" * 16 + b"\r\n0\r\n\r\n", 400, "bad chunk size"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n", 400, "bad chunk size"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", 400, "bad chunk size"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n", 400, "bad chunk size"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n\r\n", 400, "bad chunk size"),
    (HEAD + "Transfer-Encoding: chunked\r\n\r\n٥\r\nhello\r\n0\r\n\r\n".encode(), 400, "bad chunk size"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"f" * 100 + b"\r\n", 400, "bad chunk size"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"0" * 2000, 400, "bad chunk size line"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\nffffffff\r\n", 413, "request body over 65536 bytes"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", 400, "chunk data not followed by CRLF"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n", 400, "bad trailer line"),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n0\r\n" + b"X: y\r\n" * 1000, 431, "request trailers too large"),
    # The head.
    (b"GET / HTTP/2.0\r\n\r\n", 400, "bad request line"),
    (b"GET / HTTP/1.1x\r\n\r\n", 400, "bad request line"),
    (b"GET  / HTTP/1.1\r\n\r\n", 400, "bad request line"),
    (b"G\x00T / HTTP/1.1\r\n\r\n", 400, "bad request line"),
    (b"\r\n\r\n", 400, "bad request line"),
    (b"GET / HTTP/1.1\r\nX: a\nContent-Length: 5\r\n\r\nhello", 400, "bad header line"),
    (b"GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n", 400, "bad header line"),
    (b"GET / HTTP/1.1\r\nX : a\r\n\r\n", 400, "bad header line"),
    (b"GET / HTTP/1.1\r\n folded\r\n\r\n", 400, "bad header line"),
    (b"GET / HTTP/1.1\r\nX-Pad: " + b"a" * 5000 + b"\r\n\r\n", 431, "request head too large"),
    (b"GET / HTTP/1.1\r\nX-Pad: " + b"a" * 5000, 431, "request head too large"),
]


@pytest.mark.parametrize(("data", "status", "message"), BAD_REQUESTS, ids=[f"{i}-{m}" for i, (_, _, m) in enumerate(BAD_REQUESTS)])
def test_bad_requests_are_http_errors_whatever_the_split(data, status, message):
    assert same_everywhere(data) == ("error", status, message)


GOOD_REQUESTS = [
    (HEAD + b"Content-Length: 5\r\n\r\nhello", b"hello", {"host": "h", "content-length": "5"}),
    (HEAD + b"Content-Length: 005\r\n\r\nhello", b"hello", None),
    (HEAD + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello", b"hello", {"host": "h", "content-length": "5, 5"}),
    (HEAD + b"Content-Length: 5\r\n\r\nhelloEXTRA", b"hello", None),
    (HEAD + b"\r\n", b"", {"host": "h"}),
    (HEAD + b"Transfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n1;ext=1\r\n!\r\n0\r\n\r\n", b"hello!", None),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n00005 \r\nhello\r\n0\r\nX-T: 1\r\nY: 2\r\n\r\n", b"hello", None),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n", b"0123456789", None),
    (b"GET /v1/agent/version?x=1 HTTP/1.0\r\nX-A: 1\r\nx-a: 2\r\nEmpty:\r\n\r\n", b"", {"x-a": "1, 2", "empty": ""}),
    (b"GET / HTTP/1.1\r\nX: caf\xe9\t ok \r\n\r\n", b"", {"x": "caf\xe9\t ok"}),
]


@pytest.mark.parametrize(("data", "body", "headers"), GOOD_REQUESTS, ids=[str(i) for i in range(len(GOOD_REQUESTS))])
def test_good_requests_parse_the_same_whatever_the_split(data, body, headers):
    result = same_everywhere(data)
    assert result[0] == "request" and result[5] == body
    if headers is not None:
        assert result[4] == headers


def test_the_limits_hold_exactly():
    # A head of exactly max_head bytes is in; one more is out, whichever way it arrives.
    line = b"GET / HTTP/1.1\r\nX: "
    fits = line + b"a" * (4096 - len(line)) + b"\r\n\r\n"
    assert same_everywhere(fits)[0] == "request"
    assert same_everywhere(fits[:-4] + b"a\r\n\r\n") == ("error", 431, "request head too large")
    body = b"b" * 65536
    assert same_everywhere(HEAD + b"Content-Length: 65536\r\n\r\n" + body)[5] == body
    assert same_everywhere(HEAD + b"Content-Length: 65537\r\n\r\n")[1] == 413
    chunked = HEAD + b"Transfer-Encoding: chunked\r\n\r\n8000\r\n" + body[:32768] + b"\r\n8000\r\n" + body[:32768] + b"\r\n"
    assert same_everywhere(chunked + b"0\r\n\r\n")[5] == body
    assert same_everywhere(chunked + b"1\r\n")[:2] == ("error", 413)


def test_feeding_after_the_request_returns_nothing_more():
    parser = RequestParser()
    assert parser.feed(HEAD + b"Content-Length: 2\r\n\r\nok") is not None
    assert parser.feed(b"GET / HTTP/1.1\r\n\r\n") is None


# -- the same over a socket: answered 400, and the loop goes on -------------------------------


def test_bad_sizes_over_a_socket_get_400_and_the_server_goes_on():
    proc = Proc(["serve", "--transport", "http", "--port", "0"])
    try:
        port = int(proc.banner(r"listening on http://[\d.]+:(\d+)/").group(1))

        def exchange(data: bytes) -> bytes:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(closing(data))
                received = b""
                while True:
                    piece = sock.recv(65536)
                    if not piece:
                        return received
                    received += piece

        head = b"POST /v1/agent HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % port
        body = b'{"op": "capabilities"}'
        for bad in [
            head + b"Transfer-Encoding: chunked\r\n\r\n-6\r\nab",  # spun the loop forever
            head + b"Transfer-Encoding: chunked\r\n\r\n-1\r\n" + body,
            head + b"Content-Length: \xb2\r\n\r\n",  # "\xb2".isdigit(), then int() raised: no answer
            head + b"Content-Length: " + b"9" * 100 + b"\r\n\r\n",
            head + b"Content-Length: " + b"1" * 5000 + b"\r\n\r\n",  # past int()'s digit limit
            head + b"Content-Length: 5000000000000000000000\r\n\r\n",
            head + b"Content-Length: 22\r\nContent-Length: 23\r\n\r\n" + body,
            head + b"Content-Length: 22\r\nTransfer-Encoding: chunked\r\n\r\n16\r\n" + body + b"\r\n0\r\n\r\n",
        ]:
            response = exchange(bad)
            assert response.startswith(b"HTTP/1.1 400 "), (bad, response[:100])
        good = exchange(head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        assert good.startswith(b"HTTP/1.1 200 ") and b'"exit_code":0' in good
        assert proc.proc.poll() is None
    finally:
        proc.stop()


# -- fuzzing ------------------------------------------------------------------------------------


@st.composite
def valid_requests(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "X-CUSTOM"]))
    target = "/" + draw(st.text("abc/?=&%0123", max_size=20))
    version = draw(st.sampled_from(["HTTP/1.0", "HTTP/1.1"]))
    names = st.text("abcdefghijklmnopqrstuvwxyz-ABC", min_size=1, max_size=12).filter(
        lambda n: n.lower() not in ("content-length", "transfer-encoding")
    )
    values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=30)
    fields = draw(st.lists(st.tuples(names, values), max_size=6))
    body = draw(st.binary(max_size=300))
    head = f"{method} {target} {version}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in fields)
    framing = draw(st.sampled_from(["length", "chunked", "none"]))
    if framing == "none" or (framing == "length" and not body and draw(st.booleans())):
        return (head + "\r\n").encode("latin-1")
    if framing == "length":
        return (head + f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=4)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)]) if b > a]
    encoded = b"".join(b"%x%s\r\n%s\r\n" % (len(p), draw(st.sampled_from([b"", b";x=1", b" "])), p) for p in pieces)
    trailers = b"".join(b"T-%d: v\r\n" % i for i in range(draw(st.integers(0, 2))))
    return (head + "Transfer-Encoding: chunked\r\n\r\n").encode("latin-1") + encoded + b"0\r\n" + trailers + b"\r\n"


@st.composite
def mutations(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(valid_requests()))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "duplicate", "interesting"]))
        if kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif kind == "replace" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif kind == "duplicate":
            data[at:at] = data[at : at + draw(st.integers(1, 40))]
        else:
            data[at:at] = draw(
                st.sampled_from(
                    [b"\r\n", b"\r\n\r\n", b"-1", b"-6", b"\xb2", b"0\r\n\r\n", b"Content-Length: 3\r\n", b"Transfer-Encoding: chunked\r\n", b"\xc2\xb2", b";", b"\n", b"\x00"]
                )
            )
    return bytes(data)


def check_contract(data: bytes, cuts: list[int]) -> tuple[Any, ...]:
    whole = outcome([data])
    assert outcome(split_at(data, cuts)) == whole
    return whole


@FUZZ
@given(st.binary(max_size=600), st.lists(st.integers(0, 600), max_size=6))
@example(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n-6\r\nab", [])
@example(b"POST / HTTP/1.1\r\nContent-Length: \xb2\r\n\r\n", [3])
def test_fuzz_random_bytes(data, cuts):
    check_contract(data, cuts)


@FUZZ
@given(mutations(), st.lists(st.integers(0, 2000), max_size=6))
def test_fuzz_mutations_of_valid_requests(data, cuts):
    check_contract(data, cuts)


@FUZZ
@given(valid_requests(), st.lists(st.integers(0, 2000), max_size=8))
def test_fuzz_a_valid_request_split_anywhere_parses_identically(data, cuts):
    whole = check_contract(data, cuts)
    assert whole[0] == "request", data
    assert outcome(byte_by_byte(data)) == whole


def test_the_loop_guard_of_the_fuzz_tests_works():
    # The fuzz tests' "never loops" rests on this guard: a feed that spins is reported.
    class Spinning(RequestParser):
        def feed(self, data: bytes) -> None:
            while True:
                pass

    with pytest.raises(Looped):
        outcome([b"x"], parser=Spinning, patience=0.2)
