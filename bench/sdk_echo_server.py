"""The official ``mcp`` SDK's low-level server over stdio: ``echo`` and ``guarded_echo``.

    python bench/sdk_echo_server.py

The baseline for ``bench/stdio_bench.py``: ``mcp.server.lowlevel.Server`` (``mcp`` 2.3.0) with
an ``on_list_tools`` and an ``on_call_tool`` handler, served by ``mcp.server.stdio.stdio_server``
exactly as the SDK's documentation shows. ``echo`` returns its ``text`` argument as one text
content block; ``guarded_echo`` first asks for approval with askgate's approval schema (a boolean
``approve``, sent as an ``elicitation/create`` related to the call) and returns ``text`` only on
``accept`` with ``approve`` true, else a denial (``isError``): the work askgate's demo does for
the same tool. Nothing here is tuned: the point is to measure the SDK as a user would run it.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TEXT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
}
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve"}},
    "required": ["approve"],
}
GUARDED = types.Tool(
    name="guarded_echo",
    description="Returns its text argument once the user approves (asks).",
    input_schema=TEXT_SCHEMA,
)
ECHO = types.Tool(
    name="echo",
    description="Returns its text argument.",
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
)


async def list_tools(
    _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[ECHO, GUARDED])


async def call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    if params.name not in ("echo", "guarded_echo"):
        return types.CallToolResult(
            content=[types.TextContent(text=f"unknown tool: {params.name}")], is_error=True
        )
    text = (params.arguments or {}).get("text")
    if not isinstance(text, str):
        return types.CallToolResult(
            content=[types.TextContent(text="echo needs a string 'text'")], is_error=True
        )
    if params.name == "guarded_echo":
        answer = await ctx.session.elicit_form(
            f"Allow guarded_echo to echo {text!r}?",
            APPROVAL_SCHEMA,
            related_request_id=ctx.request_id,
        )
        if answer.action != "accept" or (answer.content or {}).get("approve") is not True:
            return types.CallToolResult(
                content=[types.TextContent(text="not approved")], is_error=True
            )
    return types.CallToolResult(content=[types.TextContent(text=text)])


server: Server[Any] = Server(
    "sdk-echo", version="0.0.0", on_list_tools=list_tools, on_call_tool=call_tool
)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
