"""The official ``mcp`` SDK's low-level server over Streamable HTTP: ``echo`` and ``guarded_echo``.

    python bench/sdk_http_server.py --port PORT [--host 127.0.0.1]

The baseline for ``bench/http_bench.py``: ``mcp.server.lowlevel.Server`` (``mcp`` 2.3.0) with an
``on_list_tools`` and an ``on_call_tool`` handler, served by the app its
``streamable_http_app()`` builds (a Starlette app around ``StreamableHTTPSessionManager``:
stateful sessions, SSE responses, DNS-rebinding protection for a loopback host, all defaults),
run by uvicorn with the settings ``askgate serve --http`` uses (h11 or httptools, whichever
uvicorn picks; the ASGI lifespan on; no access log). Nothing here is tuned: the point is to
measure the SDK as a user would run it.

- ``echo(text)`` returns ``text`` as one text content block.
- ``guarded_echo(text)`` first sends the caller an ``elicitation/create`` (related to the call,
  so it goes on the call's SSE stream) with askgate's approval schema, and returns ``text`` only
  when the answer is ``accept`` with ``approve`` true; anything else answers a denial
  (``isError``). This is the work askgate's demo does for the same tool under its policy.
"""

from __future__ import annotations

import argparse
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server import ServerRequestContext
from mcp.server.lowlevel import Server

TEXT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
}
TOOLS = [
    types.Tool(name="echo", description="Returns its text argument.", input_schema=TEXT_SCHEMA),
    types.Tool(
        name="guarded_echo",
        description="Returns its text argument once the user approves (asks).",
        input_schema=TEXT_SCHEMA,
    ),
]
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve"}},
    "required": ["approve"],
}


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


async def list_tools(
    _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    if params.name not in ("echo", "guarded_echo"):
        return _error(f"unknown tool: {params.name}")
    text = (params.arguments or {}).get("text")
    if not isinstance(text, str):
        return _error(f"{params.name} needs a string 'text'")
    if params.name == "guarded_echo":
        answer = await ctx.session.elicit_form(
            f"Allow guarded_echo to echo {text!r}?",
            APPROVAL_SCHEMA,
            related_request_id=ctx.request_id,
        )
        if answer.action != "accept" or (answer.content or {}).get("approve") is not True:
            return _error("not approved")
    return types.CallToolResult(content=[types.TextContent(text=text)])


server: Server[Any] = Server(
    "sdk-echo-http", version="0.0.0", on_list_tools=list_tools, on_call_tool=call_tool
)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args()
    app = server.streamable_http_app(host=args.host)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        lifespan="on",
        access_log=False,
    )
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
