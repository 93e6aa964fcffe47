"""askgate: an MCP server core that decides, provably, when a tool may run.

The decisions live in :mod:`askgate.core`, a pure reducer; :mod:`askgate.transports` carries
them over stdio and HTTP; :mod:`askgate.models` holds the reference model the reducer is
checked against.
"""

__version__ = "0.1.0"
