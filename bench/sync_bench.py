"""Cost per call of the synchronous driver, beside the async shell, in one process.

    python bench/sync_bench.py [--calls N] [--repeat R]

One server (no authorizer: every call is allowed) with two tools: ``plain``, a ``def``, and
``eager``, an ``async def`` marked ``completes_without_suspending``. Each row times ``N``
sequential ``tools/call`` requests, one at a time, from the request's bytes to its reply's
bytes, and reports the median over ``R`` runs of the microseconds per call:

- *sync*: ``Server.running_in_threads``; a ``LocalClient`` on the calling thread sends each
  call and blocks on its reply. ``plain`` runs on a worker thread (two thread hand-offs per
  call); ``eager`` runs on the calling thread.
- *async*: ``Server.running`` on asyncio; a task feeds each call and awaits its reply. ``plain``
  runs in anyio's worker thread (two hand-offs); ``eager`` runs on the loop's task.

Nothing but the calls is timed: the connection is set up and initialized first. The figures are
wall-clock time on whatever else the machine is doing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import anyio

from askgate import Server, completes_without_suspending
from askgate.core import SubscriberAttached
from askgate.core.events import MessageReceived
from askgate.transports.sync import LocalClient


def build() -> Server:
    server = Server("bench")

    @server.tool()
    def plain(text: str) -> str:
        return text

    @server.tool()
    @completes_without_suspending
    async def eager(text: str) -> str:
        return text

    return server


def call_bytes(request_id: int, tool: str) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {"text": "x"}},
    }
    return json.dumps(message, separators=(",", ":")).encode()


def time_sync(tool: str, calls: int) -> float:
    """Microseconds per call through the synchronous driver."""
    server = build()
    with server.running_in_threads("stdio") as runtime:
        client = LocalClient(runtime)
        client.call_tool(tool, {"text": "warm"})
        start = time.perf_counter()
        for _ in range(calls):
            client.call_tool(tool, {"text": "x"})
        return (time.perf_counter() - start) / calls * 1e6


def time_async(tool: str, calls: int) -> float:
    """Microseconds per call through the anyio shell on asyncio."""

    async def main() -> float:
        server = build()
        async with server.running("stdio") as runtime:
            replied = anyio.Event()

            def write(_data: bytes) -> None:
                replied.set()

            runtime.attach("bench", write)
            runtime.feed(SubscriberAttached("bench", runtime.now()))
            init = {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "0"},
                },
            }
            runtime.feed(MessageReceived("bench", json.dumps(init).encode(), runtime.now()))
            done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            runtime.feed(MessageReceived("bench", json.dumps(done).encode(), runtime.now()))
            start = 0.0
            for n in range(calls + 1):
                if n == 1:
                    start = time.perf_counter()  # the first call warms up
                replied = anyio.Event()
                runtime.feed(MessageReceived("bench", call_bytes(n + 1, tool), runtime.now()))
                await replied.wait()
            return (time.perf_counter() - start) / calls * 1e6

    result: float = anyio.run(main, backend="asyncio")
    return result


def median(run: Callable[[str, int], float], tool: str, calls: int, repeat: int) -> float:
    return statistics.median(run(tool, calls) for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows: dict[str, Any] = {}
    for tool in ("plain", "eager"):
        for name, run in (("sync", time_sync), ("async", time_async)):
            rows[f"{name} {tool}"] = round(median(run, tool, args.calls, args.repeat), 1)
    load = os.getloadavg()[0]
    print(f"us per tools/call, median of {args.repeat} runs of {args.calls} sequential calls")
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, load average {load:.1f}")
    for row, figure in rows.items():
        print(f"  {row:<12} {figure:>8.1f}")


if __name__ == "__main__":
    main()
