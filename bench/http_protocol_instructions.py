"""Instructions askgate's own uvicorn protocol executes per echo POST, in process, counted by
valgrind: the request path from the bytes read to the response bytes written, without the
event loop's reads and writes, the socket or the client; for comparing two checkouts of the
HTTP shell on a shared, noisy machine in about a minute.

    python bench/http_protocol_instructions.py --tree /tmp/base --tree . [--stub-reducer]

Each ``--tree`` (a checkout) runs, under ``valgrind --tool=callgrind`` with ``python -P``,
``PYTHONPATH=<tree>`` and ``PYTHONHASHSEED=0``: the demo's ``HttpApp`` served by
``header_deadline_protocol`` (what ``askgate serve --http`` runs) on a transport that keeps
what is written, one session opened (``initialize``, ``notifications/initialized``), then
``tools/call echo`` POSTs fed one after another, each a whole request in one read (answered
without a request task, R-HTTP-33). The figure is the difference of the totals for 1 200 and
200 calls over 1 000. ``--stub-reducer`` answers each call at once instead of feeding the
reducer (the same reply): what the shell, uvicorn's parser callbacks and the codec cost alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
from typing import Any

FEW, MANY = 200, 1_200
COLLECTED = re.compile(r"Collected : (\d+)")


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


async def _serve(count: int, stub: bool) -> None:
    import uvicorn  # noqa: PLC0415
    from uvicorn.server import ServerState  # noqa: PLC0415

    from askgate.core.effects import Reply  # noqa: PLC0415
    from askgate.core.events import MessageReceived  # noqa: PLC0415
    from askgate.core.http import HttpOptions  # noqa: PLC0415
    from askgate.demo import build_demo  # noqa: PLC0415
    from askgate.transports.http import HttpApp  # noqa: PLC0415
    from askgate.transports.http_server import header_deadline_protocol  # noqa: PLC0415

    app = HttpApp(build_demo(), options=HttpOptions(port=8765))
    config = uvicorn.Config(
        app, access_log=False, log_level="warning", http=header_deadline_protocol(10_000)
    )
    config.load()
    async with app.running():
        loop = asyncio.get_running_loop()
        protocol = config.http_protocol_class(  # type: ignore[call-arg]
            config=config, server_state=ServerState(), app_state={}, _loop=loop
        )
        kept = _Kept()
        protocol.connection_made(kept)
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


def count_in(tree: str, calls: int, stub: bool) -> int:
    argv = [sys.executable, "-P", __file__, "--child", str(calls)]
    if stub:
        argv.append("--stub-reducer")
    env = {**os.environ, "PYTHONPATH": tree, "PYTHONHASHSEED": "0"}
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
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        asyncio.run(_serve(args.child, args.stub_reducer))
        return 0
    for given in args.tree or ["."]:
        tree = os.path.abspath(given)
        few = count_in(tree, FEW, args.stub_reducer)
        many = count_in(tree, MANY, args.stub_reducer)
        per = (many - few) / (MANY - FEW)
        print(f"{tree:>40}: {per:12,.0f} instructions per echo POST", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
