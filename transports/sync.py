"""The synchronous driver: the reducer for code without an event loop (spec/sync.md, R-SYNC).

A WSGI app, a command-line agent or a thread pool drives the same reducer through
:class:`SyncRuntime`, a :class:`~askgate.transports.runtime.Runtime` whose timers, workers and
callers are threads. It decides nothing, and it performs the reducer's effects with the
runtime's own code: replies, pushes, records, ``Resolve`` and the order of events fed while
effects are performed are the async shell's, unchanged. What differs:

- ``feed`` may be called from any thread: one lock is held for the step and its effects, so the
  state changes one event at a time and the effects go out in step order (R-SYNC-1).
- Timers: one thread waits on a condition variable until the earliest deadline on ``clock``
  (``time.monotonic`` by default) and feeds ``TimerFired`` for each timer due. Arming or
  cancelling one is a table update under the lock (R-SYNC-2). :class:`ManualClock` is a clock
  that moves only when told, for tests: its timers fire when it is advanced past them.
- Workers: each ``StartWorker`` job runs on a thread of a pool that grows when every thread is
  busy (its threads live until the runtime stops; a callback that hangs keeps its thread).
  A plain callback is called directly on that thread; an ``async`` one runs on that thread's own
  event loop. ``KillWorker`` abandons the thread (what it returns is never looked at) and cancels
  an ``async`` job where it waits (R-SYNC-3). Jobs of askgate's own callbacks that complete
  without suspending (the policy file's authorizers) run at once on the feeding thread, as in
  the async shell.
- Leaving :meth:`SyncRuntime.threads` kills every worker and stops the timer thread; a stopped
  runtime feeds nothing more (R-SYNC-4).

:class:`LocalClient` is an MCP client in the same process, for a host that calls tools itself:
``call_tool`` blocks until the reducer's reply (a stop raises), and an approval the reducer asks
for is put to the host's ``ask`` callback on a thread of its own (R-SYNC-5).
:func:`serve_stdio_blocking` serves one stdio connection from the calling thread.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import inspect
import itertools
import json
import logging
import math
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Hashable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import IO, Any, cast

import anyio

from askgate.core import (
    Event,
    Job,
    SubscriberAttached,
    SubscriberDetached,
    TimerFired,
    ToolRequested,
    WorkerFailed,
    WorkerFinished,
)
from askgate.core.codec import MAX_BYTES
from askgate.core.events import MessageReceived, TimerKey
from askgate.core.messages import METHOD_NOT_FOUND
from askgate.core.state import State

from .runtime import (
    _ON_WORKER_THREAD,
    _WORKER,
    EagerJobs,
    JobPerformer,
    Observer,
    Runtime,
    _job_text,
    _Waiter,
)

__all__ = [
    "Asker",
    "CallTimeoutError",
    "Clock",
    "LocalClient",
    "ManualClock",
    "SyncRuntime",
    "ToolCallError",
    "UnknownToolError",
    "serve_stdio_blocking",
]

logger = logging.getLogger("askgate.runtime")

Clock = Callable[[], float]
"""A monotonic clock, in seconds."""


class ManualClock:
    """A clock that moves only when :meth:`advance` is called (for tests): the runtime's timer
    thread waits for it instead of for time to pass. It counts whole milliseconds, so the
    runtime's ``now`` is exactly what it was moved to."""

    def __init__(self, start_ms: int = 0) -> None:
        self.ms = start_ms
        self._lock = threading.Lock()
        self._conditions: list[threading.Condition] = []

    def __call__(self) -> float:
        return self.ms / 1000

    def advance(self, ms: int) -> None:
        """Moves the clock ``ms`` forward and wakes the timer threads waiting on it."""
        with self._lock:
            self.ms += ms
            conditions = list(self._conditions)
        for condition in conditions:
            with condition:
                condition.notify_all()

    def watch(self, condition: threading.Condition) -> None:
        with self._lock:
            self._conditions.append(condition)


class _Handle:
    """A live worker on a pool thread: killed, it is abandoned; an ``async`` job's task is
    cancelled where it waits."""

    __slots__ = ("_lock", "cancelled", "loop", "task")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.cancelled = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[object] | None = None

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            loop, task = self.loop, self.task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # its loop closed: the job ended
                loop.call_soon_threadsafe(task.cancel)

    def adopt(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[object]) -> bool:
        """Records where an ``async`` job runs; ``False`` when it was killed already."""
        with self._lock:
            self.loop, self.task = loop, task
            return not self.cancelled


class _Pool:
    """Threads that run jobs; a new one starts when none is idle. They live until :meth:`close`
    (daemon threads: one stuck in a callback does not keep the process alive)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._count = 0
        self._closed = False

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                return
            if self._idle > 0:
                self._idle -= 1  # that thread takes this job
            else:
                self._count += 1
                thread = threading.Thread(
                    target=self._run, name=f"askgate worker thread {self._count}", daemon=True
                )
                thread.start()
        self._jobs.put(job)

    def _run(self) -> None:
        local = _Local()
        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                _THREAD.local = local
                job()
                with self._lock:
                    self._idle += 1
        finally:
            local.close()

    def close(self) -> None:
        """Every idle thread ends; a busy one ends after its job (it is not waited for)."""
        with self._lock:
            self._closed = True
            count = self._count
        for _ in range(count):
            self._jobs.put(None)


class _Local:
    """A pool thread's own event loop, made the first time an ``async`` job needs one."""

    def __init__(self) -> None:
        self.runner: asyncio.Runner | None = None

    def run(self, coro: Coroutine[Any, Any, object]) -> object:
        if self.runner is None:
            self.runner = asyncio.Runner()
        return self.runner.run(coro)

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()


_THREAD = threading.local()


def _complete(coro: object) -> object:
    """The value of a job that runs without an event loop: a plain value, or a coroutine that
    must complete without suspending."""
    if not inspect.iscoroutine(coro):
        return coro
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a callback run without an event loop suspended; it was stopped")


class SyncRuntime(Runtime):
    """Performs the reducer's effects with threads; use inside :meth:`threads`.

    ``perform_job(conn, job)`` returns the worker's value or a coroutine of it (a ``Server``'s
    :meth:`~askgate.server.Server.perform_job`). ``loop_free(job)`` says which jobs need no event
    loop (their coroutine completes without suspending once plain callbacks are called
    directly): they are stepped on the worker thread; the others run on the thread's own loop.
    ``eager``: as for :class:`Runtime`. ``clock``: seconds, monotonic (``time.monotonic``).
    """

    def __init__(
        self,
        state: State,
        perform_job: JobPerformer,
        *,
        loop_free: EagerJobs | None = None,
        eager: EagerJobs | None = None,
        observer: Observer | None = None,
        clock: Clock | None = None,
        check_invariants: bool | None = None,
    ) -> None:
        super().__init__(
            state, perform_job, observer=observer, eager=eager, check_invariants=check_invariants
        )
        self._clock = clock if clock is not None else time.monotonic
        self._loop_free = loop_free
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._manual = clock if isinstance(clock, ManualClock) else None
        if isinstance(clock, ManualClock):
            clock.watch(self._cond)
        self._pool: _Pool | None = None
        self._timer_thread: threading.Thread | None = None
        self._stopped = True
        self.failure: BaseException | None = None
        """What broke the driver's machinery on one of its threads, if anything did."""
        self.failed = threading.Event()
        """Set when :attr:`failure` is."""
        self._on_stop: list[Callable[[], None]] = []

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Runtime]:
        """Refused: a ``SyncRuntime`` runs its own threads (:meth:`threads`)."""
        raise RuntimeError("a SyncRuntime runs its own threads: use `with runtime.threads():`")
        yield self  # pragma: no cover

    @contextmanager
    def threads(self) -> Iterator[SyncRuntime]:
        """Runs the timer thread and the worker pool; leaving the block kills every worker and
        stops the timer thread. Events fed afterwards are ignored."""
        with self._lock:
            if not self._stopped:
                raise RuntimeError("the runtime is already running")
            self._stopped = False
            self._pool = _Pool()
            self._timer_thread = threading.Thread(
                target=self._run_timers_thread, name="askgate timers", daemon=True
            )
            self._timer_thread.start()
        try:
            yield self
        finally:
            with self._cond:
                self._stopped = True
                for handle in self._workers.values():
                    if handle is not None:
                        handle.cancel()
                self._workers.clear()
                self._queue.clear()
                self._timers.clear()
                self._heap.clear()
                self._cond.notify_all()
                pool, self._pool = self._pool, None
            if pool is not None:
                pool.close()
            if self._timer_thread is not None:
                self._timer_thread.join()
                self._timer_thread = None
            for stopped in self._on_stop:
                stopped()
        if self.failure is not None:
            raise RuntimeError("the synchronous driver failed") from self.failure

    def on_stop(self, action: Callable[[], None]) -> None:
        """Calls ``action`` (with no lock held) once the runtime has stopped."""
        self._on_stop.append(action)

    @property
    def stopped(self) -> bool:
        """Whether the runtime is outside :meth:`threads` (it feeds nothing then)."""
        return self._stopped

    # -- events -----------------------------------------------------------------------------

    def now(self) -> int:
        """The driver's clock, in ms."""
        manual = self._manual
        return manual.ms if manual is not None else int(self._clock() * 1000)

    def feed(self, event: Event) -> None:
        """Steps the reducer with ``event`` and performs the effects, in order, holding the
        runtime's lock (callable from any thread; writers and the observer run under it)."""
        with self._lock:
            if self.failure is not None:
                raise RuntimeError("the synchronous driver failed") from self.failure
            if self._stopped:
                logger.debug("dropped %s: the runtime is not running", type(event).__name__)
                return
            Runtime.feed(self, event)

    def _feed_from_thread(self, event: Event) -> None:
        """Feeds for a timer or worker thread: a failure of the machinery there (a writer that
        raises, a broken invariant in debug mode) is kept, logged, and raised by every later
        :meth:`feed` and by leaving :meth:`threads`, so it stops the host loudly."""
        try:
            self.feed(event)
        except BaseException as failure:
            with self._lock:
                if self.failure is None:
                    logger.critical("the synchronous driver failed", exc_info=True)
                    self.failure = failure
                    self.failed.set()

    async def ask_client(self, ref: int, method: str, params: dict[str, Any]) -> object:
        """As :meth:`Runtime.ask_client`, for an ``async`` tool on a worker thread's loop."""
        waiter = _Waiter()
        done = threading.Event()
        waiter.event = done
        with self._lock:
            token = next(self._tokens)
            self._waiters[token] = waiter
        try:
            self.feed(ToolRequested(ref, token, method, params, self.now()))
            if not done.is_set():
                await anyio.to_thread.run_sync(done.wait, abandon_on_cancel=True)
            return waiter.outcome
        finally:
            with self._lock:
                del self._waiters[token]

    # -- timers -----------------------------------------------------------------------------

    def _wake_timers_if_earlier(self) -> None:
        with self._cond:
            self._pop_stale()
            if self._heap and self._heap[0][0] < self._timer_sleep:
                self._cond.notify_all()

    def _run_timers_thread(self) -> None:
        """Sleeps until the earliest deadline and fires every timer that is due, in deadline
        order, each with the clock's time when it fired."""
        with self._cond:
            while not self._stopped:
                self._pop_stale()
                if not self._heap:
                    self._timer_sleep = math.inf
                    self._cond.wait()
                    continue
                deadline = self._heap[0][0]
                now = self.now()
                if deadline > now:
                    self._timer_sleep = deadline
                    self._cond.wait(None if self._manual is not None else (deadline - now) / 1000)
                    continue
                self._timer_sleep = -math.inf
                for _ in range(len(self._heap)):
                    self._pop_stale()
                    if self._stopped or not self._heap or self._heap[0][0] > now:
                        break
                    _, _, key = heapq.heappop(self._heap)
                    del self._timers[key]
                    self._feed_from_thread(TimerFired(cast(TimerKey, key), now))
                    if self.failure is not None:
                        return

    # -- workers ----------------------------------------------------------------------------

    def _start_worker(self, ref: int, conn: Hashable, job: Job) -> None:
        pool = self._pool
        if pool is None:
            raise RuntimeError("the runtime is not running: use `with runtime.threads():`")
        handle = _Handle()
        self._workers[ref] = handle
        pool.submit(lambda: self._work(ref, conn, job, handle))

    def _work(self, ref: int, conn: Hashable, job: Job, handle: _Handle) -> None:
        if handle.cancelled:
            return  # killed before a thread took it: it never runs
        failed = False
        value: object = None
        worker = _WORKER.set(ref)
        direct = _ON_WORKER_THREAD.set(True)
        try:
            if self._loop_free is not None and self._loop_free(job):
                value = _complete(self._perform_job(conn, job))
            else:
                value = _THREAD.local.run(self._on_loop(conn, job, handle))
        except asyncio.CancelledError:
            failed = True  # killed where it waited: nothing is reported
        except (Exception, SystemExit):
            if not handle.cancelled:
                # The callback's failure, not the server's: logged here, never sent (R-WORK-3).
                logger.exception("callback failed: %s", _job_text(job, conn, ref))
            failed = True
        finally:
            _ON_WORKER_THREAD.reset(direct)
            _WORKER.reset(worker)
        with self._lock:
            if handle.cancelled or self._workers.get(ref) is not handle:
                return  # killed: nothing it returned is looked at
            del self._workers[ref]
            now = self.now()
            report = WorkerFailed(ref, now) if failed else WorkerFinished(ref, value, now)
            self._feed_from_thread(report)

    async def _on_loop(self, conn: Hashable, job: Job, handle: _Handle) -> object:
        task = asyncio.current_task()
        assert task is not None
        if not handle.adopt(asyncio.get_running_loop(), cast("asyncio.Task[object]", task)):
            raise asyncio.CancelledError
        return await self._perform_job(conn, job)


# -- a client in the same process ----------------------------------------------------------------

Asker = Callable[[dict[str, Any]], "bool | dict[str, Any]"]
"""Takes an ``elicitation/create`` request's params; returns whether to approve, or the whole
result object to answer with."""


class CallTimeoutError(Exception):
    """:meth:`LocalClient.call_tool` waited longer than its ``timeout``; the call was cancelled."""


class ToolCallError(RuntimeError):
    """:meth:`LocalClient.call_tool` was answered a JSON-RPC error, not a tool result: its
    ``code``, ``message`` and ``data`` (``None`` when absent) are the error's."""

    def __init__(self, tool: str, error: object) -> None:
        fields = error if isinstance(error, dict) else {}
        self.tool = tool
        self.code: object = fields.get("code")
        self.message: object = fields.get("message")
        self.data: object = fields.get("data")
        super().__init__(f"tools/call {tool}: {error}")


class UnknownToolError(ToolCallError):
    """The server has no tool of that name: the call was answered ``-32601`` (R-ADM-2)."""


class LocalClient:
    """One MCP client of a :class:`SyncRuntime`, in the same process (R-SYNC-5).

    It attaches as connection ``conn`` and initializes (with the elicitation capability when
    ``ask`` is given). :meth:`call_tool` sends a ``tools/call`` and blocks until its reply (raises
    ``RuntimeError`` when the runtime stops first); an
    ``elicitation/create`` the reducer sends is put to ``ask`` on a thread of its own, and its
    answer sent back (``True``: the approval, exactly ``{"approve": true}``; ``False``: a
    decline; a dict: that result). A withdrawn prompt is not answered. ``on_message`` receives
    every other message (notifications, withdrawals).
    """

    def __init__(
        self,
        runtime: SyncRuntime,
        conn: Hashable = "local",
        *,
        ask: Asker | None = None,
        on_message: Callable[[dict[str, Any]], None] | None = None,
        protocol_version: str = "2025-11-25",
    ) -> None:
        self.runtime = runtime
        self.conn = conn
        self._ask = ask
        self._on_message = on_message
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting: dict[int, _Reply] = {}
        self._withdrawn: collections.deque[object] = collections.deque(maxlen=1024)
        runtime.attach(conn, self._receive)
        runtime.on_stop(self._release_all)
        runtime.feed(SubscriberAttached(conn, runtime.now()))
        capabilities: dict[str, Any] = {"elicitation": {}} if ask is not None else {}
        reply = self.request(
            "initialize",
            {
                "protocolVersion": protocol_version,
                "capabilities": capabilities,
                "clientInfo": {"name": "askgate-local", "version": "0"},
            },
        )
        if "error" in reply:
            raise RuntimeError(f"initialize failed: {reply['error']}")
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        """Sends one JSON-RPC message as this client."""
        data = json.dumps(message, separators=(",", ":")).encode()
        self.runtime.feed(MessageReceived(self.conn, data, self.runtime.now()))

    def request(
        self, method: str, params: dict[str, Any] | None = None, timeout: float | None = None
    ) -> dict[str, Any]:
        """Sends a request and returns its response (``result`` or ``error``); on ``timeout``
        (seconds) cancels it and raises :class:`CallTimeoutError`."""
        request_id = next(self._ids)
        waiting = self._waiting[request_id] = _Reply()
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        try:
            self.send(message)
            if not waiting.done.wait(timeout):
                self.send(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": request_id, "reason": "timed out"},
                    }
                )
                raise CallTimeoutError(f"{method} got no reply within {timeout} s")
            if waiting.message is None:
                raise RuntimeError(f"the driver stopped before {method} was answered")
            return waiting.message
        finally:
            with self._lock:
                self._waiting.pop(request_id, None)

    def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, timeout: float | None = None
    ) -> dict[str, Any]:
        """Calls a tool; returns the ``tools/call`` result object (a deny is an ``isError``
        result), or raises :class:`UnknownToolError` for a tool the server does not have and
        :class:`ToolCallError` (a ``RuntimeError``) for any other JSON-RPC error (R-SYNC-5)."""
        reply = self.request(
            "tools/call", {"name": name, "arguments": arguments or {}}, timeout=timeout
        )
        if "error" in reply:
            error = reply["error"]
            unknown = isinstance(error, dict) and error.get("code") == METHOD_NOT_FOUND
            raise (UnknownToolError if unknown else ToolCallError)(name, error)
        result: dict[str, Any] = reply["result"]
        return result

    def close(self) -> None:
        """Leaves: whatever this client has running or parked is dropped (R-DROP-3)."""
        self.runtime.feed(SubscriberDetached(self.conn, self.runtime.now()))
        self.runtime.detach(self.conn)

    def _release_all(self) -> None:
        """The runtime stopped: every request still waiting fails rather than wait on."""
        with self._lock:
            waiting = list(self._waiting.values())
        for reply in waiting:
            reply.done.set()

    def _receive(self, data: bytes) -> None:
        """The runtime's writer (it runs under the runtime's lock: it hands work on)."""
        message = json.loads(data)
        if "method" not in message and isinstance(message.get("id"), int):
            with self._lock:
                waiting = self._waiting.get(message["id"])
            if waiting is not None:
                waiting.message = message
                waiting.done.set()
                return
        method = message.get("method")
        if method == "elicitation/create" and self._ask is not None:
            threading.Thread(
                target=self._answer, args=(message,), name="askgate ask", daemon=True
            ).start()
            return
        if method == "notifications/cancelled":
            self._withdrawn.append(message.get("params", {}).get("requestId"))
        if self._on_message is not None:
            self._on_message(message)

    def _answer(self, request: dict[str, Any]) -> None:
        assert self._ask is not None
        try:
            verdict = self._ask(request.get("params", {}))
        except Exception:
            logger.exception("the ask callback failed; the approval is declined")
            verdict = False
        if request["id"] in self._withdrawn:
            return  # the reducer withdrew the prompt meanwhile
        if verdict is True:
            result: dict[str, Any] = {"action": "accept", "content": {"approve": True}}
        elif verdict is False:
            result = {"action": "decline"}
        else:
            result = verdict
        self.send({"jsonrpc": "2.0", "id": request["id"], "result": result})


class _Reply:
    __slots__ = ("done", "message")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.message: dict[str, Any] | None = None


# -- stdio without an event loop -----------------------------------------------------------------


def serve_stdio_blocking(
    runtime: SyncRuntime,
    stdin: IO[bytes],
    stdout: IO[bytes],
    *,
    conn: Hashable = "stdio",
    max_bytes: int = MAX_BYTES,
) -> None:
    """Serves one connection over binary files from the calling thread until end of input:
    each line goes to the reducer as it is read; replies are written (and flushed) by the
    thread that produced them, under the runtime's lock. At end of input the connection is
    detached (R-DROP-3)."""
    from .stdio import LineSplitter  # noqa: PLC0415 (only this server needs the splitter)

    def write(message: bytes) -> None:
        try:
            stdout.write(message + b"\n")
            stdout.flush()
        except (BrokenPipeError, ValueError):
            logger.warning("standard output was closed by the peer; nothing more is written")

    splitter = LineSplitter(max_bytes)
    runtime.attach(conn, write)
    runtime.feed(SubscriberAttached(conn, runtime.now()))
    try:
        read = getattr(stdin, "read1", stdin.read)
        while chunk := read(64 * 1024):
            now = runtime.now()
            for line in splitter.feed(chunk):
                runtime.feed(MessageReceived(conn, line, now))
        for line in splitter.finish():
            runtime.feed(MessageReceived(conn, line, runtime.now()))
        runtime.feed(SubscriberDetached(conn, runtime.now()))
    finally:
        runtime.detach(conn)
