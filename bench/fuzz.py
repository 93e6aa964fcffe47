"""`make fuzz DURATION=...`: the long fuzz runs, not part of make test or CI.

    python bench/fuzz.py --duration 300

1. The live fuzzer (tests/fuzz_live.py) for half the time: Hypothesis inputs against live
   servers over stdio and Streamable HTTP, in batches, each input followed by its three checks.
2. Coverage-guided fuzzing of the codec and the message layer (tests/fuzz_codec.py) under
   atheris (libFuzzer's byte mutations steered by the coverage of askgate's Python code) for
   the other half, in a child process, its corpus in ``.fuzz/corpus`` (kept between runs) and
   any crashing input written to ``.fuzz/crashes/``. A crash is fixed and its input saved in
   ``tests/fuzz_regressions/``, which make test replays.

It prints the inputs run and the failures found, and exits 1 when there was one.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUZZ_DIR = ROOT / ".fuzz"


def live(seconds: float) -> tuple[dict[str, int], list[str]]:
    """Runs the live fuzzer for ``seconds``; the inputs run per transport and the failures."""
    from hypothesis import HealthCheck, given, settings  # noqa: PLC0415

    from tests.fuzz_live import live_servers, programs  # noqa: PLC0415

    failures: list[str] = []
    health = list(HealthCheck)
    with live_servers() as servers:
        runs = {"stdio": servers.run_stdio, "http": servers.run_http}
        batch = {"stdio": 200, "http": 10}
        until = time.monotonic() + seconds
        for round_ in range(100_000):
            if time.monotonic() >= until:
                break
            for name, run in runs.items():
                fuzz = settings(
                    max_examples=batch[name],
                    deadline=None,
                    suppress_health_check=health,
                    database=None,
                )(given(program=programs())(run))
                try:
                    fuzz()
                except Exception as exc:
                    failures.append(f"{name} (round {round_}): {exc!s}"[:2000])
                    if len(failures) > 5:
                        return dict(servers.inputs), failures
        return dict(servers.inputs), failures


def codec(seconds: int) -> tuple[int, list[str]]:
    """Runs atheris on the codec and the message layer for ``seconds`` in a child process; the
    inputs it ran and the crashes it wrote."""
    corpus, crashes = FUZZ_DIR / "corpus", FUZZ_DIR / "crashes"
    corpus.mkdir(parents=True, exist_ok=True)
    crashes.mkdir(parents=True, exist_ok=True)
    before = set(os.listdir(crashes))
    command = [
        sys.executable,
        __file__,
        "--atheris-child",
        f"-max_total_time={seconds}",
        f"-artifact_prefix={crashes}/",
        "-print_final_stats=1",
        str(corpus),
    ]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, check=False, timeout=seconds + 120
    )
    runs = 0
    for line in done.stderr.splitlines():
        if match := re.search(r"Done (\d+) runs", line):
            runs = int(match.group(1))
        elif match := re.search(r"stat::number_of_executed_units:\s*(\d+)", line):
            runs = max(runs, int(match.group(1)))
    found = sorted(set(os.listdir(crashes)) - before)
    if done.returncode != 0 and not found:
        found = [f"atheris exited {done.returncode}: {done.stderr[-2000:]}"]
    return runs, found


def atheris_child(argv: list[str]) -> None:
    """Inside the child: instrument askgate, seed the corpus, hand over to libFuzzer."""
    import atheris  # noqa: PLC0415

    with atheris.instrument_imports(include=["askgate"]):
        from tests.fuzz_codec import SEEDS, one_input  # noqa: PLC0415

    corpus = Path(argv[-1])
    for n, seed in enumerate(SEEDS):
        (corpus / f"seed-{n}").write_bytes(seed)
    atheris.Setup([sys.argv[0], *argv], one_input)
    atheris.Fuzz()


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--atheris-child":
        sys.path.insert(0, str(ROOT))
        atheris_child(sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=120, help="seconds in all")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    half = max(1, args.duration // 2)
    started = time.monotonic()
    inputs, failures = live(half)
    took = time.monotonic() - started
    print(f"live fuzzer: {sum(inputs.values())} inputs ({inputs}) in {took:.0f} s")
    for failure in failures:
        print(f"  FAILED {failure}")
    started = time.monotonic()
    runs, crashes = codec(half)
    print(f"atheris, codec and message layer: {runs} inputs in {time.monotonic() - started:.0f} s")
    for crash in crashes:
        print(f"  CRASH {crash} (in {FUZZ_DIR / 'crashes'})")
    return 1 if failures or crashes else 0


if __name__ == "__main__":
    raise SystemExit(main())
