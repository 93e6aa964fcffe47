"""Closing the socket uvicorn listened on, once the tests have cancelled its ``serve``."""

from __future__ import annotations

import socket

import uvicorn


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
