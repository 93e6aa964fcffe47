"""Streamable HTTP at its edges (issue #28, spec/http.md R-HTTP-34 .. R-HTTP-36): request heads
bounded in bytes and fields (431), open connections bounded (503), a session quota per
principal (429), and a real ``askgate serve --http`` whose memory returns to its baseline after
connections sent big header blocks. Raw sockets on 127.0.0.1; every wait is bounded by a socket
timeout or a deadline; nothing sleeps to synchronise."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from askgate.__main__ import _HTTP_LIMIT_FLAGS, main
from askgate.core import http as rules
from askgate.demo import build_demo
from askgate.transports import http_server
from askgate.transports.auth import BearerAuth
from askgate.transports.http import HttpApp

from .listener import askgate_serving
from .test_http_robust import INIT

DEADLINE = 30.0
TOKENS = {"alice": "alice-token-0123456789abcdef", "bob": "bob-token-0123456789abcdefgh"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn runs on asyncio


@asynccontextmanager
async def served(**options: Any) -> AsyncIterator[tuple[HttpApp, int]]:
    """The configured demo behind alice's and bob's bearer tokens, served on a free loopback
    port by askgate's own HTTP/1.1 server with ``options`` (what ``askgate serve --http``
    runs)."""
    limits = rules.HttpOptions(**options)

    def make(port: int) -> HttpApp:
        return HttpApp(
            build_demo(configured=True),
            auth=BearerAuth(TOKENS),
            options=rules.HttpOptions(port=port, **options),
        )

    async with askgate_serving(make, limits) as (app, port), app.running():
        yield app, port


def head(
    port: int, *, who: str = "alice", extra: bytes = b"", close: bool = True, length: int = 0
) -> bytes:
    """An ``initialize`` POST's head (or one announcing a body of ``length`` bytes), ``extra``
    header lines before its last one."""
    lines = [
        b"POST /mcp HTTP/1.1",
        b"Host: 127.0.0.1:%d" % port,
        b"Authorization: Bearer " + TOKENS[who].encode(),
        b"Content-Type: application/json",
        b"Accept: application/json, text/event-stream",
        *([b"Connection: close"] if close else []),
    ]
    length = length or len(INIT)
    return b"\r\n".join(lines) + b"\r\n" + extra + b"Content-Length: %d\r\n\r\n" % length


def read_answer(client: socket.socket) -> tuple[int, dict[bytes, bytes], bytes]:
    """One response read off ``client`` (a length-framed one, as every answer here is): its
    status, its headers (names lower-cased) and its body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        assert chunk, f"the connection closed before an answer: {data[:200]!r}"
        data += chunk
    top, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = top.split(b"\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get(b"content-length", b"0"))
    while len(body) < length:
        chunk = client.recv(65536)
        assert chunk, "the connection closed inside an answer"
        body += chunk
    return int(status_line.split()[1]), headers, body


def closed_by_server(client: socket.socket) -> bool:
    """Whether the server ends the connection (reads up to its end, under the timeout)."""
    try:
        while client.recv(65536):
            pass
    except OSError:
        return True  # a reset is an end too
    return True


def exchange(port: int, data: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
    """``data`` sent on a new connection, the answer read, then the connection's end."""
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as client:
        client.sendall(data)
        client.shutdown(socket.SHUT_WR)
        answer = read_answer(client)
        assert closed_by_server(client)
        return answer


def reason(body: bytes) -> str:
    message: str = json.loads(body)["error"]["message"]
    return message


# -- the pure verdicts ---------------------------------------------------------------------------


def test_R_HTTP_34_header_block_too_large_judges_bytes_then_fields() -> None:
    options = rules.HttpOptions(max_header_bytes=100, max_headers=3)
    assert rules.header_block_too_large(100, 3, options) is None  # at the bounds: admitted
    over_bytes = rules.header_block_too_large(101, 0, options)
    assert over_bytes == rules.Rejection(
        431, "Request Header Fields Too Large: the request head is over 100 bytes"
    )
    over_fields = rules.header_block_too_large(0, 4, options)
    assert over_fields == rules.Rejection(
        431, "Request Header Fields Too Large: more than 3 header fields"
    )
    assert rules.header_block_too_large(101, 4, options) == over_bytes
    defaults = rules.HttpOptions()
    assert (defaults.max_header_bytes, defaults.max_headers) == (16 * 1024, 100)
    assert rules.header_block_too_large(16 * 1024, 100, defaults) is None
    for bad in (0, -1, True, "16"):
        with pytest.raises(ValueError, match="max_header_bytes"):
            rules.HttpOptions(max_header_bytes=bad)  # type: ignore[arg-type]


def test_R_HTTP_35_connection_refused_counts_the_admitted_ones() -> None:
    options = rules.HttpOptions(max_connections=2)
    assert rules.connection_refused(0, options) is None
    assert rules.connection_refused(1, options) is None
    refused = rules.connection_refused(2, options)
    assert refused == rules.Rejection(503, "Service Unavailable: too many open connections")
    assert rules.HttpOptions().max_connections == 1000
    with pytest.raises(ValueError, match="max_connections"):
        rules.HttpOptions(max_connections=0)


def test_R_HTTP_36_mint_refuses_a_principal_at_its_quota_and_no_one_else() -> None:
    options = rules.HttpOptions(max_sessions=5, max_sessions_per_principal=2)
    assert rules.HttpOptions().max_sessions_per_principal == 128
    table = rules.Sessions()
    counter = iter(range(1, 1000))

    def random() -> bytes:
        return next(counter).to_bytes(16, "big")

    table, first = rules.mint(table, random(), "alice", 0, options)
    table, second = rules.mint(table, random(), "alice", 0, options)
    assert isinstance(first, rules.Session)
    assert isinstance(second, rules.Session)
    after, refused = rules.mint(table, random(), "alice", 0, options)
    assert refused == rules.Rejection(
        429, "Too Many Requests: too many sessions for this principal"
    )
    assert after is table  # nothing changes
    for _ in range(2):  # bob is served all the same, up to his own quota
        table, minted = rules.mint(table, random(), "bob", 0, options)
        assert isinstance(minted, rules.Session), minted
    table, third_bob = rules.mint(table, random(), "bob", 0, options)
    assert isinstance(third_bob, rules.Rejection)
    assert third_bob.status == 429
    table, carol = rules.mint(table, random(), "carol", 0, options)
    assert isinstance(carol, rules.Session)
    _, full = rules.mint(table, random(), "dave", 0, options)
    assert full == rules.Rejection(503, "Service Unavailable: too many sessions")  # in all
    table, gone = rules.end(table, first.id)  # an ended session frees its principal's place
    assert gone == first
    table, again = rules.mint(table, random(), "alice", 0, options)
    assert isinstance(again, rules.Session)
    assert again.principal == "alice"


def test_R_HTTP_34_R_HTTP_35_R_HTTP_36_the_bounds_are_flags_and_limits_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``askgate serve --http`` takes each bound as a flag, its default in ``--help``;
    ``Server.run_http`` takes them as ``limits``; a value under 1 or an unknown name is refused
    in one line, exit status 2, before anything is served."""
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for flag, default in (
        ("--max-header-bytes", 16384),
        ("--max-headers", 100),
        ("--max-connections", 1000),
        ("--max-sessions-per-principal", 128),
    ):
        assert flag in help_text
        assert (
            help_text.split(flag + " N ", 1)[1].split(" --", 1)[0].endswith(f"(default: {default})")
        ), flag
        assert main(["serve", "--demo", "--http", "127.0.0.1:0", flag, "0"]) == 2
        assert capsys.readouterr().err == f"askgate: {flag} wants N >= 1, got 0\n"
        assert main(["serve", "--demo", flag, "5"]) == 2
        assert capsys.readouterr().err == (
            f"askgate: {flag} applies to --http only (stdio has no network)\n"
        )
    server = build_demo(configured=True)
    assert server.run_http(port=0, limits={"max_bogus": 1}) == 2
    assert capsys.readouterr().err == (
        "askgate refuses to start: limits: no such bound 'max_bogus'\n"
    )
    assert server.run_http(port=0, limits={"max_connections": 0}) == 2
    assert capsys.readouterr().err == ("askgate refuses to start: max_connections=0 must be >= 1\n")


def test_R_HTTP_34_every_bound_of_the_http_transport_is_a_flag_with_its_default(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every bound of :class:`HttpOptions` (all its fields but the port, hosts, origins and the
    two stream timings) is a flag of ``askgate serve --http``, whose ``--help`` shows the
    field's default, and a value given reaches the transport's ``serve_http`` as that field."""
    timings = {"port", "allowed_hosts", "allowed_origins", "retry_ms", "keepalive_ms"}
    fields = {f.name: f.default for f in rules.HttpOptions.__attrs_attrs__}
    assert {dest for _, dest, _ in _HTTP_LIMIT_FLAGS} == set(fields) - timings
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    argv = ["serve", "--demo", "--http", "127.0.0.1:0"]
    for n, (flag, dest, _) in enumerate(_HTTP_LIMIT_FLAGS):
        shown = help_text.split(flag + " N ", 1)[1].split(" --", 1)[0]
        assert shown.endswith(f"(default: {fields[dest]})"), flag
        argv += [flag, str(1000 + n)]
    given: dict[str, Any] = {}

    def serve_http(*_args: Any, **kwargs: Any) -> int:
        given.update(kwargs)
        return 0

    monkeypatch.setattr(http_server, "serve_http", serve_http)
    assert main(argv) == 0
    assert given["limits"] == {dest: 1000 + n for n, (_, dest, _) in enumerate(_HTTP_LIMIT_FLAGS)}


# -- the bounds, live ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_R_HTTP_34_a_head_over_the_byte_bound_is_431_closed_and_the_server_serves_on() -> (
    None
):
    async with served() as (app, port):
        whole_big = head(port, extra=b"X-Big: " + b"a" * (20 * 1024) + b"\r\n")  # one read
        endless = head(port, extra=b"X-Big: " + b"a" * (4 * 1024 * 1024))  # never ends
        just_under = head(port, extra=b"X-Big: " + b"a" * (15 * 1024) + b"\r\n")
        with anyio.fail_after(DEADLINE):
            for data in (whole_big + INIT, endless):
                status, headers, body = await anyio.to_thread.run_sync(exchange, port, data)
                assert status == 431, body
                assert headers[b"connection"] == b"close"
                assert reason(body) == (
                    "Request Header Fields Too Large: the request head is over 16384 bytes"
                )
            status, _, body = await anyio.to_thread.run_sync(exchange, port, just_under + INIT)
            assert status == 200, body
            # A small head with a 200 KB body in the same reads: the body is not the head's.
            padded = INIT + b" " * 200_000
            whole = head(port, length=len(padded)) + padded
            status, _, body = await anyio.to_thread.run_sync(exchange, port, whole)
            assert status == 200, body
            status, _, body = await anyio.to_thread.run_sync(exchange, port, head(port) + INIT)
            assert status == 200, body
        assert len(app.sessions) == 3  # the refused heads reached nothing


@pytest.mark.anyio
async def test_R_HTTP_34_more_header_fields_than_the_bound_is_431_and_the_next_is_served() -> None:
    async with served(max_headers=20) as (app, port):
        many = b"".join(b"X-Field-%d: v\r\n" % n for n in range(30))
        with anyio.fail_after(DEADLINE):
            status, headers, body = await anyio.to_thread.run_sync(
                exchange, port, head(port, extra=many) + INIT
            )
            assert status == 431, body
            assert headers[b"connection"] == b"close"
            assert reason(body) == "Request Header Fields Too Large: more than 20 header fields"
            # On a kept connection: a first request served, the second refused, then the end.
            with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as client:
                client.sendall(head(port, close=False) + INIT)
                assert (await anyio.to_thread.run_sync(read_answer, client))[0] == 200
                client.sendall(head(port, extra=many, close=False) + INIT)
                status, _, body = await anyio.to_thread.run_sync(read_answer, client)
                assert status == 431, body
                assert await anyio.to_thread.run_sync(closed_by_server, client)
            status, _, body = await anyio.to_thread.run_sync(exchange, port, head(port) + INIT)
            assert status == 200, body
        assert len(app.sessions) == 2


@pytest.mark.anyio
async def test_R_HTTP_34_a_trailer_section_over_the_bound_closes_the_connection() -> None:
    """A chunked POST whose trailer section never ends (httptools would hold the line whole
    until the body deadline) has its connection closed once a read of it passes the bound; a
    small trailer section is served."""
    async with served(body_timeout_ms=60_000) as (app, port):
        chunked = head(port).replace(
            b"Content-Length: %d\r\n" % len(INIT), b"Transfer-Encoding: chunked\r\n"
        )
        body = b"%x\r\n%b\r\n0\r\n" % (len(INIT), INIT)

        def endless_trailer() -> bytes:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
                client.sendall(chunked + body + b"X-Trailer: ")
                answer = b""
                try:
                    for _ in range(64):  # at most 4 MiB: the bound is 16 KiB
                        client.sendall(b"a" * 65536)
                    while chunk := client.recv(65536):
                        answer += chunk
                except (ConnectionResetError, BrokenPipeError):  # the close, as a reset: the
                    pass  # client was still writing (a timeout is no close: it fails)
                return answer

        with anyio.fail_after(DEADLINE):
            status, _, answer = await anyio.to_thread.run_sync(
                exchange, port, chunked + body + b"X-Small: 1\r\n\r\n"
            )
            assert status == 200, answer
            assert await anyio.to_thread.run_sync(endless_trailer) == b""  # closed, unanswered
            status, _, answer = await anyio.to_thread.run_sync(exchange, port, head(port) + INIT)
            assert status == 200, answer
        assert len(app.sessions) == 2


@pytest.mark.anyio
async def test_R_HTTP_34_a_trailer_section_in_one_read_is_bounded_and_never_a_header() -> None:
    """A chunked POST whose whole trailer section, over the bounds, comes in the read that
    ends the body has its connection closed unanswered; and a field of a trailer section is
    never one of the request's headers: credentials sent only there authenticate no one
    (401)."""
    async with served(body_timeout_ms=60_000) as (app, port):
        chunked = head(port).replace(
            b"Content-Length: %d\r\n" % len(INIT), b"Transfer-Encoding: chunked\r\n"
        )
        body = b"%x\r\n%b\r\n0\r\n" % (len(INIT), INIT)
        many = b"".join(b"X-T%d: %s\r\n" % (n, b"v" * 8) for n in range(3000)) + b"\r\n"
        anonymous = chunked.replace(b"Authorization: Bearer " + TOKENS["alice"].encode(), b"X: y")
        in_trailer = b"Authorization: Bearer " + TOKENS["alice"].encode() + b"\r\n\r\n"

        def sent_whole(data: bytes) -> bytes:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
                client.sendall(data)
                answer = b""
                with contextlib.suppress(ConnectionResetError):
                    while chunk := client.recv(65536):
                        answer += chunk
                return answer

        with anyio.fail_after(DEADLINE):
            assert await anyio.to_thread.run_sync(sent_whole, chunked + body + many) == b""
            status, _, answer = await anyio.to_thread.run_sync(
                exchange, port, anonymous + body + in_trailer
            )
            assert status == 401, answer
            status, _, answer = await anyio.to_thread.run_sync(exchange, port, head(port) + INIT)
            assert status == 200, answer
        assert len(app.sessions) == 1


@pytest.mark.anyio
async def test_R_HTTP_35_connections_past_the_bound_are_refused_503_until_one_closes() -> None:
    async with served(max_connections=2) as (app, port):
        with anyio.fail_after(DEADLINE):
            held = [socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) for _ in "ab"]
            try:
                for client in held:  # both admitted: each is answered and kept open
                    client.sendall(head(port, close=False) + INIT)
                    assert (await anyio.to_thread.run_sync(read_answer, client))[0] == 200
                for _ in range(3):  # every further one is refused, clearly, and closed
                    status, headers, body = await anyio.to_thread.run_sync(
                        exchange, port, head(port) + INIT
                    )
                    assert status == 503, body
                    assert headers[b"connection"] == b"close"
                    assert reason(body) == "Service Unavailable: too many open connections"
                # One held connection ends (the server closes it after its answer: its
                # connection_lost runs before the client sees the end).
                client = held.pop()
                client.sendall(head(port) + INIT)
                assert (await anyio.to_thread.run_sync(read_answer, client))[0] == 200
                assert await anyio.to_thread.run_sync(closed_by_server, client)
                client.close()
                status, _, body = await anyio.to_thread.run_sync(exchange, port, head(port) + INIT)
                assert status == 200, body  # admitted again
            finally:
                for client in held:
                    client.close()
        assert len(app.sessions) == 4


@pytest.mark.anyio
async def test_R_HTTP_36_alice_past_her_session_quota_is_refused_while_bob_is_served() -> None:
    async with served(max_sessions_per_principal=3) as (app, port):
        with anyio.fail_after(DEADLINE):
            for _ in range(3):
                status, headers, body = await anyio.to_thread.run_sync(
                    exchange, port, head(port) + INIT
                )
                assert status == 200, body
                assert b"mcp-session-id" in headers
            for _ in range(2):
                status, headers, body = await anyio.to_thread.run_sync(
                    exchange, port, head(port) + INIT
                )
                assert status == 429, body
                assert b"mcp-session-id" not in headers
                assert reason(body) == "Too Many Requests: too many sessions for this principal"
            status, headers, body = await anyio.to_thread.run_sync(
                exchange, port, head(port, who="bob") + INIT
            )
            assert status == 200, body
            assert b"mcp-session-id" in headers
        principals = sorted(s.principal for s in app.sessions.by_id.values())
        assert principals == ["alice"] * 3 + ["bob"]


# -- memory of a real `askgate serve --http` ----------------------------------------------------

BIG_HEADER = 16 * 1024 * 1024
"""The header value each of the measured connections sends (the issue's flood, scaled down)."""
FLOODS = 4
RSS_SLACK = 16 * 1024 * 1024
"""How far above its baseline the server's RSS may be during and after the floods: under one
flood's size, far above what the bounds let a connection hold (16 KiB and one 64 KiB read)."""


def rss(pid: int) -> int:
    """The resident set of process ``pid``, in bytes (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_R_HTTP_34_a_served_process_holds_no_flood_and_returns_to_its_baseline(
    tmp_path: Path,
) -> None:
    """``askgate serve --demo --http`` is sent, on four connections at once, a head with a
    16 MiB header each (complete, so a server without the bound answers it too): every one is
    answered 431, and the server's RSS, measured while the four are open and after they closed,
    stays within 16 MiB of its baseline (without the bound it held the four heads, 64 MiB)."""
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{who} {token}\n" for who, token in TOKENS.items()))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "askgate", "serve", "--demo", "--http"]
    command += [f"127.0.0.1:{port}", "--auth", "bearer", "--tokens", str(tokens)]
    command += ["--log-level", "info"]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, bufsize=1)
    try:
        assert server.stderr is not None
        while True:
            ready, _, _ = select.select([server.stderr], [], [], DEADLINE)
            assert ready, "the server did not say it listens"
            line = server.stderr.readline()
            assert line, "the server ended before it listened"
            if "serving Streamable HTTP on" in line:
                break
        for _ in range(5):  # warm: the paths a request takes are loaded and allocated
            assert exchange(port, head(port) + INIT)[0] == 200
        baseline = rss(server.pid)
        clients = [socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) for _ in "abcd"]
        statuses: list[int] = []
        try:
            flood = head(port, extra=b"X-Big: " + b"a" * BIG_HEADER + b"\r\n", close=False)
            flood += INIT

            def send(client: socket.socket) -> None:
                client.sendall(flood)

            senders = [threading.Thread(target=send, args=(c,)) for c in clients]
            for sender in senders:
                sender.start()
            # each answered while all four are open
            statuses.extend(read_answer(client)[0] for client in clients)
            for sender in senders:
                sender.join(DEADLINE)
                assert not sender.is_alive()
            during = rss(server.pid)
        finally:
            for client in clients:
                client.close()
        assert exchange(port, head(port) + INIT)[0] == 200  # after the four ends were read
        after = rss(server.pid)
        print(  # the figures, for the record (pytest -s)
            f"RSS baseline {baseline / 2**20:.1f} MiB, during {during / 2**20:.1f} MiB, "
            f"after {after / 2**20:.1f} MiB ({FLOODS} x {BIG_HEADER // 2**20} MiB heads)"
        )
        assert statuses == [431] * FLOODS
        assert during - baseline < RSS_SLACK, (baseline, during)
        assert after - baseline < RSS_SLACK, (baseline, after)
    finally:
        server.terminate()
        server.wait(timeout=DEADLINE)
