"""What the ASGI transports share (Streamable HTTP, transports/http.py, and the 2024-11-05
pair, transports/sse_legacy.py): the ASGI types, the request's headers, the body read under
its cap, and the plain and error answers. No decision is made here: the cap is
:func:`askgate.core.http.body_too_large`'s, the answers are what :mod:`askgate.core.http`
returned."""

from __future__ import annotations

import contextvars
import enum
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final, Literal, NamedTuple

import anyio

from askgate.core import http as rules
from askgate.core.codec import encode

__all__ = [
    "BODY_WHOLE",
    "TIMED_OUT",
    "Continuation",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "Whole",
    "header_map",
    "lingering",
    "note_request",
    "read_body",
    "read_body_or_refuse",
    "refusal",
    "reject",
    "respond",
    "whole_headers",
]

logger = logging.getLogger("askgate.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Continuation = Callable[[Receive, Send], Awaitable[None]]
"""What serves the rest of a request that was read and fed (its SSE stream), on its request's
``receive`` and ``send``."""


class Whole(NamedTuple):
    """A whole response: ``status``, ``body`` with its length and type, the ``extra`` headers
    (what :func:`respond` sends)."""

    status: int
    body: bytes = b""
    content_type: str | None = None
    extra: list[tuple[bytes, bytes]] | None = None


_REQUEST: contextvars.ContextVar[tuple[object, object, object] | None] = contextvars.ContextVar(
    "askgate_request", default=None
)


def note_request(scope: Scope) -> None:
    """Remembers the request this task serves, for the line :func:`reject` logs (no text is
    built unless a refusal is logged). Only its method, path and peer are kept: every timer and
    task started while serving it copies the context, and would keep a whole scope alive."""
    _REQUEST.set((scope.get("method", "?"), scope.get("path", "?"), scope.get("client")))


def _request_text() -> str:
    noted = _REQUEST.get()
    if noted is None:
        return "a request"
    method, path, client = noted
    if isinstance(client, (tuple, list)) and len(client) > 1:
        peer = f"{client[0]}:{client[1]}"
    else:
        peer = "an unknown peer"
    return f"{method} {path} from {peer}"


HEADER_MAPS: Final = 256
"""At most this many requests' header lists are remembered with their maps (a client sends the
same headers again and again: only a new session, a new length or a new credential differs)."""

HEADER_MAP_BYTES: Final = 2048
"""Only a header list of at most this many bytes of names and values is remembered, so that the
memo holds at most ``HEADER_MAPS`` times this (a request's headers are not capped in size, and
one refused at once must not stay in memory)."""

_MAPS: Final[dict[tuple[tuple[bytes, bytes], ...], dict[str, str]]] = {}
"""Small header lists (as tuples) with no name repeated, and their maps; emptied when full."""


def header_map(scope: Scope) -> dict[str, str]:
    """The request's headers: lower-case names, Latin-1 values, repeated ones joined by ``, ``.
    A new dict each time (the caller's to keep or change)."""
    raw = scope.get("headers", ())
    if isinstance(raw, list):  # no name repeated (the usual case): one comprehension
        try:
            held: tuple[tuple[bytes, bytes], ...] | None = tuple(raw)
            known = _MAPS.get(held)  # type: ignore[arg-type]
        except TypeError:  # pairs given as lists (ASGI allows any two-item iterable)
            held = known = None
        if known is not None:
            return known.copy()
        plain = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in raw}
        if len(plain) == len(raw):
            size = sum(map(len, plain)) + sum(map(len, plain.values()))
            if held is not None and size <= HEADER_MAP_BYTES:
                if len(_MAPS) >= HEADER_MAPS:
                    _MAPS.clear()
                _MAPS[held] = plain.copy()
            return plain
    headers: dict[str, str] = {}
    for name, value in raw:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


class _Late(enum.Enum):
    TIMED_OUT = "timed out"


TIMED_OUT: Final = _Late.TIMED_OUT
"""What :func:`read_body` returns for a body that did not arrive whole in time."""


BODY_WHOLE: Final = "askgate.body_whole"
"""The scope key askgate's own HTTP/1.1 server sets to ``True`` once a request's body has
arrived whole (:class:`askgate.transports.http11.Connection`): reading it then cannot wait,
and needs no deadline."""


async def read_body(
    receive: Receive, options: rules.HttpOptions, scope: Scope | None = None
) -> bytes | Literal[_Late.TIMED_OUT] | None:
    """The body, or ``None`` once more than the cap has arrived (counted, R-HTTP-5) or the
    client left, or :data:`TIMED_OUT` when the whole body did not arrive within
    ``body_timeout_ms`` (R-HTTP-25). A body the server says it holds whole (``scope`` has
    :data:`BODY_WHOLE`) is read without arming the deadline's timer."""
    if scope is not None and scope.get(BODY_WHOLE):
        return await _read(receive, options)
    with anyio.move_on_after(options.body_timeout_ms / 1000):
        return await _read(receive, options)
    return TIMED_OUT


async def read_body_or_refuse(
    receive: Receive, send: Send, options: rules.HttpOptions, scope: Scope | None = None
) -> bytes | None:
    """:func:`read_body`, answering what it could not read: 408 when the body came too late
    (R-HTTP-25), 413 past the cap or when the client left (R-HTTP-5); then ``None``."""
    body = await read_body(receive, options, scope)
    if body is TIMED_OUT:
        await reject(send, rules.BODY_TIMEOUT)  # R-HTTP-25
        return None
    if body is None:
        await reject(send, rules.Rejection(413, "Payload Too Large"))  # R-HTTP-5
    return body


async def _read(receive: Receive, options: rules.HttpOptions) -> bytes | None:
    chunks: list[bytes] = []
    received = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        received += len(chunk)
        if rules.body_too_large(received, options):
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def lingering(
    receive: Receive, send: Send, headers: dict[str, str], options: rules.HttpOptions
) -> tuple[Receive, Send]:
    """R-HTTP-24: ``receive`` and ``send`` for a request, such that a response started before
    its announced body was read whole says ``connection: close``, is written whole, and ends
    only once the rest of the body was read and discarded (up to ``drain_bytes``, within
    ``drain_ms``, or until the client leaves): the client, still writing its body, is not
    answered with a reset that would lose the response. A request with no body gets
    ``receive`` and ``send`` as they are."""
    if not rules.has_body(headers):
        return receive, send
    unread = True
    draining = False

    async def tracked() -> Message:
        nonlocal unread
        message = await receive()
        if message["type"] == "http.disconnect" or not message.get("more_body", False):
            unread = False
        return message

    async def drain() -> None:
        discarded = 0
        with anyio.move_on_after(options.drain_ms / 1000):
            while unread and not rules.drain_over(discarded, options):
                message = await tracked()
                discarded += len(message.get("body", b""))

    async def sending(message: Message) -> None:
        nonlocal draining
        if message["type"] == "http.response.start" and unread:
            draining = True
            headers = [*message.get("headers", ()), (b"connection", b"close")]
            message = {**message, "headers": headers}
        elif draining and not message.get("more_body", False):
            await send({**message, "more_body": True})
            await drain()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await send(message)

    return tracked, sending


async def respond(
    send: Send,
    status: int,
    body: bytes = b"",
    content_type: str | None = None,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """A whole response: ``status``, ``body`` with its length and type, the ``extra`` headers."""
    headers = whole_headers(body, content_type, extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def whole_headers(
    body: bytes, content_type: str | None, extra: list[tuple[bytes, bytes]] | None
) -> list[tuple[bytes, bytes]]:
    """The headers of a whole response (:class:`Whole`), in the order they are sent."""
    headers = [(b"content-length", str(len(body)).encode())]
    if content_type is not None:
        headers.append((b"content-type", content_type.encode()))
    if extra:
        headers.extend(extra)
    return headers


async def reject(
    send: Send, rejection: rules.Rejection, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    """An HTTP error with a JSON-RPC error body that has no id; logged on ``askgate.http``, one
    line with the status, the reason and the peer (never a header or the body): WARNING for
    401 and 403, INFO for the rest."""
    await respond(send, *refusal(rejection, extra))


def refusal(rejection: rules.Rejection, extra: list[tuple[bytes, bytes]] | None = None) -> Whole:
    """The whole response :func:`reject` sends, logged as it says."""
    level = logging.WARNING if rejection.status in (401, 403) else logging.INFO
    if logger.isEnabledFor(level):
        logger.log(level, "refused %d %s: %s", rejection.status, rejection.reason, _request_text())
    body = encode(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": rejection.reason}}
    )
    return Whole(rejection.status, body, "application/json", extra)
