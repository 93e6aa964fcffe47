"""Values a worker hands back that the reducer reads: an authorizer's decision, or a failure.

An authorizer's worker finishes with an :class:`Allow`, :class:`Ask` or :class:`Deny`. A read
callback's worker may finish with a :class:`Failure`, which answers its request with that
JSON-RPC error (R-PROTO-14); a running tool's request to its client resolves to one when the
client answered with an error or could not answer (R-CTX-4 .. R-CTX-6). A visibility hook that
raised stands in a ``FilterTools`` value as :class:`Raised` (R-PROTO-8).
"""

from __future__ import annotations

from .record import record


@record
class Allow:
    """An authorizer's decision: run it."""


@record
class Ask:
    """An authorizer's decision: run it only if the owner approves ``prompt``."""

    prompt: str


@record
class Deny:
    """An authorizer's decision: refuse, with a reason the caller may read."""

    reason: str


Decision = Allow | Ask | Deny


@record
class Failure:
    """A JSON-RPC error as a value: a read worker's answer (R-PROTO-14), or a client request's
    outcome (R-CTX-4 .. R-CTX-6)."""

    code: int
    message: str
    data: object = None


@record
class Raised:
    """A callback raised instead of answering: ``kind`` is the exception's type name, for the
    operator's log (a ``FilterTools`` value holds one for each name its hook raised on,
    R-PROTO-8)."""

    kind: str


@record
class NeedsInput:
    """A callback serving a modern request ended a round instead of answering (R-MRTR-20):
    ``requests`` are its input requests by key (each ``{"method": ..., "params": ...}``), and
    ``state`` is the JSON value it wants back on the retry."""

    requests: object
    state: object = None
