"""Serving an ASGI app with uvicorn on 127.0.0.1 for the length of a test, and closing its
listener properly afterwards."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import pytest
import uvicorn

from askgate.core import codec
from askgate.transports.http import HttpApp

App = TypeVar("App")


def close_listener(web: uvicorn.Server, sock: socket.socket) -> None:
    """Closes ``sock`` after ``web.serve([sock])`` was cancelled.

    A cancelled ``serve`` never runs its shutdown, so its asyncio servers still hold the socket's
    fd in the event loop's selector. Closing the socket alone leaves that entry behind, and the
    next socket given the same fd number in the same loop is never polled (a listener: its
    connections are never accepted, so a request hangs) or cannot be registered (a client:
    ENOENT, "All connection attempts failed"). ``asyncio.Server.close`` takes the fd out of the
    selector and closes the socket.
    """
    for server in getattr(web, "servers", []):
        server.close()
    sock.close()


@asynccontextmanager
async def uvicorn_serving(
    make_app: Callable[[int], App], http: Any = "auto"
) -> AsyncIterator[tuple[App, int]]:
    """``make_app(port)`` served by uvicorn on a free port of 127.0.0.1 (its lifespan off: the
    caller runs the app), with ``http`` as its HTTP protocol; yields the app and the port. On
    leaving, uvicorn's serve is cancelled and its listener closed through the event loop
    (:func:`close_listener`)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    app = make_app(port)
    asgi: Any = app
    web = uvicorn.Server(
        uvicorn.Config(asgi, lifespan="off", log_level="warning", access_log=False, http=http)
    )
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(web.serve, [sock])
            try:
                yield app, port
            finally:
                web.should_exit = True
                tg.cancel_scope.cancel()
    finally:
        close_listener(web, sock)


def count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every body ``codec.decode`` is given from now on, in order (R-HTTP-23)."""
    decoded: list[bytes] = []
    real = codec.decode

    def counting(data: bytes, **kwargs: Any) -> codec.Decoded:
        decoded.append(data)
        return real(data, **kwargs)

    monkeypatch.setattr(codec, "decode", counting)
    return decoded


class GetWatched(HttpApp):
    """An app that reports each GET it finished serving, and each stream it starts writing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.get_done = anyio.Event()
        self.writing = anyio.Event()

    async def _stream_out(self, *args: Any, **kwargs: Any) -> None:
        self.writing.set()
        await super()._stream_out(*args, **kwargs)

    async def _get(self, *args: Any) -> None:
        try:
            await super()._get(*args)
        finally:
            self.get_done.set()


@asynccontextmanager
async def askgate_serving(
    make_app: Callable[[int], App], options: Any = None
) -> AsyncIterator[tuple[App, int]]:
    """``make_app(port)`` served by askgate's own HTTP/1.1 server (what ``askgate serve
    --http`` runs: :func:`askgate.transports.http_server.listening`) on a free port of
    127.0.0.1, with ``options``' bounds (default: the app's); yields the app and the port. The
    caller runs the app (``app.running()``)."""
    from askgate.transports.http_server import listening  # noqa: PLC0415

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    app = make_app(port)
    try:
        asgi: Any = app
        async with listening(asgi, sock, options):
            yield app, port
    finally:
        sock.close()
