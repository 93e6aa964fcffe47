"""Where askgate's stdio start-up time and memory go: import times and Python allocations.

    python bench/startup_profile.py [--command "python -m askgate serve --stdio --demo"]
        [--top 25] [--rounds 9] [--out bench/results/profile/startup.json]

Three measurements of the same server command line (a Python one, ``PYTHON [-opts] -m MODULE
...``), each with its standard input at end of file, so it starts, serves nothing and exits:

1. under ``-X importtime``: every module imported, with its own and its cumulative import
   time in microseconds, as CPython reports them on standard error. The output keeps the
   ``--top`` modules by cumulative and by own time, and the own time summed per top-level
   package (what a start-up spends importing, by who brings it);
2. under ``-X tracemalloc=16``: at exit (an ``atexit`` hook, or ``os._exit``, which askgate's
   command ends with, wrapped) a snapshot of the Python allocations still held, summed per
   top-level package of the innermost frame outside importlib (the code that allocated, or the
   import statement that brought a module: its code objects and namespace count there), with
   the process's ``VmRSS`` and ``VmHWM`` at that moment. Memory
   that Python's allocator does not see (the interpreter, C extensions' own allocations,
   shared libraries) is the difference between the RSS and the traced total.

Both runs are slower than a plain start (the tracing costs); the shares are what counts.

3. the floor askgate's own code cannot go below: asyncio and the installed packages' modules
   the command has loaded when it exits (its dependencies: anyio, attrs, rapidjson,
   immutables, ..., in the order they were loaded) are listed, and ``--rounds`` times,
   interleaved, three processes start: bare Python, Python importing just those modules, each
   printing a line once done, and the command, sent ``initialize`` (as ``bench/stdio_bench.py``
   does) until its result. The time from spawn to that line and the process's ``VmHWM`` then
   are kept, medians reported: what a start costs before askgate runs a line of its own,
   beside what the whole command costs.

The figures go to ``--out`` as JSON, for ``bench/report.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT = f"{sys.executable} -m askgate serve --stdio --demo"
FRAMES = 16  # deep enough to see past importlib's own frames (about 8) to the importer
TIMEOUT_S = 900  # each run; tracing makes a start-up many times slower, more on a busy machine

TRACED = r"""
import atexit, json, os, runpy, sys, tracemalloc

def dump():
    atexit.unregister(dump)
    snap = tracemalloc.take_snapshot()
    sizes = {}
    for stat in snap.statistics("traceback"):
        # the innermost frame that is not importlib's own: the module whose code allocated,
        # or whose import statement brought the module being loaded (its code and dict)
        names = [f.filename for f in reversed(stat.traceback)]
        name = next((n for n in names if not n.startswith("<frozen")), "<frozen>")
        sizes[name] = sizes.get(name, 0) + stat.size
    status = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                status[key] = int(value.split()[0])
    print("\n" + json.dumps({"files": sizes, "status": status}), file=sys.stderr)

def exit_after_dump(status, _exit=os._exit):
    dump()
    _exit(status)

atexit.register(dump)
os._exit = exit_after_dump  # askgate's command ends with os._exit, which skips atexit
sys.argv = ARGV
runpy.run_module(MODULE, run_name="__main__", alter_sys=True)
"""


def package_of(path: str) -> str:
    """A file's top-level package: ``askgate/core``, ``askgate/transports``, ``anyio``,
    ``stdlib/asyncio`` for the standard library's, ``<frozen>`` and ``<string>`` as they are."""
    if path.startswith("<"):
        return path.split(" ", maxsplit=1)[0].rstrip(">") + ">"
    for mark in ("/site-packages/", "/dist-packages/"):
        if mark in path:
            rest = path.split(mark, 1)[1]
            return rest.split("/", 1)[0].removesuffix(".py")
    parts = Path(path).parts
    if "askgate" in parts or "core" in parts or "transports" in parts:
        for root in ("core", "transports", "models", "adapters"):
            if root in parts:
                return f"askgate/{root}"
        return "askgate"
    for i, part in enumerate(parts[:-1]):
        if part.startswith("python3"):
            return "stdlib/" + parts[i + 1].removesuffix(".py")
    return path


def module_package(module: str) -> str:
    """An imported module's owner: ``askgate.core`` for ``askgate.core.x``, else its root."""
    parts = module.strip().split(".")
    if parts[0] == "askgate" and len(parts) > 1 and parts[1] in ("core", "transports"):
        return ".".join(parts[:2])
    return parts[0]


def split_module_argv(argv: list[str]) -> tuple[list[str], str, list[str]]:
    """(python with its options, module, the module's arguments) of ``PYTHON [-opts] -m M ...``."""
    if "-m" not in argv[:-1]:
        raise SystemExit(f"not a 'PYTHON -m MODULE' command line: {shlex.join(argv)}")
    at = argv.index("-m")
    return argv[:at], argv[at + 1], argv[at + 2 :]


def import_times(argv: list[str], top: int) -> dict[str, Any]:
    python, module, rest = split_module_argv(argv)
    done = subprocess.run(
        [*python, "-X", "importtime", "-m", module, *rest],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    rows: list[tuple[str, int, int]] = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own_text, cumulative_text, module = line.removeprefix("import time:").split("|", 2)
        rows.append((module.strip(), int(own_text), int(cumulative_text)))
    per_package: dict[str, int] = {}
    for module, own, _ in rows:
        per_package[module_package(module)] = per_package.get(module_package(module), 0) + own
    total = sum(own for _, own, _ in rows)
    return {
        "modules": len(rows),
        "total_us": total,
        "by_package_us": dict(sorted(per_package.items(), key=lambda kv: -kv[1])[:top]),
        "top_cumulative_us": [
            {"module": n, "us": c} for n, _, c in sorted(rows, key=lambda r: -r[2])[:top]
        ],
        "top_self_us": [
            {"module": n, "us": o} for n, o, _ in sorted(rows, key=lambda r: -r[1])[:top]
        ],
    }


def probed(argv: list[str], probe: str, *options: str) -> str:
    """The last line the command's module, run under ``probe`` (Python source that runs it
    and prints on standard error), printed there; ``""`` when it printed nothing."""
    python, module, rest = split_module_argv(argv)
    code = f"ARGV = {[module, *rest]!r}\nMODULE = {module!r}\n" + probe
    done = subprocess.run(
        [*python, *options, "-c", code],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""


def allocations(argv: list[str], top: int) -> dict[str, Any]:
    last = probed(argv, TRACED, "-X", f"tracemalloc={FRAMES}")
    try:
        data = json.loads(last)
    except ValueError:
        raise SystemExit(f"the traced run printed no snapshot: {last[-2000:]}") from None
    per_package: dict[str, int] = {}
    for path, size in data["files"].items():
        per_package[package_of(path)] = per_package.get(package_of(path), 0) + size
    traced = sum(per_package.values())
    status = data["status"]
    return {
        "traced_kib": round(traced / 1024, 1),
        "rss_kib": status.get("VmRSS"),
        "hwm_kib": status.get("VmHWM"),
        "by_package_kib": {
            k: round(v / 1024, 1)
            for k, v in sorted(per_package.items(), key=lambda kv: -kv[1])[:top]
        },
    }


LOADED = r"""
import atexit, json, os, sys

def dump():
    atexit.unregister(dump)
    names = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if "/site-packages/" in path or "/dist-packages/" in path:
            names.append(name)
    print("\n" + json.dumps(names), file=sys.stderr)

def exit_after_dump(status, _exit=os._exit):
    dump()
    _exit(status)

atexit.register(dump)
os._exit = exit_after_dump
import runpy
sys.argv = ARGV
runpy.run_module(MODULE, run_name="__main__", alter_sys=True)
"""


def loaded_modules(argv: list[str]) -> list[str]:
    """``asyncio`` (what anyio runs on), then the installed packages' modules the command has
    loaded when it exits, in the order they were loaded: its dependencies, without askgate
    itself (an editable install's askgate lives outside site-packages; a wheel's is dropped
    here) and without the standard library modules askgate itself chooses to import."""
    names = [str(n) for n in json.loads(probed(argv, LOADED) or "[]")]
    skip = ("askgate", "_distutils_hack")
    kept = (n for n in names if n.split(".")[0] not in skip and "__editable__" not in n)
    return ["asyncio", *kept]


INITIALIZE = (
    b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
    b'"capabilities":{},"clientInfo":{"name":"startup_profile","version":"0"}}}\n'
)
READY = "import sys\nsys.stdout.write('ready\\n')\nsys.stdout.flush()\nsys.stdin.read()\n"


def peak_rss_kib(pid: int) -> int:
    """The process's ``VmHWM`` (peak resident set of its own address space, reset at exec)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise SystemExit(f"/proc/{pid}/status has no VmHWM")


def ready_time(argv: list[str], request: bytes) -> tuple[float, int]:
    """Start ``argv``, write ``request``, wait for its first line of output: (seconds from
    spawn to that line, ``VmHWM`` then in KiB). Then its standard input ends and it is waited
    for."""
    start = time.perf_counter()
    child = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert child.stdin is not None
    assert child.stdout is not None
    child.stdin.write(request)
    child.stdin.flush()
    line = child.stdout.readline()
    seconds = time.perf_counter() - start
    peak = peak_rss_kib(child.pid)
    child.stdin.close()
    child.stdout.read()
    child.wait(timeout=TIMEOUT_S)
    if not line:
        raise SystemExit(f"{shlex.join(argv)[:200]} printed nothing")
    return seconds, peak


def floor(argv: list[str], rounds: int) -> dict[str, Any]:
    """Bare Python, Python importing asyncio and the command's dependencies, and the
    command up to its ``initialize`` result, started ``rounds`` times interleaved: medians of
    the time to ready and of the peak resident set then."""
    python, _, _ = split_module_argv(argv)
    modules = loaded_modules(argv)
    body = "\n".join(f"try:\n    import {name}\nexcept Exception:\n    pass" for name in modules)
    runs = {
        "bare": ([*python, "-c", READY], b""),
        "dependencies": ([*python, "-c", body + "\n" + READY], b""),
        "command": (argv, INITIALIZE),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    peaks: dict[str, list[int]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, (run, request) in runs.items():
            seconds, peak = ready_time(run, request)
            times[name].append(seconds)
            peaks[name].append(peak)
    return {
        "rounds": rounds,
        "dependency_modules": len(modules),
        **{
            name: {
                "ready_ms": round(statistics.median(times[name]) * 1000, 1),
                "peak_rss_kib": int(statistics.median(peaks[name])),
            }
            for name in runs
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--command", default=DEFAULT, help="a PYTHON -m MODULE command line")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=9, help="interleaved starts for the floor")
    parser.add_argument("--out", type=Path, default=Path("bench/results/profile/startup.json"))
    args = parser.parse_args()
    argv = shlex.split(args.command)
    report = {
        "command": args.command,
        "imports": import_times(argv, args.top),
        "memory": allocations(argv, args.top),
        "floor": floor(argv, args.rounds),
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
