"""A reference model of spec/rules.md, written to be obviously right rather than fast.

:class:`ReferenceModel` keeps plain records in plain lists and dicts and answers every question
by a linear scan: the open calls are one list in admission order, an owner's parked calls are
the calls of that list that are parked under it (sorted by when they parked; R-PARK-1: the owner
is the principal its connection's subscriber attached with, else the connection), the
capability entries are one list. Nothing is shared with :mod:`askgate.core` but the event,
effect and decision classes and :class:`~askgate.core.Options`; the wire messages are written
out here from the spec and ``wire-shapes.md``, so comparing effects also checks the shapes.

The model covers the events of spec/rules.md, plus R-PROTO-14 (a read's ``Failure`` value) and
R-PROTO-8 (``tools/list``: every tool without a visibility hook, else what the hook's verdicts
say, with a ``tool_hidden`` telemetry event for each verdict that is neither ``True`` nor
``False``; the first page only, with minimal entries: a listing longer than ``page_size`` and
tool definitions are not modelled); the rest of the protocol layer of spec/protocol.md
(``MessageReceived``, ``ResourceUpdated``, ``LogEmitted``, ``CatalogChanged``, the other
built-in list methods, cursors) is not modelled.

Of the 2026-07-28 revision (spec/modern.md) it models the stateless ``tools/call``: R-MRTR-9 (a
request with modern ``_meta`` on a connection that has not initialized is served statelessly,
its answers rendered as R-MRTR-11 says), R-MRTR-10 (refused ``_meta``), R-MRTR-12 (an ASK
answered at once with the input-required result; its nonce holds a parking place of its owner,
the principal or else the connection, under the same caps, eviction and timer as a parked call),
R-MRTR-13 (the retry), R-MRTR-14 (the record of closed nonces), R-MRTR-15 (silent timeouts and
evictions), R-MRTR-16, R-MRTR-17 (a running tool of a stateless call cannot ask its client) and
R-MRTR-18's refusal of a ``logLevel`` that is not a level name. It seals and opens states with
:mod:`askgate.core.sealing` under a keyring of its own (the key id the reducer's derived key
has, another secret), as a trusted primitive tested apart (R-MRTR-1 .. 8); the nonces, owners,
caps, single use and the record are its own. Its nonces are ``model-mrtr-N``, from the counter
of its elicitation ids. The record of closed nonces is read as forgetting from its oldest end:
the oldest is forgotten while more than ``max_parked_elicitations_total`` are kept or while it
has expired. Modern reads are modelled too (``resources/read``, ``prompts/get``, ``tools/list``
and the 2025-only methods, R-MRTR-9): the era and ``_meta`` checks, the answer rendered complete
(with ``ttlMs``/``cacheScope`` for a cacheable method, R-MRTR-11), the request's own principal
as the owner, and a read callback's round (R-MRTR-24: parked as a tool's, ``server_busy`` when
the parking caps are full); a read round's retry is not. Other modern methods
(``server/discover``, ``subscriptions/listen``) and a modern request's logs are not modelled.

Of tasks (spec/tasks.md) it models what the reducer implements today (the 2026-07-28 era):
R-TASK-1's support (given with the tools, as ``(name, sensitive, support)``), R-TASK-2's mode
and R-TASK-3's refusal, R-TASK-4's inline window (a timer ``("task", (key, n))``, ``n`` the
model's own count) ending in a task when it fires or when the call's tool asks its client,
``CreateTaskResult``, R-TASK-5 (the call moved onto a channel of its own, ``ModelChannel``, its
answer the task's outcome), R-TASK-6's caps, ``tasks/get``, ``tasks/update`` and
``tasks/cancel`` with the owner rule (R-TASK-7, R-TASK-8, R-TASK-10), an ASK or a tool's request
inside a task as the task's inputs, and R-TASK-9's ttl. What a task's call would send its
request is taken out of the step's effects and changes the task instead, as spec/tasks.md says
of a task's channel. Its task ids are ``model-task-N``; times are ISO 8601 from an epoch of 0
(the machine's reducer state has ``epoch_ms`` 0). Not modelled: a tool's own rounds inside a
task and the 2025-11-25 era of tasks (both pending in spec/tasks.md).

Of a running tool's context it models its own requests to the client: R-CTX-1 (only a running
tool), R-CTX-4 (the refusals, in the spec's order, with the spec's ``Failure`` values; the
per-call cap; the request pushed to the owner with its timer), R-CTX-5 (answers only from the
owner), R-CTX-6 (the timeout, and the withdrawal on every way a worker ends) and R-CAP-4's
sampling flag. It keeps them as one list of outstanding requests, oldest first; a worker's
requests are the entries naming its ref. Progress and logs (R-CTX-2, R-CTX-3) are left out:
whether they reach the wire depends on a progress token in ``tools/call``'s ``_meta`` and on
``logging/setLevel``, protocol state the model does not keep, so ``ToolProgressed`` and
``ToolLogged`` are not events it takes.

``apply(event)`` returns the effects the spec requires, in the order the reducer emits them (the
spec fixes the order only where it matters: an eviction before the park it makes room for). A
``Push`` about a call names its request id in ``related`` (R-DLV-1); ``Push`` compares without
``related``, so a checker compares it apart.

Identifiers
-----------
The model mints its own elicitation ids (``model-elicit-0``, ``model-elicit-1``, ...) and worker
refs (``1``, ``2``, ...). They are *not* the reducer's: a checker compares effects modulo a
bijection between the reducer's ids and the model's, established in order of first appearance
(see :mod:`askgate.models.machine`), and translates ids back when it feeds events to the model.
That keeps the model independent of how R-ID-1 derives an id; the machine checks the id's
format and that no id is ever reused (a reused id cannot be bound to a second model id).
A tool's own requests get ids of their own kind (``model-request-0``, ...: R-CTX-4's
``askgate-request-`` ids); the model counts them apart from elicitation ids, since what the
spec fixes (both kinds drawn from one counter, so no suffix repeats) is the machine's to check.

Readings of the spec
--------------------
* R-PARK-4's "changed least recently" is a tick per change of a count, so counts changed in one
  step are ordered by the order of the operations in it (a caller's calls are dropped in
  admission order, an eviction comes before the park it makes room for).
* R-READ-2's "off-contract read authorizer" is read as R-AUTH-4 defines off-contract: ``Ask``
  or ``Deny`` whose text is not a string answers ``authorizer failed``. The reducer answers an
  ``Ask`` with no string prompt ``interactive approval unsupported`` (a strict xfail in
  tests/test_model.py pins the difference until the spec settles it).
* When an approval finds its tool unregistered *and* the bounds full, R-TOOL-2 answers first
  (``-32601``), as the reducer does; the spec names both and orders neither.
* R-CTX-4's ``elicitation/create`` is sent with exactly ``mode: "form"``, ``message`` and
  ``requestedSchema`` (anything else the tool put in its params, such as a ``mode`` of its own,
  is not sent: we only ask with forms, R-CAP-4); ``sampling/createMessage`` with the params as
  the tool gave them. The model keeps no negotiated revision, so it always adds the ``mode``
  (the machine never negotiates one; the reducer adds it when none was).
* R-CTX-5's "the client's code when it is an integer" excludes booleans, as R-ADM-0 does; an
  ``error`` that is not an object has no code, message or data.
* R-TASK-4's window closes when its call is answered inline, and also when the call is dropped
  inside it (the call is gone); the reducer leaves the window's timer armed then (a strict xfail
  in tests/test_tasks.py), and the machine does not draw such a drop. A request that reuses the
  id of a call in its window is refused (R-ADM-1) and leaves the window open; the reducer closes
  it (a strict xfail in tests/test_model.py), and the machine draws no such reuse. When the
  window's timer fires the reducer also cancels it, a no-op the machine leaves out.
* R-TASK-5's ``failed`` error for askgate's own failure is ``-32603`` with the failure as its
  ``data``; its ``message`` is not normative.
* R-CTX-6's withdrawal happens where the worker ends: after its ``KillWorker`` or
  ``CancelTimer`` and before the call's outcome (or its empty reply, for a drop), requests
  oldest first, each its ``CancelTimer`` then its ``notifications/cancelled``.

Text the spec does not fix
--------------------------
The JSON-RPC error ``message`` of ``-32600``, ``-32601`` and ``-32603``, the ``message`` of the
``Failure`` values handed to a tool (R-CTX-4 .. R-CTX-6; their code and ``data.error`` are
normative) and the ``reason`` of a ``notifications/cancelled`` (but R-CTX-6's ``timed out`` and
``request cancelled``) are not normative; they are written here as the reducer writes them
today, so a difference there is a wording change, not a broken rule. The ``size`` field of the
``client_capabilities_evicted`` telemetry is taken as the number of entries after the eviction.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from askgate.core.decisions import Allow, Ask, Deny, Failure, NeedsInput, Raised
from askgate.core.effects import (
    CancelTimer,
    Effect,
    Emit,
    KillWorker,
    Push,
    Reply,
    Resolve,
    StartTimer,
    StartWorker,
)
from askgate.core.events import (
    CallerExited,
    CancelRequested,
    ClientInitialized,
    ClientReady,
    ElicitationAnswered,
    Event,
    PingReceived,
    ReadRequested,
    ServerStopping,
    SubscriberAttached,
    SubscriberDetached,
    TimerFired,
    ToolCallReceived,
    ToolRegistered,
    ToolRequested,
    ToolUnregistered,
    WorkerFailed,
    WorkerFinished,
)
from askgate.core.jobs import (
    Authorize,
    AuthorizeRead,
    FilterTools,
    Job,
    Round,
    RunRead,
    RunTool,
    UnknownToolReply,
)
from askgate.core.options import Options
from askgate.core.sealing import (
    DENY_DETAIL,
    ROUND_VERSION,
    Key,
    Keyring,
    arguments_digest,
    open_round,
    open_sealed,
    seal,
    seal_round,
    state_bytes,
    state_value,
    token_version,
)

JsonObject = dict[str, Any]
CallKey = tuple[Hashable, Hashable]

NOT_MODELLED = frozenset({"R-AUTH-5", "R-CTX-2", "R-CTX-3", "R-DLV-5", "R-OPT-1", "R-OPT-2"})
"""The rules of spec/rules.md this model does not implement: progress and logs (see above), option
validation (it is given valid :class:`Options`), the shell's copy of what an authorizer is given
(R-AUTH-5: the model runs no callbacks) and the arguments' digest a prompt shows (R-DLV-5: the
machines' states have no digest key, so prompts show none). ``make spec`` credits the model-based
machines with every other rule of spec/rules.md in spec/traceability.md."""

# Stages of an open call; every one but PARKED holds one worker.
AUTHORIZING = "authorizing"
RUNNING = "running"
PARKED = "parked"
UNKNOWN_REPLY = "unknown_reply"
READ_AUTHORIZING = "read_authorizing"
READ_RUNNING = "read_running"

# The deny details of spec/rules.md (R-ADM-3, R-AUTH-4, R-PARK-1, R-PARK-3, R-CLOSE-2, R-READ-2).
SENSITIVE_UNGUARDED = "sensitive tool unguarded"
AUTHORIZER_FAILED = "authorizer failed"
TOO_MANY_PENDING = "too many elicitations pending"
TOO_MANY_ON_SERVER = "too many elicitations pending on this server"
EVICTED = "evicted to make room on this server"
DECLINED = "declined"
CANCELLED = "cancelled"
NOT_APPROVED = "not approved"
ELICITATION_FAILED = "elicitation failed"
TIMED_OUT = "elicitation timed out"
READ_ASK = "interactive approval unsupported"
STOPPING = "server stopping"

# R-DLV-4: what a deny's message says after "<tool> was not run: ".
WHY = {
    SENSITIVE_UNGUARDED: "it is marked sensitive and the server has no policy to allow it",
    AUTHORIZER_FAILED: "the server's policy failed to decide on it",
    TOO_MANY_PENDING: "this connection already has too many approvals pending",
    TOO_MANY_ON_SERVER: "too many approvals are pending on this server",
    EVICTED: "it was evicted to make room on this server while it waited for approval",
    DECLINED: "the approval was declined",
    CANCELLED: "the approval was cancelled",
    NOT_APPROVED: "the answer did not approve it",
    ELICITATION_FAILED: "the client answered the approval request with an error",
    STOPPING: "the server is stopping",
    # R-MRTR-8, R-MRTR-14 (not normative: as the reducer writes them today)
    "request state malformed": "its request state is not one this server issued",
    "request state key unknown": "its request state's key is not one this server has",
    "request state tampered": "its request state was altered",
    "request state of another principal": "its request state was issued to someone else",
    "request state of another tool": "its request state was issued for another tool",
    "arguments changed": "its arguments are not the ones the approval was asked for",
    "request state expired": "its request state expired",
    "request state already used": "its approval was already answered",
}
CANNOT_ASK = "it needs approval and this client cannot be asked"


def policy_denies(reason: str) -> str:
    return f"the server's policy denies it ({reason})"


def nobody_approved(timeout_ms: int) -> str:
    """R-DLV-4: whole seconds as ``N s``, anything else as ``N ms``."""
    shown = f"{timeout_ms // 1000} s" if timeout_ms % 1000 == 0 else f"{timeout_ms} ms"
    return f"no one approved it within {shown}"


# R-LOG-2: the details of a record that are not a deny's.
CANNOT_ASK_DETAIL = "client cannot be asked"
DROPPED_CANCELLED = "cancelled"
DROPPED_CALLER_GONE = "caller gone"
DROPPED_CONNECTION_GONE = "connection gone"

# Not normative (see the module docstring).
REQUEST_CANCELLED_REASON = "request cancelled"
INVALID_ID_MESSAGE = "Invalid request id: must be a string or an integer"
DUPLICATE_ID_MESSAGE = "Request id already in flight on this connection"
ALREADY_INITIALIZED_MESSAGE = "Invalid Request: the session is already initialized"
BAD_TOOLS_CALL_MESSAGE = "tools/call requires a string name and an object of arguments"
CALLBACK_FAILED_MESSAGE = "MCP callback failed"

MODEL_ELICITATION_PREFIX = "model-elicit-"
MODEL_NONCE_PREFIX = "model-mrtr-"

# The 2026-07-28 revision (spec/modern.md): the per-request ``_meta`` keys, the version served
# statelessly, every version spoken (modern first), the one input key, the retry's extra deny.
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
LOG_LEVEL_NAMES = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
MODERN_VERSION = "2026-07-28"
APPROVAL_KEY = "approval"
ALREADY_USED = "request state already used"
MODEL_KEY_ID = "k0"  # the reducer's key id when the state derives its key (R-MRTR-12)
MODEL_SECRET = b"askgate-reference-model-sealing-secret!!"
MODEL_REQUEST_PREFIX = "model-request-"

# A running tool's own requests (R-CTX-4 .. R-CTX-6): the methods, the timer kind, the reasons
# of the failures handed to the tool (``data.error``), and the reasons of the withdrawals.
ELICIT = "elicitation/create"
SAMPLE = "sampling/createMessage"
CLIENT_REQUEST_TIMER = "client_request"
NOT_RUNNING = "not_running"
STATELESS_REQUEST = "stateless_request"
INVALID_REQUEST = "invalid_request"
CLIENT_CANNOT_ELICIT = "client_cannot_elicit"
CLIENT_CANNOT_SAMPLE = "client_cannot_sample"
TOO_MANY_REQUESTS = "too_many_requests"
REQUEST_TIMED_OUT = "timed_out"
INVALID_ANSWER = "invalid_answer"
WITHDRAWN_TIMED_OUT = "timed out"
WITHDRAWN_CANCELLED = "request cancelled"

# Not normative (see the module docstring): the message of each failure handed to a tool.
FAILURE_MESSAGES = {
    NOT_RUNNING: "only a running tool can send requests",
    STATELESS_REQUEST: "a tool serving a 2026-07-28 request cannot send requests to its client: "
    "it ends a round instead (raise InputRequired)",
    INVALID_REQUEST: (
        "elicitation/create needs a string message and an object requestedSchema; "
        "sampling/createMessage needs an array of messages and an integer maxTokens"
    ),
    CLIENT_CANNOT_ELICIT: "the client cannot be asked (elicitation)",
    CLIENT_CANNOT_SAMPLE: "the client did not offer sampling",
    TOO_MANY_REQUESTS: "too many requests to the client outstanding",
    REQUEST_TIMED_OUT: "the client did not answer in time",
    INVALID_ANSWER: "the client's answer is not an object",
}
CLIENT_ERROR_MESSAGE = "the client answered with an error"


# ---------------------------------------------------------------------------------------------
# The wire messages, written out from spec/rules.md and wire-shapes.md


def _result(request_id: object, value: object) -> JsonObject:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def _error(request_id: object, code: int, message: str, data: object = None) -> JsonObject:
    err: JsonObject = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": err}


def _is_error_tool_result(payload: JsonObject) -> JsonObject:
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return {
        "isError": True,
        "content": [{"type": "text", "text": text}],
        "structuredContent": payload,
    }


# R-PARK-6: the per-owner deny names the owner's scope (R-PARK-5, R-PARK-7).
OWNER_FULL = {
    "connection": "this connection already has too many approvals pending",
    "principal": "this principal already has too many approvals pending",
    "anonymous": "requests without credentials already have too many approvals pending",
}
ANONYMOUS = ("anonymous",)  # R-PARK-7: every per-request connection without a principal


def deny_message(
    request_id: object, tool: str, decision: str, detail: str, why: str | None = None
) -> JsonObject:
    """The deny of a ``tools/call`` (R-DLV-4): an ``isError`` tool result whose message says
    why (by default the sentence of ``detail``)."""
    payload = {
        "error": "authorization_required",
        "tool": tool,
        "decision": decision,
        "detail": detail,
        "message": f"{tool} was not run: {WHY[detail] if why is None else why}",
    }
    return _result(request_id, _is_error_tool_result(payload))


def call_ended(
    call: ModelCall,
    now: int,
    outcome: str,
    detail: str | None = None,
    *,
    decision: str | None = None,
    evicted_by: Hashable | None = None,
) -> Emit:
    """R-LOG-2: the record of a ``tools/call``'s end; ``decision`` defaults to the call's."""
    decided = call.decision if decision is None else decision
    approved: bool | None = None
    if decided == "approved":
        decided, approved = "ask", True
    elif decided == "ask":
        approved = False
    fields = {
        "conn": call.conn,
        "request_id": call.request_id,
        "tool": call.name,
        "decision": decided or None,
        "approved": approved,
        "outcome": outcome,
        "detail": detail,
        "elicitation_id": call.approval,
        "evicted_by": evicted_by,
        "started_ms": call.started,
        "duration_ms": now - call.started,
    }
    return Emit("call_ended", fields)


def read_denied_message(request_id: object, method: str, detail: str) -> JsonObject:
    """The deny of a read (R-READ-2): JSON-RPC error -32090."""
    data = {"error": "authorization_required", "method": method, "detail": detail}
    return _error(request_id, -32090, f"authorization_required: {method}", data)


def tool_failure_message(request_id: object, kind: str, scope: str | None = None) -> JsonObject:
    """``server_busy`` (with its scope), ``callback_timeout``, ``callback_failed`` on a tool."""
    payload: JsonObject = {"error": kind}
    if scope is not None:
        payload["scope"] = scope
    return _result(request_id, _is_error_tool_result(payload))


def method_failure_message(request_id: object, method: str, kind: str) -> JsonObject:
    """The same three failures on any other method: -32603 with ``data.error``."""
    data = {"error": kind, "method": method}
    return _error(request_id, -32603, CALLBACK_FAILED_MESSAGE, data)


def unknown_tool_message(request_id: object, tool: str) -> JsonObject:
    return _error(request_id, -32601, f"Tool not found: {tool}")


def unknown_tool_text_message(request_id: object, text: str) -> JsonObject:
    return _result(request_id, {"isError": True, "content": [{"type": "text", "text": text}]})


def elicitation_create_message(
    elicitation_id: str, tool: str, prompt: str, with_mode: bool = True
) -> JsonObject:
    """The prompt of a park (R-PARK-2, R-REV-2): one required boolean ``approve``; form mode
    named when ``with_mode``."""
    approve = {
        "type": "boolean",
        "title": "Approve",
        "description": f"Approve running the {tool} tool",
    }
    params: JsonObject = {
        "message": prompt,
        "requestedSchema": {
            "type": "object",
            "properties": {"approve": approve},
            "required": ["approve"],
        },
    }
    if with_mode:
        params = {"mode": "form", **params}
    return {
        "jsonrpc": "2.0",
        "id": elicitation_id,
        "method": "elicitation/create",
        "params": params,
    }


def elicitation_cancelled_message(elicitation_id: str, reason: str) -> JsonObject:
    """Withdraws a prompt that no longer matters (R-CLOSE-4)."""
    return {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": elicitation_id, "reason": reason},
    }


def client_request_message(request_id: str, method: str, params: JsonObject) -> JsonObject:
    """A running tool's own request, pushed to its call's owner (R-CTX-4)."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def context_failure(reason: str) -> Failure:
    """A failure handed to a tool (R-CTX): ``-32602`` for ``invalid_request``, else ``-32603``."""
    code = -32602 if reason == INVALID_REQUEST else -32603
    return Failure(code, FAILURE_MESSAGES[reason], {"error": reason})


# ---------------------------------------------------------------------------------------------
# Small predicates, each one sentence of the spec


def is_request_id(value: object) -> bool:
    """R-ADM-0: a string, or an integer that is not a bool."""
    if isinstance(value, bool):
        return False
    return isinstance(value, str | int)


def advertises_form_elicitation(capabilities: object) -> bool:
    """R-CAP-4: ``capabilities.elicitation`` is an object that is empty or has a ``form`` object."""
    if not isinstance(capabilities, dict):
        return False
    elicitation = capabilities.get("elicitation")
    if not isinstance(elicitation, dict):
        return False
    if len(elicitation) == 0:
        return True
    return isinstance(elicitation.get("form"), dict)


def advertises_sampling(capabilities: object) -> bool:
    """R-CTX-4: ``capabilities.sampling`` is an object."""
    return isinstance(capabilities, dict) and isinstance(capabilities.get("sampling"), dict)


def is_integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def request_params(method: object, params: object, with_mode: bool = True) -> JsonObject | None:
    """R-CTX-4, R-REV-4: the params sent for a tool's request, or ``None`` when it is
    malformed; an elicitation names form mode when ``with_mode``."""
    if method == ELICIT:
        if not isinstance(params, dict):
            return None
        if not isinstance(params.get("message"), str):
            return None
        if not isinstance(params.get("requestedSchema"), dict):
            return None
        sent = {"message": params["message"], "requestedSchema": params["requestedSchema"]}
        return {"mode": "form", **sent} if with_mode else sent
    if method == SAMPLE:
        if not isinstance(params, dict):
            return None
        if not isinstance(params.get("messages"), list):
            return None
        if not is_integer(params.get("maxTokens")):
            return None
        return dict(params)
    return None


VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
"""R-PROTO-3: the versions a client may negotiate, the latest first."""


def initialize_result_message(request_id: object, version: str, options: Options) -> JsonObject:
    """R-PROTO-3: the answer to ``initialize``."""
    result: JsonObject = {
        "protocolVersion": version,
        "capabilities": {
            "tools": {"listChanged": True},
            "resources": {"subscribe": True, "listChanged": True},
            "prompts": {"listChanged": True},
            "logging": {},
            "completions": {},
        },
        "serverInfo": {"name": options.server_name, "version": options.server_version},
    }
    if version == "2025-11-25":  # R-TASK-12: the revision with tasks declares them
        tasks: JsonObject = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
        result["capabilities"]["tasks"] = tasks
    if options.instructions is not None:
        result["instructions"] = options.instructions
    return _result(request_id, result)


def modern_complete(
    message: JsonObject, server_info: JsonObject, cacheable: bool = False
) -> JsonObject:
    """R-MRTR-11: a modern request's final result says ``resultType: "complete"`` and carries
    the server's info in its ``_meta``; a cacheable method's (a listing, ``resources/read``)
    also ``ttlMs: 0`` and ``cacheScope: "private"``; an error is unchanged."""
    result = message.get("result")
    if not isinstance(result, dict) or "resultType" in result:
        return message
    meta = result.get("_meta")
    shown = {**result, "resultType": "complete"}
    shown["_meta"] = {**(meta if isinstance(meta, dict) else {}), META_SERVER_INFO: server_info}
    if cacheable:
        shown.setdefault("ttlMs", 0)
        shown.setdefault("cacheScope", "private")
    return {**message, "result": shown}


def input_required_message(
    request_id: object, tool: str, prompt: str, state: str, server_info: JsonObject
) -> JsonObject:
    """R-MRTR-12: the approval form (with form mode) as the one input request, and the state."""
    form = elicitation_create_message("", tool, prompt, True)["params"]
    return _result(
        request_id,
        {
            "resultType": "input_required",
            "inputRequests": {APPROVAL_KEY: {"method": ELICIT, "params": form}},
            "requestState": state,
            "_meta": {META_SERVER_INFO: server_info},
        },
    )


def modern_era(meta: object) -> tuple[int, str, object] | JsonObject | None:
    """R-MRTR-9, R-MRTR-10: ``None`` for a 2025 request; the error ``(code, message, data)``
    for ``_meta`` that is refused; else the request's declared capabilities (an object)."""
    if not isinstance(meta, dict) or META_VERSION not in meta:
        return None
    version = meta[META_VERSION]
    if not isinstance(version, str):
        return (-32602, f"_meta {META_VERSION} must be a string", None)
    if version != MODERN_VERSION:
        data = {"supported": [MODERN_VERSION, *VERSIONS], "requested": version}
        return (-32022, "Unsupported protocol version", data)
    capabilities = meta.get(META_CAPABILITIES)
    if not isinstance(capabilities, dict):
        return (-32602, f"_meta {META_CAPABILITIES} is required and must be an object", None)
    level = meta.get(META_LOG_LEVEL)
    if level is not None and level not in LOG_LEVEL_NAMES:  # R-MRTR-18
        names = ", ".join(LOG_LEVEL_NAMES)
        return (-32602, f"_meta {META_LOG_LEVEL} must be one of {names}", None)
    return capabilities


def client_error_outcome(error: object) -> Failure:
    """R-CTX-5: a JSON-RPC error answer, handed to the tool."""
    fields = error if isinstance(error, dict) else {}
    code = fields.get("code")
    message = fields.get("message")
    return Failure(
        code if is_integer(code) else -32603,
        message if isinstance(message, str) else CLIENT_ERROR_MESSAGE,
        fields.get("data"),
    )


def approves(result: object) -> bool:
    """R-CLOSE-1: ``action`` exactly ``"accept"`` and ``content`` exactly ``{"approve": true}``
    (the boolean, and no other key)."""
    if not isinstance(result, dict):
        return False
    if result.get("action") != "accept":
        return False
    content = result.get("content")
    if not isinstance(content, dict) or list(content) != ["approve"]:
        return False
    return content["approve"] is True


def refusal_detail(result: object) -> str:
    """R-CLOSE-2: the detail of an answer that does not approve."""
    action = result.get("action") if isinstance(result, dict) else None
    if action == "decline":
        return DECLINED
    if action == "cancel":
        return CANCELLED
    return NOT_APPROVED


# ---------------------------------------------------------------------------------------------
# Records


@dataclass
class ModelCall:
    """An open request. ``name`` is the tool, or the method of a read."""

    conn: Hashable
    request_id: Hashable
    is_tool: bool
    name: str
    arguments: object
    mode: str
    caller: Hashable | None
    stage: str = ""
    worker: int | None = None  # while in a stage that holds a worker
    elicitation_id: str | None = None  # while PARKED
    parked_at: int = -1  # the model's tick when it parked: a connection's queue order
    replied: bool = False  # push mode: answered with nothing when it parked (R-DLV-3)
    # R-LOG-2: when it was admitted, what the authorizer decided so far ("", "allow", "ask",
    # "approved"), the elicitation id it parked under
    started: int = 0
    decision: str = ""
    approval: str | None = None
    modern: Modern | None = None  # a modern request served statelessly (R-MRTR-9)
    task_modern: Modern | None = None  # a task's call: the request it came in (R-TASK-11)
    owner: Hashable = None  # whose workers and parking places it takes (R-PARK-5, R-ADM-6)
    held: bool = False  # while PARKED: its prompt is not sent yet (R-PARK-8)
    window: int | None = None  # the number of its open inline window (R-TASK-4)

    @property
    def key(self) -> CallKey:
        return (self.conn, self.request_id)


@dataclass
class Modern:
    """How a modern ``tools/call`` is served (R-MRTR-9, R-MRTR-12): what its own capabilities
    allow, who the shell authenticated (``""``: no one) and the owner of its approval."""

    can_elicit: bool
    principal: str
    owner: Hashable
    capabilities: object = None
    responses: object = None
    state: object = None
    approved: bool = False
    cacheable: bool = False  # R-MRTR-11: a listing's or resources/read's answer
    rounds: bool = True  # R-MRTR-24: tools/call, prompts/get and resources/read have rounds

    def round(self, approved: bool = False) -> Round:
        """What its tool is told of its rounds (R-MRTR-20): the request's capabilities, the
        answers and state of a valid round's retry, and whether its approval was granted
        (R-MRTR-21)."""
        granted = approved or self.approved
        return Round(self.capabilities, self.responses, self.state, granted)


ROUND_METHODS = ("elicitation/create", "sampling/createMessage", "roots/list")
ROUND_READS = ("prompts/get", "resources/read")  # R-MRTR-24
# R-MRTR-11: the methods whose modern results are cacheable; R-MRTR-9: the 2025-only ones.
CACHEABLE = (
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
)
TASK_METHODS = ("tasks/get", "tasks/update", "tasks/cancel", "tasks/result", "tasks/list")
LEGACY_ONLY = ("ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe")


def round_binding(call: ModelCall) -> tuple[str, object]:
    """R-MRTR-21: what a round state binds: a tool's name and arguments; for a read, the method
    and the prompt's name or the resource's URI, and the prompt's arguments (``None`` for a
    resource)."""
    if call.is_tool:
        return call.name, call.arguments
    params = call.arguments if isinstance(call.arguments, dict) else {}
    if call.name == "prompts/get":
        return f"prompts/get {params.get('name')}", params.get("arguments")
    return f"{call.name} {params.get('uri')}", None


def round_requests_ok(requests: object) -> bool:
    """R-MRTR-20: 1 to 16 requests by key (1 to 64 characters), each only ``method`` (one of
    three) and an object of ``params`` (absent is ``{}``)."""
    if not isinstance(requests, dict) or not 1 <= len(requests) <= 16:
        return False
    for key, request in requests.items():
        if not isinstance(key, str) or not 1 <= len(key) <= 64 or not isinstance(request, dict):
            return False
        if set(request) - {"method", "params"} or request.get("method") not in ROUND_METHODS:
            return False
        if not isinstance(request.get("params", {}), dict):
            return False
    return True


def round_missing(requests: dict[str, Any], capabilities: object) -> JsonObject:
    """R-MRTR-22: what the requests need that ``capabilities`` do not declare."""
    caps = capabilities if isinstance(capabilities, dict) else {}
    missing: JsonObject = {}
    for request in requests.values():
        method, params = request["method"], request.get("params", {})
        if method == "elicitation/create" and params.get("mode") == "url":
            elicitation = caps.get("elicitation")
            if not (isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict)):
                missing["elicitation"] = {**missing.get("elicitation", {}), "url": {}}
        elif method == "elicitation/create":
            if not advertises_form_elicitation(caps):
                missing.setdefault("elicitation", {})
        else:
            name = "sampling" if method == "sampling/createMessage" else "roots"
            if not isinstance(caps.get(name), dict):
                missing[name] = {}
    return missing


@dataclass
class ModelNonce:
    """An outstanding modern approval (R-MRTR-12): it holds a parking place of ``owner``."""

    id: str
    owner: Hashable
    deadline: int
    parked_at: int


@dataclass
class CapEntry:
    """A capabilities entry (R-CAP-*); ``joined`` orders it within its group."""

    conn: Hashable
    can_elicit: bool
    live: bool
    joined: int
    can_sample: bool = False  # R-CTX-4


@dataclass
class ModelRequest:
    """A running tool's outstanding request to its client (R-CTX-4)."""

    id: str
    conn: Hashable  # the call's owner
    request_id: Hashable  # the call's request id
    ref: int  # the worker of the tool that asked
    token: Hashable
    method: str


@dataclass(frozen=True)
class Observation:
    """What a checker compares between the reducer and the model after every step.

    Ids are the observed implementation's own (a checker translates them before comparing).
    """

    tools: dict[str, bool]  # name -> sensitive
    subscribed: frozenset[Hashable]
    known: frozenset[Hashable]  # connections the state keeps (R-INV-6)
    parked: dict[Hashable, list[str]]  # conn -> its parked elicitation ids, oldest first
    elicitations: dict[str, CallKey]  # elicitation id -> the call parked under it
    workers: dict[int, CallKey]  # worker ref -> the call it serves
    in_flight: dict[Hashable, int]  # conn -> its workers (connections holding any)
    caps_unsubscribed: list[Hashable]  # entries without a live subscriber, oldest first
    caps_live: list[Hashable]  # entries with one, oldest first
    can_elicit: dict[Hashable, bool]  # conn -> whether its entry advertised form elicitation
    open: dict[CallKey, tuple[str, bool]]  # open call -> (stage, answered with nothing)
    parked_total: int
    in_flight_total: int
    top: int
    # A running tool's outstanding requests (R-CTX-4, R-INV-7); defaults for observers that
    # predate them.
    can_sample: dict[Hashable, bool] = field(default_factory=dict)  # conn -> sampling advertised
    # request id -> (the call, the worker that asked, its token, the method)
    client_requests: dict[str, tuple[CallKey, int, Hashable, str]] = field(default_factory=dict)
    worker_requests: dict[int, list[str]] = field(default_factory=dict)  # ref -> ids, oldest first
    # Tasks (spec/tasks.md): task id -> (owner, status, its live call's key, its inputs' ids)
    tasks: dict[str, tuple[Hashable, str, CallKey | None, tuple[str, ...]]] = field(
        default_factory=dict
    )


# ---------------------------------------------------------------------------------------------
# Tasks (spec/tasks.md)

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
WINDOW_TIMER = "task"  # an escalating call's inline window (R-TASK-4)
TTL_TIMER = "task_ttl"  # a terminal task's ttl (R-TASK-9)
MODEL_TASK_PREFIX = "model-task-"
TERMINAL = ("completed", "failed", "cancelled")
POLL_INTERVAL_MS = 500
ASKGATE_FAILURES = ("callback_failed", "callback_timeout", "server_stopping")  # R-TASK-5
# Not normative (see the module docstring): the message of a failed task's error.
TASK_FAILED_MESSAGE = "the tool's call failed"


@dataclass(frozen=True)
class ModelChannel:
    """The connection a task's call moves onto (R-TASK-4); the call's request id becomes the
    task's id. Nothing it would be sent leaves the model: it changes the task instead."""

    task_id: str


@dataclass
class ModelTask:
    """A task (R-TASK-4 .. R-TASK-10): ``call`` while it is live; ``outcome`` (its ``result``
    or ``error``) once terminal; ``inputs`` the requests its call sent, unanswered, in order."""

    id: str
    owner: Hashable
    status: str
    created: int
    updated: int
    call: ModelCall | None
    can_elicit: bool  # the request's own capabilities (R-TASK-10)
    can_sample: bool
    outcome: JsonObject | None = None
    inputs: list[tuple[str, JsonObject]] = field(default_factory=list)


def declares_tasks(capabilities: object) -> bool:
    """R-TASK-2: ``clientCapabilities.extensions["io.modelcontextprotocol/tasks"]`` is an
    object."""
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)


def tasks_required_error(request_id: object) -> JsonObject:
    """R-TASK-3, R-TASK-7: ``-32021`` naming the extension."""
    data: JsonObject = {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
    return _error(request_id, -32021, "Missing required client capability", data)


def iso_time(epoch_ms: int, now: int) -> str:
    """R-TASK-4: a time as ISO 8601 in UTC, to the millisecond."""
    moment = datetime.datetime.fromtimestamp((epoch_ms + now) / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def task_outcome(message: JsonObject) -> tuple[str, JsonObject]:
    """R-TASK-5: what the answer of a task's call makes the task: ``completed`` with a
    ``tools/call`` result (an ``isError`` one too), ``failed`` with askgate's own failure of
    the call as an error, or with a JSON-RPC error."""
    result = message.get("result")
    if isinstance(result, dict):
        payload = result.get("structuredContent")
        failure = payload.get("error") if isinstance(payload, dict) else None
        if failure in ASKGATE_FAILURES and result == _is_error_tool_result({"error": failure}):
            error = {"code": -32603, "message": TASK_FAILED_MESSAGE, "data": payload}
            return "failed", {"error": error}
        return "completed", {"result": result}
    failed = message.get("error")
    return "failed", {"error": failed if isinstance(failed, dict) else {}}


def place_id(place: ModelCall | ModelNonce) -> str:
    """The id a parking place is known by: the prompt's, or the nonce's."""
    return place.id if isinstance(place, ModelNonce) else str(place.elicitation_id)


# ---------------------------------------------------------------------------------------------
# The model


class ReferenceModel:
    """The spec as a naive state machine: ``apply(event)`` returns the effects it requires."""

    def __init__(self, options: Options, tools: Iterable[tuple[Any, ...]] = ()) -> None:
        self.options = options
        tools = list(tools)
        self.tools: dict[str, bool] = {t[0]: t[1] for t in tools}  # name -> sensitive (R-TOOL-1)
        # R-TASK-1: a tool's task support, when it declares one ("forbidden" otherwise)
        self.support: dict[str, str] = {t[0]: t[2] for t in tools if len(t) > 2}
        self.tasks: dict[str, ModelTask] = {}  # by id, in creation order
        self.next_task = 0
        self.next_window = 0
        self.epoch_ms = 0  # the wall-clock time of now == 0 (R-TASK-4)
        self.subscribed: set[Hashable] = set()
        self.entries: list[CapEntry] = []
        self.calls: list[ModelCall] = []  # admission order
        # conn -> the tick at which its parked count last changed (R-PARK-4's tie-break).
        self.count_changed_at: dict[Hashable, int] = {}
        self.ticks = 0
        self.next_ref = 1
        self.next_elicitation = 0
        self.requests: list[ModelRequest] = []  # a running tool's outstanding requests (R-CTX-4)
        self.next_request = 0
        self.versions: dict[Hashable, str] = {}  # conn -> the version it negotiated (R-PROTO-3)
        # R-PARK-8: the connections whose initialize was answered and that have not said they
        # are initialized yet -> the prompts held for them meanwhile (call, request), oldest first
        self.held: dict[Hashable, list[tuple[ModelCall, JsonObject]]] = {}
        self.principals: dict[Hashable, str] = {}  # conn -> its subscriber's principal (R-SUB-1)
        self.per_request: set[Hashable] = set()  # conns living for one request (R-PARK-7)
        self.now = 0  # the now of the event being applied (R-LOG-2)
        # The 2026-07-28 revision (spec/modern.md): outstanding nonces, the record of closed ones
        # (id, why, expiry; oldest first), the model's own keyring and its nonces' bytes.
        self.nonces: list[ModelNonce] = []
        self.closed: list[tuple[str, str, int]] = []
        self.ring = Keyring(Key(MODEL_KEY_ID, MODEL_SECRET), options.elicitation_timeout_ms)
        self.nonce_of: dict[bytes, str] = {}

    # -- what a checker reads ----------------------------------------------------------------

    @property
    def per_connection_share(self) -> int:
        """R-OPT-1: ``max_in_flight_per_connection``, or half of ``max_in_flight``, at least 1."""
        share = self.options.max_in_flight_per_connection
        if share is None:
            return max(1, self.options.max_in_flight // 2)
        return share

    def principal(self, conn: Hashable, given: object = None) -> str | None:
        """R-SUB-3: the connection's principal, else the non-empty one the request carries."""
        principal = self.principals.get(conn, given)
        return principal if isinstance(principal, str) and principal else None

    def owner(self, conn: Hashable, given: object = None) -> Hashable:
        """R-PARK-5: the request's principal, else the one owner of every per-request
        connection (R-PARK-7), else the connection."""
        principal = self.principal(conn, given)
        if principal is not None:
            return ("principal", principal)
        return ANONYMOUS if conn in self.per_request else conn

    @staticmethod
    def scope(owner: Hashable, conn: Hashable) -> str:
        """R-PARK-6: what an owner is, as a deny or a busy answer names it."""
        if owner == ANONYMOUS:
            return "anonymous"
        if owner != conn and isinstance(owner, tuple) and owner[:1] == ("principal",):
            return "principal"
        return "connection"

    def parked_calls(self, owner: Hashable) -> list[ModelCall]:
        """The owner's parked calls, oldest first."""
        mine = [c for c in self.calls if c.owner == owner and c.stage == PARKED]
        return sorted(mine, key=lambda c: c.parked_at)

    def parked_places(self, owner: Hashable) -> list[ModelCall | ModelNonce]:
        """What holds ``owner``'s parking places, oldest first: its parked calls and its modern
        nonces (R-MRTR-12: one count, one queue)."""
        mine: list[ModelCall | ModelNonce] = [*self.parked_calls(owner)]
        mine += [n for n in self.nonces if n.owner == owner]
        return sorted(mine, key=lambda x: x.parked_at)

    def parked_count(self, conn: Hashable) -> int:
        return len(self.parked_places(conn))

    def parked_total(self) -> int:
        return len([c for c in self.calls if c.stage == PARKED]) + len(self.nonces)

    def owners(self) -> set[Hashable]:
        return {c.owner for c in self.calls if c.stage == PARKED} | {n.owner for n in self.nonces}

    def top(self) -> int:
        """The most parking places any owner holds."""
        return max((self.parked_count(o) for o in self.owners()), default=0)

    def workers_of(self, conn: Hashable) -> int:
        return len([c for c in self.calls if c.conn == conn and c.worker is not None])

    def workers_total(self) -> int:
        return len([c for c in self.calls if c.worker is not None])

    def entry(self, conn: Hashable) -> CapEntry | None:
        for e in self.entries:
            if e.conn == conn:
                return e
        return None

    def can_be_asked(self, conn: Hashable) -> bool:
        """R-CAP-4: a live subscriber and an entry that advertised form elicitation."""
        if isinstance(conn, ModelChannel):  # R-TASK-10: as the task's request declared
            task = self.tasks.get(conn.task_id)
            return task is not None and task.status not in TERMINAL and task.can_elicit
        e = self.entry(conn)
        return conn in self.subscribed and e is not None and e.can_elicit

    def known_connections(self) -> set[Hashable]:
        """R-INV-6: a connection is kept while it has a subscriber, an entry or a request."""
        known = set(self.subscribed)
        known.update(e.conn for e in self.entries)
        known.update(c.conn for c in self.calls)
        known.update(n.owner for n in self.nonces)  # R-INV-6: a parked nonce holds its owner
        known.update(c.owner for c in self.calls if c.stage == PARKED)  # and a parked call
        return known

    def live_timers(self) -> set[tuple[str, object]]:
        """R-INV-4: one timer per parked call, per worker and per outstanding client request."""
        timers: set[tuple[str, object]] = set()
        for c in self.calls:
            if c.stage == PARKED:
                timers.add(("elicitation", c.elicitation_id))
            else:
                timers.add(("worker", c.worker))
        for n in self.nonces:
            timers.add(("elicitation", n.id))
        for r in self.requests:
            timers.add((CLIENT_REQUEST_TIMER, r.id))
        return timers

    def live_channels(self) -> set[Hashable]:
        """The channels of the live tasks: connections that can be asked as the task's request
        declared (R-TASK-10)."""
        return {ModelChannel(t.id) for t in self.tasks.values() if t.status not in TERMINAL}

    def task_timers(self) -> set[tuple[str, object]]:
        """The timers of tasks: each open inline window (R-TASK-4), each terminal task's ttl
        (R-TASK-9)."""
        timers: set[tuple[str, object]] = set()
        for c in self.calls:
            if c.window is not None:
                timers.add((WINDOW_TIMER, (c.key, c.window)))
        for t in self.tasks.values():
            if t.status in TERMINAL:
                timers.add((TTL_TIMER, t.id))
        return timers

    def requests_of(self, ref: int) -> list[ModelRequest]:
        """The outstanding requests of the tool running in worker ``ref``, oldest first."""
        return [r for r in self.requests if r.ref == ref]

    def observe(self) -> Observation:
        conns = self.known_connections()
        in_flight = {conn: self.workers_of(conn) for conn in conns}
        parked = {conn: [place_id(x) for x in self.parked_places(conn)] for conn in conns}
        by_age = sorted(self.entries, key=lambda e: e.joined)
        return Observation(
            tools=dict(self.tools),
            subscribed=frozenset(self.subscribed | self.live_channels()),
            known=frozenset(conns),
            parked={conn: eids for conn, eids in parked.items() if eids},
            elicitations={
                **{str(c.elicitation_id): c.key for c in self.calls if c.stage == PARKED},
                **{n.id: (n.owner, n.id) for n in self.nonces},
            },
            workers={c.worker: c.key for c in self.calls if c.worker is not None},
            in_flight={conn: n for conn, n in in_flight.items() if n},
            caps_unsubscribed=[e.conn for e in by_age if not e.live],
            caps_live=[e.conn for e in by_age if e.live],
            can_elicit={e.conn: e.can_elicit for e in self.entries},
            open={c.key: (c.stage, c.replied) for c in self.calls},
            parked_total=self.parked_total(),
            in_flight_total=self.workers_total(),
            top=self.top(),
            can_sample={e.conn: e.can_sample for e in self.entries},
            client_requests={
                r.id: ((r.conn, r.request_id), r.ref, r.token, r.method) for r in self.requests
            },
            worker_requests={r.ref: [x.id for x in self.requests_of(r.ref)] for r in self.requests},
            tasks={
                t.id: (
                    t.owner,
                    t.status,
                    None if t.call is None else t.call.key,
                    tuple(key for key, _ in t.inputs),
                )
                for t in self.tasks.values()
            },
        )

    # -- the step ------------------------------------------------------------------------------

    def apply(self, event: Event) -> list[Effect]:
        """Applies ``event``; returns the effects, in order."""
        out: list[Effect] = []
        now = getattr(event, "now", None)
        if is_integer(now):
            self.now = now
        if isinstance(event, ClientInitialized):
            self._initialize(event, out)
        elif isinstance(event, ClientReady):
            for call, request in self.held.pop(event.conn, []):  # R-PARK-8
                call.held = False
                out.append(Push(event.conn, request, call.request_id))
        elif isinstance(event, PingReceived):
            if self._admit(event.conn, event.request_id, out):  # R-PROTO-4
                out.append(Reply(event.conn, event.request_id, _result(event.request_id, {})))
        elif isinstance(event, SubscriberAttached):
            self._subscriber_attached(event.conn, event.principal, event.per_request, out)
        elif isinstance(event, SubscriberDetached):
            self._connection_gone(event.conn, out)
        elif isinstance(event, ToolRegistered):
            self.tools[event.name] = bool(event.sensitive)
            self.support.pop(event.name, None)  # no definition: no task support (R-TASK-1)
            self._tools_changed(out)
        elif isinstance(event, ToolUnregistered):
            self.support.pop(event.name, None)
            if self.tools.pop(event.name, None) is not None:
                self._tools_changed(out)
        elif isinstance(event, ToolCallReceived):
            opened = self._find(event.conn, event.request_id) is not None
            self._tool_call(event, out)
            if not opened:
                self._open_window(event, out)  # R-TASK-4
        elif isinstance(event, ReadRequested):
            self._read(event, out)
        elif isinstance(event, WorkerFinished):
            self._worker_ended(event.ref, "finished", event.value, event.now, out)
        elif isinstance(event, WorkerFailed):
            self._worker_ended(event.ref, "failed", None, event.now, out)
        elif isinstance(event, ElicitationAnswered):
            self._answered(event, out)
        elif isinstance(event, CancelRequested):
            self._cancel(event.conn, event.request_id, out)
        elif isinstance(event, CallerExited):
            self._caller_exited(event.caller, out)
        elif isinstance(event, ServerStopping):
            self._stopping(out)
        elif isinstance(event, TimerFired):
            self._timer_fired(event.key, event.now, out)
        elif isinstance(event, ToolRequested):
            self._tool_requested(event, out)
        else:
            raise TypeError(f"not an event: {event!r}")
        out = self._absorb(out)  # R-TASK-5, R-TASK-10: what a task's call is sent
        known = self.known_connections()
        self.versions = {c: v for c, v in self.versions.items() if c in known}  # R-INV-6
        self.held = {c: h for c, h in self.held.items() if c in known}
        return out

    def _tools_changed(self, out: list[Effect]) -> None:
        """R-PROTO-12: every subscribed connection that initialized hears of it (in no order
        the spec fixes; here by name)."""
        message = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        told = [conn for conn in sorted(self.versions, key=repr) if conn in self.subscribed]
        out.extend(Push(conn, dict(message)) for conn in told)

    def _with_mode(self, conn: Hashable) -> bool:
        """R-REV-1, R-REV-2: an elicitation names form mode for a connection that negotiated
        2025-11-25, or none."""
        return self.versions.get(conn, VERSIONS[0]) == VERSIONS[0]

    def _initialize(self, ev: ClientInitialized, out: list[Effect]) -> None:
        """R-CAP-1; with a request id, R-PROTO-3: admitted, recorded, answered."""
        if ev.request_id is None:
            self._client_initialized(ev.conn, ev.capabilities, out)
            return
        if not self._admit(ev.conn, ev.request_id, out):
            return
        if ev.conn in self.versions:  # R-PROTO-23
            refusal = _error(ev.request_id, -32600, ALREADY_INITIALIZED_MESSAGE)
            out.append(Reply(ev.conn, ev.request_id, refusal))
            return
        capabilities = ev.capabilities if isinstance(ev.capabilities, dict) else {}
        self._client_initialized(ev.conn, capabilities, out)
        asked = ev.protocol_version
        version = asked if isinstance(asked, str) and asked in VERSIONS else VERSIONS[0]
        self.versions[ev.conn] = version
        self.held[ev.conn] = []  # R-PARK-8
        message = initialize_result_message(ev.request_id, version, self.options)
        out.append(Reply(ev.conn, ev.request_id, message))

    def _tick(self) -> int:
        self.ticks += 1
        return self.ticks

    # -- capabilities and subscribers (R-CAP-*, R-SUB-*) -----------------------------------------

    def _client_initialized(self, conn: Hashable, capabilities: object, out: list[Effect]) -> None:
        if self.entry(conn) is not None:
            return  # R-CAP-1
        live = conn in self.subscribed
        can = advertises_form_elicitation(capabilities)
        sample = advertises_sampling(capabilities)
        self.entries.append(CapEntry(conn, can, live, self._tick(), sample))
        limit = self.options.max_client_capabilities
        if len(self.entries) > limit:  # R-CAP-3
            unsubscribed = [e for e in self.entries if not e.live]
            candidates = unsubscribed if unsubscribed else self.entries
            victim = min(candidates, key=lambda e: e.joined)
            self.entries.remove(victim)
            fields = {
                "count": 1,
                "size": len(self.entries),
                "live_subscriber": victim.live,
                "max_client_capabilities": limit,
            }
            out.append(Emit("client_capabilities_evicted", fields))

    def _subscriber_attached(
        self, conn: Hashable, principal: object, per_request: object, out: list[Effect]
    ) -> None:
        if conn in self.subscribed:
            self._connection_gone(conn, out)  # R-SUB-2
        self.subscribed.add(conn)  # R-SUB-1
        if isinstance(principal, str) and principal:
            self.principals[conn] = principal
        if per_request is True:
            self.per_request.add(conn)
        e = self.entry(conn)
        if e is not None and not e.live:
            e.live = True
            e.joined = self._tick()

    def _connection_gone(self, conn: Hashable, out: list[Effect]) -> None:
        """R-DROP-3: drop every call it owns in admission order, remove its entry, forget it."""
        for call in [c for c in self.calls if c.conn == conn]:
            self._drop(call, notify=False, out=out, why=DROPPED_CONNECTION_GONE)
        self.entries = [e for e in self.entries if e.conn != conn]
        self.subscribed.discard(conn)
        self.versions.pop(conn, None)  # R-SUB-2: a rebound connection negotiates again
        self.held.pop(conn, None)
        self.principals.pop(conn, None)
        self.per_request.discard(conn)

    # -- admission (R-ADM-*, R-READ-1) ---------------------------------------------------------

    def _find(self, conn: Hashable, request_id: object) -> ModelCall | None:
        if not is_request_id(request_id):
            return None
        for c in self.calls:
            if c.conn == conn and c.request_id == request_id:
                return c
        return None

    def _admit(self, conn: Hashable, request_id: object, out: list[Effect]) -> bool:
        if not is_request_id(request_id):  # R-ADM-0
            out.append(Reply(conn, None, _error(None, -32600, INVALID_ID_MESSAGE)))
            return False
        if self._find(conn, request_id) is not None:  # R-ADM-1
            out.append(Reply(conn, request_id, _error(request_id, -32600, DUPLICATE_ID_MESSAGE)))
            return False
        return True

    def _busy_scope(self, call: ModelCall) -> str | None:
        """R-ADM-5: which bound refuses a new worker for ``call``, server first; the share is
        its owner's (R-ADM-6)."""
        if self.workers_total() >= self.options.max_in_flight:
            return "server"
        held = len([c for c in self.calls if c.owner == call.owner and c.worker is not None])
        if held >= self.per_connection_share:
            return self.scope(call.owner, call.conn)
        return None

    def _busy_message(self, call: ModelCall, scope: str) -> JsonObject:
        if call.is_tool:
            return tool_failure_message(call.request_id, "server_busy", scope)
        return method_failure_message(call.request_id, call.name, "server_busy")

    def _open(self, call: ModelCall, stage: str, job: Job, now: int, out: list[Effect]) -> None:
        """Admits ``call`` into a stage that holds a worker, or answers busy (R-ADM-5)."""
        scope = self._busy_scope(call)
        if scope is not None:
            busy = self._rendered(call, self._busy_message(call, scope))
            out.append(Reply(call.conn, call.request_id, busy))
            if call.is_tool:
                out.append(call_ended(call, now, "busy", scope))  # R-LOG-1
            return
        self.calls.append(call)
        self._start_worker(call, stage, job, now, out)

    def _start_worker(
        self, call: ModelCall, stage: str, job: Job, now: int, out: list[Effect]
    ) -> None:
        ref = self.next_ref
        self.next_ref += 1
        call.stage = stage
        call.worker = ref
        out.append(StartWorker(ref, call.conn, job))
        out.append(StartTimer(("worker", ref), now + self.options.callback_timeout_ms))  # R-WORK-1

    def _tool_call(self, ev: ToolCallReceived, out: list[Effect]) -> None:
        if not self._admit(ev.conn, ev.request_id, out):
            return
        rid: Hashable = ev.request_id  # a str or an int (R-ADM-0)
        # R-MRTR-9: a connection that initialized serves 2025; else the request's _meta says.
        era = None if ev.conn in self.versions else modern_era(ev.meta)
        if isinstance(era, tuple):  # R-MRTR-10
            out.append(Reply(ev.conn, rid, _error(rid, era[0], era[1], era[2])))
            return
        if not isinstance(ev.tool, str) or not isinstance(ev.arguments, dict):  # R-PROTO-6
            message = _error(rid, -32602, BAD_TOOLS_CALL_MESSAGE)
            out.append(Reply(ev.conn, rid, message))
            return
        modern = None
        required = era is not None and self._task_support(ev.tool) == "required"
        if required and not declares_tasks(era):  # R-TASK-3: refused before anything is admitted
            out.append(Reply(ev.conn, rid, tasks_required_error(rid)))
            refused = ModelCall(ev.conn, rid, True, ev.tool, None, "reply", None, started=ev.now)
            out.append(call_ended(refused, ev.now, "error"))
            return
        if era is not None:  # R-MRTR-12: the owner is the principal, or as R-PARK-5 says
            principal = self.principal(ev.conn, ev.principal) or ""  # R-SUB-3
            owner = self.owner(ev.conn, ev.principal)
            modern = Modern(advertises_form_elicitation(era), principal, owner, era)
            if ev.request_state is not None and ev.tool in self.tools:  # R-MRTR-13
                if token_version(ev.request_state) == ROUND_VERSION:
                    if not self._round_retry(ev, modern, out):  # R-MRTR-23
                        return
                else:
                    self._retry(ev, modern, out)
                    return
        call = ModelCall(ev.conn, rid, True, ev.tool, ev.arguments, ev.mode, ev.caller)
        call.started = ev.now
        call.modern = modern
        call.owner = self.owner(ev.conn) if modern is None else modern.owner  # R-PARK-5
        if ev.tool not in self.tools:  # R-ADM-2
            if self.options.has_unknown_tool_reply:
                self._open(call, UNKNOWN_REPLY, UnknownToolReply(ev.tool), ev.now, out)
            else:
                out.append(Reply(ev.conn, rid, unknown_tool_message(rid, ev.tool)))
                out.append(call_ended(call, ev.now, "unknown_tool"))
        elif self.options.has_authorizer:  # R-AUTH-1
            self._open(call, AUTHORIZING, Authorize(ev.tool, ev.arguments), ev.now, out)
        elif self.tools[ev.tool]:  # R-ADM-3
            message = deny_message(rid, ev.tool, "deny", SENSITIVE_UNGUARDED)
            out.append(Reply(ev.conn, rid, self._rendered(call, message)))
            record = call_ended(call, ev.now, "denied", SENSITIVE_UNGUARDED, decision="deny")
            out.append(record)
        else:  # R-ADM-4
            round_ = None if modern is None else modern.round()  # R-MRTR-20
            self._open(call, RUNNING, RunTool(ev.tool, ev.arguments, round_), ev.now, out)

    def _read(self, ev: ReadRequested, out: list[Effect]) -> None:
        if not self._admit(ev.conn, ev.request_id, out):
            return
        rid: Hashable = ev.request_id  # a str or an int (R-ADM-0)
        params = ev.params if isinstance(ev.params, dict) else None
        # R-MRTR-9: a connection that initialized serves 2025; else the request's _meta says.
        era = None if ev.conn in self.versions else modern_era((params or {}).get("_meta"))
        if isinstance(era, tuple):  # R-MRTR-10
            out.append(Reply(ev.conn, rid, _error(rid, era[0], era[1], era[2])))
            return
        call = ModelCall(ev.conn, rid, False, ev.method, params, "reply", ev.caller)
        call.owner = self.owner(ev.conn)  # R-PARK-5
        if era is not None:  # served statelessly, by the request's own principal (R-SUB-3)
            if ev.method in TASK_METHODS:
                self._tasks_request(ev, era, out)  # R-TASK-7 .. R-TASK-10
                return
            if ev.method in LEGACY_ONLY:  # R-MRTR-9: not a method of the stateless revision
                message = _error(rid, -32601, f"Unknown method: {ev.method}")
                out.append(Reply(ev.conn, rid, message))
                return
            principal = self.principal(ev.conn, ev.principal) or ""
            call.owner = self.owner(ev.conn, ev.principal)
            call.modern = Modern(advertises_form_elicitation(era), principal, call.owner, era)
            call.modern.cacheable = ev.method in CACHEABLE  # R-MRTR-11
            call.modern.rounds = ev.method in ROUND_READS  # R-MRTR-24
        if self.options.has_read_authorizer:  # R-READ-1
            self._open(call, READ_AUTHORIZING, AuthorizeRead(ev.method, params), ev.now, out)
        elif ev.method == "tools/list" and not self._hook_lists():  # R-PROTO-8
            page = self._tools_page(rid, sorted(self.tools))
            out.append(Reply(ev.conn, rid, self._rendered(call, page)))
        else:
            self._open(call, READ_RUNNING, self._read_job(call), ev.now, out)

    def _tasks_request(
        self, ev: ReadRequested, capabilities: JsonObject, out: list[Effect]
    ) -> None:
        """R-TASK-7 .. R-TASK-10: a modern ``tasks/*`` request, answered at once."""
        conn, rid, method = ev.conn, ev.request_id, ev.method
        if method in ("tasks/result", "tasks/list"):  # R-TASK-7: not in the revision
            out.append(Reply(conn, rid, _error(rid, -32601, f"Unknown method: {method}")))
            return
        if not declares_tasks(capabilities):  # R-TASK-7, as R-TASK-3
            out.append(Reply(conn, rid, tasks_required_error(rid)))
            return
        params = ev.params if isinstance(ev.params, dict) else {}
        tid = params.get("taskId")
        task = self.tasks.get(tid) if isinstance(tid, str) else None
        if task is None or task.owner != self.owner(conn, ev.principal):  # foreign: unknown
            out.append(Reply(conn, rid, _error(rid, -32602, "Unknown task")))
            return
        if method == "tasks/get":
            shown = self._task_fields(task)
            shown.update(task.outcome or {})
            if task.status == "input_required":
                shown["inputRequests"] = dict(task.inputs)
            out.append(Reply(conn, rid, modern_complete(_result(rid, shown), self._server_info())))
            return
        if method == "tasks/cancel":
            self._cancel_task(task, out)  # R-TASK-8
        else:
            responses = params.get("inputResponses")
            if isinstance(responses, dict):
                self._update_task(task, responses, ev.now, out)  # R-TASK-10
        ack = modern_complete(_result(rid, {}), self._server_info())
        out.append(Reply(conn, rid, ack))

    def _task_fields(self, task: ModelTask) -> JsonObject:
        return {
            "taskId": task.id,
            "status": task.status,
            "createdAt": iso_time(self.epoch_ms, task.created),
            "lastUpdatedAt": iso_time(self.epoch_ms, task.updated),
            "ttlMs": self.options.task_ttl_ms,
            "pollIntervalMs": POLL_INTERVAL_MS,
        }

    def _task_support(self, tool: object) -> str:
        """R-TASK-1: a registered tool's task support: what it declares when that is
        ``optional`` or ``required``, else ``forbidden``."""
        if not isinstance(tool, str) or tool not in self.tools:
            return "forbidden"
        declared = self.support.get(tool)
        return declared if declared in ("optional", "required") else "forbidden"

    def _open_window(self, ev: ToolCallReceived, out: list[Effect]) -> None:
        """R-TASK-2, R-TASK-4: a modern call just admitted, of a tool that supports tasks,
        whose request declares the extension, has an inline window."""
        call = self._find(ev.conn, ev.request_id)
        if call is None or call.modern is None or not call.is_tool or call.stage == PARKED:
            return
        if not declares_tasks(call.modern.capabilities):
            return
        if self._task_support(call.name) == "forbidden":
            return
        call.window = self.next_window
        self.next_window += 1
        deadline = ev.now + self.options.task_inline_ms
        out.append(StartTimer((WINDOW_TIMER, (call.key, call.window)), deadline))

    def _close_window(self, call: ModelCall, out: list[Effect]) -> None:
        if call.window is not None:
            out.append(CancelTimer((WINDOW_TIMER, (call.key, call.window))))
            call.window = None

    def _escalate(self, call: ModelCall, now: int, out: list[Effect], *, fired: bool) -> None:
        """R-TASK-4, R-TASK-6: the call becomes a task, unless its owner or the server holds
        as many live tasks as allowed: then it stays inline. Either way its window is over."""
        if fired:
            call.window = None  # its timer went off
        else:
            self._close_window(call, out)
        live = [t for t in self.tasks.values() if t.status not in TERMINAL]
        mine = [t for t in live if t.owner == call.owner]
        options = self.options
        if len(mine) >= options.max_tasks_per_owner or len(live) >= options.max_tasks_total:
            return
        modern = call.modern
        assert modern is not None
        tid = f"{MODEL_TASK_PREFIX}{self.next_task}"
        self.next_task += 1
        task = ModelTask(
            tid,
            call.owner,
            "working",
            now,
            now,
            call,
            modern.can_elicit,
            advertises_sampling(modern.capabilities),
        )
        self.tasks[tid] = task
        created = {"resultType": "task", **self._task_fields(task)}
        created["_meta"] = {META_SERVER_INFO: self._server_info()}
        out.append(Reply(call.conn, call.request_id, _result(call.request_id, created)))
        # The call is the task's now (R-TASK-5): on its channel, answered to no request.
        call.conn, call.request_id = ModelChannel(tid), tid
        call.caller, call.mode, call.replied, call.modern = None, "reply", False, None
        call.task_modern = modern  # its tool is told that request's round (R-TASK-11)

    def _absorb(self, effects: list[Effect]) -> list[Effect]:
        """R-TASK-5, R-TASK-10: what a task's call is sent changes its task instead: its answer
        ends the task, a request to its client becomes an input, a withdrawal removes one."""
        kept: list[Effect] = []
        for e in effects:
            conn = e.conn if isinstance(e, Reply | Push) else None
            if not isinstance(conn, ModelChannel):
                kept.append(e)
                continue
            task = self.tasks.get(conn.task_id)
            if task is None or task.status in TERMINAL:
                continue
            if isinstance(e, Reply):
                if e.message is not None:
                    status, outcome = task_outcome(e.message)
                    self._finish(task, status, outcome, kept)
                continue
            assert isinstance(e, Push)
            message = e.message
            ident, method = message.get("id"), message.get("method")
            if isinstance(ident, str) and isinstance(method, str):
                request = {"method": method, "params": message.get("params", {})}
                task.inputs.append((ident, request))
                task.status = "input_required"
            elif method == "notifications/cancelled":
                params = message.get("params")
                gone = params.get("requestId") if isinstance(params, dict) else None
                self._input_gone(task, gone)
        return kept

    def _input_gone(self, task: ModelTask, key: object) -> None:
        """An input no longer waits (R-TASK-10): the task works again once none does."""
        task.inputs = [(k, r) for k, r in task.inputs if k != key]
        task.status = "input_required" if task.inputs else "working"

    def _finish(
        self, task: ModelTask, status: str, outcome: JsonObject | None, out: list[Effect]
    ) -> None:
        """The task is terminal (R-TASK-5): its place is free (R-TASK-6), its ttl armed
        (R-TASK-9)."""
        task.status, task.outcome, task.call, task.inputs = status, outcome, None, []
        task.updated = max(self.now, task.updated)
        out.append(StartTimer((TTL_TIMER, task.id), task.updated + self.options.task_ttl_ms))

    def _cancel_task(self, task: ModelTask, out: list[Effect]) -> None:
        """R-TASK-8: a live task's call is dropped as R-DROP-1 says; the task is cancelled."""
        if task.status in TERMINAL:
            return
        sub: list[Effect] = []
        if task.call is not None and any(c is task.call for c in self.calls):
            self._drop(task.call, notify=True, out=sub, why=DROPPED_CANCELLED)
        out.extend(self._absorb(sub))
        self._finish(task, "cancelled", None, out)

    def _update_task(
        self, task: ModelTask, responses: JsonObject, now: int, out: list[Effect]
    ) -> None:
        """R-TASK-10: each response to one of the task's inputs is its client's answer to that
        request; unknown keys are ignored."""
        channel = ModelChannel(task.id)
        for key, response in responses.items():
            if task.status in TERMINAL:
                return
            if not any(k == key for k, _ in task.inputs):
                continue
            self._input_gone(task, key)
            result = response if isinstance(response, dict) else None
            error = None if result is not None else {"code": -32602, "message": "no answer"}
            sub: list[Effect] = []
            self._answered(ElicitationAnswered(channel, key, result, now, error), sub)
            out.extend(self._absorb(sub))

    def _hook_lists(self) -> bool:
        """Whether ``tools/list`` asks the visibility hook (R-PROTO-8): there is one, and a
        tool to ask about."""
        return self.options.has_visibility and bool(self.tools)

    def _read_job(self, call: ModelCall) -> Job:
        if call.name == "tools/list":
            return FilterTools(tuple(sorted(self.tools)))
        modern = call.modern
        round_ = modern.round() if modern is not None and modern.rounds else None  # R-MRTR-24
        return RunRead(call.name, call.arguments, round_)

    def _tools_page(self, rid: object, names: list[str]) -> JsonObject:
        """The first page of a ``tools/list`` answer listing ``names`` (R-PROTO-8, R-PROTO-9)."""
        if len(names) > self.options.page_size:
            raise NotImplementedError("the model lists at most one page of tools")
        entries: list[JsonObject] = []
        for name in names:
            entry: JsonObject = {"name": name, "inputSchema": {"type": "object"}}
            declared = self.support.get(name, "forbidden")
            if declared != "forbidden":  # R-TASK-1: the entry as the tool declared it
                entry["execution"] = {"taskSupport": declared}
            entries.append(entry)
        return _result(rid, {"tools": entries})

    def _listed(self, call: ModelCall, verdicts: dict[Any, object], out: list[Effect]) -> None:
        """R-PROTO-8: ``True`` lists a registered tool the hook was asked about; ``False``
        hides it; anything else hides it and is reported, in name order, before the answer."""
        names = []
        for name in sorted(n for n in self.tools if n in verdicts):
            verdict = verdicts[name]
            if verdict is True:
                names.append(name)
            elif verdict is not False:
                if isinstance(verdict, Raised):
                    kind = str(verdict.kind)
                    reason = (
                        f"the visibility hook raised {kind[:64]}{'…' if len(kind) > 64 else ''}"
                    )
                else:
                    kind = type(verdict).__name__
                    cut = f"{kind[:64]}{'…' if len(kind) > 64 else ''}"
                    reason = f"the visibility hook returned {cut}, not a bool"
                out.append(Emit("tool_hidden", {"tool": name, "reason": reason}))
        self._close(call, self._tools_page(call.request_id, names), out)

    # -- ending calls (R-DLV-*, R-DROP-*) ------------------------------------------------------

    def _close(
        self,
        call: ModelCall,
        message: JsonObject,
        out: list[Effect],
        outcome: str = "",
        detail: str | None = None,
        decision: str | None = None,
        evicted_by: Hashable | None = None,
    ) -> None:
        """Delivers the outcome to the owner (R-DLV-2, R-DLV-3) and forgets the call; a
        ``tools/call`` is recorded (R-LOG-1)."""
        message = self._rendered(call, message) or message
        self._close_window(call, out)  # R-TASK-4: answered inline
        if call.replied:
            out.append(Push(call.conn, message, call.request_id))
        else:
            out.append(Reply(call.conn, call.request_id, message))
        self.calls.remove(call)
        if call.is_tool:
            record = call_ended(
                call, self.now, outcome, detail, decision=decision, evicted_by=evicted_by
            )
            out.append(record)

    def _deny(
        self,
        call: ModelCall,
        decision: str,
        detail: str,
        out: list[Effect],
        why: str | None = None,
        *,
        recorded: str | None = None,
        evicted_by: Hashable | None = None,
    ) -> None:
        """R-DLV-4; recorded as denied (R-LOG-2)."""
        message = deny_message(call.request_id, call.name, decision, detail, why)
        shown = detail if recorded is None else recorded
        self._close(call, message, out, "denied", shown, decision, evicted_by)

    def _read_deny(self, call: ModelCall, detail: str, out: list[Effect]) -> None:
        """R-READ-2, recorded (R-LOG-4)."""
        self._close(call, read_denied_message(call.request_id, call.name, detail), out)
        fields = {
            "conn": call.conn,
            "request_id": call.request_id,
            "method": call.name,
            "detail": detail,
        }
        out.append(Emit("read_denied", fields))

    def _drop(self, call: ModelCall, *, notify: bool, out: list[Effect], why: str) -> None:
        """R-DROP-4: no outcome; whatever the call holds is released; an unanswered request is
        answered with nothing."""
        if call.stage == PARKED:
            eid = str(call.elicitation_id)
            held = call.held
            self._unpark(call)
            out.append(CancelTimer(("elicitation", eid)))
            if notify and not held:  # R-CLOSE-4, R-PARK-9
                message = elicitation_cancelled_message(eid, REQUEST_CANCELLED_REASON)
                out.append(Push(call.conn, message, call.request_id))
        else:
            ref = call.worker
            assert ref is not None
            out.append(KillWorker(ref))
            out.append(CancelTimer(("worker", ref)))
            call.worker = None
            self._withdraw_requests(ref, notify=notify, out=out)  # R-CTX-6
        self._close_window(call, out)  # R-TASK-4: the call is gone
        if not call.replied:
            out.append(Reply(call.conn, call.request_id, None))
        self.calls.remove(call)
        if call.is_tool:
            out.append(call_ended(call, self.now, "dropped", why))  # R-LOG-1

    def _cancel(self, conn: Hashable, request_id: object, out: list[Effect]) -> None:
        call = self._find(conn, request_id)
        if call is not None:
            self._drop(call, notify=True, out=out, why=DROPPED_CANCELLED)  # R-DROP-1

    def _caller_exited(self, caller: Hashable, out: list[Effect]) -> None:
        for call in [c for c in self.calls if c.caller is not None and c.caller == caller]:
            self._drop(call, notify=True, out=out, why=DROPPED_CALLER_GONE)  # R-DROP-2

    def _stopping(self, out: list[Effect]) -> None:
        """R-STOP-1: every open call ends, oldest first, with an answer to its owner."""
        for call in list(self.calls):
            rid = call.request_id
            if call.stage == PARKED:
                eid = str(call.elicitation_id)
                held = call.held
                self._unpark(call)
                out.append(CancelTimer(("elicitation", eid)))
                if not held:  # R-PARK-9
                    out.append(Push(call.conn, elicitation_cancelled_message(eid, STOPPING), rid))
                self._deny(call, "ask", STOPPING, out)
                continue
            ref = call.worker
            assert ref is not None
            out.append(KillWorker(ref))
            out.append(CancelTimer(("worker", ref)))
            call.worker = None
            self._withdraw_requests(ref, notify=True, out=out)  # R-CTX-6
            if call.stage == AUTHORIZING:
                self._deny(call, "deny", STOPPING, out)
            elif call.is_tool:
                self._close(call, tool_failure_message(rid, "server_stopping"), out, "stopped")
            else:
                failure = method_failure_message(rid, call.name, "server_stopping")
                self._close(call, failure, out, "stopped")

    # -- workers (R-WORK-*, R-AUTH-*, R-READ-*) -------------------------------------------------

    def _call_of_worker(self, ref: object) -> ModelCall | None:
        for c in self.calls:
            if c.worker is not None and c.worker == ref:
                return c
        return None

    def _worker_ended(
        self, ref: object, how: str, value: object, now: int, out: list[Effect]
    ) -> None:
        """``how`` is ``finished``, ``failed`` or ``timed_out``."""
        call = self._call_of_worker(ref)
        if call is None or call.worker is None:
            return  # R-WORK-4
        worker, call.worker = call.worker, None
        if how == "timed_out":
            out.append(KillWorker(worker))  # R-WORK-2
        else:
            out.append(CancelTimer(("worker", worker)))  # R-WORK-3
        self._withdraw_requests(worker, notify=True, out=out)  # R-CTX-6
        rid = call.request_id
        if call.stage == AUTHORIZING:
            if how != "finished":
                self._deny(call, "deny", AUTHORIZER_FAILED, out)  # R-AUTH-4
            elif isinstance(value, Allow):
                self._run_tool(call, "allow", now, out)  # R-AUTH-1
            elif isinstance(value, Deny) and isinstance(value.reason, str):
                self._deny(call, "deny", value.reason, out, policy_denies(value.reason))  # R-AUTH-2
            elif isinstance(value, Ask) and isinstance(value.prompt, str):
                self._ask(call, value.prompt, now, out)  # R-AUTH-3
            else:
                self._deny(call, "deny", AUTHORIZER_FAILED, out)  # R-AUTH-4
        elif call.stage == RUNNING:  # outcomes as R-LOG-2 names them
            if how == "finished" and isinstance(value, NeedsInput):
                self._round(call, value, now, out)  # R-MRTR-20
            elif how == "finished" and isinstance(value, dict):
                outcome = "tool_error" if value.get("isError") is True else "result"
                self._close(call, _result(rid, value), out, outcome)
            elif how == "timed_out":
                self._close(call, tool_failure_message(rid, "callback_timeout"), out, "timed_out")
            else:
                self._close(call, tool_failure_message(rid, "callback_failed"), out, "failed")
        elif call.stage == UNKNOWN_REPLY:  # R-ADM-2
            if how == "finished" and isinstance(value, str):
                self._close(call, unknown_tool_text_message(rid, value), out, "unknown_tool")
            else:
                self._close(call, unknown_tool_message(rid, call.name), out, "unknown_tool")
        elif call.stage == READ_AUTHORIZING:  # R-READ-1, R-READ-2
            if how != "finished":
                self._read_deny(call, AUTHORIZER_FAILED, out)
            elif isinstance(value, Allow):
                if call.name == "tools/list" and not self._hook_lists():  # R-PROTO-8
                    self._close(call, self._tools_page(rid, sorted(self.tools)), out)
                else:
                    self._next_stage(call, READ_RUNNING, self._read_job(call), now, out)
            elif isinstance(value, Deny) and isinstance(value.reason, str):
                self._read_deny(call, value.reason, out)
            elif isinstance(value, Ask) and isinstance(value.prompt, str):
                self._read_deny(call, READ_ASK, out)
            else:
                self._read_deny(call, AUTHORIZER_FAILED, out)
        elif call.stage == READ_RUNNING:
            if how == "finished" and isinstance(value, NeedsInput):
                self._round(call, value, now, out)  # R-MRTR-24
            elif how == "finished" and call.name == "tools/list" and isinstance(value, dict):
                self._listed(call, value, out)  # R-PROTO-8
            elif how == "finished" and isinstance(value, dict) and call.name != "tools/list":
                self._close(call, _result(rid, value), out)
            elif how == "finished" and isinstance(value, Failure) and isinstance(value.code, int):
                message = _error(rid, value.code, str(value.message), value.data)
                self._close(call, message, out)  # R-PROTO-14
            elif how == "timed_out":
                self._close(call, method_failure_message(rid, call.name, "callback_timeout"), out)
            else:
                self._close(call, method_failure_message(rid, call.name, "callback_failed"), out)
        else:
            raise AssertionError(f"a worker for a call in stage {call.stage!r}")

    def _next_stage(
        self, call: ModelCall, stage: str, job: Job, now: int, out: list[Effect]
    ) -> None:
        """A new worker for an open call: the bounds are checked again (R-ADM-5)."""
        scope = self._busy_scope(call)
        if scope is not None:
            self._close(call, self._busy_message(call, scope), out, "busy", scope)
            return
        self._start_worker(call, stage, job, now, out)

    def _run_tool(self, call: ModelCall, decision: str, now: int, out: list[Effect]) -> None:
        """An allowed or approved call starts its tool if it is still registered (R-TOOL-2);
        ``decision`` is ``allow`` or ``approved`` (R-LOG-2)."""
        call.decision = decision
        if call.name not in self.tools:
            message = unknown_tool_message(call.request_id, call.name)
            self._close(call, message, out, "unknown_tool")
            return
        round_ = None if call.modern is None else call.modern.round()  # R-MRTR-20
        if call.task_modern is not None:  # R-TASK-11: the task's request's, an approval kept
            round_ = call.task_modern.round(decision == "approved")
        self._next_stage(call, RUNNING, RunTool(call.name, call.arguments, round_), now, out)

    # -- parking (R-AUTH-3, R-PARK-*) -----------------------------------------------------------

    def _set_count_changed(self, conn: Hashable) -> None:
        self.count_changed_at[conn] = self._tick()

    def _unpark(self, call: ModelCall) -> None:
        """The call leaves its owner's parked calls (its count changes, R-CLOSE-3)."""
        call.stage = "unparked"
        call.elicitation_id = None
        self._set_count_changed(call.owner)
        if call.held:  # R-PARK-9: its prompt was never sent
            call.held = False
            held = self.held[call.conn]
            held[:] = [(c, r) for c, r in held if c is not call]

    def _ask(self, call: ModelCall, prompt: str, now: int, out: list[Effect]) -> None:
        if call.modern is not None:
            self._ask_modern(call, call.modern, prompt, now, out)  # R-MRTR-12
            return
        if not self.can_be_asked(call.conn):  # R-AUTH-3: deny-on-ASK; the record hides the prompt
            self._deny(call, "ask", prompt, out, CANNOT_ASK, recorded=CANNOT_ASK_DETAIL)
            return
        if self._room(call, call.owner, out):  # R-PARK-1: counted by owner (R-PARK-5)
            self._park(call, prompt, now, out)

    def _room(self, call: ModelCall, owner: Hashable, out: list[Effect]) -> bool:
        """R-PARK-1, R-PARK-3, R-PARK-4: whether ``owner`` may take one more parking place,
        after evicting another owner's oldest; ``call`` is denied when it may not."""
        mine = self.parked_count(owner)
        full = mine >= self.options.max_parked_elicitations
        total = self.parked_total() >= self.options.max_parked_elicitations_total
        if not call.is_tool and (full or (total and mine >= self.top())):  # R-MRTR-21
            busy = method_failure_message(call.request_id, call.name, "server_busy")
            self._close(call, busy, out)
            return False
        if full:
            why = OWNER_FULL[self.scope(owner, call.conn)]  # R-PARK-6
            self._deny(call, "ask", TOO_MANY_PENDING, out, why)  # R-PARK-1
            return False
        if self.parked_total() >= self.options.max_parked_elicitations_total:  # R-PARK-3
            top = self.top()
            if mine >= top:
                self._deny(call, "ask", TOO_MANY_ON_SERVER, out)
                return False
            # R-PARK-4: of the owners holding `top`, the one whose count changed first.
            holders = {o for o in self.owners() if self.parked_count(o) == top}
            victim_owner = min(holders, key=lambda c: self.count_changed_at[c])
            victim = self.parked_places(victim_owner)[0]
            if isinstance(victim, ModelNonce):  # R-MRTR-15: it dies silently
                self._nonce_closed(victim, EVICTED, out)
                return True
            eid = str(victim.elicitation_id)
            held = victim.held
            self._unpark(victim)
            out.append(CancelTimer(("elicitation", eid)))
            if not held:  # R-PARK-9
                withdrawn = elicitation_cancelled_message(eid, EVICTED)
                out.append(Push(victim.conn, withdrawn, victim.request_id))
            self._deny(victim, "ask", EVICTED, out, evicted_by=call.conn)
        return True

    # -- the 2026-07-28 revision (spec/modern.md) ---------------------------------------------

    def _server_info(self) -> JsonObject:
        return {"name": self.options.server_name, "version": self.options.server_version}

    def _rendered(self, call: ModelCall | None, message: JsonObject | None) -> JsonObject | None:
        """A call's final answer as its era renders it (R-MRTR-11)."""
        if call is None or call.modern is None or message is None:
            return message
        return modern_complete(message, self._server_info(), call.modern.cacheable)

    def _ask_modern(
        self, call: ModelCall, modern: Modern, prompt: str, now: int, out: list[Effect]
    ) -> None:
        """R-MRTR-12, R-MRTR-16: a nonce parked for the owner and the input-required answer."""
        try:
            digest = arguments_digest(call.arguments)
        except ValueError:
            digest = ""
        if not modern.can_elicit or not digest:  # R-MRTR-16
            self._deny(call, "ask", prompt, out, CANNOT_ASK, recorded=CANNOT_ASK_DETAIL)
            return
        if not self._room(call, modern.owner, out):
            return
        n = self.next_elicitation
        self.next_elicitation += 1
        nonce = ModelNonce(f"{MODEL_NONCE_PREFIX}{n}", modern.owner, 0, self._tick())
        nonce.deadline = now + self.options.elicitation_timeout_ms
        self.nonces.append(nonce)
        self._set_count_changed(modern.owner)
        out.append(StartTimer(("elicitation", nonce.id), nonce.deadline))
        raw = n.to_bytes(16, "big")
        self.nonce_of[raw] = nonce.id
        state = seal(self.ring, modern.principal, call.name, digest, raw, now)
        rid = call.request_id
        message = input_required_message(rid, call.name, prompt, state, self._server_info())
        self._close_window(call, out)  # R-TASK-4: answered inline
        out.append(Reply(call.conn, rid, message))
        fields = {"conn": call.conn, "request_id": rid, "tool": call.name}
        fields["elicitation_id"] = nonce.id
        out.append(Emit("call_parked", fields))  # R-LOG-3
        self.calls.remove(call)
        call.approval = nonce.id
        out.append(call_ended(call, now, "input_required", decision="ask"))

    def _nonce_closed(self, nonce: ModelNonce, why: str | None, out: list[Effect]) -> None:
        """A nonce leaves its place silently (R-MRTR-15); used and evicted ones are remembered
        until their expiry, at most ``max_parked_elicitations_total`` (R-MRTR-14)."""
        self.nonces.remove(nonce)
        self._set_count_changed(nonce.owner)
        if why is None:  # timed out: its timer is gone and its state expired
            return
        out.append(CancelTimer(("elicitation", nonce.id)))
        self.closed.append((nonce.id, why, nonce.deadline))
        # Forgotten from the oldest end: the oldest while too many are kept or it has expired.
        while self.closed and (
            len(self.closed) > self.options.max_parked_elicitations_total
            or self.closed[0][2] <= self.now
        ):
            self.closed.pop(0)

    def _retry_denied(
        self,
        conn: Hashable,
        rid: Hashable,
        tool: str,
        detail: str,
        nid: str | None,
        out: list[Effect],
    ) -> None:
        """R-MRTR-8, R-MRTR-13: denied at once, nothing runs."""
        message = modern_complete(deny_message(rid, tool, "ask", detail), self._server_info())
        out.append(Reply(conn, rid, message))
        call = ModelCall(conn, rid, True, tool, None, "reply", None, started=self.now)
        call.approval = nid
        out.append(call_ended(call, self.now, "denied", detail, decision="ask"))

    def _retry(self, ev: ToolCallReceived, modern: Modern, out: list[Effect]) -> None:
        """R-MRTR-13: the tool runs once, only for a valid state whose nonce is parked for this
        owner and an answer that approves."""
        tool, rid, now = str(ev.tool), ev.request_id, ev.now
        assert is_request_id(rid)
        try:
            digest = arguments_digest(ev.arguments)
        except ValueError:
            digest = ""
        opened = open_sealed(self.ring, ev.request_state, modern.principal, tool, digest, now)
        if opened.verdict != "valid":
            self._retry_denied(ev.conn, rid, tool, DENY_DETAIL[opened.verdict], None, out)
            return
        nid = self.nonce_of[opened.nonce]
        nonce = next((n for n in self.nonces if n.id == nid), None)
        if nonce is None:  # R-MRTR-14
            why = next((w for i, w, _ in self.closed if i == nid), ALREADY_USED)
            self._retry_denied(ev.conn, rid, tool, why, nid, out)
            return
        if nonce.owner != modern.owner:
            foreign = DENY_DETAIL["foreign principal"]
            self._retry_denied(ev.conn, rid, tool, foreign, nid, out)
            return
        self._nonce_closed(nonce, ALREADY_USED, out)  # R-CLOSE-3: once
        responses = ev.input_responses
        answer = responses.get(APPROVAL_KEY) if isinstance(responses, dict) else None
        if not approves(answer):  # R-CLOSE-2
            self._retry_denied(ev.conn, rid, tool, refusal_detail(answer), nid, out)
            return
        call = ModelCall(ev.conn, rid, True, tool, ev.arguments, ev.mode, ev.caller)
        call.started = now
        call.modern = modern
        call.owner = modern.owner
        modern.approved = True  # R-MRTR-21: its rounds say so
        job = RunTool(tool, ev.arguments, modern.round())
        self._open(call, RUNNING, job, now, out)  # R-ADM-5
        if any(c is call for c in self.calls):
            call.decision, call.approval = "approved", nid

    # -- a tool's own rounds (R-MRTR-20 .. R-MRTR-23) -------------------------------------------

    def _round(self, call: ModelCall, needs: NeedsInput, now: int, out: list[Effect]) -> None:
        """R-MRTR-20 .. R-MRTR-22: a modern tool ended a round."""
        modern, rid = call.modern, call.request_id
        state = state_bytes(needs.state)
        name, bound = round_binding(call)
        try:
            digest = arguments_digest(bound)
            arguments_digest(needs.requests)
        except ValueError:
            digest = ""
        rounds = modern is not None and modern.rounds
        if not rounds or state is None or not digest or not round_requests_ok(needs.requests):
            if call.is_tool:
                failed = tool_failure_message(rid, "callback_failed")
            else:
                failed = method_failure_message(rid, call.name, "callback_failed")
            self._close(call, failed, out, "failed")
            return
        assert modern is not None
        assert isinstance(needs.requests, dict)
        missing = round_missing(needs.requests, modern.capabilities)
        if missing:  # R-MRTR-22
            data = {"requiredCapabilities": missing}
            error = _error(rid, -32021, "Missing required client capability", data)
            self._close(call, error, out, "error")
            return
        if not self._room(call, modern.owner, out):
            return
        n = self.next_elicitation
        self.next_elicitation += 1
        nonce = ModelNonce(f"{MODEL_NONCE_PREFIX}{n}", modern.owner, 0, self._tick())
        nonce.deadline = now + self.options.elicitation_timeout_ms
        self.nonces.append(nonce)
        self._set_count_changed(modern.owner)
        out.append(StartTimer(("elicitation", nonce.id), nonce.deadline))
        raw = n.to_bytes(16, "big")
        self.nonce_of[raw] = nonce.id
        token = seal_round(
            self.ring, modern.principal, name, digest, raw, now, modern.approved, state
        )
        requests = {
            key: {"method": r["method"], "params": r.get("params", {})}
            for key, r in needs.requests.items()
        }
        result = {
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": token,
            "_meta": {META_SERVER_INFO: self._server_info()},
        }
        fields = {"conn": call.conn, "request_id": rid, "tool": call.name}
        fields["elicitation_id"] = nonce.id
        if call.is_tool:
            out.append(Emit("call_parked", fields))  # R-LOG-3
        self._close(call, _result(rid, result), out, "input_required")

    def _round_retry(self, ev: ToolCallReceived, modern: Modern, out: list[Effect]) -> bool:
        """R-MRTR-23: a round's state is taken once, or refused with ``-32602``; whether the call
        goes on (then ``modern`` says what its tool is told)."""
        tool, rid, now = str(ev.tool), ev.request_id, ev.now
        try:
            digest = arguments_digest(ev.arguments)
        except ValueError:
            digest = ""
        opened = open_round(self.ring, ev.request_state, modern.principal, tool, digest, now)
        reason = None
        nonce = None
        if opened.verdict != "valid":
            reason = DENY_DETAIL[opened.verdict]
        else:
            nid = self.nonce_of[opened.nonce]
            nonce = next((n for n in self.nonces if n.id == nid), None)
            if nonce is None:  # R-MRTR-14
                reason = next((w for i, w, _ in self.closed if i == nid), ALREADY_USED)
            elif nonce.owner != modern.owner:
                reason = DENY_DETAIL["foreign principal"]
        if reason is not None:
            error = _error(rid, -32602, "Invalid request state", {"reason": reason})
            out.append(Reply(ev.conn, rid, error))
            return False
        assert nonce is not None
        self._nonce_closed(nonce, ALREADY_USED, out)
        modern.responses = ev.input_responses
        modern.state = state_value(opened.state)
        if not opened.approved:
            return True  # through the authorizer, as any call
        modern.approved = True
        call = ModelCall(ev.conn, rid, True, tool, ev.arguments, ev.mode, ev.caller)
        call.started = now
        call.modern = modern
        call.owner = modern.owner
        self._open(call, RUNNING, RunTool(tool, ev.arguments, modern.round()), now, out)
        if any(c is call for c in self.calls):
            call.decision, call.approval = "approved", None  # parked under no id (R-LOG-2)
        return False

    def _park(self, call: ModelCall, prompt: str, now: int, out: list[Effect]) -> None:
        """R-PARK-2, R-DLV-3."""
        eid = f"{MODEL_ELICITATION_PREFIX}{self.next_elicitation}"
        self.next_elicitation += 1
        call.stage = PARKED
        call.elicitation_id = eid
        call.decision = "ask"
        call.approval = eid
        call.parked_at = self._tick()
        self._set_count_changed(call.owner)
        deadline = now + self.options.elicitation_timeout_ms
        out.append(StartTimer(("elicitation", eid), deadline))
        prompt_message = elicitation_create_message(
            eid, call.name, prompt, self._with_mode(call.conn)
        )
        if call.conn in self.held:  # R-PARK-8: the client is not initialized yet
            call.held = True
            self.held[call.conn].append((call, prompt_message))
        else:
            out.append(Push(call.conn, prompt_message, call.request_id))
        if call.mode == "push" and not call.replied:
            call.replied = True
            out.append(Reply(call.conn, call.request_id, None))
        fields = {"conn": call.conn, "request_id": call.request_id, "tool": call.name}
        fields["elicitation_id"] = eid
        out.append(Emit("call_parked", fields))  # R-LOG-3

    def _parked_call(self, eid: object) -> ModelCall | None:
        if not isinstance(eid, str):
            return None
        for c in self.calls:
            if c.stage == PARKED and c.elicitation_id == eid:
                return c
        return None

    def _answered(self, ev: ElicitationAnswered, out: list[Effect]) -> None:
        request = self._outstanding(ev.elicitation_id)
        if request is not None:
            self._request_answered(request, ev, out)  # R-CTX-5
            return
        call = self._parked_call(ev.elicitation_id)
        if call is None or call.conn != ev.conn or call.held:
            return  # R-CLOSE-5, R-PARK-9: unknown, late, foreign and unsent look alike
        eid = str(call.elicitation_id)
        self._unpark(call)
        out.append(CancelTimer(("elicitation", eid)))  # R-CLOSE-3
        if ev.error is not None:
            self._deny(call, "ask", ELICITATION_FAILED, out)
        elif approves(ev.result):
            self._run_tool(call, "approved", ev.now, out)  # R-CLOSE-1
        else:
            self._deny(call, "ask", refusal_detail(ev.result), out)  # R-CLOSE-2

    def _timer_fired(self, key: object, now: int, out: list[Effect]) -> None:
        if not isinstance(key, tuple) or len(key) != 2:
            return
        kind, ident = key
        if kind == WINDOW_TIMER:  # R-TASK-4: the window ended with the call open
            call = next((c for c in self.calls if (c.key, c.window) == ident), None)
            if call is not None:
                self._escalate(call, now, out, fired=True)
        elif kind == TTL_TIMER:  # R-TASK-9
            task = self.tasks.get(ident) if isinstance(ident, str) else None
            if task is not None and task.status in TERMINAL:
                del self.tasks[task.id]
        elif kind == "worker" and isinstance(ident, int) and not isinstance(ident, bool):
            self._worker_ended(ident, "timed_out", None, now, out)
        elif kind == CLIENT_REQUEST_TIMER:
            request = self._outstanding(ident)
            if request is not None:
                self._request_timed_out(request, out)  # R-CTX-6
        elif kind == "elicitation":
            nonce = next((n for n in self.nonces if n.id == ident), None)
            if nonce is not None:
                self._nonce_closed(nonce, None, out)  # R-MRTR-15: silent, not remembered
                return
            call = self._parked_call(ident)
            if call is None:
                return
            eid = str(call.elicitation_id)
            held = call.held
            self._unpark(call)
            if not held:  # R-PARK-9
                withdrawn = elicitation_cancelled_message(eid, TIMED_OUT)
                out.append(Push(call.conn, withdrawn, call.request_id))  # R-CLOSE-4
            why = nobody_approved(self.options.elicitation_timeout_ms)
            self._deny(call, "ask", TIMED_OUT, out, why)  # R-CLOSE-2

    # -- a running tool's own requests (R-CTX-1, R-CTX-4 .. R-CTX-6) -----------------------------

    def _running_tool(self, ref: object) -> ModelCall | None:
        """R-CTX-1: the call whose tool runs in worker ``ref``, if it is a running tool."""
        call = self._call_of_worker(ref)
        if call is None or call.stage != RUNNING or not call.is_tool:
            return None
        return call

    def _can_sample(self, conn: Hashable) -> bool:
        """R-CTX-4: a live subscriber and an entry whose ``capabilities.sampling`` is an object."""
        if isinstance(conn, ModelChannel):  # R-TASK-10: as the task's request declared
            task = self.tasks.get(conn.task_id)
            return task is not None and task.status not in TERMINAL and task.can_sample
        e = self.entry(conn)
        return conn in self.subscribed and e is not None and e.can_sample

    def _tool_requested(self, ev: ToolRequested, out: list[Effect]) -> None:
        """R-CTX-4: refused in the spec's order, else pushed to the owner with a timer."""
        ref, token = ev.ref, ev.token
        call = self._running_tool(ref)
        if call is None:
            out.append(Resolve(ref, token, context_failure(NOT_RUNNING)))  # R-CTX-1
            return
        if call.window is not None:  # R-TASK-4: a tool in its window that asks becomes a task
            self._escalate(call, ev.now, out, fired=False)
        if call.modern is not None:  # R-MRTR-17: no request of the server's own in 2026-07-28
            out.append(Resolve(ref, token, context_failure(STATELESS_REQUEST)))
            return
        params = request_params(ev.method, ev.params, self._with_mode(call.conn))
        if params is None:
            out.append(Resolve(ref, token, context_failure(INVALID_REQUEST)))
            return
        method = str(ev.method)
        if method == ELICIT and not self.can_be_asked(call.conn):  # R-CAP-4
            out.append(Resolve(ref, token, context_failure(CLIENT_CANNOT_ELICIT)))
            return
        if method == SAMPLE and not self._can_sample(call.conn):
            out.append(Resolve(ref, token, context_failure(CLIENT_CANNOT_SAMPLE)))
            return
        if len(self.requests_of(ref)) >= self.options.max_client_requests_per_call:
            out.append(Resolve(ref, token, context_failure(TOO_MANY_REQUESTS)))
            return
        request_id = f"{MODEL_REQUEST_PREFIX}{self.next_request}"
        self.next_request += 1
        assert isinstance(ref, int)
        self.requests.append(
            ModelRequest(request_id, call.conn, call.request_id, ref, token, method)
        )
        message = client_request_message(request_id, method, params)
        out.append(Push(call.conn, message, call.request_id))
        deadline = ev.now + self.options.elicitation_timeout_ms
        out.append(StartTimer((CLIENT_REQUEST_TIMER, request_id), deadline))

    def _outstanding(self, request_id: object) -> ModelRequest | None:
        if not isinstance(request_id, str):
            return None
        for r in self.requests:
            if r.id == request_id:
                return r
        return None

    def _request_answered(
        self, request: ModelRequest, ev: ElicitationAnswered, out: list[Effect]
    ) -> None:
        """R-CTX-5: only the owner's answer settles it."""
        if ev.conn != request.conn:
            return  # a foreign answer is ignored (R-CLOSE-5)
        self.requests.remove(request)
        out.append(CancelTimer((CLIENT_REQUEST_TIMER, request.id)))
        outcome: object
        if ev.error is not None:
            outcome = client_error_outcome(ev.error)
        elif isinstance(ev.result, dict):
            outcome = ev.result
        else:
            outcome = context_failure(INVALID_ANSWER)
        out.append(Resolve(request.ref, request.token, outcome))

    def _request_timed_out(self, request: ModelRequest, out: list[Effect]) -> None:
        """R-CTX-6: withdrawn from the owner, and the tool told it timed out."""
        self.requests.remove(request)
        withdrawn = elicitation_cancelled_message(request.id, WITHDRAWN_TIMED_OUT)
        out.append(Push(request.conn, withdrawn, request.request_id))
        out.append(Resolve(request.ref, request.token, context_failure(REQUEST_TIMED_OUT)))

    def _withdraw_requests(self, ref: int, *, notify: bool, out: list[Effect]) -> None:
        """R-CTX-6: the worker ``ref`` ended; its requests are withdrawn, nothing is resolved
        (``notify`` is false when the connection went away)."""
        for request in self.requests_of(ref):
            self.requests.remove(request)
            out.append(CancelTimer((CLIENT_REQUEST_TIMER, request.id)))
            if notify:
                withdrawn = elicitation_cancelled_message(request.id, WITHDRAWN_CANCELLED)
                out.append(Push(request.conn, withdrawn, request.request_id))


__all__ = [
    "ModelCall",
    "ModelRequest",
    "Observation",
    "ReferenceModel",
    "approves",
    "deny_message",
    "elicitation_cancelled_message",
    "elicitation_create_message",
]
