"""The runtime's own machinery: timers armed and cancelled by key, workers killed, on both loops.

A recording runtime keeps every event it is fed instead of looking at what the reducer does
with it, so the timers can be checked in isolation. Waits are on events, under deadlines.
"""

from __future__ import annotations

import os
from collections.abc import Hashable

import anyio
import attrs
import pytest

from askgate.core import (
    Allow,
    Effect,
    Event,
    InvariantError,
    Job,
    SubscriberAttached,
    TimerFired,
    WorkerFailed,
    WorkerFinished,
    initial_state,
)
from askgate.core.effects import CancelTimer, Emit, KillWorker, StartTimer, StartWorker
from askgate.core.jobs import Authorize, RunTool
from askgate.demo import build_demo
from askgate.transports.base import Transport
from askgate.transports.http import HttpApp, HttpTransport
from askgate.transports.runtime import CHECK_ENV, Runtime, now_ms
from askgate.transports.stdio import FdReceiveStream, FdSendStream, StdioTransport

pytestmark = pytest.mark.anyio

DEADLINE = 10.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


class Recording(Runtime):
    """Performs effects given to :meth:`perform` and records what it would feed the reducer."""

    def __init__(self) -> None:
        super().__init__(initial_state(id_key=os.urandom(32)), self._job)
        self.fed: list[Event] = []
        self.changed = anyio.Event()
        self.release = anyio.Event()

    async def _job(self, conn: Hashable, job: Job) -> object:
        assert isinstance(job, RunTool)
        await self.release.wait()
        if conn == "fails":
            raise ValueError("the callback's own failure")
        return {"content": []}

    def feed(self, event: Event) -> None:
        self.fed.append(event)
        self.changed.set()

    def perform(self, *effects: Effect) -> None:
        for effect in effects:
            self._perform(effect)

    def fired(self) -> list[TimerFired]:
        return [event for event in self.fed if isinstance(event, TimerFired)]

    async def until(self, count: int) -> None:
        with anyio.fail_after(DEADLINE):
            while len(self.fed) < count:
                self.changed = anyio.Event()
                await self.changed.wait()


async def test_timers_fire_in_deadline_order_and_cancelled_ones_never() -> None:
    runtime = Recording()
    async with runtime.running():
        now = now_ms()
        runtime.perform(
            StartTimer(("t", 1), now + 60),
            StartTimer(("t", 2), now + 20),
            StartTimer(("t", 3), now + 40),
            CancelTimer(("t", 3)),
        )
        assert runtime.live_timers == {("t", 1), ("t", 2)}
        await runtime.until(2)
        fired = runtime.fired()
        assert [e.key for e in fired] == [("t", 2), ("t", 1)]
        assert fired[0].now >= now + 20
        assert fired[1].now >= now + 60
        assert runtime.live_timers == frozenset()


async def test_an_earlier_timer_armed_while_sleeping_fires_first() -> None:
    runtime = Recording()
    async with runtime.running():
        now = now_ms()
        runtime.perform(StartTimer(("late", 0), now + 5_000))
        await anyio.lowlevel.checkpoint()  # the timer task is asleep until the late deadline
        runtime.perform(StartTimer(("early", 0), now + 10))
        await runtime.until(1)
        assert [e.key for e in runtime.fired()] == [("early", 0)]
        assert runtime.live_timers == {("late", 0)}


async def test_a_rearmed_key_fires_once_at_its_new_deadline() -> None:
    runtime = Recording()
    async with runtime.running():
        now = now_ms()
        runtime.perform(StartTimer(("k", 0), now + 10), StartTimer(("k", 0), now + 30))
        runtime.perform(StartTimer(("marker", 0), now + 50))
        await runtime.until(2)
        fired = runtime.fired()
        assert [e.key for e in fired] == [("k", 0), ("marker", 0)]
        assert fired[0].now >= now + 30


async def test_timers_armed_within_a_feed_are_armed_when_it_ends_unless_cancelled() -> None:
    runtime = Recording()
    async with runtime.running():
        now = now_ms()
        runtime._feeding = True  # as while Runtime.feed performs a step's effects
        runtime.perform(
            StartTimer(("gone", 0), now + 10),
            StartTimer(("a", 0), now + 40),
            StartTimer(("b", 0), now + 40),
            StartTimer(("a", 0), now + 40),  # armed again: after "b" now
            CancelTimer(("gone", 0)),
        )
        assert runtime.live_timers == {("a", 0), ("b", 0)}
        assert runtime._heap == []  # nothing reaches the heap before the feed ends
        runtime._feeding = False
        runtime._push_armed()  # what the end of the feed does
        assert {key for _, _, key in runtime._heap} == {("a", 0), ("b", 0)}
        await runtime.until(2)
        assert [e.key for e in runtime.fired()] == [("b", 0), ("a", 0)]  # in arming order
        assert runtime.live_timers == frozenset()


async def test_cancelled_timers_do_not_pile_up() -> None:
    runtime = Recording()
    async with runtime.running():
        far = now_ms() + 3_600_000
        for n in range(10_000):
            runtime.perform(StartTimer(("w", n), far + n), CancelTimer(("w", n)))
        runtime.perform(StartTimer(("kept", 0), far))
        assert runtime.live_timers == {("kept", 0)}
        assert len(runtime._heap) <= 2 * 1 + 64 + 1  # the bound under test


async def test_workers_report_their_value_or_failure_and_a_killed_one_reports_nothing() -> None:
    runtime = Recording()
    async with runtime.running():
        job = RunTool("t", {})
        runtime.perform(
            StartWorker(1, "ok", job), StartWorker(2, "fails", job), StartWorker(3, "ok", job)
        )
        assert runtime.live_workers == {1, 2, 3}
        runtime.perform(KillWorker(3))
        runtime.release.set()
        await runtime.until(2)
        with anyio.fail_after(DEADLINE):
            while runtime.live_workers:
                await anyio.lowlevel.checkpoint()
        finished = [e.ref for e in runtime.fed if isinstance(e, WorkerFinished)]
        failed = [e.ref for e in runtime.fed if isinstance(e, WorkerFailed)]
        assert (finished, failed) == ([1], [2])
        assert len(runtime.fed) == 2  # worker 3 was killed: it reported nothing


class Scripted(Runtime):
    """A runtime whose reducer is a script: step ``n`` performs ``script[n]`` and records its
    event, so the order in which events reach the reducer can be checked."""

    def __init__(self, *script: tuple[Effect, ...]) -> None:
        super().__init__(initial_state(id_key=os.urandom(32)), self._job, eager=self._eager_job)
        self.script = list(script)
        self.fed: list[Event] = []
        self.closed = False

    @staticmethod
    def _eager_job(job: Job) -> bool:
        return isinstance(job, Authorize)

    async def _job(self, _conn: Hashable, job: Job) -> object:
        assert isinstance(job, Authorize)
        if job.tool == "raises":
            raise ValueError("the policy's secret text")
        if job.tool == "suspends":
            try:
                await anyio.lowlevel.checkpoint()
            finally:
                self.closed = True
        return Allow()

    def _step(self, event: Event) -> None:
        self.fed.append(event)
        for effect in self.script.pop(0) if self.script else ():
            self._perform(effect)


def _authorize(ref: int, tool: str) -> tuple[Effect, ...]:
    return (StartWorker(ref, "c", Authorize(tool, {})), StartTimer(("worker", ref), FAR))


FAR = 10**15


async def test_an_eager_job_reports_after_the_step_that_started_it_and_its_timer_never_wakes() -> (
    None
):
    runtime = Scripted(
        (*_authorize(1, "ok"), Emit("after the start", {})),
        (CancelTimer(("worker", 1)),),
    )
    emitted: list[str] = []
    runtime._observer = lambda name, _fields: emitted.append(name)
    async with runtime.running():
        with anyio.fail_after(DEADLINE):
            while runtime._timer_wake is None:  # until the timer task sleeps, nothing armed
                await anyio.lowlevel.checkpoint()
        runtime.feed(SubscriberAttached("c", 0))
        assert [type(e) for e in runtime.fed] == [SubscriberAttached, WorkerFinished]
        report = runtime.fed[1]
        assert isinstance(report, WorkerFinished)
        assert (report.ref, report.value) == (1, Allow())
        assert emitted == ["after the start"]  # the whole first step was performed first
        assert runtime.live_timers == frozenset()
        assert runtime.live_workers == frozenset()
        assert not runtime._timer_wake.is_set()


async def test_an_eager_job_that_raises_is_a_worker_failure_and_its_text_is_only_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime = Scripted(_authorize(1, "raises"), (CancelTimer(("worker", 1)),))
    async with runtime.running():
        runtime.feed(SubscriberAttached("c", 0))
    assert [type(e) for e in runtime.fed] == [SubscriberAttached, WorkerFailed]
    assert "the policy's secret text" not in repr(runtime.fed)
    assert "callback failed: authorizer of tool raises (conn c, worker 1)" in caplog.text


async def test_an_eager_job_that_suspends_is_stopped_and_reported_failed() -> None:
    runtime = Scripted(_authorize(1, "suspends"), (CancelTimer(("worker", 1)),))
    async with runtime.running():
        runtime.feed(SubscriberAttached("c", 0))
        assert [type(e) for e in runtime.fed] == [SubscriberAttached, WorkerFailed]
        assert runtime.closed  # the coroutine was closed where it suspended
        assert runtime.live_workers == frozenset()


async def test_an_eager_job_killed_in_the_step_that_started_it_reports_nothing() -> None:
    runtime = Scripted((*_authorize(1, "ok"), KillWorker(1), CancelTimer(("worker", 1))))
    async with runtime.running():
        runtime.feed(SubscriberAttached("c", 0))
        assert [type(e) for e in runtime.fed] == [SubscriberAttached]
        assert runtime.live_workers == frozenset()
        assert runtime.live_timers == frozenset()


async def test_a_failure_of_the_machinery_in_a_worker_task_stops_the_runtime() -> None:
    class Broken(Recording):
        def feed(self, _event: Event) -> None:
            raise RuntimeError("a bug in the machinery")

    async def serve() -> None:
        with anyio.fail_after(DEADLINE):
            async with runtime.running():
                runtime.perform(StartWorker(1, "ok", RunTool("t", {})))
                runtime.release.set()
                await anyio.sleep_forever()

    runtime = Broken()
    with pytest.raises(BaseExceptionGroup) as failure:
        await serve()
    bug, _ = failure.value.split(RuntimeError)
    assert bug is not None
    assert "a bug in the machinery" in repr(bug.exceptions)


async def test_every_transport_is_built_from_its_server_and_runs_it_under_its_name() -> None:
    """stdio and HTTP have one shape: ``Kind(server, ...)``, then ``running()`` runs the server
    under the transport's name; stdio's ``serve()`` serves its one connection until end of
    input."""
    read_in, write_in = os.pipe()
    read_out, write_out = os.pipe()
    os.write(write_in, b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    os.close(write_in)
    stdin, stdout = FdReceiveStream(read_in), FdSendStream(write_out)
    over_stdio = StdioTransport(build_demo(configured=True), stdin, stdout)
    transports: list[Transport] = [over_stdio, HttpTransport(build_demo(configured=True))]
    assert [transport.name for transport in transports] == ["stdio", "http"]
    try:
        with anyio.fail_after(DEADLINE):
            for transport in transports:
                with pytest.raises(RuntimeError, match="not running"):
                    _ = transport.runtime
                async with transport.running() as running:
                    assert running is transport
                    assert transport.runtime.state.options.transport == transport.name
                with pytest.raises(RuntimeError, match="not running"):
                    _ = transport.runtime
            await over_stdio.serve()
        assert os.read(read_out, 65536) == b'{"jsonrpc":"2.0","id":1,"result":{}}\n'
    finally:
        await stdin.aclose()
        await stdout.aclose()
        for fd in (read_in, read_out, write_out):
            os.close(fd)
    assert HttpApp is HttpTransport  # the name the ASGI app is mounted under


async def _no_job(_conn: Hashable, _job: Job) -> object:
    raise AssertionError("no job runs here")


async def test_debug_mode_checks_invariants_after_every_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(CHECK_ENV, raising=False)
    checked = Runtime(initial_state(id_key=os.urandom(32)), _no_job, check_invariants=True)
    checked.feed(SubscriberAttached("a"))
    checked.feed(SubscriberAttached("b"))
    assert checked.steps_checked == 2
    assert checked.largest["conns"] == 2
    assert checked.largest["parked"] == 0
    assert checked.largest["listens"] == 0  # every map of the state that can grow is sized

    empty = initial_state(id_key=os.urandom(32))
    broken = attrs.evolve(empty, store=attrs.evolve(empty.store, total=5))
    with pytest.raises(InvariantError):
        Runtime(broken, _no_job, check_invariants=True).feed(SubscriberAttached("a"))
    # Normal serving does not check (nor pays for it).
    unchecked = Runtime(broken, _no_job)
    unchecked.feed(SubscriberAttached("a"))
    assert (unchecked.steps_checked, unchecked.largest) == (0, {})
    # The environment variable turns it on for a runtime built afterwards.
    monkeypatch.setenv(CHECK_ENV, "1")
    with pytest.raises(InvariantError):
        Runtime(broken, _no_job).feed(SubscriberAttached("a"))
