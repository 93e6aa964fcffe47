"""Run askgate's model-based checks against a reducer of your own.

askgate ships its reference model and Hypothesis state machine (``askgate.models.machine``)
so that an embedder who reimplements or wraps the reducer can check it against the same spec.
This example points the machine at ``askgate.core`` through the hooks an embedder overrides,
with a wrapper standing in for "your" reducer (here it only counts the events it sees):

    python examples/check_your_reducer.py [--examples N]

Swap ``YourReducer`` for your implementation: ``initial_state`` builds a state from askgate's
``Options`` and the ``(name, sensitive)`` tools the machine registers, ``step`` takes and
returns the same events and effects as ``askgate.core.step``. If your state is not
``askgate.core.State``, also give ``observe_fn``, ``check_invariants_fn`` and ``live_timers_fn``
(see the ``askgate.models.machine`` docstring). The machines also send every client event as
the JSON-RPC message that means it (``MessageReceived``) from the same state and require the
same effects (R-PROTO-15); a reducer that takes only typed events turns that off with
``THROUGH_THE_WIRE = False`` on a subclass of the machine.

``check`` runs two machines: the general one (every event, every option) and
``ContextMachine``, a profile where tools run at once and ask their client (R-CTX-4 ..
R-CTX-6: elicitation and sampling, answers, timeouts, withdrawals).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from askgate import core
from askgate.core import Effect, Event, Options, State, ToolInfo
from askgate.models.machine import ContextMachine, ReducerMachine, machine_for


class YourReducer:
    """A stand-in for an embedder's reducer: askgate's own, behind a thin wrapper."""

    def __init__(self) -> None:
        self.events = 0

    def initial_state(self, options: Options, tools: Any) -> State:
        infos = tuple(ToolInfo(name, sensitive, False) for name, sensitive in tools)
        return core.initial_state(options, id_key=os.urandom(32), tools=infos)

    def step(self, state: State, event: Event) -> tuple[State, list[Effect]]:
        self.events += 1
        return core.step(state, event)


def check(reducer: YourReducer, examples: int) -> None:
    """Runs the machines against ``reducer``; raises on the first step where it breaks the
    spec."""
    for base in (ReducerMachine, ContextMachine):
        machine = machine_for(
            step_fn=reducer.step, initial_state_fn=reducer.initial_state, base=base
        )
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=examples,
                stateful_step_count=30,
                deadline=None,
                database=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=100)
    args = parser.parse_args()
    reducer = YourReducer()
    check(reducer, args.examples)
    print(f"your reducer agreed with the reference model on {reducer.events} events")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
