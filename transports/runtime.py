"""The anyio runtime: owns the reducer's state, feeds it events, performs its effects.

It decides nothing. Every event goes straight to :func:`askgate.core.step` from whichever task
has it (``step`` is synchronous and fast, and the event loop runs one task at a time, so the
state needs no lock and no queue), and the effects that come back are performed in order before
``feed`` returns:

- ``Reply`` / ``Push``: the message is encoded and handed to the connection's writer, a
  synchronous callable the transport attached (it buffers; the transport's own task writes).
  ``Reply(..., None)`` writes nothing.
- ``StartTimer`` / ``CancelTimer``: one task per key, sleeping in its own cancel scope until the
  deadline on the monotonic clock, then reporting ``TimerFired``.
- ``StartWorker`` / ``KillWorker``: one task per worker, running the job in its own cancel
  scope and reporting ``WorkerFinished`` or ``WorkerFailed``. A killed worker reports nothing.
- ``Emit``: handed to the observer, if any.

Works on asyncio and trio. Time is ``int(anyio.current_time() * 1000)``: the clock of the
running event loop, which is monotonic on both.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import asynccontextmanager
from typing import Any

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

__all__ = ["JobPerformer", "Runtime", "Writer", "call_user", "now_ms"]

logger = logging.getLogger("askgate.runtime")

Writer = Callable[[bytes], None]
"""Takes one encoded message (no newline) for a connection; must not block."""

JobPerformer = Callable[[Hashable, Job], Awaitable[object]]
"""Runs a job's user callback for a connection and returns the worker's value."""

Observer = Callable[[str, dict[str, Any]], None]


def now_ms() -> int:
    """The shell's clock for ``now`` and deadlines: the event loop's monotonic time, in ms."""
    return int(anyio.current_time() * 1000)


def _is_async_callable(func: Callable[..., object]) -> bool:
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
    if _is_async_callable(func):
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
        self._timers: dict[object, anyio.CancelScope] = {}
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
            try:
                yield self
            finally:
                self._tg = None
                tg.cancel_scope.cancel()
                for scope in (*self._timers.values(), *self._workers.values()):
                    scope.cancel()
                self._timers.clear()
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
            scope = self._timers.pop(effect.key, None)
            if scope is not None:
                scope.cancel()
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
        previous = self._timers.pop(key, None)
        if previous is not None:
            previous.cancel()
        scope = anyio.CancelScope()
        self._timers[key] = scope
        self._group().start_soon(self._timer, key, deadline, scope, name=f"askgate timer {key}")

    async def _timer(self, key: Any, deadline: int, scope: anyio.CancelScope) -> None:
        with scope:
            await anyio.sleep_until(deadline / 1000)
        # A timer cancelled after its sleep ended but before this task resumed is gone from the
        # table: it must not fire.
        if scope.cancel_called or self._timers.get(key) is not scope:
            return
        del self._timers[key]
        self.feed(TimerFired(key, now_ms()))

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
