"""A whole process serving Streamable HTTP: what ``Server.run_http`` and ``askgate serve --http``
run, through the one function :func:`serve_http`.

Where to listen and whether to refuse is decided before this module is reached
(:func:`askgate.core.http.listen_or_refuse` for the command, :func:`run_http` with
:func:`askgate.core.http.run_http_refusal` for Python, R-HTTP-13). This module checks that the
server can start (its initial state) and which event loop it runs on (uvloop when installed,
unless ``ASKGATE_LOOP=asyncio``: docs/performance.md), binds the socket itself (a port in use or an
address the machine does not have is a one-line refusal), then serves the
:class:`~askgate.transports.http.HttpApp` on it with askgate's HTTP/1.1 server
(:mod:`askgate.transports.http11`). SIGINT (Ctrl-C) and SIGTERM stop it cleanly: every open call
is answered (R-STOP-1, :meth:`~askgate.transports.http.HttpApp.stop`), open responses finish for
at most :data:`SHUTDOWN_GRACE_S` seconds, and the process returns 0.

Exit statuses: 0 stopped (a signal), 1 the server's own machinery failed, 2 refused to start.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

from askgate.core import OptionError
from askgate.core import http as rules
from askgate.transports.loop import LOOP_ENV, event_loop

from .auth import AuthProvider, LoopbackOnly
from .base import Serving
from .http import ENDPOINT, HttpApp
from .http11 import READ_BYTES, Listener

__all__ = ["READ_BYTES", "SHUTDOWN_GRACE_S", "listening", "run_http", "serve_http"]

logger = logging.getLogger("askgate")

SHUTDOWN_GRACE_S: Final = 5
"""Seconds a server told to stop lets open responses finish (an SSE stream never ends by
itself: the app's stop ends them, and what is left is closed then)."""

BACKLOG: Final = 2048
"""The listen backlog."""

LOG_FORMAT: Final = "askgate %(levelname)s %(name)s: %(message)s"
"""The operator's log lines on standard error (what ``askgate serve`` configures)."""

BACKENDS: Final = ("asyncio",)
"""The event loops Streamable HTTP runs on: asyncio's (or uvloop's), not trio."""


@asynccontextmanager
async def listening(
    app: Any, sock: socket.socket, options: rules.HttpOptions | None = None
) -> AsyncIterator[Listener]:
    """askgate's HTTP/1.1 server (:mod:`askgate.transports.http11`) accepting on the listening
    ``sock`` for the length of the block, with ``options``' bounds (default: the app's);
    ``app`` is an :class:`HttpApp` or any ASGI app (every request then through ASGI), and
    must be running (:meth:`HttpApp.running`). On leaving, the listener is closed and
    every connection still open is aborted."""
    loop = asyncio.get_running_loop()
    if options is None:
        options = app.options if isinstance(app, HttpApp) else rules.HttpOptions()
    listener = Listener(app, options)
    server = await loop.create_server(listener, sock=sock, backlog=BACKLOG)
    try:
        yield listener
    finally:
        server.close()
        listener.abort_all()


async def _serve(
    app: HttpApp, sock: socket.socket, options: rules.HttpOptions, stopped: list[str]
) -> None:
    """Serves until SIGINT or SIGTERM, then stops gracefully: every open call is answered
    (R-STOP-1), each connection closes once its response is done (a session's DELETE is still
    answered meanwhile), for at most :data:`SHUTDOWN_GRACE_S` seconds."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    watched = (signal.SIGINT, signal.SIGTERM)
    main = threading.current_thread() is threading.main_thread()

    def told(sig: signal.Signals) -> None:
        stopped.append(sig.name)
        stop.set()

    async with app.running():
        if main:
            for sig in watched:
                loop.add_signal_handler(sig, told, sig)
        try:
            async with listening(app, sock, options) as listener:
                await stop.wait()
                logger.info("stopping: answering the open calls (%s)", stopped[0])
                app.stop()  # R-STOP-1
                listener.stop()
                try:
                    await asyncio.wait_for(listener.closed(), SHUTDOWN_GRACE_S)
                except TimeoutError:
                    logger.warning(
                        "closed %d connections still open after %d s",
                        len(listener.connections),
                        SHUTDOWN_GRACE_S,
                    )
        finally:
            if main:
                for sig in watched:
                    loop.remove_signal_handler(sig)


def _bind(host: str, port: int) -> socket.socket | str:
    """A socket bound to ``host:port`` (IPv4 first for a name), or the one-line refusal."""
    bare = host.strip("[]")
    where = f"{host}:{port}"
    try:
        found = socket.getaddrinfo(
            bare, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE | socket.AI_NUMERICSERV
        )
    except (OSError, UnicodeError) as bad:
        return f"askgate refuses to start: cannot listen on {where}: {_reason(bad)}"
    found.sort(key=lambda entry: entry[0] != socket.AF_INET)
    family, kind, proto, _, address = found[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(BACKLOG)  # connections wait in the backlog until they are accepted
    except OSError as bad:
        sock.close()
        return f"askgate refuses to start: cannot listen on {where}: {_reason(bad)}"
    return sock


def _reason(error: BaseException) -> str:
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return str(text).lower()


def serve_http(
    server: Serving,
    host: str,
    port: int,
    *,
    auth: AuthProvider | None = None,
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
    log_level: str = "warning",
    banner: str | None = None,
    limits: Mapping[str, int] | None = None,
) -> int:
    """Serves ``server`` over Streamable HTTP on ``host:port`` until SIGINT or SIGTERM; returns
    the exit status (0 stopped, 1 the machinery failed, 2 refused to start, the reason printed
    on standard error in one line). The listen decision (R-HTTP-13) is the caller's; this
    refuses a server that cannot start (an :class:`~askgate.core.OptionError`) and an address
    it cannot bind. ``banner``, when given, names what is served in a few lines on standard
    error with the URL and an MCP client configuration. ``limits`` sets
    :class:`~askgate.core.http.HttpOptions` fields by name (``max_header_bytes``,
    ``max_headers``, ``max_connections``, ``max_sessions_per_principal``, ...); a value it
    refuses is a one-line refusal."""
    if not logging.getLogger().handlers:  # a Python caller's process: the operator's log
        logging.basicConfig(stream=sys.stderr, level=log_level.upper(), format=LOG_FORMAT)
    try:
        server.initial_state("http")  # R-OPT-2: refused here, not once serving
    except OptionError as refused:
        print(refused, file=sys.stderr)
        return 2
    loop, loop_refusal = event_loop(  # docs/performance.md, the event loop
        os.environ.get(LOOP_ENV), importlib.util.find_spec("uvloop") is not None
    )
    if loop is None:
        print(loop_refusal, file=sys.stderr)
        return 2
    bound = _bind(host, port)
    if isinstance(bound, str):
        print(bound, file=sys.stderr)
        return 2
    port = bound.getsockname()[1]  # the port bound, when 0 asked for any
    import attrs  # noqa: PLC0415

    bounds = set(attrs.fields_dict(rules.HttpOptions)) - {
        "port",
        "allowed_hosts",
        "allowed_origins",
    }
    unknown = sorted(set(limits or {}) - bounds)
    if unknown:
        bound.close()
        print(f"askgate refuses to start: limits: no such bound {unknown[0]!r}", file=sys.stderr)
        return 2
    try:
        options = rules.HttpOptions(
            port=port,
            allowed_hosts=tuple(allowed_hosts),
            allowed_origins=tuple(allowed_origins),
            **dict(limits or {}),
        )
        app = HttpApp(server, auth=auth, options=options)  # its guard: R-HTTP-13
    except (OptionError, ValueError) as refused:
        bound.close()
        print(refused, file=sys.stderr)
        return 2
    url = f"http://{host if ':' not in host or host.startswith('[') else f'[{host}]'}:{port}"
    url += ENDPOINT
    if banner is not None:
        entry: dict[str, object] = {"type": "http", "url": url}
        header = getattr(auth, "header", None)
        if header is not None:  # the credential the client must send
            entry["headers"] = {header[0]: header[1]}
        configuration = json.dumps({"mcpServers": {"askgate": entry}})
        print(
            f"askgate: serving {banner} on {url}\n"
            f"  MCP client configuration:\n  {configuration}\n  Ctrl-C ends",
            file=sys.stderr,
        )
    if logger.isEnabledFor(logging.INFO):
        logger.info("serving Streamable HTTP on %s (event loop: %s)", url, loop)
    elif banner is None:  # where it listens, whatever the log says
        print(f"askgate: serving Streamable HTTP on {url}", file=sys.stderr)
    stopped: list[str] = []
    try:
        _run(_serve(app, bound, options, stopped), loop)
    except KeyboardInterrupt:  # Ctrl-C before the server took the signal over
        stopped.append("SIGINT")
    except BaseException:  # the machinery, not a callback: callbacks never get here
        logger.critical("askgate stopped: the server failed", exc_info=True)
        print("askgate: the server failed; see the traceback above", file=sys.stderr)
        return 1
    finally:
        bound.close()
    if stopped:
        logger.info("stopped by %s", stopped[0])
    return 0


def _run(main: Coroutine[None, None, None], loop: str) -> None:
    """Runs ``main`` on a new event loop of the kind ``loop`` names (docs/performance.md)."""
    if loop == "uvloop":
        import uvloop  # noqa: PLC0415

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main)
        return
    asyncio.run(main)


def run_http(
    server: Serving,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    auth: AuthProvider | None = None,
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
    backend: str = "asyncio",
    log_level: str = "warning",
    banner: bool = False,
    limits: Mapping[str, int] | None = None,
) -> int:
    """:meth:`askgate.server.Server.run_http`: refuses as R-HTTP-13 says, in a Python caller's
    words (:func:`askgate.core.http.run_http_refusal`), then :func:`serve_http`."""
    if backend not in BACKENDS:
        print(
            f"askgate refuses to start: backend={backend!r}: Streamable HTTP runs on asyncio; "
            "trio serves stdio only",
            file=sys.stderr,
        )
        return 2
    loopback_only = auth is None or isinstance(auth, LoopbackOnly)
    refusal = rules.run_http_refusal(
        host,
        port,
        loopback_only,
        server.authorization_configured(),
        server.read_authorization_configured(),
    )
    if refusal is not None:
        print(refusal, file=sys.stderr)
        return 2
    return serve_http(
        server,
        host,
        port,
        auth=auth,
        allowed_origins=allowed_origins,
        allowed_hosts=allowed_hosts,
        log_level=log_level,
        banner=getattr(server, "name", "MCP") if banner else None,
        limits=limits,
    )
