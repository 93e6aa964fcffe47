"""What the gate adds to a framework's tools/call: allowed calls through each framework's server,
with and without askgate's adapter, over the SDK's memory streams.

    python bench/adapter_calls.py [--calls N] [--repeat R]

One official ``mcp.ClientSession`` calls ``read_file`` N times in a row (each call waits for its
answer) on an ``MCPServer``, a low-level ``Server`` and a fastmcp server, bare and guarded with
an authorizer that allows, in the same run (interleaved). Prints the median of R runs of each, in
microseconds per call: wall-clock time, and the process's CPU time (client, server and the
thread a plain tool runs in; what a loaded machine's other work does not inflate), each with the
guarded call's ratio to the bare one. The difference is the gate's cost per call (the reducer's
steps, the authorizer's and the tool's workers, and the lookup of the called tool that keeps
the registry current, R-ADAPT-7). Not part of make test.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from askgate import Allow
from tests.adapter_kits import KITS, Kit, connected


async def allow(_tool: str, _arguments: Any, _context: Any) -> object:
    """An async authorizer: a plain one would add a worker thread's round trip per call."""
    return Allow()


async def per_call(kit: Kit, calls: int, guarded: bool) -> tuple[float, float]:
    """Microseconds per allowed call on one connection of ``kit``'s server: wall-clock, and
    the process's CPU time."""
    if not guarded:
        kit.lowlevel.middleware[:] = [
            m for m in kit.lowlevel.middleware if type(m).__name__ != "GateMiddleware"
        ]
        if hasattr(kit.server, "middleware") and not hasattr(kit.server, "_lowlevel_server"):
            kit.server.middleware[:] = [
                m for m in kit.server.middleware if type(m).__name__ != "GateMiddleware"
            ]
    async with kit.gate.running(), connected(kit) as client:
        await client.call_tool("read_file", {"path": "warm"})
        start, cpu = time.perf_counter(), time.process_time()
        for index in range(calls):
            await client.call_tool("read_file", {"path": str(index)})
        wall = (time.perf_counter() - start) / calls * 1e6
        return wall, (time.process_time() - cpu) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the call log's line per call is not what is measured
    for framework in KITS:
        runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for _ in range(args.repeat):  # interleaved, so a busy moment hits both alike
            for guarded in (False, True):
                kit = KITS[framework](allow, check_invariants=False)
                runs[guarded].append(anyio.run(per_call, kit, args.calls, guarded))
        for column, label in ((0, "wall"), (1, "cpu ")):
            bare, gated = (statistics.median(run[column] for run in runs[g]) for g in (False, True))
            print(
                f"{framework:10} {label} bare {bare:7.0f} us/call   guarded {gated:7.0f} us/call"
                f"   gate +{gated - bare:6.0f} us/call   x{gated / bare:.2f}"
            )


if __name__ == "__main__":
    main()
