"""The fixture of the official MCP conformance suite: askgate serving every tool, resource,
prompt and completion the suite's server scenarios call, over Streamable HTTP on loopback.

::

    python examples/conformance_server.py --port 3901      # http://127.0.0.1:3901/mcp
    python examples/conformance_server.py --stdio          # the same server on stdin/stdout

``make conformance`` starts it on a free port and runs ``@modelcontextprotocol/conformance``
against it (``examples/run_conformance.py``). The names and behaviour follow the suite's
scenarios (``../shared/reference/mcp.md`` section 5.3). A network transport refuses to start
unguarded (R-HTTP-13), so the fixture configures both authorizers: the ``test_*`` tools (and
the JSON Schema 2020-12 tool) are allowed, ``askgate_approved_round`` is asked for (``Ask``),
any other tool is denied, every read is allowed. Serving goes through ``askgate serve
--http``'s own code path (askgate's HTTP/1.1 server, loopback-only principals, Host and
Origin checks on the bound port).

The 2026-07-28 input-required tools (``test_input_required_result_*``), the prompt
``test_input_required_result_prompt`` and ``test_missing_capability`` ask their own questions
through input-required rounds (spec/modern.md, R-MRTR-20 .. R-MRTR-24): each raises
:class:`askgate.InputRequired` with its input requests (and a state of its own where the
scenario wants one) until the retry carries the answers it needs. askgate seals each round's
``requestState`` and takes it once; a request for a capability the client did not declare is
answered ``-32021``. ``askgate_approved_round`` shows both kinds together: its approval is
asked first (the key ``approval``), then its own question, without asking the approval again.
``test_custom_header`` marks its ``region`` parameter ``x-mcp-header``: a 2026-07-28 client
mirrors it as the ``Mcp-Param-Region`` header, which askgate checks against the body
(R-HTTP-47).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any

import anyio

from askgate import (
    Allow,
    Ask,
    ClientRequestError,
    Context,
    Deny,
    InputRequired,
    Server,
    elicitation_request,
    roots_request,
    sampling_request,
)
from askgate.core import Decision

# A 1x1 PNG and a tiny WAV, as the suite's reference fixtures send them.
PNG_BASE64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAF"
    "BQIAX8jx0gAAAABJRU5ErkJggg=="
)
WAV_BASE64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
STEP_S = 0.05
"""The pause between a tool's log messages or progress reports (the suite expects them spread)."""
RECONNECT_S = 0.1
"""How long ``test_reconnection`` runs on after closing its stream (the suite's own fixture's)."""

SCHEMA_2020_12_TOOL = "json_schema_2020_12_tool"
SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}

CUSTOM_HEADER_TOOL = "test_custom_header"
CUSTOM_HEADER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "region": {
            "type": "string",
            "description": "Mirrored by a 2026-07-28 client as the header Mcp-Param-Region",
            "x-mcp-header": "Region",
        },
        "query": {"type": "string", "description": "Not mirrored"},
    },
    "required": ["region"],
}
"""R-HTTP-47: a parameter marked ``x-mcp-header``, for ``http-custom-header-server-validation``."""

APPROVED_ROUND_TOOL = "askgate_approved_round"
"""askgate's own: asked for (R-MRTR-12), then a round of its own (R-MRTR-21)."""


TASK_TOOLS = frozenset(
    {"greet", "slow_compute", "failing_job", "protocol_error_job", "confirm_delete", "multi_input"}
)
"""The tasks extension's fixtures (spec/tasks.md); ``test_tool_with_task`` is a ``test_`` tool."""
TASK_INLINE_MS = 100
"""The fixture's inline window (R-TASK-4): the suite expects a 1-second tool to become a task."""
TASK_ROUND_TOOL = "askgate_task_round"
"""askgate's own: works past the inline window, then ends a round of its own (R-TASK-11)."""
TASK_APPROVAL_TOOL = "askgate_task_approval"
"""askgate's own: its approval is asked past the inline window, so inside a task (R-TASK-10)."""
PAST_THE_WINDOW_S = 0.3
"""How long the two tools above work (or their authorizer thinks) before they ask: past
:data:`TASK_INLINE_MS`."""


def allow_test_tools(tool: str, _arguments: object, _context: Context) -> Decision:
    """The tool authorizer: the suite's tools run, askgate's approved-round tool once approved,
    nothing else does."""
    if tool == APPROVED_ROUND_TOOL:
        return Ask(f"Allow {tool} to run?")
    if tool.startswith("test_") or tool == SCHEMA_2020_12_TOOL or tool in TASK_TOOLS:
        return Allow()
    if tool == TASK_ROUND_TOOL:
        return Allow()
    return Deny(f"{tool} is not a conformance tool")


async def authorize(tool: str, arguments: object, context: Context) -> Decision:
    """The fixture's authorizer: :func:`allow_test_tools`, but the task-approval tool is asked
    for after :data:`PAST_THE_WINDOW_S`, so that its approval is asked inside a task."""
    if tool == TASK_APPROVAL_TOOL:
        await anyio.sleep(PAST_THE_WINDOW_S)
        return Ask(f"Allow {tool} to run?")
    return allow_test_tools(tool, arguments, context)


def allow_reads(_method: str, _params: object, _context: Context) -> Decision:
    """The read authorizer: every listing, read, prompt, completion and setLevel is allowed."""
    return Allow()


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _image() -> dict[str, Any]:
    return {"type": "image", "data": PNG_BASE64, "mimeType": "image/png"}


def _embedded(uri: str, mime_type: str, text: str) -> dict[str, Any]:
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime_type, "text": text}}


def _refused(what: str, failed: ClientRequestError) -> dict[str, Any]:
    """A tool result saying why the client request failed (its reason, or the client's error)."""
    why = failed.reason or f"{failed.message} ({failed.code})"
    return {"isError": True, "content": [_text(f"{what} failed: {why}")]}


async def _elicited(
    ctx: Context, prefix: str, message: str, schema: dict[str, Any]
) -> str | dict[str, Any]:
    """Asks the client to fill ``schema``; says what it answered, or why asking failed."""
    try:
        result = await ctx.elicit(message, schema)
    except ClientRequestError as failed:
        return _refused("elicitation/create", failed)
    action = result.get("action")
    content = result.get("content") if action == "accept" else {}
    return f"{prefix}: action={action}, content={json.dumps(content, sort_keys=True)}"


def _form(message: str, field: str, kind: str = "string") -> dict[str, Any]:
    """A form elicitation asking for one required ``field``."""
    schema = {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}
    return elicitation_request(message, schema)


def _sampling(text: str, max_tokens: int) -> dict[str, Any]:
    messages = [{"role": "user", "content": _text(text)}]
    return sampling_request({"messages": messages, "maxTokens": max_tokens})


def _accepted(answer: object, field: str) -> object:
    """The value of ``field`` in an accepted elicitation's content, or None."""
    if not isinstance(answer, dict) or answer.get("action") != "accept":
        return None
    content = answer.get("content")
    return content.get(field) if isinstance(content, dict) else None


def _sampled(answer: object) -> str | None:
    """The text a sampling answer carries, or None."""
    content = answer.get("content") if isinstance(answer, dict) else None
    text = content.get("text") if isinstance(content, dict) else None
    return text if isinstance(text, str) else None


def _roots(answer: object) -> list[str] | None:
    """The URIs a ``roots/list`` answer carries, or None."""
    roots = answer.get("roots") if isinstance(answer, dict) else None
    if not isinstance(roots, list):
        return None
    return [str(root.get("uri")) for root in roots if isinstance(root, dict)]


def _register_rounds(server: Server) -> None:
    """The 2026-07-28 scenarios' tools and prompt that ask their own questions in rounds."""

    @server.tool()
    async def test_input_required_result_elicitation(ctx: Context) -> str:
        """Asks the user's name in an input-required round, then greets them"""
        name = _accepted(ctx.input_responses.get("user_name"), "name")
        if not isinstance(name, str):
            raise InputRequired({"user_name": _form("What is your name?", "name")})
        return f"Hello, {name}!"

    @server.tool()
    async def test_input_required_result_sampling(ctx: Context) -> str:
        """Asks the client's model a question in an input-required round"""
        text = _sampled(ctx.input_responses.get("capital_question"))
        if text is None:
            question = _sampling("What is the capital of France?", 100)
            raise InputRequired({"capital_question": question})
        return f"The model said: {text}"

    @server.tool()
    async def test_input_required_result_list_roots(ctx: Context) -> str:
        """Asks the client's roots in an input-required round"""
        roots = _roots(ctx.input_responses.get("client_roots"))
        if roots is None:
            raise InputRequired({"client_roots": roots_request()})
        return f"The client's roots: {', '.join(roots) or 'none'}"

    @server.tool()
    async def test_input_required_result_request_state(ctx: Context) -> str:
        """Asks a confirmation with a state of its own, and checks it came back"""
        ok = _accepted(ctx.input_responses.get("confirm"), "ok")
        if ctx.round_state != {"asked": "confirm"} or not isinstance(ok, bool):
            form = _form("Please confirm", "ok", "boolean")
            raise InputRequired({"confirm": form}, state={"asked": "confirm"})
        return f"state-ok: confirmed={ok}"

    @server.tool()
    async def test_input_required_result_multiple_inputs(ctx: Context) -> str:
        """Asks a name, a greeting and the roots at once"""
        answers = ctx.input_responses
        name = _accepted(answers.get("user_name"), "name")
        greeting = _sampled(answers.get("greeting"))
        roots = _roots(answers.get("client_roots"))
        if not isinstance(name, str) or greeting is None or roots is None:
            requests = {
                "user_name": _form("What is your name?", "name"),
                "greeting": _sampling("Generate a greeting", 50),
                "client_roots": roots_request(),
            }
            raise InputRequired(requests, state={"asked": sorted(requests)})
        return f"{greeting} {name} ({len(roots)} roots)"

    @server.tool()
    async def test_input_required_result_multi_round(ctx: Context) -> str:
        """Asks a name, then a favourite colour, in two rounds"""
        state = ctx.round_state if isinstance(ctx.round_state, dict) else {}
        name = state.get("name")
        if not isinstance(name, str):
            name = _accepted(ctx.input_responses.get("step1"), "name")
            if not isinstance(name, str):
                step1 = _form("Step 1: What is your name?", "name")
                raise InputRequired({"step1": step1}, state={"round": 1})
        color = _accepted(ctx.input_responses.get("step2"), "color")
        if state.get("round") != 2 or not isinstance(color, str):
            step2 = _form("Step 2: What is your favorite color?", "color")
            raise InputRequired({"step2": step2}, state={"round": 2, "name": name})
        return f"{name} likes {color}"

    @server.tool()
    async def test_input_required_result_tampered_state(ctx: Context) -> str:
        """Asks a confirmation whose sealed state a tampered retry cannot pass"""
        ok = _accepted(ctx.input_responses.get("confirm"), "ok")
        if ctx.round_state != {"asked": "confirm"} or not isinstance(ok, bool):
            form = _form("Please confirm", "ok", "boolean")
            raise InputRequired({"confirm": form}, state={"asked": "confirm"})
        return f"state verified: confirmed={ok}"

    @server.tool()
    async def test_input_required_result_capabilities(ctx: Context) -> str:
        """Asks only what the request's client capabilities declare"""
        answers = ctx.input_responses
        declared = ctx.client_capabilities
        requests: dict[str, dict[str, Any]] = {}
        if "elicitation" in declared and _accepted(answers.get("name"), "name") is None:
            requests["name"] = _form("What is your name?", "name")
        if "sampling" in declared and _sampled(answers.get("greeting")) is None:
            requests["greeting"] = _sampling("Generate a greeting", 50)
        if requests:
            raise InputRequired(requests)
        return f"Asked only what was declared: {', '.join(sorted(declared)) or 'nothing'}"

    @server.tool(name=APPROVED_ROUND_TOOL)
    async def approved_round(ctx: Context) -> str:
        """Asked for first, then asks a name of its own"""
        name = _accepted(ctx.input_responses.get("name"), "name")
        if not isinstance(name, str):
            raise InputRequired({"name": _form("What is your name?", "name")})
        return f"approved, then answered: {name}"

    @server.prompt()
    async def test_input_required_result_prompt(ctx: Context) -> str:
        """A prompt that asks the user for its context in an input-required round"""
        context = _accepted(ctx.input_responses.get("user_context"), "context")
        if not isinstance(context, str):
            message = "What context should the prompt use?"
            raise InputRequired({"user_context": _form(message, "context")})
        return f"Use this context: {context}"


def _register_tasks(server: Server) -> None:
    """The tasks extension's fixtures (spec/tasks.md, the suite's ``tasks-*`` scenarios)."""

    @server.tool()
    async def greet(name: str) -> str:
        """Greets by name; never a task"""
        return f"Hello, {name}!"

    @server.tool(task_support="optional")
    async def slow_compute(seconds: float, label: str = "") -> str:
        """Sleeps the given seconds, then answers; a task when the client declares tasks"""
        await anyio.sleep(max(0.0, min(float(seconds), 120.0)))
        return f"computed {label} after {seconds}s"

    @server.tool(task_support="required")
    async def failing_job() -> dict[str, Any]:
        """Reports a tool error after about a second; always a task"""
        await anyio.sleep(1.0)
        return {"isError": True, "content": [_text("the job failed")]}

    @server.tool(task_support="optional")
    async def protocol_error_job() -> str:
        """Raises: askgate's own failure of the call (a failed task)"""
        await anyio.sleep(0.2)
        raise RuntimeError("the job crashed")

    @server.tool(task_support="optional")
    async def confirm_delete(ctx: Context, filename: str) -> str:
        """Asks for a confirmation, then answers"""
        schema = {"type": "object", "properties": {"confirm": {"type": "boolean"}}}
        answer = await ctx.elicit(f"Delete {filename}?", schema)
        return f"{filename}: {answer.get('action')}"

    @server.tool(task_support="optional")
    async def multi_input(ctx: Context) -> str:
        """Asks two questions at once, then answers"""
        schema = {"type": "object", "properties": {"name": {"type": "string"}}}
        async with anyio.create_task_group() as group:
            answers: list[object] = []

            async def ask(message: str) -> None:
                answers.append((await ctx.elicit(message, schema)).get("action"))

            group.start_soon(ask, "First?")
            group.start_soon(ask, "Second?")
        return f"answered: {answers}"

    @server.tool(task_support="required")
    async def test_tool_with_task(ctx: Context) -> str:
        """Asks a name in an input-required round, then works on as a task"""
        name = _accepted(ctx.input_responses.get("user_name"), "name")
        if not isinstance(name, str):
            raise InputRequired({"user_name": _form("What is your name?", "name")})
        await anyio.sleep(0.5)
        return f"Hello, {name}, from a task"

    @server.tool(name=TASK_ROUND_TOOL, task_support="optional")
    async def task_round(ctx: Context) -> str:
        """Works past the inline window, then asks a name in a round of its own"""
        name = _accepted(ctx.input_responses.get("who"), "name")
        if not isinstance(name, str):
            await anyio.sleep(PAST_THE_WINDOW_S)
            raise InputRequired({"who": _form("Who is asking?", "name")})
        return f"Hello, {name}, from a task's round"

    runs = 0

    @server.tool(name=TASK_APPROVAL_TOOL, task_support="optional")
    async def task_approval() -> str:
        """Counts its runs; its approval is asked inside a task"""
        nonlocal runs
        runs += 1
        return f"run {runs}"


def build_server() -> Server:
    """The fixture's server: the suite's tools, resources, prompts and completion."""
    server = Server(
        "askgate-conformance",
        instructions="The askgate fixture of the MCP conformance suite.",
        authorizer=authorize,
        read_authorizer=allow_reads,
        authorizer_source="configured",
        task_inline_ms=TASK_INLINE_MS,
    )

    # -- tools ------------------------------------------------------------------------------

    @server.tool()
    async def test_simple_text() -> str:
        """Tests simple text content response"""
        return "This is a simple text response for testing."

    @server.tool()
    async def test_image_content() -> list[dict[str, Any]]:
        """Tests image content response"""
        return [_image()]

    @server.tool()
    async def test_audio_content() -> list[dict[str, Any]]:
        """Tests audio content response"""
        return [{"type": "audio", "data": WAV_BASE64, "mimeType": "audio/wav"}]

    @server.tool()
    async def test_embedded_resource() -> list[dict[str, Any]]:
        """Tests embedded resource content response"""
        text = "This is an embedded resource content."
        return [_embedded("test://embedded-resource", "text/plain", text)]

    @server.tool()
    async def test_multiple_content_types() -> list[dict[str, Any]]:
        """Tests response with multiple content types (text, image, resource)"""
        data = json.dumps({"test": "data", "value": 123})
        return [
            _text("Multiple content types test:"),
            _image(),
            _embedded("test://mixed-content-resource", "application/json", data),
        ]

    @server.tool()
    async def test_error_handling() -> dict[str, Any]:
        """Tests error response handling"""
        return {"isError": True, "content": [_text("This tool intentionally returns an error")]}

    @server.tool()
    async def test_tool_with_logging(ctx: Context) -> str:
        """Tests tool that emits log messages during execution"""
        await ctx.log("info", "Tool execution started")
        await anyio.sleep(STEP_S)
        await ctx.log("info", "Tool processing data")
        await anyio.sleep(STEP_S)
        await ctx.log("info", "Tool execution completed")
        return "Tool with logging executed successfully"

    @server.tool()
    async def test_tool_with_progress(ctx: Context) -> str:
        """Tests tool that reports progress notifications"""
        for step in (0, 50, 100):
            if step:
                await anyio.sleep(STEP_S)
            await ctx.report_progress(step, 100, f"Completed step {step} of 100")
        return "Tool with progress executed successfully"

    @server.tool()
    async def test_sampling(prompt: str, ctx: Context) -> str | dict[str, Any]:
        """Tests server-initiated sampling (LLM completion request)"""
        params = {"messages": [{"role": "user", "content": _text(prompt)}], "maxTokens": 100}
        try:
            result = await ctx.sample(params)
        except ClientRequestError as failed:
            return _refused("sampling/createMessage", failed)
        content = result.get("content")
        text = content.get("text") if isinstance(content, dict) else None
        return f"LLM response: {text if isinstance(text, str) else 'No response'}"

    @server.tool()
    async def test_elicitation(message: str, ctx: Context) -> str | dict[str, Any]:
        """Tests server-initiated elicitation (user input request)"""
        schema = {
            "type": "object",
            "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"},
            },
            "required": ["username", "email"],
        }
        return await _elicited(ctx, "User response", message, schema)

    @server.tool()
    async def test_elicitation_sep1034_defaults(ctx: Context) -> str | dict[str, Any]:
        """Tests elicitation with default values for all primitive types (SEP-1034)"""
        schema = {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                "age": {"type": "integer", "description": "User age", "default": 30},
                "score": {"type": "number", "description": "User score", "default": 95.5},
                "status": {
                    "type": "string",
                    "description": "User status",
                    "enum": ["active", "inactive", "pending"],
                    "default": "active",
                },
                "verified": {
                    "type": "boolean",
                    "description": "Verification status",
                    "default": True,
                },
            },
        }
        message = "Please provide user information"
        return await _elicited(ctx, "Elicitation result", message, schema)

    @server.tool()
    async def test_elicitation_sep1330_enums(ctx: Context) -> str | dict[str, Any]:
        """Tests elicitation with enum schema variations per SEP-1330"""
        schema = {
            "type": "object",
            "properties": {
                "untitledSingle": {
                    "type": "string",
                    "description": "Simple enum without titles",
                    "enum": ["active", "inactive", "pending"],
                },
                "titledSingle": {
                    "type": "string",
                    "description": "Enum with titled options (oneOf)",
                    "oneOf": [
                        {"const": "low", "title": "Low Priority"},
                        {"const": "medium", "title": "Medium Priority"},
                        {"const": "high", "title": "High Priority"},
                    ],
                },
                "legacyEnum": {
                    "type": "string",
                    "description": "Legacy enum with enumNames",
                    "enum": ["small", "medium", "large"],
                    "enumNames": ["Small Size", "Medium Size", "Large Size"],
                },
                "untitledMulti": {
                    "type": "array",
                    "description": "Multi-select without titles",
                    "items": {"type": "string", "enum": ["read", "write", "execute"]},
                },
                "titledMulti": {
                    "type": "array",
                    "description": "Multi-select with titled options",
                    "items": {
                        "anyOf": [
                            {"const": "feature", "title": "New Feature"},
                            {"const": "bug", "title": "Bug Fix"},
                            {"const": "docs", "title": "Documentation"},
                        ]
                    },
                },
            },
            "required": ["untitledSingle", "titledSingle", "legacyEnum"],
        }
        message = "Please select values using different enum schema types"
        return await _elicited(ctx, "Elicitation completed", message, schema)

    @server.tool()
    async def test_reconnection(ctx: Context) -> str:
        """Tests SSE stream disconnection and client reconnection (SEP-1699). Server will close
        the stream mid-call and send the result after client reconnects."""
        await ctx.close_sse_stream()  # R-HTTP-21: the priming event went out; the client polls
        await anyio.sleep(RECONNECT_S)  # the result waits in the stream's buffer (R-HTTP-19)
        return (
            "Reconnection test completed successfully. If you received this, the client "
            "properly reconnected after stream closure."
        )

    # -- the 2026-07-28 scenarios' tools -------------------------------------------------------

    @server.tool()
    async def test_missing_capability(ctx: Context) -> str | dict[str, Any]:
        """Test tool requiring sampling"""
        if ctx.modern:  # a round: -32021 when the request does not declare sampling
            if _sampled(ctx.input_responses.get("sample")) is None:
                raise InputRequired({"sample": _sampling("ping", 10)})
            return "Success"
        params = {"messages": [{"role": "user", "content": _text("ping")}], "maxTokens": 10}
        try:
            await ctx.sample(params)
        except ClientRequestError as failed:
            return _refused("sampling/createMessage", failed)
        return "Success"

    @server.tool()
    async def test_logging_tool(ctx: Context) -> str:
        """Diagnostic logging validator tool"""
        await ctx.log("info", "Diagnostic trace logging activated")
        return "Logging evaluated"

    @server.tool()
    async def test_streaming_elicitation(ctx: Context) -> str | dict[str, Any]:
        """Diagnostic tool validating response progress streams"""
        await ctx.report_progress(50, 100, "Streaming")
        schema = {"type": "object", "properties": {"value": {"type": "string"}}}
        return await _elicited(ctx, "Streaming complete", "A value?", schema)

    _register_rounds(server)
    _register_tasks(server)

    @server.tool(name=SCHEMA_2020_12_TOOL, input_schema=SCHEMA_2020_12)
    async def json_schema_2020_12_tool(**_arguments: Any) -> str:
        """Tool with JSON Schema 2020-12 features"""
        return "ok"

    @server.tool(name=CUSTOM_HEADER_TOOL, input_schema=CUSTOM_HEADER_SCHEMA)
    async def test_custom_header(region: str, query: str = "") -> str:
        """Tool whose region parameter is mirrored as the Mcp-Param-Region header"""
        return f"region={region} query={query}"

    # -- resources --------------------------------------------------------------------------

    @server.resource("test://static-text", name="static_text", mime_type="text/plain")
    async def static_text() -> str:
        """A static text resource for testing"""
        return "This is the content of the static text resource."

    @server.resource("test://static-binary", name="static_binary", mime_type="image/png")
    async def static_binary() -> bytes:
        """A static binary resource (image) for testing"""
        return base64.b64decode(PNG_BASE64)

    @server.resource_template(
        "test://template/{id}/data", name="template_data", mime_type="application/json"
    )
    async def template_data(id: str) -> dict[str, Any]:
        """A resource template with parameter substitution"""
        return {"id": id, "templateTest": True, "data": f"Data for ID: {id}"}

    @server.resource("test://watched-resource", name="watched_resource", mime_type="text/plain")
    async def watched_resource() -> str:
        """A resource that can be subscribed to for updates"""
        return "Watched resource content"

    # -- prompts ----------------------------------------------------------------------------

    @server.prompt()
    async def test_simple_prompt() -> str:
        """A simple prompt without arguments"""
        return "This is a simple prompt for testing."

    @server.prompt()
    async def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
        """A prompt with required arguments"""
        return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"

    @server.prompt()
    async def test_prompt_with_embedded_resource(resourceUri: str) -> list[dict[str, Any]]:  # noqa: N803 (the suite's argument name)
        """A prompt that includes an embedded resource"""
        text = "Embedded resource content for testing."
        return [
            {"role": "user", "content": _embedded(resourceUri, "text/plain", text)},
            {"role": "user", "content": _text("Please process the embedded resource above.")},
        ]

    @server.prompt()
    async def test_prompt_with_image() -> list[dict[str, Any]]:
        """A prompt that includes image content"""
        return [
            {"role": "user", "content": _image()},
            {"role": "user", "content": _text("Please analyze the image above.")},
        ]

    @server.completion()
    async def complete(_ref: object, _argument: object) -> list[str]:
        """No suggestions: the suite checks the shape of the answer, not its values."""
        return []

    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", type=int, help="the port to serve on")
    where.add_argument("--stdio", action="store_true", help="serve on stdin and stdout")
    parser.add_argument("--host", default="127.0.0.1", help="a loopback address (default)")
    parser.add_argument("--log-level", default="warning", help="what askgate logs on stderr")
    args = parser.parse_args(argv)
    if args.stdio:
        return build_server().run_stdio()
    # The same path as `askgate serve --http HOST:PORT`: its checks, its HTTP server.
    return build_server().run_http(args.host, args.port, log_level=args.log_level)


if __name__ == "__main__":
    sys.exit(main())
