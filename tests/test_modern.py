"""The 2026-07-28 revision in the reducer (spec/modern.md, R-MRTR-9 ..): stateless requests,
``server/discover``, and approvals as sealed, single-use, capped input-required results."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import mcp_types._v2026_07_28 as wire_2026
import pytest

from askgate.core import (
    Allow,
    Ask,
    CatalogChanged,
    Effect,
    Emit,
    Failure,
    MessageReceived,
    NeedsInput,
    Options,
    Push,
    Reply,
    Resolve,
    ResourceUpdated,
    Round,
    RunRead,
    RunTool,
    ServerStopping,
    StartTimer,
    SubscriberAttached,
    SubscriberDetached,
    TimerFired,
    ToolCallReceived,
    ToolInfo,
    ToolLogged,
    ToolRequested,
    ToolUnregistered,
    initial_state,
    sealing,
)
from askgate.core import messages as m
from askgate.core.reducer import nonce_id
from askgate.core.revisions import META_SERVER_INFO, supported_versions
from tests.harness import Harness, deny_payload, only_reply, pushes, records, replies

VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPS_KEY = "io.modelcontextprotocol/clientCapabilities"
ELICIT_CAPS: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}}
INFO = {"name": "askgate", "version": "0.1.0"}
APPROVE = {"approval": {"action": "accept", "content": {"approve": True}}}
DECLINE = {"approval": {"action": "decline"}}
TOOLS = (
    ToolInfo("echo", sensitive=False, derived=False),
    ToolInfo("rm", sensitive=True, derived=False),
)


def meta(capabilities: object = None, version: object = "2026-07-28") -> dict[str, Any]:
    return {
        VERSION_KEY: version,
        CAPS_KEY: ELICIT_CAPS if capabilities is None else capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "mcp", "version": "0.1.0"},
    }


def harness(**options: Any) -> Harness:
    options.setdefault("has_authorizer", True)
    return Harness(tools=TOOLS, **options)


def send(h: Harness, conn: object, message: dict[str, Any], **kw: Any) -> list[Effect]:
    return h.feed(MessageReceived(conn, json.dumps(message).encode(), h.now, **kw))


def call(
    h: Harness,
    conn: object,
    rid: object,
    tool: str = "rm",
    arguments: object = None,
    *,
    meta_: object = None,
    state: object = None,
    responses: object = None,
    principal: str | None = None,
) -> list[Effect]:
    args = {"path": "/tmp/x", "n": 1.0} if arguments is None else arguments
    event = ToolCallReceived(
        conn,
        rid,
        tool,
        args,
        h.now,
        meta=meta() if meta_ is None else meta_,
        request_state=state,
        input_responses=responses,
        principal=principal,
    )
    return h.feed(event)


def ask(h: Harness, conn: object, rid: object, **kw: Any) -> dict[str, Any]:
    """A modern call whose authorizer asks: the input-required result it is answered with."""
    call(h, conn, rid, **kw)
    effects = h.finish(h.worker(), Ask("Allow rm?"))
    result: dict[str, Any] = only_reply(effects)["result"]
    return result


def run_ref(effects: list[Effect]) -> list[Any]:
    return [e for e in effects if type(e).__name__ == "StartWorker"]


# --- R-MRTR-9: which era serves a request ---------------------------------------------------


def test_R_MRTR_9_modern_meta_is_served_statelessly_initialize_selects_2025() -> None:
    h = harness()
    call(h, "c", 1, "echo", {})
    h.finish(h.worker(), Allow())
    result = only_reply(h.finish(h.worker(), {"content": []}))["result"]
    assert result["resultType"] == "complete"
    assert result["_meta"] == {META_SERVER_INFO: INFO}
    # The connection initializes: from then on its requests are 2025 ones, whatever their _meta.
    send(
        h, "c", {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"capabilities": {}}}
    )
    call(h, "c", 2, "echo", {})
    h.finish(h.worker(), Allow())
    assert only_reply(h.finish(h.worker(), {"content": []}))["result"] == {"content": []}


def test_R_MRTR_9_a_request_without_modern_meta_is_unchanged() -> None:
    h = harness()
    h.feed(ToolCallReceived("c", 1, "echo", {}, 0))
    h.finish(h.worker(), Allow())
    assert only_reply(h.finish(h.worker(), {"content": []}))["result"] == {"content": []}


def test_R_MRTR_9_methods_the_modern_revision_lacks_are_unknown() -> None:
    h = harness()
    for rid, method in enumerate(("logging/setLevel", "resources/subscribe", "ping"), 1):
        params = {"level": "info", "uri": "u", "_meta": meta()}
        message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        assert only_reply(send(h, "c", message))["error"]["code"] == m.METHOD_NOT_FOUND
    assert len(h.state.log_levels) == 0
    assert "c" not in h.state.conns


def test_R_MRTR_9_a_ping_naming_a_version_on_an_initialized_connection_is_a_2025_ping() -> None:
    h = harness()
    send(h, "c", {"jsonrpc": "2.0", "id": 0, "method": "ping"})
    assert "c" not in h.state.conns  # a ping does not initialize
    initialize = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": INFO}
    send(h, "c", {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize})
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"_meta": meta()}}
    assert only_reply(send(h, "c", ping)) == {"jsonrpc": "2.0", "id": 2, "result": {}}


# --- R-MRTR-10: the request's _meta is checked ------------------------------------------------


def test_R_MRTR_10_missing_capabilities_or_a_bad_version_is_refused() -> None:
    h = harness()
    no_caps = {VERSION_KEY: "2026-07-28"}
    assert only_reply(call(h, "c", 1, meta_=no_caps))["error"]["code"] == -32602
    assert only_reply(call(h, "c", 2, meta_=meta(version=7)))["error"]["code"] == -32602
    error = only_reply(call(h, "c", 3, meta_=meta(version="2099-01-01")))["error"]
    assert error["code"] == -32022
    assert error["data"] == {"supported": supported_versions(), "requested": "2099-01-01"}
    assert "2026-07-28" in error["data"]["supported"]
    assert len(h.state.calls) == 0


# --- R-MRTR-11: results and server/discover ---------------------------------------------------


def test_R_MRTR_11_discover_answers_with_versions_and_caching() -> None:
    h = harness(server_name="gate", instructions="be nice")
    message = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta()}}
    result = only_reply(send(h, "c", message))["result"]
    assert result["resultType"] == "complete"
    assert result["supportedVersions"][0] == "2026-07-28"
    assert "2025-11-25" in result["supportedVersions"]
    assert result["ttlMs"] == 0
    assert result["cacheScope"] == "private"
    assert result["instructions"] == "be nice"
    assert result["_meta"] == {META_SERVER_INFO: {"name": "gate", "version": "0.1.0"}}
    assert set(result["capabilities"]) >= {"tools"}
    bare = {"jsonrpc": "2.0", "id": 2, "method": "server/discover"}
    assert only_reply(send(h, "c", bare))["error"]["code"] == m.METHOD_NOT_FOUND


def test_R_MRTR_11_a_cacheable_list_carries_ttl_and_scope() -> None:
    h = Harness(tools=TOOLS[:1])
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}
    result = only_reply(send(h, "c", message))["result"]
    assert [t["name"] for t in result["tools"]] == ["echo"]
    assert (result["resultType"], result["ttlMs"], result["cacheScope"]) == (
        "complete",
        0,
        "private",
    )


# --- R-MRTR-12: an ASK parks a nonce and answers input_required -------------------------------


def test_R_MRTR_12_an_ask_is_answered_at_once_with_the_approval_form_and_a_sealed_state() -> None:
    h = harness()
    call(h, "c", 1)
    effects = h.finish(h.worker(), Ask("Allow rm?"))
    result = only_reply(effects)["result"]
    assert result["resultType"] == "input_required"
    assert result["_meta"] == {META_SERVER_INFO: INFO}
    form = m.elicitation_request("", "rm", "Allow rm?")["params"]
    assert result["inputRequests"] == {"approval": {"method": "elicitation/create", "params": form}}
    state = result["requestState"]
    ring = h.state.keyring
    assert ring is not None
    digest = sealing.arguments_digest({"path": "/tmp/x", "n": 1.0})
    opened = sealing.open_sealed(ring, state, "", "rm", digest, 0)
    assert opened.verdict == "valid"
    nid = nonce_id(opened.nonce)
    assert h.state.parked[nid].stateless
    assert h.state.parked_total == 1
    assert len(h.state.calls) == 0  # the request itself is closed
    assert StartTimer(("elicitation", nid), 60_000) in effects
    assert records(effects, "call_parked")[0]["elicitation_id"] == nid
    end = records(effects)[0]
    assert (end["outcome"], end["decision"], end["elicitation_id"]) == (
        "input_required",
        "ask",
        nid,
    )
    assert opened.expiry == 60_000  # the ring's ttl is the elicitation timeout


def test_R_MRTR_12_nonces_share_the_caps_and_fair_eviction_of_parked_calls() -> None:
    h = harness(max_parked_elicitations=2, max_parked_elicitations_total=3)
    alice = [ask(h, "a", rid, principal="alice")["requestState"] for rid in (1, 2)]
    denied = call(h, "a", 3, principal="alice")
    deny = deny_payload(only_reply(h.finish(h.worker(), Ask("again?"))))
    assert deny["detail"] == m.TOO_MANY_PENDING
    assert denied
    assert ask(h, "b", 4, principal="bob")["resultType"] == "input_required"
    # The server is full: bob's next ASK evicts alice's oldest nonce, silently.
    call(h, "b", 5, principal="bob")
    effects = h.finish(h.worker(), Ask("more?"))
    assert only_reply(effects)["result"]["resultType"] == "input_required"
    assert not [e for e in effects if isinstance(e, Push)]
    owners = sorted(str(p.key[0]) for p in h.state.parked.values())
    assert owners == ["('principal', 'alice')", "('principal', 'bob')", "('principal', 'bob')"]
    # The oldest of alice's was evicted (R-PARK-4): its retry says so; her newer one still runs.
    evicted = call(h, "a", 6, state=alice[0], responses=APPROVE, principal="alice")
    assert deny_payload(only_reply(evicted))["detail"] == m.EVICTED
    assert run_ref(call(h, "a", 7, state=alice[1], responses=APPROVE, principal="alice"))


def test_R_MRTR_12_the_principal_of_a_message_owns_its_nonce() -> None:
    """The principal the shell passes with a message (``MessageReceived.principal``) is the
    owner, as it is for the typed event: a nonce asked through the wire parks under it."""
    h = harness()
    params = {"name": "rm", "arguments": {"path": "/tmp/x"}, "_meta": meta()}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    send(h, "a", message, principal="alice")
    result = only_reply(h.finish(h.worker(), Ask("Allow rm?")))["result"]
    assert result["resultType"] == "input_required"
    assert [p.key[0] for p in h.state.parked.values()] == [("principal", "alice")]


# --- R-MRTR-13: the retry runs the tool only once ---------------------------------------------


def test_R_MRTR_13_an_approving_retry_runs_the_tool_once() -> None:
    h = harness()
    state = ask(h, "c", 1)["requestState"]
    effects = call(h, "c", 2, state=state, responses=APPROVE)
    ref = h.worker(effects)
    assert len(h.state.parked) == 0
    assert h.state.calls[("c", 2)].decision == "approved"
    result = only_reply(h.finish(ref, {"content": []}))["result"]
    assert result["resultType"] == "complete"
    end = records(h.effects)[0]
    assert (end["decision"], end["approved"], end["outcome"]) == ("ask", True, "result")
    # The same state again: already used, nothing runs.
    again = call(h, "c", 3, state=state, responses=APPROVE)
    assert deny_payload(only_reply(again))["detail"] == m.ALREADY_USED
    assert not run_ref(again)


def test_R_MRTR_13_a_decline_cancel_or_missing_answer_denies() -> None:
    h = harness()
    for rid, responses, detail in (
        (1, DECLINE, m.DECLINED),
        (3, {"approval": {"action": "cancel"}}, m.CANCELLED),
        (5, None, m.NOT_APPROVED),
        (7, {"other": APPROVE["approval"]}, m.NOT_APPROVED),
        (9, {"approval": {"action": "accept", "content": {"approve": "true"}}}, m.NOT_APPROVED),
    ):
        state = ask(h, "c", rid)["requestState"]
        effects = call(h, "c", rid + 1, state=state, responses=responses)
        payload = deny_payload(only_reply(effects))
        assert (payload["detail"], payload["decision"]) == (detail, "ask")
        assert not run_ref(effects)
        assert len(h.state.parked) == 0
        assert only_reply(effects)["result"]["resultType"] == "complete"


def test_R_MRTR_13_tampered_foreign_changed_and_expired_states_deny() -> None:
    h = harness()
    state = ask(h, "c", 1, principal="alice")["requestState"]
    flipped = state[:-3] + ("A" if state[-3] != "A" else "B") + state[-2:]
    cases: list[tuple[str, dict[str, Any], str, str]] = [
        (flipped, {}, "alice", sealing.TAMPERED),
        ("x" * 300, {}, "alice", sealing.MALFORMED),
        (state, {}, "bob", sealing.FOREIGN_PRINCIPAL),
        (state, {"arguments": {"path": "/etc", "n": 1.0}}, "alice", sealing.CHANGED_ARGUMENTS),
        (state, {"arguments": {"path": "/tmp/x", "n": 1}}, "alice", sealing.CHANGED_ARGUMENTS),
        (
            state,
            {"tool": "echo", "arguments": {"path": "/tmp/x", "n": 1.0}},
            "alice",
            sealing.OTHER_TOOL,
        ),
    ]
    for rid, (token, kw, who, detail) in enumerate(cases, 10):
        effects = call(h, "c", rid, state=token, responses=APPROVE, principal=who, **kw)
        assert deny_payload(only_reply(effects))["detail"] == detail, detail
        assert not run_ref(effects)
    assert len(h.state.parked) == 1  # none of those touched the parked nonce
    h.now = 60_000
    effects = call(h, "c", 20, state=state, responses=APPROVE, principal="alice")
    assert deny_payload(only_reply(effects))["detail"] == sealing.EXPIRED


def test_R_MRTR_13_a_valid_state_parked_for_another_owner_is_foreign() -> None:
    h = harness()
    state = ask(h, "a", 1)["requestState"]  # nobody authenticated: parked under conn "a"
    effects = call(h, "b", 2, state=state, responses=APPROVE)
    assert deny_payload(only_reply(effects))["detail"] == sealing.FOREIGN_PRINCIPAL
    assert len(h.state.parked) == 1


def test_R_MRTR_13_an_approved_retry_over_the_bounds_is_busy() -> None:
    h = harness(max_in_flight=1)
    state = ask(h, "c", 1)["requestState"]
    call(h, "c", 2, "echo", {})  # holds the one worker
    effects = call(h, "c", 3, state=state, responses=APPROVE)
    assert only_reply(effects)["result"]["structuredContent"]["error"] == "server_busy"
    assert len(h.state.parked) == 0  # the nonce is spent: the approval is not run twice


# --- R-MRTR-14: closed nonces are remembered, boundedly ---------------------------------------


def test_R_MRTR_14_a_timed_out_or_evicted_nonce_says_why() -> None:
    h = harness(max_parked_elicitations=1, max_parked_elicitations_total=1)
    first = ask(h, "a", 1, principal="alice")["requestState"]
    second = ask(h, "b", 2, principal="bob")["requestState"]  # evicts alice's
    effects = call(h, "a", 3, state=first, responses=APPROVE, principal="alice")
    assert deny_payload(only_reply(effects))["detail"] == m.EVICTED
    (nid,) = h.state.parked
    h.now = 60_000  # the nonce times out when its state expires: its retry is expired
    h.feed(TimerFired(("elicitation", nid), h.now))
    effects = call(h, "b", 4, state=second, responses=APPROVE, principal="bob")
    assert deny_payload(only_reply(effects))["detail"] == sealing.EXPIRED
    assert len(h.state.parked) == 0


def test_R_MRTR_14_the_record_is_capped_and_forgets_the_oldest() -> None:
    h = harness(max_parked_elicitations=2, max_parked_elicitations_total=2)
    states = [ask(h, "c", rid)["requestState"] for rid in (1, 2)]
    for rid, state in zip((3, 4), states, strict=True):
        call(h, "c", rid, state=state, responses=DECLINE)
    assert len(h.state.closed_nonces) == 2
    third = ask(h, "c", 5)["requestState"]
    call(h, "c", 6, state=third, responses=DECLINE)
    assert len(h.state.closed_nonces) == 2  # the oldest forgotten; still denied as used
    effects = call(h, "c", 7, state=states[0], responses=APPROVE)
    assert deny_payload(only_reply(effects))["detail"] == m.ALREADY_USED


# --- R-MRTR-15: silence ------------------------------------------------------------------------


def test_R_MRTR_15_timeouts_push_nothing_and_2025_answers_cannot_close_a_nonce() -> None:
    h = harness()
    ask(h, "c", 1)
    (nid,) = h.state.parked
    assert h.answer("c", nid, {"action": "accept", "content": {"approve": True}}) == []
    h.now = 60_000
    effects = h.feed(TimerFired(("elicitation", nid), h.now))
    assert effects == []
    assert len(h.state.parked) == 0
    assert nid not in h.state.closed_nonces  # its state is expired from now on


# --- R-MRTR-16: no elicitation declared, no input-required result -----------------------------


def test_R_MRTR_16_a_client_without_elicitation_gets_the_deny_on_ask() -> None:
    h = harness()
    no_form: list[tuple[int, dict[str, Any]]] = [(1, {}), (3, {"elicitation": {"url": {}}})]
    for rid, caps in no_form:
        call(h, "c", rid, meta_=meta(caps))
        effects = h.finish(h.worker(), Ask("Allow rm?"))
        message = only_reply(effects)
        assert "error" not in message
        assert deny_payload(message)["detail"] == "Allow rm?"
        assert message["result"]["resultType"] == "complete"
        assert len(h.state.parked) == 0


# --- R-MRTR-17: a tool's own questions in a stateless call ------------------------------------

FORM: dict[str, Any] = {
    "message": "Who are you?",
    "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
}
SAMPLE: dict[str, Any] = {
    "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
    "maxTokens": 100,
}
ASKING_CAPS: dict[str, Any] = {"elicitation": {"form": {}}, "sampling": {}}


def running_tool(h: Harness, conn: object, rid: object, **kw: Any) -> int:
    """A modern ``echo`` call allowed by the authorizer: the ref of its running tool."""
    call(h, conn, rid, "echo", {}, **kw)
    return h.worker(h.finish(h.worker(), Allow()))


def test_R_MRTR_17_a_tool_serving_a_modern_call_cannot_ask_its_client() -> None:
    h = harness()
    ref = running_tool(h, "c", 1, meta_=meta(ASKING_CAPS))
    for token, method, params in (
        ("e", "elicitation/create", FORM),
        ("s", "sampling/createMessage", SAMPLE),
        ("x", "elicitation/create", {"message": 7}),  # refused before its params are looked at
    ):
        effects = h.feed(ToolRequested(ref, token, method, params, h.now))
        (resolve,) = effects  # nothing sent, nothing armed
        assert isinstance(resolve, Resolve)
        assert resolve.token == token
        assert isinstance(resolve.outcome, Failure)
        assert (resolve.outcome.code, resolve.outcome.data) == (
            -32603,
            {"error": "stateless_request"},
        )
    assert len(h.state.client_requests) == 0
    # The tool carries on; its answer is the modern one.
    result = only_reply(h.finish(ref, {"content": []}))["result"]
    assert result["resultType"] == "complete"
    # The same tool serving a 2025 request asks its client as R-CTX-4 says.
    h.connect("old", ASKING_CAPS)
    h.call("old", 1, "echo", {})
    ref = h.worker(h.finish(h.worker(), Allow()))
    (push,) = pushes(h.feed(ToolRequested(ref, "e", "elicitation/create", FORM, h.now)))
    assert push.message["method"] == "elicitation/create"


def test_R_MRTR_17_an_approved_retry_s_tool_cannot_ask_either() -> None:
    h = harness()
    state = ask(h, "c", 1, meta_=meta(ASKING_CAPS))["requestState"]
    ref = h.worker(call(h, "c", 2, meta_=meta(ASKING_CAPS), state=state, responses=APPROVE))
    effects = h.feed(ToolRequested(ref, "e", "elicitation/create", FORM, h.now))
    assert [type(e) for e in effects] == [Resolve]
    assert effects[0].outcome.data == {"error": "stateless_request"}  # type: ignore[union-attr]


# --- R-MRTR-18: a modern request's logs follow its own logLevel -------------------------------

LEVEL_KEY = "io.modelcontextprotocol/logLevel"


def test_R_MRTR_18_logs_follow_the_request_s_log_level_only() -> None:
    h = harness()
    h.feed(SubscriberAttached("c"))
    # A connection-wide level set without modern _meta is not consulted by modern requests.
    set_level = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "logging/setLevel",
        "params": {"level": "debug"},
    }
    assert "result" in only_reply(send(h, "c", set_level))
    assert h.state.log_levels.get("c") == "debug"
    silent = running_tool(h, "c", 1)  # no logLevel in its _meta
    assert h.feed(ToolLogged(silent, "emergency", "x", None, h.now)) == []
    warned = running_tool(h, "c", 2, meta_={**meta(), LEVEL_KEY: "warning"})
    assert h.feed(ToolLogged(warned, "info", "too low", None, h.now)) == []
    (push,) = pushes(h.feed(ToolLogged(warned, "error", {"step": 1}, "tool", h.now)))
    assert push.conn == "c"
    assert push.related == 2
    assert push.message == {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": "error", "logger": "tool", "data": {"step": 1}},
    }
    # Its level is its own: the first request still gets nothing.
    assert h.feed(ToolLogged(silent, "emergency", "x", None, h.now)) == []


def test_R_MRTR_18_a_bad_log_level_is_refused_and_discover_offers_logging() -> None:
    h = harness()
    for rid, level in enumerate(("loud", 3, {"level": "info"}), 1):
        reply = only_reply(call(h, "c", rid, "echo", {}, meta_={**meta(), LEVEL_KEY: level}))
        assert reply["error"]["code"] == -32602
    assert len(h.state.calls) == 0
    message = {"jsonrpc": "2.0", "id": 9, "method": "server/discover", "params": {"_meta": meta()}}
    assert only_reply(send(h, "c", message))["result"]["capabilities"]["logging"] == {}


# --- R-MRTR-19: subscriptions/listen ----------------------------------------------------------

SUB_KEY = "io.modelcontextprotocol/subscriptionId"


def listen(h: Harness, conn: object, rid: object, notifications: object) -> list[Effect]:
    params = {"notifications": notifications, "_meta": meta()}
    return send(
        h, conn, {"jsonrpc": "2.0", "id": rid, "method": "subscriptions/listen", "params": params}
    )


def test_R_MRTR_19_a_listen_is_acknowledged_with_what_it_honours_then_tagged() -> None:
    h = harness()
    h.feed(SubscriberAttached("c"))
    asked = {
        "toolsListChanged": True,
        "promptsListChanged": False,
        "resourcesListChanged": "yes",
        "resourceSubscriptions": ["test://watched-resource"],
    }
    (ack,) = listen(h, "c", "L1", asked)  # no answer yet: only the acknowledgement
    assert isinstance(ack, Push)
    assert ack.related == "L1"
    assert ack.message == {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"notifications": {"toolsListChanged": True}, "_meta": {SUB_KEY: "L1"}},
    }
    types.SubscriptionsAcknowledgedNotification.model_validate(ack.message)  # the SDK's schema
    (ack2,) = pushes(listen(h, "c", 7, {"promptsListChanged": True, "resourcesListChanged": True}))
    assert ack2.message["params"]["notifications"] == {
        "promptsListChanged": True,
        "resourcesListChanged": True,
    }
    # A tool list change reaches only the listen that asked for it, tagged with its id.
    (change,) = pushes(h.feed(ToolUnregistered("echo")))
    assert change.related == "L1"
    assert change.message == {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {SUB_KEY: "L1"}},
    }
    types.ToolListChangedNotification.model_validate(change.message)
    (change,) = pushes(h.feed(CatalogChanged("prompt", "p", {"name": "p"})))
    assert change.related == 7
    assert change.message["params"] == {"_meta": {SUB_KEY: 7}}
    # Nothing else reaches a listen: no resource update, no server log.
    assert pushes(h.feed(ResourceUpdated("test://watched-resource"))) == []
    # The listen's id is open: reusing it is a duplicate.
    assert only_reply(call(h, "c", "L1", "echo", {}))["error"]["code"] == m.INVALID_REQUEST


def test_R_MRTR_19_a_listen_ends_by_cancel_drop_or_stop() -> None:
    h = harness()
    h.feed(SubscriberAttached("c"))
    h.feed(SubscriberAttached("d"))
    listen(h, "c", 1, {"toolsListChanged": True})
    listen(h, "c", 2, {"toolsListChanged": True})
    listen(h, "d", 1, {"toolsListChanged": True})
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    assert send(h, "c", cancel) == []  # ended, answered nothing
    told = pushes(h.feed(ToolUnregistered("echo")))
    assert sorted((str(p.conn), str(p.related)) for p in told) == [("c", "2"), ("d", "1")]
    assert h.feed(SubscriberDetached("d")) == []
    assert [(p.conn, p.related) for p in pushes(h.feed(ToolUnregistered("rm")))] == [("c", 2)]
    (end,) = replies(h.feed(ServerStopping(h.now)))
    assert end.message == {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {"_meta": {SUB_KEY: 2, META_SERVER_INFO: INFO}, "resultType": "complete"},
    }
    assert len(h.state.listens) == 0
    # The 2026-07-28 wire schema requires the subscription id on the answer that ends a listen.
    ended = wire_2026.SubscriptionsListenResult.model_validate(end.message["result"])
    assert ended.meta.io_modelcontextprotocol_subscription_id == 2


def test_R_MRTR_19_a_bad_filter_or_too_many_listens_are_refused() -> None:
    h = harness(max_in_flight=4, max_in_flight_per_connection=2)
    assert only_reply(listen(h, "c", 1, ["tools"]))["error"]["code"] == m.INVALID_PARAMS
    listen(h, "c", 2, {})
    listen(h, "c", 3, {})
    busy = only_reply(listen(h, "c", 4, {"toolsListChanged": True}))
    assert busy["error"]["data"] == {
        "error": "server_busy",
        "method": "subscriptions/listen",
        "scope": "connection",
    }
    assert sorted(str(key[1]) for key in h.state.listens) == ["2", "3"]
    # Without modern _meta (or on a 2025 connection) the method does not exist.
    bare = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "subscriptions/listen",
        "params": {"notifications": {}},
    }
    assert only_reply(send(h, "c", bare))["error"]["code"] == m.METHOD_NOT_FOUND
    message = {"jsonrpc": "2.0", "id": 9, "method": "server/discover", "params": {"_meta": meta()}}
    caps = only_reply(send(h, "c", message))["result"]["capabilities"]
    assert caps["tools"] == {"listChanged": True}
    assert "subscribe" not in caps["resources"]


def test_keyring_ttl_must_be_the_elicitation_timeout() -> None:
    ring = sealing.Keyring(sealing.Key("k", b"s" * 32), 5)
    with pytest.raises(ValueError, match="keyring"):
        initial_state(Options(), id_key=b"k" * 32, keyring=ring)
    state = initial_state(Options(elicitation_timeout_ms=5), id_key=b"k" * 32, keyring=ring)
    assert state.keyring is ring


def test_replies_are_for_the_request() -> None:
    h = harness()
    effects = call(h, "c", 1)
    assert replies(effects) == []
    assert not [e for e in effects if isinstance(e, (Emit, Reply))]


def test_R_DROP_3_a_connection_kept_for_its_nonces_negotiates_again() -> None:
    """A connection that goes away while a modern nonce it owns is parked is kept for the nonce
    only: it forgets the version it negotiated, so its next modern request is served
    statelessly again (R-MRTR-9), not as the 2025 request of a connection that initialized."""
    h = harness()
    state = ask(h, "c", 1)["requestState"]
    initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"capabilities": {}}}
    send(h, "c", initialize)
    assert h.state.conns["c"].version
    h.feed(SubscriberDetached("c", h.now))
    assert h.state.conns["c"].version == ""
    assert run_ref(call(h, "c", 2, state=state, responses=APPROVE))  # the retry is modern again


# --- R-MRTR-20 .. R-MRTR-24: a callback's own input-required rounds --------------------------

ROUND_CAPS: dict[str, Any] = {"elicitation": {}, "sampling": {}, "roots": {}}
ASK_NAME: dict[str, Any] = {"name": {"method": "elicitation/create", "params": FORM}}
NAMED = {"name": {"action": "accept", "content": {"name": "Ada"}}}


def started_job(effects: list[Effect]) -> Any:
    (start,) = run_ref(effects)
    return start.job


def round_of(h: Harness, conn: object, rid: object, needs: NeedsInput, **kw: Any) -> Any:
    """A modern ``echo`` call, allowed, whose tool ends a round with ``needs``: the answer."""
    ref = running_tool(h, conn, rid, **kw)
    return only_reply(h.finish(ref, needs))


def test_R_MRTR_20_a_tool_ends_a_round_and_runs_again_told_the_answers() -> None:
    h = harness()
    call(h, "c", 1, "echo", {}, meta_=meta(ROUND_CAPS))
    job = started_job(h.finish(h.worker(), Allow()))
    assert isinstance(job, RunTool)
    assert job.round == Round(ROUND_CAPS)  # told the request's capabilities, nothing more
    effects = h.finish(job_ref(h), NeedsInput(ASK_NAME, {"step": 1}))
    result = only_reply(effects)["result"]
    assert result["resultType"] == "input_required"
    assert result["inputRequests"] == ASK_NAME
    assert result["_meta"] == {META_SERVER_INFO: INFO}
    assert isinstance(result["requestState"], str)
    assert [r["outcome"] for r in records(effects)] == ["input_required"]
    assert len(records(effects, "call_parked")) == 1
    assert h.state.parked_total == 1
    # The retry runs the tool again (after its authorizer), told the answers and its state.
    call(
        h, "c", 2, "echo", {}, meta_=meta(ROUND_CAPS), state=result["requestState"], responses=NAMED
    )
    job = started_job(h.finish(h.worker(), Allow()))
    assert job.round == Round(ROUND_CAPS, NAMED, {"step": 1}, False)
    assert h.state.parked_total == 0
    assert only_reply(h.finish(job_ref(h), {"content": []}))["result"]["resultType"] == "complete"


def job_ref(h: Harness) -> int:
    return h.worker()


def test_R_MRTR_20_answers_without_a_round_state_are_not_told() -> None:
    h = harness()
    call(h, "c", 1, "echo", {}, meta_=meta(ROUND_CAPS), responses=NAMED)
    job = started_job(h.finish(h.worker(), Allow()))
    assert job.round == Round(ROUND_CAPS)


@pytest.mark.parametrize(
    "needs",
    [
        NeedsInput({}),
        NeedsInput([]),
        NeedsInput({"k": {"method": "ping", "params": {}}}),
        NeedsInput({"k": {"method": "roots/list", "params": 3}}),
        NeedsInput({"k": {"method": "roots/list", "extra": 1}}),
        NeedsInput({"x" * 65: {"method": "roots/list"}}),
        NeedsInput({str(i): {"method": "roots/list"} for i in range(17)}),
        NeedsInput(ASK_NAME, {"big": "x" * 1024}),
        NeedsInput(ASK_NAME, float("nan")),
    ],
)
def test_R_MRTR_20_a_round_it_may_not_end_fails_like_a_raising_tool(needs: NeedsInput) -> None:
    h = harness()
    message = round_of(h, "c", 1, needs, meta_=meta(ROUND_CAPS))
    assert message["result"]["structuredContent"] == {"error": "callback_failed"}
    assert h.state.parked_total == 0


def test_R_MRTR_20_a_2025_call_has_no_rounds() -> None:
    h = harness()
    h.connect("old", ROUND_CAPS)
    ref = h.allow("old", 1)
    assert started_job(list(h.effects)).round is None
    message = only_reply(h.finish(ref, NeedsInput(ASK_NAME)))
    assert message["result"]["structuredContent"] == {"error": "callback_failed"}
    assert h.state.parked_total == 0


def test_R_MRTR_21_an_approved_call_s_rounds_do_not_ask_again() -> None:
    h = harness()
    state = ask(h, "c", 1, meta_=meta(ROUND_CAPS))["requestState"]
    effects = call(h, "c", 2, meta_=meta(ROUND_CAPS), state=state, responses=APPROVE)
    assert started_job(effects).round == Round(ROUND_CAPS, approved=True)
    round_state = only_reply(h.finish(h.worker(), NeedsInput(ASK_NAME)))["result"]["requestState"]
    assert sealing.token_version(round_state) == sealing.ROUND_VERSION
    # The retry runs the tool at once (no authorizer), still approved, recorded as approved.
    effects = call(h, "c", 3, meta_=meta(ROUND_CAPS), state=round_state, responses=NAMED)
    job = started_job(effects)
    assert isinstance(job, RunTool)
    assert job.round == Round(ROUND_CAPS, NAMED, None, True)
    (record,) = records(h.finish(h.worker(), {"content": []}))
    assert (record["decision"], record["approved"], record["outcome"]) == ("ask", True, "result")


def test_R_MRTR_21_round_nonces_share_the_parking_caps_and_timer() -> None:
    h = harness(max_parked_elicitations=1, elicitation_timeout_ms=1000)
    first = round_of(h, "c", 1, NeedsInput(ASK_NAME), meta_=meta(ROUND_CAPS))
    assert first["result"]["resultType"] == "input_required"
    timers = [e for e in h.effects if isinstance(e, StartTimer)]
    assert [t.deadline for t in timers] == [1000]
    full = round_of(h, "c", 2, NeedsInput(ASK_NAME), meta_=meta(ROUND_CAPS))
    assert deny_payload(full)["detail"] == m.TOO_MANY_PENDING
    # The nonce times out silently; its state has expired with it.
    h.now = 1000
    assert h.feed(TimerFired(timers[0].key, h.now)) == []
    assert h.state.parked_total == 0
    state = first["result"]["requestState"]
    late = only_reply(call(h, "c", 3, "echo", {}, meta_=meta(ROUND_CAPS), state=state))
    assert late["error"]["data"] == {"reason": "request state expired"}


def test_R_MRTR_22_a_round_asking_what_was_not_declared_gets_32021() -> None:
    h = harness()
    sample = {"s": {"method": "sampling/createMessage", "params": SAMPLE}}
    url = {"u": {"method": "elicitation/create", "params": {"mode": "url", "message": "go"}}}
    for rid, (caps, needs, missing) in enumerate(
        (
            ({}, sample, {"sampling": {}}),
            ({"elicitation": {}}, {**sample, **ASK_NAME}, {"sampling": {}}),
            ({"elicitation": {"form": {}}}, url, {"elicitation": {"url": {}}}),
            ({"sampling": {}}, {"r": {"method": "roots/list"}}, {"roots": {}}),
        ),
        1,
    ):
        effects = h.finish(running_tool(h, "c", rid, meta_=meta(caps)), NeedsInput(needs))
        error = only_reply(effects)["error"]
        assert (error["code"], error["data"]) == (-32021, {"requiredCapabilities": missing})
        assert [r["outcome"] for r in records(effects)] == ["error"]
        assert h.state.parked_total == 0
    both = round_of(h, "c", 9, NeedsInput({**sample, **url}), meta_=meta(ROUND_CAPS))
    assert both["error"]["data"] == {"requiredCapabilities": {"elicitation": {"url": {}}}}


def test_R_MRTR_23_a_refused_round_state_is_invalid_params_and_nothing_runs() -> None:
    h = harness()
    first = round_of(h, "c", 1, NeedsInput(ASK_NAME), meta_=meta(ROUND_CAPS), principal="ann")
    state = first["result"]["requestState"]
    flipped = state[:-3] + ("A" if state[-3] != "A" else "B") + state[-2:]
    for rid, (token, arguments, principal, reason) in enumerate(
        (
            (state + "-TAMPERED", {}, "ann", "request state malformed"),
            (flipped, {}, "ann", "request state tampered"),
            (state, {}, "bob", "request state of another principal"),
            (state, {"text": "x"}, "ann", "arguments changed"),
        ),
        2,
    ):
        effects = call(
            h, "c", rid, "echo", arguments, meta_=meta(ROUND_CAPS), state=token, principal=principal
        )
        error = only_reply(effects)["error"]
        assert (error["code"], error["data"]) == (-32602, {"reason": reason})
        assert run_ref(effects) == []
        assert h.state.parked_total == 1  # still the asker's
    # Taken once by its owner (from another connection: the principal owns it); then used.
    taken = call(h, "d", 9, "echo", {}, meta_=meta(ROUND_CAPS), state=state, principal="ann")
    assert len(run_ref(taken)) == 1
    assert h.state.parked_total == 0
    again = call(h, "d", 10, "echo", {}, meta_=meta(ROUND_CAPS), state=state, principal="ann")
    assert only_reply(again)["error"]["data"] == {"reason": "request state already used"}
    assert run_ref(again) == []


def test_R_MRTR_24_a_prompt_ends_a_round_and_is_read_again_told_the_answers() -> None:
    h = harness()
    params: dict[str, Any] = {"name": "p", "_meta": meta(ROUND_CAPS)}
    get = {"jsonrpc": "2.0", "id": 1, "method": "prompts/get", "params": params}
    job = started_job(send(h, "c", get, principal="ann"))
    assert isinstance(job, RunRead)
    assert job.round == Round(ROUND_CAPS)
    result = only_reply(h.finish(h.worker(), NeedsInput(ASK_NAME, "s")))["result"]
    assert result["resultType"] == "input_required"
    assert "ttlMs" not in result
    retry = {**params, "requestState": result["requestState"], "inputResponses": NAMED}
    # Another prompt's name cannot use it (and does not spend it).
    other = {"jsonrpc": "2.0", "id": 2, "method": "prompts/get", "params": {**retry, "name": "q"}}
    error = only_reply(send(h, "d", other, principal="ann"))["error"]
    assert (error["code"], error["data"]) == (-32602, {"reason": "request state of another tool"})
    again = {"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": retry}
    job = started_job(send(h, "d", again, principal="ann"))
    assert job.round == Round(ROUND_CAPS, NAMED, "s", False)
    # A method without rounds has none to end.
    listing = {
        "jsonrpc": "2.0",
        "id": 4,
        "method": "completion/complete",
        "params": {
            "ref": {"type": "ref/prompt", "name": "p"},
            "argument": {"name": "a", "value": ""},
            "_meta": meta(ROUND_CAPS),
        },
    }
    job = started_job(send(h, "d", listing))
    assert job.round is None
    message = only_reply(h.finish(h.worker(), NeedsInput(ASK_NAME)))
    assert message["error"]["data"] == {"error": "callback_failed", "method": "completion/complete"}
