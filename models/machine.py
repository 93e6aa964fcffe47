"""A Hypothesis state machine that checks a reducer against the reference model, step by step.

:class:`ReducerMachine` feeds every event to the reducer under test and to
:class:`~askgate.models.reference.ReferenceModel`, and after every step checks:

* **effects**: equal, in order, modulo the ids each side mints. Elicitation ids, a running
  tool's request ids (R-CTX-4) and worker refs are bound one to one in order of first
  appearance, each kind apart, and may first appear only where they are minted (``StartWorker``,
  an elicitation or client-request ``StartTimer``, the ``elicitation/create`` or
  ``sampling/createMessage`` push); a reducer elicitation id must have R-ID-1's format and a
  request id the same with ``askgate-request-``, no two ids of either kind share their suffix
  (R-ID-1: one counter for both), and an id the reducer reuses cannot be bound to a second model
  id, so reuse fails. ``Resolve`` compares exactly but for the ref (the tokens are the
  machine's own);
* **state**: the :class:`~askgate.models.reference.Observation` of both (tools, subscribers,
  parked calls per connection in order, elicitations, workers, in-flight counts, capability
  entries in order, open calls, totals and ``top``, known connections, the sampling flags, a
  running tool's outstanding requests by id and per worker in order) are equal, and the caps
  and bookkeeping rules hold on it (R-INV-1, R-INV-2, R-INV-5, R-INV-6, R-INV-7); then
  ``check_invariants(state)`` (R-INV-1 .. R-INV-7);
* **timers** (R-INV-4): the shell's armed timers, replayed from ``StartTimer``, ``CancelTimer``
  and ``TimerFired``, equal ``live_timers(state)``; a timer is never armed twice nor cancelled
  when not armed; the running workers are exactly those with a worker timer (R-WORK-1), the
  outstanding client requests exactly those with a client-request timer;
* **delivery** (R-DLV-1, R-DLV-3, R-DROP-4, R-CLOSE-4): every request gets exactly one
  ``Reply``, to the connection and id it came with (a step that receives a request answers no
  other); a push-mode call's outcome is pushed once, to its owner; a call that ends gets an
  outcome unless it was dropped, and a drop delivers none; ``elicitation/create`` and
  ``notifications/cancelled`` go only to the elicitation's owner; a ``Push`` about a call names
  its request id in ``related``; nothing is pushed on a detach; a tool's own request is pushed
  to its call's owner and withdrawn only from it (R-CTX-4, R-CTX-6);
* **resolution** (R-CTX-4 .. R-CTX-6), from the shell's side: every ``ToolRequested`` is either
  resolved in its step (a refusal) or left outstanding; a ``Resolve`` goes only to a token that
  waits, with the ref it asked from, once; a request that ends while its tool runs (answered,
  timed out) is resolved, one whose tool ended is not;
* **the eviction oracle** (R-AUTH-3, R-PARK-1, R-PARK-3, R-PARK-4), on every ASK the reducer
  receives, from the observed state before the step and independently of the model: a call
  evicted to make room was the oldest parked call of an owner holding the most, one that
  reached that count no later than any other holder, the asker's owner held fewer and parked in
  its place; a deny that did not evict was right to refuse (and a park that did not evict had
  room). Owners are the oracle's own (R-PARK-1): attaches draw a principal (none, ``alice`` or
  ``bob``), and a principal's connections are one owner.

The universe is small so that histories collide: connections ``a``, ``b``, ``c``; request ids
``0``, ``1``, ``2``, ``"x"`` (and invalid ones); a plain tool, a sensitive one and an unknown
name; callers ``p`` and ``q``. Worker events pick mostly live refs (from the ``StartWorker``
effects seen) and sometimes stale or unknown ones; answers pick mostly live elicitation ids
(from ``elicitation/create`` pushes) from their owner, and sometimes stale, foreign or garbage
ones, with every kind of answer. A running tool's own requests (``ToolRequested``) come mostly
from running tools, sometimes from authorizers, read callbacks or stale refs, with well-formed
or malformed params and other methods; answers to them come from the owner or another
connection (result objects, garbage, JSON-RPC errors), and the timer rule fires their timers.
Progress and logs (R-CTX-2, R-CTX-3) are not drawn: the reference model leaves them out.
``ServerStopping`` (R-STOP-1) is drawn rarely (a rule of three arguments that stops one time in
``STOP_ODDS``; never unless a profile sets it), since it ends the server's life: after it, the
rules that connect, register tools or send requests are off, and only late events come
(workers' reports, timers, answers, detaches, caller exits, the stale noise).

Modern ``tools/call`` requests (spec/modern.md) come in bursts from connections that mostly did
not initialize, with or without a principal, with ``_meta`` that allows a form elicitation, does
not, or is refused; an authorizer mostly asks at once. Each ``requestState`` the reducer answers
with is bound to the model's (kind ``state``: minted by each side, never compared byte for byte)
and kept; retries take a kept state (mostly a recent one) and retry as asked, replay it, present
it from another principal or connection, with other arguments or another tool, forged (one byte
of it flipped, or cut short, on both sides alike) or after its expiry, with every kind of
``inputResponses``. A nonce's id is bound like an elicitation id (``askgate-mrtr-`` and R-ID-1's
suffix); a nonce is observed parked under ``(owner, id)`` and needs no subscriber. The eviction
oracle also accepts a silently evicted nonce as the victim, and leaves modern askers to the
model.
Options are drawn per run (see :meth:`options_strategy`).

Two profiles add rules of their own (so that the other profiles' fixed histories do not move):
:class:`ModernReadsMachine` sends modern reads (R-MRTR-9 .. R-MRTR-11, R-MRTR-24), and
:class:`TaskMachine` tools that support tasks, task-declaring calls and ``tasks/*`` (spec/tasks.md).
A task's call lives on a channel the reducer names ``TaskChannel(task id)`` and the model
``ModelChannel(its task id)``; task ids (kind ``tid``, minted by ``CreateTaskResult``, R-ID-1's
format with ``askgate-task-``) and inline windows' timer idents (kind ``window``) are bound like
the other ids. Nothing addressed to a channel reaches the shell, so the delivery and withdrawal
checks leave a task's call to the comparison with the model (and the eviction oracle leaves a
step that may evict a task's parked call to it too); the tasks' timers are checked against the
model's (``live_timers`` is R-INV-4's, which names none).

Every client event (a tool call, a read, a ping, an ``initialize`` with its request id, an
answer, a cancel) is stepped twice from the same state: as the typed event, and as the
``MessageReceived`` carrying the JSON-RPC message that means it (``door.wire_event``), the entry
the transports use. Both must give the same effects and the same state (R-PROTO-15); the run
goes on from the message's state, and ``seen["through the wire"]`` counts them. A reducer that
takes only typed events sets ``THROUGH_THE_WIRE = False`` on its subclass.

Reusing it
----------
The implementation under test is reached only through five hooks, which default to
:mod:`askgate.core`. To check another implementation, subclass and override them (or call
:func:`machine_for`), then run the class with Hypothesis::

    class MyMachine(ReducerMachine):
        def initial_state_fn(self, options, tools): return my.initial(options, tools)
        def step_fn(self, state, event): return my.step(state, event)
        def check_invariants_fn(self, state): my.check(state)
        def live_timers_fn(self, state): return my.timers(state)
        def observe_fn(self, state): return Observation(...)

    TestMine = MyMachine.TestCase        # or run_state_machine_as_test(MyMachine)

``tools`` is a tuple of ``(name, sensitive)``. A subclass can also narrow the runs it draws:
:meth:`options_strategy`, the ``*_VALUES`` tuples of worker results, ``ANSWERS``,
``CLIENT_ANSWERS``, ``TOOL_REQUESTS``, ``CAPABILITIES``, and ``PRECONNECT`` (every connection
subscribes and initializes with ``PRECONNECT_CAPABILITIES`` before the first rule; by default
drawn per run). ``seen`` counts the oracle's
verdicts and what the steps exercised (evictions, busy answers, timeouts, withdrawn prompts,
forgotten connections...), so a test can check that a run was not idle; give a subclass its own
``seen`` to count apart. :meth:`ReducerMachine.begin` and :meth:`ReducerMachine.apply` replay a
history by hand, outside Hypothesis, with every check. :class:`ContextMachine` is such a
subclass: a profile where tools run at once and ask their client (R-CTX-4 .. R-CTX-6).
An ``observe_fn`` must fill ``Observation.can_sample``, ``client_requests`` and
``worker_requests`` (they default to empty: an observer that leaves them out still builds,
and fails as soon as a tool's request is outstanding).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any, ClassVar

import attrs
from hypothesis import event as label
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from askgate import core
from askgate.core import door, sealing
from askgate.core.decisions import Allow, Ask, Deny, Failure, NeedsInput, Raised
from askgate.core.effects import (
    CancelTimer,
    Effect,
    Emit,
    KillWorker,
    Push,
    Reply,
    Resolve,
    StartTimer,
    StartWorker,
)
from askgate.core.events import (
    CallerExited,
    CancelRequested,
    ClientInitialized,
    ClientReady,
    ElicitationAnswered,
    Event,
    PingReceived,
    ReadRequested,
    ServerStopping,
    SubscriberAttached,
    SubscriberDetached,
    TimerFired,
    ToolCallReceived,
    ToolRegistered,
    ToolRequested,
    ToolUnregistered,
    WorkerFailed,
    WorkerFinished,
)
from askgate.core.jobs import (
    Authorize,
    AuthorizeRead,
    FilterTools,
    Job,
    RunRead,
    RunTool,
    UnknownToolReply,
)
from askgate.core.options import Options
from askgate.core.state import State, TaskChannel

from .reference import (
    CLIENT_REQUEST_TIMER,
    ELICIT,
    EVICTED,
    META_CAPABILITIES,
    META_VERSION,
    MODEL_NONCE_PREFIX,
    MODEL_REQUEST_PREFIX,
    MODERN_VERSION,
    SAMPLE,
    TASKS_EXTENSION,
    TOO_MANY_ON_SERVER,
    TOO_MANY_PENDING,
    TTL_TIMER,
    WINDOW_TIMER,
    CallKey,
    ModelChannel,
    Observation,
    ReferenceModel,
    is_request_id,
)

TimerKey = tuple[str, Any]
# (name, sensitive), or (name, sensitive, task support) (R-TASK-1)
Tools = tuple[tuple[Any, ...], ...]
TASK_TIMERS = (WINDOW_TIMER, TTL_TIMER)
TASK_ID = re.compile(r"^askgate-task-[A-Za-z0-9_-]{22}$")  # R-TASK-4, R-ID-1
ELICITATION_ID = re.compile(r"^askgate-elicit-[A-Za-z0-9_-]{22}$")  # R-ID-1
NONCE_ID = re.compile(r"^askgate-mrtr-[A-Za-z0-9_-]{22}$")  # R-MRTR-12, R-ID-1
CLIENT_REQUEST_ID = re.compile(r"^askgate-request-[A-Za-z0-9_-]{22}$")  # R-CTX-4, R-ID-1
ID_KEY = b"askgate-model-machine-key-0123456789"

CONNS: tuple[str, ...] = ("a", "b", "c")
REQUEST_IDS: tuple[object, ...] = (0, 1, 2, "x")
BAD_REQUEST_IDS: tuple[object, ...] = (None, True, 1.5)
INITIALIZE_IDS: tuple[object, ...] = (None, None, "init", "init", 0, True)
VERSIONS: tuple[object, ...] = (
    None,
    "2025-11-25",
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
    "1999-01-01",
    7,
)
CALLERS: tuple[str, ...] = ("p", "q")
PLAIN, SENSITIVE, UNKNOWN = "echo", "rm", "ghost"
MALFORMED_CALLS: tuple[tuple[Any, object], ...] = ((7, {}), (PLAIN, None), (PLAIN, []), (None, 1))
READ_METHODS: tuple[str, ...] = ("resources/read", "prompts/get", "tools/list")
UNKNOWN_REF = 10**6  # a ref no worker ever had
ARGUMENTS: dict[str, Any] = {"path": "/tmp/x"}
METAS: tuple[object, ...] = (None, None, {"progressToken": "t"}, {"progressToken": 1.5}, [])
PARAMS: dict[str, dict[str, Any]] = {  # well-formed params of each read method (R-PROTO-7)
    "resources/read": {"uri": "file:///tmp/x"},
    "prompts/get": {"name": "greet"},
    "tools/list": {},
    "logging/setLevel": {"level": "info"},
}
# A modern read's methods (R-MRTR-9, R-MRTR-11, R-MRTR-24): the reads, and one the stateless
# revision does not have (drawn only where it is served statelessly).
MODERN_READ_METHODS: tuple[str, ...] = (
    "resources/read",
    "prompts/get",
    "resources/read",
    "prompts/get",
    "tools/list",
    "logging/setLevel",
)
AFTER_MS = st.sampled_from((0, 1, 100, 10_000))
FORM: dict[str, Any] = {
    "message": "Who are you?",
    "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
}
SAMPLING: dict[str, Any] = {
    "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
    "maxTokens": 100,
}


PRINCIPALS: tuple[str | None, ...] = (None, None, "alice", "bob")


def modern_meta(capabilities: object, version: object = MODERN_VERSION) -> dict[str, Any]:
    """A modern request's ``_meta`` (R-MRTR-9)."""
    return {META_VERSION: version, META_CAPABILITIES: capabilities}


# A modern request's own capabilities (R-MRTR-12, R-MRTR-16) and refused ``_meta`` (R-MRTR-10).
MODERN_METAS: tuple[object, ...] = (
    modern_meta({"elicitation": {}}),
    modern_meta({"elicitation": {"form": {}}}),
    modern_meta({"elicitation": {}}),
    modern_meta({}),
    modern_meta({"elicitation": {"url": {}}}),
    modern_meta({"elicitation": {}}, "2099-01-01"),
    modern_meta({"elicitation": {}}, 7),
    {META_VERSION: MODERN_VERSION},
)
# A retry's ``inputResponses`` (R-MRTR-13).
INPUT_RESPONSES: tuple[object, ...] = (
    {"approval": {"action": "accept", "content": {"approve": True}}},
    {"approval": {"action": "accept", "content": {"approve": True}}},
    {"approval": {"action": "decline"}},
    {"approval": {"action": "cancel"}},
    {"approval": {"action": "accept", "content": {"approve": False}}},
    {"approval": "accept"},
    {},
    None,
    [],
)
# How a retry differs from the call that was asked (R-MRTR-4, R-MRTR-13, R-MRTR-14).
RETRY_KINDS: tuple[str, ...] = (
    "same",
    "same",
    "replay",
    "replay",
    "foreign principal",
    "other connection",
    "changed arguments",
    "other tool",
    "tampered",
    "truncated",
    "expired",
)


def flip(token: str, index: int) -> str:
    """``token`` with one byte of its decoded form flipped (a forged state), re-encoded."""
    raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    raw[index % len(raw)] ^= 1
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


def same(a: object, b: object) -> bool:
    """Equality that also tells ``1`` from ``True`` and ``1.0``, at any depth."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        assert isinstance(b, list | tuple)
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def deny_of(message: dict[str, Any] | None) -> tuple[object, object] | None:
    """``(decision, detail)`` of a ``tools/call`` deny, or ``None`` for any other message."""
    if message is None:
        return None
    result = message.get("result")
    if not isinstance(result, dict):
        return None
    payload = result.get("structuredContent")
    if not isinstance(payload, dict) or payload.get("error") != "authorization_required":
        return None
    return payload.get("decision"), payload.get("detail")


def is_response(message: dict[str, Any]) -> bool:
    return "method" not in message and ("result" in message or "error" in message)


@st.composite
def small_options(
    draw: st.DrawFn,
    authorizer: st.SearchStrategy[bool] | None = None,
    max_parked: int = 4,
    max_total: int = 6,
    max_in_flight: int = 4,
    max_caps: int = 3,
    max_requests: int = 3,
    min_in_flight: int = 1,
    min_share: int = 1,
    min_caps: int = 1,
) -> Options:
    """Small caps, so that they fill within a few steps (``min_*`` narrow a profile without
    filtering; a share of ``None`` is half of ``max_in_flight``)."""
    per_conn = draw(st.integers(1, max_parked))
    total = draw(st.integers(per_conn, max(per_conn, max_total)))
    in_flight = draw(st.integers(min_in_flight, max_in_flight))
    share = draw(st.none() | st.integers(min(min_share, in_flight), in_flight))
    return Options(
        elicitation_timeout_ms=draw(st.sampled_from([1_000, 1, 60_000])),
        max_parked_elicitations=per_conn,
        max_parked_elicitations_total=total,
        max_client_capabilities=draw(st.integers(min_caps, max_caps)),
        max_in_flight=in_flight,
        max_in_flight_per_connection=share,
        callback_timeout_ms=draw(st.sampled_from([5_000, 1, 300_000])),
        has_authorizer=draw(
            st.sampled_from([True, True, False]) if authorizer is None else authorizer
        ),
        has_read_authorizer=draw(st.booleans()),
        has_visibility=draw(st.booleans()),
        has_unknown_tool_reply=draw(st.booleans()),
        max_client_requests_per_call=draw(st.integers(1, max_requests)),
    )


class ReducerMachine(RuleBasedStateMachine):
    """The reducer and the reference model, driven by the same events (see the module doc)."""

    # What the runs draw; a subclass may narrow them.
    CAPABILITIES: ClassVar[tuple[object, ...]] = (
        {"elicitation": {}},
        {"elicitation": {}},
        {"elicitation": {"form": {}}},
        {"elicitation": {"url": {}}},
        {},
        {"elicitation": {"form": {}, "url": {}}},
        {"elicitation": True},
        None,
        {"elicitation": {"form": True}},
        {"elicitation": {}, "sampling": {}},
        {"sampling": {}},
        {"elicitation": {"form": {}}, "sampling": {"tools": {}}},
        {"elicitation": {}, "sampling": True},
    )
    MODERN_META_VALUES: ClassVar[tuple[object, ...]] = MODERN_METAS
    AUTHORIZE_VALUES: ClassVar[tuple[object, ...]] = (
        Ask("May I?"),
        Ask("May I?"),
        Allow(),
        Ask("Really?"),
        Deny("no"),
        Ask(None),  # type: ignore[arg-type]  # off-contract: R-AUTH-4
        Deny(7),  # type: ignore[arg-type]
        "allow",
        None,
    )
    RUN_VALUES: ClassVar[tuple[object, ...]] = (
        {"content": []},
        "not an object",
        Failure(-32002, "Resource not found", {"uri": "file:///tmp/x"}),
        None,
        Failure("-1", "a code that is not an int"),  # type: ignore[arg-type]
        # A callback ending a round of its own (R-MRTR-20 .. R-MRTR-22): a form with a state,
        # sampling (which some requests do not declare), one it may not end.
        NeedsInput({"name": {"method": "elicitation/create", "params": FORM}}, {"step": 1}),
        NeedsInput({"s": {"method": "sampling/createMessage", "params": {}}}),
        NeedsInput({}),
    )
    UNKNOWN_REPLY_VALUES: ClassVar[tuple[object, ...]] = ("no such tool here", None, 7)
    # What a modern call's authorizer answers when it answers at once (mostly an ASK), and what
    # a tool it allowed may end a round with at once (none: it does not).
    AT_ONCE: ClassVar[object] = Ask("May I?")
    ROUNDS: ClassVar[tuple[object, ...]] = ()
    READ_METHODS: ClassVar[tuple[str, ...]] = READ_METHODS
    # A visibility hook's verdict on one tool (R-PROTO-8): listed, hidden, raised, off-contract.
    VERDICTS: ClassVar[tuple[object, ...]] = (
        True,
        True,
        False,
        Raised("KeyError"),
        1,
        "yes",
        None,
    )
    AUTHORIZE_READ_VALUES: ClassVar[tuple[object, ...]] = (
        Allow(),
        Ask("May I read?"),
        Deny("no"),
        Deny(7),  # type: ignore[arg-type]
        "allow",
    )
    ANSWERS: ClassVar[tuple[tuple[object, object], ...]] = (  # (result, error)
        ({"action": "accept", "content": {"approve": True}}, None),
        ({"action": "decline"}, None),
        ({"action": "cancel"}, None),
        ({"action": "accept", "content": {"approve": "true"}}, None),
        ({"action": "accept", "content": {"approve": 1}}, None),
        ({"action": "accept", "content": {"approve": False}}, None),
        ({"action": "accept"}, None),
        ({"content": {"approve": True}}, None),
        ({"action": "ACCEPT", "content": {"approve": True}}, None),
        (None, None),
        ("accept", None),
        (None, {"code": -32603, "message": "boom"}),
        ({"action": "accept", "content": {"approve": True}}, {"code": -1, "message": "late"}),
    )
    # A running tool's own requests: (method, params), well-formed and not (R-CTX-4).
    TOOL_REQUESTS: ClassVar[tuple[tuple[object, object], ...]] = (
        (ELICIT, FORM),
        (ELICIT, FORM),
        (SAMPLE, SAMPLING),
        (SAMPLE, SAMPLING),
        (ELICIT, {**FORM, "mode": "url", "url": "https://example.com"}),
        (SAMPLE, {**SAMPLING, "temperature": 0.5}),
        (ELICIT, {"message": 7, "requestedSchema": {}}),
        (ELICIT, {"message": "hi"}),
        (ELICIT, {"message": "hi", "requestedSchema": []}),
        (ELICIT, SAMPLING),
        (SAMPLE, {"messages": {}, "maxTokens": 10}),
        (SAMPLE, {"messages": [], "maxTokens": True}),
        (SAMPLE, {"messages": [], "maxTokens": 1.0}),
        (SAMPLE, FORM),
        (SAMPLE, None),
        ("roots/list", {}),
        ("tools/call", FORM),
        (None, FORM),
    )
    # Answers to a tool's own request: (result, error) (R-CTX-5).
    CLIENT_ANSWERS: ClassVar[tuple[tuple[object, object], ...]] = (
        ({"action": "accept", "content": {"name": "Ada"}}, None),
        ({"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}, None),
        ({"action": "decline"}, None),
        ({}, None),
        ("accept", None),
        (None, None),
        ([{"action": "accept"}], None),
        (None, {"code": -32600, "message": "no", "data": {"why": "user"}}),
        (None, {"code": "-1", "message": 7}),
        (None, {"code": True, "message": "a bool is no code"}),
        (None, "boom"),
        ({"action": "accept"}, {"code": -1, "message": "late"}),
    )
    PRECONNECT: ClassVar[bool | None] = None  # None: drawn per run
    PRECONNECT_CAPABILITIES: ClassVar[object] = {"elicitation": {}}
    THROUGH_THE_WIRE: ClassVar[bool] = True  # also feed each client event as its message
    # A drawn stop rule stops one time in STOP_ODDS (1: every time; 0, the default: never, so
    # that a profile's run is not cut short by a stop unless it asks for stops).
    STOP_ODDS: ClassVar[int] = 0
    # The principals a subscriber attaches with (R-SUB-1, R-PARK-1): a principal's connections
    # are one parking owner.
    ATTACH_PRINCIPALS: ClassVar[tuple[str | None, ...]] = PRINCIPALS
    # Whether a subscriber attaches a per-request connection (R-SUB-4, R-PARK-7); one value: no
    # draw (the default, so that the profiles' histories do not move).
    ATTACH_PER_REQUEST: ClassVar[tuple[bool, ...]] = (False,)
    # Tools that declare task support (R-TASK-1): (name, sensitive, support); none by default.
    TASK_TOOLS: ClassVar[Tools] = ()
    seen: ClassVar[Counter[str]] = Counter()

    # -- the implementation under test ---------------------------------------------------------

    def initial_state_fn(self, options: Options, tools: Tools) -> Any:
        infos = tuple(core.ToolInfo(t[0], t[1], False, _definition(*t)) for t in tools)
        return core.initial_state(options, id_key=ID_KEY, tools=infos)

    def step_fn(self, state: Any, event: Event) -> tuple[Any, list[Effect]]:
        return core.step(state, event)

    def check_invariants_fn(self, state: Any) -> None:
        core.check_invariants(state)

    def live_timers_fn(self, state: Any) -> set[TimerKey]:
        return core.live_timers(state)

    def observe_fn(self, state: Any) -> Observation:
        s: core.State = state
        return Observation(
            tools={name: t.sensitive for name, t in s.tools.items()},
            subscribed=frozenset(conn for conn, c in s.conns.items() if c.subscribed),
            known=frozenset(s.conns.keys()) | frozenset(s.store.owners.keys()),
            parked={owner: list(h.queue) for owner, h in s.store.owners.items()},
            elicitations={eid: p.key for eid, p in s.parked.items()},
            workers=dict(s.workers.items()),
            in_flight={conn: n for conn, n in s.in_flight.items() if n},
            caps_unsubscribed=list(s.cap_unsubscribed),
            caps_live=list(s.cap_live),
            can_elicit={conn: c.can_elicit for conn, c in s.conns.items() if c.has_caps},
            open={key: (call.stage.value, call.replied) for key, call in s.calls.items()},
            parked_total=s.store.total,
            in_flight_total=s.in_flight_total,
            top=s.store.top,
            can_sample={conn: c.can_sample for conn, c in s.conns.items() if c.has_caps},
            client_requests={
                rid: (r.key, r.ref, r.token, r.method) for rid, r in s.client_requests.items()
            },
            worker_requests={ref: list(rids) for ref, rids in s.worker_requests.items()},
            tasks={
                tid: (t.owner, t.status, t.call, tuple(key for key, _ in t.inputs))
                for tid, t in s.tasks.items()
            },
        )

    def options_strategy(self) -> st.SearchStrategy[Options]:
        return small_options()

    # -- set-up ----------------------------------------------------------------------------------

    def __init__(self) -> None:
        super().__init__()
        self.options = Options()
        self.state: Any = None
        self.model = ReferenceModel(self.options)
        self.obs: Observation | None = None
        self.now = 0
        self.steps = 0
        # id bijections, reducer <-> model: "eid" for elicitation ids, "rid" for a running tool's
        # request ids, "ref" for worker refs
        # ("state" for a modern requestState: bound, never compared byte for byte)
        self.to_model: dict[str, dict[object, object]] = {
            "eid": {},
            "rid": {},
            "ref": {},
            "state": {},
            "tid": {},  # task ids (R-TASK-4)
            "window": {},  # an inline window's timer ident (R-TASK-4)
        }
        self.to_real: dict[str, dict[object, object]] = {k: {} for k in self.to_model}
        # The modern approvals asked: (state, conn, principal, tool, arguments, meta)
        self.states: list[tuple[str, str, str | None, str, dict[str, Any], object]] = []
        self.forged: dict[str, str] = {}  # a forged state -> the model's, forged the same way
        self.modern_calls: dict[CallKey, bool] = {}  # an open call -> served statelessly
        # The last modern tools/call sent under each key: a round's state is noted against it.
        self.modern_requests: dict[tuple[object, object], ToolCallReceived] = {}
        self.armed: dict[TimerKey, int] = {}  # the shell's armed timers and their deadlines
        self.disarmed: list[TimerKey] = []
        self.running: dict[int, Job] = {}  # the shell's running workers
        self.started: list[int] = []
        self.eids: list[str] = []  # in minting order, never sorted (see elicitation_answered)
        self.rids: list[str] = []  # the same for a running tool's request ids
        self.suffixes: set[str] = set()  # R-ID-1: one counter for both kinds of id
        self.waiting: dict[Hashable, int] = {}  # the shell's tools waiting: token -> ref
        self.tokens = 0
        self.awaiting_reply: set[CallKey] = set()
        self.awaiting_push: set[CallKey] = set()
        self.count_changed_at: dict[Hashable, int] = {}  # the oracle's own R-PARK-4 clock
        self.principal_of: dict[Hashable, str] = {}  # conn -> its subscriber's principal
        self.per_request: set[Hashable] = set()  # conns attached per request (R-SUB-4)
        # (conn, request id) -> the owner a 2025 call was admitted under (R-PARK-5)
        self.admitted_owner: dict[CallKey, Hashable] = {}
        self.stopped = False  # ServerStopping was fed: only late events come (R-STOP-1)

    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        options = data.draw(self.options_strategy(), label="options")
        preconnect = self.PRECONNECT
        if preconnect is None:
            preconnect = data.draw(st.booleans(), label="preconnect")
        self.begin(options, preconnect=preconnect)

    def begin(self, options: Options, *, preconnect: bool = False) -> None:
        """Starts both sides with ``options``; also for replaying a history by hand::

        m = ReducerMachine()
        m.begin(Options(has_authorizer=True))
        m.apply(SubscriberAttached("a"))  # raises AssertionError on any disagreement
        """
        self.options = options
        tools: Tools = (
            ((PLAIN, False), (SENSITIVE, True)) if options.has_authorizer else ((PLAIN, False),)
        )
        tools += self.TASK_TOOLS
        self.state = self.initial_state_fn(options, tools)
        self.model = ReferenceModel(options, tools)
        self.check_invariants_fn(self.state)
        self.obs = self._observe_and_compare(None)
        if preconnect:
            for conn in CONNS:
                self.apply(SubscriberAttached(conn))
                self.apply(ClientInitialized(conn, self.PRECONNECT_CAPABILITIES))

    # -- the rules -------------------------------------------------------------------------------
    # Hypothesis orders rules by their number of arguments and draws the first ones more often.
    # The rules that move calls along (connect, request, report, fire, answer) take only `data`;
    # those that end calls early take more (`after_ms`: time passes first), and the noise
    # (stale reports, stray answers, bad ids) shares one rule, so that they disturb histories
    # without crowding them out.

    def _unsubscribed(self) -> list[str]:
        assert self.obs is not None
        return [c for c in CONNS if c not in self.obs.subscribed]

    def _subscribed(self) -> list[str]:
        assert self.obs is not None
        return [c for c in CONNS if c in self.obs.subscribed]

    @precondition(lambda self: not self.stopped)
    @rule(data=st.data())
    def client_initialized(self, data: st.DataObject, conn: str | None = None) -> None:
        if conn is None:
            conn = data.draw(st.sampled_from(CONNS), label="conn")
        capabilities = data.draw(st.sampled_from(self.CAPABILITIES), label="capabilities")
        # An initialize request (answered, R-PROTO-3), maybe reusing an open call's id, or an
        # embedder's word that the handshake happened (no id: nothing answered).
        request_id = data.draw(st.sampled_from(INITIALIZE_IDS), label="initialize id")
        version = data.draw(st.sampled_from(VERSIONS), label="version")
        self.apply(ClientInitialized(conn, capabilities, self.now, request_id, version))

    @precondition(
        lambda self: not self.stopped and self.options.has_authorizer and bool(self.model.held)
    )
    @rule(data=st.data())
    def client_ready(self, data: st.DataObject) -> None:
        """``notifications/initialized`` from a connection that may not have sent it yet (or,
        sometimes, any other): the prompts held since its ``initialize`` go (R-PARK-8)."""
        waiting = sorted(self.model.held, key=repr)
        conn = data.draw(st.sampled_from([*waiting, *waiting, *CONNS]), label="conn")
        self.apply(ClientReady(conn, self.now))

    @precondition(lambda self: not self.stopped and bool(self._unsubscribed()))
    @rule(data=st.data())
    def subscriber_attached(self, data: st.DataObject) -> None:
        conn = data.draw(st.sampled_from(self._unsubscribed()), label="conn")
        principal = self._attach_principal(data)  # R-SUB-1
        per_request = self._attach_per_request(data)  # R-SUB-4
        self.apply(SubscriberAttached(conn, self.now, principal, per_request))

    @precondition(lambda self: not self.stopped and bool(self._unsubscribed()))
    @rule(data=st.data())
    def connected(self, data: st.DataObject) -> None:
        """A client's usual start: a push channel, then ``initialize``."""
        conn = data.draw(st.sampled_from(self._unsubscribed()), label="conn")
        principal = self._attach_principal(data)  # R-SUB-1
        self.apply(SubscriberAttached(conn, self.now, principal))
        self.client_initialized(data, conn)

    @precondition(lambda self: not self.stopped and bool(self._subscribed()))
    @rule(data=st.data(), after_ms=AFTER_MS)
    def subscriber_rebound(self, data: st.DataObject, after_ms: int) -> None:
        """R-SUB-2: another subscriber takes over a live connection."""
        conn = data.draw(st.sampled_from(self._subscribed()), label="conn")
        principal = self._attach_principal(data)  # R-SUB-1
        self.now += after_ms
        self.apply(SubscriberAttached(conn, self.now, principal))

    @rule(conn=st.sampled_from(CONNS), after_ms=AFTER_MS)
    def subscriber_detached(self, conn: str, after_ms: int) -> None:
        self.now += after_ms
        self.apply(SubscriberDetached(conn, self.now))

    @precondition(lambda self: not self.stopped)
    @rule(name=st.sampled_from((PLAIN, SENSITIVE)), register=st.booleans(), derived=st.booleans())
    def tool_registry_changes(self, name: str, register: bool, derived: bool) -> None:
        if register:
            sensitive = name == SENSITIVE
            self.apply(ToolRegistered(name, sensitive, derived, self.now))
        else:
            self.apply(ToolUnregistered(name, self.now))

    # Requests draw their fields inside the rule: Hypothesis orders rules by their number of
    # arguments, and prefers the first ones.

    @precondition(lambda self: not self.stopped)
    @rule(data=st.data())
    def tool_call_received(self, data: st.DataObject) -> None:
        conn = self._caller_conn(data)
        request_id = data.draw(st.sampled_from(REQUEST_IDS), label="request id")
        tool = data.draw(st.sampled_from((PLAIN, SENSITIVE, PLAIN, UNKNOWN)), label="tool")
        mode: Any = data.draw(st.sampled_from(("reply", "push")), label="mode")
        caller = data.draw(st.sampled_from((*CALLERS, None)), label="caller")
        arguments = data.draw(st.sampled_from((ARGUMENTS, {})), label="arguments")
        meta = data.draw(st.sampled_from(METAS), label="_meta")
        self.apply(
            ToolCallReceived(conn, request_id, tool, arguments, self.now, mode, caller, meta)
        )

    @precondition(lambda self: not self.stopped)
    @rule(data=st.data())
    def tool_calls_asked(self, data: st.DataObject) -> None:
        """A burst of calls whose authorizer asks at once: the way to parks (R-PARK-*)."""
        for _ in range(data.draw(st.integers(1, 3), label="burst")):
            conn = self._caller_conn(data)
            request_id = data.draw(st.sampled_from(REQUEST_IDS), label="request id")
            mode: Any = data.draw(st.sampled_from(("reply", "push")), label="mode")
            caller = data.draw(st.sampled_from((*CALLERS, None)), label="caller")
            call = ToolCallReceived(conn, request_id, PLAIN, ARGUMENTS, self.now, mode, caller)
            for e in self.apply(call):
                if isinstance(e, StartWorker) and isinstance(e.job, Authorize):
                    self.apply(WorkerFinished(e.ref, Ask("May I?"), self.now))

    def _modern_conn(self, data: st.DataObject) -> str:
        """Mostly a connection that did not initialize (R-MRTR-9), else any."""
        fresh = [c for c in CONNS if c not in self.model.versions]
        return data.draw(st.sampled_from([*fresh, *fresh, *CONNS]), label="conn")

    # The modern rules take one argument more than the 2025 ones they sit beside, so that they
    # do not crowd them out (see "the rules" above).
    @precondition(lambda self: not self.stopped)
    @rule(data=st.data(), principal=st.sampled_from(PRINCIPALS))
    def modern_tool_calls(self, data: st.DataObject, principal: str | None) -> None:
        """A burst of modern ``tools/call`` requests (R-MRTR-9), each from a connection that
        mostly did not initialize, maybe of a principal; an authorizer that is asked mostly
        answers ASK at once: the way to modern approvals (R-MRTR-12, R-MRTR-16)."""
        for _ in range(data.draw(st.integers(1, 3), label="burst")):
            conn = self._modern_conn(data)
            request_id = data.draw(st.sampled_from(REQUEST_IDS), label="request id")
            tool = data.draw(st.sampled_from((PLAIN, PLAIN, SENSITIVE, UNKNOWN)), label="tool")
            caller = data.draw(st.sampled_from((*CALLERS, None)), label="caller")
            arguments = data.draw(st.sampled_from((ARGUMENTS, {})), label="arguments")
            meta = data.draw(st.sampled_from(self.MODERN_META_VALUES), label="_meta")
            call = ToolCallReceived(
                conn,
                request_id,
                tool,
                arguments,
                self.now,
                "reply",
                caller,
                meta,
                principal=principal,
            )
            asked = len(self.states)
            self.modern_requests[(conn, request_id)] = call
            effects = self.apply(call)
            for e in effects:
                if isinstance(e, StartWorker) and isinstance(e.job, Authorize):
                    if data.draw(st.integers(0, 3), label="asks") > 0:
                        decided = WorkerFinished(e.ref, self.AT_ONCE, self.now)
                        effects = self.apply(decided)
                        self._note_states(effects, call)
                        break
                elif isinstance(e, Reply):
                    self._note_states([e], call)
            for e in effects:  # a tool allowed at once may end a round of its own at once
                runs = isinstance(e, StartWorker) and isinstance(e.job, RunTool)
                if runs and self.ROUNDS and data.draw(st.integers(0, 3), label="round") > 0:
                    assert isinstance(e, StartWorker)
                    value = data.draw(st.sampled_from(self.ROUNDS), label="its round")
                    self._note_states(self.apply(WorkerFinished(e.ref, value, self.now)), call)
            if len(self.states) > asked and data.draw(st.booleans(), label="retried at once"):
                self._retry(self.states[-1], data)

    def _note_states(self, effects: list[Effect], call: ToolCallReceived) -> None:
        """Keeps each ``requestState`` the reducer answered ``call`` with, for retries."""
        for e in effects:
            result = (e.message or {}).get("result") if isinstance(e, Reply) else None
            if isinstance(result, dict) and isinstance(result.get("requestState"), str):
                assert isinstance(call.arguments, dict)
                entry = (result["requestState"], str(call.conn), call.principal, call.tool)
                self.states.append((*entry, call.arguments, call.meta))

    @precondition(lambda self: not self.stopped and bool(self.states))
    @rule(data=st.data(), after_ms=AFTER_MS)
    def modern_retry(self, data: st.DataObject, after_ms: int) -> None:
        """A retry of a modern approval (R-MRTR-13): as asked, or replayed, from another
        principal or connection, with other arguments or tool, with a forged or truncated state,
        or after its expiry; with every kind of answer."""
        self.now += after_ms
        recent = data.draw(st.booleans(), label="recent")  # mostly a state still outstanding
        pool = self.states[-2:] if recent else self.states
        self._retry(data.draw(st.sampled_from(pool), label="state"), data)

    def _retry(
        self,
        asked: tuple[str, str, str | None, str, dict[str, Any], object],
        data: st.DataObject,
    ) -> None:
        state, conn, principal, tool, arguments, meta = asked
        kind = data.draw(st.sampled_from(RETRY_KINDS), label="retry")
        model_state = self.to_model["state"][state]
        assert isinstance(model_state, str)
        if kind == "foreign principal":
            principal = data.draw(
                st.sampled_from([p for p in PRINCIPALS if p != principal]), label="principal"
            )
        elif kind == "other connection":
            conn = data.draw(st.sampled_from([c for c in CONNS if c != conn]), label="conn")
        elif kind == "changed arguments":
            arguments = {} if arguments else dict(ARGUMENTS)
        elif kind == "other tool":
            tool = SENSITIVE if tool == PLAIN else PLAIN
        elif kind in ("tampered", "truncated"):
            if kind == "tampered":
                index = data.draw(st.integers(0, 200), label="byte")
                forged, model_forged = flip(state, index), flip(model_state, index)
            else:
                cut = data.draw(st.integers(0, len(state) - 1), label="cut")
                forged, model_forged = state[:cut], model_state[:cut]
            self.forged[forged] = model_forged
            state = forged
        elif kind == "expired":
            self.now += self.options.elicitation_timeout_ms
        request_id = data.draw(st.sampled_from(REQUEST_IDS), label="request id")
        responses = data.draw(st.sampled_from(INPUT_RESPONSES), label="inputResponses")
        type(self).seen[f"modern retry: {kind}"] += 1
        retry = ToolCallReceived(
            conn,
            request_id,
            tool,
            arguments,
            self.now,
            "reply",
            None,
            meta,
            request_state=state,
            input_responses=responses,
            principal=principal,
        )
        self.modern_requests[(conn, request_id)] = retry
        self.apply(retry)
        if kind == "replay":  # the same retry again, under another id (R-MRTR-13, R-MRTR-14)
            other = data.draw(st.sampled_from(REQUEST_IDS), label="replayed id")
            self.apply(attrs.evolve(retry, request_id=other))

    @precondition(lambda self: not self.stopped)
    @rule(data=st.data())
    def read_requested(self, data: st.DataObject) -> None:
        conn = data.draw(st.sampled_from(CONNS), label="conn")
        request_id = data.draw(st.sampled_from(REQUEST_IDS), label="request id")
        method = data.draw(st.sampled_from(self.READ_METHODS), label="method")
        caller = data.draw(st.sampled_from((*CALLERS, None)), label="caller")
        self.apply(ReadRequested(conn, request_id, method, PARAMS[method], self.now, caller))

    def _caller_conn(self, data: st.DataObject) -> str:
        """Mostly a connection that can be asked, else any."""
        assert self.obs is not None
        obs = self.obs
        askable = [c for c in CONNS if c in obs.subscribed and obs.can_elicit.get(c, False)]
        return data.draw(st.sampled_from([*askable, *askable, *CONNS]), label="conn")

    def _value_for(self, ref: int, data: st.DataObject) -> object:
        job = self.running.get(ref)
        values: tuple[object, ...] = self.AUTHORIZE_VALUES + self.RUN_VALUES
        if isinstance(job, Authorize):
            values = self.AUTHORIZE_VALUES
        elif isinstance(job, RunTool | RunRead):
            values = self.RUN_VALUES
        elif isinstance(job, UnknownToolReply):
            values = self.UNKNOWN_REPLY_VALUES
        elif isinstance(job, AuthorizeRead):
            values = self.AUTHORIZE_READ_VALUES
        elif isinstance(job, FilterTools):  # R-PROTO-8: a verdict per name, or not a dict
            if data.draw(st.integers(0, 7), label="verdicts") == 0:
                return data.draw(st.sampled_from(self.RUN_VALUES), label="value")
            verdict = st.sampled_from(self.VERDICTS)
            return {name: data.draw(verdict, label=f"verdict on {name}") for name in job.names}
        return data.draw(st.sampled_from(values), label="value")

    def _live_ref(self, data: st.DataObject) -> int:
        return data.draw(st.sampled_from(sorted(self.running)), label="live ref")

    @precondition(lambda self: bool(self.running))
    @rule(data=st.data())
    def worker_finished(self, data: st.DataObject) -> None:
        ref = self._live_ref(data)
        effects = self.apply(WorkerFinished(ref, self._value_for(ref, data), self.now))
        for e in effects:  # a modern tool's own round (R-MRTR-20): its state, for retries
            call = (
                self.modern_requests.get((e.conn, e.request_id)) if isinstance(e, Reply) else None
            )
            if call is not None:
                self._note_states([e], call)

    @precondition(lambda self: any(isinstance(j, FilterTools) for j in self.running.values()))
    @rule(data=st.data())
    def hook_answered(self, data: st.DataObject) -> None:
        """A visibility hook's worker reports its verdicts (R-PROTO-8); rare among the other
        workers otherwise."""
        refs = sorted(r for r, j in self.running.items() if isinstance(j, FilterTools))
        ref = data.draw(st.sampled_from(refs), label="hook ref")
        self.apply(WorkerFinished(ref, self._value_for(ref, data), self.now))

    @precondition(lambda self: bool(self.running))
    @rule(data=st.data())
    def worker_failed(self, data: st.DataObject) -> None:
        self.apply(WorkerFailed(self._live_ref(data), self.now))

    @precondition(lambda self: bool(self.armed))
    @rule(data=st.data())
    def timer_fired(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(list(self.armed)), label="armed timer")
        self.now = max(self.now, self.armed[key])
        self.apply(TimerFired(key, self.now))

    def _live_prompts(self) -> list[str]:
        """The ids of the live prompts (not modern nonces), in minting order: never sorted, as
        ids are keyed by a per-run secret (R-ID-1), and an order that depends on it would make
        Hypothesis' replays draw differently (flaky generation)."""
        assert self.obs is not None
        live = self.obs.elicitations
        # a task's prompts are answered through tasks/update (R-TASK-10), not by a connection
        return [e for e in self.eids if e in live and not is_channel(live[e][0])]

    @precondition(lambda self: self.obs is not None and bool(self._live_prompts()))
    @rule(data=st.data())
    def elicitation_answered(self, data: st.DataObject) -> None:
        """The owner answers a live prompt (or, sometimes, another connection does)."""
        assert self.obs is not None
        live = self._live_prompts()
        eid = data.draw(st.sampled_from(live), label="live id")
        owner = self.obs.elicitations[eid][0]
        conn = data.draw(st.sampled_from([owner, owner, owner, *CONNS]), label="answered on")
        result, error = data.draw(st.sampled_from(self.ANSWERS), label="answer")
        self.apply(ElicitationAnswered(conn, eid, result, self.now, error))

    def _token(self) -> str:
        self.tokens += 1
        return f"token-{self.tokens}"

    def _tool_request(self, ref: int, data: st.DataObject) -> ToolRequested:
        method, params = data.draw(st.sampled_from(self.TOOL_REQUESTS), label="tool request")
        return ToolRequested(ref, self._token(), method, params, self.now)

    def _running_tools(self) -> list[int]:
        """The refs of the running tools, in the order they were started."""
        return [r for r in self.started if isinstance(self.running.get(r), RunTool)]

    def _ask(self, ref: int, data: st.DataObject) -> None:
        """The tool of worker ``ref`` asks its client; the client may answer at once."""
        sent: list[str] = [
            str(e.message["id"])
            for e in self.apply(self._tool_request(ref, data))
            if isinstance(e, Push) and "id" in e.message
        ]
        answer_now: bool = bool(sent) and data.draw(st.booleans(), label="answered at once")
        if answer_now:
            self._answer_client_request(sent[0], data)

    @precondition(lambda self: not self.stopped and bool(self._running_tools()))
    @rule(data=st.data())
    def tool_requested(self, data: st.DataObject) -> None:
        """Running tools ask their client (R-CTX-4), a few at once so that the per-call cap
        fills; sometimes an authorizer, a read callback or the unknown-tool hook does (R-CTX-1).
        Refs in the order they were started."""
        for _ in range(data.draw(st.integers(1, 3), label="burst")):
            tools = self._running_tools()
            others = [r for r in self.started if r in self.running and r not in tools]
            if not tools:
                return
            pool = others if others and data.draw(st.integers(0, 4), label="other") == 0 else tools
            self._ask(data.draw(st.sampled_from(pool), label="asking ref"), data)

    @precondition(lambda self: not self.stopped)
    @rule(data=st.data())
    def tool_asks_its_client(self, data: st.DataObject) -> None:
        """A call whose tool runs (allowed, if there is an authorizer) and asks its client at
        once: the way to a tool's own requests (R-CTX-4)."""
        conn = self._caller_conn(data)
        request_id = data.draw(st.sampled_from(REQUEST_IDS), label="request id")
        mode: Any = data.draw(st.sampled_from(("reply", "push")), label="mode")
        caller = data.draw(st.sampled_from((*CALLERS, None)), label="caller")
        effects = self.apply(
            ToolCallReceived(conn, request_id, PLAIN, ARGUMENTS, self.now, mode, caller)
        )
        authorizers = [
            e.ref for e in effects if isinstance(e, StartWorker) and isinstance(e.job, Authorize)
        ]
        if authorizers:
            effects = self.apply(WorkerFinished(authorizers[0], Allow(), self.now))
        tools = [
            e.ref for e in effects if isinstance(e, StartWorker) and isinstance(e.job, RunTool)
        ]
        if tools:
            for _ in range(data.draw(st.integers(1, 3), label="burst")):
                if tools[0] in self.running:  # an answer at once cannot end it, but be safe
                    self._ask(tools[0], data)

    def _live_client_requests(self) -> list[str]:
        """The outstanding requests of tools whose client is a connection (a task's are
        answered through tasks/update, R-TASK-10), in minting order."""
        assert self.obs is not None
        live = self.obs.client_requests
        return [r for r in self.rids if r in live and not is_channel(live[r][0][0])]

    @precondition(lambda self: self.obs is not None and bool(self._live_client_requests()))
    @rule(data=st.data())
    def client_request_answered(self, data: st.DataObject) -> None:
        """The owner answers a tool's own request (or, sometimes, another connection does)."""
        assert self.obs is not None
        # In minting order, never sorted: the ids are keyed by a per-run secret (R-ID-1).
        live = self._live_client_requests()
        self._answer_client_request(data.draw(st.sampled_from(live), label="live request id"), data)

    def _answer_client_request(self, rid: str, data: st.DataObject) -> None:
        assert self.obs is not None
        owner = self.obs.client_requests[rid][0][0]
        conn = data.draw(st.sampled_from([owner, owner, owner, *CONNS]), label="answered on")
        result, error = data.draw(st.sampled_from(self.CLIENT_ANSWERS), label="client answer")
        self.apply(ElicitationAnswered(conn, rid, result, self.now, error))

    @precondition(lambda self: not self.stopped)
    @rule(
        conn=st.sampled_from(CONNS),
        request_id=st.sampled_from((*REQUEST_IDS, True, 1.0, None)),
        after_ms=AFTER_MS,
    )
    def cancel_requested(self, conn: str, request_id: object, after_ms: int) -> None:
        self.now += after_ms
        self.apply(CancelRequested(conn, request_id, self.now))

    @rule(caller=st.sampled_from((*CALLERS, None)), after_ms=AFTER_MS)
    def caller_exited(self, caller: str | None, after_ms: int) -> None:
        self.now += after_ms
        self.apply(CallerExited(caller, self.now))

    @rule(
        kind=st.sampled_from(
            (
                "stale worker",
                "stale timer",
                "stray answer",
                "bad request id",
                "request from no tool",
                "ping",
                "malformed tools/call",
            )
        ),
        conn=st.sampled_from(CONNS),
        data=st.data(),
    )
    def noise(self, kind: str, conn: str, data: st.DataObject) -> None:
        """What a real shell and real peers also send: late, stray and malformed events (after
        the stop, only the late ones: a request becomes a stale worker's report)."""
        assert self.obs is not None
        if self.stopped and kind in ("bad request id", "ping", "malformed tools/call"):
            kind = "stale worker"
        if kind == "stale worker":  # a killed or finished worker reports anyway (R-WORK-4)
            stale = [r for r in self.started if r not in self.running]
            ref = data.draw(st.sampled_from([*stale, UNKNOWN_REF]), label="stale ref")
            if data.draw(st.booleans(), label="failed"):
                self.apply(WorkerFailed(ref, self.now))
            else:
                self.apply(WorkerFinished(ref, self._value_for(ref, data), self.now))
        elif kind == "stale timer":  # cancelled just as it went off, or never armed
            never: list[TimerKey] = [
                ("worker", UNKNOWN_REF),
                ("elicitation", "askgate-x"),
                (CLIENT_REQUEST_TIMER, "askgate-request-x"),
            ]
            key = data.draw(st.sampled_from([*self.disarmed, *never]), label="stale timer")
            self.apply(TimerFired(key, self.now))
        elif kind == "stray answer":  # late, unknown or malformed (R-CLOSE-5)
            stale_ids = [e for e in self.eids if e not in self.obs.elicitations]
            stale_ids += [r for r in self.rids if r not in self.obs.client_requests]
            garbage: list[object] = [
                "askgate-elicit-AAAAAAAAAAAAAAAAAAAAAA",
                "askgate-request-AAAAAAAAAAAAAAAAAAAAAA",
                0,
                None,
                ["x"],
            ]
            eid = data.draw(st.sampled_from([*stale_ids, *garbage]), label="stray id")
            answers = self.ANSWERS + self.CLIENT_ANSWERS
            result, error = data.draw(st.sampled_from(answers), label="answer")
            self.apply(ElicitationAnswered(conn, eid, result, self.now, error))
        elif kind == "bad request id":  # R-ADM-0
            rid = data.draw(st.sampled_from(BAD_REQUEST_IDS), label="bad id")
            if data.draw(st.booleans(), label="read"):
                method = READ_METHODS[0]
                self.apply(ReadRequested(conn, rid, method, PARAMS[method], self.now))
            else:
                self.apply(ToolCallReceived(conn, rid, PLAIN, ARGUMENTS, self.now))
        elif kind == "ping":  # R-PROTO-4, R-ADM-0, R-ADM-1: any id, maybe an open call's
            rid = data.draw(st.sampled_from((*REQUEST_IDS, *BAD_REQUEST_IDS)), label="ping id")
            self.apply(PingReceived(conn, rid, self.now))
        elif kind == "malformed tools/call":  # R-PROTO-6
            rid = data.draw(st.sampled_from(REQUEST_IDS), label="request id")
            tool, arguments = data.draw(st.sampled_from(MALFORMED_CALLS), label="call")
            self.apply(ToolCallReceived(conn, rid, tool, arguments, self.now))
        elif kind == "request from no tool":  # R-CTX-1
            # A tool whose worker was killed asks anyway, or an authorizer, a read callback or
            # the unknown-tool hook does.
            stale = [r for r in self.started if r not in self.running]
            tools = self._running_tools()
            others = [r for r in self.started if r in self.running and r not in tools]
            ref = data.draw(st.sampled_from([*stale, *others, UNKNOWN_REF]), label="no tool")
            self.apply(self._tool_request(ref, data))

    @precondition(lambda self: not self.stopped)
    @rule(after_ms=AFTER_MS, again=st.booleans(), odds=st.integers(0, 3))
    def server_stopping(self, after_ms: int, again: bool, odds: int) -> None:
        """The server is told to stop (R-STOP-1): every open call ends with an answer, the
        modern nonces stay. Rare (three arguments, and then one draw in ``STOP_ODDS``), since it
        ends the
        server's life: afterwards only late events come (workers' reports, timers, answers,
        detaches, caller exits, the stale noise); ``again``, a second stop finds nothing open."""
        if not self.STOP_ODDS or odds % self.STOP_ODDS:
            return
        self.now += after_ms
        self.stopped = True
        self.apply(ServerStopping(self.now))
        if again:
            self.apply(ServerStopping(self.now))

    # -- one step on both sides ------------------------------------------------------------------

    def _model_id(self, kind: str, real: object) -> object:
        try:
            return self.to_model[kind].get(real, real)
        except TypeError:  # unhashable garbage: nobody's id
            return real

    def _model_event(self, ev: Event) -> Event:
        """The event with the reducer's ids replaced by the model's."""
        if isinstance(ev, WorkerFinished | WorkerFailed | ToolRequested):
            ref: Any = self._model_id("ref", ev.ref)
            return attrs.evolve(ev, ref=ref)
        if isinstance(ev, ElicitationAnswered):
            ident = self._model_id("eid", ev.elicitation_id)
            ident = self._model_id("rid", ident)
            return attrs.evolve(ev, elicitation_id=ident)
        if isinstance(ev, TimerFired):
            kind, ident = ev.key
            return attrs.evolve(ev, key=(kind, self._model_id(_id_kind(kind), ident)))
        if isinstance(ev, ReadRequested) and str(ev.method).startswith("tasks/"):
            return attrs.evolve(ev, params=self._model_task_params(ev.params))
        if isinstance(ev, ToolCallReceived) and isinstance(ev.request_state, str):
            state = self.forged.get(ev.request_state, ev.request_state)
            return attrs.evolve(ev, request_state=self._model_id("state", state))
        return ev

    def _model_task_params(self, params: object) -> object:
        """A ``tasks/*`` request's params with the reducer's task id and input ids replaced by
        the model's."""
        if not isinstance(params, dict):
            return params
        shown = dict(params)
        if "taskId" in shown:
            shown["taskId"] = self._model_id("tid", shown["taskId"])
        responses = shown.get("inputResponses")
        if isinstance(responses, dict):
            shown["inputResponses"] = {
                self._model_id("rid", self._model_id("eid", k)): v for k, v in responses.items()
            }
        return shown

    def _model_conn(self, conn: Any) -> Any:
        """A connection as the model knows it: a task's channel by the model's task id."""
        if isinstance(conn, TaskChannel):
            return ModelChannel(str(self.to_model["tid"].get(conn.task_id, conn.task_id)))
        return conn

    def _model_key(self, key: Any) -> Any:
        if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], TaskChannel):
            return (self._model_conn(key[0]), self._model_id("tid", key[1]))
        return key

    def apply(self, ev: Event) -> list[Effect]:
        """Steps both sides with ``ev`` and runs every check; returns the reducer's effects."""
        assert self.obs is not None
        before = self.obs
        self.steps += 1
        if isinstance(ev, TimerFired) and ev.key in self.armed:
            del self.armed[ev.key]  # the shell disarms a timer when it fires
            self.disarmed.append(ev.key)
        if isinstance(ev, WorkerFinished | WorkerFailed):
            self.running.pop(ev.ref, None)  # the worker reported: its task is over
        model_ev = self._model_event(ev)
        if isinstance(ev, SubscriberAttached | SubscriberDetached):  # the oracle's R-SUB-1
            self.principal_of.pop(ev.conn, None)
            self.per_request.discard(ev.conn)
        if isinstance(ev, SubscriberAttached) and isinstance(ev.principal, str) and ev.principal:
            self.principal_of[ev.conn] = ev.principal
        if isinstance(ev, SubscriberAttached) and ev.per_request is True:
            self.per_request.add(ev.conn)
        if isinstance(ev, ToolCallReceived) and (ev.conn, ev.request_id) not in before.open:
            # R-PARK-5: the owner is fixed when the call is admitted (an id that is not
            # hashable is never admitted, R-ADM-0)
            with contextlib.suppress(TypeError):
                self.admitted_owner[(ev.conn, ev.request_id)] = self._owner(ev.conn)
        if isinstance(ev, ToolCallReceived):  # R-MRTR-9, read before the step
            key = (ev.conn, ev.request_id)
            modern = isinstance(ev.meta, dict) and META_VERSION in ev.meta
            stateless = modern and ev.conn not in self.model.versions
        effects = self._step(ev)
        if isinstance(ev, TimerFired) and ev.key[0] == WINDOW_TIMER:
            # The reducer cancels the inline window whose timer just went off (a no-op for the
            # shell, as the explorer also reads it); the model does not.
            effects = [e for e in effects if not (isinstance(e, CancelTimer) and e.key == ev.key)]
        expected = self.model.apply(model_ev)
        self._compare_effects(ev, effects, expected)
        self.check_invariants_fn(self.state)
        after = self._observe_and_compare(ev)
        if isinstance(ev, ToolCallReceived) and key in after.open and key not in before.open:
            self.modern_calls[key] = stateless
        self._replay_shell(effects, after)
        self._check_delivery(ev, effects, before, after)
        self._check_resolution(ev, effects, after)
        self._eviction_oracle(ev, effects, before, after)
        self._note_count_changes(before, after)
        self._tally(ev, effects, before, after)
        self.obs = after
        return effects

    def _step(self, ev: Event) -> list[Effect]:
        """Steps the reducer with ``ev`` and, when a client message means ``ev``
        (``THROUGH_THE_WIRE``), also with that message, through the entry the transports use,
        from the same state: both must give the same effects and the same state (R-PROTO-15).
        The run goes on from the state the message reached."""
        before = self.state
        self.state, effects = self.step_fn(before, ev)
        wired = door.wire_event(ev) if self.THROUGH_THE_WIRE else None
        if wired is None:
            return effects
        wire_state, wire_effects = self.step_fn(before, wired)
        related = [getattr(e, "related", None) for e in effects]
        wire_related = [getattr(e, "related", None) for e in wire_effects]
        if wire_effects != effects or wire_related != related:
            raise AssertionError(f"{ev!r} through the wire: {wire_effects!r}, typed: {effects!r}")
        if isinstance(wire_state, State):
            assert wire_state == self.state, f"{ev!r} through the wire left another state"
        else:
            assert self.observe_fn(wire_state) == self.observe_fn(self.state), ev
        self.state = wire_state
        type(self).seen["through the wire"] += 1
        return wire_effects

    def _tally(
        self, ev: Event, effects: list[Effect], before: Observation, after: Observation
    ) -> None:
        """Counts what the step exercised, in ``seen``, so a test can tell a run was not idle."""
        seen = type(self).seen
        for e in effects:
            if isinstance(e, Emit) and e.name == "client_capabilities_evicted":
                seen["capabilities evicted"] += 1
            elif isinstance(e, Emit) and e.name == "tool_hidden":
                seen["tool hidden"] += 1
            elif isinstance(e, Reply | Push) and (e.message or {}).get("result", {}).get("tools"):
                seen["tools listed"] += 1
            elif isinstance(e, Push) and e.message.get("method") == "notifications/cancelled":
                seen["prompt withdrawn"] += 1
            elif isinstance(e, Push) and isinstance(ev, ClientReady):
                seen["held prompt sent"] += 1  # R-PARK-8
            elif isinstance(e, Push) and is_response(e.message):
                seen["outcome pushed"] += 1
            if isinstance(e, Reply | Push) and "server_busy" in repr(e.message):
                seen["busy"] += 1
                for scope in ("connection", "principal", "anonymous"):  # R-ADM-6
                    if f"'scope': '{scope}'" in repr(e.message):
                        seen[f"busy: {scope}"] += 1
            if isinstance(e, StartWorker) and isinstance(ev, ElicitationAnswered):
                seen["approved"] += 1
            if isinstance(e, CancelTimer) and e.key[0] == "elicitation":
                if isinstance(ev, CancelRequested | CallerExited):
                    seen["parked call dropped"] += 1
                elif isinstance(ev, SubscriberAttached | SubscriberDetached):
                    seen["parked call dropped with its connection"] += 1
        if isinstance(ev, TimerFired) and ev.key[1] in (before.workers | before.elicitations):
            seen[f"{ev.key[0]} timed out"] += 1
        self._tally_context(ev, effects, before, after)
        self._tally_modern(ev, effects, before, after)
        self._tally_stop(ev, effects, before, after)
        if isinstance(ev, WorkerFinished | WorkerFailed | TimerFired) and not effects:
            seen["stale event ignored"] += 1
        if before.known - after.known:
            seen["connection forgotten"] += 1

    def _tally_stop(
        self, ev: Event, effects: list[Effect], before: Observation, after: Observation
    ) -> None:
        """What a stop ended (R-STOP-1), and the late events after it."""
        seen = type(self).seen
        if not isinstance(ev, ServerStopping):
            if self.stopped:
                seen["late event after the stop"] += 1
            return
        seen["server stopping"] += 1
        for stage, _ in before.open.values():
            seen[f"stop ended a call: {stage}"] += 1
        if not before.open and not effects:
            seen["stop with nothing open did nothing"] += 1
        if any(key[1] == nonce for nonce, key in after.elicitations.items()):
            seen["stop kept a modern nonce"] += 1

    def _tally_modern(
        self, ev: Event, effects: list[Effect], before: Observation, after: Observation
    ) -> None:
        """What a step did with modern approvals (R-MRTR-12 .. R-MRTR-16)."""
        seen = type(self).seen
        for e in effects:
            result = (e.message or {}).get("result") if isinstance(e, Reply) else None
            if isinstance(result, dict) and result.get("resultType") == "input_required":
                seen["modern input required"] += 1
        for owner in after.parked:  # R-PARK-7: the one owner of per-request connections
            if owner == ("anonymous",) and owner not in before.parked:
                seen["anonymous owner parked"] += 1
        if isinstance(ev, ToolCallReceived) and ev.request_state is not None:
            if any(isinstance(e, StartWorker) for e in effects):
                seen["modern approve"] += 1
            for e in effects:
                denied = deny_of(e.message) if isinstance(e, Reply) else None
                if denied is not None:
                    seen[f"modern retry denied: {denied[1]}"] += 1
        if isinstance(ev, WorkerFinished) and isinstance(ev.value, NeedsInput):
            for e in effects:  # R-MRTR-20 .. R-MRTR-22
                message = e.message or {} if isinstance(e, Reply) else {}
                result, error = message.get("result"), message.get("error")
                if isinstance(result, dict) and result.get("resultType") == "input_required":
                    seen["modern round asked"] += 1
                if isinstance(error, dict) and error.get("code") == -32021:
                    seen["modern round missing capability"] += 1
        if isinstance(ev, ToolCallReceived) and sealing.token_version(ev.request_state) == 2:
            for e in effects:  # R-MRTR-23
                error = (e.message or {}).get("error") if isinstance(e, Reply) else None
                if isinstance(error, dict) and error.get("code") == -32602:
                    seen[f"modern round refused: {error.get('data', {}).get('reason')}"] += 1
                if isinstance(e, StartWorker):
                    seen[f"modern round retried: {type(e.job).__name__}"] += 1
        for e in effects:  # R-MRTR-21, R-LOG-2: approved by its round state, parked under no id
            if not isinstance(e, Emit) or e.name != "call_ended":
                continue
            if e.fields.get("approved") and e.fields.get("elicitation_id") is None:
                seen["call ended approved by its round state"] += 1
        if isinstance(ev, TimerFired) and ev.key[0] == "elicitation":
            key = before.elicitations.get(str(ev.key[1]))
            if key is not None and key[1] == ev.key[1]:
                seen["modern nonce timed out"] += 1
        if isinstance(ev, WorkerFinished) and isinstance(ev.value, Ask):
            # an ASK (of either era) made room by evicting a nonce (R-MRTR-15)
            for nonce, key in before.elicitations.items():
                if key[1] == nonce and nonce not in after.elicitations:
                    seen["modern nonce evicted"] += 1

    def _tally_context(
        self, ev: Event, effects: list[Effect], before: Observation, after: Observation
    ) -> None:
        """What a step did with a running tool's own requests (R-CTX-1, R-CTX-4 .. R-CTX-6)."""
        seen = type(self).seen
        resolves = [e for e in effects if isinstance(e, Resolve)]
        if isinstance(ev, ToolRequested):
            if resolves and isinstance(resolves[0].outcome, Failure):
                data = resolves[0].outcome.data
                reason = data.get("error") if isinstance(data, dict) else data
                seen[f"client request refused: {reason}"] += 1
                if reason == "not_running":
                    job = self.running.get(ev.ref)
                    asker = "a stale ref" if job is None else type(job).__name__
                    seen[f"client request refused: not_running, from {asker}"] += 1
            elif len(after.client_requests) > len(before.client_requests):
                seen[f"client request sent: {ev.method}"] += 1
        elif isinstance(ev, ElicitationAnswered) and (
            isinstance(ev.elicitation_id, str) and ev.elicitation_id in before.client_requests
        ):
            if not resolves:
                seen["client request: foreign answer ignored"] += 1
            elif isinstance(resolves[0].outcome, Failure):
                data = resolves[0].outcome.data
                invalid = isinstance(data, dict) and data.get("error") == "invalid_answer"
                seen["client request: invalid answer" if invalid else "client request: error"] += 1
            else:
                seen["client request answered"] += 1
        elif isinstance(ev, TimerFired) and str(ev.key[1]) in before.client_requests:
            seen["client request timed out"] += 1
        gone = before.client_requests.keys() - after.client_requests.keys()
        if gone and not resolves:
            withdrawn = any(
                isinstance(e, Push) and e.message.get("method") == "notifications/cancelled"
                for e in effects
            )
            how = "withdrawn" if withdrawn else "withdrawn silently (connection gone)"
            seen[f"client request {how}: {type(ev).__name__}"] += 1
        for ids in after.worker_requests.values():
            if len(ids) == self.options.max_client_requests_per_call:
                seen["client requests at the per-call cap"] += 1

    # -- effects, modulo ids ---------------------------------------------------------------------

    def _bind(self, kind: str, real: object, model: object, *, minted: bool) -> None:
        to_model, to_real = self.to_model[kind], self.to_real[kind]
        if real in to_model:
            assert to_model[real] == model, (
                f"reducer {kind} {real!r} stands for model {to_model[real]!r}, "
                f"but here pairs with {model!r}"
            )
            return
        assert model not in to_real, (
            f"model {kind} {model!r} is the reducer's {to_real[model]!r}, but here the reducer "
            f"says {real!r}"
        )
        assert minted, f"reducer {kind} {real!r} first appears where it is not minted"
        if kind == "eid":
            assert isinstance(real, str), f"R-ID-1: elicitation id {real!r} is not a string"
            if str(model).startswith(MODEL_NONCE_PREFIX):
                assert NONCE_ID.match(real), f"R-MRTR-12: malformed nonce id {real!r}"
            else:
                assert ELICITATION_ID.match(real), f"R-ID-1: malformed elicitation id {real!r}"
                self.eids.append(real)
        elif kind == "state":
            assert isinstance(real, str), f"R-MRTR-1: state {real!r} is not a string"
        elif kind == "tid":
            assert isinstance(real, str), f"R-TASK-4: task id {real!r} is not a string"
            assert TASK_ID.match(real), f"R-TASK-4: malformed task id {real!r}"
        elif kind == "rid":
            assert isinstance(real, str), f"R-CTX-4: request id {real!r} is not a string"
            assert CLIENT_REQUEST_ID.match(real), f"R-CTX-4: malformed request id {real!r}"
            self.rids.append(real)
        if kind in ("eid", "rid", "tid"):
            assert isinstance(real, str)
            suffix = real[-22:]
            assert suffix not in self.suffixes, f"R-ID-1: {real!r} reuses a counter value"
            self.suffixes.add(suffix)
        elif kind == "ref":
            assert isinstance(real, int), f"worker ref {real!r} is not an int"
            self.started.append(real)
        to_model[real] = model
        to_real[model] = real

    def _compare_effects(self, ev: Event, real: list[Effect], model: list[Effect]) -> None:
        def show(effects: list[Effect]) -> str:
            return "".join(f"\n    {e!r}" for e in effects)

        if isinstance(ev, ToolRegistered | ToolUnregistered):  # R-PROTO-12: in no fixed order
            real = sorted(real, key=lambda e: repr(getattr(e, "conn", None)))
        where = f"after {ev!r}\n  reducer:{show(real)}\n  model:{show(model)}"
        assert len(real) == len(model), (
            f"{len(real)} effects, the model expects {len(model)} {where}"
        )
        for i, (r, m) in enumerate(zip(real, model, strict=True)):
            try:
                ok = self._same_effect(r, m)
            except AssertionError as exc:
                raise AssertionError(f"effect {i}: {exc} {where}") from exc
            assert ok, f"effect {i} differs {where}"

    def _model_task_result(
        self, message: dict[str, Any] | None, model_result: object
    ) -> dict[str, Any] | None:
        """A task's rendering (R-TASK-4, R-TASK-7) with the reducer's task id bound to the
        model's (minted by ``CreateTaskResult``) and its inputs' ids replaced by the model's."""
        result = (message or {}).get("result")
        if not isinstance(result, dict) or "taskId" not in result:
            return message
        assert message is not None
        model_tid = model_result.get("taskId") if isinstance(model_result, dict) else None
        minted = result.get("resultType") == "task"
        self._bind("tid", result["taskId"], model_tid, minted=minted)
        shown = {**result, "taskId": model_tid}
        inputs = result.get("inputRequests")
        if isinstance(inputs, dict):
            shown["inputRequests"] = {
                self._model_id("rid", self._model_id("eid", k)): v for k, v in inputs.items()
            }
        return {**message, "result": shown}

    def _same_effect(self, r: Effect, m: Effect) -> bool:
        if type(r) is not type(m):
            return False
        if isinstance(r, StartWorker) and isinstance(m, StartWorker):
            self._bind("ref", r.ref, m.ref, minted=True)
            return same(self._model_conn(r.conn), m.conn) and same(
                (type(r.job), attrs.astuple(r.job, recurse=False)),
                (type(m.job), attrs.astuple(m.job, recurse=False)),
            )
        if isinstance(r, KillWorker) and isinstance(m, KillWorker):
            self._bind("ref", r.ref, m.ref, minted=False)
            return True
        if isinstance(r, StartTimer | CancelTimer) and isinstance(m, StartTimer | CancelTimer):
            if r.key[0] != m.key[0] or len(r.key) != 2:
                return False
            kind = _id_kind(r.key[0])
            minted = isinstance(r, StartTimer) and kind in ("eid", "rid", "window")
            self._bind(kind, r.key[1], m.key[1], minted=minted)
            if isinstance(r, StartTimer) and isinstance(m, StartTimer):
                return same(r.deadline, m.deadline)
            return True
        if isinstance(r, Reply) and isinstance(m, Reply):
            message = r.message
            result = (message or {}).get("result")
            model_result = (m.message or {}).get("result")
            if (
                isinstance(result, dict)
                and isinstance(model_result, dict)
                and "requestState" in result
                and "requestState" in model_result
            ):
                # R-MRTR-12: minted by the reducer; bound, not compared byte for byte
                model_state = model_result["requestState"]
                self._bind("state", result["requestState"], model_state, minted=True)
                message = {**(message or {}), "result": {**result, "requestState": model_state}}
            message = self._model_task_result(message, model_result)
            return same((r.conn, r.request_id, message), (m.conn, m.request_id, m.message))
        if isinstance(r, Push) and isinstance(m, Push):
            message = dict(r.message)
            method = message.get("method")
            if method != m.message.get("method") or not same(r.conn, m.conn):
                return False
            if not same(r.related, m.related):  # R-DLV-1; not part of Push's equality
                return False
            if method in (ELICIT, SAMPLE):
                kind = _kind_of_model_id(m.message["id"])
                self._bind(kind, message.get("id"), m.message["id"], minted=True)
                message["id"] = m.message["id"]
            elif method == "notifications/cancelled" and isinstance(message.get("params"), dict):
                params = dict(message["params"])
                model_id = m.message["params"]["requestId"]
                kind = _kind_of_model_id(model_id)
                self._bind(kind, params.get("requestId"), model_id, minted=False)
                params["requestId"] = m.message["params"]["requestId"]
                message["params"] = params
            return same(message, m.message)
        if isinstance(r, Emit) and isinstance(m, Emit):
            fields = dict(r.fields)
            if isinstance(fields.get("conn"), TaskChannel):  # a task's call (R-TASK-5)
                fields["conn"] = self._model_conn(fields["conn"])
                fields["request_id"] = self._model_id("tid", fields.get("request_id"))
            if isinstance(fields.get("evicted_by"), TaskChannel):  # a task's call evicted it
                fields["evicted_by"] = self._model_conn(fields["evicted_by"])
            model_eid = m.fields.get("elicitation_id")
            if fields.get("elicitation_id") is not None and model_eid is not None:
                # R-LOG-2, R-LOG-3: a record names the prompt's id, pushed before it
                self._bind("eid", fields["elicitation_id"], model_eid, minted=False)
                fields["elicitation_id"] = model_eid
            return same((r.name, fields), (m.name, m.fields))
        if isinstance(r, Resolve) and isinstance(m, Resolve):
            # The ref the tool asked from, as the model was told it (a stale or unknown ref
            # was never bound, and is its own name on both sides).
            if not same(self._model_id("ref", r.ref), m.ref):
                return False
            return same(r.token, m.token) and same_outcome(r.outcome, m.outcome)
        raise AssertionError(f"unknown effect {r!r}")

    # -- state -----------------------------------------------------------------------------------

    def _translated(self, obs: Observation) -> Observation:
        """``obs`` with the reducer's ids replaced by the model's."""

        def eid(e: str) -> str:
            assert e in self.to_model["eid"], f"the state holds elicitation {e!r}, never pushed"
            return str(self.to_model["eid"][e])

        def ref(r: int) -> int:
            assert r in self.to_model["ref"], f"the state holds worker {r!r}, never started"
            model_ref = self.to_model["ref"][r]
            assert isinstance(model_ref, int)
            return model_ref

        def rid(r: str) -> str:
            assert r in self.to_model["rid"], f"the state holds request {r!r}, never pushed"
            return str(self.to_model["rid"][r])

        conn, key_of = self._model_conn, self._model_key

        def tid(t: str) -> str:
            assert t in self.to_model["tid"], f"the state holds task {t!r}, never answered"
            return str(self.to_model["tid"][t])

        def input_id(i: str) -> str:
            return str(self._model_id("rid", self._model_id("eid", i)))

        return dataclasses.replace(
            obs,
            subscribed=frozenset(conn(c) for c in obs.subscribed),
            known=frozenset(conn(c) for c in obs.known),
            parked={conn: [eid(e) for e in eids] for conn, eids in obs.parked.items()},
            elicitations={
                eid(e): (key[0], eid(key[1])) if key[1] == e else key_of(key)
                for e, key in obs.elicitations.items()
            },
            workers={ref(r): key_of(key) for r, key in obs.workers.items()},
            in_flight={conn(c): n for c, n in obs.in_flight.items()},
            open={key_of(key): value for key, value in obs.open.items()},
            client_requests={
                rid(r): (key_of(key), ref(w), token, method)
                for r, (key, w, token, method) in obs.client_requests.items()
            },
            worker_requests={ref(w): [rid(r) for r in rs] for w, rs in obs.worker_requests.items()},
            tasks={
                tid(t): (owner, status, key_of(key), tuple(input_id(i) for i in inputs))
                for t, (owner, status, key, inputs) in obs.tasks.items()
            },
        )

    def _observe_and_compare(self, ev: Event | None) -> Observation:
        obs = self.observe_fn(self.state)
        real = self._translated(obs)
        expected = self.model.observe()
        for f in dataclasses.fields(Observation):
            a, b = getattr(real, f.name), getattr(expected, f.name)
            assert same(a, b), f"{f.name} after {ev!r}:\n  reducer {a!r}\n  model   {b!r}"
        self._check_observed_rules(obs)
        return obs

    def _check_observed_rules(self, obs: Observation) -> None:
        """The rules that can be read off an observation, whatever the implementation."""
        opts = self.options
        share = self.model.per_connection_share
        counts = {conn: len(eids) for conn, eids in obs.parked.items()}
        # A modern nonce is parked under (its owner, itself) and needs no subscriber (R-MRTR-12).
        nonce_owners = {key[0] for e, key in obs.elicitations.items() if key[1] == e}
        call_owners = {key[0] for e, key in obs.elicitations.items() if key[1] != e}
        for conn, n in counts.items():
            assert n <= opts.max_parked_elicitations, f"R-INV-1: {conn!r} parks {n}"
        for conn in call_owners:
            assert conn in obs.subscribed, f"R-INV-5: {conn!r} parks without a subscriber"
        held: dict[Hashable, int] = {}  # R-ADM-6: the share is the owner's (R-PARK-5)
        for call in self.model.calls:
            if call.worker is not None:
                held[call.owner] = held.get(call.owner, 0) + 1
        for owner, n in held.items():
            assert n <= share, f"R-INV-1: {owner!r} runs {n} workers over its share {share}"
        assert obs.parked_total == sum(counts.values()) == len(obs.elicitations), "R-INV-2"
        assert obs.parked_total <= opts.max_parked_elicitations_total, "R-INV-1: total parked"
        assert obs.in_flight_total == sum(obs.in_flight.values()) == len(obs.workers), "R-INV-2"
        assert obs.in_flight_total <= opts.max_in_flight, "R-INV-1: total workers"
        assert obs.top == max(counts.values(), default=0), "R-INV-3: top"
        entries = obs.caps_unsubscribed + obs.caps_live
        assert len(entries) <= opts.max_client_capabilities, "R-INV-1: capability entries"
        assert len(set(entries)) == len(entries), "R-INV-3: a connection with two entries"
        assert set(obs.caps_live) <= obs.subscribed, "R-INV-3: a live entry without subscriber"
        assert not set(obs.caps_unsubscribed) & obs.subscribed, "R-INV-3: entry in wrong group"
        holders = obs.subscribed | set(entries) | {conn for conn, _ in obs.open} | nonce_owners
        holders |= set(counts)  # R-PARK-1: an owner is kept while it holds parking places
        assert obs.known == holders, f"R-INV-6: kept {set(obs.known)}, holding {holders}"
        assert obs.can_sample.keys() == obs.can_elicit.keys(), "R-CAP-4: sampling flag per entry"
        listed: list[str] = []
        for ref, ids in obs.worker_requests.items():
            assert ids, f"R-INV-7: worker {ref!r} listed with no request"
            n = len(ids)
            assert n <= opts.max_client_requests_per_call, f"R-INV-7: worker {ref!r} has {n}"
            listed += ids
        assert sorted(listed) == sorted(obs.client_requests), "R-INV-7: the per-worker lists"
        for rid, (key, ref, _, method) in obs.client_requests.items():
            assert obs.workers.get(ref) == key, f"R-INV-7: {rid!r}'s worker does not serve {key}"
            assert obs.open.get(key, ("",))[0] == "running", f"R-INV-7: {rid!r}: {key} not running"
            assert rid in obs.worker_requests.get(ref, []), f"R-INV-7: {rid!r} not in its list"
            assert method in (ELICIT, SAMPLE), f"R-CTX-4: {rid!r} asks {method!r}"

    # -- the shell's view: timers and workers ----------------------------------------------------

    def _replay_shell(self, effects: list[Effect], after: Observation) -> None:
        for e in effects:
            if isinstance(e, StartTimer):
                assert e.key not in self.armed, f"R-INV-4: {e.key!r} armed twice"
                self.armed[e.key] = e.deadline
            elif isinstance(e, CancelTimer):
                assert e.key in self.armed, f"R-INV-4: cancels {e.key!r}, which is not armed"
                del self.armed[e.key]
                self.disarmed.append(e.key)
            elif isinstance(e, StartWorker):
                assert e.ref not in self.running, f"worker {e.ref} started twice"
                self.running[e.ref] = e.job
            elif isinstance(e, KillWorker):
                assert e.ref in self.running, f"kills worker {e.ref}, which is not running"
                del self.running[e.ref]
        live = self.live_timers_fn(self.state)
        armed = {key for key in self.armed if key[0] not in TASK_TIMERS}  # R-INV-4's
        assert armed == live, f"R-INV-4: armed {armed} != live {live}"
        in_model_ids = {
            (kind, self.to_model[_id_kind(kind)].get(ident, ident)) for kind, ident in self.armed
        }
        # the spec's timers, apart from live_timers_fn; and the tasks' (R-TASK-4, R-TASK-9)
        expected = self.model.live_timers() | self.model.task_timers()
        assert in_model_ids == expected, f"R-INV-4: armed {in_model_ids} != model's {expected}"
        worker_timers = {ident for kind, ident in self.armed if kind == "worker"}
        assert set(self.running) == worker_timers == set(after.workers), (
            f"R-WORK-1: running {set(self.running)}, timers {worker_timers}, "
            f"state {set(after.workers)}"
        )
        request_timers = {ident for kind, ident in self.armed if kind == CLIENT_REQUEST_TIMER}
        assert request_timers == set(after.client_requests), (
            f"R-INV-7: client-request timers {request_timers}, "
            f"outstanding {set(after.client_requests)}"
        )

    # -- delivery --------------------------------------------------------------------------------

    def _check_withdrawals(
        self, ev: Event, effects: list[Effect], before: Observation, after: Observation
    ) -> None:
        """R-CTX-6 by the machine's own account, not the model's: every client request that
        ended in this step was answered (a Resolve, no withdrawal), timed out (a Resolve and a
        withdrawal), or its tool ended (a withdrawal, unless its connection left or rebound)."""
        withdrawn = [
            p.message["params"]["requestId"]
            for p in effects
            if isinstance(p, Push)
            and p.message.get("method") == "notifications/cancelled"
            and p.message.get("params", {}).get("requestId") in before.client_requests
        ]
        assert len(withdrawn) == len(set(withdrawn)), f"R-CTX-6: withdrawn twice: {withdrawn}"
        resolved = {e.token for e in effects if isinstance(e, Resolve)}
        for rid, (key, _ref, token, _method) in before.client_requests.items():
            if rid in after.client_requests:
                continue
            if is_channel(key[0]):
                continue  # a task's: its withdrawal went to the task (R-TASK-10)
            left = isinstance(ev, SubscriberDetached | SubscriberAttached) and ev.conn == key[0]
            timed_out = isinstance(ev, TimerFired) and ev.key == ("client_request", rid)
            if timed_out:
                assert token in resolved, f"R-CTX-6: {rid} timed out unresolved"
                assert rid in withdrawn, f"R-CTX-6: {rid} timed out but was not withdrawn"
            elif token in resolved:
                assert rid not in withdrawn, f"R-CTX-5: {rid} answered and withdrawn"
            elif left:
                assert rid not in withdrawn, f"R-CTX-6: {rid} withdrawn from a leaver"
            else:
                assert rid in withdrawn, f"R-CTX-6: {rid} ended with its tool, not withdrawn"

    def _check_delivery(
        self, ev: Event, effects: list[Effect], before: Observation, after: Observation
    ) -> None:
        outcomes: set[CallKey] = set()
        replies = [e for e in effects if isinstance(e, Reply)]
        if isinstance(ev, ToolCallReceived | ReadRequested | PingReceived) or (
            isinstance(ev, ClientInitialized) and ev.request_id is not None
        ):
            key = (ev.conn, ev.request_id)
            # R-ADM-0: an id that is no id is answered under none
            answered_as = ev.request_id if is_request_id(ev.request_id) else None
            mine = [r for r in replies if r.conn == ev.conn and same(r.request_id, answered_as)]
            assert len(mine) == len(replies) <= 1, "R-DLV-1: a request was answered twice"
            if mine:
                assert mine[0].message is not None, "a request answered with nothing on arrival"
                if key in before.open:  # R-ADM-1: the open call is untouched
                    assert after.open.get(key) == before.open[key], "R-ADM-1"
            else:
                assert key not in before.open, "R-ADM-1: a reused id was not refused"
                assert key in after.open, "R-DLV-1: a request neither answered nor opened"
                self.awaiting_reply.add(key)
        else:
            for r in replies:
                key = (r.conn, r.request_id)
                assert key in self.awaiting_reply, f"R-DLV-1: {r!r} answers no open request"
                self.awaiting_reply.discard(key)
                if r.message is not None:
                    outcomes.add(key)
                elif key in after.open:  # R-DLV-3: parked in push mode
                    assert after.open[key] == ("parked", True), f"R-DLV-3: {after.open[key]}"
                    self.awaiting_push.add(key)
        for p in (e for e in effects if isinstance(e, Push)):
            msg = p.message
            if msg.get("id") in after.client_requests or msg.get("method") == SAMPLE:
                asked = after.client_requests.get(msg.get("id"))  # type: ignore[arg-type]
                assert asked is not None, f"R-CTX-4: {msg!r} is no outstanding request"
                assert asked[0][0] == p.conn, "R-CTX-4: a tool's request to a non-owner"
                assert same(asked[0][1], p.related), f"R-DLV-1: asks for {asked}, {p.related=}"
                assert msg.get("method") == asked[3], f"R-CTX-4: {msg!r} is not a {asked[3]}"
            elif (
                msg.get("method") == "notifications/cancelled"
                and msg.get("params", {}).get("requestId") in before.client_requests
            ):
                rid = msg["params"]["requestId"]
                asked = before.client_requests[rid]
                assert asked[0][0] == p.conn, "R-CTX-6: withdrawn from a non-owner"
                assert same(asked[0][1], p.related), f"R-DLV-1: withdraws {asked}, {p.related=}"
                assert rid not in after.client_requests, "R-CTX-6: withdrawn but outstanding"
            elif msg.get("method") == "elicitation/create":
                owner = after.elicitations.get(msg.get("id"))  # type: ignore[arg-type]
                assert owner is not None, "R-PARK-2: a prompt for no parked call"
                assert owner[0] == p.conn, "R-PARK-2: a prompt to a non-owner"
                assert same(owner[1], p.related), f"R-DLV-1: prompt for {owner}, {p.related=}"
            elif msg.get("method") == "notifications/cancelled":
                eid = msg.get("params", {}).get("requestId")
                owner = before.elicitations.get(eid)
                assert owner is not None, "R-CLOSE-4: withdraws no parked call"
                assert owner[0] == p.conn, "R-CLOSE-4: withdrawn from a non-owner"
                assert same(owner[1], p.related), f"R-DLV-1: withdraws {owner}, {p.related=}"
                assert eid not in after.elicitations, "R-CLOSE-4: withdrawn but still parked"
            elif msg.get("method") == "notifications/tools/list_changed":
                assert isinstance(ev, ToolRegistered | ToolUnregistered), "R-PROTO-12"
                assert p.related is None, f"R-PROTO-12: related to {p.related!r}"
            else:
                assert is_response(msg), f"an unexpected push {msg!r}"
                assert same(msg.get("id"), p.related), f"R-DLV-1: {p.related=} for {msg!r}"
                key = (p.conn, msg.get("id"))
                assert key in self.awaiting_push, f"R-DLV-3: {p!r} answers no pushed call"
                self.awaiting_push.discard(key)
                outcomes.add(key)
        self._check_withdrawals(ev, effects, before, after)
        dropping = isinstance(
            ev, CancelRequested | CallerExited | SubscriberDetached | SubscriberAttached
        )
        if isinstance(ev, SubscriberDetached | SubscriberAttached):
            assert not any(isinstance(e, Push) for e in effects), "R-DROP-3: pushed to a leaver"
        for key in before.open.keys() - after.open.keys():
            if is_channel(key[0]):
                continue  # a task's call: its outcome is the task's (R-TASK-5)
            if dropping:
                assert key not in outcomes, f"R-DROP-4: dropped {key!r} got an outcome"
            else:
                assert key in outcomes, f"R-DLV-1: {key!r} ended without an outcome"
            self.awaiting_push.discard(key)
        for key in outcomes:
            assert key not in after.open, f"R-CLOSE-3: {key!r} got an outcome but stays open"
        unanswered = {
            key
            for key, (_, replied) in after.open.items()
            if not replied and not is_channel(key[0])
        }
        assert self.awaiting_reply == unanswered, "R-DLV-1: requests awaiting a reply"
        pushed = {key for key, (_, replied) in after.open.items() if replied}
        assert self.awaiting_push == pushed, "R-DLV-3: calls awaiting a pushed outcome"

    # -- resolution: the shell's tools waiting on their own requests ---------------------------

    def _check_resolution(self, ev: Event, effects: list[Effect], after: Observation) -> None:
        """R-CTX-4 .. R-CTX-6 from the shell's side, whatever the model says."""
        resolves = [e for e in effects if isinstance(e, Resolve)]
        resolved: set[Hashable] = set()
        for r in resolves:
            assert r.token not in resolved, f"R-CTX-5: {r.token!r} resolved twice in a step"
            resolved.add(r.token)
            if isinstance(ev, ToolRequested) and r.token == ev.token:
                assert same(r.ref, ev.ref), f"R-CTX-4: {r!r} resolves another ref's request"
                continue
            assert r.token in self.waiting, f"R-CTX-5: {r!r} resolves a token nobody waits on"
            assert self.waiting[r.token] == r.ref, f"R-CTX-5: {r!r} to the wrong ref"
        outstanding = {token: ref for _, ref, token, _ in after.client_requests.values()}
        if isinstance(ev, ToolRequested):
            asked = ev.token in outstanding
            what = "both sent and refused" if asked else "neither sent nor refused"
            assert asked != (ev.token in resolved), f"R-CTX-4: {ev!r} {what}"
            if asked:
                assert outstanding[ev.token] == ev.ref, "R-CTX-4: sent under another ref"
        for token, ref in self.waiting.items():
            if token in outstanding:
                assert token not in resolved, f"R-CTX-5: {token!r} resolved but outstanding"
            elif ref in after.workers:  # its tool still runs: answered or timed out
                assert token in resolved, f"R-CTX-6: {token!r} ended without a Resolve"
            else:  # its tool ended: nothing waits
                assert token not in resolved, f"R-CTX-6: {token!r} resolved after its tool ended"
        self.waiting = outstanding

    # -- the eviction oracle ---------------------------------------------------------------------

    def _eviction_oracle(
        self, ev: Event, effects: list[Effect], before: Observation, after: Observation
    ) -> None:
        asker = before.workers.get(ev.ref) if isinstance(ev, WorkerFinished) else None
        if asker is None or before.open[asker][0] != "authorizing":
            return
        assert isinstance(ev, WorkerFinished)
        if self.modern_calls.get(asker, False):
            return  # a modern ASK parks a nonce under its owner: the model checks it
        if is_channel(asker[0]) or any(is_channel(k[0]) for k in before.elicitations.values()):
            return  # a task's call asks, or may be evicted: the model checks it (R-TASK-10)
        value = ev.value
        if not (isinstance(value, Ask) and isinstance(value.prompt, str)):
            return
        opts = self.options
        conn = asker[0]
        counts = {c: len(eids) for c, eids in before.parked.items()}
        owner = self.admitted_owner.get(asker, self._owner(conn))  # R-PARK-5
        mine = counts.get(owner, 0)  # R-PARK-1: counted by owner
        top = max(counts.values(), default=0)
        delivered: dict[CallKey, dict[str, Any] | None] = {}
        for e in effects:
            if isinstance(e, Reply) and e.message is not None:
                delivered[(e.conn, e.request_id)] = e.message
            elif isinstance(e, Push) and is_response(e.message):
                delivered[(e.conn, e.message.get("id"))] = e.message
        evicted = [
            key
            for key, message in delivered.items()
            if key != asker and deny_of(message) == ("ask", EVICTED)
        ]
        parked = after.open.get(asker, ("", False))[0] == "parked"
        asker_deny = deny_of(delivered.get(asker))
        # R-MRTR-15: an evicted modern nonce leaves its place and says nothing
        gone = [e for e in before.elicitations if e not in after.elicitations]
        silent = [e for e in gone if before.elicitations[e][1] == e]

        def verdict(name: str) -> None:
            type(self).seen[name] += 1
            label(f"ASK: {name}")

        if not (conn in before.subscribed and before.can_elicit.get(conn, False)):
            assert asker_deny == ("ask", value.prompt), f"R-AUTH-3: {asker_deny}"
            assert not evicted, "R-AUTH-3: an unaskable owner evicted"
            assert not silent, "R-AUTH-3: an unaskable owner evicted"
            assert not parked, "R-AUTH-3: an unaskable owner parked"
            verdict("deny-on-ask")
        elif mine >= opts.max_parked_elicitations:
            assert asker_deny == ("ask", TOO_MANY_PENDING), f"R-PARK-1: {asker_deny}"
            assert not evicted, "R-PARK-1: over the cap, yet evicted"
            assert not silent, "R-PARK-1: over the cap, yet evicted"
            assert not parked, "R-PARK-1: over the cap, yet parked"
            verdict("refused: connection full")
        elif before.parked_total < opts.max_parked_elicitations_total:
            assert not evicted, "R-PARK-3: room on the server, yet evicted"
            assert not silent, "R-PARK-3: room on the server, yet evicted"
            assert parked, "R-PARK-2: room on the server, yet not parked"
            verdict("parked")
        elif mine < top:
            assert len(evicted) + len(silent) == 1, f"R-PARK-3: {evicted}, {silent} for one ASK"
            victim = evicted[0] if evicted else before.elicitations[silent[0]]
            known = self.admitted_owner.get(victim, self._owner(victim[0]))
            holder = known if evicted else victim[0]
            assert holder != owner, "R-PARK-4: the asker was its own victim"
            assert counts.get(holder) == top, f"R-PARK-4: evicted from {holder!r}, not a top holder"
            oldest = before.elicitations[before.parked[holder][0]]
            assert victim == oldest, f"R-PARK-4: evicted {victim!r}, the oldest is {oldest!r}"
            holders = [c for c, n in counts.items() if n == top]
            first = min(self.count_changed_at[c] for c in holders)
            assert self.count_changed_at[holder] == first, (
                f"R-PARK-4: {holder!r} reached {top} after another holder did"
            )
            assert parked, "R-PARK-3: evicted, but the asker did not park"
            if silent:
                verdict("evicted a modern nonce")
                return
            assert victim not in after.open, "R-CLOSE-3: the victim is still open"
            by = [
                e.fields.get("evicted_by")
                for e in effects
                if isinstance(e, Emit) and e.name == "call_ended"
                if (e.fields.get("conn"), e.fields.get("request_id")) == victim
            ]
            assert by == [conn], f"R-LOG-2: the victim's record says evicted by {by!r}"
            assert parked, "R-PARK-3: evicted, but the asker did not park"
            verdict("evicted")
        else:
            assert asker_deny == ("ask", TOO_MANY_ON_SERVER), f"R-PARK-3: {asker_deny}"
            assert not evicted, "R-PARK-3: refused, yet evicted"
            assert not silent, "R-PARK-3: refused, yet evicted"
            assert not parked, "R-PARK-3: refused, yet parked"
            verdict("refused: server full")

    def _attach_principal(self, data: st.DataObject) -> str | None:
        """The principal a subscriber attaches with: drawn from :attr:`ATTACH_PRINCIPALS`, with
        no draw when it offers one (a profile whose derandomized histories must not move)."""
        if len(self.ATTACH_PRINCIPALS) == 1:
            return self.ATTACH_PRINCIPALS[0]
        return data.draw(st.sampled_from(self.ATTACH_PRINCIPALS), label="principal")

    def _attach_per_request(self, data: st.DataObject) -> bool:
        """Whether a subscriber attaches a per-request connection: drawn from
        :attr:`ATTACH_PER_REQUEST`, with no draw when it offers one."""
        if len(self.ATTACH_PER_REQUEST) == 1:
            return self.ATTACH_PER_REQUEST[0]
        return data.draw(st.sampled_from(self.ATTACH_PER_REQUEST), label="per request")

    def _owner(self, conn: Hashable) -> Hashable:
        """R-PARK-5, the oracle's own: the principal the connection attached with, else the one
        owner of the per-request connections (R-PARK-7), else the connection itself."""
        principal = self.principal_of.get(conn)
        if principal is not None:
            return ("principal", principal)
        return ("anonymous",) if conn in self.per_request else conn

    def _note_count_changes(self, before: Observation, after: Observation) -> None:
        """The oracle's clock for R-PARK-4: the step at which each parked count last changed.

        Counts that change in one step change in an order only the step knows (a caller's calls
        are dropped in admission order), so the oracle accepts any of them as the first.
        """
        for conn in set(before.parked) | set(after.parked):
            if len(before.parked.get(conn, [])) != len(after.parked.get(conn, [])):
                self.count_changed_at[conn] = self.steps


# A modern read's ``_meta``: mostly accepted, declaring what a round may ask or not (R-MRTR-22).
MODERN_READ_METAS: tuple[object, ...] = (
    modern_meta({}),
    modern_meta({"elicitation": {}}),
    modern_meta({"elicitation": {}, "sampling": {}}),
    modern_meta({"elicitation": {}}, "2099-01-01"),
    {META_VERSION: MODERN_VERSION},
)


class ModernReadsMachine(ReducerMachine):
    """A profile that adds modern reads (spec/modern.md): ``resources/read``, ``prompts/get``,
    ``tools/list`` and a method the stateless revision does not have, with the 2026-07-28
    ``_meta`` (accepted or refused), mostly from connections that did not initialize, of a
    principal or not; their callbacks answer, fail or end rounds of their own (R-MRTR-24), and a
    read authorizer (drawn per run) allows, denies or asks (R-READ-2)."""

    seen: ClassVar[Counter[str]] = Counter()

    @precondition(lambda self: not self.stopped)
    @rule(data=st.data(), principal=st.sampled_from(PRINCIPALS))
    def modern_reads(self, data: st.DataObject, principal: str | None) -> None:
        for _ in range(data.draw(st.integers(1, 2), label="burst")):
            conn = self._modern_conn(data)
            request_id = data.draw(st.sampled_from(REQUEST_IDS), label="request id")
            methods = MODERN_READ_METHODS
            if conn in self.model.versions:  # 2025: the reads only
                methods = tuple(m for m in methods if m in READ_METHODS)
            method = data.draw(st.sampled_from(methods), label="method")
            caller = data.draw(st.sampled_from((*CALLERS, None)), label="caller")
            meta = data.draw(st.sampled_from(MODERN_READ_METAS), label="_meta")
            params = {**PARAMS[method], "_meta": meta}
            read = ReadRequested(conn, request_id, method, params, self.now, caller, principal)
            effects = self.apply(read)
            for _ in range(2):  # its authorizer, then its callback, may answer at once
                started = [e.ref for e in effects if isinstance(e, StartWorker)]
                if not started or not data.draw(st.integers(0, 3), label="at once"):
                    break
                value = self._value_for(started[0], data)
                effects = self.apply(WorkerFinished(started[0], value, self.now))

    def _tally(
        self, ev: Event, effects: list[Effect], before: Observation, after: Observation
    ) -> None:
        super()._tally(ev, effects, before, after)
        if isinstance(ev, WorkerFinished | WorkerFailed):
            key = before.workers.get(ev.ref)
            if key is None or not before.open[key][0].startswith("read"):
                return  # not a read's callback
        elif not isinstance(ev, ReadRequested):
            return
        seen = type(self).seen
        for e in effects:
            message = (e.message or {}) if isinstance(e, Reply) else {}
            result, error = message.get("result"), message.get("error")
            if isinstance(result, dict) and "resultType" in result:
                cached = "cacheable" if "ttlMs" in result else "not cacheable"
                seen[f"modern read: {result['resultType']}, {cached}"] += 1
            elif isinstance(error, dict):
                data = error.get("data")
                detail = data.get("detail") if isinstance(data, dict) else None
                seen[f"read error {error.get('code')}: {detail}"] += 1


# Tasks (spec/tasks.md): a tool whose task support is optional, one whose support is required,
# and the request metas that declare the extension or do not (R-TASK-2).
JOB, MUST, ODD = "job", "must", "odd"
TASK_CONNS: tuple[str, ...] = ("t", "u")  # stateless requests' connections, never initialized
DECLARED: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}
TASK_METAS: tuple[object, ...] = (
    modern_meta({**DECLARED, "elicitation": {}}),
    modern_meta({**DECLARED, "elicitation": {}}),
    modern_meta({**DECLARED, "elicitation": {}, "sampling": {}}),
    modern_meta(DECLARED),
    modern_meta({"elicitation": {}}),
    modern_meta({"extensions": {TASKS_EXTENSION: True}}),
)
TASK_METHODS: tuple[str, ...] = (
    "tasks/get",
    "tasks/get",
    "tasks/update",
    "tasks/update",
    "tasks/cancel",
    "tasks/result",
)
# A tasks/update's answers to a task's inputs: to an approval, to a tool's own request, none.
TASK_RESPONSES: tuple[object, ...] = (
    {"action": "accept", "content": {"approve": True}},
    {"action": "accept", "content": {"approve": True}},
    {"action": "decline"},
    {"action": "accept", "content": {"name": "Ada"}},
    "accept",
)
# What follows a task-declaring call at once: a worker reports, its window ends, its tool asks,
# its task's owner answers its inputs, cancels it or asks after it.
STEPS_AT_ONCE: tuple[str, ...] = (
    "window",
    "window",
    "window",
    "window",
    "report",
    "report",
    "ask",
    "cancel",
    "get",
    "stop",
)
UNKNOWN_TASK_IDS: tuple[object, ...] = ("askgate-task-AAAAAAAAAAAAAAAAAAAAAA", 7)


class TaskMachine(ReducerMachine):
    """A profile that adds tasks (spec/tasks.md): modern calls of a tool that supports tasks
    (optional or required), declaring the extension or not, from two connections that never
    initialize, of a principal or not; their authorizer and tool may answer at once, their
    inline window end at once or their tool ask its client (R-TASK-4); ``tasks/get``,
    ``tasks/update`` (answering the task's inputs) and ``tasks/cancel`` from the owner or not
    (R-TASK-7 .. R-TASK-10), with small task caps (R-TASK-6) and ttls (R-TASK-9). A call is
    never cancelled, nor its connection dropped, inside its inline window, and no request
    reuses its id meanwhile: tests/test_tasks.py and the tasks explorer check those
    (R-TASK-4)."""

    seen: ClassVar[Counter[str]] = Counter()
    # and one whose definition holds a support that is none (forbidden, R-TASK-1)
    TASK_TOOLS: ClassVar[Tools] = (
        (JOB, False, "optional"),
        (MUST, False, "required"),
        (ODD, False, "sometimes"),
    )
    AUTHORIZE_VALUES: ClassVar[tuple[object, ...]] = (
        Allow(),
        Ask("May I?"),
        Ask("Sure?"),
        Deny("no"),
    )
    # Mostly well-formed requests of a tool to its client, so that a task gets inputs.
    TOOL_REQUESTS: ClassVar[tuple[tuple[object, object], ...]] = (
        (ELICIT, FORM),
        (ELICIT, FORM),
        (SAMPLE, SAMPLING),
        (ELICIT, {"message": "hi"}),
    )
    # Mostly results (a task completed), an error result (completed too), a failure (failed).
    # No round of the tool's own (NeedsInput): a task's tool's own rounds (R-TASK-11) are not
    # in the model; tests/test_tasks.py checks them.
    RUN_VALUES: ClassVar[tuple[object, ...]] = (
        {"content": []},
        {"content": []},
        {"content": [], "isError": True},
        "not an object",
    )

    TASK_STEPS: ClassVar[tuple[str, ...]] = STEPS_AT_ONCE
    TASK_BURST: ClassVar[tuple[int, int]] = (1, 3)  # calls per burst, at least and at most

    def __init__(self) -> None:
        super().__init__()
        self.task_keys: list[tuple[str, object]] = []  # the task-declaring calls sent
        self.task_ids: list[str] = []  # the reducer's task ids, in creation order
        self.principals: dict[tuple[str, object], str | None] = {}  # a call's principal
        self.creators: dict[str, tuple[str, str | None]] = {}  # task id -> (conn, principal)

    def options_strategy(self) -> st.SearchStrategy[Options]:
        base = small_options(
            authorizer=st.sampled_from((True, True, False)), max_parked=2, max_total=3
        )
        return st.tuples(
            base,
            st.sampled_from((1, 1, 2)),
            st.sampled_from((1, 2, 3)),
            st.sampled_from((1, 100, 1_000)),
            st.sampled_from((60_000, 60_000, 1)),
        ).map(
            lambda t: attrs.evolve(
                t[0],
                max_tasks_per_owner=t[1],
                max_tasks_total=t[2],
                task_inline_ms=t[3],
                task_ttl_ms=t[4],
            )
        )

    def apply(self, ev: Event) -> list[Effect]:
        effects = super().apply(ev)
        for e in effects:  # the reducer's task ids, for tasks/* requests
            result = (e.message or {}).get("result") if isinstance(e, Reply) else None
            if isinstance(result, dict) and result.get("resultType") == "task":
                assert isinstance(e, Reply)
                tid = str(result["taskId"])
                self.task_ids.append(tid)
                principal = self.principals.get((str(e.conn), e.request_id))
                self.creators[tid] = (str(e.conn), principal)
        return effects

    def _request_id(self, conn: str, data: st.DataObject) -> object:
        """A request id for a request on ``conn``, never one of a call in its inline window
        (test_R_TASK_4_a_reused_request_id_leaves_the_calls_inline_window replays that
        reuse)."""
        assert self.obs is not None
        free = [r for r in REQUEST_IDS if self._window_of((conn, r)) is None]
        unused = [r for r in free if (conn, r) not in self.obs.open]  # mostly not reused
        pool = [*unused, *unused, *unused, *free] or [UNKNOWN_REF]
        return data.draw(st.sampled_from(pool), label="request id")

    def _window_of(self, key: tuple[str, object]) -> TimerKey | None:
        """The armed timer of the inline window of the call ``key``, if any."""
        for timer in self.armed:
            if timer[0] == WINDOW_TIMER and timer[1][0] == key:
                return timer
        return None

    @precondition(lambda self: not self.stopped)
    @rule(data=st.data(), principal=st.sampled_from(PRINCIPALS))
    def task_calls(self, data: st.DataObject, principal: str | None) -> None:
        """A burst of modern calls of a tool that supports tasks (or not); after each, maybe at
        once, its workers report, its window ends, its tool asks its client, or its task's
        inputs are answered by its owner."""
        for _ in range(data.draw(st.integers(*self.TASK_BURST), label="burst")):
            self._task_call(data, principal)

    def _task_call(self, data: st.DataObject, principal: str | None) -> None:
        assert self.obs is not None
        conn = data.draw(st.sampled_from(TASK_CONNS), label="conn")
        request_id = self._request_id(conn, data)
        tool = data.draw(st.sampled_from((JOB, JOB, MUST, ODD)), label="tool")
        meta = data.draw(st.sampled_from(TASK_METAS), label="_meta")
        key: tuple[Any, object] = (conn, request_id)
        call = ToolCallReceived(
            conn, request_id, tool, ARGUMENTS, self.now, "reply", None, meta, principal=principal
        )
        if key not in self.obs.open:
            self.principals[key] = principal
        tasks = len(self.task_ids)
        self.apply(call)
        if key not in self.task_keys:
            self.task_keys.append(key)
        for _ in range(5):  # bounded
            if len(self.task_ids) > tasks and key[0] in TASK_CONNS:  # it became a task
                tid = self.task_ids[-1]
                key = (TaskChannel(tid), tid)
            refs = [ref for ref, k in self.obs.workers.items() if k == key]
            window = self._window_of(key)
            task = self.obs.tasks.get(str(key[1])) if is_channel(key[0]) else None
            asked = task is not None and bool(task[3])  # its owner mostly answers at once
            steps = ("answer", "answer", "get", "cancel", "stop") if asked else self.TASK_STEPS
            step = data.draw(st.sampled_from(steps), label="next")
            if step == "window" and window is not None:
                self.now = max(self.now, self.armed[window])
                self.apply(TimerFired(window, self.now))
            elif step == "ask" and refs and isinstance(self.running.get(refs[0]), RunTool):
                self._ask(refs[0], data)
            elif step == "report" and refs:
                self.apply(WorkerFinished(refs[0], self._value_for(refs[0], data), self.now))
            elif step == "answer" and task is not None and task[3]:
                self._update(str(key[1]), task[3], data)
            elif step in ("cancel", "get") and task is not None:
                self._task_request(str(key[1]), f"tasks/{step}", {}, data)
            else:
                break

    def _update(self, tid: str, inputs: tuple[str, ...], data: st.DataObject) -> None:
        """Its owner answers a task's inputs through ``tasks/update`` (R-TASK-10)."""
        response = data.draw(st.sampled_from(TASK_RESPONSES), label="response")
        self._task_request(tid, "tasks/update", {"inputResponses": {inputs[0]: response}}, data)

    def _task_request(
        self, tid: str, method: str, more: dict[str, Any], data: st.DataObject
    ) -> None:
        """A ``tasks/*`` request of the task's owner."""
        conn, principal = self.creators[tid]
        params = {"taskId": tid, **more, "_meta": TASK_METAS[0]}
        request_id = self._request_id(conn, data)
        self.apply(ReadRequested(conn, request_id, method, params, self.now, None, principal))

    @precondition(lambda self: not self.stopped)
    @rule(data=st.data(), principal=st.sampled_from(PRINCIPALS))
    def task_requests(self, data: st.DataObject, principal: str | None) -> None:
        """``tasks/get``, ``tasks/update`` or ``tasks/cancel`` (or a removed method), mostly of
        a task of the owner, else of another owner's or of none (R-TASK-7)."""
        assert self.obs is not None
        conn = data.draw(st.sampled_from(TASK_CONNS), label="conn")
        method = data.draw(st.sampled_from(TASK_METHODS), label="method")
        recent = self.task_ids[-3:]
        tid = data.draw(st.sampled_from([*recent, *recent, *UNKNOWN_TASK_IDS]), label="task")
        if tid in self.creators and data.draw(st.integers(0, 3), label="as its owner"):
            conn, principal = self.creators[str(tid)]
        request_id = self._request_id(conn, data)
        meta = data.draw(st.sampled_from(TASK_METAS[:5]), label="_meta")
        params: dict[str, Any] = {"taskId": tid, "_meta": meta}
        if method == "tasks/update":
            task = self.obs.tasks.get(tid) if isinstance(tid, str) else None
            keys = [*(task[3] if task is not None else ()), "unknown-input"]
            chosen = data.draw(st.lists(st.sampled_from(keys), max_size=2), label="answered")
            params["inputResponses"] = {
                k: data.draw(st.sampled_from(TASK_RESPONSES), label="response") for k in chosen
            }
        self.apply(ReadRequested(conn, request_id, method, params, self.now, None, principal))

    @precondition(lambda self: not self.stopped and bool(self.task_keys))
    @rule(data=st.data(), after_ms=AFTER_MS)
    def task_request_cancelled(self, data: st.DataObject, after_ms: int) -> None:
        """A task-declaring call's request is cancelled, or its connection goes away: nothing
        to a task (R-TASK-5), a drop to a call still inline. Not inside the call's window (see
        the class doc)."""
        key = data.draw(st.sampled_from(self.task_keys), label="call")
        gone = data.draw(st.booleans(), label="connection gone")
        keys = [k for k in self.task_keys if k[0] == key[0]] if gone else [key]
        if any(self._window_of(k) is not None for k in keys):
            return
        self.now += after_ms
        if gone:
            self.apply(SubscriberDetached(key[0], self.now))
        else:
            self.apply(CancelRequested(key[0], key[1], self.now))

    def _tally(
        self, ev: Event, effects: list[Effect], before: Observation, after: Observation
    ) -> None:
        super()._tally(ev, effects, before, after)
        seen = type(self).seen
        for tid, (_, status, _, _) in after.tasks.items():
            was = before.tasks.get(tid)
            if was is None:
                seen["task created"] += 1
            if (was is None and status != "working") or (was is not None and was[1] != status):
                seen[f"task {status}"] += 1
                if was is not None and was[1] == "input_required" and isinstance(ev, ReadRequested):
                    seen["task input answered by tasks/update"] += 1
        if any(tid not in after.tasks for tid in before.tasks):
            seen["task forgotten"] += 1
        for e in effects:
            message = (e.message or {}) if isinstance(e, Reply) else {}
            error = message.get("error")
            if isinstance(ev, ReadRequested) and isinstance(error, dict):
                seen[f"{ev.method}: {error.get('code')} {error.get('message')}"] += 1
            elif isinstance(ev, ReadRequested) and "result" in message:
                seen[f"{ev.method} answered"] += 1
            elif isinstance(ev, ToolCallReceived) and isinstance(error, dict):
                seen[f"tools/call: {error.get('code')}"] += 1
        if isinstance(ev, TimerFired) and ev.key[0] == WINDOW_TIMER:
            ident: Any = ev.key[1]  # ((conn, request id), window)
            kept = len(after.tasks) == len(before.tasks) and ident[0] in after.open
            if kept:
                seen["task kept inline by a cap"] += 1  # R-TASK-6


class ContextMachine(ReducerMachine):
    """A profile that puts pressure on a running tool's own requests (R-CTX-4 .. R-CTX-6).

    No tool authorizer, so that calls run at once; every connection subscribes and advertises
    elicitation and sampling before the first rule; three capability entries (nobody is evicted
    at the start), room for two workers per connection, one or two requests per call. Running
    tools then ask, and their clients answer, time out, cancel and go away.
    """

    seen: ClassVar[Counter[str]] = Counter()
    PRECONNECT = True
    PRECONNECT_CAPABILITIES: ClassVar[object] = {"elicitation": {}, "sampling": {}}
    # Mostly well-formed requests, so that most are sent.
    TOOL_REQUESTS = (
        *[(ELICIT, FORM)] * 6,
        *[(SAMPLE, SAMPLING)] * 6,
        *ReducerMachine.TOOL_REQUESTS,
    )

    def options_strategy(self) -> st.SearchStrategy[Options]:
        return small_options(
            authorizer=st.just(False),
            min_in_flight=4,
            max_in_flight=4,
            min_share=2,
            min_caps=3,
            max_caps=3,
            max_requests=2,
        )


def is_channel(conn: object) -> bool:
    """Whether ``conn`` is a task's channel (spec/tasks.md), as the reducer or the model names
    it: no client's connection."""
    return isinstance(conn, TaskChannel | ModelChannel)


def _definition(name: str, _sensitive: bool, support: str = "forbidden") -> Any:
    """A tool's ``tools/list`` entry declaring its task support (R-TASK-1), or ``None``."""
    if support == "forbidden":
        return None
    return {"name": name, "inputSchema": {"type": "object"}, "execution": {"taskSupport": support}}


def _id_kind(timer_kind: object) -> str:
    if timer_kind == WINDOW_TIMER:
        return "window"
    if timer_kind == TTL_TIMER:
        return "tid"
    if timer_kind == "elicitation":
        return "eid"
    if timer_kind == CLIENT_REQUEST_TIMER:
        return "rid"
    return "ref"


def _kind_of_model_id(model_id: object) -> str:
    """A model id says its kind: a running tool's request or an approval prompt."""
    return "rid" if str(model_id).startswith(MODEL_REQUEST_PREFIX) else "eid"


def same_outcome(a: object, b: object) -> bool:
    """:func:`same`, looking into :class:`Failure` values (R-CTX-4 .. R-CTX-6)."""
    if isinstance(a, Failure) and isinstance(b, Failure):
        return same((a.code, a.message, a.data), (b.code, b.message, b.data))
    return same(a, b)


def machine_for(
    *,
    step_fn: Callable[[Any, Event], tuple[Any, list[Effect]]] | None = None,
    initial_state_fn: Callable[[Options, Tools], Any] | None = None,
    observe_fn: Callable[[Any], Observation] | None = None,
    check_invariants_fn: Callable[[Any], None] | None = None,
    live_timers_fn: Callable[[Any], set[TimerKey]] | None = None,
    base: type[ReducerMachine] = ReducerMachine,
) -> type[ReducerMachine]:
    """A subclass of ``base`` whose hooks are the functions given (the others stay ``base``'s).

    It has its own ``seen`` counter.
    """

    class Machine(base):  # type: ignore[valid-type, misc]
        seen: ClassVar[Counter[str]] = Counter()

        def initial_state_fn(self, options: Options, tools: Tools) -> Any:
            if initial_state_fn is None:
                return super().initial_state_fn(options, tools)
            return initial_state_fn(options, tools)

        def step_fn(self, state: Any, event: Event) -> tuple[Any, list[Effect]]:
            if step_fn is None:
                return super().step_fn(state, event)  # type: ignore[no-any-return]
            return step_fn(state, event)

        def check_invariants_fn(self, state: Any) -> None:
            if check_invariants_fn is None:
                super().check_invariants_fn(state)
            else:
                check_invariants_fn(state)

        def live_timers_fn(self, state: Any) -> set[TimerKey]:
            if live_timers_fn is None:
                return super().live_timers_fn(state)  # type: ignore[no-any-return]
            return live_timers_fn(state)

        def observe_fn(self, state: Any) -> Observation:
            if observe_fn is None:
                return super().observe_fn(state)  # type: ignore[no-any-return]
            return observe_fn(state)

    return Machine
