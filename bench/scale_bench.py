"""The reducer as the state grows: cost per event and memory per connection and per parked call.

    python bench/scale_bench.py [--events N] [--repeat R] [--out bench/results/scale.json]
                                [--profile FILE]

Two sweeps, each from a state built the way a shell builds it (``SubscriberAttached`` and
``ClientInitialized`` per connection; a policy ASK per parked call):

- *connections*: 1, 10, 100, 1 000 and 10 000 idle, initialized connections, and on top of them
  the same single-connection workload as ``core_bench.py`` (tools allowed, asked and approved,
  declined, timed out, denied, cancelled, reads), replayed through ``step`` alone: CPU-time
  events per second;
- *parked*: 0, 64, 256 and 1 000 parked calls, one per holding connection (1 023 of them), under
  a total cap of 1 024, with the same workload on top: 1 000 leaves the 24 places the workload's
  own ASKs need (8 flows at once) to make the same decisions as from an empty server.

Every state of both sweeps is built (and its workload recorded) first; the replays then run in
``--repeat`` interleaved rounds, each replaying every state once, and each figure is the median
of its rounds, so that a drift of the machine's speed during the run moves all of them alike.

The reducer remembers the capabilities of at most ``max_client_capabilities`` (1 024)
connections; beyond that the oldest are forgotten (they can no longer be asked), so the
10 000-connection state is what a server with that many live sessions holds.

Memory: the bytes Python allocates to build each state, measured with ``tracemalloc`` (the
difference from the state before the connections or parked calls were added), divided by their
number: what one idle connection and one parked call cost the reducer's state. This is the
state's own memory; a server's RSS per HTTP session adds its transport's share. The largest of
each sweep is also built once more in a fresh interpreter, untraced, and the growth of that
process's resident set (``VmRSS``; Linux only) is divided the same way: what the operating
system sees, without tracemalloc's bookkeeping, coarser (pymalloc takes memory in arenas of
1 MiB), and in a fresh process because one that has freed memory builds into it unseen.

``--profile FILE`` replays the parked sweep's workload once more under ``cProfile`` after the
measured rounds, from no parked call and from the most, and writes the functions that took the
most time in each (own time, share of the replay, microseconds per event) to FILE as JSON: where
the time goes when the cap is parked. Both replays make the same decisions (the workload's own
asks park beside the parked calls, never evicting one); cProfile counts Python's work, not the
cache misses of the larger maps' nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path

from core_bench import KEY, TOOLS, calibrate, connect, fill, profile_replay, record, replay

from askgate.core import Event, Options, State, initial_state

CONNECTIONS = (1, 10, 100, 1_000, 10_000)
PARKED = (0, 64, 256, 1_000)
HOLDERS = 1_023
SITES = 12  # allocation sites listed for the largest state of each sweep

Site = dict[str, str | int]


def rss_bytes() -> int | None:
    """This process's resident set size now (``VmRSS``), or None where /proc has none."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def rss_child(sweep: str, count: int) -> int:
    """Child mode: builds the sweep's base state, then ``count`` connections or parked calls on
    top of it, and prints the resident set's growth over the second build, in bytes."""
    options = Options(has_authorizer=True, max_parked_elicitations_total=HOLDERS + 1)
    base = initial_state(options, id_key=KEY, tools=TOOLS)
    if sweep == "parked":
        holders = [f"h{i}" for i in range(HOLDERS)]
        base = connect(connect(base, holders), ["w0"])
        fill(base, holders, 1)  # the first park's one-time allocations, not counted
        before = rss_bytes()
        state = fill(base, holders, count)
    else:
        connect(base, ["w0"])
        before = rss_bytes()
        state = connect(base, [f"c{i}" for i in range(count)])
    after = rss_bytes()
    print(-1 if before is None or after is None else after - before)
    del state
    return 0


def rss_per(sweep: str, count: int) -> int | None:
    """Bytes of resident set per connection or parked call, built in a fresh interpreter."""
    me = str(Path(__file__).resolve())
    done = subprocess.run(
        [sys.executable, me, "--rss-child", sweep, str(count)],
        capture_output=True,
        text=True,
        check=True,
    )
    grew = int(done.stdout.strip())
    return None if grew < 0 else round(grew / count)


def allocated(build: Callable[[], State], sites: int = 0) -> tuple[State, int, list[Site]]:
    """The state ``build`` returns, the bytes still allocated for it once built, and the
    ``sites`` source lines that allocated most of those bytes (none when ``sites`` is 0)."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    state = build()
    after = tracemalloc.get_traced_memory()[0]
    top: list[Site] = []
    if sites:
        ignore = tracemalloc.Filter(inclusive=False, filename_pattern=tracemalloc.__file__)
        snapshot = tracemalloc.take_snapshot().filter_traces([ignore])
        for stat in snapshot.statistics("lineno")[:sites]:
            frame = stat.traceback[0]
            where = "/".join(Path(frame.filename).parts[-2:])
            top.append({"site": f"{where}:{frame.lineno}", "bytes": stat.size})
    tracemalloc.stop()
    return state, after - before, top


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/results/scale.json"))
    parser.add_argument(
        "--profile", type=Path, help="write cProfiles of the parked sweep's replays here"
    )
    parser.add_argument("--rss-child", nargs=2, metavar=("SWEEP", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        return rss_child(args.rss_child[0], int(args.rss_child[1]))
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core

    options = Options(has_authorizer=True, max_parked_elicitations_total=HOLDERS + 1)
    base = initial_state(options, id_key=KEY, tools=TOOLS)
    one = ["w0"]
    n, r = args.events, args.repeat
    calibration = calibrate(r)

    by_connections: list[dict[str, int | None]] = []
    workloads: list[tuple[dict[str, int | None], State, list[Event]]] = []
    for count in CONNECTIONS:
        idle = [f"c{i}" for i in range(count - 1)]
        build = partial(lambda idle: connect(connect(base, idle), one), idle)
        start, size, top = allocated(build, SITES if count == CONNECTIONS[-1] else 0)
        connection_sites = [{**site, "per": round(int(site["bytes"]) / count)} for site in top]
        row: dict[str, int | None] = {"connections": count, "events_per_s": None}
        row |= {"state_bytes": size, "bytes_per_connection": round(size / count)}
        by_connections.append(row)
        workloads.append((row, start, record(start, one, n, 8)))

    holders = [f"h{i}" for i in range(HOLDERS)]
    with_holders = connect(connect(base, holders), one)
    by_parked: list[dict[str, int | None]] = []
    for count in PARKED:
        start, size, top = allocated(
            partial(fill, with_holders, holders, count), SITES if count == PARKED[-1] else 0
        )
        parked_sites = [{**site, "per": round(int(site["bytes"]) / count)} for site in top]
        row = {"parked": count, "events_per_s": None, "state_bytes": size}
        row["bytes_per_parked_call"] = round(size / count) if count else None
        by_parked.append(row)
        workloads.append((row, start, record(start, one, n, 8)))

    # Every state is built first; their replays then run in interleaved rounds (each round
    # replays every state once), so that a drift of the machine's speed moves them all alike.
    rates: list[list[float]] = [[] for _ in workloads]
    for _ in range(r):
        for rates_of, (_, start, events) in zip(rates, workloads, strict=True):
            rates_of.append(len(events) / replay(start, events))
    for (row, _, _), rates_of in zip(workloads, rates, strict=True):
        row["events_per_s"] = round(statistics.median(rates_of))
        print(f"{row}", file=sys.stderr, flush=True)

    first, last = by_connections[0]["events_per_s"] or 1, by_connections[-1]["events_per_s"] or 0
    empty, full = by_parked[0]["events_per_s"] or 1, by_parked[-1]["events_per_s"] or 0
    rss_connection = rss_per("connections", CONNECTIONS[-1])
    rss_parked = rss_per("parked", PARKED[-1])
    report = {
        "connections": by_connections,
        "parked": by_parked,
        "rss_bytes_per_connection": rss_connection,
        "rss_connections": CONNECTIONS[-1],
        "rss_bytes_per_parked_call": rss_parked,
        "rss_parked": PARKED[-1],
        "connection_sites": connection_sites,
        "parked_sites": parked_sites,
        "most_over_fewest_connections": round(last / first, 3),
        "cap_over_no_parked": round(full / empty, 3),
        "calibration_per_s": round(calibration, 1),
        "events": n,
        "repeat": r,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))
    print(f"wrote {args.out}", file=sys.stderr)
    if args.profile is not None:
        parked_workloads = workloads[len(CONNECTIONS) :]
        profiles = {
            str(row["parked"]): profile_replay(start, events)
            for row, start, events in (parked_workloads[0], parked_workloads[-1])
        }
        args.profile.parent.mkdir(parents=True, exist_ok=True)
        args.profile.write_text(json.dumps(profiles, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.profile}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
