"""One blocking interface over both drivers of the reducer, for scenarios shared between them.

A scenario is a plain function of a :class:`Gate`: it connects peers, sends them JSON-RPC
messages and reads what the server wrote to each, and moves the clock. :func:`async_gate` runs
the anyio shell (``Server.running``) on trio in a thread with a ``MockClock``, driven through a
blocking portal; :func:`sync_gate` runs the synchronous driver (``Server.running_in_threads``)
with a :class:`~askgate.transports.sync.ManualClock`. Every read waits on a queue under a
deadline; time moves only when a scenario moves it.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

import trio.testing
from anyio.from_thread import BlockingPortal, start_blocking_portal

from askgate.core import Event, ServerStopping, SubscriberAttached
from askgate.core.events import MessageReceived
from askgate.server import Server
from askgate.transports.runtime import Runtime
from askgate.transports.sync import ManualClock, SyncRuntime

DEADLINE = 10.0
ELICIT: dict[str, Any] = {"elicitation": {}}


class Peer:
    """One connection: what it sends goes to the reducer, what the server writes to it queues."""

    def __init__(self, gate: Gate, conn: Hashable) -> None:
        self.gate = gate
        self.conn = conn
        self.inbox: queue.Queue[dict[str, Any]] = queue.Queue()

    def write(self, data: bytes) -> None:
        self.inbox.put(json.loads(data))

    def send(self, message: dict[str, Any]) -> None:
        self.gate.message(self.conn, json.dumps(message).encode())

    def request(self, request_id: object, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def call(self, request_id: object, tool: str, **arguments: Any) -> None:
        self.request(request_id, "tools/call", {"name": tool, "arguments": arguments})

    def answer(self, request_id: object, result: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def recv(self) -> dict[str, Any]:
        """The next message the server wrote to this connection (fails after DEADLINE)."""
        try:
            return self.inbox.get(timeout=DEADLINE)
        except queue.Empty:
            raise AssertionError(f"{self.conn!r} got nothing within {DEADLINE} s") from None

    def reply(self, request_id: object) -> dict[str, Any]:
        """The next message, checked to be the response to ``request_id``."""
        message = self.recv()
        assert "method" not in message, message
        assert message.get("id") == request_id, message
        return message

    def asked(self) -> dict[str, Any]:
        """The next message, checked to be an ``elicitation/create``."""
        message = self.recv()
        assert message.get("method") == "elicitation/create", message
        return message

    def empty(self) -> bool:
        return self.inbox.empty()


class Gate:
    """A running server on one driver."""

    name = ""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def connect(self, conn: Hashable, capabilities: dict[str, Any] | None = None) -> Peer:
        """A peer that subscribed and initialized (with the elicitation capability unless
        ``capabilities`` says otherwise)."""
        peer = Peer(self, conn)
        self.on_loop(lambda: self.runtime.attach(conn, peer.write))
        self.feed(lambda now: SubscriberAttached(conn, now))
        peer.request(
            0,
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": ELICIT if capabilities is None else capabilities,
                "clientInfo": {"name": "scenario", "version": "0"},
            },
        )
        peer.reply(0)
        peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return peer

    def message(self, conn: Hashable, data: bytes) -> None:
        self.feed(lambda now: MessageReceived(conn, data, now))

    def stop(self) -> None:
        """The server is told to stop (R-STOP-1)."""
        self.feed(ServerStopping)

    def feed(self, event: Callable[[int], Event]) -> None:
        """Feeds ``event(now)``, ``now`` read from the driver's clock where the driver runs."""
        runtime = self.runtime
        self.on_loop(lambda: runtime.feed(event(runtime.now())))

    def on_loop(self, action: Callable[[], None]) -> None:
        raise NotImplementedError

    def advance(self, ms: int) -> None:
        """Moves the driver's clock ``ms`` forward; timers due fire."""
        raise NotImplementedError


class AsyncGate(Gate):
    name = "async"

    def __init__(self, runtime: Runtime, portal: BlockingPortal, clock: Any) -> None:
        super().__init__(runtime)
        self.portal = portal
        self.clock = clock

    def on_loop(self, action: Callable[[], None]) -> None:
        self.portal.call(action)

    def advance(self, ms: int) -> None:
        self.portal.call(self.clock.jump, ms / 1000)


class SyncGate(Gate):
    name = "sync"

    def __init__(self, runtime: SyncRuntime, clock: ManualClock) -> None:
        super().__init__(runtime)
        self.clock = clock

    def on_loop(self, action: Callable[[], None]) -> None:
        action()  # the driver takes events from any thread

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)


@contextmanager
def async_gate(server: Server) -> Iterator[Gate]:
    """``server`` on the anyio shell (trio, virtual time), driven from this thread."""
    clock = trio.testing.MockClock()
    with (
        start_blocking_portal("trio", backend_options={"clock": clock}) as portal,
        portal.wrap_async_context_manager(server.running("stdio")) as runtime,
    ):
        yield AsyncGate(runtime, portal, clock)


@contextmanager
def sync_gate(server: Server) -> Iterator[Gate]:
    """``server`` on the synchronous driver (virtual time)."""
    clock = ManualClock()
    with server.running_in_threads("stdio", clock=clock, check_invariants=True) as runtime:
        yield SyncGate(runtime, clock)


GATES = {"async": async_gate, "sync": sync_gate}
