"""What open ``subscriptions/listen`` streams cost (issue #28 item 3; R-MRTR-25 .. R-MRTR-27).

    python bench/listen_bench.py [--sizes 10,1000,3000] [--flood 3000]

Three figures, each beside 10, 1 000 and 3 000 open listens, each listen a stateless request
of a principal of its own (so no per-owner bound binds; the bounds are raised to 100 000 where
the code has them):

- *reducer*: the time of the steps one more listen makes (``SubscriberAttached`` and its
  ``MessageReceived``, as the HTTP shell feeds them), and of a modern ``ping`` on a connection
  of its own (attach, ping, detach): the best of 5 rounds of 200, from the same state;
- *http*: in this process, through ``HttpApp`` driven as ASGI (no socket), the time from one
  more listen's POST to its acknowledgement being sent, the listens before it held open; the
  median of 30;
- *flood* (run first): one principal (loopback, ``local``) asks for ``--flood`` listens with the
  default options: how many open, how many are refused, the growth of the process's resident
  set (``VmRSS``, Linux);
- *state*: the memory (``tracemalloc``) the reducer's state holds for the most listens.

Runs against whatever ``askgate`` is first on ``PYTHONPATH`` (``PYTHONPATH=$PWD`` in a tree): run
it from two trees to compare.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

import anyio
import attrs

from askgate import Allow
from askgate.core import (
    MessageReceived,
    Options,
    State,
    SubscriberAttached,
    SubscriberDetached,
    initial_state,
    step,
)
from askgate.core import http as rules
from askgate.server import Server
from askgate.transports.http import HttpApp

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
}
HEADERS = [
    (b"host", b"127.0.0.1:8000"),
    (b"content-type", b"application/json"),
    (b"accept", b"application/json, text/event-stream"),
    (b"mcp-protocol-version", b"2026-07-28"),
    (b"mcp-method", b"subscriptions/listen"),
]
SCOPE = {
    "type": "http",
    "method": "POST",
    "path": "/mcp",
    "headers": HEADERS,
    "query_string": b"",
    "client": ("127.0.0.1", 40000),
    "server": ("127.0.0.1", 8000),
    "http_version": "1.1",
    "scheme": "http",
}
UNBOUNDED = {"max_listens_per_owner": 100_000, "max_listens_total": 100_000}


def raised() -> dict[str, Any]:
    """The listen bounds raised out of the way, where this tree has them."""
    names = {field.name for field in attrs.fields(Options)}
    return {name: value for name, value in UNBOUNDED.items() if name in names}


def body(method: str, rid: object, params: dict[str, Any]) -> bytes:
    message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": {**params, "_meta": META}}
    return json.dumps(message).encode()


LISTEN = body("subscriptions/listen", 1, {"notifications": {"toolsListChanged": True}})
PING = body("ping", 1, {})


def stateless(state: State, conn: Hashable, principal: str, message: bytes) -> State:
    state, _ = step(state, SubscriberAttached(conn, 0, principal))
    state, _ = step(state, MessageReceived(conn, message, 0, mode="reply", principal=principal))
    return state


def best(rounds: int, reps: int, run: Callable[[int], object]) -> float:
    """The best mean time of ``run`` over ``rounds`` rounds of ``reps`` calls, in microseconds."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for i in range(reps):
            run(i)
        times.append((time.perf_counter() - started) / reps)
    return min(times) * 1e6


def reducer(sizes: list[int]) -> None:
    options = Options(**raised())
    for n in sizes:
        state = initial_state(options, id_key=b"k" * 32)
        for i in range(n):
            state = stateless(state, ("http-stateless", i), f"p{i}", LISTEN)
        assert len(state.listens) == n
        base = state
        if n == sizes[-1]:  # the memory the state holds for them, once
            tracemalloc.start()
            again = initial_state(options, id_key=b"k" * 32)
            for i in range(n):
                again = stateless(again, ("http-stateless", i), f"p{i}", LISTEN)
            gc.collect()
            held = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            each = f"{held / 1024:.0f} KiB, {held / n:.0f} B each"
            print(f"reducer  {n} listens: the state holds {each}")

        def listen(i: int, base: State = base) -> object:
            return stateless(base, ("http-stateless", "new", i), f"q{i}", LISTEN)

        def ping(i: int, base: State = base) -> object:
            conn = ("http-stateless", "ping", i)
            return step(stateless(base, conn, "x", PING), SubscriberDetached(conn, 0))

        print(
            f"reducer  listens={n:5d}  one more listen {best(5, 200, listen):7.1f} us"
            f"   a modern ping {best(5, 200, ping):7.1f} us"
        )


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    return 0


async def allow(*_: Any) -> Allow:
    return Allow()


async def post(app: HttpApp, rid: int, answered: Callable[[bytes], None], gone: Any) -> None:
    """One listen's POST through ``app``; ``answered`` gets its first body bytes; the client
    leaves once ``gone`` is set."""
    sent = False
    message = body("subscriptions/listen", rid, {"notifications": {"toolsListChanged": True}})

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": message, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    first = True

    async def send(event: dict[str, Any]) -> None:
        nonlocal first
        if event["type"] == "http.response.body" and event.get("body") and first:
            first = False
            answered(event["body"])

    call: Callable[..., Awaitable[None]] = app
    await call(dict(SCOPE), receive, send)


def guarded(**options: Any) -> Server:
    """A server serving HTTP (both authorizers configured, allowing all), with ``options``."""
    return Server(
        "bench", authorizer=allow, authorizer_source="configured", read_authorizer=allow, **options
    )


async def http(sizes: list[int]) -> None:
    server = guarded(**raised())
    app = HttpApp(server, options=rules.HttpOptions(port=8000))
    async with app.running(), anyio.create_task_group() as tg:
        gone = anyio.Event()
        held = 0

        async def opened(rid: int, leave: Any) -> None:
            done = anyio.Event()
            bodies: list[bytes] = []

            def answered(data: bytes) -> None:
                bodies.append(data)
                done.set()

            tg.start_soon(post, app, rid, answered, leave)
            with anyio.fail_after(10):
                await done.wait()
            assert b"acknowledged" in bodies[0], bodies[0]

        for n in sizes:
            while held < n:
                await opened(held, gone)
                held += 1
            times = []
            for k in range(30):
                leave = anyio.Event()
                started = time.perf_counter()
                await opened(10**6 + k, leave)
                times.append(time.perf_counter() - started)
                leave.set()
            times.sort()
            print(
                f"http     listens={n:5d}  POST -> acknowledgement: median {times[15] * 1e3:.3f} ms"
                f"  min {times[0] * 1e3:.3f} ms"
            )
        gone.set()
        tg.cancel_scope.cancel()


async def flood(count: int) -> None:
    server = guarded()
    app = HttpApp(server, options=rules.HttpOptions(port=8000))
    async with app.running(), anyio.create_task_group() as tg:
        gone = anyio.Event()
        answers: list[bytes] = []
        gc.collect()
        before = rss_kib()
        for rid in range(count):
            done = anyio.Event()

            def answered(data: bytes, done: Any = done) -> None:
                answers.append(data)
                done.set()

            tg.start_soon(post, app, rid, answered, gone)
            with anyio.fail_after(10):
                await done.wait()
        gc.collect()
        grown = (rss_kib() - before) / 1024
        opened = sum(b"acknowledged" in answer for answer in answers)
        print(
            f"flood    one principal asks {count}: {opened} open, {count - opened} refused,"
            f" {len(app.runtime.state.listens)} in the state, RSS +{grown:.1f} MiB"
        )
        refused = next((a for a in answers if b"acknowledged" not in a), None)
        if refused is not None:
            print(f"         a refusal: {refused.decode()}")
        gone.set()
        tg.cancel_scope.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0] if __doc__ else "")
    parser.add_argument("--sizes", default="10,1000,3000")
    parser.add_argument("--flood", type=int, default=3000)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    anyio.run(flood, args.flood)  # first: the resident set grows from a process that freed none
    reducer(sizes)
    anyio.run(http, sizes)


if __name__ == "__main__":
    main()
