"""The door: what a decoded client message means (spec/protocol.md, R-PROTO-1 .. 5, 13, 15, 24).

Every client message, whatever transport carried it, is decoded by the codec and then turned by
:func:`meaning` into exactly one typed event, into the codec's error reply, or into nothing. The
reducer's ``MessageReceived`` handler hands that event to the same handler an embedder's typed
event reaches, so each meaning of a message has one handler, and the models, which drive the
typed events, check the code production runs. :data:`DOOR` is the table, rendered into
``spec/transitions.md``; :func:`wire_form` is its inverse, the message that means a given typed
event, which the models use to send every event they draw through the wire too.

Nothing here validates beyond the codec: the handlers check every peer-controlled field once,
whichever way the event came in.
"""

from __future__ import annotations

from typing import Any, Final

from .codec import (
    Decoded,
    EncodeError,
    ErrorResponse,
    Invalid,
    Notification,
    Request,
    Response,
    encode,
)
from .events import (
    CallerId,
    CancelRequested,
    ClientInitialized,
    ClientReady,
    ConnId,
    ElicitationAnswered,
    Event,
    MessageReceived,
    Mode,
    PingReceived,
    ReadRequested,
    ToolCallReceived,
)
from .record import record
from .revisions import META_VERSION

JsonObject = dict[str, Any]


@record
class Entry:
    """One row of the door: a kind of message, an example of it, what it becomes (an event
    kind; ``dict`` for an error reply; ``None`` for nothing), and the rules that say so."""

    message: str
    example: bytes
    becomes: type[object] | None
    note: str
    rules: tuple[str, ...]


_R = b'{"jsonrpc":"2.0","id":1,'
DOOR: Final[tuple[Entry, ...]] = (
    Entry(
        "request `tools/call`",
        _R + b'"method":"tools/call","params":{"name":"t"}}',
        ToolCallReceived,
        "`params._meta` as `meta`; absent arguments mean `{}`; `requestState`, `inputResponses`",
        ("R-PROTO-6", "R-CTX-2", "R-MRTR-9", "R-MRTR-13"),
    ),
    Entry(
        "request `initialize`",
        _R + b'"method":"initialize","params":{"capabilities":{}}}',
        ClientInitialized,
        "with its request id and `protocolVersion`",
        ("R-PROTO-3",),
    ),
    Entry("request `ping`", _R + b'"method":"ping"}', PingReceived, "", ("R-PROTO-4",)),
    Entry(
        "request for a read method",
        _R + b'"method":"resources/read","params":{"uri":"u"}}',
        ReadRequested,
        "",
        ("R-PROTO-7",),
    ),
    Entry(
        "request `server/discover`",
        _R + b'"method":"server/discover","params":{"_meta":{}}}',
        ReadRequested,
        "answered by the reducer from its `_meta`",
        ("R-MRTR-11",),
    ),
    Entry(
        "request for any other method",
        _R + b'"method":"no/such"}',
        ReadRequested,
        "answered -32601",
        ("R-PROTO-5",),
    ),
    Entry(
        "notification `notifications/cancelled`",
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}',
        CancelRequested,
        "",
        ("R-PROTO-13",),
    ),
    Entry(
        "notification `notifications/initialized`",
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
        ClientReady,
        "",
        ("R-PROTO-24",),
    ),
    Entry(
        "any other notification",
        b'{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}',
        None,
        "",
        ("R-PROTO-5",),
    ),
    Entry("response", _R + b'"result":{}}', ElicitationAnswered, "with its result", ("R-PROTO-2",)),
    Entry(
        "error response",
        _R + b'"error":{"code":-1,"message":"no"}}',
        ElicitationAnswered,
        "with its error",
        ("R-PROTO-2",),
    ),
    Entry(
        "invalid message",
        b"[]",
        dict,
        "the codec's; nothing for a malformed notification or response",
        ("R-PROTO-1",),
    ),
)
"""What each kind of client message becomes (R-PROTO-15)."""


def meaning(
    conn: ConnId,
    message: Decoded,
    now: int,
    mode: Mode = "reply",
    caller: CallerId | None = None,
    principal: str | None = None,
) -> Event | JsonObject | None:
    """R-PROTO-15: the typed event ``message`` means on ``conn``; or, for an invalid message,
    the error reply to send (a dict) or ``None`` when nothing may be sent; ``None`` also for a
    notification that means nothing here. ``principal`` goes on a ``ToolCallReceived``."""
    if isinstance(message, Request):
        return _request(conn, message, now, mode, caller, principal)
    if isinstance(message, Notification):
        if message.method == "notifications/cancelled":  # R-PROTO-13
            params = message.params or {}
            return CancelRequested(conn, params.get("requestId"), now)
        if message.method == "notifications/initialized":  # R-PROTO-24
            return ClientReady(conn, now)
        return None  # R-PROTO-5
    if isinstance(message, Response):  # R-PROTO-2
        return ElicitationAnswered(conn, message.id, message.result, now)
    if isinstance(message, ErrorResponse):
        return ElicitationAnswered(conn, message.id, None, now, message.error)
    assert isinstance(message, Invalid)
    return message.reply  # R-PROTO-1


def opens_session(request: Request) -> bool:
    """Whether ``request`` means a ``ClientInitialized`` (what opens an HTTP session), without
    building the event."""
    return request.method == "initialize"


def _request(
    conn: ConnId,
    request: Request,
    now: int,
    mode: Mode,
    caller: CallerId | None,
    principal: str | None,
) -> Event:
    method, rid = request.method, request.id
    if method == "tools/call":  # R-PROTO-6, R-MRTR-13
        p = request.params or {}
        name: Any = p.get("name")
        return ToolCallReceived(
            conn,
            rid,
            name,
            p.get("arguments", {}),
            now,
            mode,
            caller,
            p.get("_meta"),
            p.get("requestState"),
            p.get("inputResponses"),
            principal,
            p.get("task"),
        )
    if opens_session(request):  # R-PROTO-3
        p = request.params or {}
        capabilities = p.get("capabilities")
        return ClientInitialized(conn, capabilities, now, rid, p.get("protocolVersion"))
    if method == "ping" and not _names_a_version(request.params):  # R-PROTO-4
        return PingReceived(conn, rid, now)
    return ReadRequested(conn, rid, method, request.params, now, caller, principal)  # R-PROTO-5, 7


def _names_a_version(params: object) -> bool:
    """``params._meta`` names a protocol version: the reducer picks the request's era (R-MRTR-9;
    a modern ``ping`` is a method that revision lacks)."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and META_VERSION in meta


def wire_form(event: Event) -> JsonObject | None:
    """The client message whose :func:`meaning` is ``event`` (given the same connection, ``now``,
    mode and caller), or ``None`` when no message means it: an embedder's ``ClientInitialized``
    without a request id, a ``ReadRequested`` whose params are not an object, an answer whose
    error is not an object, a request whose method is not a string, and every event that is not
    a client message. Values a peer cannot send (NaN, tuples as keys, ...) are the caller's to
    avoid: :func:`askgate.core.codec.encode` refuses them."""
    if isinstance(event, ToolCallReceived):
        params: JsonObject = {"name": event.tool}
        if event.arguments != {}:  # absent means {} (R-PROTO-6)
            params["arguments"] = event.arguments
        if event.meta is not None:
            params["_meta"] = event.meta
        if event.request_state is not None:
            params["requestState"] = event.request_state
        if event.input_responses is not None:
            params["inputResponses"] = event.input_responses
        if event.task is not None:
            params["task"] = event.task
        return _request_form(event.request_id, "tools/call", params)
    if isinstance(event, ClientInitialized):
        if event.request_id is None:
            return None
        params = {"capabilities": event.capabilities}
        if event.protocol_version is not None:
            params["protocolVersion"] = event.protocol_version
        return _request_form(event.request_id, "initialize", params)
    if isinstance(event, PingReceived):
        return _request_form(event.request_id, "ping", None)
    if isinstance(event, ReadRequested):
        if not isinstance(event.method, str) or event.method in _NOT_READS:
            return None
        if event.params is not None and not isinstance(event.params, dict):
            return None
        return _request_form(event.request_id, event.method, event.params)
    if isinstance(event, ClientReady):
        return {"jsonrpc": "2.0", "method": "notifications/initialized"}
    if isinstance(event, CancelRequested):
        return {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": event.request_id},
        }
    if isinstance(event, ElicitationAnswered):
        if event.error is not None:
            if not isinstance(event.error, dict):
                return None
            return {"jsonrpc": "2.0", "id": event.elicitation_id, "error": event.error}
        return {"jsonrpc": "2.0", "id": event.elicitation_id, "result": event.result}
    return None


_NOT_READS: Final = frozenset({"tools/call", "initialize", "ping"})
"""Methods a ``ReadRequested`` can name that the door gives to another event."""


def _request_form(request_id: object, method: str, params: JsonObject | None) -> JsonObject:
    message: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def wire_event(event: Event) -> MessageReceived | None:
    """The ``MessageReceived`` a transport would feed for ``event``: its :func:`wire_form`
    encoded, on the same connection, with the same ``now``, mode, caller and principal;
    ``None`` when ``event`` has no wire form or holds what JSON cannot carry."""
    form = wire_form(event)
    if form is None:
        return None
    try:
        data = encode(form)
    except EncodeError:
        return None
    conn: ConnId = event.conn  # type: ignore[union-attr]
    mode: Mode = event.mode if isinstance(event, ToolCallReceived) else "reply"
    caller = event.caller if isinstance(event, ToolCallReceived | ReadRequested) else None
    principal = event.principal if isinstance(event, ToolCallReceived | ReadRequested) else None
    return MessageReceived(conn, data, event.now, mode, caller, principal)
