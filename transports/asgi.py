"""What the ASGI transports share (Streamable HTTP, transports/http.py, and the 2024-11-05
pair, transports/sse_legacy.py): the ASGI types, the request's headers, the body read under
its cap, and the plain and error answers. No decision is made here: the cap is
:func:`askgate.core.http.body_too_large`'s, the answers are what :mod:`askgate.core.http`
returned."""

from __future__ import annotations

import contextvars
import enum
import logging
from collections.abc import Awaitable, Callable, Generator, MutableMapping
from typing import Any, Final, Literal, cast

import anyio

from askgate.core import http as rules
from askgate.core.codec import encode

__all__ = [
    "TIMED_OUT",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "header_map",
    "lingering",
    "note_request",
    "read_body",
    "reject",
    "respond",
]

logger = logging.getLogger("askgate.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


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


def header_map(scope: Scope) -> dict[str, str]:
    """The request's headers: lower-case names, Latin-1 values, repeated ones joined by ``, ``."""
    headers: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


class _Late(enum.Enum):
    TIMED_OUT = "timed out"


TIMED_OUT: Final = _Late.TIMED_OUT
"""What :func:`read_body` returns for a body that did not arrive whole in time."""


class _Rest:
    """The rest of an awaitable whose first step suspended: awaiting this goes on where that
    step stopped (what it yielded goes to the event loop first), as ``await`` would have."""

    __slots__ = ("_steps", "_yielded")

    def __init__(self, steps: Generator[Any, Any, Message], yielded: object) -> None:
        self._steps = steps
        self._yielded = yielded

    def __await__(self) -> Generator[Any, Any, Message]:
        steps, yielded = self._steps, self._yielded
        while True:
            try:
                sent = yield yielded
            except BaseException as thrown:  # a cancellation, or the generator's close
                try:
                    yielded = steps.throw(thrown)
                except StopIteration as stop:
                    return cast(Message, stop.value)
            else:
                try:
                    yielded = steps.send(sent)
                except StopIteration as stop:
                    return cast(Message, stop.value)


async def read_body(
    receive: Receive, options: rules.HttpOptions
) -> bytes | Literal[_Late.TIMED_OUT] | None:
    """The body, or ``None`` once more than the cap has arrived (counted, R-HTTP-5) or the
    client left, or :data:`TIMED_OUT` when the whole body did not arrive within
    ``body_timeout_ms`` (R-HTTP-25).

    A body the server already holds whole (a small one usually comes with its headers) is
    taken without the deadline's timer: the first ``receive`` is started by hand, and only
    when it suspends (the body is still on its way) is the rest awaited under the deadline."""
    steps = receive().__await__()
    try:
        yielded = steps.send(None)
    except StopIteration as done:  # it did not wait
        message: Message = done.value
        if message["type"] != "http.disconnect" and not message.get("more_body", False):
            chunk = message.get("body", b"")
            return None if rules.body_too_large(len(chunk), options) else chunk
        first: Message | _Rest | None = message
    else:
        first = _Rest(steps, yielded)
    chunks: list[bytes] = []
    received = 0
    with anyio.move_on_after(options.body_timeout_ms / 1000):
        while True:
            if first is None:
                message = await receive()
            else:
                message = first if not isinstance(first, _Rest) else await first
                first = None
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            received += len(chunk)
            if rules.body_too_large(received, options):
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
    return TIMED_OUT


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
    headers = [(b"content-length", str(len(body)).encode())]
    if content_type is not None:
        headers.append((b"content-type", content_type.encode()))
    headers.extend(extra or [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def reject(
    send: Send, rejection: rules.Rejection, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    """An HTTP error with a JSON-RPC error body that has no id; logged on ``askgate.http``, one
    line with the status, the reason and the peer (never a header or the body): WARNING for
    401 and 403, INFO for the rest."""
    level = logging.WARNING if rejection.status in (401, 403) else logging.INFO
    if logger.isEnabledFor(level):
        logger.log(level, "refused %d %s: %s", rejection.status, rejection.reason, _request_text())
    body = encode(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": rejection.reason}}
    )
    await respond(send, rejection.status, body, "application/json", extra)
