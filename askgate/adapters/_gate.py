"""The shell every adapter shares: one reducer state, fed by another framework's server.

A :class:`Gate` owns a :class:`~askgate.transports.runtime.Runtime` (the reducer's state, its
timers and its workers, on anyio) and turns what a framework reports into events: a connection
seen for the first time (``ClientInitialized``, ``SubscriberAttached``), or a 2026-07-28 request,
a connection of its own (``SubscriberAttached`` for one request); the called tool
(``ToolRegistered``, ``ToolUnregistered``); a ``tools/call`` (``ToolCallReceived``) or a read
(``ReadRequested``); an elicitation answered (``ElicitationAnswered``); a call cancelled
(``CancelRequested``); a connection torn down (``SubscriberDetached``). It performs the effects
with the framework, through the :class:`CallSite` an adapter builds for each request: the
reducer's ``Reply`` answers it (a 2026-07-28 approval is that answer: an input-required result),
its ``elicitation/create`` push is sent with the framework's own request and its withdrawal
cancels that request, its ``RunTool`` and ``RunRead`` workers run the framework's handler. It
decides nothing (spec/adapters.md).
"""

from __future__ import annotations

import copy
import functools
import itertools
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import attrs

from askgate.core import (
    Authorize,
    AuthorizeRead,
    CancelRequested,
    ClientInitialized,
    ElicitationAnswered,
    Event,
    Job,
    Options,
    Push,
    ReadRequested,
    Reply,
    Round,
    RunRead,
    RunTool,
    ServerStopping,
    SubscriberAttached,
    SubscriberDetached,
    ToolCallReceived,
    ToolRegistered,
    ToolUnregistered,
    initial_state,
)
from askgate.server import Authorizer, Context
from askgate.transports.runtime import Runtime, call_user, current_worker, runs_eagerly

__all__ = ["GUARDED_READS", "CallSite", "ElicitError", "Gate", "GateError"]

logger = logging.getLogger("askgate.adapters")

# The options a gate takes (askgate.Server's, less the listings it does not serve).
_GATE_OPTIONS = frozenset(
    {
        "server_name",
        "server_version",
        "elicitation_timeout_ms",
        "max_parked_elicitations",
        "max_parked_elicitations_total",
        "max_client_capabilities",
        "max_in_flight",
        "max_in_flight_per_connection",
        "callback_timeout_ms",
    }
)

NOT_RUNNING = -32603

GUARDED_READS = frozenset({"resources/read", "prompts/get", "completion/complete"})
"""The reads a gate with a read authorizer decides (R-ADAPT-11): those the reducer answers with
the framework's own handler. The listings stay the framework's (the reducer would answer them
from a catalogue of its own, which an adapter does not fill)."""


class GateError(Exception):
    """A ``tools/call`` the reducer answered with a JSON-RPC error (or a gate that is not
    running): the adapter raises it to its framework as an error with this code, message and
    data (R-ADAPT-2, R-ADAPT-8)."""

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data


class ElicitError(Exception):
    """The client answered an elicitation with a JSON-RPC error (R-ADAPT-3)."""

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data


@attrs.frozen(slots=True)
class CallSite:
    """What a gate needs from a framework for one request (a ``tools/call`` or a read).

    ``connection`` is the framework's object for the connection of a 2025 revision the request
    came on (the gate tells the reducer about it the first time it sees it, R-ADAPT-6), or
    ``None`` for a request of the 2026-07-28 revision, which is a connection of its own
    (R-ADAPT-9); ``capabilities`` gives what its client declared at ``initialize``, as JSON
    (asked the first time the gate sees the connection); ``can_ask`` whether the framework can
    send it a request (a back-channel); ``on_close`` registers a callback the framework calls
    when the connection is torn down. ``tool`` gives the called tool's ``tools/list`` entry, or
    ``None`` when the framework has no such tool (R-ADAPT-7; ``None`` for a read). ``run`` runs
    the framework's handler with the given arguments (a read's params) and what the reducer
    tells it of its rounds (``None`` for a 2025 request), and returns the result object, a
    :class:`~askgate.core.NeedsInput` (the handler ended a round, R-ADAPT-10) or, for a read, a
    :class:`~askgate.core.Failure` (R-ADAPT-11). ``elicit`` sends ``elicitation/create`` with a
    message and a requested schema and returns the client's result object or raises
    :class:`ElicitError` (R-ADAPT-3). A 2026-07-28 request also carries its ``_meta``
    (``meta``), ``requestState``, ``inputResponses`` and the principal the framework
    authenticated, as they came (R-ADAPT-9).
    """

    connection: object
    capabilities: Callable[[], object]
    can_ask: bool
    on_close: Callable[[Callable[[], None]], None]
    tool: Callable[[], Awaitable[dict[str, Any] | None]] | None
    run: Callable[[object, Round | None], Awaitable[object]]
    elicit: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
    meta: object = None
    request_state: object = None
    input_responses: object = None
    principal: str | None = None


class _Pending:
    """A call waiting for its reply."""

    __slots__ = ("done", "event", "message", "site")

    def __init__(self, site: CallSite) -> None:
        self.site = site
        self.done = False
        self.message: dict[str, Any] | None = None
        self.event = anyio.Event()


class Gate:
    """askgate's reducer in front of another framework's tools (spec/adapters.md).

    ``authorizer`` is askgate's: ``(tool, arguments, context) -> Allow() | Ask(prompt) |
    Deny(reason)``, sync or async (``context.conn_id`` names the connection).
    ``read_authorizer`` is askgate's read authorizer: ``(method, params, context)``, deciding
    ``resources/read``, ``prompts/get`` and ``completion/complete`` (R-ADAPT-11; without one,
    reads are the framework's). ``sensitive`` names tools that are sensitive whatever their
    annotations say. The options are the reducer's caps and timeouts
    (``elicitation_timeout_ms``, ``max_parked_elicitations``, ``max_parked_elicitations_total``,
    ``max_in_flight``, ``max_in_flight_per_connection``, ``callback_timeout_ms``,
    ``max_client_capabilities``) and the ``server_name`` and ``server_version`` a 2026-07-28
    answer the reducer makes names (``guard`` gives the framework's). One gate guards every
    connection of the servers it wraps: the caps are counted across them (R-ADAPT-5). It works
    while :meth:`running`.
    """

    def __init__(
        self,
        authorizer: Authorizer | None = None,
        *,
        read_authorizer: Authorizer | None = None,
        sensitive: Iterable[str] = (),
        check_invariants: bool | None = None,
        **options: Any,
    ) -> None:
        unknown = sorted(set(options) - _GATE_OPTIONS)
        if unknown:
            raise TypeError(f"unknown gate options: {', '.join(unknown)}")
        if authorizer is not None and not callable(authorizer):
            raise TypeError("authorizer must be callable or None")
        if read_authorizer is not None and not callable(read_authorizer):
            raise TypeError("read_authorizer must be callable or None")
        self._options = Options(
            has_authorizer=authorizer is not None,
            has_read_authorizer=read_authorizer is not None,
            authorizer_source="configured" if authorizer is not None else "default",
            **options,
        ).validated()
        self._authorizer = authorizer
        self._read_authorizer = read_authorizer
        self._sensitive = frozenset(sensitive)
        state = initial_state(self._options, id_key=secrets.token_bytes(32))
        self._runtime = Runtime(
            state, self._perform_job, eager=self._runs_eagerly, check_invariants=check_invariants
        )
        # An authorizer marked completes_without_suspending runs at once, as askgate's server
        # runs it: without a task of its own (transports/runtime.py).
        self._eager_jobs = frozenset(
            kind
            for kind, func in ((Authorize, authorizer), (AuthorizeRead, read_authorizer))
            if func is not None and runs_eagerly(func)
        )
        self._running = False
        self._tg: anyio.abc.TaskGroup | None = None
        self._conns: dict[int, str] = {}  # id(framework connection) -> conn
        self._conn_numbers = itertools.count(1)
        self._tools: dict[str, dict[str, Any]] = {}  # what the reducer was told, by name
        self._calls: dict[tuple[Hashable, object], _Pending] = {}
        self._receiving: tuple[tuple[Hashable, object], _Pending] | None = None
        self._elicits: dict[object, anyio.CancelScope] = {}

    @property
    def runtime(self) -> Runtime:
        """The runtime (its state, live timers and workers), for tests and introspection."""
        return self._runtime

    @property
    def is_running(self) -> bool:
        """Whether the gate is inside :meth:`running`."""
        return self._running

    @property
    def options(self) -> Options:
        """The reducer's options in force."""
        return self._options

    @property
    def guards_reads(self) -> bool:
        """Whether the gate decides the reads of :data:`GUARDED_READS` (it has a read
        authorizer, R-ADAPT-11)."""
        return self._read_authorizer is not None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Gate]:
        """Runs the gate's timers and workers; leaving the block answers every open call
        (``ServerStopping``, R-ADAPT-8) and stops them."""
        if self._running:
            raise RuntimeError("the gate is already running")
        async with self._runtime.running(), anyio.create_task_group() as tg:
            self._tg = tg
            self._running = True
            try:
                yield self
            finally:
                self._runtime.feed(ServerStopping(self._runtime.now()))
                self._running = False
                self._tg = None
                tg.cancel_scope.cancel()

    def lifespan_entered(self) -> Callable[[], Any]:
        """An async context manager factory entering :meth:`running` unless the gate already
        runs (for a framework lifespan that may run once per connection)."""

        @asynccontextmanager
        async def enter() -> AsyncIterator[None]:
            if self._running:
                yield
                return
            async with self.running():
                yield

        return enter

    # -- a call -------------------------------------------------------------------------------

    async def call(
        self, site: CallSite, request_id: object, tool: str, arguments: object
    ) -> dict[str, Any]:
        """Decides the ``tools/call`` ``request_id`` of ``tool`` with ``arguments`` and returns
        its result object, or raises :class:`GateError` with the reducer's JSON-RPC error."""
        self._check_running()
        if site.tool is not None:
            await self._sync_tool(tool, site.tool)
            self._check_running()  # stopped while the framework looked its tool up
        if site.connection is None:  # R-ADAPT-9: a 2026-07-28 request
            conn = self._request_conn(site)
            try:
                event = ToolCallReceived(
                    conn,
                    request_id,
                    tool,
                    arguments,
                    self._runtime.now(),
                    meta=site.meta,
                    request_state=site.request_state,
                    input_responses=site.input_responses,
                    principal=site.principal,
                )
                return await self._decide(site, conn, request_id, event)
            finally:
                self._end_request_conn(conn)
        conn = self._conn(site)
        event = ToolCallReceived(conn, request_id, tool, arguments, self._runtime.now())
        return await self._decide(site, conn, request_id, event)

    async def read(
        self, site: CallSite, request_id: object, method: str, params: object
    ) -> dict[str, Any]:
        """Decides the read ``request_id`` (a method of :data:`GUARDED_READS`) with ``params``
        and returns its result object, or raises :class:`GateError` (R-ADAPT-11)."""
        self._check_running()
        if site.connection is None:  # R-ADAPT-9
            conn = self._request_conn(site)
            try:
                now, who = self._runtime.now(), site.principal
                event = ReadRequested(conn, request_id, method, params, now, principal=who)
                return await self._decide(site, conn, request_id, event)
            finally:
                self._end_request_conn(conn)
        conn = self._conn(site)
        event = ReadRequested(conn, request_id, method, params, self._runtime.now())
        return await self._decide(site, conn, request_id, event)

    def _check_running(self) -> None:
        if not self._running:
            raise GateError(
                NOT_RUNNING, "askgate's gate is not running", {"error": "gate_not_running"}
            )

    async def _decide(
        self, site: CallSite, conn: str, request_id: object, event: Event
    ) -> dict[str, Any]:
        """Feeds ``event`` (the request ``request_id`` of ``conn``) and waits for its answer."""
        runtime = self._runtime
        key = (conn, request_id)
        pending = _Pending(site)
        if key not in self._calls:  # a duplicate id is refused within the feed (R-ADM-1)
            self._calls[key] = pending
        self._receiving = (key, pending)
        try:
            runtime.feed(event)
        finally:
            self._receiving = None
        if not pending.done:
            try:
                await pending.event.wait()
            finally:
                if not pending.done:  # cancelled: the caller or its connection went (R-ADAPT-6)
                    if self._calls.get(key) is pending:
                        del self._calls[key]
                    if self._running:
                        runtime.feed(CancelRequested(conn, request_id, runtime.now()))
        message = pending.message
        if message is None:  # pragma: no cover - only a drop answers nothing, after a cancel
            raise GateError(NOT_RUNNING, "the call was dropped", {"error": "dropped"})
        if "error" in message:
            error = message["error"]
            raise GateError(
                error.get("code", NOT_RUNNING), error.get("message", ""), error.get("data")
            )
        result: dict[str, Any] = message["result"]
        return result

    async def _sync_tool(
        self, name: str, lookup: Callable[[], Awaitable[dict[str, Any] | None]]
    ) -> None:
        """Tells the reducer about the called tool when it is new, changed or gone (R-ADAPT-7)."""
        definition = await lookup()
        runtime = self._runtime
        if definition is None or definition.get("name") != name:
            if name in self._tools:
                del self._tools[name]
                runtime.feed(ToolUnregistered(name, runtime.now()))
            return
        if self._tools.get(name) != definition:
            self._tools[name] = definition
            sensitive = name in self._sensitive
            runtime.feed(ToolRegistered(name, sensitive, now=runtime.now(), definition=definition))

    def _conn(self, site: CallSite) -> str:
        """The reducer's name for the call's connection, telling the reducer about it the first
        time (R-ADAPT-6)."""
        key = id(site.connection)
        conn = self._conns.get(key)
        if conn is not None:
            return conn
        conn = f"adapter-{next(self._conn_numbers)}"
        self._conns[key] = conn
        runtime = self._runtime
        runtime.route(conn, self._route)
        now = runtime.now()
        runtime.feed(ClientInitialized(conn, site.capabilities(), now))
        if site.can_ask:
            runtime.feed(SubscriberAttached(conn, now))
        site.on_close(functools.partial(self._detach, key, conn))
        return conn

    def _request_conn(self, site: CallSite) -> str:
        """A connection for one 2026-07-28 request (R-ADAPT-9): it never initializes, so the
        request's own ``_meta`` says how it is served, and it is owned by its principal, or
        with every request no one authenticated (R-PARK-5, R-PARK-7)."""
        conn = f"adapter-{next(self._conn_numbers)}"
        runtime = self._runtime
        runtime.route(conn, self._route)
        runtime.feed(SubscriberAttached(conn, runtime.now(), site.principal, per_request=True))
        return conn

    def _end_request_conn(self, conn: str) -> None:
        if self._running:
            self._runtime.feed(SubscriberDetached(conn, self._runtime.now()))
        self._runtime.unroute(conn)

    def _detach(self, key: int, conn: str) -> None:
        if self._conns.get(key) == conn:
            del self._conns[key]
        if self._running:
            self._runtime.feed(SubscriberDetached(conn, self._runtime.now()))
        self._runtime.unroute(conn)

    # -- effects ------------------------------------------------------------------------------

    def _route(self, effect: Reply | Push) -> None:
        if isinstance(effect, Reply):
            key = (effect.conn, effect.request_id)
            receiving = self._receiving
            if receiving is not None and receiving[0] == key:
                pending: _Pending | None = receiving[1]
                if self._calls.get(key) is pending:
                    del self._calls[key]
            else:
                pending = self._calls.pop(key, None)
            if pending is not None and not pending.done:
                pending.done, pending.message = True, effect.message
                pending.event.set()
            return
        message = effect.message
        method = message.get("method")
        if method == "elicitation/create":
            self._start_elicit(effect.conn, message, effect.related)
        elif method == "notifications/cancelled":
            params = message.get("params") or {}
            scope = self._elicits.pop(params.get("requestId"), None)
            if scope is not None:
                scope.cancel()  # the framework cancels its request: the client is told
        else:
            logger.debug("not sent through the adapter: %s", method)

    def _start_elicit(self, conn: Hashable, message: dict[str, Any], related: object) -> None:
        eid = message.get("id")
        pending = self._calls.get((conn, related))
        if pending is None or self._tg is None:  # pragma: no cover - a park has its call
            logger.warning("an elicitation for a call the gate does not hold: %r", related)
            return
        scope = anyio.CancelScope()
        self._elicits[eid] = scope
        params = message.get("params") or {}
        self._tg.start_soon(self._elicit, conn, eid, pending.site, params, scope)

    async def _elicit(
        self,
        conn: Hashable,
        eid: object,
        site: CallSite,
        params: dict[str, Any],
        scope: anyio.CancelScope,
    ) -> None:
        result: object = None
        error: object = None
        with scope:
            try:
                result = await site.elicit(params["message"], params["requestedSchema"])
            except ElicitError as failed:
                error = {"code": failed.code, "message": failed.message}
            except Exception:
                # A result the framework could not parse, or a request it could not send: the
                # answer is an error, which denies (R-ADAPT-3, R-CLOSE-2).
                logger.warning("elicitation %s failed", eid, exc_info=True)
                error = {"code": -32603, "message": "elicitation failed"}
        if scope.cancel_called or self._elicits.get(eid) is not scope:
            return  # withdrawn: the reducer closed the call already
        del self._elicits[eid]
        runtime = self._runtime
        runtime.feed(ElicitationAnswered(conn, eid, result, runtime.now(), error))

    def _runs_eagerly(self, job: Job) -> bool:
        return type(job) in self._eager_jobs

    async def _perform_job(self, conn: Hashable, job: Job) -> object:
        if isinstance(job, Authorize):
            assert self._authorizer is not None
            arguments = copy.deepcopy(job.arguments)  # R-AUTH-5
            context = Context(conn, "unknown")
            return await call_user(self._authorizer, job.tool, arguments, context)
        if isinstance(job, AuthorizeRead):
            assert self._read_authorizer is not None
            params = copy.deepcopy(job.params)  # R-AUTH-5
            context = Context(conn, "unknown")
            return await call_user(self._read_authorizer, job.method, params, context)
        if isinstance(job, RunTool | RunRead):
            ref = current_worker()
            call = None if ref is None else self._runtime.state.workers.get(ref)
            pending = None if call is None else self._calls.get(call)
            if pending is None:
                raise RuntimeError(f"no call for the worker of {job!r}")
            given = job.arguments if isinstance(job, RunTool) else job.params
            return await pending.site.run(given, job.round)
        raise TypeError(f"an adapter's gate runs no {type(job).__name__}")
