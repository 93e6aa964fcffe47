"""Jobs: the work a ``StartWorker`` effect hands to a worker, one class per kind of callback.

The shell runs the job's callback in an isolated task and reports its value as
``WorkerFinished`` or ``WorkerFailed``.
"""

from __future__ import annotations

from .record import record


@record
class Authorize:
    """Job: ask the tool authorizer about ``tool`` with ``arguments``."""

    tool: str
    arguments: object


@record
class Round:
    """What a callback serving a modern request is told of its input-required rounds
    (spec/modern.md, R-MRTR-20 .. R-MRTR-23): the client capabilities the request declared, the
    ``inputResponses`` and the callback's own state of a retry whose round state was valid
    (``None`` on a first call), and whether the call's approval was already granted."""

    capabilities: object = None
    responses: object = None
    state: object = None
    approved: bool = False


@record
class RunTool:
    """Job: run ``tool``; the worker's value is the ``tools/call`` result object, or a
    :class:`~askgate.core.decisions.NeedsInput` ending a round. ``round`` is set for a modern
    call (R-MRTR-20), ``None`` for a 2025 one."""

    tool: str
    arguments: object
    round: Round | None = None


@record
class AuthorizeRead:
    """Job: ask the read authorizer about ``method`` with ``params``."""

    method: str
    params: object


@record
class RunRead:
    """Job: perform the read method; the worker's value is its result object. ``round`` is set
    for a modern ``prompts/get`` or ``resources/read`` (R-MRTR-24), ``None`` otherwise."""

    method: str
    params: object
    round: Round | None = None


@record
class UnknownToolReply:
    """Job: call the ``unknown_tool_reply`` hook; its value is text or ``None``."""

    tool: str


@record
class FilterTools:
    """Job: ask the visibility hook about each name; the worker's value is a dict from each name
    to what the hook returned for it, as it returned it, or a
    :class:`~askgate.core.decisions.Raised` where the hook raised (R-PROTO-8)."""

    names: tuple[str, ...]


Job = Authorize | RunTool | AuthorizeRead | RunRead | UnknownToolReply | FilterTools
