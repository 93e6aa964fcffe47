"""askgate's gate in front of an official-SDK server's tools (``mcp`` 2.x).

::

    from mcp.server.mcpserver import MCPServer
    from askgate import Allow, Ask
    from askgate.adapters.sdk import guard

    server = MCPServer("files")

    @server.tool()
    def delete_file(path: str) -> str: ...

    def policy(tool, args, ctx):
        return Ask(f"Delete {args['path']}?") if tool == "delete_file" else Allow()

    guard(server, policy)
    server.run()  # stdio, as before

:func:`guard` appends a server middleware (:class:`GateMiddleware`) to the server's chain
(``MCPServer.middleware``, ``Server.middleware``) and wraps the low-level server's lifespan so
that serving enters the gate when nothing else did. Every ``tools/call`` goes to askgate's
reducer; the framework's handler runs as the reducer's ``RunTool`` worker. An ``Ask`` on a
connection of a 2025 revision is sent with the session's own ``elicit_form`` on the call's
stream; on a request of the 2026-07-28 revision it is the input-required result the reducer
answers, which the SDK's request-state boundary (``MCPServer`` installs one) seals once more
(spec/adapters.md). With a read authorizer, ``resources/read``, ``prompts/get`` and
``completion/complete`` go to the reducer too. Everything else (``initialize``, the listings)
is the framework's, untouched.

Private attributes of ``mcp`` 2.3 it still reads, for want of a public hook (docs/embedding.md
lists them): ``MCPServer._lowlevel_server`` for its lifespan (the only place serving enters),
and ``ServerSession._connection`` on a connection of a 2025 revision (its identity across
requests, its exit stack to hear it close, and whether ``initialize`` was accepted).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import principal_components
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from askgate.core import Failure, NeedsInput, Round
from askgate.server import Authorizer

from ._gate import GUARDED_READS, CallSite, ElicitError, Gate, GateError

__all__ = ["GateMiddleware", "guard"]

MAX_TOOL_PAGES = 100
"""How many pages of a low-level server's ``tools/list`` the gate reads at most (R-ADAPT-7)."""

ROUND_FIELDS = ("requestState", "inputResponses")
"""The fields of a retried request that belong to the round, not to the handler (R-ADAPT-10)."""

ToolLookup = Callable[[ServerRequestContext[Any, Any], str], Awaitable[dict[str, Any] | None]]
"""How a guarded server finds the ``tools/list`` entry of one tool, or ``None``."""


def _json(value: object) -> dict[str, Any]:
    """A handler's result as the JSON object it is sent as."""
    if isinstance(value, BaseModel):
        dumped: dict[str, Any] = value.model_dump(by_alias=True, mode="json", exclude_none=True)
        return dumped
    if isinstance(value, dict):
        return value
    return {}


def _no_close(_callback: Callable[[], None]) -> None:
    """A connection without an exit stack: nothing to hook."""


def _no_capabilities() -> object:
    return {}


async def _cannot_elicit(_message: str, _schema: dict[str, Any]) -> dict[str, Any]:
    raise ElicitError(-32601, "no back-channel")


def with_round(params: Mapping[str, Any], round_: Round | None) -> dict[str, Any]:
    """``params`` as the framework's handler is run with them: without the retry's own
    ``requestState`` and ``inputResponses`` (askgate's), with the handler's own state and the
    client's answers of a round it ended (R-ADAPT-10)."""
    ran = {key: value for key, value in params.items() if key not in ROUND_FIELDS}
    if round_ is not None:
        if round_.state is not None:
            ran["requestState"] = round_.state
        if round_.responses is not None:
            ran["inputResponses"] = round_.responses
    return ran


def as_worker_value(result: dict[str, Any]) -> object:
    """A handler's result as the reducer takes it: a round it ended is a ``NeedsInput``
    (R-ADAPT-10), any other result its object."""
    if result.get("resultType") == "input_required":
        return NeedsInput(result.get("inputRequests") or {}, result.get("requestState"))
    return result


def request_principal() -> str | None:
    """Who the SDK's authentication names for the request being served: its token's (client,
    issuer, subject), the principal its request-state boundary binds too; ``None`` without
    authentication."""
    token = get_access_token()
    return None if token is None else json.dumps(principal_components(token))


def modern_site(
    meta: object,
    request_state: object,
    input_responses: object,
    tool: Callable[[], Awaitable[dict[str, Any] | None]] | None,
    run: Callable[[object, Round | None], Awaitable[object]],
) -> CallSite:
    """A 2026-07-28 request (R-ADAPT-9): a connection of its own, with its ``_meta``,
    ``requestState`` and ``inputResponses`` as they came, and its principal."""
    return CallSite(
        None,
        _no_capabilities,
        False,
        _no_close,
        tool,
        run,
        _cannot_elicit,
        meta,
        request_state,
        input_responses,
        request_principal(),
    )


def legacy_site(
    session: Any,
    request_id: object,
    tool: Callable[[], Awaitable[dict[str, Any] | None]] | None,
    run: Callable[[object, Round | None], Awaitable[object]],
) -> CallSite:
    """A request on an SDK ``ServerSession`` of a 2025 revision (fastmcp's too)."""
    connection = getattr(session, "_connection", None)  # private: no public connection object
    if connection is None:  # pragma: no cover - mcp 2.3 always has one
        return CallSite(object(), _no_capabilities, False, _no_close, tool, run, _cannot_elicit)

    def capabilities() -> object:
        declared = session.client_capabilities
        return _json(declared) if declared is not None else {}

    async def elicit(message: str, schema: dict[str, Any]) -> dict[str, Any]:
        try:
            result = await session.elicit_form(message, schema, related_request_id=request_id)
        except MCPError as failed:
            raise ElicitError(failed.code, failed.message, failed.data) from None
        return _json(result)

    exit_stack = getattr(connection, "exit_stack", None)
    on_close = exit_stack.callback if exit_stack is not None else _no_close
    can_ask = bool(session.can_send_request)
    return CallSite(connection, capabilities, can_ask, on_close, tool, run, elicit)


def _round_fields(params: Mapping[str, Any]) -> tuple[object, object, object]:
    return params.get("_meta"), params.get("requestState"), params.get("inputResponses")


def is_modern(protocol_version: str) -> bool:
    """Whether the SDK serves a request of ``protocol_version`` in the 2026-07-28 revision."""
    return protocol_version in MODERN_PROTOCOL_VERSIONS


def initialize_accepted(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the SDK serves requests on the call's connection (else it refuses it itself)."""
    if is_modern(ctx.protocol_version):
        return True  # a 2026-07-28 request's connection is born ready
    connection = getattr(ctx.session, "_connection", None)
    return bool(getattr(connection, "initialize_accepted", True))


async def lookup_mcpserver_tool(
    server: MCPServer, _ctx: ServerRequestContext[Any, Any], name: str
) -> dict[str, Any] | None:
    """The ``tools/list`` entry of ``server``'s tool ``name`` (``MCPServer.list_tools``)."""
    for tool in await server.list_tools():
        if tool.name == name:
            return _json(tool)
    return None


async def lookup_lowlevel_tool(
    server: Server[Any], ctx: ServerRequestContext[Any, Any], name: str
) -> dict[str, Any] | None:
    """The ``tools/list`` entry of tool ``name``, as the low-level server's own ``tools/list``
    handler lists it (read page by page, at most :data:`MAX_TOOL_PAGES`)."""
    entry = server.get_request_handler("tools/list")
    if entry is None:
        return None
    cursor: object = None
    for _ in range(MAX_TOOL_PAGES):
        page_params: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
        listing = dataclasses.replace(ctx, method="tools/list", params=page_params)
        page = await entry.handler(listing, entry.params_type.model_validate(page_params))
        if isinstance(page, types.ListToolsResult):  # only the one tool is dumped
            for tool in page.tools:
                if tool.name == name:
                    return _json(tool)
            cursor = page.next_cursor
        else:
            listed = _json(page)
            for entry_json in listed.get("tools", ()):
                if isinstance(entry_json, dict) and entry_json.get("name") == name:
                    return entry_json
            cursor = listed.get("nextCursor")
        if not cursor:
            break
    return None


class GateMiddleware:
    """A low-level ``Server`` middleware sending every ``tools/call`` through ``gate`` (and,
    when it has a read authorizer, the reads of ``GUARDED_READS``). ``lookup`` finds the
    called tool's ``tools/list`` entry; without one (a server that only serves reads), tool
    calls are not guarded here."""

    def __init__(self, gate: Gate, lookup: ToolLookup | None) -> None:
        self.gate = gate
        self.lookup = lookup

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        method = ctx.method
        params = ctx.params
        if ctx.request_id is None or not isinstance(params, dict):
            return await call_next(ctx)
        if method == "tools/call" and self.lookup is not None:
            name = params.get("name")
            if isinstance(name, str) and initialize_accepted(ctx):
                return await self._call(ctx, call_next, params, name, self.lookup)
        elif method in GUARDED_READS and self.gate.guards_reads and initialize_accepted(ctx):
            return await self._read(ctx, call_next, params, method)
        return await call_next(ctx)  # not the gate's, or the framework's own refusal

    async def _call(
        self,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
        params: dict[str, Any],
        name: str,
        lookup: ToolLookup,
    ) -> HandlerResult:
        async def tool() -> dict[str, Any] | None:
            return await lookup(ctx, name)

        ran_results: list[dict[str, Any]] = []

        async def run(arguments: object, round_: Round | None) -> object:
            ran = {**with_round(params, round_), "arguments": arguments}
            result = _json(await call_next(dataclasses.replace(ctx, params=ran)))
            ran_results.append(result)
            return as_worker_value(result)

        if is_modern(ctx.protocol_version):
            site = modern_site(*_round_fields(params), tool, run)
        else:
            site = legacy_site(ctx.session, ctx.request_id, tool, run)
        try:
            result = await self.gate.call(site, ctx.request_id, name, params.get("arguments"))
        except GateError as refused:
            raise MCPError(refused.code, refused.message, refused.data) from None
        if any(result is ran for ran in ran_results) or "resultType" in result:
            return result  # the framework's own, as it made it, or a 2026-07-28 answer as sent
        # The reducer's (a deny, a failure): the SDK's model, which it renders for the era.
        return types.CallToolResult.model_validate(result)

    async def _read(
        self,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
        params: dict[str, Any],
        method: str,
    ) -> HandlerResult:
        async def run(given: object, round_: Round | None) -> object:
            ran = with_round(given if isinstance(given, dict) else params, round_)
            try:
                answer = await call_next(dataclasses.replace(ctx, params=ran))
            except MCPError as failed:  # the framework's own error, answered as it is
                return Failure(failed.code, failed.message, failed.data)
            return as_worker_value(_json(answer))

        if is_modern(ctx.protocol_version):
            site = modern_site(*_round_fields(params), None, run)
        else:
            site = legacy_site(ctx.session, ctx.request_id, None, run)
        try:
            return await self.gate.read(site, ctx.request_id, method, params)
        except GateError as refused:
            raise MCPError(refused.code, refused.message, refused.data) from None


def guard(
    server: MCPServer | Server[Any],
    authorizer: Authorizer | None = None,
    *,
    read_authorizer: Authorizer | None = None,
    gate: Gate | None = None,
    sensitive: Iterable[str] = (),
    **options: Any,
) -> Gate:
    """Puts askgate's gate in front of ``server``'s tools (and, with ``read_authorizer``, its
    reads) and returns the gate.

    A new :class:`Gate` is made from ``authorizer``, ``read_authorizer``, ``sensitive`` and
    ``options`` unless ``gate`` is given (one gate may guard several servers: its caps span
    them). Serving the server (``server.run()``, ``Server.run``) enters the gate when it is not
    running yet; to share it across connections served separately (several in-memory sessions),
    enter ``gate.running()`` around them.
    """
    name, version = server.name, server.version
    gate = _gate_for(name, version, authorizer, read_authorizer, gate, sensitive, options)
    if isinstance(server, MCPServer):
        mcpserver = server

        async def lookup(ctx: ServerRequestContext[Any, Any], name: str) -> dict[str, Any] | None:
            return await lookup_mcpserver_tool(mcpserver, ctx, name)

        server.middleware.append(GateMiddleware(gate, lookup))
        lowlevel: Server[Any] = server._lowlevel_server  # private: its lifespan (see above)
    else:
        lowlevel = server

        async def lookup_low(
            ctx: ServerRequestContext[Any, Any], name: str
        ) -> dict[str, Any] | None:
            return await lookup_lowlevel_tool(lowlevel, ctx, name)

        server.middleware.append(GateMiddleware(gate, lookup_low))
    enter_on_serving(lowlevel, gate)
    return gate


def _gate_for(
    name: str | None,
    version: str | None,
    authorizer: Authorizer | None,
    read_authorizer: Authorizer | None,
    gate: Gate | None,
    sensitive: Iterable[str],
    options: dict[str, Any],
) -> Gate:
    """The gate given, or a new one naming the framework's server in its 2026-07-28 answers."""
    if gate is not None:
        if authorizer is not None or read_authorizer is not None or options or tuple(sensitive):
            raise TypeError("give either a gate or the gate's authorizer and options, not both")
        return gate
    if name:
        options.setdefault("server_name", name)
    if version:
        options.setdefault("server_version", version)
    return Gate(authorizer, read_authorizer=read_authorizer, sensitive=sensitive, **options)


def enter_on_serving(lowlevel: Server[Any], gate: Gate) -> None:
    """Wraps ``lowlevel``'s lifespan so that serving enters ``gate`` unless it runs."""
    inner = lowlevel.lifespan
    enter = gate.lifespan_entered()

    @asynccontextmanager
    async def lifespan(app: Server[Any]) -> AsyncIterator[Any]:
        async with enter(), inner(app) as value:
            yield value

    lowlevel.lifespan = lifespan
