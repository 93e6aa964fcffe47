"""Streamable HTTP: an ASGI application serving one MCP endpoint (spec/http.md, R-HTTP-*).

::

    app = HttpApp(server)                      # secure with no options: loopback Host/Origin,
    uvicorn.run(app, host="127.0.0.1", port=8765)   # loopback peers only, 4 MiB bodies

Mount it in a Starlette or FastAPI application with ``Mount("/", app)`` and run
``app.running()`` in that application's lifespan (a standalone ``HttpApp`` handles the ASGI
lifespan itself).

Every decision is pure and lives in :mod:`askgate.core.http` (the checks, the session table)
and :mod:`askgate.core` (the protocol). This module reads requests, performs what those
decide, and routes each session's replies and pushes to its open streams:

- A POST carrying a request is answered with JSON when the reducer answered it in the step
  that received it, else with an SSE stream carrying the messages related to it (its
  ``elicitation/create``, a withdrawal) and then its result. The reducer runs it in reply
  mode: the outcome is the ``Reply`` to that request.
- A POST carrying a notification or a response (an elicitation answer) is answered 202.
- GET opens the session's standalone SSE stream: pushes not related to an open POST go there.
- DELETE ends the session: ``SubscriberDetached`` drops its parked calls and kills its workers.
- A POST of the 2026-07-28 revision names no session (R-HTTP-26 .. R-HTTP-30): its request is
  fed on a reducer connection of its own, with the principal of that POST, and answered on the
  POST's response; the client closing that response cancels it. GET and DELETE are then 405.

A POST is served in synchronous steps that return its whole response or what serves the rest
(its stream): the ASGI path awaits them, and askgate's own HTTP/1.1 server runs the same steps
through :meth:`HttpTransport.answer_whole` for a POST whose body came whole (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import math
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import asynccontextmanager
from typing import ClassVar, Final, NamedTuple, Protocol

import anyio

from askgate.core import (
    OptionError,
    Push,
    Reply,
    ServerStopping,
    SubscriberAttached,
    SubscriberDetached,
    codec,
)
from askgate.core import http as rules
from askgate.core import sse_legacy as legacy_rules
from askgate.core.codec import encode
from askgate.core.events import MessageReceived

from .asgi import (
    Continuation,
    Receive,
    Scope,
    Send,
    Whole,
    header_map,
    lingering,
    note_request,
    read_body_or_refuse,
    refusal,
    reject,
    respond,
)
from .auth import AuthProvider, LoopbackOnly
from .base import Serving, TransportName
from .runtime import Runtime, now_ms
from .sse_legacy import LegacySse

__all__ = ["DirectStream", "HttpApp", "HttpTransport", "SseSink"]

logger = logging.getLogger("askgate.http")

ENDPOINT: Final = "/mcp"
_GATED: Final = "askgate.gated"
"""The scope key of the gate's verdict on a request :meth:`HttpApp.answer_whole` declined."""
STATELESS: Final = "http-stateless"
"""The first half of the reducer connection id of a modern request's POST (R-HTTP-26)."""
REAP_EVERY_MS: Final = 60_000

SSE_HEADERS: Final = (
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)
"""The headers of an SSE response, before the request's own (a new session's id)."""

_NO_EVENTS: Final[collections.deque[tuple[int, bytes]]] = collections.deque()
"""The log of a stream that has had no event; never appended to (its first event makes one)."""


class _Refused(NamedTuple):
    """A request refused before its method is looked at, not yet logged."""

    rejection: rules.Rejection
    extra: list[tuple[bytes, bytes]] | None = None


def _loop_event_and_clock() -> tuple[Callable[[], anyio.Event], Callable[[], float]]:
    """The running event loop's own event class (what ``anyio.Event()`` makes on it) and its
    clock in seconds (what ``anyio.current_time`` reads), found once: each of those asks
    which event loop runs on every call."""
    event = type(anyio.Event())
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio): anyio's clock, which is trio's
        return event, anyio.current_time
    return event, loop.time


def _asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio event loop, or ``None`` (trio)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _key(request_id: object) -> tuple[type, object]:
    """Request ids keep their type: ``1`` and ``"1"`` are different requests."""
    return (type(request_id), request_id)


class _EventStream:
    """One SSE stream of a Streamable HTTP session (R-HTTP-17 .. R-HTTP-22): its numbered
    events, kept for replay within the bounds, and the connection writing it, if any.

    A POST's stream is created before the request is fed; it is *opened* (answered as SSE,
    given its tag) only once something other than its reply came first, or its connection was
    asked to close, or it stayed quiet for ``keepalive_ms``. A reply that comes before any of
    that is held in ``final`` and answered as JSON. A connection writes it under a token; a new
    connection (a resume) takes it over, and the old one ends. Its event log is made by its
    first event: a request answered as JSON never has one.
    """

    __slots__ = (
        "_event",
        "_wake",
        "closing",
        "cursor",
        "done",
        "eids",
        "ended_at",
        "final",
        "last",
        "log",
        "opened",
        "options",
        "post",
        "primed",
        "pusher",
        "quieted",
        "size",
        "stopper",
        "tag",
        "unwritten",
        "writer",
    )

    def __init__(
        self,
        options: rules.HttpOptions,
        *,
        primed: bool = False,
        post: bool = True,
        event: Callable[[], anyio.Event] = anyio.Event,
    ) -> None:
        self.options = options
        self._event = event  # makes the event a waiting connection is woken by
        self.primed = primed  # R-HTTP-18: opens with a priming event; may close early
        self.post = post
        self.tag = ""
        self.opened = False
        self.last = 0  # the number of its newest event
        self.log: collections.deque[tuple[int, bytes]] = _NO_EVENTS  # made by the first put
        self.size = 0  # bytes of the messages in ``log``
        self.cursor = 0  # the newest event the connection took
        self.unwritten = 0  # bytes the connection has not taken
        self.writer: object | None = None
        self.stopper: Callable[[], None] | None = None  # cancels the writer's loop
        self.closing: int | None = None  # R-HTTP-21: the connection ends after this event
        self.done = False
        self.final: bytes | None = None
        self.ended_at: int | None = None
        self.eids: list[str] | None = None  # server requests it carried (R-HTTP-12)
        self._wake: anyio.Event | None = None
        self.quieted: object | None = None  # the writer whose quiet wait :meth:`quiet` ended
        self.pusher: Callable[[], None] | None = None  # a writer that writes when signalled

    def open(self, tag: str) -> None:
        self.tag = tag
        self.opened = True

    def put(self, data: bytes) -> None:
        if self.done:
            return
        self._append(data)
        self._signal()

    def _append(self, data: bytes) -> None:
        self.last += 1
        if self.log is _NO_EVENTS:
            self.log = collections.deque()
        self.log.append((self.last, data))
        self.size += len(data)
        if self.writer is not None or not self.opened:  # before its first connection too
            self.unwritten += len(data)
            if self.writer is not None and rules.stalled(self.unwritten):
                logger.warning(
                    "closed a stream's connection: its reader stalled (%d bytes waiting)",
                    self.unwritten,
                )
                self.writer = None  # R-HTTP-19: the stream goes on without it
                self.unwritten = 0
                self._stop_writer()  # it may be blocked writing to the stalled reader
        self._trim()

    def finish(self, data: bytes | None, now: int) -> None:
        """The stream ends, with ``data`` (its reply) as its last message if not ``None``."""
        if self.done:
            return
        if data is not None:
            if self.opened or self.last:
                self._append(data)  # signalled once, below, with the end
            else:
                self.final = data  # nothing came before it: a JSON answer (R-HTTP-7)
        self.done = True
        self.ended_at = now
        self._signal()

    def _trim(self) -> None:
        """R-HTTP-19: drops the oldest events beyond the bounds, never the newest nor one the
        connection has not taken."""
        log = self.log
        if not rules.over_replay_bounds(len(log), self.size, self.options):
            return  # within the bounds: trim_count drops none (its first test fails)
        limit = rules.trim_limit(
            self.last,
            self.cursor,
            writing=self.writer is not None,
            opened=self.opened,
            unwritten=self.unwritten,
        )
        for _ in range(rules.trim_count(log, len(log), self.size, limit, self.options)):
            self.size -= len(log.popleft()[1])

    def view(self) -> rules.StreamView:
        first = self.log[0][0] if self.log else self.last + 1
        return rules.StreamView(first, self.last, self.ended_at)

    def frames_after(self, number: int, upto: int | None = None) -> bytes:
        """The events after event ``number`` (up to ``upto``), as SSE with their ids."""
        count = self.last - number
        if count <= 0:
            return b""
        log = self.log
        stop = None if upto is None else max(0, len(log) - (self.last - upto))
        tail = itertools.islice(log, max(0, len(log) - count), stop)
        tag = self.tag
        return b"".join(rules.sse_event(rules.event_id(tag, n), data) for n, data in tail)

    def attach(self, token: object, after: int) -> None:
        """A connection takes the stream over, having seen every event up to ``after``. A close
        asked before the stream had any connection applies to its first one (R-HTTP-21)."""
        if self.writer is not None or after:
            self.closing = None
        self.stopper = None  # the connection that wrote it before ends at its next take
        self.writer = token
        self.cursor = after
        if after > 0:
            self.unwritten = sum(len(data) for n, data in self.log if n > after)
        else:  # every event it holds
            self.unwritten = self.size
        self._signal()  # the connection that wrote it before ends

    def writing(self, token: object, stop: Callable[[], None]) -> None:
        """``stop`` ends the write loop of connection ``token`` (its cancel scope)."""
        if self.writer is token:
            self.stopper = stop

    def _stop_writer(self) -> None:
        stop, self.stopper = self.stopper, None
        if stop is not None:
            stop()

    def detach(self, token: object) -> None:
        if self.writer is token:
            self.stopper = None
            self.writer = None
            self.unwritten = 0
            self.closing = None
            self._trim()

    def request_close(self) -> None:
        """R-HTTP-21: ends the connection after the events so far; only for a primed stream."""
        if self.primed and not self.done and self.closing is None:
            self.closing = self.last
            self._signal()

    def take(self, token: object) -> tuple[bytes, bool]:
        """The events the connection has not written, and whether its response ends."""
        if self.writer is not token:
            return b"", True
        closing = self.closing
        if closing is not None:  # R-HTTP-21: up to the close, then the connection ends
            payload = self.frames_after(self.cursor, closing)
            self.cursor = max(self.cursor, closing)
            self.writer = None
            self.stopper = None  # R-HTTP-19: the stream kept keeps nothing of the connection
            self.closing = None
            self.unwritten = 0
            self._trim()
            return payload, True
        payload = self.frames_after(self.cursor)
        self.cursor = self.last
        self.unwritten = 0
        end = self.done
        if end:
            self.writer = None
            self.stopper = None  # R-HTTP-19: the stream kept keeps nothing of the connection
        self._trim()
        return payload, end

    def idle(self, token: object) -> bool:
        return (
            self.writer is token
            and self.closing is None
            and not self.done
            and self.cursor == self.last
        )

    def _signal(self) -> None:
        push = self.pusher
        if push is not None:
            push()  # a connection written synchronously (:class:`DirectStream`)
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set()

    async def _wait(self) -> None:
        if self._wake is None:
            self._wake = self._event()
        await self._wake.wait()

    async def first(self) -> None:
        """Returns once a message is waiting, the stream finished, or its close was asked."""
        while not self.last and not self.done and self.closing is None:
            await self._wait()

    async def ready(self, token: object) -> None:
        """Returns once the connection ``token`` has something to do (write, or end), or once
        :meth:`quiet` was called after ``quieted`` was cleared."""
        while self.idle(token) and self.quieted is not token:
            await self._wait()

    def quiet(self, token: object) -> None:
        """A quiet wait's deadline passed (a timer's callback): :meth:`ready` returns."""
        self.quieted = token
        self._signal()


class _Live:
    """The shell's side of one session: its open streams, and where its messages go. It is the
    session's router: the runtime calls it with each ``Reply`` and ``Push`` for the session's
    connection. What most sessions never use (the ended streams' list, the server requests'
    carriers) is made when first needed."""

    __slots__ = (
        "by_eid",
        "clock",
        "conn",
        "ended",
        "feeding",
        "get",
        "options",
        "pending",
        "sid",
        "streams",
    )

    def __init__(
        self,
        sid: str,
        conn: Hashable,
        options: rules.HttpOptions,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.sid = sid
        self.conn = conn
        self.options = options
        self.clock = clock  # the shell's clock, in ms
        self.pending: dict[tuple[type, object], _EventStream] = {}
        self.get: _EventStream | None = None
        self.feeding: tuple[tuple[type, object], _EventStream] | None = None
        self.by_eid: dict[str, _EventStream] | None = None
        self.streams: dict[str, _EventStream] = {}  # opened ones, by tag (R-HTTP-17)
        self.ended: collections.deque[tuple[str, int]] | None = None

    def stream_for(self, request_id: object) -> _EventStream | None:
        key = _key(request_id)
        if self.feeding is not None and self.feeding[0] == key:
            return self.feeding[1]
        return self.pending.get(key)

    def _ended(self, tag: str, when: int) -> None:
        if self.ended is None:
            self.ended = collections.deque()
        self.ended.append((tag, when))
        self.sweep(when)

    def opened(self, stream: _EventStream) -> None:
        stream.open(rules.stream_tag(secrets.token_bytes(16)))
        self.streams[stream.tag] = stream
        if stream.ended_at is not None:  # its reply came in the step that received it
            self._ended(stream.tag, stream.ended_at)

    def finished(self, stream: _EventStream, data: bytes | None) -> None:
        if stream.done:
            return
        now = self.clock()
        stream.finish(data, now)
        by_eid = self.by_eid
        if stream.eids is not None and by_eid is not None:
            for eid in stream.eids:
                if by_eid.get(eid) is stream:
                    del by_eid[eid]
        if stream.opened:
            self._ended(stream.tag, now)

    def sweep(self, now: int) -> None:
        """R-HTTP-19: forgets the ended streams past their time or beyond the count."""
        ended = self.ended
        if ended is None:
            return
        for tag in rules.forget(ended, now, self.options):  # a prefix of self.ended
            self.streams.pop(tag, None)
            ended.popleft()

    def close_stream(self, request_id: Hashable) -> None:
        """R-HTTP-21: a running tool asked to close its call's stream connection."""
        stream = self.stream_for(request_id)
        if stream is not None:
            stream.request_close()

    def close_all(self) -> None:
        streams = [*self.pending.values(), *self.streams.values()]
        if self.get is not None:
            streams.append(self.get)
        if self.feeding is not None:
            streams.append(self.feeding[1])
        for stream in streams:
            self.finished(stream, None)
        self.pending.clear()
        self.by_eid = None
        self.streams.clear()
        self.ended = None

    def __call__(self, effect: Reply | Push) -> None:
        """Routes a ``Reply`` or ``Push`` of the session to the stream it belongs on."""
        if isinstance(effect, Reply):
            data = None if effect.message is None else encode(effect.message)
            feeding = self.feeding
            if feeding is not None and (
                effect.request_id is None or feeding[0] == _key(effect.request_id)
            ):
                self.finished(feeding[1], data)  # the step that received it answers it
                return
            stream = self.pending.pop(_key(effect.request_id), None)
            if stream is not None:
                self.finished(stream, data)  # kept for a resume (R-HTTP-19)
            return
        message = effect.message
        data = encode(message)
        route = rules.route_push(message, effect.related)  # R-HTTP-12
        call = None if route.call is None else self.stream_for(route.call)
        by_eid = self.by_eid
        carrier = None if route.withdraws is None or by_eid is None else by_eid.get(route.withdraws)
        get = self.get
        taken = rules.push_target(
            route,
            call=call is not None and not call.done,
            carrier=carrier is not None and not carrier.done,
            get=get is not None and not get.done,
        )
        if taken.forget is not None and by_eid is not None:
            by_eid.pop(taken.forget, None)
        target = (
            call
            if taken.stream == "call"
            else carrier
            if taken.stream == "carrier"
            else get
            if taken.stream == "get"
            else None
        )
        if target is None:
            logger.debug("dropped a push for a session with no open stream")
            return
        if taken.remember is not None:
            if target.eids is None:
                target.eids = []
            target.eids.append(taken.remember)
            if by_eid is None:
                by_eid = self.by_eid = {}
            by_eid[taken.remember] = target
        target.put(data)


class SseSink(Protocol):
    """A connection a :class:`DirectStream` writes its response's body to, synchronously."""

    def writable(self) -> bool:
        """Whether a write may be made now; while not (the transport's buffer is over its high
        mark: a slow reader), the sink calls the stream's ``pump`` once it is again."""

    def write(self, data: bytes, end: bool) -> None:
        """Writes ``data`` as the response's next body bytes; ``end``: its last."""

    def abort(self) -> None:
        """Closes the connection with the response unfinished (a stalled reader, R-HTTP-19)."""


class DirectStream:
    """A POST's SSE stream that opens at once (something about the call came in the step that
    fed it): what :meth:`HttpTransport.answer_whole` returns for it. Awaited as a
    :data:`Continuation`, it serves the stream on the request's ``send`` in a task (the ASGI
    path's way). A protocol that writes the response itself calls :meth:`start` instead: the
    stream's events are then written by the calls that make them (``put``, ``finish``, a
    take-over, a close, a stall), with no task, no event to wait on and one keep-alive timer
    for the stream's life (R-HTTP-22), the same bytes in the same order."""

    __slots__ = (
        "_app",
        "_due",
        "_extra",
        "_key",
        "_live",
        "_loop",
        "_quiet",
        "_sid",
        "_sink",
        "_stream",
        "_timer",
        "ended",
    )

    def __init__(
        self,
        app: HttpTransport,
        sid: str,
        live: _Live,
        stream: _EventStream,
        key: tuple[type, object],
        extra: list[tuple[bytes, bytes]],
    ) -> None:
        self._app = app
        self._sid = sid
        self._live = live
        self._stream = stream
        self._key = key
        self._extra = extra
        self._sink: SseSink | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._quiet = 0.0
        self._due = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.ended = False

    def __call__(self, receive: Receive, send: Send) -> Awaitable[None]:
        return self._app._post_stream(
            self._sid, self._live, self._stream, self._key, self._extra, receive, send
        )

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The response's headers (status 200), as :meth:`HttpTransport._stream_out` sends
        them."""
        return [*SSE_HEADERS, *self._extra]

    def start(self, sink: SseSink, loop: asyncio.AbstractEventLoop) -> tuple[bytes, bytes, bool]:
        """Opens the stream on ``sink`` (its tag, R-HTTP-17; the session's open stream,
        R-HTTP-11) and takes what it has so far: its priming event (R-HTTP-18) or nothing,
        then its events, each the body bytes of one write, and whether they end the response.
        Its later events are written to ``sink`` as they come."""
        app, stream = self._app, self._stream
        self._sink = sink
        self._loop = loop
        self._quiet = app.options.keepalive_ms / 1000
        self._live.opened(stream)  # R-HTTP-17: its tag
        stream.attach(self, 0)
        first = (
            rules.priming_event(rules.event_id(stream.tag, 0), app.options.retry_ms)
            if stream.primed
            else b""
        )
        app.sessions = rules.touch(app.sessions, self._sid, app._now(), +1)
        stream.writing(self, self.stop)
        payload, end = stream.take(self)
        if end:
            self._release()
        else:
            stream.pusher = self.pump
            self._due = due = loop.time() + self._quiet
            self._timer = loop.call_at(due, self._tick)
        return first, payload, end

    def pump(self) -> None:
        """Writes what the stream has for this connection (its stream signalled, or the
        connection can be written again); ends the response when the stream says so."""
        sink = self._sink
        if self.ended or sink is None or not sink.writable():
            return
        payload, end = self._stream.take(self)
        if end:
            self._release()
            sink.write(payload, True)
        elif payload:
            sink.write(payload, False)
            loop = self._loop
            if loop is not None:
                self._due = loop.time() + self._quiet

    def stop(self) -> None:
        """R-HTTP-19: the reader stalled; the stream goes on without this connection."""
        if not self.ended:
            self._release()
            if self._sink is not None:
                self._sink.abort()

    def _tick(self) -> None:
        """The keep-alive timer (R-HTTP-22): one per stream, moved by each write: when it fires
        before the quiet time since the last write passed, it sleeps again until then."""
        self._timer = None
        loop, sink = self._loop, self._sink
        if self.ended or loop is None or sink is None:
            return
        now = loop.time()
        if self._due - now > 0.001:
            self._timer = loop.call_at(self._due, self._tick)
            return
        if self._stream.idle(self) and sink.writable():
            sink.write(rules.KEEPALIVE, False)
        self._due = due = now + self._quiet
        self._timer = loop.call_at(due, self._tick)

    def _release(self) -> None:
        """The connection no longer writes the stream (its response ended, or was cut)."""
        self.ended = True
        stream = self._stream
        if stream.pusher == self.pump:
            stream.pusher = None
        if stream.stopper == self.stop:
            stream.stopper = None  # the stream, kept for a resume, does not keep the connection
        stream.detach(self)
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        app = self._app
        app.sessions = rules.touch(app.sessions, self._sid, app._now(), -1)


class HttpTransport:
    """The ASGI application: Streamable HTTP on ``/mcp`` and the 2024-11-05 pair (``legacy``)
    for ``server``, an :class:`askgate.server.Server` (anything with what
    :class:`askgate.transports.base.Serving` lists). It has the shape of every transport
    (:class:`askgate.transports.base.Transport`): built from the server, it runs it for the
    length of :meth:`running` (a standalone app does so in the ASGI lifespan).

    ``auth`` produces the principal (default: loopback peers only). ``options`` are the checks'
    (:class:`askgate.core.http.HttpOptions`): the bound port, Host/Origin allowlists, the body
    cap, the idle time after which a session is reaped. A server with no configured tool
    authorizer or no read authorizer refuses to start (R-HTTP-13) unless ``guard=False``.
    """

    name: ClassVar[TransportName] = "http"

    def __init__(
        self,
        server: Serving,
        *,
        auth: AuthProvider | None = None,
        options: rules.HttpOptions | None = None,
        guard: bool = True,
    ) -> None:
        if guard:
            refusal = rules.deployment_refusal(
                server.authorization_configured(), server.read_authorization_configured()
            )
            if refusal is not None:
                raise OptionError("authorizer", None, refusal)
        self.server = server
        self.auth: AuthProvider = auth if auth is not None else LoopbackOnly()
        self.options = options if options is not None else rules.HttpOptions()
        self.sessions = rules.Sessions()
        self._touch_within = rules.touch_resolution(self.options)  # R-HTTP-11
        self._live: dict[str, _Live] = {}
        self._clock = self._now  # one bound method, shared by every session
        self._event: Callable[[], anyio.Event] = anyio.Event  # the running loop's, once known
        self._seconds: Callable[[], float] = anyio.current_time  # the same: the loop's clock
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop, when it is asyncio's
        self._runtime: Runtime | None = None
        self._stopping = False
        self._stateless_ids = itertools.count()
        self.legacy: LegacySse | None = LegacySse(self)  # the 2024-11-05 pair (R-HTTP-14)

    @property
    def runtime(self) -> Runtime:
        """The server's runtime; raises when the app is not running."""
        if self._runtime is None:
            raise RuntimeError("the HTTP app is not running: use `async with app.running()`")
        return self._runtime

    @property
    def current_runtime(self) -> Runtime | None:
        """The server's runtime while the app runs, else ``None``."""
        return self._runtime

    @asynccontextmanager
    async def running(self) -> AsyncIterator[HttpTransport]:
        """Runs the server's runtime and the idle-session reaper for the length of the block."""
        async with self.server.running(self.name) as runtime:
            self._runtime = runtime
            self._event, self._seconds = _loop_event_and_clock()
            self._loop = _asyncio_loop()
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._reap_forever, name="askgate session reaper")
                try:
                    yield self
                finally:
                    tg.cancel_scope.cancel()
                    for sid in list(self._live):
                        self._end(sid)
                    if self.legacy is not None:
                        self.legacy.close_all()
                    self._runtime = None

    def stop(self) -> None:
        """The server was told to stop (R-STOP-1): every open call is ended with its answer
        (a parked one denied, its prompt withdrawn), the session streams and the ``/sse``
        streams end once they carry it, and later requests are 503. Called on the event
        loop's thread; what is not running does nothing."""
        runtime = self._runtime
        if runtime is None or self._stopping:
            return
        self._stopping = True
        runtime.feed(ServerStopping(runtime.now()))
        for live in self._live.values():
            live.close_all()  # each stream ends after what it was given
        if self.legacy is not None:
            self.legacy.finish_all()  # so does each 2024-11-05 /sse stream

    async def _reap_forever(self) -> None:
        every = min(REAP_EVERY_MS, max(1, self.options.idle_ms // 4)) / 1000
        while True:
            await anyio.sleep(every)
            self.reap(self._now())

    def reap(self, now: int) -> int:
        """Ends the sessions idle at ``now`` (R-HTTP-11); returns how many."""
        self.sessions, idle = rules.reap(self.sessions, now, self.options)
        for session in idle:
            self._detach(session.id, session.conn)
        for live in self._live.values():
            live.sweep(now)  # R-HTTP-19: ended streams past their time
        return len(idle)

    def _end(self, sid: str) -> None:
        self.sessions, session = rules.end(self.sessions, sid)
        if session is not None:
            self._detach(sid, session.conn)

    def _detach(self, sid: str, conn: Hashable) -> None:
        live = self._live.pop(sid, None)
        runtime = self._runtime
        if runtime is not None:
            runtime.feed(SubscriberDetached(conn, self._now()))  # drops its calls (R-DROP-3)
            runtime.unroute(conn)
        if live is not None:
            live.close_all()

    # -- routing ---------------------------------------------------------------------------

    def _now(self) -> int:
        """The runtime's clock (cheaper than looking the event loop up), or the loop's."""
        return self._runtime.now() if self._runtime is not None else now_ms()

    # -- ASGI ------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        note_request(scope)  # for the line a refusal logs
        headers = header_map(scope)
        receive, send = lingering(receive, send, headers, self.options)  # R-HTTP-24
        gate = scope.pop(_GATED, None)  # checked already by answer_whole, which declined it
        if gate is None:
            gate = self._gate(scope, headers)
        if isinstance(gate, _Refused):
            await reject(send, gate.rejection, gate.extra)
            return
        legacy, principal = gate
        if legacy is not None and self.legacy is not None:
            await self.legacy.handle(legacy, scope, headers, principal, receive, send)
            return
        route = rules.method_route(scope.get("method", ""))
        if route == "POST":
            await self._post(headers, principal, receive, send, scope)
        elif route == "GET":
            await self._get(headers, principal, receive, send)
        elif route == "DELETE":
            await self._delete(headers, principal, send)
        else:
            await reject(send, route, [(b"allow", rules.ALLOWED_METHODS.encode())])

    def _gate(
        self, scope: Scope, headers: dict[str, str]
    ) -> _Refused | tuple[legacy_rules.Route | None, str]:
        """What every request passes before its method is looked at: Origin and Host (R-HTTP-1,
        R-HTTP-2), the path, the principal (R-HTTP-9), a running server. The legacy route the
        request is for (``None``: ``/mcp``) and the principal, or the refusal, not yet logged."""
        rejection = rules.check_origin_and_host(headers, self.options)  # R-HTTP-1, R-HTTP-2
        if rejection is not None:
            return _Refused(rejection)
        path = scope.get("path", "").rstrip("/")
        legacy = None if self.legacy is None else self.legacy.route(path, scope.get("method", ""))
        if path != ENDPOINT and legacy is None:
            return _Refused(rules.NOT_FOUND)
        client = scope.get("client")
        principal = self.auth(headers, client[0] if client else None)
        if principal is None:  # R-HTTP-9: 401, or 403 from a provider that takes no credentials
            refused, challenge = rules.auth_refusal(
                getattr(self.auth, "credentials", True), getattr(self.auth, "challenge", "")
            )
            extra = [(b"www-authenticate", challenge.encode())] if challenge else None
            return _Refused(refused, extra)
        unavailable = rules.unavailable(  # R-HTTP-45
            self._runtime is not None, self._stopping, scope.get("method", "")
        )
        if unavailable is not None:
            return _Refused(unavailable)
        return legacy, principal

    def answer_whole(self, scope: Scope, body: bytes) -> Whole | Continuation | None:
        """A POST to ``/mcp`` whose ``body`` arrived whole with its headers, served without an
        ASGI request cycle, for askgate's own HTTP/1.1 server: the whole response, or what
        serves the rest of it on its request's ``receive`` and ``send`` (its SSE stream), once
        the request was fed. ``None`` (nothing fed, nothing answered): a request refused before
        its body is read, one for another path or method, or a body over the cap; it is served
        through ASGI as any other, which takes the gate's verdict from ``scope`` instead of
        asking the auth provider again. Every check and answer is the ASGI path's own, in its
        order. Call it in a context of the request's own (as a task would have): it notes the
        request there for the line a refusal logs."""
        note_request(scope)
        headers = header_map(scope)
        gate = self._gate(scope, headers)
        if isinstance(gate, _Refused) or gate[0] is not None or scope.get("method") != "POST":
            scope[_GATED] = gate
            return None
        principal = gate[1]
        head = self._post_head(headers, principal)
        if isinstance(head, rules.Rejection) or rules.body_too_large(len(body), self.options):
            scope[_GATED] = gate
            return None
        return self._post_body(head, headers, principal, body)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        try:
            async with self.running():
                await send({"type": "lifespan.startup.complete"})
                while (await receive())["type"] != "lifespan.shutdown":
                    pass
        except BaseException as failed:
            logger.exception("askgate HTTP app failed")
            await send({"type": "lifespan.startup.failed", "message": type(failed).__name__})
            raise
        await send({"type": "lifespan.shutdown.complete"})

    def _session(
        self, headers: dict[str, str], principal: str, *, initialize: bool = False
    ) -> rules.Session | rules.Rejection | None:
        found = rules.lookup(
            self.sessions, headers.get(rules.SESSION_HEADER), principal, initialize=initialize
        )
        if isinstance(found, rules.Session) and found.id not in self._live:  # a legacy one
            return rules.UNKNOWN_SESSION
        return found

    async def _post(
        self,
        headers: dict[str, str],
        principal: str,
        receive: Receive,
        send: Send,
        scope: Scope | None = None,
    ) -> None:
        head = self._post_head(headers, principal)
        if isinstance(head, rules.Rejection):
            await reject(send, head)
            return
        body = await read_body_or_refuse(receive, send, self.options, scope)
        if body is None:  # refused: 408 or 413 (R-HTTP-25, R-HTTP-5)
            return
        served = self._post_body(head, headers, principal, body)
        if isinstance(served, Whole):
            await respond(send, *served)
        else:
            await served(receive, send)

    def _post_head(
        self, headers: dict[str, str], principal: str
    ) -> rules.Rejection | tuple[str, rules.Rejection | None, rules.Session | None]:
        """A POST's checks before its body is read: the version, the session named, the
        unsupported version (R-HTTP-26: a POST with no session may be modern; its body says),
        or the refusal (not yet logged)."""
        rejection = rules.check_post_headers(headers)  # R-HTTP-3, R-HTTP-4
        version = rules.DEFAULT_VERSION
        unsupported = None
        if rejection is None:
            version, rejection, unsupported = rules.post_version(headers)  # R-HTTP-6
        found = self._session(headers, principal, initialize=True)
        if rejection is None and isinstance(found, rules.Rejection):
            rejection = found  # R-HTTP-9: an unknown or foreign session, before the body
        if rejection is None and rules.declared_too_large(headers, self.options):
            rejection = rules.Rejection(413, "Payload Too Large")
        if rejection is not None:
            return rejection
        assert not isinstance(found, rules.Rejection)
        return version, unsupported, found

    def _post_body(
        self,
        head: tuple[str, rules.Rejection | None, rules.Session | None],
        headers: dict[str, str],
        principal: str,
        body: bytes,
    ) -> Whole | Continuation:
        """A POST once its body is read: decoded, routed, fed. The whole response when it is
        known at once (a refusal is logged here), else what serves the rest of it."""
        version, unsupported, found = head
        decoded = codec.decode(body)  # once: the reducer is fed what it made (R-HTTP-23)
        if found is None:  # no session named: a modern request, or what opens a session
            tools = self.runtime.state.tools
            route = rules.sessionless(headers, decoded, tools)  # R-HTTP-26, 27, 47
            if isinstance(route, rules.ModernRefusal):
                return Whole(route.status, encode(route.answer()), "application/json")
            if route == "stateless":
                return self._stateless(decoded, principal)
            if unsupported is not None:
                return refusal(unsupported)  # R-HTTP-6
        shape = rules.classify(decoded)
        runtime = self.runtime
        now = self._now()
        extra: list[tuple[bytes, bytes]] = []
        verdict = rules.post_session(  # R-HTTP-9, R-HTTP-11
            isinstance(found, rules.Session),
            isinstance(found, rules.Session) and found.id in self._live,
            shape.kind,
        )
        if isinstance(verdict, rules.Rejection):
            return refusal(verdict)
        if verdict == "session":
            assert isinstance(found, rules.Session)
            session = found
            live = self._live[session.id]
        else:
            self.sessions, minted = rules.mint(
                self.sessions, secrets.token_bytes(32), principal, now, self.options
            )
            if isinstance(minted, rules.Rejection):
                return refusal(minted)
            session = minted
            live = self._live[session.id] = _Live(
                session.id, session.conn, self.options, self._clock
            )
            runtime.route(session.conn, live)
            runtime.set_principal(session.conn, principal)  # for the log and Context
            runtime.on_close_stream(session.conn, live.close_stream)  # R-HTTP-21
            who = self.authenticated(principal)  # R-HTTP-40
            runtime.feed(SubscriberAttached(session.conn, now, who))  # R-SUB-1
            extra.append((rules.SESSION_HEADER.encode(), session.id.encode()))
        self.sessions = rules.touch(self.sessions, session.id, now, within=self._touch_within)
        event = MessageReceived(session.conn, decoded, now, mode="reply")
        if shape.kind in ("notification", "response"):
            runtime.feed(event)  # R-HTTP-7: an elicitation answer or a notification
            return Whole(rules.ACCEPTED, extra=extra)
        stream = _EventStream(self.options, primed=rules.primes(version), event=self._event)
        key = _key(shape.request_id)
        live.feeding = (key, stream)
        try:
            runtime.feed(event)
        finally:
            live.feeding = None
        if shape.kind == "invalid":
            return Whole(400, stream.final or b"", "application/json", extra)
        if stream.done or stream.last:  # the answer, or what relates to it, came already
            answered = self._answer_now(stream)
            if answered is not None:
                return Whole(*answered, extra)

        if not stream.done:
            # Registered now, not when ``rest`` first runs: run in a task of its own
            # (docs/performance.md), it may start after a worker fed here has already answered.
            live.pending.setdefault(key, stream)
        if stream.done or stream.last:  # its stream opens now (R-HTTP-7)
            return DirectStream(self, session.id, live, stream, key, extra)

        async def rest(receive: Receive, send: Send) -> None:
            await self._post_stream(session.id, live, stream, key, extra, receive, send)

        return rest

    @staticmethod
    def _answer_now(stream: _EventStream) -> tuple[int, bytes, str] | None:
        """A request's answer as a whole response (R-HTTP-7), or ``None`` for its SSE stream."""
        answer = rules.request_answer(stream.done, stream.last, stream.final is not None)
        if answer == "nothing":
            return 200, b"", "text/event-stream"
        if answer == "json":
            return 200, stream.final or b"", "application/json"
        return None

    async def _post_stream(
        self,
        sid: str,
        live: _Live,
        stream: _EventStream,
        key: tuple[type, object],
        extra: list[tuple[bytes, bytes]],
        receive: Receive,
        send: Send,
    ) -> None:
        """A fed request's answer once it is not known at once: waits for the first message
        about the call, then answers as JSON or opens its SSE stream (R-HTTP-7, R-HTTP-17)."""
        if not stream.done and not stream.last:
            # R-HTTP-7: wait for the first message about the call; a Reply first is plain JSON
            # (no stream, no disconnect watcher). Counted as an open stream meanwhile, so the
            # session is not reaped under a long call. A close asked for (R-HTTP-21) or a quiet
            # keepalive_ms opens the stream (R-HTTP-18).
            live.pending.setdefault(key, stream)
            self.sessions = rules.touch(self.sessions, sid, self._now(), +1)
            try:
                with anyio.move_on_after(self.options.keepalive_ms / 1000):
                    await stream.first()
            finally:
                self.sessions = rules.touch(self.sessions, sid, self._now(), -1)
        answered = self._answer_now(stream)
        if answered is not None:
            await respond(send, *answered, extra)
            return
        if not stream.done:
            live.pending.setdefault(key, stream)
        live.opened(stream)  # R-HTTP-17: its tag
        token = object()
        stream.attach(token, 0)
        first = (
            rules.priming_event(rules.event_id(stream.tag, 0), self.options.retry_ms)
            if stream.primed
            else b""
        )
        # No disconnect watcher: a POST's stream ends when its call does (every call is bounded
        # by its timeouts), and what is sent after the client left goes nowhere; it stays in
        # the replay buffer for a GET that resumes it (R-HTTP-20).
        await self._stream_out(
            sid, stream, token, first, receive, send, extra, until_disconnect=False
        )

    async def _stream_out(
        self,
        sid: str,
        stream: _EventStream,
        token: object,
        first: bytes,
        receive: Receive,
        send: Send,
        extra: list[tuple[bytes, bytes]],
        *,
        until_disconnect: bool = True,
    ) -> None:
        """Writes ``first``, then ``stream``'s events as SSE while the connection ``token``
        holds it (until it finishes, its connection is closed or taken over); with
        ``until_disconnect``, also until the client disconnects (a GET stream never finishes
        by itself). A quiet ``keepalive_ms`` writes a comment (R-HTTP-22)."""
        headers = [*SSE_HEADERS, *extra]
        self.sessions = rules.touch(self.sessions, sid, self._now(), +1)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            if not until_disconnect:
                if self._loop is not None:
                    await self._write_plain(stream, token, first, send, self._loop)
                else:
                    await self._write_events(stream, token, first, send)
                return
            async with anyio.create_task_group() as tg:

                async def watch() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()  # the client went away: stop writing

                tg.start_soon(watch)
                await self._write_events(stream, token, first, send)
                tg.cancel_scope.cancel()
        except OSError:
            logger.debug("a client closed its stream")
        finally:
            # Disconnection is not cancellation: the call goes on, its messages buffered for a
            # resume (R-HTTP-19, R-HTTP-20).
            stream.detach(token)
            self.sessions = rules.touch(self.sessions, sid, self._now(), -1)

    async def _write_events(
        self, stream: _EventStream, token: object, first: bytes, send: Send
    ) -> None:
        """Writes ``first``, then ``stream``'s events while the connection ``token`` holds it.
        A stall stops this loop even while a write to a reader that stopped reading blocks
        (R-HTTP-19); the response is left unfinished and its connection closed. (A take-over,
        R-HTTP-20, ends the old connection cleanly at its next take instead.) One cancel scope
        carries both that stop and the keep-alive deadline (R-HTTP-22), which is set only while
        the loop waits for events: when it passes, the scope ends, and a new one goes on with
        a keep-alive comment as its first write."""
        stalled = False
        while True:
            with anyio.CancelScope() as scope:

                def stop(scope: anyio.CancelScope = scope) -> None:
                    nonlocal stalled
                    stalled = True
                    scope.cancel()

                stream.writing(token, stop)
                if await self._write_loop(stream, token, first, send, scope):
                    return
            if stalled:  # R-HTTP-19
                return
            first = rules.KEEPALIVE  # the quiet wait's deadline passed (R-HTTP-22)

    async def _write_plain(
        self,
        stream: _EventStream,
        token: object,
        first: bytes,
        send: Send,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """:meth:`_write_events` on asyncio, where nothing around the loop cancels it (a POST's
        stream), without a cancel scope: a quiet wait is ended by a timer of the loop's (then
        a keep-alive comment is written, R-HTTP-22), and a stall (R-HTTP-19) wakes the wait or
        cancels the task's blocked write, the response left unfinished, as there."""
        quiet = self.options.keepalive_ms / 1000
        task = asyncio.current_task()
        stalled = sending = False

        def stop() -> None:
            nonlocal stalled
            stalled = True
            if sending and task is not None:
                task.cancel()  # a write blocked on a reader that stopped reading

        stream.writing(token, stop)
        try:
            while True:
                if first:
                    sending = True
                    await send({"type": "http.response.body", "body": first, "more_body": True})
                    sending = False
                    first = b""
                if stream.idle(token):
                    stream.quieted = None
                    timer = loop.call_later(quiet, stream.quiet, token)
                    try:
                        await stream.ready(token)
                    finally:
                        timer.cancel()
                    if stalled:
                        return
                    if stream.quieted is token and stream.idle(token):
                        first = rules.KEEPALIVE  # the quiet wait's deadline passed (R-HTTP-22)
                        continue
                payload, end = stream.take(token)
                if end or payload:
                    sending = True
                    message = {"type": "http.response.body", "body": payload, "more_body": not end}
                    await send(message)
                    sending = False
                if end:
                    return
        except asyncio.CancelledError:
            if not (stalled and sending) or task is None or task.uncancel() > 0:
                raise  # not (only) the stall's
        finally:
            if stream.quieted is token:
                stream.quieted = None

    async def _write_loop(
        self,
        stream: _EventStream,
        token: object,
        first: bytes,
        send: Send,
        scope: anyio.CancelScope,
    ) -> bool:
        """The write loop inside ``scope``; ``True`` once the response ended."""
        quiet = self.options.keepalive_ms / 1000
        if first:
            await send({"type": "http.response.body", "body": first, "more_body": True})
        while True:
            if stream.idle(token):
                scope.deadline = self._seconds() + quiet
                await stream.ready(token)
                scope.deadline = math.inf
            payload, end = stream.take(token)
            if end:
                await send({"type": "http.response.body", "body": payload, "more_body": False})
                return True
            if payload:
                await send({"type": "http.response.body", "body": payload, "more_body": True})

    def authenticated(self, principal: str) -> str | None:
        """Who the reducer is told authenticated a request the provider admitted as
        ``principal`` (:func:`askgate.core.http.reducer_principal`, R-HTTP-40), given whether
        the provider takes credentials."""
        return rules.reducer_principal(principal, getattr(self.auth, "credentials", True))

    def _stateless(self, decoded: codec.Decoded, principal: str) -> Whole | Continuation:
        """R-HTTP-26: one modern request, served on a reducer connection of its own that lives
        as long as its POST, with the request's ``principal`` (R-HTTP-29). The answer is JSON
        when the reducer answered before anything else came (its status by R-HTTP-28), else an
        SSE stream of what relates to the request, then its answer. The client leaving before
        the answer cancels the request (R-HTTP-30). Returns the whole response when the request
        was answered in the step that received it (its connection already ended), else what
        serves the rest."""
        assert isinstance(decoded, codec.Request)
        runtime = self.runtime
        now = self._now()
        conn = (STATELESS, next(self._stateless_ids))
        live = _Live("", conn, self.options, self._clock)
        stream = _EventStream(self.options, event=self._event)
        key = _key(decoded.id)
        answer: list[dict[str, object]] = []
        route = live

        def deliver(effect: Reply | Push) -> None:
            if isinstance(effect, Reply) and effect.message is not None:
                answer.append(effect.message)
            route(effect)

        runtime.route(conn, deliver)
        runtime.set_principal(conn, principal)  # for the log and Context
        who = self.authenticated(principal)  # R-HTTP-40
        runtime.feed(SubscriberAttached(conn, now, who, per_request=True))  # R-SUB-1, R-PARK-7
        live.feeding = (key, stream)
        try:
            event = MessageReceived(conn, decoded, now, mode="reply", principal=who)
            runtime.feed(event)
        finally:
            live.feeding = None

        def end() -> None:
            if self._runtime is runtime:  # still running: the app may have stopped meanwhile
                if not stream.done:  # R-HTTP-30: closing the response cancels the request
                    params = {"requestId": decoded.id, "reason": "the client closed the response"}
                    cancel = codec.Notification("notifications/cancelled", params)
                    runtime.feed(MessageReceived(conn, cancel, self._now()))
                runtime.feed(SubscriberDetached(conn, self._now()))
            runtime.unroute(conn)
            live.close_all()

        if stream.done:  # answered in the step that received it: nothing to watch
            whole = self._modern_whole(stream, answer)
            if whole is not None:
                end()
                return whole
        else:  # registered before ``rest`` runs, maybe in a later task (docs/performance.md)
            live.pending[key] = stream

        async def rest(receive: Receive, send: Send) -> None:
            try:
                if stream.done:
                    await self._modern_answer(live, stream, answer, send)
                    return
                async with anyio.create_task_group() as tg:

                    async def watch() -> None:
                        while (await receive())["type"] != "http.disconnect":
                            pass
                        tg.cancel_scope.cancel()  # the client left: nothing more is written

                    tg.start_soon(watch)
                    if not stream.last:  # R-HTTP-7: the answer first is plain JSON
                        with anyio.move_on_after(self.options.keepalive_ms / 1000):
                            await stream.first()
                    await self._modern_answer(live, stream, answer, send)
                    tg.cancel_scope.cancel()
            except OSError:
                logger.debug("a client closed its stream")
            finally:
                end()

        return rest

    @staticmethod
    def _modern_whole(stream: _EventStream, answer: list[dict[str, object]]) -> Whole | None:
        """A modern request's answer as a whole response: JSON when the reducer answered before
        anything else came (its status by R-HTTP-28); ``None`` for its SSE stream (R-HTTP-7)."""
        answer_as = rules.request_answer(stream.done, stream.last, bool(answer))
        if answer_as == "json":
            status = rules.modern_status(answer[-1])  # R-HTTP-28
            return Whole(status, stream.final or b"", "application/json")
        if answer_as == "nothing":
            return Whole(200, b"", "text/event-stream")
        return None

    async def _modern_answer(
        self, live: _Live, stream: _EventStream, answer: list[dict[str, object]], send: Send
    ) -> None:
        """A modern request's answer: JSON when the reducer answered before anything else came
        (its status by R-HTTP-28), else its stream as SSE (R-HTTP-7)."""
        whole = self._modern_whole(stream, answer)
        if whole is not None:
            await respond(send, *whole)
        else:
            live.opened(stream)
            token = object()
            stream.attach(token, 0)
            headers = [
                (b"content-type", b"text/event-stream"),
                (b"cache-control", b"no-cache"),
                (b"x-accel-buffering", b"no"),
            ]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await self._write_events(stream, token, b"", send)

    async def _get(
        self, headers: dict[str, str], principal: str, receive: Receive, send: Send
    ) -> None:
        refused = rules.modern_get_or_delete(headers)  # R-HTTP-26
        if refused is not None:
            await reject(send, refused, [(b"allow", b"POST")])
            return
        rejection = rules.check_get_headers(headers)
        if rejection is None:
            _, rejection = rules.check_version(headers)
        found = self._session(headers, principal)
        if rejection is None and isinstance(found, rules.Rejection):
            rejection = found
        if rejection is not None or not isinstance(found, rules.Session):
            await reject(send, rejection or rules.Rejection(400, "Bad Request"))
            return
        live = self._live[found.id]
        replay = b""
        last_event_id = headers.get(rules.LAST_EVENT_ID_HEADER, "").strip()
        if last_event_id:  # R-HTTP-20: a resume
            now = self._now()
            live.sweep(now)
            parsed = rules.parse_event_id(last_event_id)
            resumed = None if parsed is None else live.streams.get(parsed[0])
            number = 0 if parsed is None else parsed[1]
            view = None if resumed is None else resumed.view()
            refused = rules.resume(view, number, now, self.options)
            if refused is not None or resumed is None:
                await reject(send, refused or rules.RESUME_REFUSED)
                return
            if resumed.post:  # the rest of a POST's stream, on this GET
                self.sessions = rules.touch(self.sessions, found.id, now)
                token = object()
                resumed.attach(token, number)
                await self._stream_out(found.id, resumed, token, b"", receive, send, [])
                return
            replay = resumed.frames_after(number)  # a GET's: then the new standalone stream
        self.sessions, refused = rules.open_get(self.sessions, found.id, self._now())  # R-HTTP-10
        if refused is not None:
            await reject(send, refused)
            return
        stream = live.get = _EventStream(self.options, post=False, event=self._event)
        live.opened(stream)
        token = object()
        stream.attach(token, 0)
        try:
            await self._stream_out(found.id, stream, token, replay, receive, send, [])
        finally:
            if live.get is stream:
                live.get = None
            live.finished(stream, None)
            self.sessions = rules.close_get(self.sessions, found.id, self._now())

    async def _delete(self, headers: dict[str, str], principal: str, send: Send) -> None:
        refused = rules.modern_get_or_delete(headers)  # R-HTTP-26
        if refused is not None:
            await reject(send, refused, [(b"allow", b"POST")])
            return
        _, rejection = rules.check_version(headers)
        found = self._session(headers, principal)
        if rejection is None and isinstance(found, rules.Rejection):
            rejection = found
        if rejection is not None or not isinstance(found, rules.Session):
            await reject(send, rejection or rules.Rejection(400, "Bad Request"))
            return
        self._end(found.id)  # R-HTTP-11
        await respond(send, 204)


HttpApp = HttpTransport
"""The same class: the name the ASGI app is mounted and documented under."""
