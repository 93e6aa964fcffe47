"""Run askgate's model-based checks against a reducer of your own.

askgate ships its reference model and Hypothesis state machine (``askgate.models.machine``;
``pip install 'askgate[models]'`` brings Hypothesis) so that an embedder who reimplements or
wraps the reducer can check it against the same spec::

    python examples/check_your_reducer.py --reducer yourpackage.gate:reducer [--examples N]
    python examples/check_your_reducer.py --reducer path/to/gate.py:reducer
    python examples/check_your_reducer.py --command "node my_gate.js"

``--command CMD --explore DEPTH`` runs the explorer's configurations to DEPTH instead, with the
process stepped in lockstep with askgate's own reducer from every state it reaches: it starts
from the explorer's options, tools and ``id_key``, so it must mint its ids as R-ID-1 says, and
give the same effects as askgate on every transition.

``--command`` checks a process instead of a Python object: a program that speaks the sidecar
protocol of spec/embedding.md on its standard input and output (``askgate core`` does, and so
must a reimplementation in another language), driven through
:class:`askgate.sidecar.CommandReducer`. Its states stay in the process; the machines ask it
for their observation, its invariants and its live timers by the checking requests
(``observe``, ``check``, ``timers``, R-EMB-14).

``--reducer`` names your reducer as ``module:attribute`` or ``file.py:attribute``: an object
with ``initial_state(options, tools)`` (a state from askgate's ``Options`` and the
``(name, sensitive)`` tools the machine registers) and ``step(state, event)`` (the same events
and effects as ``askgate.core.step``), or a class or function that returns one when called with
no arguments. If your state is not ``askgate.core.State``, the object also has ``observe``,
``check_invariants`` and ``live_timers`` (see the ``askgate.models.machine`` docstring). Without
``--reducer`` the example checks :class:`YourReducer`, askgate's own reducer behind a wrapper
that counts the events it sees.

The machines also send every client event as the JSON-RPC message that means it
(``MessageReceived``) from the same state and require the same effects (R-PROTO-15); a reducer
that takes only typed events turns that off with ``THROUGH_THE_WIRE = False`` on a subclass of
the machine.

``check`` runs two machines: the general one (every event, every option) and
``ContextMachine``, a profile where tools run at once and ask their client (R-CTX-4 ..
R-CTX-6: elicitation and sampling, answers, timeouts, withdrawals). It exits 0 when your
reducer agreed with the reference model on every step, 1 with the first failing step
(Hypothesis prints the shrunk event sequence; ``--no-shrink`` prints it as found), and 2 when
``--reducer`` names nothing usable or ``--command`` cannot be started.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import traceback
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from askgate import core
from askgate.__main__ import StartError, load_attribute
from askgate.core import Effect, Event, Options, State, ToolInfo
from askgate.models import explore
from askgate.models.machine import ContextMachine, ReducerMachine, machine_for
from askgate.sidecar import CommandReducer, Lockstep, SidecarError


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


class ReducerNotFoundError(Exception):
    """``--reducer`` names nothing that can be checked; the message says why."""


def load_reducer(target: str) -> Any:
    """The reducer ``target`` names (``module:attribute`` or ``file.py:attribute``), loaded as
    ``askgate serve`` loads its TARGET."""
    try:
        found, _ = load_attribute(target)
    except StartError as refused:
        reason = str(refused).removeprefix("askgate refuses to start: ").removeprefix("askgate: ")
        raise ReducerNotFoundError(f"--reducer {target!r}: {reason}") from None
    if isinstance(found, type) or (callable(found) and not hasattr(found, "step")):
        try:
            found = found()  # a class or a factory
        except Exception as failed:
            raise ReducerNotFoundError(
                f"--reducer {target!r}: calling it with no arguments raised "
                f"{type(failed).__name__}: {failed}"
            ) from None
    for needed in ("step", "initial_state"):
        if not callable(getattr(found, needed, None)):
            raise ReducerNotFoundError(
                f"--reducer {target!r}: the reducer has no {needed}() method"
            )
    return found


def check(reducer: Any, examples: int, shrink: bool = True) -> None:
    """Runs the machines against ``reducer``; raises on the first step where it breaks the
    spec, with the event sequence that broke it (shrunk unless ``shrink`` is false)."""
    hooks = {
        f"{name}_fn": getattr(reducer, name)
        for name in ("observe", "check_invariants", "live_timers")
        if callable(getattr(reducer, name, None))
    }
    for base in (ReducerMachine, ContextMachine):
        machine = machine_for(
            step_fn=reducer.step, initial_state_fn=reducer.initial_state, base=base, **hooks
        )
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=examples,
                stateful_step_count=30,
                deadline=None,
                database=None,
                phases=list(Phase) if shrink else [Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )


def explore_in_lockstep(command: CommandReducer, depth: int, configs: list[str] | None) -> int:
    """Runs every configuration of the explorer (``askgate.models.explore``) to ``depth`` with
    ``command`` stepped in lockstep with askgate's reducer (:class:`askgate.sidecar.Lockstep`):
    every transition's checks, and the process's effects equal to askgate's (``configs``: only
    those). 0 when they agree everywhere, 1 with the first path where they do not."""
    lockstep = Lockstep(command)
    for name in configs or sorted(explore.CONFIGS):
        options = explore.CONFIGS[name]
        try:
            report = explore.explore(
                options, depth, step_fn=lockstep.step, modern=name in explore.MODERN_CONFIGS
            )
        except (explore.ExplorationError, AssertionError, SidecarError) as failure:
            print(f"{name}: {failure}", file=sys.stderr)
            print("the process disagreed with askgate's reducer (above)", file=sys.stderr)
            return 1
        print(f"{name}: {report.states} states, {report.transitions} transitions in lockstep")
    print(f"the process agreed with askgate's reducer on {lockstep.steps} steps")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--reducer",
        metavar="MODULE:ATTR",
        help="your reducer, as module:attribute or file.py:attribute (default: askgate's own)",
    )
    parser.add_argument(
        "--command",
        metavar="CMD",
        help="a sidecar process to check instead (spec/embedding.md), e.g. 'askgate core'",
    )
    parser.add_argument("--examples", type=int, default=100, help="runs per machine (default: 100)")
    parser.add_argument(
        "--explore",
        type=int,
        metavar="DEPTH",
        help="with --command: instead of the machines, run the explorer's configurations to "
        "DEPTH with the process in lockstep with askgate's own step (default: off)",
    )
    parser.add_argument(
        "--config",
        action="append",
        choices=sorted(explore.CONFIGS),
        help="with --explore: only this configuration of the explorer (default: all of them)",
    )
    parser.add_argument(
        "--no-shrink",
        action="store_true",
        help="report the first failing sequence as found, unshrunk (shrinking through a "
        "process can take minutes) (default: shrink)",
    )
    args = parser.parse_args(argv)
    if args.command is not None and args.reducer is not None:
        print("give --reducer or --command, not both", file=sys.stderr)
        return 2
    if args.explore is not None and args.command is None:
        print("--explore needs --command", file=sys.stderr)
        return 2
    if args.config and args.explore is None:
        print("--config needs --explore", file=sys.stderr)
        return 2
    if args.command is not None:
        try:
            command = CommandReducer(shlex.split(args.command), inspect=args.explore is None)
        except (OSError, ValueError) as failed:
            print(f"--command {args.command!r}: {failed}", file=sys.stderr)
            return 2
        try:
            if args.explore is not None:
                return explore_in_lockstep(command, args.explore, args.config)
            return _check_counted(command, args.examples, not args.no_shrink)
        finally:
            command.close()
    try:
        reducer: Any = YourReducer() if args.reducer is None else load_reducer(args.reducer)
    except ReducerNotFoundError as refused:
        print(refused, file=sys.stderr)
        return 2
    return _check_counted(reducer, args.examples, not args.no_shrink)


def _check_counted(reducer: Any, examples: int, shrink: bool) -> int:
    """Checks ``reducer``, counting the events it is given, and says how it went."""
    steps = [0]
    step: Callable[[Any, Event], tuple[Any, list[Effect]]] = reducer.step

    def counted(state: Any, event: Event) -> tuple[Any, list[Effect]]:
        steps[0] += 1
        return step(state, event)

    with contextlib.suppress(AttributeError):  # slots or a frozen object: count nothing
        reducer.step = counted
    try:
        check(reducer, examples, shrink)
    except Exception:  # a disagreement, or your reducer raised: Hypothesis shrank it
        traceback.print_exc()
        print("your reducer disagreed with the reference model (above)", file=sys.stderr)
        return 1
    print(f"your reducer agreed with the reference model on {steps[0]} events")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
