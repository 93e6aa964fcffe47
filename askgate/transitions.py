"""The reducer's transition tables as text (``askgate spec``, spec/transitions.md).

:func:`render` writes the tables the reducer dispatches on (``askgate.core.reducer``'s
``EVENT_TRANSITIONS``, ``CALL_TRANSITIONS`` and ``PARKED_TRANSITIONS``) and the door's
(``askgate.core.door.DOOR``), with the rules each row implements. Nothing in it is written by
hand: ``make spec`` writes it to spec/transitions.md, and tests/test_spec.py keeps the committed
file current.
"""

from __future__ import annotations

from askgate.core import CALL_TRANSITIONS, EVENT_TRANSITIONS, PARKED_TRANSITIONS
from askgate.core.door import DOOR


def _rules_cell(rule_ids: tuple[str, ...]) -> str:
    return ", ".join(rule_ids)


def render() -> str:
    """spec/transitions.md: the reducer's transition tables and the door's table, as text."""
    lines = [
        "# Transition tables (rendered from askgate.core.reducer by `make spec`; do not edit)",
        "",
        "## Events",
        "",
        "Every event kind, the handler that takes it, and the rules it implements.",
        "",
        "| event | handler | leads to | rules |",
        "| --- | --- | --- | --- |",
    ]
    for kind, t in EVENT_TRANSITIONS.items():
        name, handler = kind.__name__, t.handler.__name__
        lines.append(f"| `{name}` | `{handler}` | {t.leads_to} | {_rules_cell(t.rules)} |")
    lines += [
        "",
        "## A worker's end, by the stage of the call it serves",
        "",
        '`TimerFired` here is the worker\'s own timer `("worker", ref)`. A pair not listed cannot',
        "occur: only these stages hold a worker.",
        "",
        "| event | stage | handler | leads to | rules |",
        "| --- | --- | --- | --- | --- |",
    ]
    for (kind_name, stage), t in CALL_TRANSITIONS.items():
        lines.append(
            f"| `{kind_name}` | {stage.name} | `{t.handler.__name__}` | {t.leads_to} | "
            f"{_rules_cell(t.rules)} |"
        )
    lines += [
        "",
        "## What ends a PARKED call",
        "",
        "Each row closes or drops the call exactly once (R-CLOSE-3).",
        "",
        "| event | handler | leads to | rules |",
        "| --- | --- | --- | --- |",
    ]
    for row, t in PARKED_TRANSITIONS.items():
        lines.append(f"| {row} | `{t.handler.__name__}` | {t.leads_to} | {_rules_cell(t.rules)} |")
    lines += [
        "",
        "## The door: what a client message becomes",
        "",
        "`MessageReceived` decodes the message, and `askgate.core.door.meaning` turns it into the",
        "event below, whose handler (above) is the only code that acts on it (R-PROTO-15).",
        "",
        "| message | becomes | rules |",
        "| --- | --- | --- |",
    ]
    for entry in DOOR:
        if entry.becomes is None:
            becomes = "nothing"
        elif entry.becomes is dict:
            becomes = "an error reply"
        else:
            becomes = f"`{entry.becomes.__name__}`"
        if entry.note:
            becomes += f" ({entry.note})"
        lines.append(f"| {entry.message} | {becomes} | {_rules_cell(entry.rules)} |")
    return "\n".join(lines) + "\n"
