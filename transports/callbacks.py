"""Marks on user callbacks that say how the shell may run them.

A mark is an attribute set on the function, nothing else: the reducer never sees callbacks,
and the shell reads the mark when it starts a worker (transports/runtime.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

EAGER_FLAG: Final = "__askgate_completes_without_suspending__"
"""The attribute :func:`completes_without_suspending` sets (True) on the function it marks."""


def completes_without_suspending(func: F) -> F:
    """Marks an ``async def`` that never suspends (it awaits nothing that waits: no sleep, no
    I/O, no client request), so that its worker runs it to completion at once, on the task that
    started it, without a task and a cancel scope of its own: askgate's policy authorizers, and
    tools that opt in. A marked callback that does suspend is stopped and reported as failed
    (for a tool, ``{"error": "callback_failed"}``); one that blocks holds the event loop, as
    any ``async def`` that blocks does.

    Mark a function before handing it to askgate: the tool authorizer's mark is read once, when
    ``Server(...)`` or ``Server.configure(...)`` installs it (other callbacks' at each call)."""
    setattr(func, EAGER_FLAG, True)
    return func


def runs_eagerly(func: object) -> bool:
    """Whether ``func`` (a function or a bound method) is marked
    :func:`completes_without_suspending`."""
    return getattr(func, EAGER_FLAG, False) is True


_NO_CONTEXT_FLAG: Final = "__askgate_ignores_context__"


def ignores_context(func: F) -> F:
    """Marks an authorizer of askgate's own that never looks at its ``context`` argument (the
    policy file's): the shell then passes ``None`` there instead of building a
    :class:`~askgate.server.Context` per call. Not for user callbacks."""
    setattr(func, _NO_CONTEXT_FLAG, True)
    return func


def wants_context(func: object) -> bool:
    """Whether ``func`` (a function or a bound method) may look at its ``context`` argument:
    every callback but those marked :func:`ignores_context`."""
    return getattr(func, _NO_CONTEXT_FLAG, False) is not True
