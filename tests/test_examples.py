"""The examples in examples/ run, and the embedder example really checks the reducer it is given."""

from __future__ import annotations

import importlib.util
import subprocess
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


@pytest.fixture(autouse=True)
def _fresh_gate_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test writes its gate files in its own folder: forget the ones imported before."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("good_gate", "mute_gate"):
        monkeypatch.delitem(sys.modules, name, raising=False)


_GOOD = """
from askgate import core


class Gate:
    def initial_state(self, options, tools):
        import os

        infos = tuple(core.ToolInfo(n, s, False) for n, s in tools)
        return core.initial_state(options, id_key=os.urandom(32), tools=infos)

    def step(self, state, event):
        return core.step(state, event)


reducer = Gate()
name = "gate"


def broken():
    raise ValueError("no")
"""

_MUTE = _GOOD.replace(
    "return core.step(state, event)",
    "state, effects = core.step(state, event)\n"
    "        return state, [e for e in effects if type(e).__name__ != 'Reply']",
)


def test_check_your_reducer_takes_a_reducer_of_yours_by_file_and_by_module(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = _load("check_your_reducer")
    (tmp_path / "good_gate.py").write_text(_GOOD)
    assert (
        example.main(["--reducer", f"{tmp_path / 'good_gate.py'}:reducer", "--examples", "3"]) == 0
    )
    assert "agreed with the reference model on" in capsys.readouterr().out
    sys.path.insert(0, str(tmp_path))
    try:
        assert example.main(["--reducer", "good_gate:Gate", "--examples", "3"]) == 0
    finally:
        sys.path.remove(str(tmp_path))


def test_check_your_reducer_fails_a_reducer_of_yours_that_breaks_the_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = _load("check_your_reducer")
    (tmp_path / "mute_gate.py").write_text(_MUTE)  # never answers a request
    assert (
        example.main(["--reducer", f"{tmp_path / 'mute_gate.py'}:reducer", "--examples", "50"]) == 1
    )
    assert "disagreed with the reference model" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("nothing", "wants module:attribute"),
        ("missing_gate_module:reducer", "no module named 'missing_gate_module'"),
        ("askgate.core:step", "calling it with no arguments raised TypeError"),
        ("{tmp}/good_gate.py:broken", "calling it with no arguments raised ValueError: no"),
        ("{tmp}/absent.py:reducer", "no file"),
        ("{tmp}/good_gate.py:absent", "has no attribute 'absent'"),
        ("{tmp}/good_gate.py:name", "has no step() method"),
    ],
)
def test_check_your_reducer_refuses_a_target_it_cannot_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, says: str
) -> None:
    example = _load("check_your_reducer")
    (tmp_path / "good_gate.py").write_text(_GOOD)
    assert example.main(["--reducer", target.format(tmp=tmp_path)]) == 2
    assert says in capsys.readouterr().err


def test_the_demo_walkthrough_answers_help_itself_and_starts_nothing(tmp_path: Path) -> None:
    """``examples/demo_walkthrough.py --help`` prints its own usage and exits 0; the other
    arguments it would pass on to the server start nothing (no trace is written)."""
    trace = tmp_path / "never.trace"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "demo_walkthrough.py"), "--help", "--trace", str(trace)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: demo_walkthrough.py")
    assert "passed on to `askgate serve --demo`" in done.stdout
    assert "connected to" not in done.stdout
    assert not trace.exists()
