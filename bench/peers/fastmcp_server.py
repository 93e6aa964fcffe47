"""A fastmcp server: ``echo`` and ``guarded_echo``.

    .bench-peers/fastmcp/bin/python bench/peers/fastmcp_server.py                # stdio
    .bench-peers/fastmcp/bin/python bench/peers/fastmcp_server.py --port PORT    # HTTP

A peer for ``make bench-peers``, run from its own virtual environment (fastmcp brings its own
``mcp`` release, which need not be the one askgate's tests pin). The tools are written the way
fastmcp's documentation shows; ``guarded_echo`` asks with ``ctx.elicit`` and a boolean
``approve``, and echoes only on ``accept`` with ``approve`` true. Nothing is tuned.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from fastmcp import Context, FastMCP


@dataclass
class Approval:
    approve: bool


mcp = FastMCP("fastmcp-echo")


@mcp.tool
def echo(text: str) -> str:
    """Returns its text argument."""
    return text


@mcp.tool
async def guarded_echo(text: str, ctx: Context) -> str:
    """Returns its text argument once the user approves (asks)."""
    answer = await ctx.elicit(f"Allow guarded_echo to echo {text!r}?", response_type=Approval)
    if answer.action != "accept" or not answer.data.approve:
        raise ValueError("not approved")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--port", type=int, help="serve Streamable HTTP on 127.0.0.1:PORT")
    args = parser.parse_args()
    if args.port is None:
        mcp.run(show_banner=False)
    else:
        mcp.run(transport="http", host="127.0.0.1", port=args.port, show_banner=False)


if __name__ == "__main__":
    main()
