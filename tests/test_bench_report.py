"""bench/report.py's logic on small made-up figures: targets met or missed by how much, the
concurrent-clients table, profiles folded and grouped by package, and a "where the time goes"
section for a missed target only. Nothing is measured; no plot is drawn."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_report"] = module
    spec.loader.exec_module(module)
    return module


def test_verdict_says_met_or_missed_by_how_much(report: ModuleType) -> None:
    assert report.verdict(20.0, 25, True) == "met"
    assert report.verdict(50.0, 25, True) == "missed by 100%"
    assert report.verdict(300.0, 400, False) == "missed by 25%"
    assert report.verdict(885.6, 888, False) == "missed by 0.3%"  # not "by 0%"
    assert report.verdict(None, 25, True) == "not measured"


def test_a_profile_is_folded_and_grouped_by_package(report: ModuleType) -> None:
    text = (
        "main (askgate/transports/stdio.py:1);step (askgate/core/reducer.py:9) 6\n"
        "main (askgate/transports/stdio.py:1);run (trio/_core/_run.py:3) 3\n"
        "main (askgate/transports/stdio.py:1);__init__ (<string>:1) 1\n"
    )
    total, own, inclusive = report.fold(text)
    assert total == 10
    assert own["step (askgate/core/reducer.py:9)"] == 6
    assert inclusive["main (askgate/transports/stdio.py:1)"] == 10
    assert report.by_package(own) == {"askgate/core": 6, "trio": 3, "generated": 1}
    assert report.package("select (selectors.py:400)") == "stdlib/selectors"
    assert report.package("run (asyncio/base_events.py:1)") == "stdlib/asyncio"
    assert report.package("__init__ (collections/__init__.py:1)") == "stdlib/collections"


def servers(**figures: dict[str, float]) -> dict[str, object]:
    return {"servers": {label: {"ok": True, **f} for label, f in figures.items()}}


def test_the_clients_table_has_a_column_per_level_and_askgates_ratios(report: ModuleType) -> None:
    mine = {"echo_p50_us": 500.0, "echo_p99_us": 900.0, "clients_32_p50_us": 1000.0}
    mine |= {"clients_32_p99_us": 2000.0, "clients_32_per_s": 3000.0}
    peer = {"echo_p50_us": 1500.0, "echo_p99_us": 2000.0, "clients_32_p50_us": 4000.0}
    peer |= {"clients_32_p99_us": 3000.0, "clients_32_per_s": 1000.0}
    hyper = {"clients_32_p50_us": 9.0, "clients_32_p99_us": 9.0, "clients_32_per_s": 9.0}
    lines = report.clients_table(
        servers(**{"askgate": mine, "sdk": peer, "askgate-hypercorn-trio": hyper})
    )
    assert "| server | p50 1 client | p99 1 client | p50 32 | p99 32 | calls/s 32 |" in lines[0]
    assert "256" not in lines[0]  # not measured: no column
    assert "| vs sdk | 4.00x | 1.50x | 3.00x |" in lines
    assert not any("vs askgate-hypercorn-trio" in line for line in lines)  # not a peer


def test_a_missed_target_gets_its_profile_and_a_met_one_none(
    report: ModuleType, tmp_path: Path
) -> None:
    (tmp_path / "http").mkdir()
    (tmp_path / "http" / "askgate.folded").write_text(
        "serve (askgate/transports/http.py:1);parse (httptools/parser.py:5) 3\n"
        "serve (askgate/transports/http.py:1) 1\n",
        encoding="utf-8",
    )
    run = {"servers": {"askgate": {"server_cpu_us_per_call": 200.0}}}
    stdio = servers(askgate={"server_cpu_us_per_call": 20.0})
    http = servers(askgate={"server_cpu_us_per_call": 150.0})
    missed = [
        t
        for t in report.target_list(stdio, http)
        if report.verdict(t[1], t[2], t[4]).startswith("missed")
    ]
    assert [t[0] for t in missed] == ["HTTP CPU per echo"]
    lines = report.where_the_time_goes(missed, tmp_path, {"http": run})
    assert lines[0] == "### HTTP CPU per echo: missed by 50%"
    assert "| httptools | 75.0% | 150.0 |" in lines  # 3 of 4 samples of 200 us
    assert "| askgate/transports | 25.0% | 50.0 |" in lines


def test_the_startup_section_lists_import_time_by_package(
    report: ModuleType, tmp_path: Path
) -> None:
    startup = {
        "command": "python -m askgate serve --stdio --demo",
        "imports": {
            "modules": 2,
            "total_us": 3000,
            "by_package_us": {"askgate.core": 2000, "anyio": 1000},
            "top_cumulative_us": [{"module": "askgate", "us": 3000}],
        },
        "memory": {"traced_kib": 10.0, "rss_kib": 30000, "by_package_kib": {"attr": 4.0}},
    }
    (tmp_path / "startup.json").write_text(json.dumps(startup), encoding="utf-8")
    missed = [("stdio start + initialize", 150.0, 100, "ms", True, "startup")]
    missed.append(("stdio peak RSS", 30.0, 25, "MiB", True, "memory"))
    lines = report.where_the_time_goes(missed, tmp_path, {})
    assert "| askgate.core | 2.0 |" in lines
    assert "| attr | 4.0 |" in lines
    assert not any("floor" in line for line in lines)  # an older startup.json has none


def test_the_startup_floor_says_what_the_dependencies_alone_cost(
    report: ModuleType, tmp_path: Path
) -> None:
    startup = {
        "command": "python -m askgate serve --stdio --demo",
        "imports": {"modules": 1, "total_us": 1000, "by_package_us": {}, "top_cumulative_us": []},
        "memory": {"traced_kib": 10.0, "rss_kib": 30000, "by_package_kib": {}},
        "floor": {
            "rounds": 3,
            "dependency_modules": 58,
            "bare": {"ready_ms": 20.0, "peak_rss_kib": 10000},
            "dependencies": {"ready_ms": 120.0, "peak_rss_kib": 24000},
            "command": {"ready_ms": 160.0, "peak_rss_kib": 30000},
        },
    }
    (tmp_path / "startup.json").write_text(json.dumps(startup), encoding="utf-8")
    time = report.where_the_time_goes(
        [("stdio start + initialize", 160.0, 100, "ms", True, "startup")], tmp_path, {}
    )
    assert "| asyncio and the dependencies imported (58 modules) | 120.0 |" in time
    assert "The dependencies alone are 75% of the command's time from spawn to ready." in time
    memory = report.where_the_time_goes(
        [("stdio peak RSS", 29.3, 25, "MiB", True, "memory")], tmp_path, {}
    )
    assert "| bare Python | 10 000 |" in memory
    assert "The dependencies alone are 80% of the command's peak resident set." in memory


def test_the_scaling_targets_read_bench_scale_and_bench_core(report: ModuleType) -> None:
    core = {"mixed_per_calibration": 900.0}
    scale = {
        "connections": [{"connections": 1, "events_per_s": 100, "bytes_per_connection": 600}],
        "parked": [
            {"parked": 0, "events_per_s": 100, "bytes_per_parked_call": None},
            {"parked": 64, "events_per_s": 95, "bytes_per_parked_call": 1500},
            {"parked": 1000, "events_per_s": 80, "bytes_per_parked_call": 1200},
        ],
        "cap_over_no_parked": 0.8,
        "most_over_fewest_connections": 0.95,
        "parked_sites": [{"site": "core/store.py:1", "bytes": 500_000, "per": 500}],
    }
    sessions = [
        {"idle_sessions": 0, "cpu_us_per_call": 100.0, "bytes_per_session": None},
        {"idle_sessions": 10000, "cpu_us_per_call": 120.0, "bytes_per_session": 1000},
        # --full: the sessions with the cap parked, untraced; not the idle-session row
        {"idle_sessions": 10000, "parked_calls": 256, "cpu_us_per_call": 105.0},
    ]
    found = {t[0]: t for t in report.scale_targets(core, scale, sessions)}
    verdicts = {name: report.verdict(t[1], t[2], t[4]) for name, t in found.items()}
    assert verdicts["reducer events per calibration, 2x"] == "met"  # 900 >= 2 x 444
    assert verdicts["bytes per parked call"] == "missed by 46%"  # the worst row, 1 500
    assert verdicts["reducer events/s, cap parked over none"] == "missed by 11%"
    assert verdicts["reducer events/s, 10 000 connections over 1"] == "met"
    assert verdicts["bytes per idle HTTP session (10 000)"] == "met"
    assert verdicts["HTTP app CPU per echo beside 10 000 sessions over none"] == "missed by 9%"
    full = "HTTP app CPU per echo beside 10 000 sessions and 256 parked (the cap) over none"
    assert verdicts[full] == "met"  # 1.05x
    table = report.scaling_lines(None, sessions)
    assert "| 10 000 | 256 | 105.0 | 1.05x | n/a | n/a |" in table
    missed = [t for t in found.values() if report.verdict(t[1], t[2], t[4]).startswith("missed")]
    lines = report.scale_explanations(missed, None, scale, sessions)
    assert "### bytes per parked call: missed by 46%" in lines
    assert "| core/store.py:1 | 500 |" in lines  # the allocation sites explain the bytes
    assert "Measured 0.80x against 0.90x." in lines
    assert not any("reducer events per calibration" in line for line in lines)  # met: no section
    # The idle-session target has no profile of its own: the sweep's spread, not the parked
    # calls' profile, explains it.
    at = lines.index("### HTTP app CPU per echo beside 10 000 sessions over none: missed by 9%")
    assert lines[at + 4].startswith("No profile of its own. The idle-session sweep's CPU per echo")
    assert "1.00x then 1.20x" in lines[at + 4]


def test_a_latency_box_needs_every_percentile_of_its_phase(report: ModuleType) -> None:
    figures = {f"elicit_p{p}_us": float(p) for p in (10, 25, 50, 75, 90, 99)}
    figures["elicit_max_us"] = 500.0
    box = report.distribution(figures, "elicit")
    assert box == {
        "whislo": 10.0,
        "q1": 25.0,
        "med": 50.0,
        "q3": 75.0,
        "whishi": 99.0,
        "fliers": [500.0],
    }
    del figures["elicit_p25_us"]  # a run from before the distribution was kept
    assert report.distribution(figures, "elicit") is None
    assert report.distribution(figures, "ping") is None


def test_the_parked_profile_lists_the_largest_growth_first(report: ModuleType) -> None:
    def profile(costs: dict[str, float]) -> dict[str, object]:
        rows = [{"function": n, "own_us_per_event": c} for n, c in costs.items()]
        return {"events": 10, "functions": rows}

    profiles = {
        "0": profile({"step": 1.0, "Map.set": 0.5, "gone": 0.2}),
        "1000": profile({"step": 1.1, "Map.set": 1.5, "new": 0.3}),
    }
    lines = report.parked_profile_lines(profiles)
    table = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert table == [
        "| Map.set | 0.5 | 1.5 |",
        "| new | n/a | 0.3 |",
        "| step | 1.0 | 1.1 |",
        "| gone | 0.2 | n/a |",
    ]
    assert report.parked_profile_lines(None)[0].startswith("(no profile")
