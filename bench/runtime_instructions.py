"""Instructions the runtime executes per exchange, fed in process, counted by valgrind: the
reducer, the codec and the shell's performers (eager workers, timers, records, the writer)
without the event loop's reads and writes, so that every run takes the same path.

    python bench/runtime_instructions.py --tree /tmp/base --tree /tmp/mine [--phase echo elicit]

Each ``--tree`` (a checkout, old or new: ``bench/trees.py`` lays it out as its wheel would, in
a temporary folder) serves the demo server (``askgate.demo.build_demo``) in a
:class:`~askgate.transports.runtime.Runtime` on uvloop, run with ``python -P``,
``PYTHONPATH=<that folder>`` and ``PYTHONHASHSEED=0`` from outside every tree under
``valgrind --tool=callgrind``. The client's lines are encoded before anything
is counted and fed as ``MessageReceived``; the replies are collected by a writer that keeps
them. ``echo`` is ``tools/call echo``; ``elicit`` is ``tools/call guarded_echo`` and the answer
(accept) to its ``elicitation/create``. Every tree runs ``FEW`` and ``MANY`` exchanges; the
figure is the difference of the totals over ``MANY - FEW``. Unlike ``stdio_instructions.py``,
the figure does not depend on how the peer's lines happen to arrive (one per read or several).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the sibling benchmarks (also under -P)
from core_instructions import callgrind, instructions
from stdio_instructions import INIT
from trees import laid_out

FEW, MANY = 100, 500


def child(phase: str, count: int) -> None:
    """Child mode: serves the demo in process and feeds ``count`` exchanges of ``phase``."""
    import anyio  # noqa: PLC0415 (the child's own imports, from the tree under test)

    from askgate.core import SubscriberAttached  # noqa: PLC0415
    from askgate.core.events import MessageReceived  # noqa: PLC0415
    from askgate.demo import build_demo  # noqa: PLC0415

    tool = "echo" if phase == "echo" else "guarded_echo"
    calls = [
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": i,
                "method": "tools/call",
                "params": {"name": tool, "arguments": {"text": "hello"}},
            }
        ).encode()
        for i in range(1, count + 1)
    ]
    head = b'{"jsonrpc":"2.0","id":"'  # how the server writes its elicitation/create
    accept = b'","result":{"action":"accept","content":{"approve":true}}}'

    async def main() -> None:
        out: list[bytes] = []
        async with build_demo().running("stdio") as runtime:
            runtime.attach("stdio", out.append)
            runtime.feed(SubscriberAttached("stdio", runtime.now()))
            for message in (INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"}):
                runtime.feed(MessageReceived("stdio", json.dumps(message).encode(), runtime.now()))
            for line in calls:
                runtime.feed(MessageReceived("stdio", line, runtime.now()))
                if phase == "elicit":  # the answer to the request just written, by its id
                    ask = out[-1]
                    if not ask.startswith(head):
                        raise SystemExit(f"no elicitation/create: {ask!r}")
                    request_id = ask[len(head) : ask.index(b'"', len(head))]
                    runtime.feed(
                        MessageReceived("stdio", head + request_id + accept, runtime.now())
                    )
        expected = 1 + count * (1 if phase == "echo" else 2)  # initialize's reply first
        if len(out) != expected or b'"result":{"content"' not in out[-1]:
            raise SystemExit(f"{len(out)} replies, not {expected}; the last: {out[-1]!r}")

    anyio.run(main, backend="asyncio", backend_options={"use_uvloop": True})


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tree", action="append", default=[], help="a checkout (repeatable)")
    parser.add_argument("--phase", nargs="*", default=["echo", "elicit"])
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return 0
    trees = args.tree or ["."]
    with laid_out(trees) as paths:
        for phase in args.phase:
            for tree, path in zip(trees, paths, strict=True):
                few = callgrind(__file__, path, phase, str(FEW))  # two at a time
                many = callgrind(__file__, path, phase, str(MANY))
                per = (instructions(many) - instructions(few)) / (MANY - FEW)
                print(f"{tree:>24} {phase:>7}: {per:12,.0f} instructions per exchange", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
