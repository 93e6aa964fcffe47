"""The examples in examples/ run, and the embedder example really checks the reducer it is given."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from askgate.core import Effect, Event, Push, Resolve, State, TimerFired
from askgate.models.machine import ContextMachine, machine_for

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _withdraws(push: Push) -> bool:
    return push.message.get("method") == "notifications/cancelled"


def test_embedder_example_checks_askgate_core() -> None:
    example = _load("check_your_reducer")
    reducer = example.YourReducer()
    example.check(reducer, examples=15)
    assert reducer.events > 50


QUICK = settings(
    max_examples=300,
    stateful_step_count=30,
    deadline=None,
    database=None,
    phases=[Phase.generate],  # finding it is the point; shrinking would only take longer
    suppress_health_check=[HealthCheck.too_slow],
)


def test_embedder_example_fails_for_a_reducer_that_breaks_the_spec() -> None:
    example = _load("check_your_reducer")

    class Forgetful(example.YourReducer):  # type: ignore[name-defined, misc]
        """Never withdraws a prompt: drops the notifications/cancelled pushes (R-CLOSE-4)."""

        def step(self, state: State, event: Event) -> tuple[State, list[Effect]]:
            state, effects = super().step(state, event)
            return state, [e for e in effects if not (isinstance(e, Push) and _withdraws(e))]

    reducer = Forgetful()
    machine = machine_for(step_fn=reducer.step, initial_state_fn=reducer.initial_state)
    with pytest.raises(AssertionError):
        run_state_machine_as_test(machine, settings=QUICK)


def test_embedder_example_fails_for_a_reducer_that_leaves_a_tool_waiting() -> None:
    example = _load("check_your_reducer")

    class Silent(example.YourReducer):  # type: ignore[name-defined, misc]
        """Never tells a tool its request timed out: drops that Resolve (R-CTX-6)."""

        def step(self, state: State, event: Event) -> tuple[State, list[Effect]]:
            state, effects = super().step(state, event)
            if isinstance(event, TimerFired) and event.key[0] == "client_request":
                effects = [e for e in effects if not isinstance(e, Resolve)]
            return state, effects

    reducer = Silent()
    machine = machine_for(
        step_fn=reducer.step, initial_state_fn=reducer.initial_state, base=ContextMachine
    )
    with pytest.raises(AssertionError):  # a rare path: room to find it on any seed
        run_state_machine_as_test(machine, settings=settings(QUICK, max_examples=1500))
