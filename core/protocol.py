"""MCP protocol values the reducer answers with: versions, capabilities, pages, params checks.

Pure functions of plain values; the dispatch that uses them is in :mod:`.reducer`
(spec/protocol.md).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any, Final

from . import messages as m
from .messages import JsonObject, RequestId
from .options import Options

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


def initialize_result(options: Options, version: str) -> JsonObject:
    result: JsonObject = {
        "protocolVersion": version,
        "capabilities": server_capabilities(),
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
