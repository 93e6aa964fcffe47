"""The official ``mcp`` SDK's low-level server over stdio, with one tool: ``echo(text)``.

    python bench/sdk_echo_server.py

The baseline for ``bench/stdio_bench.py``: ``mcp.server.lowlevel.Server`` (``mcp`` 2.3.0) with
an ``on_list_tools`` and an ``on_call_tool`` handler, served by ``mcp.server.stdio.stdio_server``
exactly as the SDK's documentation shows. ``echo`` returns its ``text`` argument as one text
content block. Nothing here is tuned: the point is to measure the SDK as a user would run it.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

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
    return types.ListToolsResult(tools=[ECHO])


async def call_tool(
    _ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    if params.name != "echo":
        return types.CallToolResult(
            content=[types.TextContent(text=f"unknown tool: {params.name}")], is_error=True
        )
    text = (params.arguments or {}).get("text")
    if not isinstance(text, str):
        return types.CallToolResult(
            content=[types.TextContent(text="echo needs a string 'text'")], is_error=True
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
