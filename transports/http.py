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
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, MutableMapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import anyio

from askgate.core import OptionError, Push, Reply, SubscriberAttached, SubscriberDetached
from askgate.core import http as rules
from askgate.core.codec import encode
from askgate.core.events import MessageReceived

from .auth import AuthProvider, LoopbackOnly
from .runtime import Runtime, now_ms

if TYPE_CHECKING:
    from .sse_legacy import LegacySse

__all__ = ["HttpApp"]

logger = logging.getLogger("askgate.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

ENDPOINT: Final = "/mcp"
STREAM_HIGH_WATER: Final = 4 * 1024 * 1024
"""Bytes waiting on one stream above which the stream is closed (its reader stalled)."""
REAP_EVERY_MS: Final = 60_000


def _key(request_id: object) -> tuple[type, object]:
    """Request ids keep their type: ``1`` and ``"1"`` are different requests."""
    return (type(request_id), request_id)


class _Stream:
    """The messages for one response: pushed in order, then finished (or closed)."""

    def __init__(self) -> None:
        self.items: list[bytes] = []
        self.done = False
        self.final: bytes | None = None
        self.pending = 0
        self.sent_any = False
        self.eids: list[str] = []
        self._wake: anyio.Event | None = None

    def put(self, data: bytes) -> None:
        if self.done:
            return
        self.items.append(data)
        self.pending += len(data)
        if self.pending > STREAM_HIGH_WATER:
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

    async def ready(self) -> None:
        """Returns once a message is waiting or the stream is finished."""
        while not self.items and not self.done:
            self._wake = anyio.Event()
            await self._wake.wait()

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


class _Live:
    """The shell's side of one session: its open streams, and where its messages go."""

    def __init__(self, sid: str, conn: Hashable) -> None:
        self.sid = sid
        self.conn = conn
        self.pending: dict[tuple[type, object], _Stream] = {}
        self.get: _Stream | None = None
        self.feeding: tuple[tuple[type, object], _Stream] | None = None
        self.by_eid: dict[str, _Stream] = {}

    def stream_for(self, request_id: object) -> _Stream | None:
        key = _key(request_id)
        if self.feeding is not None and self.feeding[0] == key:
            return self.feeding[1]
        return self.pending.get(key)

    def finished(self, stream: _Stream, data: bytes | None) -> None:
        stream.finish(data)
        for eid in stream.eids:
            if self.by_eid.get(eid) is stream:
                del self.by_eid[eid]

    def close_all(self) -> None:
        for stream in [*self.pending.values(), *([self.get] if self.get else [])]:
            self.finished(stream, None)
        if self.feeding is not None:
            self.finished(self.feeding[1], None)
        self.pending.clear()
        self.by_eid.clear()


def _header_map(scope: Scope) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


async def _respond(
    send: Send,
    status: int,
    body: bytes = b"",
    content_type: str | None = None,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers = [(b"content-length", str(len(body)).encode())]
    if content_type is not None:
        headers.append((b"content-type", content_type.encode()))
    headers.extend(extra or [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_stream(stream: _Stream, send: Send) -> None:
    """The stream's messages as SSE events, the last ones with the end of the body."""
    while True:
        items, finished = await stream.take()
        payload = b"".join(_sse(item) for item in items)
        if finished:
            await send({"type": "http.response.body", "body": payload, "more_body": False})
            return
        if payload:
            await send({"type": "http.response.body", "body": payload, "more_body": True})


async def _reject(
    send: Send, rejection: rules.Rejection, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    """An HTTP error with a JSON-RPC error body that has no id."""
    body = encode(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": rejection.reason}}
    )
    await _respond(send, rejection.status, body, "application/json", extra)


def _sse(data: bytes) -> bytes:
    return b"event: message\ndata: " + data + b"\n\n"


class HttpApp:
    """The ASGI application. ``server`` is an :class:`askgate.server.Server` (anything with
    ``running(transport, state=..., runtime_class=...)``, ``authorization_configured()`` and
    ``read_authorization_configured()``).

    ``auth`` produces the principal (default: loopback peers only). ``options`` are the checks'
    (:class:`askgate.core.http.HttpOptions`): the bound port, Host/Origin allowlists, the body
    cap, the idle time after which a session is reaped. A server with no configured tool
    authorizer or no read authorizer refuses to start (R-HTTP-13) unless ``guard=False``.
    """

    def __init__(
        self,
        server: Any,
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
        self._live: dict[str, _Live] = {}
        self._runtime: Runtime | None = None
        from .sse_legacy import LegacySse  # noqa: PLC0415 - it imports this module

        self.legacy: LegacySse | None = LegacySse(self)  # the 2024-11-05 pair (R-HTTP-14)

    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:
            raise RuntimeError("the HTTP app is not running: use `async with app.running()`")
        return self._runtime

    @asynccontextmanager
    async def running(self) -> AsyncIterator[HttpApp]:
        """Runs the server's runtime and the idle-session reaper for the length of the block."""
        async with self.server.running("http") as runtime:
            self._runtime = runtime
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

    async def _reap_forever(self) -> None:
        every = min(REAP_EVERY_MS, max(1, self.options.idle_ms // 4)) / 1000
        while True:
            await anyio.sleep(every)
            self.reap(now_ms())

    def reap(self, now: int) -> int:
        """Ends the sessions idle at ``now`` (R-HTTP-11); returns how many."""
        self.sessions, idle = rules.reap(self.sessions, now, self.options)
        for session in idle:
            self._detach(session.id, session.conn)
        return len(idle)

    def _end(self, sid: str) -> None:
        self.sessions, session = rules.end(self.sessions, sid)
        if session is not None:
            self._detach(sid, session.conn)

    def _detach(self, sid: str, conn: Hashable) -> None:
        live = self._live.pop(sid, None)
        runtime = self._runtime
        if runtime is not None:
            runtime.feed(SubscriberDetached(conn, now_ms()))  # drops its calls (R-DROP-3)
            runtime.unroute(conn)
        if live is not None:
            live.close_all()

    # -- routing ---------------------------------------------------------------------------

    def _router(self, live: _Live) -> Callable[[Reply | Push], None]:
        def deliver(effect: Reply | Push) -> None:
            if isinstance(effect, Reply):
                data = None if effect.message is None else encode(effect.message)
                feeding = live.feeding
                if feeding is not None and (
                    effect.request_id is None or feeding[0] == _key(effect.request_id)
                ):
                    live.finished(feeding[1], data)  # the step that received it answers it
                    return
                stream = live.pending.pop(_key(effect.request_id), None)
                if stream is not None:
                    live.finished(stream, data)
                return
            message = effect.message
            data = encode(message)
            route = rules.route_push(message, effect.related)  # R-HTTP-12
            target = None if route.call is None else live.stream_for(route.call)
            if target is not None and target.done:
                target = None
            if route.withdraws is not None:
                carried = live.by_eid.pop(route.withdraws, None)
                if target is None:
                    target = carried
            if target is not None and not target.done and route.remember is not None:
                target.eids.append(route.remember)
                live.by_eid[route.remember] = target
            if target is None or target.done:
                target = live.get
            if target is None:
                logger.debug("dropped a push for a session with no open stream")
                return
            target.put(data)

        return deliver

    # -- ASGI ------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers = _header_map(scope)
        rejection = rules.check_origin_and_host(headers, self.options)  # R-HTTP-1, R-HTTP-2
        if rejection is not None:
            await _reject(send, rejection)
            return
        path = scope.get("path", "").rstrip("/")
        legacy = None if self.legacy is None else self.legacy.route(path, scope.get("method", ""))
        if path != ENDPOINT and legacy is None:
            await _reject(send, rules.Rejection(404, "Not Found"))
            return
        client = scope.get("client")
        principal = self.auth(headers, client[0] if client else None)
        if principal is None:
            challenge = getattr(self.auth, "challenge", "")
            extra = [(b"www-authenticate", challenge.encode())] if challenge else None
            if isinstance(self.auth, LoopbackOnly):
                await _reject(send, rules.Rejection(403, "Forbidden: loopback peers only"))
            else:
                await _reject(send, rules.Rejection(401, "Unauthorized"), extra)
            return
        if self._runtime is None:
            await _reject(send, rules.Rejection(503, "Service Unavailable: not running"))
            return
        if legacy is not None and self.legacy is not None:
            await self.legacy.handle(legacy, scope, headers, principal, receive, send)
            return
        method = scope.get("method", "")
        if method == "POST":
            await self._post(headers, principal, receive, send)
        elif method == "GET":
            await self._get(headers, principal, receive, send)
        elif method == "DELETE":
            await self._delete(headers, principal, send)
        else:
            await _reject(
                send,
                rules.Rejection(405, "Method Not Allowed"),
                [(b"allow", b"GET, POST, DELETE")],
            )

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

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The body, or ``None`` once more than the cap has arrived (counted, R-HTTP-5)."""
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            received += len(chunk)
            if rules.body_too_large(received, self.options):
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _session(
        self, headers: dict[str, str], principal: str, *, initialize: bool = False
    ) -> rules.Session | rules.Rejection | None:
        found = rules.lookup(
            self.sessions, headers.get(rules.SESSION_HEADER), principal, initialize=initialize
        )
        if isinstance(found, rules.Session) and found.id not in self._live:  # a legacy one
            return rules.Rejection(404, "Not Found: unknown session")
        return found

    async def _post(
        self, headers: dict[str, str], principal: str, receive: Receive, send: Send
    ) -> None:
        rejection = rules.check_post_headers(headers)  # R-HTTP-3, R-HTTP-4
        if rejection is None:
            _, rejection = rules.check_version(headers)  # R-HTTP-6
        found = self._session(headers, principal, initialize=True)
        if rejection is None and isinstance(found, rules.Rejection):
            rejection = found  # R-HTTP-9: an unknown or foreign session, before the body
        if rejection is None and rules.declared_too_large(headers, self.options):
            rejection = rules.Rejection(413, "Payload Too Large")
        if rejection is not None:
            await _reject(send, rejection)
            return
        body = await self._read_body(receive)
        if body is None:
            await _reject(send, rules.Rejection(413, "Payload Too Large"))  # R-HTTP-5
            return
        shape = rules.classify(body)
        runtime = self.runtime
        now = now_ms()
        extra: list[tuple[bytes, bytes]] = []
        if isinstance(found, rules.Session):
            session = found
            live = self._live[session.id]
        else:
            if shape.kind != "initialize":
                await _reject(send, rules.Rejection(400, "Bad Request: Mcp-Session-Id required"))
                return
            self.sessions, minted = rules.mint(
                self.sessions, secrets.token_bytes(32), principal, now, self.options
            )
            if isinstance(minted, rules.Rejection):
                await _reject(send, minted)
                return
            session = minted
            live = self._live[session.id] = _Live(session.id, session.conn)
            runtime.route(session.conn, self._router(live))
            runtime.feed(SubscriberAttached(session.conn, now))
            extra.append((rules.SESSION_HEADER.encode(), session.id.encode()))
        self.sessions = rules.touch(self.sessions, session.id, now)
        event = MessageReceived(session.conn, body, now, mode="reply")
        if shape.kind in ("notification", "response"):
            runtime.feed(event)  # R-HTTP-7: an elicitation answer or a notification
            await _respond(send, 202, extra=extra)
            return
        stream = _Stream()
        key = _key(shape.request_id)
        live.feeding = (key, stream)
        try:
            runtime.feed(event)
        finally:
            live.feeding = None
        if shape.kind == "invalid":
            await _respond(send, 400, stream.final or b"", "application/json", extra)
            return
        if not stream.done and not stream.items:
            # R-HTTP-7: wait for the first message about the call; a Reply first is plain JSON
            # (no stream, no disconnect watcher). Counted as an open stream meanwhile, so the
            # session is not reaped under a long call.
            live.pending.setdefault(key, stream)
            self.sessions = rules.touch(self.sessions, session.id, runtime.now(), +1)
            try:
                await stream.ready()
            finally:
                self.sessions = rules.touch(self.sessions, session.id, runtime.now(), -1)
        if stream.done and not stream.items:
            if stream.final is None:
                await _respond(send, 202, extra=extra)
            else:
                await _respond(send, 200, stream.final, "application/json", extra)
            return
        if not stream.done:
            live.pending.setdefault(key, stream)
        # No disconnect watcher: a POST's stream ends when its call does (every call is bounded
        # by its timeouts), and what is sent after the client left goes nowhere.
        await self._stream_out(session.id, stream, receive, send, extra, until_disconnect=False)

    async def _stream_out(
        self,
        sid: str,
        stream: _Stream,
        receive: Receive,
        send: Send,
        extra: list[tuple[bytes, bytes]],
        *,
        until_disconnect: bool = True,
    ) -> None:
        """Sends ``stream`` as SSE until it finishes; with ``until_disconnect``, also until the
        client disconnects (a GET stream never finishes by itself)."""
        headers = [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            *extra,
        ]
        self.sessions = rules.touch(self.sessions, sid, now_ms(), +1)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            if not until_disconnect:
                await _send_stream(stream, send)
                return
            async with anyio.create_task_group() as tg:

                async def watch() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()  # the client went away: stop writing

                tg.start_soon(watch)
                while True:
                    items, finished = await stream.take()
                    if items:
                        payload = b"".join(_sse(item) for item in items)
                        await send(
                            {"type": "http.response.body", "body": payload, "more_body": True}
                        )
                    if finished:
                        break
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                tg.cancel_scope.cancel()
        except OSError:
            logger.debug("a client closed its stream")
        finally:
            # Disconnection is not cancellation: the call goes on; its reply is discarded.
            self.sessions = rules.touch(self.sessions, sid, now_ms(), -1)

    async def _get(
        self, headers: dict[str, str], principal: str, receive: Receive, send: Send
    ) -> None:
        rejection = rules.check_get_headers(headers)
        if rejection is None:
            _, rejection = rules.check_version(headers)
        found = self._session(headers, principal)
        if rejection is None and isinstance(found, rules.Rejection):
            rejection = found
        if rejection is not None or not isinstance(found, rules.Session):
            await _reject(send, rejection or rules.Rejection(400, "Bad Request"))
            return
        self.sessions, refused = rules.open_get(self.sessions, found.id, now_ms())  # R-HTTP-10
        if refused is not None:
            await _reject(send, refused)
            return
        live = self._live[found.id]
        stream = live.get = _Stream()
        try:
            await self._stream_out(found.id, stream, receive, send, [])
        finally:
            if live.get is stream:
                live.get = None
            self.sessions = rules.close_get(self.sessions, found.id, now_ms())

    async def _delete(self, headers: dict[str, str], principal: str, send: Send) -> None:
        _, rejection = rules.check_version(headers)
        found = self._session(headers, principal)
        if rejection is None and isinstance(found, rules.Rejection):
            rejection = found
        if rejection is not None or not isinstance(found, rules.Session):
            await _reject(send, rejection or rules.Rejection(400, "Bad Request"))
            return
        self._end(found.id)  # R-HTTP-11
        await _respond(send, 204)
