"""The sans-IO JSON-RPC peer every JSON-RPC user shares (agentproto/core/jsonrpc.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from agentproto.core import jsonrpc
from agentproto.core.jsonrpc import Invalid, Notification, Peer, Request, Response, RpcError


def test_calls_are_numbered_and_matched_to_their_response_once() -> None:
    peer = Peer()
    seen: list[Any] = []
    first = peer.request("initialize", {"v": 1}, lambda result, error: seen.append(("a", result, error)))
    second = peer.request("ping", None, lambda result, error: seen.append(("b", result, error)))
    assert first == {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"v": 1}}
    assert second == {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert peer.pending == 2
    reply = peer.receive({"jsonrpc": "2.0", "id": 1, "result": {}})
    assert isinstance(reply, Response) and reply.matched
    again = peer.receive({"jsonrpc": "2.0", "id": 1, "result": {}})
    assert isinstance(again, Response) and not again.matched  # answered once only
    failed = peer.receive({"jsonrpc": "2.0", "id": 0, "error": {"code": -32000, "message": "auth"}})
    assert isinstance(failed, Response) and failed.matched
    assert [s[0] for s in seen] == ["b", "a"]
    assert seen[1][2].code == -32000 and seen[1][2].message == "auth"
    assert peer.pending == 0


def test_a_boolean_or_float_lookalike_id_matches_nothing_of_ours() -> None:
    peer = Peer()
    hits: list[Any] = []
    peer.request("x", None, lambda r, e: hits.append(r))
    peer.request("y", None, lambda r, e: hits.append(r))
    assert not peer.receive({"jsonrpc": "2.0", "id": True, "result": 1}).matched  # type: ignore[union-attr]
    assert not peer.receive({"jsonrpc": "2.0", "id": [0], "result": 1}).matched  # type: ignore[union-attr]
    assert hits == []


def test_messages_are_classified_by_their_keys_not_their_ids() -> None:
    peer = Peer(version_member=False)  # Codex's app-server omits "jsonrpc"
    peer.request("turn/start", {}, lambda r, e: None)
    # The other side numbers its own requests from 0 too: id 0 with a method is ITS request.
    incoming = peer.receive({"id": 0, "method": "item/commandExecution/requestApproval", "params": {}})
    assert isinstance(incoming, Request) and incoming.id == 0
    assert peer.pending == 1
    assert isinstance(peer.receive({"method": "turn/started", "params": {}}), Notification)
    assert peer.result(0, {"decision": "accept"}) == {"id": 0, "result": {"decision": "accept"}}
    assert peer.notification("initialized") == {"method": "initialized"}


@pytest.mark.parametrize(
    ("msg", "readable_id"),
    [
        ([], None),
        ("x", None),
        ({"jsonrpc": "1.0", "id": 4, "method": "ping"}, 4),
        ({"jsonrpc": "2.0", "id": 4, "method": 5}, 4),
        ({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}, None),
        ({"jsonrpc": "2.0", "id": 7, "method": "ping", "params": 3}, 7),
        ({"jsonrpc": "2.0", "id": 9}, 9),
    ],
)
def test_strict_peers_refuse_what_the_specification_refuses_and_keep_a_readable_id(msg: Any, readable_id: Any) -> None:
    message = jsonrpc.classify(msg, strict=True)
    assert isinstance(message, Invalid)
    assert message.id == readable_id
    assert message.error.code == jsonrpc.INVALID_REQUEST


def test_fail_pending_answers_every_waiting_call() -> None:
    peer = Peer()
    errors: list[RpcError | None] = []
    for method in ("a", "b", "c"):
        peer.request(method, None, lambda r, e: errors.append(e))
    peer.fail_pending(RpcError(jsonrpc.INTERNAL_ERROR, "the agent exited"))
    assert [e.message for e in errors if e is not None] == ["the agent exited"] * 3
    assert peer.pending == 0


def test_batches_are_bounded() -> None:
    assert isinstance(jsonrpc.batch_entries([]), Invalid)
    assert isinstance(jsonrpc.batch_entries([{}] * (jsonrpc.MAX_BATCH + 1)), Invalid)
    assert len(jsonrpc.batch_entries([{}] * 3)) == 3  # type: ignore[arg-type]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.sampled_from(["id", "method", "params", "result", "error", "jsonrpc", "x"]), children, max_size=5),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(json_values, st.booleans())
def test_classify_never_raises(msg: Any, strict: bool) -> None:
    peer = Peer(strict=strict)
    peer.request("m", None, lambda r, e: None)
    assert isinstance(peer.receive(msg), (Request, Notification, Response, Invalid))


#: Deeper than any supported Python's C code recurses (3.12+ take thousands of levels that
#: 3.10 and 3.11 refused), so the outcome is the same on every version.
DEEP = 200_000


def test_a_deeply_nested_error_message_is_classified_not_raised() -> None:
    # Found by tests/fuzz (jsonrpc_messages): a response whose error (or its message) is
    # nested deep is valid JSON the decoder takes, but str() of it raised RecursionError
    # out of classify, in every JSON-RPC user's read path.
    deep: Any = 1
    for _ in range(DEEP):
        deep = [deep]
    for msg in ({"jsonrpc": "2.0", "id": 0, "error": deep}, {"jsonrpc": "2.0", "id": 0, "error": {"code": 1, "message": deep}}):
        peer = Peer()
        seen: list[Any] = []
        peer.request("m", None, lambda result, error: seen.append(error))
        reply = peer.receive(msg)
        assert isinstance(reply, Response) and reply.matched
        assert isinstance(seen[0], RpcError) and "nested too deeply" in seen[0].message
