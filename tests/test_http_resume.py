"""Resumable Streamable HTTP streams (spec/http.md, R-HTTP-17 .. R-HTTP-22): event ids, the
priming event, the replay buffer and its bounds, GET with ``Last-Event-ID``, a tool closing its
stream's connection, keep-alive comments. The pure decisions first, then raw HTTP against the
app under uvicorn on 127.0.0.1 (as tests/test_http.py does). Every wait is on a message, an
event or a connection's end, under a deadline; no sleep synchronises anything.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client

from askgate import Allow, Context
from askgate.core import http as rules
from askgate.server import Server
from askgate.transports.auth import BearerAuth
from askgate.transports.http import HttpApp
from askgate.transports.runtime import now_ms

from .listener import GetWatched, uvicorn_serving
from .test_conformance_fixture import _fixture

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

DEADLINE = 20.0
NEW = "2025-11-25"
OLD = "2025-06-18"
TOKENS = {"alice": "alice-token-0123456789", "mallory": "mallory-token-0123456789"}


# -- the pure decisions -------------------------------------------------------------------------


def test_R_HTTP_17_ids_name_their_stream_and_their_place() -> None:
    tag = rules.stream_tag(b"\x07" * 16)
    assert tag == rules.stream_tag(b"\x07" * 16)  # from the random bytes alone
    assert tag != rules.stream_tag(b"\x08" * 16)
    assert "." not in tag
    assert all(0x21 <= ord(ch) <= 0x7E for ch in tag)
    with pytest.raises(ValueError, match="16 random bytes"):
        rules.stream_tag(b"short")
    assert rules.event_id(tag, 3) == f"{tag}.3"
    assert rules.parse_event_id(rules.event_id(tag, 3)) == (tag, 3)
    assert rules.parse_event_id(f" {tag}.0 ") == (tag, 0)
    for bad in (
        None,
        "",
        "nodot",
        f"{tag}.",
        ".3",
        f"{tag}.-1",
        f"{tag}.x",
        f"{tag}.٣",
        "a." + "9" * 19,
    ):
        assert rules.parse_event_id(bad) is None, bad
    event = rules.sse_event(f"{tag}.3", b'{"a":1}')
    assert event == f"id: {tag}.3\nevent: message\ndata: ".encode() + b'{"a":1}\n\n'


def test_R_HTTP_18_priming_is_for_2025_11_25_and_later() -> None:
    assert rules.primes("2025-11-25")
    assert not rules.primes("2025-06-18")
    assert not rules.primes("2025-03-26")
    assert not rules.primes(rules.DEFAULT_VERSION)
    assert rules.priming_event("T.0", 1000) == b"id: T.0\nretry: 1000\ndata: \n\n"
    assert rules.HttpOptions().retry_ms == 1000
    with pytest.raises(ValueError, match="retry_ms"):
        rules.HttpOptions(retry_ms=0)


def test_R_HTTP_19_the_bounds_in_count_bytes_and_time() -> None:
    options = rules.HttpOptions(
        replay_events=3, replay_bytes=100, replay_ttl_ms=50, replay_streams=2
    )
    assert not rules.over_replay_bounds(3, 100, options)
    assert rules.over_replay_bounds(4, 10, options)
    assert rules.over_replay_bounds(1, 101, options)
    defaults = rules.HttpOptions()
    assert (defaults.replay_events, defaults.replay_bytes) == (256, 1024 * 1024)
    assert (defaults.replay_ttl_ms, defaults.replay_streams, defaults.keepalive_ms) == (
        60_000,
        32,
        15_000,
    )
    assert not rules.expired(None, 10**9, options)  # a stream that has not ended
    assert not rules.expired(100, 149, options)
    assert rules.expired(100, 150, options)
    ended = [("a", 0), ("b", 100), ("c", 120)]
    assert rules.forget(ended, 121, options) == ("a",)  # beyond the count
    assert rules.forget(ended, 150, options) == ("a", "b")  # b's time is up
    assert rules.forget([], 0, options) == ()


def test_R_HTTP_19_the_stall_cap_and_what_trimming_may_drop() -> None:
    assert rules.STALL_BYTES == 4 * 1024 * 1024
    assert not rules.stalled(rules.STALL_BYTES)
    assert rules.stalled(rules.STALL_BYTES + 1)
    # A connection writing the stream: only what it took may go.
    assert rules.trim_limit(9, 4, writing=True, opened=True, unwritten=10**9) == 4
    # Before its first connection: nothing it will write goes, up to the stall cap.
    cap = rules.STALL_BYTES
    assert rules.trim_limit(9, 0, writing=False, opened=False, unwritten=cap) == 0
    assert rules.trim_limit(9, 0, writing=False, opened=False, unwritten=cap + 1) == 9
    # Opened, no connection (it left, or stalled): anything up to the newest.
    assert rules.trim_limit(9, 4, writing=False, opened=True, unwritten=0) == 9
    options = rules.HttpOptions(replay_events=3, replay_bytes=100)
    log = [(n, b"x" * 10) for n in range(1, 7)]  # 6 events, 60 bytes: 3 over the count
    assert rules.trim_count(log, 6, 60, 6, options) == 3
    assert rules.trim_count(log, 6, 60, 2, options) == 2  # none after the limit
    assert rules.trim_count(log, 6, 60, 0, options) == 0
    assert rules.trim_count(log[:3], 3, 30, 3, options) == 0  # within the bounds
    big = [(1, b"x" * 60), (2, b"x" * 30), (3, b"x" * 50)]  # 140 bytes: over the byte bound
    assert rules.trim_count(big, 3, 140, 3, options) == 1  # 80 left
    huge = [(1, b"x" * 10), (2, b"x" * 500)]
    assert rules.trim_count(huge, 2, 510, 2, options) == 1  # the newest is always kept
    assert rules.trim_count([(1, b"x" * 500)], 1, 500, 1, options) == 0


def test_R_HTTP_20_what_a_last_event_id_resumes() -> None:
    options = rules.HttpOptions(replay_ttl_ms=50)
    refused = rules.Rejection(400, "Bad Request: unknown or expired Last-Event-ID")
    assert refused == rules.RESUME_REFUSED
    open_stream = rules.StreamView(first=3, last=5)  # events 1 and 2 were dropped
    assert rules.resume(open_stream, 2, 0, options) is None  # 3, 4, 5 are all kept
    assert rules.resume(open_stream, 5, 0, options) is None  # nothing to replay; it goes on
    assert rules.resume(open_stream, 1, 0, options) == refused  # event 2 is lost
    assert rules.resume(open_stream, 6, 0, options) == refused  # not sent yet: not ours
    assert rules.resume(None, 0, 0, options) == refused  # unknown, another session's
    ended = rules.StreamView(first=1, last=2, ended_at=100)
    assert rules.resume(ended, 0, 149, options) is None
    assert rules.resume(ended, 0, 150, options) == refused  # forgotten
    assert rules.resume(rules.StreamView(first=1, last=0), 0, 0, options) is None  # primed only


# -- the app under uvicorn ----------------------------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn runs on asyncio


class Gate:
    """What the tools wait on: the test opens it."""

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.started = anyio.Event()

    def open(self) -> None:
        self.event.set()


def build_server(gate: Gate) -> Server:
    server = Server(
        "resume",
        authorizer=lambda *_: Allow(),
        read_authorizer=lambda *_: Allow(),
        authorizer_source="configured",
    )

    @server.tool()
    async def poll(ctx: Context, logs: int = 0) -> str:
        """Closes its stream's connection, logs, waits for the gate, answers."""
        await ctx.close_sse_stream()
        for n in range(logs):
            await ctx.log("info", f"log {n}")
        gate.started.set()
        await gate.event.wait()
        return "polled"

    @server.tool()
    async def wait() -> str:
        """Waits for the gate, saying nothing meanwhile."""
        gate.started.set()
        await gate.event.wait()
        return "waited"

    @server.tool()
    async def ask(ctx: Context) -> str:
        """Asks its client a question, answers with the action."""
        answer = await ctx.elicit("Name?", {"type": "object", "properties": {}})
        return str(answer["action"])

    return server


@asynccontextmanager
async def serving(
    gate: Gate, bearer: bool = False, app_class: type[HttpApp] = HttpApp, **options: Any
) -> AsyncIterator[tuple[HttpApp, str]]:
    server = build_server(gate)

    def make(port: int) -> HttpApp:
        auth = BearerAuth(TOKENS) if bearer else None
        return app_class(server, auth=auth, options=rules.HttpOptions(port=port, **options))

    async with uvicorn_serving(make) as (app, port), app.running():
        try:
            yield app, f"http://127.0.0.1:{port}/mcp"
        finally:
            gate.open()


class Session:
    """One session over raw HTTP at protocol ``version``."""

    def __init__(self, http: httpx2.AsyncClient, url: str, version: str = NEW, who: str = ""):
        self.http = http
        self.url = url
        self.version = version
        self.auth = {"authorization": f"Bearer {TOKENS[who]}"} if who else {}
        self.sid = ""

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "mcp-protocol-version": self.version,
            **self.auth,
            **extra,
        }
        if self.sid:
            headers["mcp-session-id"] = self.sid
        return headers

    async def start(self) -> Session:
        params = {
            "protocolVersion": self.version,
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "raw", "version": "0"},
        }
        message = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
        response = await self.http.post(self.url, json=message, headers=self.headers())
        assert response.status_code == 200, response.text
        self.sid = response.headers["mcp-session-id"]
        for note in (
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {
                "jsonrpc": "2.0",
                "id": "lvl",
                "method": "logging/setLevel",
                "params": {"level": "debug"},
            },
        ):
            response = await self.http.post(self.url, json=note, headers=self.headers())
            assert response.status_code in (200, 202), response.text
        return self

    async def post(self, message: object) -> httpx2.Response:
        return await self.http.post(self.url, json=message, headers=self.headers())


def call(request_id: object, tool: str, **arguments: Any) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


class Events:
    """One SSE response read event by event: each a dict of its fields (``id``, ``retry``,
    ``data``, ``comment``), ``message`` holding the decoded data when there is some."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.status = 0
        self.content_type = ""
        self.body = b""
        self.read = 0
        self.done = anyio.Event()
        self.started = anyio.Event()  # the response's head came
        self._got = anyio.Event()

    async def run(self, http: httpx2.AsyncClient, method: str, url: str, **kw: Any) -> None:
        try:
            async with http.stream(method, url, **kw) as response:
                self.status = response.status_code
                self.content_type = response.headers.get("content-type", "")
                self.started.set()
                if not self.content_type.startswith("text/event-stream"):
                    self.body = await response.aread()
                    return
                fields: dict[str, Any] = {}
                async for line in response.aiter_lines():
                    if line:
                        name, _, value = line.partition(":")
                        fields[name or "comment"] = value.removeprefix(" ")
                        continue
                    if fields.get("data"):
                        fields["message"] = json.loads(fields["data"])
                    self.events.append(fields)
                    fields = {}
                    self._got.set()
        finally:
            self.done.set()
            self._got.set()

    async def next(self) -> dict[str, Any]:
        """The next event not yet returned, waiting for it (bounded by the test's deadline)."""
        while len(self.events) <= self.read:
            if self.done.is_set():
                raise AssertionError(f"the stream ended after {self.events}")
            self._got = anyio.Event()
            await self._got.wait()
        self.read += 1
        return self.events[self.read - 1]

    def ids(self) -> list[str]:
        return [e["id"] for e in self.events if "id" in e]


async def post_stream(tg: Any, session: Session, message: dict[str, Any]) -> Events:
    events = Events()
    tg.start_soon(
        lambda: events.run(
            session.http, "POST", session.url, json=message, headers=session.headers()
        )
    )
    return events


async def resume(tg: Any, session: Session, last_event_id: str) -> Events:
    events = Events()
    headers = session.headers(**{"last-event-id": last_event_id})
    tg.start_soon(lambda: events.run(session.http, "GET", session.url, headers=headers))
    return events


def numbers(ids: list[str]) -> tuple[str, list[int]]:
    tags = {i.rpartition(".")[0] for i in ids}
    assert len(tags) == 1, ids
    return tags.pop(), [int(i.rpartition(".")[2]) for i in ids]


async def elicited_call(tg: Any, session: Session) -> tuple[Events, dict[str, Any]]:
    """A tools/call of ``ask`` whose elicitation arrived on its POST stream."""
    stream = await post_stream(tg, session, call(1, "ask"))
    while True:
        event = await stream.next()
        if event.get("message", {}).get("method") == "elicitation/create":
            return stream, event


async def approved_call(tg: Any, session: Session) -> Events:
    """A tools/call of ``ask`` whose elicitation was accepted, its POST stream read to its end."""
    stream, ask = await elicited_call(tg, session)
    assert (await session.post(accept(ask["message"]["id"]))).status_code == 202
    await stream.done.wait()
    return stream


def accept(request_id: object) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": {"action": "accept", "content": {}}}


@pytest.mark.anyio
async def test_R_HTTP_17_every_event_has_an_increasing_id_and_R_HTTP_18_a_priming_event() -> None:
    gate = Gate()
    async with serving(gate) as (_, url), httpx2.AsyncClient(timeout=DEADLINE) as http:
        with anyio.fail_after(DEADLINE):
            new = await Session(http, url, NEW).start()
            old = await Session(http, url, OLD).start()
            async with anyio.create_task_group() as tg:
                stream, ask = await elicited_call(tg, new)
                assert (await new.post(accept(ask["message"]["id"]))).status_code == 202
                await stream.done.wait()
                first = stream.events[0]
                assert first["data"] == ""
                assert first["retry"] == "1000"
                tag, seen = numbers(stream.ids())
                assert seen == list(range(len(seen)))
                assert seen[0] == 0
                assert stream.events[-1]["message"]["result"]["content"][0]["text"] == "accept"
                assert all("id" in e for e in stream.events)  # the reply too
                # An earlier revision: ids, but no priming event.
                older, ask = await elicited_call(tg, old)
                assert (await old.post(accept(ask["message"]["id"]))).status_code == 202
                await older.done.wait()
                other, seen = numbers(older.ids())
                assert seen == list(range(1, len(seen) + 1))
                assert all(e.get("data") for e in older.events)
                assert other != tag
                # A reply that comes first is JSON: no stream, no id.
                response = await new.post({"jsonrpc": "2.0", "id": 9, "method": "ping"})
                assert response.headers["content-type"].startswith("application/json")


@pytest.mark.anyio
async def test_R_HTTP_20_a_get_with_last_event_id_replays_what_followed() -> None:
    gate = Gate()
    async with serving(gate) as (app, url), httpx2.AsyncClient(timeout=DEADLINE) as http:
        with anyio.fail_after(DEADLINE):
            session = await Session(http, url).start()
            async with anyio.create_task_group() as tg:
                stream = await approved_call(tg, session)
                tag, _ = numbers(stream.ids())
                wire = [(e["id"], e.get("message")) for e in stream.events[1:]]
                everything = await resume(tg, session, f"{tag}.0")
                await everything.done.wait()
                assert everything.status == 200
                assert [(e["id"], e.get("message")) for e in everything.events] == wire
                tail = await resume(tg, session, wire[-2][0])
                await tail.done.wait()
                assert [(e["id"], e.get("message")) for e in tail.events] == wire[-1:]
                nothing = await resume(tg, session, wire[-1][0])
                await nothing.done.wait()
                assert (nothing.status, nothing.events) == (200, [])
                # Replay is not the standalone stream: a GET can still open it.
                assert not app.sessions.by_id[session.sid].get_open


@pytest.mark.anyio
async def test_R_HTTP_21_a_closed_call_stream_continues_on_the_get_that_resumes_it() -> None:
    gate = Gate()
    async with serving(gate) as (app, url), httpx2.AsyncClient(timeout=DEADLINE) as http:
        with anyio.fail_after(DEADLINE):
            session = await Session(http, url).start()
            async with anyio.create_task_group() as tg:
                stream = await post_stream(tg, session, call(1, "poll", logs=2))
                await stream.done.wait()  # the tool closed its connection mid-call
                assert stream.status == 200
                assert stream.content_type.startswith("text/event-stream")
                (priming,) = stream.events
                assert priming["data"] == ""
                assert priming["retry"] == "1000"
                await gate.started.wait()
                resumed = await resume(tg, session, priming["id"])
                logs = [await resumed.next(), await resumed.next()]
                assert [e["message"]["params"]["data"] for e in logs] == ["log 0", "log 1"]
                assert not resumed.done.is_set()  # the call is still running: it waits
                gate.open()
                result = await resumed.next()
                assert result["message"]["id"] == 1
                assert result["message"]["result"]["content"][0]["text"] == "polled"
                await resumed.done.wait()  # the reply ends the resumed stream
                _, seen = numbers([priming["id"], *resumed.ids()])
                assert seen == [0, 1, 2, 3]
            assert len(app.runtime.state.calls) == 0


@pytest.mark.anyio
async def test_R_HTTP_21_a_resume_takes_the_stream_over_from_an_open_connection() -> None:
    gate = Gate()
    async with serving(gate) as (_, url), httpx2.AsyncClient(timeout=DEADLINE) as http:
        with anyio.fail_after(DEADLINE):
            session = await Session(http, url).start()
            async with anyio.create_task_group() as tg:
                stream, ask = await elicited_call(tg, session)  # its POST still open
                resumed = await resume(tg, session, stream.events[0]["id"])
                again = await resumed.next()
                assert again["id"] == ask["id"]
                assert again["message"] == ask["message"]
                await stream.done.wait()  # one message, one connection: the POST ended
                assert (await session.post(accept(ask["message"]["id"]))).status_code == 202
                result = await resumed.next()
                assert result["message"]["result"]["content"][0]["text"] == "accept"
                await resumed.done.wait()
                assert all("result" not in e.get("message", {}) for e in stream.events)


@pytest.mark.anyio
async def test_R_HTTP_21_without_priming_closing_does_nothing() -> None:
    gate = Gate()
    gate.open()
    async with serving(gate) as (_, url), httpx2.AsyncClient(timeout=DEADLINE) as http:
        with anyio.fail_after(DEADLINE):
            old = await Session(http, url, OLD).start()
            response = await old.post(call(1, "poll"))
            assert response.status_code == 200
            assert response.json()["result"]["content"][0]["text"] == "polled"


@pytest.mark.anyio
async def test_R_HTTP_21_the_sdk_client_polls_the_conformance_tool() -> None:
    server = _fixture().build_server()

    def make(port: int) -> HttpApp:
        return HttpApp(server, options=rules.HttpOptions(port=port, retry_ms=10))

    async with uvicorn_serving(make) as (app, port), app.running():
        with anyio.fail_after(DEADLINE):
            # SSE polling is of the 2025-11-25 sessions (the default mode would pick 2026-07-28,
            # whose streams are not resumable, R-HTTP-28).
            async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as client:
                result = await client.call_tool("test_reconnection", {})
        block = result.content[0]
        assert isinstance(block, types.TextContent)
        assert block.text.startswith("Reconnection test completed successfully")


@pytest.mark.anyio
async def test_R_HTTP_20_another_sessions_or_principals_id_is_refused() -> None:
    gate = Gate()
    async with serving(gate, bearer=True) as (_, url), httpx2.AsyncClient(timeout=DEADLINE) as http:
        with anyio.fail_after(DEADLINE):
            alice = await Session(http, url, who="alice").start()
            alice2 = await Session(http, url, who="alice").start()
            mallory = await Session(http, url, who="mallory").start()
            async with anyio.create_task_group() as tg:
                stream, ask = await elicited_call(tg, alice)
                eid = ask["id"]
                tag = eid.rpartition(".")[0]
                for other, last in (
                    (alice2, eid),  # the same principal, another session
                    (mallory, eid),  # another principal, her own session
                    (alice, f"{tag}.99"),  # not sent yet
                    (alice, "Zm9vYmFyYmF6cXV4cXV1eA.1"),  # no such stream
                    (alice, "garbage"),
                ):
                    refused = await resume(tg, other, last)
                    await refused.done.wait()
                    assert refused.status == 400, (other.sid, last)
                    assert json.loads(refused.body)["error"]["message"] == (
                        "Bad Request: unknown or expired Last-Event-ID"
                    )
                # Mallory naming Alice's session: the same 404 as an unknown one (R-HTTP-9).
                mallory.sid, mine = alice.sid, mallory.sid
                stolen = await resume(tg, mallory, eid)
                await stolen.done.wait()
                assert stolen.status == 404
                assert stolen.events == []
                mallory.sid = mine
                assert (await alice.post(accept(ask["message"]["id"]))).status_code == 202
                await stream.done.wait()


@pytest.mark.anyio
async def test_R_HTTP_19_the_replay_buffer_is_bounded_in_count_bytes_and_time() -> None:
    gate = Gate()
    async with (
        serving(gate, replay_events=3, replay_ttl_ms=60_000, replay_streams=1) as (
            app,
            url,
        ),
        httpx2.AsyncClient(timeout=DEADLINE) as http,
    ):
        with anyio.fail_after(DEADLINE):
            session = await Session(http, url).start()
            async with anyio.create_task_group() as tg:
                stream = await post_stream(tg, session, call(1, "poll", logs=5))
                await stream.done.wait()
                tag = stream.events[0]["id"].rpartition(".")[0]
                await gate.started.wait()  # its five logs are issued: event 3 exists
                gate.open()
                # Resumed while the call may still run, this GET ends when the stream does: once
                # its reply is in. (Not a poll of the state between waits for every task to
                # block: on a loaded machine that wait may never see all of them blocked.)
                ended = await resume(tg, session, f"{tag}.3")
                await ended.done.wait()
                assert numbers(ended.ids())[1] == [4, 5, 6]
                assert not app.runtime.state.calls
                # Events 1..5 are logs, 6 the reply: only 4, 5, 6 are kept.
                for lost in (0, 1, 2):
                    refused = await resume(tg, session, f"{tag}.{lost}")
                    await refused.done.wait()
                    assert refused.status == 400
                kept = await resume(tg, session, f"{tag}.3")
                await kept.done.wait()
                assert numbers(kept.ids())[1] == [4, 5, 6]
                assert kept.events[-1]["message"]["result"]["content"][0]["text"] == "polled"
                # Time: forgotten replay_ttl_ms after it ended.
                app.reap(now_ms() + 60_000)
                late = await resume(tg, session, f"{tag}.3")
                await late.done.wait()
                assert late.status == 400
            live = app._live[session.sid]
            assert tag not in live.streams


@pytest.mark.anyio
async def test_R_HTTP_19_a_stream_kept_for_replay_keeps_nothing_of_its_finished_writer() -> None:
    """A POST's stream written to its end by its request (uvicorn's own protocol: a request
    task) and one ended by a tool closing its connection (R-HTTP-21) stay for a resume, without
    the stop of the write loop that wrote them, which holds that request's task."""
    gate = Gate()
    async with (
        serving(gate) as (app, url),
        httpx2.AsyncClient(timeout=DEADLINE) as http,
    ):
        with anyio.fail_after(DEADLINE):
            session = await Session(http, url).start()
            async with anyio.create_task_group() as tg:
                stream = await approved_call(tg, session)
                closed = await post_stream(tg, session, call(2, "poll"))
                await closed.done.wait()
            live = app._live[session.sid]
            for events in (stream, closed):
                kept = live.streams[events.ids()[0].rpartition(".")[0]]
                assert kept.writer is None
                assert kept.stopper is None
            gate.open()


@pytest.mark.anyio
async def test_R_HTTP_19_an_event_over_the_byte_bound_keeps_only_the_newest() -> None:
    async with (
        serving(Gate(), replay_bytes=10) as (_app, url),
        httpx2.AsyncClient(timeout=DEADLINE) as http,
    ):
        with anyio.fail_after(DEADLINE):
            session = await Session(http, url).start()
            async with anyio.create_task_group() as tg:
                stream = await approved_call(tg, session)
                tag, seen = numbers(stream.ids())
                assert seen == [0, 1, 2]
                refused = await resume(tg, session, f"{tag}.0")
                await refused.done.wait()
                assert refused.status == 400
                kept = await resume(tg, session, f"{tag}.1")
                await kept.done.wait()
                assert numbers(kept.ids())[1] == [2]


@pytest.mark.anyio
async def test_R_HTTP_19_a_session_keeps_at_most_replay_streams_ended_streams() -> None:
    async with (
        serving(Gate(), replay_streams=1) as (_app, url),
        httpx2.AsyncClient(timeout=DEADLINE) as http,
    ):
        with anyio.fail_after(DEADLINE):
            session = await Session(http, url).start()
            tags = []
            async with anyio.create_task_group() as tg:
                for _ in range(2):
                    stream = await approved_call(tg, session)
                    tags.append(stream.events[0]["id"].rpartition(".")[0])
                first = await resume(tg, session, f"{tags[0]}.0")
                second = await resume(tg, session, f"{tags[1]}.0")
                await first.done.wait()
                await second.done.wait()
                assert (first.status, second.status) == (400, 200)


@pytest.mark.anyio
async def test_R_HTTP_22_a_quiet_stream_gets_keepalive_comments() -> None:
    gate = Gate()
    async with (
        serving(gate, keepalive_ms=20) as (_, url),
        httpx2.AsyncClient(timeout=DEADLINE) as http,
    ):
        with anyio.fail_after(DEADLINE):
            session = await Session(http, url).start()
            async with anyio.create_task_group() as tg:
                stream = await post_stream(tg, session, call(1, "wait"))
                priming = await stream.next()  # quiet: the stream opened, primed (R-HTTP-18)
                assert priming["data"] == ""
                assert priming["id"].endswith(".0")
                comment = await stream.next()
                assert comment == {"comment": "keepalive"}
                gate.open()
                while "message" not in (event := await stream.next()):
                    assert event == {"comment": "keepalive"}
                assert event["message"]["result"]["content"][0]["text"] == "waited"
                await stream.done.wait()


@pytest.mark.anyio
async def test_R_HTTP_20_a_get_streams_id_replays_then_opens_the_standalone_stream() -> None:
    gate = Gate()
    async with (
        serving(gate, app_class=GetWatched) as (app, url),
        httpx2.AsyncClient(timeout=DEADLINE) as http,
    ):
        assert isinstance(app, GetWatched)
        with anyio.fail_after(DEADLINE):
            session = await Session(http, url).start()
            live = app._live[session.sid]
            note = b'{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}'
            async with anyio.create_task_group() as tg:
                first = Events()
                async with anyio.create_task_group() as reading:
                    reading.start_soon(
                        lambda: first.run(http, "GET", url, headers=session.headers())
                    )
                    await first.started.wait()  # the app had opened the stream before its head
                    assert live.get is not None
                    live.get.put(note)
                    live.get.put(note)
                    events = [await first.next(), await first.next()]
                    reading.cancel_scope.cancel()  # the client drops its GET
                tag, seen = numbers([e["id"] for e in events])
                assert seen == [1, 2]
                await app.get_done.wait()  # the server saw it go
                assert not app.sessions.by_id[session.sid].get_open
                again = await resume(tg, session, f"{tag}.1")
                replayed = await again.next()
                assert replayed["id"] == f"{tag}.2"
                assert app.sessions.by_id[session.sid].get_open  # the standalone stream
                assert live.get is not None
                live.get.put(note)
                fresh = await again.next()
                assert fresh["message"]["method"] == "notifications/tools/list_changed"
                assert fresh["id"].rpartition(".")[0] != tag  # a new stream, a new tag
                busy = await resume(tg, session, f"{tag}.1")
                await busy.done.wait()
                assert busy.status == 409  # R-HTTP-10: one standalone stream
                tg.cancel_scope.cancel()


class _SpunError(Exception):
    """A write loop took from its stream far more often than it had anything to write."""


@pytest.mark.anyio
async def test_R_HTTP_22_a_posts_keepalive_deadline_does_not_wake_a_get_that_took_its_stream_over(
    anyio_backend: str,
) -> None:
    """The POST writer's keep-alive timer fires in the loop turn in which a GET with
    ``Last-Event-ID`` takes the stream over (R-HTTP-21): the quiet deadline is the POST
    writer's, so the GET's writer waits for events instead of taking nothing, endlessly."""
    if anyio_backend != "asyncio":
        pytest.skip("the POST writer without a cancel scope runs on asyncio only")
    import asyncio  # noqa: PLC0415 (asyncio's loop, under the asyncio backend only)

    from askgate.demo import build_demo  # noqa: PLC0415
    from askgate.transports.http import _EventStream  # noqa: PLC0415

    options = rules.HttpOptions()
    app = HttpApp(build_demo(), options=options)
    loop = asyncio.get_running_loop()

    class Counted(_EventStream):
        takes = 0

        def take(self, token: object) -> tuple[bytes, bool]:
            Counted.takes += 1
            if Counted.takes > 1_000:
                raise _SpunError
            return super().take(token)

    stream = Counted(options)
    stream.open("tag")
    post, get = object(), object()
    stream.attach(post, 0)
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    with anyio.fail_after(DEADLINE):
        writer = asyncio.ensure_future(app._write_plain(stream, post, b"", send, loop))
        for _ in range(3):
            await asyncio.sleep(0)  # the POST's writer waits, its keep-alive timer armed
        assert not writer.done()

        async def take_over() -> None:  # a GET with Last-Event-ID: its request task
            stream.attach(get, stream.last)
            await app._write_events(stream, get, b"", send)

        resumed = asyncio.ensure_future(take_over())  # its first step runs first, and then ...
        stream.quiet(post)  # ... the POST's keep-alive timer fires, in the same loop turn
        for _ in range(20):
            await asyncio.sleep(0)
        assert Counted.takes < 20  # the GET's writer waits for events
        assert not resumed.done()
        assert writer.done()  # the POST's writer ended: the stream is the GET's now
        resumed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await resumed
