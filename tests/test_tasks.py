"""Tasks in the reducer (spec/tasks.md, R-TASK-*): each test is named after the rule it checks
and drives the reducer with the events a shell would feed it (tests/harness.py checks the
invariants after every step)."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Literal

import anyio
import mcp_types as types
import pytest
from mcp import Client, ClientSession, MCPError
from mcp.client import ClientRequestContext
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types import _v2025_11_25 as v2025
from pydantic import ConfigDict, TypeAdapter

from askgate import Server
from askgate.core import (
    Allow,
    Ask,
    Authorize,
    CancelRequested,
    CancelTimer,
    ClientInitialized,
    ClientReady,
    Effect,
    ElicitationAnswered,
    Failure,
    KillWorker,
    MessageReceived,
    NeedsInput,
    Push,
    Reply,
    Resolve,
    RunTool,
    StartTimer,
    StartWorker,
    SubscriberAttached,
    SubscriberDetached,
    TimerFired,
    ToolCallReceived,
    ToolInfo,
    ToolRequested,
    WorkerFailed,
    WorkerFinished,
    tasks,
)
from askgate.core import messages as m
from askgate.core.events import ReadRequested
from tests.adapter_kits import APPROVE, Asked, denial, text
from tests.harness import Harness, records, replies
from tests.test_conformance_fixture import DEADLINE, EXAMPLES, serving

VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPS_KEY = "io.modelcontextprotocol/clientCapabilities"
TASKS_CAPS: dict[str, Any] = {"elicitation": {}, "extensions": {tasks.EXTENSION: {}}}
PLAIN_CAPS: dict[str, Any] = {"elicitation": {}}
WINDOW = 100


def definition(name: str, support: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "inputSchema": {"type": "object"}}
    if support is not None:
        entry["execution"] = {"taskSupport": support}
    return entry


TOOLS = (
    ToolInfo("plain", False, False, definition("plain", None)),
    ToolInfo("slow", False, False, definition("slow", "optional")),
    ToolInfo("job", False, False, definition("job", "required")),
)


def meta(capabilities: object = None) -> dict[str, Any]:
    return {
        VERSION_KEY: "2026-07-28",
        CAPS_KEY: TASKS_CAPS if capabilities is None else capabilities,
    }


def harness(**options: Any) -> Harness:
    options.setdefault("task_inline_ms", WINDOW)
    return Harness(tools=TOOLS, **options)


def call(
    h: Harness, conn: object, rid: object, tool: str = "slow", caps: object = None, **kw: Any
) -> list[Effect]:
    kw.setdefault("principal", "alice")  # the owner (R-PARK-5) of every call but where named
    return h.feed(ToolCallReceived(conn, rid, tool, {}, h.now, meta=meta(caps), **kw))


def request(
    h: Harness, conn: object, rid: object, method: str, params: dict[str, Any], **kw: Any
) -> dict[str, Any]:
    """A modern ``tasks/*`` request; the message it is answered with."""
    shown = {**params, "_meta": meta(kw.pop("caps", None))}
    kw.setdefault("principal", "alice")
    effects = h.feed(ReadRequested(conn, rid, method, shown, h.now, **kw))
    (reply,) = replies(effects)
    assert reply.message is not None
    return reply.message


def escalated(
    h: Harness, conn: object = "c1", rid: object = 1, tool: str = "slow", who: str = "alice"
) -> str:
    """A call of ``tool`` whose window ran out while it ran: its task's id."""
    effects = call(h, conn, rid, tool, principal=who)
    timers = [e for e in effects if isinstance(e, StartTimer) and e.key[0] == tasks.INLINE_TIMER]
    assert len(timers) == 1
    h.now = timers[0].deadline
    effects = h.feed(TimerFired(timers[0].key, h.now))
    (reply,) = [e for e in replies(effects) if e.conn == conn]
    assert reply.message is not None
    created = reply.message["result"]
    assert created["resultType"] == "task"
    return str(created["taskId"])


def get(h: Harness, tid: str, conn: object = "g", rid: object = "get", **kw: Any) -> dict[str, Any]:
    return request(h, conn, rid, "tasks/get", {"taskId": tid}, **kw)


def worker_of(h: Harness, tid: str) -> int:
    task = h.state.tasks[tid]
    return h.state.working[task.call].worker


# --- R-TASK-1 -----------------------------------------------------------------------------


def test_R_TASK_1_a_tool_declares_its_support_in_its_definition() -> None:
    server = Server("t", authorizer=lambda *_: Allow())

    @server.tool(task_support="optional")
    async def slow() -> str:
        return "ok"

    @server.tool()
    async def plain() -> str:
        return "ok"

    found = server.tool_definitions()
    assert found["slow"]["execution"] == {"taskSupport": "optional"}
    assert "execution" not in found["plain"]
    with pytest.raises(TypeError, match="task_support"):
        server.tool(task_support="sometimes")
    assert tasks.support(TOOLS[0]) == "forbidden"
    assert tasks.support(TOOLS[1]) == "optional"
    assert tasks.support(TOOLS[2]) == "required"
    odd = ToolInfo("odd", False, False, {"name": "odd", "execution": {"taskSupport": "yes"}})
    assert tasks.support(odd) == "forbidden"


# --- R-TASK-2 -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "caps", "window"),
    [
        ("plain", None, False),  # forbidden, declared: inline
        ("plain", PLAIN_CAPS, False),  # forbidden, not declared: inline
        ("slow", PLAIN_CAPS, False),  # optional, not declared: inline
        ("slow", None, True),  # optional, declared: escalate
        ("job", None, True),  # required, declared: escalate
    ],
)
def test_R_TASK_2_the_mode_follows_support_and_declaration(
    tool: str, caps: object, window: bool
) -> None:
    h = harness()
    effects = call(h, "c1", 1, tool, caps)
    timers = [e for e in effects if isinstance(e, StartTimer) and e.key[0] == tasks.INLINE_TIMER]
    assert bool(timers) == window
    assert not replies(effects)  # admitted: a worker runs it


def test_R_TASK_2_a_2025_request_is_inline_whatever_its_tool_declares() -> None:
    h = harness()
    h.connect("s")
    params = {"name": "job", "arguments": {}, "task": {"ttl": 1000}}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    effects = h.feed(MessageReceived("s", json.dumps(message).encode(), h.now))
    assert not [e for e in effects if isinstance(e, StartTimer) and e.key[0] == tasks.INLINE_TIMER]
    assert not replies(effects)


# --- R-TASK-3 -----------------------------------------------------------------------------


def test_R_TASK_3_required_and_not_declared_is_refused_before_admission() -> None:
    h = harness(has_authorizer=True)
    effects = call(h, "c1", 1, "job", PLAIN_CAPS)
    message = replies(effects)[0].message
    assert message is not None
    assert message["error"]["code"] == -32021
    assert message["error"]["data"] == {
        "requiredCapabilities": {"extensions": {tasks.EXTENSION: {}}}
    }
    assert not [e for e in effects if type(e).__name__ == "StartWorker"]  # not even authorized
    assert records(effects)[0]["outcome"] == "error"


# --- R-TASK-4 -----------------------------------------------------------------------------


def test_R_TASK_4_a_call_answered_inside_the_window_is_answered_inline() -> None:
    h = harness()
    call(h, "c1", 1)
    h.now = WINDOW - 1  # the last ms of the window: still inline
    effects = h.finish(h.worker(), {"content": []})
    message = replies(effects)[0].message
    assert message is not None
    assert message["result"]["resultType"] == "complete"
    assert [e for e in effects if isinstance(e, CancelTimer) and e.key[0] == tasks.INLINE_TIMER]
    assert not h.state.task_pending
    # the window's timer, had it raced the answer, finds the decision made
    late = h.feed(TimerFired((tasks.INLINE_TIMER, (("c1", 1), 0)), WINDOW))
    assert late == []
    assert not h.state.tasks


def test_R_TASK_4_the_window_ending_makes_a_task_before_the_answer() -> None:
    h = harness()
    tid = escalated(h)
    assert h.now == WINDOW  # exactly at now + task_inline_ms
    created = h.state.tasks[tid]
    assert created.status == "working"
    found = get(h, tid)["result"]  # at once: the task exists when its handle is sent
    assert found["taskId"] == tid
    assert found["status"] == "working"
    assert found["resultType"] == "complete"
    for absent in ("requestState", "result", "error", "inputRequests"):
        assert absent not in found


def test_R_TASK_4_the_result_after_the_hand_off_goes_to_the_task() -> None:
    h = harness()
    tid = escalated(h)
    ref = worker_of(h, tid)
    effects = h.finish(ref, {"content": [{"type": "text", "text": "done"}]})
    assert not [e for e in effects if isinstance(e, Reply)]  # the request was answered already
    found = get(h, tid)["result"]
    assert found["status"] == "completed"
    assert found["result"]["content"][0]["text"] == "done"


def test_R_TASK_4_a_tool_that_asks_its_client_becomes_a_task_at_once() -> None:
    h = harness()
    call(h, "c1", 1)
    ref = h.worker()
    h.now = 5
    schema = {"type": "object", "properties": {}}
    effects = h.feed(
        ToolRequested(
            ref, "tok", "elicitation/create", {"message": "Sure?", "requestedSchema": schema}, h.now
        )
    )
    (reply,) = [e for e in replies(effects) if e.conn == "c1"]
    assert reply.message is not None
    tid = reply.message["result"]["taskId"]
    found = get(h, tid)["result"]
    assert found["status"] == "input_required"
    (key,) = found["inputRequests"]
    assert found["inputRequests"][key]["method"] == "elicitation/create"


def test_R_TASK_4_a_stale_window_timer_leaves_a_reused_ids_window_open() -> None:
    """The window timer of a call answered inline, firing late (it raced its cancel), must not
    touch the window of a later call that reuses the request id: that one still escalates."""
    h = harness()
    call(h, "c1", 1)
    h.finish(h.worker(), {"content": []})  # answered inline: the id is free again
    h.now = 10
    effects = call(h, "c1", 1)
    (timer,) = [e for e in effects if isinstance(e, StartTimer) and e.key[0] == tasks.INLINE_TIMER]
    stale = (tasks.INLINE_TIMER, (("c1", 1), 0))
    assert timer.key != stale
    assert h.feed(TimerFired(stale, WINDOW)) == []
    h.now = timer.deadline
    effects = h.feed(TimerFired(timer.key, h.now))
    (reply,) = replies(effects)
    assert reply.message is not None
    assert reply.message["result"]["resultType"] == "task"


def test_R_TASK_4_a_reused_id_is_refused_and_the_window_stays_open() -> None:
    """R-ADM-1, R-TASK-4: a request reusing the id of a call in its inline window is refused
    (-32600) and answers only itself: the call's window stays open, its timer armed, and the
    call becomes a task when the window ends."""
    h = harness()
    started = call(h, "c1", 1)
    (timer,) = [e for e in started if isinstance(e, StartTimer) and e.key[0] == tasks.INLINE_TIMER]
    effects = call(h, "c1", 1)
    (refusal,) = replies(effects)
    assert refusal.message is not None
    assert refusal.message["error"]["code"] == -32600
    assert not [e for e in effects if isinstance(e, CancelTimer)]
    assert h.state.task_pending
    h.now = timer.deadline
    (reply,) = replies(h.feed(TimerFired(timer.key, h.now)))
    assert reply.message is not None
    assert reply.message["result"]["resultType"] == "task"


def test_R_TASK_4_a_call_dropped_in_its_window_closes_the_window() -> None:
    """A call cancelled while in its inline window is answered (with nothing, R-DROP-4): its
    window closes with it, its timer cancelled, as for any other answer."""
    h = harness()
    call(h, "c1", 1)
    effects = h.feed(CancelRequested("c1", 1, h.now))
    assert not h.state.task_pending
    assert [e for e in effects if isinstance(e, CancelTimer) and e.key[0] == tasks.INLINE_TIMER]


# --- R-TASK-5 -----------------------------------------------------------------------------


def test_R_TASK_5_the_request_going_away_does_not_touch_the_task() -> None:
    h = harness()
    tid = escalated(h)
    effects = h.feed(SubscriberDetached("c1", h.now))
    assert not [e for e in effects if isinstance(e, KillWorker)]
    assert h.state.tasks[tid].status == "working"


def test_R_TASK_5_a_tool_error_completes_a_crash_fails() -> None:
    h = harness()
    tid = escalated(h)
    h.finish(worker_of(h, tid), {"isError": True, "content": [{"type": "text", "text": "no"}]})
    done = get(h, tid)["result"]
    assert done["status"] == "completed"
    assert done["result"]["isError"] is True
    tid2 = escalated(h, "c2", 2)
    h.feed(WorkerFailed(worker_of(h, tid2), h.now))
    failed = get(h, tid2, rid="get2")["result"]
    assert failed["status"] == "failed"
    assert "result" not in failed
    assert failed["error"]["code"] == -32603
    assert failed["error"]["data"] == {"error": "callback_failed"}


# --- R-TASK-6 -----------------------------------------------------------------------------


def test_R_TASK_6_live_tasks_are_capped_per_owner_then_stay_inline() -> None:
    h = harness(max_tasks_per_owner=1, max_tasks_total=2)
    escalated(h, "c1", 1)
    call(h, "c2", 2)
    h.now += WINDOW
    effects = h.feed(TimerFired((tasks.INLINE_TIMER, (("c2", 2), 1)), h.now))
    assert not replies(effects)  # no task: the call goes on inline
    assert h.state.live_tasks == 1
    effects = h.finish(h.state.working[("c2", 2)].worker, {"content": []})
    assert replies(effects)[0].message["result"]["resultType"] == "complete"  # type: ignore[index]


def test_R_TASK_6_a_finished_task_frees_its_place() -> None:
    h = harness(max_tasks_per_owner=1, max_tasks_total=2)
    first = escalated(h, "c1", 1)
    assert h.state.owner_tasks[("principal", "alice")] == 1
    h.finish(worker_of(h, first), {"content": []})
    assert h.state.live_tasks == 0
    assert not h.state.owner_tasks
    assert escalated(h, "c3", 3) in h.state.tasks


def test_R_TASK_6_owners_are_principals() -> None:
    h = harness(max_tasks_per_owner=1, max_tasks_total=2)
    for n, who in enumerate(("alice", "bob", "carol")):
        effects = call(h, f"c{n}", n, principal=who)
        timer = [e for e in effects if isinstance(e, StartTimer)][-1]
        h.feed(TimerFired(timer.key, timer.deadline))
    assert h.state.live_tasks == 2  # the total: carol's call stayed inline


# --- R-TASK-7 -----------------------------------------------------------------------------


def test_R_TASK_7_another_principal_gets_what_an_unknown_task_gets() -> None:
    h = harness()
    effects = call(h, "c1", 1, principal="alice")
    timer = [e for e in effects if isinstance(e, StartTimer)][-1]
    h.now = timer.deadline
    effects = h.feed(TimerFired(timer.key, h.now))
    tid = replies(effects)[0].message["result"]["taskId"]  # type: ignore[index]
    mine = get(h, tid, principal="alice")
    assert mine["result"]["taskId"] == tid
    theirs = get(h, tid, rid="x", principal="mallory")
    unknown = get(h, "askgate-task-nope", rid="x", principal="mallory")
    assert theirs == unknown
    assert theirs["error"]["code"] == -32602
    for method in ("tasks/cancel", "tasks/update"):
        refused = request(h, "g", "y", method, {"taskId": tid}, principal="mallory")
        assert refused["error"]["code"] == -32602
    assert h.state.tasks[tid].status == "working"


def test_R_TASK_7_undeclared_and_removed_methods() -> None:
    h = harness()
    tid = escalated(h)
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        answer = request(h, "g", method, method, {"taskId": tid}, caps=PLAIN_CAPS)
        assert answer["error"]["code"] == -32021
    for method in ("tasks/result", "tasks/list"):
        assert request(h, "g", method, method, {"taskId": tid})["error"]["code"] == -32601


# --- R-TASK-8 -----------------------------------------------------------------------------


def test_R_TASK_8_cancel_kills_the_worker_and_is_idempotent() -> None:
    h = harness()
    tid = escalated(h)
    ref = worker_of(h, tid)
    effects = h.feed(
        ReadRequested(
            "g", "k", "tasks/cancel", {"taskId": tid, "_meta": meta()}, h.now, principal="alice"
        )
    )
    assert KillWorker(ref) in effects
    ack = next(e for e in replies(effects) if e.conn == "g").message
    assert ack is not None
    assert ack["result"]["resultType"] == "complete"
    assert "taskId" not in ack["result"]
    assert "status" not in ack["result"]
    assert records(effects)[0]["outcome"] == "dropped"
    assert get(h, tid)["result"]["status"] == "cancelled"
    assert h.finish(ref, {"content": []}) == []  # a killed worker's value is not looked at
    again = request(h, "g", "k2", "tasks/cancel", {"taskId": tid})
    assert again["result"]["resultType"] == "complete"
    assert get(h, tid, rid="g3")["result"]["status"] == "cancelled"


# --- R-TASK-9 -----------------------------------------------------------------------------


def test_R_TASK_9_a_finished_task_is_forgotten_after_its_ttl_not_before() -> None:
    h = harness(task_ttl_ms=1000)
    tid = escalated(h)
    h.now += 7
    effects = h.finish(worker_of(h, tid), {"content": []})
    (ttl,) = [e for e in effects if isinstance(e, StartTimer) and e.key[0] == tasks.TTL_TIMER]
    assert ttl.deadline == h.now + 1000
    assert get(h, tid)["result"]["ttlMs"] == 1000
    h.feed(TimerFired(ttl.key, ttl.deadline))
    assert get(h, tid, rid="again")["error"]["code"] == -32602


def test_R_TASK_9_a_live_task_is_not_forgotten() -> None:
    h = harness(task_ttl_ms=1000)
    tid = escalated(h)
    h.feed(TimerFired((tasks.TTL_TIMER, tid), h.now + 5000))
    assert get(h, tid)["result"]["status"] == "working"


# --- R-TASK-10 ----------------------------------------------------------------------------


def asked_task(h: Harness) -> tuple[str, str]:
    """A task whose authorizer asked once the window ran out: its id and the approval's key."""
    call(h, "c1", 1)
    auth = h.worker()
    h.now = WINDOW
    effects = h.feed(TimerFired((tasks.INLINE_TIMER, (("c1", 1), 0)), h.now))
    tid = replies(effects)[0].message["result"]["taskId"]  # type: ignore[index]
    h.finish(auth, Ask("Allow slow?"))
    found = get(h, tid)["result"]
    assert found["status"] == "input_required"
    (key,) = found["inputRequests"]
    assert found["inputRequests"][key]["method"] == "elicitation/create"
    return tid, key


def test_R_TASK_10_an_approved_ask_runs_the_tool_once() -> None:
    h = harness(has_authorizer=True)
    tid, key = asked_task(h)
    approve = {key: {"action": "accept", "content": {"approve": True}}}
    effects = h.feed(
        ReadRequested(
            "g",
            "u",
            "tasks/update",
            {"taskId": tid, "inputResponses": approve, "_meta": meta()},
            h.now,
            principal="alice",
        )
    )
    assert len([e for e in effects if type(e).__name__ == "StartWorker"]) == 1
    assert get(h, tid)["result"]["status"] == "working"
    again = h.feed(
        ReadRequested(
            "g",
            "u2",
            "tasks/update",
            {"taskId": tid, "inputResponses": approve, "_meta": meta()},
            h.now,
            principal="alice",
        )
    )
    assert not [e for e in again if type(e).__name__ == "StartWorker"]  # single use
    h.finish(worker_of(h, tid), {"content": [{"type": "text", "text": "ran"}]})
    assert get(h, tid, rid="g2")["result"]["status"] == "completed"


@pytest.mark.parametrize("how", ["decline", "cancel", "timeout"])
def test_R_TASK_10_decline_cancel_and_silence_end_in_the_deny(how: str) -> None:
    h = harness(has_authorizer=True, elicitation_timeout_ms=500)
    tid, key = asked_task(h)
    if how == "timeout":
        h.now += 500
        h.feed(TimerFired(("elicitation", key), h.now))
    else:
        answer = {key: {"action": how}}
        params = {"taskId": tid, "inputResponses": answer, "_meta": meta()}
        h.feed(ReadRequested("g", "u", "tasks/update", params, h.now, principal="alice"))
    done = get(h, tid, rid="after")["result"]
    assert done["status"] == "completed"
    assert done["result"]["isError"] is True
    assert done["result"]["structuredContent"]["error"] == "authorization_required"


def test_R_TASK_10_an_ask_in_a_task_is_evicted_like_any_approval() -> None:
    h = harness(has_authorizer=True, max_parked_elicitations=1, max_parked_elicitations_total=1)
    tid, _ = asked_task(h)
    h.connect("s")  # a 2025 session of another owner asks: the task's approval is evicted
    h.call("s", 9, "plain")
    h.finish(h.worker(), Ask("Allow?"))
    done = get(h, tid, rid="after")["result"]
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"]["detail"] == m.EVICTED


def test_R_TASK_10_a_partial_update_keeps_the_rest_waiting() -> None:
    h = harness()
    call(h, "c1", 1)
    ref = h.worker()
    schema = {"type": "object", "properties": {}}
    params = {"message": "?", "requestedSchema": schema}
    effects = h.feed(ToolRequested(ref, "a", "elicitation/create", params, h.now))
    tid = replies(effects)[0].message["result"]["taskId"]  # type: ignore[index]
    h.feed(ToolRequested(ref, "b", "elicitation/create", params, h.now))
    first, second = get(h, tid)["result"]["inputRequests"]
    answer = {first: {"action": "accept", "content": {}}, "nobody": {"action": "accept"}}
    effects = h.feed(
        ReadRequested(
            "g",
            "u",
            "tasks/update",
            {"taskId": tid, "inputResponses": answer, "_meta": meta()},
            h.now,
            principal="alice",
        )
    )
    assert next(e for e in effects if isinstance(e, Resolve)).token == "a"
    after = get(h, tid, rid="g2")["result"]
    assert after["status"] == "input_required"
    assert list(after["inputRequests"]) == [second]
    answer = {second: {"action": "accept", "content": {}}}
    h.feed(
        ReadRequested(
            "g",
            "u2",
            "tasks/update",
            {"taskId": tid, "inputResponses": answer, "_meta": meta()},
            h.now,
            principal="alice",
        )
    )
    assert get(h, tid, rid="g3")["result"]["status"] == "working"


def test_R_TASK_10_failure_is_a_client_request_refusal_not_a_crash() -> None:
    """A tool's own request that times out in a task is refused to the tool as inline."""
    h = harness(elicitation_timeout_ms=300)
    call(h, "c1", 1)
    ref = h.worker()
    params = {"message": "?", "requestedSchema": {"type": "object", "properties": {}}}
    effects = h.feed(ToolRequested(ref, "a", "elicitation/create", params, h.now))
    tid = replies(effects)[0].message["result"]["taskId"]  # type: ignore[index]
    (key,) = get(h, tid)["result"]["inputRequests"]
    effects = h.feed(TimerFired(("client_request", key), h.now + 300))
    (resolve,) = [e for e in effects if isinstance(e, Resolve)]
    assert isinstance(resolve.outcome, Failure)
    assert get(h, tid, rid="g2")["result"]["status"] == "working"  # withdrawn: nothing waits


# --- R-TASK-11 ----------------------------------------------------------------------------

NAME_FORM = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
}
ROUND = NeedsInput({"who": NAME_FORM}, {"step": 1})


def update(h: Harness, tid: str, responses: object, rid: object = "u") -> list[Effect]:
    params = {"taskId": tid, "inputResponses": responses, "_meta": meta()}
    return h.feed(ReadRequested("g", rid, "tasks/update", params, h.now, principal="alice"))


def started(effects: list[Effect]) -> list[StartWorker]:
    return [e for e in effects if isinstance(e, StartWorker)]


def round_task(h: Harness, conn: object = "c1", rid: object = 1) -> str:
    """A task whose tool, running past its window, ended a round: the task's id."""
    tid = escalated(h, conn, rid)
    h.finish(worker_of(h, tid), ROUND)
    return tid


def test_R_TASK_11_a_round_in_a_task_is_input_required_and_its_state_never_shown() -> None:
    h = harness()
    tid = round_task(h)
    found = get(h, tid)["result"]
    assert found["status"] == "input_required"
    assert found["inputRequests"] == {"who": NAME_FORM}  # under the tool's own keys
    assert "requestState" not in found
    assert len(h.state.parked) == 1  # the round's nonce, parked as an inline round's


def test_R_TASK_11_an_update_reruns_the_tool_once_with_the_answers_and_its_state() -> None:
    h = harness()
    tid = round_task(h)
    answers = {"who": {"action": "accept", "content": {"name": "Ada"}}}
    effects = update(h, tid, answers)
    (start,) = started(effects)
    assert isinstance(start.job, RunTool)
    assert start.job.round is not None
    assert start.job.round.responses == answers  # exactly as sent
    assert start.job.round.state == {"step": 1}
    assert not h.state.parked  # the nonce taken: its place is free
    assert get(h, tid)["result"]["status"] == "working"
    assert not started(update(h, tid, answers, "u2"))  # single use: nothing runs twice
    h.finish(start.ref, {"content": [{"type": "text", "text": "Hello, Ada"}]})
    done = get(h, tid, rid="g2")["result"]
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "Hello, Ada"


def test_R_TASK_11_a_round_nobody_answers_fails_the_task_and_frees_its_place() -> None:
    h = harness(elicitation_timeout_ms=500)
    tid = round_task(h)
    (timer,) = [e for e in h.effects if isinstance(e, StartTimer) and e.key[0] == tasks.ROUND_TIMER]
    assert timer.deadline == h.now + 500
    h.now = timer.deadline
    h.feed(TimerFired(timer.key, h.now))
    failed = get(h, tid)["result"]
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == -32602
    assert not h.state.parked
    assert h.state.live_tasks == 0
    answers = {"who": {"action": "accept", "content": {"name": "Ada"}}}
    assert not started(update(h, tid, answers))  # too late: nothing runs


def test_R_TASK_11_cancel_takes_the_rounds_nonce() -> None:
    h = harness()
    tid = round_task(h)
    request(h, "g", "k", "tasks/cancel", {"taskId": tid})
    assert get(h, tid)["result"]["status"] == "cancelled"
    assert not h.state.parked
    answers = {"who": {"action": "accept", "content": {"name": "Ada"}}}
    assert not started(update(h, tid, answers))


def test_R_TASK_11_a_round_takes_a_parking_place_under_the_same_caps() -> None:
    h = harness(max_parked_elicitations=1, max_parked_elicitations_total=4)
    first = round_task(h, "c1", 1)
    second = round_task(h, "c2", 2)  # the same owner: its one place is taken
    assert get(h, first)["result"]["status"] == "input_required"
    done = get(h, second, rid="g2")["result"]
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"]["detail"] == m.TOO_MANY_PENDING


def test_R_TASK_11_a_round_asks_only_what_the_request_declared() -> None:
    h = harness()
    caps: dict[str, Any] = {"extensions": {tasks.EXTENSION: {}}}  # no elicitation
    effects = call(h, "c1", 1, caps=caps)
    (timer,) = [e for e in effects if isinstance(e, StartTimer) and e.key[0] == tasks.INLINE_TIMER]
    h.now = timer.deadline
    effects = h.feed(TimerFired(timer.key, h.now))
    tid = replies(effects)[0].message["result"]["taskId"]  # type: ignore[index]
    h.finish(worker_of(h, tid), ROUND)
    failed = get(h, tid)["result"]
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == -32021
    assert not h.state.parked


def test_R_TASK_11_a_task_approved_once_is_not_asked_again_after_its_round() -> None:
    h = harness(has_authorizer=True)
    tid, key = asked_task(h)
    effects = update(h, tid, {key: {"action": "accept", "content": {"approve": True}}})
    (start,) = started(effects)
    assert isinstance(start.job, RunTool)
    assert start.job.round is not None  # told its request's round: it may end one
    h.finish(start.ref, ROUND)
    assert get(h, tid)["result"]["status"] == "input_required"
    effects = update(h, tid, {"who": {"action": "accept", "content": {"name": "Ada"}}}, "u2")
    (again,) = started(effects)
    assert isinstance(again.job, RunTool)  # at once: no second Authorize, no second ask
    assert not [e for e in effects if isinstance(e, StartWorker) and isinstance(e.job, Authorize)]


def test_R_TASK_11_an_unapproved_rerun_goes_through_the_authorizer() -> None:
    h = harness(has_authorizer=True)
    effects = call(h, "c1", 1)
    h.finish(h.worker(effects), Allow())
    tool = h.worker()
    h.now = WINDOW
    effects = h.feed(TimerFired((tasks.INLINE_TIMER, (("c1", 1), 0)), h.now))
    tid = replies(effects)[0].message["result"]["taskId"]  # type: ignore[index]
    h.finish(tool, ROUND)
    effects = update(h, tid, {"who": {"action": "accept", "content": {"name": "Ada"}}})
    (auth,) = started(effects)
    assert isinstance(auth.job, Authorize)


# --- The 2025-11-25 era (R-TASK-12 .. R-TASK-15) -------------------------------------------

LEGACY = "2025-11-25"
LEGACY_CAPS: dict[str, Any] = {"elicitation": {}, "tasks": {"requests": {}}}
RELATED = "io.modelcontextprotocol/related-task"
TASK_APPROVAL = "askgate_task_approval"


def session(
    h: Harness, conn: object, caps: object = None, version: str = LEGACY, principal: Any = None
) -> dict[str, Any]:
    """A session that initialized at ``version`` (its client declaring ``caps``, tasks by
    default) and said it is initialized; the ``initialize`` answer's result."""
    h.feed(SubscriberAttached(conn, principal=principal))
    shown = LEGACY_CAPS if caps is None else caps
    effects = h.feed(ClientInitialized(conn, shown, h.now, "init", version))
    h.feed(ClientReady(conn, h.now))
    (reply,) = replies(effects)
    assert reply.message is not None
    return dict(reply.message["result"])


def legacy_call(
    h: Harness, conn: object, rid: object, tool: str = "slow", task: object = None
) -> list[Effect]:
    return h.feed(ToolCallReceived(conn, rid, tool, {}, h.now, task=task))


def legacy(
    h: Harness, conn: object, rid: object, method: str, params: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """A 2025-11-25 ``tasks/*`` request: its answer in this step, ``None`` if none came."""
    effects = h.feed(ReadRequested(conn, rid, method, params or {}, h.now))
    answers = [e for e in replies(effects) if e.conn == conn and e.request_id == rid]
    return None if not answers else answers[0].message


def legacy_task(h: Harness, conn: object = "s", rid: object = 1, tool: str = "slow") -> str:
    """A 2025-11-25 task of ``tool``, made at once: its id."""
    effects = legacy_call(h, conn, rid, tool, {"ttl": 60_000})
    (reply,) = [e for e in replies(effects) if e.conn == conn]
    assert reply.message is not None
    return str(reply.message["result"]["task"]["taskId"])


def test_R_TASK_12_initialize_declares_tasks_on_2025_11_25_only() -> None:
    h = harness()
    found = session(h, "s")
    assert found["capabilities"]["tasks"] == {
        "list": {},
        "cancel": {},
        "requests": {"tools": {"call": {}}},
    }
    assert "tasks" not in session(h, "old", version="2025-06-18")["capabilities"]


@pytest.mark.parametrize(
    ("tool", "task", "declared", "mode"),
    [
        ("plain", None, True, "inline"),
        ("plain", {}, True, "refused"),
        ("plain", {}, False, "inline"),
        ("slow", None, True, "inline"),
        ("slow", {"ttl": 5}, True, "task"),
        ("slow", {}, False, "inline"),
        ("slow", "yes", True, "inline"),  # not an object: no task asked for
        ("job", None, True, "refused"),
        ("job", {}, False, "refused"),
        ("job", {}, True, "task"),
    ],
)
def test_R_TASK_12_the_mode_follows_support_the_param_and_the_declaration(
    tool: str, task: object, declared: bool, mode: str
) -> None:
    h = harness()
    session(h, "s", caps=LEGACY_CAPS if declared else PLAIN_CAPS)
    effects = legacy_call(h, "s", 1, tool, task)
    answers = replies(effects)
    if mode == "inline":
        assert not answers
        assert h.state.working
        assert not h.state.tasks
    elif mode == "refused":
        (reply,) = answers
        assert reply.message is not None
        assert reply.message["error"]["code"] == -32601
        assert tool in reply.message["error"]["message"]
        assert not started(effects)  # before admission: no worker
        assert records(effects)[0]["outcome"] == "error"
    else:
        (reply,) = answers
        assert reply.message is not None
        assert reply.message["result"]["task"]["status"] == "working"
        assert len(h.state.tasks) == 1


def test_R_TASK_12_another_version_is_inline_whatever_it_asks() -> None:
    h = harness()
    session(h, "s", version="2025-06-18")
    effects = legacy_call(h, "s", 1, "job", {"ttl": 5})
    assert not replies(effects)
    assert len(started(effects)) == 1
    assert not h.state.tasks


def test_R_TASK_13_the_task_is_made_before_the_answer() -> None:
    h = harness(task_ttl_ms=1234)
    session(h, "s")
    h.now = 5
    effects = legacy_call(h, "s", 1, "slow", {"ttl": 60_000})
    assert len(started(effects)) == 1
    (reply,) = replies(effects)
    assert reply.message is not None
    created = reply.message["result"]
    assert set(created) == {"task"}  # no resultType, no result: the revision's shape
    task = created["task"]
    assert set(task) == {"taskId", "status", "createdAt", "lastUpdatedAt", "ttl", "pollInterval"}
    assert (task["status"], task["ttl"]) == ("working", 1234)  # the server's ttl, not the wish
    assert h.state.tasks[task["taskId"]].status == "working"  # there before the answer
    shown = legacy(h, "s", "g", "tasks/get", {"taskId": task["taskId"]})
    assert shown is not None
    assert shown["result"] == task


@pytest.mark.parametrize(
    ("value", "status"),
    [
        ({"content": [{"type": "text", "text": "ok"}]}, "completed"),
        ({"content": [{"type": "text", "text": "no"}], "isError": True}, "failed"),
        (Failure(-32000, "boom"), "failed"),
    ],
)
def test_R_TASK_13_the_outcome_is_the_answer_and_an_error_result_fails(
    value: object, status: str
) -> None:
    h = harness()
    session(h, "s")
    tid = legacy_task(h)
    h.finish(worker_of(h, tid), value)
    shown = legacy(h, "s", "g", "tasks/get", {"taskId": tid})
    assert shown is not None
    assert shown["result"]["status"] == status
    payload = legacy(h, "s", "r", "tasks/result", {"taskId": tid})
    assert payload is not None
    if isinstance(value, Failure):  # askgate's own failure: the error result it answers
        assert payload["result"]["isError"] is True
        assert payload["result"]["structuredContent"]["error"] == "callback_failed"
    else:
        assert isinstance(value, dict)
        assert payload["result"] == {**value, "_meta": {RELATED: {"taskId": tid}}}


def test_R_TASK_13_over_the_cap_a_call_stays_inline() -> None:
    h = harness(max_tasks_per_owner=1)
    session(h, "s")
    legacy_task(h)
    effects = legacy_call(h, "s", 2, "slow", {})
    assert not replies(effects)
    assert len(h.state.tasks) == 1


def test_R_TASK_14_tasks_result_waits_for_the_end_then_answers() -> None:
    h = harness()
    session(h, "s")
    tid = legacy_task(h)
    assert legacy(h, "s", "r", "tasks/result", {"taskId": tid}) is None  # it waits
    dup = legacy(h, "s", "r", "tasks/get", {"taskId": tid})
    assert dup is not None
    assert dup["error"]["code"] == m.INVALID_REQUEST
    effects = h.finish(worker_of(h, tid), {"content": []})
    (reply,) = [e for e in replies(effects) if e.request_id == "r"]
    assert reply.message is not None
    assert reply.message["result"]["_meta"] == {RELATED: {"taskId": tid}}
    assert not h.state.task_waits


def test_R_TASK_14_a_waiting_result_is_bounded_cancelled_and_dropped() -> None:
    h = harness()
    session(h, "s")
    tid = legacy_task(h)
    for n in range(tasks.MAX_WAITS):
        assert legacy(h, "s", f"r{n}", "tasks/result", {"taskId": tid}) is None
    over = legacy(h, "s", "over", "tasks/result", {"taskId": tid})
    assert over is not None
    assert over["error"]["code"] == m.INTERNAL_ERROR
    effects = h.feed(CancelRequested("s", "r0", h.now))
    assert Reply("s", "r0", None) in effects  # ended, answered nothing
    assert not [e for e in effects if isinstance(e, KillWorker)]  # the task untouched
    h.feed(SubscriberDetached("s", h.now))
    assert not h.state.task_waits
    assert h.state.tasks[tid].status == "working"  # the task outlives its session


def test_R_TASK_14_another_owner_and_the_other_era_get_an_unknown_task() -> None:
    h = harness()
    session(h, "s")
    session(h, "t")  # no principal: each session is its own owner
    tid = legacy_task(h)
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        foreign = legacy(h, "t", method, method, {"taskId": tid})
        assert foreign is not None
        assert foreign["error"] == {
            "code": -32602,
            "message": "Unknown task",
        }
    listed = legacy(h, "t", "l", "tasks/list")
    assert listed is not None
    assert listed["result"]["tasks"] == []
    modern = request(h, "g", "m", "tasks/get", {"taskId": tid})
    assert modern["error"]["code"] == -32602  # the 2026-07-28 era sees none of them
    modern_tid = escalated(h, "c9", 9)
    seen = legacy(h, "s", "x", "tasks/get", {"taskId": modern_tid})
    assert seen is not None
    assert seen["error"]["code"] == -32602


def test_R_TASK_14_a_principal_sees_its_tasks_from_another_session() -> None:
    h = harness()
    session(h, "s", principal="alice")
    session(h, "t", principal="alice")
    tid = legacy_task(h)
    shown = legacy(h, "t", "g", "tasks/get", {"taskId": tid})
    assert shown is not None
    assert shown["result"]["taskId"] == tid


def test_R_TASK_14_tasks_list_pages_the_owners_tasks() -> None:
    h = harness()
    session(h, "s")
    ids: list[str] = []
    for n in range(tasks.LIST_PAGE + 3):
        h.now = n
        ids.append(legacy_task(h, rid=n))
        h.finish(worker_of(h, ids[-1]), {"content": []})  # a finished task is listed too
    first = legacy(h, "s", "l1", "tasks/list")
    assert first is not None
    page = first["result"]
    assert [t["taskId"] for t in page["tasks"]] == ids[: tasks.LIST_PAGE]
    rest = legacy(h, "s", "l2", "tasks/list", {"cursor": page["nextCursor"]})
    assert rest is not None
    assert [t["taskId"] for t in rest["result"]["tasks"]] == ids[tasks.LIST_PAGE :]
    assert "nextCursor" not in rest["result"]
    bad = legacy(h, "s", "l3", "tasks/list", {"cursor": "nope"})
    assert bad is not None
    assert bad["error"]["code"] == -32602


def test_R_TASK_14_cancel_kills_the_worker_answers_the_task_and_refuses_a_terminal_one() -> None:
    h = harness()
    session(h, "s")
    tid = legacy_task(h)
    ref = worker_of(h, tid)
    assert legacy(h, "s", "r", "tasks/result", {"taskId": tid}) is None
    effects = h.feed(ReadRequested("s", "k", "tasks/cancel", {"taskId": tid}, h.now))
    assert KillWorker(ref) in effects
    by_id = {e.request_id: e.message for e in replies(effects)}
    assert by_id["k"] is not None
    assert by_id["k"]["result"]["status"] == "cancelled"
    assert by_id["r"] is not None
    assert by_id["r"]["error"]["message"] == "Task cancelled"
    again = legacy(h, "s", "k2", "tasks/cancel", {"taskId": tid})
    assert again is not None
    assert again["error"]["code"] == -32602
    shown = legacy(h, "s", "g", "tasks/get", {"taskId": tid})
    assert shown is not None
    assert shown["result"]["status"] == "cancelled"


def test_R_TASK_14_methods_outside_the_revision() -> None:
    h = harness()
    session(h, "s")
    tid = legacy_task(h)
    update = legacy(h, "s", "u", "tasks/update", {"taskId": tid, "inputResponses": {}})
    assert update is not None
    assert update["error"]["code"] == -32601
    session(h, "old", version="2025-06-18")
    for method in ("tasks/get", "tasks/list"):
        found = legacy(h, "old", method, method, {"taskId": tid})
        assert found is not None
        assert found["error"]["code"] == -32601


def legacy_asked(h: Harness, wait: bool = True) -> tuple[str, str, list[Effect]]:
    """A 2025-11-25 task whose authorizer asks: its id, the approval's id, and the effects of
    the ``tasks/result`` (``wait``) or of the ask that sent the question."""
    tid = legacy_task(h)
    auth = worker_of(h, tid)
    if wait:
        assert legacy(h, "s", "r", "tasks/result", {"taskId": tid}) is None
    effects = h.feed(WorkerFinished(auth, Ask("Allow slow?"), h.now))
    shown = legacy(h, "s", "g", "tasks/get", {"taskId": tid})
    assert shown is not None
    assert shown["result"]["status"] == "input_required"
    (key,) = [key for key, _ in h.state.tasks[tid].inputs]
    return tid, key, effects


def test_R_TASK_15_the_question_goes_on_the_waiting_result_with_the_task_named() -> None:
    h = harness(has_authorizer=True)
    session(h, "s")
    tid, key, effects = legacy_asked(h)
    (push,) = [e for e in effects if isinstance(e, Push)]
    assert (push.conn, push.related) == ("s", "r")  # on the tasks/result's stream
    assert push.message["id"] == key
    assert push.message["method"] == "elicitation/create"
    assert push.message["params"]["_meta"][RELATED] == {"taskId": tid}


def test_R_TASK_15_without_a_waiting_result_the_question_waits_and_goes_once() -> None:
    h = harness(has_authorizer=True)
    session(h, "s")
    tid, key, effects = legacy_asked(h, wait=False)
    assert not [e for e in effects if isinstance(e, Push)]
    first = h.feed(ReadRequested("s", "r1", "tasks/result", {"taskId": tid}, h.now))
    (push,) = [e for e in first if isinstance(e, Push)]
    assert (push.related, push.message["id"]) == ("r1", key)
    second = h.feed(ReadRequested("s", "r2", "tasks/result", {"taskId": tid}, h.now))
    assert not [e for e in second if isinstance(e, Push)]  # sent once


def test_R_TASK_15_an_approve_runs_the_tool_once() -> None:
    h = harness(has_authorizer=True)
    session(h, "s")
    tid, key, _ = legacy_asked(h)
    yes = {"action": "accept", "content": {"approve": True}}
    effects = h.feed(ElicitationAnswered("s", key, yes, h.now))
    assert len(started(effects)) == 1
    assert h.state.tasks[tid].status == "working"
    again = h.feed(ElicitationAnswered("s", key, yes, h.now))
    assert not started(again)  # single use
    done = h.finish(worker_of(h, tid), {"content": [{"type": "text", "text": "ran"}]})
    (reply,) = [e for e in replies(done) if e.request_id == "r"]
    assert reply.message is not None
    assert reply.message["result"]["content"][0]["text"] == "ran"


@pytest.mark.parametrize("how", ["decline", "timeout", "cancel"])
def test_R_TASK_15_decline_silence_and_cancel_end_in_the_deny(how: str) -> None:
    h = harness(has_authorizer=True, elicitation_timeout_ms=500)
    session(h, "s")
    tid, key, _ = legacy_asked(h)
    if how == "decline":
        effects = h.feed(ElicitationAnswered("s", key, {"action": "decline"}, h.now))
    elif how == "timeout":
        h.now += 500
        effects = h.feed(TimerFired(("elicitation", key), h.now))
        (withdrawn,) = [e for e in effects if isinstance(e, Push)]
        assert withdrawn.message["method"] == "notifications/cancelled"
        assert withdrawn.message["params"]["_meta"][RELATED] == {"taskId": tid}
    else:
        effects = h.feed(ReadRequested("s", "k", "tasks/cancel", {"taskId": tid}, h.now))
    assert not started(effects)
    status = h.state.tasks[tid].status
    assert status == ("cancelled" if how == "cancel" else "failed")
    if how != "cancel":
        (reply,) = [e for e in replies(effects) if e.request_id == "r"]
        assert reply.message is not None
        deny = reply.message["result"]
        assert deny["isError"] is True
        assert deny["structuredContent"]["error"] == "authorization_required"


def test_R_TASK_15_a_tools_own_request_goes_to_the_session_and_its_answer_back() -> None:
    h = harness()
    session(h, "s")
    tid = legacy_task(h)
    ref = worker_of(h, tid)
    assert legacy(h, "s", "r", "tasks/result", {"taskId": tid}) is None
    params = {"message": "?", "requestedSchema": {"type": "object", "properties": {}}}
    effects = h.feed(ToolRequested(ref, "a", "elicitation/create", params, h.now))
    (push,) = [e for e in effects if isinstance(e, Push)]
    assert (push.conn, push.related) == ("s", "r")
    assert push.message["params"]["_meta"][RELATED] == {"taskId": tid}
    answer = {"action": "accept", "content": {}}
    effects = h.feed(ElicitationAnswered("s", push.message["id"], answer, h.now))
    (resolved,) = [e for e in effects if isinstance(e, Resolve)]
    assert (resolved.token, resolved.outcome) == ("a", answer)
    assert h.state.tasks[tid].status == "working"


def test_R_TASK_15_an_answer_from_another_connection_is_ignored() -> None:
    h = harness(has_authorizer=True)
    session(h, "s", principal="alice")
    session(h, "t", principal="alice")  # the same owner, another session
    tid, key, _ = legacy_asked(h)
    yes = {"action": "accept", "content": {"approve": True}}
    effects = h.feed(ElicitationAnswered("t", key, yes, h.now))
    assert not started(effects)
    assert h.state.tasks[tid].status == "input_required"


# --- The official client, default mode (2026-07-28), over HTTP and stdio ---------------------


class TaskCreated(types.Result):
    """A ``CreateTaskResult`` of the tasks extension, as the client's claim reads it."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: str


class TaskParams(types.RequestParams):
    task_id: str


class GetTask(types.Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param = "taskId"


class CancelTask(types.Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams
    name_param = "taskId"


class UpdateParams(types.RequestParams):
    task_id: str
    input_responses: dict[str, Any]


class UpdateTask(types.Request[UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateParams
    name_param = "taskId"


class Detail(types.Result):
    model_config = ConfigDict(extra="allow")


INPUT_REQUEST: TypeAdapter[types.InputRequest] = TypeAdapter(types.InputRequest)


async def answer(session: Any, task_id: str, requests: dict[str, Any]) -> None:
    """Answers a task's ``inputRequests`` with the client's own callbacks (the ones its driver
    answers an inline round with), by ``tasks/update``."""
    responses: dict[str, Any] = {}
    for key, shown in requests.items():
        context = ClientRequestContext(session=session, request_id=key)
        response = await session.dispatch_input_request(
            context, INPUT_REQUEST.validate_python(shown)
        )
        responses[key] = response.model_dump(by_alias=True, exclude_none=True)
    params = UpdateParams(task_id=task_id, input_responses=responses)
    await session.send_request(UpdateTask(params=params), Detail)


async def poll(session: Any, task_id: str) -> dict[str, Any]:
    """``tasks/get`` until the task is terminal (bounded: the test's deadline), answering its
    questions on the way."""
    while True:
        detail = await session.send_request(GetTask(params=TaskParams(task_id=task_id)), Detail)
        found: dict[str, Any] = detail.model_dump(by_alias=True)
        if found["status"] in tasks.TERMINAL:
            return found
        if found["status"] == "input_required":
            await answer(session, task_id, found["inputRequests"])
        else:
            await anyio.sleep(0.05)


class Tasks(ClientExtension):
    """The tasks extension for the official client: declares it, and finishes a
    ``CreateTaskResult`` by polling ``tasks/get``; remembers the task ids it saw."""

    identifier = tasks.EXTENSION

    def __init__(self) -> None:
        self.seen: list[str] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=TaskCreated, resolve=self.resolve),)

    async def resolve(self, created: TaskCreated, ctx: ClaimContext) -> types.CallToolResult:
        self.seen.append(created.task_id)
        found = await poll(ctx.session, created.task_id)
        return types.CallToolResult.model_validate(found["result"])


def fixture_stdio() -> StdioServerParameters:
    args = [str(EXAMPLES / "conformance_server.py"), "--stdio"]
    return StdioServerParameters(command=sys.executable, args=args, cwd=str(EXAMPLES.parent))


@asynccontextmanager
async def fixture_client(
    transport: str, extension: Tasks, elicitation: Any = None
) -> AsyncIterator[Client]:
    kw: dict[str, Any] = {"extensions": [extension], "elicitation_callback": elicitation}
    if transport == "http":
        async with serving() as (_, url), Client(url, **kw) as client:
            yield client
    else:
        async with Client(fixture_stdio(), **kw) as client:
            yield client


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn runs on asyncio


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_R_TASK_4_the_official_client_polls_a_task_past_the_window(transport: str) -> None:
    extension = Tasks()
    with anyio.fail_after(DEADLINE):
        async with fixture_client(transport, extension) as client:
            assert client.protocol_version == "2026-07-28"  # the default mode's revision
            inline = await client.call_tool("slow_compute", {"seconds": 0, "label": "now"})
            assert not extension.seen  # inside the window: answered inline
            assert "computed now" in inline.content[0].text  # type: ignore[union-attr]
            late = await client.call_tool("slow_compute", {"seconds": 0.4, "label": "late"})
            assert len(extension.seen) == 1  # past the window: a task, polled to its result
            assert "computed late" in late.content[0].text  # type: ignore[union-attr]


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_R_TASK_8_the_official_client_cancels_a_task(transport: str) -> None:
    extension = Tasks()
    with anyio.fail_after(DEADLINE):
        async with fixture_client(transport, extension) as client:
            created = await client.session.call_tool(
                "slow_compute", {"seconds": 60, "label": "x"}, allow_claimed=True
            )
            assert isinstance(created, TaskCreated)
            params = TaskParams(task_id=created.task_id)
            ack = await client.session.send_request(CancelTask(params=params), Detail)
            assert ack.model_dump(by_alias=True).get("resultType") == "complete"
            found = await poll(client.session, created.task_id)
            assert found["status"] == "cancelled"


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_R_TASK_11_the_official_client_answers_a_tasks_own_round(transport: str) -> None:
    """The fixture's tool works past the window (a task), then ends a round: the task is
    ``input_required``, the client's elicitation callback answers it by ``tasks/update``, and
    the tool runs again with the answer."""
    extension = Tasks()
    asked = Asked(types.ElicitResult(action="accept", content={"name": "Ada"}))
    with anyio.fail_after(DEADLINE):
        async with fixture_client(transport, extension, asked) as client:
            result = await client.call_tool("askgate_task_round", {})
    assert len(extension.seen) == 1  # a task
    assert asked.asked == ["Who is asking?"]  # asked once, in the task
    assert result.content[0].text == "Hello, Ada, from a task's round"  # type: ignore[union-attr]


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["http", "stdio"])
@pytest.mark.parametrize("approve", [True, False])
async def test_R_TASK_10_the_official_client_is_asked_inside_a_task(
    transport: str, approve: bool
) -> None:
    """The fixture's authorizer asks past the window: the approval is the task's question,
    answered by the client's elicitation callback; approved, the tool runs once; declined, the
    call is denied as anywhere else (R-DLV-4) and nothing runs."""
    extension = Tasks()
    asked = Asked(APPROVE if approve else types.ElicitResult(action="decline"))
    with anyio.fail_after(DEADLINE):
        async with fixture_client(transport, extension, asked) as client:
            result = await client.call_tool("askgate_task_approval", {})
            if approve:  # a second call is asked again and counted on: the first ran once
                again = await client.call_tool("askgate_task_approval", {})
    assert len(extension.seen) == (2 if approve else 1)
    assert asked.asked[0].startswith("Allow askgate_task_approval to run?")
    if approve:
        assert text(result) == "run 1"
        assert text(again) == "run 2"
    else:
        deny = denial(result)
        assert (deny["decision"], deny["detail"]) == ("ask", "declined")


# --- The official client, legacy mode (2025-11-25), over HTTP and stdio ----------------------
#
# The official client has the 2025-11-25 revision's task models (mcp_types._v2025_11_25) but no
# client-side tasks: its session cannot declare the capability nor read a CreateTaskResult as a
# tools/call answer. So the session here is the official ClientSession (the initialize
# handshake, the elicitation callback), over the official transports, with a dispatcher of the
# official client's own that sends the task requests as they are; every answer is read with the
# revision's own wire models.


@asynccontextmanager
async def legacy_client(
    transport: str, elicitation: Any = None
) -> AsyncIterator[JSONRPCDispatcher[Any]]:
    """A 2025-11-25 session of the official client that declared tasks; its dispatcher."""
    async with AsyncExitStack() as stack:
        if transport == "http":
            _, url = await stack.enter_async_context(serving())
            read, write = await stack.enter_async_context(streamable_http_client(url))
        else:
            read, write = await stack.enter_async_context(stdio_client(fixture_stdio()))
        dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read, write)
        session = ClientSession(dispatcher=dispatcher, elicitation_callback=elicitation)
        await stack.enter_async_context(session)
        capabilities = types.ClientCapabilities(
            elicitation=types.ElicitationCapability(form=types.FormElicitationCapability()),
            tasks=types.ClientTasksCapability(
                list=types.TasksListCapability(), cancel=types.TasksCancelCapability()
            ),
        )
        hello = types.InitializeRequestParams(
            protocol_version=LEGACY,
            capabilities=capabilities,
            client_info=types.Implementation(name="legacy-tasks", version="1"),
        )
        answer = await session.send_request(
            types.InitializeRequest(params=hello), types.InitializeResult
        )
        assert answer.protocol_version == LEGACY
        declared = answer.capabilities.tasks
        assert declared is not None and declared.requests is not None  # noqa: PT018
        session.adopt(answer)
        await session.send_notification(types.InitializedNotification())
        yield dispatcher


async def task_call(client: JSONRPCDispatcher[Any], tool: str, arguments: Any) -> v2025.Task:
    """A task-augmented ``tools/call``: the task its ``CreateTaskResult`` names."""
    params = {"name": tool, "arguments": arguments, "task": {"ttl": 60_000}}
    raw = await client.send_raw_request("tools/call", params)
    return v2025.CreateTaskResult.model_validate(raw).task


async def task_request(client: JSONRPCDispatcher[Any], method: str, task_id: str) -> Any:
    return await client.send_raw_request(method, {"taskId": task_id})


def said(raw: object) -> str:
    """The text a ``tasks/result`` answer carries, read as the revision's ``CallToolResult``."""
    block = v2025.CallToolResult.model_validate(raw).content[0]
    assert isinstance(block, v2025.TextContent)
    return block.text


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_R_TASK_14_the_official_client_in_legacy_mode_polls_a_task_to_its_result(
    transport: str,
) -> None:
    with anyio.fail_after(DEADLINE):
        async with legacy_client(transport) as client:
            task = await task_call(client, "slow_compute", {"seconds": 1, "label": "late"})
            assert task.status == "working"
            polled = await task_request(client, "tasks/get", task.task_id)
            assert v2025.GetTaskResult.model_validate(polled).status == "working"  # past its start
            raw = await task_request(client, "tasks/result", task.task_id)  # waits for the end
            assert said(raw) == "computed late after 1s"
            assert raw["_meta"][RELATED] == {"taskId": task.task_id}
            done = await task_request(client, "tasks/get", task.task_id)
            assert v2025.GetTaskResult.model_validate(done).status == "completed"
            listed = v2025.ListTasksResult.model_validate(
                await client.send_raw_request("tasks/list", {})
            )
            assert [t.task_id for t in listed.tasks] == [task.task_id]


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_R_TASK_14_the_official_client_in_legacy_mode_cancels_a_task(
    transport: str,
) -> None:
    with anyio.fail_after(DEADLINE):
        async with legacy_client(transport) as client:
            task = await task_call(client, "slow_compute", {"seconds": 60, "label": "x"})
            raw = await task_request(client, "tasks/cancel", task.task_id)
            assert v2025.CancelTaskResult.model_validate(raw).status == "cancelled"
            with pytest.raises(MCPError) as gone:  # its worker is killed: nothing to wait for
                await task_request(client, "tasks/result", task.task_id)
            assert gone.value.error.message == "Task cancelled"
            with pytest.raises(MCPError) as again:
                await task_request(client, "tasks/cancel", task.task_id)
            assert again.value.error.code == -32602  # already terminal
            shown = await task_request(client, "tasks/get", task.task_id)
            assert v2025.GetTaskResult.model_validate(shown).status == "cancelled"


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["http", "stdio"])
@pytest.mark.parametrize("approve", [True, False])
async def test_R_TASK_15_the_official_client_in_legacy_mode_is_asked_inside_a_task(
    transport: str, approve: bool
) -> None:
    """The fixture's authorizer asks inside the task: ``tasks/result`` carries the approval's
    ``elicitation/create`` to the client's callback; approved, the tool runs once; declined,
    the task fails with the deny (R-DLV-4) and nothing runs."""
    asked = Asked(APPROVE if approve else types.ElicitResult(action="decline"))
    with anyio.fail_after(DEADLINE):
        async with legacy_client(transport, asked) as client:
            task = await task_call(client, TASK_APPROVAL, {})
            first = await task_request(client, "tasks/result", task.task_id)
            status = v2025.GetTaskResult.model_validate(
                await task_request(client, "tasks/get", task.task_id)
            ).status
            if approve:  # a second task is asked again and counted on: the first ran once
                again = await task_call(client, TASK_APPROVAL, {})
                second = await task_request(client, "tasks/result", again.task_id)
    assert asked.asked[0].startswith(f"Allow {TASK_APPROVAL} to run?")
    result = v2025.CallToolResult.model_validate(first)
    if approve:
        assert status == "completed"
        assert said(first) == "run 1"
        assert said(second) == "run 2"
        assert len(asked.asked) == 2
    else:
        assert status == "failed"  # the revision: an isError result fails the task
        assert result.is_error is True
        assert result.structured_content is not None
        deny = result.structured_content
        assert (deny["decision"], deny["detail"]) == ("ask", "declined")
        assert len(asked.asked) == 1
