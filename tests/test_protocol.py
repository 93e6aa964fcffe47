"""Examples for spec/protocol.md: MCP messages in as bytes, dispatched by the reducer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from askgate.core import (
    Allow,
    Ask,
    AuthorizeRead,
    CancelTimer,
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
    Raised,
    ReadRequested,
    Reply,
    ResourceUpdated,
    RunRead,
    RunTool,
    StartTimer,
    StartWorker,
    SubscriberAttached,
    SubscriberDetached,
    ToolCallReceived,
    ToolInfo,
    ToolRegistered,
    ToolUnregistered,
    protocol,
)
from askgate.core.protocol import encode_cursor
from askgate.core.tools import tool_info
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


def handshake(h: Harness, conn: str = "s", version: str = "2025-06-18") -> None:
    """``initialize``, then ``notifications/initialized`` (R-PARK-8: prompts are sent after)."""
    send(h, conn, initialize(version))
    send(h, conn, {"jsonrpc": "2.0", "method": "notifications/initialized"})


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
    handshake(h, "s")
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
    capabilities: dict[str, Any] = {
        "tools": {"listChanged": True},
        "resources": {"subscribe": True, "listChanged": True},
        "prompts": {"listChanged": True},
        "logging": {},
        "completions": {},
    }
    if answered == "2025-11-25":  # R-TASK-12: the revision with tasks declares them
        capabilities["tasks"] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    assert only_reply(effects) == {
        "jsonrpc": "2.0",
        "id": 0,
        "result": {
            "protocolVersion": answered,
            "capabilities": capabilities,
            "serverInfo": {"name": "demo", "version": "1.2"},
            "instructions": "be nice",
        },
    }


def test_R_PROTO_23_second_initialize_is_refused_and_changes_nothing() -> None:
    h = stdio(has_authorizer=True)
    handshake(h, "s", "2025-06-18")
    before = h.state
    effects = send(h, "s", request(1, "initialize", {"protocolVersion": "2025-11-25"}))
    assert only_reply(effects)["error"] == {
        "code": -32600,
        "message": "Invalid Request: the session is already initialized",
    }
    effects = send(h, "s", request(2, "initialize", {"capabilities": "nonsense"}))
    assert only_reply(effects)["error"]["code"] == -32600
    assert h.state == before
    assert h.state.conns["s"].can_elicit
    assert h.state.conns["s"].version == "2025-06-18"


def test_R_PROTO_23_an_evicted_connection_stays_unaskable() -> None:
    h = stdio(has_authorizer=True, max_client_capabilities=1)
    h.feed(SubscriberAttached("t"))
    handshake(h, "s", "2025-06-18")
    effects = send(h, "t", initialize("2025-06-18"))  # the cap is 1: "s" is evicted
    assert [e for e in effects if isinstance(e, Emit)]
    assert not h.state.conns["s"].can_elicit
    effects = send(h, "s", initialize("2025-11-25"))  # refused: nothing recorded afresh
    assert only_reply(effects)["error"]["code"] == -32600
    assert not h.state.conns["s"].can_elicit
    h.call("s", 2, arguments={"text": "t"})
    effects = h.finish(h.worker(), Ask("ok?"))
    assert deny_payload(only_reply(effects))["decision"] == "ask"  # the deny-on-ASK
    assert not pushes(effects)


def test_R_PROTO_3_elicitation_mode_only_for_clients_that_know_it() -> None:
    for version, has_mode in (("2025-06-18", False), ("2025-11-25", True)):
        h = stdio(has_authorizer=True)
        handshake(h, "s", version)
        send(h, "s", request(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
        h.finish(h.worker(), Ask("ok?"))
        assert ("mode" in pushes(h.effects)[0].message["params"]) == has_mode


def test_R_PROTO_4_ping_answers_empty_object_any_time() -> None:
    h = stdio()
    assert only_reply(send(h, "s", request(1, "ping"))) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    handshake(h, "s")
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


THREE_TOOLS = (ECHO, ToolInfo("delete_file", True, False), ToolInfo("forbidden", False, False))


def test_R_PROTO_8_without_a_visibility_hook_every_tool_is_listed_and_nothing_is_asked() -> None:
    h = Harness(tools=THREE_TOOLS, has_authorizer=True)
    effects = send(h, "s", request(1, "tools/list"))
    assert not [e for e in effects if isinstance(e, StartWorker)]  # the authorizer: not asked
    listed = only_reply(effects)["result"]["tools"]
    assert [t["name"] for t in listed] == ["delete_file", "echo", "forbidden"]
    assert listed[1] == ECHO.definition


def test_R_PROTO_8_the_visibility_hook_lists_exactly_the_tools_it_said_true_of() -> None:
    h = Harness(tools=THREE_TOOLS, has_authorizer=True, has_visibility=True)
    effects = send(h, "s", request(1, "tools/list"))
    assert effects[0] == StartWorker(1, "s", FilterTools(("delete_file", "echo", "forbidden")))
    verdicts = {"delete_file": True, "echo": 1, "forbidden": False, "not-a-tool": True}
    effects = h.finish(1, verdicts)
    listed = only_reply(effects)["result"]["tools"]
    assert [t["name"] for t in listed] == ["delete_file"]  # 1 is not True; unknown names: no
    assert listed[0] == protocol.tool_entry("delete_file", None)
    hidden = [e for e in effects if isinstance(e, Emit)]
    reason = "the visibility hook returned int, not a bool"
    assert hidden == [Emit("tool_hidden", {"tool": "echo", "reason": reason})]
    assert effects.index(hidden[0]) < effects.index(
        next(e for e in effects if isinstance(e, Reply))
    )
    send(h, "s", request(2, "tools/list"))
    effects = h.finish(h.worker(), ["echo", "delete_file"])  # not a dict: the read failed
    assert only_reply(effects)["error"]["data"]["error"] == "callback_failed"
    assert not [e for e in effects if isinstance(e, Emit)]


def test_R_PROTO_8_a_hook_that_raised_hides_the_tool_and_is_reported_in_name_order() -> None:
    h = Harness(tools=THREE_TOOLS, has_authorizer=True, has_visibility=True)
    send(h, "s", request(1, "tools/list"))
    h.feed(ToolRegistered("late", sensitive=False))  # registered while the hook ran
    verdicts = {"forbidden": Raised("KeyError"), "echo": True, "delete_file": Raised("x" * 100)}
    effects = h.finish(1, verdicts)
    assert [t["name"] for t in only_reply(effects)["result"]["tools"]] == ["echo"]
    assert [e for e in effects if isinstance(e, Emit)] == [
        Emit(
            "tool_hidden",
            {"tool": "delete_file", "reason": "the visibility hook raised " + "x" * 64 + "…"},
        ),
        Emit("tool_hidden", {"tool": "forbidden", "reason": "the visibility hook raised KeyError"}),
    ]


def test_R_PROTO_8_the_list_is_paginated_after_the_hook_and_with_no_tools_nothing_runs() -> None:
    h = Harness(tools=THREE_TOOLS, has_authorizer=True, has_visibility=True, page_size=1)
    send(h, "s", request(1, "tools/list", {"cursor": encode_cursor(1)}))
    effects = h.finish(1, {"delete_file": True, "echo": False, "forbidden": True})
    result = only_reply(effects)["result"]
    assert [t["name"] for t in result["tools"]] == ["forbidden"]
    assert "nextCursor" not in result
    empty = Harness(tools=(), has_visibility=True)
    effects = send(empty, "s", request(1, "tools/list"))
    assert only_reply(effects)["result"] == {"tools": []}


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
    handshake(h, "s")
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
    handshake(h, "s")
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
    handshake(h, "s")
    effects = send(h, "s", request(4, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    assert effects[0] == StartWorker(1, "s", RunTool("echo", {"text": "hi"}))
    effects = h.finish(1, {"content": [{"type": "text", "text": "hi"}]})
    assert only_reply(effects) == {
        "jsonrpc": "2.0",
        "id": 4,
        "result": {"content": [{"type": "text", "text": "hi"}]},
    }


# -- results and what a read may name (R-PROTO-16 .. R-PROTO-21) -------------------------------


def test_R_PROTO_16_a_tool_value_becomes_a_call_tool_result() -> None:
    assert protocol.tool_result("hi") == {"content": [{"type": "text", "text": "hi"}]}
    assert protocol.text_result("hi") == protocol.tool_result("hi")
    assert protocol.tool_result({"a": 1, "é": [1, 2]}) == {
        "content": [{"type": "text", "text": '{"a":1,"é":[1,2]}'}],
        "structuredContent": {"a": 1, "é": [1, 2]},
    }
    passthrough = {"content": [{"type": "text", "text": "x"}], "isError": True}
    assert protocol.tool_result(passthrough) is passthrough
    blocks = [{"type": "image", "data": "AA==", "mimeType": "image/png"}]
    assert protocol.tool_result(blocks) == {"content": blocks}
    assert protocol.tool_result(None) == {"content": []}
    assert protocol.tool_result(3) == {"content": [{"type": "text", "text": "3"}]}
    assert protocol.tool_result(True) == {"content": [{"type": "text", "text": "true"}]}
    assert protocol.tool_result([1, "é"]) == {"content": [{"type": "text", "text": '[1, "é"]'}]}
    assert protocol.tool_result((1, 2)) == {"content": [{"type": "text", "text": "[1, 2]"}]}
    assert protocol.tool_result([]) == {"content": [{"type": "text", "text": "[]"}]}
    not_blocks = [{"type": 1}]
    assert protocol.tool_result(not_blocks) == {
        "content": [{"type": "text", "text": '[{"type": 1}]'}]
    }
    for value in (object(), b"bytes", {1, 2}):
        with pytest.raises(TypeError, match="not a tool result"):
            protocol.tool_result(value)


OUTPUT_ERROR = "Output validation error: "
NO_STRUCTURED = "the tool has an output schema but returned no structured content"
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
COUNTER = tool_info("count", False, False, {"name": "count", "outputSchema": SCHEMA})


def _tool_answer(h: Harness, rid: int, tool: str, value: object) -> dict[str, Any]:
    arguments = {"text": "t"} if tool == "echo" else {}
    send(h, "s", request(rid, "tools/call", {"name": tool, "arguments": arguments}))
    return only_reply(h.finish(h.worker(), value))


def test_R_PROTO_17_structured_output_is_checked_against_the_output_schema() -> None:
    h = Harness(tools=(ECHO, COUNTER))
    h.feed(SubscriberAttached("s"))
    good = {"content": [], "structuredContent": {"n": 1}}
    assert _tool_answer(h, 1, "count", good)["result"] is good
    assert _tool_answer(h, 2, "count", {"content": [], "structuredContent": {"n": "one"}}) == {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {
            "isError": True,
            "content": [{"type": "text", "text": OUTPUT_ERROR + '"one" is not of type "integer"'}],
        },
    }
    unstructured: tuple[dict[str, Any], ...] = (
        {"content": []},
        {"content": [], "structuredContent": [1]},
    )
    for rid, value in enumerate(unstructured, 3):
        text = _tool_answer(h, rid, "count", value)["result"]["content"][0]["text"]
        assert text == OUTPUT_ERROR + NO_STRUCTURED
    error = {"isError": True, "content": [{"type": "text", "text": "it broke"}]}
    assert _tool_answer(h, 5, "count", error)["result"] is error  # an error need not match
    free = {"content": [], "structuredContent": {"n": "one"}}
    assert _tool_answer(h, 6, "echo", free)["result"] is free  # no output schema: no check
    long = {"content": [], "structuredContent": {"n": "x" * 600}}
    problem = _tool_answer(h, 7, "count", long)["result"]["content"][0]["text"]
    assert problem == OUTPUT_ERROR + f'"{"x" * 600}" is not of type "integer"'[:500]


def test_R_PROTO_17_a_broken_output_schema_is_refused_at_registration() -> None:
    h = stdio()
    broken = {"name": "bad", "outputSchema": {"type": 5}, "inputSchema": {"type": 5}}
    with pytest.raises(OptionError, match=r"outputSchema.*not a valid JSON Schema"):
        h.feed(ToolRegistered("bad", definition=broken))
    h.feed(ToolRegistered("later", definition={"name": "later", "outputSchema": SCHEMA}))
    assert h.state.tools["later"].output_validator is not None


def _catalog(**options: Any) -> Harness:
    h = stdio(catalog_complete=True, **options)
    h.feed(CatalogChanged("resource", "demo://status", {"uri": "demo://status", "name": "s"}))
    h.feed(CatalogChanged("template", "demo://items/{id}", {"uriTemplate": "demo://items/{id}"}))
    h.feed(CatalogChanged("template", "x{a}-{b}y", {"uriTemplate": "x{a}-{b}y"}))
    definition = {
        "name": "greet",
        "arguments": [
            {"name": "name", "required": True},
            {"name": "tone", "required": False},
            {"name": "mood", "required": True},
        ],
    }
    h.feed(CatalogChanged("prompt", "greet", definition))
    return h


def test_R_PROTO_18_a_uri_nothing_registered_serves_is_answered_without_a_worker() -> None:
    h = _catalog()
    for uri in ("demo://status", "demo://items/7", "demo://items/a%20b", "x1-2y"):
        effects = send(h, "s", request(1, "resources/read", {"uri": uri}))
        assert [type(e) for e in effects] == [StartWorker, StartTimer]
        assert effects[0] == StartWorker(h.worker(), "s", RunRead("resources/read", {"uri": uri}))
        h.finish(h.worker(), {"contents": []})
    for uri in (
        "demo://nothing",
        "demo://items/",
        "demo://items/a/b",
        "demo://items/a?b",
        "x1-2yz",
    ):
        effects = send(h, "s", request(2, "resources/read", {"uri": uri}))
        assert effects == [
            Reply(
                "s",
                2,
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "error": {
                        "code": -32002,
                        "message": "Resource not found",
                        "data": {"uri": uri},
                    },
                },
            )
        ]
    long = "demo://" + "z" * 300
    effects = send(h, "s", request(3, "resources/read", {"uri": long}))
    assert only_reply(effects)["error"]["data"] == {"uri": long[:200] + "…"}
    assert not h.state.calls


def test_R_PROTO_18_the_read_authorizer_decides_first() -> None:
    h = _catalog(has_read_authorizer=True)
    effects = send(h, "s", request(1, "resources/read", {"uri": "demo://nothing"}))
    assert effects[0] == StartWorker(
        1, "s", AuthorizeRead("resources/read", {"uri": "demo://nothing"})
    )
    effects = h.finish(1, Allow())
    assert [type(e) for e in effects] == [CancelTimer, Reply]
    assert only_reply(effects)["error"]["code"] == -32002
    send(h, "s", request(2, "resources/read", {"uri": "demo://nothing"}))
    assert only_reply(h.finish(h.worker(), Deny("no")))["error"]["code"] == -32090


def test_R_PROTO_18_without_a_complete_catalog_a_worker_answers() -> None:
    h = stdio()
    effects = send(h, "s", request(1, "resources/read", {"uri": "demo://nothing"}))
    assert effects[0] == StartWorker(1, "s", RunRead("resources/read", {"uri": "demo://nothing"}))


def test_R_PROTO_18_template_variables_are_whole_segments_percent_decoded() -> None:
    assert protocol.template_variables("demo://items/{id}", "demo://items/a%20b") == {"id": "a b"}
    assert protocol.template_variables("demo://items/{id}", "demo://items/a/b") is None
    assert protocol.template_variables("demo://items/{id}", "demo://items/a#b") is None
    assert protocol.template_variables("demo://items/{id}", "demo://items/") is None
    assert protocol.template_variables("a.b/{x}", "aXb/1") is None  # the rest is literal
    assert protocol.template_variables("{x}/{y}", "1/2") == {"x": "1", "y": "2"}
    assert protocol.template_variables("demo://{+path}", "demo://{+path}") == {}
    assert protocol.resource_known("u", {"u": {}}, ())
    assert not protocol.resource_known("v", {"u": {}}, ("w{x}",))
    assert protocol.resource_known("wat", {"u": {}}, ("w{x}",))


def _prompt_error(h: Harness, rid: int, params: dict[str, Any]) -> object:
    effects = send(h, "s", request(rid, "prompts/get", params))
    starts = [e for e in effects if isinstance(e, StartWorker)]
    if starts:
        h.finish(starts[0].ref, {"messages": []})
        return None
    error = only_reply(effects)["error"]
    assert error["code"] == -32602
    return error["message"]


def test_R_PROTO_19_prompts_get_names_a_registered_prompt_and_its_required_arguments() -> None:
    h = _catalog()
    assert _prompt_error(h, 1, {"name": "nope"}) == "Unknown prompt: nope"
    assert _prompt_error(h, 2, {"name": "n" * 100}) == f"Unknown prompt: {'n' * 64}…"
    assert _prompt_error(h, 3, {"name": "greet"}) == "Missing required argument: name"
    both = {"name": "greet", "arguments": {"name": "Ada"}}
    assert _prompt_error(h, 4, both) == "Missing required argument: mood"
    given = {"name": "greet", "arguments": {"name": "Ada", "mood": "ok"}}
    assert _prompt_error(h, 5, given) is None
    extra = {"name": "greet", "arguments": {"name": "Ada", "mood": "ok", "zz": 1}}
    assert _prompt_error(h, 6, extra) is None  # only the shell knows whether it takes any
    assert not h.state.calls


def test_R_PROTO_19_prompt_problem_decides_every_case() -> None:
    definition = {"name": "p", "arguments": [{"name": "a", "required": True}, {"name": "b"}]}
    problem = protocol.prompt_problem
    assert problem(None, "p", {}, any_argument=True) == "Unknown prompt: p"
    assert problem(definition, "p", {}, any_argument=True) == "Missing required argument: a"
    assert problem(definition, "p", None, any_argument=False) == "Missing required argument: a"
    assert problem(definition, "p", {"a": 1, "b": 2}, any_argument=False) is None
    extra = {"a": 1, "zeta": 2, "beta": 3}
    assert problem(definition, "p", extra, any_argument=False) == "Unknown argument: beta"
    assert problem(definition, "p", extra, any_argument=True) is None
    long = {"a": 1, "q" * 70: 0}
    assert problem(definition, "p", long, any_argument=False) == f"Unknown argument: {'q' * 64}…"
    odd = {"name": "p", "arguments": [5, {"name": 7, "required": True}, {"required": True}]}
    assert problem(odd, "p", {}, any_argument=True) is None
    assert problem({"name": "p", "arguments": "x"}, "p", {"k": 1}, any_argument=False) == (
        "Unknown argument: k"
    )


def test_R_PROTO_20_resource_and_prompt_values_become_read_results() -> None:
    result = protocol.resource_result
    assert result("u", None, "hi") == {
        "contents": [{"uri": "u", "text": "hi", "mimeType": "text/plain"}]
    }
    assert result("u", "text/markdown", "# hi")["contents"][0]["mimeType"] == "text/markdown"
    assert result("u", None, b"\x89PNG") == {
        "contents": [{"uri": "u", "blob": "iVBORw==", "mimeType": "application/octet-stream"}]
    }
    assert result("u", None, bytearray(b"a"))["contents"][0]["blob"] == "YQ=="
    assert result("u", None, {"k": "é"}) == {
        "contents": [{"uri": "u", "text": '{"k":"é"}', "mimeType": "application/json"}]
    }
    own = {"contents": [{"uri": "v", "text": "x"}]}
    assert result("u", None, own) is own
    assert result("u", None, [{"uri": "v"}]) == {"contents": [{"uri": "v"}]}
    assert result("u", None, []) == {"contents": []}
    for value in (None, 3, ["a"]):
        with pytest.raises(TypeError, match="not contents"):
            result("u", None, value)
    prompt = protocol.prompt_result
    text = {"type": "text", "text": "hi"}
    assert prompt("hi", None) == {"messages": [{"role": "user", "content": text}]}
    assert prompt("hi", "Greets.") == {
        "description": "Greets.",
        "messages": [{"role": "user", "content": text}],
    }
    assistant = {"role": "assistant", "content": text}
    assert prompt(["hi", assistant], "") == {
        "messages": [{"role": "user", "content": text}, assistant]
    }
    own_messages = {"description": "mine", "messages": []}
    assert prompt(own_messages, "Greets.") is own_messages
    assert prompt({"messages": []}, "Greets.") == {"description": "Greets.", "messages": []}
    for odd in (None, 3, {"text": "x"}):
        with pytest.raises(TypeError, match="not messages"):
            prompt(odd, None)


def test_R_PROTO_21_completions_list_at_most_100_values() -> None:
    assert protocol.no_completion() == {"completion": {"values": [], "hasMore": False}}
    assert protocol.completion_result(["a", 1]) == {
        "completion": {"values": ["a", "1"], "total": 2, "hasMore": False}
    }
    many = protocol.completion_result(tuple(range(101)))["completion"]
    assert many["values"] == [str(n) for n in range(100)]
    assert (many["total"], many["hasMore"]) == (101, True)
    exactly = protocol.completion_result(list(range(100)))["completion"]
    assert (len(exactly["values"]), exactly["total"], exactly["hasMore"]) == (100, 100, False)
    own = {"completion": {"values": ["x"] * 200}}
    assert protocol.completion_result(own) is own
    odd: object
    for odd in (None, "abc", {"values": []}):
        with pytest.raises(TypeError, match="not a list of values"):
            protocol.completion_result(odd)
