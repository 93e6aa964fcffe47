"""The synchronous driver (spec/sync.md): the async shell's scenarios on both drivers, then the
driver's own machinery (its lock, timer thread, worker threads, stop and in-process client).

Nothing waits on a sleep: reads wait on queues or events under a deadline, and time is virtual
(a ``ManualClock`` here, trio's ``MockClock`` for the async shell).
"""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest

from askgate import Allow, Ask, Deny, Server
from askgate.core import (
    Effect,
    Event,
    Job,
    SubscriberAttached,
    TimerFired,
    WorkerFailed,
    WorkerFinished,
    initial_state,
)
from askgate.core.effects import CancelTimer, KillWorker, StartTimer, StartWorker
from askgate.core.jobs import RunTool
from askgate.transports.sync import (
    CallTimeoutError,
    LocalClient,
    ManualClock,
    SyncRuntime,
    ToolCallError,
    UnknownToolError,
    serve_stdio_blocking,
)

from .harness import without_digest
from .stdio_peer import CANNOT_ASK, deny_payload
from .sync_gates import DEADLINE, GATES, Gate

TIMEOUT_MS = 300
CALLBACK_MS = 1_000
CANNOT_ASK_TEXT = f"guarded was not run: {CANNOT_ASK}"
APPROVE: dict[str, Any] = {"action": "accept", "content": {"approve": True}}


class Scenario:
    """A server with one tool for each path, and the release of its hanging tool."""

    def __init__(self, **options: Any) -> None:
        self.release = threading.Event()
        self.hanging = threading.Event()

        def policy(tool: str, _arguments: object, _context: object) -> object:
            if tool.startswith("guarded"):
                return Ask(f"Run {tool}?")
            if tool == "forbidden":
                return Deny("not here")
            return Allow()

        server = Server(
            "scenarios",
            authorizer=policy,
            authorizer_source="configured",
            elicitation_timeout_ms=TIMEOUT_MS,
            callback_timeout_ms=CALLBACK_MS,
            **options,
        )

        @server.tool()
        def echo(text: str) -> str:
            return text

        @server.tool()
        def guarded(text: str) -> str:
            return text

        @server.tool()
        def forbidden() -> str:
            return "never runs"

        @server.tool()
        def boom() -> str:
            raise RuntimeError("the secret text of a failure")

        @server.tool()
        def hang() -> str:
            self.hanging.set()
            self.release.wait(DEADLINE)
            return "too late"

        self.server = server


@contextmanager
def running(driver: str, **options: Any) -> Iterator[tuple[Gate, Scenario]]:
    scenario = Scenario(**options)
    try:
        with GATES[driver](scenario.server) as gate:
            yield gate, scenario
    finally:
        scenario.release.set()


DRIVERS = pytest.mark.parametrize("driver", sorted(GATES))


def text_of(reply: dict[str, Any]) -> str:
    result = reply["result"]
    assert not result.get("isError"), reply
    text: str = result["content"][0]["text"]
    return text


def denied(reply: dict[str, Any]) -> dict[str, Any]:
    result = reply["result"]
    assert result["isError"] is True, reply
    payload: dict[str, Any] = result["structuredContent"]
    return payload


def withdrawn(message: dict[str, Any], eid: object) -> str:
    """The reason of the withdrawal of the prompt ``eid`` (R-CLOSE-4)."""
    assert message["method"] == "notifications/cancelled", message
    assert message["params"]["requestId"] == eid, message
    reason: str = message["params"].get("reason", "")
    return reason


def ping_answered_next(peer: Any, request_id: int = 999) -> None:
    """Nothing else is waiting for ``peer``: a ping's reply is the next message."""
    peer.request(request_id, "ping")
    assert peer.reply(request_id)["result"] == {}


# -- R-SYNC-6: the async shell's scenarios, on both drivers --------------------------------------


@DRIVERS
def test_R_SYNC_6_an_allowed_call_runs_and_a_denied_one_does_not(driver: str) -> None:
    with running(driver) as (gate, _):
        peer = gate.connect("a")
        peer.call(1, "echo", text="hello")
        assert text_of(peer.reply(1)) == "hello"
        peer.call(2, "forbidden")
        payload = denied(peer.reply(2))
        assert (payload["decision"], payload["detail"]) == ("deny", "not here")


@DRIVERS
@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        ({"action": "decline"}, "declined"),
        ({"action": "cancel"}, "cancelled"),
        ({"action": "accept", "content": {"approve": "true"}}, "not approved"),
    ],
)
def test_R_SYNC_6_an_ask_is_approved_or_denied_by_the_answer(
    driver: str, answer: dict[str, Any], detail: str
) -> None:
    with running(driver) as (gate, _):
        peer = gate.connect("a")
        peer.call(1, "guarded", text="yes")
        asked = peer.asked()
        assert without_digest(asked["params"]["message"]) == "Run guarded?"
        peer.answer(asked["id"], APPROVE)
        assert text_of(peer.reply(1)) == "yes"
        peer.call(2, "guarded", text="no")
        peer.answer(peer.asked()["id"], answer)
        assert denied(peer.reply(2)) == deny_payload("guarded", "ask", detail)


@DRIVERS
def test_R_SYNC_6_an_unanswered_ask_times_out_into_the_deny(driver: str) -> None:
    with running(driver) as (gate, _):
        peer = gate.connect("a")
        peer.call(1, "guarded", text="x")
        eid = peer.asked()["id"]
        gate.advance(TIMEOUT_MS - 1)
        ping_answered_next(peer)  # not yet
        gate.advance(1)
        assert withdrawn(peer.recv(), eid) == "elicitation timed out"
        assert denied(peer.reply(1)) == deny_payload(
            "guarded", "ask", "elicitation timed out", f"no one approved it within {TIMEOUT_MS} ms"
        )
        peer.answer(eid, APPROVE)  # a late answer changes nothing (R-CLOSE-5)
        ping_answered_next(peer)


@DRIVERS
def test_R_SYNC_6_a_client_without_elicitation_is_denied(driver: str) -> None:
    with running(driver) as (gate, _):
        peer = gate.connect("a", capabilities={})
        peer.call(1, "guarded", text="x")
        payload = denied(peer.reply(1))
        assert payload == deny_payload("guarded", "ask", "Run guarded?", CANNOT_ASK)


@DRIVERS
def test_R_SYNC_6_the_caps_deny_and_a_full_server_evicts_the_top_holder(driver: str) -> None:
    with running(driver, max_parked_elicitations=2, max_parked_elicitations_total=2) as (
        gate,
        _,
    ):
        a, b = gate.connect("a"), gate.connect("b")
        a.call(1, "guarded", text="1")
        first = a.asked()["id"]
        a.call(2, "guarded", text="2")
        second = a.asked()["id"]
        a.call(3, "guarded", text="3")  # the per-connection cap (R-PARK-1)
        assert denied(a.reply(3))["detail"] == "too many elicitations pending"
        b.call(1, "guarded", text="b")  # b holds fewer than a: a's oldest yields (R-PARK-3)
        evicted = "evicted to make room on this server"
        assert withdrawn(a.recv(), first) == evicted
        assert denied(a.reply(1))["detail"] == evicted
        held_by_b = b.asked()["id"]
        # a and b hold one each; a came to hold one first (its eviction came before b's park,
        # R-PARK-4): a yields to c, then b, which held one before c did, yields to d.
        c = gate.connect("c")
        c.call(1, "guarded", text="c")
        assert withdrawn(a.recv(), second) == evicted
        assert denied(a.reply(2))["detail"] == evicted
        c.asked()
        d = gate.connect("d")
        d.call(1, "guarded", text="d")
        assert withdrawn(b.recv(), held_by_b) == evicted
        assert denied(b.reply(1))["detail"] == evicted
        d.asked()
        d.call(2, "guarded", text="d2")  # d holds as many as the top: the server is full
        assert denied(d.reply(2))["detail"] == "too many elicitations pending on this server"


@DRIVERS
def test_R_SYNC_6_a_cancel_drops_a_parked_call_and_withdraws_its_prompt(driver: str) -> None:
    with running(driver) as (gate, _):
        peer = gate.connect("a")
        peer.call(1, "guarded", text="x")
        eid = peer.asked()["id"]
        peer.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
        )
        assert withdrawn(peer.recv(), eid) == "request cancelled"
        ping_answered_next(peer)  # the dropped call got no reply


@DRIVERS
def test_R_SYNC_6_a_callback_that_raises_or_hangs_is_answered_its_failure(driver: str) -> None:
    with running(driver) as (gate, scenario):
        peer = gate.connect("a")
        peer.call(1, "boom")
        assert denied(peer.reply(1)) == {"error": "callback_failed"}
        peer.call(2, "hang")
        assert scenario.hanging.wait(DEADLINE)  # running: its deadline is armed
        gate.advance(CALLBACK_MS)
        assert denied(peer.reply(2)) == {"error": "callback_timeout"}
        scenario.release.set()  # the abandoned callback returns: nothing is looked at
        peer.call(3, "echo", text="after")
        assert text_of(peer.reply(3)) == "after"


@DRIVERS
def test_R_SYNC_6_a_stop_answers_every_parked_call(driver: str) -> None:
    with running(driver) as (gate, _):
        peer = gate.connect("a")
        peer.call(1, "guarded", text="x")
        eid = peer.asked()["id"]
        gate.stop()
        assert withdrawn(peer.recv(), eid) == "server stopping"
        assert denied(peer.reply(1)) == deny_payload(
            "guarded", "ask", "server stopping", "the server is stopping"
        )


# -- the driver's own machinery ------------------------------------------------------------------


class Recording(SyncRuntime):
    """A driver whose reducer records each event and performs a scripted effect list."""

    def __init__(self, clock: ManualClock, job: Callable[[Hashable, Job], object]) -> None:
        state = initial_state(id_key=os.urandom(32))
        super().__init__(state, self._job, clock=clock, loop_free=lambda _job: True)
        self.fed: list[Event] = []
        self.script: list[tuple[Effect, ...]] = []
        self.changed = threading.Condition()
        self.job = job

    async def _job(self, conn: Hashable, job: Job) -> object:
        return self.job(conn, job)

    def _step(self, event: Event) -> None:
        with self.changed:
            self.fed.append(event)
            self.changed.notify_all()
        for effect in self.script.pop(0) if self.script else ():
            self._perform(effect)

    def perform(self, *effects: Effect) -> None:
        self.script.append(effects)
        self.feed(SubscriberAttached("c", self.now()))

    def until(self, count: int) -> list[Event]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.fed) >= count, DEADLINE), self.fed
            return list(self.fed)


def _fired(events: list[Event]) -> list[TimerFired]:
    return [event for event in events if isinstance(event, TimerFired)]


def test_R_SYNC_2_timers_fire_once_at_their_deadline_in_order_and_cancelled_ones_never() -> None:
    clock = ManualClock()
    runtime = Recording(clock, lambda _c, _j: None)
    with runtime.threads():
        runtime.perform(
            StartTimer(("t", 1), 60),
            StartTimer(("t", 2), 20),
            StartTimer(("t", 3), 40),
            StartTimer(("t", 4), 30),
            StartTimer(("t", 4), 50),  # re-armed: fires once, at 50
            CancelTimer(("t", 3)),
        )
        assert runtime.live_timers == {("t", 1), ("t", 2), ("t", 4)}
        clock.advance(19)
        runtime.perform()  # a step after the move: nothing was due
        assert _fired(runtime.until(2)) == []
        clock.advance(41)  # now 60: all three due at once, earliest first
        fired = _fired(runtime.until(5))
        assert [(e.key, e.now) for e in fired] == [(("t", 2), 60), (("t", 4), 60), (("t", 1), 60)]
        assert runtime.live_timers == frozenset()
        runtime.perform(StartTimer(("late", 0), 10_000))
        runtime.perform(StartTimer(("early", 0), 70))  # earlier than the sleep: wakes it
        clock.advance(10)
        assert [e.key for e in _fired(runtime.until(8))] == [*(e.key for e in fired), ("early", 0)]
        assert runtime.live_timers == {("late", 0)}


def test_R_SYNC_3_workers_report_their_value_or_failure_once_and_a_killed_one_nothing() -> None:
    release = threading.Event()
    started = threading.Condition()
    threads: set[str] = set()

    def job(conn: Hashable, _job: Job) -> object:
        with started:
            threads.add(threading.current_thread().name)
            started.notify_all()
        release.wait(DEADLINE)
        if conn == "fails":
            raise ValueError("the callback's own failure")
        return {"content": []}

    runtime = Recording(ManualClock(), job)
    tool = RunTool("t", {})
    with runtime.threads():
        runtime.perform(
            StartWorker(1, "ok", tool), StartWorker(2, "fails", tool), StartWorker(3, "ok", tool)
        )
        assert runtime.live_workers == {1, 2, 3}
        with started:  # all three run at once, each on a thread of its own
            assert started.wait_for(lambda: len(threads) == 3, DEADLINE)
        runtime.perform(KillWorker(3))
        release.set()
        events = runtime.until(4)
    finished = [e.ref for e in events if isinstance(e, WorkerFinished)]
    failed = [e.ref for e in events if isinstance(e, WorkerFailed)]
    assert (sorted(finished), failed) == ([1], [2])
    assert len(runtime.fed) == 4  # two steps of the script, two reports: none from worker 3


def test_R_SYNC_3_an_async_callback_killed_where_it_waits_is_cancelled() -> None:
    started, cancelled = threading.Event(), threading.Event()
    server = Server("s", callback_timeout_ms=CALLBACK_MS)

    @server.tool()
    async def waits() -> str:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return "never"

    clock = ManualClock()
    with server.running_in_threads(clock=clock) as runtime:
        client = LocalClient(runtime)
        answer: list[dict[str, Any]] = []
        caller = threading.Thread(target=lambda: answer.append(client.call_tool("waits")))
        caller.start()
        assert started.wait(DEADLINE)
        clock.advance(CALLBACK_MS)
        caller.join(DEADLINE)
        assert answer == [
            {
                "isError": True,
                "content": [{"type": "text", "text": '{"error":"callback_timeout"}'}],
                "structuredContent": {"error": "callback_timeout"},
            }
        ]
        assert cancelled.wait(DEADLINE)


def test_R_SYNC_1_concurrent_callers_each_get_one_reply_and_the_invariants_hold() -> None:
    server = Server("s", max_in_flight=4, max_in_flight_per_connection=4)

    @server.tool()
    def echo(text: str) -> str:
        return text

    with server.running_in_threads(check_invariants=True) as runtime:
        clients = [LocalClient(runtime, f"c{n}") for n in range(4)]
        results: dict[str, list[object]] = {}

        def caller(client: LocalClient) -> None:
            results[str(client.conn)] = [
                client.call_tool("echo", {"text": f"{client.conn}-{i}"}, timeout=DEADLINE)
                for i in range(25)
            ]

        threads = [threading.Thread(target=caller, args=(client,)) for client in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(DEADLINE)
        assert runtime.steps_checked >= 4 * 25 * 2  # every step checked (R-INV-*)
    assert sorted(results) == ["c0", "c1", "c2", "c3"]
    for conn, replies in results.items():  # at most 4 in flight: none is refused
        assert replies == [
            {"content": [{"type": "text", "text": f"{conn}-{i}"}]} for i in range(25)
        ]
    assert sorted(results) == ["c0", "c1", "c2", "c3"]


def test_R_SYNC_4_leaving_the_block_kills_workers_and_drops_later_events() -> None:
    scenario = Scenario()
    raised: list[BaseException] = []

    def call(client: LocalClient) -> None:
        try:
            client.call_tool("hang", timeout=DEADLINE)
        except RuntimeError as stopped:
            raised.append(stopped)

    try:
        with scenario.server.running_in_threads(clock=ManualClock()) as runtime:
            client = LocalClient(runtime)
            caller = threading.Thread(target=call, args=(client,))
            caller.start()
            assert scenario.hanging.wait(DEADLINE)  # its worker runs
            assert runtime.live_workers
        assert runtime.stopped
        assert runtime.live_workers == frozenset()
        assert runtime.live_timers == frozenset()
        caller.join(DEADLINE)
        assert not caller.is_alive()  # the blocked caller was let go, not left to time out
        assert [str(e) for e in raised] == ["the driver stopped before tools/call was answered"]
        before = runtime.state
        runtime.feed(SubscriberAttached("late", 0))
        assert runtime.state is before  # dropped
        scenario.release.set()  # the abandoned callback returns: nothing is reported
    finally:
        scenario.release.set()


def test_R_SYNC_4_a_failure_on_the_timer_thread_stops_the_driver_loudly() -> None:
    class Broken(Recording):
        def _step(self, event: Event) -> None:
            if isinstance(event, TimerFired):
                raise RuntimeError("a bug in the machinery")
            super()._step(event)

    clock = ManualClock()
    runtime = Broken(clock, lambda _c, _j: None)
    block = runtime.threads()
    block.__enter__()
    runtime.perform(StartTimer(("t", 1), 10))
    clock.advance(10)
    assert runtime.failed.wait(DEADLINE)
    with pytest.raises(RuntimeError, match="the synchronous driver failed"):
        runtime.feed(SubscriberAttached("c", clock.ms))
    with pytest.raises(RuntimeError, match="the synchronous driver failed") as stopped:
        block.__exit__(None, None, None)
    assert "a bug in the machinery" in repr(stopped.value.__cause__)
    assert runtime.stopped


def test_R_SYNC_5_the_local_client_answers_approvals_through_the_reducer() -> None:
    scenario = Scenario()
    prompts: list[str] = []
    verdicts: Iterator[bool | dict[str, Any]] = iter(
        [True, False, {"action": "accept", "content": {"approve": 1}}]
    )

    def ask(params: dict[str, Any]) -> bool | dict[str, Any]:
        prompts.append(params["message"])
        assert threading.current_thread().name == "askgate ask"  # not under the driver's lock
        return next(verdicts)  # the fourth time, it raises

    with scenario.server.running_in_threads(clock=ManualClock()) as runtime:
        client = LocalClient(runtime, ask=ask)
        assert client.call_tool("guarded", {"text": "ok"}) == {
            "content": [{"type": "text", "text": "ok"}]
        }
        assert client.call_tool("guarded", {"text": "no"})["structuredContent"]["detail"] == (
            "declined"
        )
        assert client.call_tool("guarded", {"text": "1"})["structuredContent"]["detail"] == (
            "not approved"
        )
        assert client.call_tool("guarded", {"text": "?"})["structuredContent"]["detail"] == (
            "declined"
        )
        assert [without_digest(p) for p in prompts] == ["Run guarded?"] * 4
        held = threading.Event()
        patient = LocalClient(runtime, "patient", ask=lambda _params: held.wait(DEADLINE))
        with pytest.raises(CallTimeoutError):  # the reply is awaited 50 ms: none comes
            patient.call_tool("guarded", {"text": "slow"}, timeout=0.05)
        assert runtime.state.parked_total == 0  # the call was cancelled: its approval dropped
        held.set()
        blind = LocalClient(runtime, "blind")  # no ask: the capability is not declared
        assert blind.call_tool("guarded", {"text": "x"})["structuredContent"]["message"] == (
            CANNOT_ASK_TEXT
        )


def test_R_SYNC_5_an_unknown_tool_raises_a_typed_error_with_the_json_rpc_fields() -> None:
    """A misspelled tool is ``UnknownToolError`` (-32601, R-ADM-2), a ``ToolCallError`` and a
    ``RuntimeError``; a tool that exists still returns its result."""
    scenario = Scenario()
    with scenario.server.running_in_threads(clock=ManualClock()) as runtime:
        client = LocalClient(runtime)
        with pytest.raises(UnknownToolError) as raised:
            client.call_tool("no_such_tool", {})
        assert isinstance(raised.value, ToolCallError)
        assert isinstance(raised.value, RuntimeError)
        assert raised.value.code == -32601
        assert raised.value.tool == "no_such_tool"
        assert "no_such_tool" in str(raised.value.message)
        assert client.call_tool("echo", {"text": "x"})["content"] == [{"type": "text", "text": "x"}]


def test_a_blocking_stdio_server_answers_each_line() -> None:
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        },
    ]
    stdin = io.BytesIO(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    stdout = io.BytesIO()
    with Scenario().server.running_in_threads("stdio") as runtime:
        serve_stdio_blocking(runtime, stdin, stdout)
    replies = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert [reply["id"] for reply in replies] == [1, 2]
    assert replies[0]["result"] == {}
    assert replies[1]["result"]["serverInfo"]["name"] == "scenarios"
