"""The pure decisions of the 2024-11-05 HTTP+SSE pair (spec/http.md, R-HTTP-14 .. R-HTTP-16).

``GET /sse`` opens a connection whose first SSE event names the message endpoint;
``POST /messages?sessionId=ID`` carries one client message. Everything security-related is
:mod:`askgate.core.http`'s (Host, Origin, Content-Type, the body cap, the session table and
its owner check): this module only adds what the old transport needs on top. No I/O, no clock,
no randomness.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Final
from urllib.parse import parse_qs, quote

from . import http as rules
from .codec import Decoded, Invalid, encode
from .record import record

SSE_PATH: Final = "/sse"
MESSAGES_PATH: Final = "/messages"
SESSION_PARAM: Final = "sessionId"
KEEPALIVE: Final = rules.KEEPALIVE  # the same comment as on Streamable HTTP streams
"""An SSE comment: readers skip it, and a dead peer shows up as a failed write (R-HTTP-14)."""


@record
class Route:
    """Which legacy endpoint a request is for: ``open`` (GET /sse) or ``post`` (POST
    /messages); ``rejection`` (405, with ``allow``) for another method on those paths."""

    kind: str
    rejection: rules.Rejection | None = None
    allow: str = ""


def route(path: str, method: str) -> Route | None:
    """The legacy endpoint ``path`` names (``None``: not a legacy path)."""
    path = path.rstrip("/")
    if path == SSE_PATH:
        if method == "GET":
            return Route("open")
        return Route("open", rules.Rejection(405, "Method Not Allowed"), "GET")
    if path == MESSAGES_PATH:
        if method == "POST":
            return Route("post")
        return Route("post", rules.Rejection(405, "Method Not Allowed"), "POST")
    return None


def endpoint_event(root_path: str, sid: str) -> bytes:
    """R-HTTP-14: the first event of the stream, naming where to POST (a path on the same
    origin, under the app's root path). Session ids are URL-safe base64: nothing to escape."""
    path = quote(root_path.rstrip("/") + MESSAGES_PATH)
    return f"event: endpoint\ndata: {path}?{SESSION_PARAM}={sid}\n\n".encode("ascii")


def message_event(data: bytes) -> bytes:
    """R-HTTP-14: one JSON-RPC message on the stream (encoded JSON holds no raw newline)."""
    return b"event: message\ndata: " + data + b"\n\n"


def session_param(query_string: bytes) -> str | rules.Rejection:
    """R-HTTP-15: the ``sessionId`` of a POST's query; missing, empty or ambiguous is 400."""
    values = parse_qs(query_string.decode("latin-1")).get(SESSION_PARAM, [])
    if not values or len(set(values)) != 1 or not values[0]:
        return rules.Rejection(400, f"Bad Request: {SESSION_PARAM} required")
    return values[0]


def check_post(headers: Mapping[str, str]) -> rules.Rejection | None:
    """R-HTTP-15: the checks of a POST before its session is looked up: Content-Type (415,
    R-HTTP-3, the same check as /mcp's; Accept is not required of 2024-11-05 clients)."""
    return rules.check_post_headers({**headers, "accept": "*/*"})


def check_length(headers: Mapping[str, str], options: rules.HttpOptions) -> rules.Rejection | None:
    """R-HTTP-15: a declared length over the cap is 413 before the body is read (R-HTTP-5)."""
    if rules.declared_too_large(headers, options):
        return rules.Rejection(413, "Payload Too Large")
    return None


def lookup(
    table: rules.Sessions, sid: str, principal: str, legacy: Container[str]
) -> rules.Session | rules.Rejection:
    """R-HTTP-15: the legacy session ``sid`` names. Unknown, ended, another principal's
    (R-HTTP-9) or a Streamable HTTP session (not in ``legacy``): the same 404."""
    found = rules.lookup(table, sid, principal)
    if isinstance(found, rules.Session) and found.id in legacy:
        return found
    return rules.Rejection(404, "Not Found: unknown session")


def answer(decoded: Decoded) -> tuple[int, bytes]:
    """R-HTTP-15: the status and body of a POST whose message was fed (``decoded``, what
    :func:`askgate.core.codec.decode` made of its body): 202 with no body, or 400 with the
    codec's error for a body that is not one JSON-RPC message."""
    if not isinstance(decoded, Invalid):
        return 202, b""
    error = decoded.reply or {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": f"Invalid Request: {decoded.reason}"},
    }
    return 400, encode(error)
