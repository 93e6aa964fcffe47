"""Exhaustive bounded exploration of the real reducer (``askgate.models.explore``).

``make test`` explores every event sequence of 6 events after the prelude under the tight caps
(one parked call per connection, two in all), 4 under the shared caps, the edge cases and with
no authorizer (each reaches every outcome its tests below assert at 4, and kills every mutant
of bench/mutate.py that it killed 5 deep), 5 for the 2026-07-28 flow with the stop
(``modern``: modern calls, every retry of every state a client keeps, ``ServerStopping``), and
parking owners (``principals``, 4 deep: two sessions of one principal, one connection of none);
tasks (``tasks``, 4 deep: task-declaring calls of three owners, tasks/* from owner and stranger);
``make verify`` goes deeper (shared 10, edges 8, no authorizer 9 deep).
Every state reached passes ``check_invariants``; every transition is checked for
closed-exactly-once, owner-only delivery, and timers and workers in step with the state, and a
running tool's own requests: sent to the owner or refused, resolved once, only while the tool
waits (R-CTX-4 .. R-CTX-6).
In ``modern``, each retry is also judged independently of the reducer (R-MRTR-13, R-MRTR-14),
each input-required state must open for its asker and expire at its nonce's timer (R-MRTR-12),
an eviction on an ASK must take a top holder's oldest entry, and a stop must end every open
call and keep the nonces (R-STOP-1). Each test below also asserts the exploration really reached
the situation its rule is about.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from askgate.core import (
    CancelTimer,
    Effect,
    Event,
    MessageReceived,
    Options,
    Push,
    Reply,
    Resolve,
    ServerStopping,
    State,
    TimerFired,
    ToolCallReceived,
    WorkerFinished,
    step,
)
from askgate.models.explore import (
    APPROVED,
    EDGES,
    MODERN,
    OPEN,
    PRINCIPALS,
    SHARED,
    SHARED_OWNER,
    TASKS,
    TIGHT,
    ExplorationError,
    Report,
    StepFn,
    explore,
)


@functools.cache
def tight() -> Report:
    return explore(TIGHT, depth=6)


@functools.cache
def shared() -> Report:
    return explore(SHARED, depth=4)


@functools.cache
def edges() -> Report:
    return explore(EDGES, depth=4)


@functools.cache
def open_() -> Report:
    return explore(OPEN, depth=4)


@functools.cache
def modern() -> Report:
    return explore(MODERN, depth=5, modern=True)


@functools.cache
def principals() -> Report:
    return explore(PRINCIPALS, depth=4, principals=True)


@functools.cache
def tasks() -> Report:
    return explore(TASKS, depth=4, tasks=True)


def test_R_PARK_1_exhaustive_a_principals_sessions_are_one_owner() -> None:
    """Two sessions of one principal fill its one cap between them (the deny reached), one
    owner holds calls of both, and the connection without a principal evicts from it: every
    eviction on the way took a top owner's oldest place (checked on each transition)."""
    report = principals()
    assert report.complete
    assert SHARED_OWNER in report.outcomes
    assert "too many elicitations pending" in report.outcomes
    assert "evicted to make room on this server" in report.outcomes


def test_exploration_is_complete_and_large() -> None:
    assert tight().complete
    assert shared().complete
    assert edges().complete
    assert open_().complete
    assert modern().complete
    assert tight().states > 10_000
    assert shared().states > 2_000
    assert edges().states > 3_000
    assert open_().states > 2_000
    assert modern().states > 3_000


SMALL = [
    pytest.param(TIGHT, False, False, id="tight"),
    pytest.param(EDGES, False, False, id="edges"),
    pytest.param(OPEN, False, False, id="open"),
    pytest.param(MODERN, True, False, id="modern"),
    pytest.param(PRINCIPALS, False, True, id="principals"),
]


@pytest.mark.parametrize(("options", "modern", "principals"), SMALL)
def test_exploration_figures_do_not_depend_on_the_search_order(
    options: Options, modern: bool, principals: bool
) -> None:
    """Issue #29: the same tree gave ``make verify`` different transition counts from run to
    run. The search meets states in an order that follows the maps' hash order (it changes
    with ``PYTHONHASHSEED``), and expands the first of each class of equal keys: every state of
    a class must then have the same moves and successors. Searching with each state's moves
    in reverse order must give the same states, transitions and outcomes."""
    forward = explore(options, depth=3, modern=modern, principals=principals)
    backward = explore(options, depth=3, modern=modern, principals=principals, reverse=True)
    assert forward.complete
    assert backward.complete
    assert (backward.states, backward.transitions, backward.outcomes) == (
        forward.states,
        forward.transitions,
        forward.outcomes,
    )


def test_exploration_figures_agree_across_hash_seeds() -> None:
    """Issue #29: two runs of ``python -m askgate.models.explore`` with different
    ``PYTHONHASHSEED`` (so different orders of every ``immutables.Map`` and set of strings)
    print the same states, transitions and outcomes."""
    command = [sys.executable, "-m", "askgate.models.explore", "--depth", "3"]
    command += ["--config", "tight", "--config", "modern"]
    runs = [
        subprocess.Popen(
            command,
            cwd=Path(__file__).resolve().parent.parent,
            env={**os.environ, "PYTHONHASHSEED": seed},
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in ("0", "1")
    ]
    outputs = []
    for run in runs:
        out, _ = run.communicate(timeout=300)
        assert run.returncode == 0
        outputs.append(re.sub(r"\d+\.\ds,", "", out))  # the seconds each run took
    assert "tight (parked" in outputs[0]
    assert "modern (parked" in outputs[0]
    assert outputs[0] == outputs[1]


def test_R_INV_1_exhaustive_caps_hold_in_every_state() -> None:
    assert "too many elicitations pending" in tight().outcomes
    assert "server_busy" in tight().outcomes


def test_R_INV_4_exhaustive_timers_in_step_on_every_transition() -> None:
    assert {"elicitation timed out", "callback_timeout"} <= tight().outcomes


def test_R_PARK_3_exhaustive_eviction_reached_and_checked() -> None:
    assert "evicted to make room on this server" in tight().outcomes


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


def test_R_CAP_3_exhaustive_capability_eviction_reached() -> None:
    assert "client_capabilities_evicted" in edges().outcomes


def test_R_ADM_0_exhaustive_malformed_ids_refused() -> None:
    assert any(o.startswith("error -32600: Invalid request id") for o in edges().outcomes)


def test_R_ADM_1_exhaustive_reused_ids_refused_and_the_call_untouched() -> None:
    assert any(o.startswith("error -32600: Request id already") for o in edges().outcomes)


def test_R_ADM_3_exhaustive_late_sensitive_tool_denied_without_authorizer() -> None:
    assert "sensitive tool unguarded" in open_().outcomes
    assert "result" in open_().outcomes


def test_R_TOOL_2_exhaustive_an_unregistered_tool_is_never_run() -> None:
    assert "error -32601: Tool not found: echo" in edges().outcomes


def test_R_READ_2_exhaustive_reads_denied_never_parked() -> None:
    assert {"interactive approval unsupported", "no", "error -32090"} <= edges().outcomes


def test_R_CLOSE_2_exhaustive_every_refusal_reached() -> None:
    refusals = {"declined", "cancelled", "not approved", "elicitation failed"}
    assert refusals | {"elicitation timed out"} <= edges().outcomes
    assert "evicted to make room on this server" in tight().outcomes


def test_R_WORK_3_exhaustive_failing_callbacks_answer_callback_failed() -> None:
    assert {"callback_failed", "authorizer failed", "error -32603"} <= edges().outcomes


def test_R_MRTR_12_exhaustive_a_modern_ask_parks_a_nonce_under_the_shared_caps() -> None:
    outcomes = modern().outcomes
    assert {"call_parked", "nonce evicted", "too many elicitations pending"} <= outcomes
    assert "evicted to make room on this server" in outcomes  # a 2025 call, by either era


def test_R_MRTR_13_exhaustive_a_retry_runs_the_tool_once_only_when_approved() -> None:
    retries = {o for o in modern().outcomes if o.startswith("retry: ")}
    assert {"retry: ran", "retry: busy", "retry: declined"} <= retries
    assert {
        "retry: arguments changed",
        "retry: request state tampered",
        "retry: request state expired",
        "retry: request state of another principal",
    } <= retries
    assert "retry: None" not in retries


def test_R_MRTR_14_exhaustive_replayed_and_evicted_states_denied() -> None:
    outcomes = modern().outcomes
    assert "nonce closed by a retry" in outcomes
    assert "retry: request state already used" in outcomes
    assert "retry: evicted to make room on this server" in outcomes


def test_R_MRTR_15_exhaustive_nonces_time_out_and_are_evicted_silently() -> None:
    assert {"nonce timed out", "nonce evicted"} <= modern().outcomes


def test_R_STOP_1_exhaustive_every_open_call_ends_at_the_stop() -> None:
    outcomes = modern().outcomes
    assert {"server stopping", "server_stopping", "nonce kept at the stop"} <= outcomes


def test_R_TASK_4_exhaustive_windows_end_in_a_task_or_inline() -> None:
    """Every inline window is exactly task_inline_ms long, and a task is made, or kept inline by
    a cap, when it ends (R-TASK-6); its call then answers the task (R-TASK-5)."""
    report = tasks()
    assert report.complete
    assert report.states > 1_000
    assert {"task created", "task kept inline by a cap", "task completed: result"} <= (
        report.outcomes
    )


def test_R_TASK_7_exhaustive_another_owner_gets_what_an_unknown_task_gets() -> None:
    """Every tasks/get and tasks/cancel of another owner's task, in every state reached, is
    answered as one of an unknown task and changes nothing (checked on each transition)."""
    assert "error -32602: Unknown task" in tasks().outcomes


def test_R_TASK_8_exhaustive_cancel_kills_the_worker() -> None:
    assert "task cancelled" in tasks().outcomes


def test_R_TASK_9_exhaustive_forgotten_only_after_its_ttl() -> None:
    assert "task forgotten" in tasks().outcomes


def test_R_TASK_10_exhaustive_an_ask_in_a_task_ends_in_the_deny() -> None:
    """An ASK in a task waits in input_required; a declined or timed-out one completes the
    task with the deny, a crash fails it (R-TASK-5)."""
    outcomes = tasks().outcomes
    assert {"task input_required", "task completed: declined"} <= outcomes
    assert "task completed: elicitation timed out" in outcomes
    assert "task failed: {'error': 'callback_timeout'}" in outcomes


def test_R_TASK_4_tasks_figures_do_not_depend_on_the_search_order() -> None:
    forward = explore(TASKS, depth=3, tasks=True)
    backward = explore(TASKS, depth=3, tasks=True, reverse=True)
    assert (forward.states, forward.transitions) == (backward.states, backward.transitions)


def _forgets_elicitation_timer_cancels(state: State, event: Event) -> tuple[State, list[Effect]]:
    after, effects = step(state, event)
    kept = [e for e in effects if not (isinstance(e, CancelTimer) and e.key[0] == "elicitation")]
    return after, kept


def _miscounts_parked_calls(state: State, event: Event) -> tuple[State, list[Effect]]:
    """A wrong reducer: claims one more parked call than it holds after any park."""
    after, effects = step(state, event)
    if after.parked_total > state.parked_total:
        after = attrs.evolve(after, store=attrs.evolve(after.store, total=after.store.total + 1))
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


def _drops_push_outcomes(state: State, event: Event) -> tuple[State, list[Effect]]:
    """A wrong reducer: a push-mode call's outcome is never pushed."""
    after, effects = step(state, event)
    return after, [e for e in effects if not (isinstance(e, Push) and "method" not in e.message)]


def _empties_outcomes(state: State, event: Event) -> tuple[State, list[Effect]]:
    """A wrong reducer: a call's outcome is replied as nothing, as if it had been dropped."""
    after, effects = step(state, event)
    return after, [
        attrs.evolve(e, message=None)
        if isinstance(e, Reply) and e.message is not None and "result" in e.message
        else e
        for e in effects
    ]


def _answers_a_stale_worker(state: State, event: Event) -> tuple[State, list[Effect]]:
    """A wrong reducer: a stale worker's result is replied to the call it once served."""
    after, effects = step(state, event)
    if isinstance(event, WorkerFinished) and event.ref not in state.workers:
        effects = [*effects, Reply("a", 1, {"jsonrpc": "2.0", "id": 1, "result": {}})]
    return after, effects


def _misroutes(method: str) -> StepFn:
    def step_fn(state: State, event: Event) -> tuple[State, list[Effect]]:
        """A wrong reducer: pushes of ``method`` go to the next connection."""
        after, effects = step(state, event)
        following = {"a": "b", "b": "c", "c": "a"}
        return after, [
            attrs.evolve(e, conn=following[str(e.conn)])
            if isinstance(e, Push) and e.message.get("method") == method
            else e
            for e in effects
        ]

    return step_fn


@pytest.mark.parametrize(
    ("broken", "options", "complaint"),
    [
        (_answers_twice, TIGHT, "answered twice"),
        (_drops_push_outcomes, TIGHT, "ended with 0 outcomes"),
        (_empties_outcomes, TIGHT, "ended by|new request"),
        (_answers_a_stale_worker, EDGES, "no such request|replied but still open"),
    ],
)
def test_R_INV_8_exploration_catches_a_call_closed_twice_or_never(
    broken: StepFn, options: Options, complaint: str
) -> None:
    with pytest.raises(ExplorationError, match=complaint):
        explore(options, depth=4, step_fn=broken)


@pytest.mark.parametrize(
    ("broken", "complaint"),
    [
        (_copies_to_a_stranger, "that connection has no such request"),
        (_misroutes("elicitation/create"), "elicitation/create for"),
        (_misroutes("notifications/cancelled"), "notifications/cancelled for"),
    ],
)
def test_R_INV_9_exploration_catches_an_outcome_or_prompt_sent_to_a_stranger(
    broken: StepFn, complaint: str
) -> None:
    with pytest.raises(ExplorationError, match=complaint):
        explore(TIGHT, depth=4, step_fn=broken)


def _ignores_the_stop(state: State, event: Event) -> tuple[State, list[Effect]]:
    """A wrong reducer: ``ServerStopping`` does nothing (R-STOP-1)."""
    if isinstance(event, ServerStopping):
        return state, []
    return step(state, event)


def _takes_any_answer_as_approval(state: State, event: Event) -> tuple[State, list[Effect]]:
    """A wrong reducer: a modern retry runs with any ``inputResponses`` (R-MRTR-13)."""
    if isinstance(event, ToolCallReceived) and event.request_state is not None:
        event = attrs.evolve(event, input_responses=APPROVED)
    if isinstance(event, MessageReceived) and isinstance(event.data, bytes):  # its wire form
        message = json.loads(event.data)
        if "requestState" in message.get("params", {}):
            message["params"]["inputResponses"] = APPROVED
            event = attrs.evolve(event, data=json.dumps(message).encode())
    return step(state, event)


@pytest.mark.parametrize(
    ("broken", "complaint"),
    [
        (_ignores_the_stop, "R-STOP-1"),
        (_takes_any_answer_as_approval, "R-MRTR-13"),
    ],
)
def test_R_MRTR_13_exploration_catches_a_wrong_stop_or_retry(
    broken: StepFn, complaint: str
) -> None:
    with pytest.raises(ExplorationError, match=complaint):
        explore(MODERN, depth=3, step_fn=broken, modern=True)


@pytest.mark.parametrize(
    "broken",
    [_forgets_elicitation_timer_cancels, _miscounts_parked_calls, _leaves_a_timed_out_tool_waiting],
)
def test_exploration_catches_a_broken_reducer(broken: object) -> None:
    with pytest.raises(ExplorationError, match="after:"):
        explore(TIGHT, depth=4, step_fn=broken)  # type: ignore[arg-type]
