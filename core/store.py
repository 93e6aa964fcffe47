"""The approvals store: parking places, single use and the caps (spec/store.md, R-STORE-*).

Every parking place of either era (a 2025 parked call's, a modern approval's or round's nonce)
is reserved here under its owner (R-PARK-1), and a nonce is taken here exactly once. The
operations are those of :class:`Store`, each returning a new store and an answer, so that the
in-memory implementation, :class:`MemoryStore`, is an immutable value the reducer's state holds
and ``step`` stays pure; a store shared by several replicas implements the same operations
(R-STORE-6).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Literal, Protocol, TypeVar

import attrs
from immutables import Map

from . import messages as m
from .decide import park_verdict
from .fifo import Fifo
from .record import record

Owner = Hashable
"""Whose parking place an id takes (R-PARK-1): ``("principal", <principal>)`` or a connection."""

USED = m.ALREADY_USED
"""Why a taken nonce is remembered (R-MRTR-14)."""
EVICTED = m.EVICTED
"""Why an evicted nonce is remembered (R-MRTR-14)."""

ReserveOutcome = Literal["parked", "evicted", "owner_full", "server_full"]
TakeOutcome = Literal["taken", "foreign", "closed", "unknown"]


@record
class Reserved:
    """What ``reserve`` answered (R-STORE-2): ``victim`` is the evicted id when ``outcome`` is
    ``evicted``, else ""."""

    outcome: ReserveOutcome
    victim: str = ""


@record
class Taken:
    """What ``take`` answered (R-STORE-3): ``why`` is the remembered reason when ``outcome`` is
    ``closed``, else ""."""

    outcome: TakeOutcome
    why: str = ""


PARKED = Reserved("parked")
OWNER_FULL = Reserved("owner_full")
SERVER_FULL = Reserved("server_full")
TAKEN = Taken("taken")
FOREIGN = Taken("foreign")
UNKNOWN = Taken("unknown")

S = TypeVar("S", bound="Store")


class Store(Protocol):
    """The approvals store's operations (R-STORE-1): each is one atomic step that returns the
    store after it and its answer; none raises for any id or owner."""

    def reserve(
        self: S,
        owner: Owner,
        ident: str,
        deadline: int,
        per_owner: int,
        total: int,
        now: int,
        single_use: bool,
    ) -> tuple[S, Reserved]:
        """Parks ``ident`` under ``owner`` (``deadline`` is the one a single-use id's closed
        record expires by), evicting another owner's oldest place when R-PARK-3 says so, or
        answers which cap is full (R-STORE-2)."""
        ...

    def take(self: S, ident: str, owner: Owner, now: int) -> tuple[S, Taken]:
        """Closes the single-use ``ident`` for ``owner``, at most once ever (R-STORE-3)."""
        ...

    def release(self: S, ident: str, owner: Owner, why: str | None, now: int) -> S:
        """Frees ``ident``'s place if ``owner`` holds it, remembering ``why`` for a single-use id
        (R-STORE-4)."""
        ...


class Holding(tuple[Any, ...]):
    """An owner's places and its position in the bucket of its count, as one tuple
    ``(bucket_pos, id, id, ...)``, oldest id first.

    One tuple per owner, not a record and a queue: an owner holds at most
    ``max_parked_elicitations`` places, and a tuple of a few ids costs less, in memory and in
    time, than a persistent map of its own.
    """

    __slots__ = ()

    @property
    def bucket_pos(self) -> int:
        """The owner's position in the bucket of its count."""
        pos: int = self[0]
        return pos

    @property
    def ids(self) -> tuple[str, ...]:
        """The owner's places, oldest first."""
        return self[1:]

    @property
    def queue(self) -> Fifo[str]:
        """The owner's places, oldest first, as a queue (built when asked: for checks)."""
        return _fifo_of(self[1:])


def _fifo_of(ids: tuple[str, ...]) -> Fifo[str]:
    return Fifo(Map(enumerate(ids)), 0, len(ids))


_NO_IDS: Fifo[str] = Fifo()


@record
class MemoryStore:
    """The embedded default (R-STORE-5): an immutable value; every operation returns a new one
    sharing what it did not change.

    ``nonces`` maps each single-use id to its deadline (a 2025 call's place keeps none: the
    reducer's timer ends it, and its release names its owner); ``owners`` each owner's places,
    the only record of a 2025 call's; ``buckets[n]`` the owners
    holding exactly ``n`` places, in the order they came to hold ``n``; ``top`` the largest
    such ``n`` (0 when nothing is held); ``total`` the number of places; ``closed`` the nonces
    closed lately, each with why, its expiry and its position in ``closed_order``, oldest first
    (R-MRTR-14), at most ``record_cap`` of them.
    """

    nonces: Map[str, int] = attrs.field(factory=Map)
    owners: Map[Owner, Holding] = attrs.field(factory=Map)
    buckets: Map[int, Fifo[Owner]] = attrs.field(factory=Map)
    top: int = 0
    total: int = 0
    closed: Map[str, tuple[str, int, int]] = attrs.field(factory=Map)
    closed_order: Fifo[str] = attrs.field(factory=Fifo)
    record_cap: int = 0

    def count(self, owner: Owner) -> int:
        """How many places ``owner`` holds."""
        h = self.owners.get(owner)
        return 0 if h is None else len(h) - 1

    def queue(self, owner: Owner) -> Fifo[str]:
        """``owner``'s places, oldest first."""
        h = self.owners.get(owner)
        return _NO_IDS if h is None else _fifo_of(h[1:])

    @property
    def places(self) -> dict[str, Owner]:
        """Every held id and its owner, built when asked (for checks: the store keeps no such
        index, R-STORE-5)."""
        return {ident: owner for owner, h in self.owners.items() for ident in h[1:]}

    def victim(self) -> tuple[Owner, str] | None:
        """The owner and id an eviction would take (R-PARK-4): the oldest place of the owner
        that has held the top count the longest; ``None`` when nothing is held."""
        if not self.top:
            return None
        holder = self.buckets[self.top].first()
        return holder, self.owners[holder].ids[0]

    def reserve(
        self,
        owner: Owner,
        ident: str,
        deadline: int,
        per_owner: int,
        total: int,
        now: int,
        single_use: bool,
    ) -> tuple[MemoryStore, Reserved]:
        """R-STORE-2: R-PARK-1, R-PARK-3 and R-PARK-4 in one step."""
        verdict = park_verdict(self.count(owner), per_owner, self.total, total, self.top)
        if verdict == "park":  # the usual verdict, tested first
            return self._hold(owner, ident, deadline, single_use), PARKED
        if verdict == "deny_connection":
            return self, OWNER_FULL
        if verdict == "deny_server":
            return self, SERVER_FULL
        store = self
        answer = PARKED
        if verdict == "evict":
            held = self.victim()
            assert held is not None
            holder, victim = held
            hv = self.owners[holder]
            store = self._free(victim, holder, hv, hv.index(victim, 1), EVICTED, now)
            answer = Reserved("evicted", victim)
        return store._hold(owner, ident, deadline, single_use), answer

    def take(self, ident: str, owner: Owner, now: int) -> tuple[MemoryStore, Taken]:
        """R-STORE-3: ``taken`` once for a single-use id held by ``owner``; ``foreign`` when
        another owner holds it (nothing changes); else what is remembered of it."""
        if ident not in self.nonces:
            found = self.closed.get(ident)
            return self, (UNKNOWN if found is None else Taken("closed", found[0]))
        h = self.owners.get(owner)
        if h is None:
            return self, FOREIGN
        try:
            at = h.index(ident, 1)  # its place among the owner's (h[0] is no id)
        except ValueError:
            return self, FOREIGN
        return self._free(ident, owner, h, at, USED, now), TAKEN

    def release(self, ident: str, owner: Owner, why: str | None, now: int) -> MemoryStore:
        """R-STORE-4: frees ``ident``'s place if ``owner`` holds it (else changes nothing);
        ``why`` is remembered for a single-use id unless it is ``None`` (a timeout: its state
        has expired)."""
        h = self.owners.get(owner)
        if h is None:
            return self
        try:
            at = h.index(ident, 1)  # its place among the owner's (h[0] is no id)
        except ValueError:
            return self
        return self._free(ident, owner, h, at, why, now)

    def _hold(self, owner: Owner, ident: str, deadline: int, single_use: bool) -> MemoryStore:
        # The owner moves from the bucket of its old count to that of its new one, one more
        # (R-PARK-4); the top is at least the new count (no bucket above it empties).
        h = self.owners.get(owner)
        if h is None:
            new = 1
            buckets, pos = _joined(self.buckets, 1, owner)
            held = (pos, ident)
        else:  # a holding keeps one id or more: the owner leaves a bucket for the next one up
            new = len(h)
            buckets, pos = _joined(_left(self.buckets, new - 1, h[0]), new, owner)
            held = (pos, *h[1:], ident)
        owners = self.owners.set(owner, Holding(held))
        top = new if new > self.top else self.top  # max(self.top, new), without its call
        nonces = self.nonces.set(ident, deadline) if single_use else self.nonces
        return MemoryStore(
            nonces,
            owners,
            buckets,
            top,
            self.total + 1,
            self.closed,
            self.closed_order,
            self.record_cap,
        )

    def _free(
        self, ident: str, owner: Owner, h: Holding, at: int, why: str | None, now: int
    ) -> MemoryStore:
        """Frees ``ident``, ``h[at]`` of ``owner``'s holding ``h``: the owner moves from the
        bucket of its old count to that of its new one, one less (R-PARK-4), and the top comes
        down to the largest count held."""
        ids = h[1:at] + h[at + 1 :]
        buckets = _left(self.buckets, len(h) - 1, h[0])
        owners = self.owners
        if ids:
            buckets, pos = _joined(buckets, len(ids), owner)
            owners = owners.set(owner, Holding((pos, *ids)))
        else:
            owners = owners.delete(owner)
        top = self.top  # the owner's new count is below its old one, at most the top
        while top and top not in buckets:
            top -= 1
        closed, order = self.closed, self.closed_order
        nonces = self.nonces
        deadline = nonces.get(ident) if nonces else None  # no get on the empty map (2025 only)
        if deadline is not None:
            nonces = nonces.delete(ident)
        if why is not None and deadline is not None:
            closed, order = _remember(closed, order, ident, why, deadline, now, self.record_cap)
        return MemoryStore(
            nonces, owners, buckets, top, self.total - 1, closed, order, self.record_cap
        )


_NO_OWNERS: Fifo[Owner] = Fifo()


def _left(buckets: Map[int, Fifo[Owner]], count: int, pos: int) -> Map[int, Fifo[Owner]]:
    """``buckets`` after the owner at ``pos`` in the bucket of ``count`` leaves it, a bucket
    left empty deleted."""
    fifo = buckets[count]
    if len(fifo.items) == 1:  # its only owner leaves
        return buckets.delete(count)
    return buckets.set(count, fifo.remove(pos))


def _joined(
    buckets: Map[int, Fifo[Owner]], count: int, owner: Owner
) -> tuple[Map[int, Fifo[Owner]], int]:
    """``buckets`` after ``owner`` joins the bucket of ``count``, newest, and the position it
    took there."""
    fifo, pos = buckets.get(count, _NO_OWNERS).push(owner)
    return buckets.set(count, fifo), pos


def _remember(
    closed: Map[str, tuple[str, int, int]],
    order: Fifo[str],
    ident: str,
    why: str,
    expiry: int,
    now: int,
    cap: int,
) -> tuple[Map[str, tuple[str, int, int]], Fifo[str]]:
    """R-MRTR-14: ``ident`` closed for ``why`` is remembered until ``expiry``; the record then
    forgets, oldest first, what has expired and what is over ``cap`` entries."""
    order, pos = order.push(ident)
    closed = closed.set(ident, (why, expiry, pos))
    while True:
        first = order.first()
        assert first is not None
        _, first_expiry, first_pos = closed[first]
        if len(order) <= cap and first_expiry > now:
            break
        order = order.remove(first_pos)
        closed = closed.delete(first)
        if not order:
            break
    return closed, order
