"""The approvals store (spec/store.md, R-STORE-*): the in-memory store's operations, its
contract against the naive reference, and the checker's power to reject a broken store."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import attrs
import pytest

from askgate.core import (
    Effect,
    Options,
    RunTool,
    StartWorker,
    ToolCallReceived,
    WorkerFinished,
    initial_state,
    step,
)
from askgate.core import messages as m
from askgate.core.decisions import Ask
from askgate.core.effects import Push
from askgate.core.sealing import Key, Keyring
from askgate.core.store import MemoryStore, Reserved, Taken
from askgate.models.store_contract import NaiveStore, check_store
from tests import test_modern as modern
from tests.harness import deny_payload, only_reply


def _memory(cap: int) -> MemoryStore:
    return MemoryStore(record_cap=cap)


def _reserve(
    s: MemoryStore, owner: Hashable, ident: str, *, per_owner: int = 2, total: int = 3, now: int = 0
) -> tuple[MemoryStore, Reserved]:
    return s.reserve(owner, ident, now + 10, per_owner, total, now, True)


def test_R_STORE_1_operations_return_a_new_store_and_leave_the_old_one() -> None:
    empty = _memory(3)
    one, answer = _reserve(empty, "a", "n1")
    assert answer == Reserved("parked")
    assert (empty.total, empty.count("a"), one.total, one.count("a")) == (0, 0, 1, 1)
    taken, got = one.take("n1", "a", 1)
    assert got == Taken("taken")
    assert (one.count("a"), taken.count("a")) == (1, 0)
    assert one.take("n1", "a", 1)[1] == Taken("taken")  # the old value is untouched
    # no operation raises for an id or owner it does not know
    assert empty.take("nothing", ("principal", "x"), 0) == (empty, Taken("unknown"))
    assert empty.release("nothing", "a", "why", 0) is empty


def test_R_STORE_2_reserve_parks_evicts_the_longest_top_holder_or_says_which_cap() -> None:
    s = _memory(3)
    s, _ = _reserve(s, "a", "a1")
    s, _ = _reserve(s, "b", "b1")
    s, _ = _reserve(s, "b", "b2")  # b reaches 2 first
    assert _reserve(s, "b", "b3")[1] == Reserved("owner_full")
    assert _reserve(s, "c", "c1", total=3)[1] == Reserved("evicted", "b1")
    s2, _ = s.release("b2", "b", None, 0), None
    s2, _ = _reserve(s2, "a", "a2")  # a now holds 2, b holds 1: a is the top holder
    assert _reserve(s2, "a", "a3")[1] == Reserved("owner_full")
    s3, got = _reserve(s2, "c", "c1")
    assert got == Reserved("evicted", "a1")  # the top holder's oldest place
    assert (s3.count("a"), s3.count("c"), s3.total) == (1, 1, 3)
    assert s3.take("a1", "a", 0)[1] == Taken("closed", m.EVICTED)
    # an owner holding as many as the top is refused, and nothing changes
    assert _reserve(s3, "b", "b9")[0].total == 3
    full, refused = _reserve(s3, "b", "b9")
    assert refused == Reserved("server_full")
    assert full is s3


def test_R_STORE_3_take_is_taken_once_foreign_closed_or_unknown() -> None:
    s, _ = _reserve(_memory(3), "a", "n1")
    assert s.take("n1", "b", 0) == (s, Taken("foreign"))
    s, got = s.take("n1", "a", 0)
    assert got == Taken("taken")
    assert s.take("n1", "a", 0)[1] == Taken("closed", m.ALREADY_USED)
    assert s.take("n2", "a", 0)[1] == Taken("unknown")
    call, _ = _memory(3).reserve("a", "e1", 10, 2, 3, 0, False)  # a 2025 call's place
    assert call.take("e1", "a", 0) == (call, Taken("unknown"))


def test_R_STORE_4_release_remembers_a_reason_until_expiry_and_at_most_cap() -> None:
    s = _memory(2)
    for i in range(3):
        s, _ = _reserve(s, "a", f"n{i}", per_owner=3, now=i)
    s = s.release("n0", "a", "why 0", 0)
    s = s.release("n1", "a", None, 0)  # a timeout: not remembered
    assert s.take("n0", "a", 0)[1] == Taken("closed", "why 0")
    assert s.take("n1", "a", 0)[1] == Taken("unknown")
    s, _ = _reserve(s, "a", "n3", per_owner=3)
    s, _ = _reserve(s, "a", "n4", per_owner=3)
    s = s.release("n3", "a", "why 3", 0)
    s = s.release("n4", "a", "why 4", 0)  # a third reason: the oldest is forgotten
    assert [s.take(n, "a", 0)[1].outcome for n in ("n0", "n3", "n4")] == [
        "unknown",
        "closed",
        "closed",
    ]
    s = s.release("n2", "a", "why 2", 20)  # past every deadline: the expired are forgotten
    assert [s.take(n, "a", 20)[1].outcome for n in ("n3", "n4")] == ["unknown", "unknown"]
    assert s.release("n2", "a", "again", 20) is s  # not held any more


def test_R_STORE_6_the_memory_store_keeps_the_contract() -> None:
    check_store(_memory)


@attrs.frozen
class _Broken:
    """A store that breaks the contract one way: ``bug`` names it."""

    inner: MemoryStore
    bug: str

    def count(self, owner: Hashable) -> int:
        return self.inner.count(owner)

    def reserve(self, *args: Any) -> tuple[_Broken, Reserved]:
        owner, ident, deadline, per_owner, total, now, single_use = args
        if self.bug == "per-owner":
            per_owner += 1
        inner, answer = self.inner.reserve(
            owner, ident, deadline, per_owner, total, now, single_use
        )
        return _Broken(inner, self.bug), answer

    def take(self, ident: str, owner: Hashable, now: int) -> tuple[_Broken, Taken]:
        inner, answer = self.inner.take(ident, owner, now)
        if self.bug == "taken-twice" and answer.outcome == "closed":
            answer = Taken("taken")
        if self.bug == "no-reason" and answer.outcome == "closed":
            answer = Taken("unknown")
        return _Broken(inner, self.bug), answer

    def release(self, ident: str, owner: Hashable, why: str | None, now: int) -> _Broken:
        return _Broken(self.inner.release(ident, owner, why, now), self.bug)


@pytest.mark.parametrize("bug", ["per-owner", "taken-twice", "no-reason"])
def test_R_STORE_6_the_contract_rejects_a_broken_store(bug: str) -> None:
    with pytest.raises(AssertionError):
        check_store(lambda cap: _Broken(_memory(cap), bug), examples=200, shrink=False)


def test_R_STORE_6_the_reference_is_the_rules() -> None:
    ref = NaiveStore(3)
    assert ref.reserve("a", "a1", 5, 1, 2, 0, True) == Reserved("parked")
    assert ref.reserve("a", "a2", 5, 1, 2, 0, True) == Reserved("owner_full")
    assert ref.reserve("b", "b1", 5, 1, 2, 0, True) == Reserved("parked")
    assert ref.reserve("c", "c1", 5, 1, 2, 0, True) == Reserved("evicted", "a1")
    assert ref.reserve("b", "b2", 5, 1, 2, 0, True) == Reserved("owner_full")
    assert ref.reserve("b", "b2", 5, 2, 2, 0, True) == Reserved("server_full")
    assert ref.take("a1", "a", 0) == Taken("closed", m.EVICTED)
    assert ref.take("b1", "c", 0) == Taken("foreign")
    assert ref.take("b1", "b", 0) == Taken("taken")
    assert ref.take("b1", "b", 0) == Taken("closed", m.ALREADY_USED)


def test_R_STORE_4_release_frees_a_place_only_for_the_owner_it_names() -> None:
    s, _ = _reserve(_memory(3), "a", "n1")
    assert s.release("n1", "b", "why", 0) is s  # held by another owner: nothing changes
    assert s.release("n1", ("principal", "a"), "why", 0) is s
    freed = s.release("n1", "a", "why", 0)
    assert (freed.count("a"), freed.total, freed.top) == (0, 0, 0)
    assert freed.take("n1", "a", 0)[1] == Taken("closed", "why")


def test_R_STORE_5_a_call_place_is_indexed_by_its_owner_alone() -> None:
    """No map of the store holds every place: a 2025 call's place is one entry of its owner's
    places, and only a single-use place is kept by id (its deadline)."""
    fields = [f.name for f in attrs.fields(MemoryStore)]
    assert fields == [
        "nonces",
        "owners",
        "buckets",
        "top",
        "total",
        "closed",
        "closed_order",
        "record_cap",
    ]
    store, _ = _memory(4).reserve("a", "a1", 5, 2, 4, 0, False)
    store, _ = store.reserve("a", "a2", 5, 2, 4, 0, False)
    assert (dict(store.nonces), store.owners["a"].ids) == ({}, ("a1", "a2"))


def test_R_STORE_5_the_memory_store_keeps_a_deadline_for_nonces_only() -> None:
    """A call's place is its owner alone; a nonce keeps its deadline until it is freed, for the
    record of closed nonces (R-MRTR-14)."""
    store, answer = _memory(4).reserve("a", "a1", 5, 2, 4, 0, False)
    store, _ = store.reserve("b", "b1", 7, 2, 4, 0, True)
    assert answer == Reserved("parked")
    assert dict(store.places) == {"a1": "a", "b1": "b"}
    assert dict(store.nonces) == {"b1": 7}
    store = store.release("a1", "b", m.EVICTED, 1)  # another owner's: nothing changes
    assert dict(store.places) == {"a1": "a", "b1": "b"}
    store = store.release("a1", "a", m.EVICTED, 1)
    assert (dict(store.nonces), dict(store.closed)) == ({"b1": 7}, {})
    store = store.release("b1", "b", m.EVICTED, 1)
    assert (dict(store.places), dict(store.nonces)) == ({}, {})
    assert store.take("b1", "b", 1)[1] == Taken("closed", m.EVICTED)
    assert store.take("b1", "b", 7)[1] == Taken("closed", m.EVICTED)


def test_R_STORE_5_the_state_holds_one_store_for_both_eras() -> None:
    """A 2025 parked call and a modern nonce are places of the one store in the state, and a
    modern ASK on a full server evicts the 2025 call that has held the top longest."""
    h = modern.harness(max_parked_elicitations=1, max_parked_elicitations_total=2)
    assert h.state.store == MemoryStore(record_cap=2)
    h.connect("s")
    eid = h.park("s", 1)
    nonce_state = modern.ask(h, "a", 1)["requestState"]
    store = h.state.store
    assert (store.total, store.count("s"), store.count("a")) == (2, 1, 1)
    assert sorted(map(str, store.places.values())) == ["a", "s"]
    assert eid not in store.nonces
    assert store.places[eid] == "s"
    # the server is full: a third owner's modern ASK evicts the 2025 call (R-PARK-4)
    modern.call(h, "b", 1)
    effects = h.finish(h.worker(), Ask("Allow rm?"))
    to_b = [e for e in effects if getattr(e, "conn", None) == "b"]
    to_s = [e for e in effects if getattr(e, "conn", None) == "s"]
    assert only_reply(to_b)["result"]["resultType"] == "input_required"
    withdrawn = [e for e in to_s if isinstance(e, Push)]
    assert [e.message["params"]["requestId"] for e in withdrawn] == [eid]
    assert deny_payload(only_reply(to_s))["detail"] == m.EVICTED
    assert eid not in h.state.store.places
    assert h.state.store.take(eid, "s", h.now)[1] == Taken("unknown")  # a call is not remembered
    # the retry takes its nonce from the store, once
    effects = modern.call(h, "a", 2, state=nonce_state, responses=modern.APPROVE)
    assert modern.run_ref(effects)
    assert h.state.store.count("a") == 0
    again = modern.call(h, "a", 3, state=nonce_state, responses=modern.APPROVE)
    assert deny_payload(only_reply(again))["detail"] == m.ALREADY_USED


class _Replicas:
    """Two reducer states serving one deployment, sharing one store: before each step the
    replica's state is given the shared store, after it the shared store is the one the step
    returned (the in-memory store standing in for a shared one; no clock, no I/O)."""

    def __init__(self) -> None:
        opts = Options(has_authorizer=True, max_parked_elicitations=1)
        ring = Keyring(Key("shared", b"s" * 32), opts.elicitation_timeout_ms)  # one key ring
        self.states = {
            name: initial_state(opts, id_key=name.encode() * 32, tools=modern.TOOLS, keyring=ring)
            for name in ("A", "B")
        }
        self.shared = self.states["A"].store

    def feed(self, replica: str, event: Any) -> list[Effect]:
        state = attrs.evolve(self.states[replica], store=self.shared)
        state, effects = step(state, event)
        self.states[replica], self.shared = state, state.store
        return effects

    def call(self, replica: str, rid: int, **kw: Any) -> list[Effect]:
        args = {"path": "/tmp/x", "n": 1.0}
        meta = modern.meta()
        return self.feed(replica, ToolCallReceived("c", rid, "rm", args, 0, meta=meta, **kw))


def test_R_STORE_6_two_replicas_sharing_one_store_run_an_approved_retry_once() -> None:
    r = _Replicas()
    r.call("A", 1, principal="alice")
    asked = only_reply(r.feed("A", WorkerFinished(1, Ask("Allow rm?"), 0)))["result"]
    token = asked["requestState"]
    # the caps are the store's: alice's second ASK, on replica B, finds her one place taken
    r.call("B", 2, principal="alice")
    full = only_reply(r.feed("B", WorkerFinished(1, Ask("Allow rm?"), 0)))
    assert deny_payload(full)["detail"] == m.TOO_MANY_PENDING
    # the retry reaches replica B, which never saw the ASK: taken there, the tool runs once
    retry = {"request_state": token, "input_responses": modern.APPROVE, "principal": "alice"}
    run = r.call("B", 3, **retry)
    jobs = [e.job for e in run if isinstance(e, StartWorker)]
    assert [(type(job), getattr(job, "tool", None)) for job in jobs] == [(RunTool, "rm")]
    assert r.shared.total == 0
    # a replay on either replica is refused, and nothing runs: the store answered taken once
    for replica, rid in (("A", 4), ("B", 5)):
        effects = r.call(replica, rid, **retry)
        assert not [e for e in effects if isinstance(e, StartWorker)]
        assert deny_payload(only_reply(effects))["detail"] == m.ALREADY_USED
