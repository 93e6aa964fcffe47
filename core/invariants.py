"""Invariants of the reducer's state (R-INV-*), checked by every stateful test after every step.

``check_invariants`` recomputes every count from what it counts, so it is O(state): for tests,
never for the hot path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable

from .state import WORKER_STAGES, Stage, State, TaskChannel
from .tasks import MAX_WAITS, TERMINAL

TimerKey = tuple[str, Hashable]


class InvariantError(AssertionError):
    """The state breaks a rule of spec/rules.md; the message names the rule."""


def _fail(rule: str, detail: str) -> None:
    raise InvariantError(f"{rule}: {detail}")


def live_timers(state: State) -> set[TimerKey]:
    """The timers the shell must have armed for ``state``: one per parked call, per worker and
    per outstanding client request (R-INV-4)."""
    keys: set[TimerKey] = {("elicitation", eid) for eid in state.parked}
    keys.update(("worker", ref) for ref in state.workers)
    keys.update(("client_request", rid) for rid in state.client_requests)
    return keys


def check_invariants(state: State) -> None:
    """Raises :class:`InvariantError` naming the first rule ``state`` breaks."""
    opts = state.options
    per_conn_parked: Counter[Hashable] = Counter()
    per_conn_workers: Counter[Hashable] = Counter()
    per_owner_workers: Counter[Hashable] = Counter()
    per_conn_requests: dict[Hashable, set[Hashable]] = {}
    per_caller: dict[Hashable, set[tuple[Hashable, Hashable]]] = {}
    seen_workers: set[int] = set()
    if any(key in state.working for key in state.waiting):
        _fail("R-INV-3", "a call is both parked and holding a worker")
    for key, call in state.calls.items():
        if key != (call.conn, call.request_id) or call.key != key:
            _fail("R-INV-3", f"call stored under {key!r} is {(call.conn, call.request_id)!r}")
        if (call.stage is Stage.PARKED) != (key in state.waiting):
            _fail("R-INV-3", f"call {key!r} in stage {call.stage.name} is kept with the wrong ones")
        per_conn_requests.setdefault(call.conn, set()).add(call.request_id)
        if call.caller is not None:
            per_caller.setdefault(call.caller, set()).add(key)
        if call.stage is Stage.PARKED:
            p = state.parked.get(call.elicitation_id)
            if p is None or p.key != key:
                _fail("R-INV-4", f"parked call {key!r} has no elicitation entry")
            c = state.conns.get(call.conn)
            if c is None or not c.subscribed:
                _fail("R-INV-5", f"parked call {key!r} has no subscriber")
            assert p is not None
            assert c is not None
            if p.owner != call.owner:
                _fail("R-INV-5", f"parked call {key!r} counts against {p.owner!r}")
            per_conn_parked[p.owner] += 1
            if call.worker != -1:
                _fail("R-INV-3", f"parked call {key!r} holds worker {call.worker}")
        else:
            if call.stage not in WORKER_STAGES:
                _fail("R-INV-3", f"call {key!r} in unknown stage {call.stage!r}")
            if state.workers.get(call.worker) != key:
                _fail("R-INV-4", f"call {key!r} in {call.stage.value} has no live worker")
            if call.worker in seen_workers:
                _fail("R-INV-3", f"worker {call.worker} held by two calls")
            seen_workers.add(call.worker)
            per_conn_workers[call.conn] += 1
            per_owner_workers[call.owner] += 1
            if call.elicitation_id:
                _fail("R-INV-3", f"unparked call {key!r} keeps elicitation {call.elicitation_id}")
        if call.replied and call.mode != "push":
            _fail("R-DLV-3", f"reply-mode call {key!r} was answered before its outcome")
        if call.replied and call.stage not in (Stage.PARKED, Stage.RUNNING):
            _fail("R-DLV-3", f"call {key!r} answered with nothing before it parked")
    if len(state.workers) != len(seen_workers):
        _fail("R-INV-3", "a worker is held by no call")
    store = state.store
    places = store.places  # every held id and its owner (built: the store keeps no such map)
    for eid, p in state.parked.items():
        if places.get(eid) != p.owner or (eid in store.nonces) != p.stateless:
            _fail("R-INV-3", f"{eid} is not the store's place for {p.owner!r} (R-STORE-5)")
        if p.stateless:  # a modern nonce: no call waits (R-MRTR-12)
            if p.key[1] != eid or p.owner != p.key[0]:
                _fail("R-INV-3", f"nonce {eid} is parked under {p.key!r} for {p.owner!r}")
            per_conn_parked[p.key[0]] += 1
            continue
        owner = state.calls.get(p.key)
        if owner is None or owner.elicitation_id != eid:
            _fail("R-INV-3", f"elicitation {eid} belongs to no parked call")
    # R-INV-1: caps.
    if store.total != len(state.parked) or store.total != len(places):
        _fail("R-INV-2", f"parked_total {store.total} != {len(state.parked)}")
    if any(nid not in places for nid in store.nonces):
        _fail("R-INV-3", "the store keeps a deadline for no place (R-STORE-5)")
    if store.total > opts.max_parked_elicitations_total:
        _fail("R-INV-1", f"{store.total} parked over the total cap")
    _check_store(state, per_conn_parked)
    if state.in_flight_total != len(state.workers):
        _fail("R-INV-2", f"in_flight_total {state.in_flight_total} != {len(state.workers)}")
    if state.in_flight_total > opts.max_in_flight:
        _fail("R-INV-1", f"{state.in_flight_total} workers over max_in_flight")
    # Per connection.
    caps_seen = {"live": 0, "unsubscribed": 0}
    for conn, c in state.conns.items():
        if c.is_empty() and conn not in per_conn_requests and not state.store.count(conn):
            _fail("R-INV-6", f"connection {conn!r} holds nothing but is kept")
        if c.cap_group:
            caps_seen[c.cap_group] += 1
            expected = "live" if c.subscribed else "unsubscribed"
            if c.cap_group != expected:
                _fail("R-CAP-3", f"{conn!r}'s entry is in group {c.cap_group}, not {expected}")
            fifo = state.cap_live if c.cap_group == "live" else state.cap_unsubscribed
            if fifo.items.get(c.cap_pos) != conn:
                _fail("R-INV-3", f"{conn!r} is not at its place in the {c.cap_group} entries")
        elif (c.can_elicit or c.can_sample or c.can_task) and not isinstance(conn, TaskChannel):
            # a task's channel carries its request's own capabilities (spec/tasks.md)
            _fail("R-INV-3", f"{conn!r} can be asked without a capabilities entry")
        for eid, _rid, _request in c.held or ():
            p = state.parked.get(eid)
            if p is None or p.stateless or p.key[0] != conn:
                _fail("R-INV-3", f"{conn!r} holds the prompt {eid!r} of no call it parked")
    for conn, n in state.in_flight.items():
        if n != per_conn_workers[conn] or n < 1:
            _fail("R-INV-2", f"{conn!r} counts {n} workers, holds {per_conn_workers[conn]}")
    if set(per_conn_workers) != set(state.in_flight):
        _fail("R-INV-2", "a connection's workers are not counted")
    for owner, n in state.owner_in_flight.items():  # R-ADM-6: the share is the owner's
        if n != per_owner_workers[owner] or n < 1:
            _fail("R-INV-2", f"{owner!r} counts {n} workers, holds {per_owner_workers[owner]}")
        if n > opts.in_flight_share:
            _fail("R-INV-1", f"{owner!r} has {n} workers over its share")
    if set(per_owner_workers) != set(state.owner_in_flight):
        _fail("R-INV-2", "an owner's workers are not counted")
    for conn in per_conn_requests:
        if conn not in state.conns:
            _fail("R-INV-2", f"calls of {conn!r} but no record of it")
    state.cap_live.check()
    state.cap_unsubscribed.check()
    if len(state.cap_live) != caps_seen["live"]:
        _fail("R-INV-3", "live capability entries disagree with the connections")
    if len(state.cap_unsubscribed) != caps_seen["unsubscribed"]:
        _fail("R-INV-3", "unsubscribed capability entries disagree with the connections")
    if len(state.cap_live) + len(state.cap_unsubscribed) > opts.max_client_capabilities:
        _fail("R-INV-1", "more capability entries than max_client_capabilities")
    for uri, subscribers in state.resource_subscribers.items():
        if not subscribers:
            _fail("R-INV-6", f"empty subscriber set kept for {uri!r}")
        for conn in subscribers:
            if conn not in state.conns or uri not in state.conns[conn].subscriptions:
                _fail("R-INV-3", f"{conn!r} indexed as subscribed to {uri!r} but is not")
    for conn, c in state.conns.items():
        for uri in c.subscriptions:
            if conn not in state.resource_subscribers.get(uri, {}):
                _fail("R-INV-3", f"{conn!r}'s subscription to {uri!r} is not indexed")
        if (c.log_level or None) != state.log_levels.get(conn):
            _fail("R-INV-3", f"{conn!r}'s log level is not indexed")
    for conn in state.log_levels:
        if conn not in state.conns:
            _fail("R-INV-6", f"log level kept for forgotten {conn!r}")
    for caller, keys in state.callers.items():
        if set(keys) != per_caller.get(caller, set()):
            _fail("R-INV-2", f"caller {caller!r}'s index disagrees with its calls")
    if set(per_caller) != set(state.callers):
        _fail("R-INV-2", "a caller with calls has no index entry")
    _check_client_requests(state)
    _check_stateless(state)
    _check_listens(state)
    _check_task_waits(state)


def _check_store(state: State, per_owner: Counter[Hashable]) -> None:
    """R-INV-1 .. R-INV-3 of the store's places (R-STORE-5): each owner's queue holds exactly
    its places, within its cap; ``buckets`` and ``top`` match the counts."""
    store = state.store
    cap = state.options.max_parked_elicitations
    buckets_seen: Counter[int] = Counter()
    holders: dict[str, Hashable] = {}
    for owner, h in store.owners.items():
        n = len(h.ids)
        if n != per_owner[owner] or n == 0:
            _fail("R-INV-2", f"{owner!r} counts {n} parked, holds {per_owner[owner]}")
        if n > cap:
            _fail("R-INV-1", f"{owner!r} has {n} parked over its cap")
        if len(set(h.ids)) != n:
            _fail("R-INV-3", f"{owner!r}'s parked queue holds an id twice")
        for eid in h.ids:
            if holders.setdefault(eid, owner) != owner:
                _fail("R-INV-3", f"{owner!r}'s parked queue disagrees with elicitation {eid}")
        buckets_seen[n] += 1
        if store.buckets[n].items.get(h.bucket_pos) != owner:
            _fail("R-INV-3", f"{owner!r} is not at its place in bucket {n}")
    if set(per_owner) != set(store.owners):
        _fail("R-INV-2", "a parked call's owner holds no place in the store")
    for n, fifo in store.buckets.items():
        fifo.check()
        if len(fifo) != buckets_seen[n] or n == 0:
            _fail(
                "R-INV-3", f"bucket {n} holds {len(fifo)}, {buckets_seen[n]} connections hold {n}"
            )
    expected_top = max(store.buckets.keys(), default=0)
    if store.top != expected_top:
        _fail("R-INV-3", f"top is {store.top}, the largest parked count is {expected_top}")


def _check_stateless(state: State) -> None:
    """R-MRTR-9, R-MRTR-14: modern calls are open calls; the record of closed nonces is capped,
    indexed once, and names no nonce still parked."""
    for key in state.stateless:
        if key not in state.calls:
            _fail("R-INV-3", f"modern call {key!r} is not open")
    store = state.store
    order = store.closed_order
    order.check()
    if len(order) != len(store.closed):
        _fail("R-INV-3", "the closed nonces disagree with their order")
    if len(order) > state.options.max_parked_elicitations_total:
        _fail("R-INV-1", "more closed nonces remembered than max_parked_elicitations_total")
    for pos, nid in order.items.items():
        entry = store.closed.get(nid)
        if entry is None or entry[2] != pos or nid in store.nonces:
            _fail("R-INV-3", f"closed nonce {nid} is not indexed once, or is still parked")


def _check_listens(state: State) -> None:
    """R-MRTR-25, R-MRTR-27: each connection's index of listens and each owner's count agree
    with the listens, and no bound is passed."""
    opts = state.options
    indexed = {(conn, rid) for conn, mine in state.conn_listens.items() for rid, _ in mine}
    entries = sum(map(len, state.conn_listens.values()))
    if indexed != set(state.listens) or entries != len(indexed):
        _fail("R-INV-3", "the connections' listens disagree with the open listens")
    owners = Counter(owner for mine in state.conn_listens.values() for _, owner in mine)
    if owners != Counter(dict(state.owner_listens)) or 0 in state.owner_listens.values():
        _fail("R-INV-2", "the owners' listen counts disagree with the open listens")
    if len(state.listens) > opts.max_listens_total:
        _fail("R-INV-1", f"{len(state.listens)} listens over max_listens_total")
    if any(n > opts.max_listens_per_owner for n in state.owner_listens.values()):
        _fail("R-INV-1", "an owner holds listens over max_listens_per_owner")


def _check_task_waits(state: State) -> None:
    """R-TASK-14: a waiting ``tasks/result`` waits on a live 2025-11-25 task, at most
    ``MAX_WAITS`` on one."""
    per_task: Counter[str] = Counter(state.task_waits.values())
    for tid, n in per_task.items():
        task = state.tasks.get(tid)
        if task is None or task.status in TERMINAL:
            _fail("R-TASK-14", f"a tasks/result waits on {tid!r}, which is not live")
        elif task.origin is None:
            _fail("R-TASK-14", f"a tasks/result waits on {tid!r}, a 2026-07-28 task")
        if n > MAX_WAITS:
            _fail("R-TASK-14", f"{n} tasks/result wait on {tid!r}")


def _check_client_requests(state: State) -> None:
    """R-INV-7: a running tool's requests and progress entries."""
    listed: set[str] = set()
    for ref, ids in state.worker_requests.items():
        key = state.workers.get(ref)
        call = None if key is None else state.calls.get(key)
        if call is None or call.stage is not Stage.RUNNING:
            _fail("R-INV-7", f"worker {ref} has requests outstanding but runs no tool")
        if not ids or len(ids) > state.options.max_client_requests_per_call:
            _fail("R-INV-7", f"worker {ref} has {len(ids)} requests outstanding")
        for rid in ids:
            request = state.client_requests.get(rid)
            if request is None or request.ref != ref or request.key != key or rid in listed:
                _fail("R-INV-7", f"request {rid} is not indexed once under worker {ref}")
            listed.add(rid)
    if listed != set(state.client_requests):
        _fail("R-INV-7", "a client request is not listed under its worker")
    for key in state.progress:
        if key not in state.calls:
            _fail("R-INV-7", f"progress kept for {key!r}, which is not open")
