"""The 2026-07-28 revision over Streamable HTTP (spec/http.md, R-HTTP-26 .. R-HTTP-30): the pure
decisions of askgate.core.http, then raw HTTP against the app under uvicorn on 127.0.0.1, then
the official client in its default and legacy modes.

Every wait is on a message or an event, under a deadline; no sleep synchronises anything.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from immutables import Map
from mcp import Client
from mcp.client.session import ClientRequestContext

from askgate import Allow, Context
from askgate.core import codec
from askgate.core import http as rules
from askgate.core.tools import param_headers, tool_info
from askgate.demo import build_demo
from askgate.server import ClientRequestError, Server
from askgate.transports.auth import BearerAuth
from askgate.transports.http import HttpApp

from .harness import without_digest
from .listener import uvicorn_serving
from .stdio_peer import CANNOT_ASK, deny_payload

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

DEADLINE = 20.0
MODERN = "2026-07-28"
CAPS: dict[str, Any] = {"elicitation": {"form": {}}}
TOKENS = {"alice": "alice-token-0123456789", "mallory": "mallory-token-0123456789"}


def meta(capabilities: dict[str, Any] | None = None, version: object = MODERN) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": CAPS
        if capabilities is None
        else capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    }


def request(
    request_id: object, method: str, params: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    body = {"_meta": meta(), **(params or {}), **extra}
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": body}


def call(request_id: object, tool: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return request(request_id, "tools/call", {"name": tool, "arguments": arguments}, **extra)


def routing(message: dict[str, Any], **override: str) -> dict[str, str]:
    """The headers a modern client sends with ``message`` (R-HTTP-27), then ``override``."""
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": MODERN,
        "mcp-method": str(message.get("method")),
    }
    params = message.get("params") or {}
    key = rules.NAME_PARAMS.get(str(message.get("method")))
    if key is not None and key in params:
        headers["mcp-name"] = params[key]
    headers.update(override)
    return {name: value for name, value in headers.items() if value != ""}


def decoded(message: dict[str, Any]) -> codec.Decoded:
    return codec.decode(json.dumps(message).encode())


# -- the pure decisions -------------------------------------------------------------------------


def test_R_HTTP_26_a_post_naming_no_session_is_modern_by_its_meta_or_its_header() -> None:
    modern = call(1, "echo", {"text": "x"})
    assert rules.sessionless(routing(modern), decoded(modern)) == "stateless"
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"capabilities": {}}}
    plain = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    old = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
    assert rules.sessionless(old, decoded(init)) == "session"  # opens a 2025 session
    assert rules.sessionless(old, decoded(plain)) == "session"  # needs one: 400 as before
    assert rules.sessionless({}, decoded(plain)) == "session"
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert rules.sessionless(routing(note), decoded(note)) == "session"
    # The header alone makes it modern: a body without _meta is then refused, not a 2025 call.
    refused = rules.sessionless(routing(plain), decoded(plain))
    assert isinstance(refused, rules.ModernRefusal)
    assert refused.code == -32602


def test_R_HTTP_26_an_unsupported_version_waits_for_the_body_only_without_a_session() -> None:
    bad = {"mcp-protocol-version": "2099-01-01"}
    version, now, later = rules.post_version(bad)
    assert (version, now) == ("2099-01-01", None)
    assert later is not None
    assert later.status == 400
    version, now, later = rules.post_version({**bad, rules.SESSION_HEADER: "s"})
    assert now is not None
    assert now.status == 400
    assert later is None
    assert rules.post_version({}) == (rules.DEFAULT_VERSION, None, None)


def test_R_HTTP_26_get_and_delete_naming_no_session_in_modern_mode_are_405() -> None:
    assert rules.modern_get_or_delete({"mcp-protocol-version": MODERN}) == rules.METHOD_NOT_ALLOWED
    assert rules.METHOD_NOT_ALLOWED.status == 405
    with_session = {"mcp-protocol-version": MODERN, "mcp-session-id": "abc"}
    assert rules.modern_get_or_delete(with_session) is None  # served (and judged) as before
    assert rules.modern_get_or_delete({"mcp-protocol-version": "2025-11-25"}) is None
    assert rules.modern_get_or_delete({}) is None


TOOL = call(7, "echo", {"text": "x"})


@pytest.mark.parametrize(
    ("message", "headers", "status", "code"),
    [
        (request(7, "initialize", {"capabilities": {}}), {}, 404, -32601),
        ({**TOOL, "params": {"name": "echo", "arguments": {}}}, {}, 400, -32602),
        ({**TOOL, "params": {**TOOL["params"], "_meta": []}}, {}, 400, -32602),
        (
            {
                **TOOL,
                "params": {
                    **TOOL["params"],
                    "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN},
                },
            },
            {},
            400,
            -32602,
        ),
        (TOOL, {"mcp-protocol-version": ""}, 400, -32020),
        (TOOL, {"mcp-protocol-version": "2025-11-25"}, 400, -32020),
        (TOOL, {"mcp-method": ""}, 400, -32020),
        (TOOL, {"mcp-method": "tools/list"}, 400, -32020),
        (TOOL, {"mcp-method": "TOOLS/CALL"}, 400, -32020),
        (TOOL, {"mcp-name": ""}, 400, -32020),
        (TOOL, {"mcp-name": "guarded_echo"}, 400, -32020),
        (TOOL, {"mcp-name": "ECHO"}, 400, -32020),
        (TOOL, {"mcp-name": "=?base64?ZWNobw?="}, 400, -32020),  # not canonical base64
        (TOOL, {"mcp-name": "=?base64?!!!!?="}, 400, -32020),
    ],
)
def test_R_HTTP_27_a_modern_request_whose_headers_disagree_is_refused_under_its_id(
    message: dict[str, Any], headers: dict[str, str], status: int, code: int
) -> None:
    refused = rules.sessionless(routing(message, **headers), decoded(message))
    assert isinstance(refused, rules.ModernRefusal)
    assert (refused.status, refused.code, refused.request_id) == (status, code, 7)
    assert refused.answer()["id"] == 7


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"mcp-name": "  echo\t"},
        {"mcp-method": " tools/call "},
        {"mcp-protocol-version": f" {MODERN} "},
        {"mcp-name": "=?base64?ZWNobw==?="},
    ],
)
def test_R_HTTP_27_whitespace_around_values_and_base64_names_are_accepted(
    headers: dict[str, str],
) -> None:
    assert rules.sessionless(routing(TOOL, **headers), decoded(TOOL)) == "stateless"


def test_R_HTTP_27_a_name_is_checked_only_for_the_methods_that_name_one() -> None:
    listing = request(3, "tools/list")
    assert rules.sessionless(routing(listing, **{"mcp-name": "x"}), decoded(listing)) == "stateless"
    read = request(4, "resources/read", {"uri": "demo://a b"})
    assert rules.sessionless(routing(read), decoded(read)) == "stateless"
    wrong = rules.sessionless(routing(read, **{"mcp-name": "demo://a"}), decoded(read))
    assert isinstance(wrong, rules.ModernRefusal)
    assert wrong.code == -32020


def test_R_HTTP_27_a_name_header_with_a_character_outside_ascii_matches_nothing() -> None:
    """A header's bytes reach the rules as Latin-1: ``café`` sent raw is refused, not read as the
    body's name; sent as ``=?base64?...?=`` of its UTF-8 it is accepted."""
    named = call(8, "café", {})
    refused = rules.sessionless(routing(named), decoded(named))
    assert isinstance(refused, rules.ModernRefusal)
    assert (refused.status, refused.code) == (400, -32020)
    wrapped = routing(named, **{"mcp-name": "=?base64?Y2Fmw6k=?="})
    assert rules.sessionless(wrapped, decoded(named)) == "stateless"


# R-HTTP-47, R-HTTP-48: a tool's x-mcp-header marks and the Mcp-Param-* headers that mirror them.

MARKED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "count": {"type": "integer", "x-mcp-header": "Count"},
        "dry": {"type": "boolean", "x-mcp-header": "Dry-Run"},
        "where": {
            "type": "object",
            "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}},
        },
        "query": {"type": "string"},
    },
}
MARKED_TOOLS = Map(
    {"route": tool_info("route", False, False, {"name": "route", "inputSchema": MARKED_SCHEMA})}
)


def routed(arguments: dict[str, Any], headers: dict[str, str]) -> object:
    """The verdict on a modern ``tools/call`` of ``route`` with ``arguments``, its routing
    headers and ``headers`` (R-HTTP-47)."""
    message = call(5, "route", arguments)
    return rules.sessionless({**routing(message), **headers}, decoded(message), MARKED_TOOLS)


def test_R_HTTP_48_marks_are_read_once_at_registration_with_their_paths() -> None:
    marks = MARKED_TOOLS["route"].param_headers
    assert [(m.header, m.field, m.path) for m in marks] == [
        ("Mcp-Param-Region", "mcp-param-region", ("region",)),
        ("Mcp-Param-Count", "mcp-param-count", ("count",)),
        ("Mcp-Param-Dry-Run", "mcp-param-dry-run", ("dry",)),
        ("Mcp-Param-Zone", "mcp-param-zone", ("where", "zone")),
    ]
    # A property named like the keyword, and the keyword inside an instance value, are no marks.
    data = {"properties": {"x-mcp-header": {"type": "string", "default": {"x-mcp-header": 1}}}}
    assert param_headers(data) == ()
    assert param_headers(None) == ()
    assert param_headers({"type": "object"}) == ()


@pytest.mark.parametrize(
    ("arguments", "headers"),
    [
        ({"region": "us-west1"}, {"mcp-param-region": "us-west1"}),
        ({"region": "us-west1"}, {"mcp-param-region": " us-west1\t"}),  # around: not the value
        ({"region": "us west 1"}, {"mcp-param-region": "us west 1"}),
        ({"region": ""}, {"mcp-param-region": ""}),
        ({"region": "Hello, 世界"}, {"mcp-param-region": "=?base64?SGVsbG8sIOS4lueVjA==?="}),
        ({"region": " padded "}, {"mcp-param-region": "=?base64?IHBhZGRlZCA=?="}),
        ({"region": "line1\nline2"}, {"mcp-param-region": "=?base64?bGluZTEKbGluZTI=?="}),
        ({"region": "=?base64?x?="}, {"mcp-param-region": "=?base64?PT9iYXNlNjQ/eD89?="}),
        ({"region": "SGVsbG8="}, {"mcp-param-region": "SGVsbG8="}),  # no wrapper: literal
        ({"region": "=?base64?SGVsbG8="}, {"mcp-param-region": "=?base64?SGVsbG8="}),
        ({"region": "=?BASE64?SGVsbG8=?="}, {"mcp-param-region": "=?BASE64?SGVsbG8=?="}),
        ({"count": 42}, {"mcp-param-count": "42"}),
        ({"count": 42}, {"mcp-param-count": "42.0"}),  # compared numerically
        ({"count": 42.0}, {"mcp-param-count": "42"}),
        ({"count": -7}, {"mcp-param-count": "-7"}),
        ({"dry": True}, {"mcp-param-dry-run": "true"}),
        ({"dry": False}, {"mcp-param-dry-run": "false"}),
        ({"where": {"zone": "b"}}, {"mcp-param-zone": "b"}),
        ({"region": None}, {}),  # null: no header expected
        ({}, {}),
        ({"where": "flat"}, {}),  # no value at the path
        ({"region": ["a"]}, {}),  # no header can carry an array: the schema answers it
        ({"query": "q"}, {"mcp-param-query": "q", "mcp-param-other": "x"}),  # not marked: ignored
    ],
)
def test_R_HTTP_47_headers_that_mirror_the_marked_arguments_are_accepted(
    arguments: dict[str, Any], headers: dict[str, str]
) -> None:
    assert routed(arguments, headers) == "stateless"


@pytest.mark.parametrize(
    ("arguments", "headers", "says"),
    [
        ({"region": "us-west1"}, {}, "Mcp-Param-Region header is missing but arguments.region"),
        ({"region": "us"}, {"mcp-param-region": "eu"}, "does not match arguments.region"),
        ({"region": "us"}, {"mcp-param-region": "US"}, "does not match arguments.region"),
        ({}, {"mcp-param-region": "us"}, "Mcp-Param-Region header is sent but arguments.region"),
        ({"region": None}, {"mcp-param-region": "us"}, "is sent but arguments.region"),
        ({"region": ["us"]}, {"mcp-param-region": "us"}, "is sent but arguments.region"),
        ({"region": "Hello"}, {"mcp-param-region": "=?base64?SGVsbG8?="}, "canonical base64"),
        ({"region": "Hello"}, {"mcp-param-region": "=?base64?SGVs!!!bG8=?="}, "canonical base64"),
        ({"region": "Hello"}, {"mcp-param-region": "=?base64?SGVsbG9=?="}, "canonical base64"),
        ({"region": "x"}, {"mcp-param-region": "=?base64?/w==?="}, "UTF-8"),  # not UTF-8
        ({"region": "café"}, {"mcp-param-region": "café"}, "other than visible ASCII"),
        ({"region": "a\x00b"}, {"mcp-param-region": "a\x00b"}, "other than visible ASCII"),
        ({"region": "us, eu"}, {"mcp-param-region": "us"}, "does not match"),
        ({"count": 42}, {"mcp-param-count": "43"}, "does not match arguments.count"),
        ({"count": 42}, {"mcp-param-count": "42x"}, "does not match arguments.count"),
        ({"count": 42}, {"mcp-param-count": "1e9999999999"}, "does not match arguments.count"),
        ({"dry": True}, {"mcp-param-dry-run": "True"}, "does not match arguments.dry"),
        ({"dry": True}, {"mcp-param-dry-run": "1"}, "does not match arguments.dry"),
        ({"where": {"zone": "b"}}, {}, "Mcp-Param-Zone header is missing but arguments.where.zone"),
        ({"where": {"zone": "b"}}, {"mcp-param-zone": "c"}, "does not match arguments.where.zone"),
    ],
)
def test_R_HTTP_47_headers_that_do_not_mirror_the_marked_arguments_are_refused(
    arguments: dict[str, Any], headers: dict[str, str], says: str
) -> None:
    refused = routed(arguments, headers)
    assert isinstance(refused, rules.ModernRefusal)
    assert (refused.status, refused.code, refused.request_id) == (400, -32020, 5)
    assert says in refused.message
    assert refused.message.startswith("Header mismatch: ")
    assert "\n" not in refused.message


def test_R_HTTP_47_only_a_registered_marked_tools_call_is_checked() -> None:
    headers = {"mcp-param-region": "elsewhere"}
    unknown = call(5, "unknown", {"region": "us"})
    assert rules.sessionless(routing(unknown), decoded(unknown), MARKED_TOOLS) == "stateless"
    listing = request(6, "tools/list")
    assert rules.sessionless({**routing(listing), **headers}, decoded(listing), MARKED_TOOLS) == (
        "stateless"
    )
    marked = call(5, "route", {"region": "us"})
    assert rules.sessionless(routing(marked), decoded(marked)) == "stateless"  # no tools given
    odd = {**marked, "params": {**marked["params"], "arguments": "not an object"}}
    assert rules.sessionless(routing(odd), decoded(odd), MARKED_TOOLS) == "stateless"


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ({"properties": {"a": {"type": "string", "x-mcp-header": ""}}}, "not an HTTP field-name"),
        ({"properties": {"a": {"type": "string", "x-mcp-header": "My Region"}}}, "field-name"),
        ({"properties": {"a": {"type": "string", "x-mcp-header": "Region:1"}}}, "field-name"),
        ({"properties": {"a": {"type": "string", "x-mcp-header": "Région"}}}, "field-name"),
        ({"properties": {"a": {"type": "string", "x-mcp-header": "R\t1"}}}, "field-name"),
        ({"properties": {"a": {"type": "string", "x-mcp-header": 7}}}, "field-name"),
        ({"properties": {"a": {"type": "number", "x-mcp-header": "A"}}}, "needs type string"),
        ({"properties": {"a": {"type": "null", "x-mcp-header": "A"}}}, "needs type string"),
        ({"properties": {"a": {"type": "object", "x-mcp-header": "A"}}}, "needs type string"),
        ({"properties": {"a": {"x-mcp-header": "A"}}}, "needs type string"),
        (
            {
                "properties": {
                    "a": {"type": "string", "x-mcp-header": "Region"},
                    "b": {"type": "string", "x-mcp-header": "REGION"},
                }
            },
            "repeats a's header Mcp-Param-Region",
        ),
        ({"items": {"type": "string", "x-mcp-header": "A"}}, "not reached through properties"),
        (
            {"properties": {"a": {"type": "array", "items": {"x-mcp-header": "A"}}}},
            "at a.items is not reached",
        ),
        ({"oneOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]}, "reached"),
        ({"$defs": {"a": {"type": "string", "x-mcp-header": "A"}}}, "at $defs.a is not reached"),
        ({"type": "string", "x-mcp-header": "Root"}, "at the root is not reached"),
    ],
)
def test_R_HTTP_48_an_invalid_mark_refuses_the_tool_in_one_line(
    schema: dict[str, Any], says: str
) -> None:
    problem = param_headers({"type": "object", **schema})
    assert isinstance(problem, str)
    assert says in problem
    server = Server("marks", authorizer=lambda *_: Allow())
    with pytest.raises(TypeError) as refused:

        @server.tool(input_schema={"type": "object", **schema})
        async def marked(**_arguments: Any) -> str:
            return "never"

    assert str(refused.value) == f"tool marked: input_schema {problem}"
    # Registered another way (an adapter's tool), it is kept, and no header of it is checked.
    kept = tool_info("adapted", False, False, {"name": "adapted", "inputSchema": schema})
    assert kept.param_headers == ()


def test_R_HTTP_48_a_schema_too_deep_or_cyclic_is_refused_not_a_crash() -> None:
    cyclic: dict[str, Any] = {"type": "object"}
    cyclic["properties"] = {"a": cyclic}
    assert param_headers(cyclic) == "inputSchema nests more than 64 levels deep"
    deep: dict[str, Any] = {"type": "string", "x-mcp-header": "Deep"}
    for _ in range(70):
        deep = {"type": "object", "properties": {"a": deep}}
    assert param_headers(deep) == "inputSchema nests more than 64 levels deep"


def test_R_HTTP_28_a_modern_answers_status_is_its_errors_code_mapped() -> None:
    def error(code: int) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": 1, "error": {"code": code, "message": "m"}}

    assert rules.modern_status(error(-32601)) == 404
    for code in (-32700, -32600, -32602, -32020, -32021, -32022):
        assert rules.modern_status(error(code)) == 400
    assert rules.modern_status(error(-32603)) == 200
    assert rules.modern_status({"jsonrpc": "2.0", "id": 1, "result": {}}) == 200
    assert rules.modern_status(None) == 200


# -- raw HTTP against the app under uvicorn -----------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn runs on asyncio


@asynccontextmanager
async def serving(
    server: Server | None = None, auth: Any = None
) -> AsyncIterator[tuple[HttpApp, str, httpx2.AsyncClient]]:
    """``server`` (default: the demo) over HTTP on 127.0.0.1, a free port; yields the app, its
    URL and an HTTP client."""
    served = build_demo(configured=True) if server is None else server

    def make(port: int) -> HttpApp:
        return HttpApp(served, auth=auth, options=rules.HttpOptions(port=port))

    async with (
        uvicorn_serving(make) as (app, port),
        app.running(),
        httpx2.AsyncClient(timeout=DEADLINE) as http,
    ):
        with anyio.fail_after(DEADLINE):
            yield app, f"http://127.0.0.1:{port}/mcp", http


async def post(
    http: httpx2.AsyncClient, url: str, message: dict[str, Any], **headers: str
) -> httpx2.Response:
    return await http.post(url, json=message, headers=routing(message, **headers))


def stateless_conns(app: HttpApp) -> list[object]:
    conns = app.runtime.state.conns
    return [c for c in conns if isinstance(c, tuple) and c and c[0] == "http-stateless"]


@pytest.mark.anyio
async def test_R_HTTP_26_a_modern_post_is_served_without_a_session() -> None:
    async with serving() as (app, url, http):
        discover = await post(http, url, request(1, "server/discover"))
        assert discover.status_code == 200
        assert discover.headers["content-type"] == "application/json"
        assert "mcp-session-id" not in discover.headers
        assert discover.json()["result"]["supportedVersions"][0] == MODERN
        echoed = await post(http, url, call(2, "echo", {"text": "hi"}))
        assert echoed.status_code == 200
        result = echoed.json()["result"]
        assert (result["resultType"], result["content"][0]["text"]) == ("complete", "hi")
        message = request(3, "server/discover")
        evil = await post(http, url, message, host="evil.example", origin="http://evil.example")
        assert evil.status_code == 403  # R-HTTP-2 first, as for every request
        rebound = await post(http, url, message, host="evil.example")
        assert rebound.status_code == 421  # R-HTTP-1
        assert len(app.sessions) == 0
        assert stateless_conns(app) == []  # each POST's connection ended with it
        assert len(app.runtime.state.calls) == 0


@pytest.mark.anyio
async def test_R_HTTP_26_initialize_still_opens_a_2025_session_and_old_answers_hold() -> None:
    async with serving() as (app, url, http):
        base = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        }
        opened = await http.post(url, json=init, headers=base)
        assert opened.status_code == 200
        assert "mcp-session-id" in opened.headers
        assert opened.json()["result"]["protocolVersion"] == "2025-11-25"
        assert len(app.sessions) == 1
        plain = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        needs = await http.post(url, json=plain, headers=base)
        assert (needs.status_code, needs.json()["error"]["message"]) == (
            400,
            "Bad Request: Mcp-Session-Id required",
        )
        bogus = {**base, "mcp-protocol-version": "1999-01-01"}
        refused = await http.post(url, json=init, headers=bogus)  # R-HTTP-6, body read first
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == "Bad Request: Unsupported MCP-Protocol-Version"
        assert len(app.sessions) == 1


@pytest.mark.anyio
async def test_R_HTTP_26_get_and_delete_without_a_session_are_405_in_modern_mode() -> None:
    async with serving() as (_app, url, http):
        modern = {"accept": "text/event-stream", "mcp-protocol-version": MODERN}
        for method in ("GET", "DELETE"):
            answered = await http.request(method, url, headers=modern)
            assert answered.status_code == 405
            assert answered.headers["allow"] == "POST"
        old = await http.get(url, headers={"accept": "text/event-stream"})
        assert old.status_code == 400  # as before: a 2025 GET names its session


@pytest.mark.anyio
async def test_R_HTTP_27_a_mismatched_header_is_400_minus_32020_and_nothing_runs() -> None:
    runs: list[str] = []
    server = Server(
        "counting",
        authorizer=lambda *_: Allow(),
        authorizer_source="configured",
        read_authorizer=lambda *_: Allow(),
    )

    @server.tool()
    async def count(text: str) -> str:
        runs.append(text)
        return text

    async with serving(server) as (_app, url, http):
        message = call(9, "count", {"text": "x"})
        for headers in (
            {"mcp-name": "other"},
            {"mcp-method": "tools/list"},
            {"mcp-protocol-version": ""},
        ):
            refused = await post(http, url, message, **headers)
            assert refused.status_code == 400
            body = refused.json()
            assert (body["id"], body["error"]["code"]) == (9, -32020)
        twice = [*routing(message).items(), ("mcp-method", "tools/call")]  # a repeated header
        doubled = await http.post(url, json=message, headers=twice)
        assert (doubled.status_code, doubled.json()["error"]["code"]) == (400, -32020)
        missing = await post(http, url, {**message, "params": {"name": "count", "arguments": {}}})
        assert (missing.status_code, missing.json()["error"]["code"]) == (400, -32602)
        assert runs == []
        unsupported = request(10, "server/discover")
        unsupported["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "v999.0.0"
        answered = await post(http, url, unsupported, **{"mcp-protocol-version": "v999.0.0"})
        assert answered.status_code == 400
        error = answered.json()["error"]
        assert (answered.json()["id"], error["code"], error["data"]["requested"]) == (
            10,
            -32022,
            "v999.0.0",
        )
        ok = await post(http, url, message)
        assert ok.status_code == 200
        assert runs == ["x"]


def marked_server(runs: list[str]) -> Server:
    """A server with one tool whose ``region`` is marked ``x-mcp-header`` (R-HTTP-47)."""
    server = Server(
        "marked",
        authorizer=lambda *_: Allow(),
        authorizer_source="configured",
        read_authorizer=lambda *_: Allow(),
    )
    schema = {
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "count": {"type": "integer", "x-mcp-header": "Count"},
        },
        "required": ["region"],
    }

    @server.tool(input_schema=schema)
    async def route(region: str, count: int = 0) -> str:
        runs.append(region)
        return f"{region}/{count}"

    return server


@pytest.mark.anyio
async def test_R_HTTP_47_mcp_param_headers_over_loopback_http() -> None:
    """Real POSTs on 127.0.0.1: the headers that mirror the marked arguments run the tool; a
    mismatching, missing, extra or badly encoded one is 400 ``-32020`` under the request's id,
    one line, and the tool does not run."""
    runs: list[str] = []
    async with serving(marked_server(runs)) as (_app, url, http):
        plain = call(11, "route", {"region": "us-west1"})
        ok = await post(http, url, plain, **{"mcp-param-region": "us-west1"})
        assert (ok.status_code, ok.json()["result"]["content"][0]["text"]) == (200, "us-west1/0")
        zurich = call(12, "route", {"region": "Zürich", "count": 42})
        wrapped = {"mcp-param-region": "=?base64?WsO8cmljaA==?=", "mcp-param-count": "42.0"}
        ok = await post(http, url, zurich, **wrapped)
        assert (ok.status_code, ok.json()["result"]["content"][0]["text"]) == (200, "Zürich/42")
        assert runs == ["us-west1", "Zürich"]
        refusals: list[tuple[dict[str, Any], dict[str, str | bytes], str]] = [
            (plain, {"mcp-param-region": "eu-west1"}, "does not match arguments.region"),
            (plain, {}, "Mcp-Param-Region header is missing"),
            (plain, {"mcp-param-region": "us-west1", "mcp-param-count": "1"}, "is sent but"),
            (plain, {"mcp-param-region": "=?base64?dXMtd2VzdDE?="}, "canonical base64"),
            (plain, {"mcp-param-region": "=?base64?dXMt!!d2VzdDE=?="}, "canonical base64"),
            (zurich, {"mcp-param-region": "Zürich".encode()}, "other than visible ASCII"),
        ]
        for message, extra, says in refusals:
            fields: dict[str, str | bytes] = {**routing(message), **extra}
            sent = {
                k.encode(): v if isinstance(v, bytes) else v.encode() for k, v in fields.items()
            }
            refused = await http.post(url, json=message, headers=sent)
            assert refused.status_code == 400
            body = refused.json()
            assert (body["id"], body["error"]["code"]) == (message["id"], -32020)
            assert says in body["error"]["message"]
            assert "\n" not in body["error"]["message"]
        repeat = ("mcp-param-region", "us-west1")
        twice = [*routing(plain).items(), repeat, repeat]  # read "us-west1, us-west1"
        doubled = await http.post(url, json=plain, headers=twice)
        assert (doubled.status_code, doubled.json()["error"]["code"]) == (400, -32020)
        assert runs == ["us-west1", "Zürich"]  # no refused call ran


@pytest.mark.anyio
async def test_R_HTTP_47_the_sdk_in_default_mode_mirrors_the_marks_and_is_served() -> None:
    """The official client mirrors a listed tool's marked arguments as ``Mcp-Param-*`` headers
    (base64 for a non-ASCII value); askgate checks and serves them."""
    runs: list[str] = []
    async with serving(marked_server(runs)) as (_app, url, _http), Client(url) as client:
        assert client.protocol_version == MODERN
        # Not listed yet: refused -32020, the client re-lists and resends once (its documented
        # HEADER_MISMATCH retry), and the call runs once.
        assert text(await client.call_tool("route", {"region": "first"})) == "first/0"
        listed = await client.list_tools()
        assert listed.tools[0].input_schema["properties"]["region"]["x-mcp-header"] == "Region"
        assert text(await client.call_tool("route", {"region": "us-west1", "count": 3})) == (
            "us-west1/3"
        )
        assert text(await client.call_tool("route", {"region": " Zürich "})) == " Zürich /0"
    assert runs == ["first", "us-west1", " Zürich "]


@pytest.mark.anyio
async def test_R_HTTP_28_unknown_and_removed_methods_are_404_with_their_id() -> None:
    async with serving() as (_app, url, http):
        for n, method in enumerate(("no/such", "logging/setLevel", "resources/subscribe")):
            answered = await post(http, url, request(n, method))
            assert answered.status_code == 404
            assert (answered.json()["id"], answered.json()["error"]["code"]) == (n, -32601)
        init = await post(http, url, request(5, "initialize", {"capabilities": {}}))
        assert (init.status_code, init.json()["id"], init.json()["error"]["code"]) == (
            404,
            5,
            -32601,
        )


async def sse_messages(response: httpx2.Response) -> list[dict[str, Any]]:
    assert response.headers["content-type"] == "text/event-stream"
    return [
        json.loads(line[6:]) async for line in response.aiter_lines() if line.startswith("data: ")
    ]


@pytest.mark.anyio
async def test_R_HTTP_28_a_modern_stream_carries_its_progress_then_its_answer_and_no_request() -> (
    None
):
    server = Server(
        "chatty",
        authorizer=lambda *_: Allow(),
        authorizer_source="configured",
        read_authorizer=lambda *_: Allow(),
    )

    @server.tool()
    async def chatty(ctx: Context) -> str:
        await ctx.report_progress(1, 2)
        try:  # a tool's own question is never a server request on a modern stream
            return repr(await ctx.elicit("name?", {"type": "object", "properties": {}}))
        except ClientRequestError as refused:
            return f"refused: {refused}"

    async with serving(server) as (_app, url, http):
        message = call(3, "chatty", {})
        message["params"]["_meta"]["progressToken"] = "p-1"
        async with http.stream("POST", url, json=message, headers=routing(message)) as response:
            assert response.status_code == 200
            messages = await sse_messages(response)
        assert [m.get("method") for m in messages] == ["notifications/progress", None]
        assert messages[0]["params"]["progressToken"] == "p-1"
        final = messages[-1]
        assert final["id"] == 3
        assert "resultType" in final["result"]
        assert not any("id" in m and "method" in m for m in messages)  # no server request


def bearer(principal: str, message: dict[str, Any]) -> dict[str, str]:
    return {**routing(message), "authorization": f"Bearer {TOKENS[principal]}"}


@pytest.mark.anyio
async def test_R_HTTP_29_a_modern_approval_belongs_to_the_principal_of_each_post() -> None:
    async with serving(auth=BearerAuth(TOKENS)) as (app, url, http):
        asked = call(1, "guarded_echo", {"text": "ok"})
        first = (await http.post(url, json=asked, headers=bearer("alice", asked))).json()
        assert first["result"]["resultType"] == "input_required"
        state = first["result"]["requestState"]
        answer = {"approval": {"action": "accept", "content": {"approve": True}}}
        retry = call(2, "guarded_echo", {"text": "ok"}, requestState=state, inputResponses=answer)
        foreign = (await http.post(url, json=retry, headers=bearer("mallory", retry))).json()
        denied = foreign["result"]["structuredContent"]
        assert (denied["error"], denied["detail"]) == (
            "authorization_required",
            "request state of another principal",
        )
        anonymous = await http.post(url, json=retry, headers=routing(retry))
        assert anonymous.status_code == 401
        ran = (await http.post(url, json=retry, headers=bearer("alice", retry))).json()
        assert ran["result"]["content"][0]["text"] == "ok"
        again = (await http.post(url, json=retry, headers=bearer("alice", retry))).json()
        assert again["result"]["structuredContent"]["detail"] == "request state already used"
        assert app.runtime.state.parked_total == 0
        assert stateless_conns(app) == []


@pytest.mark.anyio
@pytest.mark.parametrize("streaming", [False, True], ids=["json-pending", "sse-open"])
async def test_R_HTTP_30_closing_the_response_stream_cancels_the_request(
    caplog: pytest.LogCaptureFixture, streaming: bool
) -> None:
    """The client leaves while the answer is still pending (no byte of the response yet), or
    once the SSE response is open (it read the call's progress)."""
    caplog.set_level(logging.INFO, logger="askgate.calls")
    started = anyio.Event()
    seen = anyio.Event()
    cancelled = anyio.Event()
    server = Server(
        "waiting",
        authorizer=lambda *_: Allow(),
        authorizer_source="configured",
        read_authorizer=lambda *_: Allow(),
    )

    @server.tool()
    async def wait(ctx: Context) -> str:
        if streaming:
            await ctx.report_progress(1, 2)
        started.set()
        try:
            await anyio.Event().wait()
        finally:
            cancelled.set()
        return "never"

    async with serving(server) as (app, url, http):
        message = call(4, "wait", {})
        message["params"]["_meta"]["progressToken"] = "p"
        async with anyio.create_task_group() as tg:

            async def hold() -> None:
                async with http.stream(
                    "POST", url, json=message, headers=routing(message)
                ) as response:
                    if streaming:
                        async for line in response.aiter_lines():
                            if line.startswith("data: "):
                                assert json.loads(line[6:])["method"] == "notifications/progress"
                                seen.set()
                                break
                    await anyio.Event().wait()  # until the test closes it

            tg.start_soon(hold)
            await started.wait()
            if streaming:
                await seen.wait()
            assert len(app.runtime.state.calls) == 1
            tg.cancel_scope.cancel()  # closes the response: the client leaves
        await cancelled.wait()  # the worker was killed
        ended = [r.getMessage() for r in caplog.records if r.name == "askgate.calls"]
        assert len(ended) == 1
        assert "principal local: wait allow -> dropped: cancelled in" in ended[0]
        assert len(app.runtime.state.calls) == 0
        assert stateless_conns(app) == []
        assert len(app.sessions) == 0


# -- the official client ------------------------------------------------------------------------


def structured(result: types.CallToolResult) -> Any:
    assert result.structured_content is not None
    return result.structured_content


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@pytest.mark.anyio
async def test_R_HTTP_26_the_sdk_in_default_mode_approves_and_declines_over_http() -> None:
    """The official client's default mode negotiates 2026-07-28 over HTTP; its elicitation
    callback answers the input-required result, and its retry runs the tool only when
    approved."""
    answers = iter(
        [
            types.ElicitResult(action="accept", content={"approve": True}),
            types.ElicitResult(action="decline"),
        ]
    )
    asked: list[tuple[object, str]] = []

    async def ask(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        assert params.requested_schema["required"] == ["approve"]
        asked.append((context.request_id, params.message))
        return next(answers)

    async with serving() as (app, url, _http):
        async with Client(url, elicitation_callback=ask) as client:
            assert client.protocol_version == MODERN
            assert text(await client.call_tool("echo", {"text": "hi"})) == "hi"
            assert text(await client.call_tool("guarded_echo", {"text": "ok"})) == "ok"
            declined = await client.call_tool("guarded_echo", {"text": "no"})
            assert structured(declined) == deny_payload("guarded_echo", "ask", "declined")
            denied = await client.call_tool("forbidden", {})
            assert structured(denied)["decision"] == "deny"
        assert [(kind, without_digest(prompt)) for kind, prompt in asked] == [
            ("approval", 'Allow guarded_echo to echo "ok"?'),
            ("approval", 'Allow guarded_echo to echo "no"?'),
        ]
        assert len(app.sessions) == 0  # no session was opened, none left behind
        assert app.runtime.state.parked_total == 0
        assert stateless_conns(app) == []


@pytest.mark.anyio
async def test_R_HTTP_26_the_sdk_in_default_mode_without_a_callback_gets_the_deny_on_ask() -> None:
    async with serving() as (_app, url, _http), Client(url) as client:
        assert client.protocol_version == MODERN
        result = await client.call_tool("guarded_echo", {"text": "x"})
        assert structured(result)["message"].endswith(CANNOT_ASK)


@pytest.mark.anyio
async def test_R_HTTP_26_the_sdk_in_legacy_mode_still_negotiates_2025_over_http() -> None:
    asked: list[str] = []

    async def ask(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert context.request_id is not None  # a 2025 elicitation/create is a request
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async with serving() as (app, url, _http):
        async with Client(url, mode="legacy", elicitation_callback=ask) as client:
            assert client.protocol_version == "2025-11-25"
            assert len(app.sessions) == 1
            assert text(await client.call_tool("guarded_echo", {"text": "ok"})) == "ok"
        assert [without_digest(prompt) for prompt in asked] == ['Allow guarded_echo to echo "ok"?']
        assert len(app.sessions) == 0  # ended with DELETE
