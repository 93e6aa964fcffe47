"""Exhaustive bounded exploration of the real reducer (``askgate.models.explore``).

``make test`` explores every event sequence of 6 events after the prelude under the tight caps
(one parked call per connection, two in all) and 5 under the shared caps; ``make verify`` goes
deeper. Every state reached passes ``check_invariants``; every transition is checked for
closed-exactly-once, owner-only delivery, and timers and workers in step with the state, and
a running tool's own requests: sent to the owner or refused, resolved once, only while the tool
waits (R-CTX-4 .. R-CTX-6).
Each test below also asserts the exploration really reached the situation its rule is about.
"""

from __future__ import annotations

import functools

import attrs
import pytest

from askgate.core import CancelTimer, Effect, Event, Reply, Resolve, State, TimerFired, step
from askgate.models.explore import SHARED, TIGHT, ExplorationError, Report, explore


@functools.cache
def tight() -> Report:
    return explore(TIGHT, depth=6)


@functools.cache
def shared() -> Report:
    return explore(SHARED, depth=5)


def test_exploration_is_complete_and_large() -> None:
    assert tight().complete
    assert shared().complete
    assert tight().states > 10_000
    assert shared().states > 5_000


def test_R_INV_1_exhaustive_caps_hold_in_every_state() -> None:
    assert "too many elicitations pending" in tight().outcomes
    assert "server_busy" in tight().outcomes


def test_R_INV_4_exhaustive_timers_in_step_on_every_transition() -> None:
    assert {"elicitation timed out", "callback_timeout"} <= tight().outcomes


def test_R_PARK_3_exhaustive_eviction_reached_and_checked() -> None:
    assert "too many elicitations pending on this server" in tight().outcomes


def test_R_CLOSE_3_exhaustive_closed_exactly_once() -> None:
    assert {"declined", "elicitation failed", "result", "withdrawn"} <= tight().outcomes
    assert {"declined", "elicitation failed", "result"} <= shared().outcomes


def test_R_DLV_1_exhaustive_one_reply_per_request_to_its_owner() -> None:
    assert {"ok?", "no", "authorizer failed", "error -32601"} <= tight().outcomes


def test_R_CTX_4_exhaustive_a_tools_request_sent_or_refused() -> None:
    outcomes = tight().outcomes
    assert {"request sent", "resolved: too_many_requests"} <= outcomes
    assert "resolved: client_cannot_elicit" in outcomes
    assert "request sent" in shared().outcomes


def test_R_CTX_5_exhaustive_answered_by_its_owner_only() -> None:
    assert "resolved: answer" in tight().outcomes


def test_R_CTX_6_exhaustive_timed_out_or_withdrawn_with_its_tool() -> None:
    outcomes = tight().outcomes
    assert {"resolved: timed_out", "request withdrawn (timed out)"} <= outcomes
    assert "request withdrawn (request cancelled)" in outcomes


def _forgets_elicitation_timer_cancels(state: State, event: Event) -> tuple[State, list[Effect]]:
    after, effects = step(state, event)
    kept = [e for e in effects if not (isinstance(e, CancelTimer) and e.key[0] == "elicitation")]
    return after, kept


def _miscounts_parked_calls(state: State, event: Event) -> tuple[State, list[Effect]]:
    """A wrong reducer: claims one more parked call than it holds after any park."""
    after, effects = step(state, event)
    if after.parked_total > state.parked_total:
        after = attrs.evolve(after, parked_total=after.parked_total + 1)
    return after, effects


def _leaves_a_timed_out_tool_waiting(state: State, event: Event) -> tuple[State, list[Effect]]:
    """A wrong reducer: drops the Resolve of a client request that timed out (R-CTX-6)."""
    after, effects = step(state, event)
    if isinstance(event, TimerFired) and event.key[0] == "client_request":
        effects = [e for e in effects if not isinstance(e, Resolve)]
    return after, effects


def _answers_twice(state: State, event: Event) -> tuple[State, list[Effect]]:
    """A wrong reducer: every outcome it replies is sent twice."""
    after, effects = step(state, event)
    twice = [e for e in effects if isinstance(e, Reply) and e.message is not None]
    return after, [*effects, *twice]


def _copies_to_a_stranger(state: State, event: Event) -> tuple[State, list[Effect]]:
    """A wrong reducer: the outcome of a call of connection "a" also goes to "b"."""
    after, effects = step(state, event)
    leaked = [
        attrs.evolve(e, conn="b")
        for e in effects
        if isinstance(e, Reply) and e.conn == "a" and e.message is not None
    ]
    return after, [*effects, *leaked]


def test_R_INV_8_exploration_catches_a_call_closed_twice() -> None:
    with pytest.raises(ExplorationError, match="answered twice"):
        explore(TIGHT, depth=4, step_fn=_answers_twice)


def test_R_INV_9_exploration_catches_an_outcome_sent_to_a_stranger() -> None:
    with pytest.raises(ExplorationError, match="that connection has no such request"):
        explore(TIGHT, depth=4, step_fn=_copies_to_a_stranger)


@pytest.mark.parametrize(
    "broken",
    [_forgets_elicitation_timer_cancels, _miscounts_parked_calls, _leaves_a_timed_out_tool_waiting],
)
def test_exploration_catches_a_broken_reducer(broken: object) -> None:
    with pytest.raises(ExplorationError, match="after:"):
        explore(TIGHT, depth=4, step_fn=broken)  # type: ignore[arg-type]
