"""The ``askgate`` command line: ``askgate serve`` and ``askgate --version``.

Exit status: 0 when serving ended at end of input, 1 when the server's own machinery failed,
2 when it refused to start (a bad option, a malformed policy file, a transport not available).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from typing import Any

SHUTDOWN_GRACE_S = 5
"""Seconds `askgate serve --http` lets open responses finish when told to stop."""

_OPTION_FLAGS = (
    ("--elicitation-timeout-ms", "elicitation_timeout_ms", "how long a parked call waits (ms)"),
    ("--max-parked", "max_parked_elicitations", "parked calls per connection"),
    ("--max-parked-total", "max_parked_elicitations_total", "parked calls in total"),
    ("--max-in-flight", "max_in_flight", "callback workers in total"),
    ("--max-in-flight-per-connection", "max_in_flight_per_connection", "workers per connection"),
    ("--max-client-capabilities", "max_client_capabilities", "capability entries kept"),
    ("--callback-timeout-ms", "callback_timeout_ms", "how long a callback may run (ms)"),
    (
        "--max-client-requests-per-call",
        "max_client_requests_per_call",
        "a running tool's requests to its client outstanding at once",
    ),
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="askgate", description="An MCP server core that decides when a tool may run."
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser("serve", help="serve MCP (stdio by default)")
    where = serve.add_mutually_exclusive_group()
    where.add_argument("--stdio", action="store_true", help="serve on stdin/stdout (default)")
    where.add_argument("--http", metavar="HOST:PORT", help="serve Streamable HTTP")
    serve.add_argument("--demo", action="store_true", help="serve the demo tools")
    serve.add_argument(
        "--auth",
        default="none",
        choices=["none", "bearer", "apikey"],
        help="HTTP: who may connect (none: loopback peers only; bearer/apikey need --tokens)",
    )
    serve.add_argument("--tokens", metavar="FILE", help="HTTP: 'principal token' lines")
    serve.add_argument(
        "--allow-origin", action="append", default=[], metavar="ORIGIN", help="HTTP: an Origin"
    )
    serve.add_argument(
        "--allow-host", action="append", default=[], metavar="HOST", help="HTTP: a Host value"
    )
    serve.add_argument(
        "--banner", action="store_true", help="HTTP: print the URL and client configuration"
    )
    serve.add_argument("--policy", metavar="FILE", help="a policy file (TOML; see README)")
    for flag, dest, text in _OPTION_FLAGS:
        serve.add_argument(flag, dest=dest, type=int, metavar="N", help=text)
    serve.add_argument(
        "--backend",
        default="asyncio",
        choices=["asyncio", "trio"],
        help="the event loop to run on (default: asyncio; trio needs the trio package)",
    )
    serve.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error", "critical"],
        type=str.lower,
        help="what askgate logs on stderr (default: warning)",
    )
    return parser


def _serve(args: argparse.Namespace) -> int:
    from askgate.core import OptionError
    from askgate.policy import PolicyError, load_policy

    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, args.log_level.upper()),
        format="askgate %(levelname)s %(name)s: %(message)s",
    )
    options: dict[str, Any] = {
        dest: getattr(args, dest) for _, dest, _ in _OPTION_FLAGS if getattr(args, dest) is not None
    }
    try:
        policy = load_policy(args.policy) if args.policy else None
        if policy is not None:  # what the loader chose for the file, and what looks wrong
            for note in policy.notices:
                logging.getLogger("askgate").info("%s", note)
            for warning in policy.warnings:
                logging.getLogger("askgate").warning("%s", warning)
        if args.demo:
            from askgate.demo import build_demo

            # The demo ships its policy: serving it is the operator's choice (R-HTTP-13).
            configured = policy is not None or args.http is not None
            server = build_demo(policy, configured=configured, **options)
        else:
            from askgate.server import Server

            server = Server(
                "askgate",
                authorizer=policy.authorize if policy else None,
                read_authorizer=policy.authorize_read if policy else None,
                visibility=policy.visible if policy else None,
                authorizer_source="configured" if policy else "default",
                **options,
            )
        if args.http is not None:
            return _serve_http(server, args)
        logging.getLogger("askgate").info(
            "serving %s on stdio: JSON-RPC lines on stdin/stdout, logs on stderr",
            "the demo" if args.demo else "no tools",
        )
        return server.run_stdio(backend=args.backend)
    except OptionError as refused:
        print(refused, file=sys.stderr)
        return 2
    except PolicyError as refused:
        print(f"askgate refuses to start: {refused}", file=sys.stderr)
        return 2


def _serve_http(server: Any, args: argparse.Namespace) -> int:
    """Serves Streamable HTTP with uvicorn on HOST:PORT; prints the refusal of
    :func:`askgate.core.http.listen_or_refuse` and exits 2 instead when it refuses (R-HTTP-13)."""
    import uvicorn

    from askgate.core import http as rules
    from askgate.transports.auth import (
        ApiKeyAuth,
        BearerAuth,
        LoopbackOnly,
        TokenFileError,
        load_tokens,
    )
    from askgate.transports.http import ENDPOINT, HttpApp

    tokens: dict[str, str] = {}
    token_error = None
    if args.auth != "none" and args.tokens:
        try:
            tokens = load_tokens(args.tokens)
        except TokenFileError as bad:
            token_error = str(bad)
    where = rules.listen_or_refuse(
        args.http,
        args.auth,
        args.tokens,
        token_error,
        server.authorization_configured(),
        server.read_authorization_configured(),
    )
    if isinstance(where, str):  # R-HTTP-13
        print(where, file=sys.stderr)
        return 2
    host, port = where.host, where.port
    auth: Any
    if args.auth == "none":
        auth = LoopbackOnly()
    else:
        auth = BearerAuth(tokens) if args.auth == "bearer" else ApiKeyAuth(tokens)
    options = rules.HttpOptions(
        port=port,
        allowed_hosts=tuple(args.allow_host),
        allowed_origins=tuple(args.allow_origin),
    )
    app = HttpApp(server, auth=auth, options=options)  # its guard passes: checked above
    url = f"http://{host if ':' not in host else f'[{host}]'}:{port}{ENDPOINT}"
    if args.banner:
        print(
            f"askgate: serving {'the demo' if args.demo else 'MCP'} on {url}\n"
            "  MCP client configuration:\n"
            f'  {{"mcpServers": {{"askgate": {{"type": "http", "url": "{url}"}}}}}}\n'
            "  Ctrl-C ends",
            file=sys.stderr,
        )
    logging.getLogger("askgate").info("serving Streamable HTTP on %s", url)
    # An open SSE stream (GET /mcp, GET /sse) never ends by itself: uvicorn waits for open
    # responses before the lifespan shutdown that closes them, so its wait is bounded.
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=args.log_level,
        lifespan="on",
        access_log=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    uvicorn.Server(config).run()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.version:
        from askgate import __version__

        print(f"askgate {__version__}")
        return 0
    if args.command is None:  # no command: say what there is, as a usage error
        parser.print_help(sys.stderr)
        return 2
    return _serve(args)


def _exit(status: int) -> None:
    """Ends the process now. A sync callback that hung past its timeout still runs in a thread
    the runtime abandoned, and an interpreter exit would wait for it forever."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    logging.shutdown()
    os._exit(status)


def cli() -> None:
    """The ``askgate`` console script."""
    _exit(main())


if __name__ == "__main__":
    cli()
