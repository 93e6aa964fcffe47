"""The operator's log of calls: one readable line per record the reducer emits (spec/rules.md,
"Records", R-LOG-1 .. R-LOG-4), on the logger ``askgate.calls`` at INFO.

The reducer decides what is recorded and with which fields; this module only formats them, with
the principal the transport knows for the connection (``None`` on stdio). A line never holds a
call's arguments, its result or an authorizer's prompt, since no record does. Examples::

    call 7 conn http-3 principal alice: delete_file ask (askgate-elicit-…) -> parked
    call 7 conn http-3 principal alice: delete_file ask (askgate-elicit-…) -> approved -> result in 2.31 s
    call 8 conn http-3 principal alice: delete_file ask (askgate-elicit-…) -> denied: declined in 4.02 s
    call 2 conn stdio: echo -> dropped: connection gone in 0.40 s
"""  # noqa: E501

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["CALLS_LOGGER", "conn_text", "describe", "log_record"]

CALLS_LOGGER = logging.getLogger("askgate.calls")
_NAME = CALLS_LOGGER.name

Principal = Callable[[Hashable], "str | None"]

_OUTCOMES = {
    "result": "result",
    "tool_error": "tool error",
    "failed": "failed (the tool raised; its traceback is logged by askgate.runtime)",
    "timed_out": "timed out (the tool ran past callback_timeout_ms)",
    "stopped": "stopped (the server stopped while it ran)",
    "unknown_tool": "unknown tool",
    "invalid_arguments": "invalid arguments",
}


def conn_text(conn: object) -> str:
    """A connection id as one word: ``("http", 3)`` is ``http-3``."""
    if isinstance(conn, tuple):
        return "-".join(str(part) for part in conn)
    return str(conn)


def _who(kind: str, fields: dict[str, Any], principal: str | None) -> str:
    request_id = fields.get("request_id")
    rid = f'"{request_id}"' if isinstance(request_id, str) else str(request_id)
    who = f"{kind} {rid} conn {conn_text(fields.get('conn'))}"
    return f"{who} principal {principal}" if principal is not None else who


def describe(name: str, fields: dict[str, Any], principal: Principal) -> str | None:
    """The line for the record ``name``, or ``None`` for an ``Emit`` that is not a record."""
    if name == "call_ended":
        return _ended(fields, principal)
    if name == "call_parked":
        who = _who("call", fields, principal(fields.get("conn")))
        return f"{who}: {fields.get('tool')} ask ({fields.get('elicitation_id')}) -> parked"
    if name == "read_denied":
        who = _who("read", fields, principal(fields.get("conn")))
        return f"{who}: {fields.get('method')} -> denied: {fields.get('detail')}"
    return None


def _ended(fields: dict[str, Any], principal: Principal) -> str:
    parts = [str(fields.get("tool"))]
    decision = fields.get("decision")
    eid = fields.get("elicitation_id")
    if decision is not None:
        parts.append(f"{decision} ({eid})" if eid is not None else str(decision))
    steps = [" ".join(parts)]
    if fields.get("approved") is True:
        steps.append("approved")
    outcome = fields.get("outcome")
    detail = fields.get("detail")
    if outcome == "denied":
        text = f"denied: {detail}"
        evictor = fields.get("evicted_by")
        if evictor is not None:
            by = principal(evictor)
            text += f" (by conn {conn_text(evictor)}" + (f" principal {by})" if by else ")")
    elif outcome == "dropped":
        text = f"dropped: {detail}"
    elif outcome == "busy":
        text = f"busy ({detail} full)"
    else:
        text = _OUTCOMES.get(str(outcome), str(outcome))
    steps.append(text)
    duration = fields.get("duration_ms")
    seconds = duration / 1000 if isinstance(duration, int | float) else 0.0
    who = _who("call", fields, principal(fields.get("conn")))
    return f"{who}: {' -> '.join(steps)} in {seconds:.2f} s"


def log_record(name: str, fields: dict[str, Any], principal: Principal) -> None:
    """Logs the record at INFO on ``askgate.calls`` (nothing is built when INFO is off)."""
    if CALLS_LOGGER.isEnabledFor(logging.INFO):
        line = describe(name, fields, principal)
        if line is not None:
            # A record made and handled directly: no search of the caller's frame (logger.info's
            # findCaller), which this line would not show anyway.
            CALLS_LOGGER.handle(CALLS_LOGGER.makeRecord(_NAME, logging.INFO, "", 0, line, (), None))
