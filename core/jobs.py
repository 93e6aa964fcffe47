"""Jobs: the work a ``StartWorker`` effect hands to a worker, one class per kind of callback.

The shell runs the job's callback in an isolated task and reports its value as
``WorkerFinished`` or ``WorkerFailed``.
"""

from __future__ import annotations

import attrs


@attrs.frozen(slots=True)
class Authorize:
    """Job: ask the tool authorizer about ``tool`` with ``arguments``."""

    tool: str
    arguments: object


@attrs.frozen(slots=True)
class RunTool:
    """Job: run ``tool``; the worker's value is the ``tools/call`` result object."""

    tool: str
    arguments: object


@attrs.frozen(slots=True)
class AuthorizeRead:
    """Job: ask the read authorizer about ``method`` with ``params``."""

    method: str
    params: object


@attrs.frozen(slots=True)
class RunRead:
    """Job: perform the read method; the worker's value is its result object."""

    method: str
    params: object


@attrs.frozen(slots=True)
class UnknownToolReply:
    """Job: call the ``unknown_tool_reply`` hook; its value is text or ``None``."""

    tool: str


@attrs.frozen(slots=True)
class FilterTools:
    """Job: ask the visibility hook about each name; the worker's value is a dict from each name
    to what the hook returned for it, as it returned it, or a
    :class:`~askgate.core.decisions.Raised` where the hook raised (R-PROTO-8)."""

    names: tuple[str, ...]


Job = Authorize | RunTool | AuthorizeRead | RunRead | UnknownToolReply | FilterTools
