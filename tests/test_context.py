"""A running tool's context (spec/rules.md, R-CTX-*): progress, logs, and its own requests."""

from __future__ import annotations

import json
from typing import Any

from askgate.core import (
    CancelRequested,
    CancelTimer,
    ClientInitialized,
    Failure,
    MessageReceived,
    Resolve,
    StartTimer,
    SubscriberAttached,
    SubscriberDetached,
    TimerFired,
    ToolLogged,
    ToolProgressed,
    ToolRequested,
    WorkerFailed,
)
from tests.harness import APPROVE, Harness, pushes

CAPS: dict[str, Any] = {"elicitation": {}, "sampling": {}}
FORM: dict[str, Any] = {
    "message": "Who are you?",
    "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
}
SAMPLE: dict[str, Any] = {
    "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
    "maxTokens": 100,
}


def running(h: Harness, conn: str = "a", rid: object = 1, **kw: Any) -> int:
    """A tool running for ``conn``'s request ``rid`` (no authorizer): its worker ref."""
    h.call(conn, rid, **kw)
    return h.worker()


def send(h: Harness, conn: str, message: dict[str, Any]) -> list[Any]:
    return h.feed(MessageReceived(conn, json.dumps(message).encode(), h.now))


def call_with_token(h: Harness, conn: str, rid: object, token: object) -> int:
    params = {"name": "echo", "arguments": {}, "_meta": {"progressToken": token}}
    send(h, conn, {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})
    return h.worker()


def resolved(effects: list[Any]) -> list[Resolve]:
    return [e for e in effects if isinstance(e, Resolve)]


def failure_reason(effects: list[Any]) -> str:
    (r,) = resolved(effects)
    assert isinstance(r.outcome, Failure), r
    data = r.outcome.data
    assert isinstance(data, dict)
    return str(data["error"])


def ask(h: Harness, ref: int, token: object = "t", method: str = "elicitation/create") -> str:
    """The tool asks; returns the id of the request pushed to its client."""
    effects = h.feed(ToolRequested(ref, token, method, FORM if "elicit" in method else SAMPLE))
    (push,) = pushes(effects)
    assert push.message["method"] == method
    return str(push.message["id"])


# -- R-CTX-1 ------------------------------------------------------------------------------------


def test_R_CTX_1_only_a_running_tool_has_a_context() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a", CAPS)
    h.call("a", 1)
    authorizer = h.worker()  # an authorizer's worker: not a running tool
    assert h.feed(ToolProgressed(authorizer, 1)) == []
    h.feed(
        MessageReceived(
            "a",
            b'{"jsonrpc":"2.0","id":9,"method":"logging/setLevel","params":{"level":"debug"}}',
            0,
        )
    )
    assert h.feed(ToolLogged(authorizer, "info", "x")) == []
    assert failure_reason(h.feed(ToolRequested(authorizer, "t", "elicitation/create", FORM))) == (
        "not_running"
    )
    assert failure_reason(h.feed(ToolRequested(999, "t", "elicitation/create", FORM))) == (
        "not_running"
    )
    assert len(h.state.client_requests) == 0


# -- R-CTX-2 ------------------------------------------------------------------------------------


def test_R_CTX_2_progress_goes_to_the_caller_increasing_only_when_it_asked() -> None:
    h = Harness()
    h.connect("a", CAPS)
    ref = call_with_token(h, "a", 1, "tok-1")
    effects = h.feed(ToolProgressed(ref, 0, 100, "starting"))
    (push,) = pushes(effects)
    assert push.conn == "a"
    assert push.related == 1
    assert push.message == {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "tok-1", "progress": 0, "total": 100, "message": "starting"},
    }
    assert h.feed(ToolProgressed(ref, 0)) == []  # not greater than the last
    assert h.feed(ToolProgressed(ref, float("inf"))) == []
    assert h.feed(ToolProgressed(ref, True)) == []
    assert h.feed(ToolProgressed(ref, 60, total="lots")) == []
    assert h.feed(ToolProgressed(ref, 60, message=7)) == []
    (push,) = pushes(h.feed(ToolProgressed(ref, 50.5)))
    assert push.message["params"] == {"progressToken": "tok-1", "progress": 50.5}
    # A call without a token gets no progress; the token goes with the call.
    other = running(h, "a", 2)
    assert h.feed(ToolProgressed(other, 1)) == []
    h.finish(ref, {"content": []})
    assert ("a", 1) not in h.state.progress
    # A token that is not a string or an integer is not recorded.
    bad = call_with_token(h, "a", 3, 1.5)
    assert h.feed(ToolProgressed(bad, 1)) == []


# -- R-CTX-3 ------------------------------------------------------------------------------------


def test_R_CTX_3_a_tools_log_goes_to_its_caller_at_the_callers_level() -> None:
    h = Harness()
    h.connect("a", CAPS)
    h.connect("b", CAPS)
    ref = running(h, "a", 1)
    assert h.feed(ToolLogged(ref, "info", "x")) == []  # "a" set no level
    for conn in ("a", "b"):
        level = {"a": "info", "b": "debug"}[conn]
        send(
            h,
            conn,
            {"jsonrpc": "2.0", "id": 9, "method": "logging/setLevel", "params": {"level": level}},
        )
    (push,) = pushes(h.feed(ToolLogged(ref, "warning", {"step": 1}, "tool")))
    assert (push.conn, push.related) == ("a", 1)  # the caller only, never "b"
    assert push.message == {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": "warning", "data": {"step": 1}, "logger": "tool"},
    }
    assert h.feed(ToolLogged(ref, "debug", "too low")) == []
    assert h.feed(ToolLogged(ref, "loud", "unknown level")) == []
    assert h.feed(ToolLogged(ref, ["info"], "not a level")) == []


# -- R-CTX-4 ------------------------------------------------------------------------------------


def test_R_CTX_4_a_tools_request_is_pushed_to_its_owner_with_a_timer() -> None:
    h = Harness(elicitation_timeout_ms=1_000)
    h.connect("a", CAPS)
    ref = running(h, "a", 1)
    h.now = 5
    effects = h.feed(ToolRequested(ref, "t", "elicitation/create", FORM, h.now))
    (push,) = pushes(effects)
    rid = push.message["id"]
    assert rid.startswith("askgate-request-")
    assert len(rid) == len("askgate-request-") + 22
    assert push.conn == "a"
    assert push.related == 1
    assert push.message["params"] == {"mode": "form", **FORM}  # no version: the latest shape
    assert StartTimer(("client_request", rid), 1_005) in effects
    assert resolved(effects) == []
    # Not approvals: nothing is parked, nothing counts against the parking caps.
    assert h.state.parked_total == 0
    assert h.state.store.count("a") == 0
    sample_id = ask(h, ref, "s", "sampling/createMessage")
    assert sample_id != rid
    assert pushes(h.effects)[0].message["params"] == SAMPLE


def test_R_CTX_4_older_revisions_get_no_mode_field() -> None:
    h = Harness()
    h.feed(SubscriberDetached("a"))
    h.feed(SubscriberAttached("a"))
    send(
        h,
        "a",
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": CAPS},
        },
    )
    ref = running(h, "a", 1)
    (push,) = pushes(h.feed(ToolRequested(ref, "t", "elicitation/create", FORM)))
    assert push.message["params"] == FORM


def test_R_CTX_4_refusals_in_order() -> None:
    h = Harness(max_client_requests_per_call=2)
    h.connect("a", {"elicitation": {}})  # no sampling
    h.connect("b", {})  # neither
    ref = running(h, "a", 1)
    bad = [
        ("roots/list", {}),
        ("elicitation/create", {"message": "no schema"}),
        ("elicitation/create", "not an object"),
        ("sampling/createMessage", {"messages": "x", "maxTokens": 1}),
        ("sampling/createMessage", {"messages": [], "maxTokens": True}),
    ]
    for method, params in bad:
        effects = h.feed(ToolRequested(ref, "t", method, params))
        assert failure_reason(effects) == "invalid_request", (method, params)
        outcome = resolved(effects)[0].outcome
        assert isinstance(outcome, Failure)
        assert outcome.code == -32602
    assert failure_reason(h.feed(ToolRequested(ref, "t", "sampling/createMessage", SAMPLE))) == (
        "client_cannot_sample"
    )
    other = running(h, "b", 1)
    assert failure_reason(h.feed(ToolRequested(other, "t", "elicitation/create", FORM))) == (
        "client_cannot_elicit"
    )
    ask(h, ref, "t1")
    ask(h, ref, "t2")
    assert failure_reason(h.feed(ToolRequested(ref, "t3", "elicitation/create", FORM))) == (
        "too_many_requests"
    )
    assert len(h.state.client_requests) == 2


def test_R_CTX_4_an_unsubscribed_owner_cannot_be_asked() -> None:
    h = Harness()
    h.feed(ClientInitialized("a", CAPS))  # initialized, never subscribed
    ref = running(h, "a", 1)
    assert failure_reason(h.feed(ToolRequested(ref, "t", "elicitation/create", FORM))) == (
        "client_cannot_elicit"
    )


# -- R-CTX-5 ------------------------------------------------------------------------------------


def test_R_CTX_5_answers_come_only_from_the_owner() -> None:
    h = Harness()
    h.connect("a", CAPS)
    h.connect("b", CAPS)
    ref = running(h, "a", 1)
    rid = ask(h, ref, "t")
    answer = {"action": "accept", "content": {"name": "Ada"}}
    assert h.answer("b", rid, answer) == []  # foreign: ignored, even knowing the id
    effects = h.answer("a", rid, answer)
    assert effects == [CancelTimer(("client_request", rid)), Resolve(ref, "t", answer)]
    assert h.answer("a", rid, answer) == []  # late
    # A JSON-RPC error is handed over as a Failure with the client's code and message.
    rid = ask(h, ref, "u", "sampling/createMessage")
    effects = send(h, "a", {"jsonrpc": "2.0", "id": rid, "error": {"code": -1, "message": "no"}})
    assert resolved(effects) == [Resolve(ref, "u", Failure(-1, "no", None))]
    rid = ask(h, ref, "v")
    assert failure_reason(h.answer("a", rid, ["not", "an", "object"])) == "invalid_answer"


def test_R_CTX_5_approval_ids_and_request_ids_never_cross() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a", CAPS)
    eid = h.park("a", 1)
    ref = h.allow("a", 2)
    rid = ask(h, ref, "t")
    # An approval sent to the client request settles only the client request.
    effects = h.answer("a", rid, APPROVE)
    assert resolved(effects) == [Resolve(ref, "t", APPROVE)]
    assert ("a", 1) in h.state.calls
    assert h.state.parked_total == 1
    effects = h.answer("a", eid, APPROVE)
    assert resolved(effects) == []
    assert h.state.parked_total == 0


# -- R-CTX-6 ------------------------------------------------------------------------------------


def test_R_CTX_6_a_request_times_out_withdrawn_and_resolved() -> None:
    h = Harness()
    h.connect("a", CAPS)
    ref = running(h, "a", 1)
    rid = ask(h, ref, "t")
    effects = h.feed(TimerFired(("client_request", rid), 60_000))
    (push,) = pushes(effects)
    assert push.message == {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": rid, "reason": "timed out"},
    }
    assert push.related == 1
    assert failure_reason(effects) == "timed_out"
    assert len(h.state.client_requests) == 0
    assert len(h.state.worker_requests) == 0
    assert h.feed(TimerFired(("client_request", rid), 60_001)) == []  # stale


def test_R_CTX_6_requests_are_withdrawn_when_their_tool_ends() -> None:
    for end in ("finished", "failed", "timeout", "cancel", "gone"):
        h = Harness()
        h.connect("a", CAPS)
        ref = running(h, "a", 1)
        first, second = ask(h, ref, "t1"), ask(h, ref, "t2")
        if end == "finished":
            effects = h.finish(ref, {"content": []})
        elif end == "failed":
            effects = h.feed(WorkerFailed(ref, 0))
        elif end == "timeout":
            effects = h.feed(TimerFired(("worker", ref), 300_000))
        elif end == "cancel":
            effects = h.feed(CancelRequested("a", 1, 0))
        else:
            effects = h.feed(SubscriberDetached("a"))
        cancels = [e for e in effects if isinstance(e, CancelTimer)]
        assert CancelTimer(("client_request", first)) in cancels
        assert CancelTimer(("client_request", second)) in cancels
        withdrawn = [
            p.message["params"]["requestId"]
            for p in pushes(effects)
            if p.message.get("method") == "notifications/cancelled"
        ]
        assert withdrawn == ([] if end == "gone" else [first, second]), end
        assert resolved(effects) == [], end  # nothing waits any more
        assert len(h.state.client_requests) == 0, end
        assert len(h.state.worker_requests) == 0, end
        assert h.answer("a", first, {"action": "accept"}) == []


def test_R_CTX_6_the_withdrawal_precedes_the_tools_result() -> None:
    h = Harness()
    h.connect("a", CAPS)
    ref = running(h, "a", 1)
    rid = ask(h, ref, "t")
    effects = h.finish(ref, {"content": []})
    kinds = [type(e).__name__ for e in effects]
    assert kinds.index("Push") < kinds.index("Reply"), effects
    assert rid not in h.state.client_requests
