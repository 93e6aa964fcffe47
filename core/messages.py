"""The JSON-RPC messages the reducer answers with, as plain dicts (wire-shapes.md).

Built once, complete, in the core so that every deny, busy and failure answer has exactly one
shape. The shell only encodes them. Treat every returned dict as read-only.
"""

from __future__ import annotations

import functools
from typing import Any, Final

import rapidjson

JsonObject = dict[str, Any]
RequestId = str | int

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
INITIALIZE_FIRST: Final = "Invalid Request: initialize first"
"""The message of a call or read before ``initialize`` over stdio (R-PROTO-22)."""
ALREADY_INITIALIZED: Final = "Invalid Request: the session is already initialized"
"""The message of an ``initialize`` on a connection that negotiated a version (R-PROTO-23)."""
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
RESOURCE_NOT_FOUND: Final = -32002
AUTHORIZATION_DENIED: Final = -32090

# The `detail` of an authorization_required deny, one per closing path (R-CLOSE-2).
AUTHORIZER_FAILED: Final = "authorizer failed"
SENSITIVE_UNGUARDED: Final = "sensitive tool unguarded"
TOO_MANY_PENDING: Final = "too many elicitations pending"
TOO_MANY_ON_SERVER: Final = "too many elicitations pending on this server"
EVICTED: Final = "evicted to make room on this server"
DECLINED: Final = "declined"
CANCELLED: Final = "cancelled"
NOT_APPROVED: Final = "not approved"
ELICITATION_FAILED: Final = "elicitation failed"
TIMED_OUT: Final = "elicitation timed out"
READ_ASK: Final = "interactive approval unsupported"
ALREADY_USED: Final = "request state already used"
STOPPING: Final = "server stopping"

# What a deny's `message` says after "<tool> was not run: " (R-DLV-4), by the deny's path.
WHY: Final[dict[str, str]] = {
    SENSITIVE_UNGUARDED: "it is marked sensitive and the server has no policy to allow it",
    AUTHORIZER_FAILED: "the server's policy failed to decide on it",
    TOO_MANY_PENDING: "this connection already has too many approvals pending",
    TOO_MANY_ON_SERVER: "too many approvals are pending on this server",
    EVICTED: "it was evicted to make room on this server while it waited for approval",
    DECLINED: "the approval was declined",
    CANCELLED: "the approval was cancelled",
    NOT_APPROVED: "the answer did not approve it",
    ELICITATION_FAILED: "the client answered the approval request with an error",
    # A modern retry's request state (R-MRTR-8, R-MRTR-14).
    "request state malformed": "its request state is not one this server issued",
    "request state key unknown": "its request state's key is not one this server has",
    "request state tampered": "its request state was altered",
    "request state of another principal": "its request state was issued to someone else",
    "request state of another tool": "its request state was issued for another tool",
    "arguments changed": "its arguments are not the ones the approval was asked for",
    "request state expired": "its request state expired",
    ALREADY_USED: "its approval was already answered",
    TIMED_OUT: "no one approved it in time",
    STOPPING: "the server is stopping",
}
CANNOT_ASK: Final = "it needs approval and this client cannot be asked"
# R-PARK-6: the per-owner deny (TOO_MANY_PENDING) names whose cap is full, by the owner's scope
# (R-PARK-5); the busy answer of a full share names the same scope (R-ADM-6).
OWNER_FULL: Final[dict[str, str]] = {
    "connection": WHY[TOO_MANY_PENDING],
    "principal": "this principal already has too many approvals pending",
    "anonymous": "requests without credentials already have too many approvals pending",
}
# The `detail` of a call_ended record for a deny-on-ASK, whose wire detail is the prompt (R-LOG-2).
CANNOT_ASK_DETAIL: Final = "client cannot be asked"

ELICITATION_ID_PREFIX: Final = "askgate-elicit-"
CLIENT_REQUEST_ID_PREFIX: Final = "askgate-request-"
REQUEST_TIMED_OUT: Final = "timed out"
REQUEST_CANCELLED: Final = "request cancelled"


def _text(payload: JsonObject) -> str:
    """The compact JSON text of a payload the reducer built (strings and nothing else)."""
    return rapidjson.dumps(payload, ensure_ascii=False)


def result(request_id: RequestId | None, value: object) -> JsonObject:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(request_id: RequestId | None, code: int, message: str, data: object = None) -> JsonObject:
    err: JsonObject = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": err}


def tool_error_result(payload: JsonObject, text: str | None = None) -> JsonObject:
    """An ``isError`` tool result carrying ``payload`` as text (``text``, when the caller has
    it already) and as structured content."""
    return {
        "isError": True,
        "content": [{"type": "text", "text": _text(payload) if text is None else text}],
        "structuredContent": payload,
    }


def policy_denies(reason: str) -> str:
    """The ``why`` of an authorizer's ``Deny`` (R-DLV-4)."""
    return f"the server's policy denies it ({reason})"


def duration_text(ms: int) -> str:
    """``60 s`` for a whole number of seconds, else ``1500 ms``."""
    return f"{ms // 1000} s" if ms % 1000 == 0 else f"{ms} ms"


def nobody_approved(timeout_ms: int) -> str:
    """The ``why`` of an elicitation that timed out (R-DLV-4)."""
    return f"no one approved it within {duration_text(timeout_ms)}"


def authorization_required(
    request_id: RequestId, tool: str, decision: str, detail: str, why: str
) -> JsonObject:
    """The one deny shape for ``tools/call`` (R-DLV-4): a tool result, not a JSON-RPC error.
    ``why`` completes the sentence ``<tool> was not run: <why>``."""
    message = f"{tool} was not run: {why}"
    payload = _deny_payload(tool, decision, detail, message)
    # A canned deny (a registered tool's name and askgate's words) comes from the cache; an
    # authorizer's reason or an Ask prompt, which may quote the arguments, is kept by no one.
    canned = WHY.get(detail) == why or (detail == TOO_MANY_PENDING and why in _OWNER_FULL_WHYS)
    text = _deny_text(tool, decision, detail, message) if canned else _text(payload)
    return result(request_id, tool_error_result(payload, text))


_OWNER_FULL_WHYS: Final = frozenset(OWNER_FULL.values())


def _deny_payload(tool: str, decision: str, detail: str, message: str) -> JsonObject:
    return {
        "error": "authorization_required",
        "tool": tool,
        "decision": decision,
        "detail": detail,
        "message": message,
    }


@functools.lru_cache(maxsize=256)
def _deny_text(tool: str, decision: str, detail: str, message: str) -> str:
    """The text of a canned deny's payload, by what it holds: the same few denies recur (a tool
    and a path), and encoding the payload costs several times a cached lookup. Only denies whose
    detail and sentence are askgate's own (``WHY``) come here: an authorizer's reason or an Ask
    prompt may quote a client's arguments (up to the line limit), and a cache would keep them
    for the life of the process."""
    return _text(_deny_payload(tool, decision, detail, message))


def read_denied(request_id: RequestId, method: str, detail: str) -> JsonObject:
    """The deny of a read surface (R-READ-2): a JSON-RPC error that never echoes a prompt."""
    return error(
        request_id,
        AUTHORIZATION_DENIED,
        f"authorization_required: {method}",
        {"error": "authorization_required", "method": method, "detail": detail},
    )


def tool_failure(request_id: RequestId, kind: str, **extra: str) -> JsonObject:
    """``server_busy``, ``callback_timeout`` or ``callback_failed`` on ``tools/call``."""
    return result(request_id, tool_error_result({"error": kind, **extra}))


def method_failure(request_id: RequestId, method: str, kind: str) -> JsonObject:
    """``server_busy``, ``callback_timeout`` or ``callback_failed`` on any other method."""
    return error(
        request_id, INTERNAL_ERROR, "MCP callback failed", {"error": kind, "method": method}
    )


LISTEN_FULL: Final[dict[str, str]] = {
    "server": "Too many open listens on this server",
    "owner": "Too many open listens for this client",
    "connection": "Too many open listens on this connection",
}
"""What a refused ``subscriptions/listen`` says, by the bound it met (R-MRTR-25)."""


def listen_busy(request_id: RequestId, scope: str) -> JsonObject:
    """R-MRTR-25: a ``subscriptions/listen`` past a bound: R-ADM-5's ``server_busy`` failure,
    naming the bound's ``scope`` (``server``, ``owner`` or ``connection``)."""
    data = {"error": "server_busy", "method": "subscriptions/listen", "scope": scope}
    return error(request_id, INTERNAL_ERROR, LISTEN_FULL[scope], data)


def unknown_tool(request_id: RequestId, tool: str) -> JsonObject:
    return error(request_id, METHOD_NOT_FOUND, f"Tool not found: {tool}")


def unknown_tool_text(request_id: RequestId, text: str) -> JsonObject:
    return result(request_id, {"isError": True, "content": [{"type": "text", "text": text}]})


def duplicate_id(request_id: RequestId) -> JsonObject:
    return error(request_id, INVALID_REQUEST, "Request id already in flight on this connection")


def invalid_id() -> JsonObject:
    return error(None, INVALID_REQUEST, "Invalid request id: must be a string or an integer")


def elicitation_request(elicitation_id: str, tool: str, prompt: str) -> JsonObject:
    """The ``elicitation/create`` request that asks the owner to approve a parked call."""
    return {
        "jsonrpc": "2.0",
        "id": elicitation_id,
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": prompt,
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "approve": {
                        "type": "boolean",
                        "title": "Approve",
                        "description": f"Approve running the {tool} tool",
                    }
                },
                "required": ["approve"],
            },
        },
    }


def elicitation_cancelled(elicitation_id: str, reason: str) -> JsonObject:
    """Tells the owner to dismiss a prompt that no longer matters (R-CLOSE-4)."""
    return {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": elicitation_id, "reason": reason},
    }


def client_request(request_id: str, method: str, params: JsonObject) -> JsonObject:
    """A running tool's own request to its client (R-CTX-4)."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def progress(token: RequestId, value: float, total: object, message: object) -> JsonObject:
    """``notifications/progress`` for the token the caller chose (R-CTX-2)."""
    params: JsonObject = {"progressToken": token, "progress": value}
    if total is not None:
        params["total"] = total
    if message is not None:
        params["message"] = message
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}
