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

_OPTION_FLAGS = (
    ("--elicitation-timeout-ms", "elicitation_timeout_ms", "how long a parked call waits (ms)"),
    ("--max-parked", "max_parked_elicitations", "parked calls per connection"),
    ("--max-parked-total", "max_parked_elicitations_total", "parked calls in total"),
    ("--max-in-flight", "max_in_flight", "callback workers in total"),
    ("--max-in-flight-per-connection", "max_in_flight_per_connection", "workers per connection"),
    ("--max-client-capabilities", "max_client_capabilities", "capability entries kept"),
    ("--callback-timeout-ms", "callback_timeout_ms", "how long a callback may run (ms)"),
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
    if args.http is not None:
        print("askgate: --http is not available yet; use --stdio", file=sys.stderr)
        return 2
    options: dict[str, Any] = {
        dest: getattr(args, dest) for _, dest, _ in _OPTION_FLAGS if getattr(args, dest) is not None
    }
    try:
        policy = load_policy(args.policy) if args.policy else None
        if args.demo:
            from askgate.demo import build_demo

            server = build_demo(policy, configured=policy is not None, **options)
        else:
            from askgate.server import Server

            server = Server(
                "askgate",
                authorizer=policy.authorize if policy else None,
                read_authorizer=policy.authorize_read if policy else None,
                authorizer_source="configured" if policy else "default",
                **options,
            )
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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.version or args.command is None:
        from askgate import __version__

        print(f"askgate {__version__}")
        return 0
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
