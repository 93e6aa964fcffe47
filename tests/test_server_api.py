"""The Python API (askgate.Server) and the runtime, in process, on asyncio and trio.

The server runs on the test's own event loop: a connection is a writer that collects what the
runtime writes, and requests are fed to the runtime as ``MessageReceived`` bytes, or through the
stdio transport over in-memory streams. Every wait is on a message or an event, under a deadline.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

import anyio
import anyio.abc
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from askgate import (
    Allow,
    Ask,
    ClientRequestError,
    Context,
    Deny,
    Server,
    completes_without_suspending,
)
from askgate.__main__ import _OPTION_FLAGS, main
from askgate.core import OptionError, RunRead, StartWorker, SubscriberAttached, live_timers, step
from askgate.core.events import MessageReceived
from askgate.policy import NO_READS_REASON, parse_policy
from askgate.server import derive_input_schema
from askgate.transports.runtime import Runtime, now_ms
from askgate.transports.stdio import LineSplitter, serve_stdio

from .harness import without_digest
from .stdio_peer import deny_payload, policy_denies

pytestmark = pytest.mark.anyio

DEADLINE = 10.0
ELICIT: dict[str, Any] = {"elicitation": {}}
APPROVE: dict[str, Any] = {"action": "accept", "content": {"approve": True}}


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


# -- an in-process connection ---------------------------------------------------------------------


class Conn:
    """One connection to a running runtime: feeds requests, collects what is written to it."""

    def __init__(self, runtime: Runtime, conn_id: str) -> None:
        self.runtime = runtime
        self.conn_id = conn_id
        self.messages: list[dict[str, Any]] = []
        self._arrived = anyio.Event()
        runtime.attach(conn_id, self._write)
        runtime.feed(SubscriberAttached(conn_id, now_ms()))

    def _write(self, data: bytes) -> None:
        message = json.loads(data)
        assert isinstance(message, dict)
        self.messages.append(message)
        self._arrived.set()

    def send(self, message: dict[str, Any]) -> None:
        self.runtime.feed(MessageReceived(self.conn_id, json.dumps(message).encode(), now_ms()))

    def request(self, request_id: object, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def call(self, request_id: object, tool: str, **arguments: Any) -> None:
        self.request(request_id, "tools/call", {"name": tool, "arguments": arguments})

    def initialize(self, capabilities: dict[str, Any] | None = None) -> None:
        self.request(
            "init",
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": capabilities or {}},
        )

    async def wait_for(self, accept: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        with anyio.fail_after(DEADLINE):
            for _ in range(10_000):
                for message in self.messages:
                    if accept(message):
                        self.messages.remove(message)
                        return message
                self._arrived = anyio.Event()
                await self._arrived.wait()
        raise AssertionError("no such message")

    async def reply(self, request_id: object) -> dict[str, Any]:
        return await self.wait_for(lambda m: m.get("id") == request_id and "method" not in m)

    async def elicitation(self) -> dict[str, Any]:
        return await self.wait_for(lambda m: m.get("method") == "elicitation/create")

    async def result(self, request_id: object) -> Any:
        reply = await self.reply(request_id)
        assert "result" in reply, reply
        return reply["result"]


@asynccontextmanager
async def connected(
    server: Server, capabilities: dict[str, Any] | None = None
) -> AsyncIterator[Conn]:
    async with server.running("stdio") as runtime:
        conn = Conn(runtime, "c1")
        conn.initialize(capabilities)
        await conn.reply("init")
        conn.send({"jsonrpc": "2.0", "method": "notifications/initialized"})  # R-PARK-8
        yield conn


def text_of(result: dict[str, Any]) -> str:
    text = result["content"][0]["text"]
    assert isinstance(text, str)
    return text


# -- input schemas ------------------------------------------------------------------------------


def test_input_schemas_are_derived_from_type_hints() -> None:
    def tool(
        name: str,
        count: int,
        ratio: float,
        flag: bool,
        tags: list[str],
        extra: dict[str, int],
        maybe: str | None,
        mode: Literal["fast", "slow"],
        note: Annotated[str, "what to say"],
        anything: Any,
        context: Context,
        limit: int = 10,
        label: str | None = None,
    ) -> None:
        """Does a thing."""

    schema, context_param = derive_input_schema(tool, "tool")
    assert context_param == "context"
    assert schema == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "extra": {"type": "object", "additionalProperties": {"type": "integer"}},
            "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "mode": {"enum": ["fast", "slow"], "type": "string"},
            "note": {"type": "string", "description": "what to say"},
            "anything": {},
            "limit": {"type": "integer", "default": 10},
            "label": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        },
        "required": [
            *("name", "count", "ratio", "flag", "tags", "extra", "maybe", "mode", "note"),
            "anything",
        ],
        "additionalProperties": False,
    }


def test_a_parameter_without_a_schema_refuses_registration() -> None:
    server = Server("s")

    def tool(when: complex) -> None: ...

    with pytest.raises(TypeError, match="parameter when"):
        server.tool()(tool)


def test_a_tools_definition_has_its_description_annotations_and_schemas() -> None:
    server = Server("s", authorizer=lambda *_: Allow())

    @server.tool(
        name="remove",
        description="Removes.",
        annotations={"destructiveHint": True},
        input_schema={"type": "object", "properties": {"p": {"type": "string"}}},
        output_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
    )
    def anything(p: str) -> dict[str, bool]:
        return {"ok": bool(p)}

    state = server.initial_state()
    info = state.tools["remove"]
    assert info.sensitive
    assert info.definition == {
        "name": "remove",
        "description": "Removes.",
        "inputSchema": {"type": "object", "properties": {"p": {"type": "string"}}},
        "annotations": {"destructiveHint": True},
        "outputSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
    }


# -- starting -----------------------------------------------------------------------------------


def test_a_sensitive_tool_without_an_authorizer_refuses_to_start() -> None:
    server = Server("s")

    @server.tool(annotations={"destructiveHint": True})
    def wipe() -> str:
        return "gone"

    @server.tool(annotations={"sensitive": True})
    def leak() -> str:
        return "secret"

    @server.tool(annotations={"destructiveHint": True}, derived=True)
    def widget() -> str:
        return "derived tools are checked at call time"

    with pytest.raises(OptionError, match="leak, wipe"):
        server.initial_state("stdio")


def test_an_explicit_authorizer_lets_a_sensitive_tool_start() -> None:
    server = Server("s", authorizer=lambda *_: Allow())

    @server.tool(annotations={"destructiveHint": True})
    def wipe() -> str:
        return "gone"

    assert "wipe" in server.initial_state("stdio").tools


def test_bad_option_values_refuse_at_construction() -> None:
    with pytest.raises(OptionError, match="max_in_flight_per_connection"):
        Server("s", max_in_flight=4, max_in_flight_per_connection=8)
    with pytest.raises(OptionError, match="elicitation_timeout_ms"):
        Server("s", elicitation_timeout_ms=0)
    with pytest.raises(TypeError, match="has_authorizer"):
        Server("s", has_authorizer=True)


def test_authorization_configured_needs_a_chosen_authorizer() -> None:
    def allow_all(_tool: str, _arguments: object, _context: Context) -> Allow:
        return Allow()

    assert not Server("s").authorization_configured()
    assert not Server("s", authorizer=allow_all).authorization_configured()  # default source
    chosen = Server("s", authorizer=allow_all, authorizer_source="configured")
    assert chosen.authorization_configured()
    assert not chosen.read_authorization_configured()
    assert Server("s", read_authorizer=allow_all).read_authorization_configured()


# -- tool results ------------------------------------------------------------------------------


async def test_structured_output_is_checked_against_the_output_schema() -> None:
    server = Server("s")
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

    @server.tool(output_schema=schema)
    async def good() -> dict[str, int]:
        return {"n": 1}

    @server.tool(output_schema=schema)
    async def bad() -> dict[str, str]:
        return {"n": "one"}

    @server.tool(output_schema=schema)
    async def unstructured() -> str:
        return "n = 1"

    async with connected(server) as conn:
        conn.call(1, "good")
        assert (await conn.result(1))["structuredContent"] == {"n": 1}
        conn.call(2, "bad")
        failed = await conn.result(2)
        assert failed["isError"] is True
        assert text_of(failed).startswith("Output validation error:")
        conn.call(3, "unstructured")
        assert "no structured content" in text_of(await conn.result(3))


async def test_R_PROTO_17_an_output_json_cannot_carry_answers_the_schemas_error() -> None:
    server = Server("s")
    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}

    @server.tool(output_schema=schema)
    async def nan() -> dict[str, float]:
        return {"x": float("nan")}

    async with connected(server) as conn:
        conn.call(1, "nan")
        failed = await conn.result(1)
        assert failed["isError"] is True
        assert text_of(failed).startswith("Output validation error:")


def test_R_PROTO_18_a_servers_initial_state_knows_its_catalog() -> None:
    """An embedder stepping ``Server.initial_state()`` itself finds every registration there."""
    server = Server("s")

    @server.resource("mem://here")
    async def here() -> str:
        return "here"

    state = server.initial_state()
    state, _ = step(state, SubscriberAttached("c"))
    read = b'{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"mem://here"}}'
    state, effects = step(state, MessageReceived("c", read, 0))
    assert [type(e.job) for e in effects if isinstance(e, StartWorker)] == [RunRead]


async def test_a_value_json_cannot_carry_is_a_callback_failure() -> None:
    server = Server("s")

    @server.tool()
    async def nan() -> dict[str, float]:
        return {"x": float("nan")}

    async with connected(server) as conn:
        conn.call(1, "nan")
        assert (await conn.result(1))["structuredContent"] == {"error": "callback_failed"}


# -- callbacks and the runtime -----------------------------------------------------------------


async def test_sync_tools_run_in_threads_and_async_tools_on_the_loop() -> None:
    server = Server("s")
    loop_thread = threading.get_ident()
    seen: dict[str, int] = {}

    @server.tool()
    def plain() -> str:
        seen["plain"] = threading.get_ident()
        return "plain"

    @server.tool()
    async def coroutine() -> str:
        seen["coroutine"] = threading.get_ident()
        return "coroutine"

    async with connected(server) as conn:
        conn.call(1, "plain")
        conn.call(2, "coroutine")
        assert text_of(await conn.result(1)) == "plain"
        assert text_of(await conn.result(2)) == "coroutine"
    assert seen["plain"] != loop_thread
    assert seen["coroutine"] == loop_thread


async def test_a_hung_sync_callback_times_out_without_blocking_the_loop() -> None:
    server = Server("s", callback_timeout_ms=200)
    release = threading.Event()

    @server.tool()
    def hang() -> str:
        release.wait(30)
        return "late"

    try:
        async with connected(server) as conn:
            conn.call(1, "hang")
            conn.request(2, "ping")
            assert await conn.result(2) == {}  # answered while the thread hangs
            timed_out = await conn.result(1)
            assert timed_out["structuredContent"] == {"error": "callback_timeout"}
            assert conn.runtime.live_workers == frozenset()
    finally:
        release.set()


async def test_R_INV_4_the_runtimes_armed_timers_are_the_reducers_live_timers() -> None:
    server = Server("s", authorizer=lambda *_: Ask("ok?"))
    gate = anyio.Event()

    @server.tool()
    async def slow() -> str:
        await gate.wait()
        return "done"

    async with connected(server, ELICIT) as conn:
        runtime = conn.runtime
        conn.call(1, "slow")
        elicitation = await conn.elicitation()
        assert runtime.live_timers == live_timers(runtime.state)
        assert len(runtime.live_timers) == 1
        answer = {"action": "accept", "content": {"approve": True}}
        conn.send({"jsonrpc": "2.0", "id": elicitation["id"], "result": answer})
        assert runtime.live_timers == live_timers(runtime.state)
        assert len(runtime.live_workers) == 1
        gate.set()
        assert text_of(await conn.result(1)) == "done"
        assert runtime.live_timers == live_timers(runtime.state) == frozenset()
        assert runtime.live_workers == frozenset()


async def test_a_cancelled_running_tool_is_killed_and_reports_nothing() -> None:
    server = Server("s")
    started, stopped = anyio.Event(), anyio.Event()

    @server.tool()
    async def forever() -> str:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            stopped.set()
        return "never"

    async with connected(server) as conn:
        conn.call(1, "forever")
        with anyio.fail_after(DEADLINE):
            await started.wait()
        conn.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
        )
        with anyio.fail_after(DEADLINE):
            await stopped.wait()
        conn.request(2, "ping")
        await conn.reply(2)
        assert all(m.get("id") != 1 for m in conn.messages)
        assert conn.runtime.live_workers == frozenset()


async def test_authorizers_sync_or_async_get_the_context() -> None:
    contexts: list[Context] = []

    def sync_policy(tool: str, _arguments: Any, context: Context) -> Any:
        contexts.append(context)
        if tool == "a":
            return Allow()
        if tool == "b":
            return Deny("no b")
        raise RuntimeError("policy bug")

    async def async_reads(method: str, _params: Any, context: Context) -> Any:
        contexts.append(context)
        return Allow() if method != "prompts/list" else Deny("private")

    server = Server("s", authorizer=sync_policy, read_authorizer=async_reads)

    @server.tool()
    async def a() -> str:
        return "ran a"

    @server.tool()
    async def b() -> str:
        return "ran b"

    @server.tool()
    async def c() -> str:
        return "ran c"

    async with connected(server) as conn:
        conn.call(1, "a")
        assert text_of(await conn.result(1)) == "ran a"
        conn.call(2, "b")
        assert (await conn.result(2))["structuredContent"] == deny_payload(
            "b", "deny", "no b", policy_denies("no b")
        )
        conn.call(3, "c")
        failed = (await conn.result(3))["structuredContent"]
        assert failed == deny_payload("c", "deny", "authorizer failed")
        conn.request(4, "tools/list")
        listed = await conn.result(4)
        assert [tool["name"] for tool in listed["tools"]] == ["a", "b", "c"]  # R-PROTO-8
        conn.request(5, "prompts/list")
        assert (await conn.reply(5))["error"]["code"] == -32090
    assert {(ctx.conn_id, ctx.transport) for ctx in contexts} == {("c1", "stdio")}


async def test_R_PROTO_8_the_readme_authorizer_reading_path_lists_its_tool() -> None:
    """docs/api.md's example: an authorizer that reads ``arguments['path']`` would
    raise on made-up arguments; listing never asks it, so the tool is listed and callable."""
    asked: list[object] = []

    async def policy(tool: str, arguments: dict[str, Any], _context: Context) -> Any:
        asked.append(arguments)
        if tool == "delete_file":
            return Ask(f"Delete {arguments['path']!r}?")
        return Allow()

    server = Server("files", authorizer=policy, authorizer_source="configured")

    @server.tool(annotations={"destructiveHint": True})
    def delete_file(path: str) -> str:
        return f"deleted {path}"

    async with connected(server, ELICIT) as conn:
        tools = (await _list(conn, "tools/list"))["tools"]
        assert [tool["name"] for tool in tools] == ["delete_file"]
        assert asked == []  # listing asked the authorizer nothing
        conn.call(1, "delete_file", path="/tmp/x")
        prompt = await conn.elicitation()
        assert without_digest(prompt["params"]["message"]) == "Delete '/tmp/x'?"
        conn.send({"jsonrpc": "2.0", "id": prompt["id"], "result": APPROVE})
        assert text_of(await conn.result(1)) == "deleted /tmp/x"


@pytest.mark.parametrize("sync", [True, False])
async def test_R_PROTO_8_a_visibility_hook_decides_listing_and_one_that_raises_is_logged(
    sync: bool, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[tuple[str, object, str]] = []

    def decide(tool: str, context: Context) -> object:
        seen.append((tool, context.conn_id, context.transport))
        if tool == "broken":
            raise KeyError("path")
        return {"shown": True, "secret": False}.get(tool, "yes")

    async def async_decide(tool: str, context: Context) -> object:
        return decide(tool, context)

    server = Server("s", visibility=decide if sync else async_decide)
    for name in ("shown", "secret", "broken", "vague"):
        server.tool(name=name)(lambda: "ran")

    with caplog.at_level("WARNING", logger="askgate.runtime"):
        async with connected(server) as conn:
            tools = (await _list(conn, "tools/list"))["tools"]
            assert [tool["name"] for tool in tools] == ["shown"]
            conn.call(1, "secret")  # hidden is not refused: calls are the authorizer's
            assert text_of(await conn.result(1)) == "ran"
    assert sorted(seen) == [(n, "c1", "stdio") for n in ("broken", "secret", "shown", "vague")]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "tools/list hides broken: the visibility hook raised KeyError",
        "tools/list hides vague: the visibility hook returned str, not a bool",
    ]


async def test_R_POL_2_a_policy_with_only_tools_entries_lists_and_calls_its_allowed_tool() -> None:
    """What the official client does (initialize, tools/list, then tools/call), served with a
    policy file that has no [[reads]]."""
    policy = parse_policy('[[tools]]\nmatch = "echo"\ndecision = "allow"\n')
    server = Server(
        "s",
        authorizer=policy.authorize,
        read_authorizer=policy.authorize_read,
        visibility=policy.visible,
        authorizer_source="configured",
    )

    @server.tool()
    async def echo(text: str) -> str:
        return text

    @server.tool()
    async def other() -> str:
        return "never listed"

    @server.resource("x://status")
    async def status() -> str:
        return "ok"

    async with connected(server) as conn:
        tools = (await _list(conn, "tools/list"))["tools"]
        assert [tool["name"] for tool in tools] == ["echo"]
        conn.call(1, "echo", text="hi")
        assert text_of(await conn.result(1)) == "hi"
        conn.request(2, "resources/read", {"uri": "x://status"})
        denied = await conn.reply(2)
        assert denied["error"]["data"]["detail"] == NO_READS_REASON


async def test_a_tool_can_ask_for_its_context() -> None:
    server = Server("s")

    @server.tool()
    async def whoami(context: Context, greeting: str = "hi") -> str:
        return f"{greeting} {context.conn_id} over {context.transport}"

    async with connected(server) as conn:
        conn.call(1, "whoami")
        assert text_of(await conn.result(1)) == "hi c1 over stdio"
        tools = (await _list(conn, "tools/list"))["tools"]
        assert tools[0]["inputSchema"]["properties"] == {
            "greeting": {"type": "string", "default": "hi"}
        }


async def _list(conn: Conn, method: str, request_id: str = "list") -> Any:
    conn.request(request_id, method)
    return await conn.result(request_id)


async def test_resources_templates_prompts_and_completion() -> None:
    server = Server("s")

    @server.resource("mem://readme", mime_type="text/markdown")
    def readme() -> str:
        """The readme."""
        return "# hello"

    @server.resource("mem://logo")
    async def logo() -> bytes:
        return b"\x89PNG"

    @server.resource_template("mem://items/{item_id}", name="item")
    async def item(item_id: str) -> dict[str, str]:
        return {"id": item_id}

    @server.prompt(description="Greets.")
    def greet(name: str, tone: str = "warm") -> str:
        return f"Greet {name}, {tone}."

    @server.completion()
    def complete(_ref: dict[str, Any], argument: dict[str, Any]) -> list[str]:
        return [v for v in ("alpha", "beta", "alps") if v.startswith(argument["value"])]

    async with connected(server) as conn:
        resources = (await _list(conn, "resources/list"))["resources"]
        assert [r["uri"] for r in resources] == ["mem://logo", "mem://readme"]
        assert resources[1] == {
            "uri": "mem://readme",
            "name": "readme",
            "description": "The readme.",
            "mimeType": "text/markdown",
        }
        templates = (await _list(conn, "resources/templates/list"))["resourceTemplates"]
        assert templates == [{"uriTemplate": "mem://items/{item_id}", "name": "item"}]
        conn.request(1, "resources/read", {"uri": "mem://readme"})
        assert (await conn.result(1))["contents"] == [
            {"uri": "mem://readme", "text": "# hello", "mimeType": "text/markdown"}
        ]
        conn.request(2, "resources/read", {"uri": "mem://logo"})
        assert (await conn.result(2))["contents"][0]["blob"] == "iVBORw=="
        conn.request(3, "resources/read", {"uri": "mem://items/a%20b"})
        assert json.loads((await conn.result(3))["contents"][0]["text"]) == {"id": "a b"}
        conn.request(4, "resources/read", {"uri": "mem://nothing"})
        missing = await conn.reply(4)
        assert missing["error"]["code"] == -32002
        prompts = (await _list(conn, "prompts/list"))["prompts"]
        assert prompts == [
            {
                "name": "greet",
                "description": "Greets.",
                "arguments": [
                    {"name": "name", "required": True},
                    {"name": "tone", "required": False},
                ],
            }
        ]
        conn.request(5, "prompts/get", {"name": "greet", "arguments": {"name": "Ada"}})
        got = await conn.result(5)
        assert got["messages"][0]["content"]["text"] == "Greet Ada, warm."
        conn.request(6, "prompts/get", {"name": "greet", "arguments": {}})
        assert (await conn.reply(6))["error"]["code"] == -32602
        conn.request(7, "prompts/get", {"name": "nope"})
        assert (await conn.reply(7))["error"]["code"] == -32602
        ref = {"type": "ref/prompt", "name": "greet"}
        conn.request(
            8, "completion/complete", {"ref": ref, "argument": {"name": "n", "value": "al"}}
        )
        assert (await conn.result(8))["completion"]["values"] == ["alpha", "alps"]


async def test_R_PROTO_18_the_server_answers_an_unserved_uri_without_a_worker() -> None:
    server = Server("s", max_in_flight=1)
    release = anyio.Event()

    @server.tool()
    async def hold() -> str:
        await release.wait()
        return "held"

    @server.resource_template("mem://items/{item_id}")
    async def item(item_id: str) -> str:
        return item_id

    async with connected(server) as conn:
        conn.call(1, "hold")  # the one worker slot is taken
        conn.request(2, "resources/read", {"uri": "mem://items/x/y"})
        assert (await conn.reply(2))["error"] == {
            "code": -32002,
            "message": "Resource not found",
            "data": {"uri": "mem://items/x/y"},
        }
        conn.request(3, "resources/read", {"uri": "mem://items/x"})
        assert (await conn.reply(3))["error"]["data"]["error"] == "server_busy"
        release.set()
        assert text_of(await conn.result(1)) == "held"


async def test_R_PROTO_19_a_prompt_refuses_arguments_it_does_not_take() -> None:
    server = Server("s")

    @server.prompt()
    def strict(name: str, tone: str = "warm") -> str:
        return f"{name} {tone}"

    @server.prompt()
    def loose(name: str, **rest: str) -> list[str]:
        return [name, *sorted(rest)]

    async with connected(server) as conn:
        conn.request(1, "prompts/get", {"name": "strict", "arguments": {"name": "A", "x": "1"}})
        assert (await conn.reply(1))["error"] == {"code": -32602, "message": "Unknown argument: x"}
        conn.request(2, "prompts/get", {"name": "loose", "arguments": {"name": "A", "x": "1"}})
        messages = (await conn.result(2))["messages"]
        assert [m["content"]["text"] for m in messages] == ["A", "x"]
        conn.request(3, "prompts/get", {"name": "loose", "arguments": {"x": "1"}})
        assert (await conn.reply(3))["error"] == {
            "code": -32602,
            "message": "Missing required argument: name",
        }


async def test_R_PROTO_21_the_server_caps_completions_and_answers_without_a_callback() -> None:
    bare = Server("bare")
    ref = {"type": "ref/prompt", "name": "p"}
    params = {"ref": ref, "argument": {"name": "a", "value": ""}}
    async with connected(bare) as conn:
        conn.request(1, "completion/complete", params)
        assert await conn.result(1) == {"completion": {"values": [], "hasMore": False}}
    server = Server("s")

    @server.completion()
    def listed(_ref: dict[str, Any], _argument: dict[str, Any]) -> list[int]:
        return list(range(150))

    async with connected(server) as conn:
        conn.request(2, "completion/complete", params)
        completion = (await conn.result(2))["completion"]
        assert completion["values"] == [str(n) for n in range(100)]
        assert (completion["total"], completion["hasMore"]) == (150, True)


async def test_unknown_tool_reply_answers_with_text() -> None:
    server = Server("s", unknown_tool_reply=lambda name: f"{name} left with its session")
    async with connected(server) as conn:
        conn.call(1, "gone")
        result = await conn.result(1)
        assert result == {
            "isError": True,
            "content": [{"type": "text", "text": "gone left with its session"}],
        }


async def test_late_registration_tells_initialized_clients_and_logs_reach_them() -> None:
    server = Server("s")
    async with connected(server) as conn:

        @server.tool()
        async def later() -> str:
            return "later"

        await conn.wait_for(lambda m: m.get("method") == "notifications/tools/list_changed")
        conn.call(1, "later")
        assert text_of(await conn.result(1)) == "later"
        conn.request(2, "logging/setLevel", {"level": "warning"})
        await conn.reply(2)
        server.log("info", "not sent: below the level")
        server.log("error", {"disk": "full"}, logger="demo")
        logged = await conn.wait_for(lambda m: m.get("method") == "notifications/message")
        assert logged["params"] == {"level": "error", "data": {"disk": "full"}, "logger": "demo"}
        conn.request(3, "resources/subscribe", {"uri": "mem://x"})
        await conn.reply(3)
        server.notify_resource_updated("mem://x")
        updated = await conn.wait_for(
            lambda m: m.get("method") == "notifications/resources/updated"
        )
        assert updated["params"] == {"uri": "mem://x"}
    assert not any(
        m.get("params", {}).get("data") == "not sent: below the level" for m in conn.messages
    )


# -- the stdio transport over memory streams -----------------------------------------------------


class _ByteIn(anyio.abc.ByteReceiveStream):
    def __init__(self, inner: MemoryObjectReceiveStream[bytes]) -> None:
        self.inner = inner

    async def receive(self, max_bytes: int = 65536) -> bytes:
        chunk = await self.inner.receive()
        assert len(chunk) <= max_bytes
        return chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class _ByteOut(anyio.abc.ByteSendStream):
    def __init__(self, inner: MemoryObjectSendStream[bytes]) -> None:
        self.inner = inner

    async def send(self, item: bytes) -> None:
        await self.inner.send(item)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_stdio_over_memory_streams_answers_in_order_and_drops_at_end_of_input() -> None:
    server = Server("s")
    gate = anyio.Event()

    @server.tool()
    async def wait() -> str:
        await gate.wait()
        return "never written"

    to_server, server_in = anyio.create_memory_object_stream[bytes](100)
    server_out, from_server = anyio.create_memory_object_stream[bytes](100)
    lines = [
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}',
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait"}}',
        b'{"jsonrpc":"2.0","id":3,"method":"ping"}',
        b"not json",
        b'{"jsonrpc":"2.0","id":4,"method":"ping"}',
    ]
    received = bytearray()
    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as tg:

            async def collect() -> None:
                async for blob in from_server:
                    received.extend(blob)

            tg.start_soon(collect)
            async with server.running("stdio") as runtime:
                # Split across chunk boundaries: the transport frames lines itself.
                data = b"\r\n".join(lines) + b"\n"
                for start in range(0, len(data), 7):
                    await to_server.send(data[start : start + 7])
                await to_server.aclose()
                await serve_stdio(runtime, _ByteIn(server_in), _ByteOut(server_out))
            await server_out.aclose()
    replies = [json.loads(line) for line in bytes(received).splitlines()]
    assert [reply["id"] for reply in replies] == [1, 3, None, 4]  # call 2 dropped, unanswered


def test_the_line_splitter_bounds_a_line_and_skips_its_rest() -> None:
    splitter = LineSplitter(max_bytes=8)
    assert splitter.feed(b"12345678\r\nabc") == [b"12345678"]
    assert splitter.feed(b"defghij") == [b"abcdefghi"]  # over the cap: its first 9 bytes
    assert splitter.feed(b"klmnop") == []  # the rest of that line is skipped
    assert splitter.feed(b"qrs\n\n\r\nok\n") == [b"ok"]
    assert splitter.feed(b"tail") == []
    assert splitter.finish() == [b"tail"]
    assert splitter.feed(b"12345678\r") == []  # 9 bytes: 8 and a CR, not over the cap yet
    assert splitter.feed(b"\n") == [b"12345678"]
    assert splitter.feed(b"123456789\r") == [b"123456789"]  # 10 bytes: over, whatever follows
    assert splitter.feed(b"\nnext\n") == [b"next"]


# -- a running tool's context (R-CTX) -------------------------------------------------------------

CTX_CAPS: dict[str, Any] = {"elicitation": {}, "sampling": {}}
FORM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"username": {"type": "string"}},
    "required": ["username"],
}


def context_server(**options: Any) -> Server:
    server = Server("ctx", **options)

    @server.tool()
    async def steps(ctx: Context) -> str:
        await ctx.log("info", "started", "steps")
        for done in (0, 50, 50, 100):  # the repeated 50 is not sent: progress only increases
            await ctx.report_progress(done, 100)
        await ctx.log("debug", "below the caller's level")
        return "done"

    @server.tool()
    async def who(ctx: Context) -> str:
        answer = await ctx.elicit("Who are you?", FORM_SCHEMA)
        return f"{answer['action']}: {answer.get('content')}"

    @server.tool()
    async def ask_model(prompt: str, ctx: Context) -> str:
        try:
            result = await ctx.sample(
                {
                    "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                    "maxTokens": 100,
                }
            )
        except ClientRequestError as failure:
            return f"failed: {failure.reason or failure.code} {failure.message}"
        return f"model said: {result['content']['text']}"

    return server


async def test_R_CTX_2_progress_and_logs_reach_the_caller_of_a_running_tool() -> None:
    async with connected(context_server(), CTX_CAPS) as conn:
        conn.request(1, "logging/setLevel", {"level": "info"})
        await conn.reply(1)
        conn.request(
            2, "tools/call", {"name": "steps", "arguments": {}, "_meta": {"progressToken": "p"}}
        )
        assert text_of(await conn.result(2)) == "done"
        log = await conn.wait_for(lambda m: m.get("method") == "notifications/message")
        assert log["params"] == {"level": "info", "data": "started", "logger": "steps"}
        progress = [m["params"] for m in conn.messages if m["method"] == "notifications/progress"]
        assert progress == [
            {"progressToken": "p", "progress": 0, "total": 100},
            {"progressToken": "p", "progress": 50, "total": 100},
            {"progressToken": "p", "progress": 100, "total": 100},
        ]
        assert not [m for m in conn.messages if m.get("method") == "notifications/message"]


async def test_R_CTX_5_a_tools_elicitation_is_answered_by_its_caller() -> None:
    async with connected(context_server(), CTX_CAPS) as conn:
        conn.call(1, "who")
        request = await conn.elicitation()
        assert request["id"].startswith("askgate-request-")
        assert request["params"] == {
            "mode": "form",
            "message": "Who are you?",
            "requestedSchema": FORM_SCHEMA,
        }
        content = {"username": "ada"}
        conn.send(
            {
                "jsonrpc": "2.0",
                "id": request["id"],
                "result": {"action": "accept", "content": content},
            }
        )
        assert text_of(await conn.result(1)) == "accept: {'username': 'ada'}"


async def test_R_CTX_4_sampling_errors_and_missing_capabilities_reach_the_tool() -> None:
    async with connected(context_server(), CTX_CAPS) as conn:
        conn.call(1, "ask_model", prompt="hi")
        request = await conn.wait_for(lambda m: m.get("method") == "sampling/createMessage")
        assert request["params"]["maxTokens"] == 100
        conn.send(
            {
                "jsonrpc": "2.0",
                "id": request["id"],
                "result": {
                    "role": "assistant",
                    "content": {"type": "text", "text": "hello"},
                    "model": "m",
                },
            }
        )
        assert text_of(await conn.result(1)) == "model said: hello"
        conn.call(2, "ask_model", prompt="again")
        request = await conn.wait_for(lambda m: m.get("method") == "sampling/createMessage")
        conn.send(
            {
                "jsonrpc": "2.0",
                "id": request["id"],
                "error": {"code": -1, "message": "user rejected"},
            }
        )
        assert text_of(await conn.result(2)) == "failed: -1 user rejected"
    async with connected(context_server(), {"elicitation": {}}) as conn:
        conn.call(1, "ask_model", prompt="hi")
        assert text_of(await conn.result(1)).startswith("failed: client_cannot_sample")


async def test_R_CTX_6_a_cancelled_tool_withdraws_its_request_and_a_timeout_fails_it() -> None:
    async with connected(context_server(), CTX_CAPS) as conn:
        conn.call(1, "who")
        request = await conn.elicitation()
        conn.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
        )
        withdrawn = await conn.wait_for(lambda m: m.get("method") == "notifications/cancelled")
        assert withdrawn["params"] == {"requestId": request["id"], "reason": "request cancelled"}
        assert conn.runtime.state.client_requests.get(request["id"]) is None
    async with connected(context_server(elicitation_timeout_ms=1), CTX_CAPS) as conn:
        conn.call(2, "ask_model", prompt="hi")
        withdrawn = await conn.wait_for(lambda m: m.get("method") == "notifications/cancelled")
        assert withdrawn["params"]["reason"] == "timed out"
        assert text_of(await conn.result(2)).startswith("failed: timed_out")


async def test_R_CTX_1_an_authorizers_context_cannot_ask_the_client() -> None:
    seen: list[str] = []

    async def policy(_tool: str, _arguments: Any, ctx: Context) -> Allow:
        try:
            await ctx.elicit("sneaky?", {"type": "object", "properties": {}})
        except ClientRequestError as failure:
            seen.append(str(failure.reason))
        return Allow()

    server = context_server(authorizer=policy)
    async with connected(server, CTX_CAPS) as conn:
        conn.call(1, "steps")
        assert text_of(await conn.result(1)) == "done"
    assert seen == ["not_running"]


# -- tools that complete without suspending -------------------------------------------------------


async def test_R_WORK_3_a_tool_marked_eager_runs_at_once_and_one_that_suspends_fails() -> None:
    server = Server("eager")

    @server.tool()
    @completes_without_suspending
    async def quick(text: str, ctx: Context) -> str:
        await ctx.log("info", f"quick {text}")  # feeds the runtime: does not suspend
        return text.upper()

    @server.tool()
    @completes_without_suspending
    async def liar() -> str:
        await anyio.sleep(0)  # suspends: breaks the promise
        return "never"

    async with connected(server) as conn:
        conn.request(1, "logging/setLevel", {"level": "info"})
        await conn.reply(1)
        conn.call(2, "quick", text="hi")
        # The tool ran inside the feed that started it: its result is already written.
        assert any(m.get("id") == 2 for m in conn.messages)
        assert text_of(await conn.result(2)) == "HI"
        log = await conn.wait_for(lambda m: m.get("method") == "notifications/message")
        assert log["params"]["data"] == "quick hi"
        conn.call(3, "liar")
        result = await conn.result(3)
        assert result["isError"] is True
        assert result["structuredContent"] == {"error": "callback_failed"}
        assert not conn.runtime.live_workers
        conn.call(4, "quick", text="again")
        assert text_of(await conn.result(4)) == "AGAIN"


async def test_a_tool_parameter_may_have_any_name_the_server_uses_itself() -> None:
    """Arguments reach the callback as keyword arguments whatever their names: ``func``,
    ``limiter`` and ``self`` are the names of the server's own calling code."""
    server = Server("names")

    @server.tool()
    async def named(func: str, limiter: str, self: str) -> str:
        return f"{func} {limiter} {self}"

    @server.tool()
    def plain(func: str, limiter: str) -> str:
        return f"{func} {limiter}"

    async with connected(server) as conn:
        arguments = {"func": "a", "limiter": "b", "self": "c"}
        conn.request(1, "tools/call", {"name": "named", "arguments": arguments})
        assert text_of(await conn.result(1)) == "a b c"
        conn.call(2, "plain", func="d", limiter="e")
        assert text_of(await conn.result(2)) == "d e"


async def test_R_CTX_3_a_plain_def_tool_logs_through_the_event_loop() -> None:
    """A sync tool runs in a worker thread; it reaches its context as the Context docstring
    says, with anyio.from_thread.run."""
    server = Server("sync-ctx")

    @server.tool()
    def slow(ctx: Context) -> str:
        anyio.from_thread.run(ctx.log, "warning", "from a thread")
        return "done"

    async with connected(server) as conn:
        conn.request(1, "logging/setLevel", {"level": "info"})
        await conn.reply(1)
        conn.call(2, "slow")
        assert text_of(await conn.result(2)) == "done"
        log = await conn.wait_for(lambda m: m.get("method") == "notifications/message")
        assert log["params"] == {"level": "warning", "data": "from a thread"}


def test_R_OPT_1_every_cli_option_flag_reaches_the_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each numeric flag of `askgate serve` is validated as its option: 0 is refused in one
    line naming the flag, not the option's field."""
    for flag, dest, _ in _OPTION_FLAGS:
        assert main(["serve", "--demo", flag, "0"]) == 2, flag
        err = capsys.readouterr().err
        assert err == f"askgate refuses to start: {flag} 0: must be at least 1\n", flag
        assert dest not in err, flag


def test_askgate_alone_prints_its_usage(capsys: pytest.CaptureFixture[str]) -> None:
    """No command is a usage error (exit 2) that says what the commands are; --version prints
    the version."""
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: askgate")
    assert "serve" in err
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("askgate ")
