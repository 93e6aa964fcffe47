"""The 2024-11-05 HTTP+SSE pair, served by the same ASGI app as Streamable HTTP (spec/http.md,
R-HTTP-14 .. R-HTTP-16).

``GET /sse`` mints a session (the same table, random source and principal binding as ``/mcp``'s),
attaches one reducer connection to it and streams everything the reducer sends that connection:
first the ``endpoint`` event, then each message as ``event: message``, with a keep-alive comment
after each quiet ``keepalive_ms``. ``POST /messages?sessionId=ID`` feeds one message to that
connection and is answered 202. Closing the stream ends the session: ``SubscriberDetached`` drops
its parked calls and kills its workers.

:class:`askgate.transports.http.HttpTransport` dispatches the two paths here after its Host,
Origin and principal checks; every decision is in :mod:`askgate.core.sse_legacy` and
:mod:`askgate.core.http`. ``app.legacy = None`` turns the pair off (404);
``app.legacy = LegacySse(app, keepalive_ms=...)`` changes the keep-alive period.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Hashable
from typing import Protocol

import anyio

from askgate.core import SubscriberAttached, SubscriberDetached, codec
from askgate.core import http as rules
from askgate.core import sse_legacy as legacy
from askgate.core.events import MessageReceived

from .asgi import Receive, Scope, Send, read_body_or_refuse, reject, respond
from .runtime import Runtime

__all__ = ["LegacyHost", "LegacySse"]

logger = logging.getLogger("askgate.http.sse")


class LegacyHost(Protocol):
    """What the pair uses of the app that serves it
    (:class:`askgate.transports.http.HttpTransport`): its options, its session table (shared
    with Streamable HTTP) and the server's runtime."""

    options: rules.HttpOptions
    sessions: rules.Sessions

    @property
    def runtime(self) -> Runtime: ...

    @property
    def current_runtime(self) -> Runtime | None: ...

    def authenticated(self, principal: str) -> str | None: ...


class _Stream:
    """The messages of an ``/sse`` stream: pushed in order, then finished (or closed, once its
    reader stalled, R-HTTP-16)."""

    def __init__(self) -> None:
        self.items: list[bytes] = []
        self.done = False
        self.final: bytes | None = None
        self.pending = 0
        self._wake: anyio.Event | None = None

    def put(self, data: bytes) -> None:
        if self.done:
            return
        self.items.append(data)
        self.pending += len(data)
        if rules.stalled(self.pending):  # R-HTTP-16
            logger.warning("closed a stream whose reader stalled (%d bytes waiting)", self.pending)
            self.items.clear()
            self.finish(None)
            return
        self._signal()

    def finish(self, data: bytes | None) -> None:
        if self.done:
            return
        self.done = True
        self.final = data
        self._signal()

    def _signal(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def take(self) -> tuple[list[bytes], bool]:
        """The messages waiting (the final one last) and whether the stream is finished."""
        while not self.items and not self.done:
            self._wake = anyio.Event()
            await self._wake.wait()
        items, self.items, self.pending = self.items, [], 0
        if self.done and self.final is not None:
            items.append(self.final)
            self.final = None
        return items, self.done


class LegacySse:
    """The legacy pair of one app (a :class:`LegacyHost`): its open ``/sse`` streams, by
    session id."""

    def __init__(self, app: LegacyHost, *, keepalive_ms: int | None = None) -> None:
        if keepalive_ms is None:  # the app's, as for its Streamable HTTP streams (R-HTTP-22)
            keepalive_ms = app.options.keepalive_ms
        if not isinstance(keepalive_ms, int) or isinstance(keepalive_ms, bool) or keepalive_ms < 1:
            raise ValueError(
                f"askgate refuses to start: keepalive_ms={keepalive_ms!r} must be >= 1"
            )
        self.app = app
        self.keepalive_ms = keepalive_ms
        self._streams: dict[str, _Stream] = {}
        self._conns: dict[str, Hashable] = {}  # each open session's reducer connection

    def route(self, path: str, method: str) -> legacy.Route | None:
        """The legacy endpoint a request is for, or ``None``."""
        return legacy.route(path, method)

    def owns(self, sid: str) -> bool:
        """Whether ``sid`` is an open legacy session (not a Streamable HTTP one)."""
        return sid in self._streams

    def __len__(self) -> int:
        return len(self._streams)

    def finish_all(self) -> None:
        """The server is stopping (R-STOP-1): every open ``/sse`` stream ends once it has
        written what it was given (the answers of the stop included); each session then ends
        as when its client closes the stream (R-HTTP-16)."""
        for stream in self._streams.values():
            stream.finish(None)

    def close_all(self) -> None:
        """The app is stopping: ends every open session now, while the runtime still runs, so
        each connection is detached and its calls dropped (R-HTTP-16); the streams finish."""
        for sid, conn in list(self._conns.items()):
            self._end(sid, conn)

    async def handle(
        self,
        where: legacy.Route,
        scope: Scope,
        headers: dict[str, str],
        principal: str,
        receive: Receive,
        send: Send,
    ) -> None:
        """Serves a request the app already checked (R-HTTP-1, R-HTTP-2, the principal)."""
        if where.rejection is not None:
            await reject(send, where.rejection, [(b"allow", where.allow.encode())])
        elif where.kind == "open":
            await self._open(scope, principal, receive, send)
        else:
            await self._post(scope, headers, principal, receive, send)

    # -- GET /sse --------------------------------------------------------------------------

    async def _open(self, scope: Scope, principal: str, receive: Receive, send: Send) -> None:
        app = self.app
        runtime = app.runtime
        now = runtime.now()
        app.sessions, minted = rules.mint(  # R-HTTP-14: as R-HTTP-8 does
            app.sessions, secrets.token_bytes(32), principal, now, app.options
        )
        if isinstance(minted, rules.Rejection):
            await reject(send, minted)
            return
        session = minted
        stream = self._streams[session.id] = _Stream()
        self._conns[session.id] = session.conn
        app.sessions = rules.touch(app.sessions, session.id, now, +1)  # open: never idle
        runtime.attach(session.conn, stream.put)
        runtime.set_principal(session.conn, principal)  # for the log and Context
        who = app.authenticated(principal)  # R-HTTP-40
        runtime.feed(SubscriberAttached(session.conn, now, who))  # R-SUB-1
        try:
            await self._stream_out(scope, session.id, stream, receive, send)
        finally:
            self._end(session.id, session.conn)

    def _end(self, sid: str, conn: Hashable) -> None:
        """R-HTTP-16: the stream closed; the session and its connection end."""
        stream = self._streams.pop(sid, None)
        self._conns.pop(sid, None)
        if stream is not None:
            stream.finish(None)
        app = self.app
        app.sessions, ended = rules.end(app.sessions, sid)
        runtime = app.current_runtime
        if runtime is not None:
            if ended is not None:  # not already reaped
                runtime.feed(SubscriberDetached(conn, runtime.now()))  # R-DROP-3
            runtime.detach(conn)

    async def _stream_out(
        self, scope: Scope, sid: str, stream: _Stream, receive: Receive, send: Send
    ) -> None:
        headers = [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        first = legacy.endpoint_event(scope.get("root_path", ""), sid)
        quiet = self.keepalive_ms / 1000
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": first, "more_body": True})
            async with anyio.create_task_group() as tg:

                async def watch() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()  # the client closed the stream (R-HTTP-16)

                tg.start_soon(watch)
                while True:
                    items: list[bytes] = []
                    finished = False
                    with anyio.move_on_after(quiet) as waited:
                        items, finished = await stream.take()
                    if waited.cancelled_caught:
                        payload = legacy.KEEPALIVE
                    else:
                        payload = b"".join(legacy.message_event(item) for item in items)
                    if payload:
                        await send(
                            {"type": "http.response.body", "body": payload, "more_body": True}
                        )
                    if finished:
                        break
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                tg.cancel_scope.cancel()
        except OSError:
            logger.debug("a client closed its /sse stream")

    # -- POST /messages --------------------------------------------------------------------

    async def _post(
        self, scope: Scope, headers: dict[str, str], principal: str, receive: Receive, send: Send
    ) -> None:
        app = self.app
        found: rules.Session | rules.Rejection | None = legacy.check_post(headers)  # 415
        if found is None:
            sid = legacy.session_param(scope.get("query_string", b""))  # 400
            found = sid if isinstance(sid, rules.Rejection) else self._lookup(sid, principal)
        if isinstance(found, rules.Session):
            found = legacy.check_length(headers, app.options) or found  # 413, declared
        if not isinstance(found, rules.Session):
            await reject(send, found or rules.Rejection(400, "Bad Request"))
            return
        body = await read_body_or_refuse(receive, send, app.options, scope)
        if body is None:  # refused: 408 or 413 (R-HTTP-25, R-HTTP-5)
            return
        runtime = app.current_runtime
        if runtime is None or not self.owns(found.id):  # it ended while the body came in
            await reject(send, rules.Rejection(404, "Not Found: unknown session"))
            return
        now = runtime.now()
        app.sessions = rules.touch(app.sessions, found.id, now)
        decoded = codec.decode(body)  # once: the reducer is fed what it made (R-HTTP-23)
        runtime.feed(MessageReceived(found.conn, decoded, now))  # its answer goes on the stream
        status, payload = legacy.answer(decoded)
        await respond(send, status, payload, "application/json" if payload else None)

    def _lookup(self, sid: str, principal: str) -> rules.Session | rules.Rejection:
        return legacy.lookup(self.app.sessions, sid, principal, self._streams)
