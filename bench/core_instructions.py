"""Instructions the reducer executes per event, counted by valgrind: a figure machine load does
not move, for comparing two checkouts of the reducer on a shared, noisy machine.

    python bench/core_instructions.py --tree /tmp/base --tree . [--workload mixed p0 p1000]

Each ``--tree`` (a checkout, old or new: ``bench/trees.py`` lays it out as its wheel would, in
a temporary folder) replays ``core_bench.py``'s workloads through ``step`` under
``valgrind --tool=callgrind``, run with ``python -P`` and ``PYTHONPATH=<that folder>`` from
outside every tree, with ``PYTHONHASHSEED=0``. *mixed* is core_bench's mixed workload; *pN* is
scale_bench's single-connection workload beside N parked calls (1 023 holders, a total cap of
1 024). Every workload is recorded in full and replayed once for 2 000 and once for 6 000 of its
events; the figure is the difference of the two totals over 4 000, so that start-up, building
the state and recording cancel out.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the sibling helpers (also under -P)
from trees import laid_out

FEW, MANY = 2_000, 6_000
COLLECTED = re.compile(r"Collected : (\d+)")


def child(tree: str, workload: str, count: int) -> None:
    """Child mode: records the workload's ``MANY`` events and replays the first ``count``."""
    sys.path.insert(0, str(Path(tree) / "bench"))
    from core_bench import KEY, TOOLS, connect, fill, record  # noqa: PLC0415

    from askgate.core import Options, initial_state, step  # noqa: PLC0415

    if workload == "mixed":
        options = Options(has_authorizer=True, max_parked_elicitations_total=512)
        conns = [f"w{i}" for i in range(16)]
        start = connect(initial_state(options, id_key=KEY, tools=TOOLS), conns)
        concurrency = 32
    else:
        options = Options(has_authorizer=True, max_parked_elicitations_total=1024)
        holders = [f"h{i}" for i in range(1023)]
        base = initial_state(options, id_key=KEY, tools=TOOLS)
        conns = ["w0"]
        start = fill(connect(connect(base, holders), conns), holders, int(workload[1:]))
        concurrency = 8
    events = record(start, conns, MANY, concurrency)[:count]
    state = start
    for event in events:
        state, _ = step(state, event)


def callgrind(script: str, path: str, *args: str) -> subprocess.Popen[str]:
    """Starts ``python -P <script> --child <args>`` under callgrind, with ``PYTHONPATH=<path>``
    (a checkout laid out by ``trees.lay_out``) and ``PYTHONHASHSEED=0``, from outside every
    tree (``/``); :func:`instructions` waits."""
    env = dict(os.environ, PYTHONPATH=str(Path(path).resolve()), PYTHONHASHSEED="0")
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable]
    command += ["-P", str(Path(script).resolve()), "--child", *args]
    return subprocess.Popen(
        command, env=env, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def instructions(run: subprocess.Popen[str]) -> int:
    """The instructions callgrind counted for a :func:`callgrind` run, once it ends."""
    _, err = run.communicate()
    found = COLLECTED.search(err)
    if run.returncode != 0 or found is None:
        raise SystemExit(f"no instruction count from callgrind:\n{err[-2000:]}")
    return int(found.group(1))


def collected(tree: str, path: str, workload: str, count: int) -> int:
    """Instructions callgrind counts for one child run of ``tree``'s code, laid out in
    ``path``."""
    return instructions(callgrind(__file__, path, tree, workload, str(count)))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tree", action="append", default=[], help="a checkout (repeatable)")
    parser.add_argument("--workload", nargs="*", default=["mixed", "p0", "p1000"])
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    trees = [str(Path(tree).resolve()) for tree in args.tree or ["."]]
    with laid_out(trees) as paths:
        for workload in args.workload:
            figures = []
            for tree, path in zip(trees, paths, strict=True):
                few = collected(tree, path, workload, FEW)
                many = collected(tree, path, workload, MANY)
                figures.append((many - few) / (MANY - FEW))
            report(workload, trees, figures)
    return 0


def report(workload: str, trees: list[str], figures: list[float]) -> None:
    """One line: each tree's instructions per event, and its ratio to the first tree's."""
    shown = ", ".join(f"{tree}: {n:,.0f}" for tree, n in zip(trees, figures, strict=True))
    ratios = ", ".join(f"{n / figures[0]:.3f}" for n in figures)
    print(f"{workload}: instructions per event {shown}; over the first {ratios}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
