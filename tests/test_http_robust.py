"""Streamable HTTP against clients that misbehave or are refused (spec/http.md, R-HTTP-24,
R-HTTP-25): raw sockets against the app served by uvicorn on 127.0.0.1. Every wait is bounded;
nothing sleeps to synchronise."""

from __future__ import annotations

import json
import socket
import time
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from askgate.core import http as rules
from askgate.demo import build_demo
from askgate.transports.auth import BearerAuth
from askgate.transports.http import HttpApp
from askgate.transports.http_server import READ_BYTES

from .listener import askgate_serving, uvicorn_serving

DEADLINE = 30.0
TOKENS = {"alice": "alice-token-0123456789abcdef"}
INIT = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
).encode()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn runs on asyncio


@asynccontextmanager
async def served(own: bool = False, **options: Any) -> AsyncIterator[tuple[HttpApp, int]]:
    """The configured demo behind bearer tokens, served on a free loopback port by uvicorn, or
    with ``own`` by askgate's own HTTP/1.1 server (what ``askgate serve --http`` runs)."""

    def make(port: int) -> HttpApp:
        return HttpApp(
            build_demo(configured=True),
            auth=BearerAuth(TOKENS),
            options=rules.HttpOptions(port=port, **options),
        )

    serving = askgate_serving(make) if own else uvicorn_serving(make)
    async with serving as (app, port), app.running():
        yield app, port


def _head(port: int, *, path: str = "/mcp", length: int, **changed: str) -> bytes:
    headers = {
        "Host": f"127.0.0.1:{port}",
        "Authorization": f"Bearer {TOKENS['alice']}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Connection": "close",
        "Content-Length": str(length),
        **{name.replace("_", "-"): value for name, value in changed.items()},
    }
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items() if value)
    return f"POST {path} HTTP/1.1\r\n{lines}\r\n".encode()


def _exchange(port: int, head: bytes, body: bytes) -> bytes | str:
    """Headers, then the body in a second write, then the answer up to the connection's end;
    the name of the error when the connection was reset instead."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as client:
            client.sendall(head)
            client.sendall(body)
            answer = b""
            while chunk := client.recv(65536):
                answer += chunk
            return answer
    except OSError as error:  # a reset: ECONNRESET, EPIPE
        return type(error).__name__


@pytest.mark.anyio
async def test_R_HTTP_24_refusals_reach_a_client_that_sends_its_body_after_its_headers() -> None:
    body = INIT + b" " * (2 * 1024 * 1024)
    # The 413 case never sends the second half it declared: the drain ends at its deadline.
    async with served(max_body=3 * 1024 * 1024, drain_ms=500) as (app, port):
        cases: list[tuple[bytes, int]] = [
            (_head(port, length=len(body), Origin="https://evil.example"), 403),
            (_head(port, length=len(body), Host="evil.example"), 421),
            (_head(port, length=len(body), Authorization="Bearer wrong"), 401),
            (_head(port, path="/elsewhere", length=len(body)), 404),
            (_head(port, length=len(body), Content_Type="text/plain"), 415),
            (_head(port, length=len(body) * 2), 413),  # declared over the cap; half of it sent
        ]
        outcomes: dict[str, int] = {}
        with anyio.fail_after(240):
            for attempt in range(200):  # bounded
                head, status = cases[attempt % len(cases)]
                answer = await anyio.to_thread.run_sync(_exchange, port, head, body)
                if isinstance(answer, str):
                    key = answer
                else:
                    assert answer.startswith(b"HTTP/1.1 %d " % status), answer[:80]
                    assert b"connection: close" in answer.lower()
                    key = str(status)
                outcomes[key] = outcomes.get(key, 0) + 1
        assert set(outcomes) == {"401", "403", "404", "413", "415", "421"}, outcomes
        assert len(app.sessions) == 0
        assert len(app.runtime.state.calls) == 0


@pytest.mark.anyio
async def test_R_HTTP_24_a_huge_declared_body_is_drained_only_up_to_its_bound() -> None:
    drain = 256 * 1024
    async with served(drain_bytes=drain, drain_ms=60_000) as (_app, port):

        def flood() -> tuple[bytes, int]:
            sent = 0
            answer = b""
            with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as client:
                head = _head(port, length=1 << 40, Origin="https://evil.example", Connection="")
                client.sendall(head)  # keep-alive asked: the server still closes
                chunk = b" " * 65536
                try:
                    while sent < 1 << 30:  # bounded: the server stops reading long before
                        sent += client.send(chunk)
                except OSError:  # the server closed its side: a reset or a broken pipe
                    pass
                try:
                    while data := client.recv(65536):
                        answer += data
                except OSError:
                    pass
            return answer, sent

        with anyio.fail_after(DEADLINE):
            answer, sent = await anyio.to_thread.run_sync(flood)
        # The refusal was written before the drain; the kernel buffers what the server never
        # read, a few MiB at most on loopback, far below the gigabyte the client would send.
        assert sent < 64 * 1024 * 1024, sent
        assert answer == b"" or answer.startswith(b"HTTP/1.1 403 "), answer[:80]


@pytest.mark.anyio
async def test_R_HTTP_24_a_request_read_whole_keeps_its_connection() -> None:
    async with served() as (_app, port):

        def two_requests() -> list[bytes]:
            answers = []
            with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as client:
                for _ in range(2):
                    client.sendall(_head(port, length=len(INIT), Connection="") + INIT)
                    answer = b""
                    while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
                        chunk = client.recv(65536)
                        assert chunk, "the connection closed"
                        answer += chunk
                    answers.append(answer)
            return answers

        with anyio.fail_after(DEADLINE):
            answers = await anyio.to_thread.run_sync(two_requests)
        for answer in answers:
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]
            assert b"connection: close" not in answer.lower()


def _trickle(port: int, data: bytes, every: float, limit: float) -> tuple[bytes, float]:
    """Sends ``data`` a byte at a time, one each ``every`` seconds, until the server answers or
    closes (at most ``limit`` seconds); returns what it answered and when, from the first byte."""
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=limit) as client:
        client.settimeout(every)
        began = time.monotonic()
        sent = 0
        try:
            while time.monotonic() - began < limit:
                if sent < len(data):
                    client.sendall(data[sent : sent + 1])
                    sent += 1
                try:
                    chunk = client.recv(65536)
                except TimeoutError:
                    continue  # nothing yet: the next byte
                if not chunk:
                    break
                answer += chunk
        except OSError:  # reset while writing: the server closed
            pass
        return answer, time.monotonic() - began


@pytest.mark.anyio
async def test_R_HTTP_25_a_trickled_body_is_answered_408_and_closed_within_its_bound() -> None:
    async with served(body_timeout_ms=600, drain_ms=400) as (app, port):
        head = _head(port, length=len(INIT), Connection="")
        with anyio.fail_after(DEADLINE):
            sent_head = await anyio.to_thread.run_sync(_exchange_head, port, head)
            answer, took = await anyio.to_thread.run_sync(_trickle_on, sent_head, INIT)
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
        assert b"connection: close" in answer.lower()
        assert took < 0.6 + 0.4 + 2.0, took  # the two bounds, and slack for a loaded machine
        assert len(app.sessions) == 0


def _exchange_head(port: int, head: bytes) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
    client.sendall(head)
    return client


def _trickle_on(client: socket.socket, body: bytes) -> tuple[bytes, float]:
    """A byte of ``body`` each 50 ms on ``client`` (whose headers were sent) until the server
    answers and closes; what it answered, and how long that took."""
    answer = b""
    began = time.monotonic()
    client.settimeout(0.05)
    sent = 0
    with client:
        try:
            while time.monotonic() - began < DEADLINE:
                if sent < len(body) - 1:  # never the last byte: the body never completes
                    client.sendall(body[sent : sent + 1])
                    sent += 1
                try:
                    chunk = client.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                answer += chunk
        except OSError:
            pass
    return answer, time.monotonic() - began


@pytest.mark.anyio
async def test_R_HTTP_25_headers_that_do_not_arrive_in_time_close_the_connection() -> None:
    async with served(own=True, header_timeout_ms=500) as (app, port):
        head = _head(port, length=len(INIT))
        with anyio.fail_after(DEADLINE):
            answer, took = await anyio.to_thread.run_sync(_trickle, port, head, 0.05, DEADLINE)
            silent, quiet_for = await anyio.to_thread.run_sync(_trickle, port, b"", 0.05, DEADLINE)
            whole = await anyio.to_thread.run_sync(_exchange, port, head, INIT)
        assert answer == b"", answer[:80]  # closed, unanswered
        assert took < 0.5 + 2.0, took
        assert silent == b""
        assert quiet_for < 0.5 + 2.0, quiet_for
        assert isinstance(whole, bytes)
        assert whole.startswith(b"HTTP/1.1 200 "), whole
        assert len(app.sessions) == 1  # the one request whose headers came in time


@pytest.mark.anyio
async def test_an_http_read_allocates_only_the_bytes_it_read() -> None:
    """askgate's HTTP/1.1 server is a buffered one: each read's bytes are copied out of one
    kept buffer, so no read allocates asyncio's 256 KiB to shrink it afterwards, which
    fragmented the heap (RSS grew about 110 KiB a minute under the HTTP soak while the bytes in
    use stayed flat). With a plain protocol the peak below is 256 KiB and more."""
    async with served(own=True) as (app, port):
        head = _head(port, length=len(INIT))
        with anyio.fail_after(DEADLINE):
            first = await anyio.to_thread.run_sync(_exchange, port, head, INIT)
            assert isinstance(first, bytes)
            assert first.startswith(b"HTTP/1.1 200 "), first
            tracemalloc.start()
            try:
                for _ in range(5):
                    answer = await anyio.to_thread.run_sync(_exchange, port, head, INIT)
                    assert isinstance(answer, bytes)
                    assert answer.startswith(b"HTTP/1.1 200 "), answer
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        assert peak < 2 * READ_BYTES, peak
        assert len(app.sessions) == 6


@pytest.mark.anyio
async def test_R_HTTP_25_each_request_on_a_kept_connection_has_its_own_header_deadline() -> None:
    """The deadline is one timer per connection that a request's first byte moves: a second
    request trickling its headers on a kept-alive connection is closed within its bound."""
    async with served(own=True, header_timeout_ms=500) as (app, port):

        def answered_then_trickled() -> tuple[bytes, bytes, float]:
            with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as client:
                client.sendall(_head(port, length=len(INIT), Connection="") + INIT)
                first = b""
                while not first.endswith(b"}"):  # bounded by the socket's timeout
                    chunk = client.recv(65536)
                    assert chunk, "the connection closed"
                    first += chunk
                head = _head(port, length=len(INIT), Connection="")
                client.settimeout(0.05)
                began = time.monotonic()
                later, sent = b"", 0
                try:
                    while time.monotonic() - began < DEADLINE:
                        if sent < len(head) - 1:  # never the last byte: the headers never end
                            client.sendall(head[sent : sent + 1])
                            sent += 1
                        try:
                            chunk = client.recv(65536)
                        except TimeoutError:
                            continue
                        if not chunk:
                            break
                        later += chunk
                except OSError:  # reset while writing: the server closed
                    pass
                return first, later, time.monotonic() - began

        with anyio.fail_after(DEADLINE):
            first, later, took = await anyio.to_thread.run_sync(answered_then_trickled)
        assert first.startswith(b"HTTP/1.1 200 "), first[:80]
        assert later == b"", later[:80]  # closed, unanswered
        assert 0.4 < took < 0.5 + 2.0, took
        assert len(app.sessions) == 1


@pytest.mark.anyio
async def test_an_answer_leaves_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """askgate's HTTP/1.1 server holds a response's head for its first body bytes: a JSON
    answer's head and body reach the socket in one write, the same bytes in the same order,
    in one system call."""
    import asyncio.selector_events  # noqa: PLC0415

    transport = asyncio.selector_events._SelectorSocketTransport  # type: ignore[attr-defined]
    plain = transport.write
    writes: list[bytes] = []

    def counted(self: Any, data: bytes) -> None:
        writes.append(bytes(data))
        plain(self, data)

    monkeypatch.setattr(transport, "write", counted)
    async with served(own=True) as (app, port):
        head = _head(port, length=len(INIT))
        with anyio.fail_after(DEADLINE):
            answer = await anyio.to_thread.run_sync(_exchange, port, head, INIT)
        assert len(app.sessions) == 1
    assert isinstance(answer, bytes)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]
    assert answer.endswith(b"}"), answer[-80:]
    assert writes == [answer]


@pytest.mark.anyio
async def test_a_streams_head_leaves_without_waiting_for_an_event() -> None:
    """A held head waits for its body bytes at most until the event loop's next turn: a GET
    stream with nothing to carry gets its head at once, not at its first keepalive."""
    async with served(own=True, keepalive_ms=60_000) as (_app, port):

        def opened_then_get() -> bytes:
            with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as client:
                client.sendall(_head(port, length=len(INIT), Connection="") + INIT)
                answer = b""
                while not answer.endswith(b"}"):  # bounded by the socket's timeout
                    chunk = client.recv(65536)
                    assert chunk, "the connection closed"
                    answer += chunk
                session = answer.split(b"mcp-session-id: ", 1)[1].split(b"\r\n", 1)[0]
                note = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
                client.sendall(
                    _head(port, length=len(note), Connection="", Mcp_Session_Id=session.decode())
                    + note
                )
                answer = b""
                while b"\r\n\r\n" not in answer:
                    chunk = client.recv(65536)
                    assert chunk, "the connection closed"
                    answer += chunk
                assert answer.startswith(b"HTTP/1.1 202 "), answer[:80]
                get = (
                    f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    f"Authorization: Bearer {TOKENS['alice']}\r\n"
                    f"Accept: text/event-stream\r\nMcp-Session-Id: {session.decode()}\r\n"
                    "MCP-Protocol-Version: 2025-06-18\r\n\r\n"
                )
                client.sendall(get.encode())
                client.settimeout(10.0)  # far below the keepalive: the head must come alone
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = client.recv(65536)
                    assert chunk, "the connection closed"
                    head += chunk
                return head

        with anyio.fail_after(DEADLINE):
            head = await anyio.to_thread.run_sync(opened_then_get)
        assert head.startswith(b"HTTP/1.1 200 "), head[:80]
        assert b"content-type: text/event-stream" in head.lower()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_R_HTTP_25_a_body_held_whole_is_read_without_its_deadline(backend: str) -> None:
    """``read_body`` reads a body whose scope says it arrived whole (askgate's HTTP/1.1 server
    says so) without the deadline, and any other under ``body_timeout_ms``: a body that comes
    after a wait is read whole, one that never comes is TIMED_OUT, on either event loop."""
    from askgate.transports.asgi import BODY_WHOLE, TIMED_OUT, read_body  # noqa: PLC0415

    options = rules.HttpOptions(body_timeout_ms=100)

    async def scenario() -> list[object]:
        parts = [b'{"a":', b"1}"]

        async def after_a_wait() -> dict[str, Any]:
            await anyio.sleep(0.01)  # suspends: the body is still on its way
            part = parts.pop(0)
            return {"type": "http.request", "body": part, "more_body": bool(parts)}

        async def never() -> dict[str, Any]:
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        async def late() -> dict[str, Any]:  # slower than the deadline
            await anyio.sleep(0.3)
            return {"type": "http.request", "body": b"{}", "more_body": False}

        with anyio.fail_after(DEADLINE):
            return [
                await read_body(after_a_wait, options),
                await read_body(never, options),
                await read_body(late, options, {BODY_WHOLE: True}),  # trusted: no deadline
                await read_body(late, options, {}),
            ]

    assert anyio.run(scenario, backend=backend) == [b'{"a":1}', TIMED_OUT, b"{}", TIMED_OUT]


@pytest.mark.anyio
async def test_askgates_server_marks_a_body_that_arrived_whole() -> None:
    """The mark :func:`read_body` trusts is set by askgate's protocol once the body is in (the
    request below sends its body after its headers: the mark comes with the body)."""
    from askgate.transports.asgi import BODY_WHOLE  # noqa: PLC0415

    seen: list[object] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        message = await receive()
        seen.append((message.get("more_body"), scope.get(BODY_WHOLE)))
        body = b"{}"
        headers = [(b"content-length", b"2"), (b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async with askgate_serving(lambda _port: app) as (_, port):
        head = _head(port, length=len(INIT))
        with anyio.fail_after(DEADLINE):
            answer = await anyio.to_thread.run_sync(_exchange, port, head, INIT)
    assert isinstance(answer, bytes)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]
    assert seen == [(False, True)]  # the whole body read, and marked so


def test_header_map_lowers_names_and_joins_repeated_ones() -> None:
    from askgate.transports.asgi import header_map  # noqa: PLC0415

    once = [(b"Host", b"127.0.0.1"), (b"accept", b"text/event-stream")]
    assert header_map({"headers": once}) == {"host": "127.0.0.1", "accept": "text/event-stream"}
    repeated = [(b"accept", b"application/json"), (b"x-a", b"\xe9"), (b"Accept", b"text/plain")]
    assert header_map({"headers": repeated}) == {
        "accept": "application/json, text/plain",
        "x-a": "\xe9",
    }
    assert header_map({"headers": tuple(once)}) == header_map({"headers": once})
    assert header_map({}) == {}


def test_header_map_remembers_only_small_header_lists_and_takes_pairs_as_lists() -> None:
    """The header memo holds at most HEADER_MAPS lists of at most HEADER_MAP_BYTES each: a
    request with huge headers (uncapped in size, refused or not) is not kept once it ends; pairs
    given as lists, as ASGI allows, are mapped without the memo instead of failing the request;
    and a remembered map is handed out as a copy, so a caller's change cannot reach the next."""
    from askgate.transports import asgi  # noqa: PLC0415

    asgi._MAPS.clear()
    small = [(b"host", b"127.0.0.1"), (b"x-pad", b"a" * 100)]
    first = asgi.header_map({"headers": small})
    assert tuple(small) in asgi._MAPS
    first["host"] = "changed"
    assert asgi.header_map({"headers": list(small)})["host"] == "127.0.0.1"
    big = [(b"host", b"127.0.0.1"), (b"x-pad", b"b" * (asgi.HEADER_MAP_BYTES + 1))]
    assert asgi.header_map({"headers": big})["x-pad"] == "b" * (asgi.HEADER_MAP_BYTES + 1)
    assert tuple(big) not in asgi._MAPS
    as_lists = [[b"Host", b"127.0.0.1"], [b"accept", b"text/event-stream"]]
    assert asgi.header_map({"headers": as_lists}) == {
        "host": "127.0.0.1",
        "accept": "text/event-stream",
    }
    for n in range(asgi.HEADER_MAPS + 10):
        asgi.header_map({"headers": [(b"x-n", str(n).encode())]})
    assert len(asgi._MAPS) <= asgi.HEADER_MAPS
