"""Exhaustive bounded exploration of the real reducer.

Breadth-first over every event sequence from a finite alphabet, up to a depth, deduplicating
states up to renaming (worker refs, elicitation ids and counters are names, not meaning). In
every state reached it checks ``check_invariants``; on every transition it checks that each
request that ends gets exactly one ending (one ``Reply``, or in push mode one outcome ``Push``
after the empty reply), an empty one exactly when it was dropped, that calls still open got no
outcome, that a reused id is refused without touching its call, that outcomes, prompts and
withdrawals go only to their owners (R-INV-8, R-INV-9), that no unregistered tool is started,
and that the shell's timers and workers stay equal to the state's.

Seven configurations: ``tight`` and ``shared`` fill the parking caps; ``edges`` adds reads
through a read authorizer, capability eviction, tools unregistered and registered again,
malformed and reused ids, stale worker events and every refusing answer; ``open`` runs with no
authorizer and a sensitive tool registered late; ``modern`` adds the 2026-07-28 flow and the
stop (:func:`modern_alphabet`, checked by :func:`check_modern`), with 2025 calls from one
connection only so that its depth goes to modern calls and retries; ``tasks`` adds tasks
(spec/tasks.md: :func:`task_alphabet`, checked by :func:`check_tasks`): task-declaring calls of
three owners, their inline windows ending, ``tasks/get``, ``tasks/cancel`` and ``tasks/update``
from the owner and another principal, and the ttl.

    python -m askgate.models.explore [--depth N] [--max-states N]

The alphabet (:func:`alphabet`) names calls by ``(connection, request id)`` rather than by
worker ref or elicitation id, so two states equal up to renaming have the same futures and one
of them is enough. A running tool asks its client (``ToolRequested``, R-CTX-4) and each of its
outstanding requests can be answered by its owner or a stranger, or time out (R-CTX-5,
R-CTX-6); on every transition every ``Resolve`` goes to a tool that waits, once, and a tool's
request is either sent or refused.
"""

from __future__ import annotations

import argparse
import base64
import sys
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import Any

import attrs

from askgate.core import (
    Allow,
    Ask,
    CallerExited,
    CancelRequested,
    CancelTimer,
    ClientInitialized,
    ClientReady,
    Deny,
    Effect,
    ElicitationAnswered,
    Emit,
    Event,
    KillWorker,
    MessageReceived,
    Options,
    PingReceived,
    Push,
    ReadRequested,
    Reply,
    Resolve,
    RunTool,
    ServerStopping,
    Stage,
    StartTimer,
    StartWorker,
    State,
    SubscriberAttached,
    SubscriberDetached,
    TimerFired,
    ToolCallReceived,
    ToolInfo,
    ToolRegistered,
    ToolRequested,
    ToolUnregistered,
    WorkerFailed,
    WorkerFinished,
    check_invariants,
    door,
    initial_state,
    live_timers,
    sealing,
    step,
)
from askgate.core.decide import is_approval, is_request_id, refusal_detail
from askgate.core.messages import ALREADY_USED
from askgate.core.reducer import PRINCIPAL_OWNER, nonce_id
from askgate.core.revisions import INPUT_KEY, META_CAPABILITIES, META_VERSION
from askgate.core.state import Call, TaskChannel
from askgate.core.tasks import (
    ASKGATE_FAILURES,
    EXTENSION,
    INLINE_TIMER,
    TERMINAL,
    TTL_TIMER,
)
from askgate.models import figures

CONNS = ("a", "b", "c")
REQUEST_IDS = (1, 2)
TOOLS = (ToolInfo("echo", sensitive=False, derived=False),)
APPROVE = {"action": "accept", "content": {"approve": True}}
DECLINE = {"action": "decline"}
FORM = {"message": "Name?", "requestedSchema": {"type": "object", "properties": {}}}
ANSWER = {"action": "accept", "content": {}}
TOKEN = "tool"  # the shell's name for a waiting tool: one per worker is enough here
READ_ID = 5
INIT_ID = "init"  # the request id of every initialize the alphabet sends
HOSTILE: tuple[bytes, ...] = (
    b"not json",
    b"[]",
    b'[{"jsonrpc":"2.0","id":9,"method":"ping"}]',
    b'{"jsonrpc":"2.0","id":9,"method":"ping","id":8}',
    b'{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"echo"}}',
    b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":5}}',
    b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":[]}}',
    b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":[1]}',
    b'{"jsonrpc":"2.0","id":9,"method":"server/discover"}',
    b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo"}}',
    b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":[1]}}',
    b'{"jsonrpc":"2.0","id":"askgate-elicit-forged","result":{"action":"accept"}}',
    b'{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1}}',
    b'{"jsonrpc":"1.0","id":1,"method":"ping"}',
    b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"requestId":1}}',
    b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"id":1}}',
)
"""Malformed and hostile client messages the edges configuration sends on every path: bad JSON,
batches, duplicate keys, bad ids and params, a notification that should be a request, an
unknown method, forged and malformed answers, a wrong ``jsonrpc``, notifications that name an
open call's id but cancel nothing. Each must change nothing and get at most an error reply."""
REFUSALS: tuple[object, ...] = (
    {"action": "cancel"},
    {"action": "accept", "content": {"approve": False}},
    {"action": "accept", "content": {"approve": "true"}},
)

# Every path starts with the three connections live and initialized (a later detach, attach
# and re-initialize of "c" makes it one that cannot be asked):
# the depth is then spent on what happens to calls, and the alphabet can still detach,
# re-attach and re-initialize them.
PRELUDE: tuple[Event, ...] = tuple(
    event
    for conn in CONNS
    for event in (
        SubscriberAttached(conn),
        ClientInitialized(conn, {"elicitation": {}}),
    )
)

TIGHT = Options(
    has_authorizer=True,
    max_parked_elicitations=1,
    max_parked_elicitations_total=2,
    max_in_flight=2,
    max_in_flight_per_connection=1,
    max_client_capabilities=3,
    max_client_requests_per_call=1,
)
"""One parked call per connection, two in all: the per-connection cap and eviction; one
outstanding request per running tool (R-CTX-4)."""

SHARED = Options(
    has_authorizer=True,
    max_parked_elicitations=2,
    max_parked_elicitations_total=3,
    max_in_flight=2,
    max_in_flight_per_connection=1,
    max_client_capabilities=3,
    max_client_requests_per_call=1,
)
"""Two per connection, three in all: eviction of a top holder and the deny to an equal one."""

EDGES = attrs.evolve(TIGHT, has_read_authorizer=True, max_client_capabilities=2)
"""The edges: reads through the read authorizer (R-READ-*), two capability entries for three
connections (the prelude already evicts one, R-CAP-3), the tool unregistered and registered
again (R-TOOL-2), malformed and reused request ids (R-ADM-0, R-ADM-1), stale worker events
(R-WORK-4), and every kind of refusing answer (R-CLOSE-2)."""

OPEN = Options(max_in_flight=2, max_in_flight_per_connection=1, max_client_requests_per_call=1)
"""No authorizer: tools run at once, and a sensitive tool registered late is denied (R-ADM-3)."""

MODERN = SHARED
"""The 2026-07-28 flow (spec/modern.md) beside the 2025 one: two parked entries per owner,
three in all, shared by 2025 parked calls and modern nonces, so that either era evicts the
other's oldest entry (R-MRTR-12, R-PARK-3); ``ServerStopping`` in every state (R-STOP-1)."""

PRINCIPALS = SHARED
"""Parking owners (R-PARK-1): "b" and "c" are two sessions of the principal "alice", one owner
with one cap; "a" has no principal and is its own owner. Every connection can be asked, and
every new call is asked at once (:class:`Asked`), so that within a few steps alice's two sessions
fill her cap between them, and "a" evicts her oldest call on whichever session it is."""

CONFIGS = {
    "tight": TIGHT,
    "shared": SHARED,
    "edges": EDGES,
    "open": OPEN,
    "modern": MODERN,
    "principals": PRINCIPALS,
}
TASKS = attrs.evolve(SHARED, max_tasks_per_owner=1, max_tasks_total=2, task_inline_ms=50)
"""Tasks (spec/tasks.md) beside 2025 calls on one connection: one live task per owner, two in
all, so that an owner's second task and a third owner's first stay inline (R-TASK-6)."""
CONFIGS["tasks"] = TASKS
MODERN_CONFIGS = frozenset({"modern"})
"""The configurations whose alphabet adds the modern flow and ``ServerStopping``
(:func:`modern_alphabet`)."""
TASK_CONFIGS = frozenset({"tasks"})
"""The configurations whose alphabet adds tasks (:func:`task_alphabet`)."""
PRINCIPAL_CONFIGS = frozenset({"principals"})
"""The configurations whose connections attach with :data:`PRINCIPAL_OF`'s principals."""
PRINCIPAL_OF: dict[str, str] = {"b": "alice", "c": "alice"}
SHARED_OWNER = "parked: one owner, two connections"
"""The outcome name of a state where one owner holds parked calls of two connections."""

# The modern flow (spec/modern.md). Modern requests come from connections that never
# initialize (R-MRTR-9): "m" authenticates no one (its approvals park under the connection),
# "n" authenticates "alice" (hers park under the principal); "bob" is a foreign principal.
MODERN_VERSION = "2026-07-28"
MODERN_META = {META_VERSION: MODERN_VERSION, META_CAPABILITIES: {"elicitation": {}}}
MODERN_CALLERS: tuple[tuple[str, str | None], ...] = (("m", None), ("n", "alice"))
MODERN_CONNS = tuple(conn for conn, _ in MODERN_CALLERS)
MODERN_ID = 7  # the request id of a modern call that asks
RETRY_ID = 8  # the request id of every retry (a retry carries a new id)
ARGS = {"x": 1}
APPROVED = {INPUT_KEY: {"action": "accept", "content": {"approve": True}}}
DECLINED = {INPUT_KEY: {"action": "decline"}}
RETRY_KINDS: tuple[str, ...] = (
    "as asked",
    "declined",
    "foreign principal",
    "other connection",
    "changed arguments",
    "tampered",
    "expired",
)
"""How a retry differs from the call that was asked (R-MRTR-13): a retry of a state whose nonce
was closed already is a replay, of one evicted an evicted state."""


# Tasks (spec/tasks.md). Task-declaring modern calls of "job" (task support optional) come from
# connections that never initialize: "m" authenticates no one (its tasks are the connection's),
# "n" authenticates "alice", "o" authenticates "bob". Each owner's tasks are asked after by a
# foreign principal too (R-TASK-7).
TASK_META = {
    META_VERSION: MODERN_VERSION,
    META_CAPABILITIES: {"elicitation": {}, "extensions": {EXTENSION: {}}},
}
JOB = ToolInfo(
    "job",
    sensitive=False,
    derived=False,
    definition={
        "name": "job",
        "inputSchema": {"type": "object"},
        "execution": {"taskSupport": "optional"},
    },
)
TASK_CALLS: tuple[tuple[str, int, str | None, bool], ...] = (
    ("n", 9, "alice", False),  # its window runs: answered inline, or a task when it ends
    ("m", 9, None, True),  # escalated at once (the call and its window's end as one step)
    ("n", 10, "alice", True),
    ("o", 9, "bob", True),
)
"""The task calls of the alphabet: connection, request id, principal, whether its inline window
ends at once (:class:`Escalated`), so that the caps (R-TASK-6) are reached within a few steps."""
TASK_PRINCIPALS = {"m": None, "n": "alice", "o": "bob"}
FOREIGN_OF: dict[Hashable, tuple[str, str | None]] = {
    "m": ("n", "alice"),
    (PRINCIPAL_OWNER, "alice"): ("o", "bob"),
    (PRINCIPAL_OWNER, "bob"): ("m", None),
}
"""Who asks after an owner's task without owning it (R-TASK-7): a connection and principal."""
TASKS_ID = 11  # the request id of every tasks/* request (answered at once)
UNKNOWN_TASK = "askgate-task-unknown"


@attrs.frozen
class Escalated:
    """A task call whose inline window ends at once: the call, then its window's
    ``TimerFired``, taken as one step (each checked)."""

    call: ToolCallReceived


@attrs.frozen
class Issued:
    """A ``requestState`` the reducer answered a modern ASK with, as its client keeps it: the
    token, who asked (connection and principal), the parked nonce's id and the token's expiry."""

    token: str
    conn: str
    principal: str | None
    nid: str
    expiry: int


def owner_of(conn: Hashable, principal: str | None, per_request: bool = False) -> Hashable:
    """Whose parking place a modern request's approval takes (R-MRTR-12, R-PARK-5, R-PARK-7)."""
    if principal:
        return (PRINCIPAL_OWNER, principal)
    return ("anonymous",) if per_request else conn


def principal_of(state: State, conn: Hashable, given: str | None) -> str | None:
    """R-SUB-3, recomputed: the connection's principal, else the one the event carries."""
    c = state.conns.get(conn)
    recorded = None if c is None else c.principal
    return recorded if recorded is not None else (given or None)


class ExplorationError(AssertionError):
    """A property failed; the message holds the event path that leads there."""


@attrs.frozen
class Asked:
    """A modern ``tools/call`` whose authorizer answers ``Ask`` at once: two events (the call,
    then its authorizer's ``WorkerFinished``) taken as one step of the exploration, each
    checked, so that parking places fill within a few steps."""

    call: ToolCallReceived


Step = Event | Asked | Escalated


def alphabet(
    state: State,
    issued: tuple[Issued, ...] = (),
    modern: bool = False,
    principals: bool = False,
    tasks: bool = False,
) -> Iterator[Step]:
    """Every event tried from ``state``: connection events, new calls, and each open call's
    possible next events (worker outcomes, answers from owner and stranger, timers, cancels);
    with ``modern``, also :func:`modern_alphabet`'s, and 2025 calls from "a" only; with
    ``principals``, connections attach with :data:`PRINCIPAL_OF`'s principals, every one can
    be asked, and every new call is asked at once."""
    for conn in CONNS[:1] if modern or tasks else CONNS:
        yield SubscriberAttached(conn, 0, PRINCIPAL_OF.get(conn) if principals else None)
        yield SubscriberDetached(conn)
        askable = principals or conn != "c"
        yield ClientInitialized(conn, {"elicitation": {}} if askable else {}, 0, INIT_ID)
        known = state.conns.get(conn)
        if known is not None and known.held is not None:  # R-PARK-8
            yield ClientReady(conn)
        for rid in REQUEST_IDS:
            if (conn, rid) not in state.calls:
                if principals:  # every call asked at once: parking places fill fast
                    new = ToolCallReceived(conn, rid, "echo", {}, 0, caller=conn)
                    yield Asked(attrs.evolve(new, mode="push") if rid == 2 else new)
                elif rid == 2:
                    yield ToolCallReceived(conn, rid, "echo", {}, 0, mode="push", caller=conn)
                else:
                    yield ToolCallReceived(conn, rid, "echo", {}, 0, caller=conn)
    if not modern and not tasks:
        yield ToolCallReceived("a", 3, "nope", {}, 0)
    for call in in_admission_order(state):
        owner, request_id = call.conn, call.request_id
        channel = isinstance(owner, TaskChannel)  # a task's: answered through tasks/update
        if call.stage is Stage.PARKED and channel:
            yield TimerFired(("elicitation", call.elicitation_id), 0)
        elif call.stage is Stage.PARKED:
            eid = call.elicitation_id
            yield ElicitationAnswered(owner, eid, APPROVE, 0)
            yield ElicitationAnswered(owner, eid, DECLINE, 0)
            yield ElicitationAnswered(owner, eid, None, 0, error={"code": -1})
            stranger = next(c for c in CONNS if c != owner)
            yield ElicitationAnswered(stranger, eid, APPROVE, 0)
            yield TimerFired(("elicitation", eid), 0)
        elif call.stage is Stage.AUTHORIZING:
            yield WorkerFinished(call.worker, Allow(), 0)
            yield WorkerFinished(call.worker, Ask("ok?"), 0)
            yield WorkerFinished(call.worker, Deny("no"), 0)
            yield WorkerFailed(call.worker, 0)
        else:
            yield WorkerFinished(call.worker, {"content": []}, 0)
            yield TimerFired(("worker", call.worker), 0)
            if call.stage is Stage.RUNNING:  # R-CTX-4
                yield ToolRequested(call.worker, TOKEN, "elicitation/create", FORM, 0)
        if not channel:  # a call in its inline window too: its drop closes the window
            yield CancelRequested(owner, request_id, 0)
    for asked, request in sorted(state.client_requests.items()):  # R-CTX-5, R-CTX-6
        owner = request.key[0]
        if isinstance(owner, TaskChannel):
            yield TimerFired(("client_request", asked), 0)
            continue
        yield ElicitationAnswered(owner, asked, ANSWER, 0)
        yield ElicitationAnswered(next(c for c in CONNS if c != owner), asked, ANSWER, 0)
        yield TimerFired(("client_request", asked), 0)
    for conn in CONNS:
        if conn in state.callers:
            yield CallerExited(conn, 0)
    opts = state.options
    if opts.has_read_authorizer or not opts.has_authorizer:
        yield from _edges(state)
    if modern:
        yield from modern_alphabet(state, issued)
    if tasks:
        yield from task_alphabet(state)


def in_admission_order(state: State) -> list[Call]:
    """``state``'s open calls, oldest first. The alphabet tries moves in this order, never in
    the maps' own: an ``immutables.Map`` iterates in the order of its keys' hashes, which for
    strings changes with ``PYTHONHASHSEED`` from run to run."""
    return sorted(state.calls.values(), key=lambda call: call.seq)


def modern_alphabet(state: State, issued: tuple[Issued, ...]) -> Iterator[Step]:
    """The modern flow (spec/modern.md) and the stop: a modern call from each of
    :data:`MODERN_CALLERS` (its authorizer's outcomes are the 2025 ones above) and the same call
    asked at once (:class:`Asked`); every retry of every state the client keeps
    (:data:`RETRY_KINDS`); ``ServerStopping`` (R-STOP-1); and the late reports of a worker the
    stop killed (R-WORK-4)."""
    for conn, principal in MODERN_CALLERS:
        if (conn, MODERN_ID) not in state.calls:
            call = ToolCallReceived(
                conn, MODERN_ID, "echo", ARGS, 0, meta=MODERN_META, principal=principal
            )
            yield call
            yield Asked(call)
    for asked in issued:
        for kind in RETRY_KINDS:
            retry = retry_of(asked, kind)
            if (retry.conn, retry.request_id) not in state.calls:
                yield retry
    for nid, parked in sorted(state.parked.items()):  # R-MRTR-15: a nonce times out, silently
        if parked.stateless:
            yield TimerFired(("elicitation", nid), state.store.nonces[nid])
    yield ServerStopping(0)
    stale = _stale_ref(state)
    if stale is not None:
        yield WorkerFinished(stale, {"content": []}, 0)
        yield TimerFired(("worker", stale), 0)


def in_task_order(state: State) -> list[Any]:
    """``state``'s tasks in an order that does not depend on their minted ids or on the maps'
    hash order: live ones by their call's admission, then the terminal ones."""

    def order(task: Any) -> tuple[int, int, str, str]:
        call = None if task.call is None else state.calls.get(task.call)
        return (call is None, 0 if call is None else call.seq, str(task.owner), task.status)

    return sorted(state.tasks.values(), key=order)


def task_request(task_id: str, method: str, conn: str, principal: str | None, **more: Any) -> Event:
    """A modern ``tasks/*`` request declaring the extension (R-TASK-7)."""
    params = {"taskId": task_id, **more, "_meta": TASK_META}
    return ReadRequested(conn, TASKS_ID, method, params, 0, principal=principal)


def task_alphabet(state: State) -> Iterator[Step]:
    """Tasks (spec/tasks.md): each of :data:`TASK_CALLS` not open; each inline window's end
    (R-TASK-4); for each task, ``tasks/get`` and ``tasks/cancel`` from its owner and from a
    foreign principal (R-TASK-7, R-TASK-8), an approve and a decline of each of its inputs
    through ``tasks/update`` (R-TASK-10), and its ttl when it is terminal (R-TASK-9)."""
    for conn, rid, principal, at_once in TASK_CALLS:
        if (conn, rid) not in state.calls:
            call = ToolCallReceived(conn, rid, "job", {}, 0, meta=TASK_META, principal=principal)
            yield Escalated(call) if at_once else call
    for key, seq in sorted(state.task_pending.items(), key=lambda item: item[1]):
        yield TimerFired((INLINE_TIMER, (key, seq)), 0)
    for task in in_task_order(state):
        tid = task.task_id
        mine = owner_conn(task.owner)
        foreign = FOREIGN_OF[task.owner]
        for who in (mine, foreign):
            yield task_request(tid, "tasks/get", *who)
            yield task_request(tid, "tasks/cancel", *who)
        for key, _ in task.inputs:
            for answer in (APPROVE, DECLINE):
                yield task_request(tid, "tasks/update", *mine, inputResponses={key: answer})
        if task.status in TERMINAL:
            yield TimerFired((TTL_TIMER, tid), 0)


def owner_conn(owner: Hashable) -> tuple[str, str | None]:
    """A connection and principal whose requests ``owner`` owns (R-PARK-5)."""
    for conn, principal in TASK_PRINCIPALS.items():
        if owner_of(conn, principal) == owner:
            return conn, principal
    raise AssertionError(f"no caller owns {owner!r}")


def _stale_ref(state: State) -> int | None:
    """The newest worker ref no longer live, whose late reports the alphabet tries (R-WORK-4);
    ``None`` while no worker has ended. Whether there is one is part of :func:`canonical`'s
    key; which one it is is not (refs are names), and a late report changes nothing."""
    for ref in range(state.next_ref - 1, -1, -1):
        if ref not in state.workers:
            return ref
    return None


def retry_of(asked: Issued, kind: str) -> ToolCallReceived:
    """The retry of the approval ``asked`` of kind ``kind`` (:data:`RETRY_KINDS`)."""
    conn, principal, arguments = asked.conn, asked.principal, dict(ARGS)
    token, now = asked.token, 0
    responses: object = APPROVED
    if kind == "declined":
        responses = DECLINED
    elif kind == "foreign principal":
        principal = "bob" if principal == "alice" else "alice"
    elif kind == "other connection":
        conn = next(c for c in MODERN_CONNS if c != conn)
    elif kind == "changed arguments":
        arguments = {}
    elif kind == "tampered":  # one byte of the MAC flipped
        raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        raw[-1] ^= 1
        token = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    elif kind == "expired":
        now = asked.expiry
    return ToolCallReceived(
        conn,
        RETRY_ID,
        "echo",
        arguments,
        now,
        meta=MODERN_META,
        request_state=token,
        input_responses=responses,
        principal=principal,
    )


def _edges(state: State) -> Iterator[Event]:
    """The EDGES and OPEN configurations' extra events."""
    if state.options.has_read_authorizer:
        for conn in CONNS[:2]:
            if (conn, READ_ID) not in state.calls:
                yield ReadRequested(conn, READ_ID, "resources/read", {"uri": "demo://x"}, 0)
        for call in in_admission_order(state):
            if call.stage in (Stage.RUNNING, Stage.READ_RUNNING):  # R-WORK-3
                yield WorkerFailed(call.worker, 0)
            if call.stage is Stage.READ_AUTHORIZING:  # R-READ-2 (its other outcomes: above)
                yield WorkerFinished(call.worker, Allow(), 0)
                yield WorkerFinished(call.worker, Ask("ok?"), 0)
                yield WorkerFinished(call.worker, Deny("no"), 0)
        for call in in_admission_order(state):
            if call.stage is Stage.PARKED:
                for refusal in REFUSALS:
                    yield ElicitationAnswered(call.conn, call.elicitation_id, refusal, 0)
    else:
        if "rm" not in state.tools:
            yield ToolRegistered("rm", sensitive=True)
        yield ToolCallReceived("a", 4, "rm", {}, 0)
    if "echo" in state.tools:
        yield ToolUnregistered("echo")
    else:
        yield ToolRegistered("echo")
    yield ToolCallReceived("b", None, "echo", {}, 0)  # R-ADM-0
    for call in in_admission_order(state)[:1]:  # R-ADM-1: the id of an open call, again
        yield ToolCallReceived(call.conn, call.request_id, "echo", {}, 0)
        yield PingReceived(call.conn, call.request_id, 0)
    for data in HOSTILE:  # R-PROTO-1, R-PROTO-5, R-PROTO-6, R-PROTO-15
        yield MessageReceived("a", data, 0)
    stale = _stale_ref(state)
    if stale is not None:
        yield WorkerFinished(stale, Allow(), 0)
        yield WorkerFailed(stale, 0)
        yield TimerFired(("worker", stale), 0)


def canonical(state: State, issued: tuple[Issued, ...] = ()) -> Hashable:
    """``state`` up to renaming of worker refs, elicitation ids and counters; a modern nonce is
    named by its place in ``issued`` (the states its clients keep), which is part of the key.

    Two states with the same key must have the same moves (:func:`alphabet`) and successors
    with the same keys, or the figures would depend on which of them the search meets first,
    an order that the maps' hash order makes change from run to run: so the key holds each
    connection's version and held prompts (R-PROTO-23, R-PARK-8) and whether a worker has
    ended (:func:`_stale_ref`). tests/test_explore.py checks it by searching in both orders."""
    names = {asked.nid: ("nonce", n) for n, asked in enumerate(issued)}
    parked = state.parked
    calls = in_admission_order(state)
    call_part = tuple(
        (
            *_call_name(state, call),
            call.stage,
            call.mode,
            call.replied,
            call.caller,
            call.name,
            len(state.worker_requests.get(call.worker, ())),  # R-CTX-4: requests outstanding
        )
        for call in calls
    )
    conns = tuple(
        sorted(
            (
                str(conn),
                c.subscribed,
                c.principal,
                c.can_elicit,
                c.cap_group,
                c.version,  # R-PROTO-23: a second initialize is refused
                None if c.held is None else tuple(rid for _, rid, _ in c.held),  # R-PARK-8
            )
            for conn, c in state.conns.items()
        )
    )
    owners = tuple(
        sorted(
            (str(owner), tuple(names.get(eid) or parked[eid].key for eid in h.queue))
            for owner, h in state.store.owners.items()
        )
    )
    store = state.store
    buckets = tuple(sorted((n, tuple(map(str, fifo))) for n, fifo in store.buckets.items()))
    caps = (tuple(map(str, state.cap_unsubscribed)), tuple(map(str, state.cap_live)))
    modern: Hashable = ()
    if issued or state.stateless:
        modern = (
            tuple((asked.conn, asked.principal) for asked in issued),
            tuple((names[nid], store.closed[nid][0]) for nid in store.closed_order),
            tuple(sorted((str(key), str(st)) for key, st in state.stateless.items())),
        )
    stale = _stale_ref(state) is not None  # whether late reports are tried (R-WORK-4)
    tasks: Hashable = ()
    if state.tasks or state.task_pending:  # tasks up to their ids (spec/tasks.md)
        tasks = (
            tuple(
                (str(t.owner), t.status, t.call is not None, len(t.inputs), _outcome_kind(t))
                for t in in_task_order(state)
            ),
            tuple(sorted(str(key) for key in state.task_pending)),
        )
    return (
        call_part,
        conns,
        owners,
        buckets,
        caps,
        tuple(sorted(state.tools)),
        modern,
        stale,
        tasks,
    )


def _call_name(state: State, call: Call) -> tuple[Hashable, Hashable]:
    """A call's connection and request id, a task's call named by its task's owner instead of
    its minted id."""
    if isinstance(call.conn, TaskChannel):
        task = state.tasks.get(call.conn.task_id)
        return ("task", str(None if task is None else task.owner))
    return (call.conn, call.request_id)


def _outcome_kind(task: Any) -> str:
    """What a terminal task's outcome says, up to what the alphabet can tell apart."""
    outcome = task.outcome or {}
    result = outcome.get("result")
    if isinstance(result, dict):
        payload = result.get("structuredContent")
        return str(payload.get("detail")) if isinstance(payload, dict) else "result"
    error = outcome.get("error")
    return str(error.get("data")) if isinstance(error, dict) else ""


def check_transition(before: State, event: Event, after: State, effects: list[Effect]) -> None:
    """The per-step properties: closed exactly once (R-INV-8), owner-only delivery (R-INV-9),
    timers and workers. A hostile client message (``HOSTILE``) changes nothing and gets at most
    an error reply (R-PROTO-1, R-PROTO-5, R-PROTO-6)."""
    check_invariants(after)
    if isinstance(event, MessageReceived):  # the edges' hostile messages (HOSTILE)
        answers = [e for e in effects if isinstance(e, Reply)]
        if after != before or len(answers) != len(effects) or len(answers) > 1:
            raise AssertionError(f"{event!r} did {effects!r}: a hostile message changed things")
        if answers and (answers[0].message is None or "error" not in answers[0].message):
            raise AssertionError(f"{event!r} was answered {answers[0]!r}, not an error")
        return
    replies: dict[tuple[Hashable, Hashable], list[Reply]] = {}
    outcome_pushes: dict[tuple[Hashable, Hashable], int] = {}
    timers = live_timers(before) | task_timers(before)
    workers = set(before.workers)
    if isinstance(event, TimerFired):
        timers.discard(event.key)
    if isinstance(event, WorkerFinished | WorkerFailed):
        workers.discard(event.ref)
    for effect in effects:
        if isinstance(effect, Reply):
            replies.setdefault((effect.conn, effect.request_id), []).append(effect)
        elif isinstance(effect, Push) and "method" not in effect.message:
            key = (effect.conn, effect.message["id"])
            outcome_pushes[key] = outcome_pushes.get(key, 0) + 1
        elif isinstance(effect, StartTimer):
            if effect.key in timers:
                raise AssertionError(f"timer {effect.key} armed twice")
            timers.add(effect.key)
        elif isinstance(effect, CancelTimer):
            if isinstance(event, TimerFired) and effect.key == event.key == (
                INLINE_TIMER,
                effect.key[1],
            ):
                continue  # tasks.escalate cancels the window that just ended: a no-op
            if effect.key not in timers:
                raise AssertionError(f"timer {effect.key} cancelled but not armed")
            timers.discard(effect.key)
        elif isinstance(effect, StartWorker):
            workers.add(effect.ref)
            if isinstance(effect.job, RunTool) and effect.job.tool not in after.tools:
                raise AssertionError(f"{effect!r} runs a tool that is not registered (R-TOOL-2)")
        elif isinstance(effect, KillWorker):
            if effect.ref not in workers:
                raise AssertionError(f"worker {effect.ref} killed but not running")
            workers.discard(effect.ref)
    if timers != live_timers(after) | task_timers(after):
        expected = live_timers(after) | task_timers(after)
        raise AssertionError(f"armed timers {timers} != live timers {expected}")
    if workers != set(after.workers):
        raise AssertionError(f"running workers {workers} != state's {set(after.workers)}")
    _check_resolves(before, event, after, effects)
    _check_prompts(before, after, effects)
    if any(len(n) > 1 for n in replies.values()) or any(n > 1 for n in outcome_pushes.values()):
        raise AssertionError(f"a request answered twice: {replies} {outcome_pushes}")
    received = (getattr(event, "conn", None), getattr(event, "request_id", None))
    is_request = isinstance(event, ToolCallReceived | ReadRequested | PingReceived) or (
        isinstance(event, ClientInitialized) and event.request_id is not None
    )
    for key, call in before.calls.items():
        answer = replies.get(key, [None])[0]
        if isinstance(call.conn, TaskChannel):  # a task's call answers its task: check_tasks
            continue
        if is_request and key == received:  # R-ADM-1: a reused id is refused, the call untouched
            refused = answer is not None and answer.message is not None
            if not refused or after.calls.get(key) != call:
                raise AssertionError(f"{key}: a reused id was not refused, or touched the call")
            continue
        ended = key not in after.calls
        dropped = ended and _drops(event, call)
        if call.replied:  # push mode, parked earlier: the outcome, if any, is a push
            if answer is not None:
                raise AssertionError(f"{key} replied twice")
            if not ended and key in outcome_pushes:
                raise AssertionError(f"{key} got an outcome but is still open")
            if ended and outcome_pushes.get(key, 0) != (0 if dropped else 1):
                raise AssertionError(f"{key} ended with {outcome_pushes.get(key, 0)} outcomes")
        elif ended:
            if answer is None:
                raise AssertionError(f"{key} ended without exactly one reply")
            if (answer.message is None) != dropped:  # R-DROP-4: a drop answers with nothing
                raise AssertionError(f"{key} ended by {event!r} with {answer.message!r}")
        elif answer is not None:
            after_call = after.calls[key]
            parked_push = after_call.replied and after_call.stage is Stage.PARKED
            if not parked_push or answer.message is not None:
                raise AssertionError(f"{key} replied but still open and not parked in push mode")
    if is_request and received not in before.calls and received not in after.calls:
        answer = replies.get(received, [None])[0]  # a request answered at once: one answer
        if answer is None or answer.message is None:
            raise AssertionError(f"new request {received} answered {replies.get(received)}")
    _check_records(before, event, after, effects)
    for key in (*replies, *outcome_pushes):  # R-INV-9: to the connection that asked, only
        if key not in before.calls and key not in after.calls and key != received:
            raise AssertionError(f"{key} answered, but that connection has no such request")


def _check_records(before: State, event: Event, after: State, effects: list[Effect]) -> None:
    """R-LOG-1, R-LOG-3: every ``tools/call`` that ends in the step, or is answered at once,
    gets exactly one ``call_ended``, after its answer; a call that stays open gets none; every
    call that parks gets one ``call_parked``; reads get no ``call_ended``."""
    ended: dict[tuple[Hashable, Hashable], int] = {}
    parked: dict[tuple[Hashable, Hashable], int] = {}
    answered = {key for key, call in before.calls.items() if call.replied}  # push mode
    # a task's call answers its task, not a request (R-TASK-5): check_tasks
    answered |= {key for key in before.calls if isinstance(key[0], TaskChannel)}
    for effect in effects:
        if isinstance(effect, Reply | Push) and (
            isinstance(effect, Reply) or "method" not in effect.message
        ):
            rid = effect.request_id if isinstance(effect, Reply) else effect.message["id"]
            answered.add((effect.conn, rid))
        if isinstance(effect, Emit) and effect.name in ("call_ended", "call_parked"):
            key = (effect.fields["conn"], effect.fields["request_id"])
            counts = ended if effect.name == "call_ended" else parked
            counts[key] = counts.get(key, 0) + 1
            if effect.name == "call_ended" and key not in answered:
                raise AssertionError(f"R-LOG-1: {key} recorded before its answer")
    expected = {
        key
        for key, call in before.calls.items()
        if call.is_tool and key not in after.calls and not _escalated(key, effects)
    }
    if isinstance(event, ToolCallReceived) and is_request_id(event.request_id):
        key = (event.conn, event.request_id)
        well_formed = isinstance(event.tool, str) and isinstance(event.arguments, dict)
        if well_formed and key not in before.calls and key not in after.calls:
            expected.add(key)  # answered at once
    if set(ended) != expected or any(n != 1 for n in ended.values()):
        raise AssertionError(f"R-LOG-1: records {ended}, ended tools/calls {expected}")
    now_parked = {
        key
        for key, call in after.calls.items()
        if call.stage is Stage.PARKED
        and (before.calls.get(key) is None or before.calls[key].stage is not Stage.PARKED)
    }
    for effect in effects:  # a modern ASK parks a nonce and closes its call (R-MRTR-12)
        if isinstance(effect, Emit) and effect.name == "call_parked":
            nid = effect.fields["elicitation_id"]
            entry = after.parked.get(nid)
            if entry is not None and entry.stateless and nid not in before.parked:
                now_parked.add((effect.fields["conn"], effect.fields["request_id"]))
    if set(parked) != now_parked or any(n != 1 for n in parked.values()):
        raise AssertionError(f"R-LOG-3: records {parked}, parked {now_parked}")


def task_timers(state: State) -> set[tuple[str, Hashable]]:
    """The timers of tasks the shell must have armed: each inline window's (R-TASK-4) and each
    terminal task's ttl (R-TASK-9)."""
    timers: set[tuple[str, Hashable]] = {
        (INLINE_TIMER, (key, seq)) for key, seq in state.task_pending.items()
    }
    timers |= {(TTL_TIMER, tid) for tid, task in state.tasks.items() if task.status in TERMINAL}
    return timers


def task_outcomes(before: State, after: State, effects: list[Effect]) -> set[str]:
    """What befell tasks in a step: made, kept inline by a cap, each status reached, and
    forgotten (R-TASK-4 .. R-TASK-10)."""
    names: set[str] = set()
    for tid, task in after.tasks.items():
        was = before.tasks.get(tid)
        if was is None:
            names.add("task created")
        if (was is None or was.status != task.status) and task.status != "working":
            names.add(f"task {task.status}" + (f": {_outcome_kind(task)}" if task.outcome else ""))
    if any(tid not in after.tasks for tid in before.tasks):
        names.add("task forgotten")
    if (
        after.live_tasks == before.live_tasks
        and any(isinstance(e, CancelTimer) and e.key[0] == INLINE_TIMER for e in effects)
        and not any(isinstance(e, Reply) for e in effects)
    ):
        names.add("task kept inline by a cap")
    return names


def _escalated(key: tuple[Hashable, Hashable], effects: list[Effect]) -> bool:
    """Whether the call ``key`` became a task in the step: answered with ``CreateTaskResult``."""
    for effect in effects:
        if isinstance(effect, Reply) and (effect.conn, effect.request_id) == key:
            result = (effect.message or {}).get("result")
            return isinstance(result, dict) and result.get("resultType") == "task"
    return False


def check_tasks(
    before: State, event: Event, after: State, effects: list[Effect], step_fn: StepFn
) -> None:
    """Tasks' properties (spec/tasks.md), judged from the state before the step:

    * R-TASK-4: a task-declaring call of a tool that supports tasks gets an inline window of
      exactly ``task_inline_ms``; a call answered inline closes it; one that becomes a task is
      answered ``CreateTaskResult`` and its task exists, live, in the same step.
    * R-TASK-5, R-TASK-8: a task's call ends exactly when its task becomes terminal; a task
      never leaves a terminal status; a ``failed`` one failed by askgate; a cancel by its owner
      of a live task kills its worker; a declined input ends the task in the deny.
    * R-TASK-6: live tasks never exceed the caps, counted afresh per owner and in total.
    * R-TASK-7: a ``tasks/*`` of another owner is answered exactly as one of an unknown task,
      and changes nothing.
    * R-TASK-9: a task is forgotten only by its ttl timer, and only when terminal; one that
      becomes terminal arms its ttl at ``now + task_ttl_ms``.
    """
    opts = after.options
    live: dict[Hashable, int] = {}
    for task in after.tasks.values():
        if task.status not in TERMINAL:
            live[task.owner] = live.get(task.owner, 0) + 1
            if task.call is None or task.call not in after.calls:
                raise AssertionError(f"R-TASK-5: live task {task.task_id} has no open call")
        elif task.call is not None:
            raise AssertionError(f"R-TASK-5: terminal task {task.task_id} keeps a call")
    if any(n > opts.max_tasks_per_owner for n in live.values()) or (
        sum(live.values()) > opts.max_tasks_total
    ):
        raise AssertionError(f"R-TASK-6: live tasks {live} past the caps")
    for key, call in after.calls.items():
        if isinstance(call.conn, TaskChannel):
            task = after.tasks.get(call.conn.task_id)
            if task is None or task.call != key:
                raise AssertionError(f"R-TASK-5: {key} runs for no live task")
    window = getattr(event, "now", 0) + opts.task_inline_ms
    for effect in effects:
        if (
            isinstance(effect, StartTimer)
            and effect.key[0] == INLINE_TIMER
            and (effect.deadline != window)
        ):
            raise AssertionError(f"R-TASK-4: window {effect!r} is not task_inline_ms long")
        if isinstance(effect, Reply) and _escalated((effect.conn, effect.request_id), effects):
            assert effect.message is not None
            tid = effect.message["result"]["taskId"]
            made = after.tasks.get(tid)
            if tid in before.tasks or made is None:
                raise AssertionError(f"R-TASK-4: {effect!r} names no new task")
    for tid, was in before.tasks.items():
        now = after.tasks.get(tid)
        if now is None:
            fired = isinstance(event, TimerFired) and event.key == (TTL_TIMER, tid)
            if not fired or was.status not in TERMINAL:
                raise AssertionError(f"R-TASK-9: task {tid} ({was.status}) forgotten by {event!r}")
            continue
        if was.status in TERMINAL and now != was:
            raise AssertionError(f"R-TASK-5: terminal task {tid} changed: {was} -> {now}")
        if was.status not in TERMINAL and now.status in TERMINAL:
            ttl = StartTimer((TTL_TIMER, tid), now.updated + opts.task_ttl_ms)
            if now.updated != getattr(event, "now", None) or ttl not in effects:
                raise AssertionError(f"R-TASK-9: {tid} ended without its ttl armed: {effects!r}")
            if now.status == "failed":
                data = (now.outcome or {}).get("error", {}).get("data")
                if not isinstance(data, dict) or data.get("error") not in ASKGATE_FAILURES:
                    raise AssertionError(f"R-TASK-5: {tid} failed with {now.outcome!r}")
    if isinstance(event, ReadRequested) and event.method.startswith("tasks/"):
        _check_task_request(before, event, after, effects, step_fn)


def _check_task_request(
    before: State, event: ReadRequested, after: State, effects: list[Effect], step_fn: StepFn
) -> None:
    """R-TASK-7, R-TASK-8, R-TASK-10: a ``tasks/*`` request judged by who owns the task."""
    params = event.params if isinstance(event.params, dict) else {}
    tid = params.get("taskId")
    task = before.tasks.get(tid) if isinstance(tid, str) else None
    if task is None:
        return
    principal = event.principal if isinstance(event.principal, str) else None
    if owner_of(event.conn, principal) != task.owner:  # R-TASK-7: as an unknown task
        unknown = attrs.evolve(event, params={**params, "taskId": UNKNOWN_TASK})
        _, expected = step_fn(before, unknown)
        if effects != expected or after.tasks != before.tasks or after.calls != before.calls:
            raise AssertionError(f"R-TASK-7: another owner's {event.method} did {effects!r}")
        return
    done = after.tasks[task.task_id]
    if event.method == "tasks/cancel" and task.status not in TERMINAL:  # R-TASK-8
        call = before.calls[task.call] if task.call is not None else None
        if done.status != "cancelled" or call is None or task.call in after.calls:
            raise AssertionError(f"R-TASK-8: cancel left {done!r}")
        running = call.worker is not None and call.worker in before.workers
        if running and KillWorker(call.worker) not in effects:
            raise AssertionError(f"R-TASK-8: cancel spared worker {call.worker}: {effects!r}")
    if event.method == "tasks/update" and task.status not in TERMINAL:  # R-TASK-10
        responses = params.get("inputResponses") or {}
        (key,) = responses
        asked = task.call is not None and before.calls[task.call].elicitation_id == key
        if asked and responses[key] == DECLINE:
            result = (done.outcome or {}).get("result") or {}
            payload = result.get("structuredContent") or {}
            if done.status != "completed" or payload.get("detail") != "declined":
                raise AssertionError(f"R-TASK-10: a declined ASK left {done!r}")
        if any(entry[0] == key for entry in done.inputs):
            raise AssertionError(f"R-TASK-10: answered input {key} still listed: {done!r}")


def check_wire(
    before: State, event: Event, after: State, effects: list[Effect], step_fn: StepFn
) -> None:
    """R-PROTO-15: the message that means ``event``, fed through the entry the transports use,
    does what ``event`` did."""
    wired = door.wire_event(event)
    if wired is None:
        return
    wire_after, wire_effects = step_fn(before, wired)
    if wire_effects != effects or wire_after != after:
        raise AssertionError(f"through the wire {wired!r} did {wire_effects!r}, not {effects!r}")


def _drops(event: Event, call: Call) -> bool:
    """Whether ``event`` drops ``call`` (R-DROP-1 .. R-DROP-3): its cancel, its caller's exit,
    or its connection's subscriber going (or being rebound)."""
    if isinstance(event, CancelRequested):
        return (event.conn, event.request_id) == (call.conn, call.request_id)
    if isinstance(event, CallerExited):
        return call.caller is not None and event.caller == call.caller
    if isinstance(event, SubscriberDetached | SubscriberAttached):
        return event.conn == call.conn
    return False


def _check_prompts(before: State, after: State, effects: list[Effect]) -> None:
    """R-INV-9: a prompt goes to the owner of the call it parks, a withdrawal to the owner of
    the call it was for, each naming that call's request id in ``related``."""
    for push in (e for e in effects if isinstance(e, Push)):
        method = push.message.get("method")
        if method == "elicitation/create":
            asked = push.message.get("id")
            if asked in after.client_requests:
                continue  # a tool's own request: _check_resolves
            if not isinstance(asked, str) or asked not in after.parked:
                raise AssertionError(f"a prompt for no parked call: {push!r}")
            owner = after.parked[asked].key
        elif method == "notifications/cancelled":
            withdrawn = push.message.get("params", {}).get("requestId")
            if withdrawn not in before.parked:
                continue  # a tool's own request: _check_resolves
            owner = before.parked[withdrawn].key
        else:
            continue
        if (push.conn, push.related) != owner:
            raise AssertionError(f"{method} for {owner} pushed to {push.conn} ({push.related})")


def _check_resolves(before: State, event: Event, after: State, effects: list[Effect]) -> None:
    """R-CTX-4 .. R-CTX-6: a tool's request is sent to its call's owner or refused; a
    ``Resolve`` answers a request that was outstanding (or the one just refused), once."""
    resolves = [e for e in effects if isinstance(e, Resolve)]
    settled = set(before.client_requests) - set(after.client_requests)
    sent = set(after.client_requests) - set(before.client_requests)
    refused = 0
    for r in resolves:
        if isinstance(event, ToolRequested) and not sent and r.ref == event.ref:
            refused += 1
            continue
        matching = [
            rid
            for rid in settled
            if before.client_requests[rid].ref == r.ref
            and before.client_requests[rid].token == r.token
        ]
        if not matching or r.ref not in after.workers:
            raise AssertionError(f"{r!r} resolves no request outstanding for a running tool")
        settled.discard(matching[0])
    for rid in settled:  # ended unanswered: nothing waits only if its tool ended (R-CTX-6)
        if before.client_requests[rid].ref in after.workers:
            raise AssertionError(f"request {rid} ended while its tool runs, unresolved")
    if isinstance(event, ToolRequested) and (len(sent) + refused) != 1:
        raise AssertionError(f"{event!r}: {len(sent)} sent, {refused} refused")
    for rid in sent:
        request = after.client_requests[rid]
        if isinstance(request.key[0], TaskChannel):  # a task's input (R-TASK-10), not a push
            task = after.tasks[request.key[0].task_id]
            if not any(key == rid for key, _ in task.inputs):
                raise AssertionError(f"request {rid} of a task not among its inputs: {task!r}")
            continue
        pushed = [e for e in effects if isinstance(e, Push) and e.message.get("id") == rid]
        if len(pushed) != 1 or pushed[0].conn != request.key[0]:
            raise AssertionError(f"request {rid} not pushed once to its owner: {pushed}")


def _deny_detail(effects: list[Effect], key: tuple[Hashable, Hashable]) -> object:
    """The detail of the ``authorization_required`` deny replied to ``key`` in ``effects``, or
    ``None`` when none was."""
    for effect in effects:
        if isinstance(effect, Reply) and (effect.conn, effect.request_id) == key:
            result = (effect.message or {}).get("result")
            payload = result.get("structuredContent") if isinstance(result, dict) else None
            if isinstance(payload, dict) and payload.get("error") == "authorization_required":
                return payload.get("detail")
    return None


def _runs(after: State, effects: list[Effect], key: tuple[Hashable, Hashable]) -> bool:
    """Whether a tool was started for ``key`` in ``effects``."""
    return any(
        isinstance(e, StartWorker)
        and isinstance(e.job, RunTool)
        and after.workers.get(e.ref) == key
        for e in effects
    )


def check_modern(
    before: State, event: Event, after: State, effects: list[Effect], issued: tuple[Issued, ...]
) -> tuple[Issued, ...]:
    """The modern flow's properties (spec/modern.md) and the stop's (R-STOP-1); returns the
    states the clients keep after the step: ``issued`` with each state just answered, less
    those whose nonce is neither parked nor remembered.

    * A modern ASK (R-MRTR-12): its ``requestState`` opens, with the trusted primitive
      ``core.sealing``, as valid for the asker's principal, the tool and the arguments, on the
      nonce it parked under its owner; it expires exactly at the nonce's timer (R-MRTR-5).
    * A retry (R-MRTR-13, R-MRTR-14), judged independently of the reducer from the state before
      it and the primitive's verdict: a verdict but ``valid`` is denied with its detail; a valid
      state whose nonce is not parked is denied as remembered (else ``request state already
      used``), one parked under another owner ``request state of another principal``, and
      neither closes anything; one parked for this owner closes its nonce exactly once and runs
      the tool (or is answered ``server_busy``) only with an approval, else is denied with the
      refusal's detail. A state the client was never given never opens.
    * Eviction (R-PARK-3, R-PARK-4): an entry that leaves the parking places on an ASK is the
      oldest of a top holder's, 2025 call or modern nonce alike.
    * ``ServerStopping`` (R-STOP-1): no call, worker or tool request stays open; each parked
      call's prompt is withdrawn from its owner, once; the modern nonces, the record of closed
      ones, tools, subscribers and capabilities stay; nothing starts; with nothing open it does
      nothing.
    """
    if isinstance(event, ServerStopping):
        if after.calls or after.workers or after.client_requests:
            raise AssertionError("R-STOP-1: a call, worker or tool request outlived the stop")
        if any(isinstance(e, StartWorker | StartTimer) for e in effects):
            raise AssertionError(f"R-STOP-1: the stop started something: {effects!r}")
        kept = {eid: p for eid, p in before.parked.items() if p.stateless}
        if dict(after.parked.items()) != kept or after.store.closed != before.store.closed:
            raise AssertionError("R-STOP-1: the stop touched a modern nonce")
        if (after.tools, after.cap_live, after.cap_unsubscribed) != (
            before.tools,
            before.cap_live,
            before.cap_unsubscribed,
        ) or {c for c, v in after.conns.items() if v.subscribed} != {
            c for c, v in before.conns.items() if v.subscribed
        }:
            raise AssertionError("R-STOP-1: the stop changed tools, subscribers or capabilities")
        if not before.calls and (effects or after != before):
            raise AssertionError(f"R-STOP-1: a stop with nothing open did {effects!r}")
        withdrawn = [
            (e.conn, e.message.get("params", {}).get("requestId"))
            for e in effects
            if isinstance(e, Push) and e.message.get("method") == "notifications/cancelled"
        ]
        for call in before.calls.values():  # R-STOP-1, R-CLOSE-4: each prompt withdrawn, once
            if call.stage is not Stage.PARKED:
                continue
            unsent = before.conns[call.conn].held or ()  # R-PARK-9: one never sent, never
            sent = not any(h[0] == call.elicitation_id for h in unsent)
            if withdrawn.count((call.conn, call.elicitation_id)) != int(sent):
                raise AssertionError(f"R-STOP-1: {call.elicitation_id} not withdrawn once")
    if isinstance(event, WorkerFinished) and isinstance(event.value, Ask):  # R-PARK-3, R-PARK-4
        for eid in set(before.parked) - set(after.parked):
            owner = before.parked[eid].owner
            held = before.store.queue(owner)
            if held.first() != eid or len(held) != before.store.top:
                raise AssertionError(f"evicted {eid} of {owner!r}, not a top holder's oldest")
    if isinstance(event, ToolCallReceived) and event.request_state is not None:
        _check_retry(before, event, after, effects, issued)
    if not before.stateless and not issued:
        return issued  # no modern call was open, no state is kept: nothing more to check
    kept_states = list(issued)
    for effect in effects:  # R-MRTR-12: each modern ASK's state
        result = (effect.message or {}).get("result") if isinstance(effect, Reply) else None
        if not isinstance(result, dict) or result.get("resultType") != "input_required":
            continue
        assert isinstance(effect, Reply)
        key = (effect.conn, effect.request_id)
        call, how = before.calls[key], before.stateless[key]
        token = result["requestState"]
        nids = [
            e.fields["elicitation_id"]
            for e in effects
            if isinstance(e, Emit)
            and e.name == "call_parked"
            and (e.fields["conn"], e.fields["request_id"]) == key
        ]
        if len(nids) != 1 or nids[0] not in after.parked:
            raise AssertionError(f"R-MRTR-12: {key} asked, parked {nids}")
        nid, parked = nids[0], after.parked[nids[0]]
        deadline = after.store.nonces[nid]
        if not parked.stateless or parked.key[0] != how.owner:
            raise AssertionError(f"R-MRTR-12: {nid} parked as {parked!r}, not under {how.owner}")
        digest = sealing.arguments_digest(call.arguments)
        assert after.keyring is not None
        for now, verdict in (
            (0, "valid"),
            (deadline - 1, "valid"),
            (deadline, "expired"),
        ):
            opened = sealing.open_sealed(
                after.keyring, token, how.principal, call.name, digest, now
            )
            if opened.verdict != verdict or (verdict == "valid" and nonce_id(opened.nonce) != nid):
                raise AssertionError(
                    f"R-MRTR-12, R-MRTR-5: {key}'s state at {now} is {opened.verdict}, "
                    f"not {verdict} for {nid} (its timer: {deadline})"
                )
        principal = None if how.principal == "" else how.principal
        kept_states.append(Issued(token, str(effect.conn), principal, nid, deadline))
    return tuple(
        asked
        for asked in kept_states
        if asked.nid in after.parked or asked.nid in after.store.closed
    )


def modern_outcomes(before: State, event: Event, after: State, effects: list[Effect]) -> set[str]:
    """What befell modern nonces in a step, which the wire does not say (R-MRTR-15): evicted,
    timed out, closed by a retry, kept at the stop; and how each retry ended (``retry: `` and
    its deny detail, or ``ran``)."""
    names: set[str] = set()
    if isinstance(event, ToolCallReceived) and event.request_state is not None:
        key = (event.conn, event.request_id)
        detail = _deny_detail(effects, key)
        if _runs(after, effects, key):
            detail = "ran"
        elif detail is None and "server_busy" in outcome_names(effects):
            detail = "busy"
        names.add(f"retry: {detail}")
    for eid in set(before.parked) - set(after.parked):
        if not before.parked[eid].stateless:
            continue
        if isinstance(event, WorkerFinished):
            names.add("nonce evicted")
        elif isinstance(event, TimerFired):
            names.add("nonce timed out")
        elif isinstance(event, ToolCallReceived):
            names.add("nonce closed by a retry")
    if isinstance(event, ServerStopping) and any(p.stateless for p in after.parked.values()):
        names.add("nonce kept at the stop")
    return names


def _check_retry(
    before: State,
    event: ToolCallReceived,
    after: State,
    effects: list[Effect],
    issued: tuple[Issued, ...],
) -> None:
    """A retry judged as :func:`check_modern` says (R-MRTR-13, R-MRTR-14)."""
    key = (event.conn, event.request_id)
    if key in before.calls:
        return  # a reused id: refused (R-ADM-1), checked with every request
    who = principal_of(before, event.conn, event.principal)
    principal = "" if who is None else who
    c = before.conns.get(event.conn)
    owner = owner_of(event.conn, who, c is not None and c.per_request)
    assert before.keyring is not None
    digest = sealing.arguments_digest(event.arguments)
    opened = sealing.open_sealed(
        before.keyring, event.request_state, principal, event.tool, digest, event.now
    )
    given = any(asked.token == event.request_state for asked in issued)
    if opened.verdict == "valid" and not given:
        raise AssertionError(f"a state never given opened: {event!r}")
    closes = runs = False
    if opened.verdict != "valid":
        expected: object = sealing.DENY_DETAIL[opened.verdict]
    else:
        nid = nonce_id(opened.nonce)
        parked = before.parked.get(nid)
        if parked is None or not parked.stateless:
            found = before.store.closed.get(nid)
            expected = ALREADY_USED if found is None else found[0]
        elif parked.key[0] != owner:
            expected = sealing.FOREIGN_PRINCIPAL
        else:
            closes = True
            responses = event.input_responses
            answer = responses.get(INPUT_KEY) if isinstance(responses, dict) else None
            runs = is_approval(answer)
            expected = None if runs else refusal_detail(answer)
        if closes and nid in after.parked:
            raise AssertionError(f"R-MRTR-13: {nid} not closed by {event!r}")
    started = _runs(after, effects, key)
    if runs:
        busy = "server_busy" in outcome_names(effects)
        if started == busy:
            raise AssertionError(
                f"R-MRTR-13: an approved retry neither ran nor was busy: {effects!r}"
            )
        return
    detail = _deny_detail(effects, key)
    if started or detail != expected:
        raise AssertionError(
            f"R-MRTR-13: {event!r} got {detail!r} (ran: {started}), not {expected!r}"
        )
    if not closes and (after.parked != before.parked or after.store.closed != before.store.closed):
        raise AssertionError(f"R-MRTR-13: a refused retry changed the parking places: {event!r}")


@attrs.frozen
class Report:
    depth: int
    states: int
    transitions: int
    seconds: float
    complete: bool  # every state within the depth was expanded (no --max-states cut)
    outcomes: frozenset[str]  # every deny detail and error kind some transition produced


def _with_principal(event: Event) -> Event:
    """A prelude event of the principals configuration: attached with :data:`PRINCIPAL_OF`'s
    principal, initialized able to be asked."""
    if isinstance(event, SubscriberAttached):
        return SubscriberAttached(event.conn, 0, PRINCIPAL_OF.get(str(event.conn)))
    if isinstance(event, ClientInitialized):
        return ClientInitialized(event.conn, {"elicitation": {}})
    return event


def _owner_shared(state: State) -> bool:
    """Whether one owner holds parked calls of two connections (R-PARK-1)."""
    for h in state.store.owners.values():
        if len({state.parked[eid].key[0] for eid in h.queue}) > 1:
            return True
    return False


def outcome_names(effects: list[Effect]) -> set[str]:
    """The deny details and error kinds in ``effects``: what situations a path reached."""
    names: set[str] = set()
    for effect in effects:
        if isinstance(effect, Emit):
            names.add(effect.name)
        if isinstance(effect, Resolve):
            data = getattr(effect.outcome, "data", None)
            names.add(f"resolved: {data['error'] if isinstance(data, dict) else 'answer'}")
        message = effect.message if isinstance(effect, Reply | Push) else None
        if not message:
            continue
        result = message.get("result")
        if isinstance(result, dict) and isinstance(result.get("structuredContent"), dict):
            payload = result["structuredContent"]
            names.add(str(payload.get("detail") or payload.get("error")))
        elif "error" in message:
            names.add(f"error {message['error']['code']}")
            names.add(f"error {message['error']['code']}: {message['error']['message'][:40]}")
            data = message["error"].get("data")
            if isinstance(data, dict) and isinstance(data.get("detail"), str):
                names.add(data["detail"])
        elif message.get("method") == "notifications/cancelled":
            reason = message.get("params", {}).get("reason")
            request = str(message.get("params", {}).get("requestId")).startswith("askgate-request-")
            names.add(f"request withdrawn ({reason})" if request else "withdrawn")
        elif str(message.get("id")).startswith("askgate-request-"):
            names.add("request sent")
        elif "result" in message:
            names.add("result")
    return names


StepFn = Callable[[State, Event], tuple[State, list[Effect]]]


Node = tuple[State, tuple[Event, ...], tuple[Issued, ...]]


def explore(
    options: Options = TIGHT,
    depth: int = 5,
    max_states: int | None = None,
    step_fn: StepFn = step,
    *,
    modern: bool = False,
    principals: bool = False,
    tasks: bool = False,
    reverse: bool = False,
) -> Report:
    """Breadth-first to ``depth`` steps; raises :class:`ExplorationError` with the path.

    ``step_fn`` is the reducer under test (the real one by default); ``modern`` adds the modern
    flow and the stop (:func:`modern_alphabet`); ``principals`` attaches the connections with
    :data:`PRINCIPAL_OF`'s principals (R-PARK-1). A step is one event, or the two of an
    :class:`Asked` call (each checked); a transition is one event. ``reverse`` tries each
    state's moves last to first: the figures must not change, since :func:`canonical` merges
    only states with the same moves and the same successors, so that which of them the search
    meets first does not matter.
    """
    began = time.perf_counter()
    tools = (*TOOLS, JOB) if tasks else TOOLS
    start = initial_state(options, id_key=b"explore-key-0123456789", tools=tools)
    for event in PRELUDE:
        start, _ = step_fn(start, _with_principal(event) if principals else event)
    check_invariants(start)
    seen = {canonical(start)}
    frontier: deque[Node] = deque([(start, (), ())])
    transitions = 0
    complete = True
    outcomes: set[str] = set()
    for _ in range(depth):
        next_frontier: deque[Node] = deque()
        for state, path, issued in frontier:
            moves = list(alphabet(state, issued, modern, principals, tasks))
            for move in reversed(moves) if reverse else moves:
                after, done = state, path
                events: list[Event] = [move.call] if isinstance(move, Asked | Escalated) else [move]
                kept = issued
                while events:
                    event = events.pop(0)
                    done = (*done, event)
                    try:
                        before = after
                        after, effects = step_fn(before, event)
                        check_wire(before, event, after, effects, step_fn)
                        check_transition(before, event, after, effects)
                        kept = check_modern(before, event, after, effects, kept)
                        if tasks:
                            check_tasks(before, event, after, effects, step_fn)
                            outcomes |= task_outcomes(before, after, effects)
                        outcomes |= outcome_names(effects)
                        if principals and _owner_shared(after):
                            outcomes.add(SHARED_OWNER)
                        if issued or kept or before.stateless:
                            outcomes |= modern_outcomes(before, event, after, effects)
                    except Exception as failure:  # any failure is reported with its path
                        steps = "\n  ".join(repr(e) for e in done)
                        raise ExplorationError(f"{failure!r}\nafter:\n  {steps}") from failure
                    transitions += 1
                    if isinstance(move, Escalated) and len(done) == len(path) + 1:
                        window = (move.call.conn, move.call.request_id)  # it ends
                        seq = after.task_pending.get(window)
                        if seq is not None:
                            events.append(TimerFired((INLINE_TIMER, (window, seq)), 0))
                    if isinstance(move, Asked) and len(done) == len(path) + 1:
                        events += [  # its authorizer answers Ask at once
                            WorkerFinished(e.ref, Ask("ok?"), 0)
                            for e in effects
                            if isinstance(e, StartWorker)
                            and after.workers.get(e.ref) == (move.call.conn, move.call.request_id)
                        ]
                key = canonical(after, kept)
                if key in seen:
                    continue
                if max_states is not None and len(seen) >= max_states:
                    complete = False
                    continue
                seen.add(key)
                next_frontier.append((after, done, kept))
        frontier = next_frontier
    seconds = time.perf_counter() - began
    return Report(depth, len(seen), transitions, seconds, complete, frozenset(outcomes))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Exhaustive bounded exploration of the reducer")
    parser.add_argument("--depth", type=int, default=6, help="events after the prelude")
    parser.add_argument("--config", choices=sorted(CONFIGS), action="append")
    parser.add_argument("--max-states", type=int, default=None)
    parser.add_argument("--record", type=Path, help="merge the figures into this JSON file")
    parser.add_argument("--readme", type=Path, help="rewrite its table from --record's file")
    args = parser.parse_args(argv)
    if args.readme and not args.record:
        parser.error("--readme needs --record")
    if args.record and args.max_states is not None:
        parser.error("--record takes complete explorations only (no --max-states)")
    print(
        "alphabet: 3 connections (a prelude connects and initializes all three), 2 request ids "
        "per connection (reply and push mode), an unknown tool, every worker outcome, answers "
        "from owner and stranger, timers, cancels, caller exits, subscriber attach/detach, "
        "initialize, a running tool's request and its answers (owner, stranger) and timeout; "
        "2 workers (1 per connection), 1 request per running tool. edges adds reads through a "
        "read authorizer, 2 capability entries for 3 connections, the tool unregistered and "
        "registered again, malformed and reused ids, pings, stale worker events, cancel and "
        "unapproved answers, and malformed or hostile messages; open has no authorizer and a "
        "sensitive tool registered late; modern keeps 2025 calls on one connection and adds "
        "modern calls (from a connection, from a principal; each also asked at once), every "
        "retry of every kept state (as asked or replayed, declined, another principal, another "
        "connection, changed arguments, tampered, expired), nonce timeouts, ServerStopping and "
        "the late reports of the workers it killed; principals attaches b and c as sessions of "
        "one principal, every connection askable, every new call asked at once; tasks adds "
        "task-declaring calls of three owners (one task per owner, two in all), their inline "
        "windows ending, tasks/get, tasks/cancel and tasks/update from the owner and another "
        "principal, and the ttl. Every client "
        "event also goes through the "
        "wire (MessageReceived) and must do the same"
    )
    for name in args.config or sorted(CONFIGS):
        options = CONFIGS[name]
        report = explore(
            options,
            args.depth,
            args.max_states,
            modern=name in MODERN_CONFIGS,
            principals=name in PRINCIPAL_CONFIGS,
            tasks=name in TASK_CONFIGS,
        )
        print(
            f"{name} (parked {options.max_parked_elicitations} per owner, "
            f"{options.max_parked_elicitations_total} in total): {report.states} distinct states, "
            f"{report.transitions} transitions, depth {report.depth}, {report.seconds:.1f}s, "
            f"{'complete' if report.complete else 'cut at --max-states'}; "
            f"outcomes seen: {', '.join(sorted(report.outcomes))}"
        )
        if args.record:
            record_figures(args.record, args.readme, name, report)
    return 0


def record_figures(path: Path, readme: Path | None, name: str, report: Report) -> None:
    """Writes ``report``'s figures under ``name`` into ``path`` and, given ``readme``, rewrites
    the README's table from ``path`` (:mod:`askgate.models.figures`)."""
    figures.record(path, name, report.depth, report.states, report.transitions)
    if readme is not None:
        figures.rewrite_readme(readme, figures.load(path))


if __name__ == "__main__":
    sys.exit(main())
