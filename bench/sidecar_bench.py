"""The cost of a decision through the sidecar (``askgate core``) beside the in-process step.

    python bench/sidecar_bench.py [--events N] [--repeat R] [--out bench/results/sidecar.json]

Both sides are driven by the same host loop, the mixed workload of ``bench/core_bench.py``
(16 connections, 32 flows at once: tools allowed and run, asked and approved, declined, denied,
timed out, cancelled, reads): every event is stepped and its effects read back before the flow
goes on. In process the step is ``askgate.core.step``; through the sidecar it is one JSON line
out and one back over a pipe (``askgate.sidecar.CommandReducer`` without the checking replies):
encoding the event, the sidecar decoding it, stepping, encoding the effects, and the host
decoding them. A third run does that JSON work in one process with no pipe between, to tell the
encoding's share from the process boundary's. Per event, the median of ``--repeat`` runs: wall
time, and CPU time (this process's, plus the sidecar's from /proc on Linux). The two processes
share the machine, so the wall figure moves with whatever else runs on it; the CPU figure much
less.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from core_bench import TOOLS, Clock, Flow, flows

from askgate import core, jsonwire
from askgate.core import ClientInitialized, Effect, Event, Options, SubscriberAttached
from askgate.sidecar import CommandReducer

Step = Callable[[Any, Event], tuple[Any, list[Effect]]]
OPTIONS = Options(has_authorizer=True, max_parked_elicitations_total=512)
CONNS = [f"w{i}" for i in range(16)]


def drive(
    step: Step, state: Any, count: int, concurrency: int = 32, pid: int | None = None
) -> tuple[float, float]:
    """Wall seconds and CPU seconds (this process's, and process ``pid``'s) to feed ``count``
    events of the mixed workload through ``step``."""
    for conn in CONNS:
        state, _ = step(state, SubscriberAttached(conn))
        state, _ = step(state, ClientInitialized(conn, {"elicitation": {}}))
    clock = Clock()
    source = flows(CONNS, clock)
    active: list[tuple[Flow, Event]] = []
    began, cpu = time.perf_counter(), time.process_time() + _cpu_of(pid)
    for _ in range(count):
        while len(active) < concurrency:
            flow = next(source)
            active.append((flow, next(flow)))
        flow, event = active.pop(0)
        state, effects = step(state, event)
        with contextlib.suppress(StopIteration):  # that flow is done
            active.append((flow, flow.send(effects)))
    return time.perf_counter() - began, time.process_time() + _cpu_of(pid) - cpu


def _cpu_of(pid: int | None) -> float:
    """CPU seconds (user and system) process ``pid`` has used, from /proc (0 without)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--events", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/results/sidecar.json"))
    args = parser.parse_args()
    tools = tuple((t.name, t.sensitive) for t in TOOLS)
    infos = TOOLS

    def in_process() -> tuple[float, float]:
        start = core.initial_state(OPTIONS, id_key=b"bench-key-0123456789abcdef", tools=infos)
        return drive(core.step, start, args.events)

    def json_step(state: Any, event: Event) -> tuple[Any, list[Effect]]:
        """The step with the sidecar's JSON work on both sides, and no process between."""
        line = jsonwire.dumps(jsonwire.encode(event))
        state, effects = core.step(state, jsonwire.decode(jsonwire.loads(line)))
        reply = jsonwire.dumps({"effects": [jsonwire.encode(e) for e in effects]})
        return state, [jsonwire.decode(e) for e in jsonwire.loads(reply)["effects"]]

    def in_process_json() -> tuple[float, float]:
        start = core.initial_state(OPTIONS, id_key=b"bench-key-0123456789abcdef", tools=infos)
        return drive(json_step, start, args.events)

    sidecar = CommandReducer([sys.executable, "-m", "askgate", "core"], inspect=False)
    try:

        def through_sidecar() -> tuple[float, float]:
            start = sidecar.initial_state(OPTIONS, tools)
            return drive(sidecar.step, start, args.events, pid=sidecar.process.pid)

        inside = [in_process() for _ in range(args.repeat)]
        with_json = [in_process_json() for _ in range(args.repeat)]
        outside = [through_sidecar() for _ in range(args.repeat)]
    finally:
        status = sidecar.close()

    def per_event(runs: list[tuple[float, float]], which: int) -> float:
        median: float = statistics.median(run[which] for run in runs)
        events: int = args.events
        return round(median / events * 1e6, 1)

    report = {
        "in_process_wall_us_per_event": per_event(inside, 0),
        "sidecar_wall_us_per_event": per_event(outside, 0),
        "in_process_cpu_us_per_event": per_event(inside, 1),
        "in_process_with_json_cpu_us_per_event": per_event(with_json, 1),
        "sidecar_cpu_us_per_event": per_event(outside, 1),  # the host's and the sidecar's
        "events": args.events,
        "repeat": args.repeat,
        "sidecar_exit": status,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    for key, value in report.items():
        print(f"{key:28} {value}")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
