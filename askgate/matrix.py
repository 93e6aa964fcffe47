"""The decision matrix of a ``tools/call``, computed by running the reducer (``askgate spec``).

For every combination of what the authorizer returns, what the client can be asked, how full
the parking places are, and how the owner answers, :func:`outcomes` builds a fresh state, drives
:func:`askgate.core.step` through the call (the other connections' parked calls first, then the
call, its decision, the answer, and the tool's result when it runs) and reads what came out:
what the caller was sent, the ``call_ended`` record (R-LOG-2), and what happened to other calls.
:func:`rows` merges the combinations whose outcome does not depend on the remaining columns
(``any``), and :func:`render` writes the table of spec/matrix.md. Nothing in it is written by
hand: a change in the reducer's decisions changes the table (tests/test_spec.py keeps the
committed file current).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Final

import attrs

from askgate.core import (
    ELICITATION_TIMER,
    WORKER_TIMER,
    Allow,
    Ask,
    CancelRequested,
    ClientInitialized,
    Deny,
    Effect,
    ElicitationAnswered,
    Emit,
    Event,
    Options,
    Push,
    Reply,
    RunTool,
    ServerStopping,
    StartWorker,
    State,
    SubscriberAttached,
    SubscriberDetached,
    TimerFired,
    ToolCallReceived,
    ToolInfo,
    WorkerFailed,
    WorkerFinished,
    initial_state,
    step,
)
from askgate.core.decide import can_elicit

__all__ = [
    "ANSWERS",
    "CAPABILITIES",
    "DECISIONS",
    "PARKING",
    "Outcome",
    "outcomes",
    "render",
    "rows",
]

PROMPT: Final = "PROMPT"
REASON: Final = "REASON"
_KEY: Final = b"askgate-matrix-key-0123456789abc"
_ASKER: Final = "asker"
_CALL: Final = "call"
PER_CONNECTION: Final = 2
TOTAL: Final = 3
"""The parking caps of the runs: two per connection, three on the server."""

DECISIONS: Final = (
    "Allow",
    "Deny(reason)",
    "Ask(prompt)",
    "a value that is no decision",
    "raises",
    "runs past its timeout",
    "none configured, plain tool",
    "none configured, sensitive tool",
)
"""What the authorizer returns (the last two: the server has no authorizer)."""

CAPABILITIES: Final = {
    "form elicitation": {"elicitation": {}},
    "URL elicitation only": {"elicitation": {"url": {}}},
    "no elicitation": {},
}
"""What the client declared at ``initialize`` (R-CAP-4)."""

PARKING: Final = (
    "room",
    "its connection at its cap",
    "server full, it holds fewer than the most",
    "server full, it holds as many as the most",
)
"""The parked calls when the call is decided: none; two of the caller's connection (its cap);
three on the server, two of another connection's and one of a third's; three on the server,
one of each connection's. A client that cannot be asked holds no parked call, so the second and
the fourth cannot occur for it."""

_ANSWER_RESULTS: Final[dict[str, object]] = {
    "approves": {"action": "accept", "content": {"approve": True}},
    "accepts without approving": {"action": "accept", "content": {"approve": False}},
    "declines": {"action": "decline"},
    "cancels": {"action": "cancel"},
}
ANSWERS: Final = (
    *_ANSWER_RESULTS,
    "answers with an error",
    "no answer before the timeout",
    "the caller cancels the call",
    "the connection closes",
    "the server stops",
)
"""What happens to a parked call: the owner's answer, or what ends it instead."""


@attrs.frozen(slots=True)
class Outcome:
    """What one combination came to."""

    caller_gets: str
    decision: str
    detail: str
    recorded: str
    also: str


class _Run:
    def __init__(self, options: Options, tools: tuple[ToolInfo, ...]) -> None:
        self.state: State = initial_state(options, id_key=_KEY, tools=tools)
        self.now = 0
        self.log: list[Effect] = []

    def feed(self, event: Event) -> list[Effect]:
        self.state, effects = step(self.state, event)
        self.log += effects
        return effects

    def connect(self, conn: Hashable, capabilities: object) -> None:
        self.feed(SubscriberAttached(conn))
        self.feed(ClientInitialized(conn, capabilities))

    def call(self, conn: Hashable, request_id: str) -> int | None:
        """Calls the tool; the ref of the worker it started, if any."""
        effects = self.feed(ToolCallReceived(conn, request_id, "tool", {}, self.now))
        return next((e.ref for e in effects if isinstance(e, StartWorker)), None)

    def park(self, conn: Hashable, request_id: str) -> None:
        ref = self.call(conn, request_id)
        assert ref is not None
        effects = self.feed(WorkerFinished(ref, Ask("other"), self.now))
        assert _asked(effects) is not None, "a setup call was not parked"


def _asked(effects: Iterable[Effect]) -> str | None:
    for effect in effects:
        if isinstance(effect, Push) and effect.message.get("method") == "elicitation/create":
            return str(effect.message["id"])
    return None


def _setup(run: _Run, parking: str, capable: bool, configured: bool) -> bool:
    """Parks the other calls ``parking`` names; ``False`` when it cannot occur (a call parks
    only on a connection that can be asked, of a server with an authorizer)."""
    holds = {
        "room": (0, 0, 0),
        "its connection at its cap": (PER_CONNECTION, 0, 0),
        "server full, it holds fewer than the most": (0, 2, 1),
        "server full, it holds as many as the most": (1, 1, 1),
    }[parking]
    if (holds[0] and not capable) or (any(holds) and not configured):
        return False
    for conn, count in zip((_ASKER, "b", "c"), holds, strict=True):
        for k in range(count):
            run.park(conn, f"{conn}-{k}")
    return True


def _decide(run: _Run, decision: str, ref: int | None) -> None:
    if ref is None or decision.startswith("none configured"):
        return  # no authorizer: the tool runs at once, or the call was denied
    finished: dict[str, object] = {
        "Allow": Allow(),
        "Deny(reason)": Deny(REASON),
        "Ask(prompt)": Ask(PROMPT),
        "a value that is no decision": None,
    }
    if decision in finished:
        run.feed(WorkerFinished(ref, finished[decision], run.now))
    elif decision == "raises":
        run.feed(WorkerFailed(ref, run.now))
    else:
        run.feed(TimerFired((WORKER_TIMER, ref), run.now))


def _answer(run: _Run, answer: str, eid: str) -> None:
    if answer in _ANSWER_RESULTS:
        run.feed(ElicitationAnswered(_ASKER, eid, _ANSWER_RESULTS[answer], run.now))
        return
    events: dict[str, Callable[[], Event]] = {
        "answers with an error": lambda: ElicitationAnswered(
            _ASKER, eid, None, run.now, {"code": -32603, "message": "failed"}
        ),
        "no answer before the timeout": lambda: TimerFired((ELICITATION_TIMER, eid), run.now),
        "the caller cancels the call": lambda: CancelRequested(_ASKER, _CALL, run.now),
        "the connection closes": lambda: SubscriberDetached(_ASKER, run.now),
        "the server stops": lambda: ServerStopping(run.now),
    }
    run.feed(events[answer]())


def outcome(decision: str, capability: str, parking: str, answer: str) -> Outcome | None:
    """Runs one combination through the reducer; ``None`` when it cannot occur."""
    configured = not decision.startswith("none configured")
    sensitive = decision.endswith("sensitive tool")
    options = Options(
        has_authorizer=configured,
        max_parked_elicitations=PER_CONNECTION,
        max_parked_elicitations_total=TOTAL,
    )
    # With no authorizer, a sensitive tool is served only when registered after the start.
    tool = ToolInfo("tool", sensitive=sensitive or configured, derived=sensitive)
    run = _Run(options, (tool,))
    caps = CAPABILITIES[capability]
    run.connect(_ASKER, caps)
    run.connect("b", CAPABILITIES["form elicitation"])
    run.connect("c", CAPABILITIES["form elicitation"])
    if not _setup(run, parking, can_elicit(caps), configured):
        return None
    start = len(run.log)
    _decide(run, decision, run.call(_ASKER, _CALL))
    eid = _asked(e for e in run.log[start:] if isinstance(e, Push) and e.conn == _ASKER)
    if eid is not None:
        _answer(run, answer, eid)
    tool_ref = next(
        (
            e.ref
            for e in run.log[start:]
            if isinstance(e, StartWorker) and e.conn == _ASKER and isinstance(e.job, RunTool)
        ),
        None,
    )
    if tool_ref is not None and _open(run):
        run.feed(WorkerFinished(tool_ref, {"content": []}, run.now))
    return _read(run.log[start:])


def _open(run: _Run) -> bool:
    return (_ASKER, _CALL) in run.state.calls


def _shown(text: object) -> str:
    return {PROMPT: "*the prompt*", REASON: "*the reason*"}.get(str(text), f"`{text}`")


def _read(effects: list[Effect]) -> Outcome:
    sent = [
        e.message
        for e in effects
        if isinstance(e, Reply | Push)
        and e.conn == _ASKER
        and e.message is not None
        and e.message.get("id") == _CALL
    ]
    decision = detail = "-"
    if not sent:
        gets = "no reply"
    else:
        result = sent[-1].get("result")
        payload = result.get("structuredContent") if isinstance(result, dict) else None
        if isinstance(payload, dict) and payload.get("error") == "authorization_required":
            gets = "authorization_required"
            decision, detail = f"`{payload['decision']}`", _shown(payload["detail"])
        elif isinstance(payload, dict) and "error" in payload:
            gets = f"`{payload['error']}`"
        elif isinstance(result, dict):
            gets = "the tool's result"
        else:
            gets = "an error"
    ended = [
        e.fields
        for e in effects
        if isinstance(e, Emit) and e.name == "call_ended" and e.fields["request_id"] == _CALL
    ]
    recorded = "-"
    if ended:
        fields = ended[-1]
        recorded = f"{fields['outcome']}, decision {fields['decision'] or 'none'}"
        if fields["approved"] is not None:
            recorded += ", approved" if fields["approved"] else ", not approved"
        if fields["detail"]:
            recorded += f", {_shown(fields['detail'])}"
    also = []
    if any(
        isinstance(e, Push)
        and e.conn == _ASKER
        and e.message.get("method") == "notifications/cancelled"
        and e.related == _CALL
        for e in effects
    ):
        also.append("its prompt withdrawn")
    others: dict[str, int] = {}
    for e in effects:
        if isinstance(e, Emit) and e.name == "call_ended" and e.fields["request_id"] != _CALL:
            if e.fields["evicted_by"] is not None:
                also.append(
                    "evicts the oldest parked call of the connection holding the most "
                    f"({e.fields['outcome']}: {_shown(e.fields['detail'])})"
                )
            else:
                said = f"{e.fields['outcome']}: {_shown(e.fields['detail'])}"
                others[said] = others.get(said, 0) + 1
    also += [f"{n} other parked call{'s' if n > 1 else ''} {said}" for said, n in others.items()]
    return Outcome(gets, decision, detail, recorded, "; ".join(also) or "-")


Combination = tuple[str, str, str, str]


def outcomes() -> dict[Combination, Outcome]:
    """Every combination that can occur, and its outcome."""
    found = {}
    for decision in DECISIONS:
        for capability in CAPABILITIES:
            for parking in PARKING:
                for answer in ANSWERS:
                    result = outcome(decision, capability, parking, answer)
                    if result is not None:
                        found[(decision, capability, parking, answer)] = result
    return found


def rows(found: dict[Combination, Outcome]) -> list[tuple[tuple[str, ...], Outcome]]:
    """The matrix's rows. Where every combination under a prefix has the same outcome, one row
    says ``any`` in the remaining columns; values of a column whose rows below are the same are
    one row, their names joined by ``or``."""
    dimensions: tuple[tuple[str, ...], ...] = (
        DECISIONS,
        tuple(CAPABILITIES),
        PARKING,
        ANSWERS,
    )

    def table(
        under: dict[Combination, Outcome], depth: int
    ) -> list[tuple[tuple[str, ...], Outcome]]:
        distinct = set(under.values())
        if len(distinct) == 1:
            return [(("any",) * (len(dimensions) - depth), distinct.pop())]
        groups: dict[tuple[tuple[tuple[str, ...], Outcome], ...], list[str]] = {}
        for value in dimensions[depth]:
            mine = {c: o for c, o in under.items() if c[depth] == value}
            if mine:
                groups.setdefault(tuple(table(mine, depth + 1)), []).append(value)
        return [
            ((" or ".join(values), *cells), result)
            for below, values in groups.items()
            for cells, result in below
        ]

    return table(found, 0)


def covers(row: tuple[str, ...], combination: Combination) -> bool:
    """Whether the row (``any`` cells, and cells naming values joined by `` or ``) stands for
    ``combination``."""
    return all(
        cell == "any" or value in cell.split(" or ")
        for cell, value in zip(row, combination, strict=True)
    )


def render(found: dict[Combination, Outcome] | None = None) -> str:
    """spec/matrix.md."""
    table = rows(outcomes() if found is None else found)
    lines = [
        "# The decision matrix of a tools/call (computed by running the reducer; `make spec`)",
        "",
        "Each row is what `askgate.core.step` did when driven through the combinations it",
        "stands for (`askgate/matrix.py`): the authorizer's answer, what the client declared it",
        "can be asked (R-CAP-4), the parked calls when the call is decided (caps:",
        f"{PER_CONNECTION} per connection, {TOTAL} on the server, R-PARK-1 .. 4), and what ends",
        "the parked call (R-CLOSE-*, R-DROP-*, R-STOP-1). `any` means every value of that",
        "column that occurs gives the same outcome, `A or B` each of them. What the caller gets",
        "is the reply (R-DLV-4: the `decision` and `detail` of an `authorization_required`",
        "result); the `call_ended` record says outcome, decision, approval and detail (R-LOG-2).",
        "A client that cannot be asked, or a server with no authorizer, holds no parked call, so",
        "the parking states that need one do not occur for them.",
        "",
        "| authorizer | client | parked calls | answer | caller gets | decision | detail "
        "| recorded | also |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for cells, result in table:
        columns = (
            *cells,
            result.caller_gets,
            result.decision,
            result.detail,
            result.recorded,
            result.also,
        )
        lines.append("| " + " | ".join(columns) + " |")
    return "\n".join(lines) + "\n"
