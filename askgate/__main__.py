"""The ``askgate`` command line: ``askgate serve TARGET`` (a ``Server`` of your own),
``askgate serve --demo``, ``askgate --version``.

TARGET is ``module:attribute`` (a module importable from the current folder) or
``path/to/file.py:attribute`` (the file's folder goes on ``sys.path``, so its sibling imports
work); the attribute is an :class:`askgate.Server`, or a callable taking no arguments that
returns one. The command parses its arguments, applies ``--policy`` and the option flags to the
server (:meth:`askgate.Server.configure`: ``--policy`` replaces the server's own authorizers,
and says so at info), then calls :meth:`Server.run_stdio` or serves as
:meth:`Server.run_http` does, after :func:`askgate.core.http.listen_or_refuse` (R-HTTP-13).

Exit status:

- 0: serving ended: end of input on stdio, or SIGINT (Ctrl-C) or SIGTERM on either transport;
- 1: the server's own machinery failed (the traceback is on standard error);
- 2: a usage error or a refusal to start, said in one line on standard error: no TARGET nor
  ``--demo``, a TARGET that cannot be loaded, a flag given where it does not apply, a bad
  option value (named by its flag), a malformed policy or tokens file, an address refused by
  R-HTTP-13, a port in use or an address the machine cannot bind;
- 3 is not used (uvicorn's exit status for a failed start: askgate binds the port itself and
  refuses with 2).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from askgate.server import Server

_OPTION_FLAGS = (
    ("--elicitation-timeout-ms", "elicitation_timeout_ms", "how long a parked call waits (ms)"),
    ("--max-parked", "max_parked_elicitations", "parked calls per owner (principal or connection)"),
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

HTTP_ONLY = ("--auth", "--tokens", "--allow-origin", "--allow-host", "--banner")
"""Flags that mean something over ``--http`` only; given without it they are refused."""

EXIT_STATUS = """\
exit status:
  0  serving ended: end of input on stdio, or SIGINT (Ctrl-C) or SIGTERM
  1  the server's own machinery failed (traceback on stderr)
  2  usage error or refusal to start, one line on stderr: no TARGET nor --demo, a TARGET
     that cannot be loaded, an HTTP-only flag without --http, a bad option value, a
     malformed policy or tokens file, an address refused, a port in use
  3  not used (askgate binds the port itself and refuses with 2)
"""


def _option_default(dest: str) -> str:
    """The reducer's default of option ``dest`` (``askgate.core.Options``), as --help says it."""
    import attrs

    from askgate.core import Options

    default = attrs.fields_dict(Options)[dest].default
    if default is None and dest == "max_in_flight_per_connection":
        return "half of --max-in-flight, at least 1"
    return str(default)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="askgate",
        description="An MCP server core that decides when a tool may run.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser(
        "serve",
        help="serve MCP: a Server of your own (TARGET) or the demo, over stdio or HTTP",
        description="Serves a Server of your own (TARGET) or the demo tools (--demo) over\n"
        "stdio (the default) or Streamable HTTP (--http). The defaults shown are askgate's;\n"
        "an option flag left out keeps the value TARGET's Server was built with.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument(
        "target",
        nargs="?",
        metavar="TARGET",
        help="module:attribute or path/to/file.py:attribute naming a Server, or a callable "
        "taking no arguments that returns one (default: none; give TARGET or --demo)",
    )
    serve.add_argument(
        "--demo", action="store_true", help="serve the demo tools instead of TARGET (default: off)"
    )
    where = serve.add_mutually_exclusive_group()
    where.add_argument("--stdio", action="store_true", help="serve on stdin/stdout (the default)")
    where.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve Streamable HTTP on /mcp (default: off, stdio); needs --policy FILE unless "
        "--demo or TARGET brings a configured tool authorizer and a read authorizer",
    )
    serve.add_argument(
        "--policy",
        metavar="FILE",
        help="a policy file (TOML; see README: a deny entry needs a reason, an ask a prompt); "
        "replaces TARGET's own authorizers (default: none: TARGET's own authorizers, or the "
        "demo's shipped policy)",
    )
    serve.add_argument(
        "--auth",
        choices=["none", "bearer", "apikey"],
        help="HTTP: who may connect; none admits loopback peers only, bearer and apikey "
        "need --tokens (default: none)",
    )
    serve.add_argument(
        "--tokens",
        metavar="FILE",
        help="HTTP: a file of 'principal token' lines, one per principal, each token at least "
        "16 characters, '#' comments allowed (default: none)",
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        metavar="ORIGIN",
        help="HTTP: an Origin to admit besides the loopback ones, repeatable (default: "
        "loopback origins only)",
    )
    serve.add_argument(
        "--allow-host",
        action="append",
        metavar="HOST",
        help="HTTP: a Host value to admit besides the loopback names, repeatable (default: "
        "loopback names only)",
    )
    serve.add_argument(
        "--banner",
        action="store_true",
        help="HTTP: print the URL and an MCP client configuration on stderr (default: off)",
    )
    for flag, dest, text in _OPTION_FLAGS:
        serve.add_argument(
            flag,
            dest=dest,
            type=int,
            metavar="N",
            help=f"{text} (default: {_option_default(dest)})",
        )
    serve.add_argument(
        "--backend",
        default="asyncio",
        choices=["asyncio", "trio"],
        help="the event loop; trio needs the trio package and serves stdio only (default: asyncio)",
    )
    serve.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error", "critical"],
        type=str.lower,
        help="what askgate logs on stderr (default: warning)",
    )
    return parser


class StartError(Exception):
    """A refusal to start: its message is the one line the command prints (exit status 2)."""


def _flag_words(text: str) -> str:
    """``text`` with each option field name replaced by its flag (longest names first)."""
    for flag, dest, _ in sorted(_OPTION_FLAGS, key=lambda entry: -len(entry[1])):
        text = text.replace(dest, flag)
    return text


def _option_refusal(refused: Exception) -> str:
    """An :class:`~askgate.core.OptionError` in the command's words: flags, not fields."""
    option = getattr(refused, "option", None)
    dests = {dest: flag for flag, dest, _ in _OPTION_FLAGS}
    if option in dests:
        rule = _flag_words(str(getattr(refused, "rule", "")))
        value = getattr(refused, "value", None)
        return f"askgate refuses to start: {dests[option]} {value!r}: {rule}"
    return str(refused)


def load_target(target: str) -> Server:
    """The ``Server`` TARGET names; raises :class:`StartError` with the one line to print."""
    from askgate.server import Server

    found, where = load_attribute(target)
    if isinstance(found, Server):
        return found
    if callable(found) and not isinstance(found, type) and _takes_no_arguments(found):
        made = _import(found, where)
        if isinstance(made, Server):
            return made
        raise StartError(
            f"askgate refuses to start: {target} returned {type(made).__name__}, not an askgate "
            "Server"
        )
    raise StartError(
        f"askgate refuses to start: {target} is {type(found).__name__}, not an askgate Server "
        "nor a callable taking no arguments that returns one"
    )


def load_attribute(target: str) -> tuple[Any, str]:
    """What ``module:attribute`` or ``path/to/file.py:attribute`` names, and the module or
    file it came from; raises :class:`StartError` with the one line to print. The user's code
    runs as :func:`_import` says. ``examples/check_your_reducer.py --reducer`` loads with it
    too."""
    where, sep, attribute = target.rpartition(":")
    if not sep or not where or not attribute:
        raise StartError(
            f"askgate: TARGET wants module:attribute or path/to/file.py:attribute, got {target!r}"
        )
    if where.endswith(".py") or "/" in where or os.sep in where:
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise StartError(f"askgate refuses to start: no file {where} (TARGET {target!r})")
        elsewhere = _found_elsewhere(path)
        if elsewhere is not None:
            raise StartError(
                f"askgate refuses to start: {where} has the name of the module {path.stem} "
                f"({elsewhere}), which its folder on sys.path would hide; rename the file"
            )
        folder = str(path.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)  # its sibling modules import as they would from there
        name = path.stem
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise StartError(f"askgate refuses to start: {where} is not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        loader = spec.loader
        _import(lambda: loader.exec_module(module), where)
    else:
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())  # as `python -m` would
        module = _import(lambda: importlib.import_module(where), where, target=target)
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise StartError(f"askgate refuses to start: {where} has no attribute {attribute!r}")
        found = getattr(found, part)
    return found, where


def _found_elsewhere(path: Path) -> str | None:
    """Where a module named as the file ``path`` is found other than ``path`` itself (one
    already imported, or importable): the file would shadow it for askgate and its
    dependencies once its folder leads ``sys.path``."""
    name = path.stem
    module = sys.modules.get(name)
    if module is not None:
        file = getattr(module, "__file__", None)
        if file is not None and Path(file).resolve() == path:
            return None  # this very file, imported before
        return file or "already imported"
    if name in sys.builtin_module_names:
        return "built in"
    others = [p for p in sys.path if Path(p or ".").resolve() != path.parent]
    try:
        spec = importlib.machinery.PathFinder.find_spec(name, others)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    return spec.origin or "a package"


def _takes_no_arguments(func: Any) -> bool:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return False
    return all(
        p.default is not inspect.Parameter.empty
        or p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        for p in signature.parameters.values()
    )


def _import(run: Any, where: str, *, target: str | None = None) -> Any:
    """Runs the user's code (an import, a factory); what it raises is the user's: its
    traceback is printed and the start refused, except an OptionError, which is one line, and,
    given the ``target`` whose module ``where`` is imported, that module (or a package above
    it) missing, also one line."""
    from askgate.core import OptionError
    from askgate.server import ServesAtImportError, serving_refused

    try:
        # The user's code runs before stdout is the wire's; a print must not corrupt it. And
        # a module that starts serving when imported would ignore every flag: refused.
        with contextlib.redirect_stdout(sys.stderr), serving_refused():
            return run()
    except ModuleNotFoundError as missing:
        if (
            target is None
            or missing.name is None
            or not (where + ".").startswith(missing.name + ".")
        ):
            traceback.print_exc()
            raise StartError(
                f"askgate refuses to start: {where} raised ModuleNotFoundError (traceback above)"
            ) from None
        raise StartError(
            f"askgate refuses to start: no module named {missing.name!r} (TARGET {target!r}; "
            "run askgate from the folder that holds it, or give path/to/file.py:attribute)"
        ) from None
    except OptionError as refused:  # the module's own Server(...) options: its words
        said = str(refused).removeprefix("askgate refuses to start: ")
        raise StartError(f"askgate refuses to start: {where}: {said}") from None
    except ServesAtImportError:
        raise StartError(
            f"askgate refuses to start: {where} serves when imported (it calls run_stdio() or "
            'run_http() at import); put that call under `if __name__ == "__main__":` so '
            "askgate serve can apply its flags"
        ) from None
    except Exception as failed:
        traceback.print_exc()
        raise StartError(
            f"askgate refuses to start: {where} raised {type(failed).__name__} (traceback above)"
        ) from None


def _refuse_misplaced_flags(args: argparse.Namespace) -> None:
    if args.target is not None and args.demo:
        raise StartError("askgate: give TARGET or --demo, not both")
    if args.target is None and not args.demo:
        raise StartError(
            "askgate serve: nothing to serve: give TARGET (module:attribute or "
            "path/to/file.py:attribute naming a Server) or --demo; see askgate serve --help"
        )
    if args.http is None:
        given = {
            "--auth": args.auth is not None,
            "--tokens": args.tokens is not None,
            "--allow-origin": args.allow_origin is not None,
            "--allow-host": args.allow_host is not None,
            "--banner": args.banner,
        }
        for flag in HTTP_ONLY:
            if given[flag]:
                raise StartError(f"askgate: {flag} applies to --http only (stdio has no network)")
    elif args.backend not in _http_backends():
        raise StartError(
            f"askgate: --backend {args.backend} serves stdio only; --http runs on asyncio (uvicorn)"
        )


def _http_backends() -> tuple[str, ...]:
    from askgate.transports.http_server import BACKENDS

    return BACKENDS


def _serve(args: argparse.Namespace) -> int:
    from askgate.core import OptionError
    from askgate.policy import PolicyError, load_policy

    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, args.log_level.upper()),
        format="askgate %(levelname)s %(name)s: %(message)s",
    )
    log = logging.getLogger("askgate")
    options: dict[str, Any] = {
        dest: getattr(args, dest) for _, dest, _ in _OPTION_FLAGS if getattr(args, dest) is not None
    }
    try:
        _refuse_misplaced_flags(args)
        policy = load_policy(args.policy) if args.policy else None
        if policy is not None:  # what the loader chose for the file, and what looks wrong
            for note in policy.notices:
                log.info("%s", note)
            for warning in policy.warnings:
                log.warning("%s", warning)
        if args.demo:
            from askgate.demo import build_demo

            server = build_demo(policy, **options)
            what = "the demo"
        else:
            server = load_target(args.target)
            what = args.target
            if policy is not None:
                if server.authorization_configured() or server.read_authorization_configured():
                    log.info("--policy %s replaces the authorizers of %s", args.policy, what)
                server.configure(
                    authorizer=policy.authorize,
                    read_authorizer=policy.authorize_read,
                    visibility=policy.visible,
                    authorizer_source="configured",
                    **options,
                )
            elif options:
                server.configure(**options)
    except StartError as refused:
        print(refused, file=sys.stderr)
        return 2
    except OptionError as refused:
        print(_option_refusal(refused), file=sys.stderr)
        return 2
    except PolicyError as refused:
        print(f"askgate refuses to start: {refused}", file=sys.stderr)
        return 2
    try:  # R-OPT-2 said to a command user: the flag that configures an authorizer
        server.initial_state("http" if args.http is not None else "stdio")
    except OptionError as refused:
        if refused.option == "authorizer":
            print(f"askgate refuses to start: {refused.rule}; give --policy FILE", file=sys.stderr)
        else:
            print(f"askgate refuses to start: {refused}", file=sys.stderr)
        return 2
    if args.http is not None:
        return _serve_http(server, args, what)
    log.info("serving %s on stdio: JSON-RPC lines on stdin/stdout, logs on stderr", what)
    return server.run_stdio(backend=args.backend)


def _serve_http(server: Server, args: argparse.Namespace, what: str) -> int:
    """Decides where to listen or why not (R-HTTP-13, in the command's words), then serves as
    :meth:`Server.run_http` does (:func:`askgate.transports.http_server.serve_http`)."""
    from askgate.core import http as rules
    from askgate.transports.auth import ApiKeyAuth, BearerAuth, TokenFileError, load_tokens
    from askgate.transports.http_server import serve_http

    auth_kind = args.auth or "none"
    tokens: dict[str, str] = {}
    token_error = None
    if auth_kind != "none" and args.tokens:
        try:
            tokens = load_tokens(args.tokens)
        except TokenFileError as bad:
            token_error = str(bad)
    where = rules.listen_or_refuse(
        args.http,
        auth_kind,
        args.tokens,
        token_error,
        server.authorization_configured(),
        server.read_authorization_configured(),
    )
    if isinstance(where, str):  # R-HTTP-13
        print(where, file=sys.stderr)
        return 2
    auth: Any = None
    if auth_kind != "none":
        auth = BearerAuth(tokens) if auth_kind == "bearer" else ApiKeyAuth(tokens)
    return serve_http(
        server,
        where.host,
        where.port,
        auth=auth,
        allowed_origins=args.allow_origin or (),
        allowed_hosts=args.allow_host or (),
        log_level=args.log_level,
        banner=what if args.banner else None,
    )


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
