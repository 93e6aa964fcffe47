"""The HTTP app alone, in process: CPU per echo ``tools/call`` POST through askgate's ASGI app.

    python bench/http_app_bench.py [--calls 5000] [--rounds 3] [--sessions N ...]

No server, no sockets, no HTTP parser: the app (``askgate.transports.http.HttpApp`` around the
demo) is called as askgate's own uvicorn protocol would call it, with a complete body marked as
such in the scope (``askgate.transports.asgi.BODY_WHOLE``) and a ``send`` that keeps what it is
given, one POST after another on one session. What it measures is the cost of askgate's own
shell and reducer per call, apart from uvicorn and the kernel, so a change to either shows
without the noise of a loaded machine's network stack. ``make bench-compare`` runs it for the
base tree and this one. Prints the median of the rounds, in microseconds of CPU per call.

With ``--sessions N ...`` it builds one app per N, all live at once: N idle sessions opened
first (each an ``initialize`` POST and its ``notifications/initialized``; the app's session cap
raised to fit), their cost in memory measured with ``tracemalloc`` (bytes still allocated once
they are open, divided by N: the shell's session table and the reducer's connection together),
then the echo calls on one more session, in interleaved rounds (each round measures every app in
turn), so that a drift of the machine's speed during the run moves every N alike. The N
sessions are also opened once more in a fresh interpreter, untraced, and the growth of its
resident set (``VmRSS``; Linux only) is divided by N: what the operating system sees, coarser
than the traced figure (pymalloc takes memory in arenas of 1 MiB), and in a fresh process
because one that has freed memory opens sessions into it unseen.
The source lines that allocated most of the traced bytes are listed per N (``sites``).
``--full N`` adds one more app, measured in the same rounds: N idle sessions, each of its own
principal (a parking owner, R-PARK-1), and on the last of them one parked ``guarded_echo`` call
each up to the server's total cap of parked calls (each a POST whose SSE stream stays open with
its ``elicitation/create`` unanswered): the server the performance issue's target names, "10 000
sessions and the total cap parked", beside the empty one (N of 0).
``--out FILE`` writes the figures per N as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Mapping, MutableMapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from scale_bench import rss_bytes

from askgate.core.http import HttpOptions
from askgate.demo import build_demo
from askgate.transports.http import HttpApp

Message = MutableMapping[str, Any]
HEADERS = [
    (b"host", b"127.0.0.1:8765"),
    (b"content-type", b"application/json"),
    (b"accept", b"application/json, text/event-stream"),
]


async def _post(app: HttpApp, body: bytes, extra: list[tuple[bytes, bytes]]) -> list[Message]:
    out: list[Message] = []
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        out.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "headers": HEADERS + extra,
        "client": ("127.0.0.1", 50000),
        "askgate.body_whole": True,  # asgi.BODY_WHOLE: askgate's uvicorn protocol marks it so
    }
    await app(scope, receive, send)
    return out


def _call(request_id: int) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call",'
        b'"params":{"name":"echo","arguments":{"text":"hello"}}}' % request_id
    )


INIT = (
    b'{"jsonrpc":"2.0","id":0,"method":"initialize",'
    b'"params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}}}}'
)
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
ASK = (
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
    b'"params":{"name":"guarded_echo","arguments":{"text":"parked"}}}'
)


async def open_session(app: HttpApp, user: bytes = b"") -> list[tuple[bytes, bytes]]:
    """A new initialized session (of the principal ``user`` names, under :func:`by_user`);
    the headers that name it."""
    who = [(USER, user)] if user else []
    answer = await _post(app, INIT, who)
    session = dict(answer[0]["headers"])[b"mcp-session-id"]
    extra = [(b"mcp-session-id", session), (b"mcp-protocol-version", b"2025-06-18"), *who]
    done = await _post(app, INITIALIZED, extra)
    if done[0]["status"] != 202:
        raise SystemExit(f"notifications/initialized was answered {done[0]['status']}")
    return extra


SITES = 12  # allocation sites listed per number of idle sessions


def top_sites(count: int) -> list[dict[str, str | int]]:
    """The source lines holding most of what tracemalloc traced, with bytes per ``count``."""
    ignore = tracemalloc.Filter(inclusive=False, filename_pattern=tracemalloc.__file__)
    snapshot = tracemalloc.take_snapshot().filter_traces([ignore])
    top: list[dict[str, str | int]] = []
    for stat in snapshot.statistics("lineno")[:SITES]:
        frame = stat.traceback[0]
        where = "/".join(Path(frame.filename).parts[-2:])
        top.append({"site": f"{where}:{frame.lineno}", "bytes": stat.size})
        top[-1]["per"] = round(stat.size / count)
    return top


class Bench:
    """One app, its idle sessions opened, and the session its echo calls go to."""

    def __init__(self, app: HttpApp, extra: list[tuple[bytes, bytes]]) -> None:
        self.app, self.extra, self.next_id = app, extra, 1

    async def calls(self, count: int) -> float:
        """CPU microseconds per echo call over ``count`` calls, one after another."""
        bodies = [_call(self.next_id + i) for i in range(count)]
        self.next_id += count
        began = time.process_time()
        for body in bodies:
            answer = await _post(self.app, body, self.extra)
        spent = (time.process_time() - began) / count * 1e6
        if answer[0]["status"] != 200:
            raise SystemExit(f"an echo call was answered {answer[0]['status']}")
        return spent


USER = b"x-bench-user"


def by_user(headers: Mapping[str, str], client: str | None) -> str | None:  # noqa: ARG001
    """The bench's auth provider for the parked app: the principal its header names, else
    ``local``. Every principal is one parking owner (R-PARK-1) holding at most
    ``max_parked_elicitations``, so the total cap is parked by many users, one call each."""
    return headers.get(USER.decode(), "local")


PARK_CHECKS = 100_000  # loop turns allowed for the parked calls to park, in all


async def park(
    stack: AsyncExitStack, app: HttpApp, sessions: list[list[tuple[bytes, bytes]]]
) -> int:
    """One parked ``guarded_echo`` call on each of the last ``sessions``, up to the server's
    total cap; their streams stay open until ``stack`` closes. How many parked. The last: the
    server keeps the capabilities of a bounded number of connections (R-CAP), the newest, and
    one whose entry was evicted cannot be asked."""
    cap = app.runtime.state.options.max_parked_elicitations_total
    chosen = sessions[-cap:]
    group = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(group.cancel_scope.cancel)  # runs first: the streams never end by themselves
    for extra in chosen:
        group.start_soon(_post, app, ASK, extra)
    for _ in range(PARK_CHECKS):
        if app.runtime.state.parked_total == len(chosen):
            return len(chosen)
        await anyio.sleep(0)
    raise SystemExit(f"{app.runtime.state.parked_total} of {len(chosen)} calls parked")


async def prepare(
    stack: AsyncExitStack,
    idle: int,
    memory: dict[str, float],
    sites: list[dict[str, str | int]],
    parked: bool = False,
) -> Bench:
    """A running app beside ``idle`` idle sessions (their memory traced into ``memory`` and
    ``sites``), or with ``parked``, beside ``idle`` untraced sessions and the total cap of calls
    parked on them (how many goes into ``memory``); warmed up on one more session."""
    server = build_demo(configured=True, max_in_flight=64, max_in_flight_per_connection=32)
    room = max(1024, idle + 2)  # every idle session is local's (R-HTTP-36's quota raised too)
    limit = HttpOptions(max_sessions=room, max_sessions_per_principal=room)
    app = HttpApp(server, options=limit, auth=by_user if parked else None)
    await stack.enter_async_context(app.running())
    if parked:  # untraced: the headers kept to park on would count as the sessions' bytes
        opened = [await open_session(app, b"u%d" % n) for n in range(idle)]
        memory["parked_calls"] = await park(stack, app, opened)
    elif idle:
        await open_session(app)  # the first session's one-time allocations, not counted
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(idle):
            await open_session(app)
        after = tracemalloc.get_traced_memory()[0]
        sites.extend(top_sites(idle))
        tracemalloc.stop()
        memory["bytes_per_session"] = (after - before) / idle
    bench = Bench(app, await open_session(app))
    await bench.calls(200)  # warm up
    return bench


async def measure(
    calls: int,
    rounds: int,
    idles: list[int],
    memory: list[dict[str, float]],
    sites: list[list[dict[str, str | int]]],
    full: int | None = None,
) -> list[list[float]]:
    """Per number of idle sessions, its rounds' CPU per call (and last, with ``full``, the app
    beside ``full`` sessions and the cap parked). All the apps are prepared first (all of them
    live at once) and then measured in interleaved rounds, so that a drift of the machine's
    speed during the run moves every figure alike and their ratios stay."""
    plan = [(idle, False) for idle in idles] + ([] if full is None else [(full, True)])
    figures: list[list[float]] = [[] for _ in plan]
    async with AsyncExitStack() as stack:
        benches = []
        for n, (idle, parked) in enumerate(plan):
            benches.append(await prepare(stack, idle, memory[n], sites[n], parked))
        for _ in range(rounds):
            for n, bench in enumerate(benches):
                figures[n].append(await bench.calls(calls))
    return figures


async def rss_child(idle: int) -> None:
    """Child mode: one session opened first (one-time allocations), then ``idle`` more; prints
    the resident set's growth over those, in bytes (-1 without /proc)."""
    server = build_demo(configured=True, max_in_flight=64, max_in_flight_per_connection=32)
    room = max(1024, idle + 2)  # every idle session is local's (R-HTTP-36's quota raised too)
    app = HttpApp(server, options=HttpOptions(max_sessions=room, max_sessions_per_principal=room))
    async with app.running():
        await open_session(app)
        before = rss_bytes()
        for _ in range(idle):
            await open_session(app)
        after = rss_bytes()
    print(-1 if before is None or after is None else after - before)


def rss_per_session(idle: int) -> int | None:
    """Bytes of resident set per idle session, opened in a fresh interpreter."""
    me = str(Path(__file__).resolve())
    done = subprocess.run(
        [sys.executable, me, "--rss-child", str(idle)], capture_output=True, text=True, check=True
    )
    grew = int(done.stdout.strip())
    return None if grew < 0 else round(grew / idle)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sessions", type=int, nargs="+", help="idle sessions, one run each")
    parser.add_argument(
        "--full", type=int, help="also N idle sessions with the total cap of calls parked on them"
    )
    parser.add_argument("--out", type=Path, help="the figures as JSON")
    parser.add_argument("--rss-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        anyio.run(rss_child, args.rss_child)
        return 0
    report: list[dict[str, object]] = []
    idles = args.sessions or [0]
    plan = idles + ([] if args.full is None else [args.full])
    memory: list[dict[str, float]] = [{} for _ in plan]
    sites: list[list[dict[str, str | int]]] = [[] for _ in plan]
    all_figures = anyio.run(measure, args.calls, args.rounds, idles, memory, sites, args.full)
    rss_of: dict[int, int | None] = {}  # the traced and untraced apps of one N share it
    for idle, figures, held, top in zip(plan, all_figures, memory, sites, strict=True):
        rounds = ", ".join(f"{f:.1f}" for f in figures)
        cpu = statistics.median(figures)
        per = held.get("bytes_per_session")
        parked = int(held.get("parked_calls", 0))
        if per is not None and idle not in rss_of:
            rss_of[idle] = rss_per_session(idle)
        rss = rss_of.get(idle) if per is not None else None
        where = f" beside {idle} idle sessions" if idle else ""
        if per is not None:
            where += f" ({per:,.0f} bytes each"
            where += f", resident set {rss:,} each)" if rss is not None else ")"
        where += f" and {parked} parked calls" if parked else ""
        print(f"app CPU per echo call{where}: {cpu:.1f} us (rounds: {rounds})")
        report.append(
            {
                "idle_sessions": idle,
                "parked_calls": parked,
                "cpu_us_per_call": round(cpu, 1),
                "rounds_us": [round(f, 1) for f in figures],
                "bytes_per_session": None if per is None else round(per),
                "rss_bytes_per_session": rss,
                "sites": top,
            }
        )
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
