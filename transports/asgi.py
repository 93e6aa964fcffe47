"""What the ASGI transports share (Streamable HTTP, transports/http.py, and the 2024-11-05
pair, transports/sse_legacy.py): the ASGI types, the request's headers, the body read under
its cap, and the plain and error answers. No decision is made here: the cap is
:func:`askgate.core.http.body_too_large`'s, the answers are what :mod:`askgate.core.http`
returned."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from askgate.core import http as rules
from askgate.core.codec import encode

__all__ = [
    "Message",
    "Receive",
    "Scope",
    "Send",
    "header_map",
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


_REQUEST: contextvars.ContextVar[Scope | None] = contextvars.ContextVar(
    "askgate_request", default=None
)


def note_request(scope: Scope) -> None:
    """Remembers the request this task serves, for the line :func:`reject` logs (no text is
    built unless a refusal is logged)."""
    _REQUEST.set(scope)


def _request_text() -> str:
    scope = _REQUEST.get()
    if scope is None:
        return "a request"
    client = scope.get("client")
    peer = f"{client[0]}:{client[1]}" if client else "an unknown peer"
    return f"{scope.get('method', '?')} {scope.get('path', '?')} from {peer}"


def header_map(scope: Scope) -> dict[str, str]:
    """The request's headers: lower-case names, Latin-1 values, repeated ones joined by ``, ``."""
    headers: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


async def read_body(receive: Receive, options: rules.HttpOptions) -> bytes | None:
    """The body, or ``None`` once more than the cap has arrived (counted, R-HTTP-5) or the
    client left."""
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
