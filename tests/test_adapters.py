"""spec/adapters.md: askgate's gate in front of the SDK's ``MCPServer`` and low-level ``Server``
and of fastmcp, end to end with the official ``mcp.ClientSession`` over memory streams.

Every test runs once per framework and anyio backend (asyncio and trio). fastmcp does not say it
supports trio (its lifespan manager holds an ``asyncio.Lock``, taken here only uncontended); the
adapter's tests pass on it there too.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from askgate import Allow, Ask, Deny
from askgate.adapters import CallSite, Gate, GateError
from askgate.adapters.sdk import guard as sdk_guard
from askgate.core import OptionError

from .adapter_kits import (
    APPROVE,
    KITS,
    NOTES,
    Asked,
    Kit,
    MCPServerKit,
    client,
    connected,
    denial,
    text,
)
from .listener import uvicorn_serving

pytestmark = pytest.mark.anyio

CASES = [
    ("mcpserver", "asyncio"),
    ("mcpserver", "trio"),
    ("lowlevel", "asyncio"),
    ("lowlevel", "trio"),
    ("fastmcp", "asyncio"),
    ("fastmcp", "trio"),
]


@pytest.fixture(params=CASES, ids=[f"{kit}-{backend}" for kit, backend in CASES])
def case(request: pytest.FixtureRequest) -> tuple[str, str]:
    framework, backend = request.param
    return framework, backend


@pytest.fixture
def anyio_backend(case: tuple[str, str]) -> str:
    return case[1]


@pytest.fixture
def framework(case: tuple[str, str]) -> str:
    return case[0]


def ask_for_delete(tool: str, arguments: Any, _context: Any) -> object:
    if tool == "delete_file":
        return Ask(f"Delete {arguments['path']}?")
    return Allow()


@asynccontextmanager
async def running(gate: Gate) -> AsyncIterator[anyio.Event]:
    """Runs ``gate`` in a task of its own until the event yielded is set (or the block ends)."""
    stop = anyio.Event()
    started = anyio.Event()

    async def run() -> None:
        async with gate.running():
            started.set()
            await stop.wait()

    with anyio.fail_after(20):  # a test whose call is never answered fails instead of hanging
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await started.wait()
            try:
                yield stop
            finally:
                stop.set()


def settled(kit: Kit) -> bool:
    state = kit.gate.runtime.state
    return not state.calls and not state.parked and not state.workers


# -- R-ADAPT-1 ------------------------------------------------------------------------------


async def test_R_ADAPT_1_an_allowed_call_runs_the_framework_tool_through_the_reducer(
    framework: str,
) -> None:
    judged: list[tuple[str, object]] = []

    def policy(tool: str, arguments: Any, _context: Any) -> object:
        judged.append((tool, arguments))
        if "path" in arguments:
            arguments["path"] = "elsewhere"  # its own copy (R-AUTH-5): what runs is unchanged
        return Allow()

    kit = KITS[framework](policy)
    async with running(kit.gate), connected(kit) as client:
        result = await client.call_tool("read_file", {"path": "a.txt"})
        assert result.is_error is not True
        assert text(result) == "read a.txt"
        failed = await client.call_tool("boom", {})
    assert kit.ran == [("read_file", "a.txt"), ("boom", None)]
    assert judged == [("read_file", {"path": "elsewhere"}), ("boom", {})]
    assert failed.is_error is True
    assert "secret" not in text(failed)
    if framework == "mcpserver":  # MCPServer makes its own error result of it
        assert failed.structured_content is None
    else:  # the handler (fastmcp's chain) raised out: the reducer's failure (R-WORK-3)
        assert failed.structured_content == {"error": "callback_failed"}
    assert kit.gate.runtime.steps_checked > 0


async def test_R_ADAPT_1_a_tool_past_callback_timeout_is_killed_and_answered(
    framework: str,
) -> None:
    kit = KITS[framework](None, callback_timeout_ms=200)
    async with running(kit.gate), connected(kit) as client:
        result = await client.call_tool("hang", {})
        assert settled(kit)
        assert not kit.gate.runtime.live_workers
    assert result.is_error is True
    assert result.structured_content == {"error": "callback_timeout"}
    assert kit.ran == [("hang", None)]


# -- R-ADAPT-2 ------------------------------------------------------------------------------


async def test_R_ADAPT_2_a_deny_is_askgates_deny_and_an_unknown_tool_its_error(
    framework: str,
) -> None:
    def policy(_tool: str, _arguments: Any, _context: Any) -> object:
        return Deny("read-only day")

    kit = KITS[framework](policy)
    async with running(kit.gate), connected(kit) as client:
        result = await client.call_tool("read_file", {"path": "a.txt"})
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("no_such_tool", {})
    assert denial(result) == {
        "error": "authorization_required",
        "tool": "read_file",
        "decision": "deny",
        "detail": "read-only day",
        "message": "read_file was not run: the server's policy denies it (read-only day)",
    }
    assert text(result) == (
        '{"error":"authorization_required","tool":"read_file","decision":"deny",'
        '"detail":"read-only day","message":"read_file was not run: the server\'s policy '
        'denies it (read-only day)"}'
    )
    assert unknown.value.code == -32601
    assert kit.ran == []


# -- R-ADAPT-3 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        (APPROVE, None),
        (types.ElicitResult(action="decline"), "declined"),
        (types.ElicitResult(action="cancel"), "cancelled"),
        (types.ElicitResult(action="accept", content={"approve": "true"}), "not approved"),
        (types.ElicitResult(action="accept", content={"approve": 1}), "not approved"),
        (
            types.ElicitResult(action="accept", content={"approve": True, "note": "x"}),
            "not approved",
        ),
        (types.ErrorData(code=-32000, message="no"), "elicitation failed"),
    ],
    ids=["approve", "decline", "cancel", "string", "one", "extra-key", "error"],
)
async def test_R_ADAPT_3_the_framework_elicits_and_the_reducer_judges_the_answer(
    framework: str, answer: types.ElicitResult | types.ErrorData, detail: str | None
) -> None:
    kit = KITS[framework](ask_for_delete)
    asked = Asked(answer)
    async with running(kit.gate), connected(kit, asked) as client:
        result = await client.call_tool("delete_file", {"path": "a.txt"})
    assert asked.asked == ["Delete a.txt?"]
    if detail is None:
        assert text(result) == "deleted a.txt"
        assert kit.ran == [("delete_file", "a.txt")]
    else:
        deny = denial(result)
        assert (deny["decision"], deny["detail"]) == ("ask", detail)
        assert kit.ran == []
    assert settled(kit)


# -- R-ADAPT-4 ------------------------------------------------------------------------------


async def test_R_ADAPT_4_a_client_that_cannot_be_asked_is_denied_and_never_asked(
    framework: str,
) -> None:
    kit = KITS[framework](ask_for_delete)
    async with running(kit.gate), connected(kit, None) as client:
        result = await client.call_tool("delete_file", {"path": "a.txt"})
    deny = denial(result)
    assert (deny["decision"], deny["detail"]) == ("ask", "Delete a.txt?")
    assert deny["message"] == (
        "delete_file was not run: it needs approval and this client cannot be asked"
    )
    assert kit.ran == []


async def test_R_ADAPT_4_a_2026_07_28_request_that_declares_no_elicitation_is_never_asked(
    framework: str,
) -> None:
    kit = KITS[framework](ask_for_delete)
    async with running(kit.gate), client(kit, None) as official:
        assert official.session.protocol_version == "2026-07-28"
        result = await official.call_tool("delete_file", {"path": "a.txt"})
        allowed = await official.call_tool("read_file", {"path": "b.txt"})
    deny = denial(result)
    assert (deny["decision"], deny["detail"]) == ("ask", "Delete a.txt?")
    assert text(allowed) == "read b.txt"
    assert kit.ran == [("read_file", "b.txt")]
    assert not kit.gate.runtime.state.conns  # each request's connection ended with it


async def test_R_ADAPT_4_silence_times_out_and_the_elicitation_is_withdrawn(
    framework: str,
) -> None:
    kit = KITS[framework](ask_for_delete, elicitation_timeout_ms=200)
    asked = Asked(None)  # never answers
    async with running(kit.gate), connected(kit, asked) as client:
        result = await client.call_tool("delete_file", {"path": "a.txt"})
        await asked.until(lambda: asked.withdrawn == ["Delete a.txt?"])
    deny = denial(result)
    assert (deny["decision"], deny["detail"]) == ("ask", "elicitation timed out")
    assert deny["message"] == "delete_file was not run: no one approved it within 200 ms"
    assert kit.ran == []
    assert settled(kit)


# -- R-ADAPT-9 ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"], ids=["default-mode", "legacy-mode"])
@pytest.mark.parametrize("approve", [True, False], ids=["approved", "declined"])
async def test_R_ADAPT_9_the_official_client_is_asked_in_every_mode(
    framework: str, mode: str, approve: bool
) -> None:
    """``mcp.Client`` in its default mode (2026-07-28: the approval is an input-required result
    its driver answers with the elicitation callback) and in ``mode="legacy"`` (the framework's
    own elicitation): an approval runs the tool exactly once, a decline is the deny."""
    kit = KITS[framework](ask_for_delete)
    asked = Asked(APPROVE if approve else types.ElicitResult(action="decline"))
    async with running(kit.gate), client(kit, asked, mode=mode) as official:
        expected = "2026-07-28" if mode == "auto" else "2025-11-25"
        assert official.session.protocol_version == expected
        result = await official.call_tool("delete_file", {"path": "a.txt"})
        assert settled(kit)
    assert asked.asked == ["Delete a.txt?"]
    if approve:
        assert text(result) == "deleted a.txt"
        assert kit.ran == [("delete_file", "a.txt")]
    else:
        deny = denial(result)
        assert (deny["decision"], deny["detail"]) == ("ask", "declined")
        assert kit.ran == []
    if mode == "auto":
        assert not kit.gate.runtime.state.conns  # each request's connection ended with it
        assert not kit.gate.runtime.state.parked  # the nonce was taken by the retry


async def test_R_ADAPT_9_an_approval_is_single_use_and_bound_to_its_call(framework: str) -> None:
    """Driving the rounds by hand: the state answers one retry only, and only for the same
    tool and arguments (refused by the framework's request-state boundary where it has one,
    else by askgate); nothing runs but the one approved call."""
    kit = KITS[framework](ask_for_delete)
    answer: types.InputResponses = {"approval": APPROVE}
    declares = Asked(APPROVE)  # declares elicitation; the rounds are driven here by hand
    async with running(kit.gate), client(kit, declares) as official:
        session = official.session
        first = await session.call_tool("delete_file", {"path": "a.txt"}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert first.input_requests is not None
        assert list(first.input_requests) == ["approval"]
        state = first.request_state
        try:
            changed: object = await session.call_tool(
                "delete_file", {"path": "b.txt"}, input_responses=answer, request_state=state
            )
        except MCPError as refused:  # the SDK's own request-state boundary checks it first
            changed = refused
        again = await session.call_tool("delete_file", {"path": "a.txt"}, allow_input_required=True)
        assert isinstance(again, types.InputRequiredResult)
        retried = await session.call_tool(
            "delete_file",
            {"path": "a.txt"},
            input_responses=answer,
            request_state=again.request_state,
        )
        replayed = await session.call_tool(
            "delete_file",
            {"path": "a.txt"},
            input_responses=answer,
            request_state=again.request_state,
        )
    if framework == "lowlevel":  # no boundary: askgate's own verdict (R-MRTR-4)
        assert isinstance(changed, types.CallToolResult)
        assert denial(changed)["detail"] == "arguments changed"
    else:  # MCPServer's and fastmcp's boundary binds the arguments too
        assert isinstance(changed, MCPError)
        assert changed.code == -32602
    assert isinstance(retried, types.CallToolResult)
    assert text(retried) == "deleted a.txt"
    assert isinstance(replayed, types.CallToolResult)
    assert denial(replayed)["detail"] == "request state already used"
    assert kit.ran == [("delete_file", "a.txt")]
    assert declares.asked == []


async def test_R_ADAPT_9_outstanding_approvals_meet_the_caps(framework: str) -> None:
    """Each outstanding 2026-07-28 approval holds a parking place of its owner (every request
    no one authenticated is one owner): past ``max_parked_elicitations`` it is denied."""
    kit = KITS[framework](ask_for_delete, max_parked_elicitations=1)
    async with running(kit.gate), client(kit, Asked(APPROVE)) as official:
        session = official.session
        first = await session.call_tool("delete_file", {"path": "a.txt"}, allow_input_required=True)
        second = await session.call_tool(
            "delete_file", {"path": "b.txt"}, allow_input_required=True
        )
        assert len(kit.gate.runtime.state.parked) == 1
    assert isinstance(first, types.InputRequiredResult)
    assert isinstance(second, types.CallToolResult)
    assert denial(second)["detail"] == "too many elicitations pending"
    assert kit.ran == []


# -- R-ADAPT-10 -----------------------------------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_R_ADAPT_10_a_handlers_own_round_rides_the_reducers_state() -> None:
    """A low-level handler that asks its own question (an input-required result of its own)
    behind an approval: the default-mode client approves, then answers the handler's question;
    the handler gets its own state and answer back (never askgate's) and runs to its result;
    its approval is not asked twice."""
    seen: list[tuple[object, object]] = []

    async def call_tool(
        _ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        seen.append((params.request_state, params.input_responses))
        if params.input_responses is None:
            form = types.ElicitRequestFormParams(
                message="Which colour?",
                requested_schema={"type": "object", "properties": {"approve": {"type": "boolean"}}},
            )
            asking: types.InputRequests = {"colour": types.ElicitRequest(params=form)}
            return types.InputRequiredResult(input_requests=asking, request_state="mine-1")
        answer = params.input_responses["colour"]
        assert isinstance(answer, types.ElicitResult)
        return types.CallToolResult(
            content=[types.TextContent(text=f"{params.request_state} {answer.content}")]
        )

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[types.Tool(name="paint", input_schema={"type": "object"})]
        )

    def ask_paint(tool: str, _arguments: Any, _context: Any) -> object:
        return Ask(f"Run {tool}?")

    server = Server("painter", on_list_tools=list_tools, on_call_tool=call_tool)
    gate = sdk_guard(server, ask_paint, check_invariants=True)
    asked = Asked(APPROVE)
    async with running(gate), Client(server, elicitation_callback=asked) as official:
        result = await official.call_tool("paint", {})
    assert text(result) == "mine-1 {'approve': True}"
    assert asked.asked == ["Run paint?", "Which colour?"]
    assert seen[0] == (None, None)  # the first run, once approved: nothing of askgate's
    assert seen[1][0] == "mine-1"
    assert len(seen) == 2
    assert not gate.runtime.state.parked


# -- R-ADAPT-11 -----------------------------------------------------------------------------


def read_policy(method: str, params: Any, _context: Any) -> object:
    if method == "prompts/get":
        return Deny(f"no prompts ({params['name']})")
    return Allow()


@pytest.mark.parametrize("mode", ["auto", "legacy"], ids=["default-mode", "legacy-mode"])
async def test_R_ADAPT_11_reads_are_decided_by_the_read_authorizer(
    framework: str, mode: str
) -> None:
    kit = KITS[framework](ask_for_delete, read_authorizer=read_policy)
    async with running(kit.gate), client(kit, mode=mode) as official:
        read = await official.read_resource("notes://today")
        with pytest.raises(MCPError) as denied:
            await official.get_prompt("greet", {"name": "ada"})
        listed = await official.list_prompts()  # the listings stay the framework's
    block = read.contents[0]
    assert isinstance(block, types.TextResourceContents)
    assert block.text == NOTES
    assert denied.value.code == -32090
    assert [prompt.name for prompt in listed.prompts] == ["greet"]
    assert kit.ran == [("notes", None)]
    assert settled(kit)


async def test_R_ADAPT_11_without_a_read_authorizer_reads_are_the_frameworks(
    framework: str,
) -> None:
    kit = KITS[framework](ask_for_delete)
    async with running(kit.gate), client(kit) as official:
        prompt = await official.get_prompt("greet", {"name": "ada"})
        assert kit.gate.runtime.steps_checked == 0  # the gate was fed nothing
    assert prompt.messages
    assert kit.ran == [("greet", "ada")]


# -- R-ADAPT-5 ------------------------------------------------------------------------------


async def test_R_ADAPT_5_caps_and_eviction_are_counted_across_connections(
    framework: str,
) -> None:
    kit = KITS[framework](
        ask_for_delete, max_parked_elicitations=1, max_parked_elicitations_total=2
    )
    a, b, c = Asked(None), Asked(None), Asked(None)
    results: dict[str, types.CallToolResult] = {}

    async def call(client: Any, name: str) -> None:
        results[name] = await client.call_tool("delete_file", {"path": name})

    async with (
        running(kit.gate),
        connected(kit, a) as client_a,
        connected(kit, b) as client_b,
        connected(kit, c) as client_c,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(call, client_a, "a1")
        await a.until(lambda: a.waiting == 1)
        await call(client_a, "a2")  # the connection's cap (R-PARK-1)
        tg.start_soon(call, client_c, "c1")
        await c.until(lambda: c.waiting == 1)
        tg.start_soon(call, client_b, "b1")  # full: a1's connection yields (R-PARK-3)
        await a.until(lambda: a.withdrawn == ["Delete a1?"])
        await b.until(lambda: b.waiting == 1)
        b.release.set()
        c.release.set()
    assert denial(results["a2"])["detail"] == "too many elicitations pending"
    assert denial(results["a1"])["detail"] == "evicted to make room on this server"
    assert text(results["b1"]) == "deleted b1"
    assert text(results["c1"]) == "deleted c1"
    assert sorted(kit.ran) == [("delete_file", "b1"), ("delete_file", "c1")]


# -- R-ADAPT-6 ------------------------------------------------------------------------------


async def test_R_ADAPT_6_a_cancelled_call_is_dropped_and_its_elicitation_withdrawn(
    framework: str,
) -> None:
    kit = KITS[framework](ask_for_delete)
    asked = Asked(None)
    async with running(kit.gate), connected(kit, asked) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "delete_file", {"path": "a.txt"})
            await asked.until(lambda: asked.waiting == 1)
            tg.cancel_scope.cancel()  # the client abandons it: notifications/cancelled
        await asked.until(lambda: asked.withdrawn == ["Delete a.txt?"])
        with anyio.fail_after(10):
            while not settled(kit):
                await anyio.sleep(0.01)  # polls the state: the drop has no event to wait on
        asked.release.set()
    assert kit.ran == []


async def test_R_ADAPT_6_a_connection_that_closes_takes_its_calls_and_entry_with_it(
    framework: str,
) -> None:
    kit = KITS[framework](ask_for_delete)
    asked = Asked(None)
    async with running(kit.gate):
        async with connected(kit, asked) as client, anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "delete_file", {"path": "a.txt"})
            await asked.until(lambda: asked.waiting == 1)
            assert len(kit.gate.runtime.state.conns) == 1
            tg.cancel_scope.cancel()
        state = kit.gate.runtime.state
        assert not state.conns
        assert not state.calls
        assert not state.parked
    assert kit.ran == []


# -- R-ADAPT-7 ------------------------------------------------------------------------------


async def test_R_ADAPT_7_the_registry_follows_the_framework_tools(framework: str) -> None:
    kit = KITS[framework](None, sensitive=["wipe"])  # no authorizer: destructive tools denied
    async with running(kit.gate), connected(kit) as client:
        unguarded = await client.call_tool("delete_file", {"path": "a.txt"})
        kit.add_tool("late")
        late = await client.call_tool("late", {"path": "x"})
        kit.add_tool("wipe")
        wipe = await client.call_tool("wipe", {"path": "x"})
        kit.remove_tool("late")
        with pytest.raises(MCPError) as gone:
            await client.call_tool("late", {"path": "y"})
    deny = denial(unguarded)
    assert (deny["decision"], deny["detail"]) == ("deny", "sensitive tool unguarded")
    assert text(late) == "late x"
    assert denial(wipe)["detail"] == "sensitive tool unguarded"
    assert gone.value.code == -32601
    assert kit.ran == [("late", "x")]


# -- R-ADAPT-8 ------------------------------------------------------------------------------


async def test_R_ADAPT_8_a_stopping_gate_answers_parked_calls_and_refuses_new_ones(
    framework: str,
) -> None:
    kit = KITS[framework](ask_for_delete)
    asked = Asked(None)
    results: list[types.CallToolResult] = []

    async def call(client: Any) -> None:
        results.append(await client.call_tool("delete_file", {"path": "a.txt"}))

    async with connected_with_gate_stopping(kit, asked) as (client, stop):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, client)
            await asked.until(lambda: asked.waiting == 1)
            stop.set()
        with pytest.raises(MCPError) as refused:
            await client.call_tool("read_file", {"path": "b"})
    deny = denial(results[0])
    assert (deny["decision"], deny["detail"]) == ("ask", "server stopping")
    assert refused.value.code == -32603
    assert refused.value.data == {"error": "gate_not_running"}
    assert kit.ran == []


@asynccontextmanager
async def connected_with_gate_stopping(
    kit: Kit, asked: Asked
) -> AsyncIterator[tuple[Any, anyio.Event]]:
    """A client of ``kit`` whose gate stops when the event yielded is set; the connection
    stays up after it."""
    async with running(kit.gate) as stop, connected(kit, asked) as client:
        yield client, stop


# -- the examples ------------------------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"askgate_example_{name}", EXAMPLES / f"{name}.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ExampleKit(Kit):
    """An example's own guarded server, served as the example serves it: its lifespan enters
    the gate (nothing else does here)."""

    def __init__(self, name: str) -> None:
        module = _load(name)
        self.server_obj = getattr(module, "server", None) or module.mcp
        self.ran = []

    @property
    def lowlevel(self) -> Any:
        if hasattr(self.server_obj, "_lowlevel_server"):
            return self.server_obj._lowlevel_server
        return self.server_obj._mcp_server


@pytest.mark.parametrize("example", ["guard_sdk_server", "guard_fastmcp_server"])
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_R_ADAPT_3_each_example_asks_before_deleting(example: str) -> None:
    """Each example's server, entered through its own lifespan (as ``run()`` serves it), asks
    the official client before ``delete_file`` and runs it on approval only."""
    kit = ExampleKit(example)
    asked = Asked(types.ElicitResult(action="decline"))
    async with connected(kit, asked) as client:
        read_result = await client.call_tool("read_file", {"path": "a.txt"})
        declined = await client.call_tool("delete_file", {"path": "a.txt"})
        asked.answer = APPROVE
        approved = await client.call_tool("delete_file", {"path": "b.txt"})
    assert text(read_result) == "read a.txt"
    assert denial(declined)["detail"] == "declined"
    assert text(approved) == "deleted b.txt"
    assert asked.asked == ["Delete a.txt?", "Delete b.txt?"]


# -- over Streamable HTTP ---------------------------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # uvicorn runs on asyncio
async def test_R_ADAPT_5_http_sessions_share_one_gate_entered_by_the_session_manager() -> None:
    """An ``MCPServer`` served over Streamable HTTP (uvicorn on 127.0.0.1): its session
    manager enters the gate once for every session, the elicitation rides the call's stream,
    and the caps span the sessions (one session's parked call is evicted for another's)."""
    kit = MCPServerKit(ask_for_delete, max_parked_elicitations=1, max_parked_elicitations_total=1)
    a, b = Asked(None), Asked(None)
    results: dict[str, types.CallToolResult] = {}

    async def call(client: ClientSession, name: str) -> None:
        results[name] = await client.call_tool("delete_file", {"path": name})

    @asynccontextmanager
    async def session(url: str, asked: Asked) -> AsyncIterator[ClientSession]:
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write, elicitation_callback=asked) as client,
        ):
            await client.initialize()
            yield client

    app = kit.server.streamable_http_app()
    with anyio.fail_after(20):
        async with (
            kit.lowlevel.session_manager.run(),
            uvicorn_serving(lambda _port: app) as (_, port),
        ):
            assert kit.gate.is_running
            url = f"http://127.0.0.1:{port}/mcp"
            async with (
                session(url, a) as client_a,
                session(url, b) as client_b,
                anyio.create_task_group() as tg,
            ):
                tg.start_soon(call, client_a, "a1")
                await a.until(lambda: a.waiting == 1)
                tg.start_soon(call, client_b, "b1")
                await a.until(lambda: a.withdrawn == ["Delete a1?"])
                await b.until(lambda: b.waiting == 1)
                b.release.set()
        assert not kit.gate.is_running
    assert denial(results["a1"])["detail"] == "evicted to make room on this server"
    assert text(results["b1"]) == "deleted b1"
    assert kit.ran == [("delete_file", "b1")]


@asynccontextmanager
async def http_served(kit: Kit) -> AsyncIterator[str]:
    """``kit``'s server over Streamable HTTP, as its framework serves it (uvicorn on
    127.0.0.1; the SDK's session manager, or fastmcp's app and its lifespan, which run the
    server's lifespan and so enter the gate): the URL of its endpoint."""
    if kit.framework == "fastmcp":
        app = kit.server.http_app()
        serving = app.router.lifespan_context(app)
    else:
        app = kit.server.streamable_http_app()
        serving = kit.lowlevel.session_manager.run()
    async with serving, uvicorn_serving(lambda _port: app) as (_, port):
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # uvicorn runs on asyncio
@pytest.mark.parametrize("http_framework", list(KITS))
@pytest.mark.parametrize("approve", [True, False], ids=["approved", "declined"])
async def test_R_ADAPT_9_a_default_mode_client_over_http_is_asked(
    http_framework: str, approve: bool
) -> None:
    """Each framework's server over Streamable HTTP (uvicorn on 127.0.0.1) and
    ``mcp.Client(url)`` in its default mode: each POST is a 2026-07-28 request; the approval
    rides the input-required result and its retry, and the tool runs once, or not at all on a
    decline."""
    kit = KITS[http_framework](ask_for_delete)
    asked = Asked(APPROVE if approve else types.ElicitResult(action="decline"))
    with anyio.fail_after(20):
        async with http_served(kit) as url:
            async with Client(url, elicitation_callback=asked) as official:
                assert official.session.protocol_version == "2026-07-28"
                assert text(await official.call_tool("read_file", {"path": "r"})) == "read r"
                result = await official.call_tool("delete_file", {"path": "a.txt"})
            assert settled(kit)
    assert asked.asked == ["Delete a.txt?"]
    if approve:
        assert text(result) == "deleted a.txt"
        assert kit.ran == [("read_file", "r"), ("delete_file", "a.txt")]
    else:
        assert denial(result)["detail"] == "declined"
        assert kit.ran == [("read_file", "r")]


# -- over stdio, a server of its own ------------------------------------------------------------


@pytest.mark.parametrize("example", ["guard_sdk_server", "guard_fastmcp_server"])
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("approve", [True, False], ids=["approved", "declined"])
async def test_R_ADAPT_9_a_default_mode_client_over_stdio_is_asked(
    example: str, approve: bool
) -> None:
    """Each example run as its own process over stdio (``server.run()``: serving enters the
    gate) and the official ``mcp.Client`` in its default mode: the 2026-07-28 revision is
    discovered, ``read_file`` runs at once, ``delete_file`` asks through the input-required
    result and runs on an approval only."""
    asked = Asked(APPROVE if approve else types.ElicitResult(action="decline"))
    server = StdioServerParameters(command=sys.executable, args=[str(EXAMPLES / f"{example}.py")])
    with anyio.fail_after(30):
        async with Client(server, elicitation_callback=asked) as official:
            assert official.session.protocol_version == "2026-07-28"
            assert text(await official.call_tool("read_file", {"path": "r"})) == "read r"
            result = await official.call_tool("delete_file", {"path": "a.txt"})
    assert asked.asked == ["Delete a.txt?"]
    if approve:
        assert text(result) == "deleted a.txt"
    else:
        deny = denial(result)
        assert (deny["decision"], deny["detail"]) == ("ask", "declined")


# -- the gate itself, driven without a framework ------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_R_ADAPT_2_a_reused_id_is_refused_and_the_first_call_keeps_its_answer() -> None:
    """Two calls with one id on one connection (which a framework may let through): the second
    is the reducer's ``-32600`` (R-ADM-1), the first still gets its own answer."""
    release = anyio.Event()
    started = anyio.Event()

    async def slow_policy(_tool: str, _arguments: Any, _context: Any) -> object:
        started.set()
        await release.wait()
        return Allow()

    async def tool() -> dict[str, Any]:
        return {"name": "echo", "inputSchema": {"type": "object"}}

    async def run(arguments: object, _round: object) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": repr(arguments)}]}

    async def elicit(_message: str, _schema: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("nobody is asked here")

    connection = object()
    site = CallSite(connection, dict, False, lambda _callback: None, tool, run, elicit)
    gate = Gate(slow_policy, check_invariants=True)
    answers: list[dict[str, Any]] = []

    async def first() -> None:
        answers.append(await gate.call(site, 7, "echo", {"n": 1}))

    with anyio.fail_after(10):
        async with gate.running(), anyio.create_task_group() as tg:
            tg.start_soon(first)
            await started.wait()
            with pytest.raises(GateError) as refused:
                await gate.call(site, 7, "echo", {"n": 2})
            release.set()
    assert refused.value.code == -32600
    assert answers == [{"content": [{"type": "text", "text": "{'n': 1}"}]}]


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_R_ADAPT_6_a_timeout_or_a_cancelled_request_kills_the_tool() -> None:
    """A guarded call runs its authorizer and then its tool (also when an approval comes back
    through the elicitation); a callback timeout kills the tool (the call is answered, the
    serving task goes on), and so does the request's own cancellation (R-ADAPT-6): nothing is
    left running or owed."""
    tasks: list[str] = []
    cancelled: list[str] = []
    started, stopped = anyio.Event(), anyio.Event()

    async def policy(tool: str, _arguments: Any, _context: Any) -> object:
        tasks.append("authorizer")
        return Ask("Run it?") if tool == "asked" else Allow()

    async def run(arguments: object, _round: object) -> dict[str, Any]:
        tasks.append("tool")
        if arguments == {"hang": True}:
            started.set()
            try:
                await anyio.sleep_forever()
            finally:
                cancelled.append("tool")
                stopped.set()
        return {"content": [{"type": "text", "text": "ran"}]}

    async def elicit(_message: str, _schema: dict[str, Any]) -> dict[str, Any]:
        return {"action": "accept", "content": {"approve": True}}

    connection = object()

    def site(name: str) -> CallSite:
        async def tool() -> dict[str, Any]:
            return {"name": name, "inputSchema": {"type": "object"}}

        capabilities: dict[str, Any] = {"elicitation": {"form": {}}}
        return CallSite(connection, lambda: capabilities, True, lambda _: None, tool, run, elicit)

    gate = Gate(policy, callback_timeout_ms=300, check_invariants=True)

    async def served(request_id: int, name: str, arguments: object) -> dict[str, Any]:
        tasks.clear()
        answer = await gate.call(site(name), request_id, name, arguments)
        assert tasks == ["authorizer", "tool"]
        return answer

    with anyio.fail_after(10):
        async with gate.running():
            assert await served(1, "allowed", {}) == {"content": [{"type": "text", "text": "ran"}]}
            assert await served(2, "asked", {}) == {"content": [{"type": "text", "text": "ran"}]}
            timed_out = await served(3, "allowed", {"hang": True})
            assert timed_out["structuredContent"] == {"error": "callback_timeout"}
            await stopped.wait()  # its task is cancelled, the call already answered
            assert cancelled == ["tool"]
            async with anyio.create_task_group() as tg:
                started, stopped = anyio.Event(), anyio.Event()
                tg.start_soon(gate.call, site("allowed"), 4, "allowed", {"hang": True})
                await started.wait()
                tg.cancel_scope.cancel()
            await stopped.wait()
            assert cancelled == ["tool", "tool"]
            state = gate.runtime.state
            assert not state.calls
            assert not state.workers
            assert not gate.runtime.live_workers


def test_a_gate_refuses_unknown_options_and_a_gate_given_twice() -> None:
    with pytest.raises(TypeError, match="unknown gate options: page_size"):
        Gate(None, page_size=3)
    with pytest.raises(OptionError):
        Gate(None, max_parked_elicitations=0)
    kit = KITS["lowlevel"](None)
    with pytest.raises(TypeError, match="either a gate"):
        sdk_guard(kit.server, ask_for_delete, gate=kit.gate)
