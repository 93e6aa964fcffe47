"""askgate: an MCP server core that decides, provably, when a tool may run.

The decisions live in :mod:`askgate.core`, a pure reducer; :mod:`askgate.transports` carries
them over stdio and HTTP; :mod:`askgate.models` holds the reference model the reducer is
checked against. :class:`Server` is the Python API: declare tools, resources, prompts and an
authorizer, then serve.
"""

__version__ = "0.1.0"

from askgate.core import Allow, Ask, Deny
from askgate.server import (
    ClientRequestError,
    Context,
    InputRequired,
    Server,
    elicitation_request,
    roots_request,
    sampling_request,
)
from askgate.transports.runtime import completes_without_suspending

__all__ = [
    "Allow",
    "Ask",
    "ClientRequestError",
    "Context",
    "Deny",
    "InputRequired",
    "Server",
    "__version__",
    "completes_without_suspending",
    "elicitation_request",
    "roots_request",
    "sampling_request",
]
