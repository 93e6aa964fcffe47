"""MCP protocol values the reducer answers with: versions, capabilities, pages, params checks.

Pure functions of plain values; the dispatch that uses them is in :mod:`.reducer`
(spec/protocol.md).
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any, Final

from . import messages as m
from .decisions import Raised
from .messages import JsonObject, RequestId
from .options import Options
from .tools import ToolInfo, output_problem

SUPPORTED_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LATEST_VERSION: Final = SUPPORTED_VERSIONS[0]

LOG_LEVELS: Final = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)
LOG_RANK: Final = {level: rank for rank, level in enumerate(LOG_LEVELS)}

READ_METHODS: Final = frozenset(
    {
        "tools/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
    }
)
"""The methods the read authorizer gates (R-PROTO-7)."""

_CURSOR_PREFIX: Final = "askgate-page:"

COMPLETION_LIMIT: Final = 100
"""The most values one ``completion/complete`` answer lists (R-PROTO-21)."""


def negotiate(requested: object) -> str:
    """The protocol version to answer ``initialize`` with (R-PROTO-3).

    The client's when it is one we support, else the latest.

    post: __return__ == (requested if requested in SUPPORTED_VERSIONS else LATEST_VERSION)
    """
    return (
        requested
        if isinstance(requested, str) and requested in SUPPORTED_VERSIONS
        else LATEST_VERSION
    )


def server_capabilities() -> JsonObject:
    return {
        "tools": {"listChanged": True},
        "resources": {"subscribe": True, "listChanged": True},
        "prompts": {"listChanged": True},
        "logging": {},
        "completions": {},
    }


TASKS_REVISION = "2025-11-25"
"""The handshake revision whose ``initialize`` answer declares tasks (R-TASK-12)."""


def initialize_result(options: Options, version: str) -> JsonObject:
    capabilities = server_capabilities()
    if version == TASKS_REVISION:  # R-TASK-12
        capabilities["tasks"] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    result: JsonObject = {
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": {"name": options.server_name, "version": options.server_version},
    }
    if options.instructions is not None:
        result["instructions"] = options.instructions
    return result


def encode_cursor(offset: int) -> str:
    raw = f"{_CURSOR_PREFIX}{offset}".encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(cursor: object) -> int | None:
    """The offset a cursor we issued stands for, or ``None`` for anything else (R-PROTO-9)."""
    if cursor is None:
        return 0
    if not isinstance(cursor, str) or len(cursor) > 64:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if not raw.startswith(_CURSOR_PREFIX):
        return None
    digits = raw[len(_CURSOR_PREFIX) :]
    if not digits.isdigit() or len(digits) > 12:
        return None
    return int(digits)


def page(
    request_id: RequestId,
    params: Mapping[str, Any] | None,
    field: str,
    entries: Iterable[tuple[str, Any]],
    page_size: int,
) -> JsonObject:
    """One page of a list answer: ``entries`` are (sort key, entry) pairs (R-PROTO-9)."""
    offset = decode_cursor(params.get("cursor") if params else None)
    ordered = sorted(entries, key=lambda pair: pair[0])
    if offset is None or offset > len(ordered):
        return m.error(request_id, m.INVALID_PARAMS, "Invalid cursor")
    chunk = [entry for _, entry in ordered[offset : offset + page_size]]
    result: JsonObject = {field: chunk}
    if offset + page_size < len(ordered):
        result["nextCursor"] = encode_cursor(offset + page_size)
    return m.result(request_id, result)


def tool_entry(name: str, definition: object) -> JsonObject:
    """A tool's ``tools/list`` entry: its definition, or a minimal one."""
    if isinstance(definition, dict):
        return definition
    return {"name": name, "inputSchema": {"type": "object"}}


def hidden_reason(verdict: object) -> str:
    """Why a tool the visibility hook answered ``verdict`` about (neither ``True`` nor
    ``False``) is hidden: the operator's log line (R-PROTO-8)."""
    if isinstance(verdict, Raised):
        return f"the visibility hook raised {clip(str(verdict.kind), 64)}"
    return f"the visibility hook returned {clip(type(verdict).__name__, 64)}, not a bool"


def read_params_error(
    request_id: RequestId, method: str, params: Mapping[str, Any] | None
) -> JsonObject | None:
    """The ``-32602`` for a read method's malformed params, or ``None`` (R-PROTO-7)."""
    p = params or {}
    if method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
        if not isinstance(p.get("uri"), str):
            return m.error(request_id, m.INVALID_PARAMS, f"{method} requires a string uri")
    elif method == "prompts/get":
        if not isinstance(p.get("name"), str):
            return m.error(request_id, m.INVALID_PARAMS, "prompts/get requires a string name")
        if "arguments" in p and not isinstance(p["arguments"], dict):
            return m.error(request_id, m.INVALID_PARAMS, "prompts/get arguments must be an object")
    elif method == "completion/complete":
        if not isinstance(p.get("ref"), dict):
            return m.error(request_id, m.INVALID_PARAMS, "completion/complete requires a ref")
    elif method == "logging/setLevel" and not (
        isinstance(p.get("level"), str) and p["level"] in LOG_RANK
    ):
        return m.error(
            request_id,
            m.INVALID_PARAMS,
            f"Invalid log level: {str(p.get('level'))[:32]}. Valid: {', '.join(LOG_LEVELS)}",
        )
    return None


def list_changed(kind: str) -> JsonObject:
    return {"jsonrpc": "2.0", "method": f"notifications/{kind}/list_changed"}


def resource_updated(uri: str) -> JsonObject:
    return {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}


def log_message(level: str, data: object, logger: str | None) -> JsonObject:
    params: JsonObject = {"level": level, "data": data}
    if logger is not None:
        params["logger"] = logger
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": params}


def invalid_arguments(request_id: RequestId, tool: str, problem: str) -> JsonObject:
    """R-PROTO-6: arguments that break the input schema, as a tool result a model can read."""
    text = f"Invalid arguments for tool {tool}: {problem}"
    return m.result(request_id, {"isError": True, "content": [{"type": "text", "text": text}]})


def clip(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[:limit] + "…"


# -- what a read may name (R-PROTO-18, R-PROTO-19) ------------------------------------------------

_TEMPLATE_VAR: Final = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@functools.lru_cache(maxsize=1024)
def template_pattern(uri_template: str) -> re.Pattern[str]:
    """A level-1 URI template (``demo://items/{id}``) as a regex: each ``{name}`` is one or more
    characters other than ``/``, ``?`` and ``#``; the rest is literal (R-PROTO-18)."""
    parts, last = [], 0
    for found in _TEMPLATE_VAR.finditer(uri_template):
        parts.append(re.escape(uri_template[last : found.start()]))
        parts.append(f"(?P<{found.group(1)}>[^/?#]+)")
        last = found.end()
    parts.append(re.escape(uri_template[last:]))
    return re.compile("".join(parts))


def template_variables(uri_template: str, uri: str) -> dict[str, str] | None:
    """The percent-decoded variables of ``uri`` when the whole of it matches ``uri_template``,
    else ``None`` (R-PROTO-18)."""
    found = template_pattern(uri_template).fullmatch(uri)
    if found is None:
        return None
    return {name: urllib.parse.unquote(value) for name, value in found.groupdict().items()}


def resource_known(uri: str, resources: Mapping[str, Any], templates: Iterable[str]) -> bool:
    """Whether ``uri`` is a registered resource's or matches a registered template (R-PROTO-18)."""
    if uri in resources:
        return True
    return any(template_pattern(template).fullmatch(uri) is not None for template in templates)


def unknown_resource(uri: str) -> tuple[int, str, JsonObject]:
    """The JSON-RPC error (code, message, data) for a URI nothing registered serves
    (R-PROTO-18)."""
    return m.RESOURCE_NOT_FOUND, "Resource not found", {"uri": clip(uri)}


def prompt_problem(
    definition: object, name: str, arguments: object, *, any_argument: bool
) -> str | None:
    """What makes a ``prompts/get`` of ``name`` with ``arguments`` unanswerable, as the message
    of its ``-32602``, or ``None`` (R-PROTO-19). ``definition`` is the registered prompt's list
    entry (``None``: no such prompt); ``any_argument`` says the prompt takes arguments its
    definition does not declare."""
    if not isinstance(definition, dict):
        return f"Unknown prompt: {clip(name, 64)}"
    given = arguments if isinstance(arguments, dict) else {}
    declared = definition.get("arguments")
    entries = [a for a in declared if isinstance(a, dict)] if isinstance(declared, list) else []
    for entry in entries:
        arg = entry.get("name")
        if entry.get("required") is True and isinstance(arg, str) and arg not in given:
            return f"Missing required argument: {arg}"
    if not any_argument:
        known = {entry.get("name") for entry in entries}
        extra = sorted(arg for arg in given if arg not in known)
        if extra:
            return f"Unknown argument: {clip(extra[0], 64)}"
    return None


# -- what callbacks return, as MCP results (R-PROTO-16, R-PROTO-20, R-PROTO-21) -------------------


def _text_block(text: str) -> JsonObject:
    return {"type": "text", "text": text}


def _compact(value: object) -> str:
    import json  # noqa: PLC0415 (when a tool returns a dict: not at start: docs/performance.md)

    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _is_content_list(value: object) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in value)
    )


def text_result(text: str) -> JsonObject:
    """The ``CallToolResult`` of a tool that returned the string ``text`` (R-PROTO-16)."""
    return {"content": [{"type": "text", "text": text}]}  # _text_block, built in place


def tool_result(value: object) -> JsonObject:
    """A tool's return value as a ``CallToolResult`` object (R-PROTO-16).

    A dict with ``content`` passes through; ``str`` is one text block; any other dict is
    ``structuredContent`` plus its compact JSON as text; a non-empty list of content blocks is
    the content; ``None`` is no content; other JSON values are their JSON as text. Raises
    ``TypeError`` for anything else: it is not a tool result, and the worker fails (R-WORK-3).
    """
    if isinstance(value, dict) and "content" in value:
        return value
    if isinstance(value, str):
        return text_result(value)
    if isinstance(value, dict):
        return {"content": [_text_block(_compact(value))], "structuredContent": value}
    if _is_content_list(value):
        return {"content": value}
    if value is None:
        return {"content": []}
    if isinstance(value, bool | int | float | list | tuple):
        import json  # noqa: PLC0415 (as in _compact)

        return {"content": [_text_block(json.dumps(value, ensure_ascii=False))]}
    raise TypeError(f"a tool returned a {type(value).__name__}, which is not a tool result")


def output_error(problem: str) -> JsonObject:
    """The ``isError`` result that replaces a tool result breaking its output schema
    (R-PROTO-17)."""
    return {"isError": True, "content": [_text_block(f"Output validation error: {problem}")]}


def checked_output(tool: ToolInfo, result: JsonObject) -> JsonObject:
    """``result``, or the error result saying how it breaks ``tool``'s output schema
    (R-PROTO-17)."""
    problem = output_problem(tool, result)
    return result if problem is None else output_error(problem)


def resource_result(uri: str, mime_type: str | None, value: object) -> JsonObject:
    """A resource callback's return value as a ``ReadResourceResult`` for ``uri`` (R-PROTO-20).

    A dict with ``contents`` passes through; a list of dicts is the contents; a string is one
    text item, bytes one base64 blob, any other dict one item of its compact JSON, each with the
    declared MIME type or ``text/plain``, ``application/octet-stream``, ``application/json``.
    Raises ``TypeError`` for anything else (the worker fails, R-WORK-3).
    """
    if isinstance(value, dict) and "contents" in value:
        return value
    if isinstance(value, list) and all(isinstance(item, dict) for item in value):
        return {"contents": value}
    item: JsonObject = {"uri": uri}
    if isinstance(value, str):
        item["text"] = value
        item["mimeType"] = mime_type or "text/plain"
    elif isinstance(value, bytes | bytearray):
        item["blob"] = base64.b64encode(bytes(value)).decode("ascii")
        item["mimeType"] = mime_type or "application/octet-stream"
    elif isinstance(value, dict):
        item["text"] = _compact(value)
        item["mimeType"] = mime_type or "application/json"
    else:
        raise TypeError(f"a resource returned a {type(value).__name__}, which is not contents")
    return {"contents": [item]}


def prompt_result(value: object, description: object) -> JsonObject:
    """A prompt callback's return value as a ``GetPromptResult`` (R-PROTO-20).

    A dict with ``messages`` passes through; a string is one user message; in a list, each
    string is a user message and anything else a message as it is. The prompt's
    ``description``, when it has one, comes first unless the result has its own. Raises
    ``TypeError`` for anything else (the worker fails, R-WORK-3).
    """
    result: JsonObject
    if isinstance(value, dict) and "messages" in value:
        result = value
    elif isinstance(value, str):
        result = {"messages": [{"role": "user", "content": _text_block(value)}]}
    elif isinstance(value, list):
        messages = [
            {"role": "user", "content": _text_block(v)} if isinstance(v, str) else v for v in value
        ]
        result = {"messages": messages}
    else:
        raise TypeError(f"a prompt returned a {type(value).__name__}, which is not messages")
    if description and "description" not in result:
        result = {"description": description, **result}
    return result


def no_completion() -> JsonObject:
    """The ``completion/complete`` answer of a server with no completion callback
    (R-PROTO-21)."""
    return {"completion": {"values": [], "hasMore": False}}


def completion_result(value: object) -> JsonObject:
    """A completion callback's return value as a ``CompleteResult`` (R-PROTO-21).

    A dict with ``completion`` passes through; a list or tuple gives its values as strings, the
    first :data:`COMPLETION_LIMIT` of them, with ``total`` and ``hasMore``. Raises ``TypeError``
    for anything else (the worker fails, R-WORK-3).
    """
    if isinstance(value, dict) and "completion" in value:
        return value
    if isinstance(value, list | tuple):
        values = [str(v) for v in value]
        return {
            "completion": {
                "values": values[:COMPLETION_LIMIT],
                "total": len(values),
                "hasMore": len(values) > COMPLETION_LIMIT,
            }
        }
    raise TypeError(f"a completion returned a {type(value).__name__}, not a list of values")
