"""The reducer: ``step(state, event) -> (state, effects)``. Every decision askgate makes.

Theory of operation
-------------------
A request the reducer admits becomes an open *call* keyed by ``(connection, request id)``. A
call is always in one :class:`~askgate.core.state.Stage`: every stage but ``PARKED`` holds one
callback worker (counted against the in-flight bounds, with a ``("worker", ref)`` timer), and
``PARKED`` holds one elicitation (counted against the parking caps, with an
``("elicitation", id)`` timer). A call ends exactly once, either *closed* with an outcome
delivered to its owner or *dropped* with none, and every request gets exactly one ``Reply``.

Events about a call are dispatched through :data:`CALL_TRANSITIONS`, keyed by the event kind
and the call's stage; every other event through :data:`EVENT_TRANSITIONS`. Both tables are
rendered into ``spec/transitions.md`` by ``make spec``, with the rules each entry implements.
A pair absent from :data:`CALL_TRANSITIONS` cannot happen: a worker event only names a stage
that holds a worker, an elicitation event only a parked call.

Nothing here reads a clock, draws randomness or performs I/O: ``now`` comes in on events,
deadlines go out on ``StartTimer``, and elicitation ids are a keyed hash of a counter (R-ID-1).
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable, Hashable
from typing import Any

import attrs
from immutables import Map

from . import codec, door, protocol, sealing, tasks
from . import effects as fx
from . import messages as m
from .decide import busy_scope, can_elicit, is_approval, is_request_id, refusal_detail
from .decisions import Allow, Ask, Deny, Failure, NeedsInput
from .effects import (
    CancelTimer,
    Effect,
    Emit,
    KillWorker,
    Push,
    Reply,
    Resolve,
    StartTimer,
    StartWorker,
)
from .events import (
    CallerExited,
    CancelRequested,
    CatalogChanged,
    ClientInitialized,
    ClientReady,
    ConnId,
    ElicitationAnswered,
    Event,
    LogEmitted,
    MessageReceived,
    Mode,
    PingReceived,
    ReadRequested,
    ResourceUpdated,
    ServerStopping,
    SubscriberAttached,
    SubscriberDetached,
    TimerFired,
    ToolCallReceived,
    ToolLogged,
    ToolProgressed,
    ToolRegistered,
    ToolRequested,
    ToolUnregistered,
    WorkerFailed,
    WorkerFinished,
)
from .fifo import Fifo
from .jobs import (
    Authorize,
    AuthorizeRead,
    FilterTools,
    Job,
    Round,
    RunRead,
    RunTool,
    UnknownToolReply,
)
from .options import connection_share
from .record import record
from .revisions import (
    CACHEABLE,
    INPUT_KEY,
    LEGACY_ONLY,
    LISTEN,
    ROUND_READS,
    Refusal,
    Revision,
    Stateless,
    acknowledged,
    complete,
    discover_result,
    input_required,
    invalid_state,
    listen_ended,
    listen_kinds,
    missing_capabilities,
    missing_capability,
    request_era,
    revision_for,
    round_requests,
    round_result,
    tagged,
)
from .state import (
    EMPTY_CONN,
    Call,
    CallKey,
    CapGroup,
    ClientRequest,
    Conn,
    Parked,
    Progress,
    Stage,
    State,
    StatelessCall,
    Variables,
)
from .tools import ToolInfo, argument_problem, tool_info

Out = list[Effect]
JsonObject = dict[str, Any]

_NO_KEYS: Map[CallKey, bool] = Map()


def _open_call(d: _Draft, key: CallKey) -> Call | None:
    """The open call ``key``, holding a worker or parked, or ``None``."""
    call = d.working.get(key)
    return d.waiting.get(key) if call is None else call


def _the_call(d: _Draft, key: CallKey) -> Call:
    """The open call ``key``, holding a worker or parked."""
    call = d.working.get(key)
    return d.waiting[key] if call is None else call


# The stages as globals: a member loaded off the Enum class goes through its metaclass's
# __getattr__ hook (about ten times a global's load), and the hot path names one per step.
_PARKED = Stage.PARKED
_AUTHORIZING = Stage.AUTHORIZING
_RUNNING = Stage.RUNNING
_UNKNOWN_REPLY = Stage.UNKNOWN_REPLY
_READ_AUTHORIZING = Stage.READ_AUTHORIZING
_READ_RUNNING = Stage.READ_RUNNING
WORKER_TIMER = "worker"
ELICITATION_TIMER = "elicitation"
CLIENT_REQUEST_TIMER = "client_request"


class _Draft(Variables):
    """A mutable copy of a :class:`State`'s variables for the length of one step.

    ``step`` builds one empty and gives it a copy of the state's ``__dict__`` (one C-level copy;
    the maps in it are persistent, so changing a draft never changes the state it came from),
    and, once the handler is done, makes the draft itself the new :class:`State` by assigning
    its class: both share :class:`Variables`' layout, so nothing is copied twice.
    """

    __slots__ = ()
    __init__ = object.__init__  # built empty (no arguments: less than ``object.__new__``)


# ---------------------------------------------------------------------------------------------
# Connections


def _get_conn(d: _Draft, conn: ConnId) -> Conn:
    return d.conns.get(conn, EMPTY_CONN)


def _put_conn(d: _Draft, conn: ConnId, c: Conn) -> None:
    """Stores ``c``, or forgets the connection once it holds nothing (R-INV-6): a connection
    with open requests, or that owns places in the store (R-PARK-1, R-STORE-5), is kept. Only
    a subscribed connection has parked calls (R-INV-5), so one that ``c`` says holds nothing
    has open requests exactly when it has workers (``in_flight``)."""
    if c.is_empty() and conn not in d.in_flight and not d.store.count(conn):
        if conn in d.conns:
            d.conns = d.conns.delete(conn)
            _forget_protocol_state(d, conn, c)
    else:
        d.conns = d.conns.set(conn, c)


def _forget_protocol_state(d: _Draft, conn: ConnId, c: Conn) -> None:
    """A forgotten connection's subscriptions and log level go with it (R-PROTO-10, 11)."""
    for uri in c.subscriptions:
        _unsubscribe(d, conn, uri)
    if conn in d.log_levels:
        d.log_levels = d.log_levels.delete(conn)


def _unsubscribe(d: _Draft, conn: ConnId, uri: str) -> None:
    subscribers = d.resource_subscribers.get(uri)
    if subscribers is None or conn not in subscribers:
        return
    subscribers = subscribers.delete(conn)
    d.resource_subscribers = (
        d.resource_subscribers.set(uri, subscribers)
        if subscribers
        else d.resource_subscribers.delete(uri)
    )


def _cap_fifo(d: _Draft, group: CapGroup) -> Fifo[ConnId]:
    return d.cap_live if group == "live" else d.cap_unsubscribed


def _set_cap_fifo(d: _Draft, group: CapGroup, fifo: Fifo[ConnId]) -> None:
    if group == "live":
        d.cap_live = fifo
    else:
        d.cap_unsubscribed = fifo


def _remove_caps(d: _Draft, c: Conn) -> Conn:
    """Forgets ``c``'s capabilities entry (R-CAP-2, R-CAP-3)."""
    if not c.cap_group:
        return c
    _set_cap_fifo(d, c.cap_group, _cap_fifo(d, c.cap_group).remove(c.cap_pos))
    return attrs.evolve(
        c, can_elicit=False, can_sample=False, can_task=False, cap_group="", cap_pos=-1
    )


def _on_client_initialized(d: _Draft, ev: ClientInitialized, out: Out) -> None:
    """R-CAP-1; with a request id, the ``initialize`` request, answered (R-PROTO-3), or refused
    on a connection that already negotiated a version (R-PROTO-23)."""
    conn = ev.conn
    rid: Any = ev.request_id
    if ev.request_id is None:
        _record_capabilities(d, conn, ev.capabilities, out)
        return
    if not _admit(d, conn, rid, out):
        return
    if _get_conn(d, conn).version:  # R-PROTO-23: nothing changes
        out.append(Reply(conn, rid, m.error(rid, m.INVALID_REQUEST, m.ALREADY_INITIALIZED)))
        return
    capabilities = ev.capabilities if isinstance(ev.capabilities, dict) else {}
    _record_capabilities(d, conn, capabilities, out)
    c = _get_conn(d, conn)
    version = protocol.negotiate(ev.protocol_version)
    _put_conn(d, conn, attrs.evolve(c, version=version, held=()))  # R-PARK-8: held from now
    out.append(Reply(conn, rid, m.result(rid, protocol.initialize_result(d.options, version))))


def _on_client_ready(d: _Draft, ev: ClientReady, out: Out) -> None:
    """R-PARK-8: the client is initialized; the prompts held for it go out, in parking order."""
    c = d.conns.get(ev.conn)
    if c is None or c.held is None:
        return
    d.conns = d.conns.set(ev.conn, attrs.evolve(c, held=None))
    for _eid, rid, request in c.held:
        out.append(Push(ev.conn, request, rid))


def _unheld(d: _Draft, call: Call) -> bool:
    """R-PARK-9: whether ``call``'s prompt was still held (never sent), forgetting it if so."""
    c = d.conns.get(call.conn)
    if c is None or not c.held:
        return False
    eid = call.elicitation_id
    kept = tuple(h for h in c.held if h[0] != eid)
    if len(kept) == len(c.held):
        return False
    d.conns = d.conns.set(call.conn, attrs.evolve(c, held=kept))
    return True


def _record_capabilities(d: _Draft, conn: ConnId, capabilities: object, out: Out) -> None:
    c = _get_conn(d, conn)
    if c.cap_group:
        return  # R-CAP-1: a later initialize never replaces the entry
    group: CapGroup = "live" if c.subscribed else "unsubscribed"
    fifo, pos = _cap_fifo(d, group).push(conn)
    _set_cap_fifo(d, group, fifo)
    sampling = capabilities.get("sampling") if isinstance(capabilities, dict) else None
    _put_conn(
        d,
        conn,
        attrs.evolve(
            c,
            can_elicit=can_elicit(capabilities),
            can_sample=isinstance(sampling, dict),  # R-CTX-4
            can_task=tasks.declares_legacy(capabilities),  # R-TASK-12
            cap_group=group,
            cap_pos=pos,
        ),
    )
    limit = d.options.max_client_capabilities
    if len(d.cap_unsubscribed) + len(d.cap_live) > limit:  # R-CAP-3
        live = not d.cap_unsubscribed
        victim = (d.cap_live if live else d.cap_unsubscribed).first()
        assert victim is not None
        _put_conn(d, victim, _remove_caps(d, _get_conn(d, victim)))
        out.append(
            Emit(
                "client_capabilities_evicted",
                {
                    "count": 1,
                    "size": len(d.cap_unsubscribed) + len(d.cap_live),
                    "live_subscriber": live,
                    "max_client_capabilities": limit,
                },
            )
        )


def _attach(
    d: _Draft, conn: ConnId, c: Conn, principal: str | None, per_request: bool = False
) -> None:
    if c.cap_group == "unsubscribed":  # R-CAP-3: the entry joins the live group, newest
        d.cap_unsubscribed = d.cap_unsubscribed.remove(c.cap_pos)
        d.cap_live, pos = d.cap_live.push(conn)
        c = attrs.evolve(c, cap_group="live", cap_pos=pos)
    c = attrs.evolve(c, subscribed=True, principal=principal, per_request=per_request)
    _put_conn(d, conn, c)  # R-SUB-1


def _on_subscriber_attached(d: _Draft, ev: SubscriberAttached, out: Out) -> None:
    c = _get_conn(d, ev.conn)
    if c.subscribed:  # R-SUB-2: a rebind inherits nothing
        _drop_connection(d, ev.conn, ev.now, out)
        c = _get_conn(d, ev.conn)
    principal = ev.principal if isinstance(ev.principal, str) and ev.principal else None
    _attach(d, ev.conn, c, principal, ev.per_request is True)  # R-SUB-1: "" names no one


def _on_subscriber_detached(d: _Draft, ev: SubscriberDetached, out: Out) -> None:
    _drop_connection(d, ev.conn, ev.now, out)


def _open_calls(d: _Draft, conn: ConnId, c: Conn) -> list[CallKey]:
    """The keys of ``conn``'s open calls: those holding a worker, then those parked (under the
    owner its calls park for, R-PARK-1); no scan of other connections' calls."""
    keys = [key for key in d.workers.values() if key[0] == conn] if conn in d.in_flight else []
    parked = d.parked
    owner = _owner(conn, c, c.principal)
    # A call admitted before its connection's subscriber attached parks under the connection
    # itself (its owner is fixed at admission, R-PARK-5): that queue is read too.
    for queue in (owner,) if owner == conn else (owner, conn):
        for eid in d.store.queue(queue):
            p = parked.get(eid)
            if p is not None and not p.stateless and p.key[0] == conn:
                keys.append(p.key)
    return keys


def _drop_connection(d: _Draft, conn: ConnId, now: int, out: Out) -> None:
    """The connection went away: drop every call it owns and forget it (R-DROP-3, R-CAP-2);
    its listens end with nothing sent (R-MRTR-19), through its own index (R-MRTR-27)."""
    if d.conn_listens and conn in d.conn_listens:
        for rid, _ in d.conn_listens[conn]:
            _end_listen(d, conn, rid)
    if d.task_waits:
        tasks.connection_gone(d, conn)  # R-TASK-14: its waits end, nothing sent
    c = d.conns.get(conn)
    if c is None:
        return
    for key in _in_admission_order(d, _open_calls(d, conn, c)):
        _drop(d, _the_call(d, key), now, out, notify=False, why=CONNECTION_GONE)
    c = attrs.evolve(_remove_caps(d, _get_conn(d, conn)), subscribed=False, held=None)
    if d.store.count(conn):  # kept for its modern nonces (R-MRTR-12) only: it keeps nothing else
        _forget_protocol_state(d, conn, c)
        c = attrs.evolve(
            c, version="", log_level="", subscriptions=Map(), principal=None, per_request=False
        )
    _put_conn(d, conn, c)


# ---------------------------------------------------------------------------------------------
# Tools


def _on_tool_registered(d: _Draft, ev: ToolRegistered, out: Out) -> None:
    d.tools = d.tools.set(ev.name, tool_info(ev.name, ev.sensitive, ev.derived, ev.definition))
    _announce(d, "tools", out)


def _on_tool_unregistered(d: _Draft, ev: ToolUnregistered, out: Out) -> None:
    if ev.name in d.tools:
        d.tools = d.tools.delete(ev.name)
        _announce(d, "tools", out)


def _on_catalog_changed(d: _Draft, ev: CatalogChanged, out: Out) -> None:
    catalog = d.catalog
    field = {"resource": "resources", "template": "templates", "prompt": "prompts"}.get(ev.kind)
    if field is None:
        raise TypeError(f"CatalogChanged.kind must be resource, template or prompt: {ev.kind!r}")
    entries: Map[str, Any] = getattr(catalog, field)
    if ev.definition is not None:
        entries = entries.set(ev.key, ev.definition)
    elif ev.key in entries:
        entries = entries.delete(ev.key)
    else:
        return
    d.catalog = attrs.evolve(catalog, **{field: entries})
    _announce(d, "prompts" if ev.kind == "prompt" else "resources", out)


def _announce(d: _Draft, kind: str, out: Out) -> None:
    """R-PROTO-12: list_changed to every subscribed connection that initialized."""
    message = protocol.list_changed(kind)
    for conn, c in d.conns.items():
        if c.subscribed and c.version:
            out.append(Push(conn, message))
    for (conn, rid), kinds in d.listens.items():
        if kind in kinds:  # R-MRTR-19
            out.append(Push(conn, tagged(message, rid), rid))


# ---------------------------------------------------------------------------------------------
# Opening and ending calls


def _admit(d: _Draft, conn: ConnId, request_id: object, out: Out) -> bool:
    """R-ADM-0 and R-ADM-1: a usable request id, not already in flight on this connection."""
    if not is_request_id(request_id):
        out.append(Reply(conn, None, m.invalid_id()))
        return False
    key = (conn, request_id)
    if (
        key in d.working
        or (d.waiting and key in d.waiting)
        or (d.listens and key in d.listens)  # R-MRTR-19
        or (d.task_waits and key in d.task_waits)  # R-TASK-14
    ):
        out.append(Reply(conn, request_id, m.duplicate_id(request_id)))  # type: ignore[arg-type]
        return False
    return True


def _open(
    d: _Draft,
    conn: ConnId,
    request_id: m.RequestId,
    is_tool: bool,
    name: str,
    arguments: object,
    mode: Mode,
    caller: Hashable | None,
    stage: Stage,
    job: Job,
    now: int,
    out: Out,
    owner: Hashable = None,
) -> None:
    """Opens a call whose first stage holds a worker, or answers busy (R-ADM-5, R-ADM-6);
    ``owner`` is a modern request's (R-PARK-5), ``None`` for a 2025 request's (its
    connection's, derived here)."""
    key = (conn, request_id)
    if owner is None:
        owner = owner_of(d, conn)
    scope = _start_worker(d, conn, owner, key, job, now, out)
    if scope:
        out.append(Reply(conn, request_id, _busy(request_id, is_tool, name, scope)))
        if is_tool:
            out.append(_record(conn, request_id, name, "", "busy", scope, "", None, now, now))
        return
    if conn not in d.conns:
        d.conns = d.conns.set(conn, EMPTY_CONN)
    call = Call(  # in the order of Call's fields (keywords cost more, on every admission)
        conn,
        request_id,
        is_tool,
        name,
        arguments,
        mode,
        caller,
        stage,
        d.next_ref - 1,  # worker: the one just started
        "",  # elicitation_id
        False,  # replied
        d.next_seq,  # seq
        now,  # started
        "",  # decision
        "",  # approval
        key,
        owner,
    )
    d.next_seq += 1
    d.working = d.working.set(key, call)
    if caller is not None:
        d.callers = d.callers.set(caller, d.callers.get(caller, _NO_KEYS).set(key, True))


def _start_worker(
    d: _Draft, conn: ConnId, owner: Hashable, key: CallKey, job: Job, now: int, out: Out
) -> str:
    """Starts a worker for the call ``key`` of ``owner`` (R-WORK-1: ``StartWorker`` and its
    deadline), unless a bound of R-ADM-5 forbids it (the share is the owner's, R-ADM-6): then
    starts nothing and answers that bound's scope. The worker's ref is ``d.next_ref - 1`` once
    started. One place for every worker start (a call's first stage and every later one)."""
    opts = d.options
    held = d.owner_in_flight.get(owner, 0)
    share = connection_share(opts.max_in_flight, opts.max_in_flight_per_connection)
    scope = busy_scope(d.in_flight_total, opts.max_in_flight, held, share)
    if scope:
        return scope if scope == "server" else owner_scope(owner, conn)  # R-ADM-6
    ref = d.next_ref
    d.next_ref = ref + 1
    d.workers = d.workers.set(ref, key)
    d.in_flight_total += 1
    d.in_flight = d.in_flight.set(conn, d.in_flight.get(conn, 0) + 1)
    d.owner_in_flight = d.owner_in_flight.set(owner, held + 1)
    out.append(StartWorker(ref, conn, job))
    out.append(StartTimer((WORKER_TIMER, ref), now + opts.callback_timeout_ms))
    return ""


def _release_worker(d: _Draft, call: Call) -> None:
    d.workers = d.workers.delete(call.worker)
    d.in_flight_total -= 1
    n = d.in_flight[call.conn] - 1
    d.in_flight = d.in_flight.set(call.conn, n) if n else d.in_flight.delete(call.conn)
    owner = call.owner
    n = d.owner_in_flight[owner] - 1
    d.owner_in_flight = d.owner_in_flight.set(owner, n) if n else d.owner_in_flight.delete(owner)


def _next_stage(
    d: _Draft, call: Call, stage: Stage, job: Job, now: int, out: Out, decision: str = ""
) -> None:
    """Moves a call whose worker just ended to a stage with a new worker, or answers busy;
    ``decision`` is what the authorizer decided (R-LOG-2).

    The bounds are checked again: this is a worker start like any other (R-ADM-5).
    """
    key = call.key
    scope = _start_worker(d, call.conn, call.owner, key, job, now, out)
    if scope:
        busy = _busy(call.request_id, call.is_tool, call.name, scope)
        _close(d, call, busy, now, out, "busy", scope, decision)
        return
    ref = d.next_ref - 1  # the worker just started
    moved = call.moved(stage, ref, "", call.replied, decision, call.approval)
    if call.stage is _PARKED:  # approved: it moves to the calls holding a worker
        d.waiting = d.waiting.delete(key)
    d.working = d.working.set(key, moved)


def _busy(request_id: Any, is_tool: bool, name: str, scope: str) -> JsonObject:
    if is_tool:
        return m.tool_failure(request_id, "server_busy", scope=scope)
    return m.method_failure(request_id, name, "server_busy")


def _end(d: _Draft, call: Call) -> None:
    """Forgets an open call (R-CLOSE-3, R-DROP-*): the call, its connection's and caller's index."""
    key = call.key
    if call.stage is _PARKED:
        d.waiting = d.waiting.delete(key)
    else:
        d.working = d.working.delete(key)
    if d.stateless and key in d.stateless:
        d.stateless = d.stateless.delete(key)  # R-MRTR-9
    if d.progress and key in d.progress:
        d.progress = d.progress.delete(key)  # R-CTX-2
    conn = call.conn
    if conn not in d.in_flight:  # perhaps its last open call: a worker-holding one was released
        # before (a parked call's connection is subscribed, R-INV-5, and kept)
        _freed(d, conn)
    if call.caller is not None:
        keys = d.callers[call.caller].delete(key)
        d.callers = d.callers.set(call.caller, keys) if keys else d.callers.delete(call.caller)


def _record(
    conn: ConnId,
    request_id: Any,
    tool: str,
    decision: str,
    outcome: str,
    detail: str | None,
    approval: str,
    evicted_by: ConnId | None,
    started: int,
    now: int,
) -> fx.Emit:
    """The ``call_ended`` record of a ``tools/call`` (R-LOG-1, R-LOG-2); ``decision`` as
    :class:`~askgate.core.state.Call` keeps it, or ``deny``."""
    approved = None
    if decision == "approved":
        decision, approved = "ask", True
    elif decision == "ask":
        approved = False
    return Emit(
        "call_ended",
        {
            "conn": conn,
            "request_id": request_id,
            "tool": tool,
            "decision": decision or None,
            "approved": approved,
            "outcome": outcome,
            "detail": detail,
            "elicitation_id": approval or None,
            "evicted_by": evicted_by,
            "started_ms": started,
            "duration_ms": now - started,
        },
    )


def _close(
    d: _Draft,
    call: Call,
    message: JsonObject,
    now: int,
    out: Out,
    outcome: str,
    detail: str | None = None,
    decision: str | None = None,
) -> None:
    """Delivers a call's outcome to its owner, once, and ends it (R-DLV-1 .. R-DLV-3); a
    ``tools/call`` is recorded with ``outcome``, ``detail`` and ``decision`` (by default the
    call's own) (R-LOG-1)."""
    if d.stateless:  # a modern call's answer is rendered by its revision
        message = _final(d, call, message)
    if call.replied:
        out.append(Push(call.conn, message, call.request_id))
    else:
        out.append(Reply(call.conn, call.request_id, message))
    _end(d, call)
    if call.is_tool:
        out.append(
            _record(
                call.conn,
                call.request_id,
                call.name,
                call.decision if decision is None else decision,
                outcome,
                detail,
                call.approval,
                None,
                call.started,
                now,
            )
        )


def _deny(
    d: _Draft,
    call: Call,
    decision: str,
    detail: str,
    now: int,
    out: Out,
    why: str | None = None,
    *,
    recorded: str | None = None,
    evicted_by: ConnId | None = None,
) -> None:
    """Closes a ``tools/call`` with the deny (R-DLV-4); ``why`` defaults to the sentence of
    ``detail``; its record says ``recorded`` instead of ``detail`` when given (R-LOG-2)."""
    rid = call.request_id
    sentence = m.WHY[detail] if why is None else why
    message = m.authorization_required(rid, call.name, decision, detail, sentence)
    if d.stateless:  # a modern call's answer is rendered by its revision
        message = _final(d, call, message)
    if call.replied:
        out.append(Push(call.conn, message, rid))
    else:
        out.append(Reply(call.conn, rid, message))
    _end(d, call)
    shown = detail if recorded is None else recorded
    out.append(
        _record(
            call.conn,
            rid,
            call.name,
            decision,
            "denied",
            shown,
            call.approval,
            evicted_by,
            call.started,
            now,
        )
    )


def _read_deny(d: _Draft, call: Call, detail: str, now: int, out: Out) -> None:
    """Closes a read with its deny (R-READ-2), recorded as ``read_denied`` (R-LOG-4)."""
    rid: Any = call.request_id
    _close(d, call, m.read_denied(rid, call.name, detail), now, out, "denied", detail)
    fields = {"conn": call.conn, "request_id": rid, "method": call.name, "detail": detail}
    out.append(Emit("read_denied", fields))


CANCELLED_BY_CLIENT = "cancelled"
CALLER_GONE = "caller gone"
CONNECTION_GONE = "connection gone"


def _drop(d: _Draft, call: Call, now: int, out: Out, *, notify: bool, why: str) -> None:
    """Ends a call with no outcome at whatever stage it is (R-DROP-1 .. R-DROP-4); a
    ``tools/call`` is recorded as dropped, ``why`` being its detail (R-LOG-2)."""
    if call.stage is _PARKED:
        eid = call.elicitation_id
        sent = not _unheld(d, call)  # R-PARK-9
        _unpark(d, call, now)
        out.append(CancelTimer((ELICITATION_TIMER, eid)))
        if notify and sent:
            withdrawn = _revision(d, call.conn).withdraw(eid, m.REQUEST_CANCELLED)
            out.append(Push(call.conn, withdrawn, call.request_id))
    else:
        out.append(KillWorker(call.worker))
        out.append(CancelTimer((WORKER_TIMER, call.worker)))
        _release_worker(d, call)
        if call.worker in d.worker_requests:
            _withdraw_requests(d, call.worker, out, notify=notify)  # R-CTX-6
    if not call.replied:
        out.append(Reply(call.conn, call.request_id, None))
    _end(d, call)
    if call.is_tool:
        record = _record(
            call.conn,
            call.request_id,
            call.name,
            call.decision,
            "dropped",
            why,
            call.approval,
            None,
            call.started,
            now,
        )
        out.append(record)


def _revision(d: _Draft, conn: ConnId) -> Revision:
    """R-REV-1: how ``conn``'s messages look, by the version it negotiated."""
    return revision_for(_get_conn(d, conn).version)


def _in_admission_order(d: _Draft, keys: list[CallKey]) -> list[CallKey]:
    return sorted(keys, key=lambda key: _the_call(d, key).seq)


# ---------------------------------------------------------------------------------------------
# Requests


def _on_tool_call(d: _Draft, ev: ToolCallReceived, out: Out) -> None:
    conn = ev.conn
    rid: Any = ev.request_id
    if not _admit(d, conn, rid, out):
        return
    # _era and _uninitialized, on one lookup of the connection (the hot path)
    try:  # [] costs less than get: a call's connection is nearly always known
        version = d.conns[conn].version
    except KeyError:
        version = ""
    meta = ev.meta  # no _meta names no version: request_era(None) is None, without its call
    era = None if version or meta is None else request_era(meta)  # R-MRTR-9
    if era is not None and isinstance(era, Refusal):  # R-MRTR-10
        out.append(Reply(conn, rid, m.error(rid, era.code, era.message, era.data)))
        return
    if era is None and not version and d.options.transport == "stdio":  # R-PROTO-22
        out.append(Reply(conn, rid, m.error(rid, m.INVALID_REQUEST, m.INITIALIZE_FIRST)))
        return
    if not isinstance(ev.tool, str) or not isinstance(ev.arguments, dict):  # R-PROTO-6
        out.append(Reply(conn, rid, _bad_tools_call(rid)))
        return
    if era is None:
        legacy_tasks = version == tasks.REVISION  # R-TASK-12: the revision that has them
        if legacy_tasks and tasks.refused_legacy(d, conn, rid, ev.tool, ev.task, ev.now, out):
            return
        _tool_call(d, conn, rid, ev.tool, ev.arguments, ev.now, ev.mode, ev.caller, out)
        if legacy_tasks and ev.task is not None:
            tasks.created(d, (conn, rid), ev.task, ev.now, out)  # R-TASK-13
    else:  # R-MRTR-9: served statelessly
        caps = era.capabilities
        if tasks.refused(d, conn, rid, ev.tool, caps, ev.now, out):  # R-TASK-3
            return
        who, owner = principal_and_owner(d, conn, ev.principal)  # R-SUB-3, R-PARK-5
        principal = "" if who is None else who
        st = StatelessCall(
            era.revision, can_elicit(caps), principal, owner, False, era.log_level, Round(caps)
        )
        sub: Out = []
        if ev.request_state is None:
            tool, arguments, now, mode, caller = ev.tool, ev.arguments, ev.now, ev.mode, ev.caller
            _tool_call(d, conn, rid, tool, arguments, now, mode, caller, sub, st.round, owner)
        elif sealing.token_version(ev.request_state) == sealing.ROUND_VERSION:  # R-MRTR-21
            st = _round_retry(d, conn, rid, ev, st, sub)
        else:  # R-MRTR-13
            st = _retry(d, conn, rid, ev, st, sub)
        _served_statelessly(d, conn, rid, st, sub, out)
        tasks.admitted(d, (conn, rid), caps, ev.now, out)  # R-TASK-4
    if meta is not None and isinstance(meta, dict) and _open_call(d, (conn, rid)) is not None:
        token: Any = meta.get("progressToken")
        if is_request_id(token):
            d.progress = d.progress.set((conn, rid), Progress(token))  # R-CTX-2


def _on_ping(d: _Draft, ev: PingReceived, out: Out) -> None:
    if _admit(d, ev.conn, ev.request_id, out):  # R-PROTO-4
        out.append(Reply(ev.conn, ev.request_id, m.result(ev.request_id, {})))  # type: ignore[arg-type]


def _tool_call(
    d: _Draft,
    conn: ConnId,
    rid: Any,
    name: str,
    arguments: object,
    now: int,
    mode: Mode,
    caller: Hashable | None,
    out: Out,
    round_: Round | None = None,
    owner: Hashable = None,
) -> None:
    """An admitted ``tools/call`` (R-ADM-2 .. R-ADM-5, R-AUTH-1, R-PROTO-6); ``round_`` is what
    a modern call's tool is told of its rounds (R-MRTR-20), ``owner`` a modern call's owner
    (R-PARK-5)."""
    try:  # [] costs less than get (no argument tuple): a call nearly always names a tool
        tool: ToolInfo | None = d.tools[name]
    except KeyError:
        tool = None
    opts = d.options
    if tool is None:  # R-ADM-2
        if opts.has_unknown_tool_reply:
            job: Job = UnknownToolReply(name)
            stage = _UNKNOWN_REPLY
        else:
            out.append(Reply(conn, rid, m.unknown_tool(rid, name)))
            out.append(_record(conn, rid, name, "", "unknown_tool", None, "", None, now, now))
            return
    else:
        # argument_problem is None for a tool without an input schema: not called (hot path)
        problem = None if tool.validator is None else argument_problem(tool, arguments)
        if problem is not None:  # R-PROTO-6
            out.append(Reply(conn, rid, protocol.invalid_arguments(rid, name, problem)))
            out.append(_record(conn, rid, name, "", "invalid_arguments", None, "", None, now, now))
            return
        if opts.has_authorizer:  # R-AUTH-1
            job, stage = Authorize(name, arguments), _AUTHORIZING
        elif tool.sensitive:  # R-ADM-3
            detail = m.SENSITIVE_UNGUARDED
            payload = m.authorization_required(rid, name, "deny", detail, m.WHY[detail])
            out.append(Reply(conn, rid, payload))
            out.append(_record(conn, rid, name, "deny", "denied", detail, "", None, now, now))
            return
        else:  # R-ADM-4
            job, stage = RunTool(name, arguments, round_), _RUNNING
    _open(d, conn, rid, True, name, arguments, mode, caller, stage, job, now, out, owner)


def _bad_tools_call(rid: Any) -> JsonObject:
    problem = "tools/call requires a string name and an object of arguments"
    return m.error(rid, m.INVALID_PARAMS, problem)


def _on_read(d: _Draft, ev: ReadRequested, out: Out) -> None:
    conn, method = ev.conn, ev.method
    rid: Any = ev.request_id
    if not _admit(d, conn, rid, out):
        return
    params = ev.params if isinstance(ev.params, dict) else None
    meta = None if params is None else params.get("_meta")
    era = request_era(meta) if method == DISCOVER else _era(d, conn, meta)
    if isinstance(era, Refusal):  # R-MRTR-10
        out.append(Reply(conn, rid, m.error(rid, era.code, era.message, era.data)))
        return
    if era is None:
        if method == "ping" and meta is not None:  # R-MRTR-9: a 2025 ping naming a version
            out.append(Reply(conn, rid, m.result(rid, {})))
            return
        read = isinstance(method, str) and method in protocol.READ_METHODS
        if read and _uninitialized(d, conn):  # R-PROTO-22
            out.append(Reply(conn, rid, m.error(rid, m.INVALID_REQUEST, m.INITIALIZE_FIRST)))
            return
        legacy_tasks = not read and isinstance(method, str) and method in tasks.METHODS
        if legacy_tasks and _get_conn(d, conn).version == tasks.REVISION:
            owner = owner_of(d, conn)
            tasks.serve(d, conn, rid, method, params, None, owner, ev.now, out, legacy=True)
            return  # R-TASK-14
        _read_or_unknown(d, conn, rid, method, params, ev.now, ev.caller, out)
        return
    cacheable = method in CACHEABLE
    who, owner = principal_and_owner(d, conn, ev.principal)  # R-SUB-3, R-PARK-5
    principal = "" if who is None else who
    rounds = Round(era.capabilities) if method in ROUND_READS else None  # R-MRTR-24
    st = StatelessCall(era.revision, False, principal, owner, cacheable, None, rounds)
    if method == DISCOVER:  # R-MRTR-11
        found = m.result(rid, discover_result(d.options.instructions))
        out.append(Reply(conn, rid, complete(found, _server_info(d), True)))
        return
    if method == LISTEN:  # R-MRTR-19
        _listen(d, conn, rid, params, owner, out)
        return
    if method in tasks.METHODS:  # R-TASK-7
        tasks.serve(d, conn, rid, method, params, era.capabilities, owner, ev.now, out)
        return
    sub: Out = []
    if method in LEGACY_ONLY:  # R-MRTR-9: not a method of the stateless revision
        shown = str(method)[:64]
        sub.append(Reply(conn, rid, m.error(rid, m.METHOD_NOT_FOUND, f"Unknown method: {shown}")))
    elif rounds is not None and params is not None and "requestState" in params:  # R-MRTR-24
        st = _read_round_retry(d, conn, rid, method, params, ev.now, ev.caller, st, sub)
    else:
        _read_or_unknown(d, conn, rid, method, params, ev.now, ev.caller, sub, rounds, owner)
    _served_statelessly(d, conn, rid, st, sub, out)


def _read_or_unknown(
    d: _Draft,
    conn: ConnId,
    rid: Any,
    method: object,
    params: JsonObject | None,
    now: int,
    caller: Hashable | None,
    out: Out,
    round_: Round | None = None,
    owner: Hashable = None,
) -> None:
    if not isinstance(method, str) or method not in protocol.READ_METHODS:  # R-PROTO-5, 7
        shown = str(method)[:64]
        out.append(Reply(conn, rid, m.error(rid, m.METHOD_NOT_FOUND, f"Unknown method: {shown}")))
        return
    _read(d, conn, rid, method, params, now, caller, out, round_, owner)


def _read(
    d: _Draft,
    conn: ConnId,
    rid: Any,
    method: str,
    params: JsonObject | None,
    now: int,
    caller: Hashable | None,
    out: Out,
    round_: Round | None = None,
    owner: Hashable = None,
) -> None:
    """An admitted read request: its params checked, gated, then answered here or by a worker
    (R-PROTO-7, R-READ-1); ``round_`` and ``owner`` as for ``tools/call`` (R-MRTR-24,
    R-PARK-5)."""
    problem_reply = protocol.read_params_error(rid, method, params)
    if problem_reply is not None:
        out.append(Reply(conn, rid, problem_reply))
        return
    if d.options.has_read_authorizer:  # R-READ-1
        job: Job = AuthorizeRead(method, params)
        stage = _READ_AUTHORIZING
    else:
        answer = _answer_read(d, conn, rid, method, params)
        if answer is not None:
            out.append(Reply(conn, rid, answer))
            return
        job, stage = _read_job(d, method, params, round_), _READ_RUNNING
    _open(d, conn, rid, False, method, params, "reply", caller, stage, job, now, out, owner)


def _read_job(
    d: _Draft, method: str, params: JsonObject | None, round_: Round | None = None
) -> Job:
    if method == "tools/list":
        return FilterTools(tuple(sorted(d.tools.keys())))
    return RunRead(method, params, round_)


def _answer_read(
    d: _Draft, conn: ConnId, rid: Any, method: str, params: JsonObject | None
) -> JsonObject | None:
    """The answer to an allowed read the reducer answers itself, or ``None`` when a worker
    must (R-PROTO-7 .. R-PROTO-11)."""
    size = d.options.page_size
    if method == "tools/list":
        if d.options.has_visibility and d.tools:
            return None  # R-PROTO-8: the visibility hook says which to list
        tools = ((name, protocol.tool_entry(name, t.definition)) for name, t in d.tools.items())
        return protocol.page(rid, params, "tools", tools, size)
    if method == "resources/list":
        return protocol.page(rid, params, "resources", d.catalog.resources.items(), size)
    if method == "resources/templates/list":
        templates = d.catalog.templates.items()
        return protocol.page(rid, params, "resourceTemplates", templates, size)
    if method == "prompts/list":
        return protocol.page(rid, params, "prompts", d.catalog.prompts.items(), size)
    if method in ("resources/subscribe", "resources/unsubscribe"):
        uri = (params or {})["uri"]
        c = _get_conn(d, conn)
        if method == "resources/subscribe":
            subscribers = d.resource_subscribers.get(uri, Map()).set(conn, True)
            d.resource_subscribers = d.resource_subscribers.set(uri, subscribers)
            subscriptions = c.subscriptions.set(uri, True)
        else:
            _unsubscribe(d, conn, uri)
            subscriptions = (
                c.subscriptions.delete(uri) if uri in c.subscriptions else c.subscriptions
            )
        _put_conn(d, conn, attrs.evolve(c, subscriptions=subscriptions))
        if conn not in d.conns:  # nothing keeps an unknown connection: neither its subscription
            _unsubscribe(d, conn, uri)
        return m.result(rid, {})
    if method == "logging/setLevel":
        level = (params or {})["level"]
        c = _get_conn(d, conn)
        _put_conn(d, conn, attrs.evolve(c, log_level=level))
        if conn in d.conns:
            d.log_levels = d.log_levels.set(conn, level)
        return m.result(rid, {})
    if d.options.catalog_complete:
        return _unregistered_read(d, rid, method, params)
    return None


def _unregistered_read(
    d: _Draft, rid: Any, method: str, params: JsonObject | None
) -> JsonObject | None:
    """The error answering a ``resources/read`` or ``prompts/get`` that names nothing the
    catalog holds, or ``None`` when a callback is there to answer it (R-PROTO-18,
    R-PROTO-19)."""
    p = params or {}
    catalog = d.catalog
    if method == "resources/read":
        uri = p["uri"]
        if protocol.resource_known(uri, catalog.resources, catalog.templates.keys()):
            return None
        return m.error(rid, *protocol.unknown_resource(uri))
    if method == "prompts/get":
        name = p["name"]
        definition = catalog.prompts.get(name)
        arguments = p.get("arguments")
        problem = protocol.prompt_problem(definition, name, arguments, any_argument=True)
        return None if problem is None else m.error(rid, m.INVALID_PARAMS, problem)
    return None


# ---------------------------------------------------------------------------------------------
# Worker outcomes, by stage


def _run_tool(d: _Draft, call: Call, decision: str, now: int, out: Out) -> None:
    """Starts the tool of an allowed or approved call (R-AUTH-1, R-CLOSE-1, R-TOOL-2);
    ``decision`` is ``allow`` or ``approved`` (R-LOG-2)."""
    if call.name not in d.tools:
        unknown = m.unknown_tool(call.request_id, call.name)
        _close(d, call, unknown, now, out, "unknown_tool", None, decision)
        return
    job = RunTool(call.name, call.arguments, _round_of(d, call))
    _next_stage(d, call, _RUNNING, job, now, out, decision)


def _authorized(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    if isinstance(value, Allow):
        _run_tool(d, call, "allow", now, out)
    elif isinstance(value, Deny) and isinstance(value.reason, str):
        _deny(d, call, "deny", value.reason, now, out, m.policy_denies(value.reason))  # R-AUTH-2
    elif isinstance(value, Ask) and isinstance(value.prompt, str):
        _ask(d, call, value.prompt, now, out)  # R-AUTH-3
    else:
        _deny(d, call, "deny", m.AUTHORIZER_FAILED, now, out)  # R-AUTH-4


def _authorizer_failed(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    _deny(d, call, "deny", m.AUTHORIZER_FAILED, now, out)  # R-AUTH-4


def _tool_finished(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    if isinstance(value, NeedsInput):
        _ask_round(d, call, value, now, out)  # R-MRTR-20
    elif isinstance(value, dict):
        try:  # [] costs less than get: the tool is registered but for an unregistration
            tool: ToolInfo | None = d.tools[call.name]
        except KeyError:
            tool = None
        if tool is not None and tool.output_validator is not None:
            value = protocol.checked_output(tool, value)  # R-PROTO-17
        outcome = "tool_error" if value.get("isError") is True else "result"
        _close(d, call, m.result(call.request_id, value), now, out, outcome)
    else:
        _tool_failed(d, call, value, now, out)


def _tool_failed(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    _close(d, call, m.tool_failure(call.request_id, "callback_failed"), now, out, "failed")


def _tool_timed_out(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    _close(d, call, m.tool_failure(call.request_id, "callback_timeout"), now, out, "timed_out")


def _unknown_replied(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    rid: Any = call.request_id
    if isinstance(value, str):
        _close(d, call, m.unknown_tool_text(rid, value), now, out, "unknown_tool")
    else:
        _close(d, call, m.unknown_tool(rid, call.name), now, out, "unknown_tool")


def _unknown_failed(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    _close(d, call, m.unknown_tool(call.request_id, call.name), now, out, "unknown_tool")


def _read_authorized(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    rid: Any = call.request_id
    if isinstance(value, Allow):
        params: Any = call.arguments
        answer = _answer_read(d, call.conn, rid, call.name, params)
        if answer is not None:
            _close(d, call, answer, now, out, "result")
        else:
            job = _read_job(d, call.name, params, _round_of(d, call))
            _next_stage(d, call, _READ_RUNNING, job, now, out)
    elif isinstance(value, Deny) and isinstance(value.reason, str):
        _read_deny(d, call, value.reason, now, out)
    elif isinstance(value, Ask) and isinstance(value.prompt, str):
        _read_deny(d, call, m.READ_ASK, now, out)  # R-READ-2
    else:
        _read_deny(d, call, m.AUTHORIZER_FAILED, now, out)


def _read_authorizer_failed(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    _read_deny(d, call, m.AUTHORIZER_FAILED, now, out)


def _read_finished(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    rid: Any = call.request_id
    if isinstance(value, NeedsInput):
        _ask_round(d, call, value, now, out)  # R-MRTR-24
    elif call.name == "tools/list" and isinstance(value, dict):
        _list_visible(d, call, value, now, out)
    elif isinstance(value, dict) and call.name != "tools/list":
        _close(d, call, m.result(rid, value), now, out, "result")
    elif isinstance(value, Failure) and isinstance(value.code, int):  # R-PROTO-14
        error = m.error(rid, value.code, str(value.message), value.data)
        _close(d, call, error, now, out, "error")
    else:
        _read_failed(d, call, value, now, out)


def _list_visible(d: _Draft, call: Call, verdicts: dict[Any, object], now: int, out: Out) -> None:
    """Answers ``tools/list`` from the visibility hook's verdicts: a registered tool is listed
    when its verdict is ``True``; one whose verdict is neither ``True`` nor ``False`` is hidden
    and reported to the operator (R-PROTO-8)."""
    listed = []
    for name in sorted(d.tools.keys()):
        if name not in verdicts:
            continue  # registered while the hook ran: not asked about, not listed
        verdict = verdicts[name]
        if verdict is True:
            listed.append((name, protocol.tool_entry(name, d.tools[name].definition)))
        elif verdict is not False:
            reason = protocol.hidden_reason(verdict)
            out.append(Emit("tool_hidden", {"tool": name, "reason": reason}))
    params: Any = call.arguments
    page = protocol.page(call.request_id, params, "tools", listed, d.options.page_size)
    _close(d, call, page, now, out, "result")


def _read_failed(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    failure = m.method_failure(call.request_id, call.name, "callback_failed")
    _close(d, call, failure, now, out, "failed")


def _read_timed_out(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    failure = m.method_failure(call.request_id, call.name, "callback_timeout")
    _close(d, call, failure, now, out, "timed_out")


# ---------------------------------------------------------------------------------------------
# Parking


def mint_elicitation_id(id_key: bytes, counter: int, prefix: str = m.ELICITATION_ID_PREFIX) -> str:
    """R-ID-1: ``askgate-elicit-`` (or ``prefix``) and 22 URL-safe characters of a keyed BLAKE2b
    of a counter."""
    digest = _keyed_digest(id_key, counter)
    # base64.urlsafe_b64encode's two steps, without its two Python calls.
    encoded = binascii.b2a_base64(digest, newline=False).translate(_URL_SAFE)
    return prefix + encoded.rstrip(b"=").decode()


_URL_SAFE = bytes.maketrans(b"+/", b"-_")


def _keyed_digest(id_key: bytes, counter: int) -> bytes:
    """16 bytes no one without ``id_key`` can predict, never repeated for another counter."""
    hasher = sealing.keyed_hasher(id_key).copy()
    hasher.update(counter.to_bytes(8, "big"))
    return hasher.digest()


def owner_of(state: Variables, conn: ConnId, given: object = None) -> Hashable:
    """R-SUB-3, R-PARK-5: the owner a request of ``conn`` counts against (its workers, R-ADM-6;
    its parking places, R-PARK-1), and the one place that derives it. ``given`` is the principal
    the request's event carries, used only when the connection's subscriber named none
    (R-SUB-3). The owner is ``(PRINCIPAL_OWNER, principal)`` when a principal is known; else
    ``ANONYMOUS_OWNER`` for a connection that lives for one request (R-PARK-7); else the
    connection itself."""
    return principal_and_owner(state, conn, given)[1]


def principal_and_owner(
    state: Variables, conn: ConnId, given: object = None
) -> tuple[str | None, Hashable]:
    """R-SUB-3: who a request of ``conn`` comes from: its connection's principal (R-SUB-1),
    else the non-empty principal its event carries, else no one (``None``); and the owner that
    makes it (:func:`owner_of`)."""
    c = state.conns.get(conn, EMPTY_CONN)
    principal = given if c.principal is None else c.principal
    who = principal if isinstance(principal, str) and principal else None
    return who, _owner(conn, c, who)


def _owner(conn: ConnId, c: Conn, principal: str | None) -> Hashable:
    """:func:`owner_of`'s answer, given the connection's record and the request's principal."""
    if principal:
        return (PRINCIPAL_OWNER, principal)
    return ANONYMOUS_OWNER if c.per_request else conn


def owner_scope(owner: Hashable, conn: ConnId) -> str:
    """R-PARK-6: what ``owner`` is, as a deny or a busy answer names it: ``principal``,
    ``anonymous`` (R-PARK-7) or ``connection``."""
    if owner == ANONYMOUS_OWNER:
        return "anonymous"
    if owner != conn and isinstance(owner, tuple) and owner[:1] == (PRINCIPAL_OWNER,):
        return "principal"
    return "connection"


def _unpark(d: _Draft, call: Call, now: int) -> None:
    """Frees a parked call's slot; the caller cancels or has lost its timer (R-CLOSE-3)."""
    eid = call.elicitation_id
    _release(d, eid, d.parked[eid].owner, None, now)


def _release(d: _Draft, eid: str, owner: Hashable, why: str | None, now: int) -> None:
    """Releases the place ``eid`` this state reserved for ``owner`` (R-STORE-4)."""
    d.parked = d.parked.delete(eid)
    d.store = d.store.release(eid, owner, why, now)
    _freed(d, owner)


def _freed(d: _Draft, owner: Hashable) -> None:
    """``owner`` holds a place less: a connection that holds nothing else is forgotten now
    (R-INV-6)."""
    c = d.conns.get(owner)
    if c is not None and c.is_empty():  # a record that holds something is kept as it is
        _put_conn(d, owner, c)


def _ask(d: _Draft, call: Call, prompt: str, now: int, out: Out) -> None:
    """An ASK: park the call, or deny it, or evict another to make room (R-PARK-1 .. 4)."""
    if d.stateless:
        st = d.stateless.get(call.key)
        if st is not None:
            _ask_stateless(d, call, st, prompt, now, out)  # R-MRTR-12
            return
    try:  # [] costs less than get: a call's connection is known while the call is open
        c = d.conns[call.conn]
    except KeyError:
        c = EMPTY_CONN
    if not (c.subscribed and c.can_elicit):  # R-AUTH-3
        _cannot_ask(d, call, prompt, now, out)
        return
    owner = call.owner  # R-PARK-1, R-PARK-5: fixed when the call was admitted
    eid = mint_elicitation_id(d.id_key, d.next_elicitation)
    if _reserve(d, call, owner, eid, False, now, out):
        _park(d, call, owner, eid, c.version, prompt, now, out, c.held is not None)


DIGEST_SHOWN = 12
"""R-DLV-5: how many hex digits of the arguments' keyed digest an approval prompt shows."""


def _with_digest(d: _Draft, arguments: object, prompt: str) -> str:
    """R-DLV-5: the prompt as the client is shown it, ending with the start of the keyed digest
    of the call's arguments that the decision log records (R-AUD-2)."""
    key = d.digest_key
    if key is None:
        return prompt
    shown = sealing.keyed_digest(key, arguments)[:DIGEST_SHOWN]
    return f"{prompt} (arguments digest {shown})"


def _cannot_ask(d: _Draft, call: Call, prompt: str, now: int, out: Out) -> None:
    """R-AUTH-3: the deny-on-ASK, whose detail is the prompt (recorded without it)."""
    _deny(d, call, "ask", prompt, now, out, m.CANNOT_ASK, recorded=m.CANNOT_ASK_DETAIL)


def _reserve(
    d: _Draft, call: Call, owner: Hashable, ident: str, single_use: bool, now: int, out: Out
) -> bool:
    """Reserves the place ``ident`` of ``owner`` in the store for ``call`` (R-STORE-2: R-PARK-1,
    R-PARK-3, R-PARK-4), after freeing the victim's when it evicts one; when a cap is full,
    answers ``call`` instead and returns ``False``: a ``tools/call`` is denied, a read's round
    is answered ``server_busy`` (R-MRTR-21)."""
    opts = d.options
    deadline = now + opts.elicitation_timeout_ms
    per_owner, total = opts.max_parked_elicitations, opts.max_parked_elicitations_total
    d.store, answer = d.store.reserve(owner, ident, deadline, per_owner, total, now, single_use)
    outcome = answer.outcome
    if outcome == "parked":  # the usual answer, tested first
        return True
    if outcome == "evicted":  # R-PARK-3, R-PARK-4
        _evicted(d, answer.victim, call.conn, now, out)
        return True
    if not call.is_tool:
        busy = m.method_failure(call.request_id, call.name, "server_busy")
        _close(d, call, busy, now, out, "failed")
    elif outcome == "owner_full":  # R-PARK-1, named by its scope (R-PARK-6)
        why = m.OWNER_FULL[owner_scope(owner, call.conn)]
        _deny(d, call, "ask", m.TOO_MANY_PENDING, now, out, why)
    else:  # R-PARK-3
        _deny(d, call, "ask", m.TOO_MANY_ON_SERVER, now, out)
    return False


def _evicted(d: _Draft, victim_eid: str, evictor: ConnId, now: int, out: Out) -> None:
    """The store freed ``victim_eid``'s place to make room (R-PARK-4): a parked call is
    withdrawn and denied; a modern nonce dies silently (R-MRTR-15)."""
    p = d.parked[victim_eid]
    d.parked = d.parked.delete(victim_eid)
    _freed(d, p.owner)
    out.append(CancelTimer((ELICITATION_TIMER, victim_eid)))
    if p.stateless:
        return
    victim = d.waiting[p.key]
    if not _unheld(d, victim):  # R-PARK-9
        withdrawn = _revision(d, victim.conn).withdraw(victim_eid, m.EVICTED)
        out.append(Push(victim.conn, withdrawn, victim.request_id))
    _deny(d, victim, "ask", m.EVICTED, now, out, evicted_by=evictor)


def _park(
    d: _Draft,
    call: Call,
    owner: Hashable,
    eid: str,
    version: str,
    prompt: str,
    now: int,
    out: Out,
    hold: bool,
) -> None:
    """Parks ``call`` in the place ``eid`` it reserved for ``owner`` (R-PARK-1) and prompts its
    connection, in the connection's ``version`` (R-PARK-2); or, when ``hold`` (the client is
    not initialized yet), keeps the prompt for ``ClientReady`` (R-PARK-8)."""
    d.next_elicitation += 1
    deadline = now + d.options.elicitation_timeout_ms
    key = call.key
    d.parked = d.parked.set(eid, Parked(key, owner))
    replied = call.replied or call.mode == "push"
    parked = call.moved(_PARKED, -1, eid, replied, "ask", eid)
    d.working = d.working.delete(key)
    d.waiting = d.waiting.set(key, parked)
    out.append(StartTimer((ELICITATION_TIMER, eid), deadline))
    shown = _with_digest(d, call.arguments, prompt)  # R-DLV-5
    request = revision_for(version).ask(eid, call.name, shown)  # R-REV-2
    if hold:  # R-PARK-8
        c = d.conns[call.conn]
        held = (*(c.held or ()), (eid, call.request_id, request))
        d.conns = d.conns.set(call.conn, attrs.evolve(c, held=held))
    else:
        out.append(Push(call.conn, request, call.request_id))
    if replied and not call.replied:  # R-DLV-3: push mode answers the request with nothing
        out.append(Reply(call.conn, call.request_id, None))
    fields = {"conn": call.conn, "request_id": call.request_id, "tool": call.name}
    fields["elicitation_id"] = eid
    out.append(Emit("call_parked", fields))  # R-LOG-3


def _on_answer(d: _Draft, ev: ElicitationAnswered, out: Out) -> None:
    conn, eid, result, error = ev.conn, ev.elicitation_id, ev.result, ev.error
    if not isinstance(eid, str):
        return  # R-CLOSE-5
    try:  # a Map's [] costs less than its get (no argument tuple) when the id is known
        p = d.parked[eid]
    except KeyError:
        if eid in d.client_requests:
            _client_answered(d, conn, eid, result, error, out)  # R-CTX-5
        return  # R-CLOSE-5: unknown and late answers
    if p.stateless or p.key[0] != conn:
        tasks.relayed(d, ev, p.key, out)  # R-TASK-15: a 2025 task's question, on its session
        return  # R-CLOSE-5: unknown, late and foreign answers look alike (R-MRTR-15)
    held = d.conns[conn].held
    if held and any(h[0] == eid for h in held):
        return  # R-PARK-9: a prompt never sent is unknown to the client
    call = d.waiting[p.key]
    now = ev.now
    _release(d, eid, p.owner, None, now)  # its place (R-CLOSE-3), as _unpark frees it
    out.append(CancelTimer((ELICITATION_TIMER, eid)))
    if error is not None:
        _deny(d, call, "ask", m.ELICITATION_FAILED, now, out)
    elif is_approval(result):
        _run_tool(d, call, "approved", now, out)  # R-CLOSE-1
    else:
        _deny(d, call, "ask", refusal_detail(result), now, out)


def _elicitation_timed_out(d: _Draft, call: Call, now: int, out: Out) -> None:
    eid = call.elicitation_id
    sent = not _unheld(d, call)  # R-PARK-9
    _unpark(d, call, now)
    if sent:
        withdrawn = _revision(d, call.conn).withdraw(eid, m.TIMED_OUT)
        out.append(Push(call.conn, withdrawn, call.request_id))
    why = m.nobody_approved(d.options.elicitation_timeout_ms)
    _deny(d, call, "ask", m.TIMED_OUT, now, out, why)  # R-CLOSE-2


# ---------------------------------------------------------------------------------------------
# The stateless revision (spec/modern.md)

DISCOVER = "server/discover"
PRINCIPAL_OWNER = "principal"
"""A request of an authenticated principal counts against ``(PRINCIPAL_OWNER, principal)``
(R-PARK-5)."""
ANONYMOUS_OWNER: tuple[str] = ("anonymous",)
"""The one owner of every stateless request no one authenticated (R-PARK-7)."""
NONCE_ID_PREFIX = "askgate-mrtr-"


def _era(d: _Draft, conn: ConnId, meta: object) -> Stateless | Refusal | None:
    """R-MRTR-9: a request on a connection that initialized is of that connection's revision;
    on any other, its own ``_meta`` says."""
    if _get_conn(d, conn).version:
        return None
    return request_era(meta)


def _uninitialized(d: _Draft, conn: ConnId) -> bool:
    """R-PROTO-22: a stdio connection that negotiated no version."""
    return d.options.transport == "stdio" and not _get_conn(d, conn).version


def _server_info(d: _Draft) -> JsonObject:
    return {"name": d.options.server_name, "version": d.options.server_version}


def _final(d: _Draft, call: Call, message: JsonObject) -> JsonObject:
    """A call's final answer as its revision renders it (R-MRTR-11)."""
    if d.stateless:
        st = d.stateless.get(call.key)
        if st is not None:
            return complete(message, _server_info(d), st.cacheable)
    return message


def _served_statelessly(
    d: _Draft, conn: ConnId, rid: Any, st: StatelessCall, sub: Out, out: Out
) -> None:
    """Moves the effects of a modern request's step into ``out``, its answer (if it was answered
    at once) rendered by :func:`complete`; an opened call remembers how it is served."""
    key = (conn, rid)
    if _open_call(d, key) is not None:
        d.stateless = d.stateless.set(key, st)
    info = _server_info(d)
    for effect in sub:
        if (
            isinstance(effect, fx.Reply)
            and effect.message is not None
            and effect.conn == conn
            and effect.request_id == rid
        ):
            out.append(Reply(conn, rid, complete(effect.message, info, st.cacheable)))
        else:
            out.append(effect)


def _listen(
    d: _Draft, conn: ConnId, rid: Any, params: JsonObject | None, owner: Hashable, out: Out
) -> None:
    """R-MRTR-19: a modern ``subscriptions/listen`` opens a listen of ``conn`` for ``owner``,
    acknowledged at once with the list changes it honours; or it is refused. The bounds are
    read off counts kept for them, not off the other listens (R-MRTR-25, R-MRTR-27)."""
    notifications = None if params is None else params.get("notifications")
    if not isinstance(notifications, dict):
        problem = "subscriptions/listen requires an object of notifications"
        out.append(Reply(conn, rid, m.error(rid, m.INVALID_PARAMS, problem)))
        return
    options = d.options
    mine = d.conn_listens.get(conn, ())
    held = d.owner_listens.get(owner, 0)
    if len(d.listens) >= options.max_listens_total:  # R-MRTR-25
        scope = "server"
    elif held >= options.max_listens_per_owner:  # R-MRTR-25
        scope = "owner"
    elif len(mine) >= options.in_flight_share:  # R-MRTR-19
        scope = "connection"
    else:
        kinds = listen_kinds(notifications)
        d.listens = d.listens.set((conn, rid), kinds)
        d.conn_listens = d.conn_listens.set(conn, (*mine, (rid, owner)))
        d.owner_listens = d.owner_listens.set(owner, held + 1)
        out.append(Push(conn, acknowledged(rid, kinds), rid))
        return
    out.append(Reply(conn, rid, m.listen_busy(rid, scope)))


def _end_listen(d: _Draft, conn: ConnId, rid: Any) -> None:
    """Forgets the open listen ``(conn, rid)`` and frees its places in its connection's and
    its owner's counts (R-MRTR-26), touching no other connection's listens (R-MRTR-27)."""
    d.listens = d.listens.delete((conn, rid))
    mine = d.conn_listens[conn]
    owner = next(who for key, who in mine if key == rid)
    rest = tuple(entry for entry in mine if entry[0] != rid)
    d.conn_listens = d.conn_listens.set(conn, rest) if rest else d.conn_listens.delete(conn)
    held = d.owner_listens[owner] - 1
    d.owner_listens = d.owner_listens.set(owner, held) if held else d.owner_listens.delete(owner)


def nonce_id(nonce: bytes) -> str:
    """The parking id of a modern approval's nonce (R-MRTR-12)."""
    return NONCE_ID_PREFIX + base64.urlsafe_b64encode(nonce).rstrip(b"=").decode()


def _digest(arguments: object) -> str:
    """The arguments' digest (R-MRTR-3), or "" for arguments JSON cannot carry."""
    try:
        return sealing.arguments_digest(arguments)
    except ValueError:
        return ""


def _ask_stateless(
    d: _Draft, call: Call, st: StatelessCall, prompt: str, now: int, out: Out
) -> None:
    """R-MRTR-12: park a modern ASK as a nonce of its owner (same caps, eviction and timer as
    R-PARK-*) and answer at once with the input-required result; or deny as R-AUTH-3,
    R-PARK-1 and R-PARK-3 say."""
    digest = _digest(call.arguments)
    if not st.can_elicit or not digest:  # R-AUTH-3, R-MRTR-16
        _cannot_ask(d, call, prompt, now, out)
        return
    nonce, nid = _nonce(d)
    if not _reserve(d, call, st.owner, nid, True, now, out):
        return
    _park_nonce(d, st.owner, nid, now, out)
    assert d.keyring is not None
    state = sealing.seal(d.keyring, st.principal, call.name, digest, nonce, now)
    rid: Any = call.request_id
    shown = _with_digest(d, call.arguments, prompt)  # R-DLV-5
    message = input_required(rid, call.name, shown, state, _server_info(d))
    out.append(Reply(call.conn, rid, message))
    fields = {"conn": call.conn, "request_id": rid, "tool": call.name, "elicitation_id": nid}
    out.append(Emit("call_parked", fields))  # R-LOG-3
    _end(d, call)
    out.append(
        _record(
            call.conn, rid, call.name, "ask", "input_required", None, nid, None, call.started, now
        )
    )


def _nonce(d: _Draft) -> tuple[bytes, str]:
    """The next nonce (R-ID-1's keyed hash of the one counter, R-MRTR-12) and its parking id;
    the counter moves on only when it parks (:func:`_park_nonce`)."""
    nonce = _keyed_digest(d.id_key, d.next_elicitation)
    return nonce, nonce_id(nonce)


def _park_nonce(d: _Draft, owner: Hashable, nid: str, now: int, out: Out) -> None:
    """Parks the nonce ``nid`` whose place ``owner`` reserved, with its timer, as a modern
    approval's or round's (R-MRTR-12, R-MRTR-21)."""
    d.next_elicitation += 1  # R-ID-1: the one counter
    deadline = now + d.options.elicitation_timeout_ms
    d.parked = d.parked.set(nid, Parked((owner, nid), owner, True))
    out.append(StartTimer((ELICITATION_TIMER, nid), deadline))


def _take(d: _Draft, nid: str, owner: Hashable, now: int, out: Out) -> str | None:
    """Takes the nonce ``nid`` for ``owner`` from the store, exactly once (R-STORE-3,
    R-CLOSE-3): ``None`` when taken (its timer cancelled; nothing is sent, R-MRTR-15), else why
    the retry is refused: of another principal, or R-MRTR-14's remembered reason, or
    ``request state already used`` when nothing is remembered."""
    d.store, taken = d.store.take(nid, owner, now)
    outcome = taken.outcome
    if outcome == "taken":
        if nid in d.parked:
            d.parked = d.parked.delete(nid)
        _freed(d, owner)
        out.append(CancelTimer((ELICITATION_TIMER, nid)))
        return None
    if outcome == "foreign":
        return sealing.FOREIGN_PRINCIPAL
    return taken.why if outcome == "closed" else m.ALREADY_USED


def _deny_retry(
    conn: ConnId, rid: Any, tool: str, detail: str, nid: str, now: int, out: Out
) -> None:
    """Denies a modern retry at once with ``detail`` (R-MRTR-8, R-MRTR-13, R-MRTR-14)."""
    out.append(Reply(conn, rid, m.authorization_required(rid, tool, "ask", detail, m.WHY[detail])))
    out.append(_record(conn, rid, tool, "ask", "denied", detail, nid, None, now, now))


def _retry(
    d: _Draft, conn: ConnId, rid: Any, ev: ToolCallReceived, st: StatelessCall, out: Out
) -> StatelessCall:
    """R-MRTR-13: a modern ``tools/call`` carrying a ``requestState``. It runs the tool only
    with a valid state whose nonce is parked for this owner and an approving answer, closing
    the nonce exactly once; anything else is denied and nothing runs."""
    name: str = ev.tool
    arguments: Any = ev.arguments
    tool = d.tools.get(name)
    if tool is None or argument_problem(tool, arguments) is not None:
        mode, caller, now, owner = ev.mode, ev.caller, ev.now, st.owner
        _tool_call(d, conn, rid, name, arguments, now, mode, caller, out, None, owner)  # R-ADM-2
        return st
    digest = _digest(arguments)
    assert d.keyring is not None
    opened = sealing.open_sealed(d.keyring, ev.request_state, st.principal, name, digest, ev.now)
    if opened.verdict != "valid":  # R-MRTR-8
        _deny_retry(conn, rid, name, sealing.DENY_DETAIL[opened.verdict], "", ev.now, out)
        return st
    nid = nonce_id(opened.nonce)
    refused = _take(d, nid, st.owner, ev.now, out)  # R-CLOSE-3: exactly once
    if refused is not None:  # R-MRTR-13, R-MRTR-14
        _deny_retry(conn, rid, name, refused, nid, ev.now, out)
        return st
    responses = ev.input_responses
    answer = responses.get(INPUT_KEY) if isinstance(responses, dict) else None
    if not is_approval(answer):  # R-CLOSE-2
        _deny_retry(conn, rid, name, refusal_detail(answer), nid, ev.now, out)
        return st
    # R-MRTR-21: the tool's own rounds carry that its approval was granted
    granted = None if st.round is None else attrs.evolve(st.round, approved=True)
    job = RunTool(name, arguments, granted)  # R-CLOSE-1, under R-ADM-5
    mode, caller, now, owner = ev.mode, ev.caller, ev.now, st.owner
    _open(d, conn, rid, True, name, arguments, mode, caller, Stage.RUNNING, job, now, out, owner)
    call = d.working.get((conn, rid))
    if call is not None:
        approved = call.moved(Stage.RUNNING, call.worker, "", call.replied, "approved", nid)
        d.working = d.working.set((conn, rid), approved)
    return attrs.evolve(st, round=granted)


# ---------------------------------------------------------------------------------------------
# Input-required rounds of a callback's own (spec/modern.md, R-MRTR-20 .. R-MRTR-24)


def _round_of(d: _Draft, call: Call) -> Round | None:
    """What ``call``'s callback is told of its rounds: set for a modern call (R-MRTR-20)."""
    st = d.stateless.get(call.key) if d.stateless else None
    if st is None and d.live_tasks:
        st = tasks.served(d, call)  # R-TASK-11: a task's call is told its request's round
    return None if st is None else st.round


def _round_binding(method: str, name: str, params: object) -> tuple[str, str]:
    """The name and digest a round state binds (R-MRTR-21): a tool's name and its arguments'
    digest; for a read, the method and the prompt's name or the resource's URI, and the digest
    of the prompt's arguments (``null`` for a resource). The digest is "" for a value JSON
    cannot carry."""
    if method == "tools/call":
        return name, _digest(params)
    p = params if isinstance(params, dict) else {}
    named = p.get("name") if method == "prompts/get" else p.get("uri")
    arguments = p.get("arguments") if method == "prompts/get" else None
    return f"{method} {named}", _digest(arguments)


def _round_failed(d: _Draft, call: Call, now: int, out: Out) -> None:
    """A callback ended a round it may not (R-MRTR-20): answered as a callback that raised."""
    if call.is_tool:
        _tool_failed(d, call, None, now, out)
    else:
        _read_failed(d, call, None, now, out)


def _ask_round(d: _Draft, call: Call, needs: NeedsInput, now: int, out: Out) -> None:
    """R-MRTR-20 .. R-MRTR-22: a callback serving a modern request ended a round. Its requests
    are checked, then the client's declared capabilities (``-32021`` naming what is missing),
    then a nonce is parked as a modern approval's is (R-MRTR-12's caps, eviction and timer) and
    the request is answered with the requests and a sealed round state."""
    st = _stateless_call(d, call) or tasks.served(d, call)  # R-TASK-11: or a task's
    requests = round_requests(needs.requests)
    state = sealing.state_bytes(needs.state)
    method = "tools/call" if call.is_tool else call.name
    name, digest = _round_binding(method, call.name, call.arguments)
    valid = requests is not None and state is not None and bool(digest and _digest(requests))
    if st is None or st.round is None or requests is None or state is None or not valid:
        _round_failed(d, call, now, out)
        return
    rid: Any = call.request_id
    missing = missing_capabilities(requests, st.round.capabilities)
    if missing:  # R-MRTR-22
        _close(d, call, missing_capability(rid, missing), now, out, "error")
        return
    nonce, nid = _nonce(d)
    if not _reserve(d, call, st.owner, nid, True, now, out):  # R-MRTR-21
        return
    _park_nonce(d, st.owner, nid, now, out)
    assert d.keyring is not None
    approved = st.round.approved or call.decision == "approved"  # R-TASK-11: approved in a task
    token = sealing.seal_round(d.keyring, st.principal, name, digest, nonce, now, approved, state)
    fields = {"conn": call.conn, "request_id": rid, "tool": call.name, "elicitation_id": nid}
    if call.is_tool:
        out.append(Emit("call_parked", fields))  # R-LOG-3
    _close(d, call, round_result(rid, requests, token, _server_info(d)), now, out, "input_required")


def _take_round(
    d: _Draft,
    conn: ConnId,
    rid: Any,
    token: object,
    st: StatelessCall,
    name: str,
    digest: str,
    now: int,
    out: Out,
) -> sealing.RoundOpened | None:
    """R-MRTR-23: opens a round state and takes its nonce, exactly once; or answers ``-32602``
    with the reason (R-MRTR-8's verdict details, then R-MRTR-14's) and returns ``None``."""
    assert d.keyring is not None
    opened = sealing.open_round(d.keyring, token, st.principal, name, digest, now)
    reason: str | None
    if opened.verdict != "valid":
        reason = sealing.DENY_DETAIL[opened.verdict]
    else:
        reason = _take(d, nonce_id(opened.nonce), st.owner, now, out)  # single use
    if reason is not None:
        out.append(Reply(conn, rid, invalid_state(rid, reason)))
        return None
    return opened


def _round_state(opened: sealing.RoundOpened, st: StatelessCall, responses: object) -> Round:
    """What the callback is told on a retry whose round state was valid (R-MRTR-20)."""
    capabilities = None if st.round is None else st.round.capabilities
    state = sealing.state_value(opened.state)
    return Round(capabilities, responses, state, opened.approved)


def _round_retry(
    d: _Draft, conn: ConnId, rid: Any, ev: ToolCallReceived, st: StatelessCall, out: Out
) -> StatelessCall:
    """R-MRTR-23: a modern ``tools/call`` carrying a round state. An unknown tool or invalid
    arguments are answered as for any call; a refused state gets ``-32602`` and nothing runs;
    a valid one's nonce is taken, and the tool runs again, told the answers and its state: at
    once when its approval was granted, else after its authorizer as any call."""
    name: str = ev.tool
    arguments: Any = ev.arguments
    tool = d.tools.get(name)
    if tool is None or argument_problem(tool, arguments) is not None:
        mode, caller, now = ev.mode, ev.caller, ev.now
        _tool_call(d, conn, rid, name, arguments, now, mode, caller, out, st.round, st.owner)
        return st
    _, digest = _round_binding("tools/call", name, arguments)
    opened = _take_round(d, conn, rid, ev.request_state, st, name, digest, ev.now, out)
    if opened is None:
        return st
    round_ = _round_state(opened, st, ev.input_responses)
    if opened.approved:  # R-MRTR-21: asked and approved once, never asked again
        job = RunTool(name, arguments, round_)
        mode, caller, now, owner = ev.mode, ev.caller, ev.now, st.owner
        running = Stage.RUNNING
        _open(d, conn, rid, True, name, arguments, mode, caller, running, job, now, out, owner)
        call = d.working.get((conn, rid))
        if call is not None:
            approved = call.moved(Stage.RUNNING, call.worker, "", call.replied, "approved", "")
            d.working = d.working.set((conn, rid), approved)
    else:
        mode, caller, now = ev.mode, ev.caller, ev.now
        _tool_call(d, conn, rid, name, arguments, now, mode, caller, out, round_, st.owner)
    return attrs.evolve(st, round=round_)


def _read_round_retry(
    d: _Draft,
    conn: ConnId,
    rid: Any,
    method: str,
    params: JsonObject,
    now: int,
    caller: Hashable | None,
    st: StatelessCall,
    out: Out,
) -> StatelessCall:
    """R-MRTR-24: a modern ``prompts/get`` or ``resources/read`` carrying a round state: its
    params are checked as any read's, the state as R-MRTR-23 says, then the read is authorized
    and run as any, its callback told the answers and its state."""
    problem_reply = protocol.read_params_error(rid, method, params)
    if problem_reply is not None:
        out.append(Reply(conn, rid, problem_reply))
        return st
    name, digest = _round_binding(method, method, params)
    token = params.get("requestState")
    opened = _take_round(d, conn, rid, token, st, name, digest, now, out)
    if opened is None:
        return st
    round_ = _round_state(opened, st, params.get("inputResponses"))
    _read(d, conn, rid, method, params, now, caller, out, round_, st.owner)
    return attrs.evolve(st, round=round_)


# ---------------------------------------------------------------------------------------------
# Drops and timers


def _on_cancel(d: _Draft, ev: CancelRequested, out: Out) -> None:
    conn, request_id, now = ev.conn, ev.request_id, ev.now
    if not is_request_id(request_id):
        return
    if d.listens and (conn, request_id) in d.listens:
        _end_listen(d, conn, request_id)  # R-MRTR-19: ended, answered nothing
        return
    if d.task_waits and (conn, request_id) in d.task_waits:
        tasks.unwait(d, (conn, request_id), out)  # R-TASK-14: ended, answered nothing
        return
    call = _open_call(d, (conn, request_id))
    if call is not None:
        _drop(d, call, now, out, notify=True, why=CANCELLED_BY_CLIENT)  # R-DROP-1


def _on_caller_exited(d: _Draft, ev: CallerExited, out: Out) -> None:
    keys = d.callers.get(ev.caller)
    if keys is None:
        return
    for key in _in_admission_order(d, list(keys)):
        _drop(d, _the_call(d, key), ev.now, out, notify=True, why=CALLER_GONE)  # R-DROP-2


# ---------------------------------------------------------------------------------------------
# Stopping (R-STOP-1)


def _on_server_stopping(d: _Draft, ev: ServerStopping, out: Out) -> None:
    """R-STOP-1: every open call ends, in admission order, its owner told."""
    for key in _in_admission_order(d, [*d.working.keys(), *d.waiting.keys()]):
        _stop(d, _the_call(d, key), ev.now, out)
    for conn, rid in d.listens:  # R-MRTR-19: each listen ends with its answer
        out.append(Reply(conn, rid, listen_ended(rid, _server_info(d))))
    d.listens, d.conn_listens, d.owner_listens = Map(), Map(), Map()  # R-MRTR-26


def _stop(d: _Draft, call: Call, now: int, out: Out) -> None:
    """Ends one call because the server stops: a parked one withdrawn and denied, a worker
    killed and its call denied (authorizer) or answered ``server_stopping`` (tool, read)."""
    rid: Any = call.request_id
    if call.stage is Stage.PARKED:
        eid = call.elicitation_id
        sent = not _unheld(d, call)  # R-PARK-9
        _unpark(d, call, now)
        out.append(CancelTimer((ELICITATION_TIMER, eid)))
        if sent:
            withdrawn = _revision(d, call.conn).withdraw(eid, m.STOPPING)
            out.append(Push(call.conn, withdrawn, rid))
        _deny(d, call, "ask", m.STOPPING, now, out)
        return
    out.append(KillWorker(call.worker))
    out.append(CancelTimer((WORKER_TIMER, call.worker)))
    _release_worker(d, call)
    if call.worker in d.worker_requests:
        _withdraw_requests(d, call.worker, out, notify=True)  # R-CTX-6
    if call.stage is Stage.AUTHORIZING:
        _deny(d, call, "deny", m.STOPPING, now, out)
    elif call.is_tool:
        _close(d, call, m.tool_failure(rid, "server_stopping"), now, out, "stopped")
    else:
        _close(d, call, m.method_failure(rid, call.name, "server_stopping"), now, out, "stopped")


# ---------------------------------------------------------------------------------------------
# A running tool's context (R-CTX)


def _running_tool(d: _Draft, ref: int) -> Call | None:
    """The call whose tool runs in worker ``ref``, or ``None`` (R-CTX-1)."""
    key = d.workers.get(ref)
    if key is None:
        return None
    call = d.working[key]
    return call if call.stage is Stage.RUNNING else None


def _is_number(value: object) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and math.isfinite(value)
    )


def _on_tool_progressed(d: _Draft, ev: ToolProgressed, out: Out) -> None:
    call = _running_tool(d, ev.ref)
    if call is None:
        return  # R-CTX-1
    key = call.key
    progress = d.progress.get(key)
    if progress is None or not _is_number(ev.progress):
        return
    value: Any = ev.progress
    if progress.last is not None and value <= progress.last:
        return  # R-CTX-2: progress only increases
    if not (ev.total is None or _is_number(ev.total)):
        return
    if not (ev.message is None or isinstance(ev.message, str)):
        return
    d.progress = d.progress.set(key, Progress(progress.token, value))
    message = m.progress(progress.token, value, ev.total, ev.message)
    out.append(Push(call.conn, message, call.request_id))


def _stateless_call(d: _Draft, call: Call) -> StatelessCall | None:
    """How ``call`` is served, if it is a modern request (R-MRTR-9)."""
    return d.stateless.get(call.key) if d.stateless else None


def _on_tool_logged(d: _Draft, ev: ToolLogged, out: Out) -> None:
    call = _running_tool(d, ev.ref)
    if call is None or not isinstance(ev.level, str):
        return  # R-CTX-1
    rank = protocol.LOG_RANK.get(ev.level)
    st = _stateless_call(d, call)
    wanted = d.log_levels.get(call.conn) if st is None else st.log_level  # R-MRTR-18
    if rank is None or wanted is None or protocol.LOG_RANK[wanted] > rank:
        return  # R-CTX-3
    if st is None and not _get_conn(d, call.conn).subscribed:
        return
    logger = ev.logger if isinstance(ev.logger, str) else None
    out.append(Push(call.conn, protocol.log_message(ev.level, ev.data, logger), call.request_id))


def _ctx_failure(reason: str, message: str, code: int = m.INTERNAL_ERROR) -> Failure:
    return Failure(code, message, {"error": reason})


def _on_tool_requested(d: _Draft, ev: ToolRequested, out: Out) -> None:
    ref, token = ev.ref, ev.token
    call = _running_tool(d, ref)
    if call is None:  # R-CTX-1
        failure = _ctx_failure("not_running", "only a running tool can send requests")
        out.append(Resolve(ref, token, failure))
        return
    if d.task_pending and call.key in d.task_pending:  # R-TASK-4: it asks, so it is a task
        call = tasks.escalate(d, call, ev.now, out)
    if _stateless_call(d, call) is not None:  # R-MRTR-17
        failure = _ctx_failure(
            "stateless_request",
            "a tool serving a 2026-07-28 request cannot send requests to its client: "
            "it ends a round instead (raise InputRequired)",
        )
        out.append(Resolve(ref, token, failure))
        return
    c = _get_conn(d, call.conn)
    revision = revision_for(c.version)
    params = revision.request_params(ev.method, ev.params)
    if params is None:
        problem = (
            "elicitation/create needs a string message and an object requestedSchema; "
            "sampling/createMessage needs an array of messages and an integer maxTokens"
        )
        out.append(Resolve(ref, token, _ctx_failure("invalid_request", problem, m.INVALID_PARAMS)))
        return
    method: str = ev.method  # type: ignore[assignment]
    if method == "elicitation/create" and not (c.subscribed and c.can_elicit):
        failure = _ctx_failure("client_cannot_elicit", "the client cannot be asked (elicitation)")
        out.append(Resolve(ref, token, failure))
        return
    if method == "sampling/createMessage" and not (c.subscribed and c.can_sample):
        failure = _ctx_failure("client_cannot_sample", "the client did not offer sampling")
        out.append(Resolve(ref, token, failure))
        return
    outstanding = d.worker_requests.get(ref, ())
    if len(outstanding) >= d.options.max_client_requests_per_call:
        failure = _ctx_failure("too_many_requests", "too many requests to the client outstanding")
        out.append(Resolve(ref, token, failure))
        return
    rid = mint_elicitation_id(d.id_key, d.next_elicitation, m.CLIENT_REQUEST_ID_PREFIX)
    d.next_elicitation += 1  # R-ID-1: one counter for both kinds of id, so none repeats
    key = call.key
    d.client_requests = d.client_requests.set(rid, ClientRequest(key, ref, token, method))
    d.worker_requests = d.worker_requests.set(ref, (*outstanding, rid))
    out.append(Push(call.conn, revision.tool_request(rid, method, params), call.request_id))
    out.append(StartTimer((CLIENT_REQUEST_TIMER, rid), ev.now + d.options.elicitation_timeout_ms))


def _forget_request(d: _Draft, rid: str) -> ClientRequest:
    request = d.client_requests[rid]
    d.client_requests = d.client_requests.delete(rid)
    rest = tuple(r for r in d.worker_requests[request.ref] if r != rid)
    d.worker_requests = (
        d.worker_requests.set(request.ref, rest) if rest else d.worker_requests.delete(request.ref)
    )
    return request


def _client_answered(
    d: _Draft, conn: ConnId, rid: str, result: object, error: object, out: Out
) -> None:
    key = d.client_requests[rid].key
    if key[0] != conn:
        tasks.relayed(d, ElicitationAnswered(conn, rid, result, 0, error), key, out)  # R-TASK-15
        return  # R-CTX-5: foreign answers are ignored
    request = _forget_request(d, rid)
    out.append(CancelTimer((CLIENT_REQUEST_TIMER, rid)))
    outcome: object
    if error is not None:
        e = error if isinstance(error, dict) else {}
        code = e.get("code")
        text = e.get("message")
        outcome = Failure(
            code if isinstance(code, int) and not isinstance(code, bool) else m.INTERNAL_ERROR,
            text if isinstance(text, str) else "the client answered with an error",
            e.get("data"),
        )
    elif isinstance(result, dict):
        outcome = result
    else:
        outcome = _ctx_failure("invalid_answer", "the client's answer is not an object")
    out.append(Resolve(request.ref, request.token, outcome))


def _client_request_timed_out(d: _Draft, rid: str, out: Out) -> None:
    request = _forget_request(d, rid)
    conn, related = request.key
    out.append(Push(conn, _revision(d, conn).withdraw(rid, m.REQUEST_TIMED_OUT), related))
    failure = _ctx_failure("timed_out", "the client did not answer in time")
    out.append(Resolve(request.ref, request.token, failure))  # R-CTX-6


def _withdraw_requests(d: _Draft, ref: int, out: Out, *, notify: bool) -> None:
    """The worker ``ref`` ended: its outstanding requests no longer matter (R-CTX-6)."""
    for rid in d.worker_requests[ref]:
        request = d.client_requests[rid]
        d.client_requests = d.client_requests.delete(rid)
        out.append(CancelTimer((CLIENT_REQUEST_TIMER, rid)))
        if notify:
            conn, related = request.key
            withdrawn = _revision(d, conn).withdraw(rid, m.REQUEST_CANCELLED)
            out.append(Push(conn, withdrawn, related))
    d.worker_requests = d.worker_requests.delete(ref)


# ---------------------------------------------------------------------------------------------
# Messages (spec/protocol.md)


def _on_message(d: _Draft, ev: MessageReceived, out: Out) -> None:
    """R-PROTO-1, R-PROTO-15: decoded once, then what the door says it means goes to the handler
    of that meaning, the same one a typed event reaches."""
    data = ev.data
    message = codec.decode(data) if isinstance(data, bytes) else data
    meaning = door.meaning(ev.conn, message, ev.now, ev.mode, ev.caller, ev.principal)
    if meaning is None:
        return
    if isinstance(meaning, dict):
        out.append(Reply(ev.conn, None, meaning))  # R-PROTO-1
        return
    _HANDLERS[type(meaning)](d, meaning, out)


def _on_resource_updated(d: _Draft, ev: ResourceUpdated, out: Out) -> None:
    subscribers = d.resource_subscribers.get(ev.uri)
    if not subscribers:
        return
    message = protocol.resource_updated(ev.uri)
    for conn in subscribers:
        if d.conns[conn].subscribed:  # R-PROTO-10
            out.append(Push(conn, message))


def _on_log(d: _Draft, ev: LogEmitted, out: Out) -> None:
    rank = protocol.LOG_RANK.get(ev.level)
    if rank is None:
        raise TypeError(f"LogEmitted.level must be one of {protocol.LOG_LEVELS}: {ev.level!r}")
    message = protocol.log_message(ev.level, ev.data, ev.logger)
    targets = d.log_levels.items() if ev.conn is None else [(ev.conn, d.log_levels.get(ev.conn))]
    for conn, level in targets:
        if level is not None and protocol.LOG_RANK[level] <= rank and d.conns[conn].subscribed:
            out.append(Push(conn, message))  # R-PROTO-11


@record
class Transition:
    """One row of a transition table: what handles it, the rules it implements, where it leads."""

    handler: Callable[..., None]
    rules: tuple[str, ...]
    leads_to: str


def _worker_event(d: _Draft, ref: int, kind: str, value: object, now: int, out: Out) -> None:
    try:  # a Map's [] costs less than its get (no argument tuple): the worker is nearly always
        key = d.workers[ref]  # known
    except KeyError:
        return  # R-WORK-4: a worker already ended or killed
    call = d.working[key]
    _release_worker(d, call)
    if kind == "TimerFired":
        out.append(KillWorker(ref))  # R-WORK-2
    else:
        out.append(CancelTimer((WORKER_TIMER, ref)))
    if d.worker_requests and ref in d.worker_requests:
        _withdraw_requests(d, ref, out, notify=True)  # R-CTX-6
    _CALL_HANDLERS[kind][call.stage._value_](d, call, value, now, out)  # CALL_TRANSITIONS


def _on_worker_finished(d: _Draft, ev: WorkerFinished, out: Out) -> None:
    _worker_event(d, ev.ref, "WorkerFinished", ev.value, ev.now, out)


def _on_worker_failed(d: _Draft, ev: WorkerFailed, out: Out) -> None:
    _worker_event(d, ev.ref, "WorkerFailed", None, ev.now, out)


def _on_timer(d: _Draft, ev: TimerFired, out: Out) -> None:
    key = ev.key
    if not isinstance(key, tuple) or len(key) != 2:
        return
    kind, ident = key
    if kind == WORKER_TIMER and isinstance(ident, int) and not isinstance(ident, bool):
        _worker_event(d, ident, "TimerFired", None, ev.now, out)
    elif kind == ELICITATION_TIMER and isinstance(ident, str):
        try:  # [] costs less than get (no argument tuple): a timer's id is known but for a race
            p = d.parked[ident]
        except KeyError:
            return
        if p.stateless:  # R-MRTR-15: silent; expired, so not remembered
            _release(d, ident, p.owner, None, ev.now)
        else:
            _elicitation_timed_out(d, d.waiting[p.key], ev.now, out)
    elif kind == CLIENT_REQUEST_TIMER and isinstance(ident, str) and ident in d.client_requests:
        _client_request_timed_out(d, ident, out)
    elif kind in tasks.TIMERS:
        tasks.on_timer(d, kind, ident, ev.now, out)  # R-TASK-4, R-TASK-9, R-TASK-11


_W = Stage
CALL_TRANSITIONS: dict[tuple[str, Stage], Transition] = {
    ("WorkerFinished", _W.AUTHORIZING): Transition(
        _authorized, ("R-AUTH-1", "R-AUTH-2", "R-AUTH-3", "R-AUTH-4"), "RUNNING, PARKED or closed"
    ),
    ("WorkerFailed", _W.AUTHORIZING): Transition(_authorizer_failed, ("R-AUTH-4",), "closed"),
    ("TimerFired", _W.AUTHORIZING): Transition(
        _authorizer_failed, ("R-AUTH-4", "R-WORK-2"), "closed"
    ),
    ("WorkerFinished", _W.RUNNING): Transition(
        _tool_finished, ("R-WORK-3", "R-PROTO-17"), "closed"
    ),
    ("WorkerFailed", _W.RUNNING): Transition(_tool_failed, ("R-WORK-3",), "closed"),
    ("TimerFired", _W.RUNNING): Transition(_tool_timed_out, ("R-WORK-2",), "closed"),
    ("WorkerFinished", _W.UNKNOWN_REPLY): Transition(_unknown_replied, ("R-ADM-2",), "closed"),
    ("WorkerFailed", _W.UNKNOWN_REPLY): Transition(_unknown_failed, ("R-ADM-2",), "closed"),
    ("TimerFired", _W.UNKNOWN_REPLY): Transition(
        _unknown_failed, ("R-ADM-2", "R-WORK-2"), "closed"
    ),
    ("WorkerFinished", _W.READ_AUTHORIZING): Transition(
        _read_authorized,
        ("R-READ-1", "R-READ-2", "R-PROTO-18", "R-PROTO-19"),
        "READ_RUNNING or closed",
    ),
    ("WorkerFailed", _W.READ_AUTHORIZING): Transition(
        _read_authorizer_failed, ("R-READ-2",), "closed"
    ),
    ("TimerFired", _W.READ_AUTHORIZING): Transition(
        _read_authorizer_failed, ("R-READ-2", "R-WORK-2"), "closed"
    ),
    ("WorkerFinished", _W.READ_RUNNING): Transition(
        _read_finished, ("R-WORK-3", "R-PROTO-8", "R-PROTO-14"), "closed"
    ),
    ("WorkerFailed", _W.READ_RUNNING): Transition(_read_failed, ("R-WORK-3",), "closed"),
    ("TimerFired", _W.READ_RUNNING): Transition(_read_timed_out, ("R-WORK-2",), "closed"),
}
"""Worker outcomes by the stage of the call that owns the worker."""

_CALL_HANDLERS: dict[str, dict[str, Callable[..., None]]] = {
    kind: {stage._value_: t.handler for (k, stage), t in CALL_TRANSITIONS.items() if k == kind}
    for kind, _ in CALL_TRANSITIONS
}
""":data:`CALL_TRANSITIONS`' handlers by event kind, then by the stage's value: the step looks a
handler up without hashing a tuple or an enum member (whose hash is a Python call)."""

PARKED_TRANSITIONS: dict[str, Transition] = {
    "ElicitationAnswered": Transition(
        _on_answer,
        ("R-CLOSE-1", "R-CLOSE-2", "R-CLOSE-3", "R-CLOSE-5"),
        "RUNNING (approved) or closed",
    ),
    "TimerFired": Transition(_elicitation_timed_out, ("R-CLOSE-2", "R-CLOSE-4"), "closed"),
    "ASK from another connection (eviction)": Transition(
        _ask, ("R-PARK-3", "R-PARK-4", "R-CLOSE-4"), "closed"
    ),
    "CancelRequested": Transition(_on_cancel, ("R-DROP-1", "R-DROP-4"), "dropped"),
    "CallerExited": Transition(_on_caller_exited, ("R-DROP-2", "R-DROP-4"), "dropped"),
    "SubscriberDetached": Transition(_drop_connection, ("R-DROP-3", "R-DROP-4"), "dropped"),
    "ServerStopping": Transition(_on_server_stopping, ("R-STOP-1", "R-CLOSE-4"), "closed"),
}
"""What can end a parked call (every row closes or drops it exactly once)."""

EVENT_TRANSITIONS: dict[type[Any], Transition] = {
    ClientInitialized: Transition(
        _on_client_initialized,
        ("R-CAP-1", "R-CAP-3", "R-PROTO-3", "R-PROTO-23"),
        "capabilities entry recorded; an initialize request answered, or refused",
    ),
    ClientReady: Transition(_on_client_ready, ("R-PARK-8",), "held prompts sent"),
    SubscriberAttached: Transition(
        _on_subscriber_attached, ("R-SUB-1", "R-SUB-2", "R-CAP-3"), "connection live"
    ),
    SubscriberDetached: Transition(
        _on_subscriber_detached, ("R-DROP-3", "R-CAP-2"), "connection forgotten"
    ),
    ToolRegistered: Transition(_on_tool_registered, ("R-TOOL-1",), "tool callable"),
    ToolUnregistered: Transition(_on_tool_unregistered, ("R-TOOL-1",), "tool gone"),
    ToolCallReceived: Transition(
        _on_tool_call,
        ("R-ADM-0", "R-ADM-1", "R-ADM-2", "R-ADM-3", "R-ADM-4", "R-ADM-5", "R-PROTO-6", "R-CTX-2"),
        "AUTHORIZING, RUNNING, UNKNOWN_REPLY or answered",
    ),
    PingReceived: Transition(_on_ping, ("R-ADM-0", "R-ADM-1", "R-PROTO-4"), "answered"),
    ReadRequested: Transition(
        _on_read,
        (
            "R-ADM-0",
            "R-ADM-1",
            "R-ADM-5",
            "R-READ-1",
            "R-PROTO-5",
            "R-PROTO-7",
            "R-PROTO-18",
            "R-PROTO-19",
        ),
        "READ_AUTHORIZING, READ_RUNNING or answered",
    ),
    WorkerFinished: Transition(_on_worker_finished, ("R-WORK-3", "R-WORK-4"), "by stage"),
    WorkerFailed: Transition(_on_worker_failed, ("R-WORK-3", "R-WORK-4"), "by stage"),
    ElicitationAnswered: Transition(
        _on_answer, ("R-CLOSE-1", "R-CLOSE-5", "R-CTX-5"), "by stage, or a client request"
    ),
    CancelRequested: Transition(_on_cancel, ("R-DROP-1",), "dropped"),
    CallerExited: Transition(_on_caller_exited, ("R-DROP-2",), "dropped"),
    ServerStopping: Transition(_on_server_stopping, ("R-STOP-1",), "every open call closed"),
    TimerFired: Transition(_on_timer, ("R-WORK-2", "R-CLOSE-2", "R-CTX-6"), "by stage"),
    MessageReceived: Transition(
        _on_message,
        ("R-PROTO-1", "R-PROTO-2", "R-PROTO-13", "R-PROTO-15"),
        "decoded, then the handler of the event it means (the door)",
    ),
    ResourceUpdated: Transition(_on_resource_updated, ("R-PROTO-10",), "subscribers told"),
    LogEmitted: Transition(_on_log, ("R-PROTO-11",), "connections at or below the level told"),
    CatalogChanged: Transition(_on_catalog_changed, ("R-PROTO-12",), "catalog changed"),
    ToolProgressed: Transition(
        _on_tool_progressed, ("R-CTX-1", "R-CTX-2"), "progress sent to the caller, or nothing"
    ),
    ToolLogged: Transition(
        _on_tool_logged, ("R-CTX-1", "R-CTX-3"), "log sent to the caller, or nothing"
    ),
    ToolRequested: Transition(
        _on_tool_requested, ("R-CTX-1", "R-CTX-4"), "request sent to the caller, or refused"
    ),
}
"""Every event kind and its handler."""

_HANDLERS: dict[type[Any], Callable[[_Draft, Any, Out], None]] = {
    kind: t.handler for kind, t in EVENT_TRANSITIONS.items()
}


def step(state: State, event: Event) -> tuple[State, list[Effect]]:
    """Applies ``event`` to ``state``: the new state and the effects, in the order to perform.

    Never raises on anything a peer controls. Raises ``TypeError`` for an object that is not an
    event (the embedding program's mistake).
    """
    handler = _HANDLERS.get(type(event))
    if handler is None:
        raise TypeError(f"not an askgate event: {event!r}")
    draft = _Draft()  # the draft (see _Draft)
    draft.__dict__ = {**state.__dict__}
    out: Out = []
    handler(draft, event, out)
    if draft.tasks or draft.task_pending:  # R-TASK-4, R-TASK-5: what a task's call sends
        out = tasks.absorb(draft, out, event.now)
    frozen: Any = draft  # the draft becomes the new State
    frozen.__class__ = State
    return frozen, out
