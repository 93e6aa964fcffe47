"""Reducer benchmark: events per second on a mixed workload, from three starting states.

    python bench/core_bench.py [--events N] [--repeat R] [--out bench/results/core.json]

The workload interleaves concurrent flows over its connections: tools allowed and run, asked
and approved, asked and declined, asked and timed out, denied, cancelled while parked, and
resource reads. It is first recorded by driving the reducer the way a shell would (effects turn
into the next events); the timed part then replays exactly those events with nothing but
``step`` in the loop, so the figure is the reducer's alone, on one core.

*mixed*: 16 live connections, 32 flows at once. *empty* and *full* run the same single-connection
workload (8 flows at once) from 1 connection and 0 parked calls, and from 1 024 live, initialized
connections with 256 parked calls. These three use ``max_parked_elicitations_total=512`` so that
the workload makes the same decisions from each start.

A calibration (a fixed pure-Python workload) is timed before and after the reducer in the same
run; ``mixed_per_calibration`` divides the mixed rate by it, so that figures taken on other
machines, or on a busy one, compare as ratios.

``--profile FILE`` replays the mixed workload once more under ``cProfile`` after the measured
rounds and writes the functions that took the most time (own time, with their share of the
replay and microseconds per event) to FILE as JSON: where a step's time goes.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Generator, Iterator
from pathlib import Path

from askgate.core import (
    Allow,
    Ask,
    CancelRequested,
    ClientInitialized,
    Deny,
    Effect,
    ElicitationAnswered,
    Event,
    Options,
    Push,
    ReadRequested,
    StartWorker,
    State,
    SubscriberAttached,
    TimerFired,
    ToolCallReceived,
    ToolInfo,
    WorkerFinished,
    initial_state,
    step,
)

Flow = Generator[Event, list[Effect], None]
KEY = b"bench-key-0123456789abcdef"
TOOLS = (ToolInfo("echo", False, False), ToolInfo("delete_file", True, False))
RESULT = {"content": [{"type": "text", "text": "hello"}]}
APPROVE = {"action": "accept", "content": {"approve": True}}


def _ref(effects: list[Effect]) -> int:
    return next(e.ref for e in effects if isinstance(e, StartWorker))


def _eid(effects: list[Effect]) -> str:
    return next(
        str(e.message["id"])
        for e in effects
        if isinstance(e, Push) and e.message.get("method") == "elicitation/create"
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def tick(self) -> int:
        self.now += 1
        return self.now


def flows(conns: list[str], clock: Clock) -> Iterator[Flow]:
    """An endless mix of request lifecycles, one per flow, over ``conns`` in turn."""
    kinds = itertools.cycle(
        ["allow", "approve", "allow", "decline", "deny", "read", "approve", "timeout", "cancel"]
    )
    for n in itertools.count():
        conn = conns[n % len(conns)]
        yield _flow(next(kinds), conn, n, clock)


def _flow(kind: str, conn: str, rid: int, clock: Clock) -> Flow:
    if kind == "read":
        effects = yield ReadRequested(
            conn, rid, "resources/read", {"uri": "demo://x"}, clock.tick()
        )
        yield WorkerFinished(_ref(effects), {"contents": []}, clock.tick())
        return
    effects = yield ToolCallReceived(conn, rid, "echo", {"text": "hi"}, clock.tick())
    ref = _ref(effects)
    if kind == "deny":
        yield WorkerFinished(ref, Deny("forbidden by policy"), clock.tick())
        return
    if kind == "allow":
        effects = yield WorkerFinished(ref, Allow(), clock.tick())
        yield WorkerFinished(_ref(effects), RESULT, clock.tick())
        return
    effects = yield WorkerFinished(ref, Ask("Allow echo?"), clock.tick())
    eid = _eid(effects)
    if kind == "approve":
        effects = yield ElicitationAnswered(conn, eid, APPROVE, clock.tick())
        yield WorkerFinished(_ref(effects), RESULT, clock.tick())
    elif kind == "decline":
        yield ElicitationAnswered(conn, eid, {"action": "decline"}, clock.tick())
    elif kind == "timeout":
        yield TimerFired(("elicitation", eid), clock.tick())
    else:
        yield CancelRequested(conn, rid, clock.tick())


def record(start: State, conns: list[str], count: int, concurrency: int = 32) -> list[Event]:
    """Drives the reducer like a shell would and returns the events it fed, in order."""
    clock = Clock()
    source = flows(conns, clock)
    active: list[tuple[Flow, Event]] = []
    state = start
    events: list[Event] = []
    while len(events) < count:
        while len(active) < concurrency:
            flow = next(source)
            active.append((flow, next(flow)))
        flow, event = active.pop(0)
        state, effects = step(state, event)
        events.append(event)
        with contextlib.suppress(StopIteration):  # that flow is done
            active.append((flow, flow.send(effects)))
    return events


def connect(state: State, conns: list[str]) -> State:
    for conn in conns:
        state, _ = step(state, SubscriberAttached(conn))
        state, _ = step(state, ClientInitialized(conn, {"elicitation": {}}))
    return state


def fill(state: State, conns: list[str], parked: int) -> State:
    """Parks ``parked`` calls, one per connection of ``conns``, round robin."""
    for n in range(parked):
        conn = conns[n % len(conns)]
        state, effects = step(state, ToolCallReceived(conn, f"p{n}", "echo", {}, 0))
        state, _ = step(state, WorkerFinished(_ref(effects), Ask("hold"), 0))
    assert state.parked_total == parked
    return state


def replay(start: State, events: list[Event]) -> float:
    """CPU seconds to step through ``events`` from ``start`` (nothing else in the loop).

    CPU time of this process, not wall time, so that other work on the machine does not count.
    """
    state = start
    began = time.process_time()
    for event in events:
        state, _ = step(state, event)
    return time.process_time() - began


def measure(start: State, conns: list[str], count: int, repeat: int, concurrency: int) -> float:
    events = record(start, conns, count, concurrency)
    rates = [len(events) / replay(start, events) for _ in range(repeat)]
    return statistics.median(rates)


def profile_replay(start: State, events: list[Event], top: int = 25) -> dict[str, object]:
    """The replay of ``events`` under cProfile: its most expensive functions by own time."""
    import cProfile  # noqa: PLC0415 (only with --profile)
    import pstats  # noqa: PLC0415

    profiler = cProfile.Profile()
    state = start
    profiler.enable()
    for event in events:
        state, _ = step(state, event)
    profiler.disable()
    stats = pstats.Stats(profiler)
    table = stats.stats  # type: ignore[attr-defined]
    total = sum(row[2] for row in table.values()) or 1.0
    rows = sorted(table.items(), key=lambda item: item[1][2], reverse=True)[:top]
    functions = [
        {
            "function": f"{name} ({Path(file).name}:{line})" if line else name,
            "calls": calls,
            "own_share": round(own / total, 4),
            "own_us_per_event": round(own / len(events) * 1e6, 3),
        }
        for (file, line, name), (_, calls, own, _, _) in rows
    ]
    return {"events": len(events), "functions": functions}


def calibration_workload() -> int:
    """A fixed pure-Python workload shaped like a reducer step: small immutable records built,
    dicts and tuples copied, strings formatted, a few comparisons. Its rate on a machine says
    how fast that machine runs this kind of Python, so reducer figures from two machines (or
    two loads of one) compare as ratios to it."""
    total = 0
    table: dict[str, tuple[int, str]] = {}
    for i in range(2_000):
        key = f"c{i % 97}:{i}"
        record = (i, key)
        table = {**table, key: record} if len(table) < 64 else {key: record}
        total += len(table) + (1 if key in table else 0)
        total += sum(1 for v in table.values() if v[0] % 3 == 0)
    return total


def calibrate(repeat: int) -> float:
    """Median calibration workloads per CPU second, measured in this run."""
    rates = []
    for _ in range(repeat):
        began = time.process_time()
        for _ in range(20):
            calibration_workload()
        rates.append(20 / (time.process_time() - began))
    return statistics.median(rates)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench/results/core.json"))
    parser.add_argument("--profile", type=Path, help="write a cProfile of the mixed replay here")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core

    roomy = Options(has_authorizer=True, max_parked_elicitations_total=512)
    base = initial_state(roomy, id_key=KEY, tools=TOOLS)
    workload_conns = [f"w{i}" for i in range(16)]

    one = workload_conns[:1]
    holders = [f"h{i}" for i in range(1024 - 1)]
    mixed_start = connect(base, workload_conns)
    empty_start = connect(base, one)
    full_start = fill(connect(connect(base, holders), one), holders, 256)

    n, r = args.events, args.repeat
    calibration_before = calibrate(r)
    results = {
        "mixed_events_per_s": measure(mixed_start, workload_conns, n, r, concurrency=32),
        "empty_events_per_s": measure(empty_start, one, n, r, concurrency=8),
        "full_events_per_s": measure(full_start, one, n, r, concurrency=8),
    }
    calibration = statistics.median([calibration_before, calibrate(r)])
    mixed_per_calibration = results["mixed_events_per_s"] / calibration
    results = {k: round(v) for k, v in results.items()}
    ratio = results["full_events_per_s"] / results["empty_events_per_s"]
    report = {
        **results,
        "full_over_empty": round(ratio, 3),
        "calibration_per_s": round(calibration, 1),
        "mixed_per_calibration": round(mixed_per_calibration, 1),
        "events": args.events,
        "repeat": args.repeat,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    for key, value in report.items():
        print(f"{key:28} {value}")
    print(f"wrote {args.out}", file=sys.stderr)
    if args.profile is not None:
        events = record(mixed_start, workload_conns, n, 32)
        profile = profile_replay(mixed_start, events)
        args.profile.parent.mkdir(parents=True, exist_ok=True)
        args.profile.write_text(json.dumps(profile, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.profile}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
