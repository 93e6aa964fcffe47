"""``askgate core``: the reducer as a sidecar that speaks JSON lines (spec/embedding.md).

A host in any language writes events as JSON lines (:mod:`askgate.jsonwire` envelopes) and
reads one reply line per input line: the effects of the step, or an error that changed nothing.
:class:`Session` is one conversation (one reducer state and the states kept for stepping from
again); :func:`serve_stdio` and :func:`serve_socket` carry sessions over standard input and
output or over a unix socket, one session per connection. :class:`CommandReducer` is the other
side, for Python: it drives such a process as a reducer object (``initial_state``, ``step``,
``observe``, ``check_invariants``, ``live_timers``), which is how
``examples/check_your_reducer.py --command`` checks a process with askgate's models.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socketserver
import subprocess
import sys
import threading
from collections.abc import Callable, Hashable
from typing import IO, Any, Final, cast

import attrs

from askgate import core, jsonwire
from askgate.jsonwire import VERSION, WireError

KEEP: Final = 64
"""How many states a session keeps to be stepped from again by ``"from"``, unless its init
says otherwise (R-EMB-12)."""

MAX_KEEP: Final = 10_000_000
"""The most states an init may ask a session to keep (R-EMB-12)."""

MAX_LINE: Final = 8 * 1024 * 1024
"""The longest input line read (bytes, newline included); a longer one is refused (R-EMB-13)."""

REQUESTS: Final = ("init", "observe", "check", "timers")
"""The kinds of the session's own requests; every other kind is an event (R-EMB-10)."""


class CoreReducer:
    """askgate's own reducer, as the sidecar serves it by default: a fresh random ``id_key``
    for every initial state unless the init gives one (R-ID-1)."""

    def initial_state(
        self,
        options: core.Options,
        tools: tuple[tuple[str, bool], ...],
        id_key: bytes | None = None,
    ) -> Any:
        infos = tuple(core.ToolInfo(name, sensitive, False) for name, sensitive in tools)
        key = os.urandom(32) if id_key is None else id_key
        return core.initial_state(options, id_key=key, tools=infos)

    def step(self, state: Any, event: Any) -> tuple[Any, list[Any]]:
        return core.step(state, event)


def _observe(state: Any) -> Any:
    """The model-based suite's observation of an askgate state (``askgate.models.machine``;
    it needs Hypothesis, as checking does)."""
    from askgate.models.machine import ReducerMachine  # noqa: PLC0415

    return ReducerMachine.observe_fn(cast(Any, None), state)


class Session:
    """One conversation with the reducer: takes one input line, returns its reply line.

    ``reducer`` has ``initial_state(options, tools)`` and ``step(state, event)``, and may have
    ``observe``, ``check_invariants`` and ``live_timers`` (askgate's own are used otherwise).
    ``init`` is the initial message's content used until an ``init`` line comes (R-EMB-11).
    """

    def __init__(self, reducer: Any = None, init: dict[str, Any] | None = None) -> None:
        self.reducer = CoreReducer() if reducer is None else reducer
        self.lines = 0
        self.states: dict[int, Any] = {}
        self.keep = KEEP
        self.current = -1
        self.next_handle = 0
        self._init(init or {})

    # -- the replies ---------------------------------------------------------------------------

    def handle(self, line: bytes | str) -> str | None:
        """The reply to one input line (``None`` for a blank line, which is skipped). Never
        raises: whatever is wrong, the reply is an ``error`` line and nothing changed
        (R-EMB-13)."""
        if not line.strip():
            return None
        self.lines += 1
        try:
            return jsonwire.dumps(self._reply(jsonwire.loads(line)))
        except WireError as bad:
            return self._error(str(bad))
        except Exception as raised:  # the reducer or a hook raised: reported, state unchanged
            return self._error(f"the reducer raised {type(raised).__name__}: {raised}"[:2000])

    def _error(self, message: str) -> str:
        return jsonwire.dumps({"v": VERSION, "kind": "error", "error": message, "line": self.lines})

    def too_long(self) -> str:
        """The reply to a line longer than :data:`MAX_LINE`, which was skipped unread."""
        self.lines += 1
        return self._error(f"the line is longer than {MAX_LINE} bytes and was skipped (R-EMB-13)")

    def _reply(self, request: object) -> dict[str, Any]:
        if type(request) is not dict:
            raise WireError("a line is one JSON object (R-EMB-10)")
        message = cast(dict[str, Any], request)
        kind = message.get("kind")
        if kind == "init":
            _version(message)
            return {"v": VERSION, "kind": "ready", "state": self._init(message)}
        if kind in REQUESTS:
            _version(message)
            state = self._state(message, "state")
            return self._inspect(cast(str, kind), state)
        event = jsonwire.decode(message)
        if type(event) not in jsonwire.EVENTS:
            raise WireError(f"kind: {kind!r} is an effect; a host sends events (R-EMB-12)")
        before = self._state(message, "from")
        after, effects = self.reducer.step(before, event)
        encoded = [jsonwire.encode(e) for e in effects]  # before the state is kept (R-EMB-13)
        reply = {"v": VERSION, "kind": "effects", "state": -1, "effects": encoded}
        if message.get("inspect") is True:  # all three checking requests at once (R-EMB-14)
            reply["inspection"] = {
                k: self._inspect(k, after) for k in ("observe", "check", "timers")
            }
        reply["state"] = self._keep(after)
        return reply

    def _inspect(self, kind: str, state: Any) -> dict[str, Any]:
        """The checking requests (R-EMB-14)."""
        if kind == "observe":
            observe: Callable[[Any], Any] = getattr(self.reducer, "observe", None) or _observe
            observation = observe(state)
            fields = {
                f.name: jsonwire.encode_value(getattr(observation, f.name), f"fields.{f.name}")
                for f in dataclasses.fields(observation)
            }
            return {"v": VERSION, "kind": "observation", "fields": fields}
        if kind == "check":
            check = getattr(self.reducer, "check_invariants", None) or core.check_invariants
            try:
                check(state)
            except AssertionError as broken:  # InvariantError is one
                return {"v": VERSION, "kind": "checked", "ok": False, "problem": str(broken)}
            return {"v": VERSION, "kind": "checked", "ok": True, "problem": None}
        timers = getattr(self.reducer, "live_timers", None) or core.live_timers
        keys = sorted(
            (jsonwire.encode_value(k, "timers") for k in timers(state)), key=jsonwire.dumps
        )
        return {"v": VERSION, "kind": "timers", "timers": keys}

    # -- states --------------------------------------------------------------------------------

    def _init(self, message: dict[str, Any]) -> int:
        unknown = sorted(set(message) - {"v", "kind", "options", "tools", "id_key", "keep"})
        if unknown:
            raise WireError(f"init: unknown member(s) {unknown} (R-EMB-11)")
        raw = message.get("options", {})
        if type(raw) is not dict:
            raise WireError("init.options: must be a JSON object of option names (R-EMB-11)")
        names = attrs.fields_dict(core.Options)
        bad = sorted(set(raw) - set(names))
        if bad:
            raise WireError(f"init.options: no such option(s) {bad} (R-EMB-11)")
        try:
            options = core.Options(**raw).validated()
        except core.OptionError as refused:
            raise WireError(f"init.options: {refused}") from None
        tools = message.get("tools", [])
        if type(tools) is not list or not all(
            type(t) is list and len(t) == 2 and type(t[0]) is str and type(t[1]) is bool
            for t in tools
        ):
            raise WireError("init.tools: must be a list of [name, sensitive] pairs (R-EMB-11)")
        keep = message.get("keep", KEEP)
        if type(keep) is not int or not 1 <= keep <= MAX_KEEP:
            raise WireError(f"init.keep: must be an integer from 1 to {MAX_KEEP} (R-EMB-12)")
        extra = {}
        if "id_key" in message:
            id_key = jsonwire.decode_value(message["id_key"], "init.id_key")
            if type(id_key) is not bytes:
                raise WireError("init.id_key: must be bytes (R-EMB-11)")
            extra["id_key"] = id_key
        try:
            state = self.reducer.initial_state(options, tuple((n, s) for n, s in tools), **extra)
        except core.OptionError as refused:
            raise WireError(f"init: {refused}") from None
        self.states.clear()
        self.keep = keep
        return self._keep(state)

    def _keep(self, state: Any) -> int:
        handle = self.next_handle
        self.next_handle += 1
        self.states[handle] = state
        self.current = handle
        while len(self.states) > self.keep:
            del self.states[next(iter(self.states))]
        return handle

    def _state(self, message: dict[str, Any], member: str) -> Any:
        handle = message.get(member, self.current)
        if type(handle) is not int or handle not in self.states:
            kept = f"{min(self.states)}..{max(self.states)}" if self.states else "none"
            raise WireError(f"{member}: no state {handle!r} is kept (kept: {kept}) (R-EMB-12)")
        return self.states[handle]


def _version(message: dict[str, Any]) -> None:
    version = message.get("v")
    if type(version) is not int or version != VERSION:
        raise WireError(f"v: {version!r} is not a version this side speaks: [{VERSION}] (R-EMB-1)")


# -- transports ----------------------------------------------------------------------------------


def serve_lines(session: Session, read: IO[bytes], write: IO[bytes]) -> None:
    """Answers every line of ``read`` on ``write``, in order, until end of input."""
    while True:
        line = read.readline(MAX_LINE)
        if not line:
            return
        if len(line) >= MAX_LINE and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):  # skip the rest of it, unread
                line = read.readline(MAX_LINE)
            reply: str | None = session.too_long()
        else:
            reply = session.handle(line)
        if reply is not None:
            write.write(reply.encode("ascii") + b"\n")
            write.flush()


def serve_stdio(reducer: Any = None, init: dict[str, Any] | None = None) -> None:
    """One session over standard input and output."""
    serve_lines(Session(reducer, init), sys.stdin.buffer, sys.stdout.buffer)


def serve_socket(
    path: str,
    reducer: Any = None,
    init: dict[str, Any] | None = None,
    ready: Callable[[], None] | None = None,
) -> None:
    """Listens on the unix socket ``path``, one session per connection, each in a thread, until
    interrupted; removes the socket file when it stops. ``ready`` is called once listening."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            with contextlib.suppress(OSError):
                serve_lines(
                    Session(reducer, init), cast(IO[bytes], self.rfile), cast(IO[bytes], self.wfile)
                )

    class Server(socketserver.ThreadingUnixStreamServer):
        daemon_threads = True

    with Server(path, Handler) as server:
        try:
            if ready is not None:
                ready()
            server.serve_forever()
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)


# -- the host side, in Python --------------------------------------------------------------------


@attrs.frozen
class Handle:
    """A state kept by the sidecar process, by its number."""

    number: int


class SidecarError(Exception):
    """The sidecar answered a request with an error line (or not at all)."""


class CommandReducer:
    """A sidecar process (``askgate core``, or any program that speaks spec/embedding.md) as a
    reducer object: states are :class:`Handle` values, kept in the process. With ``inspect``
    every step asks for the after-state's observation, invariants and timers in its reply
    (one round trip a step instead of four)."""

    def __init__(self, command: list[str], *, inspect: bool = True) -> None:
        self.command = command
        self.inspect = inspect  # ask for the checking replies with every step
        self._inspections: dict[int, dict[str, Any]] = {}
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        self._lock = threading.Lock()

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Writes one line and reads its reply; raises :class:`SidecarError` on an error reply."""
        stdin = cast(IO[bytes], self.process.stdin)
        stdout = cast(IO[bytes], self.process.stdout)
        with self._lock:
            stdin.write(jsonwire.dumps(message).encode("ascii") + b"\n")
            line = stdout.readline()
        if not line:
            raise SidecarError(f"{self.command[0]} ended (exit status {self.process.poll()})")
        reply = jsonwire.loads(line)
        if type(reply) is not dict or reply.get("kind") == "error":
            raise SidecarError(f"{self.command[0]} answered {line.decode(errors='replace')}")
        return cast(dict[str, Any], reply)

    def initial_state(
        self,
        options: core.Options,
        tools: tuple[tuple[str, bool], ...],
        id_key: bytes | None = None,
        keep: int | None = None,
    ) -> Handle:
        init: dict[str, Any] = {
            "v": VERSION,
            "kind": "init",
            "options": attrs.asdict(options),
            "tools": [[name, sensitive] for name, sensitive in tools],
        }
        if id_key is not None:
            init["id_key"] = jsonwire.encode_value(id_key)
        if keep is not None:
            init["keep"] = keep
        self._inspections.clear()
        return Handle(self.request(init)["state"])

    def step(self, state: Handle, event: Any) -> tuple[Handle, list[Any]]:
        message = jsonwire.encode(event)
        message["from"] = state.number
        if self.inspect:
            message["inspect"] = True
        reply = self.request(message)
        handle = reply["state"]
        if "inspection" in reply:
            self._inspections[handle] = reply["inspection"]
            while len(self._inspections) > KEEP:
                del self._inspections[next(iter(self._inspections))]
        return Handle(handle), [jsonwire.decode(e) for e in reply["effects"]]

    def _inspected(self, kind: str, state: Handle) -> dict[str, Any]:
        """The reply to the checking request ``kind`` about ``state``: the one that came with
        its step, or asked now."""
        kept = self._inspections.get(state.number)
        if kept is not None:
            return cast(dict[str, Any], kept[kind])
        return self.request({"v": VERSION, "kind": kind, "state": state.number})

    def observe(self, state: Handle) -> Any:
        from askgate.models.reference import Observation  # noqa: PLC0415

        reply = self._inspected("observe", state)
        fields = {k: jsonwire.decode_value(v, k) for k, v in reply["fields"].items()}
        return Observation(**fields)

    def check_invariants(self, state: Handle) -> None:
        reply = self._inspected("check", state)
        if not reply["ok"]:
            raise AssertionError(f"the sidecar's invariants: {reply['problem']}")

    def live_timers(self, state: Handle) -> set[Hashable]:
        reply = self._inspected("timers", state)
        return {jsonwire.decode_value(k, "timers") for k in reply["timers"]}

    def close(self) -> int:
        """Ends the process (end of its input) and returns its exit status."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        status = self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        return status


class Lockstep:
    """askgate's ``step`` in this process and a sidecar process's, in step: ``step`` returns
    askgate's result after checking that the process gave the same effects (``related`` too)
    from the same state (R-EMB-15). For the explorer (``askgate.models.explore``), which steps
    from any state it reached: the process keeps every state (``keep``) and starts from the
    explorer's own options, tools and ``id_key``, so its ids must be minted as R-ID-1 says."""

    def __init__(self, command: CommandReducer, keep: int = MAX_KEEP) -> None:
        self.command = command
        self.keep = keep
        self.handles: dict[int, tuple[Any, Handle]] = {}  # id(state) -> (state, its handle)
        self.steps = 0

    def _handle(self, state: Any) -> Handle:
        kept = self.handles.get(id(state))
        if kept is not None and kept[0] is state:
            return kept[1]
        if state.next_seq or len(state.conns):
            raise AssertionError("lockstep: a state that neither started nor was stepped here")
        tools = tuple((t.name, t.sensitive) for t in state.tools.values())
        handle = self.command.initial_state(state.options, tools, state.id_key, self.keep)
        self.handles[id(state)] = (state, handle)
        return handle

    def step(self, state: Any, event: Any) -> tuple[Any, list[Any]]:
        before = self._handle(state)
        after, effects = core.step(state, event)
        theirs, their_effects = self.command.step(before, event)
        related = [getattr(e, "related", None) for e in effects]
        their_related = [getattr(e, "related", None) for e in their_effects]
        if their_effects != effects or their_related != related:
            raise AssertionError(
                f"{self.command.command[0]} answered {event!r} with {their_effects!r}, "
                f"askgate with {effects!r}"
            )
        self.handles[id(after)] = (after, theirs)
        self.steps += 1
        return after, effects
