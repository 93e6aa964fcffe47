"""A small driver for example tests of the reducer: steps events, checks invariants every step."""

from __future__ import annotations

import re
from collections.abc import Hashable
from typing import Any

from askgate.core import (
    Allow,
    Ask,
    ClientInitialized,
    Effect,
    ElicitationAnswered,
    Emit,
    Event,
    Options,
    Push,
    Reply,
    StartWorker,
    State,
    SubscriberAttached,
    ToolCallReceived,
    ToolInfo,
    WorkerFinished,
    check_invariants,
    initial_state,
    step,
)

KEY = b"test-key-0123456789abcdef"
ELICIT: dict[str, Any] = {"elicitation": {}}
APPROVE: dict[str, Any] = {"action": "accept", "content": {"approve": True}}

DEFAULT_TOOLS = (
    ToolInfo("echo", sensitive=False, derived=False),
    ToolInfo("delete_file", sensitive=True, derived=False),
)


class Harness:
    """Feeds events to the reducer, keeps the state, and remembers what each step emitted."""

    def __init__(self, tools: tuple[ToolInfo, ...] | None = None, **options: Any) -> None:
        opts = Options(**options)
        if tools is None:
            tools = DEFAULT_TOOLS if opts.has_authorizer else DEFAULT_TOOLS[:1]
        self.state: State = initial_state(opts, id_key=KEY, tools=tools)
        self.now = 0
        self.effects: list[Effect] = []

    def feed(self, event: Event) -> list[Effect]:
        self.state, effects = step(self.state, event)
        check_invariants(self.state)
        self.effects = effects
        return effects

    # -- shortcuts --------------------------------------------------------------------------

    def connect(self, conn: Hashable, capabilities: object = ELICIT) -> None:
        """A connection that subscribed and initialized with ``capabilities``."""
        self.feed(SubscriberAttached(conn))
        self.feed(ClientInitialized(conn, capabilities))

    def call(
        self,
        conn: Hashable,
        request_id: object,
        tool: str = "echo",
        arguments: object = None,
        **kw: Any,
    ) -> list[Effect]:
        args = {} if arguments is None else arguments
        return self.feed(ToolCallReceived(conn, request_id, tool, args, self.now, **kw))

    def worker(self, effects: list[Effect] | None = None) -> int:
        """The ref of the single worker the last step (or ``effects``) started."""
        starts = [
            e for e in (self.effects if effects is None else effects) if isinstance(e, StartWorker)
        ]
        assert len(starts) == 1, starts
        return starts[0].ref

    def finish(self, ref: int, value: object) -> list[Effect]:
        return self.feed(WorkerFinished(ref, value, self.now))

    def park(self, conn: Hashable, request_id: object, prompt: str = "ok?", **kw: Any) -> str:
        """Calls ``echo`` and has the authorizer ask; returns the elicitation id it parked under."""
        self.call(conn, request_id, **kw)
        self.finish(self.worker(), Ask(prompt))
        return elicitation_id(self.effects)

    def allow(self, conn: Hashable, request_id: object, **kw: Any) -> int:
        """Calls ``echo`` and has the authorizer allow; returns the tool worker's ref."""
        self.call(conn, request_id, **kw)
        self.finish(self.worker(), Allow())
        return self.worker()

    def answer(
        self, conn: Hashable, eid: object, result: object, error: object = None
    ) -> list[Effect]:
        return self.feed(ElicitationAnswered(conn, eid, result, self.now, error))


def elicitation_id(effects: list[Effect]) -> str:
    pushes = [
        e.message["id"]
        for e in effects
        if isinstance(e, Push) and e.message.get("method") == "elicitation/create"
    ]
    assert len(pushes) == 1, effects
    return str(pushes[0])


def replies(effects: list[Effect]) -> list[Reply]:
    return [e for e in effects if isinstance(e, Reply)]


def pushes(effects: list[Effect]) -> list[Push]:
    return [e for e in effects if isinstance(e, Push)]


def only_reply(effects: list[Effect]) -> dict[str, Any]:
    """The message of the one ``Reply`` in ``effects``."""
    rs = replies(effects)
    assert len(rs) == 1, effects
    message = rs[0].message
    assert message is not None
    return message


def ended(
    conn: Hashable,
    request_id: object,
    outcome: str,
    tool: str = "echo",
    *,
    decision: str | None = None,
    approved: bool | None = None,
    detail: str | None = None,
    elicitation_id: str | None = None,
    evicted_by: Hashable | None = None,
    started: int = 0,
    duration: int = 0,
) -> Emit:
    """The ``call_ended`` record R-LOG-2 describes."""
    return Emit(
        "call_ended",
        {
            "conn": conn,
            "request_id": request_id,
            "tool": tool,
            "decision": decision,
            "approved": approved,
            "outcome": outcome,
            "detail": detail,
            "elicitation_id": elicitation_id,
            "evicted_by": evicted_by,
            "started_ms": started,
            "duration_ms": duration,
        },
    )


def records(effects: list[Effect], name: str = "call_ended") -> list[dict[str, Any]]:
    """The fields of the ``name`` records in ``effects``, in order."""
    return [e.fields for e in effects if isinstance(e, Emit) and e.name == name]


def deny_payload(message: dict[str, Any]) -> dict[str, Any]:
    """The structured authorization_required payload of a deny result."""
    result = message["result"]
    assert result["isError"] is True
    payload: dict[str, Any] = result["structuredContent"]
    assert payload["error"] == "authorization_required"
    return payload


_DIGEST_SHOWN = re.compile(r" \(arguments digest [0-9a-f]{12}\)$")


def without_digest(prompt: str) -> str:
    """An approval prompt as the authorizer wrote it: the one a ``Server`` sends ends with the
    arguments' digest (R-DLV-5), which this checks is there and takes off."""
    assert _DIGEST_SHOWN.search(prompt), prompt
    return _DIGEST_SHOWN.sub("", prompt)
