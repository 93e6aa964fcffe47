"""The decision log and the trace recorder: what the shell writes, off the event loop, about each
step the reducer took (spec/audit.md, R-AUD-1 .. R-AUD-4).

:class:`Auditor` is the runtime's tap (:meth:`askgate.transports.runtime.Runtime.tap`): after
every step it gets the state before, the event, the state after and the effects, and hands what
it needs to keep to a :class:`LineSink`, a bounded queue drained by one writer thread that
encodes and writes the lines. The loop only puts a tuple on the queue; it never encodes, writes
or waits.

The decision log (``askgate serve --audit-log FILE``, or ``AuditLog(logger=...)`` for an
embedder's own logging) writes one JSON line per decision on a ``tools/call`` and per end of one,
built from the reducer's records (``call_parked``, ``call_ended``, ``read_denied``, R-LOG-1 ..
R-LOG-4) and the authorizer's verdict, with the shell's own facts: the wall-clock time, the
connection's principal, the keyed digest of the arguments (the arguments themselves only when
asked, with configured fields masked), and the policy entry that decided (a policy file's file
and line, or the Python authorizer's name).

When a line cannot be written (a full disk, a closed file, a queue full because the disk is too
slow), the failure is logged at ERROR on ``askgate.audit``; then ``on_failure="stop"`` (the
default) stops the server as SIGTERM does (R-STOP-1: every open call is answered), and
``on_failure="serve"`` keeps serving and counts the lines lost.
"""

from __future__ import annotations

import collections
import datetime
import errno
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Literal, TextIO

import rapidjson

from askgate.core import RECORDS, Effect, Emit, Event, StartWorker, State
from askgate.core.decisions import Allow, Ask, Deny
from askgate.core.events import TimerFired, WorkerFailed, WorkerFinished
from askgate.core.jobs import Authorize, RunTool
from askgate.core.state import Stage
from askgate.policy import Policy
from askgate.ruleids import STEP_RULES, ended_rules
from askgate.trace import (
    LOG_KINDS,
    UnsafeFileError,
    digest,
    encode,
    header,
    key_lines,
    open_private,
    redact_effect,
    redact_event,
)
from askgate.transports.calllog import conn_text

__all__ = [
    "AUDIT_LOGGER",
    "AuditLog",
    "Auditor",
    "LineSink",
    "OnFailure",
    "Trace",
    "entry_namer",
    "policy_entry",
]

AUDIT_LOGGER = logging.getLogger("askgate.audit")

OnFailure = Literal["stop", "serve"]


def _stop_process() -> None:
    """Stops the server as SIGTERM does (the transports' own stop, R-STOP-1)."""
    os.kill(os.getpid(), signal.SIGTERM)


class LineSink:
    """Lines written off the loop: :meth:`put` appends a maker and its arguments to a bounded
    queue (never blocks, never wakes a thread but once per ``batch`` items); one thread wakes
    every ``interval`` seconds (or when ``batch`` items wait), calls each maker, writes the lines
    they return, and flushes. It gives the GIL up before each line, so that the event loop's
    thread waits for one line's encoding at most, not for the interpreter's switch interval.

    ``target`` is a path (opened for append, readable by its owner only), an open text stream,
    or a :class:`logging.Logger` (each line logged at INFO). ``capacity`` bounds the queue.
    """

    def __init__(
        self,
        target: str | TextIO | logging.Logger,
        *,
        what: str,
        on_failure: OnFailure = "stop",
        capacity: int = 65_536,
        stop: Callable[[], None] = _stop_process,
        interval: float = 0.05,
        batch: int = 512,
    ) -> None:
        if on_failure not in ("stop", "serve"):
            raise ValueError(f"on_failure must be 'stop' or 'serve': {on_failure!r}")
        self.what = what
        self.on_failure = on_failure
        self.lost = 0
        self.written = 0
        self.failure: str | None = None
        self._stop = stop
        self._capacity = capacity
        self._batch = min(batch, capacity)
        self._interval = interval
        self._lock = threading.Lock()
        self._logger = target if isinstance(target, logging.Logger) else None
        self._stream: TextIO | None = None
        self._owned = False
        if isinstance(target, str):
            self._stream = open_private(target)
            self._owned = True
        elif self._logger is None:
            self._stream = target  # type: ignore[assignment]
        self._pending: collections.deque[tuple[Any, ...]] = collections.deque()
        self._wake = threading.Event()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=f"askgate {what}", daemon=True)
        self._thread.start()

    def put(self, *item: Any) -> None:
        """Queues ``(maker, *args)``; a full queue is a failure (the line is lost)."""
        pending = self._pending
        size = len(pending)
        if size >= self._capacity:
            self._failed("the queue is full: the writer cannot keep up")
            return
        pending.append(item)
        if size + 1 == self._batch:
            self._wake.set()

    def _failed(self, why: str) -> None:
        with self._lock:
            self.lost += 1
            first = self.failure is None
            if first:
                self.failure = why
        if first:
            AUDIT_LOGGER.error(
                "the %s cannot be written: %s; %s",
                self.what,
                why,
                "stopping the server" if self.on_failure == "stop" else "serving on, lines lost",
            )
            if self.on_failure == "stop":
                self._stop()

    def _write(self, line: str) -> None:
        if self._logger is not None:
            self._logger.info("%s", line)
        elif self._stream is not None:
            self._stream.write(line + "\n")

    def _run(self) -> None:
        pending = self._pending
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            closing = self._closing
            while pending:
                time.sleep(0)  # lets the event loop's thread have the GIL between lines
                maker, *args = pending.popleft()
                try:
                    line = maker(*args)
                    if line is not None:
                        self._write(line)
                        self.written += 1
                except (OSError, ValueError) as bad:  # a full disk, a closed file
                    self._failed(f"{type(bad).__name__}: {bad}")
                except Exception:  # the maker's bug: said, and the line lost
                    AUDIT_LOGGER.exception("the %s lost a line", self.what)
                    with self._lock:
                        self.lost += 1
            self._flush()
            if closing:
                return

    def _flush(self) -> None:
        if self._stream is not None:
            try:
                self._stream.flush()
            except (OSError, ValueError) as bad:
                self._failed(f"{type(bad).__name__}: {bad}")

    def close(self) -> None:
        """Writes what is queued, then closes the file it opened."""
        if self._thread.is_alive():
            self._closing = True
            self._wake.set()
            self._thread.join()
        if self._owned and self._stream is not None:
            try:
                self._stream.close()
            except OSError as bad:
                self._failed(f"{type(bad).__name__}: {bad}")
        if self.lost:
            AUDIT_LOGGER.error("the %s lost %d line(s)", self.what, self.lost)


def _mask(value: object, fields: frozenset[str]) -> object:
    if isinstance(value, dict):
        return {k: "***" if k in fields else _mask(v, fields) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, fields) for v in value]
    return value


def _now_text() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


class AuditLog:
    """What the decision log writes, and where (see the module's docstring).

    ``arguments``: write each call's arguments (``mask`` names fields, at any depth, written
    as ``"***"``); by default only their keyed digest is.
    """

    def __init__(
        self,
        target: str | TextIO | logging.Logger,
        *,
        arguments: bool = False,
        mask: Sequence[str] = (),
        on_failure: OnFailure = "stop",
        capacity: int = 65_536,
        stop: Callable[[], None] = _stop_process,
    ) -> None:
        self.arguments = arguments
        self.mask = frozenset(mask)
        self.sink = LineSink(
            target, what="decision log", on_failure=on_failure, capacity=capacity, stop=stop
        )


class Trace:
    """Where a trace goes, whether its arguments are redacted (the default), and where the
    run's keys go: nowhere by default (the trace names them by key id, R-AUD-10), or ``keys``,
    a key file (a path, opened as the trace is, R-AUD-9; or an open text stream) that
    ``askgate replay --keys`` reads to replay the steps that need them (R-AUD-11)."""

    def __init__(
        self,
        target: str | TextIO,
        *,
        redact: bool = True,
        keys: str | TextIO | None = None,
        on_failure: OnFailure = "stop",
        capacity: int = 65_536,
        stop: Callable[[], None] = _stop_process,
    ) -> None:
        self.redact = redact
        self.keys: TextIO | None = open_private(keys) if isinstance(keys, str) else keys
        self._own_keys = isinstance(keys, str)
        try:
            self.sink = LineSink(
                target, what="trace", on_failure=on_failure, capacity=capacity, stop=stop
            )
        except BaseException:
            self.close_keys()
            raise
        if self._own_keys and self.sink._owned and self._same_file():
            self.sink.close()
            self.close_keys()
            why = "it is the trace itself (refused: the keys go apart from it, R-AUD-10)"
            raise UnsafeFileError(errno.EINVAL, why, keys)

    def _same_file(self) -> bool:
        """Whether the key file and the trace are one file (two names, or one given twice)."""
        keys, trace = self.keys, self.sink._stream
        assert keys is not None
        assert trace is not None
        return os.path.samestat(os.fstat(keys.fileno()), os.fstat(trace.fileno()))

    def write_keys(self, state: State) -> None:
        """Writes the keys of a run that starts from ``state`` to the key file, if there is
        one, at once (before the first step)."""
        if self.keys is None:
            return
        self.keys.write("".join(line + "\n" for line in key_lines(state)))
        self.keys.flush()

    def close_keys(self) -> None:
        if self._own_keys and self.keys is not None:
            self.keys.close()
            self.keys = None


_CALL_JOBS = (Authorize, RunTool)
_WORKER_ENDS = (WorkerFinished, WorkerFailed, TimerFired)
_RECORDS = frozenset(RECORDS)

Principal = Callable[[Hashable], "str | None"]
Entry = Callable[[str], "str | None"]


def _line(data: dict[str, Any]) -> str:
    return str(rapidjson.dumps(data, ensure_ascii=False, default=encode))


def _trace_step(n: int, key: bytes | None, tools: Any, event: Event, effects: list[Effect]) -> str:
    if key is not None:
        event = redact_event(key, tools, event)  # type: ignore[assignment]
        effects = [redact_effect(key, tools, e) for e in effects]  # type: ignore[misc]
    data = {"n": n, "event": encode(event), "effects": [encode(e) for e in effects]}
    return str(rapidjson.dumps(data, ensure_ascii=False))


class Auditor:
    """The runtime's tap: records each step in the trace and the decision log it was given.

    ``key`` keys the arguments' digests (R-AUD-2; 32 fresh random bytes by default, so that a
    digest names arguments only to whoever holds the key). ``entry(tool)`` names the policy
    entry that decides ``tool``; ``principal(conn)`` is who a connection is.
    """

    def __init__(
        self,
        *,
        trace: Trace | None = None,
        log: AuditLog | None = None,
        key: bytes | None = None,
        entry: Entry | None = None,
    ) -> None:
        self.trace = trace
        self.log = log
        self.key = key if key is not None else os.urandom(32)
        self.entry = entry
        self.principal: Principal = lambda _conn: None
        self._steps = 0
        # Open tools/calls this log has seen arguments for: (conn, request id) -> arguments.
        self._arguments: dict[tuple[Hashable, Hashable], object] = {}

    def start(self, state: State, principal: Principal) -> None:
        """Writes the trace's header for a run that starts from ``state``; the arguments'
        digests are keyed with the state's key, when it has one, so that they are the ones its
        prompts show (R-DLV-5)."""
        self.principal = principal
        if state.digest_key is not None:
            self.key = state.digest_key
        if self.trace is not None:
            self.trace.write_keys(state)
            head = header(state, redacted=self.trace.redact)
            self.trace.sink.put(json.dumps, head)

    def close(self) -> None:
        for part in (self.trace, self.log):
            if part is not None:
                part.sink.close()
        if self.trace is not None:
            self.trace.close_keys()

    def __call__(self, before: State, event: Event, after: State, effects: list[Effect]) -> None:
        """One step: queued for the trace; its decisions and records for the decision log."""
        self._steps += 1
        if self.trace is not None:
            key = self.key if self.trace.redact else None
            self.trace.sink.put(_trace_step, self._steps, key, before.tools, event, effects)
        if self.log is not None:
            self._decisions(before, event, after, effects)

    # -- the decision log ---------------------------------------------------------------------

    def _decisions(self, before: State, event: Event, after: State, effects: list[Effect]) -> None:
        log = self.log
        assert log is not None
        now = getattr(event, "now", None)
        for effect in effects:
            if type(effect) is StartWorker and type(effect.job) in _CALL_JOBS:
                call = after.workers.get(effect.ref)
                if call is not None and call not in self._arguments:
                    self._arguments[call] = effect.job.arguments  # type: ignore[union-attr]
        if type(event) in _WORKER_ENDS:
            self._verdict(before, event, now)
        for effect in effects:
            if type(effect) is Emit and effect.name in _RECORDS:
                fields = dict(effect.fields)
                key = (fields.get("conn"), fields.get("request_id"))
                arguments = (
                    self._arguments.pop(key, None)
                    if effect.name == "call_ended"
                    else self._arguments.get(key)
                )
                who = self.principal(key[0])
                evictor = fields.get("evicted_by")
                by = None if evictor is None else self.principal(evictor)
                log.sink.put(self._record_line, effect.name, fields, arguments, now, who, by)

    def _verdict(self, before: State, event: Any, now: int | None) -> None:
        """The authorizer's verdict on a tools/call, as the reducer took it."""
        ref = event.ref if not isinstance(event, TimerFired) else event.key[1]
        key = before.workers.get(ref) if isinstance(ref, int) else None
        if key is None:
            return
        call = before.calls.get(key)
        if call is None or not call.is_tool or call.stage is not Stage.AUTHORIZING:
            return
        value = event.value if isinstance(event, WorkerFinished) else None
        verdict = {Allow: "allow", Ask: "ask", Deny: "deny"}.get(type(value), "failed")
        assert self.log is not None
        self.log.sink.put(
            self._decision_line,
            key,
            call.name,
            verdict,
            self._arguments.get(key),
            now,
            self.principal(key[0]),
        )

    def _common(
        self, conn: Hashable, principal: str | None, tool: object, arguments: object
    ) -> dict[str, Any]:
        log = self.log
        assert log is not None
        data: dict[str, Any] = {
            "time": _now_text(),
            "conn": conn_text(conn),
            "principal": principal,
            "tool": tool,
            "arguments_digest": None if arguments is None else digest(self.key, arguments),
        }
        if log.arguments and arguments is not None:
            data["arguments"] = _mask(arguments, log.mask)
        if isinstance(tool, str) and self.entry is not None:
            data["entry"] = self.entry(tool)
        return data

    def _decision_line(
        self,
        key: tuple[Hashable, Hashable],
        tool: str,
        verdict: str,
        arguments: object,
        now: int | None,
        principal: str | None,
    ) -> str:
        data: dict[str, Any] = {"kind": "decided", "request_id": key[1]}
        data.update(self._common(key[0], principal, tool, arguments))
        data["decision"] = verdict
        data["now_ms"] = now
        rules = {
            "allow": STEP_RULES["authorized: allow"],
            "ask": STEP_RULES["parked"],
            "deny": STEP_RULES["deny"],
        }.get(verdict, ("R-AUTH-4",))
        data["rules"] = list(rules)
        return _line(data)

    def _record_line(
        self,
        name: str,
        fields: dict[str, Any],
        arguments: object,
        now: int | None,
        principal: str | None,
        evictor_principal: str | None,
    ) -> str:
        conn = fields.get("conn")
        kind = LOG_KINDS[name]
        tool = fields.get("tool") if name != "read_denied" else fields.get("method")
        data: dict[str, Any] = {"kind": kind, "request_id": fields.get("request_id")}
        data.update(self._common(conn, principal, tool, arguments))
        data["now_ms"] = now
        if name == "call_parked":
            data["decision"] = "ask"
            data["approval_id"] = fields.get("elicitation_id")
            data["rules"] = list(STEP_RULES["parked"])
        elif name == "read_denied":
            data["decision"] = "deny"
            data["detail"] = fields.get("detail")
            data["rules"] = list(STEP_RULES["read denied"])
        else:
            data["decision"] = fields.get("decision")
            data["approval_id"] = fields.get("elicitation_id")
            data["approved"] = fields.get("approved")
            if fields.get("approved") is True:  # only the owner's answer approves (R-CLOSE-5)
                data["approved_by"] = {"conn": conn_text(conn), "principal": principal}
            data["outcome"] = fields.get("outcome")
            data["detail"] = fields.get("detail")
            evictor = fields.get("evicted_by")
            if evictor is not None:
                data["evicted_by"] = {
                    "conn": conn_text(evictor),
                    "principal": evictor_principal,
                }
            data["started_ms"] = fields.get("started_ms")
            data["duration_ms"] = fields.get("duration_ms")
            data["rules"] = list(ended_rules(fields))
        return _line(data)


def policy_entry(policy: Any, tool: str) -> str:
    """The entry of a policy file that decides ``tool``: ``file:line``, or ``file: no entry``
    (no entry matches: denied, R-POL-1)."""
    for rule in policy.tools:
        if rule.fits(tool):
            return f"{policy.source}:{rule.line}"
    return f"{policy.source}: no entry"


def entry_namer(authorizer: object) -> Entry | None:
    """How the decision log names what decided a tool: the entry of the policy file whose
    authorizer this is, or the Python authorizer's qualified name."""
    if authorizer is None:
        return None
    owner = getattr(authorizer, "__self__", None)
    if isinstance(owner, Policy):
        policy = owner
        return lambda tool: policy_entry(policy, tool)
    module = getattr(authorizer, "__module__", None) or "?"
    name = getattr(authorizer, "__qualname__", None) or type(authorizer).__qualname__
    named = f"authorizer {module}.{name}"
    return lambda _tool: named
