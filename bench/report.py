"""bench/report.md from the peers benchmark's figures: tables, ratios, targets, plots.

    python bench/report.py [--stdio bench/results/peers_stdio.json]
        [--http bench/results/peers_http.json] [--core bench/results/core.json]
        [--scale bench/results/scale.json] [--sessions bench/results/sessions.json]
        [--profiles bench/results/profile] [--out bench/report.md]

Reads what ``make bench-peers`` wrote (one run, every server measured in interleaved rounds,
each figure the median of its rounds) and writes a Markdown report: one table per transport
with every server's figures, askgate's ratio to each peer figure by figure; over HTTP, the
latency under 32 and 256 concurrent clients (each its own session) per server, and askgate's
app under uvicorn on asyncio beside hypercorn on asyncio and on trio (servers labelled
``askgate-...``); the targets of the performance issue with what was measured against each (met,
or missed by how much), and for each missed target where the time (or memory) goes, from the
profiles of askgate taken after the measured rounds (``--profiles``: ``stdio/askgate*.folded``
and ``http/askgate*.folded`` from the benchmarks' ``--profile``, with their runs' figures in
``stdio.json`` and ``http.json``, ``startup.json`` from ``bench/startup_profile.py``, and
``core.json`` from ``bench/core_bench.py --profile``). Then the scaling and memory figures of
``make bench-scale`` and ``make bench-core`` (``scale.json``, ``sessions.json``, ``core.json``),
with their targets and, for each missed one, the reducer's profile or the allocation sites.
With matplotlib installed (``pip install matplotlib``), PNG charts go beside the report
(``bench/report_*.png``: bar charts per transport, the latency distributions per phase,
p50/p99 against the number of clients, and the scaling curves)
and are linked from it; without it the report says they were not drawn. Nothing is measured
here: every number comes from the files.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

BASE = "askgate"
VARIANT = "askgate-"  # askgate's app under another server or event loop (not a peer)
CLIENTS = (32, 256)  # the concurrent clients of http_bench.py phase 8 in make bench-peers
TOP = 10  # functions or packages listed per profile

STDIO_ROWS = [
    ("calls_per_s", "echo calls/s (32 in flight)", False),
    ("server_cpu_us_per_call", "server CPU per echo call, us", True),
    ("ping_p50_us", "ping p50, us", True),
    ("ping_p99_us", "ping p99, us", True),
    ("elicit_p50_us", "elicitation round trip p50, us", True),
    ("elicit_p99_us", "elicitation round trip p99, us", True),
    ("startup_ms", "start + initialize, ms", True),
    ("peak_rss_kib", "peak RSS, KiB", True),
]
HTTP_ROWS = [
    ("calls_per_s", "echo calls/s (32 in flight)", False),
    ("server_cpu_us_per_call", "server CPU per echo call, us", True),
    ("loaded_echo_p50_us", "echo p50 under load, us", True),
    ("loaded_echo_p99_us", "echo p99 under load, us", True),
    ("echo_p50_us", "echo p50 one at a time, us", True),
    ("elicit_p50_us", "elicitation round trip p50, us", True),
    ("elicit_per_s", "elicitation round trips/s (concurrent)", False),
    ("elicit_server_cpu_us", "server CPU per elicitation trip, us", True),
    ("modern_p50_us", "2026-07-28 approval trip p50, us", True),
    ("modern_per_s", "2026-07-28 approval trips/s", False),
]


def load(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def cell(value: object) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.1f}".replace(",", " ")
    if isinstance(value, int):
        return f"{value:,}".replace(",", " ")
    return str(value)


def ratio(base: object, other: object, lower_is_better: bool) -> str:
    """How many times better askgate is than the other (above 1: askgate better)."""
    if not isinstance(base, int | float) or not isinstance(other, int | float):
        return "n/a"
    if not base or not other:
        return "n/a"
    times = other / base if lower_is_better else base / other
    return f"{times:.2f}x"


def peers_only(servers: dict[str, Any]) -> dict[str, Any]:
    """The servers that are askgate or a peer (not askgate under another server or loop)."""
    return {k: v for k, v in servers.items() if not k.startswith(VARIANT)}


def table(data: dict[str, Any], rows: list[tuple[str, str, bool]]) -> list[str]:
    servers = peers_only(data["servers"])
    labels = [label for label, figures in servers.items() if figures.get("ok")]
    failed = [(label, f.get("error")) for label, f in servers.items() if not f.get("ok")]
    lines = ["| | " + " | ".join(labels) + " |", "| --- |" + " --- |" * len(labels)]
    for key, title, _ in rows:
        values = [cell(servers[label].get(key)) for label in labels]
        lines.append(f"| {title} | " + " | ".join(values) + " |")
    if BASE in labels:
        others = [label for label in labels if label != BASE]
        lines += ["", f"askgate's advantage over each (above 1.00x: {BASE} better):", ""]
        lines += ["| | " + " | ".join(others) + " |", "| --- |" + " --- |" * len(others)]
        base = servers[BASE]
        for key, title, lower in rows:
            values = [ratio(base.get(key), servers[o].get(key), lower) for o in others]
            lines.append(f"| {title} | " + " | ".join(values) + " |")
    for label, error in failed:
        lines += ["", f"- {label} failed: {str(error).splitlines()[0][:300]}"]
    notes = [
        (label, str(f["modern_error"]).splitlines()[0][:240])
        for label, f in servers.items()
        if f.get("modern_error")
    ]
    if notes:
        lines += ["", "2026-07-28 not measured:"]
        lines += [f"- {label}: {note}" for label, note in notes]
    return lines


Target = tuple[str, float | None, float | None, str, bool, str]
"""(name, measured, limit, unit, at most (else at least), what explains a miss: a profile's
name, see :func:`where_the_time_goes`)."""


def verdict(value: float | None, limit: float | None, most: bool) -> str:
    """ "met", "missed by N%" (of the limit), or "not measured"."""
    if value is None or limit is None:
        return "not measured"
    met = value <= limit if most else value >= limit
    if met:
        return "met"
    by = abs(value - limit) / limit
    return f"missed by {by:.1%}" if by < 0.01 else f"missed by {by:.0%}"


def target(label: str, value: float | None, limit: float | None, unit: str, most: bool) -> str:
    """One target's line: met, or missed and by how much."""
    if value is None or limit is None:
        return f"| {label} | n/a | n/a | not measured |"
    how = verdict(value, limit, most)
    sign = "at most" if most else "at least"
    return f"| {label} | {amount(value, unit)} | {sign} {amount(limit, unit)} | {how} |"


def amount(value: float | None, unit: str) -> str:
    """A target's figure with its unit: ratios ("x") to two decimals, others as cells."""
    if value is None:
        return "n/a"
    if unit == "x":
        return f"{value:.2f}x"
    number = cell(round(value) if unit in ("B", "/s") else float(value))
    return f"{number} {unit}".rstrip()


def target_list(stdio: dict[str, Any] | None, http: dict[str, Any] | None) -> list[Target]:
    """The issue's targets against this run's figures."""
    s = (stdio or {}).get("servers", {})
    h = (http or {}).get("servers", {})
    me, floor, ts = s.get(BASE, {}), s.get("floor", {}), s.get("ts-sdk", {})
    floor_trip = floor.get("elicit_p50_us")
    out: list[Target] = [
        ("stdio CPU per echo", me.get("server_cpu_us_per_call"), 25, "us", True, "stdio-echo")
    ]
    if ts.get("server_cpu_us_per_call"):
        half = ts["server_cpu_us_per_call"] / 2
        mine = me.get("server_cpu_us_per_call")
        out.append(("stdio CPU per echo vs TS SDK/2", mine, half, "us", True, "stdio-echo"))
    trip_limit = None if floor_trip is None else 1.5 * floor_trip
    out.append(
        (
            "stdio elicitation p50 vs 1.5x floor",
            me.get("elicit_p50_us"),
            trip_limit,
            "us",
            True,
            "stdio-elicit",
        )
    )
    out.append(("stdio start + initialize", me.get("startup_ms"), 100, "ms", True, "startup"))
    rss = me.get("peak_rss_kib")
    mib = None if rss is None else rss / 1024
    out.append(("stdio peak RSS", mib, 25, "MiB", True, "memory"))
    hme, sdk = h.get(BASE, {}), h.get("sdk-lowlevel", {})
    hcpu = hme.get("server_cpu_us_per_call")
    out.append(("HTTP CPU per echo", hcpu, 100, "us", True, "http-echo"))
    sdk_trips = sdk.get("elicit_per_s")
    out.append(
        (
            "HTTP elicitation trips/s vs 5x SDK",
            hme.get("elicit_per_s"),
            None if sdk_trips is None else 5 * sdk_trips,
            "/s",
            False,
            "http-elicit",
        )
    )
    return out


def targets(stdio: dict[str, Any] | None, http: dict[str, Any] | None) -> list[str]:
    lines = ["| target | measured | target | |", "| --- | --- | --- | --- |"]
    for name, value, limit, unit, most, _ in target_list(stdio, http):
        lines.append(target(name, value, limit, unit, most))
    return lines


# --- concurrent clients and askgate's app on other servers (HTTP) ------------------------------


def clients_table(data: dict[str, Any], clients: tuple[int, ...] = CLIENTS) -> list[str]:
    """Per server: echo p50 and p99 one client at a time and with each number of concurrent
    clients, calls/s and server CPU per call there; askgate's ratio to each peer at each."""
    servers = {k: v for k, v in data["servers"].items() if v.get("ok")}
    measured = [n for n in clients if any(f"clients_{n}_p50_us" in v for v in servers.values())]
    if not measured:
        return ["Not measured in this run (http_bench.py without --clients)."]
    head = ["p50 1 client", "p99 1 client"]
    for n in measured:
        head += [f"p50 {n}", f"p99 {n}", f"calls/s {n}", f"CPU/call {n}"]
    lines = ["| server | " + " | ".join(head) + " |", "| --- |" + " --- |" * len(head)]
    for label, f in servers.items():
        values = [f.get("echo_p50_us"), f.get("echo_p99_us")]
        for n in measured:
            values += [f.get(f"clients_{n}_{k}") for k in ("p50_us", "p99_us", "per_s")]
            values.append(f.get(f"clients_{n}_server_cpu_us"))
        lines.append(f"| {label} | " + " | ".join(cell(v) for v in values) + " |")
    base = servers.get(BASE)
    others = [k for k in peers_only(servers) if k != BASE]
    if base is not None and others:
        lines += ["", f"{BASE}'s advantage (above 1.00x: {BASE} better):", ""]
        cols = [f"{what} {n}" for n in measured for what in ("p50", "p99", "calls/s")]
        lines += ["| | " + " | ".join(cols) + " |", "| --- |" + " --- |" * len(cols)]
        for other in others:
            f = servers[other]
            cells = []
            for n in measured:
                for key, lower in (("p50_us", True), ("p99_us", True), ("per_s", False)):
                    name = f"clients_{n}_{key}"
                    cells.append(ratio(base.get(name), f.get(name), lower))
            lines.append(f"| vs {other} | " + " | ".join(cells) + " |")
    for label, f in servers.items():
        for n in clients:
            if f.get(f"clients_{n}_error"):
                error = str(f[f"clients_{n}_error"]).splitlines()[0][:240]
                lines += ["", f"- {label}, {n} clients, not measured: {error}"]
    busy = [
        f"{label} at {n} clients ({f[f'clients_{n}_client_cpu_utilisation']:.2f})"
        for label, f in servers.items()
        for n in measured
        if (f.get(f"clients_{n}_client_cpu_utilisation") or 0) > 0.8
    ]
    if busy:
        lines += ["", "The load generator was near saturation (its CPU utilisation) for: "]
        lines[-1] += ", ".join(busy) + "; those figures are partly the client's."
    return lines


VARIANT_ROWS = [
    *HTTP_ROWS[:8],  # echo and the 2025 elicitation trip, as in the HTTP table
    ("clients_32_p99_us", "echo p99, 32 clients, us", True),
    ("clients_256_p99_us", "echo p99, 256 clients, us", True),
]


def variants_table(data: dict[str, Any]) -> list[str]:
    """askgate's app under each server and event loop of the run, with the ratios that isolate
    the loop (hypercorn on trio against hypercorn on asyncio) and the server (hypercorn against
    uvicorn, both on asyncio)."""
    servers = data["servers"]
    labels = [k for k in servers if k == BASE or k.startswith(VARIANT)]
    if len(labels) < 2:
        return ["Not measured in this run (no askgate-... server)."]
    ok = [k for k in labels if servers[k].get("ok")]
    lines = ["| | " + " | ".join(ok) + " |", "| --- |" + " --- |" * len(ok)]
    for key, title, _ in VARIANT_ROWS:
        lines.append(f"| {title} | " + " | ".join(cell(servers[k].get(key)) for k in ok) + " |")
    pairs = [
        ("askgate-hypercorn-asyncio", "askgate-hypercorn-trio", "trio's cost (same server)"),
        ("askgate-asyncio", "askgate-hypercorn-asyncio", "hypercorn+h11's cost (both asyncio)"),
        (BASE, "askgate-asyncio", "uvloop's gain (uvicorn both)"),
    ]
    pairs = [(a, b, why) for a, b, why in pairs if a in ok and b in ok]
    if pairs:
        lines += ["", "Ratios (above 1.00x: the first is better):", ""]
        lines += ["| | " + " | ".join(f"{a} / {b}: {why}" for a, b, why in pairs) + " |"]
        lines += ["| --- |" + " --- |" * len(pairs)]
        for key, title, lower in VARIANT_ROWS:
            cells = [ratio(servers[a].get(key), servers[b].get(key), lower) for a, b, _ in pairs]
            lines.append(f"| {title} | " + " | ".join(cells) + " |")
    for k in labels:
        if not servers[k].get("ok"):
            lines += ["", f"- {k} failed: {str(servers[k].get('error')).splitlines()[0][:300]}"]
    return lines


# --- profiles ---------------------------------------------------------------------------------

FRAME = re.compile(r"^(?P<name>.*) \((?P<file>.*):(?P<line>\d+)\)$")


def fold(text: str) -> tuple[int, dict[str, int], dict[str, int]]:
    """A folded-stacks text (``frame;frame;... count`` per line): the samples in all, and per
    function its own (innermost) samples and its inclusive ones (counted once per stack)."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + n
    return total, own, inclusive


def package(frame: str) -> str:
    """Who a frame's code belongs to: ``askgate/core``, ``askgate/transports``, another
    top-level package (``uvicorn``, ``trio``, ``anyio``, ``h11``), ``stdlib/asyncio``, or
    ``generated`` for code compiled at run time (attrs' and dataclasses' methods)."""
    found = FRAME.match(frame)
    where = found.group("file") if found else frame
    if where.startswith("<"):
        return "generated" if where.startswith(("<string", "<attrs")) else where
    parts = where.split("/")
    if parts[0] == "askgate":
        return "/".join(parts[:2]) if len(parts) > 2 else "askgate"
    if parts[0] in ("core", "transports", "models"):
        return f"askgate/{parts[0]}"
    if parts[0] == "bench":
        return "bench (the sampler, the runner)"
    if len(parts) == 1 or parts[0] in sys.stdlib_module_names:
        return f"stdlib/{parts[0].removesuffix('.py')}"
    return parts[0]


def by_package(own: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for frame, n in own.items():
        out[package(frame)] = out.get(package(frame), 0) + n
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


FEW_SAMPLES = 200
TRUNK = 0.95
"""A frame on at least this share of the stacks is the trunk (the runner, the event loop's
run_forever), left out of the inclusive list, where it would say nothing."""


def profile_lines(path: Path, per_call_us: float | None, what: str) -> list[str]:
    """A folded profile as Markdown: self time by package, then the top functions by self and
    by inclusive time, as shares of the samples and, given ``per_call_us``, microseconds."""
    if not path.exists():
        return [f"(no profile: {path} is missing; `make bench-peers` writes it)"]
    total, own, inclusive = fold(path.read_text(encoding="utf-8"))
    if not total:
        return [f"(no samples in {path})"]

    def us(n: int) -> str:
        return "" if per_call_us is None else f" | {per_call_us * n / total:.1f}"

    unit = "" if per_call_us is None else " | us per " + what
    head = ["| share" + unit + " |", "| ---" + (" | ---" if per_call_us else "") + " |"]
    lines = [f"{total} samples in `{path.as_posix()}`."]
    if total < FEW_SAMPLES:
        lines[-1] += f" Fewer than {FEW_SAMPLES}: the shares are rough."
    if per_call_us is not None:
        lines[-1] += f" Microseconds: the share times the {per_call_us:.1f} us of server CPU"
        lines[-1] += f" per {what} in the profiled run."
    lines += ["", "Self time by package:", ""]
    lines += ["| package " + head[0], "| --- " + head[1]]
    for name, n in list(by_package(own).items())[:TOP]:
        lines.append(f"| {name} | {100 * n / total:.1f}%{us(n)} |")
    branches = {k: n for k, n in inclusive.items() if n < TRUNK * total}
    for title, counts in (("self", own), ("inclusive, below the trunk", branches)):
        lines += ["", f"Top functions, {title}:", ""]
        lines += ["| function " + head[0], "| --- " + head[1]]
        for frame, n in sorted(counts.items(), key=lambda kv: -kv[1])[:TOP]:
            lines.append(f"| `{frame}` | {100 * n / total:.1f}%{us(n)} |")
    return lines


def floor_lines(startup: dict[str, Any], memory: bool) -> list[str]:
    """What a start costs before askgate runs a line of its own: bare Python and Python with
    asyncio and askgate's dependencies imported, beside the whole command, same run."""
    floor = startup.get("floor")
    if floor is None:
        return []
    key, unit, what = (
        ("peak_rss_kib", "KiB", "peak resident set")
        if memory
        else ("ready_ms", "ms", "time from spawn to ready")
    )
    rows = (
        ("bare Python", "bare"),
        (
            f"asyncio and the dependencies imported ({floor['dependency_modules']} modules)",
            "dependencies",
        ),
        ("the command, to its `initialize` result", "command"),
    )
    lines = [f"The floor under askgate's own code ({what}, medians of {floor['rounds']}"]
    lines[-1] += " interleaved starts, `bench/startup_profile.py`):"
    lines += ["", f"| process | {unit} |", "| --- | --- |"]
    lines += [f"| {label} | {cell(floor[name][key])} |" for label, name in rows]
    share = floor["dependencies"][key] / floor["command"][key] if floor["command"][key] else 0
    lines += ["", f"The dependencies alone are {100 * share:.0f}% of the command's {what}."]
    return lines


def startup_lines(startup: dict[str, Any] | None, memory: bool) -> list[str]:
    """Where start-up time (import times) or memory (Python allocations held) goes."""
    if startup is None:
        return ["(no start-up profile: bench/startup_profile.py did not run)"]
    floor = floor_lines(startup, memory)
    if floor:
        floor = ["", *floor]
    if not memory:
        imports = startup["imports"]
        lines = [f"`{startup['command']}` under `-X importtime`: {imports['modules']} modules,"]
        lines[-1] += f" {imports['total_us'] / 1000:.0f} ms of import time in all (own times)."
        lines += ["", "| package | own import time, ms |", "| --- | --- |"]
        for name, value in list(imports["by_package_us"].items())[:TOP]:
            lines.append(f"| {name} | {value / 1000:.1f} |")
        lines += ["", "| module | cumulative import time, ms |", "| --- | --- |"]
        for row in imports["top_cumulative_us"][:TOP]:
            lines.append(f"| {row['module']} | {row['us'] / 1000:.1f} |")
        return lines + floor
    mem = startup["memory"]
    lines = [f"`{startup['command']}` under `-X tracemalloc`, at exit: {mem['traced_kib']:.0f}"]
    lines[-1] += f" KiB of Python allocations held, VmRSS {mem['rss_kib']} KiB (tracing"
    lines[-1] += (
        " inflates the RSS; the rest of it is the interpreter, C extensions and libraries)."
    )
    lines += ["", "| package (who allocated or imported) | KiB |", "| --- | --- |"]
    for name, value in list(mem["by_package_kib"].items())[:TOP]:
        lines.append(f"| {name} | {value:.1f} |")
    return lines + floor


def where_the_time_goes(
    missed: list[Target], profiles: Path, figures: dict[str, dict[str, Any] | None]
) -> list[str]:
    """One section per missed target, from the profile that explains it (each profile once)."""
    lines: list[str] = []
    shown: set[str] = set()
    startup = load(profiles / "startup.json")
    for name, value, limit, unit, most, why in missed:
        lines += [f"### {name}: {verdict(value, limit, most)}", ""]
        lines += [f"Measured {amount(value, unit)} against {amount(limit, unit)}."]
        if why in shown:
            lines += [f"Where the time goes: as for the {why} profile above.", ""]
            continue
        shown.add(why)
        transport, _, phase = why.partition("-")
        if why in ("startup", "memory"):
            lines += ["", *startup_lines(startup, why == "memory"), ""]
            continue
        run = figures.get(transport) or {}
        me = run.get("servers", {}).get(BASE, {})
        if phase == "echo":
            path, per, what = (
                profiles / transport / "askgate.folded",
                "server_cpu_us_per_call",
                "echo call",
            )
        else:
            path, per, what = (
                profiles / transport / "askgate.1.folded",
                "elicit_server_cpu_us",
                "trip",
            )
        lines += ["", *profile_lines(path, me.get(per), what), ""]
    return lines


def plots(
    out_dir: Path,
    data: dict[str, dict[str, Any] | None],
    scale: dict[str, Any] | None = None,
    sessions: list[Any] | None = None,
) -> list[str]:
    """Bar charts per transport (calls/s, CPU per call, elicitation p50), latency against
    clients, and the scaling curves; their links."""
    try:
        import matplotlib  # type: ignore[import-not-found]  # noqa: PLC0415 (optional)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found]  # noqa: PLC0415
    except ImportError:
        return ["(plots not drawn: matplotlib is not installed; `pip install matplotlib`)"]
    links = []
    metrics = [
        ("calls_per_s", "echo calls/s"),
        ("server_cpu_us_per_call", "server CPU per echo call (us)"),
        ("elicit_p50_us", "elicitation round trip p50 (us)"),
    ]
    for transport, results in data.items():
        if results is None:
            continue
        servers = {k: v for k, v in peers_only(results["servers"]).items() if v.get("ok")}
        fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4))
        for ax, (key, title) in zip(axes, metrics, strict=True):
            labels = [k for k, v in servers.items() if isinstance(v.get(key), int | float)]
            values = [servers[k][key] for k in labels]
            colours = ["tab:green" if k == BASE else "tab:grey" for k in labels]
            ax.bar(labels, values, color=colours)
            ax.set_yscale("log")
            ax.set_title(f"{transport}: {title}, log scale", fontsize=9)
            ax.tick_params(axis="x", labelrotation=45, labelsize=8)
        fig.tight_layout()
        path = out_dir / f"report_{transport}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        links.append(f"![{transport}]({path.name})")
    http = data.get("http")
    curves = latency_curves(http) if http is not None else {}
    if curves:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for n, (label, (xs, p50, p99)) in enumerate(curves.items()):
            colour = "tab:green" if label == BASE else OTHERS[n % len(OTHERS)]
            ax.plot(xs, p50, marker="o", color=colour, label=f"{label} p50")
            ax.plot(xs, p99, marker="x", linestyle="--", color=colour, label=f"{label} p99")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ticks = sorted({n for xs, _, _ in curves.values() for n in xs})
        ax.minorticks_off()
        ax.set_xticks(ticks, labels=[str(n) for n in ticks])
        ax.set_xlabel("concurrent clients (each its own session; 1: one call at a time)")
        ax.set_ylabel("echo latency, us (log)")
        ax.set_title("Streamable HTTP: echo p50 (solid) and p99 (dashed) vs clients", fontsize=9)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        path = out_dir / "report_clients.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        links.append(f"![latency vs clients]({path.name})")
    links += latency_plot(out_dir, plt, data)
    links += scaling_plot(out_dir, plt, scale, sessions)
    return links


DISTRIBUTIONS = {
    "stdio": [("ping", "ping"), ("elicit", "elicitation round trip")],
    "http": [
        ("echo", "echo, one at a time"),
        ("elicit", "2025 elicitation round trip"),
        ("modern", "2026-07-28 approval round trip"),
    ],
}


def distribution(figures: dict[str, Any], prefix: str) -> dict[str, Any] | None:
    """A phase's box: p25 to p75 around the p50, whiskers p10 and p99, the max as a flier;
    None where the run did not record them all."""
    keys = {"whislo": 10, "q1": 25, "med": 50, "q3": 75, "whishi": 99}
    box = {name: figures.get(f"{prefix}_p{p}_us") for name, p in keys.items()}
    top = figures.get(f"{prefix}_max_us")
    if any(v is None for v in box.values()) or top is None:
        return None
    return {**box, "fliers": [top]}


def latency_plot(out_dir: Path, plt: Any, data: dict[str, dict[str, Any] | None]) -> list[str]:
    """Per transport, a box per server and phase: the latency distribution, log scale."""
    links: list[str] = []
    for transport, phases in DISTRIBUTIONS.items():
        results = data.get(transport)
        if results is None:
            continue
        servers = {k: v for k, v in peers_only(results["servers"]).items() if v.get("ok")}
        fig, axes = plt.subplots(1, len(phases), figsize=(5 * len(phases), 4), squeeze=False)
        drawn = False
        for ax, (prefix, title) in zip(axes[0], phases, strict=True):
            boxes, colours = [], []
            for label, figures in servers.items():
                box = distribution(figures, prefix)
                if box is not None:
                    boxes.append({**box, "label": label})
                    colours.append("tab:green" if label == BASE else "tab:grey")
            if not boxes:
                ax.set_visible(False)
                continue
            drawn = True
            art = ax.bxp(boxes, showfliers=True, patch_artist=True)
            for patch, colour in zip(art["boxes"], colours, strict=True):
                patch.set_facecolor(colour)
            ax.set_yscale("log")
            ax.set_title(f"{transport}: {title}, us (log)", fontsize=9)
            ax.tick_params(axis="x", labelrotation=45, labelsize=8)
        if drawn:
            fig.tight_layout()
            path = out_dir / f"report_{transport}_latency.png"
            fig.savefig(path, dpi=100)
            links.append(f"![{transport} latency]({path.name})")
        plt.close(fig)
    if links:
        links.insert(0, "Latency: boxes from p25 to p75 around the p50, whiskers at p10 and p99,")
        links.insert(1, "the max as a dot.")
        links.insert(2, "")
    return links


OTHERS = [f"C{i}" for i in range(10) if i != 2]  # matplotlib's cycle without its green, askgate's


def latency_curves(data: dict[str, Any]) -> dict[str, tuple[list[int], list[float], list[float]]]:
    """Per server (askgate's variants included): the numbers of clients (1 for one call at a
    time) and the echo p50 and p99 at each, where all were measured."""
    out = {}
    for label, f in data["servers"].items():
        if not f.get("ok"):
            continue
        points = [(1, f.get("echo_p50_us"), f.get("echo_p99_us"))]
        points += [(n, f.get(f"clients_{n}_p50_us"), f.get(f"clients_{n}_p99_us")) for n in CLIENTS]
        kept = [(n, a, b) for n, a, b in points if a is not None and b is not None]
        if len(kept) > 1:
            out[label] = ([n for n, _, _ in kept], [a for _, a, _ in kept], [b for _, _, b in kept])
    return out


CLIENTS_TEXT = [
    "Each client has its own keep-alive connection and its own session and calls echo one call",
    "at a time (a closed loop); p50 and p99 are over every call of the phase, in microseconds;",
    '"1 client" is the one-at-a-time phase. stdio is not in this table: a stdio server has',
    "exactly one client (the process that started it), so N clients are N server processes",
    "sharing the machine's cores, a figure of the OS and the machine more than of the server;",
    "stdio's figure under concurrency is the 32-in-flight echo phase on one connection above.",
]
VARIANTS_TEXT = [
    "The same app (askgate's demo, `HttpApp`) served by `askgate serve --http` (uvicorn with",
    "httptools, on uvloop where it is installed, as in this venv: docs/performance.md;",
    "`askgate-asyncio` is the same server with `ASKGATE_LOOP=asyncio`) and by",
    "`bench/askgate_hypercorn.py`",
    "(hypercorn with h11) on asyncio and on trio: askgate's shell is anyio, so it runs on either",
    "loop. trio's cost is the ratio of the two hypercorn columns, hypercorn's that of the two",
    "asyncio columns, and uvloop's gain that of askgate over askgate-asyncio.",
]
PROFILES_TEXT = [
    "From askgate's profiles taken after the measured rounds (`make bench-peers`, one round,",
    "the server under `stdio_bench.py`'s CPU-time stack sampler, on for the echo throughput",
    "phase and for the elicitation phases; start-up and memory from `bench/startup_profile.py`).",
    "Shares are of the samples; microseconds are the share times the profiled run's own CPU per",
    "call. Stacks are the main thread's.",
]


def trio_lines(profiles: Path, run: dict[str, Any] | None) -> list[str]:
    """askgate under uvicorn (asyncio) beside hypercorn on trio, self time by package, from
    the HTTP profiles, when both were taken."""
    paths = {
        label: profiles / "http" / f"{label}.folded" for label in (BASE, VARIANT + "hypercorn-trio")
    }
    if not all(p.exists() for p in paths.values()):
        return []
    servers = (run or {}).get("servers", {})
    packages: dict[str, dict[str, float]] = {}
    for label, path in paths.items():
        total, own, _ = fold(path.read_text(encoding="utf-8"))
        cpu = servers.get(label, {}).get("server_cpu_us_per_call")
        scale = (cpu or 0.0) / total if total else 0.0
        packages[label] = {k: n * scale for k, n in by_package(own).items()}
    names = sorted(
        {k for v in packages.values() for k in v},
        key=lambda k: -max(v.get(k, 0) for v in packages.values()),
    )
    lines = [
        "Where an echo call's CPU goes, by package (self time, us per call, profiled run):",
        "",
    ]
    lines += ["| package | " + " | ".join(packages) + " |", "| --- |" + " --- |" * len(packages)]
    for name in names[: TOP + 5]:
        lines.append(
            f"| {name} | " + " | ".join(f"{v.get(name, 0.0):.1f}" for v in packages.values()) + " |"
        )
    return [*lines, ""]


# --- scaling: the reducer as its state grows, the HTTP app beside idle sessions --------------

REDUCER_BASELINE = 444.0
"""``mixed_per_calibration`` of ``bench/core_bench.py`` on main when the performance issue was
taken up (idle machine, fresh clone): the figure the reducer's 2x target is measured against."""


def scale_targets(
    core: dict[str, Any] | None, scale: dict[str, Any] | None, sessions: list[Any] | None
) -> list[Target]:
    """The issue's scaling and memory targets against ``make bench-scale``'s and
    ``make bench-core``'s figures (each target absent whose figures are)."""
    out: list[Target] = []
    if core is not None and core.get("mixed_per_calibration") is not None:
        mixed = float(core["mixed_per_calibration"])
        twice = 2 * REDUCER_BASELINE
        out.append(("reducer events per calibration, 2x", mixed, twice, "", False, "reducer"))
    if scale is not None:
        parked = [r["bytes_per_parked_call"] for r in scale["parked"] if r["bytes_per_parked_call"]]
        if parked:
            out.append(("bytes per parked call", max(parked), 1024, "B", True, "parked-memory"))
        full = scale.get("cap_over_no_parked")
        out.append(("reducer events/s, cap parked over none", full, 0.9, "x", False, "scale"))
        most = scale.get("most_over_fewest_connections")
        out.append(
            ("reducer events/s, 10 000 connections over 1", most, 0.9, "x", False, "connections")
        )
    rows = [r for r in sessions or [] if r.get("idle_sessions") and not r.get("parked_calls")]
    empty = next((r["cpu_us_per_call"] for r in sessions or [] if not r["idle_sessions"]), None)
    if rows:
        last = rows[-1]
        n = cell(last["idle_sessions"])
        held = last["bytes_per_session"]
        out.append((f"bytes per idle HTTP session ({n})", held, 2048, "B", True, "session-memory"))
        grew = None if not empty else last["cpu_us_per_call"] / empty
        name = f"HTTP app CPU per echo beside {n} sessions over none"
        out.append((name, grew, 1.1, "x", True, "sessions"))
    crowded = [r for r in sessions or [] if r.get("parked_calls")]
    if crowded:
        n, held_cap = cell(crowded[-1]["idle_sessions"]), cell(crowded[-1]["parked_calls"])
        grew = None if not empty else crowded[-1]["cpu_us_per_call"] / empty
        name = (
            f"HTTP app CPU per echo beside {n} sessions and {held_cap} parked (the cap) over none"
        )
        out.append((name, grew, 1.1, "x", True, "sessions"))
    return out


def scaling_lines(scale: dict[str, Any] | None, sessions: list[Any] | None) -> list[str]:
    """Tables of ``make bench-scale``'s figures."""
    lines: list[str] = []
    if scale is not None:
        lines += [
            "The reducer alone (`bench/scale_bench.py`): the same single-connection workload",
            "replayed through `step` on top of idle, initialized connections, and on top of",
            "parked calls (one per holding connection, under a total cap of 1 024); CPU-time",
            "events per second, and the bytes Python keeps allocated for the state",
            "(tracemalloc) per connection or parked call. Calibration this run:",
            f"{cell(scale.get('calibration_per_s'))} workloads/s.",
            "",
            "| connections | events/s | over 1 | bytes per connection |",
            "| --- | --- | --- | --- |",
        ]
        first = scale["connections"][0]["events_per_s"] or 1
        for row in scale["connections"]:
            over = f"{row['events_per_s'] / first:.2f}x"
            lines.append(
                f"| {cell(row['connections'])} | {cell(row['events_per_s'])} | {over} | "
                f"{cell(row['bytes_per_connection'])} |"
            )
        lines += ["", "| parked calls | events/s | over 0 | bytes per parked call |"]
        lines += ["| --- | --- | --- | --- |"]
        empty = scale["parked"][0]["events_per_s"] or 1
        for row in scale["parked"]:
            over = f"{row['events_per_s'] / empty:.2f}x"
            lines.append(
                f"| {cell(row['parked'])} | {cell(row['events_per_s'])} | {over} | "
                f"{cell(row['bytes_per_parked_call'])} |"
            )
        rss_c, rss_p = scale.get("rss_bytes_per_connection"), scale.get("rss_bytes_per_parked_call")
        if rss_c is not None or rss_p is not None:
            lines += [
                "",
                f"Resident set, built again in a fresh interpreter: {cell(rss_c)} bytes per",
                f"connection ({cell(scale.get('rss_connections'))} connections), {cell(rss_p)}",
                f"bytes per parked call ({cell(scale.get('rss_parked'))} parked).",
            ]
        lines += [""]
    rows = list(sessions or [])
    if rows:
        lines += [
            "The HTTP app in process (`bench/http_app_bench.py --sessions`): CPU per echo",
            "`tools/call` on one session beside N idle, initialized sessions, and their memory",
            "(the shell's session and the reducer's connection; traced, and the resident set's",
            "growth when opened again in a fresh interpreter). With `--full N`, one more app:",
            "N sessions, each its own principal, and the server's total cap of calls parked on",
            "them (each an open SSE stream with its `elicitation/create` unanswered).",
            "",
            "| idle sessions | parked calls | CPU per echo, us | over none | bytes per session |"
            " resident set |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        empty = next((r["cpu_us_per_call"] for r in rows if not r["idle_sessions"]), None)
        for row in rows:
            over = f"{row['cpu_us_per_call'] / empty:.2f}x" if empty else "n/a"
            lines.append(
                f"| {cell(row['idle_sessions'])} | {cell(row.get('parked_calls', 0))} | "
                f"{cell(row['cpu_us_per_call'])} | {over} | "
                f"{cell(row.get('bytes_per_session'))} | {cell(row.get('rss_bytes_per_session'))} |"
            )
        lines += [""]
    return lines


def sites_lines(sites: list[dict[str, Any]], what: str) -> list[str]:
    """Allocation sites as a table, bytes per ``what``."""
    if not sites:
        return ["(no allocation sites recorded: run `make bench-scale`)"]
    lines = [f"| source line | bytes per {what} |", "| --- | --- |"]
    lines += [f"| {site['site']} | {cell(site['per'])} |" for site in sites[:TOP]]
    return lines


def core_profile_lines(profile: dict[str, Any] | None) -> list[str]:
    """The reducer's replay under cProfile: its most expensive functions by own time."""
    if profile is None:
        return ["(no reducer profile: `bench/core_bench.py --profile FILE` did not run)"]
    lines = [f"`bench/core_bench.py --profile`, the mixed replay ({cell(profile['events'])}"]
    lines[-1] += " events) under cProfile, by own time (cProfile's overhead inflates each):"
    lines += ["", "| function | calls | share | us per event |", "| --- | --- | --- | --- |"]
    for row in profile["functions"][: TOP + 5]:
        share = f"{row['own_share']:.1%}"
        lines.append(
            f"| {row['function']} | {cell(row['calls'])} | {share} | {row['own_us_per_event']} |"
        )
    return lines


def scale_explanations(
    missed: list[Target],
    core_profile: dict[str, Any] | None,
    scale: dict[str, Any] | None,
    sessions: list[Any] | None,
    scale_profile: dict[str, Any] | None = None,
) -> list[str]:
    """One section per missed scaling or memory target: the profile or the allocation sites
    that explain it, where the run recorded them."""
    lines: list[str] = []
    for name, value, limit, unit, most, why in missed:
        lines += [f"### {name}: {verdict(value, limit, most)}", ""]
        lines += [f"Measured {amount(value, unit)} against {amount(limit, unit)}.", ""]
        if why == "reducer":
            lines += [*core_profile_lines(core_profile), ""]
        elif why == "parked-memory":
            sites = (scale or {}).get("parked_sites", [])
            lines += ["Where the bytes of the largest parked state were allocated:", ""]
            lines += [*sites_lines(sites, "parked call"), ""]
        elif why == "session-memory":
            last = [r for r in sessions or [] if r.get("bytes_per_session")][-1:]
            sites = last[0].get("sites", []) if last else []
            lines += ["Where the bytes of the idle sessions were allocated:", ""]
            lines += [*sites_lines(sites, "session"), ""]
        elif why == "connections":
            rows = [r["events_per_s"] for r in (scale or {}).get("connections", [])]
            lines += [*spread_lines(rows, "events/s", "connection sweep"), ""]
        elif why == "sessions":
            rows = [r["cpu_us_per_call"] for r in sessions or [] if not r.get("parked_calls")]
            lines += [*spread_lines(rows, "CPU per echo", "idle-session sweep"), ""]
        else:
            lines += [*parked_profile_lines(scale_profile), ""]
    return lines


def spread_lines(rows: list[float], what: str, sweep: str) -> list[str]:
    """For a target with no profile of its own: how far the sweep's rows, each a state of a
    different size, lie apart (noise between rounds shows as rows out of order)."""
    if len(rows) < 2 or not min(rows):
        return [f"(no {sweep}: `make bench-scale` did not run it)"]
    low, high = min(rows), max(rows)
    order = " then ".join(f"{row / rows[0]:.2f}x" for row in rows)
    return [
        f"No profile of its own. The {sweep}'s {what}, each row over the first: {order}; the",
        f"rows lie {high / low - 1:.0%} apart, and rows out of order are the machine's noise",
        "between rounds, not the state's size.",
    ]


def parked_profile_lines(profiles: dict[str, Any] | None) -> list[str]:
    """The parked sweep's replay under cProfile from no parked call and from the most: each
    function's own microseconds per event in both, the largest growth first."""
    if not profiles or len(profiles) < 2:
        return ["(no profile: `bench/scale_bench.py --profile FILE` did not run)"]
    low, high = sorted(profiles, key=int)[0], sorted(profiles, key=int)[-1]
    cost = {
        key: {row["function"]: row["own_us_per_event"] for row in profiles[key]["functions"]}
        for key in (low, high)
    }
    names = set(cost[low]) | set(cost[high])
    growth = sorted(names, key=lambda n: cost[low].get(n, 0.0) - cost[high].get(n, 0.0))
    lines = ["`bench/scale_bench.py --profile`: the same workload replayed under cProfile beside"]
    lines[-1] += f" {low} and beside {high} parked calls, own time per event (the functions"
    lines[-1] += " listed by either; cProfile's overhead inflates each):"
    head = f"| function | us per event, {low} parked | us per event, {high} parked |"
    lines += ["", head, "| --- | --- | --- |"]
    for name in growth[: TOP + 5]:
        both = [cost[key].get(name) for key in (low, high)]
        lines.append(f"| {name} | {' | '.join('n/a' if v is None else str(v) for v in both)} |")
    return lines


def scaling_plot(
    out_dir: Path, plt: Any, scale: dict[str, Any] | None, sessions: list[Any] | None
) -> list[str]:
    """Events/s and bytes against connections and parked calls; HTTP CPU against sessions."""
    if scale is None and not sessions:
        return []
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    if scale is not None:
        conns = scale["connections"]
        xs = [r["connections"] for r in conns]
        axes[0].plot(xs, [r["events_per_s"] for r in conns], marker="o", color="tab:green")
        axes[1].plot(xs, [r["bytes_per_connection"] for r in conns], marker="o", color="tab:green")
        parked = [r for r in scale["parked"] if r["parked"]]
        axes[0].plot(
            [r["parked"] for r in scale["parked"]],
            [r["events_per_s"] for r in scale["parked"]],
            marker="x",
            linestyle="--",
            color="tab:blue",
        )
        axes[1].plot(
            [r["parked"] for r in parked],
            [r["bytes_per_parked_call"] for r in parked],
            marker="x",
            linestyle="--",
        )
        axes[0].set_title("reducer events/s: connections (o), parked calls (x)", fontsize=9)
        axes[1].set_title("state bytes per connection (o), per parked call (x)", fontsize=9)
        axes[1].axhline(1024, color="grey", linewidth=0.8)
        for ax in axes[:2]:
            ax.set_xscale("symlog")
            ax.set_xlim(left=0)
            ax.set_xlabel("connections or parked calls")
        axes[0].set_ylim(bottom=0)
        axes[1].set_ylim(bottom=0)
    rows = [r for r in sessions or [] if not r.get("parked_calls")]
    if rows:
        xs = [max(r["idle_sessions"], 1) for r in rows]
        axes[2].plot(xs, [r["cpu_us_per_call"] for r in rows], marker="o", color="tab:green")
        full = [r for r in sessions or [] if r.get("parked_calls")]
        xs, ys = [r["idle_sessions"] for r in full], [r["cpu_us_per_call"] for r in full]
        axes[2].plot(xs, ys, marker="x", linestyle="none", color="tab:red")
        axes[2].set_xscale("log")
        axes[2].set_ylim(bottom=0)
        axes[2].set_xlabel("idle HTTP sessions (0 drawn at 1)")
        axes[2].set_title("HTTP app CPU per echo call, us (x: the cap parked)", fontsize=9)
    fig.tight_layout()
    path = out_dir / "report_scaling.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [f"![scaling]({path.name})"]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--stdio", type=Path, default=Path("bench/results/peers_stdio.json"))
    parser.add_argument("--http", type=Path, default=Path("bench/results/peers_http.json"))
    parser.add_argument("--core", type=Path, default=Path("bench/results/core.json"))
    parser.add_argument("--profiles", type=Path, default=Path("bench/results/profile"))
    parser.add_argument("--scale", type=Path, default=Path("bench/results/scale.json"))
    parser.add_argument("--sessions", type=Path, default=Path("bench/results/sessions.json"))
    parser.add_argument("--out", type=Path, default=Path("bench/report.md"))
    args = parser.parse_args()
    stdio, http, core = load(args.stdio), load(args.http), load(args.core)
    scale = load(args.scale)
    sessions_path = args.sessions
    sessions = json.loads(sessions_path.read_text("utf-8")) if sessions_path.exists() else None
    lines = [
        "# askgate beside its peers",
        "",
        "Generated by `bench/report.py` from the figures of `make bench-peers` (one run, the",
        "servers in interleaved rounds, each figure the median of its rounds). Regenerate with",
        "`make bench-peers`; do not edit by hand.",
        "",
    ]
    for name, data in (("stdio", stdio), ("Streamable HTTP", http)):
        lines += [f"## {name}", ""]
        if data is None:
            lines += ["Not measured in this run.", ""]
            continue
        params = ", ".join(f"{k} {v}" for k, v in data.get("params", {}).items())
        machine = data.get("machine", {})
        loadavg = machine.get("loadavg_1m_at_end")
        lines += [f"Parameters: {params}. Machine: {machine.get('platform')}, "]
        lines[-1] += f"{machine.get('cpus')} CPUs, Python {machine.get('python')}"
        lines[-1] += f", load average {loadavg} at the end of the run." if loadavg else "."
        lines += ["", *table(data, STDIO_ROWS if name == "stdio" else HTTP_ROWS), ""]
    if http is not None:
        lines += ["### Concurrent clients", "", *CLIENTS_TEXT, ""]
        lines += [*clients_table(http), ""]
        lines += ["### askgate's app under other servers and event loops", "", *VARIANTS_TEXT, ""]
        lines += [*variants_table(http), ""]
        lines += trio_lines(args.profiles, load(args.profiles / "http.json"))
    lines += ["## Targets", "", *targets(stdio, http), ""]
    missed = [t for t in target_list(stdio, http) if verdict(t[1], t[2], t[4]).startswith("missed")]
    if missed:
        lines += ["## Where the time goes (missed targets)", "", *PROFILES_TEXT, ""]
        runs = {
            "stdio": load(args.profiles / "stdio.json"),
            "http": load(args.profiles / "http.json"),
        }
        lines += where_the_time_goes(missed, args.profiles, runs)
    if core is not None:
        lines += ["## The reducer", ""]
        lines += ["`bench/core_bench.py` (`make bench-core`), CPU-time events per second:", ""]
        lines += [f"- {k}: {cell(v)}" for k, v in core.items()]
        lines += [""]
    lines += ["## Scaling and memory", "", *scaling_lines(scale, sessions)]
    more = scale_targets(core, scale, sessions)
    lines += ["| target | measured | target | |", "| --- | --- | --- | --- |"]
    lines += [target(name, value, limit, unit, most) for name, value, limit, unit, most, _ in more]
    lines += ["", f"The reducer's baseline is {REDUCER_BASELINE} events per calibration workload"]
    lines[-1] += " (main when the performance issue was taken up, idle)."
    lines += [""]
    missed_more = [t for t in more if verdict(t[1], t[2], t[4]).startswith("missed")]
    if missed_more:
        lines += ["### Where the time and memory go (missed scaling targets)", ""]
        core_profile = load(args.profiles / "core.json")
        scale_profile = load(args.profiles / "scale.json")
        lines += scale_explanations(missed_more, core_profile, scale, sessions, scale_profile)
    figures = {"stdio": stdio, "http": http}
    lines += ["## Plots", "", *plots(args.out.parent, figures, scale, sessions), ""]
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
