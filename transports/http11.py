"""askgate's HTTP/1.1 server: the connections ``askgate serve --http`` and ``Server.run_http``
serve, one asyncio protocol each, on httptools' request parser (its public callbacks).

It does I/O only. Whether a connection is admitted (R-HTTP-35), whether a head is too large
(R-HTTP-34), who the client is behind a loopback proxy (R-HTTP-44) and every answer to a request
are decided in :mod:`askgate.core.http` and by the app. The app is an
:class:`~askgate.transports.http.HttpApp`: a POST whose body came whole with its head, or by the
event loop's next poll, is given to :meth:`~askgate.transports.http.HttpApp.answer_whole`
(docs/performance.md) and its answer written without a task; everything else is an ASGI
request, run in a task of its own with this module's ``receive`` and ``send``.

A connection has one deadline at a time, kept by one timer (moved, never re-created per
request): its request head must arrive within ``header_timeout_ms`` of the connection's opening
or of the request's first byte (R-HTTP-25); idle between requests, it is closed after
:data:`KEEP_ALIVE_S`.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import email.utils
import logging
import re
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Final

import httptools

from askgate.core import http as rules

from .asgi import BODY_WHOLE, Message, Scope, Whole, refusal, whole_headers
from .http import DirectStream, HttpApp

__all__ = ["KEEP_ALIVE_S", "READ_BYTES", "Connection", "Listener"]

logger = logging.getLogger("askgate.http")

KEEP_ALIVE_S: Final = 5.0
"""How long a connection idle between requests stays open (uvicorn's default)."""

READ_BYTES: Final = 65536
"""The most one read of a connection takes."""

HIGH_WATER: Final = 65536
"""A request body buffered beyond this many bytes stops reading until the app takes it."""

_READ_BUFFER: Final = memoryview(bytearray(READ_BYTES))
"""The one buffer every connection reads into: a read's bytes are copied out of it before the
next read can start (asyncio calls ``get_buffer`` and ``buffer_updated`` back to back, on the
event loop's one thread). A plain protocol's reads each allocate 256 KiB and shrink it."""


def _status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode()


STATUS_LINE: Final = {status: _status_line(status) for status in range(100, 600)}
_BAD_HEADER: Final = re.compile(rb"[\x00-\x1f\x7f]")
_BAD_NAME: Final = re.compile(rb"[^!#$%&'*+\-.^_`|~0-9A-Za-z]")
_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"
_LAST_CHUNK: Final = b"0\r\n\r\n"
_FAILED: Final = Whole(500, b"Internal Server Error", "text/plain; charset=utf-8")


class _Date:
    """The ``date`` header's line, made once a second."""

    second = -1
    line = b""

    @classmethod
    def now(cls) -> bytes:
        second = int(time.time())
        if second != cls.second:
            cls.second = second
            cls.line = b"date: " + email.utils.formatdate(second, usegmt=True).encode() + b"\r\n"
        return cls.line


class _HeadRefusedError(Exception):
    """Raised by a parser callback to stop parsing a head over a bound (R-HTTP-34)."""


class Listener:
    """What the connections of one listening socket share: the app, the bounds, the count of
    admitted connections (R-HTTP-35) and the open connections (for a graceful stop)."""

    def __init__(self, app: Any, options: rules.HttpOptions) -> None:
        self.app = app  # an HttpApp, or any ASGI app (every request then through ASGI)
        self.answer_whole: Callable[[Scope, bytes], Any] | None = (
            app.answer_whole if isinstance(app, HttpApp) else None
        )
        self.options = options
        self.header_timeout = options.header_timeout_ms / 1000
        self.admitted = 0
        self.connections: set[Connection] = set()
        self.stopping = False
        self.all_closed: asyncio.Event | None = None

    def __call__(self) -> Connection:
        return Connection(self)

    def stop(self) -> None:
        """A graceful stop begins: a connection closes once its response (if any) is done."""
        self.stopping = True
        for connection in list(self.connections):
            connection.stop()

    async def closed(self) -> None:
        """Returns once every connection is closed."""
        if not self.connections:
            return
        self.all_closed = asyncio.Event()
        await self.all_closed.wait()

    def abort_all(self) -> None:
        for connection in list(self.connections):
            connection.abort()

    def _forget(self, connection: Connection) -> None:
        self.connections.discard(connection)
        if not self.connections and self.all_closed is not None:
            self.all_closed.set()


class _Cycle:
    """One request: its scope, its body as it comes, and its response's progress."""

    __slots__ = (
        "body",
        "chunked",
        "closes",
        "complete",
        "continue_wanted",
        "deferred",
        "disconnected",
        "head",
        "keep_alive",
        "read",
        "scope",
        "size",
        "started",
        "waiter",
        "whole",
    )

    def __init__(self, scope: Scope, keep_alive: bool, continue_wanted: bool) -> None:
        self.scope = scope
        self.body: list[bytes] = []
        self.size = 0
        self.whole = False  # the body has arrived whole
        self.read = False  # the app was given the whole body
        self.keep_alive = keep_alive
        self.continue_wanted = continue_wanted
        self.deferred = False  # a POST waiting for its body to be answered whole
        self.started = False
        self.complete = False
        self.chunked = False
        self.closes = False
        self.disconnected = False
        self.head: bytes | None = None  # a response head waiting for its first body bytes
        self.waiter: asyncio.Future[None] | None = None  # a receive waiting for body bytes


class Connection(asyncio.BufferedProtocol):
    """One HTTP/1.1 connection."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.app = listener.app
        self.options = listener.options
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.peer: tuple[str, int] | None = None
        self.local: tuple[str, int] | None = None
        self.admitted = False
        self.refused = False  # answered a refusal: what comes is discarded until the close
        self.closed = False
        self.paused = False  # the transport's buffer is over its high mark
        self.drained: asyncio.Future[None] | None = None
        self.cycle: _Cycle | None = None  # the request being answered
        self.waiting: collections.deque[_Cycle] = collections.deque()  # pipelined behind it
        self.parsing: _Cycle | None = None  # the request whose body is being read
        self.sink: _ChunkSink | None = None
        # the head being parsed
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.in_head = False
        self.head_bytes = 0  # the bytes of the reads that brought the head so far
        self.read_len = 0  # the bytes of the read being parsed
        self.forwarded: bytes | None = None
        self.continue_wanted = False
        # a chunked body's trailer section (R-HTTP-34)
        self.trailer = False
        self.trailer_began = False
        self.trailer_read = 0
        self.trailer_fields = 0
        self.trailer_bytes = 0
        # the one deadline (R-HTTP-25 while a head is awaited, else the keep-alive's)
        self.due: float | None = None
        self.timer: asyncio.TimerHandle | None = None

    # -- the connection ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport
        self.peer = _address(transport.get_extra_info("peername"))
        self.local = _address(transport.get_extra_info("sockname"))
        listener = self.listener
        listener.connections.add(self)
        self._await_head()
        refused = rules.connection_refused(listener.admitted, self.options)  # R-HTTP-35
        if refused is not None:
            self._refuse(refused)
            return
        listener.admitted += 1
        self.admitted = True

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: ARG002
        self.closed = True
        self.due = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        listener = self.listener
        if self.admitted:
            self.admitted = False
            listener.admitted -= 1
        for cycle in (self.cycle, *self.waiting):
            if cycle is not None:
                cycle.disconnected = True
                _wake(cycle)
        self.waiting.clear()
        self.paused = False
        _release(self.drained)
        sink = self.sink
        if sink is not None:
            sink.lost()
        listener._forget(self)

    def get_buffer(self, sizehint: int) -> memoryview:  # noqa: ARG002
        return _READ_BUFFER

    def buffer_updated(self, nbytes: int) -> None:
        if not self.refused:  # a refused connection's bytes are discarded uncopied
            self.data_received(_READ_BUFFER[:nbytes].tobytes())

    def data_received(self, data: bytes) -> None:
        self.read_len = len(data)
        if self.in_head:  # a read inside a head begun by an earlier one
            self.head_bytes += self.read_len
        self.trailer_began = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as error:
            if isinstance(error.__context__, _HeadRefusedError):
                return  # refused already
            raise
        except httptools.HttpParserUpgrade:
            self._refuse(rules.Rejection(400, "Bad Request: protocol upgrades are not served"))
            return
        except httptools.HttpParserError:
            self._refuse(rules.Rejection(400, "Bad Request: invalid HTTP request"))
            return
        if self.refused or self.closed:
            return
        if self.in_head:  # R-HTTP-34: a head still unfinished after this read
            refused = rules.header_block_too_large(self.head_bytes, len(self.headers), self.options)
            if refused is not None:
                self._refuse(refused)
                return
        elif self.trailer and not self.trailer_began:
            self.trailer_read += len(data)
            self._judge_trailer(self.trailer_read, self.trailer_fields)
        parsing = self.parsing
        if parsing is not None and parsing.deferred and not parsing.whole:
            # its body did not come whole in this read: it may by the loop's next poll
            self.loop.call_soon(self._next_turn, parsing)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        _release(self.drained)
        self.drained = None
        sink = self.sink
        if sink is not None:
            sink.pump()  # what the stream made while the transport was paused

    def eof_received(self) -> bool | None:
        return None  # the transport closes itself

    def stop(self) -> None:
        """A graceful stop: an idle connection closes now, a busy one after its response."""
        cycle = self.cycle
        if cycle is None or cycle.complete:
            if self.transport is not None and not self.in_head:
                self.transport.close()
            return
        cycle.keep_alive = False

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # -- the deadline --------------------------------------------------------------------

    def _await_head(self) -> None:
        self._set_due(self.listener.header_timeout)

    def _set_due(self, seconds: float) -> None:
        due = self.due = self.loop.time() + seconds
        timer = self.timer
        if timer is not None and timer.when() > due:  # sooner than the timer: set it anew
            timer.cancel()
            timer = None
        if timer is None:
            self.timer = self.loop.call_at(due, self._expired)

    def _expired(self) -> None:
        self.timer = None
        due = self.due
        if due is None or self.closed:
            return
        if due - self.loop.time() > 0.001:  # moved later: sleep until then
            self.timer = self.loop.call_at(due, self._expired)
            return
        self.due = None
        transport = self.transport
        if transport is not None and not transport.is_closing():
            if self.in_head or self.refused:
                logger.info("closed a connection: its request headers did not arrive in time")
            transport.close()

    # -- httptools' callbacks ----------------------------------------------------------

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.forwarded = None
        self.continue_wanted = False
        self.in_head = True
        self.head_bytes = self.read_len  # the read that began it, whole: judged once if under
        self._await_head()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.in_head:  # a chunked body's trailer section: never a header (R-HTTP-34)
            self.trailer_fields += 1
            self.trailer_bytes += len(name) + len(value) + 4
            self._judge_trailer(self.trailer_bytes, self.trailer_fields)
            return
        name = name.lower()
        value = value.rstrip(b" \t")
        if name == b"expect" and value.lower() == b"100-continue":
            self.continue_wanted = True
        elif name == b"x-forwarded-for":
            self.forwarded = value if self.forwarded is None else self.forwarded + b"," + value
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.due = None
        fields = len(self.headers)
        refused = rules.header_block_too_large(self.head_bytes, fields, self.options)
        if refused is not None:  # the reads were over: judged on the head itself (R-HTTP-34)
            refused = rules.header_block_too_large(self._head_size(), fields, self.options)
        if refused is not None:
            self._refuse(refused)
            raise _HeadRefusedError(refused.reason)
        parser = self.parser
        path, _, query = self.url.partition(b"?")
        client = self.peer
        if self.forwarded is not None and client is not None:  # R-HTTP-44
            client = (rules.forwarded_client(client[0], self.forwarded.decode("latin-1")), 0)
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": parser.get_http_version(),
            "server": self.local,
            "client": client,
            "scheme": "http",
            "method": parser.get_method().decode("ascii"),
            "root_path": "",
            "path": _unquote(path),
            "raw_path": path,
            "query_string": query,
            "headers": self.headers,
        }
        cycle = _Cycle(scope, parser.should_keep_alive(), self.continue_wanted)
        self.parsing = cycle
        if self.cycle is None or self.cycle.complete:
            self._begin(cycle)
        else:  # pipelined behind an unfinished response
            self.waiting.append(cycle)
            if self.transport is not None:
                self.transport.pause_reading()

    def on_body(self, body: bytes) -> None:
        self.trailer = False  # the chunk carries data: not the last
        cycle = self.parsing
        if cycle is None or cycle.disconnected:
            return
        cycle.body.append(body)
        cycle.size += len(body)
        if cycle.size > HIGH_WATER and not cycle.deferred and self.transport is not None:
            self.transport.pause_reading()  # resumed when the app takes it
        _wake(cycle)

    def on_chunk_header(self) -> None:
        # a chunk's size line was read; when no body byte follows, it was the last chunk and
        # its trailer section comes
        self.trailer = self.trailer_began = True
        self.trailer_read = self.trailer_fields = self.trailer_bytes = 0

    def on_chunk_complete(self) -> None:
        self.trailer = False

    def on_message_complete(self) -> None:
        self.trailer = False
        cycle, self.parsing = self.parsing, None
        if cycle is None:
            return
        cycle.whole = True
        cycle.scope[BODY_WHOLE] = True  # the app reads it without a deadline (R-HTTP-25)
        _wake(cycle)
        if self.transport is not None and self.transport.is_closing():
            return  # closed while it came (a trailer section over its bound): no one to answer
        if cycle.deferred and cycle is self.cycle:
            self._serve_whole(cycle)

    def _head_size(self) -> int:
        """The bytes of the whole head just parsed as a client writing it plainly sends them:
        request line, ``name: value`` lines, blank line (R-HTTP-34)."""
        line = len(self.parser.get_method()) + len(self.url) + len(b"  HTTP/1.1\r\n")
        return line + sum(len(n) + len(v) + 4 for n, v in self.headers) + 2

    def _judge_trailer(self, size: int, fields: int) -> None:
        refused = rules.header_block_too_large(size, fields, self.options)
        if refused is not None and self.transport is not None:
            self.trailer = False
            logger.info("closed a connection: %s (its trailer section)", refused.reason)
            self.transport.close()

    # -- serving -----------------------------------------------------------------------

    def _begin(self, cycle: _Cycle) -> None:
        self.cycle = cycle
        if (
            cycle.scope["method"] == "POST"
            and self.listener.answer_whole is not None
            and not cycle.continue_wanted  # the client waits for 100 Continue: ASGI sends it
            and not self.paused
        ):
            if cycle.whole:
                self._serve_whole(cycle)
            else:
                cycle.deferred = True  # answered whole if its body comes by the next poll
            return
        self._run_asgi(cycle)

    def _next_turn(self, cycle: _Cycle) -> None:
        # in the turn of the loop that read the head: again in the next turn, after the poll
        if cycle.deferred and not cycle.whole:
            self.loop.call_soon(self._poll_passed, cycle)

    def _poll_passed(self, cycle: _Cycle) -> None:
        if cycle.deferred and not cycle.whole and not cycle.disconnected:
            cycle.deferred = False  # its body is still coming: the ASGI path reads it
            self._run_asgi(cycle)

    def _serve_whole(self, cycle: _Cycle) -> None:
        """A POST whose body came whole (docs/performance.md)."""
        cycle.deferred = False
        context = contextvars.copy_context()  # the request's own, as a task's would be
        body = b"".join(cycle.body)
        try:
            answer_whole = self.listener.answer_whole
            assert answer_whole is not None  # _begin defers a POST only then
            served = context.run(answer_whole, cycle.scope, body)
        except Exception:
            logger.exception("the HTTP app failed")
            self._write_whole(cycle, _FAILED)
            return
        if served is None:  # refused before its body: through ASGI, which answers it
            self._run_asgi(cycle)
            return
        cycle.body.clear()
        cycle.size = 0
        cycle.read = True
        if isinstance(served, Whole):
            self._write_whole(cycle, served)
        elif isinstance(served, DirectStream):
            self._write_stream(cycle, served)
        else:
            rest = served
            self._task(cycle, lambda: rest(self._receiver(cycle), self._sender(cycle)), context)

    def _run_asgi(self, cycle: _Cycle) -> None:
        scope = cycle.scope
        app = self.app
        self._task(cycle, lambda: app(scope, self._receiver(cycle), self._sender(cycle)))

    def _task(
        self,
        cycle: _Cycle,
        start: Callable[[], Any],
        context: contextvars.Context | None = None,
    ) -> None:
        async def run() -> None:
            try:
                await start()
            except Exception:
                logger.exception("the HTTP app failed")
                if not cycle.started:
                    self._write_whole(cycle, _FAILED)
                    return
            if not cycle.complete and not cycle.disconnected:
                if cycle.started:
                    logger.error("the HTTP app returned without completing its response")
                self._close()

        self.loop.create_task(run(), context=context)

    def _receiver(self, cycle: _Cycle) -> Callable[[], Any]:
        async def receive() -> Message:
            if cycle.continue_wanted and not cycle.started and self.transport is not None:
                cycle.continue_wanted = False
                self.transport.write(_CONTINUE)
            if not cycle.read:
                while not cycle.disconnected and not cycle.whole and not cycle.body:
                    await _wait(cycle, self.loop)
                if not cycle.disconnected:
                    body = b"".join(cycle.body)
                    cycle.body.clear()
                    cycle.size = 0
                    cycle.read = cycle.whole
                    if not cycle.whole and self.transport is not None and self.parsing is cycle:
                        self.transport.resume_reading()
                    return {"type": "http.request", "body": body, "more_body": not cycle.whole}
            while not cycle.disconnected and not cycle.complete:
                await _wait(cycle, self.loop)
            return {"type": "http.disconnect"}

        return receive

    def _sender(self, cycle: _Cycle) -> Callable[[Message], Any]:
        async def send(message: Message) -> None:
            if self.paused and not cycle.disconnected:
                if self.drained is None:
                    self.drained = self.loop.create_future()
                await asyncio.shield(self.drained)
            if cycle.disconnected:
                return
            kind = message["type"]
            if kind == "http.response.start":
                if cycle.started:
                    raise RuntimeError("the response has already started")
                headers = list(message.get("headers", ()))
                for name, value in headers:
                    if _BAD_NAME.search(name) or _BAD_HEADER.search(value):
                        raise RuntimeError("invalid HTTP header")
                status = message["status"]
                framed = status in (204, 304) or cycle.scope["method"] == "HEAD"
                for name, _ in headers:
                    lower = name.lower()
                    if lower in (b"content-length", b"transfer-encoding"):
                        framed = True
                head = self._head(cycle, status, headers)
                if not framed:
                    cycle.chunked = True
                    head += b"transfer-encoding: chunked\r\n"
                cycle.head = head + b"\r\n"
                self.loop.call_soon(self._flush_head, cycle)  # unless body bytes come first
                return
            if kind != "http.response.body":
                raise RuntimeError(f"unexpected ASGI message {kind!r}")
            if not cycle.started or cycle.complete:
                raise RuntimeError("a response body outside a response")
            body = message.get("body", b"")
            more = message.get("more_body", False)
            if cycle.chunked:
                data = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
                if not more:
                    data += _LAST_CHUNK
            else:
                data = bytes(body)
            held, cycle.head = cycle.head, None
            if held is not None:
                data = held + data
            if data and self.transport is not None:
                self.transport.write(data)
            if not more:
                self._end(cycle)

        return send

    def _flush_head(self, cycle: _Cycle) -> None:
        head, cycle.head = cycle.head, None
        if head is not None and not cycle.disconnected and self.transport is not None:
            self.transport.write(head)

    def _head(self, cycle: _Cycle, status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
        """A response's status line and header lines, without the blank line that ends them;
        ``connection: close`` when the connection ends after it."""
        cycle.started = True
        cycle.continue_wanted = False
        content = [STATUS_LINE[status], _Date.now()]
        for name, value in headers:
            lower = name.lower()
            if lower == b"connection" and b"close" in value.lower():
                cycle.closes = True
            content += (lower, b": ", value, b"\r\n")
        if not cycle.keep_alive and not cycle.closes:
            content.append(b"connection: close\r\n")
        return b"".join(content)

    def _write_whole(self, cycle: _Cycle, whole: Whole) -> None:
        status, body, content_type, extra = whole
        head = self._head(cycle, status, whole_headers(body, content_type, extra))
        if self.transport is not None and not cycle.disconnected:
            self.transport.write(b"".join((head, b"\r\n", body)))
        self._end(cycle)

    def _write_stream(self, cycle: _Cycle, served: DirectStream) -> None:
        """A POST's SSE stream that opened at once, without a task: its head and first events
        in one write, then each later event as the stream makes it (:class:`_ChunkSink`)."""
        head = self._head(cycle, 200, served.headers())
        cycle.chunked = True
        content = [head, b"transfer-encoding: chunked\r\n\r\n"]
        sink = _ChunkSink(self, cycle)
        first, events, end = served.start(sink, self.loop)
        content.extend(b"%x\r\n%b\r\n" % (len(data), data) for data in (first, events) if data)
        if end:
            content.append(_LAST_CHUNK)
        if self.transport is not None and not cycle.disconnected:
            self.transport.write(b"".join(content))
        if end:
            self._end(cycle)
            return
        self.sink = sink
        sink.pump = served.pump

    def _end(self, cycle: _Cycle) -> None:
        """A response was written whole: the next request, or the connection's end."""
        cycle.complete = True
        _wake(cycle)
        if cycle is not self.cycle:
            return
        if (
            not cycle.keep_alive
            or cycle.closes
            or self.listener.stopping
            or not cycle.whole  # its body is not read: the next request cannot be found
        ):
            self._close()
            return
        self.cycle = None
        if self.waiting:
            following = self.waiting.popleft()
            if self.transport is not None and not self.waiting:
                self.transport.resume_reading()
            self._begin(following)
            return
        if not self.in_head:
            self._set_due(KEEP_ALIVE_S)  # idle until the next request's first byte

    def _close(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.close()

    def _refuse(self, rejection: rules.Rejection) -> None:
        """Answers ``rejection`` at once, ``connection: close``, and ends the writing side;
        what the client still sends is discarded until it leaves or the header deadline passes
        (a lingering close: R-HTTP-34, R-HTTP-35)."""
        transport = self.transport
        assert transport is not None
        self.refused = True
        self.in_head = False
        cycle = self.cycle
        if cycle is not None and not cycle.complete:  # no answer can go between the bytes of
            logger.info("closed a connection: %s", rejection.reason)  # the one being written
            transport.close()
            return
        status, body, content_type, extra = refusal(rejection, [(b"connection", b"close")])
        content = [STATUS_LINE[status], _Date.now()]
        for name, value in whole_headers(body, content_type, extra):
            content += (name, b": ", value, b"\r\n")
        content += (b"\r\n", body)
        transport.write(b"".join(content))
        if transport.can_write_eof():
            transport.write_eof()  # the client reads the answer, then the end
        else:
            transport.close()
        self._await_head()  # the linger ends at the header deadline at the latest


class _ChunkSink:
    """Where a :class:`~askgate.transports.http.DirectStream` writes its response's body, in
    chunks, by the calls that make its events: nothing while the transport is paused (the
    stream's pump runs again when it resumes), nothing once the client is gone."""

    __slots__ = ("_connection", "_cycle", "pump")

    def __init__(self, connection: Connection, cycle: _Cycle) -> None:
        self._connection = connection
        self._cycle = cycle
        self.pump: Callable[[], None] = _nothing  # the stream's, once it is written

    def writable(self) -> bool:
        return not self._connection.paused or self._cycle.disconnected

    def write(self, data: bytes, end: bool) -> None:
        cycle, connection = self._cycle, self._connection
        transport = connection.transport
        if not cycle.disconnected and not cycle.complete and transport is not None:
            chunk = b"%x\r\n%b\r\n" % (len(data), data) if data else b""
            if end:
                chunk += _LAST_CHUNK
            if transport.is_closing():  # closed before its loss is reported: a client gone
                cycle.disconnected = True
            elif chunk:
                try:
                    transport.write(chunk)
                except (OSError, RuntimeError):  # closed under it (uvloop): a client gone
                    cycle.disconnected = True
        if end:
            self._done()
            if not cycle.complete:
                connection._end(cycle)

    def lost(self) -> None:
        """The connection is gone: what waits, and what comes later, goes nowhere."""
        self._cycle.disconnected = True
        self.pump()

    def abort(self) -> None:
        self._done()
        self._connection._close()

    def _done(self) -> None:
        self.pump = _nothing
        if self._connection.sink is self:
            self._connection.sink = None


def _nothing() -> None:
    return None


def _address(found: object) -> tuple[str, int] | None:
    if isinstance(found, tuple) and len(found) >= 2:
        return str(found[0]), int(found[1])
    return None


def _unquote(path: bytes) -> str:
    if b"%" not in path:
        return path.decode("latin-1")
    from urllib.parse import unquote_to_bytes  # noqa: PLC0415

    return unquote_to_bytes(path).decode("latin-1")


def _wake(cycle: _Cycle) -> None:
    waiter = cycle.waiter
    if waiter is not None:
        cycle.waiter = None
        if not waiter.done():
            waiter.set_result(None)


async def _wait(cycle: _Cycle, loop: asyncio.AbstractEventLoop) -> None:
    waiter = cycle.waiter
    if waiter is None:
        waiter = cycle.waiter = loop.create_future()
    await waiter


def _release(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)
