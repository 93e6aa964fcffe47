"""Examples for spec/protocol.md: MCP messages in as bytes, dispatched by the reducer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from askgate.core import (
    Allow,
    Ask,
    AuthorizeRead,
    CatalogChanged,
    Deny,
    Effect,
    Emit,
    Failure,
    FilterTools,
    LogEmitted,
    MessageReceived,
    OptionError,
    Push,
    ReadRequested,
    Reply,
    ResourceUpdated,
    RunRead,
    RunTool,
    StartWorker,
    SubscriberAttached,
    SubscriberDetached,
    ToolCallReceived,
    ToolInfo,
    ToolRegistered,
    ToolUnregistered,
)
from askgate.core.protocol import encode_cursor
from tests.harness import Harness, deny_payload, only_reply, pushes, replies

ECHO = ToolInfo(
    "echo",
    sensitive=False,
    derived=False,
    definition={
        "name": "echo",
        "description": "Echo text",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
)


def send(h: Harness, conn: str, message: object, **kw: Any) -> list[Effect]:
    data = message if isinstance(message, bytes) else json.dumps(message).encode()
    return h.feed(MessageReceived(conn, data, h.now, **kw))


def request(rid: object, method: str, params: object = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return message


def initialize(version: str = "2025-06-18", capabilities: object = None) -> dict[str, Any]:
    caps = {"elicitation": {}} if capabilities is None else capabilities
    return request(0, "initialize", {"protocolVersion": version, "capabilities": caps})


def stdio(**options: Any) -> Harness:
    """A harness with one subscribed connection, "s", that has not initialized yet."""
    h = Harness(tools=(ECHO,), **options)
    h.feed(SubscriberAttached("s"))
    return h


def test_R_PROTO_1_bad_bytes_get_the_codec_reply_and_change_nothing() -> None:
    h = stdio()
    before = h.state
    effects = send(h, "s", b"{not json")
    assert effects == [Reply("s", None, only_reply(effects))]
    assert only_reply(effects)["error"]["code"] == -32700
    assert only_reply(effects)["id"] is None
    assert h.state == before
    assert send(h, "s", b'{"jsonrpc":"2.0","method":5}') == []  # a bad notification: dropped
    assert only_reply(send(h, "s", b"[]"))["error"]["code"] == -32600


def test_R_PROTO_2_responses_are_elicitation_answers() -> None:
    h = stdio(has_authorizer=True)
    send(h, "s", initialize())
    send(h, "s", request(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    h.finish(h.worker(), Ask("ok?"))
    eid = pushes(h.effects)[0].message["id"]
    effects = send(h, "s", {"jsonrpc": "2.0", "id": eid, "result": {"action": "decline"}})
    assert deny_payload(only_reply(effects))["detail"] == "declined"
    assert send(h, "s", {"jsonrpc": "2.0", "id": eid, "result": {}}) == []  # late: ignored
    send(h, "s", request(2, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    h.finish(h.worker(), Ask("ok?"))
    eid = pushes(h.effects)[0].message["id"]
    effects = send(h, "s", {"jsonrpc": "2.0", "id": eid, "error": {"code": -1, "message": "no"}})
    assert deny_payload(only_reply(effects))["detail"] == "elicitation failed"


@pytest.mark.parametrize(
    ("asked", "answered"),
    [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2024-11-05", "2024-11-05"),
        ("2026-07-28", "2025-11-25"),
        ("1999-01-01", "2025-11-25"),
        (7, "2025-11-25"),
    ],
)
def test_R_PROTO_3_initialize_negotiates_the_version(asked: object, answered: str) -> None:
    h = stdio(server_name="demo", server_version="1.2", instructions="be nice")
    effects = send(h, "s", request(0, "initialize", {"protocolVersion": asked, "capabilities": {}}))
    assert only_reply(effects) == {
        "jsonrpc": "2.0",
        "id": 0,
        "result": {
            "protocolVersion": answered,
            "capabilities": {
                "tools": {"listChanged": True},
                "resources": {"subscribe": True, "listChanged": True},
                "prompts": {"listChanged": True},
                "logging": {},
                "completions": {},
            },
            "serverInfo": {"name": "demo", "version": "1.2"},
            "instructions": "be nice",
        },
    }


def test_R_PROTO_3_second_initialize_changes_nothing() -> None:
    h = stdio(has_authorizer=True)
    send(h, "s", initialize("2025-06-18"))
    effects = send(h, "s", initialize("2025-11-25", capabilities={}))
    assert only_reply(effects)["result"]["protocolVersion"] == "2025-06-18"
    assert h.state.conns["s"].can_elicit
    effects = send(h, "s", request(1, "initialize", {"capabilities": "nonsense"}))
    assert only_reply(effects)["result"]["protocolVersion"] == "2025-06-18"


def test_R_PROTO_3_an_initialize_after_eviction_makes_the_connection_askable_again() -> None:
    h = stdio(has_authorizer=True, max_client_capabilities=1)
    h.feed(SubscriberAttached("t"))
    send(h, "s", initialize("2025-06-18"))
    effects = send(h, "t", initialize("2025-06-18"))  # the cap is 1: "s" is evicted
    assert [e for e in effects if isinstance(e, Emit)]
    assert not h.state.conns["s"].can_elicit
    h.call("s", 1, arguments={"text": "t"})
    effects = h.finish(h.worker(), Ask("ok?"))
    assert deny_payload(only_reply(effects))["decision"] == "ask"  # the deny-on-ASK
    assert not pushes(effects)
    effects = send(h, "s", initialize("2025-11-25"))  # initializes again: recorded afresh
    assert only_reply(effects)["result"]["protocolVersion"] == "2025-06-18"
    assert h.state.conns["s"].can_elicit
    assert not h.state.conns["t"].can_elicit
    h.call("s", 2, arguments={"text": "t"})
    effects = h.finish(h.worker(), Ask("ok?"))
    assert [p.message["method"] for p in pushes(effects)] == ["elicitation/create"]


def test_R_PROTO_3_elicitation_mode_only_for_clients_that_know_it() -> None:
    for version, has_mode in (("2025-06-18", False), ("2025-11-25", True)):
        h = stdio(has_authorizer=True)
        send(h, "s", initialize(version))
        send(h, "s", request(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
        h.finish(h.worker(), Ask("ok?"))
        assert ("mode" in pushes(h.effects)[0].message["params"]) == has_mode


def test_R_PROTO_4_ping_answers_empty_object_any_time() -> None:
    h = stdio()
    assert only_reply(send(h, "s", request(1, "ping"))) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    send(h, "s", initialize())
    effects = send(h, "s", request("x", "ping", {"anything": True}))
    assert only_reply(effects)["result"] == {}


def test_R_PROTO_5_unknown_methods() -> None:
    h = stdio()
    effects = send(h, "s", request(1, "server/discover"))
    assert only_reply(effects)["error"] == {
        "code": -32601,
        "message": "Unknown method: server/discover",
    }
    assert send(h, "s", {"jsonrpc": "2.0", "method": "notifications/whatever"}) == []
    assert send(h, "s", {"jsonrpc": "2.0", "method": "notifications/initialized"}) == []


@pytest.mark.parametrize(
    "params",
    [None, {}, {"name": 5}, {"name": "echo", "arguments": []}, {"name": "echo", "arguments": "x"}],
)
def test_R_PROTO_6_tools_call_params_must_be_well_formed(params: object) -> None:
    h = stdio()
    effects = send(h, "s", request(1, "tools/call", params))
    assert only_reply(effects)["error"]["code"] == -32602
    assert not h.state.calls


@pytest.mark.parametrize("tool", [None, 5, ["echo"], {"name": "echo"}])
def test_R_PROTO_6_a_tool_call_event_naming_no_string_is_invalid_params(tool: object) -> None:
    h = stdio()
    effects = h.feed(ToolCallReceived("s", 1, tool, {}, 0))  # type: ignore[arg-type]
    assert only_reply(effects)["error"]["code"] == -32602
    assert not h.state.calls


def test_R_PROTO_6_arguments_are_validated_before_the_authorizer() -> None:
    h = stdio(has_authorizer=True)
    effects = send(h, "s", request(1, "tools/call", {"name": "echo", "arguments": {"text": 5}}))
    assert not [e for e in effects if isinstance(e, StartWorker)]
    result = only_reply(effects)["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"] == (
        'Invalid arguments for tool echo: text: 5 is not of type "string"'
    )
    effects = send(h, "s", request(2, "tools/call", {"name": "echo"}))  # arguments absent = {}
    assert '"text" is a required property' in only_reply(effects)["result"]["content"][0]["text"]
    effects = send(h, "s", request(3, "tools/call", {"name": "echo", "arguments": {"text": "t"}}))
    assert isinstance(effects[0], StartWorker)


def test_R_PROTO_6_a_tool_with_a_broken_schema_is_refused_at_registration() -> None:
    h = stdio()
    with pytest.raises(OptionError, match="not a valid JSON Schema"):
        h.feed(ToolRegistered("bad", definition={"name": "bad", "inputSchema": {"type": 5}}))


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("resources/read", {}),
        ("resources/read", {"uri": 5}),
        ("resources/subscribe", None),
        ("resources/unsubscribe", {"uri": []}),
        ("prompts/get", {}),
        ("prompts/get", {"name": "g", "arguments": [1]}),
        ("completion/complete", {"ref": "x"}),
        ("logging/setLevel", {"level": "loud"}),
        ("logging/setLevel", {}),
        ("logging/setLevel", {"level": []}),
        ("logging/setLevel", {"level": {"a": 1}}),
        ("logging/setLevel", {"level": 3}),
    ],
)
def test_R_PROTO_7_read_params_are_checked_before_the_gate(method: str, params: object) -> None:
    for read_authorizer in (True, False):
        h = stdio(has_read_authorizer=read_authorizer)
        for effects in (
            send(h, "s", request(1, method, params)),
            h.feed(ReadRequested("s", 2, method, params, 0)),
        ):
            assert only_reply(effects)["error"]["code"] == -32602
            assert not [e for e in effects if isinstance(e, StartWorker)]
        assert not h.state.calls
        assert only_reply(send(h, "s", request(3, "ping")))["result"] == {}  # still serving


@pytest.mark.parametrize("method", ["tools/call", "ping", "initialize", "nope", ["resources/read"]])
def test_R_PROTO_7_a_read_event_names_a_read_method(method: object) -> None:
    h = stdio(has_read_authorizer=True)
    effects = h.feed(ReadRequested("s", 1, method, {"uri": "u"}, 0))  # type: ignore[arg-type]
    assert only_reply(effects)["error"]["code"] == -32601
    assert not h.state.calls


def test_R_PROTO_7_reads_go_through_the_read_authorizer_then_are_answered() -> None:
    h = stdio(has_read_authorizer=True)
    h.feed(CatalogChanged("resource", "demo://status", {"uri": "demo://status", "name": "status"}))
    effects = send(h, "s", request(1, "resources/list"))
    assert effects[0] == StartWorker(1, "s", AuthorizeRead("resources/list", None))
    effects = h.finish(1, Allow())
    assert only_reply(effects)["result"] == {
        "resources": [{"uri": "demo://status", "name": "status"}]
    }
    send(h, "s", request(2, "resources/read", {"uri": "demo://status"}))
    effects = h.finish(h.worker(), Allow())
    job = next(e.job for e in effects if isinstance(e, StartWorker))
    assert job == RunRead("resources/read", {"uri": "demo://status"})
    effects = h.finish(h.worker(effects), {"contents": [{"uri": "demo://status", "text": "ok"}]})
    assert only_reply(effects)["result"]["contents"][0]["text"] == "ok"
    send(h, "s", request(3, "prompts/list"))
    effects = h.finish(h.worker(), Deny("no reads"))
    assert only_reply(effects)["error"]["code"] == -32090


def test_R_PROTO_8_tools_list_shows_only_what_the_caller_may_call() -> None:
    h = Harness(
        tools=(ECHO, ToolInfo("delete_file", True, False), ToolInfo("forbidden", False, False)),
        has_authorizer=True,
    )
    effects = send(h, "s", request(1, "tools/list"))
    assert effects[0] == StartWorker(1, "s", FilterTools(("delete_file", "echo", "forbidden")))
    effects = h.finish(1, ["echo", "delete_file", "not-a-tool", 7])
    listed = only_reply(effects)["result"]["tools"]
    assert [t["name"] for t in listed] == ["delete_file", "echo"]
    assert listed[1] == ECHO.definition
    h2 = Harness(tools=(ECHO,))
    effects = send(h2, "s", request(1, "tools/list"))
    assert [t["name"] for t in only_reply(effects)["result"]["tools"]] == ["echo"]
    send(h, "s", request(2, "tools/list"))
    effects = h.finish(h.worker(), "not a list")
    assert only_reply(effects)["error"]["data"]["error"] == "callback_failed"


def test_R_PROTO_9_lists_paginate_with_opaque_cursors() -> None:
    h = stdio(page_size=2)
    for name in ("c", "a", "e", "b", "d"):
        h.feed(CatalogChanged("prompt", name, {"name": name}))
    names: list[str] = []
    cursor = None
    for _ in range(5):
        params = {"cursor": cursor} if cursor else None
        result = only_reply(send(h, "s", request(1, "prompts/list", params)))["result"]
        names += [p["name"] for p in result["prompts"]]
        cursor = result.get("nextCursor")
        if cursor is None:
            break
    assert names == ["a", "b", "c", "d", "e"]
    for bad in ("garbage", encode_cursor(99), 5, "x" * 100):
        effects = send(h, "s", request(2, "prompts/list", {"cursor": bad}))
        assert only_reply(effects)["error"] == {"code": -32602, "message": "Invalid cursor"}


def test_R_PROTO_10_updates_go_only_to_subscribers_of_that_uri() -> None:
    h = stdio()
    h.feed(SubscriberAttached("t"))
    send(h, "s", request(1, "resources/subscribe", {"uri": "demo://a"}))
    send(h, "t", request(1, "resources/subscribe", {"uri": "demo://b"}))
    effects = h.feed(ResourceUpdated("demo://a"))
    assert effects == [
        Push(
            "s",
            {
                "jsonrpc": "2.0",
                "method": "notifications/resources/updated",
                "params": {"uri": "demo://a"},
            },
        )
    ]
    assert only_reply(send(h, "s", request(2, "resources/unsubscribe", {"uri": "demo://a"})))
    assert h.feed(ResourceUpdated("demo://a")) == []
    h.feed(SubscriberDetached("t"))
    assert h.feed(ResourceUpdated("demo://b")) == []
    assert not h.state.resource_subscribers
    # a connection with nothing to keep it keeps no subscription either
    send(h, "ghost", request(1, "resources/subscribe", {"uri": "demo://a"}))
    assert not h.state.resource_subscribers


def test_R_PROTO_11_log_messages_filtered_by_level() -> None:
    h = stdio()
    h.feed(SubscriberAttached("t"))
    h.feed(SubscriberAttached("u"))
    send(h, "s", request(1, "logging/setLevel", {"level": "warning"}))
    send(h, "t", request(1, "logging/setLevel", {"level": "debug"}))
    effects = h.feed(LogEmitted("info", {"x": 1}, logger="demo"))
    assert [p.conn for p in pushes(effects)] == ["t"]
    assert pushes(effects)[0].message == {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": "info", "data": {"x": 1}, "logger": "demo"},
    }
    assert sorted(str(p.conn) for p in pushes(h.feed(LogEmitted("error", "e")))) == ["s", "t"]
    assert [p.conn for p in pushes(h.feed(LogEmitted("error", "e", conn="s")))] == ["s"]
    assert h.feed(LogEmitted("error", "e", conn="u")) == []
    with pytest.raises(TypeError):
        h.feed(LogEmitted("loud", "e"))


def test_R_PROTO_12_registrations_announce_list_changed_to_initialized_subscribers() -> None:
    h = stdio()
    h.feed(SubscriberAttached("t"))  # subscribed but never initialized
    send(h, "s", initialize())
    effects = h.feed(ToolRegistered("late"))
    assert effects == [Push("s", {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})]
    assert [p.message["method"] for p in pushes(h.feed(ToolUnregistered("late")))] == [
        "notifications/tools/list_changed"
    ]
    assert h.feed(ToolUnregistered("late")) == []
    effects = h.feed(CatalogChanged("template", "demo://{x}", {"uriTemplate": "demo://{x}"}))
    assert pushes(effects)[0].message["method"] == "notifications/resources/list_changed"
    effects = h.feed(CatalogChanged("prompt", "g", {"name": "g"}))
    assert pushes(effects)[0].message["method"] == "notifications/prompts/list_changed"
    assert h.feed(CatalogChanged("prompt", "nope", None)) == []


def test_R_PROTO_13_cancelled_notification_drops_the_named_request() -> None:
    h = stdio(has_authorizer=True)
    h.feed(SubscriberAttached("t"))
    send(h, "s", initialize())
    send(h, "s", request(0, "tools/call", {"name": "echo", "arguments": {"text": "x"}}))
    send(h, "t", request(0, "tools/call", {"name": "echo", "arguments": {"text": "x"}}))
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 0}}
    effects = send(h, "s", cancel)
    assert Reply("s", 0, None) in effects
    assert ("t", 0) in h.state.calls  # the other connection's id 0 is untouched
    for params in ({"requestId": True}, {"requestId": None}, {}, None):
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
        if params is not None:
            message["params"] = params
        assert send(h, "t", message) == []


def test_R_PROTO_14_a_failure_value_is_a_json_rpc_error() -> None:
    h = stdio()
    send(h, "s", request(1, "resources/read", {"uri": "demo://missing"}))
    effects = h.finish(h.worker(), Failure(-32002, "Resource not found", {"uri": "demo://missing"}))
    assert only_reply(effects)["error"] == {
        "code": -32002,
        "message": "Resource not found",
        "data": {"uri": "demo://missing"},
    }


def test_dispatch_duplicate_id_of_any_method_is_refused() -> None:
    h = stdio()
    send(h, "s", request(1, "resources/read", {"uri": "u"}))
    ref = h.worker()
    effects = send(h, "s", request(1, "ping"))
    assert only_reply(effects)["error"]["code"] == -32600
    effects = h.finish(ref, {"contents": []})
    assert replies(effects)[0].request_id == 1


def test_dispatch_tools_call_runs_the_tool_end_to_end() -> None:
    h = stdio()
    send(h, "s", initialize())
    effects = send(h, "s", request(4, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    assert effects[0] == StartWorker(1, "s", RunTool("echo", {"text": "hi"}))
    effects = h.finish(1, {"content": [{"type": "text", "text": "hi"}]})
    assert only_reply(effects) == {
        "jsonrpc": "2.0",
        "id": 4,
        "result": {"content": [{"type": "text", "text": "hi"}]},
    }
