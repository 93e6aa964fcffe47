"""Tasks (spec/tasks.md, R-TASK-*): a modern ``tools/call`` that outlives its request.

A task runs as an ordinary call of the reducer, re-keyed onto a connection of its own, the
task's :class:`TaskChannel`. Everything the call would send its request (its answer, an
approval's ``elicitation/create``, a tool's own request, a withdrawal) is taken out of the
step's effects by :func:`absorb` and recorded on the task instead; ``tasks/update`` answers
the task's questions as a client's responses would (``ElicitationAnswered`` on the channel).
So a task's call keeps every rule of a call (authorization, parking caps, eviction, timers,
single use, worker bounds) and the task adds no second way to run a tool.

The reducer reaches this module through thin entries: :func:`refused` and :func:`admitted` on a
modern ``tools/call``, :func:`escalate` when a tool in its inline window asks its client,
:func:`serve` for ``tasks/*``, :func:`on_timer` for this module's timers, and :func:`absorb`
after a step while any task or window is open. Pure, like the reducer: no clock, no I/O.

The 2025-11-25 era (R-TASK-12 .. R-TASK-15) runs on the same machinery: :func:`refused_legacy`
and :func:`created` on a ``tools/call`` of a 2025-11-25 session (the task is made at once, no
window), :func:`serve` with ``legacy`` for its ``tasks/*``, :func:`relayed` for the session's
answers to the questions its task sent it, :func:`unwait` and :func:`connection_gone` for the
``tasks/result`` requests waiting on a task.
"""

from __future__ import annotations

import datetime
from collections.abc import Hashable
from typing import Any, Final

import attrs

from . import messages as m
from . import protocol, sealing
from . import reducer as r
from .effects import CancelTimer, Effect, Push, Reply, StartTimer
from .events import ConnId, ElicitationAnswered, ToolCallReceived
from .record import record
from .revisions import META_SERVER_INFO, complete, invalid_state
from .state import Call, CallKey, Conn, StatelessCall, TaskChannel
from .tools import ToolInfo

JsonObject = dict[str, Any]

EXTENSION: Final = "io.modelcontextprotocol/tasks"
"""The tasks extension's identifier (R-TASK-2)."""
INLINE_TIMER: Final = "task"
"""The timer of an escalating call's inline window, keyed ``((conn, rid), seq)`` (R-TASK-4)."""
TTL_TIMER: Final = "task_ttl"
"""The timer after which a finished task is forgotten, keyed by its id (R-TASK-9)."""
ROUND_TIMER: Final = "task_round"
"""The timer of a task's round nobody answered, keyed ``(id, nonce id)`` (R-TASK-11)."""
TIMERS: Final = frozenset({INLINE_TIMER, TTL_TIMER, ROUND_TIMER})
"""This module's timers, handed to :func:`on_timer`."""
TASK_ID_PREFIX: Final = "askgate-task-"
METHODS: Final = frozenset(
    {"tasks/get", "tasks/update", "tasks/cancel", "tasks/result", "tasks/list"}
)
"""The ``tasks/*`` methods :func:`serve` answers (R-TASK-7)."""
REMOVED: Final = frozenset({"tasks/result", "tasks/list"})
"""The 2025-11-25 methods the 2026-07-28 revision removed (R-TASK-7)."""
SUPPORTS: Final = ("forbidden", "optional", "required")
"""The values of a tool's task support (R-TASK-1)."""
POLL_INTERVAL_MS: Final = 500
"""What a task suggests as the interval between two ``tasks/get`` (R-TASK-4)."""
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
ASKGATE_FAILURES: Final = ("callback_failed", "callback_timeout", "server_stopping")
"""The failures of a call that askgate itself answers (R-WORK-2, R-WORK-3, R-STOP-1): in a task,
they make it ``failed`` (R-TASK-5)."""
CHANNEL_VERSION: Final = "2025-11-25"
"""How the requests a task's call sends look on its channel: form-mode elicitations."""
REVISION: Final = protocol.TASKS_REVISION
"""The one handshake revision that has tasks (R-TASK-12)."""
RELATED: Final = "io.modelcontextprotocol/related-task"
"""The ``_meta`` key naming the task a 2025-11-25 message belongs to (R-TASK-14, R-TASK-15)."""
MAX_WAITS: Final = 8
"""How many ``tasks/result`` may wait on one task at once (R-TASK-14)."""
LIST_PAGE: Final = 50
"""How many tasks one ``tasks/list`` page shows (R-TASK-14)."""


@record
class Task:
    """One task (R-TASK-4 .. R-TASK-11). ``call`` is the key of its call while it runs;
    ``outcome`` its ``result`` or ``error`` once terminal; ``inputs`` the requests its call
    sent and nobody answered yet, by key, in the order sent. ``name``, ``arguments`` and
    ``served`` are its tool, its arguments and how its request is served (R-TASK-11: what a
    round's retry needs); ``round_state`` and ``round_nonce`` the sealed state and the parked
    nonce of the round its tool ended, while the task waits on it. ``origin`` is the session
    of a 2025-11-25 task (``None`` for the 2026-07-28 era's), ``sent`` the keys of its inputs
    sent to that session (R-TASK-15)."""

    task_id: str
    owner: Hashable
    status: str
    created: int
    updated: int
    call: CallKey | None
    outcome: JsonObject | None = None
    inputs: tuple[tuple[str, JsonObject], ...] = ()
    name: str = ""
    arguments: object = None
    served: StatelessCall | None = None
    round_state: str | None = None
    round_nonce: str = ""
    origin: ConnId | None = None
    sent: tuple[str, ...] = ()


Out = list[Effect]


# ---------------------------------------------------------------------------------------------
# The mode of a call (R-TASK-1 .. R-TASK-3)


def support(tool: ToolInfo | None) -> str:
    """R-TASK-1: the task support a tool's definition declares; ``forbidden`` for anything but
    ``optional`` and ``required``."""
    definition = None if tool is None else tool.definition
    execution = definition.get("execution") if isinstance(definition, dict) else None
    value = execution.get("taskSupport") if isinstance(execution, dict) else None
    return value if value in ("optional", "required") else "forbidden"


def declares(capabilities: object) -> bool:
    """R-TASK-2: whether a modern request's ``clientCapabilities`` declare the extension."""
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and isinstance(extensions.get(EXTENSION), dict)


def required_error(request_id: Any) -> JsonObject:
    """R-TASK-3, R-TASK-7: ``-32021`` naming the extension."""
    data: JsonObject = {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}
    return m.error(request_id, -32021, "Missing required client capability", data)


def refused(
    d: r._Draft, conn: ConnId, rid: Any, name: object, capabilities: object, now: int, out: Out
) -> bool:
    """R-TASK-3: a modern call of a ``required`` tool that does not declare the extension is
    answered ``-32021`` before anything is admitted; ``True`` when so."""
    tool = d.tools.get(name) if isinstance(name, str) else None
    if tool is None or support(tool) != "required" or declares(capabilities):
        return False
    out.append(Reply(conn, rid, required_error(rid)))
    out.append(r._record(conn, rid, str(name), "", "error", None, "", None, now, now))
    return True


def admitted(d: r._Draft, key: CallKey, capabilities: object, now: int, out: Out) -> None:
    """R-TASK-4: a modern call just admitted whose mode is *escalate* gets its inline window."""
    call = d.working.get(key)
    if call is None or not call.is_tool or not declares(capabilities):
        return
    if support(d.tools.get(call.name)) == "forbidden":
        return
    d.task_pending = d.task_pending.set(key, call.seq)
    out.append(StartTimer((INLINE_TIMER, (key, call.seq)), now + d.options.task_inline_ms))


# ---------------------------------------------------------------------------------------------
# Escalation (R-TASK-4 .. R-TASK-6)


def on_timer(d: r._Draft, kind: str, ident: object, now: int, out: Out) -> None:
    """This module's timers: an inline window that ended (R-TASK-4), a ttl (R-TASK-9), a round
    nobody answered (R-TASK-11)."""
    if kind == ROUND_TIMER:
        _round_timed_out(d, ident, now, out)
        return
    if kind == TTL_TIMER:
        task = d.tasks.get(ident) if isinstance(ident, str) else None
        if task is not None and task.status in TERMINAL:
            d.tasks = d.tasks.delete(task.task_id)
        return
    if not (isinstance(ident, tuple) and len(ident) == 2):
        return
    key, seq = ident
    if d.task_pending.get(key) != seq:
        return  # answered inline already (its timer was cancelled, or raced its cancel)
    call = d.working.get(key)
    if call is None or call.seq != seq:
        d.task_pending = d.task_pending.delete(key)
        return
    escalate(d, call, now, out)


def escalate(d: r._Draft, call: Call, now: int, out: Out) -> Call:
    """R-TASK-4: the call in its inline window becomes a task, unless a cap forbids it
    (R-TASK-6); the call as it now is (re-keyed onto the task's channel, or unchanged)."""
    key = call.key
    seq = d.task_pending.get(key)
    if seq is None or seq != call.seq:
        return call
    d.task_pending = d.task_pending.delete(key)
    out.append(CancelTimer((INLINE_TIMER, (key, seq))))
    return _become(d, call, now, out, None)


def _become(d: r._Draft, call: Call, now: int, out: Out, origin: ConnId | None) -> Call:
    """R-TASK-4, R-TASK-13: ``call`` becomes a task and its request is answered with it,
    unless a cap forbids it (R-TASK-6); ``origin`` is a 2025-11-25 task's session. The call
    as it now is (re-keyed onto the task's channel, or unchanged)."""
    key = call.key
    opts = d.options
    owner = call.owner
    held = d.owner_tasks.get(owner, 0)
    if held >= opts.max_tasks_per_owner or d.live_tasks >= opts.max_tasks_total:
        return call  # R-TASK-6: stays inline
    st = d.stateless.get(key)
    tid = r.mint_elicitation_id(d.id_key, d.next_elicitation, TASK_ID_PREFIX)
    d.next_elicitation += 1  # R-ID-1: the one counter
    channel = TaskChannel(tid)
    new_key: CallKey = (channel, tid)
    moved = attrs.evolve(
        call, conn=channel, request_id=tid, key=new_key, caller=None, mode="reply", replied=False
    )
    # The call's indexes follow it (as _open and _release_worker keep them).
    d.working = d.working.delete(key).set(new_key, moved)
    d.workers = d.workers.set(call.worker, new_key)
    n = d.in_flight[call.conn] - 1
    flights = d.in_flight.set(call.conn, n) if n else d.in_flight.delete(call.conn)
    d.in_flight = flights.set(channel, 1)
    if key in d.stateless:
        d.stateless = d.stateless.delete(key)
    if key in d.progress:
        d.progress = d.progress.delete(key)
    if call.caller is not None:
        keys = d.callers[call.caller].delete(key)
        callers = d.callers
        d.callers = callers.set(call.caller, keys) if keys else callers.delete(call.caller)
    caps = st.round.capabilities if st is not None and st.round is not None else None
    sampling = isinstance(caps, dict) and isinstance(caps.get("sampling"), dict)
    can_elicit = st is not None and st.can_elicit
    if origin is not None:  # R-TASK-15: a 2025 task asks its session what it could ask
        session = r._get_conn(d, origin)
        sampling, can_elicit = session.can_sample, session.can_elicit
    d.conns = d.conns.set(
        channel,
        Conn(subscribed=True, can_elicit=can_elicit, can_sample=sampling, version=CHANNEL_VERSION),
    )
    if call.conn not in d.in_flight:
        r._freed(d, call.conn)
    task = Task(tid, owner, "working", now, now, new_key, None, (), call.name, call.arguments, st)
    task = attrs.evolve(task, origin=origin)
    d.tasks = d.tasks.set(tid, task)
    d.owner_tasks = d.owner_tasks.set(owner, held + 1)
    d.live_tasks += 1
    if origin is not None:  # R-TASK-13: the 2025-11-25 CreateTaskResult
        answer = m.result(call.request_id, {"task": _legacy_fields(d, task)})
        out.append(Reply(call.conn, call.request_id, answer))
        return moved
    created = {"resultType": "task", **_fields(d, task)}
    created["_meta"] = {META_SERVER_INFO: r._server_info(d)}
    out.append(Reply(call.conn, call.request_id, m.result(call.request_id, created)))
    return moved


# ---------------------------------------------------------------------------------------------
# What a task's call sends (R-TASK-5, R-TASK-10)


def absorb(d: r._Draft, out: Out, now: int) -> Out:
    """The step's effects, but those addressed to a task's channel, which change the task
    instead (R-TASK-5, R-TASK-10); and an inline window closes when its call is answered
    (R-TASK-4)."""
    kept: Out = []
    for effect in out:
        if isinstance(effect, Reply | Push):
            conn = effect.conn
            if isinstance(conn, TaskChannel):
                if isinstance(effect, Reply):
                    _answered(d, conn.task_id, effect.message, now, kept)
                else:
                    _sent(d, conn.task_id, effect.message, kept)
                continue
            if isinstance(effect, Reply) and d.task_pending:
                key = (conn, effect.request_id)
                seq = d.task_pending.get(key)
                # The call's answer, or its drop (R-DROP-4): the call is gone. A refusal of a
                # request reusing its id (R-ADM-1) answers that request and leaves it open.
                if seq is not None and _ended(d.working.get(key), seq):
                    d.task_pending = d.task_pending.delete(key)
                    kept.append(CancelTimer((INLINE_TIMER, (key, seq))))
        kept.append(effect)
    return kept


def _ended(call: Call | None, seq: int) -> bool:
    """Whether the call ``seq`` in its inline window has ended (no longer working)."""
    return call is None or call.seq != seq


def _answered(d: r._Draft, tid: str, message: JsonObject | None, now: int, kept: Out) -> None:
    """R-TASK-5: the task's call answered: the task is terminal with that outcome."""
    task = d.tasks.get(tid)
    if message is None or task is None or task.status in TERMINAL:
        return  # a drop answers nothing (R-TASK-8 has made the task cancelled already)
    result = message.get("result")
    error = message.get("error")
    if _round_ended(d, task, result, now, kept):  # R-TASK-11
        return
    if task.origin is not None:  # R-TASK-13: the revision's outcome, kept as answered
        _finish(d, task, *_legacy_outcome(result, error), now, kept)
        return
    failure = _askgate_failure(result)
    if failure is not None:
        status, outcome = "failed", {"error": failure}
    elif isinstance(result, dict):
        status, outcome = "completed", {"result": result}
    else:
        status, outcome = "failed", {"error": error if isinstance(error, dict) else {}}
    _finish(d, task, status, outcome, now, kept)


def _askgate_failure(result: object) -> JsonObject | None:
    """The JSON-RPC error for askgate's own failure of a call (R-TASK-5), or ``None``."""
    if not isinstance(result, dict) or result.get("isError") is not True:
        return None
    data = result.get("structuredContent")
    if not isinstance(data, dict) or data.get("error") not in ASKGATE_FAILURES:
        return None
    if result != m.tool_error_result(data):
        return None
    return {"code": m.INTERNAL_ERROR, "message": "the tool's call failed", "data": data}


def _finish(
    d: r._Draft, task: Task, status: str, outcome: JsonObject | None, now: int, out: Out
) -> None:
    """The task becomes terminal: its place freed (R-TASK-6), its channel forgotten, its ttl
    armed (R-TASK-9)."""
    updated = max(now, task.updated)
    ended = attrs.evolve(
        task,
        status=status,
        updated=updated,
        call=None,
        outcome=outcome,
        inputs=(),
        round_state=None,
        round_nonce="",
        sent=(),
    )
    d.tasks = d.tasks.set(task.task_id, ended)
    n = d.owner_tasks[task.owner] - 1
    owners = d.owner_tasks
    d.owner_tasks = owners.set(task.owner, n) if n else owners.delete(task.owner)
    d.live_tasks -= 1
    channel = TaskChannel(task.task_id)
    if channel in d.conns:
        d.conns = d.conns.delete(channel)
    out.append(StartTimer((TTL_TIMER, task.task_id), ended.updated + d.options.task_ttl_ms))
    if d.task_waits:
        _release_waits(d, ended, out)  # R-TASK-14


def _sent(d: r._Draft, tid: str, message: JsonObject, out: Out) -> None:
    """R-TASK-10: a request the task's call sent becomes one of its inputs; a withdrawal
    removes one; anything else (progress, logs) has nowhere to go. A 2025-11-25 task's
    session is sent the request, and the withdrawal of one it was sent (R-TASK-15)."""
    task = d.tasks.get(tid)
    if task is None or task.status in TERMINAL:
        return
    method = message.get("method")
    if "id" in message and isinstance(message.get("id"), str) and isinstance(method, str):
        request = {"method": method, "params": message.get("params", {})}
        inputs = (*task.inputs, (message["id"], request))
        d.tasks = d.tasks.set(tid, attrs.evolve(task, status="input_required", inputs=inputs))
        if task.origin is not None:
            _deliver(d, d.tasks[tid], None, out)
    elif method == "notifications/cancelled":
        params = message.get("params")
        gone = params.get("requestId") if isinstance(params, dict) else None
        _answered_input(d, task, gone)
        if task.origin is not None and gone in task.sent:
            out.append(Push(task.origin, _related(message, tid)))


def _answered_input(d: r._Draft, task: Task, key: object) -> Task:
    """``key`` no longer waits: the task is ``working`` again once nothing does (R-TASK-10)."""
    inputs = tuple(entry for entry in task.inputs if entry[0] != key)
    status = "input_required" if inputs else "working"
    sent = tuple(sent for sent in task.sent if sent != key)
    changed = attrs.evolve(task, status=status, inputs=inputs, sent=sent)
    d.tasks = d.tasks.set(task.task_id, changed)
    return changed


# ---------------------------------------------------------------------------------------------
# tasks/* (R-TASK-7 .. R-TASK-10)


def iso(d: r._Draft, now: int) -> str:
    """The wall-clock time of the shell's monotonic ``now``, ISO 8601 in UTC (R-TASK-4)."""
    moment = datetime.datetime.fromtimestamp((d.epoch_ms + now) / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _fields(d: r._Draft, task: Task) -> JsonObject:
    """What every rendering of a task carries (R-TASK-4, R-TASK-7)."""
    return {
        "taskId": task.task_id,
        "status": task.status,
        "createdAt": iso(d, task.created),
        "lastUpdatedAt": iso(d, task.updated),
        "ttlMs": d.options.task_ttl_ms,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }


def serve(
    d: r._Draft,
    conn: ConnId,
    rid: Any,
    method: str,
    params: JsonObject | None,
    capabilities: object,
    owner: Hashable,
    now: int,
    out: Out,
    legacy: bool = False,
) -> None:
    """A modern ``tasks/*`` request of ``owner`` (R-TASK-7 .. R-TASK-10), answered at once;
    with ``legacy``, one of a 2025-11-25 session (R-TASK-14), a ``tasks/result`` of a live task
    answered once it ends."""
    info = r._server_info(d)
    if legacy:
        if method == "tasks/list":
            _list(d, conn, rid, params, owner, out)
            return
        if method == "tasks/update":  # not a method of the revision
            unknown = f"Unknown method: {method}"
            out.append(Reply(conn, rid, m.error(rid, m.METHOD_NOT_FOUND, unknown)))
            return
    elif method in REMOVED:
        unknown = f"Unknown method: {method}"
        out.append(Reply(conn, rid, m.error(rid, m.METHOD_NOT_FOUND, unknown)))
        return
    if not legacy and not declares(capabilities):
        out.append(Reply(conn, rid, required_error(rid)))
        return
    tid = None if params is None else params.get("taskId")
    task = d.tasks.get(tid) if isinstance(tid, str) else None
    if task is not None and (task.origin is None) == legacy:
        task = None  # R-TASK-14: a task is served in the era it was made in only
    if task is None or task.owner != owner:  # R-TASK-7: foreign and unknown alike
        out.append(Reply(conn, rid, m.error(rid, m.INVALID_PARAMS, "Unknown task")))
        return
    if legacy:
        _serve_legacy(d, conn, rid, method, task, now, out)
        return
    if method == "tasks/get":
        shown = _fields(d, task)
        if task.outcome is not None:
            shown.update(task.outcome)
        if task.status == "input_required":
            shown["inputRequests"] = dict(task.inputs)
        out.append(Reply(conn, rid, complete(m.result(rid, shown), info, False)))
        return
    if method == "tasks/cancel":
        cancel(d, task, now, out)
    else:  # tasks/update
        responses = None if params is None else params.get("inputResponses")
        if isinstance(responses, dict):
            update(d, task, responses, now, out)
    out.append(Reply(conn, rid, complete(m.result(rid, {}), info, False)))


def cancel(d: r._Draft, task: Task, now: int, out: Out) -> None:
    """R-TASK-8: a live task's call is dropped (its worker killed, its approval withdrawn and
    freed), or the nonce of the round it waits on taken (R-TASK-11), and the task is
    cancelled; a terminal one is left as it is."""
    if task.status in TERMINAL:
        return
    call = None if task.call is None else d.working.get(task.call) or d.waiting.get(task.call)
    sub: Out = []
    if call is not None:
        r._drop(d, call, now, sub, notify=True, why=r.CANCELLED_BY_CLIENT)
    if task.round_nonce:
        _round_taken(d, task, now, sub)
    current = d.tasks[task.task_id]
    kept = absorb(d, sub, now)  # what the drop sent its channel changes nothing now
    _finish(d, current, "cancelled", None, now, kept)
    out.extend(kept)


def update(d: r._Draft, task: Task, responses: JsonObject, now: int, out: Out) -> None:
    """R-TASK-10: each response to one of the live task's inputs is handed to its call as the
    client's answer to that request; unknown keys are ignored."""
    if task.round_state is not None:
        _round_retry(d, task, responses, now, out)  # R-TASK-11
        return
    channel = TaskChannel(task.task_id)
    for key, response in responses.items():
        current = d.tasks.get(task.task_id)
        if current is None or current.status in TERMINAL:
            return
        if not any(entry[0] == key for entry in current.inputs):
            continue
        _answered_input(d, current, key)
        result = response if isinstance(response, dict) else None
        error = None if result is not None else {"code": m.INVALID_PARAMS, "message": "no answer"}
        sub: Out = []
        r._on_answer(d, ElicitationAnswered(channel, key, result, now, error), sub)
        out.extend(absorb(d, sub, now))


# ---------------------------------------------------------------------------------------------
# A task's tool's own rounds (R-TASK-11)


def served(d: r._Draft, call: Call) -> StatelessCall | None:
    """R-TASK-11: how a task's call is served (its request's principal, owner and round), or
    ``None`` for a call that is not a task's."""
    conn = call.conn
    if not isinstance(conn, TaskChannel):
        return None
    task = d.tasks.get(conn.task_id)
    return None if task is None else task.served


def _round_ended(d: r._Draft, task: Task, result: object, now: int, kept: Out) -> bool:
    """R-TASK-11: the task's call ended a round (the reducer's R-MRTR-20 answer): the task waits
    on it, ``input_required`` with the round's requests, its state kept and its timer armed.
    ``False`` when the answer is not a round this server sealed for the task's call."""
    if not isinstance(result, dict) or result.get("resultType") != "input_required":
        return False
    token = result.get("requestState")
    requests = result.get("inputRequests")
    st = task.served
    if not isinstance(token, str) or not isinstance(requests, dict) or st is None:
        return False
    assert d.keyring is not None
    name, digest = r._round_binding("tools/call", task.name, task.arguments)
    opened = sealing.open_round(d.keyring, token, st.principal, name, digest, now)
    if opened.verdict != "valid":
        return False
    nid = r.nonce_id(opened.nonce)
    waiting = attrs.evolve(
        task,
        status="input_required",
        updated=max(now, task.updated),
        call=None,
        inputs=tuple(requests.items()),
        round_state=token,
        round_nonce=nid,
    )
    d.tasks = d.tasks.set(task.task_id, waiting)
    deadline = now + d.options.elicitation_timeout_ms
    kept.append(StartTimer((ROUND_TIMER, (task.task_id, nid)), deadline))
    return True


def _round_retry(d: r._Draft, task: Task, responses: JsonObject, now: int, out: Out) -> None:
    """R-TASK-11: a ``tasks/update`` answering the round the task waits on is that round's
    retry (R-MRTR-23) on the task's channel: its nonce taken once, the tool run again."""
    tid, st, token = task.task_id, task.served, task.round_state
    if st is None:
        return
    channel = TaskChannel(tid)
    out.append(CancelTimer((ROUND_TIMER, (tid, task.round_nonce))))
    key: CallKey = (channel, tid)
    running = attrs.evolve(
        task,
        status="working",
        updated=max(now, task.updated),
        call=key,
        inputs=(),
        round_state=None,
        round_nonce="",
    )
    d.tasks = d.tasks.set(tid, running)
    retry = ToolCallReceived(
        channel,
        tid,
        task.name,
        task.arguments,
        now,
        request_state=token,
        input_responses=responses,
    )
    sub: Out = []
    st = r._round_retry(d, channel, tid, retry, st, sub)
    d.tasks = d.tasks.set(tid, attrs.evolve(d.tasks[tid], served=st))
    out.extend(absorb(d, sub, now))


def _round_taken(d: r._Draft, task: Task, now: int, out: Out) -> str | None:
    """The nonce of the round ``task`` waits on, taken so that its place is freed; as
    ``reducer._take`` answers."""
    out.append(CancelTimer((ROUND_TIMER, (task.task_id, task.round_nonce))))
    return r._take(d, task.round_nonce, task.owner, now, out)


def _round_timed_out(d: r._Draft, ident: object, now: int, out: Out) -> None:
    """R-TASK-11: a round nobody answered in time fails its task as a late retry would be
    refused (``-32602``, the state expired); its place is freed."""
    if not (isinstance(ident, tuple) and len(ident) == 2):
        return
    tid, nid = ident
    task = d.tasks.get(tid) if isinstance(tid, str) else None
    if task is None or task.status in TERMINAL or task.round_nonce != nid or not nid:
        return  # answered or cancelled already (its timer was cancelled, or raced its cancel)
    _round_taken(d, task, now, out)
    error = invalid_state(tid, sealing.DENY_DETAIL["expired"])["error"]
    _finish(d, task, "failed", {"error": error}, now, out)


# ---------------------------------------------------------------------------------------------
# The 2025-11-25 era (R-TASK-12 .. R-TASK-15)


def declares_legacy(capabilities: object) -> bool:
    """R-TASK-12: whether a 2025-11-25 ``initialize``'s capabilities declare ``tasks``."""
    return isinstance(capabilities, dict) and isinstance(capabilities.get("tasks"), dict)


def _asks_a_task(d: r._Draft, conn: ConnId, task: object) -> bool:
    """R-TASK-12: a ``task`` param that counts: an object, from a client that declared tasks."""
    return isinstance(task, dict) and r._get_conn(d, conn).can_task


def refused_legacy(
    d: r._Draft, conn: ConnId, rid: Any, name: object, task: object, now: int, out: Out
) -> bool:
    """R-TASK-12: a 2025-11-25 ``tools/call`` of a ``required`` tool without a task, or of a
    ``forbidden`` tool with one, is answered ``-32601`` before anything is admitted; ``True``
    when so."""
    tool = d.tools.get(name) if isinstance(name, str) else None
    if tool is None:
        return False
    definition = tool.definition
    if task is None and not (isinstance(definition, dict) and "execution" in definition):
        return False  # the common call: no task asked, and no support declared (R-TASK-1)
    wanted = support(tool)
    asked = _asks_a_task(d, conn, task)
    if wanted == "required" and not asked:
        problem = f"Tool {name} requires task-augmented execution"
    elif wanted == "forbidden" and asked:
        problem = f"Tool {name} does not support task-augmented execution"
    else:
        return False
    out.append(Reply(conn, rid, m.error(rid, m.METHOD_NOT_FOUND, problem)))
    out.append(r._record(conn, rid, str(name), "", "error", None, "", None, now, now))
    return True


def created(d: r._Draft, key: CallKey, task: object, now: int, out: Out) -> None:
    """R-TASK-13: a 2025-11-25 call just admitted that asked for a task becomes one at once."""
    call = d.working.get(key)
    if call is None or not call.is_tool or not _asks_a_task(d, key[0], task):
        return
    if support(d.tools.get(call.name)) != "forbidden":
        _become(d, call, now, out, key[0])


def _legacy_fields(d: r._Draft, task: Task) -> JsonObject:
    """R-TASK-13, R-TASK-14: a task as the 2025-11-25 revision shows it."""
    return {
        "taskId": task.task_id,
        "status": task.status,
        "createdAt": iso(d, task.created),
        "lastUpdatedAt": iso(d, task.updated),
        "ttl": d.options.task_ttl_ms,
        "pollInterval": POLL_INTERVAL_MS,
    }


def _legacy_outcome(result: object, error: object) -> tuple[str, JsonObject]:
    """R-TASK-13: a 2025-11-25 task's status and outcome from its call's answer: ``failed``
    for a JSON-RPC error or an ``isError`` result (the revision's rule), else ``completed``;
    the outcome is the answer itself."""
    if isinstance(result, dict):
        status = "failed" if result.get("isError") is True else "completed"
        return status, {"result": result}
    return "failed", {"error": error if isinstance(error, dict) else {}}


def _payload(task: Task, rid: Any) -> JsonObject:
    """R-TASK-14: what ``tasks/result`` answers for a terminal task: what its request would
    have been answered, a result carrying the related-task ``_meta``."""
    outcome = task.outcome
    result = None if outcome is None else outcome.get("result")
    if isinstance(result, dict):
        meta = result.get("_meta")
        related = {**(meta if isinstance(meta, dict) else {}), RELATED: {"taskId": task.task_id}}
        return m.result(rid, {**result, "_meta": related})
    error = None if outcome is None else outcome.get("error")
    if not isinstance(error, dict):  # cancelled: its request is answered nothing
        return m.error(rid, m.INTERNAL_ERROR, "Task cancelled")
    return {"jsonrpc": "2.0", "id": rid, "error": error}


def _serve_legacy(
    d: r._Draft, conn: ConnId, rid: Any, method: str, task: Task, now: int, out: Out
) -> None:
    """R-TASK-14: ``tasks/get``, ``tasks/cancel`` and ``tasks/result`` of the owner's task."""
    if method == "tasks/get":
        out.append(Reply(conn, rid, m.result(rid, _legacy_fields(d, task))))
    elif method == "tasks/cancel":
        if task.status in TERMINAL:
            problem = f"Task {task.task_id} is already {task.status}"
            out.append(Reply(conn, rid, m.error(rid, m.INVALID_PARAMS, problem)))
            return
        cancel(d, task, now, out)
        shown = _legacy_fields(d, d.tasks[task.task_id])
        out.append(Reply(conn, rid, m.result(rid, shown)))
    elif task.status in TERMINAL:  # tasks/result
        out.append(Reply(conn, rid, _payload(task, rid)))
    elif sum(1 for tid in d.task_waits.values() if tid == task.task_id) >= MAX_WAITS:
        problem = f"Too many requests wait on task {task.task_id}"
        out.append(Reply(conn, rid, m.error(rid, m.INTERNAL_ERROR, problem)))
    else:
        d.task_waits = d.task_waits.set((conn, rid), task.task_id)
        if conn == task.origin:
            _deliver(d, task, rid, out)  # R-TASK-15: its questions go on this request's stream


def _list(
    d: r._Draft, conn: ConnId, rid: Any, params: JsonObject | None, owner: Hashable, out: Out
) -> None:
    """R-TASK-14: the owner's 2025-11-25 tasks, oldest first, a page at a time."""
    mine = (
        (f"{task.created:020d} {task.task_id}", _legacy_fields(d, task))
        for task in d.tasks.values()
        if task.owner == owner and task.origin is not None
    )
    out.append(Reply(conn, rid, protocol.page(rid, params, "tasks", mine, LIST_PAGE)))


def _release_waits(d: r._Draft, task: Task, out: Out) -> None:
    """R-TASK-14: the ``tasks/result`` requests waiting on ``task``, now terminal, answered."""
    for key, tid in list(d.task_waits.items()):
        if tid == task.task_id:
            d.task_waits = d.task_waits.delete(key)
            out.append(Reply(key[0], key[1], _payload(task, key[1])))


def unwait(d: r._Draft, key: CallKey, out: Out) -> None:
    """R-TASK-14: a waiting ``tasks/result`` the client cancelled ends, answered nothing."""
    d.task_waits = d.task_waits.delete(key)
    out.append(Reply(key[0], key[1], None))


def connection_gone(d: r._Draft, conn: ConnId) -> None:
    """R-TASK-14: the waiting ``tasks/result`` requests of a connection that went away end."""
    for key in [key for key in d.task_waits if key[0] == conn]:
        d.task_waits = d.task_waits.delete(key)


def _related(message: JsonObject, tid: str) -> JsonObject:
    """R-TASK-15: ``message`` with the related-task ``_meta`` naming ``tid``."""
    params = message.get("params")
    shown = dict(params) if isinstance(params, dict) else {}
    meta = shown.get("_meta")
    shown["_meta"] = {**(meta if isinstance(meta, dict) else {}), RELATED: {"taskId": tid}}
    return {**message, "params": shown}


def _deliver(d: r._Draft, task: Task, rid: Any, out: Out) -> None:
    """R-TASK-15: the task's questions not yet sent go to its session, on the stream of a
    ``tasks/result`` of the task waiting there (``rid``, else any); none waiting, they wait."""
    origin = task.origin
    if origin is None:
        return
    if rid is None:
        rid = next(
            (
                key[1]
                for key, tid in d.task_waits.items()
                if tid == task.task_id and key[0] == origin
            ),
            None,
        )
        if rid is None:
            return
    fresh = [(key, request) for key, request in task.inputs if key not in task.sent]
    if not fresh:
        return
    for key, request in fresh:
        message = {"jsonrpc": "2.0", "id": key, **request}
        out.append(Push(origin, _related(message, task.task_id), rid))
    sent = (*task.sent, *(key for key, _ in fresh))
    d.tasks = d.tasks.set(task.task_id, attrs.evolve(task, sent=sent))


def relayed(d: r._Draft, ev: ElicitationAnswered, key: CallKey, out: Out) -> None:
    """R-TASK-15: an answer, on a 2025-11-25 task's session, to a question the task sent it:
    handed to the task's call as its client's answer (R-CLOSE-*, R-CTX-5). Any other foreign
    answer is ignored, as the reducer ignores it."""
    channel = key[0]
    if not isinstance(channel, TaskChannel):
        return
    task = d.tasks.get(channel.task_id)
    eid = ev.elicitation_id
    if task is None or task.origin != ev.conn or eid not in task.sent:
        return
    _answered_input(d, task, eid)
    r._on_answer(d, attrs.evolve(ev, conn=channel), out)
