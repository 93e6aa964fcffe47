"""The ``askgate`` command line: ``askgate serve TARGET`` (a ``Server`` of your own),
``askgate serve --demo``, ``askgate --version``; ``askgate policy check|explain|diff`` (a
policy file analysed, :mod:`askgate.policy_analysis`) and ``askgate spec`` (the decision matrix
and the transition tables, :mod:`askgate.matrix` and :mod:`askgate.transitions`). The exit
statuses below are ``serve``'s; ``policy`` says its own in ``askgate policy --help``.

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
- 3 is not used (askgate binds the port itself and refuses with 2).
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
    (
        "--max-in-flight-per-connection",
        "max_in_flight_per_connection",
        "workers per owner (principal, connection, or the stateless requests without credentials)",
    ),
    ("--max-client-capabilities", "max_client_capabilities", "capability entries kept"),
    ("--callback-timeout-ms", "callback_timeout_ms", "how long a callback may run (ms)"),
    (
        "--max-client-requests-per-call",
        "max_client_requests_per_call",
        "a running tool's requests to its client outstanding at once",
    ),
    (
        "--max-listens",
        "max_listens_per_owner",
        "open subscriptions/listen streams per owner (principal or connection)",
    ),
    ("--max-listens-total", "max_listens_total", "open subscriptions/listen streams in total"),
)

_HTTP_LIMIT_FLAGS = (
    (
        "--max-header-bytes",
        "max_header_bytes",
        "HTTP: the bytes of a request's head (target and header lines); past them 431",
    ),
    ("--max-headers", "max_headers", "HTTP: the header fields of a request; past them 431"),
    (
        "--max-connections",
        "max_connections",
        "HTTP: connections open at once; one more is answered 503 and closed",
    ),
    (
        "--max-sessions-per-principal",
        "max_sessions_per_principal",
        "HTTP: sessions one principal holds at once; its next initialize is 429",
    ),
    ("--max-sessions", "max_sessions", "HTTP: sessions in total; the next initialize is 503"),
    ("--max-body-bytes", "max_body", "HTTP: the bytes of a request's body; past them 413"),
    (
        "--body-timeout-ms",
        "body_timeout_ms",
        "HTTP: how long a request's body may take to arrive (ms); past it 408",
    ),
    (
        "--header-timeout-ms",
        "header_timeout_ms",
        "HTTP: how long a request's head may take to arrive (ms); past it the connection closes",
    ),
    ("--session-idle-ms", "idle_ms", "HTTP: a session unused this long (ms) is ended"),
    (
        "--replay-events",
        "replay_events",
        "HTTP: the events a stream keeps for a resume (Last-Event-ID)",
    ),
    ("--replay-bytes", "replay_bytes", "HTTP: the bytes of events a stream keeps for a resume"),
    (
        "--replay-ttl-ms",
        "replay_ttl_ms",
        "HTTP: how long an ended stream is kept for a resume (ms)",
    ),
    ("--replay-streams", "replay_streams", "HTTP: the ended streams a session keeps"),
    (
        "--drain-bytes",
        "drain_bytes",
        "HTTP: the bytes of a refused request's body read and discarded before closing",
    ),
    (
        "--drain-ms",
        "drain_ms",
        "HTTP: how long a refused request's body is read and discarded (ms)",
    ),
)
"""``askgate serve --http``'s bounds (spec/http.md; docs/robustness.md, Limits): flag, the
:class:`askgate.core.http.HttpOptions` field it sets, what it bounds."""

HTTP_ONLY = ("--auth", "--tokens", "--allow-origin", "--allow-host", "--banner")
"""Flags that mean something over ``--http`` only; given without it they are refused (and
so are those of :data:`_HTTP_LIMIT_FLAGS`)."""

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


class _HttpDefault:
    """An HTTP bound's flag left out: its value in ``args``, which --help shows as the
    default of :class:`askgate.core.http.HttpOptions` field ``dest``. That module is imported
    only when the help is printed, so a stdio server never imports it (docs/performance.md)."""

    def __init__(self, dest: str) -> None:
        self.dest = dest

    def __eq__(self, other: object) -> bool:  # two parsers' same flag left out: equal args
        return isinstance(other, _HttpDefault) and other.dest == self.dest

    def __hash__(self) -> int:
        return hash(self.dest)

    def __str__(self) -> str:
        from askgate.core import http as rules

        return str(getattr(rules, "DEFAULT_" + self.dest.upper()))


_columns: list[int] = []
"""The terminal's width, once read (:func:`_formatter`)."""


def _formatter(prog: str) -> argparse.HelpFormatter:
    """argparse's ``RawDescriptionHelpFormatter``, as wide as the terminal (``COLUMNS``, else
    the width of the terminal on standard output, else 80: what ``shutil.get_terminal_size``
    says), read once. argparse builds a formatter at each ``add_argument`` (to check its
    metavar), and its own reads the width each time through ``shutil``, whose import (with
    bz2, lzma and zlib) a start need not pay."""
    if not _columns:
        try:
            columns = int(os.environ["COLUMNS"])
        except (KeyError, ValueError):
            columns = 0
        if columns <= 0 and sys.__stdout__ is not None:
            try:
                columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
            except (AttributeError, ValueError, OSError):
                columns = 0
        _columns.append(columns or 80)
    return argparse.RawDescriptionHelpFormatter(prog, width=_columns[0] - 2)


def _parser(serve_only: bool = False) -> argparse.ArgumentParser:
    """The command line's parser; with ``serve_only``, without the commands other than
    ``serve`` (what ``askgate serve ...`` parses with: :func:`_parse`)."""
    parser = argparse.ArgumentParser(
        prog="askgate",
        description="An MCP server core that decides when a tool may run.",
        epilog=EXIT_STATUS,
        formatter_class=_formatter,
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
        formatter_class=_formatter,
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
        help="a policy file (TOML; see docs/policy.md: a deny entry needs a reason, an ask a "
        "prompt); replaces TARGET's own authorizers (default: none: TARGET's own authorizers, "
        "or the demo's shipped policy)",
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
    for flag, dest, text in _HTTP_LIMIT_FLAGS:
        serve.add_argument(
            flag,
            dest=dest,
            type=int,
            metavar="N",
            default=_HttpDefault(dest),
            help=f"{text} (default: %(default)s)",
        )
    serve.add_argument(
        "--backend",
        default="asyncio",
        choices=["asyncio", "trio"],
        help="the event loop; trio needs the trio package and serves stdio only (default: asyncio)",
    )
    serve.add_argument(
        "--log-level",
        default=None,
        choices=["debug", "info", "warning", "error", "critical"],
        type=str.lower,
        help="what askgate logs on stderr (default: info with --http, a line per decision; "
        "warning on stdio)",
    )
    _add_audit_flags(serve)
    if not serve_only:
        _add_audit_commands(commands)
        _policy_parser(commands)
        _spec_parser(commands)
        _core_parser(commands)
    return parser


def _parse(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """``argv`` parsed, and the parser. ``askgate serve ...`` is parsed without building the
    other commands' parsers (start-up time); what is left over for the top level (an
    unrecognized argument) is parsed again by the whole parser, whose error lists them all."""
    if argv[:1] == ["serve"]:
        parser = _parser(serve_only=True)
        args, left = parser.parse_known_args(argv)
        if not left:
            return parser, args
    parser = _parser()
    return parser, parser.parse_args(argv)


# -- auditing (spec/audit.md): serve's --trace and --audit-log, `replay` and `explain` -----------


def _add_audit_flags(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--audit-log",
        metavar="FILE",
        help="append the decision log to FILE: one JSON line per decision on a tools/call and "
        "per end of one (default: off)",
    )
    serve.add_argument(
        "--audit-arguments",
        action="store_true",
        help="the decision log writes each call's arguments, not only their keyed digest "
        "(default: off)",
    )
    serve.add_argument(
        "--audit-mask",
        action="append",
        metavar="FIELD",
        help="with --audit-arguments: an argument field written as *** at any depth, "
        "repeatable (default: none)",
    )
    serve.add_argument(
        "--trace",
        metavar="FILE",
        help="append every event fed to the reducer and its effects to FILE, for "
        "`askgate replay` and `askgate explain` (default: off)",
    )
    serve.add_argument(
        "--trace-keys",
        metavar="FILE",
        help="with --trace: append the run's keys (its id key and sealing keys, which the "
        "trace names by key id only) to FILE, created 0600, for `askgate replay --keys` "
        "(default: off: the keys are written nowhere)",
    )
    serve.add_argument(
        "--trace-arguments",
        action="store_true",
        help="the trace keeps tools/call arguments as they came (default: off: redacted to "
        "their keyed digest)",
    )
    serve.add_argument(
        "--audit-failure",
        choices=["stop", "serve"],
        default="stop",
        help="when the decision log or the trace cannot be written: stop the server as "
        "SIGTERM does, or serve on and count the lines lost (default: stop)",
    )


def _add_audit_commands(commands: Any) -> None:
    replay = commands.add_parser(
        "replay",
        help="re-run the reducer over a trace and check it reproduces the recorded effects",
        description="Re-runs the reducer from the trace's initial state over every recorded "
        "event and compares the effects. Exit status 0: identical; 1: the first step that "
        "differs is printed, with the rule ids on both sides; 2: the trace or the key file "
        "cannot be read; 3: identical, but some steps needed keys not given (--keys) and are "
        "named in one line: their ids and sealed states were taken as recorded.",
    )
    replay.add_argument("trace", metavar="TRACE")
    keys_help = (
        "the key file `serve --trace-keys` wrote, for the steps that need the run's keys "
        "(default: none: those steps are named, not verified)"
    )
    replay.add_argument("--keys", metavar="FILE", help=keys_help)
    explain = commands.add_parser(
        "explain",
        help="the path each tools/call of a trace took, with times and rule ids",
    )
    explain.add_argument("trace", metavar="TRACE")
    explain.add_argument("--keys", metavar="FILE", help=keys_help)
    explain.add_argument("--call", metavar="ID", help="only the call with this request id")
    explain.add_argument("--format", choices=["text", "json"], default="text")


def _configure_audit(server: Server, args: argparse.Namespace) -> None:
    """Applies serve's --trace and --audit-log flags to ``server`` (after its authorizers)."""
    if args.trace_keys and not args.trace:
        raise StartError("askgate refuses to start: --trace-keys needs --trace")
    if not args.trace and not args.audit_log:
        return
    from askgate.audit import AuditLog, Trace

    trace = None
    log = None
    try:
        if args.trace:
            trace = Trace(
                args.trace,
                redact=not args.trace_arguments,
                keys=args.trace_keys,
                on_failure=args.audit_failure,
            )
        if args.audit_log:
            log = AuditLog(
                args.audit_log,
                arguments=args.audit_arguments,
                mask=args.audit_mask or (),
                on_failure=args.audit_failure,
            )
    except OSError as bad:
        raise StartError(
            f"askgate refuses to start: cannot open {bad.filename}: {bad.strerror}"
        ) from None
    server.audit(trace=trace, log=log)


def _steps_text(numbers: tuple[int, ...], most: int = 12) -> str:
    """Step numbers as ranges, ``4, 7-9, 12``, the first ``most`` of them, then how many more."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    shown = [f"{a}" if a == b else f"{a}-{b}" for a, b in spans[:most]]
    more = f" and {len(spans) - most} more" if len(spans) > most else ""
    return ", ".join(shown) + more


def _calls_text(calls: list[str], most: int = 12) -> str:
    """A trace's calls as ``conn/id`` names, the first ``most`` of them, then how many more."""
    if not calls:
        return "none"
    more = f" and {len(calls) - most} more" if len(calls) > most else ""
    return ", ".join(dict.fromkeys(calls[:most])) + more


def _unverified_text(done: Any) -> str:
    """Which steps of a replay (:class:`askgate.trace.Replayed`) could not be verified, and
    why, in one clause: keys not given (R-AUD-12), arguments a redacted trace lacks (R-AUD-15)."""
    keyed = tuple(n for n in done.unverified if n not in done.unbound)
    said = []
    if keyed:
        said.append(
            f"steps {_steps_text(keyed)} could not be verified: their ids and sealed states "
            f"need the run's keys {', '.join(done.missing)} (give --keys FILE)"
        )
    if done.unbound:
        said.append(
            f"steps {_steps_text(done.unbound)} could not be verified: their 2026-07-28 "
            "approval states bind the call's arguments, which a redacted trace does not hold "
            "(record with --trace-arguments to verify them)"
        )
    return "; and ".join(said)


def _audit_command(args: argparse.Namespace) -> int:
    """``askgate replay`` and ``askgate explain``."""
    from askgate.explain import explain, render
    from askgate.trace import TraceError, read_keys, read_runs, replay

    keys: dict[str, bytes] = {}
    if args.keys:
        try:
            with open(args.keys, encoding="utf-8") as lines:
                keys = read_keys(lines)
        except (OSError, TraceError, UnicodeDecodeError) as bad:
            why = bad.strerror if isinstance(bad, OSError) and bad.strerror else bad
            print(f"askgate {args.command}: {args.keys}: {why}", file=sys.stderr)
            return 2
    try:
        with open(args.trace, encoding="utf-8") as lines:
            runs = read_runs(lines)
        if args.command == "replay":
            status = 0
            for number, (head, steps) in enumerate(runs, 1):
                run = f" run {number} of {len(runs)}" if len(runs) > 1 else ""
                done = replay(head, steps, keys=keys)
                if done.difference is not None:
                    print(f"{args.trace}{run}: {done.difference.text()}")
                    return 1
                said = f"{args.trace}{run}: {done.count} steps replayed, every effect identical"
                if done.unverified:  # R-AUD-12, R-AUD-15
                    print(f"{said}, but {_unverified_text(done)}")
                    status = 3
                else:
                    print(said)
            return status
        paths = [
            path | {"run": number}
            for number, (head, steps) in enumerate(runs, 1)
            for path in explain(head, steps, call=args.call, keys=keys)
        ]
        if args.call is not None and not paths:  # R-AUD-7
            calls = [p["call"] for head, steps in runs for p in explain(head, steps, keys=keys)]
            print(
                f"askgate explain: {args.trace}: no call {args.call} (its calls: "
                f"{_calls_text(calls)})",
                file=sys.stderr,
            )
            return 1
        print(render(paths, fmt=args.format, runs=len(runs)))
        return 0
    except BrokenPipeError:
        raise  # the reader left (R-AUD-14): not the trace's fault
    except (OSError, TraceError, KeyError, TypeError, ValueError, RecursionError) as bad:
        print(f"askgate {args.command}: {args.trace}: {bad}", file=sys.stderr)  # R-AUD-13
        return 2


def _core_parser(commands: Any) -> None:
    """The ``askgate core`` subcommand's arguments (spec/embedding.md, R-EMB-10)."""
    sidecar = commands.add_parser(
        "core",
        help="run the reducer as a sidecar: events in, effects out, as JSON lines",
        description="Runs the reducer as a sidecar: reads events as JSON lines and writes one\n"
        "reply line per input line (the effects, or an error that changed nothing), on\n"
        "stdin/stdout or, with --socket, on a unix socket (one session per connection).\n"
        "The encoding is spec/embedding.md's.",
        formatter_class=_formatter,
    )
    sidecar.add_argument(
        "--socket",
        metavar="PATH",
        help="listen on this unix socket instead of stdin/stdout (default: stdio)",
    )
    sidecar.add_argument(
        "--init",
        metavar="JSON|@FILE",
        help="the init message every session starts with: options and tools (default: "
        "askgate's options, no tools)",
    )
    sidecar.add_argument(
        "--reducer",
        metavar="MODULE:ATTR",
        help="serve this reducer (initial_state, step) instead of askgate's own (default: none)",
    )


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
            _print_users_traceback(missing)
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
        _print_users_traceback(failed)
        raise StartError(
            f"askgate refuses to start: {where} raised {type(failed).__name__} (traceback above)"
        ) from None


def _print_users_traceback(failed: BaseException) -> None:
    """Prints ``failed``'s traceback from the first frame of the user's code: the frames of
    this loader and of the import machinery that ran it (``importlib``) are left out, so a
    module that raises, or does not compile, shows its own lines and nothing of askgate's."""
    machinery = {__file__, importlib.__file__}
    frames = failed.__traceback__
    while frames is not None and (
        frames.tb_frame.f_code.co_filename in machinery
        or frames.tb_frame.f_code.co_filename.startswith("<frozen importlib")
    ):
        frames = frames.tb_next
    traceback.print_exception(type(failed), failed, frames, file=sys.stderr)


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
        given |= {
            flag: not isinstance(getattr(args, dest), _HttpDefault)
            for flag, dest, _ in _HTTP_LIMIT_FLAGS
        }
        for flag in (*HTTP_ONLY, *(flag for flag, _, _ in _HTTP_LIMIT_FLAGS)):
            if given[flag]:
                raise StartError(f"askgate: {flag} applies to --http only (stdio has no network)")
    elif args.backend not in _http_backends():
        raise StartError(
            f"askgate: --backend {args.backend} serves stdio only; --http runs on asyncio"
        )


def _http_backends() -> tuple[str, ...]:
    from askgate.transports.http_server import BACKENDS

    return BACKENDS


def _load_policy(path: str) -> Any:
    """The policy file ``path`` (:func:`askgate.policy.load_policy`); raises
    :class:`StartError` with the one line to print when it is malformed. The policy module is
    imported here: a server served without ``--policy`` does not need it."""
    from askgate.policy import PolicyError, load_policy

    try:
        return load_policy(path)
    except PolicyError as refused:
        raise StartError(f"askgate refuses to start: {refused}") from None


def _serve(args: argparse.Namespace) -> int:
    from askgate.core import OptionError

    if args.log_level is None:  # over HTTP the operator's log by default (R-HTTP-46)
        args.log_level = "info" if args.http is not None else "warning"
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, args.log_level.upper()),
        format="askgate %(levelname)s %(name)s: %(message)s",
    )
    # The format shows no thread, process or process name: no record looks them up.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    log = logging.getLogger("askgate")
    options: dict[str, Any] = {
        dest: getattr(args, dest) for _, dest, _ in _OPTION_FLAGS if getattr(args, dest) is not None
    }
    try:
        _refuse_misplaced_flags(args)
        policy = _load_policy(args.policy) if args.policy else None
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
        _configure_audit(server, args)
    except StartError as refused:
        print(refused, file=sys.stderr)
        return 2
    except OptionError as refused:
        print(_option_refusal(refused), file=sys.stderr)
        return 2
    try:  # R-OPT-2 said to a command user: the flag that configures an authorizer
        first = server.initial_state("http" if args.http is not None else "stdio")
    except OptionError as refused:
        if refused.option == "authorizer":
            print(f"askgate refuses to start: {refused.rule}; give --policy FILE", file=sys.stderr)
        else:
            print(f"askgate refuses to start: {refused}", file=sys.stderr)
        return 2
    if args.http is not None:
        return _serve_http(server, args, what)
    ungated = ungated_tools(first)
    if ungated:  # R-POL-13
        log.warning(
            "%s has no policy nor authorizer, and any client runs %s without being asked "
            "(%s none of readOnlyHint, destructiveHint, sensitive); give --policy FILE",
            what,
            ", ".join(ungated),
            "its annotations hold" if len(ungated) == 1 else "their annotations hold",
        )
    log.info("serving %s on stdio: JSON-RPC lines on stdin/stdout, logs on stderr", what)
    return server.run_stdio(backend=args.backend)


EFFECT_ANNOTATIONS = ("readOnlyHint", "destructiveHint", "sensitive")
"""The annotations by which a tool says what running it does (R-TOOL-1, R-POL-13)."""


def ungated_tools(state: Any) -> list[str]:
    """The tools of the initial ``state`` that nothing gates and whose annotations say nothing
    of what they do (none of :data:`EFFECT_ANNOTATIONS`), by name (R-POL-13): none when the
    state has a tool authorizer (a policy, or the server's own)."""
    if state.options.has_authorizer:
        return []
    found = []
    for name, info in state.tools.items():
        definition = info.definition if isinstance(info.definition, dict) else {}
        annotations = definition.get("annotations")
        said = isinstance(annotations, dict) and any(k in annotations for k in EFFECT_ANNOTATIONS)
        if not info.sensitive and not said:
            found.append(name)
    return sorted(found)


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
    limits = {}
    for flag, dest, _ in _HTTP_LIMIT_FLAGS:
        value = getattr(args, dest)
        if isinstance(value, _HttpDefault):  # left out: HttpOptions' default
            continue
        if value < 1:
            print(f"askgate: {flag} wants N >= 1, got {value}", file=sys.stderr)
            return 2
        limits[dest] = value
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
        limits=limits,
    )


def main(argv: list[str] | None = None) -> int:
    parser, args = _parse(sys.argv[1:] if argv is None else argv)
    if args.version:
        from askgate import __version__

        print(f"askgate {__version__}")
        return 0
    if args.command is None:  # no command: say what there is, as a usage error
        parser.print_help(sys.stderr)
        return 2
    if args.command in ("replay", "explain"):
        return _to_a_reader(_audit_command, args)
    if args.command == "policy":
        return _to_a_reader(_policy, args)
    if args.command == "spec":
        return _to_a_reader(_spec, args)
    if args.command == "core":
        return _core(args)
    return _serve(args)


CLOSED_PIPE = 141
"""The exit status of a command whose reader closed standard output (``| head``): 128 + SIGPIPE,
what a shell reports for a command the closed pipe ended."""


def _to_a_reader(command: Any, args: argparse.Namespace) -> int:
    """Runs a command that prints its answer on standard output. A reader that leaves early
    (``| head``, a pager quit) closes the pipe: the command stops there, quietly (no traceback,
    exit status :data:`CLOSED_PIPE`), and standard output goes to /dev/null so that no later
    flush fails again."""
    try:
        status: int = command(args)
        sys.stdout.flush()
    except BrokenPipeError:
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.stdout.fileno())
            os.close(null)
        return CLOSED_PIPE
    return status


# -- askgate policy: check, explain, diff (spec/policy.md R-POL-7 .. R-POL-10) ----------------

POLICY_EXIT = """\
exit status:
  0  check: no findings; diff: no name's decision changes; explain: explained
  1  check: findings; diff: some decisions change
  2  usage error, or a policy file (or --server TARGET) that cannot be used
  141  the reader closed standard output (| head): stopped, quietly
"""


def _policy_parser(commands: Any) -> None:
    policy = commands.add_parser(
        "policy",
        help="analyse a policy file: check it, explain a decision, diff two files",
        description="Answers questions about a policy file (TOML, see docs/policy.md)\n"
        "exactly, over every tool and read name: which entries never apply, which entry\n"
        "decides a name and why, which names two files decide differently.",
        epilog=POLICY_EXIT,
        formatter_class=_formatter,
    )
    actions = policy.add_subparsers(dest="policy_command", required=True)
    check = actions.add_parser(
        "check",
        help="entries that never apply, prompts quoting arguments a tool lacks, reads unguarded",
        epilog=POLICY_EXIT,
        formatter_class=_formatter,
    )
    check.add_argument("file", metavar="FILE", help="the policy file")
    server = check.add_mutually_exclusive_group()
    server.add_argument(
        "--server",
        metavar="TARGET",
        help="the server whose tools the prompts are checked against: module:attribute or "
        "path/to/file.py:attribute, as for askgate serve (default: none, prompts unchecked)",
    )
    server.add_argument(
        "--demo", action="store_true", help="check the prompts against the demo's tools"
    )
    check.add_argument(
        "--format", choices=["text", "json"], default="text", help="output (default: text)"
    )
    explain = actions.add_parser(
        "explain",
        help="which entry decides a tool (or a read method) and why",
        epilog=POLICY_EXIT,
        formatter_class=_formatter,
    )
    explain.add_argument("file", metavar="FILE", help="the policy file")
    explain.add_argument("name", metavar="TOOL", help="a tool name (a read method with --read)")
    explain.add_argument(
        "arguments",
        nargs="?",
        metavar="ARGS-JSON",
        help="the call's arguments, a JSON object, for the prompt (default: {})",
    )
    explain.add_argument(
        "--read", action="store_true", help="TOOL is a read method: decide it by [[reads]]"
    )
    explain.add_argument(
        "--format", choices=["text", "json"], default="text", help="output (default: text)"
    )
    diff = actions.add_parser(
        "diff",
        help="the tool and read names (and classes of names) whose decision changes",
        epilog=POLICY_EXIT,
        formatter_class=_formatter,
    )
    diff.add_argument("old", metavar="OLD", help="the policy file before")
    diff.add_argument("new", metavar="NEW", help="the policy file after")
    diff.add_argument(
        "--format", choices=["text", "json"], default="text", help="output (default: text)"
    )


def _policy(args: argparse.Namespace) -> int:
    """``askgate policy check|explain|diff``: prints the answer on standard output."""
    import json

    from askgate import policy_analysis as analysis
    from askgate.policy import PolicyError, load_policy

    try:
        if args.policy_command == "diff":
            old, new = load_policy(args.old), load_policy(args.new)
            changes = analysis.diff(old, new)
            if args.format == "json":
                print(json.dumps([c.as_json() for c in changes], indent=2))
            else:
                for section in ("tools", "reads"):
                    mine = analysis.said_together([c for c in changes if c.section == section])
                    classes = sum(len(group) for group in mine)
                    print(
                        f"[[{section}]]: {len(mine) or 'no'} change{'' if len(mine) == 1 else 's'}"
                        + (f" ({classes} names and classes)" if classes > len(mine) else "")
                    )
                    for group in mine:
                        for line in analysis.describe_together(group, old, new):
                            print(f"  {line}")
            return 1 if changes else 0
        policy = load_policy(args.file)
        if args.policy_command == "explain":
            try:
                arguments = json.loads(args.arguments) if args.arguments else {}
            except ValueError as bad:
                raise StartError(f"askgate: ARGS-JSON is not JSON: {bad}") from None
            if not isinstance(arguments, dict):
                raise StartError("askgate: ARGS-JSON must be a JSON object")
            found = analysis.explain(policy, args.name, arguments, read=args.read)
            if args.format == "json":
                print(json.dumps(_as_dict(found) | {"source": policy.source}, indent=2))
            else:
                print("\n".join(found.lines(policy.source)))
            return 0
        tools = None
        if args.demo or args.server:
            server = _demo_server() if args.demo else load_target(args.server)
            tools = server.tool_definitions()
        findings = analysis.check(policy, tools)
        if args.format == "json":
            print(json.dumps([_as_dict(f) for f in findings], indent=2))
        else:
            for finding in findings:
                print(finding.message)
            print(f"{len(findings) or 'no'} finding{'' if len(findings) == 1 else 's'}")
        return 1 if findings else 0
    except (PolicyError, analysis.AnalysisTooLargeError) as refused:
        print(f"askgate: {refused}", file=sys.stderr)
        return 2
    except StartError as refused:
        print(refused, file=sys.stderr)
        return 2


def _as_dict(value: Any) -> dict[str, Any]:
    import attrs

    return attrs.asdict(value)


def _demo_server() -> Server:
    from askgate.demo import build_demo

    return build_demo()


# -- askgate spec ------------------------------------------------------------------------------


def _spec_parser(commands: Any) -> None:
    spec = commands.add_parser(
        "spec",
        help="print the decision matrix and the transition tables, computed from the reducer",
        description="Prints what the reducer decides for a tools/call, by the authorizer's\n"
        "decision, the client's capability, the parking caps and the answer (computed by\n"
        "running the reducer through each combination), then its transition tables: the\n"
        "text of spec/matrix.md and spec/transitions.md.",
    )
    spec.add_argument(
        "--only",
        choices=["matrix", "transitions"],
        help="print one of the two (default: both)",
    )


def _spec(args: argparse.Namespace) -> int:
    from askgate import matrix, transitions

    if args.only != "transitions":
        print(matrix.render(), end="")
    if args.only is None:
        print()
    if args.only != "matrix":
        print(transitions.render(), end="")
    return 0


def _core(args: argparse.Namespace) -> int:
    """``askgate core``: the reducer as a JSON-lines sidecar (spec/embedding.md). Exit status 0
    at end of input (or SIGINT on a socket), 2 for a refused start said in one line."""
    from askgate import jsonwire, sidecar

    try:
        reducer: Any = None
        if args.reducer is not None:
            reducer, _ = load_attribute(args.reducer)
            if isinstance(reducer, type) or not hasattr(reducer, "step"):
                reducer = reducer()
        init = None
        if args.init is not None:
            text = args.init
            if text.startswith("@"):
                text = Path(text[1:]).read_text(encoding="utf-8")
            init = jsonwire.loads(text)
            if type(init) is not dict:
                raise StartError("askgate: --init must be a JSON object")
            sidecar.Session(reducer, init)  # refuses a bad init now, not per session
    except (StartError, jsonwire.WireError, OSError) as refused:
        print(
            f"askgate core: {refused}".replace("askgate core: askgate: ", "askgate core: "),
            file=sys.stderr,
        )
        return 2
    if args.socket is None:
        sidecar.serve_stdio(reducer, init)
        return 0
    if os.path.exists(args.socket):
        print(f"askgate core: {args.socket} exists; remove it first", file=sys.stderr)
        return 2

    def ready() -> None:
        print(f"askgate core: listening on {args.socket}", file=sys.stderr, flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        sidecar.serve_socket(args.socket, reducer, init, ready)
    return 0


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
