"""The approvals store's contract (spec/store.md, R-STORE-6), checkable against any store.

:class:`NaiveStore` is the reference: R-STORE-2 .. R-STORE-4 in lists and linear scans, with
"held the top count the longest" as the owner whose count changed least recently.
:func:`check_store` drives a factory of stores (anything with the operations of
:class:`askgate.core.store.Store`) and the reference through the same random histories with a
Hypothesis state machine and fails on the first answer that differs, or on an id answered
``taken`` twice. A shared store's adapter is checked the same way: pass a factory that builds
one fresh, empty store per history.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import attrs
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from ..core.store import EVICTED, USED, Reserved, Taken

StoreFactory = Callable[[int], Any]
"""Builds an empty store whose record of closed nonces holds at most the given count."""

OWNERS: tuple[Hashable, ...] = ("a", "b", "c", ("principal", "p"))
WHYS = (None, "a reason")


@attrs.define
class _Place:
    ident: str
    owner: Hashable
    deadline: int
    single_use: bool


@attrs.define
class NaiveStore:
    """The reference store: every answer computed by scanning lists (R-STORE-2 .. 4)."""

    record_cap: int
    places: list[_Place] = attrs.field(factory=list)
    changed: dict[Hashable, int] = attrs.field(factory=dict)
    tick: int = 0
    closed: list[tuple[str, str, int]] = attrs.field(factory=list)

    def count(self, owner: Hashable) -> int:
        return sum(1 for p in self.places if p.owner == owner)

    def reserve(
        self,
        owner: Hashable,
        ident: str,
        deadline: int,
        per_owner: int,
        total: int,
        now: int,
        single_use: bool,
    ) -> Reserved:
        mine = self.count(owner)
        if mine >= per_owner:  # R-PARK-1
            return Reserved("owner_full")
        answer = Reserved("parked")
        if len(self.places) >= total:  # R-PARK-3
            top = max(self.count(p.owner) for p in self.places)
            if mine >= top:
                return Reserved("server_full")
            holders = {p.owner for p in self.places if self.count(p.owner) == top}
            longest = min(holders, key=lambda o: self.changed[o])  # R-PARK-4
            victim = next(p for p in self.places if p.owner == longest)
            self._free(victim, EVICTED, now)
            answer = Reserved("evicted", victim.ident)
        self.places.append(_Place(ident, owner, deadline, single_use))
        self._changed(owner)
        return answer

    def take(self, ident: str, owner: Hashable, now: int) -> Taken:
        place = next((p for p in self.places if p.ident == ident), None)
        if place is None or not place.single_use:
            why = next((w for i, w, _ in self.closed if i == ident), None)
            return Taken("unknown") if why is None else Taken("closed", why)
        if place.owner != owner:
            return Taken("foreign")
        self._free(place, USED, now)
        return Taken("taken")

    def release(self, ident: str, owner: Hashable, why: str | None, now: int) -> None:
        place = next((p for p in self.places if p.ident == ident and p.owner == owner), None)
        if place is not None:
            self._free(place, why, now)

    def _changed(self, owner: Hashable) -> None:
        self.tick += 1
        self.changed[owner] = self.tick

    def _free(self, place: _Place, why: str | None, now: int) -> None:
        self.places.remove(place)
        self._changed(place.owner)
        if why is None or not place.single_use:
            return
        self.closed.append((place.ident, why, place.deadline))  # R-STORE-4, R-MRTR-14
        while self.closed and (len(self.closed) > self.record_cap or self.closed[0][2] <= now):
            self.closed.pop(0)


def contract_machine(factory: StoreFactory) -> type[RuleBasedStateMachine]:
    """A state machine driving ``factory``'s stores and :class:`NaiveStore` side by side."""

    class StoreContract(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.now = 0
            self.next_id = 0
            self.issued: list[str] = []
            self.taken: set[str] = set()
            self.per_owner = 1
            self.total = 1
            self.ttl = 1
            self.store: Any = None
            self.model = NaiveStore(1)

        @initialize(per_owner=st.integers(1, 3), extra=st.integers(0, 3), ttl=st.integers(1, 6))
        def start(self, per_owner: int, extra: int, ttl: int) -> None:
            self.per_owner, self.total, self.ttl = per_owner, per_owner + extra, ttl
            self.store = factory(self.total)
            self.model = NaiveStore(self.total)

        @rule(owner=st.sampled_from(OWNERS), single_use=st.booleans())
        def reserve(self, owner: Hashable, single_use: bool) -> None:
            ident = f"id{self.next_id}"
            self.next_id += 1
            self.issued.append(ident)
            deadline = self.now + self.ttl
            args = (owner, ident, deadline, self.per_owner, self.total, self.now, single_use)
            self.store, got = self.store.reserve(*args)
            want = self.model.reserve(*args)
            assert got == want, f"reserve{args}: {got} != {want} (R-STORE-2)"

        @rule(data=st.data(), owner=st.sampled_from(OWNERS))
        def take(self, data: st.DataObject, owner: Hashable) -> None:
            ident = data.draw(st.sampled_from([*self.issued, "never reserved"]))
            self.store, got = self.store.take(ident, owner, self.now)
            want = self.model.take(ident, owner, self.now)
            assert got == want, f"take({ident!r}, {owner!r}): {got} != {want} (R-STORE-3)"
            if got.outcome == "taken":
                assert ident not in self.taken, f"{ident} taken twice (R-STORE-3)"
                self.taken.add(ident)

        @rule(data=st.data(), why=st.sampled_from(WHYS))
        def release(self, data: st.DataObject, why: str | None) -> None:
            ident = data.draw(st.sampled_from([*self.issued, "never reserved"]))
            holder = next((p.owner for p in self.model.places if p.ident == ident), None)
            # Mostly its holder, as the reducer names it; else any owner (R-STORE-4)
            owners = OWNERS if holder is None else (holder, holder, holder, *OWNERS)
            owner = data.draw(st.sampled_from(owners))
            self.store = self.store.release(ident, owner, why, self.now)
            self.model.release(ident, owner, why, self.now)

        @rule(by=st.integers(1, 4))
        def advance(self, by: int) -> None:
            self.now += by

        @invariant()
        def counts_agree(self) -> None:
            count = getattr(self.store, "count", None)
            if self.store is None or count is None:
                return
            for owner in OWNERS:
                got, want = count(owner), self.model.count(owner)
                assert got == want <= self.per_owner, f"{owner!r} holds {got}, not {want}"
            held = sum(count(owner) for owner in OWNERS)
            assert held <= self.total, f"{held} places held over the total cap {self.total}"

    return StoreContract


def check_store(
    factory: StoreFactory,
    *,
    examples: int = 60,
    steps: int = 30,
    derandomize: bool = True,
    shrink: bool = True,
) -> None:
    """Fails (AssertionError) unless ``factory``'s stores answer as :class:`NaiveStore` does in
    ``examples`` random histories of up to ``steps`` operations (R-STORE-6). Without
    ``shrink`` the first failing history is reported as found, unshrunk (cheaper)."""
    phases = [Phase.explicit, Phase.generate, *([Phase.shrink] if shrink else [])]
    run_state_machine_as_test(
        contract_machine(factory),
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            derandomize=derandomize,
            suppress_health_check=[HealthCheck.too_slow],
            database=None,
            phases=phases,
        ),
    )
