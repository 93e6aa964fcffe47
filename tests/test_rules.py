"""One example test (or a few) per rule of spec/rules.md, named after the rule it checks."""

from __future__ import annotations

import json

import attrs
import pytest

from askgate.core import (
    Allow,
    Ask,
    Authorize,
    AuthorizeRead,
    CallerExited,
    CancelRequested,
    CancelTimer,
    ClientInitialized,
    Deny,
    Effect,
    Emit,
    KillWorker,
    OptionError,
    Options,
    Push,
    ReadRequested,
    Reply,
    RunRead,
    RunTool,
    StartTimer,
    StartWorker,
    SubscriberAttached,
    SubscriberDetached,
    TimerFired,
    ToolInfo,
    ToolRegistered,
    ToolRequested,
    ToolUnregistered,
    UnknownToolReply,
    WorkerFailed,
    check_invariants,
    initial_state,
    live_timers,
    mint_elicitation_id,
)
from askgate.core.invariants import InvariantError
from askgate.core.messages import WHY
from tests.harness import (
    APPROVE,
    KEY,
    Harness,
    deny_payload,
    elicitation_id,
    ended,
    only_reply,
    pushes,
    replies,
)

# ---------------------------------------------------------------------------------------------
# Options


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("elicitation_timeout_ms", 0, "at least 1"),
        ("max_parked_elicitations", 0, "at least 1"),
        ("max_parked_elicitations_total", -1, "at least 1"),
        ("max_client_capabilities", 0, "at least 1"),
        ("max_in_flight", 0, "at least 1"),
        ("callback_timeout_ms", 0, "at least 1"),
        ("max_in_flight_per_connection", 0, "at least 1"),
        ("max_in_flight", 2.5, "integer"),
        ("max_in_flight", True, "integer"),
    ],
)
def test_R_OPT_1_values_below_one_refuse_to_start(option: str, value: object, words: str) -> None:
    with pytest.raises(OptionError) as refused:
        initial_state(Options(**{option: value}), id_key=KEY)  # type: ignore[arg-type]
    assert refused.value.option == option
    assert refused.value.value == value
    assert words in str(refused.value)
    assert option in str(refused.value)


def test_R_OPT_1_share_above_total_and_parked_cap_above_total_refuse() -> None:
    with pytest.raises(OptionError, match=r"max_in_flight_per_connection=5.*may not exceed"):
        initial_state(Options(max_in_flight=4, max_in_flight_per_connection=5), id_key=KEY)
    with pytest.raises(OptionError, match=r"max_parked_elicitations=9.*may not exceed"):
        initial_state(
            Options(max_parked_elicitations=9, max_parked_elicitations_total=8), id_key=KEY
        )


def test_R_OPT_1_defaults() -> None:
    opts = initial_state(id_key=KEY).options
    assert (opts.elicitation_timeout_ms, opts.callback_timeout_ms) == (60_000, 300_000)
    assert (opts.max_parked_elicitations, opts.max_parked_elicitations_total) == (32, 256)
    assert (opts.max_client_capabilities, opts.max_in_flight, opts.in_flight_share) == (
        1024,
        32,
        16,
    )
    assert Options(max_in_flight=1).in_flight_share == 1
    assert Options(max_in_flight=7).in_flight_share == 3


def test_R_OPT_2_sensitive_tool_without_authorizer_refuses_to_start() -> None:
    tools = (ToolInfo("rm", True, False), ToolInfo("widget.reset", True, True))
    with pytest.raises(OptionError, match="rm") as refused:
        initial_state(Options(), id_key=KEY, tools=tools)
    assert "widget.reset" not in str(refused.value)  # derived tools are exempt at start
    initial_state(Options(has_authorizer=True), id_key=KEY, tools=tools)
    initial_state(Options(), id_key=KEY, tools=tools[1:])
    with pytest.raises(OptionError, match="id_key"):
        initial_state(Options(), id_key=b"short")


# ---------------------------------------------------------------------------------------------
# Tools


def test_R_TOOL_1_registration_events_change_what_is_callable() -> None:
    h = Harness()
    h.call("a", 1, "late")
    assert only_reply(h.effects)["error"]["code"] == -32601
    h.feed(ToolRegistered("late"))
    h.call("a", 2, "late")
    assert isinstance(h.effects[0], StartWorker)
    assert h.effects[0].job == RunTool("late", {})
    h.feed(ToolUnregistered("late"))
    h.feed(ToolUnregistered("never-there"))
    h.call("a", 3, "late")
    assert only_reply(h.effects)["error"]["code"] == -32601


@pytest.mark.parametrize(
    ("annotations", "sensitive"),
    [
        ({"destructiveHint": True}, True),
        ({"sensitive": True}, True),
        ({"destructiveHint": False, "readOnlyHint": True}, False),
        ({"destructiveHint": "true"}, False),  # only the JSON true counts
        ("not an object", False),
    ],
)
def test_R_TOOL_1_annotations_make_a_registered_tool_sensitive(
    annotations: object, sensitive: bool
) -> None:
    h = Harness()
    definition = {"name": "wipe", "inputSchema": {"type": "object"}, "annotations": annotations}
    h.feed(ToolRegistered("wipe", definition=definition))  # the event's flag left False
    effects = h.call("a", 1, "wipe")
    assert h.state.tools["wipe"].sensitive is sensitive
    assert bool([e for e in effects if isinstance(e, StartWorker)]) is not sensitive


def test_R_TOOL_2_tool_unregistered_while_parked_is_not_run() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    eid = h.park("a", 1)
    h.feed(ToolUnregistered("echo"))
    effects = h.answer("a", eid, APPROVE)
    assert not [e for e in effects if isinstance(e, StartWorker)]
    assert only_reply(effects)["error"] == {"code": -32601, "message": "Tool not found: echo"}


# ---------------------------------------------------------------------------------------------
# Client capabilities


def test_R_CAP_1_second_initialize_does_not_replace_capabilities() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    h.feed(ClientInitialized("a", {}))  # tries to drop elicitation
    eid = h.park("a", 1)
    assert eid.startswith("askgate-elicit-")
    h2 = Harness(has_authorizer=True)
    h2.connect("b", {})
    h2.feed(ClientInitialized("b", {"elicitation": {}}))  # tries to add it
    h2.call("b", 1)
    h2.finish(h2.worker(), Ask("ok?"))
    assert deny_payload(only_reply(h2.effects))["detail"] == "ok?"


def test_R_CAP_2_entry_removed_when_subscriber_goes() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    h.feed(SubscriberDetached("a"))
    assert "a" not in h.state.conns
    h.feed(SubscriberAttached("a"))
    h.call("a", 1)
    h.finish(h.worker(), Ask("ok?"))
    assert deny_payload(only_reply(h.effects))["decision"] == "ask"


def test_R_CAP_3_evicts_oldest_unsubscribed_before_older_live() -> None:
    h = Harness(has_authorizer=True, max_client_capabilities=2)
    h.connect("live")  # oldest entry, but live
    h.feed(ClientInitialized("orphan1", {"elicitation": {}}))
    h.feed(ClientInitialized("orphan2", {"elicitation": {}}))
    emits = [e for e in h.effects if isinstance(e, Emit)]
    assert emits == [
        Emit(
            "client_capabilities_evicted",
            {"count": 1, "size": 2, "live_subscriber": False, "max_client_capabilities": 2},
        )
    ]
    assert h.state.conns["live"].cap_group == "live"
    assert "orphan1" not in h.state.conns
    # 200 orphan initializes later, the live connection can still be asked
    for i in range(200):
        h.feed(ClientInitialized(f"o{i}", {}))
        assert [e.fields["live_subscriber"] for e in h.effects if isinstance(e, Emit)] == [False]
    assert h.park("live", 1).startswith("askgate-elicit-")


def test_R_CAP_3_all_live_evicts_oldest_live_which_keeps_working_but_cannot_be_asked() -> None:
    h = Harness(has_authorizer=True, max_client_capabilities=2)
    h.connect("a")
    h.connect("b")
    h.connect("c")
    assert next(e for e in h.effects if isinstance(e, Emit)).fields["live_subscriber"] is True
    assert h.state.conns["a"].cap_group == ""
    ref = h.allow("a", 1)  # still served
    h.finish(ref, {"content": []})
    assert only_reply(h.effects)["result"] == {"content": []}
    h.call("a", 2)
    h.finish(h.worker(), Ask("ok?"))
    assert deny_payload(only_reply(h.effects))["detail"] == "ok?"  # cannot be asked
    h.feed(ClientInitialized("a", {"elicitation": {}}))  # until it initializes again
    assert h.park("a", 3).startswith("askgate-elicit-")


def test_R_CAP_3_order_of_a_live_entry_is_when_it_became_live() -> None:
    h = Harness(max_client_capabilities=2)
    h.feed(ClientInitialized("x", {}))  # recorded first, unsubscribed
    h.connect("y")  # recorded and live
    h.feed(SubscriberAttached("x"))  # x joins the live group after y
    h.feed(SubscriberAttached("z"))
    h.feed(ClientInitialized("z", {}))
    assert h.state.conns["y"].cap_group == ""
    assert h.state.conns["x"].cap_group == "live"


def test_R_CAP_3_unsubscribed_newcomer_among_live_entries_evicts_itself() -> None:
    h = Harness(max_client_capabilities=1)
    h.connect("a")
    h.feed(ClientInitialized("b", {}))
    assert "b" not in h.state.conns
    assert h.state.conns["a"].cap_group == "live"


@pytest.mark.parametrize(
    ("capabilities", "askable"),
    [
        ({"elicitation": {}}, True),
        ({"elicitation": {"form": {}}}, True),
        ({"elicitation": {"form": {}, "url": {}}}, True),
        ({"elicitation": {"url": {}}}, False),
        ({"elicitation": True}, False),
        ({"elicitation": None}, False),
        ({}, False),
        (None, False),
        ([], False),
        ("elicitation", False),
    ],
)
def test_R_CAP_4_who_can_be_asked(capabilities: object, askable: bool) -> None:
    h = Harness(has_authorizer=True)
    h.connect("a", capabilities)
    h.call("a", 1)
    h.finish(h.worker(), Ask("may I?"))
    asked = [p for p in pushes(h.effects) if p.message.get("method") == "elicitation/create"]
    assert bool(asked) == askable
    if not askable:
        assert deny_payload(only_reply(h.effects)) == {
            "error": "authorization_required",
            "tool": "echo",
            "decision": "ask",
            "detail": "may I?",
            "message": "echo was not run: it needs approval and this client cannot be asked",
        }


def test_R_CAP_4_capability_without_subscriber_cannot_be_asked() -> None:
    h = Harness(has_authorizer=True)
    h.feed(ClientInitialized("a", {"elicitation": {}}))
    h.call("a", 1)
    h.finish(h.worker(), Ask("ok?"))
    assert not pushes(h.effects)
    assert deny_payload(only_reply(h.effects))["detail"] == "ok?"


# ---------------------------------------------------------------------------------------------
# Subscribers


def test_R_SUB_1_subscriber_makes_an_initialized_connection_askable() -> None:
    h = Harness(has_authorizer=True)
    h.feed(ClientInitialized("a", {"elicitation": {}}))
    assert h.state.conns["a"].cap_group == "unsubscribed"
    h.feed(SubscriberAttached("a"))
    assert h.state.conns["a"].has_caps
    assert h.state.conns["a"].subscribed
    assert h.park("a", 1).startswith("askgate-elicit-")


def test_R_SUB_2_rebind_inherits_neither_parked_call_nor_capability() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    eid = h.park("a", 1)
    effects = h.feed(SubscriberAttached("a"))
    assert CancelTimer(("elicitation", eid)) in effects
    assert Reply("a", 1, None) in effects
    assert not pushes(effects)
    assert h.state.parked_total == 0
    assert h.state.conns["a"].cap_group == ""
    assert h.answer("a", eid, APPROVE) == []


# ---------------------------------------------------------------------------------------------
# Admission


@pytest.mark.parametrize("bad_id", [None, True, False, 1.0, 1.5, [1], {"a": 1}])
def test_R_ADM_0_request_ids_must_be_strings_or_integers(bad_id: object) -> None:
    h = Harness()
    effects = h.call("a", bad_id)
    assert only_reply(effects) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "Invalid request id: must be a string or an integer"},
    }
    assert not h.state.calls
    effects = h.feed(ReadRequested("a", bad_id, "resources/read", {}, 0))
    assert only_reply(effects)["error"]["code"] == -32600


@pytest.mark.parametrize("good_id", [0, "", -5, 10**40, "x"])
def test_R_ADM_0_zero_empty_and_big_ids_are_valid(good_id: object) -> None:
    h = Harness()
    h.call("a", good_id)
    assert isinstance(h.effects[0], StartWorker)


def test_R_ADM_1_reused_in_flight_id_is_refused_and_first_untouched() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    eid = h.park("a", 7)
    effects = h.call("a", 7)
    assert only_reply(effects)["error"]["code"] == -32600
    assert only_reply(effects)["id"] == 7
    assert h.state.parked_total == 1
    h.call("b", 7)  # another connection's id 7 is its own
    assert isinstance(h.effects[0], StartWorker)
    effects = h.answer("a", eid, APPROVE)
    assert any(isinstance(e, StartWorker) and e.conn == "a" for e in effects)


def test_R_ADM_1_id_free_again_once_answered() -> None:
    h = Harness()
    h.call("a", 1)
    h.finish(h.worker(), {"content": []})
    h.call("a", 1)
    assert isinstance(h.effects[0], StartWorker)


def test_R_ADM_2_unknown_tool_is_32601_and_never_parked() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    effects = h.call("a", 1, "nope")
    assert only_reply(effects)["error"] == {"code": -32601, "message": "Tool not found: nope"}
    assert not h.state.calls


def test_R_ADM_2_unknown_tool_reply_hook() -> None:
    h = Harness(has_unknown_tool_reply=True)
    effects = h.call("a", 1, "gone")
    assert effects[0] == StartWorker(1, "a", UnknownToolReply("gone"))
    h.finish(1, "session s1 stopped")
    assert only_reply(h.effects)["result"] == {
        "isError": True,
        "content": [{"type": "text", "text": "session s1 stopped"}],
    }
    for outcome in ("none", "fail", "timeout"):
        h.call("a", 2, "gone")
        ref = h.worker()
        if outcome == "none":
            h.finish(ref, None)
        elif outcome == "fail":
            h.feed(WorkerFailed(ref, 0))
        else:
            h.feed(TimerFired(("worker", ref), 300_000))
        assert only_reply(h.effects)["error"]["code"] == -32601


def test_R_ADM_3_late_sensitive_tool_without_authorizer_is_denied() -> None:
    h = Harness()
    h.feed(ToolRegistered("wipe", sensitive=True))
    effects = h.call("a", 1, "wipe")
    assert not [e for e in effects if isinstance(e, StartWorker)]
    assert deny_payload(only_reply(effects)) == {
        "error": "authorization_required",
        "tool": "wipe",
        "decision": "deny",
        "detail": "sensitive tool unguarded",
        "message": "wipe was not run: it is marked sensitive and the server has no policy to "
        "allow it",
    }
    h.feed(ToolRegistered("widget.wipe", sensitive=True, derived=True))
    effects = h.call("a", 2, "widget.wipe")
    assert deny_payload(only_reply(effects))["detail"] == "sensitive tool unguarded"


def test_R_ADM_4_no_authorizer_runs_the_tool() -> None:
    h = Harness()
    effects = h.call("a", 1, "echo", {"text": "hi"})
    assert effects == [
        StartWorker(1, "a", RunTool("echo", {"text": "hi"})),
        StartTimer(("worker", 1), 300_000),
    ]


def test_R_ADM_5_server_bound_answers_busy_with_scope_server() -> None:
    h = Harness(max_in_flight=2, max_in_flight_per_connection=2)
    h.call("a", 1)
    h.call("b", 1)
    effects = h.call("c", 1)
    assert deny_free_busy(only_reply(effects)) == {"error": "server_busy", "scope": "server"}
    effects = h.feed(ReadRequested("c", 2, "resources/read", {"uri": "x"}, 0))
    assert only_reply(effects)["error"] == {
        "code": -32603,
        "message": "MCP callback failed",
        "data": {"error": "server_busy", "method": "resources/read"},
    }


def deny_free_busy(message: dict[str, object]) -> object:
    result = message["result"]
    assert isinstance(result, dict)
    assert result["isError"] is True
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    return result["structuredContent"]


def test_R_ADM_5_connection_share_answers_busy_with_scope_connection() -> None:
    h = Harness(max_in_flight=4, max_in_flight_per_connection=1)
    h.call("a", 1)
    effects = h.call("a", 2)
    assert deny_free_busy(only_reply(effects)) == {"error": "server_busy", "scope": "connection"}
    h.call("b", 1)  # another connection still has its share
    assert isinstance(h.effects[0], StartWorker)


def test_R_ADM_5_parked_calls_hold_no_worker_and_approval_rechecks() -> None:
    h = Harness(has_authorizer=True, max_in_flight=1, max_in_flight_per_connection=1)
    h.connect("a")
    eid = h.park("a", 1)
    assert h.state.in_flight_total == 0
    h.call("a", 2)  # takes the only worker (its authorizer)
    effects = h.answer("a", eid, APPROVE)
    assert not [e for e in effects if isinstance(e, StartWorker)]
    assert deny_free_busy(only_reply(effects)) == {"error": "server_busy", "scope": "server"}


def test_R_ADM_5_authorizer_slot_is_reused_by_its_tool() -> None:
    h = Harness(has_authorizer=True, max_in_flight=1, max_in_flight_per_connection=1)
    h.call("a", 1)
    effects = h.finish(h.worker(), Allow())
    assert next(e for e in effects if isinstance(e, StartWorker)).job == RunTool("echo", {})


# ---------------------------------------------------------------------------------------------
# Authorizer


def test_R_AUTH_1_authorizer_runs_first_and_allow_starts_the_tool() -> None:
    h = Harness(has_authorizer=True)
    effects = h.call("a", 1, "echo", {"t": 1})
    assert effects[0] == StartWorker(1, "a", Authorize("echo", {"t": 1}))
    effects = h.finish(1, Allow())
    assert effects == [
        CancelTimer(("worker", 1)),
        StartWorker(2, "a", RunTool("echo", {"t": 1})),
        StartTimer(("worker", 2), 300_000),
    ]


def test_R_AUTH_2_deny_answers_the_deny_with_the_reason() -> None:
    h = Harness(has_authorizer=True)
    h.call("a", 1, "delete_file")
    effects = h.finish(h.worker(), Deny("forbidden by policy"))
    message = only_reply(effects)
    assert message["id"] == 1
    payload = deny_payload(message)
    assert payload == {
        "error": "authorization_required",
        "tool": "delete_file",
        "decision": "deny",
        "detail": "forbidden by policy",
        "message": "delete_file was not run: the server's policy denies it (forbidden by policy)",
    }
    assert json.loads(message["result"]["content"][0]["text"]) == payload


def test_R_AUTH_3_ask_parks_when_askable_else_deny_on_ask() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    h.connect("b", {})
    eid = h.park("a", 1, "Allow echo?")
    request = pushes(h.effects)[0]
    assert request.conn == "a"
    assert request.message["params"]["message"] == "Allow echo?"
    assert not replies(h.effects)
    assert eid in h.state.parked
    h.call("b", 1)
    effects = h.finish(h.worker(), Ask("Allow echo?"))
    assert not pushes(effects)
    assert deny_payload(only_reply(effects))["detail"] == "Allow echo?"


@pytest.mark.parametrize(
    "value",
    [None, "allow", {"decision": "allow"}, Deny(123), Ask(None), Allow],  # type: ignore[arg-type]
)
def test_R_AUTH_4_off_contract_decision_denies(value: object) -> None:
    h = Harness(has_authorizer=True)
    h.call("a", 1)
    effects = h.finish(h.worker(), value)
    assert deny_payload(only_reply(effects))["detail"] == "authorizer failed"
    assert deny_payload(only_reply(effects))["decision"] == "deny"


def test_R_AUTH_4_raising_or_hung_authorizer_denies() -> None:
    h = Harness(has_authorizer=True)
    h.call("a", 1)
    effects = h.feed(WorkerFailed(h.worker(), 0))
    assert deny_payload(only_reply(effects))["detail"] == "authorizer failed"
    h.call("a", 2)
    ref = h.worker()
    effects = h.feed(TimerFired(("worker", ref), 300_000))
    assert KillWorker(ref) in effects
    assert deny_payload(only_reply(effects))["detail"] == "authorizer failed"


# ---------------------------------------------------------------------------------------------
# Parking


def test_R_PARK_1_per_connection_cap() -> None:
    h = Harness(has_authorizer=True, max_parked_elicitations=2, max_parked_elicitations_total=8)
    h.connect("a")
    h.park("a", 1)
    h.park("a", 2)
    h.call("a", 3)
    effects = h.finish(h.worker(), Ask("ok?"))
    assert deny_payload(only_reply(effects))["detail"] == "too many elicitations pending"
    assert h.state.store.count("a") == 2


def test_R_PARK_2_a_park_mints_an_id_arms_a_timer_and_prompts_the_owner_only() -> None:
    h = Harness(has_authorizer=True, elicitation_timeout_ms=500)
    h.connect("a")
    h.connect("b")
    h.now = 1000
    h.call("a", 1, "delete_file", {"path": "/x"})
    effects = h.finish(h.worker(), Ask("Delete /x?"))
    eid = elicitation_id(effects)
    assert StartTimer(("elicitation", eid), 1500) in effects
    assert [p.conn for p in pushes(effects)] == ["a"]
    assert pushes(effects)[0].message == {
        "jsonrpc": "2.0",
        "id": eid,
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "Delete /x?",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "approve": {
                        "type": "boolean",
                        "title": "Approve",
                        "description": "Approve running the delete_file tool",
                    }
                },
                "required": ["approve"],
            },
        },
    }


def _full_server() -> Harness:
    """Total cap 3: "a" holds 2 (reached 2 at t=2), "b" holds 1."""
    h = Harness(has_authorizer=True, max_parked_elicitations=3, max_parked_elicitations_total=3)
    for conn in ("a", "b", "c"):
        h.connect(conn)
    h.park("a", 1)
    h.park("a", 2)
    h.park("b", 1)
    return h


def test_R_PARK_3_full_server_evicts_oldest_of_top_holder_for_a_smaller_asker() -> None:
    h = _full_server()
    victim = h.state.store.queue("a").first()
    assert victim is not None
    h.call("c", 9)
    effects = h.finish(h.worker(), Ask("ok?"))
    assert CancelTimer(("elicitation", victim)) in effects
    withdrawn = [p for p in pushes(effects) if p.message.get("method") == "notifications/cancelled"]
    assert [(p.conn, p.message["params"]["requestId"]) for p in withdrawn] == [("a", victim)]
    denied = [(r.conn, r.request_id, r.message) for r in replies(effects) if r.message]
    assert [(conn, rid) for conn, rid, _ in denied] == [("a", 1)]
    assert deny_payload(denied[0][2])["detail"] == "evicted to make room on this server"
    assert deny_payload(denied[0][2])["message"] == (
        "echo was not run: it was evicted to make room on this server while it waited for approval"
    )
    assert withdrawn[0].message["params"]["reason"] == "evicted to make room on this server"
    assert h.state.store.count("c") == 1
    assert h.state.store.count("a") == 1
    assert h.answer("a", victim, APPROVE) == []  # a late accept for the evicted call


def test_R_PARK_3_asker_holding_as_many_as_the_top_gets_the_deny_itself() -> None:
    h = _full_server()
    h.call("a", 3)
    effects = h.finish(h.worker(), Ask("ok?"))
    assert [r.request_id for r in replies(effects)] == [3]
    assert (
        deny_payload(only_reply(effects))["detail"]
        == "too many elicitations pending on this server"
    )
    assert h.state.parked_total == 3
    h2 = Harness(has_authorizer=True, max_parked_elicitations=1, max_parked_elicitations_total=2)
    h2.connect("a")
    h2.connect("b")
    h2.connect("c")
    h2.park("a", 1)
    h2.park("b", 1)
    h2.call("c", 1)
    h2.finish(h2.worker(), Ask("ok?"))
    h2.call("b", 2)  # b holds 1 = top: per-connection cap first
    effects = h2.finish(h2.worker(), Ask("ok?"))
    assert deny_payload(only_reply(effects))["detail"] == "too many elicitations pending"


def _connect_as(h: Harness, conn: str, principal: str | None) -> None:
    h.feed(SubscriberAttached(conn, 0, principal))
    h.feed(ClientInitialized(conn, {"elicitation": {}}))


def test_R_PARK_1_the_cap_is_per_owner_a_principals_sessions_share_it() -> None:
    """Two sessions of one principal are one owner; a connection without one is its own."""
    h = Harness(has_authorizer=True, max_parked_elicitations=2, max_parked_elicitations_total=8)
    _connect_as(h, "s1", "mallory")
    _connect_as(h, "s2", "mallory")
    _connect_as(h, "x", None)
    first = h.park("s1", 1)
    second = h.park("s2", 1)
    owner = ("principal", "mallory")
    assert list(h.state.store.queue(owner)) == [first, second]
    assert "s1" in h.state.conns
    assert h.state.store.count("s1") == 0
    h.call("s2", 2)
    effects = h.finish(h.worker(), Ask("ok?"))
    assert deny_payload(only_reply(effects))["detail"] == "too many elicitations pending"
    # the prompt went to the call's own session, which alone may answer it
    assert h.answer("s1", second, APPROVE) == []
    assert [e for e in h.answer("s2", second, APPROVE) if isinstance(e, StartWorker)]
    assert list(h.state.store.queue(owner)) == [first]
    h.park("x", 1)
    h.park("x", 2)  # a connection without a principal has a cap of its own
    assert h.state.store.count("x") == 2


def test_R_PARK_3_one_principal_over_many_sessions_evicts_only_itself() -> None:
    """A principal opening a fresh session per ASK is one holder: on a full server its fresh
    sessions cannot evict another principal holding fewer places."""
    h = Harness(has_authorizer=True, max_parked_elicitations=4, max_parked_elicitations_total=4)
    _connect_as(h, "victim", "alice")
    h.park("victim", 1)
    for n in range(3):
        _connect_as(h, f"m{n}", "mallory")
        h.park(f"m{n}", 1)
    assert h.state.parked_total == 4
    _connect_as(h, "m3", "mallory")
    h.call("m3", 1)
    effects = h.finish(h.worker(), Ask("ok?"))
    assert (
        deny_payload(only_reply(effects))["detail"]
        == "too many elicitations pending on this server"
    )
    assert h.state.store.count(("principal", "alice")) == 1
    # alice, holding fewer, evicts mallory's oldest, whoever's session it was on
    _connect_as(h, "a2", "alice")
    h.call("a2", 1)
    effects = h.finish(h.worker(), Ask("ok?"))
    denied = [(r.conn, r.request_id) for r in replies(effects) if r.message]
    assert denied == [("m0", 1)]
    assert h.state.store.count(("principal", "alice")) == 2
    assert h.state.store.count(("principal", "mallory")) == 2


def test_R_SUB_1_the_principal_lasts_until_the_connection_is_dropped_or_rebound() -> None:
    h = Harness(has_authorizer=True, max_parked_elicitations=1, max_parked_elicitations_total=8)
    _connect_as(h, "s", "alice")
    assert h.state.conns["s"].principal == "alice"
    h.park("s", 1)
    assert h.state.store.count(("principal", "alice")) == 1
    h.feed(SubscriberAttached("s", 0, None))  # R-SUB-2: rebound, by no one
    assert h.state.store.count(("principal", "alice")) == 0
    assert h.state.conns["s"].principal is None
    h.feed(ClientInitialized("s", {"elicitation": {}}))
    h.park("s", 2)
    assert h.state.store.count("s") == 1
    h.feed(SubscriberDetached("s", 0))
    assert "s" not in h.state.conns


def test_R_INV_5_a_parked_call_counted_against_another_owner_is_caught() -> None:
    h = Harness(has_authorizer=True)
    _connect_as(h, "s", "alice")
    eid = h.park("s", 1)
    moved = attrs.evolve(h.state.parked[eid], owner="s")
    broken = attrs.evolve(h.state, parked=h.state.parked.set(eid, moved))
    with pytest.raises(InvariantError, match="R-INV-5"):
        check_invariants(broken)


def test_R_PARK_4_tie_break_is_the_connection_longest_at_the_top() -> None:
    h = Harness(has_authorizer=True, max_parked_elicitations=2, max_parked_elicitations_total=4)
    for conn in ("a", "b", "c"):
        h.connect(conn)
    b1 = h.park("b", 1)  # b reaches 1 first
    a1 = h.park("a", 1)
    h.park("b", 2)  # b reaches 2
    h.park("a", 2)  # a reaches 2 after b
    h.call("c", 1)
    effects = h.finish(h.worker(), Ask("ok?"))
    assert _evicted(effects) == [b1]  # b's oldest
    h.call("c", 2)  # now a (2) is the only top holder; c holds 1
    effects = h.finish(h.worker(), Ask("ok?"))
    assert _evicted(effects) == [a1]


def _evicted(effects: list[Effect]) -> list[object]:
    return [c.key[1] for c in effects if isinstance(c, CancelTimer) and c.key[0] == "elicitation"]


# ---------------------------------------------------------------------------------------------
# Closing


def test_R_CLOSE_1_exact_approval_runs_the_tool_once() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    eid = h.park("a", 42, arguments=None)
    effects = h.answer("a", eid, APPROVE)
    assert effects == [
        CancelTimer(("elicitation", eid)),
        StartWorker(2, "a", RunTool("echo", {})),
        StartTimer(("worker", 2), 300_000),
    ]
    assert h.answer("a", eid, APPROVE) == []  # accept twice: runs once
    h.finish(2, {"content": [{"type": "text", "text": "done"}]})
    assert only_reply(h.effects)["id"] == 42


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        ({"action": "accept", "content": {"approve": "true"}}, "not approved"),
        ({"action": "accept", "content": {"approve": 1}}, "not approved"),
        ({"action": "accept", "content": {"approve": False}}, "not approved"),
        (
            {"action": "accept", "content": {"approve": True, "note": "x" * (1 << 20)}},
            "not approved",
        ),
        ({"action": "accept", "content": {"approve": True, "approved": True}}, "not approved"),
        ({"action": "accept", "content": {}}, "not approved"),
        ({"action": "accept", "content": None}, "not approved"),
        ({"action": "accept"}, "not approved"),
        ({"action": "ACCEPT", "content": {"approve": True}}, "not approved"),
        ({"action": "accepted", "content": {"approve": True}}, "not approved"),
        ({"action": 1}, "not approved"),
        ({"content": {"approve": True}}, "not approved"),
        ([], "not approved"),
        (None, "not approved"),
        ("accept", "not approved"),
        ({"action": "decline"}, "declined"),
        ({"action": "cancel"}, "cancelled"),
    ],
)
def test_R_CLOSE_1_anything_but_exact_approval_denies(answer: object, detail: str) -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    eid = h.park("a", 1)
    effects = h.answer("a", eid, answer)
    assert not [e for e in effects if isinstance(e, StartWorker)]
    assert deny_payload(only_reply(effects)) == {
        "error": "authorization_required",
        "tool": "echo",
        "decision": "ask",
        "detail": detail,
        "message": "echo was not run: " + WHY[detail],
    }


def test_R_CLOSE_2_error_answer_and_timeout_deny() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    eid = h.park("a", 1)
    effects = h.answer("a", eid, None, error={"code": -1, "message": "no"})
    assert deny_payload(only_reply(effects))["detail"] == "elicitation failed"
    eid = h.park("a", 2)
    effects = h.answer("a", eid, APPROVE, error={"code": -32602})  # an error wins
    assert deny_payload(only_reply(effects))["detail"] == "elicitation failed"
    eid = h.park("a", 3)
    effects = h.feed(TimerFired(("elicitation", eid), 60_000))
    assert deny_payload(only_reply(effects))["detail"] == "elicitation timed out"
    assert not [e for e in effects if isinstance(e, CancelTimer)]  # it fired


def test_R_CLOSE_3_closed_exactly_once_and_timer_settled_on_every_path() -> None:
    for path in ("approve", "decline", "error", "timeout", "cancel", "detach", "exit"):
        h = Harness(has_authorizer=True)
        h.connect("a")
        eid = h.park("a", 1, caller="k")
        armed = live_timers(h.state)
        assert ("elicitation", eid) in armed
        if path == "approve":
            effects = h.answer("a", eid, APPROVE)
        elif path == "decline":
            effects = h.answer("a", eid, {"action": "decline"})
        elif path == "error":
            effects = h.answer("a", eid, None, error={"code": 1})
        elif path == "timeout":
            effects = h.feed(TimerFired(("elicitation", eid), 60_000))
        elif path == "cancel":
            effects = h.feed(CancelRequested("a", 1, 0))
        elif path == "detach":
            effects = h.feed(SubscriberDetached("a", 0))
        else:
            effects = h.feed(CallerExited("k", 0))
        cancelled = CancelTimer(("elicitation", eid)) in effects
        assert cancelled == (path != "timeout"), path
        assert eid not in h.state.parked
        assert ("elicitation", eid) not in live_timers(h.state)
        assert len(replies(effects)) == (0 if path == "approve" else 1), path
        # nothing reaches it afterwards
        assert h.answer("a", eid, APPROVE) == []
        assert h.feed(TimerFired(("elicitation", eid), 99_999)) == []


def test_R_CLOSE_4_withdrawn_prompts_are_cancelled_toward_the_owner() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    eid = h.park("a", 1)
    effects = h.feed(TimerFired(("elicitation", eid), 60_000))
    assert (
        Push(
            "a",
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": eid, "reason": "elicitation timed out"},
            },
        )
        in effects
    )
    eid = h.park("a", 2)
    effects = h.feed(CancelRequested("a", 2, 0))
    assert [p.message["params"]["requestId"] for p in pushes(effects)] == [eid]
    eid = h.park("a", 3)
    assert not pushes(h.answer("a", eid, {"action": "decline"}))  # answered: nothing to withdraw
    h.park("a", 4)
    assert not pushes(h.feed(SubscriberDetached("a")))  # gone: nobody to tell


def test_R_CLOSE_5_unknown_late_and_foreign_answers_are_ignored() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    h.connect("b")
    eid = h.park("a", 1)
    before = h.state
    assert h.answer("b", eid, APPROVE) == []  # foreign, even knowing the id
    assert h.state == before
    assert h.answer("a", "askgate-elicit-nope", APPROVE) == []
    assert h.answer("a", 5, APPROVE) == []
    assert h.answer("a", ["x"], APPROVE) == []
    assert h.answer("a", None, APPROVE) == []
    assert h.state == before
    assert any(isinstance(e, StartWorker) for e in h.answer("a", eid, APPROVE))  # owner still can


# ---------------------------------------------------------------------------------------------
# Drops


def test_R_DROP_1_cancel_drops_at_every_stage() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    h.call("a", 1)  # authorizing
    ref = h.worker()
    effects = h.feed(CancelRequested("a", 1, 0))
    dropped = ended("a", 1, "dropped", detail="cancelled")
    assert effects == [KillWorker(ref), CancelTimer(("worker", ref)), Reply("a", 1, None), dropped]
    ref = h.allow("a", 2)  # running
    effects = h.feed(CancelRequested("a", 2, 0))
    dropped = ended("a", 2, "dropped", decision="allow", detail="cancelled")
    assert effects == [KillWorker(ref), CancelTimer(("worker", ref)), Reply("a", 2, None), dropped]
    assert h.finish(ref, {"content": []}) == []  # the killed worker's late report
    h.park("a", 3)
    effects = h.feed(CancelRequested("a", 3, 0))
    assert Reply("a", 3, None) in effects
    assert h.state.parked_total == 0
    assert h.feed(CancelRequested("a", 3, 0)) == []  # unknown id
    assert h.feed(CancelRequested("a", [3], 0)) == []
    assert h.state.in_flight_total == 0


def test_R_DROP_2_caller_exit_drops_its_requests_in_admission_order() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    h.park("a", 1, caller="k")
    h.call("a", 2, caller="k")
    h.call("a", 3, caller="other")
    effects = h.feed(CallerExited("k", 0))
    assert [r.request_id for r in replies(effects)] == [1, 2]
    assert set(h.state.calls) == {("a", 3)}
    assert h.feed(CallerExited("k", 0)) == []


def test_R_DROP_3_connection_gone_drops_everything_and_forgets_it() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    h.park("a", 1)
    h.call("a", 2)
    effects = h.feed(SubscriberDetached("a"))
    assert [r.request_id for r in replies(effects)] == [1, 2]
    assert all(r.message is None for r in replies(effects))
    assert not pushes(effects)
    assert "a" not in h.state.conns
    assert h.state.in_flight_total == 0
    assert h.feed(SubscriberDetached("never-seen")) == []


def test_R_DROP_4_drop_gives_no_outcome_and_push_mode_is_not_answered_twice() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    h.park("a", 1, mode="push")
    effects = h.feed(CancelRequested("a", 1, 0))
    assert not replies(effects)  # already answered with nothing when it parked
    assert [p.message["method"] for p in pushes(effects)] == ["notifications/cancelled"]


# ---------------------------------------------------------------------------------------------
# Delivery


def test_R_DLV_1_pushes_about_a_call_name_its_request() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    h.park("a", 7, mode="push")
    assert [p.related for p in pushes(h.effects)] == [7]  # the elicitation/create
    effects = h.feed(CancelRequested("a", 7, 0))
    assert [p.related for p in pushes(effects)] == [7]  # its withdrawal
    eid = h.park("a", 8, mode="push")
    effects = h.answer("a", eid, {"action": "decline"})
    assert [p.related for p in pushes(effects)] == [8]  # the push-mode outcome


def test_R_DLV_1_outcomes_only_to_the_owner() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    h.connect("b")
    eid = h.park("a", 0)
    h.park("b", 0)
    effects = h.answer("a", eid, APPROVE)
    ref = h.worker(effects)
    effects = h.finish(ref, {"content": []})
    assert [(r.conn, r.request_id) for r in replies(effects)] == [("a", 0)]
    assert not pushes(effects)


def test_R_DLV_2_reply_mode_outcome_is_the_reply() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    eid = h.park("a", 5)
    assert not replies(h.effects)
    h.answer("a", eid, {"action": "decline"})
    assert only_reply(h.effects)["id"] == 5
    effects = h.feed(ReadRequested("a", 6, "resources/read", {"uri": "u"}, 0))
    ref = h.worker(effects)
    effects = h.finish(ref, {"contents": []})
    assert only_reply(effects) == {"jsonrpc": "2.0", "id": 6, "result": {"contents": []}}


def test_R_DLV_3_push_mode_answers_nothing_then_pushes_the_outcome() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    eid = h.park("a", 5, mode="push")
    assert Reply("a", 5, None) in h.effects
    effects = h.answer("a", eid, APPROVE)
    effects = h.finish(h.worker(effects), {"content": []})
    assert not replies(effects)
    assert pushes(effects) == [Push("a", {"jsonrpc": "2.0", "id": 5, "result": {"content": []}})]
    # decided before parking: a reply as usual
    h.call("a", 6, mode="push")
    effects = h.finish(h.worker(), Deny("no"))
    assert deny_payload(only_reply(effects))["detail"] == "no"


def test_R_INV_9_same_request_id_on_two_connections_each_outcome_to_its_owner() -> None:
    """Ids are unique per connection only: prompts, withdrawals and outcomes must follow the
    connection, not the id."""
    h = Harness(has_authorizer=True)
    conns = ("a", "b", "c", "d")
    eids = {}
    for conn in conns:  # each parks under the id the others already hold open
        h.connect(conn)
        eids[conn] = h.park(conn, 7, mode="push")
        assert [p.conn for p in pushes(h.effects)] == [conn]
    for conn in conns:  # a running tool's request goes to its own caller too
        ref = h.allow(conn, 9)
        form = {"message": "Name?", "requestedSchema": {"type": "object", "properties": {}}}
        effects = h.feed(ToolRequested(ref, "t", "elicitation/create", form, 0))
        assert [p.conn for p in pushes(effects)] == [conn]
    eid_a, eid_b = eids["a"], eids["b"]
    effects = h.answer("b", eid_b, APPROVE)
    effects = h.finish(h.worker(effects), {"content": [{"type": "text", "text": "b"}]})
    assert [(p.conn, p.related) for p in pushes(effects)] == [("b", 7)]
    effects = h.answer("a", eid_a, {"action": "decline"})
    assert [(p.conn, p.related) for p in pushes(effects)] == [("a", 7)]
    assert deny_payload(pushes(effects)[0].message)["detail"] == "declined"
    h.park("a", 8)
    effects = h.feed(CancelRequested("a", 8, 0))
    assert {p.conn for p in pushes(effects)} == {"a"}  # the withdrawal


# ---------------------------------------------------------------------------------------------
# Workers


def test_R_WORK_1_every_worker_has_a_deadline() -> None:
    h = Harness(has_authorizer=True, callback_timeout_ms=50)
    h.now = 10
    effects = h.call("a", 1)
    assert effects == [StartWorker(1, "a", Authorize("echo", {})), StartTimer(("worker", 1), 60)]


def test_R_WORK_2_a_worker_past_its_deadline_is_killed() -> None:
    h = Harness(callback_timeout_ms=50)
    h.call("a", 1)
    effects = h.feed(TimerFired(("worker", 1), 50))
    assert effects[0] == KillWorker(1)
    assert deny_free_busy(only_reply(effects)) == {"error": "callback_timeout"}
    h.feed(ReadRequested("a", 2, "prompts/get", {"name": "p"}, 0))
    effects = h.feed(TimerFired(("worker", h.worker()), 50))
    assert only_reply(effects)["error"]["data"] == {
        "error": "callback_timeout",
        "method": "prompts/get",
    }


def test_R_WORK_3_raising_or_off_contract_callbacks_answer_callback_failed() -> None:
    h = Harness()
    h.call("a", 1)
    effects = h.feed(WorkerFailed(1, 0))
    assert effects[0] == CancelTimer(("worker", 1))
    assert deny_free_busy(only_reply(effects)) == {"error": "callback_failed"}
    h.call("a", 2)
    effects = h.finish(h.worker(), "not a result object")
    assert deny_free_busy(only_reply(effects)) == {"error": "callback_failed"}
    h.feed(ReadRequested("a", 3, "resources/read", {"uri": "u"}, 0))
    effects = h.feed(WorkerFailed(h.worker(), 0))
    assert only_reply(effects)["error"]["data"]["error"] == "callback_failed"
    h.feed(ReadRequested("a", 4, "resources/read", {"uri": "u"}, 0))
    effects = h.finish(h.worker(), [1, 2])
    assert only_reply(effects)["error"]["data"]["error"] == "callback_failed"
    assert h.state.in_flight_total == 0


def test_R_WORK_4_stale_worker_events_are_ignored() -> None:
    h = Harness()
    h.call("a", 1)
    h.finish(1, {"content": []})
    before = h.state
    assert h.finish(1, {"content": []}) == []
    assert h.feed(WorkerFailed(1, 0)) == []
    assert h.feed(TimerFired(("worker", 1), 0)) == []
    assert h.finish(999, None) == []
    assert h.feed(TimerFired(("worker", "1"), 0)) == []
    assert h.feed(TimerFired(("nonsense", 1), 0)) == []
    assert h.feed(TimerFired("garbage", 0)) == []  # type: ignore[arg-type]
    assert h.state == before
    fresh = Harness()
    fresh.call("a", 1)  # worker 1 runs: a bool names no worker, though True == 1 in Python
    assert fresh.feed(TimerFired(("worker", True), 0)) == []


# ---------------------------------------------------------------------------------------------
# Reads


def test_R_READ_1_read_authorizer_gates_reads() -> None:
    h = Harness(has_read_authorizer=True)
    effects = h.feed(ReadRequested("a", 1, "resources/read", {"uri": "demo://status"}, 0))
    assert effects[0] == StartWorker(
        1, "a", AuthorizeRead("resources/read", {"uri": "demo://status"})
    )
    effects = h.finish(1, Allow())
    assert effects[1] == StartWorker(2, "a", RunRead("resources/read", {"uri": "demo://status"}))
    h2 = Harness()
    effects = h2.feed(ReadRequested("a", 1, "prompts/get", {"name": "p"}, 0))
    assert effects[0] == StartWorker(1, "a", RunRead("prompts/get", {"name": "p"}))


@pytest.mark.parametrize(
    ("decision", "detail"),
    [
        (Deny("not for you"), "not for you"),
        (Ask("secret operator prompt"), "interactive approval unsupported"),
        ("garbage", "authorizer failed"),
    ],
)
def test_R_READ_2_read_denies_never_park_nor_echo_the_prompt(decision: object, detail: str) -> None:
    h = Harness(has_read_authorizer=True)
    h.connect("a")
    h.feed(ReadRequested("a", 1, "resources/read", {"uri": "u"}, 0))
    effects = h.finish(1, decision)
    assert "secret operator prompt" not in repr(effects)
    assert not pushes(effects)
    assert only_reply(effects) == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {
            "code": -32090,
            "message": "authorization_required: resources/read",
            "data": {
                "error": "authorization_required",
                "method": "resources/read",
                "detail": detail,
            },
        },
    }
    assert h.state.parked_total == 0


def test_R_READ_2_failed_or_hung_read_authorizer_denies() -> None:
    h = Harness(has_read_authorizer=True)
    h.feed(ReadRequested("a", 1, "tools/list", {}, 0))
    effects = h.feed(WorkerFailed(1, 0))
    assert only_reply(effects)["error"]["data"]["detail"] == "authorizer failed"
    h.feed(ReadRequested("a", 2, "tools/list", {}, 0))
    effects = h.feed(TimerFired(("worker", 2), 0))
    assert only_reply(effects)["error"]["code"] == -32090


# ---------------------------------------------------------------------------------------------
# Identifiers


def test_R_ID_1_ids_are_prefixed_unguessable_and_never_reused() -> None:
    h = Harness(has_authorizer=True, max_parked_elicitations=32)
    h.connect("a")
    ids = []
    for i in range(20):
        eid = h.park("a", i)
        ids.append(eid)
        h.answer("a", eid, {"action": "decline"})
    assert len(set(ids)) == 20
    for eid in ids:
        assert eid.startswith("askgate-elicit-")
        suffix = eid.removeprefix("askgate-elicit-")
        assert len(suffix) >= 16
        assert set(suffix) <= set(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        )
    assert ids[0] == mint_elicitation_id(KEY, 0)
    assert mint_elicitation_id(b"another-key-0123456789", 0) != ids[0]
    assert "askgate-elicit-1" not in ids
