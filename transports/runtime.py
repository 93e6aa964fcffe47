"""The anyio runtime: owns the reducer's state, feeds it events, performs its effects.

It decides nothing. Every event goes straight to :func:`askgate.core.step` from whichever task
has it (``step`` is synchronous and fast, and the event loop runs one task at a time, so the
state needs no lock and no queue), and the effects that come back are performed in order before
``feed`` returns:

- ``Reply`` / ``Push``: the message is encoded and handed to the connection's writer, a
  synchronous callable the transport attached (it buffers; the transport's own task writes).
  ``Reply(..., None)`` writes nothing.
- ``StartTimer`` / ``CancelTimer``: the timer is armed or disarmed by key in a table; one task
  sleeps until the earliest deadline on the monotonic clock and reports ``TimerFired`` for each
  timer that is due. (A task per timer, cancelled on nearly every call, was half of the
  server's CPU per echo ``tools/call`` in bench/stdio_bench.py.)
- ``StartWorker`` / ``KillWorker``: one task per worker, running the job in its own cancel
  scope and reporting ``WorkerFinished`` or ``WorkerFailed``. A killed worker reports nothing.
- ``Emit``: handed to the observer, if any.

Works on asyncio and trio. Time is ``int(anyio.current_time() * 1000)``: the clock of the
running event loop, which is monotonic on both.
"""

from __future__ import annotations

import functools
import heapq
import inspect
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
import anyio.abc

from askgate.core import (
    CancelTimer,
    Effect,
    Emit,
    Event,
    Job,
    KillWorker,
    Push,
    Reply,
    StartTimer,
    StartWorker,
    State,
    TimerFired,
    WorkerFailed,
    WorkerFinished,
    step,
)
from askgate.core.codec import encode
from askgate.core.events import TimerKey

__all__ = ["JobPerformer", "Runtime", "Writer", "call_user", "is_async_callable", "now_ms"]

logger = logging.getLogger("askgate.runtime")

Writer = Callable[[bytes], None]
"""Takes one encoded message (no newline) for a connection; must not block."""

JobPerformer = Callable[[Hashable, Job], Awaitable[object]]
"""Runs a job's user callback for a connection and returns the worker's value."""

Observer = Callable[[str, dict[str, Any]], None]


def now_ms() -> int:
    """The shell's clock for ``now`` and deadlines: the event loop's monotonic time, in ms."""
    return int(anyio.current_time() * 1000)


def is_async_callable(func: Callable[..., object]) -> bool:
    """Whether calling ``func`` returns a coroutine (an ``async def``, or an object whose
    ``__call__`` is one)."""
    if inspect.iscoroutinefunction(func):
        return True
    call = getattr(func, "__call__", None)  # noqa: B004 (an object with an async __call__)
    return call is not None and inspect.iscoroutinefunction(call)


async def call_user(
    func: Callable[..., object],
    /,
    *args: object,
    limiter: anyio.CapacityLimiter | None = None,
    **kwargs: object,
) -> object:
    """Calls a user callback: ``async`` ones are awaited here, on the event loop; plain ones run
    in a worker thread that is abandoned on cancel, so a callback that hangs cannot block the
    loop (the thread runs on, but nothing it returns is looked at)."""
    if is_async_callable(func):
        result = func(*args, **kwargs)
    else:
        result = await anyio.to_thread.run_sync(
            functools.partial(func, *args, **kwargs), abandon_on_cancel=True, limiter=limiter
        )
    if inspect.isawaitable(result):
        result = await result
    return result


class Runtime:
    """Performs the reducer's effects on anyio; use inside :meth:`running`.

    ``perform_job`` runs a worker's job (the user callback) and returns its value; an exception
    from it becomes ``WorkerFailed``, logged here and never sent. ``observer`` receives each
    ``Emit``.
    """

    def __init__(
        self,
        state: State,
        perform_job: JobPerformer,
        *,
        observer: Observer | None = None,
    ) -> None:
        self._state = state
        self._perform_job = perform_job
        self._observer = observer
        self._writers: dict[Hashable, Writer] = {}
        # Armed timers: key -> (deadline, arming number). The heap holds (deadline, number, key)
        # for every arming; an entry whose key no longer maps to it was cancelled or re-armed
        # and is skipped when it comes up (and swept out when stale entries pile up).
        self._timers: dict[object, tuple[int, int]] = {}
        self._heap: list[tuple[int, int, object]] = []
        self._armings = itertools.count()
        self._timer_wake: anyio.Event | None = None
        self._workers: dict[int, anyio.CancelScope] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    @property
    def state(self) -> State:
        """The current state, for tests and introspection. The runtime never reads it."""
        return self._state

    @property
    def live_timers(self) -> frozenset[object]:
        """Keys of the timers armed now (for tests: they must equal the reducer's, R-INV-4)."""
        return frozenset(self._timers)

    @property
    def live_workers(self) -> frozenset[int]:
        """Refs of the workers running now (for tests)."""
        return frozenset(self._workers)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Runtime]:
        """Runs the runtime's tasks; leaving the block cancels every timer and worker."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._run_timers, name="askgate timers")
            try:
                yield self
            finally:
                self._tg = None
                tg.cancel_scope.cancel()
                for scope in self._workers.values():
                    scope.cancel()
                self._timers.clear()
                self._heap.clear()
                self._workers.clear()

    # -- connections ------------------------------------------------------------------------

    def attach(self, conn: Hashable, writer: Writer) -> None:
        """Routes ``conn``'s replies and pushes to ``writer`` (before its first event)."""
        self._writers[conn] = writer

    def detach(self, conn: Hashable) -> None:
        """Stops routing to ``conn``: anything addressed to it afterwards is not written."""
        self._writers.pop(conn, None)

    # -- events -----------------------------------------------------------------------------

    def feed(self, event: Event) -> None:
        """Steps the reducer with ``event`` and performs the effects, in order."""
        self._state, effects = step(self._state, event)
        for effect in effects:
            self._perform(effect)

    def _perform(self, effect: Effect) -> None:
        if isinstance(effect, Reply):
            if effect.message is not None:
                self._send(effect.conn, effect.message)
        elif isinstance(effect, Push):
            self._send(effect.conn, effect.message)
        elif isinstance(effect, StartTimer):
            self._start_timer(effect.key, effect.deadline)
        elif isinstance(effect, CancelTimer):
            self._timers.pop(effect.key, None)
        elif isinstance(effect, StartWorker):
            self._start_worker(effect.ref, effect.conn, effect.job)
        elif isinstance(effect, KillWorker):
            scope = self._workers.pop(effect.ref, None)
            if scope is not None:
                scope.cancel()
        elif isinstance(effect, Emit):
            if self._observer is not None:
                self._observer(effect.name, effect.fields)
            else:
                logger.debug("%s %s", effect.name, effect.fields)
        else:  # pragma: no cover - the effect kinds are closed
            raise TypeError(f"unknown effect {effect!r}")

    def _send(self, conn: Hashable, message: dict[str, Any]) -> None:
        # An unencodable message is the machinery's bug (worker values are checked before they
        # are reported), so EncodeError propagates and stops the server loudly.
        data = encode(message)
        writer = self._writers.get(conn)
        if writer is None:
            logger.debug("dropped a message for %r: the connection has no writer", conn)
            return
        writer(data)

    def _group(self) -> anyio.abc.TaskGroup:
        if self._tg is None:
            raise RuntimeError("the runtime is not running: use `async with runtime.running()`")
        return self._tg

    # -- timers -----------------------------------------------------------------------------

    def _start_timer(self, key: object, deadline: int) -> None:
        arming = next(self._armings)
        self._timers[key] = (deadline, arming)
        heapq.heappush(self._heap, (deadline, arming, key))
        if len(self._heap) > 2 * len(self._timers) + 64:  # mostly cancelled entries: sweep
            self._heap = [(d, n, k) for k, (d, n) in self._timers.items()]
            heapq.heapify(self._heap)
        if self._heap[0][1] == arming and self._timer_wake is not None:
            self._timer_wake.set()  # the earliest deadline moved: re-arm the sleep

    def _pop_stale(self) -> None:
        heap, timers = self._heap, self._timers
        while heap and timers.get(heap[0][2]) != heap[0][:2]:
            heapq.heappop(heap)

    async def _run_timers(self) -> None:
        """One task sleeps until the earliest deadline and fires every timer that is due.

        Cheaper than a task per timer (two per tools/call), with the same contract: a timer
        fires ``TimerFired`` once at its deadline unless cancelled first.
        """
        while True:
            self._pop_stale()
            wake = self._timer_wake = anyio.Event()
            if not self._heap:
                await wake.wait()
                continue
            with anyio.CancelScope(deadline=self._heap[0][0] / 1000):
                await wake.wait()
            if wake.is_set():
                continue  # a new earliest deadline: sleep again until it
            now = now_ms()
            for _ in range(len(self._heap)):
                self._pop_stale()
                if not self._heap or self._heap[0][0] > now:
                    break
                _, _, key = heapq.heappop(self._heap)
                del self._timers[key]
                self.feed(TimerFired(cast(TimerKey, key), now))

    # -- workers ----------------------------------------------------------------------------

    def _start_worker(self, ref: int, conn: Hashable, job: Job) -> None:
        scope = anyio.CancelScope()
        self._workers[ref] = scope
        self._group().start_soon(self._worker, ref, conn, job, scope, name=f"askgate worker {ref}")

    async def _worker(self, ref: int, conn: Hashable, job: Job, scope: anyio.CancelScope) -> None:
        failed = False
        value: object = None
        with scope:
            try:
                value = await self._perform_job(conn, job)
            except (Exception, SystemExit):
                # The callback's failure, not the server's: logged here, never sent (R-WORK-3).
                logger.exception("callback failed: %s (worker %d)", type(job).__name__, ref)
                failed = True
        if scope.cancel_called or self._workers.get(ref) is not scope:
            return  # killed: nothing it returned is looked at
        del self._workers[ref]
        self.feed(WorkerFailed(ref, now_ms()) if failed else WorkerFinished(ref, value, now_ms()))
