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

:func:`guard` appends a server middleware (:class:`GateMiddleware`) to the low-level
``Server``'s chain (``MCPServer`` has one inside) and wraps its lifespan so that serving enters
the gate when nothing else did. Every ``tools/call`` goes to askgate's reducer; the framework's
handler runs as the reducer's ``RunTool`` worker, and an ``Ask`` is sent with the session's own
``elicit_form`` on the call's stream (spec/adapters.md). Everything else (``initialize``,
``tools/list``, resources, prompts) is the framework's, untouched.

Uses two private attributes of ``mcp`` 2.3: ``MCPServer._lowlevel_server`` (the SDK's own
in-memory transport reads it too) and ``ServerSession._connection`` (the connection a request
came on: its capabilities, protocol version and exit stack). Without the latter every call is
its own connection, which cannot be asked (deny-on-ASK).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from askgate.server import Authorizer

from ._gate import CallSite, ElicitError, Gate, GateError

__all__ = ["GateMiddleware", "guard"]

MAX_TOOL_PAGES = 100
"""How many pages of ``tools/list`` the gate reads at most (R-ADAPT-7)."""


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


def call_site(
    session: Any,
    request_id: object,
    tools: Callable[[], Any],
    run: Callable[[object], Any],
) -> CallSite:
    """What the gate needs of one call on an SDK ``ServerSession`` (fastmcp's too)."""
    connection = getattr(session, "_connection", None)
    if connection is None:  # pragma: no cover - mcp 2.3 always has one
        return CallSite(object(), {}, False, _no_close, tools, run, _cannot_elicit)
    declared = getattr(connection, "client_capabilities", None)
    capabilities = _json(declared) if declared is not None else {}
    version = getattr(connection, "protocol_version", None)
    can_ask = version not in MODERN_PROTOCOL_VERSIONS and bool(
        getattr(session, "can_send_request", False)
    )

    async def elicit(message: str, schema: dict[str, Any]) -> dict[str, Any]:
        try:
            result = await session.elicit_form(message, schema, related_request_id=request_id)
        except MCPError as failed:
            raise ElicitError(failed.code, failed.message, failed.data) from None
        return _json(result)

    exit_stack = getattr(connection, "exit_stack", None)
    on_close = exit_stack.callback if exit_stack is not None else _no_close
    return CallSite(connection, capabilities, can_ask, on_close, tools, run, elicit)


async def _cannot_elicit(
    _message: str, _schema: dict[str, Any]
) -> dict[str, Any]:  # pragma: no cover
    raise ElicitError(-32601, "no back-channel")


class GateMiddleware:
    """A low-level ``Server`` middleware sending every ``tools/call`` through ``gate``."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        params = ctx.params
        if ctx.method != "tools/call" or ctx.request_id is None or not isinstance(params, dict):
            return await call_next(ctx)
        name = params.get("name")
        connection = getattr(ctx.session, "_connection", None)
        if not isinstance(name, str) or not getattr(connection, "initialize_accepted", True):
            return await call_next(ctx)  # the framework's own refusal

        async def tools() -> list[dict[str, Any]]:
            listed: list[dict[str, Any]] = []
            cursor: object = None
            for _ in range(MAX_TOOL_PAGES):
                # The call's _meta goes along: a 2026-07-28 request is refused without it.
                page_params = {key: params[key] for key in ("_meta",) if key in params}
                if cursor is not None:
                    page_params["cursor"] = cursor
                page = _json(
                    await call_next(
                        dataclasses.replace(ctx, method="tools/list", params=page_params)
                    )
                )
                listed.extend(tool for tool in page.get("tools", ()) if isinstance(tool, dict))
                cursor = page.get("nextCursor")
                if not cursor:
                    break
            return listed

        async def run(arguments: object) -> dict[str, Any]:
            ran = {**params, "arguments": arguments}
            return _json(await call_next(dataclasses.replace(ctx, params=ran)))

        site = call_site(ctx.session, ctx.request_id, tools, run)
        try:
            result = await self.gate.call(site, ctx.request_id, name, params.get("arguments"))
        except GateError as refused:
            raise MCPError(refused.code, refused.message, refused.data) from None
        if "resultType" in result:  # the framework's own result, as it made it
            return result
        # The reducer's (a deny, a failure): the SDK's model, which it renders for the era.
        return types.CallToolResult.model_validate(result)


def guard(
    server: MCPServer | Server[Any],
    authorizer: Authorizer | None = None,
    *,
    gate: Gate | None = None,
    sensitive: Iterable[str] = (),
    **options: Any,
) -> Gate:
    """Puts askgate's gate in front of ``server``'s tools and returns the gate.

    A new :class:`Gate` is made from ``authorizer``, ``sensitive`` and ``options`` unless
    ``gate`` is given (one gate may guard several servers: its caps span them). Serving the
    server (``server.run()``, ``Server.run``) enters the gate when it is not running yet; to
    share it across connections served separately (several in-memory sessions), enter
    ``gate.running()`` around them.
    """
    if gate is None:
        gate = Gate(authorizer, sensitive=sensitive, **options)
    elif authorizer is not None or options or tuple(sensitive):
        raise TypeError("give either a gate or the gate's authorizer and options, not both")
    lowlevel: Server[Any] = server._lowlevel_server if isinstance(server, MCPServer) else server
    lowlevel.middleware.append(GateMiddleware(gate))
    enter_on_serving(lowlevel, gate)
    return gate


def enter_on_serving(lowlevel: Server[Any], gate: Gate) -> None:
    """Wraps ``lowlevel``'s lifespan so that serving enters ``gate`` unless it runs."""
    inner = lowlevel.lifespan
    enter = gate.lifespan_entered()

    @asynccontextmanager
    async def lifespan(app: Server[Any]) -> AsyncIterator[Any]:
        async with enter(), inner(app) as value:
            yield value

    lowlevel.lifespan = lifespan
