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
- ``guarded_echo(text)`` asks the caller for approval with askgate's approval schema (a boolean
  ``approve``) and returns ``text`` only when the answer is ``accept`` with ``approve`` true;
  anything else answers a denial (``isError``). This is the work askgate's demo does for the
  same tool under its policy. How it asks depends on the request's protocol version:

  - up to 2025-11-25 (a session opened by ``initialize``), it sends an ``elicitation/create``
    related to the call, so it goes on the call's SSE stream, and awaits the answer;
  - from 2026-07-28 (a stateless POST whose ``_meta`` carries the version and the client's
    capabilities), it answers the call with an ``InputRequiredResult``: the same form as the one
    input request under the key ``approval`` and a ``requestState``; the client's retry (a new
    id, ``inputResponses`` and the echoed ``requestState``) is judged the same way. The state
    is sealed and checked by the SDK's own ``RequestStateBoundary`` middleware under
    ``RequestStateSecurity.ephemeral()`` (AES-256-GCM under a process-local key; expiry and a
    digest of the tool and its arguments bound; no single-use record), which is what
    ``MCPServer`` installs by default. A client that declared no form elicitation gets the
    SDK's -32021 ``MissingRequiredClientCapabilityError``.
"""

from __future__ import annotations

import argparse
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types.version import is_version_at_least

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
NAME = "sdk-echo-http"
MODERN = "2026-07-28"
ASK_KEY = "approval"
ASKED = "asked-approval"  # the plaintext requestState; the boundary seals it


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


async def list_tools(
    _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult | types.InputRequiredResult:
    if params.name not in ("echo", "guarded_echo"):
        return _error(f"unknown tool: {params.name}")
    text = (params.arguments or {}).get("text")
    if not isinstance(text, str):
        return _error(f"{params.name} needs a string 'text'")
    if params.name == "guarded_echo":
        message = f"Allow guarded_echo to echo {text!r}?"
        if is_version_at_least(ctx.protocol_version, MODERN):
            return _modern_approval(ctx, params, message, text)
        answer = await ctx.session.elicit_form(
            message, APPROVAL_SCHEMA, related_request_id=ctx.request_id
        )
        if not _approved(answer):
            return _error("not approved")
    return types.CallToolResult(content=[types.TextContent(text=text)])


def _approved(answer: object) -> bool:
    return (
        isinstance(answer, types.ElicitResult)
        and answer.action == "accept"
        and (answer.content or {}).get("approve") is True
    )


def _modern_approval(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams, message: str, text: str
) -> types.CallToolResult | types.InputRequiredResult:
    """The first round asks (input required); the retry, its state verified by the boundary,
    runs only on an accepted ``approve: true``."""
    if params.request_state is None:
        caps = ctx.session.client_capabilities
        elicitation = caps.elicitation if caps is not None else None
        if elicitation is None or (elicitation.form is None and elicitation.url is not None):
            needed = types.ClientCapabilities(
                elicitation=types.ElicitationCapability(form=types.FormElicitationCapability())
            )
            raise MCPError(
                code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                message="guarded_echo needs form elicitation",
                data=types.MissingRequiredClientCapabilityErrorData(
                    required_capabilities=needed
                ).model_dump(by_alias=True, exclude_none=True),
            )
        ask = types.ElicitRequest(
            params=types.ElicitRequestFormParams(message=message, requested_schema=APPROVAL_SCHEMA)
        )
        return types.InputRequiredResult(input_requests={ASK_KEY: ask}, request_state=ASKED)
    if params.request_state != ASKED:
        return _error("unknown request state")
    answer = (params.input_responses or {}).get(ASK_KEY)
    if not _approved(answer):
        return _error("not approved")
    return types.CallToolResult(content=[types.TextContent(text=text)])


server: Server[Any] = Server(
    NAME, version="0.0.0", on_list_tools=list_tools, on_call_tool=call_tool
)
server.middleware.append(
    RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=NAME)
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
