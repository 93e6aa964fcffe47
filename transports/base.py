"""The one shape every transport has, and what it uses of a server.

A transport lives in its own module of this package and is a class built from the server it
serves, ``Kind(server, **its options)``, which starts nothing. ``async with
transport.running():`` runs the server's runtime (``server.running(Kind.name)``) for the length
of the block; the transport's connections attach to that runtime while it runs, each with
``runtime.attach`` or ``runtime.route`` and ``SubscriberAttached``, and leave with
``SubscriberDetached``. How connections arrive is the transport's own: an ASGI server calls
:class:`askgate.transports.http.HttpTransport` for each request; :meth:`StdioTransport.serve`
(:mod:`askgate.transports.stdio`) runs the server and reads its one connection until end of
input. Every decision a transport needs is a pure function in :mod:`askgate.core`.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, Protocol

from askgate.core import State
from askgate.core.options import Transport as TransportName

from .runtime import Runtime

__all__ = ["Serving", "Transport", "TransportName"]


class Serving(Protocol):
    """What a transport uses of a server (:class:`askgate.server.Server` is one)."""

    def initial_state(self, transport: TransportName = ...) -> State: ...

    def running(
        self, transport: TransportName = ..., *, state: State | None = ...
    ) -> AbstractAsyncContextManager[Runtime]: ...

    def authorization_configured(self) -> bool: ...

    def read_authorization_configured(self) -> bool: ...


class Transport(Protocol):
    """A transport: built as ``Kind(server, **options)``; ``running()`` runs the server's
    runtime, named ``name`` in its options, for the length of the block, and yields the
    transport."""

    name: ClassVar[TransportName]
    server: Serving

    @property
    def runtime(self) -> Runtime:
        """The server's runtime while :meth:`running`; raises ``RuntimeError`` otherwise."""
        ...

    def running(self) -> AbstractAsyncContextManager[Any]: ...
