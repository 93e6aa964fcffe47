"""Effects: commands from the reducer to the shell, named in the imperative.

The shell performs them in order and reports what happened as new events. It never looks at
the reducer's state to decide anything.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from .events import ConnId, TimerKey
from .jobs import Job

if TYPE_CHECKING:
    import attrs
else:  # attrs, with a __repr__ that is not compiled per class (start-up): lean_attrs.py
    from . import lean_attrs as attrs
# Each effect's slots are declared by a bare class of its own so that the reducer's hot path can
# build effects with plain stores (core.layout.positional_constructor); attrs' ``__init__`` and
# every other behaviour are unchanged.


class ReplySlots:
    __slots__ = ("__weakref__", "conn", "message", "request_id")


@attrs.frozen(slots=True)
class Reply(ReplySlots):
    """Answer request ``request_id`` of ``conn``; ``message`` ``None`` answers with nothing."""

    conn: ConnId
    request_id: object
    message: dict[str, Any] | None


class PushSlots:
    __slots__ = ("__weakref__", "conn", "message", "related")


@attrs.frozen(slots=True)
class Push(PushSlots):
    """Send ``message`` on ``conn``'s push channel.

    ``related`` is the id of the request the push is about (an ``elicitation/create``, its
    withdrawal, a push-mode outcome), or ``None``: a transport with a stream per request (HTTP)
    sends it on that request's stream. It is routing, not content: effects compare without it.
    """

    conn: ConnId
    message: dict[str, Any]
    related: object = attrs.field(default=None, eq=False)


class StartTimerSlots:
    __slots__ = ("__weakref__", "deadline", "key")


@attrs.frozen(slots=True)
class StartTimer(StartTimerSlots):
    """Arm timer ``key`` to fire at ``deadline`` (the shell's monotonic clock, ms)."""

    key: TimerKey
    deadline: int


class CancelTimerSlots:
    __slots__ = ("__weakref__", "key")


@attrs.frozen(slots=True)
class CancelTimer(CancelTimerSlots):
    key: TimerKey


class StartWorkerSlots:
    __slots__ = ("__weakref__", "conn", "job", "ref")


@attrs.frozen(slots=True)
class StartWorker(StartWorkerSlots):
    """Run ``job`` for ``conn`` in an isolated task; report it as ``WorkerFinished``/``Failed``."""

    ref: int
    conn: ConnId
    job: Job


class KillWorkerSlots:
    __slots__ = ("__weakref__", "ref")


@attrs.frozen(slots=True)
class KillWorker(KillWorkerSlots):
    """Cancel the worker ``ref``; nothing it returns afterwards is looked at."""

    ref: int


class EmitSlots:
    __slots__ = ("__weakref__", "fields", "name")


@attrs.frozen(slots=True)
class Emit(EmitSlots):
    """A telemetry event for the embedder's observers; the records of spec/rules.md's
    "Records" (:data:`RECORDS`) are what the shell logs (R-LOG-1 .. R-LOG-4)."""

    name: str
    fields: dict[str, Any]


class ResolveSlots:
    __slots__ = ("__weakref__", "outcome", "ref", "token")


@attrs.frozen(slots=True)
class Resolve(ResolveSlots):
    """Hand ``outcome`` to the running tool of worker ``ref`` that waits as ``token``: the
    client's result object, or a :class:`~askgate.core.decisions.Failure` (R-CTX-4 .. R-CTX-6)."""

    ref: int
    token: Hashable
    outcome: object


RECORDS = ("call_parked", "call_ended", "read_denied")
"""The names of the :class:`Emit` records of calls (spec/rules.md, R-LOG-1 .. R-LOG-4)."""

Effect = Reply | Push | StartTimer | CancelTimer | StartWorker | KillWorker | Emit | Resolve
