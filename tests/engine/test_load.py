"""Load at a small scale, in the suite: many sessions through one sidecar, many HTTP clients
at once; nothing lost, order kept (scripts/bench_load.py runs the same at full scale and
prints the figures; nothing here looks at a clock).

Every session's turn is distinct texts e0, e1, ...: each must arrive, once, in order, with
sequences 1, 2, 3... and its TurnEnded last; each HTTP client's batch must answer its three
requests in order, ending in three ``done`` of exit code 0.
"""

from __future__ import annotations

from pathlib import Path

from scripts import bench_load

SESSIONS, EVENTS = 20, 300
CLIENTS, HTTP_EVENTS = 40, 60
#: Per turn, besides its texts: TurnStarted, StatusChanged Working and Idle, MessageEnded, TurnEnded.
BOOKKEEPING = 5


def test_many_sessions_through_one_sidecar_lose_nothing_and_keep_order(tmp_path: Path) -> None:
    mock = bench_load.script(EVENTS, str(tmp_path))
    result = bench_load.concurrent_sessions(mock, SESSIONS, EVENTS, str(tmp_path))
    assert result["events"] == SESSIONS * (EVENTS + BOOKKEEPING)


def test_many_http_clients_at_once_lose_nothing_and_keep_order(tmp_path: Path) -> None:
    mock = bench_load.script(HTTP_EVENTS, str(tmp_path))
    result = bench_load.http_load(mock, CLIENTS, HTTP_EVENTS, str(tmp_path))
    assert result["events"] == CLIENTS * (HTTP_EVENTS + BOOKKEEPING)


def test_the_check_sees_a_lost_or_reordered_event(tmp_path: Path) -> None:
    """The check itself: a stream with one text missing, or two swapped, is refused."""
    import json

    def line(seq: int, kind: object) -> bytes:
        return json.dumps({"event": {"sequence": seq, "session_id": "s1", "kind": kind}}).encode()

    def stream(texts: list[str]) -> bytes:
        kinds = [{"TextDelta": {"message_id": "m1", "text": t}} for t in texts]
        kinds.append({"TurnEnded": {"stop": {"Completed": {"source": "Protocol"}}}})
        return b"\n".join(line(i + 1, k) for i, k in enumerate(kinds)) + b"\n"

    assert bench_load.check_sessions(stream(["e0 ", "e1 ", "e2 "]), ["s1"], 3) == 4
    for bad in (["e0 ", "e2 "], ["e1 ", "e0 ", "e2 "], ["e0 ", "e1 ", "e1 ", "e2 "]):
        try:
            bench_load.check_sessions(stream(bad), ["s1"], 3)
        except bench_load.Lost:
            continue
        raise AssertionError(f"{bad} passed the check")


def test_a_marker_cut_in_two_by_the_reads_is_counted() -> None:
    """The reader counts a marker that two reads cut in two. The sidecar writes its stdout in
    blobs of whole lines, but a partial write (a full pipe) ends anywhere in a line, and the
    reader's next read starts there. Unfixed, ``read_until`` counted each read's markers
    alone, missed the cut one and waited for one that had come: the sidecar idle, the test
    hung (about 1 run in 10 of the 20-session test above once stdout was written early).
    A SOCK_SEQPACKET pair makes each write one read, so the cut is where the test puts it."""
    import socket
    import types

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        # The first marker spans what was left of an earlier read and three short reads.
        for piece in (b"rn", b"En", b'ded":{}}}\n{"kind":{"TurnEnded', b'":{}}}\n{"next'):
            theirs.send(piece)
        theirs.shutdown(socket.SHUT_WR)  # unfixed: the read finds the end instead of the marker
        sc = types.SimpleNamespace(fd=ours.fileno(), buffer=b'{"kind":{"Tu')
        raw = bench_load.read_until(sc, b'"TurnEnded"', 2)  # type: ignore[arg-type]
    assert raw == b'{"kind":{"TurnEnded":{}}}\n{"kind":{"TurnEnded":{}}}\n'
    assert sc.buffer == b'{"next'
