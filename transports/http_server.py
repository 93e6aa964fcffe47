"""A whole process serving Streamable HTTP with uvicorn: what ``Server.run_http`` and
``askgate serve --http`` run, through the one function :func:`serve_http`.

Where to listen and whether to refuse is decided before this module is reached
(:func:`askgate.core.http.listen_or_refuse` for the command, :func:`run_http` with
:func:`askgate.core.http.run_http_refusal` for Python, R-HTTP-13). This module checks that the
server can start (its initial state) and which event loop it runs on (uvloop when installed,
unless ``ASKGATE_LOOP=asyncio``: docs/performance.md), binds the socket itself (a port in use or an
address the machine does not have is a one-line refusal), then hands the socket and the
:class:`~askgate.transports.http.HttpApp` to uvicorn, with a header deadline (R-HTTP-25).
SIGINT (Ctrl-C) and SIGTERM stop it cleanly: every open call is answered (R-STOP-1,
:meth:`~askgate.transports.http.HttpApp.stop`), uvicorn lets open responses finish for at most
:data:`SHUTDOWN_GRACE_S` seconds, and the process returns 0.

Exit statuses: 0 stopped (a signal), 1 the server's own machinery failed, 2 refused to start.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib.util
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import Any, Final, cast

from askgate.core import OptionError
from askgate.core import http as rules
from askgate.core.loop import LOOP_ENV, event_loop

from .asgi import BODY_WHOLE, Whole, refusal, whole_headers
from .auth import AuthProvider, LoopbackOnly
from .base import Serving
from .http import ENDPOINT, DirectStream, HttpApp

__all__ = ["SHUTDOWN_GRACE_S", "header_deadline_protocol", "run_http", "serve_http"]

logger = logging.getLogger("askgate")

SHUTDOWN_GRACE_S: Final = 5
"""Seconds a server told to stop lets open responses finish (an SSE stream never ends by
itself: uvicorn waits for open responses before the lifespan shutdown that closes them)."""

BACKLOG: Final = 2048
"""uvicorn's default listen backlog."""

BACKENDS: Final = ("asyncio",)
"""The event loops Streamable HTTP runs on: uvicorn runs on asyncio only."""


READ_BYTES: Final = 65536
"""The most one read of a connection takes (asyncio's own reads ask for 256 KiB each)."""

_READ_BUFFER: Final = memoryview(bytearray(READ_BYTES))
"""The one buffer every connection reads into: a read's bytes are copied out of it before the
next read can start (asyncio calls ``get_buffer`` and ``buffer_updated`` back to back, on the
event loop's one thread)."""


_FAILED: Final = (
    500,
    [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", b"21"),
        (b"connection", b"close"),
    ],
    b"Internal Server Error",
)
"""What uvicorn answers when its app failed before its response started: status, headers,
body."""


def _nothing() -> None:
    return None


_FRAMING: Final = (b"content-length", b"transfer-encoding")
"""Response headers by which uvicorn's ``send`` frames a body otherwise than in chunks."""


CHECKED_HEADERS: Final = 1024
"""At most this many response headers are remembered as checked (a server sends the same few
names and values again and again: its date, a length, a type, a session id)."""

_CHECKED: Final[dict[tuple[bytes, bytes], tuple[bytes, bool]]] = {}
"""Response headers (name, value) that passed uvicorn's checks, each with the line written for
it (``name: value``, the name lower-cased) and whether it is a ``connection`` header asking
to close; emptied when full."""


def _header_line(header: tuple[bytes, bytes]) -> tuple[bytes, bool]:
    """A response header checked as uvicorn's ``send`` checks it (``RuntimeError`` for a name
    or value it refuses), its line as it writes it, and whether it closes the connection."""
    from uvicorn.protocols.http.httptools_impl import (  # noqa: PLC0415
        HEADER_RE,
        HEADER_VALUE_RE,
    )

    name, value = header
    if HEADER_RE.search(name):
        raise RuntimeError("Invalid HTTP header name.")
    if HEADER_VALUE_RE.search(value):
        raise RuntimeError("Invalid HTTP header value.")
    lower = name.lower()
    closes = lower == b"connection" and b"close" in [
        token.lower().strip() for token in value.split(b",")
    ]
    line = (lower, b": ", value, b"\r\n")
    if len(_CHECKED) >= CHECKED_HEADERS:
        _CHECKED.clear()
    _CHECKED[header] = found = (b"".join(line), closes)
    return found


class _HeadWithBody:
    """A connection's transport that holds a response's head for its first body bytes: uvicorn
    writes the two separately, each a ``send`` system call of its own (the costliest step of a
    small answer), although the body follows the head at once. After :meth:`hold_next`, the
    next write is held until the write after it (then both leave in one), the loop's next turn
    (a stream with nothing to send yet), or a ``close``, whichever comes first; every other
    write leaves at once. The bytes and their order are unchanged."""

    __slots__ = ("_held", "_hold", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._hold = False
        self._held: bytes | None = None

    def hold_next(self) -> None:
        """The next write is a response's head: it waits for what follows it."""
        self._hold = True

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif self._hold:
            self._hold = False
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def unhold(self) -> None:
        """The next write leaves at once (a whole response written in one piece)."""
        self._hold = False

    def discard(self) -> None:
        self._held = None
        self._hold = False

    def abort(self) -> None:
        self.discard()
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()  # asked about every response: not via __getattr__

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _ChunkSink:
    """A POST's SSE response written as uvicorn's ``send`` writes it in chunks, by the calls
    that make its events (:class:`~askgate.transports.http.DirectStream`): nothing is written
    while the transport is paused (the stream's pump runs again when it resumes), nothing once
    the client is gone (as uvicorn's ``send`` drops it); the last chunk ends the response as
    uvicorn's ``send`` does, an abort as uvicorn's request cycle ends an unfinished one."""

    __slots__ = ("_cycle", "_flow", "_out", "_protocol", "pump")

    def __init__(self, protocol: Any, cycle: Any, out: _HeadWithBody) -> None:
        self._protocol = protocol
        self._cycle = cycle
        self._flow = protocol.flow
        self._out = out
        self.pump: Callable[[], None] = _nothing  # the stream's, once it is written

    def writable(self) -> bool:
        return not self._flow.write_paused or self._cycle.disconnected

    def write(self, data: bytes, end: bool) -> None:
        # Called by whatever step made the event, often another connection's request: a
        # transport closed under this one (uvloop's write raises once its handle is closed,
        # before uvicorn hears of it) is a client gone, never an error of that request.
        if not data and not end:
            return
        cycle, out = self._cycle, self._out
        if not (cycle.disconnected or cycle.response_complete or out.is_closing()):
            if data:
                chunk = b"%x\r\n%b\r\n" % (len(data), data)
                data = chunk + b"0\r\n\r\n" if end else chunk
            elif end:
                data = b"0\r\n\r\n"
            try:
                out.write(data)
            except (OSError, RuntimeError):
                cycle.disconnected = True
            else:
                if end:
                    self._done()
                    self._protocol._end(cycle, out)
                return
        if not cycle.response_complete:
            cycle.disconnected = True  # goes nowhere, as with uvicorn's ``send``
        if end:
            self._done()
            cycle.on_response = _nothing  # as uvicorn's request cycle ends

    def lost(self) -> None:
        """The connection is gone (uvicorn marks only its newest request's cycle so): what
        waits, and what comes later, goes nowhere, as with uvicorn's ``send``."""
        if not self._cycle.response_complete:
            self._cycle.disconnected = True
        self.pump()

    def abort(self) -> None:
        cycle = self._cycle
        self._done()
        if not cycle.response_complete and not cycle.disconnected:
            self._protocol.logger.error("ASGI callable returned without completing response.")
            self._out.close()
        cycle.on_response = _nothing  # as uvicorn's request cycle ends

    def _done(self) -> None:
        self.pump = _nothing
        if self._protocol._sink is self:
            self._protocol._sink = None


def _served_app(loaded: object) -> HttpApp | None:
    """The :class:`HttpApp` uvicorn serves, when it is the app itself or behind uvicorn's proxy
    headers middleware alone (what ``serve_http`` configures), else ``None``."""
    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware  # noqa: PLC0415

    if type(loaded) is ProxyHeadersMiddleware:
        loaded = loaded.app
    return loaded if isinstance(loaded, HttpApp) else None


class _HeadRefusedError(Exception):
    """Raised by a parser callback to stop parsing a request head over a bound (R-HTTP-34):
    httptools ends the read and uvicorn's ``send_400_response`` is asked to answer, which
    answers the refusal noted instead."""


def header_deadline_protocol(
    header_timeout_ms: int, limits: rules.HttpOptions | None = None
) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol, closing a connection whose request headers did not arrive
    whole within ``header_timeout_ms`` of the connection's opening or of the request's first
    byte (R-HTTP-25); uvicorn has no such deadline of its own. Between requests uvicorn's
    keep-alive timeout applies, and once the headers are in, the app's body deadline.

    It bounds each request head by ``limits``' ``max_header_bytes`` and ``max_headers``
    (R-HTTP-34, :func:`askgate.core.http.header_block_too_large`; default
    :class:`~askgate.core.http.HttpOptions`'): a whole head is judged on the bytes of the reads
    that brought it (a request in one read costs no counting), and when they are over, on its
    own size (request line, ``name: value`` lines, blank line), with its fields; the bytes of
    every read that neither begins nor ends a head are counted too, judged after each such read,
    so a line that never ends is refused at most one read past the bound (httptools holds an
    unfinished line whole). A chunked body's trailer section is judged the same way, read by
    read (``on_chunk_header``: what follows a chunk with no data), and closes the connection.
    It admits at most ``max_connections`` connections at once (R-HTTP-35,
    :func:`askgate.core.http.connection_refused`). A refusal is written at once with
    ``connection: close``, then what the client still sends is read and discarded (not parsed,
    not copied) until it leaves or the header deadline passes.

    It is also a buffered protocol: asyncio reads into one kept buffer and the protocol is
    given a copy of exactly the bytes read. A plain protocol's reads each allocate 256 KiB and
    shrink it to what was read; longer-lived objects then take the rest of the block, and the
    heap keeps growing with free holes (measured under ``bench/soak.py`` over HTTP: about
    110 KiB a minute, with the bytes in use flat), as the stdio reader's did.

    A request whose body arrived whole is marked so in its scope (:data:`BODY_WHOLE`): the app
    reads it without arming the body deadline's timer. A response's head is held for its first
    body bytes (:class:`_HeadWithBody`): the two leave in one ``send``. The header deadline is
    one timer per connection, not one per request: a request's start moves the deadline, and
    the timer, when it fires, either closes the connection (its headers are late), sleeps again
    until the moved deadline, or ends (no headers are awaited). uvicorn's keep-alive timeout
    (a connection idle that long after a response is closed) is kept the same way.

    A POST to an :class:`HttpApp` whose body arrives whole in the read that brought its headers,
    or by the loop's next poll (``_polled``: a client that writes them apart), is served without
    uvicorn's request task and ASGI messages (docs/performance.md): the app's
    :meth:`~askgate.transports.http.HttpTransport.answer_whole` makes the same checks and answer
    as its ASGI path, and the response is written with the bytes uvicorn's ``send`` would write
    (status line, uvicorn's default headers, then the app's, in order). An SSE stream that opens
    at once (:class:`~askgate.transports.http.DirectStream`) is written without a task too, each
    event by the step that makes it (:class:`_ChunkSink`; a paused transport resumed, or the
    connection lost, pumps what waits). What needs more (a stream that waits for its first
    message) goes on in a request task as before, its messages written in the bytes uvicorn's
    ``send`` writes, directly while nothing asks otherwise (``_sender``: a paused writer, a gone
    client, a framing header of the app's go to uvicorn's own ``send``); an X-Forwarded-* header
    is noted as the headers are parsed. What ``answer_whole`` does not serve, and anything
    uvicorn would treat otherwise (``Expect: 100-continue``, proxy headers, a paused writer, the
    access log, a pipelined request), goes through ASGI unchanged."""
    from uvicorn.protocols.http.httptools_impl import (  # noqa: PLC0415
        STATUS_LINE,
        HttpToolsProtocol,
        RequestResponseCycle,
    )

    seconds = header_timeout_ms / 1000
    bounds = limits if limits is not None else rules.HttpOptions()
    admitted = [0]  # the connections open and admitted (R-HTTP-35)

    class HeaderDeadline(HttpToolsProtocol, asyncio.BufferedProtocol):
        _timer: asyncio.TimerHandle | None = None
        _due: float | None = None  # when the awaited headers are late; None: none awaited
        _out: _HeadWithBody | None = None
        _whole: HttpApp | None = None  # the app a whole POST is answered by, without ASGI
        _deferring = False  # inside on_headers_complete: a POST's task may wait for its body
        _deferred: RequestResponseCycle | None = None  # a POST whose task waits for its body
        _polled: RequestResponseCycle | None = None  # one whose body may come in the next poll
        _idle_timer: asyncio.TimerHandle | None = None
        _idle_due: float | None = None  # when the idle connection is closed; None: not idle
        _proxied = False  # the request has an X-Forwarded-* header (uvicorn's proxy middleware)
        _sink: _ChunkSink | None = None  # the SSE response written without a task, if any
        _read_len = 0  # the bytes of the read being parsed (R-HTTP-34)
        _head_first = 0  # the bytes of the read that began the head being read
        _head_read = 0  # of the head being read: the bytes of reads that neither began nor ended it
        _head_began = False  # the read being parsed began a head (or a trailer section)
        _trailer = False  # a chunked body's last chunk may have begun: its trailer section
        _in_head = False  # the parser is in a request's head: a field is a header
        _trailer_fields = 0  # of the trailer section being read: its fields and their bytes
        _trailer_bytes = 0
        _refusal: rules.Rejection | None = None  # what a parser callback refused (R-HTTP-34)
        _refused = False  # answered a refusal: what comes is discarded until the close
        _admitted = False  # counted among the admitted connections (R-HTTP-35)

        def get_buffer(self, sizehint: int) -> memoryview:  # noqa: ARG002
            return _READ_BUFFER

        def buffer_updated(self, nbytes: int) -> None:
            if not self._refused:  # a refused connection's bytes are discarded uncopied
                self.data_received(_READ_BUFFER[:nbytes].tobytes())

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._out = _HeadWithBody(self.transport, self.loop)
            self.transport = cast(asyncio.Transport, self._out)
            self._arm()
            refused = rules.connection_refused(admitted[0], bounds)  # R-HTTP-35
            if refused is not None:
                self._refuse(refused)
                return
            admitted[0] += 1
            self._admitted = True
            if self.limit_concurrency is None and not self.access_log:
                self._whole = _served_app(self.app)

        def _refuse(self, rejection: rules.Rejection) -> None:
            """Answers ``rejection`` at once, ``connection: close``, and ends the writing side;
            what the client still sends is discarded until it leaves or the header deadline
            passes (a lingering close: R-HTTP-34, R-HTTP-35)."""
            out = self._out
            assert out is not None
            self._refused = True
            self._deferred = self._polled = None
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:  # a pipelined request's:
                logger.info("closed a connection: %s", rejection.reason)  # no answer can go
                out.close()  # between the bytes of the one being written
                return
            status, body, content_type, extra = refusal(rejection, [(b"connection", b"close")])
            content = [STATUS_LINE[status]]
            for name, value in (
                *self.server_state.default_headers,
                *whole_headers(body, content_type, extra),
            ):
                content += (name, b": ", value, b"\r\n")
            content += (b"\r\n", body)
            out.flush()  # nothing held goes after the refusal
            out.unhold()
            out.write(b"".join(content))
            if out.can_write_eof():
                out.write_eof()  # the client reads the answer, then the end
            else:
                out.close()
            self._due = None
            self._arm()  # the linger ends at the header deadline at the latest

        def send_400_response(self, msg: str) -> None:
            refused = self._refusal
            if refused is None:
                super().send_400_response(msg)
                return
            self._refusal = None
            self._refuse(refused)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            self._head_began = False
            self._read_len = len(data)
            super().data_received(data)
            if self._refused or self._head_began or self.transport.is_closing():
                pass  # refused, or the read that began a head is judged when it is whole
            elif self._due is not None:  # R-HTTP-34: a read inside one head, still unfinished
                self._head_read += len(data)
                refused = rules.header_block_too_large(
                    self._head_read, len(self.headers or ()), bounds
                )
                if refused is not None:
                    self._refuse(refused)
                    return
            elif self._trailer:
                self._trailer_read(len(data))
            if self._refused:
                return
            cycle = self._deferred
            if cycle is not None:  # its body did not come whole in this read
                self._deferred = None
                if cycle.waiting_for_100_continue:  # the client waits for uvicorn's answer
                    HttpToolsProtocol._start_asgi_task(self, cycle, self.app)
                    return
                self._polled = cycle  # its rest may be read by the loop's next poll
                self.loop.call_soon(self._next_turn, cycle)

        def _next_turn(self, cycle: RequestResponseCycle) -> None:
            # Run in the turn of the loop that read the headers: called again in the next turn,
            # after the loop's next poll of its connections.
            if self._polled is cycle:
                self.loop.call_soon(self._poll_passed, cycle)

        def _poll_passed(self, cycle: RequestResponseCycle) -> None:
            if self._polled is cycle:  # its body is still coming: as uvicorn does
                self._polled = None
                HttpToolsProtocol._start_asgi_task(self, cycle, self.app)

        def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
            if (
                self._deferring
                and app is self.app
                and self._whole is not None
                and cycle.scope["method"] == "POST"
            ):
                self._deferred = cycle  # started at the read's end unless answered before
                return
            super()._start_asgi_task(cycle, app)

        def _trailer_read(self, nbytes: int) -> None:
            """A read inside a chunked body's trailer section, bounded as a head is (R-HTTP-34);
            the request's answer may have begun, so one over the bound closes the
            connection, as a late head does."""
            self._head_read += nbytes
            refused = rules.header_block_too_large(self._head_read, self._trailer_fields, bounds)
            if refused is not None:
                self._trailer_refused(refused)

        def _trailer_refused(self, refused: rules.Rejection) -> None:
            self._trailer = False
            logger.info("closed a connection: %s (its trailer section)", refused.reason)
            self.transport.close()

        def _trailer_field(self, name: bytes, value: bytes) -> bool:
            """Whether the field the parser read is one of a chunked body's trailer section
            (the head is complete): then it is never one of the request's headers (the app is
            given the head's alone), and it counts toward the trailer section's bounds, field
            by field, whatever the reads that brought it (R-HTTP-34)."""
            if self._in_head:
                return False
            self._trailer_fields += 1
            self._trailer_bytes += len(name) + len(value) + 4
            if not self.transport.is_closing():
                refused = rules.header_block_too_large(
                    self._trailer_bytes, self._trailer_fields, bounds
                )
                if refused is not None:
                    self._trailer_refused(refused)
            return True

        def on_chunk_header(self) -> None:
            # httptools' own callback (uvicorn has none): a chunk's size line was read; when
            # no body byte follows, it was the last chunk and its trailer section comes.
            self._trailer = True
            self._head_began = True  # this read's bytes before it are body: not counted
            self._head_read = 0
            self._trailer_fields = self._trailer_bytes = 0

        def on_chunk_complete(self) -> None:
            self._trailer = False

        def on_body(self, body: bytes, _on_body: Any = HttpToolsProtocol.on_body) -> None:
            self._trailer = False  # the chunk carries data: not the last
            _on_body(self, body)

        def on_header(self, name: bytes, value: bytes) -> None:
            # uvicorn's own (whatever the installed version does with the pair), noting an
            # X-Forwarded-* header as it goes (not by a loop over the headers for every whole
            # POST). Replaced below by _on_header_inline when that does what the installed
            # uvicorn's does.
            if self._trailer_field(name, value):
                return
            super().on_header(name, value)
            if name[:12].lower() == b"x-forwarded-":
                self._proxied = True

        def _on_header_inline(self, name: bytes, value: bytes) -> None:
            # uvicorn 0.55's on_header and the X-Forwarded-* note in one call (a request's
            # every header comes through here)
            if not self._in_head:  # a trailer section's field (_trailer_field)
                self._trailer_field(name, value)
                return
            name = name.lower()
            value = value.rstrip(b" \t")
            if name == b"expect" and value.lower() == b"100-continue":
                self.expect_100_continue = True
            elif name[:12] == b"x-forwarded-":
                self._proxied = True
            self.headers.append((name, value))

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_head = True
            self._proxied = False
            self._head_read = 0
            self._head_first = self._read_len
            self._head_began = True
            self._idle_due = None  # a request began: the connection is not idle (a response
            # answered at once, before the read's next request was parsed, may have set it)
            if self._due is None:  # _arm, inline: every request passes here
                self._due = due = self.loop.time() + seconds
                if self._timer is None:
                    self._timer = self.loop.call_at(due, self._expired)

        def on_headers_complete(self) -> None:
            self._in_head = False
            # R-HTTP-34: judged first on the bytes of the reads that brought the head (more
            # than the head: a request in one read is judged once, without counting), then,
            # when that is over, on the head itself.
            fields = len(self.headers)
            read = self._head_first + self._head_read + self._read_len
            refused = rules.header_block_too_large(read, fields, bounds)
            if refused is not None:
                refused = rules.header_block_too_large(self._head_size(), fields, bounds)
            if refused is not None:  # parsing stops; send_400_response answers it
                self._refusal = refused
                raise _HeadRefusedError(refused.reason)
            self._due = None
            if self._out is not None:
                self._out.hold_next()  # the next write is this request's response head
            self._deferring = True
            try:
                super().on_headers_complete()
            finally:
                self._deferring = False

        def _head_size(self) -> int:
            """The bytes of the whole head just parsed as a client writing it plainly sends
            them: request line, ``name: value`` lines, blank line (R-HTTP-34)."""
            line = len(self.parser.get_method()) + len(self.url) + len(b"  HTTP/1.1\r\n")
            return line + sum(len(n) + len(v) + 4 for n, v in self.headers) + 2

        def on_message_complete(self) -> None:
            super().on_message_complete()
            if self.transport.is_closing():  # closed while it came (a trailer section over
                self._deferred = self._polled = None  # its bound): no one to answer, nothing
                return  # is started
            scope: dict[str, Any] = self.scope  # type: ignore[assignment]
            scope[BODY_WHOLE] = True  # the app reads it without a deadline
            cycle = self._deferred
            if cycle is not None:
                self._deferred = None
                self._serve_whole(cycle)
                return
            cycle = self._polled
            if cycle is not None and cycle is self.cycle:  # its body came in a later read
                self._polled = None
                self._serve_whole(cycle)

        def _serve_whole(self, cycle: RequestResponseCycle) -> None:
            """A POST whose body came whole with its headers (docs/performance.md)."""
            app = self._whole
            if (
                app is None
                or cycle.waiting_for_100_continue  # uvicorn would write 100 Continue first
                or self.flow.write_paused  # uvicorn would wait for the reader first
                or self._proxied  # uvicorn's proxy middleware may change the scope
            ):
                HttpToolsProtocol._start_asgi_task(self, cycle, self.app)
                return
            context = contextvars.copy_context()  # the request's own, as a task's would be
            scope: dict[str, Any] = cycle.scope  # type: ignore[assignment]
            try:
                served = context.run(app.answer_whole, scope, bytes(cycle.body))
            except BaseException as exc:  # as uvicorn's request cycle answers a failed app
                self.logger.error("Exception in ASGI application\n", exc_info=exc)
                self._write_whole(cycle, *_FAILED)
                return
            if served is None:
                HttpToolsProtocol._start_asgi_task(self, cycle, self.app)
                return
            cycle.body = bytearray()  # read here: a request task is not given it again
            if isinstance(served, Whole):
                status, body, content_type, extra = served
                self._write_whole(cycle, status, whole_headers(body, content_type, extra), body)
                return
            if isinstance(served, DirectStream):
                self._write_stream(cycle, served)
                return
            rest = served
            send = self._sender(cycle)

            def serve_rest(scope: Any, receive: Any, sent: Any) -> Any:  # noqa: ARG001
                return rest(receive, send)  # its coroutine, awaited by uvicorn's run_asgi

            task = self.loop.create_task(cycle.run_asgi(serve_rest), context=context)
            task.add_done_callback(self.tasks.discard)
            self.tasks.add(task)

        @staticmethod
        def _head(
            cycle: RequestResponseCycle, status: int, headers: list[tuple[bytes, bytes]]
        ) -> list[bytes]:
            """A response's status line and header lines as uvicorn's ``send`` writes them
            (uvicorn's default headers, then ``headers``, lower-cased, checked as it checks
            them: ``RuntimeError`` for one it refuses), without the blank line that ends
            them; a ``connection: close`` header ends the cycle's keep-alive."""
            cycle.response_started = True
            cycle.waiting_for_100_continue = False
            content = [STATUS_LINE[status]]
            closing = False
            checked = _CHECKED
            for header in [*cycle.default_headers, *headers]:
                line = checked.get(header)
                if line is None:  # checked as uvicorn checks every header
                    line = _header_line(header)
                content.append(line[0])
                if line[1]:
                    cycle.keep_alive = False
                    closing = True
            if not cycle.keep_alive and not closing:
                content.append(b"connection: close\r\n")
            return content

        def _end(self, cycle: RequestResponseCycle, out: _HeadWithBody) -> None:
            """Ends a response as uvicorn's ``send`` does once its last bytes are written."""
            cycle.response_complete = True
            cycle.message_event.set()
            if not cycle.keep_alive:
                out.close()
            on_response, cycle.on_response = cycle.on_response, _nothing
            on_response()

        def _write_whole(
            self,
            cycle: RequestResponseCycle,
            status: int,
            headers: list[tuple[bytes, bytes]],
            body: bytes,
        ) -> None:
            """Writes a whole response as uvicorn's ``send`` writes one with its length (the
            same bytes: :meth:`_head`, then the body), then ends the request as uvicorn
            does."""
            out = self._out
            assert out is not None
            try:
                content = self._head(cycle, status, headers)
            except RuntimeError as exc:
                self.logger.error("Exception in ASGI application\n", exc_info=exc)
                out.close()
                cycle.on_response = _nothing
                return
            content += (b"\r\n", body)
            out.unhold()  # head and body leave in this one write
            out.write(b"".join(content))
            self._end(cycle, out)

        def _write_stream(self, cycle: RequestResponseCycle, served: DirectStream) -> None:
            """Writes a POST's SSE stream that opened at once, without a request task: its
            head and first events as uvicorn's ``send`` writes them (chunked), in one write,
            then each later event as the stream makes it (:class:`_ChunkSink`)."""
            out = self._out
            assert out is not None
            try:
                content = self._head(cycle, 200, served.headers())
            except RuntimeError as exc:
                self.logger.error("Exception in ASGI application\n", exc_info=exc)
                out.close()
                cycle.on_response = _nothing
                return
            cycle.chunked_encoding = True  # no length: uvicorn chunks the body
            content += (b"transfer-encoding: chunked\r\n", b"\r\n")
            sink = _ChunkSink(self, cycle, out)
            first, events, end = served.start(sink, self.loop)
            for data in (first, events):  # the chunks uvicorn's ``send`` would write
                if data:
                    content.append(b"%x\r\n%b\r\n" % (len(data), data))
            if end:
                content.append(b"0\r\n\r\n")
            out.unhold()  # head and first events leave in this one write
            out.write(b"".join(content))
            if end:
                self._end(cycle, out)
                return
            self._sink = sink
            sink.pump = served.pump

        def resume_writing(self) -> None:
            super().resume_writing()
            sink = self._sink
            if sink is not None:
                sink.pump()  # what the stream made while the transport was paused

        def _sender(self, cycle: RequestResponseCycle) -> Any:
            """uvicorn's ``send`` for what serves the rest of a whole POST (its SSE stream):
            the same bytes and the same ending, written directly while the response is plain
            (no ``content-length`` or ``transfer-encoding`` of the app's, the transport not
            paused, the client still there); anything else goes to uvicorn's own ``send``."""
            out = self._out
            assert out is not None
            flow = self.flow
            uvicorn_send = cycle.send

            async def send(message: Any) -> None:
                if flow.write_paused or cycle.disconnected:
                    await uvicorn_send(message)
                    return
                kind = message["type"]
                if kind == "http.response.body" and cycle.chunked_encoding:
                    if cycle.response_complete:
                        await uvicorn_send(message)  # refused as uvicorn refuses it
                        return
                    body = message.get("body", b"")
                    more = message.get("more_body", False)
                    if body:
                        chunk = b"%x\r\n%b\r\n" % (len(body), body)
                        out.write(chunk if more else chunk + b"0\r\n\r\n")
                    else:
                        out.write(b"" if more else b"0\r\n\r\n")
                    if not more:
                        self._end(cycle, out)
                    return
                if (
                    kind != "http.response.start"
                    or cycle.response_started
                    or cycle.chunked_encoding is not None
                    or message["status"] in (204, 304)  # no body: uvicorn does not chunk it
                ):
                    await uvicorn_send(message)
                    return
                headers = list(message.get("headers", ()))
                for name, _ in headers:
                    if name.lower() in _FRAMING:  # uvicorn frames the body as they say
                        await uvicorn_send(message)
                        return
                content = self._head(cycle, message["status"], headers)
                cycle.chunked_encoding = True  # no length: uvicorn chunks the body
                content += (b"transfer-encoding: chunked\r\n", b"\r\n")
                out.write(b"".join(content))

            return send

        def on_response_complete(self) -> None:
            # uvicorn's, but for its keep-alive timeout: one timer per connection, moved by
            # each response, instead of a timer started by each response and cancelled by the
            # next request's first bytes.
            if self._out is not None:
                self._out.flush()  # nothing of the answer waits for the loop's next turn
            self.server_state.total_requests += 1
            if self.transport.is_closing():
                return
            self._idle_due = None
            self.flow.resume_reading()
            if self.pipeline:
                cycle, app = self.pipeline.pop()
                self._start_asgi_task(cycle, app)
                return
            due = self._idle_due = self.loop.time() + self.timeout_keep_alive
            if self._idle_timer is None:
                self._idle_timer = self.loop.call_at(due, self._idle_expired)

        def _unset_keepalive_if_required(self) -> None:
            self._idle_due = None  # the connection is not idle: its timer, when it fires, ends

        def _idle_expired(self) -> None:
            self._idle_timer = None
            due = self._idle_due
            if due is None:
                return
            if due - self.loop.time() > 0.001:  # a later response's: sleep until its due time
                self._idle_timer = self.loop.call_at(due, self._idle_expired)
                return
            self._idle_due = None
            self.timeout_keep_alive_handler()

        def connection_lost(self, exc: Exception | None) -> None:
            self._due = None
            if self._admitted:
                self._admitted = False
                admitted[0] -= 1
            if self._out is not None:
                self._out.discard()  # the connection is gone: nothing more can be written
            for timer in (self._timer, self._idle_timer):
                if timer is not None:
                    timer.cancel()
            self._timer = self._idle_timer = None
            super().connection_lost(exc)
            sink = self._sink
            if sink is not None:
                sink.lost()

        def _arm(self) -> None:
            if self._due is not None:
                return  # still awaiting the same headers: their deadline stands
            self._due = self.loop.time() + seconds
            if self._timer is None:
                self._timer = self.loop.call_at(self._due, self._expired)

        def _expired(self) -> None:
            self._timer = None
            due = self._due
            if due is None:
                return
            if due - self.loop.time() > 0.001:  # a later request's: sleep until its deadline
                self._timer = self.loop.call_at(due, self._expired)
                return
            self._due = None
            if not self.transport.is_closing():
                logger.info("closed a connection: its request headers did not arrive in time")
                self.transport.close()

    if _same_headers(HttpToolsProtocol.on_header, HeaderDeadline._on_header_inline):
        HeaderDeadline.on_header = HeaderDeadline._on_header_inline  # type: ignore[method-assign]
    return HeaderDeadline


_HEADER_PROBES: Final = (
    (b"Content-Type", b"application/json"),
    (b"HOST", b" 127.0.0.1:8765 \t "),
    (b"Expect", b"100-Continue\t"),
    (b"expect", b"100-continue-not"),
    (b"X-Forwarded-For", b"192.0.2.7"),
    (b"x-forwarded-", b""),
    (b"X-Forwarde", b"a"),
    (b"Accept", b"a,\tb "),
)
"""Header pairs uvicorn's ``on_header`` and askgate's inline copy are both given, to check
that they make the same headers and the same ``Expect`` verdict."""


def _same_headers(
    uvicorn_on_header: Callable[[Any, bytes, bytes], None],
    inline: Callable[[Any, bytes, bytes], None],
) -> bool:
    """Whether ``inline`` does with every probe pair what the installed uvicorn's
    ``on_header`` does: every attribute it sets on the probe (the headers list,
    ``expect_100_continue``, and any a newer uvicorn adds), leaving out our own X-Forwarded-*
    note and the mark that the fields are a head's (``_in_head``: a trailer's are not headers,
    R-HTTP-34)."""

    class Probe:
        def __init__(self) -> None:
            self.headers: list[tuple[bytes, bytes]] = []
            self.expect_100_continue = False
            self._proxied = False
            self._in_head = True

    for pairs in (_HEADER_PROBES, _HEADER_PROBES[3:], _HEADER_PROBES[:1]):
        theirs, ours = Probe(), Probe()
        try:
            for name, value in pairs:
                uvicorn_on_header(theirs, name, value)
                inline(ours, name, value)
        except Exception:  # any difference, even a failure, means "not the same"
            return False
        ours_only = ("_proxied", "_in_head")
        set_by_them = {k: v for k, v in vars(theirs).items() if k not in ours_only}
        if set_by_them != {k: v for k, v in vars(ours).items() if k not in ours_only}:
            return False
    return True


def _stopping_server() -> type:
    import uvicorn  # noqa: PLC0415

    class Stopping(uvicorn.Server):
        """uvicorn's server, which also tells the app to stop (R-STOP-1) when told to exit:
        the parked and running calls are answered before uvicorn waits for open responses."""

        def __init__(self, config: uvicorn.Config, app: HttpApp) -> None:
            super().__init__(config)
            self.app = app

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            super().handle_exit(sig, frame)
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not serving yet
                return
            loop.call_soon_threadsafe(self._stop_soon, loop)  # not inside the signal handler

        def _stop_soon(self, loop: asyncio.AbstractEventLoop) -> None:
            self.stopping = loop.create_task(self._stop())  # in a task: the app reads the clock

        async def _stop(self) -> None:
            self.app.stop()

    return Stopping


def _bind(host: str, port: int) -> socket.socket | str:
    """A socket bound to ``host:port`` (IPv4 first for a name), or the one-line refusal."""
    bare = host.strip("[]")
    where = f"{host}:{port}"
    try:
        found = socket.getaddrinfo(
            bare, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE | socket.AI_NUMERICSERV
        )
    except (OSError, UnicodeError) as bad:
        return f"askgate refuses to start: cannot listen on {where}: {_reason(bad)}"
    found.sort(key=lambda entry: entry[0] != socket.AF_INET)
    family, kind, proto, _, address = found[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(BACKLOG)  # connections wait in the backlog until uvicorn accepts them
    except OSError as bad:
        sock.close()
        return f"askgate refuses to start: cannot listen on {where}: {_reason(bad)}"
    return sock


def _reason(error: BaseException) -> str:
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return str(text).lower()


def serve_http(
    server: Serving,
    host: str,
    port: int,
    *,
    auth: AuthProvider | None = None,
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
    log_level: str = "warning",
    banner: str | None = None,
    limits: Mapping[str, int] | None = None,
) -> int:
    """Serves ``server`` over Streamable HTTP on ``host:port`` until SIGINT or SIGTERM; returns
    the exit status (0 stopped, 1 the machinery failed, 2 refused to start, the reason printed
    on standard error in one line). The listen decision (R-HTTP-13) is the caller's; this
    refuses a server that cannot start (an :class:`~askgate.core.OptionError`) and an address
    it cannot bind. ``banner``, when given, names what is served in a few lines on standard
    error with the URL and an MCP client configuration. ``limits`` sets
    :class:`~askgate.core.http.HttpOptions` fields by name (``max_header_bytes``,
    ``max_headers``, ``max_connections``, ``max_sessions_per_principal``, ...); a value it
    refuses is a one-line refusal."""
    import uvicorn  # noqa: PLC0415  (imported when HTTP is served)

    try:
        server.initial_state("http")  # R-OPT-2: refused here, not in uvicorn's lifespan
    except OptionError as refused:
        print(refused, file=sys.stderr)
        return 2
    loop, loop_refusal = event_loop(  # docs/performance.md, the event loop
        os.environ.get(LOOP_ENV), importlib.util.find_spec("uvloop") is not None
    )
    if loop is None:
        print(loop_refusal, file=sys.stderr)
        return 2
    bound = _bind(host, port)
    if isinstance(bound, str):
        print(bound, file=sys.stderr)
        return 2
    port = bound.getsockname()[1]  # the port bound, when 0 asked for any
    import attrs  # noqa: PLC0415

    bounds = set(attrs.fields_dict(rules.HttpOptions)) - {
        "port",
        "allowed_hosts",
        "allowed_origins",
    }
    unknown = sorted(set(limits or {}) - bounds)
    if unknown:
        bound.close()
        print(f"askgate refuses to start: limits: no such bound {unknown[0]!r}", file=sys.stderr)
        return 2
    try:
        options = rules.HttpOptions(
            port=port,
            allowed_hosts=tuple(allowed_hosts),
            allowed_origins=tuple(allowed_origins),
            **dict(limits or {}),
        )
        app = HttpApp(server, auth=auth, options=options)  # its guard: R-HTTP-13
    except (OptionError, ValueError) as refused:
        bound.close()
        print(refused, file=sys.stderr)
        return 2
    url = f"http://{host if ':' not in host or host.startswith('[') else f'[{host}]'}:{port}"
    url += ENDPOINT
    if banner is not None:
        entry: dict[str, object] = {"type": "http", "url": url}
        header = getattr(auth, "header", None)
        if header is not None:  # the credential the client must send
            entry["headers"] = {header[0]: header[1]}
        configuration = json.dumps({"mcpServers": {"askgate": entry}})
        print(
            f"askgate: serving {banner} on {url}\n"
            f"  MCP client configuration:\n  {configuration}\n  Ctrl-C ends",
            file=sys.stderr,
        )
    logger.info("serving Streamable HTTP on %s (event loop: %s)", url, loop)
    config = uvicorn.Config(
        app,
        loop=loop,  # docs/performance.md, the event loop
        log_level=log_level,
        lifespan="on",
        access_log=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        http=header_deadline_protocol(options.header_timeout_ms, options),  # R-HTTP-25, 34, 35
    )
    runner = _stopping_server()(config, app)
    stopped: list[str] = []

    def note(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
        # uvicorn handles the signal, stops, then raises it again for the handler it found:
        # this one, which notes it instead of raising KeyboardInterrupt or killing the process.
        stopped.append(signal.Signals(signum).name)

    watched = (signal.SIGINT, signal.SIGTERM)
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, note) for sig in watched} if main else {}
    try:
        runner.run(sockets=[bound])
    except KeyboardInterrupt:  # Ctrl-C before uvicorn took the signal over
        stopped.append("SIGINT")
    except SystemExit:  # uvicorn's own start failed (its lifespan): said in its log above
        print("askgate: the server failed to start; see the log above", file=sys.stderr)
        return 1
    except BaseException:  # the machinery, not a callback: callbacks never get here
        logger.critical("askgate stopped: the server failed", exc_info=True)
        print("askgate: the server failed; see the traceback above", file=sys.stderr)
        return 1
    finally:
        bound.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopped:
        logger.info("stopped by %s", stopped[0])
    return 0


def run_http(
    server: Serving,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    auth: AuthProvider | None = None,
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
    backend: str = "asyncio",
    log_level: str = "warning",
    banner: bool = False,
    limits: Mapping[str, int] | None = None,
) -> int:
    """:meth:`askgate.server.Server.run_http`: refuses as R-HTTP-13 says, in a Python caller's
    words (:func:`askgate.core.http.run_http_refusal`), then :func:`serve_http`."""
    if backend not in BACKENDS:
        print(
            f"askgate refuses to start: backend={backend!r}: Streamable HTTP runs on asyncio "
            "(uvicorn); trio serves stdio only",
            file=sys.stderr,
        )
        return 2
    loopback_only = auth is None or isinstance(auth, LoopbackOnly)
    refusal = rules.run_http_refusal(
        host,
        port,
        loopback_only,
        server.authorization_configured(),
        server.read_authorization_configured(),
    )
    if refusal is not None:
        print(refusal, file=sys.stderr)
        return 2
    return serve_http(
        server,
        host,
        port,
        auth=auth,
        allowed_origins=allowed_origins,
        allowed_hosts=allowed_hosts,
        log_level=log_level,
        banner=getattr(server, "name", "MCP") if banner else None,
        limits=limits,
    )
