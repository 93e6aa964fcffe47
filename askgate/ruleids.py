"""Rule ids for what the reducer did, derived in one place (spec/audit.md, R-AUD-6).

:data:`OUTCOME_RULES`, :data:`DENY_RULES` and :data:`DROP_RULES` map what a ``call_ended``
record says (R-LOG-2) to the rules that decide it; :data:`STEP_RULES` names the rules of every
other step of a call's path; a step with no record takes the rules of the reducer's transition
row for its event (spec/transitions.md). ``tests/test_audit.py`` checks that every id here is a
heading of ``spec/*.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from askgate.core import (
    CALL_TRANSITIONS,
    EVENT_TRANSITIONS,
    PARKED_TRANSITIONS,
    Effect,
    Emit,
    State,
    sealing,
)
from askgate.core import messages as m
from askgate.core.events import WorkerFailed, WorkerFinished

__all__ = [
    "DENY_RULES",
    "DROP_RULES",
    "OUTCOME_RULES",
    "STEP_RULES",
    "ended_rules",
    "rules_of",
]

OUTCOME_RULES: dict[str, tuple[str, ...]] = {
    "result": ("R-WORK-3",),
    "tool_error": ("R-WORK-3",),
    "failed": ("R-WORK-3",),
    "timed_out": ("R-WORK-1", "R-WORK-2"),
    "stopped": ("R-STOP-1",),
    "busy": ("R-ADM-5",),
    "unknown_tool": ("R-ADM-2",),
    "invalid_arguments": ("R-PROTO-6",),
    "input_required": ("R-MRTR-12",),
}
"""A ``call_ended`` outcome (R-LOG-2) other than ``denied`` and ``dropped`` -> its rules."""

DENY_RULES: dict[str, tuple[str, ...]] = {
    m.SENSITIVE_UNGUARDED: ("R-ADM-3",),
    m.AUTHORIZER_FAILED: ("R-AUTH-4",),
    m.TOO_MANY_PENDING: ("R-PARK-1",),
    m.TOO_MANY_ON_SERVER: ("R-PARK-3",),
    m.EVICTED: ("R-PARK-3", "R-PARK-4"),
    m.DECLINED: ("R-CLOSE-1", "R-CLOSE-2"),
    m.CANCELLED: ("R-CLOSE-2",),
    m.NOT_APPROVED: ("R-CLOSE-1", "R-CLOSE-2"),
    m.ELICITATION_FAILED: ("R-CLOSE-2",),
    m.TIMED_OUT: ("R-CLOSE-2", "R-PARK-2"),
    m.STOPPING: ("R-STOP-1",),
    m.CANNOT_ASK_DETAIL: ("R-AUTH-3",),
    m.ALREADY_USED: ("R-MRTR-13", "R-MRTR-14"),
    sealing.MALFORMED: ("R-MRTR-4", "R-MRTR-8"),
    sealing.CHANGED_ARGUMENTS: ("R-MRTR-3", "R-MRTR-8"),
    sealing.EXPIRED: ("R-MRTR-5", "R-MRTR-8"),
    "request state key unknown": ("R-MRTR-6", "R-MRTR-8"),
    "request state tampered": ("R-MRTR-4", "R-MRTR-8"),
    "request state of another principal": ("R-MRTR-2", "R-MRTR-8"),
    "request state of another tool": ("R-MRTR-2", "R-MRTR-8"),
}
"""The detail of a ``denied`` ``call_ended`` -> its rules. Any other detail is the reason of an
authorizer's deny (R-AUTH-2)."""

DROP_RULES: dict[str, tuple[str, ...]] = {
    "cancelled": ("R-DROP-1", "R-DROP-4"),
    "caller gone": ("R-DROP-2", "R-DROP-4"),
    "connection gone": ("R-DROP-3", "R-DROP-4"),
}
"""The detail of a ``dropped`` ``call_ended`` -> its rules."""

STEP_RULES: dict[str, tuple[str, ...]] = {
    "admitted, authorizer asked": ("R-ADM-1", "R-ADM-5", "R-AUTH-1"),
    "admitted, no authorizer": ("R-ADM-4", "R-ADM-5"),
    "admitted, approved retry": ("R-MRTR-13",),
    "admitted, unknown tool": ("R-ADM-2",),
    "admitted": ("R-ADM-0", "R-ADM-1"),
    "authorized: allow": ("R-AUTH-1", "R-ADM-5"),
    "parked": ("R-AUTH-3", "R-PARK-2", "R-LOG-3"),
    "answered: approved": ("R-CLOSE-1", "R-CLOSE-3"),
    "answered": ("R-CLOSE-2", "R-CLOSE-3"),
    "ran": ("R-WORK-3",),
    "replied": ("R-DLV-1", "R-DLV-2"),
    "replied by push": ("R-DLV-1", "R-DLV-3"),
    "deny": ("R-AUTH-2", "R-DLV-4"),
    "read denied": ("R-READ-2", "R-LOG-4"),
    "ended": ("R-LOG-1", "R-LOG-2"),
}
"""Every other step of a call's path -> its rules."""


def ended_rules(fields: dict[str, Any]) -> tuple[str, ...]:
    """The rules that decided the ending a ``call_ended`` record's ``fields`` say."""
    outcome = fields.get("outcome")
    detail = fields.get("detail")
    if outcome == "denied":
        found = DENY_RULES.get(str(detail))
        if found is not None:
            return found
        return STEP_RULES["deny"]
    if outcome == "dropped":
        return DROP_RULES.get(str(detail), ("R-DROP-4",))
    return OUTCOME_RULES.get(str(outcome), STEP_RULES["ended"])


def _transition_rules(before: State, event: object) -> tuple[str, ...]:
    """The rules of the transition row that takes ``event`` (the reducer's own tables)."""
    if isinstance(event, WorkerFinished | WorkerFailed):
        key = before.workers.get(event.ref)
        call = before.calls.get(key) if key is not None else None
        if call is not None:
            row = CALL_TRANSITIONS.get((type(event).__name__, call.stage))
            if row is not None:
                return tuple(row.rules)
    kind = type(event).__name__
    if kind in PARKED_TRANSITIONS and getattr(event, "elicitation_id", None) in before.parked:
        return tuple(PARKED_TRANSITIONS[kind].rules)
    row = EVENT_TRANSITIONS.get(type(event))
    return tuple(row.rules) if row is not None else ()


def rules_of(before: State, event: object, effects: Sequence[Effect]) -> tuple[str, ...]:
    """The rule ids of one step: those of its records (:func:`ended_rules`, a park, a read
    deny), else those of the transition row that took the event."""
    found: list[str] = []
    for effect in effects:
        if isinstance(effect, Emit):
            if effect.name == "call_ended":
                found.extend(ended_rules(effect.fields))
            elif effect.name == "call_parked":
                found.extend(STEP_RULES["parked"])
            elif effect.name == "read_denied":
                found.extend(STEP_RULES["read denied"])
    if not found:
        found.extend(_transition_rules(before, event))
    return tuple(dict.fromkeys(found))
