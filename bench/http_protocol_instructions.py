"""Instructions askgate's own HTTP/1.1 connection executes per echo POST (or per 2025 elicitation
round trip), in process, counted by valgrind: the request path from the bytes read to the
response bytes written, without the event loop's reads and writes, the socket or the client; for
comparing two checkouts of the HTTP shell on a shared, noisy machine in about a minute.

    python bench/http_protocol_instructions.py --tree /tmp/base --tree . [--stub-reducer]
        [--phase elicit|modern]

Each ``--tree`` (a checkout, laid out as its wheel would by ``bench/trees.py`` in a temporary
folder) runs, under ``valgrind --tool=callgrind`` with ``python -P``,
``PYTHONPATH=<that folder>`` and ``PYTHONHASHSEED=0``: the demo's ``HttpApp`` served by
``askgate.transports.http11.Connection`` (what ``askgate serve --http`` runs; in a checkout
that predates it, the uvicorn protocol ``header_deadline_protocol``) on a transport that keeps
what is written, one session opened (``initialize``, ``notifications/initialized``), then
``tools/call echo`` POSTs fed one after another, each a whole request in one read (answered
without a request task, docs/performance.md). The figure is the difference of the totals for
1 200 and 200 calls over 1 000. ``--stub-reducer`` answers each call at once instead of feeding the
reducer (the same reply): what the shell, the parser callbacks and the codec cost alone.

``--phase elicit`` counts 2025 elicitation round trips instead, on two connections of the
session: ``tools/call guarded_echo`` on the first, its SSE stream (written in a request task)
up to the ``elicitation/create``, the accepting answer POSTed on the second (202), then the
stream to its end; the loop runs a turn at a time until each awaited write came (the same
turns in every run). The figure is the difference for 600 and 100 trips over 500.

``--phase modern`` counts 2026-07-28 approval round trips on one connection, with no session:
``tools/call guarded_echo`` with the per-request ``_meta`` and the ``MCP-Protocol-Version``,
``Mcp-Method`` and ``Mcp-Name`` headers, its ``input_required`` answer, then the retry with
``inputResponses`` and the ``requestState`` (each answer awaited a turn of the loop at a time);
the same counts as ``elicit``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the sibling helpers (also under -P)
from trees import laid_out

FEW, MANY = 200, 1_200
TRIPS_FEW, TRIPS_MANY = 100, 600
TURNS = 1_000  # at most this many loop turns for one awaited write
COLLECTED = re.compile(r"Collected : (\d+)")
MODERN = "2026-07-28"
META = "io.modelcontextprotocol/"


class _Kept(asyncio.Transport):
    """A connection's transport that keeps what is written."""

    def __init__(self) -> None:
        super().__init__()
        self.out: list[bytes] = []
        self.closing = False

    def write(self, data: Any) -> None:
        self.out.append(bytes(data))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8765), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        return None

    def resume_reading(self) -> None:
        return None


def _request(body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:8765\r\nAccept-Encoding: identity\r\n"
        b"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


async def _turns_until(done: Any) -> None:
    """Runs the event loop a turn at a time until ``done()``; at most ``TURNS`` turns."""
    for _ in range(TURNS):
        if done():
            return
        await asyncio.sleep(0)
    raise SystemExit("an awaited write did not come")


async def _elicit(protocol: Any, kept: _Kept, answering: Any, extra: bytes, count: int) -> None:
    """``count`` 2025 elicitation round trips: the call on ``protocol``, the answer on
    ``answering`` (a second connection of the session)."""
    other, other_kept = answering
    for n in range(1, count + 1):
        kept.out.clear()
        other_kept.out.clear()
        params = {"name": "guarded_echo", "arguments": {"text": "hello"}}
        call = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}
        protocol.data_received(_request(json.dumps(call).encode(), extra))
        await _turns_until(lambda: any(b"elicitation/create" in out for out in kept.out))
        lines = b"".join(kept.out).split(b"\n")
        (asked,) = [line for line in lines if b"elicitation/create" in line]
        ask = json.loads(asked.partition(b"data:")[2])
        answer = {"action": "accept", "content": {"approve": True}}
        reply = {"jsonrpc": "2.0", "id": ask["id"], "result": answer}
        other.data_received(_request(json.dumps(reply).encode(), extra))
        if not other_kept.out or b" 202 " not in other_kept.out[0]:
            raise SystemExit(f"the answer was not accepted: {other_kept.out!r}")
        await _turns_until(lambda: kept.out[-1].endswith(b"0\r\n\r\n"))
        if b'"text":"hello"' not in b"".join(kept.out):
            raise SystemExit(f"guarded_echo was not answered: {kept.out[-1:]!r}")


async def _modern(protocol: Any, kept: _Kept, count: int) -> None:
    """``count`` 2026-07-28 approval round trips on ``protocol``: the stateless call, its
    input-required answer, the approving retry with the ``requestState``; each POST's answer
    awaited a turn of the loop at a time."""
    meta = {
        f"{META}protocolVersion": MODERN,
        f"{META}clientCapabilities": {"elicitation": {}},
        f"{META}clientInfo": {"name": "askgate-http-protocol-instructions", "version": "0.1.0"},
    }
    extra = (
        b"MCP-Protocol-Version: " + MODERN.encode() + b"\r\n"
        b"Mcp-Method: tools/call\r\nMcp-Name: guarded_echo\r\n"
    )
    for n in range(1, count + 1):
        params: dict[str, Any] = {
            "name": "guarded_echo",
            "arguments": {"text": "hello"},
            "_meta": meta,
        }
        answers = []
        for attempt in (0, 1):
            kept.out.clear()
            call = {"jsonrpc": "2.0", "id": 2 * n + attempt, "method": "tools/call"}
            call["params"] = params
            protocol.data_received(_request(json.dumps(call).encode(), extra))
            await _turns_until(lambda: bool(kept.out) and _ended(b"".join(kept.out)))
            answers.append(json.loads(b"".join(kept.out).split(b"\r\n\r\n", 1)[1]))
            if attempt == 0:
                result = answers[0]["result"]
                ((key, _),) = result["inputRequests"].items()
                params = {
                    **params,
                    "inputResponses": {key: {"action": "accept", "content": {"approve": True}}},
                    "requestState": result["requestState"],
                }
        if answers[1].get("result", {}).get("content") != [{"type": "text", "text": "hello"}]:
            raise SystemExit(f"the retry was answered {answers[1]!r}")


def _ended(written: bytes) -> bool:
    """Whether ``written`` holds a whole response with its length (the modern answers are
    JSON)."""
    head, sep, body = written.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":", 1)[1])
    raise SystemExit(f"a modern answer had no length: {head!r}")


def _connections(app: Any) -> Any:
    """What makes a connection of the tree under test: askgate's own HTTP/1.1 connection
    (``askgate.transports.http11``), or in a tree that predates it its uvicorn protocol."""
    try:
        from askgate.transports.http11 import Listener  # noqa: PLC0415
    except ImportError:
        import uvicorn  # noqa: PLC0415
        from uvicorn.server import ServerState  # noqa: PLC0415

        from askgate.transports import http_server  # noqa: PLC0415

        made = http_server.header_deadline_protocol(10_000)  # type: ignore[attr-defined]
        config = uvicorn.Config(app, access_log=False, log_level="warning", http=made)
        config.load()
        loop = asyncio.get_running_loop()
        return lambda: config.http_protocol_class(  # type: ignore[call-arg]
            config=config, server_state=ServerState(), app_state={}, _loop=loop
        )
    return Listener(app, app.options)


async def _serve(count: int, stub: bool, phase: str = "echo") -> None:
    from askgate.core.effects import Reply  # noqa: PLC0415
    from askgate.core.events import MessageReceived  # noqa: PLC0415
    from askgate.core.http import HttpOptions  # noqa: PLC0415
    from askgate.demo import build_demo  # noqa: PLC0415
    from askgate.transports.http import HttpApp  # noqa: PLC0415

    app = HttpApp(build_demo(), options=HttpOptions(port=8765))
    connection = _connections(app)
    async with app.running():
        protocol = connection()
        kept = _Kept()
        protocol.connection_made(kept)
        if phase == "modern":
            await _modern(protocol, kept, count)
            return
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "askgate-http-protocol-instructions", "version": "0.1.0"},
            },
        }
        protocol.data_received(_request(json.dumps(init).encode()))
        await asyncio.sleep(0)
        head = kept.out[-1].split(b"\r\n\r\n", 1)[0]
        (sid,) = [line[16:] for line in head.split(b"\r\n") if line.startswith(b"mcp-session-id: ")]
        extra = b"Mcp-Session-Id: " + sid + b"\r\nMCP-Protocol-Version: 2025-06-18\r\n"
        done = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
        protocol.data_received(_request(done, extra))
        await asyncio.sleep(0)
        if phase == "elicit":
            second = connection()
            second_kept = _Kept()
            second.connection_made(second_kept)
            await _elicit(protocol, kept, (second, second_kept), extra, count)
            return
        if stub:
            runtime = app.runtime
            feed = runtime.feed
            live = app._live[sid.decode()]

            def answered(event: Any) -> None:
                message = getattr(event, "data", None)
                if isinstance(event, MessageReceived) and getattr(message, "method", "") == (
                    "tools/call"
                ):
                    rid = message.id  # type: ignore[union-attr]
                    result = {"content": [{"type": "text", "text": "hello"}]}
                    live(Reply(event.conn, rid, {"jsonrpc": "2.0", "id": rid, "result": result}))
                    return
                feed(event)

            runtime.feed = answered  # type: ignore[method-assign]
        calls = [
            _request(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": n,
                        "method": "tools/call",
                        "params": {"name": "echo", "arguments": {"text": "hello"}},
                    }
                ).encode(),
                extra,
            )
            for n in range(1, count + 1)
        ]
        kept.out.clear()
        for call in calls:
            protocol.data_received(call)
        if len(kept.out) != count or b'"text":"hello"' not in kept.out[-1]:
            raise SystemExit(f"the calls were not answered: {kept.out[-1:]!r}")


def count_in(path: str, calls: int, stub: bool, phase: str = "echo") -> int:
    """Instructions of one child run of the checkout laid out in ``path`` (``trees.lay_out``)."""
    argv = [sys.executable, "-P", __file__, "--child", str(calls), "--phase", phase]
    if stub:
        argv.append("--stub-reducer")
    env = {**os.environ, "PYTHONPATH": path, "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    totals = [int(n) for n in COLLECTED.findall(done.stderr)]
    if not totals:
        raise RuntimeError(f"valgrind reported no count: {done.stderr[-500:]!r}")
    return sum(totals)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tree", action="append", default=[], help="a checkout (repeatable)")
    parser.add_argument("--stub-reducer", action="store_true", help="answer without the reducer")
    parser.add_argument("--phase", choices=["echo", "elicit", "modern"], default="echo")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stub_reducer and args.phase != "echo":
        parser.error("--stub-reducer is for the echo phase")
    if args.child is not None:
        asyncio.run(_serve(args.child, args.stub_reducer, args.phase))
        return 0
    few_many = (FEW, MANY) if args.phase == "echo" else (TRIPS_FEW, TRIPS_MANY)
    what = {"echo": "echo POST", "elicit": "elicitation trip", "modern": "2026-07-28 trip"}[
        args.phase
    ]
    trees = [os.path.abspath(given) for given in args.tree or ["."]]
    with laid_out(trees) as paths:
        for tree, path in zip(trees, paths, strict=True):
            few, many = (count_in(path, n, args.stub_reducer, args.phase) for n in few_many)
            per = (many - few) / (few_many[1] - few_many[0])
            print(f"{tree:>40}: {per:12,.0f} instructions per {what}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
