"""End to end: the official ``mcp`` SDK client over stdio against ``askgate serve --demo``.

The server runs as a subprocess on the same event loop kind as the client (asyncio and trio).
Nothing waits on a sleep: every wait is on a reply or an event, under a deadline.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import StdioServerParameters

from .harness import without_digest
from .stdio_peer import CANNOT_ASK, deny_payload, policy_denies

pytestmark = [
    pytest.mark.anyio,
    # send_ping is deprecated for the 2026-07-28 wire; askgate speaks the 2025 wire.
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

DEADLINE = 30.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


def demo(backend: str, *extra: str) -> StdioServerParameters:
    args = ["-m", "askgate", "serve", "--demo", "--backend", backend, *extra]
    return StdioServerParameters(command=sys.executable, args=args)


Answer = types.ElicitResult


class Asker:
    """An elicitation callback that records each prompt and answers with ``answer``."""

    def __init__(self, answer: Answer | None = None) -> None:
        self.answer = answer
        self.prompts: list[str] = []
        self.request_ids: list[object] = []
        self.asked = anyio.Event()
        self.release = anyio.Event()
        self.cancelled = anyio.Event()

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        self.prompts.append(params.message)
        self.request_ids.append(context.request_id)
        assert isinstance(params, types.ElicitRequestFormParams)
        assert params.requested_schema["required"] == ["approve"]
        self.asked.set()
        if self.answer is not None:
            return self.answer
        try:
            await self.release.wait()  # until the test lets go (or the server withdraws it)
        except anyio.get_cancelled_exc_class():
            self.cancelled.set()
            raise
        return Answer(action="cancel")


@asynccontextmanager
async def connect(
    backend: str, *extra: str, asker: Asker | None = None, mode: str = "legacy"
) -> AsyncIterator[Client]:
    with anyio.fail_after(DEADLINE):
        async with Client(demo(backend, *extra), mode=mode, elicitation_callback=asker) as client:
            yield client


def structured(result: types.CallToolResult) -> Any:
    """The structured content, checked to be the JSON of the text content as well."""
    assert result.structured_content is not None
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    assert json.loads(block.text) == result.structured_content
    return result.structured_content


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_an_approved_call_runs_the_tool(anyio_backend: str) -> None:
    asker = Asker(Answer(action="accept", content={"approve": True}))
    async with connect(anyio_backend, asker=asker) as client:
        result = await client.call_tool("guarded_echo", {"text": "hello"})
        assert not result.is_error
        assert text(result) == "hello"
        deleted = await client.call_tool("delete_file", {"path": "/tmp/x"})
        assert text(deleted) == "pretended to delete /tmp/x"
    assert [without_digest(p) for p in asker.prompts] == [
        'Allow guarded_echo to echo "hello"?',
        'Allow delete_file to delete "/tmp/x"? (the demo only pretends)',
    ]
    first, second = asker.request_ids
    assert isinstance(first, str)
    assert first.startswith("askgate-elicit-")
    assert first != second


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        (Answer(action="decline"), "declined"),
        (Answer(action="cancel"), "cancelled"),
        (Answer(action="accept", content={"approve": False}), "not approved"),
    ],
)
async def test_decline_cancel_and_unapproved_accept_deny_with_the_wire_shape(
    anyio_backend: str, answer: Answer, detail: str
) -> None:
    asker = Asker(answer)
    async with connect(anyio_backend, asker=asker) as client:
        result = await client.call_tool("guarded_echo", {"text": "hello"})
    assert result.is_error
    assert structured(result) == deny_payload("guarded_echo", "ask", detail)
    assert len(asker.prompts) == 1


async def test_an_unanswered_prompt_times_out_into_the_deny(anyio_backend: str) -> None:
    asker = Asker()  # never answers on its own
    async with connect(anyio_backend, "--elicitation-timeout-ms", "300", asker=asker) as client:
        result = await client.call_tool("guarded_echo", {"text": "hello"})
        assert structured(result) == deny_payload(
            "guarded_echo", "ask", "elicitation timed out", "no one approved it within 300 ms"
        )
        # The server withdrew its prompt (R-CLOSE-4): the SDK cancelled the callback.
        with anyio.fail_after(DEADLINE):
            await asker.cancelled.wait()


async def test_a_denied_tool_gets_the_policy_reason(anyio_backend: str) -> None:
    async with connect(anyio_backend, asker=Asker()) as client:
        result = await client.call_tool("forbidden", {})
    assert structured(result) == deny_payload(
        "forbidden", "deny", "forbidden by policy", policy_denies("forbidden by policy")
    )


async def test_a_client_without_an_elicitation_callback_gets_the_deny_on_ask(
    anyio_backend: str,
) -> None:
    seen: list[Any] = []

    async def watch(message: Any) -> None:
        seen.append(message)

    with anyio.fail_after(DEADLINE):
        async with Client(demo(anyio_backend), mode="legacy", message_handler=watch) as client:
            result = await client.call_tool("guarded_echo", {"text": "hello"})
    # The detail is the prompt itself: the client was never asked (an elicitation/create would
    # have been refused by this SDK and ended as "elicitation failed").
    assert structured(result) == deny_payload(
        "guarded_echo", "ask", 'Allow guarded_echo to echo "hello"?', CANNOT_ASK
    )
    assert not any("elicitation" in repr(message) for message in seen)


async def test_cancelling_a_parked_call_drops_it_and_withdraws_the_prompt(
    anyio_backend: str,
) -> None:
    asker = Asker()
    async with connect(anyio_backend, asker=asker) as client:
        outcome: list[types.CallToolResult] = []
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    outcome.append(await client.call_tool("guarded_echo", {"text": "x"}))

                tg.start_soon(call)
                await asker.asked.wait()
                tg.cancel_scope.cancel()  # the SDK sends notifications/cancelled for the call
            await asker.cancelled.wait()  # the server dropped it and withdrew the prompt
        assert outcome == []
        # The connection goes on: a new call is asked about afresh.
        asker.answer = Answer(action="accept", content={"approve": True})
        result = await client.call_tool("guarded_echo", {"text": "again"})
        assert text(result) == "again"
        assert len(asker.prompts) == 2


async def test_a_slow_tool_does_not_block_ping(anyio_backend: str) -> None:
    async with connect(anyio_backend) as client:
        finished = anyio.Event()
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tg:

                async def slow() -> None:
                    await client.call_tool("sleep", {"ms": 600_000})
                    finished.set()

                tg.start_soon(slow)
                for _ in range(3):
                    await client.send_ping()
                listed = await client.list_tools()
                assert not finished.is_set()
                tg.cancel_scope.cancel()
        assert "sleep" in {tool.name for tool in listed.tools}
        quick = await client.call_tool("sleep", {"ms": 1})
        assert text(quick) == "slept 1ms"


ASK_BEFORE_SLEEP = """
[[tools]]
match = "sleep"
decision = "ask"
prompt = "Sleep for {args.ms} ms?"

[[tools]]
match = "*"
decision = "allow"

[[reads]]
match = "*"
decision = "allow"
"""


async def test_an_approved_slow_tool_does_not_block_ping(
    anyio_backend: str, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(ASK_BEFORE_SLEEP)
    asker = Asker(Answer(action="accept", content={"approve": True}))
    async with connect(anyio_backend, "--policy", str(policy), asker=asker) as client:
        finished = anyio.Event()
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tg:

                async def approved_and_slow() -> None:
                    await client.call_tool("sleep", {"ms": 600_000})
                    finished.set()

                tg.start_soon(approved_and_slow)
                await asker.asked.wait()
                # The approval is on its way: pings are answered while the tool runs.
                for _ in range(3):
                    await client.send_ping()
                assert text(await client.call_tool("echo", {"text": "meanwhile"})) == "meanwhile"
                assert not finished.is_set()
                tg.cancel_scope.cancel()
    shown = [without_digest(p) for p in asker.prompts]
    assert shown == ["Sleep for 600000 ms?"]  # R-POL-3: a number, unquoted


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_R_MRTR_9_the_sdk_connects_in_legacy_mode_with_initialize_and_in_auto_mode_modern(
    anyio_backend: str, mode: str
) -> None:
    asker = Asker(Answer(action="accept", content={"approve": True}))
    async with connect(anyio_backend, asker=asker, mode=mode) as client:
        # legacy: initialize selects 2025-11-25; auto: server/discover picks 2026-07-28.
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        assert client.server_info is not None
        assert client.server_info.name == "askgate-demo"
        assert client.instructions is not None
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert tools == {"echo", "guarded_echo", "delete_file", "sleep", "crash"}
        assert text(await client.call_tool("echo", {"text": "hi"})) == "hi"
        assert text(await client.call_tool("guarded_echo", {"text": "ok"})) == "ok"
        resource = await client.read_resource("demo://status")
        contents = resource.contents[0]
        assert isinstance(contents, types.TextResourceContents)
        assert json.loads(contents.text)["status"] == "ok"
        prompt = await client.get_prompt("greeting", {"name": "Ada"})
        message = prompt.messages[0].content
        assert isinstance(message, types.TextContent)
        assert "Ada" in message.text


async def test_a_crashing_tool_answers_callback_failed_without_its_text(
    anyio_backend: str,
) -> None:
    async with connect(anyio_backend) as client:
        result = await client.call_tool("crash", {})
        assert result.is_error
        assert structured(result) == {"error": "callback_failed"}
        assert text(await client.call_tool("echo", {"text": "still here"})) == "still here"


async def test_R_POL_2_the_official_client_lists_and_calls_with_a_policy_without_reads(
    anyio_backend: str, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[[tools]]\nmatch = "echo"\ndecision = "allow"\n')
    async with connect(anyio_backend, "--policy", str(policy), mode="auto") as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == {"echo"}
        assert text(await client.call_tool("echo", {"text": "hi"})) == "hi"


async def test_R_MRTR_13_the_sdk_in_default_mode_approves_and_declines_through_input_required(
    anyio_backend: str,
) -> None:
    """The official client's default mode: its elicitation callback answers the input-required
    result, and its retry runs the tool only when approved."""
    answers = iter([Answer(action="accept", content={"approve": True}), Answer(action="decline")])
    asked: list[tuple[object, str]] = []

    async def ask(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        assert params.requested_schema["required"] == ["approve"]
        asked.append((context.request_id, params.message))
        return next(answers)

    with anyio.fail_after(DEADLINE):
        async with Client(demo(anyio_backend), elicitation_callback=ask) as client:
            assert client.protocol_version == "2026-07-28"
            assert text(await client.call_tool("guarded_echo", {"text": "ok"})) == "ok"
            declined = await client.call_tool("guarded_echo", {"text": "no"})
            assert structured(declined) == deny_payload("guarded_echo", "ask", "declined")
            assert [key for key, _ in asked] == ["approval", "approval"]
            assert "guarded_echo" in asked[0][1]
            denied = await client.call_tool("forbidden", {})
            assert structured(denied)["decision"] == "deny"


async def test_R_MRTR_16_the_sdk_in_default_mode_without_a_callback_gets_the_deny_on_ask(
    anyio_backend: str,
) -> None:
    with anyio.fail_after(DEADLINE):
        async with Client(demo(anyio_backend)) as client:
            assert client.protocol_version == "2026-07-28"
            result = await client.call_tool("guarded_echo", {"text": "x"})
            assert structured(result)["message"].endswith(CANNOT_ASK)


def modern_server(backend: str) -> StdioServerParameters:
    args = ["-m", "tests.modern_server", "--backend", backend]
    return StdioServerParameters(command=sys.executable, args=args, cwd=str(ROOT))


ROOT = Path(__file__).resolve().parent.parent


async def test_R_MRTR_17_a_tool_s_own_question_is_refused_in_default_mode_asked_in_legacy(
    anyio_backend: str,
) -> None:
    """The official client's default mode: the tool's ``ctx.elicit`` fails with
    ``stateless_request`` and its callback is never called; in legacy mode it is asked."""
    asked: list[str] = []

    async def answer(
        context: ClientRequestContext,  # noqa: ARG001 (the callback's signature)
        params: types.ElicitRequestParams,
    ) -> types.ElicitResult:
        asked.append(params.message)
        return Answer(action="decline")

    with anyio.fail_after(DEADLINE):
        server = modern_server(anyio_backend)
        async with Client(server, elicitation_callback=answer) as client:
            assert client.protocol_version == "2026-07-28"
            assert text(await client.call_tool("asks", {})) == "refused: stateless_request"
            assert asked == []
        async with Client(server, mode="legacy", elicitation_callback=answer) as client:
            assert text(await client.call_tool("asks", {})) == "answered: decline"
            assert asked == ["Your name?"]


async def test_R_MRTR_18_logs_reach_the_sdk_only_at_the_level_its_requests_carry(
    anyio_backend: str,
) -> None:
    received: list[tuple[str, object]] = []

    async def log(params: types.LoggingMessageNotificationParams) -> None:
        received.append((params.level, params.data))

    with anyio.fail_after(DEADLINE):
        server = modern_server(anyio_backend)
        async with Client(server, logging_callback=log) as client:  # no log_level: no opt-in
            assert client.protocol_version == "2026-07-28"
            assert text(await client.call_tool("logs", {})) == "logged"
        assert received == []
        async with Client(server, logging_callback=log, log_level="info") as client:
            assert text(await client.call_tool("logs", {})) == "logged"
        assert received == [("info", "at info"), ("error", "at error")]


async def test_R_MRTR_19_the_sdk_listens_for_tool_list_changes(anyio_backend: str) -> None:
    with anyio.fail_after(DEADLINE):
        async with Client(modern_server(anyio_backend)) as client:
            assert client.protocol_version == "2026-07-28"
            async with client.listen(
                tools_list_changed=True, resource_subscriptions=["x://y"]
            ) as sub:
                assert sub.honored.tools_list_changed is True
                assert not sub.honored.resource_subscriptions
                assert text(await client.call_tool("grows", {})) == "grew"
                event = await sub.__anext__()
                assert type(event).__name__ == "ToolsListChanged"
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert "grown" in tools
