"""The reducer against the reference model (askgate.models), step by step, by Hypothesis.

Every ``test_R_*`` test runs :class:`~askgate.models.machine.ReducerMachine` under one *profile*:
options and events that put pressure on the rule the test is named after. Every run checks
everything after every step: the effects against the model's (modulo minted ids), the observed
state, ``check_invariants``, the shell's replayed timers against ``live_timers`` (R-INV-4),
delivery (one reply per request, outcomes only to their owner), a running tool's requests
resolved once and only while it waits (R-CTX-4 .. R-CTX-6), and the eviction oracle on every
ASK (R-PARK-4). Each test then checks, from the machine's tally, that its run really exercised
what it is named after; the R-CTX and R-INV-7 tests share two runs (``Context``,
``ContextChurn``), and R-INV-4 and R-PARK-4 one (``Crowded``), each run once per session. The
last tests plant bugs to show the checks can fail, and pin the one case where the model and the
reducer read the spec differently.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any, ClassVar

import attrs
import hypothesis
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule, run_state_machine_as_test

from askgate import core
from askgate.core import (
    Allow,
    Ask,
    CancelTimer,
    Deny,
    Effect,
    ElicitationAnswered,
    Event,
    Options,
    Push,
    ReadRequested,
    Reply,
    Resolve,
    StartTimer,
    StartWorker,
    TimerFired,
    ToolCallReceived,
    WorkerFinished,
)
from askgate.core.jobs import Authorize, RunTool
from askgate.models.machine import (
    ARGUMENTS,
    PLAIN,
    PRINCIPALS,
    REQUEST_IDS,
    TASK_METAS,
    ContextMachine,
    ModernReadsMachine,
    ReducerMachine,
    TaskMachine,
    machine_for,
    modern_meta,
    small_options,
)

STEPS = 40


def run(
    machine: type[ReducerMachine],
    examples: int,
    *,
    derandomize: bool = False,
    seed: str | None = None,
) -> Counter[str]:
    """Runs ``machine`` for ``examples`` histories; returns what they exercised.
    ``derandomize``: the same histories every run (a rare path a counter asserts). ``seed``:
    the histories of that seed, whatever seed pytest's ``--hypothesis-seed`` forces."""
    if seed is not None:  # on a subclass, which counts in the same ``seen``
        machine = hypothesis.seed(seed)(type(machine.__name__, (machine,), {}))
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            derandomize=derandomize,
        ),
    )
    return machine.seen


class General(ReducerMachine):
    """Every option and every event, small caps; connected at the start or not; now and then
    the server stops."""

    seen: ClassVar[Counter[str]] = Counter()
    STOP_ODDS = 4


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


class Context(ContextMachine):
    """Tools run at once and everyone can be asked and sampled: running tools ask, and their
    clients answer (or not, or from the wrong connection), time out, cancel and go away."""

    seen: ClassVar[Counter[str]] = Counter()


class ContextChurn(ReducerMachine):
    """Authorizers (which have no context), every capability draw, connections that come and
    go, one or two requests per call: a running tool's requests meet every refusal."""

    seen: ClassVar[Counter[str]] = Counter()
    AUTHORIZE_VALUES = (Allow(), Allow(), Allow(), Ask("May I?"), Deny("no"), None)

    def options_strategy(self) -> st.SearchStrategy[Options]:
        return small_options(min_in_flight=3, max_in_flight=4, max_requests=2)


class Modern(ReducerMachine):
    """The 2026-07-28 revision beside 2025 (spec/modern.md): the authorizer mostly asks, small
    caps so that nonces and parked calls evict each other, every kind of retry."""

    seen: ClassVar[Counter[str]] = Counter()
    AUTHORIZE_VALUES = (Ask("May I?"), Ask("Again?"), Allow(), Deny("no"))

    def options_strategy(self) -> st.SearchStrategy[Options]:
        return small_options(authorizer=st.just(True), max_parked=2, max_total=3)


class ModernFull(Modern):
    """Modern ASKs on a server that fills and whose approvals outlive the run: ASKs of either era
    evict nonces rather than wait for them to time out."""

    seen: ClassVar[Counter[str]] = Counter()
    MODERN_META_VALUES = (modern_meta({"elicitation": {}}),)

    def options_strategy(self) -> st.SearchStrategy[Options]:
        return (
            small_options(authorizer=st.just(True), max_parked=1, max_total=2)
            .filter(lambda o: o.max_parked_elicitations_total > o.max_parked_elicitations)
            .map(lambda o: attrs.evolve(o, elicitation_timeout_ms=60_000))
        )


class ModernAsking(ReducerMachine):
    """Modern calls whose tool runs and asks its client at once (R-MRTR-17), beside 2025 calls
    whose tools do (R-CTX-4)."""

    seen: ClassVar[Counter[str]] = Counter()

    def options_strategy(self) -> st.SearchStrategy[Options]:
        return small_options(authorizer=st.just(True), max_parked=2, max_total=3)

    @rule(data=st.data())
    def modern_tool_asks_its_client(self, data: st.DataObject) -> None:
        """A modern call, allowed, whose tool asks its client at once."""
        conn = self._modern_conn(data)
        request_id = data.draw(st.sampled_from(REQUEST_IDS), label="request id")
        meta = modern_meta({"elicitation": {}, "sampling": {}})
        effects = self.apply(
            ToolCallReceived(conn, request_id, PLAIN, ARGUMENTS, self.now, "reply", None, meta)
        )
        authorizers = [e.ref for e in effects if isinstance(e, StartWorker)]
        if authorizers:
            effects = self.apply(WorkerFinished(authorizers[0], Allow(), self.now))
        for e in effects:
            if isinstance(e, StartWorker) and isinstance(e.job, RunTool):
                self._ask(e.ref, data)


# The two runs the R-CTX and R-INV-7 tests share have fixed histories, as the stop's have:
# 300 and 150 of them reach every counter those tests assert (600 and 300 random ones did, and
# cost twice as much), and every history is checked step by step all the same.


@functools.cache
def context_run() -> Counter[str]:
    return run(Context, 300, derandomize=True)


@functools.cache
def context_churn_run() -> Counter[str]:
    return run(ContextChurn, 150, derandomize=True)


@functools.cache
def crowded_run() -> Counter[str]:
    """One run of :class:`Crowded` for R-INV-4 and R-PARK-4: each history is checked for
    every rule after every step, so one run serves both tests' counters."""

    class Machine(Crowded):
        seen: ClassVar[Counter[str]] = Counter()

    return run(Machine, 500)


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
    assert seen["through the wire"], seen  # R-PROTO-15: the transports' entry was driven too


def _modern_missing(seen: Counter[str]) -> list[str]:
    """What a run of :class:`Modern` must reach and did not (R-MRTR-12 .. R-MRTR-16)."""
    missing = [
        name
        for name in (
            "modern input required",
            "modern approve",
            "modern retry denied: request state already used",
            "modern retry denied: request state of another principal",
            "modern retry denied: arguments changed",
            "modern retry denied: request state expired",
            "modern nonce timed out",
        )
        if not seen[name]
    ]
    groups = {
        "forged": (
            "request state tampered",
            "request state malformed",
            "request state key unknown",
        ),
        "refused": ("declined", "cancelled", "not approved"),
    }
    for group, details in groups.items():
        if not any(seen[f"modern retry denied: {detail}"] for detail in details):
            missing.append(group)
    return missing


def test_R_MRTR_13_model_machine_modern_approvals(pytestconfig: pytest.Config) -> None:
    """Modern ASKs park nonces beside 2025 parked calls, and their retries, as asked or forged,
    replayed, foreign, changed or late, meet the model at every step (R-MRTR-12 .. R-MRTR-16)."""
    # Runs of 400 histories missed one of these paths in 2 of 5 runs here (the rules compete
    # with every other), so the run goes on, in batches of 200 and at most 5, until each path
    # was reached; every history is checked step by step all the same. Under a forced seed
    # (``--hypothesis-seed``, as bench/mutate.py runs) every batch would draw the first one's
    # histories again: each batch then has a seed of its own, derived from the forced one.
    forced = pytestconfig.getoption("--hypothesis-seed", None)
    for batch in range(5):  # bounded
        seen = run(Modern, 200, seed=None if forced is None else f"{forced}/{batch}")
        if not _modern_missing(seen):
            break
    assert not _modern_missing(seen), (_modern_missing(seen), seen)
    # A 2025 ASK evicting a nonce was missed by about 1 in 3 runs of 400, so evictions of
    # nonces have their own crowded run (200 histories reached them in each of 16 runs here).
    full = run(ModernFull, 300)
    assert full["modern nonce evicted"], full


def test_R_MRTR_17_model_machine_a_modern_tool_cannot_ask_its_client() -> None:
    """A tool serving a modern call that asks its client is refused at once, as the model says
    (beside 2025 calls whose tools ask as R-CTX-4 says; ContextMachine counts those). Four runs
    of 60 histories here each reached the refusal 45 to 66 times."""
    seen = run(ModernAsking, 60)
    assert seen["client request refused: stateless_request"], seen


class Rounds(ReducerMachine):
    """Modern calls whose authorizer mostly allows, so that their tools run and end rounds of
    their own (R-MRTR-20 .. R-MRTR-23), beside approvals; every kind of retry of either state."""

    seen: ClassVar[Counter[str]] = Counter()
    AUTHORIZE_VALUES = (Allow(), Allow(), Ask("May I?"), Deny("no"))
    AT_ONCE = Allow()
    ROUNDS = ReducerMachine.RUN_VALUES[-3:]

    def options_strategy(self) -> st.SearchStrategy[Options]:
        return small_options(authorizer=st.just(True), max_parked=2, max_total=3)


APPROVE: dict[str, Any] = {"approval": {"action": "accept", "content": {"approve": True}}}
FORM_ROUND = ReducerMachine.RUN_VALUES[-3]  # a tool's own form round (R-MRTR-20)


class ApprovedRounds(ReducerMachine):
    """Modern calls approved by their client, whose tools then end a round of their own: the
    round's state says the call was approved, so its retry runs the tool again without the
    authorizer (R-MRTR-21), recorded approved and parked under no id (R-LOG-2); beside every
    other rule, whose retries replay, forge, move or outlive those states."""

    seen: ClassVar[Counter[str]] = Counter()

    def options_strategy(self) -> st.SearchStrategy[Options]:
        return small_options(authorizer=st.just(True), max_parked=2, max_total=3)

    @precondition(lambda self: not self.stopped)
    @rule(data=st.data())
    def approved_tool_ends_a_round(self, data: st.DataObject) -> None:
        """A modern call its authorizer asks at once, retried as asked and approved; its tool
        ends a form round (which the request declared) at once, and the round's state is
        retried as asked, maybe. Each step can still be refused (caps full, busy, evicted):
        the model says what happens all the same."""
        conn = self._modern_conn(data)
        request_id = data.draw(st.sampled_from(REQUEST_IDS), label="request id")
        principal = data.draw(st.sampled_from(PRINCIPALS), label="principal")
        meta = modern_meta({"elicitation": {}})
        call = ToolCallReceived(
            conn, request_id, PLAIN, ARGUMENTS, self.now, "reply", None, meta, principal=principal
        )
        effects = self.apply(call)
        for _ in range(2):  # the approval's retry, then the round's
            asked = [e.ref for e in effects if isinstance(e, StartWorker)]
            if asked and isinstance(self.running.get(asked[0]), Authorize):
                effects = self.apply(WorkerFinished(asked[0], Ask("May I?"), self.now))
            elif asked and isinstance(self.running.get(asked[0]), RunTool):
                effects = self.apply(WorkerFinished(asked[0], FORM_ROUND, self.now))
            states = len(self.states)
            self._note_states(effects, call)
            if len(self.states) == states or not data.draw(st.integers(0, 3), label="retried"):
                return
            state = self.states[-1][0]
            call = attrs.evolve(call, request_state=state, input_responses=APPROVE)
            self.modern_requests[(conn, request_id)] = call
            effects = self.apply(call)


def test_R_MRTR_20_model_machine_rounds() -> None:
    """A modern tool's own rounds meet the model at every step: asked, refused for a capability
    the request did not declare, retried (at once when approved, else through the authorizer)
    and refused when forged, replayed or late. Random runs of up to 500 histories missed the
    refusal now and then (two probes of 100 random histories asked one round and none), so the
    histories are fixed, as the stop's are: these 300 reach every path below (56 rounds asked,
    40 refused), and every history is checked step by step all the same."""

    def missing(seen: Counter[str]) -> list[str]:
        wanted = ("modern round asked", "modern round missing capability")
        prefixes = ("modern round refused", "modern round retried")
        return [key for key in wanted if not seen[key]] + [
            prefix for prefix in prefixes if not any(key.startswith(prefix) for key in seen)
        ]

    seen = run(Rounds, 300, derandomize=True)
    assert not missing(seen), (missing(seen), seen)


def test_R_MRTR_21_model_machine_an_approved_calls_rounds_are_not_asked_again() -> None:
    """An approved call's tool ends a round; the round's state, retried as asked, runs the tool
    again without its authorizer, and the call's record says approved, parked under no id
    (R-LOG-2: the path where the model once recorded ``""``, which 1300 histories of the
    Modern and Rounds profiles here never reached). Random runs of 60 histories here reached
    the record 5 to 34 times, and once not at all, so the histories are fixed, as the stop's
    are: these 60 reach both counters below (9 times each; without the profile's rule, neither),
    and every history is checked step by step all the same."""
    seen = run(ApprovedRounds, 60, derandomize=True)
    assert seen["modern round retried: RunTool"], seen
    assert seen["call ended approved by its round state"], seen


class ModernReads(ModernReadsMachine):
    """Modern reads beside 2025 calls and reads; the read authorizer (when drawn) mostly asks."""

    seen: ClassVar[Counter[str]] = Counter()
    AUTHORIZE_READ_VALUES = (Allow(), Allow(), Ask("May I read?"), Deny("no"))
    RUN_VALUES = (
        {"content": []},
        {"content": []},
        *ReducerMachine.RUN_VALUES[1:3],
        *ReducerMachine.RUN_VALUES[-3:],
    )

    def options_strategy(self) -> st.SearchStrategy[Options]:
        reads = st.sampled_from((True, True, True, False))  # mostly a read authorizer
        options = small_options(max_parked=2, max_total=3, min_in_flight=2)
        return st.tuples(options, reads).map(
            lambda pair: attrs.evolve(pair[0], has_read_authorizer=pair[1])
        )


def test_R_MRTR_24_model_machine_modern_reads() -> None:
    """Modern ``resources/read``, ``prompts/get`` and ``tools/list`` (R-MRTR-9 .. R-MRTR-11,
    R-MRTR-24) meet the model at every step: answered complete (cacheable or not), refused for
    their ``_meta``, unknown in the revision, denied by a read authorizer that asks (R-READ-2),
    and ending rounds of their own."""
    seen = run(ModernReads, 100, derandomize=True)
    for key in (
        "modern read: complete, cacheable",
        "modern read: complete, not cacheable",
        "modern read: input_required, not cacheable",
        "read error -32090: interactive approval unsupported",
        "read error -32601: None",
        "read error -32022: None",
    ):
        assert seen[key], (key, seen)


class Tasks(TaskMachine):
    """Tasks beside every other rule (spec/tasks.md)."""

    seen: ClassVar[Counter[str]] = Counter()


# The paths each R-TASK test asserts, by rule; one run reaches them all (tasks_run).
TASK_PATHS: dict[str, tuple[str, ...]] = {
    "R-TASK-3": ("tools/call: -32021",),
    "R-TASK-4": ("task created",),
    "R-TASK-5": ("task completed", "task failed"),
    "R-TASK-6": ("task kept inline by a cap",),
    "R-TASK-7": (
        "tasks/get answered",
        "tasks/get: -32602 Unknown task",
        "tasks/get: -32021 Missing required client capability",
    ),
    "R-TASK-8": ("task cancelled",),
    "R-TASK-9": ("task forgotten",),
    "R-TASK-10": ("task input_required", "task input answered by tasks/update"),
}


@functools.cache
def tasks_run() -> Counter[str]:
    """One run of :class:`Tasks` for every R-TASK test. The paths compete with every other
    rule, so it goes on in batches of 50 fixed histories (a seed each), at most 5, until each
    path was reached (4 batches here); every history is checked step by step all the same."""
    paths = [path for group in TASK_PATHS.values() for path in group]
    for batch in range(5):  # bounded
        seen = run(Tasks, 50, seed=f"tasks-{batch}")
        if all(seen[path] for path in paths):
            break
    return seen


def _task_paths_reached(rule: str) -> None:
    seen = tasks_run()
    missing = [path for path in TASK_PATHS[rule] if not seen[path]]
    assert not missing, (rule, missing, seen)


def test_R_TASK_3_model_machine_required_and_undeclared_is_refused() -> None:
    _task_paths_reached("R-TASK-3")


def test_R_TASK_4_model_machine_windows_end_in_tasks() -> None:
    """Task-declaring calls, their inline windows ending by their timer or by their tool
    asking, meet the model at every step, beside every other rule."""
    _task_paths_reached("R-TASK-4")


def test_R_TASK_5_model_machine_a_tasks_call_answers_the_task() -> None:
    _task_paths_reached("R-TASK-5")


def test_R_TASK_6_model_machine_caps_keep_calls_inline() -> None:
    """Calls past an owner's cap or the server's total stay inline, and a task that ends frees
    its place, as the model says, step by step (the random runs reach a cap seldom: tasks end
    before another window of their owner does). A history replayed by hand, with every check
    of the machine: per owner 1, in all 2; alice twice, then bob, then the connection's own."""
    _task_paths_reached("R-TASK-6")
    machine = Tasks()
    options = Options(task_inline_ms=10, max_tasks_per_owner=1, max_tasks_total=2)
    machine.begin(options)
    calls = [("t", 1, "alice"), ("u", 2, "alice"), ("t", 3, "bob"), ("u", 4, None)]
    started = {}
    for conn, rid, principal in calls:
        call = ToolCallReceived(conn, rid, "job", ARGUMENTS, 0, "reply", None, TASK_METAS[0])
        effects = machine.apply(attrs.evolve(call, principal=principal))
        started[(conn, rid)] = next(e.ref for e in effects if isinstance(e, StartWorker))
    became: list[bool] = []
    for key in [("t", 1), ("u", 2), ("t", 3), ("u", 4)]:
        (window,) = [timer for timer in machine.armed if timer[0] == "task" and timer[1][0] == key]
        effects = machine.apply(TimerFired(window, 10))
        became.append(any(isinstance(e, Reply) for e in effects))
    assert became == [True, False, True, False], became  # alice's cap, then the total
    machine.apply(WorkerFinished(started[("t", 1)], {"content": []}, 11))  # alice's task ends
    call = ToolCallReceived("t", 5, "job", ARGUMENTS, 11, "reply", None, TASK_METAS[0])
    machine.apply(attrs.evolve(call, principal="alice"))
    (window,) = [timer for timer in machine.armed if timer[0] == "task"]
    effects = machine.apply(TimerFired(window, 21))  # its place is free: a task again
    assert any(isinstance(e, Reply) and "taskId" in str(e.message) for e in effects), effects


def test_R_TASK_7_model_machine_tasks_get_to_the_owner_only() -> None:
    _task_paths_reached("R-TASK-7")


def test_R_TASK_8_model_machine_tasks_cancel() -> None:
    _task_paths_reached("R-TASK-8")


def test_R_TASK_9_model_machine_finished_tasks_are_forgotten() -> None:
    _task_paths_reached("R-TASK-9")


def test_R_TASK_10_model_machine_inputs_answered_by_tasks_update() -> None:
    _task_paths_reached("R-TASK-10")


def test_R_TASK_4_a_reused_request_id_leaves_the_calls_inline_window() -> None:
    """R-ADM-1, R-TASK-4: a request reusing the id of a call in its inline window is refused
    and the call is untouched: its window stays open. The machine does not draw such a reuse
    (TaskMachine's request ids); this history is that reuse, checked step by step."""
    machine = Tasks()
    machine.begin(Options(has_authorizer=True))
    call = ToolCallReceived("t", 1, "job", ARGUMENTS, 0, "reply", None, TASK_METAS[0])
    machine.apply(call)
    machine.apply(call)  # refused -32600; the model expects nothing else


class Stopping(Modern):
    """The authorizer mostly asking, modern ASKs beside 2025 ones, and every drawn stop rule
    stops: a stop finds calls parked, authorizing and running, and nonces outstanding."""

    seen: ClassVar[Counter[str]] = Counter()
    STOP_ODDS = 1


def test_R_STOP_1_model_machine_server_stopping() -> None:
    """The stop (drawn rarely: it ends the server's life) meets the model at every step, and
    only late events follow it: workers' reports, timers, answers, detaches."""
    # Random runs of 300 histories missed a stop of a parked call about once in five here:
    # the histories are fixed (and reach every counter below). Those of the derandomized run
    # stopped reaching a parked call when the worker share became the owner's (R-ADM-6, more
    # calls answered busy): the seed's reach every counter (15 stops of a parked call).
    seen = run(Stopping, 300, seed="R-STOP-1")
    assert seen["server stopping"], seen
    for stage in ("parked", "authorizing"):
        assert seen[f"stop ended a call: {stage}"], (stage, seen)
    killed = ("running", "unknown_reply", "read_running", "read_authorizing")
    assert sum(seen[f"stop ended a call: {stage}"] for stage in killed) > 1, seen
    assert seen["stop kept a modern nonce"], seen
    assert seen["stop with nothing open did nothing"], seen
    assert seen["late event after the stop"], seen


class PerRequest(ReducerMachine):
    """Subscribers attach per-request connections too (R-SUB-4), with or without a principal:
    modern requests on them share the anonymous owner's cap and share (R-PARK-7, R-ADM-6)."""

    seen: ClassVar[Counter[str]] = Counter()
    ATTACH_PER_REQUEST = (False, True)

    def options_strategy(self) -> st.SearchStrategy[Options]:
        return small_options(authorizer=st.just(True), max_parked=2, max_total=3, max_in_flight=2)


def test_R_PARK_7_model_machine_per_request_connections_share_one_owner() -> None:
    # The histories are fixed; a stateless request without credentials parking is rare in
    # them. This seed's reach both counters (9 and 21); the client_ready rule (R-PARK-8)
    # shifted the histories of the seed before it, which then reached neither.
    seen = run(PerRequest, 150, seed="anon-1")
    assert seen["anonymous owner parked"], seen
    assert seen["busy: principal"], seen


def test_R_INV_3_model_machine_busy_workers() -> None:
    class Machine(Busy):
        seen: ClassVar[Counter[str]] = Counter()

    seen = run(Machine, 300)
    assert seen["busy"], seen
    assert seen["parked"], seen


def test_R_INV_4_model_machine_timers_race_answers() -> None:
    """The machine fires armed timers as often as it answers prompts: they race."""
    seen = crowded_run()
    assert seen["elicitation timed out"], seen
    assert seen["worker timed out"], seen
    assert seen["stale event ignored"], seen


def test_R_INV_5_model_machine_connections_churn() -> None:
    class Machine(Churn):
        seen: ClassVar[Counter[str]] = Counter()

    # Modern calls share the rule budget since 2026-07-28 was modelled: random runs missed
    # this path in 1 of 3 runs here, so the histories are fixed (and reach it).
    seen = run(Machine, 300, derandomize=True)
    assert seen["parked call dropped with its connection"], seen


def test_R_INV_6_model_machine_connections_forgotten() -> None:
    class Machine(TightCaps):
        seen: ClassVar[Counter[str]] = Counter()
        PRECONNECT = False

    seen = run(Machine, 250)
    assert seen["connection forgotten"], seen


def test_R_PARK_4_model_machine_eviction_oracle() -> None:
    """Every eviction and every refusal to evict is checked; the run must see both."""
    seen = crowded_run()
    assert seen["evicted"], seen
    assert seen["refused: server full"], seen


def test_R_CTX_1_model_machine_only_a_running_tool_asks() -> None:
    """Authorizers, read callbacks, the unknown-tool hook and stale refs ask too: refused."""
    seen = context_churn_run() + context_run()
    jobs = ("Authorize", "AuthorizeRead", "RunRead", "UnknownToolReply")
    assert any(seen[f"client request refused: not_running, from {job}"] for job in jobs), seen
    assert seen["client request refused: not_running, from a stale ref"], seen
    assert seen["client request sent: elicitation/create"], seen


def test_R_CTX_4_model_machine_requests_sent_or_refused_in_order() -> None:
    """Every refusal, in the spec's order and with its Failure, and both methods sent."""
    seen = context_churn_run() + context_run()
    for reason in (
        "invalid_request",
        "client_cannot_elicit",
        "client_cannot_sample",
        "too_many_requests",
    ):
        assert seen[f"client request refused: {reason}"], (reason, seen)
    assert seen["client request sent: elicitation/create"], seen
    assert seen["client request sent: sampling/createMessage"], seen


def test_R_CTX_5_model_machine_answers_only_from_the_owner() -> None:
    seen = context_run()
    assert seen["client request answered"], seen
    assert seen["client request: foreign answer ignored"], seen
    assert seen["client request: error"], seen
    assert seen["client request: invalid answer"], seen


def test_R_CTX_6_model_machine_requests_withdrawn_when_they_no_longer_matter() -> None:
    """Timed out (withdrawn and resolved), or withdrawn when the tool's worker ends: finished
    or failed, timed out, cancelled or its caller gone (notified), its connection gone (not)."""
    seen = context_run()
    assert seen["client request timed out"], seen
    ended = {
        "finished": ["WorkerFinished", "WorkerFailed"],
        "timed out": ["TimerFired"],
        "dropped": ["CancelRequested", "CallerExited"],
    }
    for how, events in ended.items():
        assert any(seen[f"client request withdrawn: {e}"] for e in events), (how, seen)
    gone = ["SubscriberDetached", "SubscriberAttached"]
    assert any(seen[f"client request withdrawn silently (connection gone): {e}"] for e in gone)


def test_R_INV_7_model_machine_requests_belong_to_running_tools() -> None:
    """The observed requests agree with the model's, per worker, in order, after every step."""
    seen = context_run() + context_churn_run()
    assert seen["client requests at the per-call cap"], seen
    assert seen["client request answered"], seen


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


def _planted_in_context(bug: str) -> type[ReducerMachine]:
    def step(state: Any, event: Event) -> tuple[Any, list[Effect]]:
        if bug == "foreign answer accepted" and isinstance(event, ElicitationAnswered):  # R-CTX-5
            request = state.client_requests.get(event.elicitation_id)
            if request is not None:
                event = ElicitationAnswered(
                    request.key[0], event.elicitation_id, event.result, event.now, event.error
                )
        state, effects = core.step(state, event)
        if bug == "timeout not resolved" and isinstance(event, TimerFired):  # R-CTX-6
            if event.key[0] == "client_request":
                effects = [e for e in effects if not isinstance(e, Resolve)]
        elif bug == "request not withdrawn":  # R-CTX-6
            effects = [
                e
                for e in effects
                if not (
                    isinstance(e, Push)
                    and e.message.get("method") == "notifications/cancelled"
                    and str(e.message["params"]["requestId"]).startswith("askgate-request-")
                )
            ]
        return state, effects

    return machine_for(step_fn=step, base=ContextMachine)


PLANTED = settings(
    max_examples=300,
    stateful_step_count=STEPS,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.parametrize("bug", ["no withdrawal", "two replies", "timer left armed"])
def test_machine_catches_a_planted_bug(bug: str) -> None:
    with pytest.raises(AssertionError):
        run_state_machine_as_test(_planted(bug), settings=PLANTED)


@pytest.mark.parametrize(
    "bug", ["timeout not resolved", "foreign answer accepted", "request not withdrawn"]
)
def test_machine_catches_a_planted_bug_in_a_tools_requests(bug: str) -> None:
    with pytest.raises(AssertionError):
        run_state_machine_as_test(_planted_in_context(bug), settings=PLANTED)


# ---------------------------------------------------------------------------------------------
# Where the model and the reducer once read the spec differently; R-READ-2 now says which.


def test_R_READ_2_read_authorizer_ask_without_a_string_prompt_is_off_contract() -> None:
    machine = ReducerMachine()
    machine.begin(Options(has_read_authorizer=True))
    effects = machine.apply(ReadRequested("a", 1, "resources/read", {"uri": "file:///x"}, 0))
    (ref,) = [e.ref for e in effects if isinstance(e, StartWorker)]
    machine.apply(WorkerFinished(ref, Ask(None), 0))  # type: ignore[arg-type]


@pytest.mark.parametrize("bug", ["timeout not resolved", "request not withdrawn"])
def test_R_CTX_6_machine_catches_a_tools_request_bug_the_model_shares(bug: str) -> None:
    """The machine's own checks, not only the comparison with the model: the same bug planted
    in the model's effects must still be caught (what an embedder relies on)."""
    base = _planted_in_context(bug)

    class SameBugInModel(base):  # type: ignore[valid-type, misc]
        def _compare_effects(self, ev: Event, real: list[Effect], model: list[Effect]) -> None:
            if bug == "timeout not resolved" and isinstance(ev, TimerFired):
                if ev.key[0] == "client_request":
                    model = [e for e in model if not isinstance(e, Resolve)]
            elif bug == "request not withdrawn":
                model = [
                    e
                    for e in model
                    if not (
                        isinstance(e, Push)
                        and e.message.get("method") == "notifications/cancelled"
                        and str(e.message["params"]["requestId"]).startswith("model-request-")
                    )
                ]
            super()._compare_effects(ev, real, model)

    with pytest.raises(AssertionError, match="R-CTX-6"):
        run_state_machine_as_test(SameBugInModel, settings=settings(PLANTED, max_examples=1000))


# ---------------------------------------------------------------------------------------------
# R-INV-8 and R-INV-9 are properties of steps: the machine checks them by itself, so a bug the
# model shares is still caught.


def _same_bug_in_both(bug: str) -> type[ReducerMachine]:
    def plant(effects: list[Effect]) -> list[Effect]:
        answered = [e for e in effects if isinstance(e, Reply) and e.message is not None][:1]
        if bug == "answered twice":
            return [*effects, *answered]
        strangers = [attrs.evolve(e, conn="b" if e.conn != "b" else "a") for e in answered]
        return [*effects, *strangers]

    def step(state: Any, event: Event) -> tuple[Any, list[Effect]]:
        state, effects = core.step(state, event)
        return state, plant(effects)

    class SameBugInModel(machine_for(step_fn=step, base=Crowded)):  # type: ignore[misc]
        def _compare_effects(self, ev: Event, real: list[Effect], model: list[Effect]) -> None:
            super()._compare_effects(ev, real, plant(model))

    return SameBugInModel


def test_R_INV_8_machine_catches_a_call_answered_twice_even_if_the_model_agrees() -> None:
    with pytest.raises(AssertionError, match="R-DLV-1"):
        run_state_machine_as_test(_same_bug_in_both("answered twice"), settings=PLANTED)


def test_R_INV_9_machine_catches_an_outcome_to_a_stranger_even_if_the_model_agrees() -> None:
    with pytest.raises(AssertionError, match="R-DLV-1"):
        run_state_machine_as_test(_same_bug_in_both("to a stranger"), settings=PLANTED)


def test_R_INV_4_machine_checks_timers_against_the_model_not_only_the_embedders_view() -> None:
    """An embedder's reducer that never arms prompt timers, with a live-timers function and
    model effects that agree, is still caught: the model keeps the spec's timers."""

    def unarmed(effects: list[Effect]) -> list[Effect]:
        return [
            e
            for e in effects
            if not (isinstance(e, StartTimer | CancelTimer) and e.key[0] == "elicitation")
        ]

    def step(state: Any, event: Event) -> tuple[Any, list[Effect]]:
        state, effects = core.step(state, event)
        return state, unarmed(effects)

    def live(state: Any) -> set[Any]:
        return {key for key in core.live_timers(state) if key[0] != "elicitation"}

    base = machine_for(step_fn=step, live_timers_fn=live, base=Crowded)

    class SameBugInModel(base):  # type: ignore[valid-type, misc]
        def _compare_effects(self, ev: Event, real: list[Effect], model: list[Effect]) -> None:
            super()._compare_effects(ev, real, unarmed(model))

    with pytest.raises(AssertionError, match="model's"):
        run_state_machine_as_test(SameBugInModel, settings=PLANTED)


def test_R_PROTO_8_model_machine_lists_tools_as_the_visibility_hook_says() -> None:
    """tools/list against the model: with and without a hook, verdicts on and off contract."""

    class Machine(General):
        seen: ClassVar[Counter[str]] = Counter()
        READ_METHODS = ("tools/list",)
        ATTACH_PRINCIPALS = (None,)  # no draw: the derandomized histories reach the counts

        def options_strategy(self) -> st.SearchStrategy[Options]:
            return small_options(min_in_flight=2).map(
                lambda o: attrs.evolve(o, has_visibility=True)
            )

    run_state_machine_as_test(  # derandomized: the counts below are reached on every run
        Machine,
        settings=settings(
            max_examples=200,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    seen = Machine.seen
    assert seen["tool hidden"], seen
    assert seen["tools listed"], seen
