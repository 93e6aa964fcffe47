"""Records are values (R-INV-10): the one decorator core's records are declared with
(``askgate.core.record.record``), what it builds, and that a step changes no record."""

from __future__ import annotations

import os
import subprocess
import sys

import attrs

from askgate.core import Options, Reply, ToolCallReceived, initial_state, step
from askgate.core.jobs import Authorize
from askgate.core.record import FROZEN_AT_RUN_TIME, record
from askgate.core.sealing import Key
from askgate.core.state import EMPTY_CONN, Call, Stage
from askgate.core.store import MemoryStore

FROZEN_RUN = """
import attrs
from askgate.core.record import FROZEN_AT_RUN_TIME
from askgate.core.state import EMPTY_CONN
from askgate.models import explore

assert FROZEN_AT_RUN_TIME
try:
    EMPTY_CONN.subscribed = True
except attrs.exceptions.FrozenInstanceError:
    pass
else:
    raise SystemExit("a record took an assignment under ASKGATE_FROZEN_RECORDS=1")
for name, options in sorted(explore.CONFIGS.items()):
    report = explore.explore(
        options,
        DEPTH,
        None,
        modern=name in explore.MODERN_CONFIGS,
        principals=name in explore.PRINCIPAL_CONFIGS,
    )
    assert report.complete
    print(name, report.states, report.transitions)
"""


def test_R_INV_10_the_explorer_finds_no_step_changing_a_record_that_refuses_changes() -> None:
    """In a process that builds every record frozen (``ASKGATE_FROZEN_RECORDS=1``), where an
    assignment to any field of any record raises, the bounded explorer runs every
    configuration, four events deep after its prelude, to the end: no step assigns a field of
    a record it was given, built or returned (R-INV-10)."""
    env = {**os.environ, "ASKGATE_FROZEN_RECORDS": "1"}
    code = FROZEN_RUN.replace("DEPTH", "4")
    run = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    explored = [line.split() for line in run.stdout.splitlines()]
    assert len(explored) >= 6
    assert all(int(states) > 100 for _, states, _ in explored)


def test_R_INV_10_records_take_plain_stores_at_run_time_and_compare_by_value() -> None:
    """Outside that check a record is an attrs class whose fields are plain slots (nothing
    refuses an assignment at run time; mypy does), compared and hashed by its fields, as a
    frozen attrs class is."""
    assert not FROZEN_AT_RUN_TIME
    a, b = Reply("c", 1, None), Reply("c", 1, None)
    assert a == b
    assert hash(a) == hash(b)
    assert {a: 1}[b] == 1
    assert a != Reply("c", 2, None)
    assert attrs.has(Reply)
    assert "__dict__" not in dir(a)  # slotted
    state = initial_state(Options(has_authorizer=True), id_key=b"k" * 32)
    assert hash(state) == hash(initial_state(Options(has_authorizer=True), id_key=b"k" * 32))


def test_a_records_repr_is_what_attrs_writes() -> None:
    """A record's ``repr`` (one function for every record class) is the text attrs's generated
    ``__repr__`` gives a class of the same fields: shown fields in order, ``repr=False`` ones
    left out."""
    state = initial_state(Options(has_authorizer=True), id_key=b"k" * 32)
    state, effects = step(state, ToolCallReceived("c", 7, "echo", {"x": 1}, 5))
    samples: list[attrs.AttrsInstance] = [
        *effects,
        EMPTY_CONN,
        Key("k0", b"s" * 32),
        Authorize("echo", {"x": [1, "two"]}),
        MemoryStore(),
        Call(
            "c",
            1,
            True,
            "t",
            {},
            "reply",
            None,
            Stage.RUNNING,
            1,
            "",
            False,
            0,
            0,
            "",
            "",
            ("c", 1),
            "c",
        ),
    ]
    assert effects
    for value in samples:
        cls = type(value)
        fields = attrs.fields(cls)
        twin = attrs.make_class(cls.__name__, {f.name: attrs.field(repr=f.repr) for f in fields})
        same = twin(**{f.name: getattr(value, f.name) for f in fields})
        assert repr(value) == repr(same)
    assert "secret" not in repr(Key("k0", b"s" * 32))


def test_a_record_keeps_its_own_repr() -> None:
    @record
    class Own:
        n: int

        def __repr__(self) -> str:
            return f"<own {self.n}>"

    @record
    class Plain:
        n: int
        hidden: str = attrs.field(default="x", repr=False)

    assert repr(Own(1)) == "<own 1>"
    assert repr(Plain(2)) == "Plain(n=2)"
