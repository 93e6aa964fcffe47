"""askgate's demo over Streamable HTTP, served by hypercorn on trio or on asyncio.

    python bench/askgate_hypercorn.py --port PORT [--backend trio|asyncio] [--host 127.0.0.1]
        [--max-in-flight N] [--max-in-flight-per-connection N]

A server for ``bench/http_bench.py`` beside ``askgate serve --http`` (uvicorn on asyncio): the
same demo (``askgate.demo.build_demo``, its shipped policy), the same ASGI app
(:class:`askgate.transports.http.HttpApp`, loopback clients only, the bound port as the allowed
Host), handed to hypercorn's ``serve`` for the chosen event loop instead of uvicorn. askgate's
shell is anyio, so the app itself does not care which loop runs it; this measures what the
server around it and the loop cost. hypercorn comes from the ``bench`` extra
(``pip install -e '.[bench]'``), trio from ``test`` or ``bench``.

What ``askgate serve --http`` adds around the app is not here: its header deadline (a uvicorn
protocol), its buffered reads and its banner; the ASGI lifespan runs as there (hypercorn runs
it), so the app's runtime starts and stops with the server. SIGTERM and SIGINT stop hypercorn
gracefully (open responses get ``GRACE_S`` seconds) and the process exits 0, so a profiler
wrapped around it (``http_bench.py --profile``) writes its samples.
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Awaitable, Callable
from typing import Any

GRACE_S = 5.0


def build_app(port: int, options: dict[str, Any]) -> Any:
    """The demo's HttpApp for a server bound to ``port``."""
    from askgate.core import http as rules  # noqa: PLC0415 (after argument parsing)
    from askgate.demo import build_demo  # noqa: PLC0415
    from askgate.transports.http import HttpApp  # noqa: PLC0415

    server = build_demo(None, **options)
    server.initial_state("http")
    return HttpApp(server, options=rules.HttpOptions(port=port))


def config(host: str, port: int) -> Any:
    from hypercorn.config import Config  # noqa: PLC0415

    cfg = Config()
    cfg.bind = [f"{host}:{port}"]
    cfg.accesslog = None
    cfg.errorlog = "-"
    cfg.loglevel = "WARNING"
    cfg.graceful_timeout = GRACE_S
    return cfg


def serve_trio(app: Any, cfg: Any) -> None:
    import trio  # noqa: PLC0415
    from hypercorn.trio import serve  # noqa: PLC0415

    async def main() -> None:
        async def stop_on_signal() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    return

        await serve(app, cfg, shutdown_trigger=stop_on_signal)

    trio.run(main)


def serve_asyncio(app: Any, cfg: Any) -> None:
    import asyncio  # noqa: PLC0415

    from hypercorn.asyncio import serve  # noqa: PLC0415

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        trigger: Callable[[], Awaitable[Any]] = stop.wait
        await serve(app, cfg, shutdown_trigger=trigger)

    asyncio.run(main())


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--backend", choices=["trio", "asyncio"], default="trio")
    parser.add_argument("--max-in-flight", type=int)
    parser.add_argument("--max-in-flight-per-connection", type=int)
    args = parser.parse_args()
    options = {
        name: getattr(args, name)
        for name in ("max_in_flight", "max_in_flight_per_connection")
        if getattr(args, name) is not None
    }
    app = build_app(args.port, options)
    cfg = config(args.host, args.port)
    (serve_trio if args.backend == "trio" else serve_asyncio)(app, cfg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
