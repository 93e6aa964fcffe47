"""The coverage-guided fuzzing target of the codec and the message layer (bench/fuzz.py runs it
under atheris; tests/test_fuzz.py replays the saved inputs).

:func:`one_input` takes any bytes and runs them through what a client's line goes through:
:func:`askgate.core.codec.decode`, then the reducer's door as a message on an initialized
connection that can be asked (``MessageReceived``), then, for every worker the step started,
the worker's report (an authorizer that asks, or a tool's value), then the same bytes again (an
answer to the elicitation just sent, a duplicate id). After every step the state must pass
:func:`askgate.core.check_invariants`, and every message the reducer sends must encode. Any
exception is a finding: decode and step must never raise, whatever the bytes.
"""

from __future__ import annotations

import os
from typing import Any

from askgate.core import (
    Ask,
    Effect,
    Event,
    MessageReceived,
    Options,
    Push,
    Reply,
    StartWorker,
    State,
    SubscriberAttached,
    ToolInfo,
    WorkerFinished,
    check_invariants,
    initial_state,
    step,
)
from askgate.core.codec import decode, encode
from askgate.core.jobs import Authorize, RunTool

CONN = "fuzz"
TOOLS = (
    ToolInfo("echo", sensitive=False, derived=False),
    ToolInfo("guarded", sensitive=True, derived=False),
)
INIT = (
    b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
    b'"capabilities":{"elicitation":{}},"clientInfo":{"name":"fuzz","version":"0"}}}'
)
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
SEEDS = (
    INIT,
    INITIALIZED,
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"guarded","arguments":{}}}',
    b'{"jsonrpc":"2.0","id":"e","result":{"action":"accept","content":{"approve":true}}}',
    b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}',
    b'{"jsonrpc":"2.0","id":2,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":3,"method":"tools/list"}',
)


def _base() -> State:
    options = Options(max_parked_elicitations=2, has_authorizer=True, has_read_authorizer=True)
    state = initial_state(options, id_key=b"k" * 32, tools=TOOLS)
    for event in (
        SubscriberAttached(CONN),
        MessageReceived(CONN, INIT, 0),
        MessageReceived(CONN, INITIALIZED, 0),
    ):
        state, _ = step(state, event)
    return state


BASE = _base()


def _step(state: State, event: Event) -> tuple[State, list[Effect]]:
    state, effects = step(state, event)
    check_invariants(state)
    for effect in effects:
        if isinstance(effect, Reply | Push) and effect.message is not None:
            encode(effect.message)
    return state, effects


def _report(job: Any, data: bytes) -> object:
    """What a worker gives back: an authorizer asks, a tool returns text."""
    if isinstance(job, Authorize):
        return Ask("approve?")
    if isinstance(job, RunTool):
        return {"content": [{"type": "text", "text": data[:16].decode("latin-1")}]}
    return {"contents": []}


def one_input(data: bytes) -> None:
    """Runs ``data`` through the codec and the reducer; raises on any finding."""
    decode(data)
    state = BASE
    now = 1
    state, effects = _step(state, MessageReceived(CONN, data, now))
    for _ in range(4):  # the workers each step starts, a few rounds deep
        starts = [e for e in effects if isinstance(e, StartWorker)]
        if not starts:
            break
        for start in starts:
            now += 1
            state, effects = _step(state, WorkerFinished(start.ref, _report(start.job, data), now))
    state, _ = _step(state, MessageReceived(CONN, data, now + 1))


def regressions() -> list[tuple[str, bytes]]:
    """The saved inputs (tests/fuzz_regressions/): every crash a coverage-guided run found, once
    fixed, and a seed that parks a call (so the folder is never empty)."""
    folder = os.path.join(os.path.dirname(__file__), "fuzz_regressions")
    found = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as file:
            found.append((name, file.read()))
    return found
