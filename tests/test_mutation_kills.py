"""Tests that kill mutants the rest of the suite let survive (``make mutate``, bench/mutate.py).

Each test names the rule it checks and, in its docstring, the mutant of bench/mutate.py that
survived every other test file: the gap it closes.
"""

from __future__ import annotations

import attrs
import pytest

from askgate.core import (
    Ask,
    CallerExited,
    CancelTimer,
    InvariantError,
    Push,
    Reply,
    StartTimer,
    check_invariants,
)
from askgate.core.codec import Invalid, Request, decode
from tests.harness import Harness, deny_payload, elicitation_id, pushes


def test_R_PARK_4_eviction_is_applied_before_the_park_it_makes_room_for() -> None:
    """Kills ``evict-after-park``: the same end state, but the new prompt went out first."""
    h = Harness(has_authorizer=True, max_parked_elicitations=3, max_parked_elicitations_total=3)
    for conn in ("a", "b", "c"):
        h.connect(conn)
    victim = h.park("a", 1)
    h.park("a", 2)
    h.park("b", 1)
    h.call("c", 9)
    effects = h.finish(h.worker(), Ask("ok?"))
    new = elicitation_id(effects)

    evicted = [
        effects.index(CancelTimer(("elicitation", victim))),
        next(
            i
            for i, e in enumerate(effects)
            if isinstance(e, Push) and e.message.get("method") == "notifications/cancelled"
        ),
        next(i for i, e in enumerate(effects) if isinstance(e, Reply) and e.conn == "a"),
    ]
    parked = [
        next(
            i
            for i, e in enumerate(effects)
            if isinstance(e, StartTimer) and e.key == ("elicitation", new)
        ),
        next(
            i
            for i, e in enumerate(effects)
            if isinstance(e, Push) and e.message.get("method") == "elicitation/create"
        ),
    ]
    assert max(evicted) < min(parked), effects
    denied = effects[evicted[2]]
    assert isinstance(denied, Reply)
    assert denied.message is not None
    assert deny_payload(denied.message)["detail"] == "evicted to make room on this server"


def test_R_CLOSE_4_a_caller_exit_withdraws_its_parked_prompt() -> None:
    """Kills ``caller-exit-no-withdraw``: only timeout and cancel were checked to withdraw."""
    h = Harness(has_authorizer=True)
    h.connect("a")
    eid = h.park("a", 1, caller="k")
    h.park("a", 2, caller="other")
    effects = h.feed(CallerExited("k", 0))
    assert [
        (p.conn, p.message["method"], p.message["params"]["requestId"]) for p in pushes(effects)
    ] == [("a", "notifications/cancelled", eid)]
    assert Reply("a", 1, None) in effects


def test_R_INV_1_check_catches_a_connection_over_its_parked_cap() -> None:
    """Kills ``check-misses-per-connection-parked-cap``: only the total caps were corrupted."""
    h = Harness(has_authorizer=True, max_parked_elicitations=2, max_parked_elicitations_total=4)
    h.connect("a")
    h.park("a", 1)
    h.park("a", 2)
    check_invariants(h.state)
    options = attrs.evolve(h.state.options, max_parked_elicitations=1)
    with pytest.raises(InvariantError, match=r"R-INV-1: 'a' has 2 parked over its cap"):
        check_invariants(attrs.evolve(h.state, options=options))


def test_R_INV_1_check_catches_a_connection_over_its_worker_share() -> None:
    """Kills ``check-misses-per-connection-share``: only max_in_flight was corrupted."""
    h = Harness(max_in_flight=4, max_in_flight_per_connection=2)
    h.call("a", 1)
    h.call("a", 2)
    check_invariants(h.state)
    options = attrs.evolve(h.state.options, max_in_flight_per_connection=1)
    with pytest.raises(InvariantError, match=r"R-INV-1: 'a' has 2 workers over its share"):
        check_invariants(attrs.evolve(h.state, options=options))


def test_R_INV_5_check_catches_a_parked_owner_without_subscriber_or_capabilities() -> None:
    """Kills ``check-misses-unsubscribed-parked-owner``: the existing corruption also broke the
    capability group, so the R-CAP-3 check caught it whether or not R-INV-5 was checked."""
    h = Harness(has_authorizer=True)
    h.connect("a")
    h.park("a", 1)
    state = h.state
    c = state.conns["a"]
    gone = attrs.evolve(c, subscribed=False, can_elicit=False, cap_group="", cap_pos=-1)
    broken = attrs.evolve(
        state, conns=state.conns.set("a", gone), cap_live=state.cap_live.remove(c.cap_pos)
    )
    with pytest.raises(InvariantError, match="R-INV-5"):
        check_invariants(broken)


def test_R_WIRE_6_depth_64_is_accepted_when_more_than_64_brackets_are_open_in_all() -> None:
    """Kills ``codec-depth-minus-one``: with at most 64 brackets in all, the depth is never
    computed (the count alone bounds it), so only a message with more brackets than its
    depth tells ``> 64`` from ``>= 64``."""
    head = b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":'
    for depth, accepted in ((64, True), (65, False)):
        data = head + b"[" * (depth - 2) + b"]" * (depth - 2) + b',"b":[]}}'
        assert data.count(b"[") + data.count(b"{") > depth
        result = decode(data)
        assert isinstance(result, Request) is accepted
        if not accepted:
            assert isinstance(result, Invalid)
            assert result.reason == "nesting deeper than 64"
