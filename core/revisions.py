"""What differs between protocol revisions: how an approval and a running tool's own requests
look on the wire (spec/revisions.md, R-REV-*).

Parking, caps, eviction and timeouts decide *that* an approval is asked (the call, the prompt,
the minted approval id, the deadline), *that* it is withdrawn, and what an answer means; the
connection's :class:`Revision`, chosen once from its negotiated protocol version by
:func:`revision_for`, renders those decisions as messages. The answer comes back through the
door (:mod:`askgate.core.door`) as an ``ElicitationAnswered`` naming the approval id. No handler
compares version strings: a new revision is a new :class:`Revision` value and its table entries.
"""

from __future__ import annotations

from typing import Any, Final

from . import messages as m
from .decide import can_elicit
from .protocol import LOG_LEVELS, LOG_RANK
from .record import record

JsonObject = dict[str, Any]


@record
class Revision:
    """How one family of protocol versions carries approvals and a tool's requests.

    ``form_mode``: an ``elicitation/create`` names its mode (``"mode": "form"``, R-REV-2).
    """

    name: str
    form_mode: bool

    def ask(self, approval_id: str, tool: str, prompt: str) -> JsonObject:
        """The request that asks the owner to approve the parked call (R-REV-2)."""
        request = m.elicitation_request(approval_id, tool, prompt)
        if not self.form_mode:
            del request["params"]["mode"]
        return request

    def withdraw(self, approval_id: str, reason: str) -> JsonObject:
        """Tells the owner that the approval (or a tool's request) no longer matters (R-REV-3)."""
        return m.elicitation_cancelled(approval_id, reason)

    def request_params(self, method: object, params: object) -> JsonObject | None:
        """The params a running tool's request carries on the wire, or ``None`` when they are
        malformed or the method is not one a tool may send (R-CTX-4, R-REV-4)."""
        if not isinstance(params, dict):
            return None
        if method == "elicitation/create":
            message, schema = params.get("message"), params.get("requestedSchema")
            if not isinstance(message, str) or not isinstance(schema, dict):
                return None
            sent: JsonObject = {"message": message, "requestedSchema": schema}
            return {"mode": "form", **sent} if self.form_mode else sent
        if method == "sampling/createMessage":
            tokens = params.get("maxTokens")
            if not isinstance(params.get("messages"), list) or not (
                isinstance(tokens, int) and not isinstance(tokens, bool)
            ):
                return None
            return dict(params)
        return None

    def tool_request(self, request_id: str, method: str, params: JsonObject) -> JsonObject:
        """A running tool's request to its client, with params from :meth:`request_params`
        (R-REV-4)."""
        return m.client_request(request_id, method, params)


ELICITATION_FORM: Final = Revision("2025-11-25", form_mode=True)
"""2025-11-25: elicitation requests name their mode."""

ELICITATION_PLAIN: Final = Revision("2025 (before 2025-11-25)", form_mode=False)
"""2024-11-05, 2025-03-26 and 2025-06-18: elicitation requests carry no mode."""

REVISIONS: Final[dict[str, Revision]] = {
    "2025-11-25": ELICITATION_FORM,
    "2025-06-18": ELICITATION_PLAIN,
    "2025-03-26": ELICITATION_PLAIN,
    "2024-11-05": ELICITATION_PLAIN,
}
"""Each negotiable protocol version and the revision that renders it (R-REV-1)."""

DEFAULT: Final = ELICITATION_FORM
"""The revision of a connection that negotiated no version (an embedder's connection that never
sent ``initialize``): the latest (R-REV-1)."""


def revision_for(version: str) -> Revision:
    """R-REV-1: the revision of a connection that negotiated ``version`` ("" for none)."""
    return REVISIONS.get(version, DEFAULT)


# ---------------------------------------------------------------------------------------------
# 2026-07-28: stateless requests (spec/modern.md)

META_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"

UNSUPPORTED_VERSION: Final = -32022
"""The modern error for a per-request protocol version the server does not serve."""

INPUT_KEY: Final = "approval"
"""The one key of an approval's ``inputRequests`` and of the retry's ``inputResponses``."""

CACHEABLE: Final = frozenset(
    {
        "server/discover",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
    }
)
"""Methods whose modern results carry ``ttlMs`` and ``cacheScope`` (R-MRTR-11)."""

LEGACY_ONLY: Final = frozenset(
    {"ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"}
)
"""Methods the stateless revision does not have: a modern request for one is an unknown method
(R-MRTR-9)."""


@record
class Stateless:
    """What a modern request says about itself in its ``_meta`` (R-MRTR-9): its revision, the
    client capabilities it declares for this request alone, and the least level of the logs it
    wants (``None``: none, R-MRTR-18)."""

    revision: Revision
    capabilities: JsonObject
    log_level: str | None = None


@record
class Refusal:
    """A modern request's ``_meta`` the server refuses: the JSON-RPC error to answer with
    (R-MRTR-10)."""

    code: int
    message: str
    data: object = None


MODERN: Final = Revision("2026-07-28", form_mode=True)
"""2026-07-28: every request says its version and capabilities; an approval is an
input-required result (spec/modern.md)."""

MODERN_REVISIONS: Final[dict[str, Revision]] = {"2026-07-28": MODERN}
"""Each per-request protocol version served statelessly and its revision (R-MRTR-9)."""


def supported_versions() -> list[str]:
    """Every version this server speaks, the modern ones first (R-MRTR-10, R-MRTR-11)."""
    return [*MODERN_REVISIONS, *REVISIONS]


def request_era(meta: object) -> Stateless | Refusal | None:
    """R-MRTR-9, R-MRTR-10: what a request's ``params._meta`` makes of it. ``None`` when it
    names no protocol version (a 2025 request, served as the connection's revision says); a
    :class:`Stateless` when it names a modern version and declares its capabilities; else the
    :class:`Refusal` to answer."""
    if not isinstance(meta, dict) or META_VERSION not in meta:
        return None
    version = meta[META_VERSION]
    if not isinstance(version, str):
        return Refusal(-32602, f"_meta {META_VERSION} must be a string")
    revision = MODERN_REVISIONS.get(version)
    if revision is None:
        data = {"supported": supported_versions(), "requested": version}
        return Refusal(UNSUPPORTED_VERSION, "Unsupported protocol version", data)
    capabilities = meta.get(META_CAPABILITIES)
    if not isinstance(capabilities, dict):
        return Refusal(-32602, f"_meta {META_CAPABILITIES} is required and must be an object")
    level = meta.get(META_LOG_LEVEL)
    if level is not None and not (isinstance(level, str) and level in LOG_RANK):  # R-MRTR-18
        return Refusal(-32602, f"_meta {META_LOG_LEVEL} must be one of {', '.join(LOG_LEVELS)}")
    return Stateless(revision, capabilities, level)


def complete(message: JsonObject, server_info: JsonObject, cacheable: bool) -> JsonObject:
    """A modern request's final answer (R-MRTR-11): a result gains ``resultType: "complete"``
    and the server's ``serverInfo`` in its ``_meta`` (beside any ``_meta`` it had), and, for a
    cacheable method, ``ttlMs: 0`` and ``cacheScope: "private"`` unless it set them; an error,
    or a result that already says its type, is unchanged."""
    result = message.get("result")
    if not isinstance(result, dict) or "resultType" in result:
        return message
    meta = result.get("_meta")
    shown: JsonObject = {**result, "resultType": "complete"}
    shown["_meta"] = {**(meta if isinstance(meta, dict) else {}), META_SERVER_INFO: server_info}
    if cacheable:
        shown.setdefault("ttlMs", 0)
        shown.setdefault("cacheScope", "private")
    return {**message, "result": shown}


def input_required(
    request_id: object, tool: str, prompt: str, state: str, server_info: JsonObject
) -> JsonObject:
    """The answer that asks a modern client to approve a call (R-MRTR-12): the approval form of
    R-REV-2 (with ``"mode": "form"``) as the one input request under :data:`INPUT_KEY`, and the
    sealed ``requestState``."""
    form = m.elicitation_request("", tool, prompt)["params"]
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {
            "resultType": "input_required",
            "inputRequests": {INPUT_KEY: {"method": "elicitation/create", "params": form}},
            "requestState": state,
            "_meta": {META_SERVER_INFO: server_info},
        },
    }


MISSING_CAPABILITY: Final = -32021
"""The modern error for an input request the client did not declare it can answer (R-MRTR-22)."""

ROUND_READS: Final = frozenset({"prompts/get", "resources/read"})
"""The read methods whose modern requests may end in input-required rounds (R-MRTR-24)."""

MAX_INPUT_REQUESTS: Final = 16
"""The most input requests one round may carry (R-MRTR-20)."""
MAX_INPUT_KEY_CHARS: Final = 64


def round_requests(requests: object) -> JsonObject | None:
    """A round's input requests as they go on the wire, or None when they are not what
    R-MRTR-20 allows: an object of 1 to :data:`MAX_INPUT_REQUESTS` entries, each key a non-empty
    string of at most :data:`MAX_INPUT_KEY_CHARS` characters, each value an object whose
    ``method`` is ``elicitation/create``, ``sampling/createMessage`` or ``roots/list`` and whose
    ``params`` is an object (absent for ``roots/list``: ``{}``)."""
    if not isinstance(requests, dict) or not 1 <= len(requests) <= MAX_INPUT_REQUESTS:
        return None
    shown: JsonObject = {}
    for key, request in requests.items():
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_INPUT_KEY_CHARS:
            return None
        if not isinstance(request, dict) or set(request) - {"method", "params"}:
            return None
        method, params = request.get("method"), request.get("params", {})
        if method not in ("elicitation/create", "sampling/createMessage", "roots/list"):
            return None
        if not isinstance(params, dict):
            return None
        shown[key] = {"method": method, "params": params}
    return shown


def required_capability(request: JsonObject) -> JsonObject:
    """The client capability an input request needs, as ``requiredCapabilities`` names it
    (R-MRTR-22): ``elicitation`` (with ``url`` for a URL-mode elicitation), ``sampling`` or
    ``roots``."""
    method = request["method"]
    if method == "elicitation/create":
        params = request["params"]
        wants_url = isinstance(params, dict) and params.get("mode") == "url"
        return {"elicitation": {"url": {}} if wants_url else {}}
    return {"sampling": {}} if method == "sampling/createMessage" else {"roots": {}}


def declares(capabilities: object, request: JsonObject) -> bool:
    """Whether ``capabilities`` (a modern request's own) let a server send ``request``
    (R-MRTR-22): a form elicitation by R-CAP-4's test, a URL one when ``elicitation.url`` is an
    object, sampling and ``roots/list`` when ``sampling`` or ``roots`` is an object."""
    if not isinstance(capabilities, dict):
        return False
    method = request["method"]
    if method == "elicitation/create":
        params = request["params"]
        if isinstance(params, dict) and params.get("mode") == "url":
            elicitation = capabilities.get("elicitation")
            return isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict)
        return can_elicit(capabilities)
    wanted = "sampling" if method == "sampling/createMessage" else "roots"
    return isinstance(capabilities.get(wanted), dict)


def missing_capabilities(requests: JsonObject, capabilities: object) -> JsonObject:
    """The ``requiredCapabilities`` of the requests ``capabilities`` do not declare, merged
    (R-MRTR-22); empty when every request may be sent."""
    missing: JsonObject = {}
    for request in requests.values():
        if not declares(capabilities, request):
            for name, value in required_capability(request).items():
                held = missing.get(name)
                missing[name] = {**held, **value} if isinstance(held, dict) else value
    return missing


def missing_capability(request_id: object, missing: JsonObject) -> JsonObject:
    """The ``-32021`` answer naming what the client must declare (R-MRTR-22)."""
    data = {"requiredCapabilities": missing}
    return m.error(request_id, MISSING_CAPABILITY, "Missing required client capability", data)  # type: ignore[arg-type]


def round_result(
    request_id: object, requests: JsonObject, state: str, server_info: JsonObject
) -> JsonObject:
    """The input-required answer ending a round (R-MRTR-20): the callback's requests and the
    sealed round state."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": state,
            "_meta": {META_SERVER_INFO: server_info},
        },
    }


INVALID_STATE: Final = "Invalid request state"


def invalid_state(request_id: object, reason: str) -> JsonObject:
    """The ``-32602`` answer refusing a round state (R-MRTR-23), ``reason`` saying why."""
    return m.error(request_id, m.INVALID_PARAMS, INVALID_STATE, {"reason": reason})  # type: ignore[arg-type]


MODERN_CAPABILITIES: Final[JsonObject] = {
    "tools": {"listChanged": True},
    "resources": {"listChanged": True},
    "prompts": {"listChanged": True},
    "completions": {},
    "logging": {},
    "extensions": {"io.modelcontextprotocol/tasks": {}},
}
"""What ``server/discover`` offers: list changes through ``subscriptions/listen`` (R-MRTR-19),
no ``subscribe`` (a listen honours no resource subscription), ``logging`` by each request's own
``logLevel`` (R-MRTR-18), and the tasks extension (spec/tasks.md, R-TASK-2)."""


def discover_result(instructions: object) -> JsonObject:
    """The result of ``server/discover`` before :func:`complete` renders it (R-MRTR-11)."""
    result: JsonObject = {
        "supportedVersions": supported_versions(),
        "capabilities": MODERN_CAPABILITIES,
    }
    if isinstance(instructions, str):
        result["instructions"] = instructions
    return result


# ---------------------------------------------------------------------------------------------
# subscriptions/listen (R-MRTR-19)

LISTEN: Final = "subscriptions/listen"
META_SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"

LISTEN_FLAGS: Final[dict[str, str]] = {
    "toolsListChanged": "tools",
    "promptsListChanged": "prompts",
    "resourcesListChanged": "resources",
}
"""The filter flags a listen honours, each with the kind of list change it asks for."""


def listen_kinds(notifications: JsonObject) -> tuple[str, ...]:
    """The list changes a listen's filter asks for with ``true`` and askgate honours, in
    :data:`LISTEN_FLAGS`' order; nothing else of the filter is honoured (R-MRTR-19)."""
    return tuple(kind for flag, kind in LISTEN_FLAGS.items() if notifications.get(flag) is True)


def acknowledged(subscription_id: object, kinds: tuple[str, ...]) -> JsonObject:
    """``notifications/subscriptions/acknowledged`` for a listen honouring ``kinds``."""
    honoured = {flag: True for flag, kind in LISTEN_FLAGS.items() if kind in kinds}
    return {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {
            "notifications": honoured,
            "_meta": {META_SUBSCRIPTION_ID: subscription_id},
        },
    }


def tagged(message: JsonObject, subscription_id: object) -> JsonObject:
    """``message`` (a notification) as sent on the listen ``subscription_id``: its
    ``params._meta`` names the subscription."""
    params = message.get("params")
    shown: JsonObject = dict(params) if isinstance(params, dict) else {}
    meta = shown.get("_meta")
    shown["_meta"] = {
        **(meta if isinstance(meta, dict) else {}),
        META_SUBSCRIPTION_ID: subscription_id,
    }
    return {**message, "params": shown}


def listen_ended(subscription_id: object, server_info: JsonObject) -> JsonObject:
    """The answer that ends a listen gracefully (the server stops)."""
    result = {"_meta": {META_SUBSCRIPTION_ID: subscription_id}}
    return complete(m.result(subscription_id, result), server_info, False)  # type: ignore[arg-type]
