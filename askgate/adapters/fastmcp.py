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
the rest of fastmcp's chain (the tool itself) runs as the reducer's ``RunTool`` worker. An
``Ask`` on a connection of a 2025 revision is sent with the request's session, as fastmcp's own
``Context.elicit`` sends it, but with the reducer's schema and without fastmcp's parsing of the
answer (spec/adapters.md, R-ADAPT-3); on a request of the 2026-07-28 revision it is the
reducer's input-required result, returned as fastmcp's ``InputRequiredToolResult`` (R-ADAPT-9).
With a read authorizer, the reads are guarded by the SDK adapter's middleware on the SDK server
fastmcp serves with (R-ADAPT-11). It also wraps that server's lifespan so that serving enters
the gate when nothing else did.

Uses fastmcp's private ``FastMCP._mcp_server`` (the SDK ``Server`` it serves with; its lifespan
is outside fastmcp's own, whose shielded teardown must not hold the gate's task groups, and its
middleware chain is where the reads are) and, through the SDK, ``ServerSession._connection`` on
a connection of a 2025 revision (see :mod:`askgate.adapters.sdk`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import mcp_types
from fastmcp import FastMCP
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools import ToolResult
from fastmcp.tools.base import InputRequiredToolResult
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from askgate.core import NeedsInput, Round
from askgate.server import Authorizer

from ._gate import Gate, GateError
from .sdk import GateMiddleware as SdkGateMiddleware
from .sdk import _gate_for, enter_on_serving, is_modern, legacy_site, modern_site

__all__ = ["GateMiddleware", "guard"]


def _answers_json(responses: Mapping[str, Any]) -> dict[str, Any]:
    """A retry's ``inputResponses`` as JSON."""
    return {
        key: answer.model_dump(by_alias=True, mode="json", exclude_none=True)
        if isinstance(answer, BaseModel)
        else answer
        for key, answer in responses.items()
    }


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
        request = None if fctx is None else fctx.request_context
        if fctx is None or request is None:
            # Not a client's request (a server calling its own tool): nothing to ask anyone.
            return await call_next(context)
        params = context.message
        server = fctx.fastmcp
        request_id = request.request_id
        name = params.name

        async def tool() -> dict[str, Any] | None:
            found = await server.get_tool(name)
            if found is None:
                return None
            described: dict[str, Any] = found.to_mcp_tool().model_dump(
                by_alias=True, mode="json", exclude_none=True
            )
            return described

        async def run(arguments: object, _round: Round | None) -> object:
            # Only the arguments change: a fastmcp tool reads its round from the wire request.
            ran = params.model_copy(update={"arguments": arguments})
            result = await call_next(context.copy(message=ran))
            if isinstance(result, InputRequiredToolResult):  # R-ADAPT-10
                asked = result.input_required.model_dump(
                    by_alias=True, mode="json", exclude_none=True
                )
                return NeedsInput(asked.get("inputRequests") or {}, asked.get("requestState"))
            return _result_json(result)

        if is_modern(request.protocol_version):
            responses = fctx.input_responses  # as the SDK parsed them, like a 2025 answer
            answers = None if responses is None else _answers_json(responses)
            site = modern_site(request.meta, fctx.request_state, answers, tool, run)
        else:
            site = legacy_site(fctx.session, request_id, tool, run)
        try:
            result = await self.gate.call(site, request_id, name, params.arguments)
        except GateError as refused:
            raise MCPError(refused.code, refused.message, refused.data) from None
        if result.get("resultType") == "input_required":  # R-ADAPT-9, R-ADAPT-10
            asking = mcp_types.InputRequiredResult.model_validate(result)
            return InputRequiredToolResult(asking)
        return ToolResult.from_mcp_result(mcp_types.CallToolResult.model_validate(result))


def guard(
    server: FastMCP[Any],
    authorizer: Authorizer | None = None,
    *,
    read_authorizer: Authorizer | None = None,
    gate: Gate | None = None,
    sensitive: Iterable[str] = (),
    **options: Any,
) -> Gate:
    """Puts askgate's gate in front of ``server``'s tools (and, with ``read_authorizer``, its
    reads) and returns the gate (as :func:`askgate.adapters.sdk.guard`)."""
    gate = _gate_for(
        server.name, server.version, authorizer, read_authorizer, gate, sensitive, options
    )
    server.add_middleware(GateMiddleware(gate))
    lowlevel = server._mcp_server  # private: its lifespan and its chain (see above)
    lowlevel.middleware.append(SdkGateMiddleware(gate, None))  # the reads (R-ADAPT-11)
    enter_on_serving(lowlevel, gate)
    return gate
