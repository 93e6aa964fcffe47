"""Events: facts the shell reports to the reducer, named in the past tense.

Every field a peer controls (request ids, arguments, answers, capabilities) may hold anything;
the reducer answers bad values with an effect or ignores them, never raises. Fields the shell
controls (connection ids, worker refs, timer keys, ``now``) are trusted: ``now`` is the shell's
monotonic clock in milliseconds.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Literal

import attrs

from .codec import Decoded
from .record import record

ConnId = Hashable
CallerId = Hashable
Mode = Literal["reply", "push"]
TimerKey = tuple[str, object]


@record
class ClientInitialized:
    """A connection initialized with these client capabilities (R-CAP-1, R-PROTO-3).

    ``request_id`` is the id of the ``initialize`` request, answered with the negotiated
    ``protocol_version``; ``None`` when the embedding program answered the handshake itself and
    only tells the reducer what the client offered (nothing is answered then).
    """

    conn: ConnId
    capabilities: object
    now: int = 0
    request_id: object = None
    protocol_version: object = None


@record
class ClientReady:
    """The client said it is initialized (``notifications/initialized``): the prompts held
    for it since its ``initialize`` was answered are sent now (R-PROTO-24, R-PARK-8)."""

    conn: ConnId
    now: int = 0


@record
class SubscriberAttached:
    """A push channel to the connection now exists (R-SUB-1); ``principal`` is who the shell
    authenticated for the connection (an HTTP session's principal), ``None`` for no one: it
    names the connection's owner (R-PARK-5). ``per_request``: the connection lives for one
    stateless request (an HTTP POST of the 2026-07-28 revision, R-HTTP-26); without a
    principal, every such connection is one owner (R-PARK-7)."""

    conn: ConnId
    now: int = 0
    principal: str | None = None
    per_request: bool = False


@record
class SubscriberDetached:
    """The connection's push channel is gone: the connection went away (R-DROP-3)."""

    conn: ConnId
    now: int = 0


@record
class ToolRegistered:
    """A tool became callable; ``sensitive`` is destructiveHint or sensitive (R-TOOL-1).

    ``definition`` is its ``tools/list`` entry (R-PROTO-6, R-PROTO-8).
    """

    name: str
    sensitive: bool = False
    derived: bool = False
    now: int = 0
    definition: Any = attrs.field(default=None, eq=False)


@record
class ToolUnregistered:
    """A tool stopped being callable (R-TOOL-1)."""

    name: str
    now: int = 0


@record
class ToolCallReceived:
    """A ``tools/call`` request arrived on ``conn`` (R-ADM-*, R-PROTO-6).

    ``meta`` is the request's ``params._meta`` (its ``progressToken`` is recorded, R-CTX-2; a
    modern request's version and capabilities are read from it, R-MRTR-9). ``request_state``
    and ``input_responses`` are a modern retry's ``params.requestState`` and
    ``params.inputResponses`` (``None`` when absent, R-MRTR-13). ``principal`` is who the shell
    authenticated for the request, ``None`` where it authenticates no one (stdio, R-MRTR-12).
    ``task`` is a 2025-11-25 request's ``params.task`` (``None`` when absent, R-TASK-12).
    """

    conn: ConnId
    request_id: object
    tool: str
    arguments: object
    now: int
    mode: Mode = "reply"
    caller: CallerId | None = None
    meta: object = None
    request_state: object = None
    input_responses: object = None
    principal: str | None = None
    task: object = None


@record
class PingReceived:
    """A ``ping`` request arrived on ``conn`` (R-PROTO-4)."""

    conn: ConnId
    request_id: object
    now: int = 0


@record
class ReadRequested:
    """A request for any method but ``tools/call``, ``initialize`` and ``ping`` arrived: one of
    the read methods (``resources/read``, ``prompts/get``, ..., R-READ-*, R-PROTO-7), or a method
    askgate does not serve, answered ``-32601`` once its id is admitted (R-PROTO-5).
    ``principal`` is who the shell authenticated for the request, as on a ``ToolCallReceived``
    (a modern read's round state binds it, R-MRTR-24)."""

    conn: ConnId
    request_id: object
    method: str
    params: object
    now: int
    caller: CallerId | None = None
    principal: str | None = None


@record
class WorkerFinished:
    """A callback worker returned ``value`` (a decision, a result, or the unknown-tool text)."""

    ref: int
    value: object
    now: int


@record
class WorkerFailed:
    """A callback worker raised. The exception stays in the shell (R-WORK-3)."""

    ref: int
    now: int


@record
class ElicitationAnswered:
    """A response arrived on ``conn`` for the id ``elicitation_id`` (R-CLOSE-*).

    ``error`` is not ``None`` for a JSON-RPC error response; otherwise ``result`` is the result.
    """

    conn: ConnId
    elicitation_id: object
    result: object
    now: int
    error: object = None


@record
class CancelRequested:
    """The request ``request_id`` of ``conn`` was cancelled by its caller or the peer (R-DROP-1)."""

    conn: ConnId
    request_id: object
    now: int


@record
class CallerExited:
    """The process or task that sent requests as ``caller`` is gone (R-DROP-2)."""

    caller: CallerId
    now: int


@record
class ServerStopping:
    """The server was told to stop (SIGINT, SIGTERM): every open call ends (R-STOP-1)."""

    now: int


@record
class MessageReceived:
    """One JSON-RPC message arrived on ``conn`` (spec/protocol.md, R-PROTO-1).

    ``data`` is the message's bytes, or what :func:`askgate.core.codec.decode` made of them when
    the shell had to decode them itself (an HTTP POST): a message is decoded once. ``principal``
    is who the shell authenticated for it, if anyone (``ToolCallReceived.principal``).
    """

    conn: ConnId
    data: bytes | Decoded
    now: int
    mode: Mode = "reply"
    caller: CallerId | None = None
    principal: str | None = None


@record
class ResourceUpdated:
    """The embedder says the resource ``uri`` changed (R-PROTO-10)."""

    uri: str
    now: int = 0


@record
class LogEmitted:
    """A log message for the clients; ``conn`` limits it to one connection (R-PROTO-11)."""

    level: str
    data: object
    now: int = 0
    logger: str | None = None
    conn: ConnId | None = None


@record
class CatalogChanged:
    """A resource, resource template or prompt was registered (``definition`` set) or
    unregistered (``definition`` None) (R-PROTO-12). ``key`` is its URI, template or name."""

    kind: Literal["resource", "template", "prompt"]
    key: str
    definition: Any = attrs.field(default=None, eq=False)
    now: int = 0


@record
class ToolProgressed:
    """The running tool of worker ``ref`` reported progress (R-CTX-2)."""

    ref: int
    progress: object
    total: object = None
    message: object = None
    now: int = 0


@record
class ToolLogged:
    """The running tool of worker ``ref`` logged ``data`` at ``level`` (R-CTX-3)."""

    ref: int
    level: object
    data: object
    logger: object = None
    now: int = 0


@record
class ToolRequested:
    """The running tool of worker ``ref`` asks its client ``method`` with ``params`` (R-CTX-4).

    ``token`` is the shell's name for the waiting tool; the reducer answers with
    ``Resolve(ref, token, outcome)``.
    """

    ref: int
    token: Hashable
    method: object
    params: object
    now: int = 0


@record
class TimerFired:
    """The timer ``key`` (from a ``StartTimer``) reached its deadline."""

    key: TimerKey
    now: int


Event = (
    ClientInitialized
    | ClientReady
    | SubscriberAttached
    | SubscriberDetached
    | ToolRegistered
    | ToolUnregistered
    | ToolCallReceived
    | PingReceived
    | ReadRequested
    | WorkerFinished
    | WorkerFailed
    | ElicitationAnswered
    | CancelRequested
    | CallerExited
    | ServerStopping
    | TimerFired
    | MessageReceived
    | ResourceUpdated
    | LogEmitted
    | CatalogChanged
    | ToolProgressed
    | ToolLogged
    | ToolRequested
)
