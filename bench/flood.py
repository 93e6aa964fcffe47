"""The flood, measured: `askgate serve --demo --http` on 127.0.0.1 in a subprocess, in debug mode
(``ASKGATE_CHECK_INVARIANTS=1``: every step checked, caps included), under the clients of
tests/flood_clients.py: sessions that park one call each (the victims), a crowd of sessions each
asking three times its cap, one session asking ten times the total cap, (``--mallory``) one
principal spreading ten times the total cap over as many sessions as the total cap,
(``--modern``) one principal sending ten times the total cap of stateless 2026-07-28 ASKs at once
(each answered at once with an input-required result or a deny, never retried), (``--legacy``)
one principal spreading ten times the total cap over as many 2024-11-05 ``/sse`` sessions as the
total cap, uninitialized, in both eras' shapes, and (``--stateless``) one principal sending more
slow stateless ``sleep`` calls than the server has workers while each victim principal's
stateless ``echo`` must be served. Each victim and crowd session is a principal of its own;
parking places are counted by principal (R-PARK-1). It exits 1 when a round leaves a victim
unserved.

    python bench/flood.py --per-conn 4 --total 32 --victims 8 --crowd 16 --legacy --stateless

It prints the calls parked and denied by detail, the victims served after the flood, the largest
state the server saw, and the server's RSS before (after a warm-up session), at its peak
(sampled every 50 ms) and after (every session ended, then 2 s), and its open descriptors, for
each of ``--rounds`` floods in a row on the same server (memory the allocator kept after the
first is reused by the next, where a leak would grow round after round).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from soak import LARGEST, proc_figures, wait_listening  # noqa: E402

from tests.flood_clients import TOKENS, Session, flood  # noqa: E402

MAX_IN_FLIGHT = 32  # the server's default max_in_flight (Options)
SLOW_CALLS = MAX_IN_FLIGHT + 8  # more slow calls than the server has workers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def warm_up(url: str) -> None:
    """One session, one call asked and approved, the session ended."""
    async with httpx2.AsyncClient(timeout=20) as http:
        session = Session(http, url, "victim-0")
        await session.open()
        done = anyio.Event()

        async def on_message(message: dict[str, Any]) -> None:
            if message.get("method") == "elicitation/create":
                answer = {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "result": {"action": "accept", "content": {"approve": True}},
                }
                await http.post(url, json=answer, headers=session.headers)
            elif message.get("id") == "warm":
                done.set()

        await session.ask("warm", anyio.Event(), on_message)
        await session.close()


async def main(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="askgate-flood-"))
    tokens = work / "tokens"
    tokens.write_text("".join(f"{name} {token}\n" for name, token in TOKENS.items()))
    log = work / "server.log"
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    command = [
        sys.executable,
        "-m",
        "askgate",
        "serve",
        "--demo",
        "--http",
        f"127.0.0.1:{port}",
        "--auth",
        "bearer",
        "--tokens",
        str(tokens),
        "--max-parked",
        str(args.per_conn),
        "--max-parked-total",
        str(args.total),
        "--elicitation-timeout-ms",
        "600000",
    ]
    if args.trace:  # spec/audit.md: every event and effect, for `askgate replay --keys`
        command += ["--trace", args.trace, "--trace-arguments"]
        command += ["--trace-keys", f"{args.trace}.keys"]
    if args.audit_log:
        command += ["--audit-log", args.audit_log]
    env = {**os.environ, "ASKGATE_CHECK_INVARIANTS": "1"}
    with open(log, "wb") as out:
        process = await anyio.open_process(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env
        )
    samples: list[tuple[int, int]] = []
    async with process:
        try:
            await wait_listening(url, log)
            await warm_up(url)
            before = proc_figures(process.pid)
            phases: list[str] = []
            sampling = True

            async def sample() -> None:
                for _ in range(100_000):
                    if not sampling:
                        return
                    samples.append(proc_figures(process.pid))
                    await anyio.sleep(0.05)

            rounds: list[dict[str, Any]] = []
            for _ in range(args.rounds):
                samples.clear()
                sampling = True
                async with anyio.create_task_group() as tg:
                    tg.start_soon(sample)
                    started = time.monotonic()
                    figures = await flood(
                        url,
                        victims=args.victims,
                        crowd=args.crowd,
                        per_conn=args.per_conn,
                        total=args.total,
                        mallory_sessions=args.total if args.mallory else 0,
                        deadline=120,
                        during=phases.append,
                        modern_asks=10 * args.total if args.modern else 0,
                        legacy_sessions=args.total if args.legacy else 0,
                        slow_calls=SLOW_CALLS if args.stateless else 0,
                        max_in_flight=MAX_IN_FLIGHT,
                    )
                    took = time.monotonic() - started
                    sampling = False
                await anyio.sleep(2)  # a measurement pause, not a synchronisation
                after = proc_figures(process.pid)
                rounds.append(
                    {
                        "seconds": round(took, 1),
                        **figures.as_dict(),
                        "rss_kib": {
                            "peak": max(s[0] for s in samples),
                            "after": after[0],
                        },
                        "fds": {"peak": max(s[1] for s in samples), "after": after[1]},
                    }
                )
        finally:
            process.terminate()
            with anyio.move_on_after(20):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
    text = log.read_text(errors="replace")
    largest = ""
    for line in text.splitlines():
        if match := LARGEST.search(line):
            largest = match.group(1)
    result = {
        "caps": {"per_session": args.per_conn, "total": args.total},
        "victims": args.victims,
        "crowd_sessions": args.crowd,
        "mallory_sessions": args.total if args.mallory else 0,
        "modern_asks": 10 * args.total if args.modern else 0,
        "legacy_sessions": args.total if args.legacy else 0,
        "slow_calls": SLOW_CALLS if args.stateless else 0,
        "before": {"rss_kib": before[0], "fds": before[1]},
        "rounds": rounds,
        "largest_state": largest,
        "invariant_failures": text.count("InvariantError"),
        "server_exit": process.returncode,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    unserved = any(
        r["victims_served"] != args.victims
        or (args.stateless and r["stateless_victims_served"] != args.victims)
        for r in rounds
    )
    failed = result["invariant_failures"] or result["server_exit"] not in (0, None) or unserved
    return 1 if failed else 0


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-conn", type=int, default=4)
    parser.add_argument("--total", type=int, default=32)
    parser.add_argument("--victims", type=int, default=8)
    parser.add_argument("--crowd", type=int, default=16)
    parser.add_argument(
        "--mallory", action="store_true", help="add one principal with as many sessions as --total"
    )
    parser.add_argument(
        "--modern",
        action="store_true",
        help="add one principal sending ten times --total stateless 2026-07-28 ASKs at once",
    )
    parser.add_argument(
        "--legacy",
        action="store_true",
        help="add one principal asking ten times --total over --total legacy /sse sessions",
    )
    parser.add_argument(
        "--stateless",
        action="store_true",
        help=f"add one principal sending {SLOW_CALLS} slow stateless calls beside the victims'",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="floods in a row on the same server (default 3)"
    )
    parser.add_argument("--out", help="write the figures as JSON here")
    parser.add_argument(
        "--trace", help="the server records its trace here (arguments kept), its keys in TRACE.keys"
    )
    parser.add_argument("--audit-log", help="the server writes its decision log here")
    return parser.parse_args()


if __name__ == "__main__":
    raise SystemExit(anyio.run(main, parse()))
