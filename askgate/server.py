"""The Python API: declare tools, resources, prompts and policies; serve them.

::

    from askgate import Allow, Ask, Deny, Server

    async def policy(tool, arguments, context):
        return Ask(f"Run {tool}?") if tool == "delete_file" else Allow()

    server = Server("files", authorizer=policy, authorizer_source="configured")

    @server.tool(annotations={"destructiveHint": True})
    def delete_file(path: str) -> str:
        ...

    server.run_stdio()

A :class:`Server` holds the user's callbacks and turns them into what the reducer asks for:
it builds the options and the initial state (a sensitive tool without an authorizer refuses
to start there), and it performs the worker jobs (:meth:`Server.perform_job`): it finds the
callback a job names, calls it, and hands what it returns to :mod:`askgate.core.protocol`,
which makes the MCP result object of it. Every decision (who may call what, when to ask,
caps, timeouts, what a read may name, what a result looks like) stays in
:mod:`askgate.core`.
"""

from __future__ import annotations

import copy
import enum
import inspect
import os
import time
import types
import typing
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Hashable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, cast, get_args, get_origin

import anyio
import anyio.abc
import attrs

from askgate import __version__
from askgate.core import (
    Allow,
    Ask,
    Authorize,
    AuthorizeRead,
    Deny,
    FilterTools,
    Job,
    NeedsInput,
    Options,
    Raised,
    Round,
    RunRead,
    RunTool,
    State,
    UnknownToolReply,
    initial_state,
    protocol,
    step,
)
from askgate.core.codec import EncodeError, encode
from askgate.core.decisions import Failure
from askgate.core.events import CatalogChanged, LogEmitted, ResourceUpdated, ToolRegistered
from askgate.core.messages import INVALID_PARAMS
from askgate.core.options import AuthorizerSource, OptionError, Transport
from askgate.core.record import record
from askgate.core.sealing import Key, Keyring
from askgate.core.tasks import SUPPORTS
from askgate.core.tools import ToolInfo, param_headers, tool_info
from askgate.transports import stdio
from askgate.transports.callbacks import EAGER_FLAG, wants_context
from askgate.transports.runtime import (
    Runtime,
    calling,
    current_worker,
    is_async_callable,
    on_worker_thread,
    runs_eagerly,
)

if TYPE_CHECKING:  # a stdio server imports neither the HTTP stack nor the synchronous driver
    from askgate.transports.auth import AuthProvider
    from askgate.transports.sync import Clock, SyncRuntime

__all__ = [
    "Allow",
    "Ask",
    "Authorizer",
    "ClientRequestError",
    "Context",
    "Deny",
    "InputRequired",
    "Server",
    "Visibility",
]

F = TypeVar("F", bound=Callable[..., Any])


class _Keep(enum.Enum):
    """The default of :meth:`Server.configure`'s parameters: leave it as it is."""

    KEEP = enum.auto()


Authorizer = Callable[[str, Any, "Context"], Any]
"""``(name, arguments, context) -> Allow() | Ask(prompt) | Deny(reason)``, sync or async."""

Visibility = Callable[[str, "Context"], Any]
"""``(tool name, context) -> bool``, sync or async: whether ``tools/list`` shows the tool to
this caller (spec/protocol.md, R-PROTO-8)."""

# Options a caller may pass through ``Server(**options)``; the rest are derived here.
_USER_OPTIONS = frozenset(
    {
        "elicitation_timeout_ms",
        "max_parked_elicitations",
        "max_parked_elicitations_total",
        "max_client_capabilities",
        "max_in_flight",
        "max_in_flight_per_connection",
        "callback_timeout_ms",
        "page_size",
        "max_client_requests_per_call",
        "max_listens_per_owner",
        "max_listens_total",
        "task_inline_ms",
        "task_ttl_ms",
        "max_tasks_per_owner",
        "max_tasks_total",
    }
)


_LOG_LEVELS: Final = ("debug", "info", "warning", "error", "critical")


def _callable_or_none(**hooks: object) -> None:
    for name, hook in hooks.items():
        if hook is not None and not callable(hook):
            raise TypeError(f"{name} must be callable or None, not {type(hook).__name__}")


class ServesAtImportError(RuntimeError):
    """``run_stdio``/``run_http`` was called while ``askgate serve`` imported the module that
    holds the server: serving there would ignore the command's flags."""


_serving_refused: ContextVar[bool] = ContextVar("askgate_serving_refused", default=False)


@contextmanager
def serving_refused() -> Iterator[None]:
    """While the block runs, :meth:`Server.run_stdio` and :meth:`Server.run_http` raise
    :class:`ServesAtImportError` (``askgate serve`` imports TARGET inside it)."""
    token = _serving_refused.set(True)
    try:
        yield
    finally:
        _serving_refused.reset(token)


def _refuse_serving_at_import() -> None:
    if _serving_refused.get():
        raise ServesAtImportError("askgate serve is importing this module: it serves it itself")


class ClientRequestError(Exception):
    """A tool's own request to its client failed: the client answered with a JSON-RPC error,
    lacks the capability, did not answer in time, or the request was refused (spec/rules.md,
    R-CTX-4 .. R-CTX-6). ``reason`` is askgate's reason (``timed_out``, ``client_cannot_elicit``,
    ...) or ``None`` for the client's own error; ``code``, ``message`` and ``data`` are the
    JSON-RPC error's."""

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data
        self.reason: str | None = (
            data.get("error")
            if isinstance(data, dict) and isinstance(data.get("error"), str)
            else None
        )


class InputRequired(Exception):  # noqa: N818 (what it means on the wire, not an error)
    """Raised by a tool, prompt or resource serving a 2026-07-28 request to end this round: the
    client is answered with ``requests`` (by key, each ``{"method": ..., "params": ...}``; see
    :func:`elicitation_request`, :func:`sampling_request`, :func:`roots_request`) and a sealed
    ``requestState`` carrying ``state`` (a small JSON value, readable by the client, never
    secret); on its retry the callback runs again from the start, and
    :attr:`Context.input_responses` and :attr:`Context.round_state` hold the answers and
    ``state`` (spec/modern.md, R-MRTR-20). Raised while serving a 2025 request, the call fails
    as a callback that raised does."""

    def __init__(self, requests: dict[str, dict[str, Any]], state: object = None) -> None:
        super().__init__(f"input required: {', '.join(map(str, requests))}")
        self.requests = requests
        self.state = state


def elicitation_request(message: str, requested_schema: dict[str, Any]) -> dict[str, Any]:
    """An input request for a form elicitation (``elicitation/create``)."""
    params = {"mode": "form", "message": message, "requestedSchema": requested_schema}
    return {"method": "elicitation/create", "params": params}


def sampling_request(params: dict[str, Any]) -> dict[str, Any]:
    """An input request for sampling (``sampling/createMessage`` with ``params``)."""
    return {"method": "sampling/createMessage", "params": params}


def roots_request() -> dict[str, Any]:
    """An input request for the client's roots (``roots/list``)."""
    return {"method": "roots/list", "params": {}}


def _number(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")


@record
class Context:
    """Who is calling: given to authorizers, and to callbacks that declare a ``Context``
    parameter. ``transport`` is the server's declared transport, never the client's claim;
    ``principal`` is who the transport authenticated (an HTTP session's principal, e.g. the
    bearer token's owner, or ``local``), ``None`` on stdio.

    A running tool can also talk to its caller through it (spec/rules.md, R-CTX): report
    progress, log, and ask the client (a form elicitation, or sampling). The reducer decides
    what reaches the wire: progress only when the caller sent a ``progressToken``, logs only at
    the level it set, requests only when it declared the capability. The methods are
    coroutines; a plain ``def`` tool runs in a thread and can call them with
    ``anyio.from_thread.run(ctx.log, "info", "...")``.
    """

    conn_id: Hashable
    transport: Transport
    principal: str | None = None
    _runtime: Runtime | None = attrs.field(default=None, eq=False, repr=False, alias="runtime")
    _worker: int | None = attrs.field(default=None, eq=False, repr=False, alias="worker")
    _round: Round | None = attrs.field(default=None, eq=False, repr=False, alias="round")

    @property
    def modern(self) -> bool:
        """Whether this callback serves a 2026-07-28 request that may end in a round
        (:class:`InputRequired`); ``ctx.elicit`` and ``ctx.sample`` are refused there
        (spec/modern.md, R-MRTR-17, R-MRTR-20)."""
        return self._round is not None

    @property
    def client_capabilities(self) -> dict[str, Any]:
        """The capabilities the 2026-07-28 request declared in its ``_meta`` (``{}`` for a
        2025 request): a round may only ask what they declare (R-MRTR-22)."""
        caps = None if self._round is None else self._round.capabilities
        return caps if isinstance(caps, dict) else {}

    @property
    def input_responses(self) -> dict[str, Any]:
        """The answers of the retry of this callback's last round, by key, as the client sent
        them (check each before use); ``{}`` on a first call (R-MRTR-20)."""
        responses = None if self._round is None else self._round.responses
        return responses if isinstance(responses, dict) else {}

    @property
    def round_state(self) -> object:
        """The ``state`` this callback's last round carried, or ``None`` (R-MRTR-20)."""
        return None if self._round is None else self._round.state

    def _channel(self) -> tuple[Runtime, int]:
        if self._runtime is None or self._worker is None:
            raise ClientRequestError(
                -32603, "only a running tool can talk to its client", {"error": "not_running"}
            )
        return self._runtime, self._worker

    async def log(self, level: str, data: object, logger: str | None = None) -> None:
        """Sends ``notifications/message`` to the caller, if its level admits ``level``."""
        if level not in protocol.LOG_RANK:
            raise ValueError(f"unknown log level {level!r}; one of {sorted(protocol.LOG_LEVELS)}")
        if logger is not None and not isinstance(logger, str):
            raise TypeError("logger must be a string")
        _ensure_json(data)
        runtime, worker = self._channel()
        runtime.tool_log(worker, level, data, logger)

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Sends ``notifications/progress`` when the caller asked for progress; a value not
        greater than the last one sent is not sent (progress only increases)."""
        _number(progress, "progress")
        if total is not None:
            _number(total, "total")
        if message is not None and not isinstance(message, str):
            raise TypeError("message must be a string")
        runtime, worker = self._channel()
        runtime.report_progress(worker, progress, total, message)

    async def elicit(self, message: str, requested_schema: dict[str, Any]) -> dict[str, Any]:
        """Asks the caller's user to fill a form (``elicitation/create``, form mode) and returns
        the client's result, e.g. ``{"action": "accept", "content": {...}}``. Raises
        :class:`ClientRequestError` when the request fails or times out."""
        if not isinstance(message, str) or not isinstance(requested_schema, dict):
            raise TypeError("elicit(message: str, requested_schema: dict)")
        return await self._ask(
            "elicitation/create", {"message": message, "requestedSchema": requested_schema}
        )

    async def sample(self, params: dict[str, Any]) -> dict[str, Any]:
        """Asks the caller's model (``sampling/createMessage`` with ``params``: ``messages``,
        ``maxTokens``, ...) and returns the client's result. Raises
        :class:`ClientRequestError` when the request fails or times out."""
        if not isinstance(params, dict):
            raise TypeError("sample(params: dict)")
        return await self._ask("sampling/createMessage", params)

    async def close_sse_stream(self) -> None:
        """Over Streamable HTTP, closes the connection carrying this call's SSE stream; the
        client resumes it with a GET (SSE polling, spec/http.md R-HTTP-21). The call goes on;
        its later messages and its result are buffered for that GET. Does nothing where there is
        no stream to close (stdio, a client of a revision before 2025-11-25)."""
        runtime, worker = self._channel()
        runtime.close_stream(worker)

    async def _ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        _ensure_json(params)
        runtime, worker = self._channel()
        outcome = await runtime.ask_client(worker, method, params)
        if isinstance(outcome, Failure):
            raise ClientRequestError(outcome.code, outcome.message, outcome.data)
        assert isinstance(outcome, dict)
        return outcome


# -- input schemas from type hints ---------------------------------------------------------------


def _json_type(value: object) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


def schema_for(annotation: Any, where: str) -> dict[str, Any]:
    """The JSON Schema of a parameter annotated ``annotation``; ``where`` names it in errors."""
    if annotation is inspect.Parameter.empty or annotation is Any or annotation is object:
        return {}
    simple = {str: "string", bool: "boolean", int: "integer", float: "number"}
    if annotation in simple:
        return {"type": simple[annotation]}
    if annotation is type(None):
        return {"type": "null"}
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is typing.Annotated:
        schema: dict[str, Any] = dict(schema_for(args[0], where))
        notes = [note for note in args[1:] if isinstance(note, str)]
        if notes:
            schema["description"] = notes[0]
        return schema
    if annotation in (list, tuple, set, frozenset) or origin in (list, set, frozenset):
        return {"type": "array", "items": schema_for(args[0], where)} if args else {"type": "array"}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_for(args[0], where)}
        return {"type": "array"}
    if annotation is dict or origin is dict:
        mapping: dict[str, Any] = {"type": "object"}
        if len(args) == 2:
            mapping["additionalProperties"] = schema_for(args[1], where)
        return mapping
    if origin is Literal:
        kinds = {_json_type(value) for value in args}
        enum: dict[str, Any] = {"enum": list(args)}
        if len(kinds) == 1 and None not in kinds:
            enum["type"] = kinds.pop()
        return enum
    if origin is typing.Union or origin is types.UnionType:
        members = [schema_for(arg, where) for arg in args]
        return {"anyOf": members}
    raise TypeError(
        f"askgate cannot derive a JSON Schema for {where} (annotated {annotation!r}); "
        "pass input_schema= explicitly"
    )


def _wants_context(annotation: Any) -> bool:
    return annotation is Context or annotation == "Context"


def _signature(func: Callable[..., Any]) -> tuple[inspect.Signature, dict[str, Any]]:
    signature = inspect.signature(func)
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception:  # unresolvable forward references: fall back to the raw annotations
        hints = {name: p.annotation for name, p in signature.parameters.items()}
    return signature, hints


def derive_input_schema(func: Callable[..., Any], what: str) -> tuple[dict[str, Any], str | None]:
    """The ``inputSchema`` of ``func``'s parameters, and the name of its ``Context`` parameter."""
    signature, hints = _signature(func)
    properties: dict[str, Any] = {}
    required: list[str] = []
    context_param = None
    extra_allowed = False
    for name, param in signature.parameters.items():
        annotation = hints.get(name, param.annotation)
        if _wants_context(annotation):
            context_param = name
            continue
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            extra_allowed = True
            continue
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(f"{what}: parameter {name} is positional-only; arguments are named")
        schema = schema_for(annotation, f"{what} parameter {name}")
        if param.default is inspect.Parameter.empty:
            required.append(name)
        else:
            import json  # noqa: PLC0415 (a parameter with a default: not at start: docs/performance.md)

            try:
                json.dumps(param.default)
            except (TypeError, ValueError):
                pass
            else:
                schema = {**schema, "default": param.default}
        properties[name] = schema
    result: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        result["required"] = required
    if not extra_allowed:
        result["additionalProperties"] = False
    return result, context_param


def _context_param(func: Callable[..., Any]) -> str | None:
    signature, hints = _signature(func)
    for name, param in signature.parameters.items():
        if _wants_context(hints.get(name, param.annotation)):
            return name
    return None


# -- what the user registered --------------------------------------------------------------------


@record
class _Tool:
    info: ToolInfo
    func: Callable[..., Any]
    context_param: str | None
    is_async: bool  # is_async_callable(func), asked once: awaited without calling()


@record
class _Resource:
    uri: str
    func: Callable[..., Any]
    mime_type: str | None
    definition: dict[str, Any]
    context_param: str | None


@record
class _Template:
    uri_template: str
    func: Callable[..., Any]
    mime_type: str | None
    definition: dict[str, Any]
    context_param: str | None


@record
class _Prompt:
    name: str
    func: Callable[..., Any]
    any_argument: bool  # the function takes **kwargs
    definition: dict[str, Any]
    context_param: str | None


# -- what callbacks return -----------------------------------------------------------------------


def _ensure_json(value: object) -> object:
    """``value`` if strict JSON can carry it; a worker value must never fail to encode."""
    if isinstance(value, Failure):
        encode({"message": value.message, "data": value.data})
        return value
    try:
        encode({"value": value})
    except EncodeError as bad:
        raise TypeError(f"a callback returned something JSON cannot carry: {bad}") from None
    return value


_ATOMS = frozenset({str, int, float, bool, type(None)})


_NO_CONTEXT: Final = cast(Context, None)
"""What an authorizer marked ``ignores_context`` (the policy file's) gets as its context."""

_NO_KWARGS: Final[dict[str, Any]] = {}
"""No keyword arguments (never changed: a call copies what it unpacks)."""


def _own_copy(value: object) -> object:
    """A deep copy of ``value`` (what ``copy.deepcopy`` returns): JSON's plain dicts and lists
    are copied directly, anything else (another type, a container met twice or a cycle) by
    ``copy.deepcopy`` of the whole, which keeps what is shared shared."""
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str or type(item) not in _ATOMS:
                break
        else:  # the common arguments: names to strings and numbers
            return value.copy()
    try:
        return _plain_copy(value, set())
    except _NotPlainError:
        return copy.deepcopy(value)


def _plain_copy(item: object, seen: set[int]) -> object:
    kind = type(item)
    if kind in _ATOMS:
        return item
    if kind is not dict and kind is not list:
        raise _NotPlainError
    if id(item) in seen:
        raise _NotPlainError
    seen.add(id(item))
    if kind is list:
        return [_plain_copy(val, seen) for val in item]  # type: ignore[attr-defined]
    copied = {}
    for key, val in item.items():  # type: ignore[attr-defined]
        if type(key) is not str:
            raise _NotPlainError
        copied[key] = _plain_copy(val, seen)
    return copied


class _NotPlainError(Exception):
    """Raised by :func:`_own_copy` for a value it leaves to ``copy.deepcopy``."""


# -- the server ----------------------------------------------------------------------------------


class Server:
    """An MCP server: the user's tools, resources, prompts and policies, served by askgate.

    ``authorizer`` guards ``tools/call`` and ``read_authorizer`` the read surfaces (both
    ``(name, arguments, context) -> Allow() | Ask(prompt) | Deny(reason)``, sync or async).
    ``authorizer_source`` says whether a caller chose the authorizer (``"configured"``) or a
    framework default stood in (``"default"``, the default): see
    :meth:`authorization_configured`. ``visibility(tool, context) -> bool`` decides which tools
    ``tools/list`` shows a caller; without it every registered tool is listed (the authorizer
    decides calls, not listing). ``unknown_tool_reply(name) -> str | None`` answers a call
    of an unknown tool with text instead of ``-32601``. ``options`` are the reducer's
    (``elicitation_timeout_ms``, ``max_parked_elicitations``, ...); bad values raise
    :class:`~askgate.core.OptionError` here.
    """

    def __init__(
        self,
        name: str,
        *,
        version: str = __version__,
        instructions: str | None = None,
        authorizer: Authorizer | None = None,
        read_authorizer: Authorizer | None = None,
        authorizer_source: AuthorizerSource = "default",
        visibility: Visibility | None = None,
        unknown_tool_reply: Callable[[str], Any] | None = None,
        **options: Any,
    ) -> None:
        unknown = sorted(set(options) - _USER_OPTIONS)
        if unknown:
            raise TypeError(
                f"Server() got an unexpected option {unknown[0]!r}; "
                f"options are {', '.join(sorted(_USER_OPTIONS))}"
            )
        _callable_or_none(
            authorizer=authorizer,
            read_authorizer=read_authorizer,
            visibility=visibility,
            unknown_tool_reply=unknown_tool_reply,
        )
        self.name = name
        self.version = version
        self._authorizer = authorizer
        self._authorizer_is_async = authorizer is not None and is_async_callable(authorizer)
        self._authorizer_context = authorizer is None or wants_context(authorizer)
        self._authorizer_eager = authorizer is not None and runs_eagerly(authorizer)
        self._read_authorizer = read_authorizer
        self._authorizer_source = authorizer_source
        self._visibility = visibility
        self._unknown_tool_reply = unknown_tool_reply
        self._auditor: Any = None  # an askgate.audit.Auditor, see audit()
        self._options = Options(
            catalog_complete=True,  # every resource, template and prompt is announced
            has_authorizer=authorizer is not None,
            has_read_authorizer=read_authorizer is not None,
            has_visibility=visibility is not None,
            has_unknown_tool_reply=unknown_tool_reply is not None,
            authorizer_source=authorizer_source,
            server_name=name,
            server_version=version,
            instructions=instructions,
            **options,
        ).validated()
        self._tools: dict[str, _Tool] = {}
        self._resources: dict[str, _Resource] = {}
        self._templates: dict[str, _Template] = {}
        self._prompts: dict[str, _Prompt] = {}
        self._completion: Callable[..., Any] | None = None
        self._runtime: Runtime | None = None
        self._transport: Transport = "unknown"
        self._limiter: anyio.CapacityLimiter | None = None

    @property
    def options(self) -> Options:
        return self._options

    def authorization_configured(self) -> bool:
        """Whether a caller CHOSE the tool authorizer: there is one and its source is
        ``"configured"``. A default stand-in, however strict, does not count (seed 000):
        network transports use this to refuse to serve when nobody decided they should."""
        return self._authorizer is not None and self._authorizer_source == "configured"

    def read_authorization_configured(self) -> bool:
        """Whether the read surfaces have an authorizer (presence, not source)."""
        return self._read_authorizer is not None

    def tool_definitions(self) -> dict[str, Any]:
        """Each registered tool's ``tools/list`` entry, by name (``askgate policy check``
        checks the prompts against their ``inputSchema``)."""
        return {name: tool.info.definition for name, tool in self._tools.items()}

    # -- registration -----------------------------------------------------------------------

    def tool(
        self,
        name: str | None = None,
        description: str | None = None,
        annotations: Mapping[str, Any] | None = None,
        input_schema: Mapping[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        derived: bool = False,
        task_support: str | None = None,
    ) -> Callable[[F], F]:
        """Registers a tool. Its input schema is derived from the type hints unless given;
        ``annotations`` with ``destructiveHint`` or ``sensitive`` true make it sensitive.
        ``task_support`` is ``"forbidden"`` (the default), ``"optional"`` or ``"required"``:
        whether a call may become a task (spec/tasks.md, R-TASK-1)."""
        if task_support is not None and task_support not in SUPPORTS:
            raise TypeError(f"task_support must be one of {', '.join(SUPPORTS)}: {task_support!r}")

        def register(func: F) -> F:
            tool_name = name or func.__name__
            what = f"tool {tool_name}"
            if input_schema is None:
                schema, context_param = derive_input_schema(func, what)
            else:
                schema, context_param = dict(input_schema), _context_param(func)
            definition = _described({"name": tool_name}, func, description)
            definition["inputSchema"] = schema
            notes = dict(annotations or {})
            if notes:
                definition["annotations"] = notes
            if output_schema is not None:
                definition["outputSchema"] = dict(output_schema)
            if task_support in ("optional", "required"):  # R-TASK-1
                definition["execution"] = {"taskSupport": task_support}
            _ensure_definition(definition, what)
            try:  # the annotations make it sensitive (R-TOOL-1); the schemas compile here
                info = tool_info(tool_name, False, derived, definition)
            except OptionError as bad:
                if bad.option == "outputSchema":
                    raise TypeError(f"{what} output_schema {bad.rule}") from None
                raise TypeError(f"{what}: input_schema {bad.rule}") from None
            marks = param_headers(schema)
            if isinstance(marks, str):  # R-HTTP-48: a mark no conforming client accepts
                raise TypeError(f"{what}: input_schema {marks}")
            self._tools[tool_name] = _Tool(info, func, context_param, is_async_callable(func))
            if self._runtime is not None:
                runtime = self._runtime
                runtime.feed(
                    ToolRegistered(tool_name, info.sensitive, derived, runtime.now(), definition)
                )
            return func

        return register

    def resource(
        self,
        uri: str,
        name: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
    ) -> Callable[[F], F]:
        """Registers a static resource: ``func()`` returns text, bytes or contents."""

        def register(func: F) -> F:
            entry = {"uri": uri, "name": name or func.__name__}
            definition = _described(entry, func, description, mime_type)
            _ensure_definition(definition, f"resource {uri}")
            context = _context_param(func)
            self._resources[uri] = _Resource(uri, func, mime_type, definition, context)
            self._announce(CatalogChanged("resource", uri, definition))
            return func

        return register

    def resource_template(
        self,
        uri_template: str,
        name: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
    ) -> Callable[[F], F]:
        """Registers a resource template (``demo://items/{id}``): ``func(id=...)`` reads one."""

        def register(func: F) -> F:
            entry = {"uriTemplate": uri_template, "name": name or func.__name__}
            definition = _described(entry, func, description, mime_type)
            _ensure_definition(definition, f"resource template {uri_template}")
            context = _context_param(func)
            self._templates[uri_template] = _Template(
                uri_template, func, mime_type, definition, context
            )
            self._announce(CatalogChanged("template", uri_template, definition))
            return func

        return register

    def prompt(self, name: str | None = None, description: str | None = None) -> Callable[[F], F]:
        """Registers a prompt: ``func(**arguments)`` returns text, messages or a result."""

        def register(func: F) -> F:
            prompt_name = name or func.__name__
            signature, hints = _signature(func)
            arguments = []
            any_argument = False
            context = None
            for pname, param in signature.parameters.items():
                if _wants_context(hints.get(pname, param.annotation)):
                    context = pname
                    continue
                if param.kind is inspect.Parameter.VAR_KEYWORD:
                    any_argument = True
                    continue
                if param.kind is inspect.Parameter.VAR_POSITIONAL:
                    continue
                is_required = param.default is inspect.Parameter.empty
                arguments.append({"name": pname, "required": is_required})
            definition = _described({"name": prompt_name}, func, description)
            definition["arguments"] = arguments
            _ensure_definition(definition, f"prompt {prompt_name}")
            self._prompts[prompt_name] = _Prompt(
                prompt_name, func, any_argument, definition, context
            )
            self._announce(CatalogChanged("prompt", prompt_name, definition))
            return func

        return register

    def completion(self) -> Callable[[F], F]:
        """Registers the ``completion/complete`` handler: ``func(ref, argument)`` (the request's
        ``ref`` and ``argument`` objects) returns a list of values."""

        def register(func: F) -> F:
            self._completion = func
            return func

        return register

    def _announce(self, event: CatalogChanged) -> None:
        if self._runtime is not None:
            self._runtime.feed(attrs.evolve(event, now=self._runtime.now()))

    # -- embedder's notifications -----------------------------------------------------------

    def notify_resource_updated(self, uri: str) -> None:
        """Tells the connections subscribed to ``uri`` that it changed (call on the loop)."""
        runtime = self._running()
        runtime.feed(ResourceUpdated(uri, runtime.now()))

    def log(self, level: str, data: object, logger: str | None = None) -> None:
        """Sends a log message to the connections whose level admits it (call on the loop)."""
        _ensure_json(data)
        runtime = self._running()
        runtime.feed(LogEmitted(level, data, runtime.now(), logger))

    def _running(self) -> Runtime:
        if self._runtime is None:
            raise RuntimeError("the server is not serving")
        return self._runtime

    # -- starting ---------------------------------------------------------------------------

    def initial_state(self, transport: Transport = "unknown") -> State:
        """The reducer's state at start: raises OptionError for a sensitive tool that nothing
        authorizes (R-OPT-2), naming the tools."""
        options = attrs.evolve(self._options, transport=transport).validated()
        tools = tuple(tool.info for tool in self._tools.values())
        # R-MRTR-12: the key that seals modern approval states, drawn fresh at every start.
        ring = Keyring(Key("k1", os.urandom(32)), options.elicitation_timeout_ms)
        # R-DLV-5: prompts show the decision log's digests, keyed as it keys them (R-AUD-2).
        auditor = self._auditor
        digest_key = auditor.key if auditor is not None else os.urandom(32)
        # R-TASK-4: a task's times are dated by the wall clock at the monotonic clock's 0.
        # (asyncio's loop clock is time.monotonic; on another loop the dates may be offset)
        epoch_ms = int(time.time() * 1000) - int(time.monotonic() * 1000)
        state = initial_state(
            options,
            id_key=os.urandom(32),
            tools=tools,
            keyring=ring,
            digest_key=digest_key,
            epoch_ms=epoch_ms,
        )
        # The catalog is complete from the first step (catalog_complete, R-PROTO-18, 19).
        for event in self._catalog_events():
            state, _ = step(state, event)  # no connection yet: nobody to tell
        return state

    def _catalog_events(self) -> list[CatalogChanged]:
        """What is registered: every resource, resource template and prompt."""
        return [
            *(CatalogChanged("resource", r.uri, r.definition) for r in self._resources.values()),
            *(
                CatalogChanged("template", t.uri_template, t.definition)
                for t in self._templates.values()
            ),
            *(CatalogChanged("prompt", p.name, p.definition) for p in self._prompts.values()),
        ]

    @asynccontextmanager
    async def running(
        self,
        transport: Transport = "unknown",
        *,
        state: State | None = None,
    ) -> AsyncIterator[Runtime]:
        """Runs the server's runtime for the length of the block; attach transports to it."""
        if self._runtime is not None:
            raise RuntimeError("the server is already running")
        first = state if state is not None else self.initial_state(transport)
        self._transport = first.options.transport
        self._limiter = anyio.CapacityLimiter(max(1, first.options.max_in_flight))
        runtime = Runtime(first, self.perform_job)
        runtime.eager_when(self.runs_eagerly)
        auditor = self._auditor
        if auditor is not None:
            auditor.start(first, runtime.principal_of)
            runtime.tap(auditor)
        async with runtime.running():
            if state is not None:  # built elsewhere: tell it what is registered now
                for event in self._catalog_events():
                    runtime.feed(event)
            self._runtime = runtime
            try:
                yield runtime
            finally:
                self._runtime = None
                if auditor is not None:  # its files are closed: a later run records nothing
                    runtime.tap(None)
                    auditor.close()
                    self._auditor = None

    @contextmanager
    def running_in_threads(
        self,
        transport: Transport = "unknown",
        *,
        state: State | None = None,
        clock: Clock | None = None,
        check_invariants: bool | None = None,
    ) -> Iterator[SyncRuntime]:
        """Runs the server on the synchronous driver for the length of the block, for code
        without an event loop (:mod:`askgate.transports.sync`, spec/sync.md): feed it from any
        thread, or call tools through a :class:`~askgate.transports.sync.LocalClient`.
        ``clock`` is a monotonic clock in seconds (``time.monotonic``)."""
        if self._runtime is not None:
            raise RuntimeError("the server is already running")
        first = state if state is not None else self.initial_state(transport)
        self._transport = first.options.transport
        self._limiter = None  # plain callbacks run on the driver's own worker threads
        from askgate.transports.sync import SyncRuntime  # noqa: PLC0415 (only this driver's)

        runtime = SyncRuntime(
            first,
            self.perform_job,
            loop_free=self.runs_without_loop,
            eager=self.runs_eagerly,
            clock=clock,
            check_invariants=check_invariants,
        )
        with runtime.threads():
            if state is not None:  # built elsewhere: tell it what is registered now
                for event in self._catalog_events():
                    runtime.feed(event)
            self._runtime = runtime
            try:
                yield runtime
            finally:
                self._runtime = None

    async def serve_stdio(
        self,
        stdin: anyio.abc.ByteReceiveStream | None = None,
        stdout: anyio.abc.ByteSendStream | None = None,
        *,
        state: State | None = None,
    ) -> None:
        """Serves one stdio connection until end of input. Without streams, the process's own
        standard input and output (use :meth:`run_stdio` for a whole process). The same as
        ``await StdioTransport(server, stdin, stdout, state=state).serve()``
        (:mod:`askgate.transports.stdio`)."""
        await stdio.StdioTransport(self, stdin, stdout, state=state).serve()

    def run_stdio(self, *, backend: str = "asyncio") -> int:
        """Serves this process's standard input and output until end of input, SIGINT (Ctrl-C)
        or SIGTERM, and returns the exit status: 0 when serving ended, 1 when the server's own
        machinery failed, 2 when the server refused to start (an
        :class:`~askgate.core.OptionError` such as a sensitive tool nothing authorizes: its
        one-line reason is printed on standard error, with no traceback). A script ends with
        ``raise SystemExit(server.run_stdio())``.

        A plain ``def`` callback that hung past ``callback_timeout_ms`` still occupies the
        thread the runtime abandoned, and the interpreter waits for such threads at exit; the
        ``askgate`` command ends with ``os._exit`` for that reason, and a script may too.
        """
        _refuse_serving_at_import()
        return stdio.run_stdio(self, backend=backend)

    def run_http(
        self,
        host: str = "127.0.0.1",
        port: int = 8765,
        *,
        auth: AuthProvider | None = None,
        allowed_origins: Sequence[str] = (),
        allowed_hosts: Sequence[str] = (),
        backend: str = "asyncio",
        log_level: str = "warning",
        banner: bool = False,
        limits: Mapping[str, int] | None = None,
    ) -> int:
        """Serves Streamable HTTP on ``host:port`` (endpoint ``/mcp``, and the 2024-11-05
        HTTP+SSE pair) with askgate's own HTTP/1.1 server until SIGINT (Ctrl-C) or SIGTERM,
        the code path of ``askgate serve --http``, and returns the exit status: 0 when stopped,
        1 when the server's own machinery failed, 2 when it refused to start, its one-line
        reason printed on standard error with no traceback. A script ends with
        ``raise SystemExit(server.run_http())``.

        It refuses (spec/http.md, R-HTTP-13) a port outside 0 to 65535; ``auth=None`` (loopback
        peers only) on an address that is not loopback; a server whose tool authorizer nobody
        configured (``authorizer_source="configured"``) or that has no read authorizer; an
        address it cannot bind (a port in use). ``auth`` is an
        :mod:`askgate.transports.auth` provider (``BearerAuth(tokens)``,
        ``ApiKeyAuth(tokens)``); ``allowed_origins`` and ``allowed_hosts`` add to the loopback
        names the Origin and Host checks admit. ``backend`` is ``"asyncio"`` (the HTTP server runs
        on nothing else); ``log_level`` is the operator's log's, when the process has
        configured no logging (R-HTTP-46), and ``banner`` prints the URL and an MCP
        client configuration on standard error. ``limits`` sets the transport's bounds by
        :class:`askgate.core.http.HttpOptions` field name, e.g. ``{"max_header_bytes": 16384,
        "max_headers": 100, "max_connections": 1000, "max_sessions_per_principal": 128}`` (the
        defaults; spec/http.md R-HTTP-34 .. R-HTTP-36); an unknown name or a value under 1 is
        refused as above.
        """
        # the HTTP stack is imported when HTTP is served, not by every `import askgate`
        from askgate.transports.http_server import run_http  # noqa: PLC0415

        _refuse_serving_at_import()
        if auth is not None and not callable(auth):
            raise TypeError(
                f"run_http(auth=...) takes an askgate.transports.auth provider such as "
                f"BearerAuth(tokens), not {type(auth).__name__}"
            )
        for name, values in (
            ("allowed_origins", allowed_origins),
            ("allowed_hosts", allowed_hosts),
        ):
            if isinstance(values, str) or not all(isinstance(v, str) for v in values):
                raise TypeError(f"run_http({name}=...) takes a sequence of strings")
        if log_level not in _LOG_LEVELS:
            raise ValueError(f"run_http(log_level={log_level!r}): one of {', '.join(_LOG_LEVELS)}")
        return run_http(
            self,
            host,
            port,
            auth=auth,
            allowed_origins=allowed_origins,
            allowed_hosts=allowed_hosts,
            backend=backend,
            log_level=log_level,
            banner=banner,
            limits=limits,
        )

    def audit(
        self,
        *,
        trace: Any = None,
        log: Any = None,
        key: bytes | None = None,
    ) -> None:
        """Records the next run (spec/audit.md): ``trace`` an
        :class:`askgate.audit.Trace` (every event fed to the reducer and its effects), ``log``
        an :class:`askgate.audit.AuditLog` (the decision log); ``key`` keys the arguments'
        digests (32 random bytes by default). The policy entry a decision line names comes from
        the tool authorizer: a policy file's entry (file and line) or the callable's name."""
        from askgate.audit import Auditor, entry_namer  # noqa: PLC0415 (only when auditing)

        if trace is None and log is None:
            self._auditor = None
            return
        entry = entry_namer(self._authorizer)
        self._auditor = Auditor(trace=trace, log=log, key=key, entry=entry)

    def configure(
        self,
        *,
        authorizer: Authorizer | Literal[_Keep.KEEP] | None = _Keep.KEEP,
        read_authorizer: Authorizer | Literal[_Keep.KEEP] | None = _Keep.KEEP,
        visibility: Visibility | Literal[_Keep.KEEP] | None = _Keep.KEEP,
        authorizer_source: AuthorizerSource | Literal[_Keep.KEEP] = _Keep.KEEP,
        **options: Any,
    ) -> None:
        """Replaces the authorizers and the visibility hook and changes options before serving
        (``askgate serve`` applies ``--policy`` and its option flags to a served ``Server``
        through it); what is not given stays. Raises :class:`~askgate.core.OptionError` for a
        bad value (nothing changes then), ``TypeError`` for an unknown option, ``RuntimeError``
        while serving."""
        if self._runtime is not None:
            raise RuntimeError("the server is serving: configure it before it starts")
        _callable_or_none(
            authorizer=None if authorizer is _Keep.KEEP else authorizer,
            read_authorizer=None if read_authorizer is _Keep.KEEP else read_authorizer,
            visibility=None if visibility is _Keep.KEEP else visibility,
        )
        unknown = sorted(set(options) - _USER_OPTIONS)
        if unknown:
            raise TypeError(
                f"configure() got an unexpected option {unknown[0]!r}; "
                f"options are {', '.join(sorted(_USER_OPTIONS))}"
            )
        tool = self._authorizer if authorizer is _Keep.KEEP else authorizer
        read = self._read_authorizer if read_authorizer is _Keep.KEEP else read_authorizer
        source = self._authorizer_source if authorizer_source is _Keep.KEEP else authorizer_source
        shown = self._visibility if visibility is _Keep.KEEP else visibility
        self._options = attrs.evolve(
            self._options,
            has_authorizer=tool is not None,
            has_read_authorizer=read is not None,
            has_visibility=shown is not None,
            authorizer_source=source,
            **options,
        ).validated()
        self._authorizer, self._read_authorizer, self._authorizer_source = tool, read, source
        self._authorizer_is_async = tool is not None and is_async_callable(tool)
        self._authorizer_context = tool is None or wants_context(tool)
        self._authorizer_eager = tool is not None and runs_eagerly(tool)
        self._visibility = shown

    # -- jobs -------------------------------------------------------------------------------

    def runs_eagerly(self, job: Job) -> bool:
        """Whether ``job``'s callback is marked ``completes_without_suspending`` (askgate's own
        policy authorizers are, and tools may be): its worker then runs it at once, without a
        task."""
        kind = type(job)  # job classes are final: the most frequent first
        if kind is RunTool:
            tool = self._tools.get(job.tool)  # type: ignore[union-attr]
            # (runs_eagerly(tool.func), without the call)
            return tool is not None and getattr(tool.func, EAGER_FLAG, False) is True
        if kind is Authorize:
            return self._authorizer_eager  # asked once, as _authorizer_is_async is
        if kind is FilterTools:
            return self._visibility is not None and runs_eagerly(self._visibility)
        if kind is AuthorizeRead:
            return self._read_authorizer is not None and runs_eagerly(self._read_authorizer)
        return False

    def runs_without_loop(self, job: Job) -> bool:
        """Whether ``job`` needs no event loop on a worker thread of the synchronous driver:
        the callback it calls (if any) is a plain ``def``, called directly there, or is marked
        ``completes_without_suspending``."""
        func = self._job_callback(job)
        return func is None or not is_async_callable(func) or runs_eagerly(func)

    def _job_callback(self, job: Job) -> Callable[..., Any] | None:
        """The user callback ``job`` calls, or ``None`` when it calls none."""
        if isinstance(job, Authorize):
            return self._authorizer
        if isinstance(job, AuthorizeRead):
            return self._read_authorizer
        if isinstance(job, RunTool):
            tool = self._tools.get(job.tool)
            return None if tool is None else tool.func
        if isinstance(job, FilterTools):
            return self._visibility
        if isinstance(job, UnknownToolReply):
            return self._unknown_tool_reply
        if isinstance(job, RunRead):
            params = job.params if isinstance(job.params, dict) else {}
            if job.method == "resources/read":
                uri = str(params.get("uri"))
                if uri in self._resources:
                    return self._resources[uri].func
                for template in self._templates.values():
                    if protocol.template_variables(template.uri_template, uri) is not None:
                        return template.func
                return None
            if job.method == "prompts/get":
                prompt = self._prompts.get(str(params.get("name")))
                return None if prompt is None else prompt.func
            if job.method == "completion/complete":
                return self._completion
        return None

    def _context(self, conn: Hashable, round_: Round | None = None) -> Context:
        runtime = self._runtime
        principal = None if runtime is None else runtime.principal_of(conn)
        worker = current_worker()
        return Context(conn, self._transport, principal, runtime, worker, round_)

    def _call(self, func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Awaitable[object]:
        """What awaiting calls ``func`` (:func:`~askgate.transports.runtime.calling`): an async
        callback's own coroutine, awaited by the caller directly."""
        return calling(func, args, kwargs, self._limiter)

    async def perform_job(self, conn: Hashable, job: Job) -> object:
        """Runs the user callback a worker job names and returns the worker's value.

        Whatever the callback raises propagates (the runtime reports ``WorkerFailed``); the
        value is always something strict JSON can carry.
        """
        kind = type(job)  # job classes are final: the most frequent first
        if kind is Authorize:
            assert self._authorizer is not None
            arguments = _own_copy(job.arguments)  # type: ignore[union-attr] # R-AUTH-5
            # (askgate's own policy authorizer never looks at the context: none is built)
            context = self._context(conn) if self._authorizer_context else _NO_CONTEXT
            given = (job.tool, arguments, context)  # type: ignore[union-attr]
            if self._authorizer_is_async:  # what calling() does for it, without the calls
                return await self._authorizer(*given)
            return await calling(self._authorizer, given, _NO_KWARGS, self._limiter)
        if kind is RunTool:
            run: RunTool = job  # type: ignore[assignment]
            try:
                return await self._run_tool(conn, run.tool, run.arguments, run.round)
            except InputRequired as ended:  # R-MRTR-20: the reducer decides what it means
                return NeedsInput(copy.deepcopy(ended.requests), copy.deepcopy(ended.state))
        if isinstance(job, AuthorizeRead):
            assert self._read_authorizer is not None
            context = self._context(conn)
            params = _own_copy(job.params)  # R-AUTH-5
            return await self._call(self._read_authorizer, job.method, params, context)
        if isinstance(job, RunRead):
            params = job.params if isinstance(job.params, dict) else {}
            try:
                return _ensure_json(await self._run_read(conn, job.method, params, job.round))
            except InputRequired as ended:  # R-MRTR-24
                return NeedsInput(copy.deepcopy(ended.requests), copy.deepcopy(ended.state))
        if isinstance(job, FilterTools):
            return await self._filter_tools(conn, job.names)
        if isinstance(job, UnknownToolReply):
            assert self._unknown_tool_reply is not None
            return await self._call(self._unknown_tool_reply, job.tool)
        raise TypeError(f"unknown job {job!r}")

    def _kwargs(
        self,
        conn: Hashable,
        arguments: object,
        context_param: str | None,
        round_: Round | None = None,
    ) -> dict[str, Any]:
        kwargs = dict(arguments) if isinstance(arguments, dict) else {}
        if context_param is not None:
            kwargs[context_param] = self._context(conn, round_)
        return kwargs

    async def _run_tool(
        self, conn: Hashable, name: str, arguments: object, round_: Round | None = None
    ) -> dict[str, Any]:
        tool = self._tools[name]
        kwargs = self._kwargs(conn, arguments, tool.context_param, round_)
        if tool.is_async:  # what calling() does for it, without the calls
            value = await tool.func(**kwargs)
        else:
            value = await calling(tool.func, (), kwargs, self._limiter)
        if type(value) is str:
            # The common case, checked without encoding the whole result: a str is strict JSON
            # unless it holds a lone surrogate, which UTF-8 refuses as the encoder would.
            try:
                value.encode()
            except UnicodeEncodeError:
                raise TypeError("a tool returned text JSON cannot carry") from None
            return protocol.text_result(value)
        result = protocol.tool_result(value)
        try:
            _ensure_json(result)
        except TypeError:
            if tool.info.output_validator is None:
                raise
            # R-PROTO-17 first: a value JSON cannot carry (NaN) that breaks the output schema
            # answers the schema's error, as the reducer would had it been JSON.
            checked = protocol.checked_output(tool.info, result)
            if checked is result:
                raise
            return checked
        return result

    async def _filter_tools(self, conn: Hashable, names: tuple[str, ...]) -> dict[str, object]:
        """What the visibility hook says of each name, as it said it; :class:`Raised` where it
        raised. The reducer decides what that lists (R-PROTO-8)."""
        hook = self._visibility
        assert hook is not None
        context = self._context(conn)
        verdicts: dict[str, object] = {}
        if is_async_callable(hook):
            for name in names:
                try:
                    verdicts[name] = await hook(name, context)
                except Exception as raised:
                    verdicts[name] = Raised(type(raised).__name__)
            return verdicts

        def filter_in_thread() -> dict[str, object]:  # one thread hop for the whole list
            for name in names:
                try:
                    verdicts[name] = hook(name, context)
                except Exception as raised:
                    verdicts[name] = Raised(type(raised).__name__)
            return verdicts

        if on_worker_thread():  # the synchronous driver's worker thread: no hop needed
            return filter_in_thread()
        return await anyio.to_thread.run_sync(
            filter_in_thread, abandon_on_cancel=True, limiter=self._limiter
        )

    async def _run_read(
        self,
        conn: Hashable,
        method: str,
        params: Mapping[str, Any],
        round_: Round | None = None,
    ) -> object:
        if method == "resources/read":
            return await self._read_resource(conn, str(params.get("uri")), round_)
        if method == "prompts/get":
            name, arguments = str(params.get("name")), params.get("arguments")
            return await self._get_prompt(conn, name, arguments, round_)
        if method == "completion/complete":
            if self._completion is None:
                return protocol.no_completion()
            value = await self._call(self._completion, params.get("ref"), params.get("argument"))
            return protocol.completion_result(value)
        raise TypeError(f"askgate has no callback for {protocol.clip(method, 64)}")

    async def _read_resource(self, conn: Hashable, uri: str, round_: Round | None = None) -> object:
        """Calls the resource registered at ``uri``, else the first template matching it."""
        resource = self._resources.get(uri)
        if resource is not None:
            value = await self._call(
                resource.func, **self._kwargs(conn, {}, resource.context_param, round_)
            )
            return protocol.resource_result(uri, resource.mime_type, value)
        for template in self._templates.values():
            variables = protocol.template_variables(template.uri_template, uri)
            if variables is not None:
                kwargs = self._kwargs(conn, variables, template.context_param, round_)
                value = await self._call(template.func, **kwargs)
                return protocol.resource_result(uri, template.mime_type, value)
        return Failure(*protocol.unknown_resource(uri))

    async def _get_prompt(
        self, conn: Hashable, name: str, arguments: object, round_: Round | None = None
    ) -> object:
        """Calls the prompt ``name``; the arguments its function cannot take (it alone knows
        whether it takes undeclared ones) answer as R-PROTO-19 says."""
        prompt = self._prompts.get(name)
        definition = None if prompt is None else prompt.definition
        any_argument = prompt is not None and prompt.any_argument
        problem = protocol.prompt_problem(definition, name, arguments, any_argument=any_argument)
        if problem is not None:
            return Failure(INVALID_PARAMS, problem)
        assert prompt is not None  # an unknown prompt is a problem
        given = dict(arguments) if isinstance(arguments, dict) else {}
        kwargs = self._kwargs(conn, given, prompt.context_param, round_)
        value = await self._call(prompt.func, **kwargs)
        return protocol.prompt_result(value, prompt.definition.get("description"))


def _described(
    definition: dict[str, Any],
    func: Callable[..., Any],
    description: str | None,
    mime_type: str | None = None,
) -> dict[str, Any]:
    """``definition`` with the description (given, else the docstring) and MIME type, if any."""
    text = description if description is not None else inspect.getdoc(func)
    if text:
        definition["description"] = text
    if mime_type:
        definition["mimeType"] = mime_type
    return definition


def _ensure_definition(definition: dict[str, Any], what: str) -> None:
    try:
        encode(definition)
    except EncodeError as bad:
        raise TypeError(f"{what}: its definition is not JSON: {bad}") from None
