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
import hashlib
from collections.abc import Callable, Hashable
from typing import Any

import attrs
from immutables import Map

from . import messages as m
from .decide import busy_scope, can_elicit, is_approval, is_request_id, park_verdict, refusal_detail
from .effects import (
    Allow,
    Ask,
    Authorize,
    AuthorizeRead,
    CancelTimer,
    Deny,
    Effect,
    Emit,
    Job,
    KillWorker,
    Push,
    Reply,
    RunRead,
    RunTool,
    StartTimer,
    StartWorker,
    UnknownToolReply,
)
from .events import (
    CallerExited,
    CancelRequested,
    ClientInitialized,
    ConnId,
    ElicitationAnswered,
    Event,
    Mode,
    ReadRequested,
    SubscriberAttached,
    SubscriberDetached,
    TimerFired,
    ToolCallReceived,
    ToolRegistered,
    ToolUnregistered,
    WorkerFailed,
    WorkerFinished,
)
from .fifo import Fifo
from .state import EMPTY_CONN, Call, CallKey, CapGroup, Conn, Parked, Stage, State, ToolInfo

Out = list[Effect]
JsonObject = dict[str, Any]

WORKER_TIMER = "worker"
ELICITATION_TIMER = "elicitation"


class _Draft:
    """A mutable copy of a :class:`State`'s fields for the length of one step.

    The fields hold persistent maps, so changing a draft never changes the state it came from.
    """

    __slots__ = tuple(f.name for f in attrs.fields(State))

    options: Any
    id_key: bytes
    tools: Map[str, ToolInfo]
    conns: Map[ConnId, Conn]
    calls: Map[CallKey, Call]
    workers: Map[int, CallKey]
    in_flight: Map[ConnId, int]
    in_flight_total: int
    parked: Map[str, Parked]
    parked_total: int
    buckets: Map[int, Fifo[ConnId]]
    top: int
    cap_unsubscribed: Fifo[ConnId]
    cap_live: Fifo[ConnId]
    callers: Map[Hashable, Map[CallKey, bool]]
    next_ref: int
    next_seq: int
    next_elicitation: int

    def __init__(self, state: State) -> None:
        # Spelled out rather than looped: this runs once per event.
        self.options = state.options
        self.id_key = state.id_key
        self.tools = state.tools
        self.conns = state.conns
        self.calls = state.calls
        self.workers = state.workers
        self.in_flight = state.in_flight
        self.in_flight_total = state.in_flight_total
        self.parked = state.parked
        self.parked_total = state.parked_total
        self.buckets = state.buckets
        self.top = state.top
        self.cap_unsubscribed = state.cap_unsubscribed
        self.cap_live = state.cap_live
        self.callers = state.callers
        self.next_ref = state.next_ref
        self.next_seq = state.next_seq
        self.next_elicitation = state.next_elicitation

    def freeze(self) -> State:
        return State(
            self.options,
            self.id_key,
            self.tools,
            self.conns,
            self.calls,
            self.workers,
            self.in_flight,
            self.in_flight_total,
            self.parked,
            self.parked_total,
            self.buckets,
            self.top,
            self.cap_unsubscribed,
            self.cap_live,
            self.callers,
            self.next_ref,
            self.next_seq,
            self.next_elicitation,
        )


# ---------------------------------------------------------------------------------------------
# Connections


def _get_conn(d: _Draft, conn: ConnId) -> Conn:
    return d.conns.get(conn, EMPTY_CONN)


def _put_conn(d: _Draft, conn: ConnId, c: Conn) -> None:
    """Stores ``c``, or forgets the connection once it holds nothing (R-INV-6)."""
    if c.is_empty():
        if conn in d.conns:
            d.conns = d.conns.delete(conn)
    else:
        d.conns = d.conns.set(conn, c)


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
    return attrs.evolve(c, can_elicit=False, cap_group="", cap_pos=-1)


def _on_client_initialized(d: _Draft, ev: ClientInitialized, out: Out) -> None:
    c = _get_conn(d, ev.conn)
    if c.cap_group:
        return  # R-CAP-1: a later initialize never replaces the entry
    group: CapGroup = "live" if c.subscribed else "unsubscribed"
    fifo, pos = _cap_fifo(d, group).push(ev.conn)
    _set_cap_fifo(d, group, fifo)
    _put_conn(
        d,
        ev.conn,
        attrs.evolve(c, can_elicit=can_elicit(ev.capabilities), cap_group=group, cap_pos=pos),
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


def _attach(d: _Draft, conn: ConnId, c: Conn) -> None:
    if c.cap_group == "unsubscribed":  # R-CAP-3: the entry joins the live group, newest
        d.cap_unsubscribed = d.cap_unsubscribed.remove(c.cap_pos)
        d.cap_live, pos = d.cap_live.push(conn)
        c = attrs.evolve(c, cap_group="live", cap_pos=pos)
    _put_conn(d, conn, attrs.evolve(c, subscribed=True))


def _on_subscriber_attached(d: _Draft, ev: SubscriberAttached, out: Out) -> None:
    c = _get_conn(d, ev.conn)
    if c.subscribed:  # R-SUB-2: a rebind inherits nothing
        _drop_connection(d, ev.conn, ev.now, out)
        c = _get_conn(d, ev.conn)
    _attach(d, ev.conn, c)


def _on_subscriber_detached(d: _Draft, ev: SubscriberDetached, out: Out) -> None:
    _drop_connection(d, ev.conn, ev.now, out)


def _drop_connection(d: _Draft, conn: ConnId, now: int, out: Out) -> None:
    """The connection went away: drop every call it owns and forget it (R-DROP-3, R-CAP-2)."""
    c = d.conns.get(conn)
    if c is None:
        return
    for key in _in_admission_order(d, [(conn, rid) for rid in c.requests]):
        _drop(d, d.calls[key], out, notify=False)
    c = _remove_caps(d, _get_conn(d, conn))
    _put_conn(d, conn, attrs.evolve(c, subscribed=False))


# ---------------------------------------------------------------------------------------------
# Tools


def _on_tool_registered(d: _Draft, ev: ToolRegistered, out: Out) -> None:
    d.tools = d.tools.set(ev.name, ToolInfo(ev.name, bool(ev.sensitive), bool(ev.derived)))


def _on_tool_unregistered(d: _Draft, ev: ToolUnregistered, out: Out) -> None:
    if ev.name in d.tools:
        d.tools = d.tools.delete(ev.name)


# ---------------------------------------------------------------------------------------------
# Opening and ending calls


def _admit(d: _Draft, conn: ConnId, request_id: object, out: Out) -> bool:
    """R-ADM-0 and R-ADM-1: a usable request id, not already in flight on this connection."""
    if not is_request_id(request_id):
        out.append(Reply(conn, request_id, m.invalid_id()))
        return False
    if request_id in _get_conn(d, conn).requests:
        out.append(Reply(conn, request_id, m.duplicate_id(request_id)))  # type: ignore[arg-type]
        return False
    return True


def _open(
    d: _Draft,
    conn: ConnId,
    request_id: Hashable,
    is_tool: bool,
    name: str,
    arguments: object,
    mode: Mode,
    caller: Hashable | None,
    stage: Stage,
    job: Job,
    now: int,
    out: Out,
) -> None:
    """Opens a call whose first stage holds a worker, or answers busy (R-ADM-5)."""
    scope = busy_scope(
        d.in_flight_total,
        d.options.max_in_flight,
        d.in_flight.get(conn, 0),
        d.options.in_flight_share,
    )
    if scope:
        out.append(Reply(conn, request_id, _busy(request_id, is_tool, name, scope)))
        return
    key = (conn, request_id)
    c = _get_conn(d, conn)
    _put_conn(d, conn, c.with_requests(c.requests.set(request_id, True)))
    ref = _start_worker(d, key, job, now, out)
    call = Call(
        conn, request_id, is_tool, name, arguments, mode, caller, stage, ref, "", False, d.next_seq
    )
    d.next_seq += 1
    d.calls = d.calls.set(key, call)
    if caller is not None:
        d.callers = d.callers.set(caller, d.callers.get(caller, Map()).set(key, True))


def _start_worker(d: _Draft, key: CallKey, job: Job, now: int, out: Out) -> int:
    """Starts a worker; the caller has checked the bounds (R-ADM-5, R-WORK-1)."""
    ref = d.next_ref
    d.next_ref = ref + 1
    d.workers = d.workers.set(ref, key)
    d.in_flight_total += 1
    conn = key[0]
    d.in_flight = d.in_flight.set(conn, d.in_flight.get(conn, 0) + 1)
    out.append(StartWorker(ref, conn, job))
    out.append(StartTimer((WORKER_TIMER, ref), now + d.options.callback_timeout_ms))
    return ref


def _release_worker(d: _Draft, call: Call) -> None:
    d.workers = d.workers.delete(call.worker)
    d.in_flight_total -= 1
    n = d.in_flight[call.conn] - 1
    d.in_flight = d.in_flight.set(call.conn, n) if n else d.in_flight.delete(call.conn)


def _next_stage(d: _Draft, call: Call, stage: Stage, job: Job, now: int, out: Out) -> None:
    """Moves a call whose worker just ended to a stage with a new worker, or answers busy.

    The bounds are checked again: this is a worker start like any other (R-ADM-5).
    """
    scope = busy_scope(
        d.in_flight_total,
        d.options.max_in_flight,
        d.in_flight.get(call.conn, 0),
        d.options.in_flight_share,
    )
    if scope:
        _close(d, call, _busy(call.request_id, call.is_tool, call.name, scope), out)
        return
    key = (call.conn, call.request_id)
    ref = _start_worker(d, key, job, now, out)
    d.calls = d.calls.set(key, call.moved(stage, ref, "", call.replied))


def _busy(request_id: Any, is_tool: bool, name: str, scope: str) -> JsonObject:
    if is_tool:
        return m.tool_failure(request_id, "server_busy", scope=scope)
    return m.method_failure(request_id, name, "server_busy")


def _end(d: _Draft, call: Call) -> None:
    """Forgets an open call (R-CLOSE-3, R-DROP-*): the call, its connection's and caller's index."""
    key = (call.conn, call.request_id)
    d.calls = d.calls.delete(key)
    c = _get_conn(d, call.conn)
    _put_conn(d, call.conn, c.with_requests(c.requests.delete(call.request_id)))
    if call.caller is not None:
        keys = d.callers[call.caller].delete(key)
        d.callers = d.callers.set(call.caller, keys) if keys else d.callers.delete(call.caller)


def _close(d: _Draft, call: Call, message: JsonObject, out: Out) -> None:
    """Delivers a call's outcome to its owner, once, and ends it (R-DLV-1 .. R-DLV-3)."""
    if call.replied:
        out.append(Push(call.conn, message))
    else:
        out.append(Reply(call.conn, call.request_id, message))
    _end(d, call)


def _deny(d: _Draft, call: Call, decision: str, detail: str, out: Out) -> None:
    _close(d, call, m.authorization_required(call.request_id, call.name, decision, detail), out)  # type: ignore[arg-type]


def _drop(d: _Draft, call: Call, out: Out, *, notify: bool) -> None:
    """Ends a call with no outcome at whatever stage it is (R-DROP-1 .. R-DROP-4)."""
    if call.stage is Stage.PARKED:
        eid = call.elicitation_id
        _unpark(d, call)
        out.append(CancelTimer((ELICITATION_TIMER, eid)))
        if notify:
            out.append(Push(call.conn, m.elicitation_cancelled(eid, "request cancelled")))
    else:
        out.append(KillWorker(call.worker))
        out.append(CancelTimer((WORKER_TIMER, call.worker)))
        _release_worker(d, call)
    if not call.replied:
        out.append(Reply(call.conn, call.request_id, None))
    _end(d, call)


def _in_admission_order(d: _Draft, keys: list[CallKey]) -> list[CallKey]:
    return sorted(keys, key=lambda key: d.calls[key].seq)


# ---------------------------------------------------------------------------------------------
# Requests


def _on_tool_call(d: _Draft, ev: ToolCallReceived, out: Out) -> None:
    if not _admit(d, ev.conn, ev.request_id, out):
        return
    rid: Any = ev.request_id
    tool = d.tools.get(ev.tool)
    opts = d.options
    if tool is None:  # R-ADM-2
        if opts.has_unknown_tool_reply:
            job: Job = UnknownToolReply(ev.tool)
            stage = Stage.UNKNOWN_REPLY
        else:
            out.append(Reply(ev.conn, rid, m.unknown_tool(rid, ev.tool)))
            return
    elif opts.has_authorizer:  # R-AUTH-1
        job, stage = Authorize(ev.tool, ev.arguments), Stage.AUTHORIZING
    elif tool.sensitive:  # R-ADM-3
        payload = m.authorization_required(rid, ev.tool, "deny", m.SENSITIVE_UNGUARDED)
        out.append(Reply(ev.conn, rid, payload))
        return
    else:  # R-ADM-4
        job, stage = RunTool(ev.tool, ev.arguments), Stage.RUNNING
    _open(d, ev.conn, rid, True, ev.tool, ev.arguments, ev.mode, ev.caller, stage, job, ev.now, out)


def _on_read(d: _Draft, ev: ReadRequested, out: Out) -> None:
    if not _admit(d, ev.conn, ev.request_id, out):
        return
    if d.options.has_read_authorizer:  # R-READ-1
        job: Job = AuthorizeRead(ev.method, ev.params)
        stage = Stage.READ_AUTHORIZING
    else:
        job, stage = RunRead(ev.method, ev.params), Stage.READ_RUNNING
    rid: Any = ev.request_id
    _open(d, ev.conn, rid, False, ev.method, ev.params, "reply", ev.caller, stage, job, ev.now, out)


# ---------------------------------------------------------------------------------------------
# Worker outcomes, by stage


def _run_tool(d: _Draft, call: Call, now: int, out: Out) -> None:
    """Starts the tool of an allowed or approved call (R-AUTH-1, R-CLOSE-1, R-TOOL-2)."""
    if call.name not in d.tools:
        _close(d, call, m.unknown_tool(call.request_id, call.name), out)  # type: ignore[arg-type]
        return
    _next_stage(d, call, Stage.RUNNING, RunTool(call.name, call.arguments), now, out)


def _authorized(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    if isinstance(value, Allow):
        _run_tool(d, call, now, out)
    elif isinstance(value, Deny) and isinstance(value.reason, str):
        _deny(d, call, "deny", value.reason, out)  # R-AUTH-2
    elif isinstance(value, Ask) and isinstance(value.prompt, str):
        _ask(d, call, value.prompt, now, out)  # R-AUTH-3
    else:
        _deny(d, call, "deny", m.AUTHORIZER_FAILED, out)  # R-AUTH-4


def _authorizer_failed(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    _deny(d, call, "deny", m.AUTHORIZER_FAILED, out)  # R-AUTH-4


def _tool_finished(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    if isinstance(value, dict):
        _close(d, call, m.result(call.request_id, value), out)  # type: ignore[arg-type]
    else:
        _tool_failed(d, call, value, now, out)


def _tool_failed(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    _close(d, call, m.tool_failure(call.request_id, "callback_failed"), out)  # type: ignore[arg-type]


def _tool_timed_out(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    _close(d, call, m.tool_failure(call.request_id, "callback_timeout"), out)  # type: ignore[arg-type]


def _unknown_replied(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    rid: Any = call.request_id
    if isinstance(value, str):
        _close(d, call, m.unknown_tool_text(rid, value), out)
    else:
        _close(d, call, m.unknown_tool(rid, call.name), out)


def _unknown_failed(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    _close(d, call, m.unknown_tool(call.request_id, call.name), out)  # type: ignore[arg-type]


def _read_authorized(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    rid: Any = call.request_id
    if isinstance(value, Allow):
        _next_stage(d, call, Stage.READ_RUNNING, RunRead(call.name, call.arguments), now, out)
    elif isinstance(value, Deny) and isinstance(value.reason, str):
        _close(d, call, m.read_denied(rid, call.name, value.reason), out)
    elif isinstance(value, Ask):
        _close(d, call, m.read_denied(rid, call.name, m.READ_ASK), out)  # R-READ-2
    else:
        _close(d, call, m.read_denied(rid, call.name, m.AUTHORIZER_FAILED), out)


def _read_authorizer_failed(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    _close(d, call, m.read_denied(call.request_id, call.name, m.AUTHORIZER_FAILED), out)  # type: ignore[arg-type]


def _read_finished(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    if isinstance(value, dict):
        _close(d, call, m.result(call.request_id, value), out)  # type: ignore[arg-type]
    else:
        _read_failed(d, call, value, now, out)


def _read_failed(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    _close(d, call, m.method_failure(call.request_id, call.name, "callback_failed"), out)  # type: ignore[arg-type]


def _read_timed_out(d: _Draft, call: Call, value: object, now: int, out: Out) -> None:
    _close(d, call, m.method_failure(call.request_id, call.name, "callback_timeout"), out)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Parking


def mint_elicitation_id(id_key: bytes, counter: int) -> str:
    """R-ID-1: ``askgate-elicit-`` and 22 URL-safe characters of a keyed BLAKE2b of a counter."""
    digest = hashlib.blake2b(counter.to_bytes(8, "big"), key=id_key[:64], digest_size=16).digest()
    return m.ELICITATION_ID_PREFIX + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _set_parked_count(d: _Draft, conn: ConnId, c: Conn, parked: Fifo[str]) -> Conn:
    """Moves ``conn`` from the bucket of its old parked count to that of its new one (R-PARK-4)."""
    old, new = len(c.parked), len(parked)
    buckets = d.buckets
    if old:
        fifo = buckets[old].remove(c.bucket_pos)
        buckets = buckets.set(old, fifo) if fifo else buckets.delete(old)
    pos = -1
    if new:
        fifo, pos = buckets.get(new, Fifo()).push(conn)
        buckets = buckets.set(new, fifo)
    top = d.top
    top = max(top, new)
    while top and top not in buckets:
        top -= 1
    d.buckets, d.top = buckets, top
    return c.with_parked(parked, pos)


def _unpark(d: _Draft, call: Call) -> None:
    """Frees a parked call's slot; the caller cancels or has lost its timer (R-CLOSE-3)."""
    p = d.parked[call.elicitation_id]
    d.parked = d.parked.delete(call.elicitation_id)
    d.parked_total -= 1
    c = _get_conn(d, call.conn)
    _put_conn(d, call.conn, _set_parked_count(d, call.conn, c, c.parked.remove(p.pos)))


def _ask(d: _Draft, call: Call, prompt: str, now: int, out: Out) -> None:
    """An ASK: park the call, or deny it, or evict another to make room (R-PARK-1 .. 4)."""
    c = _get_conn(d, call.conn)
    if not (c.subscribed and c.can_elicit):  # R-AUTH-3
        _deny(d, call, "ask", prompt, out)
        return
    opts = d.options
    verdict = park_verdict(
        len(c.parked),
        opts.max_parked_elicitations,
        d.parked_total,
        opts.max_parked_elicitations_total,
        d.top,
    )
    if verdict == "deny_connection":  # R-PARK-1
        _deny(d, call, "ask", m.TOO_MANY_PENDING, out)
        return
    if verdict == "deny_server":  # R-PARK-3
        _deny(d, call, "ask", m.TOO_MANY_ON_SERVER, out)
        return
    if verdict == "evict":  # R-PARK-3, R-PARK-4
        victim_conn = d.buckets[d.top].first()
        victim_eid = _get_conn(d, victim_conn).parked.first()
        assert victim_eid is not None
        victim = d.calls[d.parked[victim_eid].key]
        _unpark(d, victim)
        out.append(CancelTimer((ELICITATION_TIMER, victim_eid)))
        out.append(Push(victim.conn, m.elicitation_cancelled(victim_eid, m.TOO_MANY_ON_SERVER)))
        _deny(d, victim, "ask", m.TOO_MANY_ON_SERVER, out)
        c = _get_conn(d, call.conn)
    _park(d, call, c, prompt, now, out)


def _park(d: _Draft, call: Call, c: Conn, prompt: str, now: int, out: Out) -> None:
    eid = mint_elicitation_id(d.id_key, d.next_elicitation)
    d.next_elicitation += 1
    parked, pos = c.parked.push(eid)
    _put_conn(d, call.conn, _set_parked_count(d, call.conn, c, parked))
    deadline = now + d.options.elicitation_timeout_ms
    key = (call.conn, call.request_id)
    d.parked = d.parked.set(eid, Parked(key, pos, deadline))
    d.parked_total += 1
    replied = call.replied or call.mode == "push"
    d.calls = d.calls.set(key, call.moved(Stage.PARKED, -1, eid, replied))
    out.append(StartTimer((ELICITATION_TIMER, eid), deadline))
    out.append(Push(call.conn, m.elicitation_request(eid, call.name, prompt)))
    if replied and not call.replied:  # R-DLV-3: push mode answers the request with nothing
        out.append(Reply(call.conn, call.request_id, None))


def _on_answer(d: _Draft, ev: ElicitationAnswered, out: Out) -> None:
    eid = ev.elicitation_id
    if not isinstance(eid, str):
        return  # R-CLOSE-5
    p = d.parked.get(eid)
    if p is None or p.key[0] != ev.conn:
        return  # R-CLOSE-5: unknown, late and foreign answers look alike
    call = d.calls[p.key]
    _unpark(d, call)
    out.append(CancelTimer((ELICITATION_TIMER, eid)))
    if ev.error is not None:
        _deny(d, call, "ask", m.ELICITATION_FAILED, out)
    elif is_approval(ev.result):
        _run_tool(d, call, ev.now, out)  # R-CLOSE-1
    else:
        _deny(d, call, "ask", refusal_detail(ev.result), out)


def _elicitation_timed_out(d: _Draft, call: Call, now: int, out: Out) -> None:
    eid = call.elicitation_id
    _unpark(d, call)
    out.append(Push(call.conn, m.elicitation_cancelled(eid, m.TIMED_OUT)))
    _deny(d, call, "ask", m.TIMED_OUT, out)  # R-CLOSE-2


# ---------------------------------------------------------------------------------------------
# Drops and timers


def _on_cancel(d: _Draft, ev: CancelRequested, out: Out) -> None:
    if not is_request_id(ev.request_id):
        return
    call = d.calls.get((ev.conn, ev.request_id))
    if call is not None:
        _drop(d, call, out, notify=True)  # R-DROP-1


def _on_caller_exited(d: _Draft, ev: CallerExited, out: Out) -> None:
    keys = d.callers.get(ev.caller)
    if keys is None:
        return
    for key in _in_admission_order(d, list(keys)):
        _drop(d, d.calls[key], out, notify=True)  # R-DROP-2


WorkerHandler = Callable[[_Draft, Call, object, int, Out], None]


@attrs.frozen
class Transition:
    """One row of a transition table: what handles it, the rules it implements, where it leads."""

    handler: Callable[..., None]
    rules: tuple[str, ...]
    leads_to: str


def _worker_event(d: _Draft, ref: int, kind: str, value: object, now: int, out: Out) -> None:
    key = d.workers.get(ref)
    if key is None:
        return  # R-WORK-4: a worker already ended or killed
    call = d.calls[key]
    _release_worker(d, call)
    if kind == "TimerFired":
        out.append(KillWorker(ref))  # R-WORK-2
    else:
        out.append(CancelTimer((WORKER_TIMER, ref)))
    CALL_TRANSITIONS[(kind, call.stage)].handler(d, call, value, now, out)


def _on_worker_finished(d: _Draft, ev: WorkerFinished, out: Out) -> None:
    _worker_event(d, ev.ref, "WorkerFinished", ev.value, ev.now, out)


def _on_worker_failed(d: _Draft, ev: WorkerFailed, out: Out) -> None:
    _worker_event(d, ev.ref, "WorkerFailed", None, ev.now, out)


def _on_timer(d: _Draft, ev: TimerFired, out: Out) -> None:
    key = ev.key
    if not isinstance(key, tuple) or len(key) != 2:
        return
    kind, ident = key
    if kind == WORKER_TIMER and isinstance(ident, int):
        _worker_event(d, ident, "TimerFired", None, ev.now, out)
    elif kind == ELICITATION_TIMER and isinstance(ident, str):
        p = d.parked.get(ident)
        if p is not None:
            _elicitation_timed_out(d, d.calls[p.key], ev.now, out)


_W = Stage
CALL_TRANSITIONS: dict[tuple[str, Stage], Transition] = {
    ("WorkerFinished", _W.AUTHORIZING): Transition(
        _authorized, ("R-AUTH-1", "R-AUTH-2", "R-AUTH-3", "R-AUTH-4"), "RUNNING, PARKED or closed"
    ),
    ("WorkerFailed", _W.AUTHORIZING): Transition(_authorizer_failed, ("R-AUTH-4",), "closed"),
    ("TimerFired", _W.AUTHORIZING): Transition(
        _authorizer_failed, ("R-AUTH-4", "R-WORK-2"), "closed"
    ),
    ("WorkerFinished", _W.RUNNING): Transition(_tool_finished, ("R-WORK-3",), "closed"),
    ("WorkerFailed", _W.RUNNING): Transition(_tool_failed, ("R-WORK-3",), "closed"),
    ("TimerFired", _W.RUNNING): Transition(_tool_timed_out, ("R-WORK-2",), "closed"),
    ("WorkerFinished", _W.UNKNOWN_REPLY): Transition(_unknown_replied, ("R-ADM-2",), "closed"),
    ("WorkerFailed", _W.UNKNOWN_REPLY): Transition(_unknown_failed, ("R-ADM-2",), "closed"),
    ("TimerFired", _W.UNKNOWN_REPLY): Transition(
        _unknown_failed, ("R-ADM-2", "R-WORK-2"), "closed"
    ),
    ("WorkerFinished", _W.READ_AUTHORIZING): Transition(
        _read_authorized, ("R-READ-1", "R-READ-2"), "READ_RUNNING or closed"
    ),
    ("WorkerFailed", _W.READ_AUTHORIZING): Transition(
        _read_authorizer_failed, ("R-READ-2",), "closed"
    ),
    ("TimerFired", _W.READ_AUTHORIZING): Transition(
        _read_authorizer_failed, ("R-READ-2", "R-WORK-2"), "closed"
    ),
    ("WorkerFinished", _W.READ_RUNNING): Transition(_read_finished, ("R-WORK-3",), "closed"),
    ("WorkerFailed", _W.READ_RUNNING): Transition(_read_failed, ("R-WORK-3",), "closed"),
    ("TimerFired", _W.READ_RUNNING): Transition(_read_timed_out, ("R-WORK-2",), "closed"),
}
"""Worker outcomes by the stage of the call that owns the worker."""

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
}
"""What can end a parked call (every row closes or drops it exactly once)."""

EVENT_TRANSITIONS: dict[type[Any], Transition] = {
    ClientInitialized: Transition(
        _on_client_initialized, ("R-CAP-1", "R-CAP-3"), "capabilities entry recorded"
    ),
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
        ("R-ADM-0", "R-ADM-1", "R-ADM-2", "R-ADM-3", "R-ADM-4", "R-ADM-5"),
        "AUTHORIZING, RUNNING, UNKNOWN_REPLY or answered",
    ),
    ReadRequested: Transition(
        _on_read, ("R-ADM-0", "R-ADM-1", "R-ADM-5", "R-READ-1"), "READ_AUTHORIZING or READ_RUNNING"
    ),
    WorkerFinished: Transition(_on_worker_finished, ("R-WORK-3", "R-WORK-4"), "by stage"),
    WorkerFailed: Transition(_on_worker_failed, ("R-WORK-3", "R-WORK-4"), "by stage"),
    ElicitationAnswered: Transition(_on_answer, ("R-CLOSE-1", "R-CLOSE-5"), "by stage"),
    CancelRequested: Transition(_on_cancel, ("R-DROP-1",), "dropped"),
    CallerExited: Transition(_on_caller_exited, ("R-DROP-2",), "dropped"),
    TimerFired: Transition(_on_timer, ("R-WORK-2", "R-CLOSE-2"), "by stage"),
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
    draft = _Draft(state)
    out: Out = []
    handler(draft, event, out)
    return draft.freeze(), out
