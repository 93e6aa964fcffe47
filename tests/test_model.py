"""The reducer against the reference model (askgate.models), step by step, by Hypothesis.

Every ``test_R_*`` test runs :class:`~askgate.models.machine.ReducerMachine` under one *profile*:
options and events that put pressure on the rule the test is named after. Every run checks
everything after every step: the effects against the model's (modulo minted ids), the observed
state, ``check_invariants``, the shell's replayed timers against ``live_timers`` (R-INV-4),
delivery (one reply per request, outcomes only to their owner), and the eviction oracle on every
ASK (R-PARK-4). Each test then checks, from the machine's tally, that its run really exercised
what it is named after. The last tests plant bugs to show the checks can fail, and pin the one
case where the model and the reducer read the spec differently.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from askgate import core
from askgate.core import (
    Allow,
    Ask,
    CancelTimer,
    Deny,
    Effect,
    Event,
    Options,
    Push,
    ReadRequested,
    Reply,
    StartWorker,
    WorkerFinished,
)
from askgate.models.machine import ReducerMachine, machine_for, small_options

STEPS = 40


def run(machine: type[ReducerMachine], examples: int) -> Counter[str]:
    """Runs ``machine`` for ``examples`` histories; returns what they exercised."""
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    return machine.seen


class General(ReducerMachine):
    """Every option and every event, small caps; connected at the start or not."""

    seen: ClassVar[Counter[str]] = Counter()


class TightCaps(ReducerMachine):
    """Every cap at or near its minimum: each one fills within a step or two."""

    seen: ClassVar[Counter[str]] = Counter()

    def options_strategy(self) -> st.SearchStrategy[Options]:
        return small_options(max_parked=1, max_total=2, max_in_flight=2, max_caps=1)


class Crowded(ReducerMachine):
    """Everyone can be asked and the authorizer mostly asks: the server fills and evicts."""

    seen: ClassVar[Counter[str]] = Counter()
    PRECONNECT = True
    AUTHORIZE_VALUES = (Ask("May I?"), Ask("Again?"), Allow(), Deny("no"))

    def options_strategy(self) -> st.SearchStrategy[Options]:
        return small_options(authorizer=st.just(True), max_parked=2, max_total=3).filter(
            lambda o: o.max_client_capabilities == 3 and o.max_parked_elicitations_total > 1
        )


class Churn(ReducerMachine):
    """Connections come and go, and lose their capabilities, while their calls are open."""

    seen: ClassVar[Counter[str]] = Counter()

    def options_strategy(self) -> st.SearchStrategy[Options]:
        return small_options(authorizer=st.just(True), max_caps=2)


class Busy(ReducerMachine):
    """One or two workers for everybody: admissions, approvals and reads find the bounds full."""

    seen: ClassVar[Counter[str]] = Counter()
    PRECONNECT = True

    def options_strategy(self) -> st.SearchStrategy[Options]:
        return small_options(authorizer=st.just(True), max_in_flight=2)


def test_R_INV_1_model_machine_tight_caps() -> None:
    class Machine(TightCaps):
        seen: ClassVar[Counter[str]] = Counter()

    seen = run(Machine, 250)
    assert seen["busy"], seen
    assert seen["capabilities evicted"], seen


def test_R_INV_2_model_machine_general() -> None:
    class Machine(General):
        seen: ClassVar[Counter[str]] = Counter()

    seen = run(Machine, 600)
    assert seen["parked"], seen
    assert seen["outcome pushed"], seen


def test_R_INV_3_model_machine_busy_workers() -> None:
    class Machine(Busy):
        seen: ClassVar[Counter[str]] = Counter()

    seen = run(Machine, 300)
    assert seen["busy"], seen
    assert seen["parked"], seen


def test_R_INV_4_model_machine_timers_race_answers() -> None:
    """The machine fires armed timers as often as it answers prompts: they race."""

    class Machine(Crowded):
        seen: ClassVar[Counter[str]] = Counter()

    seen = run(Machine, 300)
    assert seen["elicitation timed out"], seen
    assert seen["worker timed out"], seen
    assert seen["stale event ignored"], seen


def test_R_INV_5_model_machine_connections_churn() -> None:
    class Machine(Churn):
        seen: ClassVar[Counter[str]] = Counter()

    seen = run(Machine, 300)
    assert seen["parked call dropped with its connection"], seen


def test_R_INV_6_model_machine_connections_forgotten() -> None:
    class Machine(TightCaps):
        seen: ClassVar[Counter[str]] = Counter()
        PRECONNECT = False

    seen = run(Machine, 250)
    assert seen["connection forgotten"], seen


def test_R_PARK_4_model_machine_eviction_oracle() -> None:
    """Every eviction and every refusal to evict is checked; the run must see both."""

    class Machine(Crowded):
        seen: ClassVar[Counter[str]] = Counter()

    seen = run(Machine, 500)
    assert seen["evicted"], seen
    assert seen["refused: server full"], seen


# ---------------------------------------------------------------------------------------------
# The checks can fail: planted bugs in the reducer's effects are caught.


def _planted(bug: str) -> type[ReducerMachine]:
    def step(state: Any, event: Event) -> tuple[Any, list[Effect]]:
        state, effects = core.step(state, event)
        if bug == "no withdrawal":  # R-CLOSE-4
            effects = [
                e
                for e in effects
                if not (
                    isinstance(e, Push) and e.message.get("method") == "notifications/cancelled"
                )
            ]
        elif bug == "two replies":  # R-DLV-1
            effects = [*effects, *[e for e in effects if isinstance(e, Reply)][:1]]
        elif bug == "timer left armed":  # R-INV-4
            effects = [e for e in effects if not isinstance(e, CancelTimer)]
        return state, effects

    return machine_for(step_fn=step, base=Crowded)


@pytest.mark.parametrize("bug", ["no withdrawal", "two replies", "timer left armed"])
def test_machine_catches_a_planted_bug(bug: str) -> None:
    with pytest.raises(AssertionError):
        run_state_machine_as_test(
            _planted(bug),
            settings=settings(
                max_examples=300,
                stateful_step_count=STEPS,
                deadline=None,
                derandomize=True,
                database=None,
                phases=[Phase.generate],
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )


# ---------------------------------------------------------------------------------------------
# Where the model and the reducer once read the spec differently; R-READ-2 now says which.


def test_R_READ_2_read_authorizer_ask_without_a_string_prompt_is_off_contract() -> None:
    machine = ReducerMachine()
    machine.begin(Options(has_read_authorizer=True))
    effects = machine.apply(ReadRequested("a", 1, "resources/read", {"uri": "file:///x"}, 0))
    (ref,) = [e.ref for e in effects if isinstance(e, StartWorker)]
    machine.apply(WorkerFinished(ref, Ask(None), 0))  # type: ignore[arg-type]
