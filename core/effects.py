"""Effects: commands from the reducer to the shell, named in the imperative.

The shell performs them in order and reports what happened as new events. It never looks at
the reducer's state to decide anything.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import attrs

from .events import ConnId, TimerKey
from .jobs import Job
from .record import record


@record
class Reply:
    """Answer request ``request_id`` of ``conn``; ``message`` ``None`` answers with nothing."""

    conn: ConnId
    request_id: object
    message: dict[str, Any] | None


@record
class Push:
    """Send ``message`` on ``conn``'s push channel.

    ``related`` is the id of the request the push is about (an ``elicitation/create``, its
    withdrawal, a push-mode outcome), or ``None``: a transport with a stream per request (HTTP)
    sends it on that request's stream. It is routing, not content: effects compare without it.
    """

    conn: ConnId
    message: dict[str, Any]
    related: object = attrs.field(default=None, eq=False)


@record
class StartTimer:
    """Arm timer ``key`` to fire at ``deadline`` (the shell's monotonic clock, ms)."""

    key: TimerKey
    deadline: int


@record
class CancelTimer:
    key: TimerKey


@record
class StartWorker:
    """Run ``job`` for ``conn`` in an isolated task; report it as ``WorkerFinished``/``Failed``."""

    ref: int
    conn: ConnId
    job: Job


@record
class KillWorker:
    """Cancel the worker ``ref``; nothing it returns afterwards is looked at."""

    ref: int


@record
class Emit:
    """A telemetry event for the embedder's observers; the records of spec/rules.md's
    "Records" (:data:`RECORDS`) are what the shell logs (R-LOG-1 .. R-LOG-4)."""

    name: str
    fields: dict[str, Any]


@record
class Resolve:
    """Hand ``outcome`` to the running tool of worker ``ref`` that waits as ``token``: the
    client's result object, or a :class:`~askgate.core.decisions.Failure` (R-CTX-4 .. R-CTX-6)."""

    ref: int
    token: Hashable
    outcome: object


RECORDS = ("call_parked", "call_ended", "read_denied")
"""The names of the :class:`Emit` records of calls (spec/rules.md, R-LOG-1 .. R-LOG-4)."""

Effect = Reply | Push | StartTimer | CancelTimer | StartWorker | KillWorker | Emit | Resolve
