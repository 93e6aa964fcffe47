"""What the gate adds to a framework's tools/call: allowed calls through each framework's server,
with and without askgate's adapter, over the SDK's memory streams.

    python bench/adapter_calls.py [--tree A --tree B] [--calls N] [--repeat R]
    python bench/adapter_calls.py --instructions [--tree A --tree B] [--calls N]

One official ``mcp.ClientSession`` calls ``read_file`` N times in a row (each call waits for its
answer) on an ``MCPServer``, a low-level ``Server`` and a fastmcp server, bare and guarded with
an async authorizer that allows, each run in a fresh process of its own. Each ``--tree`` (a
checkout, old or new, laid out as its wheel would be by ``bench/trees.py``; default: this one)
runs the guarded server with its own adapter and its own ``tests/adapter_kits.py``; the bare
server is the framework's alone, run from the first tree.

By default, the figure is the CPU time of the whole process per call (``time.process_time``:
client, server, and the thread a plain tool runs in), which the other work of a loaded machine
does not inflate as it does the wall clock (printed beside it). The runs are interleaved (R
rounds of: bare, then each tree guarded, for each framework), so that a busy moment hits every
variant alike; each guarded run's ratio is taken to the bare run of its own round, and the
report gives the median over the rounds with the spread (lowest and highest).

With ``--instructions``, each variant runs twice under ``valgrind --tool=callgrind`` (N/5 and N
calls) and the figure is the difference in instructions executed per call: what machine load
does not change at all (one run each: it does not vary from run to run by more than a fraction
of a percent). Not part of make test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmarks (also under -P)
from core_instructions import callgrind, instructions
from trees import laid_out

FRAMEWORKS = ("mcpserver", "lowlevel", "fastmcp")
WARM_UP = 50
"""Calls on each connection before the first batch is timed."""


def _kit(framework: str, guarded: bool) -> Any:
    """``framework``'s kit allowing every call, guarded, or bare: the gate's middleware taken
    out of the framework's chain (its gate still runs, doing nothing)."""
    from askgate import Allow  # noqa: PLC0415 (the child's own imports, from the tree under test)
    from tests.adapter_kits import KITS  # noqa: PLC0415

    async def allow(_tool: str, _arguments: Any, _context: Any) -> object:
        """An async authorizer: a plain one would add a worker thread's round trip per call."""
        return Allow()

    kit = KITS[framework](allow, check_invariants=False)
    if not guarded:
        for chain in (kit.lowlevel.middleware, getattr(kit.server, "middleware", None)):
            if isinstance(chain, list):
                chain[:] = [m for m in chain if type(m).__name__ != "GateMiddleware"]
    return kit


def child(checkout: str, framework: str, mode: str, calls: int, batches: int) -> None:
    """Child mode (askgate comes from ``PYTHONPATH``, the laid-out tree; ``checkout`` gives its
    ``tests/adapter_kits.py``). ``mode`` ``both``: one connection to the bare server and one to
    the guarded one, in one process, called in alternate batches of ``calls`` (``batches`` of
    each, after a warm-up), printing the CPU and wall microseconds per call of each batch as
    JSON. ``bare`` or ``guarded``: ``calls`` calls on that one (under callgrind)."""
    sys.path.append(checkout)  # its tests/adapter_kits.py; askgate stays the laid-out one
    import anyio  # noqa: PLC0415

    from tests.adapter_kits import connected  # noqa: PLC0415

    variants = (False, True) if mode == "both" else (mode == "guarded",)
    kits = {guarded: _kit(framework, guarded) for guarded in variants}
    figures: dict[str, list[dict[str, float]]] = {"bare": [], "guarded": []}

    async def batch(client: Any, count: int) -> dict[str, float]:
        start, cpu = time.perf_counter(), time.process_time()
        for index in range(count):
            result = await client.call_tool("read_file", {"path": str(index)})
            if result.is_error:
                raise SystemExit(f"the call failed: {result}")
        wall = (time.perf_counter() - start) / count * 1e6
        return {"wall": wall, "cpu": (time.process_time() - cpu) / count * 1e6}

    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:
            clients = {}
            for guarded, kit in kits.items():
                await stack.enter_async_context(kit.gate.running())
                clients[guarded] = await stack.enter_async_context(connected(kit))
            if mode != "both":
                await batch(clients[mode == "guarded"], calls)
                return
            for client in clients.values():
                await batch(client, WARM_UP)
            for _ in range(batches):
                for guarded, client in clients.items():
                    label = "guarded" if guarded else "bare"
                    figures[label].append(await batch(client, calls))

    logging.disable(logging.WARNING)  # the call log's line per call is not what is measured
    anyio.run(main)
    print(json.dumps(figures))


def timed(checkout: str, path: str, framework: str, calls: int, batches: int) -> Any:
    """One child's batches, bare and guarded (see :func:`child`)."""
    env = dict(os.environ, PYTHONPATH=path, PYTHONHASHSEED="0")
    command = [sys.executable, "-P", __file__, "--child", checkout, framework, "both"]
    done = subprocess.run(
        [*command, str(calls), str(batches)],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{framework} run failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def counted(checkout: str, path: str, framework: str, mode: str, calls: int) -> float:
    """Instructions per call, from two callgrind runs of :func:`child` (calls/5 and calls)."""
    few = max(1, calls // 5)
    runs = [  # both at once
        callgrind(__file__, path, checkout, framework, mode, str(n), "0") for n in (few, calls)
    ]
    low, high = (instructions(run) for run in runs)
    return (high - low) / (calls - few)


def spread(values: list[float], ratio: bool = False) -> str:
    """``median [lower quartile - upper quartile]``."""
    low, median, high = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    if ratio:
        return f"x{median:.2f} [{low:.2f}-{high:.2f}]"
    return f"{median:5.0f} [{low:.0f}-{high:.0f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tree", action="append", default=[], help="a checkout (repeatable)")
    parser.add_argument("--calls", type=int, default=100, help="calls per batch (or run)")
    parser.add_argument("--batches", type=int, default=30, help="batches of each variant")
    parser.add_argument("--framework", nargs="*", default=list(FRAMEWORKS), choices=FRAMEWORKS)
    parser.add_argument("--instructions", action="store_true", help="count under callgrind")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        checkout, framework, mode, calls, batches = args.child
        child(checkout, framework, mode, int(calls), int(batches))
        return 0
    if args.calls < 5 or args.batches < 1:
        parser.error("--calls must be at least 5 and --batches at least 1")
    trees = [str(Path(tree).resolve()) for tree in args.tree or ["."]]
    with laid_out(trees) as paths:
        for framework in args.framework:
            for tree, path in zip(trees, paths, strict=True):
                if args.instructions:
                    bare, gated = (
                        counted(tree, path, framework, mode, args.calls)
                        for mode in ("bare", "guarded")
                    )
                    print(
                        f"{framework:9} {tree}: bare {bare:,.0f} instructions/call,"
                        f" guarded {gated:,.0f}, x{gated / bare:.2f}",
                        flush=True,
                    )
                    continue
                runs = timed(tree, path, framework, args.calls, args.batches)
                for measure in ("cpu", "wall"):
                    alone = [run[measure] for run in runs["bare"]]
                    behind = [run[measure] for run in runs["guarded"]]
                    ratios = [g / b for b, g in zip(alone, behind, strict=True)]
                    print(
                        f"{framework:9} {measure:4} {tree}: bare {spread(alone)} us/call,"
                        f" guarded {spread(behind)} us/call, {spread(ratios, ratio=True)}",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
