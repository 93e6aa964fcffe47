"""askgate's own HTTP/1.1 server (``askgate.transports.http11``) answering a whole POST without
an ASGI request cycle (docs/performance.md, "A whole POST without a request cycle"): the same
bytes as uvicorn serving the app through ASGI, exchange by exchange, over raw sockets on
127.0.0.1. Every wait is bounded by a socket timeout; nothing sleeps."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

import anyio
import pytest

from askgate import Context, demo
from askgate.core import http as rules
from askgate.demo import DEMO_POLICY, build_demo
from askgate.policy import parse_policy
from askgate.server import Server
from askgate.transports import http11
from askgate.transports.http import HttpApp
from askgate.transports.http11 import Listener
from askgate.transports.runtime import completes_without_suspending

from .listener import askgate_serving, uvicorn_serving

DEADLINE = 20.0
DEMO_POLICY_TEXT = (Path(demo.__file__).with_name(DEMO_POLICY)).read_text(encoding="utf-8")
VERSION = "2025-06-18"
MODERN = "2026-07-28"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # askgate's HTTP server and uvicorn run on asyncio


def _message(request_id: object, method: str, params: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


INIT = _message(
    0,
    "initialize",
    {
        "protocolVersion": VERSION,
        "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "raw", "version": "0"},
    },
)
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


def _call(request_id: int, tool: str) -> bytes:
    return _message(request_id, "tools/call", {"name": tool, "arguments": {"text": "hi"}})


class _Client:
    """One keep-alive connection, reading responses by their framing."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
        self.buffer = b""

    def close(self) -> None:
        self.sock.close()

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        self.buffer += chunk

    def _take(self, marker: bytes) -> bytes:
        give_up = time.monotonic() + DEADLINE  # keepalive comments would reset a recv timeout
        while marker not in self.buffer:
            if time.monotonic() > give_up:
                raise TimeoutError(f"no {marker!r} within {DEADLINE} s: {self.buffer[-300:]!r}")
            self._more()
        taken, self.buffer = self.buffer.split(marker, 1)
        return taken + marker

    def head(self, body: bytes, headers: dict[str, str], *, expect: bool = False) -> bytes:
        sent = {
            "Host": f"127.0.0.1:{self.port}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Content-Length": str(len(body)),
            **headers,
        }
        if expect:
            sent["Expect"] = "100-continue"
        lines = "".join(f"{name}: {value}\r\n" for name, value in sent.items())
        return f"POST /mcp HTTP/1.1\r\n{lines}\r\n".encode()

    def post(self, body: bytes, headers: dict[str, str]) -> None:
        self.sock.sendall(self.head(body, headers) + body)  # one write: whole with its head

    def continued(self, body: bytes, headers: dict[str, str]) -> bytes:
        """Headers first, the body only once the server said ``100 Continue``."""
        self.sock.sendall(self.head(body, headers, expect=True))
        interim = self._take(b"\r\n\r\n")
        self.sock.sendall(body)
        return interim + self.response()

    def response(self) -> bytes:
        head = self._take(b"\r\n\r\n")
        length = re.search(rb"content-length: (\d+)", head)
        if length is not None:
            while len(self.buffer) < int(length.group(1)):
                self._more()
            size = int(length.group(1))
            body, self.buffer = self.buffer[:size], self.buffer[size:]
            return head + body
        return head + self._take(b"0\r\n\r\n")  # chunked: up to its last chunk

    def until(self, marker: bytes) -> bytes:
        return self._take(marker)


def _script(port: int) -> list[bytes]:
    """Exchanges of every kind a POST gets: answered whole at once, on a stream, refused before
    its body, its body read after a wait; the transcript, in order."""
    seen: list[bytes] = []
    a = _Client(port)
    a.post(INIT, {})
    seen.append(a.response())
    sid = re.search(rb"mcp-session-id: ([A-Za-z0-9_-]+)", seen[0])
    assert sid is not None, seen[0]
    session = {"Mcp-Session-Id": sid.group(1).decode(), "MCP-Protocol-Version": VERSION}
    for body in (INITIALIZED, _call(1, "echo"), _message(2, "ping"), b'{"jsonrpc":'):
        a.post(body, session)
        seen.append(a.response())
    a.post(_call(7, "quick"), session)  # a worker task that answers before the stream's task
    seen.append(a.response())
    seen.append(a.continued(_call(3, "echo"), session))  # read by a request task
    stream = _Client(port)
    stream.post(_call(4, "guarded_echo"), session)
    asked = stream.until(b"elicitation/create")
    seen.append(asked)
    ask_id = re.search(rb'"id":("[^"]*"|\d+),"method":"elicitation/create', asked)
    assert ask_id is not None, asked
    accept = b'{"action":"accept","content":{"approve":true}}'
    a.post(b'{"jsonrpc":"2.0","id":%s,"result":%s}' % (ask_id.group(1), accept), session)
    seen.append(a.response())
    seen.append(stream.until(b"\r\n0\r\n\r\n"))  # the rest of its stream, to its end
    modern = {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        },
        "name": "echo",
        "arguments": {"text": "hi"},
    }
    b = _Client(port)
    b.post(
        _message(5, "tools/call", modern),
        {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "echo"},
    )
    seen.append(b.response())
    unknown = {**session, "Mcp-Session-Id": "unknown"}
    b.post(_message(6, "ping"), unknown)  # refused before its body is read: closed
    seen.append(b.response())
    for client in (a, b, stream):
        client.close()
    return [_masked(exchange) for exchange in seen]


QUICK_POLICY = '[[tools]]\nmatch = "quick"\ndecision = "allow"\n'


def _demo_with_quick() -> Server:
    """The demo, and ``quick``: an async tool not marked as completing without suspending, so
    it runs in a worker task, which returns at its first step."""
    policy = parse_policy(DEMO_POLICY_TEXT + QUICK_POLICY, "demo+quick")
    server = build_demo(policy, configured=True)

    @server.tool()
    async def quick(text: str) -> str:
        """Echoes at once, from a task of its own."""
        return text

    return server


OWN: Final = "askgate"
"""Served by askgate's own HTTP/1.1 server (what ``askgate serve --http`` runs)."""


def _serving(make: Any, protocol: Any) -> Any:
    """``make`` served by askgate's own server (``OWN``), or by uvicorn with ``protocol``."""
    return askgate_serving(make) if protocol == OWN else uvicorn_serving(make, protocol)


def _masked(exchange: bytes) -> bytes:
    """The exchange without what differs from run to run: the date, the session id, a
    stream's tag, an elicitation's id."""
    exchange = re.sub(rb"date: [^\r]*", b"date: -", exchange)
    exchange = exchange.replace(b"server: uvicorn\r\n", b"")
    exchange = re.sub(rb"askgate-elicit-[A-Za-z0-9_-]+", b"askgate-elicit--", exchange)
    exchange = re.sub(rb"arguments digest [0-9a-f]{12}", b"arguments digest -", exchange)
    exchange = re.sub(rb"mcp-session-id: [A-Za-z0-9_-]+", b"mcp-session-id: -", exchange)
    return re.sub(rb"\nid: [A-Za-z0-9_-]+\.", b"\nid: -.", exchange)


def test_a_whole_post_gets_uvicorns_bytes_without_a_request_cycle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same exchanges through askgate's connection and through uvicorn's own give the same
    bytes, and askgate's answered the whole POSTs itself: at once, or by what serves their
    stream, declining the one refused before its body; a request whose body came after a wait,
    and an app mounted behind another ASGI callable, go through ASGI."""
    outcomes: list[str] = []
    answer_whole = HttpApp.answer_whole

    def counted(self: HttpApp, scope: Any, body: bytes) -> Any:
        served = answer_whole(self, scope, body)
        outcomes.append(type(served).__name__)
        return served

    monkeypatch.setattr(HttpApp, "answer_whole", counted)

    async def transcript(protocol: Any, *, wrapped: bool = False) -> list[bytes]:
        def make(port: int) -> Any:
            app = HttpApp(_demo_with_quick(), options=rules.HttpOptions(port=port))
            if not wrapped:
                return app

            async def mounted(scope: Any, receive: Any, send: Any) -> None:
                await app(scope, receive, send)

            mounted.running = app.running  # type: ignore[attr-defined]
            return mounted

        async with _serving(make, protocol) as (app, port), app.running():
            with anyio.fail_after(DEADLINE):
                return await anyio.to_thread.run_sync(_script, port)

    async def scenario() -> tuple[list[bytes], list[str], list[bytes], list[bytes]]:
        fast = await transcript(OWN)
        answered = list(outcomes)
        plain = await transcript("httptools")
        mounted = await transcript(OWN, wrapped=True)
        return fast, answered, plain, mounted

    fast, answered, plain, mounted = anyio.run(scenario, backend="asyncio")
    assert fast == plain
    assert mounted == plain
    assert answered == ["Whole"] * 5 + ["function", "DirectStream", "Whole", "Whole", "NoneType"], (
        answered
    )
    assert len(outcomes) == len(answered)  # neither uvicorn's protocol nor a mount calls it
    assert b'"id":7,"result":{"content":[{"type":"text","text":"hi"}]' in plain[5], plain[5]
    assert plain[6].startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"), plain[6]
    assert b"text/event-stream" in plain[7]
    assert plain[11].startswith(b"HTTP/1.1 404 "), plain[11]
    assert b"connection: close\r\n" in plain[11]


def test_a_kept_connection_idle_past_the_keep_alive_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """askgate's connection keeps its keep-alive timeout (``http11.KEEP_ALIVE_S``) with one
    timer per connection: a request on a kept connection moves it, and the connection is closed
    once idle that long after its last response, not before; a stream that began in the read
    that carried an answered request is not cut by it."""
    idle = 0.2
    monkeypatch.setattr(http11, "KEEP_ALIVE_S", idle)

    def exchange(port: int) -> tuple[list[bytes], float]:
        client = _Client(port)
        client.post(INIT, {})
        answers = [client.response()]
        sid = re.search(rb"mcp-session-id: ([A-Za-z0-9_-]+)", answers[0])
        assert sid is not None, answers[0]
        session = {"Mcp-Session-Id": sid.group(1).decode(), "MCP-Protocol-Version": VERSION}
        client.post(INITIALIZED, session)
        answers.append(client.response())
        # Two requests in one write: the first is answered while the second is still being
        # read; the second's stream outlives the keep-alive timeout and must not be cut.
        streamed = _Client(port)
        ping, call = _message(1, "ping"), _call(2, "guarded_echo")
        streamed.sock.sendall(
            streamed.head(ping, session) + ping + streamed.head(call, session) + call
        )
        answers.append(streamed.response())
        asked = streamed.until(b"elicitation/create")
        streamed.sock.settimeout(idle * 2.5)
        try:
            cut = streamed.sock.recv(65536)  # nothing comes: the stream waits for its answer
        except TimeoutError:
            cut = None
        streamed.sock.settimeout(DEADLINE)
        assert cut is None, cut
        ask_id = re.search(rb'"id":("[^"]*"|\d+),"method":"elicitation/create', asked)
        assert ask_id is not None, asked
        accept = b'{"action":"accept","content":{"approve":true}}'
        client.close()  # idle past the timeout meanwhile: closed by the server
        client = _Client(port)
        client.post(b'{"jsonrpc":"2.0","id":%s,"result":%s}' % (ask_id.group(1), accept), session)
        answers.append(client.response())
        answers.append(streamed.until(b"\r\n0\r\n\r\n"))
        streamed.close()
        answered = time.monotonic()
        try:
            client.sock.recv(1)  # bounded by the socket's timeout
        finally:
            client.close()
        return answers, time.monotonic() - answered

    async def scenario() -> tuple[list[bytes], float]:
        def make(port: int) -> HttpApp:
            return HttpApp(build_demo(configured=True), options=rules.HttpOptions(port=port))

        async with askgate_serving(make) as (app, port), app.running():
            with anyio.fail_after(DEADLINE):
                return await anyio.to_thread.run_sync(exchange, port)

    answers, took = anyio.run(scenario, backend="asyncio")
    statuses = [answer[:12] for answer in answers[:4]]
    assert statuses == [b"HTTP/1.1 200", b"HTTP/1.1 202", b"HTTP/1.1 200", b"HTTP/1.1 202"]
    assert b'"result":{"content":[{"type":"text","text":"hi"}]' in answers[4], answers[4]
    assert idle - 0.05 <= took < idle + 5.0, took


def test_a_request_the_fast_path_declines_asks_the_auth_provider_once() -> None:
    """A whole POST refused by the auth provider (401) goes on through ASGI, which takes the
    verdict answer_whole found instead of asking the provider a second time (a provider may
    count failures, spend one-time tokens or ask a remote service)."""
    asked: list[str | None] = []

    def refusing(headers: Any, client: str | None) -> str | None:  # noqa: ARG001
        asked.append(client)
        return None

    def exchange(port: int) -> bytes:
        client = _Client(port)
        try:
            client.post(INIT, {})
            return client.response()
        finally:
            client.close()

    async def scenario() -> bytes:
        def make(port: int) -> HttpApp:
            return HttpApp(build_demo(), auth=refusing, options=rules.HttpOptions(port=port))

        serving = _serving(make, OWN)
        async with serving as (app, port), app.running():
            with anyio.fail_after(DEADLINE):
                return await anyio.to_thread.run_sync(exchange, port)

    answer = anyio.run(scenario, backend="asyncio")
    assert answer.startswith(b"HTTP/1.1 401 "), answer
    assert asked == ["127.0.0.1"]


def test_R_HTTP_44_a_post_forwarded_by_a_local_proxy_is_judged_by_its_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A whole POST from 127.0.0.1 carrying ``X-Forwarded-For`` is still answered without a
    request cycle, its client the forwarded address (a loopback-only server refuses it, 403),
    the same bytes as uvicorn's own protocol behind its proxy headers middleware; without the
    header the client is the peer (200). From another loopback peer (127.0.0.2, no trusted
    proxy) the header changes nothing."""
    calls: list[str] = []
    answer_whole = HttpApp.answer_whole

    def counted(self: HttpApp, scope: Any, body: bytes) -> Any:
        calls.append(scope["client"][0])
        return answer_whole(self, scope, body)

    monkeypatch.setattr(HttpApp, "answer_whole", counted)
    forwarded = {"X-Forwarded-For": "192.0.2.7"}

    def exchange(port: int) -> list[bytes]:
        answers = []
        for headers in (forwarded, {}, {"X-Forwarded-For": "127.0.0.1"}):
            client = _Client(port)  # a refusal before the body closes its connection
            try:
                client.post(INIT, headers)
                answers.append(client.response())
            finally:
                client.close()
        return answers

    def untrusted(port: int) -> bytes:
        client = _Client.__new__(_Client)
        client.port, client.buffer = port, b""
        client.sock = socket.create_connection(
            ("127.0.0.1", port), timeout=DEADLINE, source_address=("127.0.0.2", 0)
        )
        try:
            client.post(INIT, forwarded)
            return client.response()
        finally:
            client.close()

    async def scenario(protocol: Any) -> tuple[list[bytes], bytes | None]:
        def make(port: int) -> HttpApp:
            return HttpApp(build_demo(), options=rules.HttpOptions(port=port))

        async with _serving(make, protocol) as (app, port), app.running():
            with anyio.fail_after(DEADLINE):
                answers = await anyio.to_thread.run_sync(exchange, port)
                if protocol != OWN:
                    return answers, None
                return answers, await anyio.to_thread.run_sync(untrusted, port)

    fast, other = anyio.run(scenario, OWN, backend="asyncio")
    answered = list(calls)
    plain, _ = anyio.run(scenario, "httptools", backend="asyncio")
    assert [_masked(a) for a in fast] == [_masked(a) for a in plain]
    assert fast[0].startswith(b"HTTP/1.1 403 "), fast[0]
    assert fast[1].startswith(b"HTTP/1.1 200 "), fast[1]
    assert fast[2].startswith(b"HTTP/1.1 200 "), fast[2]  # every hop a proxy: the first
    assert other is not None
    assert other.startswith(b"HTTP/1.1 200 "), other
    assert answered == ["192.0.2.7", "127.0.0.1", "127.0.0.1", "127.0.0.2"]


CHATTY_POLICY = '[[tools]]\nmatch = "chatty"\ndecision = "allow"\n'


class _PostWatched(HttpApp):
    """An app that reports each POST stream it finished serving."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stream_done = anyio.Event()

    async def _post_stream(self, *args: Any) -> None:
        try:
            await super()._post_stream(*args)
        finally:
            self.stream_done.set()


def test_R_HTTP_19_a_call_stream_whose_reader_stalled_loses_its_connection() -> None:
    """Through askgate's connection (a whole POST's stream, written without a cancel scope): a
    call whose client stops reading its stream, past the stall cap, has its connection closed
    even with a write blocked on it; the session is left with no open stream."""
    policy = parse_policy(DEMO_POLICY_TEXT + CHATTY_POLICY, "demo+chatty")
    server = build_demo(policy, configured=True)
    gate = anyio.Event()

    @server.tool()
    async def chatty(ctx: Context) -> str:
        """Logs 16 MB on its call's stream, then waits."""
        chunk = "x" * 100_000
        for _ in range(160):
            await ctx.log("info", chunk)
            await anyio.lowlevel.checkpoint()  # the stream's writer writes meanwhile
        await gate.wait()
        return "done"

    def opened(port: int) -> tuple[str, socket.socket]:
        client = _Client(port)
        client.post(INIT, {})
        sid = re.search(rb"mcp-session-id: ([A-Za-z0-9_-]+)", client.response())
        assert sid is not None
        session = {"Mcp-Session-Id": sid.group(1).decode(), "MCP-Protocol-Version": VERSION}
        for body in (INITIALIZED, _message(1, "logging/setLevel", {"level": "info"})):
            client.post(body, session)
            assert client.response().startswith(b"HTTP/1.1 20")
        client.close()
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(("127.0.0.1", port))
        call = _message(2, "tools/call", {"name": "chatty", "arguments": {}})
        stalled.sendall(_Client.head(cast(Any, client), call, session) + call)  # never read
        return session["Mcp-Session-Id"], stalled

    async def scenario() -> tuple[int, bool]:
        def make(port: int) -> _PostWatched:
            return _PostWatched(server, options=rules.HttpOptions(port=port))

        serving = _serving(make, OWN)
        async with serving as (app, port), app.running():
            with anyio.fail_after(DEADLINE):
                sid, stalled = await anyio.to_thread.run_sync(opened, port)
                try:
                    await app.stream_done.wait()
                    session = app.sessions.by_id[sid]
                    return session.open_streams, bool(app.runtime.state.calls)
                finally:
                    stalled.close()
                    gate.set()

    open_streams, running = anyio.run(scenario, backend="asyncio")
    assert open_streams == 0
    assert running  # the call goes on without its connection (R-HTTP-19)


class _Kept(asyncio.Transport):
    """A connection's transport that keeps what is written."""

    def __init__(self) -> None:
        super().__init__()
        self.out: list[bytes] = []

    def write(self, data: Any) -> None:
        self.out.append(bytes(data))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        peers = {"sockname": ("127.0.0.1", 8765), "peername": ("127.0.0.1", 50000)}
        return peers.get(name, default)

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        return None

    def resume_reading(self) -> None:
        return None


def test_a_body_read_by_the_next_poll_is_answered_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A POST whose body comes in a read after its headers' (a client writing them apart), by
    the event loop's next poll, is answered by the fast path; one whose body is still coming
    after that goes through ASGI, as does one that asks for ``100 Continue``; each gets the
    answer it would get whole. Fed to askgate's connection read by read, on one connection."""

    served: list[str] = []
    answer_whole = HttpApp.answer_whole

    def counted(self: HttpApp, scope: Any, body: bytes) -> Any:
        found = answer_whole(self, scope, body)
        served.append(json.loads(body).get("method", "answer"))
        return found

    monkeypatch.setattr(HttpApp, "answer_whole", counted)
    head = _Client.head

    async def scenario() -> list[bytes]:
        app = HttpApp(build_demo(), options=rules.HttpOptions(port=8765))
        async with app.running():
            protocol = Listener(app, app.options)()
            kept = _Kept()
            protocol.connection_made(kept)
            client = cast(Any, type("C", (), {"port": 8765})())
            protocol.data_received(head(client, INIT, {}) + INIT)
            sid = re.search(rb"mcp-session-id: ([A-Za-z0-9_-]+)", kept.out[-1])
            assert sid is not None, kept.out
            session = {"Mcp-Session-Id": sid.group(1).decode(), "MCP-Protocol-Version": VERSION}
            answers = []
            for body, turns in ((INITIALIZED, 0), (_call(1, "echo"), 1), (_call(2, "echo"), 3)):
                kept.out.clear()
                protocol.data_received(head(client, body, session))
                for _ in range(turns):
                    await asyncio.sleep(0)  # one turn of the loop each
                protocol.data_received(body)
                for _ in range(10):  # bounded: a request task answers within a few turns
                    if kept.out:
                        break
                    await asyncio.sleep(0)
                answers.append(_masked(b"".join(kept.out)))
            kept.out.clear()
            protocol.data_received(head(client, _call(3, "echo"), session, expect=True))
            for _ in range(10):  # bounded: the request task answers 100 Continue
                if kept.out:
                    break
                await asyncio.sleep(0)
            assert kept.out == [b"HTTP/1.1 100 Continue\r\n\r\n"], kept.out
            return answers

    answers = asyncio.run(scenario())
    assert served == ["initialize", "notifications/initialized", "tools/call"]
    assert answers[0].startswith(b"HTTP/1.1 202 "), answers[0]
    assert answers[1] == answers[2].replace(b'"id":2', b'"id":1'), answers
    assert b'"id":1,"result":{"content":[{"type":"text","text":"hi"}]' in answers[1], answers[1]


PRIMED = "2025-11-25"
"""A revision whose streams open with a priming event and number their events (R-HTTP-18)."""


def _get(client: _Client, session: dict[str, str], last_event_id: bytes) -> None:
    lines = "".join(f"{name}: {value}\r\n" for name, value in session.items())
    client.sock.sendall(
        f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{client.port}\r\n"
        f"Accept: text/event-stream\r\n{lines}".encode()
        + b"Last-Event-ID: "
        + last_event_id
        + b"\r\n\r\n"
    )


def _asked(client: _Client) -> tuple[bytes, bytes, bytes]:
    """Reads a call's stream up to its ``elicitation/create`` event, whole: what was read, the
    event's id and the elicitation's id."""
    read = client.until(b"elicitation/create")
    read += client.until(b"\n\n")
    event_ids = re.findall(rb"\nid: ([A-Za-z0-9_.-]+)\n", b"\n" + read)
    ask_id = re.search(rb'"id":("[^"]*"|\d+),"method":"elicitation/create', read)
    assert event_ids, read
    assert ask_id is not None, read
    return read, event_ids[-1], ask_id.group(1)


def _accepting(ask_id: bytes) -> bytes:
    accept = b'{"action":"accept","content":{"approve":true}}'
    return b'{"jsonrpc":"2.0","id":%s,"result":%s}' % (ask_id, accept)


def _takeover_script(port: int) -> list[bytes]:
    """A whole POST's stream taken over by a GET with its Last-Event-ID while its connection
    is open, then that connection used again; another's client gone before its answer, the
    answer read by a GET that resumes it; the transcript, in order."""
    seen: list[bytes] = []
    a = _Client(port)
    init = _message(
        0,
        "initialize",
        {
            "protocolVersion": PRIMED,
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    )
    a.post(init, {})
    opened = a.response()
    sid = re.search(rb"mcp-session-id: ([A-Za-z0-9_-]+)", opened)
    assert sid is not None, opened
    session = {"Mcp-Session-Id": sid.group(1).decode(), "MCP-Protocol-Version": PRIMED}
    a.post(INITIALIZED, session)
    seen.append(a.response())
    # taken over by a GET while the POST's connection is open and idle
    s = _Client(port)
    s.post(_call(4, "guarded_echo"), session)
    read, event_id, ask_id = _asked(s)
    seen.append(read)
    g = _Client(port)
    _get(g, session, event_id)
    seen.append(g.until(b"\r\n\r\n"))  # the GET's head
    seen.append(s.until(b"\r\n0\r\n\r\n"))  # the POST's response ends, cleanly
    a.post(_accepting(ask_id), session)
    seen.append(a.response())
    seen.append(g.until(b"\r\n0\r\n\r\n"))  # the call's result on the GET, then its end
    for client in (s, g):  # both connections are kept alive and serve the next request
        client.post(_call(5, "echo"), session)
        seen.append(client.response())
    # the client gone before its answer: the answer is kept for the GET that resumes
    d = _Client(port)
    d.post(_call(6, "guarded_echo"), session)
    read, event_id, ask_id = _asked(d)
    seen.append(read)
    d.close()
    a.post(_accepting(ask_id), session)
    seen.append(a.response())
    r = _Client(port)
    _get(r, session, event_id)
    seen.append(r.response())
    for client in (a, s, g, r):
        client.close()
    return [_masked(exchange) for exchange in seen]


def test_R_HTTP_20_a_whole_posts_stream_is_taken_over_and_resumed_as_through_asgi() -> None:
    """Through askgate's connection, a whole POST's stream (written by the fast path's ``send``)
    taken over by a GET with Last-Event-ID ends its own response cleanly and its connection
    serves the next request; a stream whose client left before its answer is resumed by a GET;
    every byte as through uvicorn's own protocol."""

    async def transcript(protocol: Any) -> list[bytes]:
        def make(port: int) -> HttpApp:
            return HttpApp(build_demo(), options=rules.HttpOptions(port=port))

        async with _serving(make, protocol) as (app, port), app.running():
            with anyio.fail_after(DEADLINE):
                return await anyio.to_thread.run_sync(_takeover_script, port)

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        return await transcript(OWN), await transcript("httptools")

    fast, plain = anyio.run(scenario, backend="asyncio")
    assert fast == plain
    assert b"\nretry: " in fast[1]  # primed: its events have ids
    assert fast[2].startswith(b"HTTP/1.1 200 OK\r\n"), fast[2]
    assert fast[3] == b"\r\n0\r\n\r\n", fast[3]  # the taken-over response: its end, no more
    assert fast[4].startswith(b"HTTP/1.1 202 "), fast[4]
    assert b'"id":4,"result":{"content":[{"type":"text","text":"hi"}]' in fast[5], fast[5]
    for answer in fast[6:8]:
        assert b'"id":5,"result":{"content":[{"type":"text","text":"hi"}]' in answer, answer
    assert fast[9].startswith(b"HTTP/1.1 202 "), fast[9]
    assert b'"id":6,"result":{"content":[{"type":"text","text":"hi"}]' in fast[10], fast[10]
    assert fast[10].endswith(b"\r\n0\r\n\r\n"), fast[10]


# -- a stream that opens at once, written without a request task (docs/performance.md) ----------


class _Written(_Kept):
    """A kept transport that can be closed."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


BIG_POLICY = '[[tools]]\nmatch = "big"\ndecision = "ask"\nprompt = "Allow big?"\n'


def _demo_with_big() -> Server:
    """The demo, and ``big``: asks first, then answers 5 MB at once."""
    policy = parse_policy(DEMO_POLICY_TEXT + BIG_POLICY, "demo+big")
    server = build_demo(policy, configured=True)

    @server.tool()
    @completes_without_suspending
    async def big() -> str:
        """Five megabytes of text."""
        return "x" * 5_000_000

    return server


async def _turns(done: Any) -> None:
    """Runs the event loop a turn at a time until ``done()``, for at most 100 turns."""
    for _ in range(100):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError("not within 100 turns of the event loop")


class _InProcess:
    """askgate's connection over kept transports, one app and session: each connection is fed
    whole requests, and what it wrote is read back, without sockets or timing."""

    def __init__(self, app: HttpApp, version: str = VERSION) -> None:
        self.app = app
        self.version = version
        self.listener = Listener(app, app.options)
        self.client = cast(Any, type("C", (), {"port": 8765})())
        self.session: dict[str, str] = {}
        self.served: list[Any] = []

    def connect(self) -> tuple[Any, _Written]:
        protocol = self.listener()
        kept = _Written()
        protocol.connection_made(kept)
        return protocol, kept

    def post(self, connection: tuple[Any, _Written], body: bytes) -> None:
        protocol, _ = connection
        protocol.data_received(_Client.head(self.client, body, self.session) + body)

    async def open(self) -> tuple[Any, _Written]:
        a = self.connect()
        init = _message(
            0,
            "initialize",
            {
                "protocolVersion": self.version,
                "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        )
        self.post(a, init)
        sid = re.search(rb"mcp-session-id: ([A-Za-z0-9_-]+)", a[1].out[-1])
        assert sid is not None, a[1].out
        self.session = {
            "Mcp-Session-Id": sid.group(1).decode(),
            "MCP-Protocol-Version": self.version,
        }
        self.post(a, INITIALIZED)
        await _turns(lambda: len(a[1].out) == 2)
        return a

    def open_streams(self) -> int:
        return self.app.sessions.by_id[self.session["Mcp-Session-Id"]].open_streams

    def asked(self, kept: _Written) -> tuple[bytes, bytes]:
        """The event id and the elicitation id of the ``elicitation/create`` written."""
        read = b"".join(kept.out)
        event_id = re.findall(rb"\nid: ([A-Za-z0-9_.-]+)\nevent: message\ndata: [^\n]*elicit", read)
        ask_id = re.search(rb'"id":("[^"]*"|\d+),"method":"elicitation/create', read)
        assert event_id, read
        assert ask_id is not None, read
        return event_id[-1], ask_id.group(1)

    def get(self, connection: tuple[Any, _Written], last_event_id: bytes) -> None:
        lines = "".join(f"{name}: {value}\r\n" for name, value in self.session.items())
        get = "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:8765\r\nAccept: text/event-stream\r\n"
        connection[0].data_received(
            f"{get}{lines}".encode() + b"Last-Event-ID: " + last_event_id + b"\r\n\r\n"
        )


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What every ``answer_whole`` of the test returned, in order."""
    into: list[Any] = []
    answer_whole = HttpApp.answer_whole

    def captured(self: HttpApp, scope: Any, body: bytes) -> Any:
        served = answer_whole(self, scope, body)
        into.append(served)
        return served

    monkeypatch.setattr(HttpApp, "answer_whole", captured)
    return into


@dataclass
class _Opened:
    """A call's stream that opened at once, on a connection of its own (``protocol`` writing
    to ``kept``), its :class:`DirectStream` (``direct``), beside the session's first
    connection (``first``), which answers its elicitation."""

    side: _InProcess
    first: tuple[Any, _Written]
    protocol: Any
    kept: _Written
    direct: Any


@asynccontextmanager
async def _opened_at_once(
    served: list[Any],
    *,
    server: Server | None = None,
    version: str = VERSION,
    body: bytes | None = None,
    transport: _Written | None = None,
) -> AsyncIterator[_Opened]:
    """The demo (or ``server``) served in process at ``version``, a session opened, then
    ``body`` (a ``guarded_echo`` call) POSTed whole on a new connection (its transport
    ``transport`` when given), whose stream opens at once: written without a request task."""
    app = HttpApp(build_demo() if server is None else server, options=rules.HttpOptions(port=8765))
    async with app.running():
        side = _InProcess(app, version)
        first = await side.open()
        protocol, kept = side.connect()
        if transport is not None:
            protocol.connection_made(transport)
            kept = transport
        side.post((protocol, kept), _call(4, "guarded_echo") if body is None else body)
        yield _Opened(side, first, protocol, kept, served[-1])


def _tick_now(direct: Any) -> None:
    """Fires the stream's keep-alive timer now, as if its quiet time had passed."""
    assert direct._timer is not None
    direct._timer.cancel()
    direct._due = 0.0
    direct._tick()


def test_a_stream_opened_at_once_waits_for_a_paused_writer_and_ends_by_its_reply(
    served: list[Any],
) -> None:
    """A call whose ``elicitation/create`` came in the step that fed it is written without a
    request task, head and event in one write; while the transport is paused its reply is not
    written, nor a keep-alive comment for it (a chunk is pending), and it is written when the
    transport resumes, ending the response with the same bytes as unpaused; the connection
    then serves its next request."""

    async def run(pause: bool) -> tuple[list[bytes], list[bytes]]:
        async with _opened_at_once(served) as opened:
            side, a, protocol, kept = opened.side, opened.first, opened.protocol, opened.kept
            s = (protocol, kept)
            assert len(kept.out) == 1, kept.out  # written as it was read: no request task
            assert b"elicitation/create" in kept.out[0], kept.out
            direct = opened.direct
            assert type(direct).__name__ == "DirectStream"
            assert side.open_streams() == 1
            asked = list(kept.out)
            if pause:
                protocol.pause_writing()
            a[1].out.clear()
            side.post(a, _accepting(side.asked(kept)[1]))
            assert a[1].out[0].startswith(b"HTTP/1.1 202 "), a[1].out
            if pause:
                assert kept.out == asked  # the reply waits for the reader
                assert direct._stream.done
                _tick_now(direct)  # quiet, but a chunk is pending: no comment
                assert kept.out == asked
                assert side.open_streams() == 1
                protocol.resume_writing()
            assert side.open_streams() == 0
            assert direct.ended
            assert direct._timer is None
            assert direct._stream.pusher is None
            assert direct._stream.stopper is None  # the stream kept does not keep the connection
            rest = kept.out[len(asked) :]
            kept.out.clear()
            side.post(s, _call(5, "echo"))  # the connection serves its next request
            assert b'"id":5,"result"' in b"".join(kept.out), kept.out
            return [_masked(x) for x in asked], [_masked(x) for x in rest]

    unpaused = asyncio.run(run(False))
    paused = asyncio.run(run(True))
    assert paused == unpaused
    (reply,) = paused[1]
    assert b'"id":4,"result":{"content":[{"type":"text","text":"hi"}]' in reply, reply
    assert reply.endswith(b"\r\n0\r\n\r\n"), reply


def test_R_HTTP_22_a_stream_written_without_a_task_gets_keepalive_comments_when_quiet(
    served: list[Any],
) -> None:
    """The one keep-alive timer of a stream written without a task: fired before its quiet
    time passed (a write moved it) it writes nothing and sleeps again; fired after, it writes a
    ``: keepalive`` comment chunk; once the response ended it is cancelled."""

    async def scenario() -> None:
        async with _opened_at_once(served) as opened:
            side, a, direct, kept = opened.side, opened.first, opened.direct, opened.kept
            written = len(kept.out)
            timer = direct._timer
            assert timer is not None
            direct._timer.cancel()
            direct._tick()  # early: its due time is a keep-alive period away
            assert len(kept.out) == written
            assert direct._timer is not None
            assert direct._timer is not timer
            _tick_now(direct)
            assert kept.out[written:] == [b"d\r\n" + rules.KEEPALIVE + b"\r\n"], kept.out
            side.post(a, _accepting(side.asked(kept)[1]))
            assert kept.out[-1].endswith(b"\r\n0\r\n\r\n"), kept.out
            assert direct._timer is None

    asyncio.run(scenario())


def test_R_HTTP_19_a_stream_written_without_a_task_loses_a_stalled_reader(
    served: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A paused stream written without a task, given more than the stall cap, closes its
    connection with its response unfinished, as uvicorn's request cycle does; the session is
    left with no open stream and the call's reply stays in the stream for a resume."""

    async def scenario() -> None:
        big = _message(4, "tools/call", {"name": "big", "arguments": {}})
        async with _opened_at_once(served, server=_demo_with_big(), body=big) as opened:
            side, a, protocol, kept = opened.side, opened.first, opened.protocol, opened.kept
            direct = opened.direct
            asked = list(kept.out)
            protocol.pause_writing()
            side.post(a, _accepting(side.asked(kept)[1]))
            await _turns(lambda: direct.ended)
            assert kept.out == asked  # nothing written past the cap
            assert kept.closed
            assert not protocol.cycle.complete
            assert side.open_streams() == 0
            stream = direct._stream
            assert stream.done
            assert stream.writer is None
            assert b"x" * 1000 in stream.log[-1][1]

    with caplog.at_level("WARNING"):
        asyncio.run(scenario())
    assert "reader stalled" in caplog.text


@pytest.mark.parametrize("reply_first", [False, True])
def test_R_HTTP_20_a_stream_written_without_a_task_whose_client_left_is_resumed(
    served: list[Any], reply_first: bool
) -> None:
    """The client of a stream written without a task leaves while the call waits, or while
    its reply waits for a paused transport: the reply is written nowhere, the stream ends (no
    open stream left), and a GET with the elicitation's event id replays the reply."""

    async def scenario() -> bytes:
        async with _opened_at_once(served) as opened:
            side, a, protocol, kept = opened.side, opened.first, opened.protocol, opened.kept
            direct = opened.direct
            event_id, ask_id = side.asked(kept)
            asked = list(kept.out)
            protocol.pause_writing()
            if reply_first:  # the reply waits for the paused transport when the client goes
                side.post(a, _accepting(ask_id))
                assert not direct.ended
            protocol.connection_lost(None)
            if not reply_first:
                assert side.open_streams() == 1  # the call goes on: its stream is open
                side.post(a, _accepting(ask_id))
            assert kept.out == asked
            assert direct.ended
            assert side.open_streams() == 0
            r = side.connect()
            side.get(r, event_id)
            await _turns(lambda: b"".join(r[1].out).endswith(b"\r\n0\r\n\r\n"))
            return b"".join(r[1].out)

    resumed = asyncio.run(scenario())
    assert resumed.startswith(b"HTTP/1.1 200 OK\r\n"), resumed
    assert b'"id":4,"result":{"content":[{"type":"text","text":"hi"}]' in resumed, resumed


@pytest.mark.parametrize("paused", [False, True])
def test_R_HTTP_20_a_stream_written_without_a_task_is_taken_over_by_a_get(
    served: list[Any], paused: bool
) -> None:
    """A GET with the stream's Last-Event-ID takes over a stream written without a task: the
    old response ends cleanly when it is taken (when its transport resumes, if paused), its
    keep-alive timer is cancelled and nothing more is written to it; the reply goes to the
    GET, and the old connection serves its next request."""

    async def scenario() -> None:
        async with _opened_at_once(served, version=PRIMED) as opened:
            side, a, protocol, kept = opened.side, opened.first, opened.protocol, opened.kept
            s = (protocol, kept)
            direct = opened.direct
            event_id, ask_id = side.asked(kept)
            written = len(kept.out)
            if paused:
                protocol.pause_writing()
            g = side.connect()
            side.get(g, event_id)
            await _turns(lambda: bool(g[1].out))
            assert g[1].out[0].startswith(b"HTTP/1.1 200 OK\r\n"), g[1].out
            if paused:
                assert len(kept.out) == written
                assert not direct.ended
                _tick_now(direct)  # quiet, but no longer its stream: no comment
                assert len(kept.out) == written
                protocol.resume_writing()
            assert kept.out[written:] == [b"0\r\n\r\n"], kept.out
            assert direct.ended
            assert direct._timer is None
            assert direct._stream.pusher is None
            side.post(a, _accepting(ask_id))
            await _turns(lambda: b"".join(g[1].out).endswith(b"\r\n0\r\n\r\n"))
            assert b'"id":4,"result"' in b"".join(g[1].out)
            assert kept.out[written + 1 :] == []
            side.post(s, _call(5, "echo"))
            assert b'"id":5,"result"' in b"".join(kept.out[written + 1 :]), kept.out

    asyncio.run(scenario())


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_stream_that_opens_at_once_is_served_through_asgi_on_either_loop(
    backend: str,
) -> None:
    """Served through ASGI (any server, hypercorn on trio among them), a stream that opened at
    once is written by its request's task with ``send``: its ``elicitation/create``, then its
    reply, ending the response."""

    async def scenario() -> list[dict[str, Any]]:
        app = HttpApp(build_demo(), options=rules.HttpOptions(port=8765))
        async with app.running():

            async def request(body: bytes, headers: dict[str, str], sent: list[Any]) -> None:
                pairs = [
                    (b"host", b"127.0.0.1:8765"),
                    (b"content-type", b"application/json"),
                    (b"accept", b"application/json, text/event-stream"),
                    *((k.lower().encode(), v.encode()) for k, v in headers.items()),
                ]
                scope = {
                    "type": "http",
                    "method": "POST",
                    "path": "/mcp",
                    "headers": pairs,
                    "client": ("127.0.0.1", 50000),
                }
                given = [{"type": "http.request", "body": body, "more_body": False}]

                async def receive() -> dict[str, Any]:
                    if given:
                        return given.pop()
                    await anyio.sleep_forever()
                    raise AssertionError("unreachable")

                async def send(message: Any) -> None:
                    sent.append(message)

                await app(scope, receive, send)

            first: list[Any] = []
            await request(INIT, {}, first)
            sid = dict(first[0]["headers"])[b"mcp-session-id"].decode()
            session = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": VERSION}
            await request(INITIALIZED, session, [])
            stream: list[Any] = []
            with anyio.fail_after(DEADLINE):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(request, _call(4, "guarded_echo"), session, stream)
                    while not any(b"elicitation/create" in m.get("body", b"") for m in stream):
                        await anyio.sleep(0)  # bounded by fail_after: the task writes it
                    body = b"".join(m.get("body", b"") for m in stream)
                    ask = re.search(rb'"id":("[^"]*"|\d+),"method":"elicitation/create', body)
                    assert ask is not None, body
                    await request(_accepting(ask.group(1)), session, [])
            return stream

    stream = anyio.run(scenario, backend=backend)
    assert stream[0]["type"] == "http.response.start"
    assert (b"content-type", b"text/event-stream") in stream[0]["headers"]
    assert stream[-1]["more_body"] is False
    assert b'"id":4,"result":{"content":[{"type":"text","text":"hi"}]' in b"".join(
        m.get("body", b"") for m in stream
    )


class _ClosedUnder(_Written):
    """A transport closed under its protocol before the loss is reported: ``is_closing`` says
    so, or (``raising``) it does not and its write raises, as uvloop's does."""

    def __init__(self, raising: bool) -> None:
        super().__init__()
        self.raising = raising

    def is_closing(self) -> bool:
        return self.closed and not self.raising

    def write(self, data: Any) -> None:
        if self.closed:
            raise RuntimeError("unable to perform operation: the handler is closed")
        super().write(data)


@pytest.mark.parametrize("raising", [False, True])
def test_a_stream_whose_transport_closed_under_it_fails_no_other_request(
    served: list[Any], raising: bool
) -> None:
    """A stream written without a task whose transport was closed before its loss was
    reported: the reply, made by another connection's request, goes nowhere, that request is
    answered as usual (202), and the stream ends, leaving no open stream."""

    async def scenario() -> None:
        kept = _ClosedUnder(raising)
        async with _opened_at_once(served, transport=kept) as opened:
            side, a, protocol, direct = opened.side, opened.first, opened.protocol, opened.direct
            cycle = protocol.cycle
            asked = list(kept.out)
            kept.closed = True
            a[1].out.clear()
            side.post(a, _accepting(side.asked(kept)[1]))
            assert a[1].out[0].startswith(b"HTTP/1.1 202 "), a[1].out
            assert kept.out == asked
            assert direct.ended
            assert side.open_streams() == 0
            assert cycle.disconnected

    asyncio.run(scenario())
