"""``control.ask``, the client of another sidecar's control socket, against real Unix sockets
on the real loop: each way the asking can fail is an error reply naming the path and why,
never a hang and never an exception out of the loop."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from agentproto.frontends import control
from agentproto.loopio.loop import Loop


def ask(path: str, serve: bytes | None = None) -> tuple[Any, str | None]:
    """What ``ask`` hands back for the socket at ``path``; with ``serve``, a server listens
    there on the same loop, reads the request line, writes ``serve`` and closes."""
    loop = Loop()
    answers: list[tuple[Any, str | None]] = []
    listener = None
    try:
        if serve is not None:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            listener.listen(1)
            listener.setblocking(False)
            taken: dict[str, Any] = {"data": b""}

            def readable() -> None:
                taken["data"] += taken["conn"].recv(65536)
                if taken["data"].endswith(b"\n"):
                    loop.forget(taken["conn"])
                    taken["conn"].sendall(serve)
                    taken["conn"].close()

            def accept() -> None:
                conn, _ = listener.accept()
                taken["conn"] = conn
                loop.forget(listener)
                loop.add_reader(conn, readable)

            loop.add_reader(listener, accept)
        control.ask(loop, path, {"op": "inspect"}, lambda v, e: answers.append((v, None if e is None else e.message)))
        loop.run(until=lambda: bool(answers))
    finally:
        if listener is not None:
            listener.close()
        loop.close()
    assert len(answers) == 1
    return answers[0]


def test_a_missing_socket_says_so(tmp_path: Path) -> None:
    path = str(tmp_path / "nobody.sock")
    assert ask(path) == (None, f"invalid configuration: inspect: control socket {path}: No such file or directory")


def test_a_file_that_is_not_a_listening_socket_refuses(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("")
    assert ask(str(path)) == (None, f"invalid configuration: inspect: control socket {path}: Connection refused")


def test_a_path_too_long_for_a_socket_is_an_error_reply_not_an_exception(tmp_path: Path) -> None:
    path = str(tmp_path / ("x" * 200))
    view, message = ask(path)
    assert view is None and message is not None
    assert message.startswith(f"invalid configuration: inspect: control socket {path}: ") and "too long" in message


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"", "it closed without an answer"),
        (b"not json\n", "it closed without an answer"),
        (b'{"kind": "error", "message": "nope"}\n{"kind": "done", "exit_code": 2}\n', "nope"),
    ],
)
def test_a_server_that_answers_no_result_is_an_error_naming_why(tmp_path: Path, answer: bytes, why: str) -> None:
    path = str(tmp_path / "c.sock")
    assert ask(path, answer) == (None, f"invalid configuration: inspect: control socket {path}: {why}")


def test_a_result_is_handed_back_without_its_framing(tmp_path: Path) -> None:
    path = str(tmp_path / "c.sock")
    result = b'{"kind": "result", "op": "inspect", "ok": true, "view": "agents", "sessions": []}\n'
    assert ask(path, result + b'{"kind": "done", "exit_code": 0}\n') == ({"view": "agents", "sessions": []}, None)
    refused = b'{"kind": "result", "op": "inspect", "ok": false, "error": {"kind": "x", "message": "off"}}\n'
    assert ask(str(tmp_path / "r.sock"), refused + b'{"kind": "done", "exit_code": 1}\n') == (None, "off")
