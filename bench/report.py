"""bench/report.md from the peers benchmark's figures: tables, ratios, targets, plots.

    python bench/report.py [--stdio bench/results/peers_stdio.json]
        [--http bench/results/peers_http.json] [--core bench/results/core.json]
        [--out bench/report.md]

Reads what ``make bench-peers`` wrote (one run, every server measured in interleaved rounds,
each figure the median of its rounds) and writes a Markdown report: one table per transport
with every server's figures, askgate's ratio to each peer figure by figure, and the targets of
the performance issue with what was measured against each (met, or missed by how much). With
matplotlib installed (``pip install matplotlib``), PNG bar charts go beside the report
(``bench/report_*.png``) and are linked from it; without it the report says they were not drawn.
Nothing is measured here: every number comes from the JSON files.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

BASE = "askgate"

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


def table(data: dict[str, Any], rows: list[tuple[str, str, bool]]) -> list[str]:
    servers = data["servers"]
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


def target(label: str, value: float | None, limit: float | None, unit: str, most: bool) -> str:
    """One target's line: met, or missed and by how much."""
    if value is None or limit is None:
        return f"| {label} | n/a | n/a | not measured |"
    met = value <= limit if most else value >= limit
    how = "met" if met else f"missed by {abs(value - limit) / limit:.0%}"
    sign = "at most" if most else "at least"
    return f"| {label} | {cell(float(value))} {unit} | {sign} {cell(float(limit))} {unit} | {how} |"


def targets(stdio: dict[str, Any] | None, http: dict[str, Any] | None) -> list[str]:
    lines = ["| target | measured | target | |", "| --- | --- | --- | --- |"]
    s = (stdio or {}).get("servers", {})
    h = (http or {}).get("servers", {})
    me, floor, ts = s.get(BASE, {}), s.get("floor", {}), s.get("ts-sdk", {})
    floor_trip = floor.get("elicit_p50_us")
    lines.append(target("stdio CPU per echo", me.get("server_cpu_us_per_call"), 25, "us", True))
    if ts.get("server_cpu_us_per_call"):
        half = ts["server_cpu_us_per_call"] / 2
        mine = me.get("server_cpu_us_per_call")
        lines.append(target("stdio CPU per echo vs TS SDK/2", mine, half, "us", True))
    lines.append(
        target(
            "stdio elicitation p50 vs 1.5x floor",
            me.get("elicit_p50_us"),
            None if floor_trip is None else 1.5 * floor_trip,
            "us",
            True,
        )
    )
    lines.append(target("stdio start + initialize", me.get("startup_ms"), 100, "ms", True))
    rss = me.get("peak_rss_kib")
    lines.append(target("stdio peak RSS", None if rss is None else rss / 1024, 25, "MiB", True))
    hme, sdk = h.get(BASE, {}), h.get("sdk-lowlevel", {})
    lines.append(target("HTTP CPU per echo", hme.get("server_cpu_us_per_call"), 100, "us", True))
    sdk_trips = sdk.get("elicit_per_s")
    lines.append(
        target(
            "HTTP elicitation trips/s vs 5x SDK",
            hme.get("elicit_per_s"),
            None if sdk_trips is None else 5 * sdk_trips,
            "/s",
            False,
        )
    )
    return lines


def plots(out_dir: Path, data: dict[str, dict[str, Any] | None]) -> list[str]:
    """Bar charts per transport (calls/s, CPU per call, elicitation p50); their links."""
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
        servers = {k: v for k, v in results["servers"].items() if v.get("ok")}
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
    return links


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--stdio", type=Path, default=Path("bench/results/peers_stdio.json"))
    parser.add_argument("--http", type=Path, default=Path("bench/results/peers_http.json"))
    parser.add_argument("--core", type=Path, default=Path("bench/results/core.json"))
    parser.add_argument("--out", type=Path, default=Path("bench/report.md"))
    args = parser.parse_args()
    stdio, http, core = load(args.stdio), load(args.http), load(args.core)
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
    lines += ["## Targets", "", *targets(stdio, http), ""]
    if core is not None:
        lines += ["## The reducer", ""]
        lines += [f"- {k}: {cell(v)}" for k, v in core.items()]
        lines += [""]
    lines += ["## Plots", "", *plots(args.out.parent, {"stdio": stdio, "http": http}), ""]
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
