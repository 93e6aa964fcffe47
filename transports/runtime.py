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
  timer that is due. Arming or cancelling a timer is a table update, with no task of its own.
- ``StartWorker`` / ``KillWorker``: one task per worker, running the job in its own cancel
  scope and reporting ``WorkerFinished`` or ``WorkerFailed``. A killed worker reports nothing.
  A job whose callback is askgate's own and marked :func:`completes_without_suspending` (the
  policy file's authorizers) is run to completion at once instead, on the task that fed the
  event, and its report is fed right after the effects of the current step: the reducer sees
  the same ``StartWorker``, timer and report, without a task, a cancel scope and a timer
  wake-up per call. It is contained like any worker: what it raises is ``WorkerFailed``.
- ``Emit``: handed to the observer, if any; the records of calls (R-LOG-1 .. R-LOG-4) are also
  logged, one line each, on ``askgate.calls`` at INFO (:mod:`askgate.transports.calllog`), with
  the principal a transport gave for the connection (:meth:`Runtime.set_principal`).
- ``Resolve``: hands the outcome to the running tool waiting on :meth:`Runtime.ask_client`.

A running tool reaches its client through its worker: :func:`current_worker` names the worker
of the task asking, and :meth:`Runtime.report_progress`, :meth:`Runtime.tool_log` and
:meth:`Runtime.ask_client` report ``ToolProgressed``, ``ToolLogged`` and ``ToolRequested``; the
reducer decides what reaches the wire (spec/rules.md, R-CTX).

Events fed while effects are being performed (a worker that completed at once, an observer
that feeds) are stepped in order after the current step's effects, never in the middle of them.

Debug mode (``check_invariants=True``, or the environment variable ``ASKGATE_CHECK_INVARIANTS=1``
when the runtime is built): after every step the state is checked with
:func:`askgate.core.check_invariants` (O(state) per step: for soaks and tests, never for normal
serving); a failure raises out of ``feed`` and stops the server loudly. The runtime also keeps
the largest size seen of each of the state's maps (:attr:`Runtime.largest`) and logs a line on
``askgate.runtime.check`` each time one grows.

Works on asyncio and trio. Time is ``int(anyio.current_time() * 1000)``: the clock of the
running event loop, which is monotonic on both.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import heapq
import inspect
import itertools
import logging
import math
import os
import sys
import time
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Hashable
from contextlib import asynccontextmanager
from types import CoroutineType
from typing import Any, Final, Protocol, cast

import anyio
import anyio.abc

from askgate.core import (
    RECORDS,
    CancelTimer,
    Effect,
    Emit,
    Event,
    Job,
    KillWorker,
    Push,
    Reply,
    Resolve,
    StartTimer,
    StartWorker,
    State,
    TimerFired,
    ToolLogged,
    ToolProgressed,
    ToolRequested,
    WorkerFailed,
    WorkerFinished,
    step,
)
from askgate.core.codec import encode
from askgate.core.events import TimerKey
from askgate.core.jobs import Authorize, AuthorizeRead, FilterTools, RunRead, RunTool
from askgate.transports.callbacks import completes_without_suspending, runs_eagerly

from .calllog import CALLS_LOGGER, conn_text, log_record

__all__ = [
    "CHECK_ENV",
    "Cancellable",
    "JobPerformer",
    "Runtime",
    "Tap",
    "Writer",
    "call_user",
    "calling",
    "completes_without_suspending",
    "current_worker",
    "is_async_callable",
    "now_ms",
    "on_worker_thread",
    "runs_eagerly",
]

logger = logging.getLogger("askgate.runtime")
check_logger = logging.getLogger("askgate.runtime.check")

CHECK_ENV = "ASKGATE_CHECK_INVARIANTS"
"""Set to ``1``, a runtime built afterwards runs in debug mode (see the module's docstring)."""

_SIZED = (
    "conns",
    "calls",
    "parked",
    "workers",
    "client_requests",
    "stateless",
    "closed_nonces",
    "callers",
    "listens",
)

Writer = Callable[[bytes], None]
"""Takes one encoded message (no newline) for a connection; must not block."""

Router = Callable[[Reply | Push], None]
"""Takes a connection's ``Reply`` and ``Push`` effects as they are (see :meth:`Runtime.route`)."""

StreamCloser = Callable[[Hashable], None]
"""Closes the connection carrying the stream of the request whose id it is given (HTTP)."""

JobPerformer = Callable[[Hashable, Job], Awaitable[object]]
"""Runs a job's user callback for a connection and returns the worker's value."""

Observer = Callable[[str, dict[str, Any]], None]

Tap = Callable[[State, Event, State, list[Effect]], None]
"""Sees every step (state before, event, state after, effects) before its effects are performed:
the trace and the decision log (:mod:`askgate.audit`). It must not block or feed."""

EagerJobs = Callable[[Job], bool]
"""Whether a job's callback is marked :func:`completes_without_suspending` (never a guess)."""
_WORKER: contextvars.ContextVar[int | None] = contextvars.ContextVar("askgate_worker", default=None)
_ON_WORKER_THREAD: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "askgate_on_worker_thread", default=False
)


class Cancellable(Protocol):
    """What the runtime keeps of a live worker: a cancel scope here, a thread's handle in
    :mod:`askgate.transports.sync`."""

    def cancel(self) -> None: ...


class Settable(Protocol):
    """What wakes a running tool waiting for its ``Resolve``: an ``anyio.Event`` or a
    ``threading.Event``."""

    def set(self) -> None: ...


def on_worker_thread() -> bool:
    """Whether this code runs on a worker thread of :mod:`askgate.transports.sync`, where a
    plain callback is called directly (it already has a thread of its own)."""
    return _ON_WORKER_THREAD.get()


def current_worker() -> int | None:
    """The ref of the worker whose task (or thread) is running now, or ``None`` outside one."""
    return _WORKER.get()


def _job_text(job: Job, conn: Hashable, ref: int) -> str:
    """What failed, for the log: ``tool delete_file (conn http-3, worker 7)``."""
    if isinstance(job, RunTool):
        what = f"tool {job.tool}"
    elif isinstance(job, Authorize):
        what = f"authorizer of tool {job.tool}"
    elif isinstance(job, AuthorizeRead):
        what = f"read authorizer of {job.method}"
    elif isinstance(job, RunRead):
        what = f"read {job.method}"
    elif isinstance(job, FilterTools):
        what = "tools/list filter"
    else:
        what = type(job).__name__
    return f"{what} (conn {conn_text(conn)}, worker {ref})"


class _Waiter:
    """A running tool waiting for the reducer's ``Resolve`` of its request."""

    __slots__ = ("done", "event", "outcome")

    def __init__(self) -> None:
        self.done = False
        self.outcome: object = None
        self.event: Settable | None = None


async def _reraise(exc: BaseException) -> None:
    raise exc


class _LoopTasks:
    """Worker tasks started on the asyncio loop itself.

    ``TaskGroup.start_soon`` gives every task a handle, a cancel scope and an event the worker
    never uses: about three times the cost of the task. A worker needs only its own cancel scope
    (which works in any task), and what a task group guarantees is kept here: an exception that
    ends a task (the machinery's: the worker contains the callback's) is raised in the runtime's
    task group as if the task had run there, and leaving the runtime waits for every task.
    """

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self._loop = asyncio.get_running_loop()
        self._tg = tg
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = self._loop.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._tg.start_soon(_reraise, exc, name="askgate worker failure")

    async def join(self) -> None:
        """Returns once every task has ended (their cancel scopes are cancelled first)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))


def _loop_clock() -> Callable[[], float]:
    """The running event loop's clock, looked up once (``anyio.current_time`` finds the
    backend on every call)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        if type(loop).time is asyncio.BaseEventLoop.time:
            return time.monotonic  # what that method returns, without the method call
        return loop.time
    trio = sys.modules.get("trio")
    if trio is not None and trio.lowlevel.in_trio_run():
        clock: Callable[[], float] = trio.current_time
        return clock
    return anyio.current_time


def now_ms() -> int:
    """The shell's clock for ``now`` and deadlines: the event loop's monotonic time, in ms."""
    return int(anyio.current_time() * 1000)


def _is_async(func: Callable[..., object]) -> bool:
    if inspect.iscoroutinefunction(func):
        return True
    call = getattr(func, "__call__", None)  # noqa: B004 (an object with an async __call__)
    return call is not None and inspect.iscoroutinefunction(call)


_is_async_remembered = functools.lru_cache(maxsize=1024)(_is_async)


def is_async_callable(func: Callable[..., object]) -> bool:
    """Whether calling ``func`` returns a coroutine (an ``async def``, or an object whose
    ``__call__`` is one). Remembered per callable (it is asked on every call of a callback)."""
    try:
        return _is_async_remembered(func)
    except TypeError:  # not hashable
        return _is_async(func)


def calling(
    func: Callable[..., object],
    args: tuple[object, ...],
    kwargs: dict[str, Any],
    limiter: anyio.CapacityLimiter | None = None,
) -> Awaitable[object]:
    """What :func:`call_user` awaits, for callers that await it themselves: an ``async``
    callback's own coroutine (awaited by the caller with no coroutine between), or a coroutine
    that runs a plain one in a worker thread. ``args`` and ``kwargs`` are passed as they are, so
    a callback parameter may have any name (``func``, ``limiter``)."""
    if is_async_callable(func) or _ON_WORKER_THREAD.get():
        result = func(*args, **kwargs)
        if type(result) is CoroutineType or inspect.isawaitable(result):
            return cast(Awaitable[object], result)
        return _ready(result)
    return _in_thread(func, args, kwargs, limiter)


async def _ready(value: object) -> object:
    return value


async def _in_thread(
    func: Callable[..., object],
    args: tuple[object, ...],
    kwargs: dict[str, Any],
    limiter: anyio.CapacityLimiter | None,
) -> object:
    result = await anyio.to_thread.run_sync(
        functools.partial(func, *args, **kwargs), abandon_on_cancel=True, limiter=limiter
    )
    if type(result) is CoroutineType or inspect.isawaitable(result):
        result = await result
    return result


async def call_user(
    func: Callable[..., object],
    /,
    *args: object,
    limiter: anyio.CapacityLimiter | None = None,
    **kwargs: object,
) -> object:
    """Calls a user callback: ``async`` ones are awaited here, on the event loop; plain ones run
    in a worker thread that is abandoned on cancel, so a callback that hangs cannot block the
    loop (the thread runs on, but nothing it returns is looked at). On a worker thread of the
    synchronous driver (:func:`on_worker_thread`) a plain one is called directly."""
    return await calling(func, args, kwargs, limiter)


_KILLED: Final = object()
"""What :meth:`Runtime.feed` finds for the ref of an eager worker killed since it completed."""

_DONE: Final = object()
"""What a driver (:func:`_new_driver`) yields when the coroutine it was sent has completed."""

_Driver = tuple[Generator[object, Coroutine[Any, Any, object], None], list[object]]


def _new_driver() -> _Driver:
    """A generator that runs each coroutine sent to it to its end, puts the value in the box
    (the list beside it, at 0) and yields ``_DONE``; what a coroutine yields instead (it
    suspended) comes out of ``send`` as it is, and what it raises ends the driver. Cheaper
    than ``coro.send(None)``, whose end raises ``StopIteration``: ``yield from`` takes the
    value without one. Primed: ready for ``send(coro)``."""
    box: list[object] = [None]

    @types.coroutine
    def drive() -> Generator[object, Coroutine[Any, Any, object], None]:
        coro = yield None
        while True:
            box[0] = yield from coro  # type: ignore[func-returns-value]
            coro = yield _DONE

    driver = drive()
    driver.send(None)  # type: ignore[arg-type]
    return driver, box


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
        eager: EagerJobs | None = None,
        check_invariants: bool | None = None,
    ) -> None:
        self._state = state
        if check_invariants is None:
            check_invariants = os.environ.get(CHECK_ENV) == "1"
        self._checking = check_invariants
        self.largest: dict[str, int] = {}
        """The largest size seen of each map of the state, in debug mode (empty otherwise)."""
        self.steps_checked = 0
        self._perform_job = perform_job
        self._observer = observer
        self._eager = eager
        self._tap: Tap | None = None
        # Events fed while effects are performed, and the reports of workers that completed at
        # once: (ref or None, event), stepped after the current step's effects.
        self._queue: collections.deque[tuple[int | None, Event]] = collections.deque()
        self._feeding = False
        self._clock: Callable[[], float] = anyio.current_time
        self._writers: dict[Hashable, Writer] = {}
        self._routes: dict[Hashable, Router] = {}
        self._closers: dict[Hashable, StreamCloser] = {}
        self._principals: dict[Hashable, str] = {}  # who each connection is, where known
        # Armed timers: key -> (deadline, arming number). The heap holds (deadline, number, key)
        # for every arming; an entry whose key no longer maps to it was cancelled or re-armed
        # and is skipped when it comes up (and swept out when stale entries pile up).
        self._timers: dict[object, tuple[int, int]] = {}
        self._heap: list[tuple[int, int, object]] = []
        self._armings = itertools.count()
        self._timer_wake: anyio.Event | None = None
        self._timer_sleep = math.inf  # the deadline (ms) the timer task sleeps until
        # Timers armed during the current feed, key -> deadline in the order armed: they join
        # the table and the heap when the feed ends, if not cancelled by then (no timer fires
        # in the middle of a feed). A timer armed and cancelled within one feed (a call that
        # completes at once) costs a dict store and a pop: no arming number, no table entry, no
        # heap entry and no wake-up of the timer task.
        self._armed: dict[object, int] = {}
        # Live workers: their cancel scope, or None for one that completed at once and whose
        # report is queued (a kill removes it, and the report is then dropped).
        self._workers: dict[int, Cancellable | None] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._loop_tasks: _LoopTasks | None = None  # on asyncio: workers as plain tasks
        self._new_scope: Callable[[], anyio.CancelScope] = anyio.CancelScope
        # Running tools waiting for the answer to their own request, by token (R-CTX-4).
        self._waiters: dict[int, _Waiter] = {}
        self._tokens = itertools.count(1)
        self._performers = self._performers_by_kind()
        self._drivers: list[_Driver] = []  # idle drivers of eager jobs (_new_driver)

    def eager_when(self, eager: EagerJobs | None) -> None:
        """Sets which jobs run to completion at once (see the module's docstring); ``None``:
        none do. Call before the first event."""
        self._eager = eager

    def tap(self, tap: Tap | None) -> None:
        """Hands every step to ``tap`` from now on (``None``: to nobody); the one place where
        every event the reducer is fed passes (spec/audit.md, R-AUD-3)."""
        self._tap = tap

    @property
    def state(self) -> State:
        """The current state, for tests and introspection. The runtime reads it only to
        find a worker's call (:meth:`close_stream`)."""
        return self._state

    @property
    def live_timers(self) -> frozenset[object]:
        """Keys of the timers armed now (for tests: they must equal the reducer's, R-INV-4)."""
        return frozenset(self._timers.keys() | self._armed.keys())

    def timer_deadline(self, key: object) -> int | None:
        """When the timer ``key`` fires, if it is armed (for tests: a parked call's deadline,
        which the store does not keep, R-STORE-5)."""
        armed = self._armed.get(key)
        if armed is not None:
            return armed
        timer = self._timers.get(key)
        return None if timer is None else timer[0]

    @property
    def live_workers(self) -> frozenset[int]:
        """Refs of the workers running now (for tests)."""
        return frozenset(self._workers)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Runtime]:
        """Runs the runtime's tasks; leaving the block cancels every timer and worker."""
        self._clock = _loop_clock()
        # The running backend's cancel scope class, called directly: ``anyio.CancelScope()``
        # looks the backend up on every call.
        scope_class = type(anyio.CancelScope())
        self._new_scope = (
            scope_class if issubclass(scope_class, anyio.CancelScope) else anyio.CancelScope
        )
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                self._loop_tasks = None
            else:
                self._loop_tasks = _LoopTasks(tg)
            tg.start_soon(self._run_timers, name="askgate timers")
            try:
                yield self
            finally:
                self._tg = None
                tg.cancel_scope.cancel()
                for scope in self._workers.values():
                    if scope is not None:
                        scope.cancel()
                self._queue.clear()
                self._timers.clear()
                self._armed.clear()
                self._heap.clear()
                self._workers.clear()
                if self._loop_tasks is not None:
                    with anyio.CancelScope(shield=True):
                        await self._loop_tasks.join()
                    self._loop_tasks = None

    # -- connections ------------------------------------------------------------------------

    def attach(self, conn: Hashable, writer: Writer) -> None:
        """Routes ``conn``'s replies and pushes to ``writer`` (before its first event)."""
        self._writers[conn] = writer

    def route(self, conn: Hashable, router: Router) -> None:
        """Hands ``conn``'s ``Reply`` and ``Push`` effects themselves to ``router`` instead of a
        writer: for a transport that sends each reply on the stream of its request (HTTP)."""
        self._routes[conn] = router

    def unroute(self, conn: Hashable) -> None:
        """Stops routing ``conn``'s effects; anything addressed to it afterwards is dropped.
        Forgets its principal."""
        self._routes.pop(conn, None)
        self._closers.pop(conn, None)
        self._principals.pop(conn, None)

    def set_principal(self, conn: Hashable, principal: str) -> None:
        """Who ``conn`` is (an HTTP session's principal), for the log and a callback's
        ``Context``; forgotten on :meth:`detach` or :meth:`unroute`."""
        self._principals[conn] = principal

    def principal_of(self, conn: Hashable) -> str | None:
        """The principal a transport gave for ``conn``, or ``None`` (stdio)."""
        return self._principals.get(conn)

    def on_close_stream(self, conn: Hashable, closer: StreamCloser) -> None:
        """What :meth:`close_stream` calls for ``conn``'s tools (until :meth:`unroute`)."""
        self._closers[conn] = closer

    def close_stream(self, ref: int) -> None:
        """The tool running in worker ``ref`` asks its transport to close the connection that
        carries its call's stream (spec/http.md, R-HTTP-21): transport plumbing, the reducer is
        not told. A no-op for a transport that registered no closer (stdio)."""
        call = self._state.workers.get(ref)  # (connection, request id) of the worker's call
        closer = None if call is None else self._closers.get(call[0])
        if closer is not None and call is not None:
            closer(call[1])

    def detach(self, conn: Hashable) -> None:
        """Stops routing to ``conn``: anything addressed to it afterwards is not written.
        Forgets its principal."""
        self._writers.pop(conn, None)
        self._principals.pop(conn, None)

    # -- events -----------------------------------------------------------------------------

    def now(self) -> int:
        """The shell's clock (:func:`now_ms`), without looking the event loop up each time."""
        return int(self._clock() * 1000)

    def feed(self, event: Event) -> None:
        """Steps the reducer with ``event`` and performs the effects, in order.

        An event fed while effects are being performed waits until they all are; then the
        queued events are stepped in the order they came, before this returns.
        """
        queue = self._queue
        if self._feeding:
            queue.append((None, event))
            return
        self._feeding = True
        try:
            self._step(event)
            while queue:
                ref, queued = queue.popleft()
                if ref is not None:  # an eager worker's report
                    if self._workers.get(ref, _KILLED) is not None:
                        continue  # the worker was killed meanwhile (None: it completed at once)
                    del self._workers[ref]
                self._step(queued)
        except BaseException:
            queue.clear()
            for ref in [ref for ref, scope in self._workers.items() if scope is None]:
                del self._workers[ref]
            raise
        finally:
            self._feeding = False
            if self._armed:
                self._push_armed()

    def _step(self, event: Event) -> None:
        before = self._state
        self._state, effects = step(before, event)
        if self._tap is not None:
            self._tap(before, event, self._state, effects)
        if self._checking:
            self._check()
        performers = self._performers
        for effect in effects:
            perform = performers.get(type(effect))  # effect classes are final
            if perform is not None:
                perform(effect)
            else:  # pragma: no cover - the effect kinds are closed
                self._perform(effect)

    def _check(self) -> None:
        """Debug mode: checks the state's invariants and records the largest sizes seen."""
        from askgate.core.invariants import check_invariants  # noqa: PLC0415 (debug mode only)

        state = self._state
        check_invariants(state)
        self.steps_checked += 1
        grown = False
        for name in _SIZED:
            size = len(getattr(state, name))
            if size > self.largest.get(name, -1):
                self.largest[name] = size
                grown = True
        if grown:
            sizes = " ".join(f"{name}={self.largest[name]}" for name in _SIZED)
            check_logger.warning("largest state so far: %s", sizes)

    def _perform(self, effect: Effect) -> None:
        try:
            perform = self._performers[type(effect)]  # effect classes are final
        except KeyError:  # pragma: no cover - the effect kinds are closed
            raise TypeError(f"unknown effect {effect!r}") from None
        perform(effect)

    def _performers_by_kind(self) -> dict[type, Callable[[Any], None]]:
        """How each kind of effect is performed, by its exact class."""
        return {
            StartTimer: self._perform_start_timer,
            CancelTimer: self._perform_cancel_timer,
            StartWorker: self._perform_start_worker,
            Reply: self._perform_message,
            Push: self._perform_message,
            Emit: self._perform_emit,
            KillWorker: self._perform_kill_worker,
            Resolve: self._perform_resolve,
        }

    def _perform_start_timer(self, effect: StartTimer) -> None:
        key, deadline = effect.key, effect.deadline
        if self._feeding:  # armed when the feed ends, if not cancelled by then
            armed = self._armed
            if key in armed:  # armed again: it counts from now, after the others
                del armed[key]
            armed[key] = deadline
            return
        arming = next(self._armings)
        self._timers[key] = (deadline, arming)
        self._push_timer(deadline, arming, key)
        if deadline < self._timer_sleep and self._timer_wake is not None:
            self._timer_wake.set()  # the earliest deadline moved: re-arm the sleep

    def _perform_cancel_timer(self, effect: CancelTimer) -> None:
        key = effect.key
        if self._armed:
            self._armed.pop(key, None)  # armed in this feed
        self._timers.pop(key, None)  # armed earlier

    def _perform_start_worker(self, effect: StartWorker) -> None:
        job = effect.job
        if self._eager is not None and self._eager(job):
            self._run_at_once(effect.ref, effect.conn, job)
        else:
            self._start_worker(effect.ref, effect.conn, job)

    def _perform_message(self, effect: Reply | Push) -> None:
        router = self._routes.get(effect.conn) if self._routes else None
        if router is not None:
            router(effect)
            return
        message = effect.message
        if message is None:
            return
        # An unencodable message is the machinery's bug (worker values are checked before they
        # are reported), so EncodeError propagates and stops the server loudly.
        data = encode(message)
        writer = self._writers.get(effect.conn)
        if writer is None:
            logger.debug("dropped a message for %r: the connection has no writer", effect.conn)
            return
        writer(data)

    def _perform_emit(self, emit: Emit) -> None:
        name = emit.name
        if name == "tool_hidden":  # R-PROTO-8: the operator hears of it
            fields = emit.fields
            logger.warning("tools/list hides %s: %s", fields["tool"], fields["reason"])
        if self._observer is not None:
            self._observer(name, emit.fields)
        if name in RECORDS:
            if CALLS_LOGGER.isEnabledFor(logging.INFO):  # nothing is built when INFO is off
                log_record(name, emit.fields, self.principal_of)
        elif self._observer is None:
            logger.debug("%s %s", name, emit.fields)

    def _perform_kill_worker(self, effect: KillWorker) -> None:
        scope = self._workers.pop(effect.ref, None)
        if scope is not None:
            scope.cancel()  # None: it completed at once; its queued report is dropped

    def _perform_resolve(self, resolve: Resolve) -> None:
        waiter = self._waiters.get(resolve.token)  # type: ignore[call-overload]
        if waiter is not None and not waiter.done:
            waiter.done, waiter.outcome = True, resolve.outcome
            if waiter.event is not None:
                waiter.event.set()

    def _group(self) -> anyio.abc.TaskGroup:
        if self._tg is None:
            raise RuntimeError("the runtime is not running: use `async with runtime.running()`")
        return self._tg

    # -- a running tool's context (R-CTX) ----------------------------------------------------

    def report_progress(
        self, ref: int, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Reports progress for the tool running in worker ``ref`` (R-CTX-2)."""
        self.feed(ToolProgressed(ref, progress, total, message, self.now()))

    def tool_log(self, ref: int, level: str, data: object, logger: str | None = None) -> None:
        """Logs for the caller of the tool running in worker ``ref`` (R-CTX-3)."""
        self.feed(ToolLogged(ref, level, data, logger, self.now()))

    async def ask_client(self, ref: int, method: str, params: dict[str, Any]) -> object:
        """Sends the tool running in worker ``ref``'s own request to its client and waits: the
        client's result object, or the :class:`~askgate.core.Failure` the reducer decided
        (R-CTX-4 .. R-CTX-6). Cancelled with the worker."""
        token = next(self._tokens)
        waiter = self._waiters[token] = _Waiter()
        try:
            self.feed(ToolRequested(ref, token, method, params, self.now()))
            if not waiter.done:  # a refusal resolves within the feed
                event = waiter.event = anyio.Event()
                await event.wait()
            return waiter.outcome
        finally:
            del self._waiters[token]

    # -- timers -----------------------------------------------------------------------------

    def _push_timer(self, deadline: int, arming: int, key: object) -> None:
        heapq.heappush(self._heap, (deadline, arming, key))
        if len(self._heap) > 2 * len(self._timers) + 64:  # mostly cancelled entries: sweep
            self._heap = [(d, n, k) for k, (d, n) in self._timers.items()]
            heapq.heapify(self._heap)

    def _push_armed(self) -> None:
        """Arms the timers armed during the feed and not cancelled since, in the order they
        were armed, and wakes the timer task when one is due before the end of its sleep."""
        armed, self._armed = self._armed, {}
        timers, armings, earliest = self._timers, self._armings, math.inf
        for key, deadline in armed.items():
            arming = next(armings)
            timers[key] = (deadline, arming)
            self._push_timer(deadline, arming, key)
            earliest = min(earliest, deadline)
        if earliest < self._timer_sleep and self._timer_wake is not None:
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
                self._timer_sleep = math.inf
                await wake.wait()
                continue
            self._timer_sleep = self._heap[0][0]
            with anyio.CancelScope(deadline=self._heap[0][0] / 1000):
                await wake.wait()
            self._timer_sleep = -math.inf  # awake: nothing needs to wake it
            if wake.is_set():
                continue  # a new earliest deadline: sleep again until it
            now = self.now()
            for _ in range(len(self._heap)):
                self._pop_stale()
                if not self._heap or self._heap[0][0] > now:
                    break
                _, _, key = heapq.heappop(self._heap)
                del self._timers[key]
                self.feed(TimerFired(cast(TimerKey, key), now))

    # -- workers ----------------------------------------------------------------------------

    def _start_worker(self, ref: int, conn: Hashable, job: Job) -> None:
        """Starts a worker of its own for ``job`` (one that does not run at once)."""
        scope = self._new_scope()
        self._workers[ref] = scope
        if self._loop_tasks is not None:
            self._loop_tasks.spawn(self._worker(ref, conn, job, scope), f"askgate worker {ref}")
        else:
            self._group().start_soon(
                self._worker, ref, conn, job, scope, name=f"askgate worker {ref}"
            )

    async def _worker(self, ref: int, conn: Hashable, job: Job, scope: anyio.CancelScope) -> None:
        failed = False
        value: object = None
        _WORKER.set(ref)  # this task's own context: the tool's Context finds its worker
        with scope:
            try:
                value = await self._perform_job(conn, job)
            except (Exception, SystemExit):
                # The callback's failure, not the server's: logged here, never sent (R-WORK-3).
                logger.exception("callback failed: %s", _job_text(job, conn, ref))
                failed = True
        if scope.cancel_called or self._workers.get(ref) is not scope:
            return  # killed: nothing it returned is looked at
        del self._workers[ref]
        now = self.now()
        self.feed(WorkerFailed(ref, now) if failed else WorkerFinished(ref, value, now))

    def _run_at_once(self, ref: int, conn: Hashable, job: Job) -> None:
        """Runs a job whose callback completes without suspending, to the end, here; its report
        is queued for after the current step's effects (a kill before then drops it)."""
        report: Event
        token = _WORKER.set(ref)  # a tool's Context finds its worker, as in a task
        try:
            coro = self._perform_job(conn, job)
            if not isinstance(coro, CoroutineType):
                raise TypeError("an eager job must be an async def")
            drivers = self._drivers
            driver, box = drivers.pop() if drivers else _new_driver()
            if driver.send(coro) is not _DONE:  # (what raised out of it ended the driver)
                driver.close()  # closes the coroutine where it waits, then the driver
                raise RuntimeError(
                    "a callback marked completes_without_suspending suspended; it was stopped"
                )
            value, box[0] = box[0], None
            drivers.append((driver, box))
            report = WorkerFinished(ref, value, int(self._clock() * 1000))
        except (Exception, SystemExit):
            # The callback's failure, not the server's: logged here, never sent (R-WORK-3).
            logger.exception("callback failed: %s", _job_text(job, conn, ref))
            report = WorkerFailed(ref, self.now())
        finally:
            _WORKER.reset(token)
        self._workers[ref] = None
        if self._feeding:
            self._queue.append((ref, report))
        else:  # performed outside a feed (tests): report now
            del self._workers[ref]
            self.feed(report)
