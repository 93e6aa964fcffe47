"""The official ``mcp`` SDK's high-level ``MCPServer``: ``echo`` and ``guarded_echo``.

    python bench/peers/mcpserver_server.py                 # stdio
    python bench/peers/mcpserver_server.py --port PORT     # Streamable HTTP on 127.0.0.1

A peer for ``make bench-peers``: the two tools written the way the SDK's documentation shows
(decorated functions, a pydantic model as the elicitation schema), served by ``MCPServer.run``
with its defaults. ``guarded_echo`` asks with a boolean ``approve`` and echoes only on
``accept`` with ``approve`` true, else answers ``not approved`` as a tool error. Nothing is tuned.
"""

from __future__ import annotations

import argparse

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field


class Approval(BaseModel):
    approve: bool = Field(title="Approve")


mcp = MCPServer("mcpserver-echo", version="0.0.0")


@mcp.tool()
def echo(text: str) -> str:
    """Returns its text argument."""
    return text


@mcp.tool()
async def guarded_echo(text: str, ctx: Context) -> str:
    """Returns its text argument once the user approves (asks)."""
    answer = await ctx.elicit(f"Allow guarded_echo to echo {text!r}?", Approval)
    if answer.action != "accept" or not answer.data.approve:
        raise ValueError("not approved")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--port", type=int, help="serve Streamable HTTP on 127.0.0.1:PORT")
    args = parser.parse_args()
    if args.port is None:
        mcp.run("stdio")
    else:
        mcp.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
