"""Totality: every event kind, in a spread of reachable states, lands in a valid state.

States are reached by seeded random walks over a small universe (three connections, a few
request ids, a plain, a sensitive and an unknown tool) under several option sets. In every
reached state every candidate event (well-formed and malformed) is applied: the result must pass
``check_invariants``, the effects must be well-formed, and the shell's armed timers (replayed
from the effects) must equal ``live_timers`` of the new state. The ``test_R_INV_*`` tests also
show that ``check_invariants`` catches each kind of corruption, so these checks can fail.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from askgate.core import (
    EVENT_TRANSITIONS,
    RECORDS,
    Allow,
    Ask,
    CallerExited,
    CancelRequested,
    CancelTimer,
    CatalogChanged,
    ClientInitialized,
    ClientReady,
    Deny,
    Effect,
    ElicitationAnswered,
    Emit,
    Event,
    Failure,
    InvariantError,
    KillWorker,
    LogEmitted,
    MessageReceived,
    Options,
    PingReceived,
    Push,
    ReadRequested,
    Reply,
    Resolve,
    ResourceUpdated,
    ServerStopping,
    StartTimer,
    StartWorker,
    State,
    SubscriberAttached,
    SubscriberDetached,
    TimerFired,
    ToolCallReceived,
    ToolInfo,
    ToolLogged,
    ToolProgressed,
    ToolRegistered,
    ToolRequested,
    ToolUnregistered,
    WorkerFailed,
    WorkerFinished,
    check_invariants,
    initial_state,
    live_timers,
    step,
)
from askgate.core.decide import is_request_id
from askgate.core.fifo import Fifo
from askgate.core.state import EMPTY_CONN, Progress, Stage

CONNS = ("a", "b", "c")
IDS: tuple[object, ...] = (0, 1, "x")
BAD_IDS: tuple[object, ...] = (None, True, 1.5, ["x"])
TOOLS = (ToolInfo("echo", False, False), ToolInfo("rm", True, True))
ANSWERS: tuple[object, ...] = (
    {"action": "accept", "content": {"approve": True}},
    {"action": "accept", "content": {"approve": "true"}},
    {"action": "decline"},
    {"action": "cancel"},
    {},
    None,
    [1],
)
CAPS: dict[str, object] = {"elicitation": {}, "sampling": {}}
ELICIT = {"message": "Who?", "requestedSchema": {"type": "object", "properties": {}}}
SAMPLE = {"messages": [], "maxTokens": 5}
CONFIGS = (
    Options(has_authorizer=True, max_parked_elicitations=2, max_parked_elicitations_total=3),
    Options(
        has_authorizer=True,
        max_parked_elicitations=1,
        max_parked_elicitations_total=2,
        max_in_flight=2,
        max_in_flight_per_connection=1,
        max_client_capabilities=2,
    ),
    Options(has_read_authorizer=True, has_unknown_tool_reply=True, max_in_flight=3),
)


def candidate_events(state: State, now: int) -> Iterator[Event]:
    """Every event worth trying in ``state``: live references and stale or malformed ones."""
    live_refs = list(state.workers)
    refs = [*live_refs, max(live_refs, default=0) + 7]
    eids: list[object] = [*state.parked, "askgate-elicit-unknown", 5]
    for conn in CONNS:
        yield ClientInitialized(conn, CAPS if conn != "c" else {}, now)
        yield ClientInitialized(conn, CAPS, now, "init", "2025-06-18")
        if conn in state.conns and state.conns[conn].held is not None:  # R-PARK-8
            yield ClientReady(conn, now)
        yield PingReceived(conn, 0, now)
        yield SubscriberAttached(conn, now)
        yield SubscriberDetached(conn, now)
        for rid in (*IDS, *BAD_IDS[:2]):
            yield ToolCallReceived(
                conn, rid, "echo", {}, now, mode="push" if rid == 1 else "reply", caller="k"
            )
            yield CancelRequested(conn, rid, now)
        yield ToolCallReceived(conn, "x", "rm", {}, now)
        yield ToolCallReceived(conn, 0, "nope", {}, now)
        yield ReadRequested(conn, 1, "resources/read", {"uri": "u"}, now)
        for eid in eids:
            for answer in ANSWERS[:4]:
                yield ElicitationAnswered(conn, eid, answer, now)
        for eid in list(state.parked)[:1]:
            for answer in ANSWERS[4:]:
                yield ElicitationAnswered(conn, eid, answer, now)
            yield ElicitationAnswered(conn, eid, None, now, error={"code": -1})
    for ref in refs:
        values: tuple[object, ...] = (
            Allow(),
            Ask("ok?"),
            Deny("no"),
            {"content": []},
            "text",
            None,
        )
        for value in values:
            yield WorkerFinished(ref, value, now)
        yield WorkerFailed(ref, now)
        yield TimerFired(("worker", ref), now)
        yield ToolProgressed(ref, now + 1, 100, "half", now)
        yield ToolProgressed(ref, float("nan"), now=now)
        yield ToolLogged(ref, "info", {"step": 1}, "tool", now)
        yield ToolLogged(ref, "loud", "x", None, now)
        yield ToolRequested(ref, ("t", ref), "elicitation/create", ELICIT, now)
        yield ToolRequested(ref, ("s", ref), "sampling/createMessage", SAMPLE, now)
        yield ToolRequested(ref, ("b", ref), "roots/list", {}, now)
        yield ToolRequested(ref, ("m", ref), "elicitation/create", {"message": 1}, now)
    for eid in eids:
        yield TimerFired(("elicitation", eid), now)
    rids: list[object] = [*list(state.client_requests)[:2], "askgate-request-unknown"]
    for rid in rids:
        yield TimerFired(("client_request", rid), now)
        for conn in CONNS[:2]:
            yield ElicitationAnswered(conn, rid, {"action": "accept", "content": {}}, now)
            yield ElicitationAnswered(conn, rid, "not an object", now)
            yield ElicitationAnswered(conn, rid, None, now, error={"code": -1, "message": "no"})
    for conn in CONNS[:2]:
        for data in messages(state):
            yield MessageReceived(conn, data, now, mode="push" if b'"p"' in data else "reply")
    yield ResourceUpdated("demo://status", now)
    yield LogEmitted("warning", {"msg": "hi"}, now)
    yield LogEmitted("debug", "quiet", now, conn="a")
    yield CatalogChanged("resource", "demo://new", {"uri": "demo://new", "name": "new"}, now)
    yield CatalogChanged("prompt", "greeting", None, now)
    yield TimerFired(("bogus", 1), now)
    yield CallerExited("k", now)
    yield CallerExited("nobody", now)
    yield ServerStopping(now)
    yield ToolRegistered("late", sensitive=True)
    yield ToolUnregistered("echo")


def messages(state: State) -> list[bytes]:
    """JSON-RPC lines worth sending: each method, bad params, garbage, answers to live ids."""
    lines = [
        b'{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":"2025-06-18",'
        b'"capabilities":{"elicitation":{}}}}',
        b'{"jsonrpc":"2.0","id":2,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":3,"method":"tools/list"}',
        b'{"jsonrpc":"2.0","id":"p","method":"tools/call","params":{"name":"echo","arguments":{}}}',
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":7}}',
        b'{"jsonrpc":"2.0","id":"g","method":"tools/call","params":{"name":"echo","arguments":{},'
        b'"_meta":{"progressToken":"tok"}}}',
        b'{"jsonrpc":"2.0","id":6,"method":"resources/list","params":{"cursor":"bogus"}}',
        b'{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"demo://status"}}',
        b'{"jsonrpc":"2.0","id":8,"method":"resources/subscribe","params":{"uri":"demo://status"}}',
        b'{"jsonrpc":"2.0","id":9,"method":"logging/setLevel","params":{"level":"info"}}',
        b'{"jsonrpc":"2.0","id":10,"method":"logging/setLevel","params":{"level":"loud"}}',
        b'{"jsonrpc":"2.0","id":11,"method":"prompts/get","params":{"name":"greeting"}}',
        b'{"jsonrpc":"2.0","id":12,"method":"server/discover"}',
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"p"}}',
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
        b"not json",
        b"[1,2]",
        b'{"jsonrpc":"2.0","id":1,"result":{}}',
    ]
    for eid in list(state.parked)[:1]:
        lines.append(
            b'{"jsonrpc":"2.0","id":"' + eid.encode() + b'","result":{"action":"accept",'
            b'"content":{"approve":true}}}'
        )
        lines.append(
            b'{"jsonrpc":"2.0","id":"' + eid.encode() + b'","error":{"code":-1,"message":"x"}}'
        )
    return lines


def check_effects(before: State, event: Event, after: State, effects: list[Effect]) -> None:
    """Effects are well-formed, workers and timers stay in step, outcomes go to owners."""
    armed = live_timers(before)
    workers = set(before.workers)
    if isinstance(event, WorkerFinished | WorkerFailed):
        workers.discard(event.ref)  # it ended by itself
    replied: set[tuple[object, str]] = set()
    for effect in effects:
        match effect:
            case StartTimer(key=timer, deadline=deadline):
                assert timer not in armed, f"timer {timer} armed twice"
                assert isinstance(deadline, int)
                armed.add(timer)
            case CancelTimer(key=timer):
                assert timer in armed, f"cancel of a timer not armed: {timer}"
                armed.discard(timer)
            case StartWorker(ref=ref):
                assert ref not in workers
                workers.add(ref)
            case KillWorker(ref=ref):
                assert ref in workers
                workers.discard(ref)
            case Reply(conn=conn, request_id=rid, message=message):
                key = (conn, repr(rid))  # an embedder's malformed id may be unhashable
                assert key not in replied, f"two replies to {(conn, rid)}"
                replied.add(key)
                if message is not None:
                    json.dumps(message, allow_nan=False)
            case Push(message=message):
                json.dumps(message, allow_nan=False)
            case Emit(name=name):
                assert name in ("client_capabilities_evicted", *RECORDS), name
            case Resolve(outcome=outcome):
                assert isinstance(outcome, dict | Failure), outcome
            case _:
                raise AssertionError(f"not an effect: {effect!r}")
    assert workers == set(after.workers)
    asked = {(conn, repr(rid)) for conn, rid in (*before.calls, *after.calls)}
    if isinstance(event, MessageReceived):  # its requests' ids are inside the bytes
        asked |= {key for key in replied if key[0] == event.conn}
    elif isinstance(event, ToolCallReceived | ReadRequested | PingReceived | ClientInitialized):
        asked.add((event.conn, repr(event.request_id)))
        if not is_request_id(event.request_id):  # R-ADM-0: refused under no id
            asked.add((event.conn, repr(None)))
    for key in replied:  # R-INV-9: only a connection that asked gets an answer
        assert key in asked, f"{key} answered, but that connection asked nothing under that id"


def _fired(event: Event) -> set[tuple[str, object]]:
    return {event.key} if isinstance(event, TimerFired) else set()


def walk(options: Options, seed: int, steps: int) -> Iterator[State]:
    """States along a seeded random walk from a fresh server."""
    rng = random.Random(seed)
    state = initial_state(options, id_key=b"k" * 32, tools=TOOLS)
    for conn in CONNS:
        state, _ = step(state, SubscriberAttached(conn))
        state, _ = step(state, ClientInitialized(conn, CAPS if conn != "c" else {}))
    for i in range(steps):
        yield state
        events = list(candidate_events(state, i))
        # Half the time, move a live call on (its worker answers, mostly ASK), so caps fill.
        live = [e for e in events if isinstance(e, WorkerFinished) and e.ref in state.workers]
        event: Event
        asking = [e for e in events if isinstance(e, ToolRequested) and e.ref in state.workers]
        if asking and rng.random() < 0.1:
            event = rng.choice(asking)
        elif live and rng.random() < 0.6:
            asks = [e for e in live if isinstance(e.value, Ask)]
            event = rng.choice(asks if asks and rng.random() < 0.7 else live)
        elif rng.random() < 0.7:
            event = rng.choice([e for e in events if isinstance(e, ToolCallReceived)])
        else:
            event = rng.choice(events)
        state, _ = step(state, event)


def reached_states() -> list[State]:
    states: list[State] = []
    for n, options in enumerate(CONFIGS):
        states.extend(walk(options, seed=n, steps=120))
    return states


STATES = reached_states()


def test_every_event_kind_is_generated() -> None:
    kinds = {type(e) for s in STATES for e in candidate_events(s, 0)}
    assert kinds == set(EVENT_TRANSITIONS)


@pytest.mark.parametrize("index", range(0, len(STATES), 3))
def test_R_INV_4_totality_every_event_in_reached_states(index: int) -> None:
    """Every event in a reached state: invariants hold, effects are well-formed, timers agree."""
    before = STATES[index]
    for event in candidate_events(before, 10_000):
        after, effects = step(before, event)
        check_invariants(after)
        check_effects(before, event, after, effects)
        armed = (live_timers(before) - _fired(event)) | {
            e.key for e in effects if isinstance(e, StartTimer)
        }
        armed -= {e.key for e in effects if isinstance(e, CancelTimer)}
        assert armed == live_timers(after), event


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 2)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(("", "u", "echo", "rm", "info", "loud", "2025-06-18")),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
PARAM_KEYS = (
    "name", "arguments", "uri", "level", "ref", "argument", "cursor", "capabilities",
    "protocolVersion", "requestId", "reason", "_meta", "action", "content",
)  # fmt: skip
METHODS = (
    "initialize", "ping", "tools/list", "tools/call", "resources/list",
    "resources/templates/list", "resources/read", "resources/subscribe", "resources/unsubscribe",
    "prompts/list", "prompts/get", "completion/complete", "logging/setLevel",
    "notifications/cancelled", "notifications/initialized", "nope",
)  # fmt: skip
PARAMS_VALUES = (
    st.dictionaries(st.sampled_from(PARAM_KEYS), JSON_VALUES, max_size=4)
    | st.fixed_dictionaries({"_meta": st.dictionaries(st.just("progressToken"), JSON_VALUES)})
    | JSON_VALUES
)


@st.composite
def peer_events(draw: st.DrawFn, state: State) -> Event:
    """An event carrying what a peer sent, with any JSON where a field comes from the peer."""
    conn = draw(st.sampled_from(CONNS))
    rid = draw(st.sampled_from(IDS) | JSON_VALUES)
    eids = [*state.parked, *state.client_requests]
    eid = draw(st.sampled_from(eids) | JSON_VALUES) if eids else draw(JSON_VALUES)
    kind = draw(st.sampled_from(("message", "read", "call", "answer", "cancel", "initialized")))
    if kind == "message":
        message: dict[str, object] = {"jsonrpc": "2.0", "method": draw(st.sampled_from(METHODS))}
        if draw(st.booleans()):
            message["id"] = rid
        if draw(st.booleans()):
            message["params"] = draw(PARAMS_VALUES)
        return MessageReceived(conn, json.dumps(message).encode(), 0, caller="k")
    if kind == "read":
        method = draw(st.sampled_from(METHODS) | JSON_VALUES)
        return ReadRequested(conn, rid, method, draw(PARAMS_VALUES), 0)  # type: ignore[arg-type]
    if kind == "call":
        tool = draw(st.sampled_from(("echo", "rm", "nope")) | JSON_VALUES)
        return ToolCallReceived(conn, rid, tool, draw(JSON_VALUES), 0)  # type: ignore[arg-type]
    if kind == "answer":
        return ElicitationAnswered(conn, eid, draw(JSON_VALUES), 0, draw(JSON_VALUES))
    if kind == "cancel":
        return CancelRequested(conn, rid, 0)
    return ClientInitialized(conn, draw(JSON_VALUES))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_R_PROTO_1_any_peer_input_in_any_reached_state_lands_in_a_valid_state(
    data: st.DataObject,
) -> None:
    """Whatever a peer sends, in any field, in any reached state: never an exception, a state
    that passes ``check_invariants`` and well-formed effects (bad input gets an answer)."""
    before = data.draw(st.sampled_from(STATES), label="state")
    event = data.draw(peer_events(before), label="event")
    after, effects = step(before, event)
    check_invariants(after)
    check_effects(before, event, after, effects)


def test_walks_reach_interesting_states() -> None:
    assert any(s.parked_total == s.options.max_parked_elicitations_total for s in STATES)
    assert any(s.in_flight_total == s.options.max_in_flight for s in STATES)
    assert any(len(s.calls) >= 3 for s in STATES)
    assert any(s.client_requests for s in STATES)
    assert any(s.progress for s in STATES)


# ---------------------------------------------------------------------------------------------
# check_invariants can fail: each corruption is caught and named.


def _busy_state() -> State:
    for state in STATES:
        if state.parked_total >= 1 and state.in_flight_total >= 1:
            return state
    raise AssertionError("no reached state has both a parked call and a worker")


def _catches(state: State, rule: str) -> None:
    with pytest.raises(InvariantError, match=rule):
        check_invariants(state)


def test_R_INV_1_check_catches_a_cap_overrun() -> None:
    state = _busy_state()
    tight = attrs.evolve(state.options, max_parked_elicitations_total=state.parked_total - 1 or 1)
    if state.parked_total == 1:
        tight = attrs.evolve(tight, max_in_flight=state.in_flight_total - 1 or 1)
        if state.in_flight_total == 1:
            tight = attrs.evolve(state.options, max_client_capabilities=0)
            state = attrs.evolve(state, cap_live=state.cap_live.push("zz")[0])
    _catches(attrs.evolve(state, options=tight), r"R-INV-[13]")
    check_invariants(_busy_state())


def test_R_INV_2_check_catches_a_drifting_count() -> None:
    state = _busy_state()
    _catches(
        attrs.evolve(state, store=attrs.evolve(state.store, total=state.parked_total + 1)),
        "R-INV-2",
    )
    _catches(attrs.evolve(state, in_flight_total=state.in_flight_total + 1), "R-INV-2")


def test_R_INV_3_check_catches_a_broken_index() -> None:
    state = _busy_state()
    store = state.store
    _catches(attrs.evolve(state, store=attrs.evolve(store, top=store.top + 1)), "R-INV-3")
    buckets = store.buckets.set(7, Fifo[object]().push("zz")[0])
    _catches(attrs.evolve(state, store=attrs.evolve(store, buckets=buckets)), "R-INV-3")


def test_R_INV_3_check_catches_a_call_kept_with_the_wrong_ones() -> None:
    """A parked call is kept in ``waiting`` and a worker-holding one in ``working``."""
    state = _busy_state()
    key, parked = next(iter(state.waiting.items()))
    moved = attrs.evolve(state, working=state.working.set(key, parked))
    _catches(attrs.evolve(moved, waiting=state.waiting.delete(key)), "R-INV-3")
    _catches(moved, "R-INV-3")  # in both
    key, working = next(iter(state.working.items()))
    _catches(attrs.evolve(state, waiting=state.waiting.set(key, working)), "R-INV-3")


def test_R_INV_4_check_catches_a_call_without_its_worker() -> None:
    state = _busy_state()
    ref = next(iter(state.workers))
    _catches(attrs.evolve(state, workers=state.workers.delete(ref)), "R-INV-4")


def test_R_INV_5_check_catches_a_parked_call_without_subscriber() -> None:
    state = _busy_state()
    eid = next(iter(state.parked))
    conn = state.parked[eid].key[0]
    c = state.conns[conn]
    broken = attrs.evolve(state, conns=state.conns.set(conn, attrs.evolve(c, subscribed=False)))
    _catches(broken, r"R-INV-5|R-CAP-3")


def test_R_INV_6_check_catches_a_connection_kept_for_nothing() -> None:
    state = _busy_state()
    _catches(attrs.evolve(state, conns=state.conns.set("ghost", EMPTY_CONN)), "R-INV-6")


def test_R_INV_6_connections_are_forgotten_once_empty() -> None:
    state = initial_state(CONFIGS[0], id_key=b"k" * 32, tools=TOOLS)
    for event in (
        SubscriberAttached("a"),
        ClientInitialized("a", {"elicitation": {}}),
        ToolCallReceived("a", 1, "echo", {}, 0),
        SubscriberDetached("a"),
        ToolCallReceived("b", 1, "nope", {}, 0),
    ):
        state, _ = step(state, event)
    assert len(state.conns) == 0
    assert len(state.calls) == 0


def test_R_INV_7_check_catches_a_client_request_without_its_tool() -> None:
    state = next(s for s in STATES if s.client_requests)
    check_invariants(state)
    request = next(iter(state.client_requests.values()))
    _catches(
        attrs.evolve(state, worker_requests=state.worker_requests.delete(request.ref)), "R-INV-7"
    )
    orphan = attrs.evolve(state, workers=state.workers.delete(request.ref))
    _catches(orphan, "R-INV-[347]")
    tight = attrs.evolve(state.options, max_client_requests_per_call=0)
    _catches(attrs.evolve(state, options=tight), "R-INV-7")
    stale = attrs.evolve(state, progress=state.progress.set(("zz", 1), Progress("tok")))
    _catches(stale, "R-INV-7")


def test_a_moved_call_keeps_every_field_but_those_it_is_given() -> None:
    """``Call.moved``, the one place a call is rebuilt in another stage, builds what
    ``attrs.evolve`` builds with the same changes, and leaves the call it came from alone."""
    moved = 0
    for state in STATES[::40]:
        for call in state.calls.values():
            before = attrs.astuple(call, recurse=False)
            replied = not call.replied
            moved_call = call.moved(Stage.RUNNING, 99, "e", replied, "approved", "a")
            assert moved_call == attrs.evolve(
                call,
                stage=Stage.RUNNING,
                worker=99,
                elicitation_id="e",
                replied=replied,
                decision="approved",
                approval="a",
            )
            assert attrs.astuple(call, recurse=False) == before
            moved += 1
    assert moved


def test_a_draft_freezes_into_an_equal_frozen_state_and_leaves_its_source_alone() -> None:
    """``step`` edits a draft holding every variable of a state and turns that draft itself
    into the new State: equal to one built by attrs; editing a draft never changes the
    state it was copied from."""
    for state in STATES[::40]:
        source = repr(state)
        new, _ = step(state, SubscriberAttached("draft-only", 0))  # it writes `conns` only
        assert type(new) is State
        assert new.__dict__ is not state.__dict__
        assert new == attrs.evolve(state, conns=new.conns)
        assert "draft-only" in new.conns
        assert "draft-only" not in state.conns
        assert repr(state) == source
