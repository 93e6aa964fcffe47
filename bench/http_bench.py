"""MCP servers over Streamable HTTP, side by side: echo throughput, approval round trips, CPU.

    python bench/http_bench.py \\
        --server "python bench/sdk_http_server.py --port {port}" --label sdk \\
        [--server "askgate serve --http 127.0.0.1:{port} --demo" --label askgate] \\
        [--calls 5000] [--in-flight 32] [--sequential 1000] [--elicitations 300] \\
        [--elicit-calls 1000] [--elicit-in-flight 16] [--modern-trips 300] \\
        [--modern-calls 1000] [--modern-in-flight 16] [--clients 32 256] [--client-calls 4000]
        [--client-seconds 15] [--rounds 3] [--profile DIR] [--out bench/results/http.json]

Each ``--server`` is a command line (split like a shell would, no shell involved) in which
``{port}`` is replaced by a free TCP port on 127.0.0.1; the server must serve MCP Streamable HTTP
at ``http://127.0.0.1:{port}/mcp`` with two tools: ``echo(text)``, which returns ``text`` as one
text content block and runs without asking, and ``guarded_echo(text)``, which first sends an
``elicitation/create`` on the call's SSE stream and returns ``text`` once the answer is
``{"action": "accept", "content": {"approve": true}}``; asked in the 2026-07-28 revision,
``guarded_echo`` answers instead with an input-required result and runs on the approving retry
(phase 7). ``--label`` names the servers in order.
The servers are run one after the other, each in a fresh process, and measured the same way:

1. handshake: the port accepts connections, then ``initialize`` (protocolVersion 2025-06-18,
   capabilities ``{"elicitation": {}}``) mints a session (``Mcp-Session-Id``), then
   ``notifications/initialized`` (202) and ``tools/list``, which must list both tools; a server
   that does not get there within ``--init-timeout`` seconds, or exits, is reported as failed and
   the others still run;
2. warm-up: ``--warmup`` echo calls, as in the next phase, not measured;
3. echo throughput: ``--calls`` echo ``tools/call`` POSTs on that one session with exactly
   ``--in-flight`` outstanding, one per keep-alive connection (HTTP/1.1 has one request at a
   time per connection: 32 in flight is 32 connections of one session); each connection sends
   its next call as soon as its response (JSON or an SSE stream) has ended and its result was
   checked. calls/s over wall time; the latency of each call (request written to response
   ended) under that load, p50 and p99; the server's CPU time (user+sys from
   ``/proc/<pid>/stat``, summed over its process tree) across the phase per call;
4. sequential echo: ``--sequential`` echo calls one at a time on one connection: p50 and p99;
5. elicitation round trip, sequential: ``--elicitations`` times, one at a time: POST
   ``tools/call guarded_echo`` on connection A, read A's SSE stream up to the
   ``elicitation/create``, POST the accepting answer on connection B (must be 202), read A's
   stream up to the result (checked) and its end. The round trip is the time from writing the
   call to reading its result: p50 and p99;
6. elicitation throughput: ``--elicit-calls`` such round trips with ``--elicit-in-flight``
   outstanding (two connections each): round trips/s and the server's CPU per round trip;
7. the 2026-07-28 approval round trip, stateless (no session): POST ``tools/call
   guarded_echo`` with the per-request ``_meta`` (``io.modelcontextprotocol/protocolVersion``
   2026-07-28, ``clientCapabilities`` ``{"elicitation": {}}``, ``clientInfo``) and the headers
   ``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name``; its response (JSON or an SSE
   stream) must be ``resultType: "input_required"`` with one ``elicitation/create`` form among
   ``inputRequests`` asking for a boolean ``approve``, and a ``requestState``; then POST the
   retry on the same keep-alive connection with a new id, ``inputResponses`` accepting with
   ``{"approve": true}`` under the request's key, and the ``requestState`` as received; its
   result must be the echo (checked, ``resultType`` absent or ``complete``). The round trip is
   the time from writing the call to reading the retry's result: ``--modern-trips`` one at a
   time (p50 and p99), then ``--modern-calls`` with ``--modern-in-flight`` outstanding, one
   connection each (round trips/s and the server's CPU per round trip). ``--warmup`` / 10 such
   round trips come first, unmeasured. A server that does not serve this revision (its first
   answer is not an input-required result, or anything in this phase fails) gets the reason
   under ``modern_error`` instead of these figures; its other phases still count.
8. concurrent clients, for each N of ``--clients`` (none by default): N clients, each with its
   own keep-alive connection and its own session (``initialize`` then
   ``notifications/initialized`` on that connection, all clients at once), each calling echo
   one call at a time (a closed loop: its next call as soon as its response ended and was
   checked). The calls started before every client has its session warm up and are not
   measured; from then on ``--client-calls`` calls in all, shared by the N clients, or those
   started within ``--client-seconds``: the latency of each call (request written to response
   ended), p50, p99 and max; calls/s; the server's CPU per call; the client's CPU utilisation
   (near 1.0: the figures are the load generator's). A failure here is reported under
   ``clients_<N>_error`` and the other phases' figures stand. Then each session is ended
   with a DELETE (its answer not checked) and the connections closed. This is the figure a
   server shows to N users at once; stdio has no counterpart (a stdio server has exactly one
   client: N clients are N server processes).

The load generator is one thread over non-blocking sockets and ``selectors``, writing
precomputed request bytes and parsing only the status line, the headers it needs, chunked
framing and SSE ``data:`` lines; every JSON-RPC message is still decoded and checked. Its own
CPU per call and utilisation during the echo phase are reported, so that a saturated client
(utilisation near 1.0) shows instead of passing for a slow server. Every phase opens fresh
connections and closes them at its end (servers close idle keep-alive connections after a few
seconds). A watchdog kills a server still running ``--timeout`` seconds after it was started;
a server is stopped with SIGTERM (then SIGKILL) at the end of its run, on failure too.

With ``--profile DIR``, each server given as a Python command line is run under
``stdio_bench.py``'s CPU-time stack sampler (see there): sampling is on for exactly phase 3
(echo throughput; stacks to ``DIR/<label>.folded``) and for phase 5 and 6 (the elicitation
round trips; ``DIR/<label>.1.folded``), and the output adds, per server, the functions taking
the most CPU per echo call. The server must exit normally on SIGTERM for its samples to be
written (uvicorn and ``bench/askgate_hypercorn.py`` do).

With ``--rounds R`` (default 3) the servers take turns R times, a fresh process each time, and
each figure is the median of the rounds; a server that fails once is not run again. The table
goes to stdout; the figures, one object per label, to ``--out`` as JSON. The exit status is 0
when at least one server completed, 1 when all of them failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import selectors
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from stdio_bench import (
    CLK_TCK,
    BenchError,
    Result,
    WatchedProcess,
    percentile,
    phase_file,
    positive,
    profile_servers,
    profile_table,
    rounds,
    spread,
    tree_cpu_seconds,
)
from stdio_bench import combine as combine_rounds
from stdio_bench import table as stdio_table

PROTOCOL_VERSION = "2025-06-18"
MODERN_VERSION = "2026-07-28"
META = "io.modelcontextprotocol/"
CLIENT_INFO = {"name": "askgate-http-bench", "version": "0.1.0"}
READ_CHUNK = 1 << 16
APPROVE = {"action": "accept", "content": {"approve": True}}


@dataclass
class Config:
    calls: int
    in_flight: int
    sequential: int
    elicitations: int
    elicit_calls: int
    elicit_in_flight: int
    modern_trips: int
    modern_calls: int
    modern_in_flight: int
    warmup: int
    text: str
    init_timeout: float
    timeout: float
    clients: tuple[int, ...] = ()
    client_calls: int = 4000
    client_seconds: float = 15.0
    profiled: bool = False


# --- the server process ---------------------------------------------------------------------


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class ServerProcess(WatchedProcess):
    """A server started on a free port in its own process group, with a watchdog."""

    def __init__(self, label: str, argv: list[str], timeout: float, stderr: IO[bytes]) -> None:
        self.port = free_port()
        self.argv = [arg.replace("{port}", str(self.port)) for arg in argv]
        super().__init__(label, self.argv, timeout, stderr, stdin=subprocess.DEVNULL, stdout=stderr)

    def wait_listening(self, deadline: float) -> None:
        while True:
            if self.proc.poll() is not None:
                raise self.gone("exited before listening")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                if time.monotonic() >= deadline:
                    raise self.gone("did not listen in time") from None
                time.sleep(0.02)

    def close(self) -> None:
        """SIGTERM to the process group, a bounded wait, then SIGKILL."""
        self.watchdog.cancel()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is not None:
                break
            self._signal(sig)
            with suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)


@contextmanager
def running(label: str, argv: list[str], timeout: float) -> Iterator[ServerProcess]:
    with tempfile.TemporaryFile() as stderr:
        server = ServerProcess(label, argv, timeout, stderr)
        try:
            yield server
        finally:
            server.close()


# --- the HTTP client ------------------------------------------------------------------------


class Conn:
    """One keep-alive HTTP/1.1 connection with at most one request outstanding.

    ``feed()`` reads what arrived and parses it incrementally: the status line and headers,
    then a Content-Length or chunked body; an ``text/event-stream`` body is split into SSE
    events as they arrive, and each event's ``data`` is decoded into ``messages``.
    """

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        try:
            self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        except OSError as exc:
            raise server.gone(f"refused a connection ({exc})") from exc
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.buf = b""
        self.busy = False
        self.done = False
        self.status = 0
        self.headers: dict[str, str] = {}
        self.messages: list[dict[str, Any]] = []
        self.taken = 0  # messages already looked at by the caller
        self.sent_at = 0
        self.tag: Any = None  # what the driver wants to remember about this request
        self._mode = ""  # "", "length", "chunked"
        self._left = 0  # bytes left in the body (length) or in the current chunk (chunked)
        self._sse = False
        self._body = b""  # JSON body so far, or SSE text not yet split into events

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, data: bytes) -> None:
        """Writes a whole request; the response starts afresh."""
        self.busy = True
        self.done = False
        self.status = 0
        self.headers = {}
        self.messages = []
        self.taken = 0
        self._mode = ""
        self._body = b""
        self.sent_at = time.perf_counter_ns()
        view = memoryview(data)
        while view:
            try:
                view = view[self.sock.send(view) :]
            except BlockingIOError:
                selectors.DefaultSelector().select(0.01)
            except OSError as exc:
                raise self.server.gone(f"dropped a connection ({exc})") from exc

    def feed(self) -> bool:
        """Reads and parses what is there; True once the response has ended."""
        while True:
            try:
                chunk = self.sock.recv(READ_CHUNK)
            except BlockingIOError:
                break
            except OSError as exc:
                raise self.server.gone(f"reset a connection ({exc})") from exc
            if not chunk:
                raise self.server.gone("closed a connection in the middle of a response")
            self.buf += chunk
            if len(chunk) < READ_CHUNK:
                break
        self._parse()
        return self.done

    def _parse(self) -> None:
        if not self._mode:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").split("\r\n")
            self.buf = self.buf[end + 4 :]
            parts = head[0].split(" ", 2)
            self.status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                self.headers[name.strip().lower()] = value.strip()
            self._sse = self.headers.get("content-type", "").startswith("text/event-stream")
            if self.headers.get("transfer-encoding", "").lower() == "chunked":
                self._mode, self._left = "chunked", -1
            else:
                self._mode, self._left = "length", int(self.headers.get("content-length", "0"))
        if self._mode == "length":
            take = self.buf[: self._left]
            self.buf = self.buf[self._left :]
            self._left -= len(take)
            self._body_bytes(take)
            if self._left == 0:
                self._end()
            return
        while True:  # chunked
            if self._left < 0:  # at a chunk-size line
                eol = self.buf.find(b"\r\n")
                if eol < 0:
                    return
                size = int(self.buf[:eol].split(b";")[0], 16)
                self.buf = self.buf[eol + 2 :]
                if size == 0:
                    eot = self.buf.find(b"\r\n")  # no trailers expected: the final CRLF
                    if eot < 0:
                        self.buf = b"0\r\n" + self.buf
                        return
                    self.buf = self.buf[eot + 2 :]
                    self._end()
                    return
                self._left = size
            if len(self.buf) < self._left + 2:
                if self._left and self.buf:
                    take = self.buf[: self._left]
                    self.buf = self.buf[len(take) :]
                    self._left -= len(take)
                    self._body_bytes(take)
                return
            self._body_bytes(self.buf[: self._left])
            self.buf = self.buf[self._left + 2 :]
            self._left = -1

    def _body_bytes(self, data: bytes) -> None:
        self._body += data
        if not self._sse:
            return
        self._body = self._body.replace(b"\r\n", b"\n")
        while True:
            end = self._body.find(b"\n\n")
            if end < 0:
                return
            event, self._body = self._body[:end], self._body[end + 2 :]
            data_lines = [
                line[5:].removeprefix(b" ") for line in event.split(b"\n") if line[:5] == b"data:"
            ]
            if data_lines and any(data_lines):
                self.messages.append(self._decode(b"\n".join(data_lines)))

    def _end(self) -> None:
        if not self._sse and self._body:
            self.messages.append(self._decode(self._body))
        self._body = b""
        self._mode = ""
        self.busy = False
        self.done = True

    def _decode(self, data: bytes) -> dict[str, Any]:
        try:
            msg = json.loads(data)
        except ValueError as exc:
            excerpt = data[:200].decode("utf-8", "replace")
            raise BenchError(
                f"server {self.server.label} sent a non-JSON body (HTTP {self.status}): {excerpt!r}"
            ) from exc
        if not isinstance(msg, dict):
            raise BenchError(f"server {self.server.label} sent a non-object: {msg!r}")
        return msg

    def new_messages(self) -> list[dict[str, Any]]:
        fresh = self.messages[self.taken :]
        self.taken = len(self.messages)
        return fresh

    def close(self) -> None:
        with suppress(OSError):
            self.sock.close()


class Client:
    """One MCP session over any number of connections to one server."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.session: str | None = None
        self.selector = selectors.DefaultSelector()
        self._prefix = b""
        self._set_prefix()

    def _set_prefix(self) -> None:
        self._prefix = post_prefix(self.server.port, self.session)

    def post_bytes(self, body: bytes) -> bytes:
        return self._prefix + str(len(body)).encode() + b"\r\n\r\n" + body

    @contextmanager
    def connections(self, n: int) -> Iterator[list[Conn]]:
        conns: list[Conn] = []
        try:
            for _ in range(n):
                conn = Conn(self.server)
                conns.append(conn)
                self.selector.register(conn, selectors.EVENT_READ, conn)
            yield conns
        finally:
            for conn in conns:
                with suppress(KeyError, ValueError):
                    self.selector.unregister(conn)
                conn.close()

    def wait(self, deadline: float, what: str) -> list[Conn]:
        """The connections with something new, waiting until deadline for at least one."""
        deadline = min(deadline, self.server.hard_deadline)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                if self.server.killed_by_watchdog or time.monotonic() >= self.server.hard_deadline:
                    raise self.server.gone("did not finish in time")
                if self.server.proc.poll() is not None:
                    raise self.server.gone(f"exited while waiting for {what}")
                raise BenchError(f"server {self.server.label} did not answer {what} in time")
            ready = self.selector.select(min(left, 1.0))
            if ready:
                out: list[Conn] = []
                for key, _ in ready:
                    conn: Conn = key.data
                    conn.feed()
                    out.append(conn)
                return out
            if self.server.proc.poll() is not None:
                raise self.server.gone(f"exited while waiting for {what}")

    def exchange(self, conn: Conn, msg: dict[str, Any], deadline: float) -> Conn:
        """One POST and its whole response."""
        conn.send(self.post_bytes(encode(msg)))
        what = str(msg.get("method", "a response"))
        while not conn.done:
            self.wait(deadline, what)
        return conn


def post_prefix(port: int, session: str | None) -> bytes:
    """The head of a POST to /mcp (in ``session`` when given), up to its Content-Length value."""
    lines = [
        "POST /mcp HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
    ]
    if session is not None:
        lines += [f"Mcp-Session-Id: {session}", f"MCP-Protocol-Version: {PROTOCOL_VERSION}"]
    return ("\r\n".join(lines) + "\r\nContent-Length: ").encode()


def encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode()


def expect_status(conn: Conn, wanted: int, what: str) -> None:
    if conn.status != wanted:
        body = json.dumps(conn.messages)[:300]
        raise BenchError(
            f"server {conn.server.label} answered {what} with HTTP {conn.status} "
            f"(wanted {wanted}): {body}"
        )


def result_of(conn: Conn, rid: object, what: str) -> Any:
    """The result for rid among the response's messages; an error or no result fails."""
    for msg in conn.messages:
        if msg.get("id") == rid and "method" not in msg:
            if "error" in msg:
                raise BenchError(f"server {conn.server.label} answered {what} with {msg['error']}")
            return msg.get("result")
    raise BenchError(f"server {conn.server.label} sent no result for {what}: {conn.messages}")


def expect_echo(conn: Conn, tool: str, expected: object) -> None:
    """The call's response is a 200 whose result is the echo of ``expected``, not an error."""
    expect_status(conn, 200, f"tools/call {tool}")
    result = result_of(conn, conn.tag, f"tools/call {tool}")
    if not isinstance(result, dict) or result.get("content") != expected or result.get("isError"):
        raise BenchError(f"server {conn.server.label} answered {tool} {conn.tag} with {result!r}")


# --- the phases -------------------------------------------------------------------------------


def handshake(client: Client, cfg: Config) -> dict[str, Any]:
    deadline = time.monotonic() + cfg.init_timeout
    client.server.wait_listening(deadline)
    params = {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {"elicitation": {}},
        "clientInfo": CLIENT_INFO,
    }
    with client.connections(1) as (conn,):
        client.exchange(
            conn, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}, deadline
        )
        expect_status(conn, 200, "initialize")
        result = result_of(conn, 0, "initialize")
        session = conn.headers.get("mcp-session-id")
        if not isinstance(result, dict) or not session:
            raise BenchError(f"server {client.server.label} minted no session: {conn.messages}")
        client.session = session
        client._set_prefix()
        client.exchange(conn, {"jsonrpc": "2.0", "method": "notifications/initialized"}, deadline)
        expect_status(conn, 202, "notifications/initialized")
        client.exchange(conn, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, deadline)
        expect_status(conn, 200, "tools/list")
        tools = result_of(conn, 1, "tools/list")
    listed = tools.get("tools") if isinstance(tools, dict) else None
    names = [t.get("name") for t in listed or [] if isinstance(t, dict)]
    if "echo" not in names or "guarded_echo" not in names:
        raise BenchError(f"server {client.server.label} lacks echo or guarded_echo: {names}")
    return result


class Ids:
    def __init__(self, first: int) -> None:
        self.next = first

    def take(self) -> int:
        self.next += 1
        return self.next - 1


def echo_calls(client: Client, cfg: Config, ids: Ids, count: int, in_flight: int) -> list[int]:
    """count echo calls with in_flight outstanding, one per connection; latencies in ns."""
    params = json.dumps({"name": "echo", "arguments": {"text": cfg.text}}, separators=(",", ":"))
    head = b'{"jsonrpc":"2.0","id":'
    tail = b',"method":"tools/call","params":' + params.encode() + b"}"
    expected = [{"type": "text", "text": cfg.text}]
    latencies: list[int] = []
    sent = 0

    def start(conn: Conn) -> None:
        nonlocal sent
        rid = ids.take()
        conn.tag = rid
        conn.send(client.post_bytes(head + str(rid).encode() + tail))
        sent += 1

    with client.connections(min(in_flight, count)) as conns:
        for conn in conns:
            start(conn)
        while len(latencies) < count:
            for conn in client.wait(client.server.hard_deadline, "tools/call echo"):
                if not conn.done:
                    continue
                latencies.append(time.perf_counter_ns() - conn.sent_at)
                expect_echo(conn, "echo", expected)
                conn.done = False
                if sent < count:
                    start(conn)
    return latencies


def throughput(server: ServerProcess, client: Client, cfg: Config, ids: Ids) -> dict[str, Any]:
    server0 = tree_cpu_seconds(server.proc.pid)
    client0 = time.process_time()
    t0 = time.perf_counter()
    latencies = echo_calls(client, cfg, ids, cfg.calls, cfg.in_flight)
    wall = time.perf_counter() - t0
    used = time.process_time() - client0
    server1 = tree_cpu_seconds(server.proc.pid)
    cpu = None if server0 is None or server1 is None else server1 - server0
    latencies.sort()
    return {
        "calls": cfg.calls,
        "in_flight": cfg.in_flight,
        "connections": min(cfg.in_flight, cfg.calls),
        "throughput_wall_s": round(wall, 4),
        "calls_per_s": round(cfg.calls / wall, 1),
        "server_cpu_s": None if cpu is None else round(cpu, 3),
        "server_cpu_us_per_call": None if cpu is None else round(cpu / cfg.calls * 1e6, 2),
        "server_cpu_utilisation": None if cpu is None else round(cpu / wall, 3),
        "client_cpu_us_per_call": round(used / cfg.calls * 1e6, 2),
        "client_cpu_utilisation": round(used / wall, 3),
        "loaded_echo_p50_us": round(percentile(latencies, 50) / 1000, 1),
        "loaded_echo_p99_us": round(percentile(latencies, 99) / 1000, 1),
    }


def sequential_echo(client: Client, cfg: Config, ids: Ids) -> dict[str, Any]:
    latencies = sorted(echo_calls(client, cfg, ids, cfg.sequential, 1))
    return {"sequential_calls": cfg.sequential, **spread("echo", latencies)}


def elicit_round_trips(
    client: Client, cfg: Config, ids: Ids, count: int, in_flight: int
) -> list[int]:
    """count guarded_echo calls, each approved over a second connection; latencies in ns
    (call written to result read), with in_flight round trips outstanding."""
    params = json.dumps(
        {"name": "guarded_echo", "arguments": {"text": cfg.text}}, separators=(",", ":")
    )
    head = b'{"jsonrpc":"2.0","id":'
    tail = b',"method":"tools/call","params":' + params.encode() + b"}"
    expected = [{"type": "text", "text": cfg.text}]
    slots = min(in_flight, count)
    latencies: list[int] = []
    sent = 0

    with client.connections(2 * slots) as conns:
        callers, answerers = conns[:slots], conns[slots:]
        partner = dict(zip(map(id, callers), answerers, strict=True))
        back = {id(a): c for c, a in zip(callers, answerers, strict=True)}
        state: dict[int, dict[str, Any]] = {}

        def start(caller: Conn) -> None:
            nonlocal sent
            rid = ids.take()
            caller.tag = rid
            state[id(caller)] = {"asked": False, "answered": False, "result_at": 0}
            caller.send(client.post_bytes(head + str(rid).encode() + tail))
            sent += 1

        def absorb(caller: Conn) -> None:
            """Answers the call's elicitation at once; notes when its result was read."""
            slot = state[id(caller)]
            for msg in caller.new_messages():
                if msg.get("method") == "elicitation/create" and "id" in msg:
                    if slot["asked"]:
                        raise BenchError(f"server {client.server.label} asked twice: {msg}")
                    slot["asked"] = True
                    answer = {"jsonrpc": "2.0", "id": msg["id"], "result": APPROVE}
                    partner[id(caller)].send(client.post_bytes(encode(answer)))
                    slot["answered"] = True
                elif msg.get("id") == caller.tag and "method" not in msg:
                    slot["result_at"] = time.perf_counter_ns()

        def maybe_finish(caller: Conn) -> None:
            """Checks a round trip whose call and answer have both ended; starts the next."""
            absorb(caller)  # the caller may have been read in the same wait as its answerer
            slot = state[id(caller)]
            if caller.done and not slot["asked"]:
                raise BenchError(
                    f"server {client.server.label} answered guarded_echo without asking: "
                    f"{caller.messages}"
                )
            answerer = partner[id(caller)]
            if not (caller.done and slot["answered"] and not answerer.busy):
                return
            if not slot["result_at"]:
                raise BenchError(f"server {client.server.label} ended guarded_echo with no result")
            expect_echo(caller, "guarded_echo", expected)
            latencies.append(slot["result_at"] - caller.sent_at)
            caller.done = False
            answerer.done = False
            if sent < count:
                start(caller)

        for caller in callers:
            start(caller)
        while len(latencies) < count:
            for conn in client.wait(client.server.hard_deadline, "tools/call guarded_echo"):
                if id(conn) in back:  # an answer's 202
                    if conn.done:
                        expect_status(conn, 202, "the elicitation answer")
                        maybe_finish(back[id(conn)])
                    continue
                absorb(conn)
                maybe_finish(conn)
    return latencies


Trips = Callable[[Client, Config, Ids, int, int], list[int]]


def trip_figures(
    server: ServerProcess,
    client: Client,
    cfg: Config,
    ids: Ids,
    trips: Trips,
    prefix: str,
    counts: tuple[int, int, int],
) -> dict[str, Any]:
    """``counts`` = (sequential, calls, in flight): the sequential round trips' p50, p99 and max,
    then the round trips/s and the server's CPU per round trip with ``in flight`` outstanding,
    each figure named ``prefix`` + what it is (``elicit_p50_us``, ``modern_per_s``, ...)."""
    sequential, calls, in_flight = counts
    out: dict[str, Any] = {}
    if sequential:
        seq = sorted(trips(client, cfg, ids, sequential, 1))
        out.update(spread(prefix, seq))
    if calls:
        server0 = tree_cpu_seconds(server.proc.pid)
        t0 = time.perf_counter()
        trips(client, cfg, ids, calls, in_flight)
        wall = time.perf_counter() - t0
        server1 = tree_cpu_seconds(server.proc.pid)
        cpu = None if server0 is None or server1 is None else server1 - server0
        out.update(
            {
                f"{prefix}_calls": calls,
                f"{prefix}_in_flight": min(in_flight, calls),
                f"{prefix}_per_s": round(calls / wall, 1),
                f"{prefix}_server_cpu_us": None if cpu is None else round(cpu / calls * 1e6, 2),
            }
        )
    return out


def elicitation(server: ServerProcess, client: Client, cfg: Config, ids: Ids) -> dict[str, Any]:
    counts = (cfg.elicitations, cfg.elicit_calls, cfg.elicit_in_flight)
    out = trip_figures(server, client, cfg, ids, elicit_round_trips, "elicit", counts)
    return {"elicitations": cfg.elicitations, **out} if cfg.elicitations else out


class NotModernError(BenchError):
    """The server's answer to a 2026-07-28 call was not an input-required result."""


def modern_prefix(server: ServerProcess) -> bytes:
    """The head of a stateless 2026-07-28 ``tools/call guarded_echo`` POST, up to its length."""
    lines = [
        "POST /mcp HTTP/1.1",
        f"Host: 127.0.0.1:{server.port}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        f"MCP-Protocol-Version: {MODERN_VERSION}",
        "Mcp-Method: tools/call",
        "Mcp-Name: guarded_echo",
    ]
    return ("\r\n".join(lines) + "\r\nContent-Length: ").encode()


def approval_key(conn: Conn) -> tuple[str, str]:
    """The key of the one approval form and the requestState of an input-required answer;
    anything else raises NotModernError."""
    label = conn.server.label
    found = [m for m in conn.messages if m.get("id") == conn.tag and "method" not in m]
    if conn.status != 200 or not found or "error" in found[0]:
        excerpt = json.dumps(found[0] if found else conn.messages)[:300]
        raise NotModernError(
            f"server {label} answered a 2026-07-28 call with HTTP {conn.status}: {excerpt}"
        )
    result = found[0].get("result")
    if not isinstance(result, dict) or result.get("resultType") != "input_required":
        raise NotModernError(f"server {label} answered a 2026-07-28 guarded_echo with {result!r}")
    asks = result.get("inputRequests")
    state = result.get("requestState")
    if not isinstance(asks, dict) or len(asks) != 1 or not isinstance(state, str):
        raise BenchError(f"server {label} asked not for one approval: {result!r}")
    ((key, ask),) = asks.items()
    params = ask.get("params") if isinstance(ask, dict) else None
    schema = params.get("requestedSchema") if isinstance(params, dict) else None
    props = schema.get("properties") if isinstance(schema, dict) else None
    approve = props.get("approve") if isinstance(props, dict) else None
    if (
        not isinstance(ask, dict)
        or ask.get("method") != "elicitation/create"
        or not isinstance(approve, dict)
        or approve.get("type") != "boolean"
    ):
        raise BenchError(f"server {label} asked for something else than approve: {ask!r}")
    return key, state


def modern_round_trips(
    client: Client, cfg: Config, ids: Ids, count: int, in_flight: int
) -> list[int]:
    """count stateless 2026-07-28 approval round trips (call, input required, approving retry
    on the same connection) with in_flight outstanding; latencies in ns (call written to the
    retry's result read)."""
    prefix = modern_prefix(client.server)
    meta = {
        f"{META}protocolVersion": MODERN_VERSION,
        f"{META}clientCapabilities": {"elicitation": {}},
        f"{META}clientInfo": CLIENT_INFO,
    }
    arguments = {"text": cfg.text}
    call = json.dumps(
        {"name": "guarded_echo", "arguments": arguments, "_meta": meta}, separators=(",", ":")
    ).encode()
    head = b'{"jsonrpc":"2.0","id":'
    tail = b',"method":"tools/call","params":' + call + b"}"
    expected = [{"type": "text", "text": cfg.text}]
    latencies: list[int] = []
    sent = 0

    def post(conn: Conn, body: bytes) -> None:
        conn.send(prefix + str(len(body)).encode() + b"\r\n\r\n" + body)

    started: dict[int, int] = {}  # id(conn) -> when its call was written
    retrying: set[int] = set()  # id(conn) of the connections whose retry is out

    def start(conn: Conn) -> None:
        nonlocal sent
        rid = ids.take()
        conn.tag = rid
        post(conn, head + str(rid).encode() + tail)
        started[id(conn)] = conn.sent_at
        retrying.discard(id(conn))
        sent += 1

    def retry(conn: Conn) -> None:
        key, state = approval_key(conn)
        rid = ids.take()
        conn.tag = rid
        params = {
            "name": "guarded_echo",
            "arguments": arguments,
            "inputResponses": {key: APPROVE},
            "requestState": state,
            "_meta": meta,
        }
        post(conn, encode({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}))
        retrying.add(id(conn))

    with client.connections(min(in_flight, count)) as conns:
        for conn in conns:
            start(conn)
        while len(latencies) < count:
            for conn in client.wait(client.server.hard_deadline, "a 2026-07-28 guarded_echo"):
                if not conn.done:
                    continue
                conn.done = False
                if id(conn) not in retrying:
                    retry(conn)
                    continue
                latencies.append(time.perf_counter_ns() - started[id(conn)])
                expect_echo(conn, "guarded_echo (the 2026-07-28 retry)", expected)
                result = result_of(conn, conn.tag, "the 2026-07-28 retry")
                if result.get("resultType", "complete") != "complete":
                    raise BenchError(f"server {client.server.label} answered the retry {result!r}")
                if sent < count:
                    start(conn)
    return latencies


def modern(server: ServerProcess, client: Client, cfg: Config, ids: Ids) -> dict[str, Any]:
    """Phase 7; a failure is reported under modern_error, the figures already taken stand."""
    try:
        if cfg.warmup:
            modern_round_trips(client, cfg, ids, max(1, cfg.warmup // 10), 1)
        counts = (cfg.modern_trips, cfg.modern_calls, cfg.modern_in_flight)
        out = trip_figures(server, client, cfg, ids, modern_round_trips, "modern", counts)
    except BenchError as exc:
        return {"modern_error": str(exc)}
    return {"modern_trips": cfg.modern_trips, **out} if cfg.modern_trips else out


INITIALIZED = encode({"jsonrpc": "2.0", "method": "notifications/initialized"})


class ClientsPhase:
    """Phase 8 for ``n`` clients: every connection runs its own client from the start, so no
    connection sits idle (servers close idle keep-alive connections after a few seconds):
    ``initialize``, then ``notifications/initialized`` in the session it minted, then echo
    calls one at a time. Calls started before every client is ready warm up and are not
    measured; from then on, calls are measured until ``calls`` were started or ``seconds``
    passed, and the phase ends when every call out has been answered."""

    def __init__(self, hub: Client, cfg: Config, ids: Ids, calls: int) -> None:
        self.hub = hub
        self.cfg = cfg
        self.ids = ids
        self.calls = calls
        params = {"name": "echo", "arguments": {"text": cfg.text}}
        self.tail = b',"method":"tools/call","params":' + encode(params) + b"}"
        self.expected = [{"type": "text", "text": cfg.text}]
        self.prefixes: dict[int, bytes] = {}
        self.step: dict[int, str] = {}  # id(conn) -> "initialize", "initialized" or "echo"
        self.ready = 0
        self.started_at = 0  # perf_counter_ns when every client was ready, 0 before
        self.stop_at = 0.0
        self.sent = 0  # measured calls started
        self.out = 0  # calls (measured or not) not answered yet
        self.latencies: list[int] = []
        self.server_cpu0: float | None = None  # the server's and the client's CPU seconds
        self.client_cpu0 = 0.0  # when every client was ready

    def begin(self, conn: Conn) -> None:
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {"elicitation": {}},
            "clientInfo": CLIENT_INFO,
        }
        conn.tag = 0
        self.step[id(conn)] = "initialize"
        msg = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
        conn.send(self.hub.post_bytes(encode(msg)))

    def call(self, conn: Conn) -> None:
        rid = self.ids.take()
        conn.tag = rid
        body = b'{"jsonrpc":"2.0","id":%d' % rid + self.tail
        conn.send(self.prefixes[id(conn)] + b"%d\r\n\r\n" % len(body) + body)
        self.out += 1
        if self.started_at:
            self.sent += 1

    def answered(self, conn: Conn) -> None:
        conn.done = False
        step = self.step[id(conn)]
        if step == "initialize":
            expect_status(conn, 200, "initialize")
            result_of(conn, 0, "initialize")
            session = conn.headers.get("mcp-session-id")
            if not session:
                raise BenchError(f"server {conn.server.label} minted no session: {conn.messages}")
            self.prefixes[id(conn)] = prefix = post_prefix(conn.server.port, session)
            self.step[id(conn)] = "initialized"
            conn.send(prefix + b"%d\r\n\r\n" % len(INITIALIZED) + INITIALIZED)
            return
        if step == "initialized":
            expect_status(conn, 202, "notifications/initialized")
            self.step[id(conn)] = "echo"
            self.ready += 1
            if self.ready == len(self.step):  # every client is in: measure from now
                self.server_cpu0 = tree_cpu_seconds(conn.server.proc.pid)
                self.client_cpu0 = time.process_time()
                self.started_at = time.perf_counter_ns()
                self.stop_at = time.monotonic() + self.cfg.client_seconds
            self.call(conn)
            return
        self.out -= 1
        if self.started_at and conn.sent_at >= self.started_at:
            self.latencies.append(time.perf_counter_ns() - conn.sent_at)
        expect_echo(conn, "echo", self.expected)
        if not self.started_at or (self.sent < self.calls and time.monotonic() < self.stop_at):
            self.call(conn)

    def run(self, conns: list[Conn]) -> None:
        for conn in conns:
            self.begin(conn)
        while self.out or self.ready < len(conns):
            for conn in self.hub.wait(self.hub.server.hard_deadline, "many clients' calls"):
                if conn.done:
                    self.answered(conn)

    def end_sessions(self, conns: list[Conn]) -> None:
        """A DELETE per session, its answer read but not judged (a server may not allow it)."""
        deadline = time.monotonic() + 5
        with suppress(BenchError):
            for conn in conns:
                head = self.prefixes[id(conn)].split(b"\r\n")[1:-1]  # Host, session headers
                conn.send(b"DELETE /mcp HTTP/1.1\r\n" + b"\r\n".join(head) + b"\r\n\r\n")
            while any(conn.busy for conn in conns):
                self.hub.wait(deadline, "the DELETE of a session")


def many_clients(server: ServerProcess, cfg: Config, ids: Ids, n: int) -> dict[str, Any]:
    """Phase 8 for ``n`` clients, each with its connection and session; a failure is reported
    under ``clients_<n>_error``, the figures of the other phases stand."""
    key = f"clients_{n}"
    hub = Client(server)
    phase = ClientsPhase(hub, cfg, ids, cfg.client_calls)
    try:
        with hub.connections(n) as conns:
            phase.run(conns)
            ended = time.perf_counter_ns()
            used = time.process_time() - phase.client_cpu0
            server1 = tree_cpu_seconds(server.proc.pid)
            phase.end_sessions(conns)
    except BenchError as exc:
        return {f"{key}_error": str(exc)}
    latencies = sorted(phase.latencies)
    calls = len(latencies)
    wall = (ended - phase.started_at) / 1e9
    server0 = phase.server_cpu0
    cpu = None if server0 is None or server1 is None else server1 - server0
    return {
        f"{key}_calls": calls,
        f"{key}_p50_us": round(percentile(latencies, 50) / 1000, 1),
        f"{key}_p99_us": round(percentile(latencies, 99) / 1000, 1),
        f"{key}_max_us": round(latencies[-1] / 1000, 1),
        f"{key}_per_s": round(calls / wall, 1),
        f"{key}_server_cpu_us": None if cpu is None else round(cpu / calls * 1e6, 2),
        f"{key}_client_cpu_utilisation": round(used / wall, 3),
    }


def bench_one(label: str, argv: list[str], cfg: Config) -> Result:
    result = Result(label, argv)
    try:
        with running(label, argv, cfg.timeout) as server:
            result.command = server.argv
            client = Client(server)
            init = handshake(client, cfg)
            info = init.get("serverInfo") or {}
            result.figures["server_info"] = f"{info.get('name')} {info.get('version')}"
            result.figures["protocol_version"] = init.get("protocolVersion")
            ids = Ids(2)
            if cfg.warmup:
                echo_calls(client, cfg, ids, cfg.warmup, cfg.in_flight)
                if cfg.elicitations or cfg.elicit_calls:
                    elicit_round_trips(client, cfg, ids, max(1, cfg.warmup // 10), 1)
            if cfg.profiled:
                server.proc.send_signal(signal.SIGUSR1)  # the sampler: on (phase 0)
            result.figures.update(throughput(server, client, cfg, ids))
            if cfg.profiled:
                server.proc.send_signal(signal.SIGUSR2)  # off
            if cfg.sequential:
                result.figures.update(sequential_echo(client, cfg, ids))
            if cfg.profiled:
                server.proc.send_signal(signal.SIGUSR1)  # on (phase 1)
            result.figures.update(elicitation(server, client, cfg, ids))
            if cfg.profiled:
                server.proc.send_signal(signal.SIGUSR2)  # off
            if cfg.modern_trips or cfg.modern_calls:
                result.figures.update(modern(server, client, cfg, ids))
            for n in cfg.clients:
                result.figures.update(many_clients(server, cfg, ids, n))
            result.ok = True
    except BenchError as exc:
        result.error = str(exc)
    return result


# --- the report -------------------------------------------------------------------------------

HEADLINE = [
    "calls_per_s",
    "server_cpu_us_per_call",
    "echo_p50_us",
    "elicit_p50_us",
    "elicit_per_s",
    "modern_p50_us",
    "modern_per_s",
]

ROWS = [
    ("calls_per_s", "echo tools/call, calls/s"),
    ("server_cpu_us_per_call", "server CPU per echo, us"),
    ("server_cpu_utilisation", "server CPU utilisation"),
    ("loaded_echo_p50_us", "echo p50 under load, us"),
    ("loaded_echo_p99_us", "echo p99 under load, us"),
    ("echo_p50_us", "echo p50 one at a time, us"),
    ("echo_p99_us", "echo p99 one at a time, us"),
    ("elicit_p50_us", "elicitation trip p50, us"),
    ("elicit_p99_us", "elicitation trip p99, us"),
    ("elicit_per_s", "elicitation trips/s"),
    ("elicit_server_cpu_us", "server CPU per trip, us"),
    ("modern_p50_us", "2026 approval trip p50, us"),
    ("modern_p99_us", "2026 approval trip p99, us"),
    ("modern_per_s", "2026 approval trips/s"),
    ("modern_server_cpu_us", "server CPU per 2026 trip, us"),
    ("client_cpu_us_per_call", "client CPU per echo, us"),
    ("client_cpu_utilisation", "client CPU utilisation"),
]


def combine(rounds: list[Result]) -> Result:
    """The median of each figure over the rounds (see stdio_bench), with this benchmark's
    headline figures per round under "rounds"."""
    out = combine_rounds(rounds)
    if out.ok:
        out.figures["rounds"] = [{k: r.figures.get(k) for k in HEADLINE} for r in rounds]
    return out


def client_rows(clients: tuple[int, ...]) -> list[tuple[str, str]]:
    """The table's rows for phase 8."""
    rows = []
    for n in clients:
        rows += [
            (f"clients_{n}_p50_us", f"echo p50, {n} clients, us"),
            (f"clients_{n}_p99_us", f"echo p99, {n} clients, us"),
            (f"clients_{n}_per_s", f"echo calls/s, {n} clients"),
            (f"clients_{n}_server_cpu_us", f"server CPU per echo, {n} clients, us"),
            (f"clients_{n}_client_cpu_utilisation", f"client CPU utilisation, {n} clients"),
        ]
    return rows


def table(results: list[Result], clients: tuple[int, ...] = ()) -> str:
    lines = [stdio_table(results, ROWS + client_rows(clients), _versus)]
    lines += [
        f"2026-07-28 not measured for {r.label}: {r.figures['modern_error']}"
        for r in results
        if r.ok and r.figures.get("modern_error")
    ]
    lines += [
        f"{n} clients not measured for {r.label}: {r.figures[f'clients_{n}_error']}"
        for r in results
        for n in clients
        if r.ok and r.figures.get(f"clients_{n}_error")
    ]
    return "\n".join(lines)


def ratio(other: Result, base: Result, key: str, lower_is_better: bool = False) -> float | None:
    a, b = other.figures.get(key), base.figures.get(key)
    if not a or not b:
        return None
    return float(b / a if lower_is_better else a / b)


def _versus(other: Result, base: Result) -> str:
    """other's figures as multiples of base's (CPU and latency: base / other, higher is better)."""

    def times(key: str, lower_is_better: bool = False) -> str:
        value = ratio(other, base, key, lower_is_better)
        if value is None:
            return "n/a"
        return f"1/{value:.2f}x" if lower_is_better else f"{value:.2f}x"

    return (
        f"{other.label} vs {base.label}: echo throughput {times('calls_per_s')}; "
        f"CPU per echo {times('server_cpu_us_per_call', True)}; "
        f"echo p50 {times('echo_p50_us', True)}; "
        f"elicitation trip p50 {times('elicit_p50_us', True)}; "
        f"elicitation trips/s {times('elicit_per_s')}; "
        f"2026 approval trip p50 {times('modern_p50_us', True)}; "
        f"2026 approval trips/s {times('modern_per_s')}; "
        f"CPU per 2026 trip {times('modern_server_cpu_us', True)}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--server", action="append", required=True, help="command line with {port}")
    parser.add_argument("--label", action="append", default=[], help="one per --server, in order")
    parser.add_argument("--calls", type=positive, default=5000)
    parser.add_argument("--in-flight", type=positive, default=32)
    parser.add_argument("--sequential", type=int, default=1000, help="echo calls one at a time")
    parser.add_argument("--elicitations", type=int, default=300, help="round trips one at a time")
    parser.add_argument("--elicit-calls", type=int, default=1000, help="round trips, concurrent")
    parser.add_argument("--elicit-in-flight", type=positive, default=16)
    parser.add_argument("--modern-trips", type=int, default=300, help="2026 trips one at a time")
    parser.add_argument("--modern-calls", type=int, default=1000, help="2026 trips, concurrent")
    parser.add_argument("--modern-in-flight", type=positive, default=16)
    parser.add_argument(
        "--clients", type=positive, nargs="*", default=[], help="concurrent clients (phase 8)"
    )
    parser.add_argument("--client-calls", type=positive, default=4000, help="per client count")
    parser.add_argument("--client-seconds", type=float, default=15.0, help="per client count")
    parser.add_argument("--warmup", type=int, default=500, help="echo calls before measuring")
    parser.add_argument("--text", default="hello from the http benchmark")
    parser.add_argument("--init-timeout", type=float, default=15.0, help="seconds")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per server, in all")
    parser.add_argument("--rounds", type=positive, default=3, help="runs per server, interleaved")
    parser.add_argument("--out", type=Path, default=Path("bench/results/http.json"))
    parser.add_argument("--profile", type=Path, metavar="DIR", help="sample each server's stacks")
    parser.add_argument("--profile-hz", type=positive, default=1000, help="samples per CPU second")
    parser.add_argument("--profile-top", type=positive, default=30, help="functions listed")
    args = parser.parse_args()
    if len(args.label) > len(args.server):
        parser.error("more --label than --server")
    labels = args.label + [f"server{i + 1}" for i in range(len(args.label), len(args.server))]
    if len(set(labels)) != len(labels):
        parser.error(f"labels must differ: {labels}")
    for command in args.server:
        if "{port}" not in command:
            parser.error(f"--server needs a {{port}} placeholder: {command!r}")
    cfg = Config(
        calls=args.calls,
        in_flight=args.in_flight,
        sequential=max(0, args.sequential),
        elicitations=max(0, args.elicitations),
        elicit_calls=max(0, args.elicit_calls),
        elicit_in_flight=args.elicit_in_flight,
        modern_trips=max(0, args.modern_trips),
        modern_calls=max(0, args.modern_calls),
        modern_in_flight=args.modern_in_flight,
        warmup=max(0, args.warmup),
        text=args.text,
        init_timeout=args.init_timeout,
        timeout=args.timeout,
        clients=tuple(args.clients),
        client_calls=args.client_calls,
        client_seconds=args.client_seconds,
        profiled=args.profile is not None,
    )

    servers = [
        (label, shlex.split(command)) for label, command in zip(labels, args.server, strict=True)
    ]
    given = dict(servers)
    folded: dict[str, Path] = {}
    if args.profile is not None:
        folded = profile_servers(servers, args.profile, args.profile_hz)
    results = rounds(
        servers, args.rounds, lambda label, argv: bench_one(label, argv, cfg), HEADLINE, combine
    )
    for result in results:  # the port differs per round: keep the command as given
        result.command = given[result.label]

    report = {
        "params": {
            "calls": cfg.calls,
            "in_flight": cfg.in_flight,
            "sequential": cfg.sequential,
            "elicitations": cfg.elicitations,
            "elicit_calls": cfg.elicit_calls,
            "elicit_in_flight": cfg.elicit_in_flight,
            "modern_trips": cfg.modern_trips,
            "modern_calls": cfg.modern_calls,
            "modern_in_flight": cfg.modern_in_flight,
            "modern_protocol_version": MODERN_VERSION,
            "warmup": cfg.warmup,
            "text": cfg.text,
            "protocol_version": PROTOCOL_VERSION,
            "rounds": args.rounds,
            "clients": list(cfg.clients),
            "client_calls": cfg.client_calls,
            "client_seconds": cfg.client_seconds,
            "profiled": cfg.profiled,
            "session": "one per server run (phases 1-6; phase 7 is stateless); "
            "one request at a time per keep-alive connection",
        },
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
            "clk_tck": CLK_TCK,
        },
        "servers": {r.label: r.as_json() for r in results},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(table(results, cfg.clients))
    for r in results:
        path = folded.get(r.label)
        if path is not None and path.exists():
            print(profile_table(path, r.figures.get("server_cpu_us_per_call"), args.profile_top))
        if path is not None and phase_file(path, 1).exists():
            cpu = r.figures.get("elicit_server_cpu_us")
            print(profile_table(phase_file(path, 1), cpu, args.profile_top))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0 if any(r.ok for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
