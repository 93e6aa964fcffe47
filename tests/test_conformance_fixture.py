"""examples/conformance_server.py, the fixture `make conformance` runs the official suite
against: it registers every name the suite's server scenarios call, passes the deployment
guard, and answers them over Streamable HTTP (here with the official SDK client; the suite
itself needs Node and a download, so it is `make conformance`, not `make test`).

The server listens on 127.0.0.1 on a port the kernel chose, through a socket bound and
listening before uvicorn starts; every wait is on a message, under a deadline.
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
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import StdioServerParameters
from pydantic import FileUrl

from askgate import Allow, Ask, Deny
from askgate.core import http as rules
from askgate.server import Context
from askgate.transports.http import HttpApp

from .harness import without_digest
from .listener import uvicorn_serving

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

DEADLINE = 20.0
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# The names of ../shared/reference/mcp.md section 5.3 (the suite's server scenarios).
TOOLS = {
    "test_simple_text",
    "test_image_content",
    "test_audio_content",
    "test_embedded_resource",
    "test_multiple_content_types",
    "test_tool_with_logging",
    "test_tool_with_progress",
    "test_error_handling",
    "test_sampling",
    "test_elicitation",
    "test_elicitation_sep1034_defaults",
    "test_elicitation_sep1330_enums",
    "json_schema_2020_12_tool",
    "test_reconnection",
    # 2026-07-28 (conformance --requirements 2026-07-28)
    "test_missing_capability",
    "test_logging_tool",
    "test_streaming_elicitation",
    "test_input_required_result_elicitation",
    "test_input_required_result_sampling",
    "test_input_required_result_list_roots",
    "test_input_required_result_request_state",
    "test_input_required_result_multiple_inputs",
    "test_input_required_result_multi_round",
    "test_input_required_result_tampered_state",
    "test_input_required_result_capabilities",
    "askgate_approved_round",
    "test_custom_header",
    # the tasks extension's (spec/tasks.md)
    "greet",
    "slow_compute",
    "failing_job",
    "protocol_error_job",
    "confirm_delete",
    "multi_input",
    "test_tool_with_task",
    "askgate_task_round",
    "askgate_task_approval",
}
RESOURCES = {"test://static-text", "test://static-binary", "test://watched-resource"}
TEMPLATES = {"test://template/{id}/data"}
PROMPTS = {
    "test_simple_prompt",
    "test_prompt_with_arguments",
    "test_prompt_with_embedded_resource",
    "test_prompt_with_image",
    "test_input_required_result_prompt",
}


def _fixture() -> ModuleType:
    return _example("conformance_server")


def _example(name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn runs on asyncio


@asynccontextmanager
async def serving() -> AsyncIterator[tuple[HttpApp, str]]:
    """The fixture's server over HTTP on 127.0.0.1, a free port; yields the app and its URL."""
    server = _fixture().build_server()

    def make(port: int) -> HttpApp:
        return HttpApp(server, options=rules.HttpOptions(port=port))

    async with uvicorn_serving(make) as (app, port), app.running():
        yield app, f"http://127.0.0.1:{port}/mcp"


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def test_the_fixture_passes_the_deployment_guard_and_runs_only_the_suites_tools() -> None:
    fixture = _fixture()
    HttpApp(fixture.build_server())  # R-HTTP-13: both authorizers are configured
    context = Context("conn", "http")
    assert fixture.allow_test_tools("test_sampling", {}, context) == Allow()
    assert fixture.allow_test_tools("json_schema_2020_12_tool", {}, context) == Allow()
    assert isinstance(fixture.allow_test_tools("anything_else", {}, context), Deny)
    assert fixture.allow_reads("resources/read", {}, context) == Allow()
    rounds = fixture.allow_test_tools("test_input_required_result_multi_round", {}, context)
    assert rounds == Allow()  # its questions are its own rounds (R-MRTR-20)
    asked = fixture.allow_test_tools("askgate_approved_round", {}, context)
    assert asked == Ask("Allow askgate_approved_round to run?")


@pytest.mark.anyio
async def test_the_fixture_lists_and_answers_what_the_suite_calls() -> None:
    async with serving() as (_, url):
        with anyio.fail_after(DEADLINE):
            async with Client(url, mode="legacy") as client:
                tools = (await client.list_tools()).tools
                assert {tool.name for tool in tools} == TOOLS
                schema = next(t for t in tools if t.name == "json_schema_2020_12_tool")
                assert schema.input_schema["$defs"]["address"]["$anchor"] == "addressDef"
                resources = (await client.list_resources()).resources
                assert {str(r.uri) for r in resources} == RESOURCES
                templates = (await client.list_resource_templates()).resource_templates
                assert {t.uri_template for t in templates} == TEMPLATES
                prompts = (await client.list_prompts()).prompts
                assert {p.name for p in prompts} == PROMPTS

                simple = await client.call_tool("test_simple_text")
                assert _text(simple) == "This is a simple text response for testing."
                failing = await client.call_tool("test_error_handling")
                assert failing.is_error
                assert _text(failing)
                mixed = (await client.call_tool("test_multiple_content_types")).content
                assert [block.type for block in mixed] == ["text", "image", "resource"]
                audio = (await client.call_tool("test_audio_content")).content[0]
                assert isinstance(audio, types.AudioContent)
                assert audio.mime_type == "audio/wav"

                read = (await client.read_resource("test://template/123/data")).contents[0]
                assert isinstance(read, types.TextResourceContents)
                assert "123" in read.text
                binary = (await client.read_resource("test://static-binary")).contents[0]
                assert isinstance(binary, types.BlobResourceContents)
                assert binary.mime_type == "image/png"

                got = await client.get_prompt(
                    "test_prompt_with_arguments", {"arg1": "first", "arg2": "second"}
                )
                content = got.messages[0].content
                assert isinstance(content, types.TextContent)
                assert "first" in content.text
                assert "second" in content.text
                embedded = await client.get_prompt(
                    "test_prompt_with_embedded_resource", {"resourceUri": "test://example"}
                )
                assert embedded.messages[0].content.type == "resource"

                ref = types.PromptReference(type="ref/prompt", name="test_prompt_with_arguments")
                done = await client.complete(ref, {"name": "arg1", "value": "test"})
                assert done.completion.values == []
                await client.subscribe_resource("test://watched-resource")
                await client.unsubscribe_resource("test://watched-resource")
                await client.set_logging_level("debug")


class ClientSide:
    """The official SDK client's side of the suite's context scenarios: it answers sampling and
    elicitation as the suite's harness does, and records logs and progress."""

    def __init__(self) -> None:
        self.logs: list[object] = []
        self.progress: list[float] = []
        self.sampled: list[types.CreateMessageRequestParams] = []
        self.schemas: list[dict[str, Any]] = []

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params.data)

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        assert total == 100
        assert message
        self.progress.append(progress)

    async def sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        assert context.request_id is not None
        self.sampled.append(params)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="This is a test response from the client"),
            model="test-model",
            stop_reason="endTurn",
        )

    async def elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert context.request_id is not None
        assert isinstance(params, types.ElicitRequestFormParams)
        self.schemas.append(params.requested_schema)
        return types.ElicitResult(
            action="accept", content={"username": "testuser", "email": "test@example.com"}
        )


@pytest.mark.anyio
async def test_the_fixtures_context_tools_log_report_progress_sample_and_elicit() -> None:
    side = ClientSide()
    async with serving() as (_, url):
        with anyio.fail_after(DEADLINE):
            async with Client(
                url,
                mode="legacy",
                logging_callback=side.log,
                sampling_callback=side.sample,
                elicitation_callback=side.elicit,
            ) as client:
                await client.set_logging_level("debug")
                await client.call_tool("test_tool_with_logging")
                assert side.logs == [
                    "Tool execution started",
                    "Tool processing data",
                    "Tool execution completed",
                ]
                await client.call_tool(
                    "test_tool_with_progress", progress_callback=side.on_progress
                )
                assert side.progress == [0, 50, 100]

                sampled = await client.call_tool("test_sampling", {"prompt": "Say hi"})
                assert _text(sampled) == "LLM response: This is a test response from the client"
                [params] = side.sampled
                assert params.max_tokens == 100
                assert params.messages[0].content == types.TextContent(type="text", text="Say hi")

                elicited = await client.call_tool("test_elicitation", {"message": "Who?"})
                assert not elicited.is_error
                assert "testuser" in _text(elicited)
                assert side.schemas[0]["required"] == ["username", "email"]
                enums = await client.call_tool("test_elicitation_sep1330_enums")
                assert enums.content  # the harness checks the schema, recorded here
                properties = side.schemas[1]["properties"]
                assert set(properties) == {
                    "untitledSingle",
                    "titledSingle",
                    "legacyEnum",
                    "untitledMulti",
                    "titledMulti",
                }
                await client.call_tool("test_elicitation_sep1034_defaults")
                defaults = side.schemas[2]["properties"]
                assert defaults["age"] == {
                    "type": "integer",
                    "description": "User age",
                    "default": 30,
                }


@pytest.mark.anyio
async def test_a_client_without_sampling_gets_a_tool_error_saying_why() -> None:
    async with serving() as (_, url):
        with anyio.fail_after(DEADLINE):
            async with Client(url, mode="legacy") as client:
                refused = await client.call_tool("test_sampling", {"prompt": "hi"})
                assert refused.is_error
                assert _text(refused) == "sampling/createMessage failed: client_cannot_sample"


def _stdio_fixture() -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=[str(EXAMPLES / "conformance_server.py"), "--stdio"]
    )


class Answerer:
    """The official client's elicitation callback for the 2026-07-28 rounds: it records each
    form's message and answers the approval form with ``approve`` and any other form by filling
    each required field with ``"<field>-answer"`` (``true`` for a boolean)."""

    def __init__(self, approve: types.ElicitResult) -> None:
        self.approve = approve
        self.messages: list[str] = []

    async def __call__(
        self,
        context: ClientRequestContext,  # noqa: ARG002 (the protocol's parameter name)
        params: types.ElicitRequestParams,
    ) -> types.ElicitResult | types.ErrorData:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.messages.append(params.message)
        required = params.requested_schema["required"]
        if required == ["approve"]:
            return self.approve
        properties = params.requested_schema["properties"]
        content: dict[str, str | int | float | bool | list[str] | None] = {}
        for field in required:
            boolean = properties[field].get("type") == "boolean"
            content[str(field)] = True if boolean else f"{field}-answer"
        return types.ElicitResult(action="accept", content=content)


async def sample(
    context: ClientRequestContext,  # noqa: ARG001 (the protocol's parameter name)
    params: types.CreateMessageRequestParams,
) -> types.CreateMessageResult:
    """The official client's sampling callback: a model that echoes the question."""
    asked = params.messages[0].content
    assert isinstance(asked, types.TextContent)
    reply = types.TextContent(type="text", text=f"answer to {asked.text}")
    return types.CreateMessageResult(role="assistant", content=reply, model="echo")


async def roots(
    context: ClientRequestContext,  # noqa: ARG001 (the protocol's parameter name)
) -> types.ListRootsResult:
    """The official client's roots callback: one root."""
    return types.ListRootsResult(roots=[types.Root(uri=FileUrl("file:///work"), name="work")])


@asynccontextmanager
async def modern_client(transport: str, answerer: Answerer) -> AsyncIterator[Client]:
    """The official client in its default mode, on the fixture over ``transport``, with an
    elicitation, a sampling and a roots callback."""
    callbacks: dict[str, Any] = {
        "elicitation_callback": answerer,
        "sampling_callback": sample,
        "list_roots_callback": roots,
    }
    if transport == "stdio":
        async with Client(_stdio_fixture(), **callbacks) as client:
            yield client
        return
    async with serving() as (_, url), Client(url, **callbacks) as client:
        yield client


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_R_MRTR_20_the_fixtures_tools_ask_their_own_questions_in_rounds(
    transport: str,
) -> None:
    """The official client in its default mode negotiates 2026-07-28 with the fixture and
    answers each tool's own input-required rounds (a form, sampling, roots, several at once,
    two rounds, a prompt's) through its callbacks."""
    answers = Answerer(types.ElicitResult(action="accept", content={"approve": True}))
    with anyio.fail_after(DEADLINE):
        async with modern_client(transport, answers) as client:
            assert client.protocol_version == "2026-07-28"
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert tools == TOOLS
            # R-HTTP-47: over HTTP the client mirrors region as Mcp-Param-Region (base64 here).
            custom = await client.call_tool("test_custom_header", {"region": "Zürich"})
            assert _text(custom) == "region=Zürich query="
            greeted = await client.call_tool("test_input_required_result_elicitation")
            assert _text(greeted) == "Hello, name-answer!"
            sampled = await client.call_tool("test_input_required_result_sampling")
            assert _text(sampled) == "The model said: answer to What is the capital of France?"
            rooted = await client.call_tool("test_input_required_result_list_roots")
            assert _text(rooted) == "The client's roots: file:///work"
            several = await client.call_tool("test_input_required_result_multiple_inputs")
            assert _text(several) == "answer to Generate a greeting name-answer (1 roots)"
            two = await client.call_tool("test_input_required_result_multi_round")
            assert _text(two) == "name-answer likes color-answer"
            stated = await client.call_tool("test_input_required_result_request_state")
            assert _text(stated).startswith("state-ok")
            prompt = await client.get_prompt("test_input_required_result_prompt")
            block = prompt.messages[0].content
            assert isinstance(block, types.TextContent)
            assert block.text == "Use this context: context-answer"
    assert answers.messages == [
        "What is your name?",
        "What is your name?",
        "Step 1: What is your name?",
        "Step 2: What is your favorite color?",
        "Please confirm",
        "What context should the prompt use?",
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_R_MRTR_21_an_approved_tool_asks_its_own_question_without_asking_again(
    transport: str,
) -> None:
    """An asked tool's approval comes first (R-MRTR-12), then its own round; its round state
    says the approval was granted, so the approval is asked once. A decline runs nothing."""
    name = "askgate_approved_round"
    yes = Answerer(types.ElicitResult(action="accept", content={"approve": True}))
    with anyio.fail_after(DEADLINE):
        async with modern_client(transport, yes) as client:
            ran = await client.call_tool(name)
            assert not ran.is_error
            assert _text(ran) == "approved, then answered: name-answer"
            plain = await client.call_tool("test_logging_tool")
            assert _text(plain) == "Logging evaluated"
    approval, *rest = yes.messages
    assert [without_digest(approval), *rest] == [f"Allow {name} to run?", "What is your name?"]

    no = Answerer(types.ElicitResult(action="decline"))
    with anyio.fail_after(DEADLINE):
        async with modern_client(transport, no) as client:
            refused = await client.call_tool(name)
            assert refused.is_error
            assert refused.structured_content is not None
            assert refused.structured_content["detail"] == "declined"
    assert [without_digest(m) for m in no.messages] == [f"Allow {name} to run?"]


SUMMARY = """\
=== SUMMARY ===
✓ server-stateless: 30 passed, 0 failed
✗ input-required-result-basic-sampling: 0 passed, 2 failed
✗ tasks-lifecycle: 0 passed, 9 failed
✓ json-schema-2020-12: 2 passed, 0 failed

Total: 32 passed, 11 failed

Not scored for 2026-07-28: 2 scenario(s) run, 1 failing. These do not affect conformance.
  ✗ tasks-lifecycle (extension)
  ✓ json-schema-2020-12 (pending)
"""


def test_the_runner_counts_a_requirement_sets_scored_scenarios_apart() -> None:
    runner = _example("run_conformance")
    modern = runner.SUITES[2]
    assert modern.args == ("--requirements", "2026-07-28")
    assert len({suite.label for suite in runner.SUITES}) == 3  # one results folder each
    scenarios, unscored = runner.parse_summary(SUMMARY.splitlines())
    assert [s.name for s in scenarios] == [
        "server-stateless",
        "input-required-result-basic-sampling",
        "tasks-lifecycle",
        "json-schema-2020-12",
    ]
    assert unscored == {"tasks-lifecycle", "json-schema-2020-12"}
    failing = runner.Outcome(modern, 32, 11, 1, scenarios, unscored)
    assert failing.scored_failed == 2
    assert failing.failing == ("✗ input-required-result-basic-sampling: 0 passed, 2 failed",)
    assert not failing.ok
    passing = runner.Outcome(modern, 30, 9, 0, scenarios[:1] + scenarios[2:], unscored)
    assert passing.scored_failed == 0
    assert passing.ok  # the unscored extension's 9 failed checks cannot fail the run
