"""askgate's gate in front of other frameworks' MCP servers (spec/adapters.md).

:class:`Gate` is the shell the adapters share; :mod:`askgate.adapters.sdk` wraps an official
SDK server (``MCPServer`` or the low-level ``Server``), :mod:`askgate.adapters.fastmcp` a
fastmcp server. Each needs its framework installed (the ``sdk`` and ``fastmcp`` extras).
"""

from ._gate import CallSite, ElicitError, Gate, GateError

__all__ = ["CallSite", "ElicitError", "Gate", "GateError"]
