"""A fastmcp server with askgate's gate in front of its tools (askgate's middleware).

Run it over stdio (``python examples/guard_fastmcp_server.py``) and call ``delete_file`` from a
client that declares elicitation: the client is asked to approve, and the file is "deleted"
only on an exact approval. ``read_file`` runs at once. tests/test_adapters.py serves this file
and drives it with the official client.
"""

from __future__ import annotations

from typing import Any

from fastmcp import FastMCP

from askgate import Allow, Ask
from askgate.adapters.fastmcp import guard

mcp = FastMCP("files")


@mcp.tool()
def read_file(path: str) -> str:
    """Reads a file (pretends to)."""
    return f"read {path}"


@mcp.tool(annotations={"destructiveHint": True})
def delete_file(path: str) -> str:
    """Deletes a file (pretends to)."""
    return f"deleted {path}"


def policy(tool: str, arguments: Any, _context: Any) -> object:
    """Asks before deleting anything; allows the rest."""
    if tool == "delete_file":
        return Ask(f"Delete {arguments['path']}?")
    return Allow()


guard(mcp, policy, elicitation_timeout_ms=30_000)

if __name__ == "__main__":
    mcp.run(show_banner=False)
