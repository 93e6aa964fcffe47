"""Bounds on ``subscriptions/listen`` (spec/modern.md, R-MRTR-25 .. R-MRTR-27; issue #28, item
3): each stateless request is a connection of its own, so R-MRTR-19's per-connection share never
held a principal's listens; they are bounded per owner and on the server, an ended listen frees
its place, and opening or ending one reads no other listen.

The reducer is stepped directly; the HTTP case runs uvicorn on 127.0.0.1, every wait on a
message or a step of the server under a deadline, nothing sleeps to synchronise.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Hashable, Iterator
from contextlib import AsyncExitStack
from typing import Any

import anyio
import attrs
import httpx2
import pytest
from immutables import Map

from askgate import Allow
from askgate.__main__ import _parse
from askgate.core import (
    Effect,
    Event,
    MessageReceived,
    OptionError,
    Options,
    Push,
    Reply,
    ServerStopping,
    State,
    SubscriberAttached,
    SubscriberDetached,
    ToolUnregistered,
    step,
)
from askgate.core import http as rules
from askgate.core import messages as m
from askgate.server import Server
from askgate.transports.auth import BearerAuth
from askgate.transports.http import HttpApp

from .harness import Harness, only_reply, pushes
from .listener import uvicorn_serving

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
}
TOOLS = {"toolsListChanged": True}
DEADLINE = 20.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn runs on asyncio


def listen_body(rid: object, notifications: object = None) -> bytes:
    params = {"notifications": TOOLS if notifications is None else notifications, "_meta": META}
    message = {"jsonrpc": "2.0", "id": rid, "method": "subscriptions/listen", "params": params}
    return json.dumps(message).encode()


def ping_body(rid: object) -> bytes:
    message = {"jsonrpc": "2.0", "id": rid, "method": "ping", "params": {"_meta": META}}
    return json.dumps(message).encode()


def cancel_body(rid: object) -> bytes:
    message = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}}
    return json.dumps(message).encode()


class Posts:
    """Stateless requests as the HTTP shell feeds them (R-HTTP-26): each on a connection of its
    own, attached with its principal, then its message."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.n = 0

    def listen(self, principal: str | None, rid: object = 1) -> tuple[Hashable, list[Effect]]:
        self.n += 1
        conn = ("http-stateless", self.n)
        self.h.feed(SubscriberAttached(conn, 0, principal))
        effects = self.h.feed(
            MessageReceived(conn, listen_body(rid), 0, mode="reply", principal=principal)
        )
        return conn, effects


def opened(effects: list[Effect]) -> bool:
    """Whether a listen's request was acknowledged (open), not answered (refused)."""
    return [type(e) for e in effects] == [Push] and "acknowledged" in str(effects[0])


def refusal(effects: list[Effect], scope: str) -> None:
    """``effects`` are R-MRTR-25's refusal for the bound ``scope``, and nothing else."""
    reply = only_reply(effects)
    assert reply["error"] == {
        "code": m.INTERNAL_ERROR,
        "message": m.LISTEN_FULL[scope],
        "data": {"error": "server_busy", "method": "subscriptions/listen", "scope": scope},
    }


# --- R-MRTR-25: per owner and on the server -----------------------------------------------


def test_R_MRTR_25_one_principal_past_its_listen_quota_is_refused_while_another_opens() -> None:
    h = Harness(max_listens_per_owner=3, max_listens_total=100)
    posts = Posts(h)
    for _ in range(3):
        assert opened(posts.listen("alice")[1])
    refusal(posts.listen("alice")[1], "owner")  # a new connection does not reset her count
    assert opened(posts.listen("bob")[1])
    assert len(h.state.listens) == 4
    assert dict(h.state.owner_listens) == {("principal", "alice"): 3, ("principal", "bob"): 1}
    # A connection without a principal is its own owner (R-PARK-1): its own quota.
    for rid in range(3):
        assert opened(h.feed(MessageReceived("stdio", listen_body(rid), 0)))
    refusal(h.feed(MessageReceived("stdio", listen_body(3), 0)), "owner")


def test_R_MRTR_25_the_server_total_bounds_every_owner_and_is_checked_first() -> None:
    h = Harness(max_listens_per_owner=2, max_listens_total=3)
    posts = Posts(h)
    assert opened(posts.listen("alice")[1])
    assert opened(posts.listen("alice")[1])
    assert opened(posts.listen("bob")[1])
    refusal(posts.listen("carol")[1], "server")  # carol holds none: the server is full
    refusal(posts.listen("alice")[1], "server")  # alice is at her quota too: the server first
    assert len(h.state.listens) == 3
    assert "carol" not in str(dict(h.state.owner_listens))


def test_R_MRTR_25_the_listen_bounds_are_options_validated_and_flags() -> None:
    """R-OPT-1 for the two bounds, and ``askgate serve``'s flags that set them."""
    assert (Options().max_listens_per_owner, Options().max_listens_total) == (16, 1024)
    for bad in ({"max_listens_per_owner": 0}, {"max_listens_total": True}):
        with pytest.raises(OptionError):
            Options(**bad).validated()
    with pytest.raises(OptionError, match=r"may not exceed max_listens_total \(8\)"):
        Options(max_listens_per_owner=9, max_listens_total=8).validated()
    Options(max_listens_per_owner=8, max_listens_total=8).validated()
    _, args = _parse(["serve", "--demo", "--max-listens", "3", "--max-listens-total", "40"])
    assert (args.max_listens_per_owner, args.max_listens_total) == (3, 40)
    server = Server("s", max_listens_per_owner=3, max_listens_total=40)
    assert server.options.max_listens_per_owner == 3
    assert server.options.max_listens_total == 40


# --- R-MRTR-26: an ended listen frees its place ------------------------------------------


def test_R_MRTR_26_a_listen_ended_by_cancel_drop_or_stop_frees_its_place() -> None:
    h = Harness(max_listens_per_owner=2, max_listens_total=100)
    posts = Posts(h)
    first, _ = posts.listen("alice", "L")
    second, _ = posts.listen("alice", "L")
    refusal(posts.listen("alice")[1], "owner")
    assert h.feed(MessageReceived(first, cancel_body("L"), 0)) == []
    assert opened(posts.listen("alice")[1])  # the cancelled listen's place
    refusal(posts.listen("alice")[1], "owner")
    assert h.feed(SubscriberDetached(second, 0)) == []  # its POST went away
    assert opened(posts.listen("alice")[1])  # the dropped listen's place
    assert h.state.owner_listens[("principal", "alice")] == 2
    assert len(h.state.listens) == 2
    # The server stopping ends every listen with its answer and frees every place.
    ended = h.feed(ServerStopping(0))
    assert [type(e) for e in ended] == [Reply, Reply]
    state = h.state
    assert (len(state.listens), len(state.conn_listens), len(state.owner_listens)) == (0, 0, 0)


@pytest.mark.anyio
async def test_R_MRTR_25_R_MRTR_26_over_http_a_principal_is_bounded_and_a_closed_stream_frees(
    anyio_backend: str,
) -> None:
    """Over Streamable HTTP with two bearer principals: each listen is a POST of its own, held
    open as an SSE stream; alice's third is answered the refusal as JSON while bob's opens, and
    once alice closes a stream (the shell cancels and detaches it, R-HTTP-30) hers opens."""
    assert anyio_backend == "asyncio"
    tokens = {"alice": "token-alice-0123456789", "bob": "token-bob-0123456789abc"}

    async def allow(*_: Any) -> Allow:
        return Allow()

    server = Server(
        "listens",
        authorizer=allow,
        authorizer_source="configured",
        read_authorizer=allow,
        max_listens_per_owner=2,
    )

    def make(port: int) -> HttpApp:
        return HttpApp(server, auth=BearerAuth(tokens), options=rules.HttpOptions(port=port))

    ended = anyio.Event()

    def tap(before: State, _event: Event, after: State, _effects: list[Effect]) -> None:
        if len(after.listens) < len(before.listens):
            ended.set()

    def headers(principal: str) -> dict[str, str]:
        return {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "authorization": f"Bearer {tokens[principal]}",
            "mcp-protocol-version": MODERN,
            "mcp-method": "subscriptions/listen",
        }

    with anyio.fail_after(DEADLINE):
        async with (
            uvicorn_serving(make) as (app, port),
            app.running(),
            httpx2.AsyncClient(timeout=DEADLINE) as http,
            AsyncExitStack() as streams,
        ):
            app.runtime.tap(tap)
            url = f"http://127.0.0.1:{port}/mcp"

            held: list[AsyncIterator[str]] = []  # a line reader let go would close its stream

            async def hold(principal: str, rid: int) -> httpx2.Response:
                """A listen's POST, held open once its acknowledgement came."""
                response = await streams.enter_async_context(
                    http.stream("POST", url, content=listen_body(rid), headers=headers(principal))
                )
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                lines = response.aiter_lines()
                held.append(lines)
                async for line in lines:
                    if line.startswith("data: "):
                        assert "subscriptions/acknowledged" in line
                        return response
                raise AssertionError("the listen's stream ended before its acknowledgement")

            first = await hold("alice", 1)
            await hold("alice", 2)
            refused = await http.post(url, content=listen_body(3), headers=headers("alice"))
            assert refused.status_code == 200
            assert refused.json()["error"]["data"]["scope"] == "owner"
            await hold("bob", 1)
            assert len(app.runtime.state.listens) == 3
            await first.aclose()  # alice's first stream goes away
            await ended.wait()
            await hold("alice", 4)
            owners = dict(app.runtime.state.owner_listens)
            assert owners == {("principal", "alice"): 2, ("principal", "bob"): 1}


# --- R-MRTR-27: opening or ending a listen reads no other listen --------------------------


class Unscannable:
    """The open listens, as a step may use them without reading the others: membership, size,
    ``set`` and ``delete`` (which answer a plain map); iterating them fails the test."""

    def __init__(self, listens: Map[Any, Any]) -> None:
        self.listens = listens

    def __len__(self) -> int:
        return len(self.listens)

    def __contains__(self, key: object) -> bool:
        return key in self.listens

    def __getitem__(self, key: object) -> Any:
        return self.listens[key]

    def get(self, key: object, default: Any = None) -> Any:
        return self.listens.get(key, default)

    def set(self, key: object, value: Any) -> Map[Any, Any]:
        return self.listens.set(key, value)

    def delete(self, key: object) -> Map[Any, Any]:
        return self.listens.delete(key)

    def _scanned(self, *_: Any) -> Iterator[Any]:
        raise AssertionError("a step read every open listen")

    __iter__ = keys = values = items = _scanned


def unscanned_step(state: State, event: Event) -> tuple[State, list[Effect]]:
    """``step`` from ``state`` whose listens may not be iterated; the state it reaches, as
    plain maps."""
    unscannable: Any = Unscannable(state.listens)  # stands for the map: a stand-in, not one
    after, effects = step(attrs.evolve(state, listens=unscannable), event)
    listens: Any = after.listens
    if isinstance(listens, Unscannable):
        after = attrs.evolve(after, listens=listens.listens)
    return after, effects


def test_R_MRTR_27_opening_or_ending_a_listen_reads_no_other_listen() -> None:
    h = Harness(max_listens_per_owner=1000, max_listens_total=1000)
    posts = Posts(h)
    for i in range(300):
        posts.listen(f"p{i % 7}")
    state = h.state
    conn: Hashable = ("http-stateless", "new")
    steps: list[Event] = [
        SubscriberAttached(conn, 0, "p1"),
        MessageReceived(conn, listen_body("L"), 0, mode="reply", principal="p1"),  # opens
        MessageReceived(conn, listen_body("L"), 0, mode="reply", principal="p1"),  # duplicate
        MessageReceived(conn, listen_body("M", []), 0, mode="reply", principal="p1"),  # bad
        MessageReceived(conn, listen_body("N"), 0, mode="reply", principal="p1"),  # opens
        # A modern ping, on a connection of its own that goes away: no listen is touched.
        SubscriberAttached("ping", 0, "p2"),
        MessageReceived("ping", ping_body(1), 0, mode="reply", principal="p2"),
        SubscriberDetached("ping", 0),
        # One listen cancelled, then the connection holding the other goes away.
        MessageReceived(conn, cancel_body("L"), 0),
        SubscriberDetached(conn, 0),
        # Another principal's listen, on an old connection, and its connection going away.
        SubscriberDetached(("http-stateless", 5), 0),
    ]
    told: list[Effect] = []
    for event in steps:
        state, effects = unscanned_step(state, event)
        told += effects
    assert [type(e).__name__ for e in told] == ["Push", "Reply", "Reply", "Push", "Reply"]
    assert len(state.listens) == 299
    assert state.owner_listens[("principal", "p4")] == 42  # p4 held the 5th: 43 - 1
    assert conn not in state.conn_listens
    h.state = state
    h.feed(ToolUnregistered("echo"))  # the invariants hold; a list change reaches all 299
    assert len(pushes(h.effects)) == 299
    assert all(isinstance(e, Push) for e in h.effects)
    assert not any(isinstance(e, Reply) for e in h.effects)
