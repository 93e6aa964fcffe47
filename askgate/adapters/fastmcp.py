"""askgate's gate in front of a fastmcp server's tools (fastmcp 4).

::

    from fastmcp import FastMCP
    from askgate import Allow, Ask
    from askgate.adapters.fastmcp import guard

    mcp = FastMCP("files")

    @mcp.tool(annotations={"destructiveHint": True})
    def delete_file(path: str) -> str: ...

    guard(mcp, lambda tool, args, ctx: Ask(f"Delete {args['path']}?"))
    mcp.run()  # stdio, as before

:func:`guard` adds a fastmcp :class:`~fastmcp.server.middleware.Middleware`
(:class:`GateMiddleware`) whose ``on_call_tool`` sends every call through askgate's reducer:
the rest of fastmcp's chain (the tool itself) runs as the reducer's ``RunTool`` worker, and an
``Ask`` is sent with the request's session, as fastmcp's own ``Context.elicit`` sends it, but
with the reducer's schema and without fastmcp's parsing of the answer (spec/adapters.md,
R-ADAPT-3). It also wraps the lifespan of fastmcp's low-level SDK server so that serving
enters the gate when nothing else did.

Uses fastmcp's private ``FastMCP._mcp_server`` (the SDK ``Server`` it serves with; its lifespan
is outside fastmcp's own, whose shielded teardown must not hold the gate's task groups) and,
through the SDK, ``ServerSession._connection`` (see :mod:`askgate.adapters.sdk`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import mcp_types
from fastmcp import FastMCP
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools import ToolResult
from mcp.shared.exceptions import MCPError

from askgate.server import Authorizer

from ._gate import Gate, GateError
from .sdk import call_site, enter_on_serving

__all__ = ["GateMiddleware", "guard"]


def _result_json(result: ToolResult) -> dict[str, Any]:
    """A fastmcp tool result as the ``tools/call`` result object it is sent as."""
    out: dict[str, Any] = {
        "content": [
            block.model_dump(by_alias=True, mode="json", exclude_none=True)
            for block in result.content
        ]
    }
    if result.structured_content is not None:
        out["structuredContent"] = result.structured_content
    if result.is_error:
        out["isError"] = True
    if result.meta:
        out["_meta"] = result.meta
    return out


class GateMiddleware(Middleware):
    """A fastmcp middleware sending every ``tools/call`` through ``gate``."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_call_tool(
        self,
        context: MiddlewareContext[mcp_types.CallToolRequestParams],
        call_next: CallNext[mcp_types.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        fctx = context.fastmcp_context
        if fctx is None or fctx.request_context is None:
            # Not a client's request (a server calling its own tool): nothing to ask anyone.
            return await call_next(context)
        params = context.message
        server = fctx.fastmcp
        request_id = fctx.request_context.request_id

        async def tools() -> list[dict[str, Any]]:
            listed = await server.list_tools(run_middleware=False)
            return [
                tool.to_mcp_tool().model_dump(by_alias=True, mode="json", exclude_none=True)
                for tool in listed
            ]

        async def run(arguments: object) -> dict[str, Any]:
            ran = params.model_copy(update={"arguments": arguments})
            return _result_json(await call_next(context.copy(message=ran)))

        site = call_site(fctx.session, request_id, tools, run)
        try:
            result = await self.gate.call(site, request_id, params.name, params.arguments)
        except GateError as refused:
            raise MCPError(refused.code, refused.message, refused.data) from None
        return ToolResult.from_mcp_result(mcp_types.CallToolResult.model_validate(result))


def guard(
    server: FastMCP[Any],
    authorizer: Authorizer | None = None,
    *,
    gate: Gate | None = None,
    sensitive: Iterable[str] = (),
    **options: Any,
) -> Gate:
    """Puts askgate's gate in front of ``server``'s tools and returns the gate (as
    :func:`askgate.adapters.sdk.guard`)."""
    if gate is None:
        gate = Gate(authorizer, sensitive=sensitive, **options)
    elif authorizer is not None or options or tuple(sensitive):
        raise TypeError("give either a gate or the gate's authorizer and options, not both")
    server.add_middleware(GateMiddleware(gate))
    enter_on_serving(server._mcp_server, gate)
    return gate
