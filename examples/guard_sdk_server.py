"""An official-SDK server (``MCPServer``) with askgate's gate in front of its tools.

Run it over stdio (``python examples/guard_sdk_server.py``) and call ``delete_file`` from a
client that declares elicitation: the client is asked to approve, and the file is "deleted"
only on an exact approval. ``read_file`` runs at once. A low-level ``mcp.server.lowlevel.Server``
is guarded the same way: ``guard(server, policy)``. tests/test_adapters.py serves this file and
drives it with the official client.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from askgate import Allow, Ask
from askgate.adapters.sdk import guard

server = MCPServer("files")


@server.tool()
def read_file(path: str) -> str:
    """Reads a file (pretends to)."""
    return f"read {path}"


@server.tool()
def delete_file(path: str) -> str:
    """Deletes a file (pretends to)."""
    return f"deleted {path}"


def policy(tool: str, arguments: Any, _context: Any) -> object:
    """Asks before deleting anything; allows the rest."""
    if tool == "delete_file":
        return Ask(f"Delete {arguments['path']}?")
    return Allow()


guard(server, policy, elicitation_timeout_ms=30_000)

if __name__ == "__main__":
    server.run()
