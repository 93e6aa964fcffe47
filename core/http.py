"""The pure decisions of the Streamable HTTP transport (spec/http.md, R-HTTP-*).

No I/O, no clock, no randomness: the shell (askgate.transports.http) passes in the request's
headers, the bytes it has received, the time and the random bytes a session id is made from,
and performs what these functions return. Header names are lower-case ASCII, as ASGI gives
them; values are the raw bytes decoded as Latin-1.
"""

from __future__ import annotations

import base64
import functools
import ipaddress
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Final, Literal

import attrs
from immutables import Map

from . import door
from .codec import Decoded, ErrorResponse, Notification, Request, Response
from .options import OptionError
from .protocol import SUPPORTED_VERSIONS
from .revisions import META_CAPABILITIES, META_VERSION, MODERN_REVISIONS, UNSUPPORTED_VERSION
from .tools import ToolInfo

DEFAULT_MAX_BODY: Final = 4 * 1024 * 1024
DEFAULT_IDLE_MS: Final = 30 * 60 * 1000
DEFAULT_MAX_SESSIONS: Final = 1024
DEFAULT_VERSION: Final = "2025-03-26"
"""The protocol version assumed when a request carries no ``MCP-Protocol-Version`` (R-HTTP-6)."""
LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")
SESSION_HEADER: Final = "mcp-session-id"
VERSION_HEADER: Final = "mcp-protocol-version"
MIN_SESSION_ENTROPY: Final = 16
LAST_EVENT_ID_HEADER: Final = "last-event-id"
PRIMING_VERSION: Final = "2025-11-25"
"""The first revision whose clients take a priming event (an id and an empty ``data``)."""
DEFAULT_RETRY_MS: Final = 1000
DEFAULT_KEEPALIVE_MS: Final = 15_000
DEFAULT_REPLAY_EVENTS: Final = 256
DEFAULT_REPLAY_BYTES: Final = 1024 * 1024
DEFAULT_REPLAY_TTL_MS: Final = 60_000
DEFAULT_REPLAY_STREAMS: Final = 32
DEFAULT_DRAIN_BYTES: Final = 8 * 1024 * 1024
DEFAULT_DRAIN_MS: Final = 5_000
DEFAULT_BODY_TIMEOUT_MS: Final = 30_000
DEFAULT_HEADER_TIMEOUT_MS: Final = 10_000
DEFAULT_MAX_HEADER_BYTES: Final = 16 * 1024
"""R-HTTP-34: h11's bound on a request head (uvicorn's h11 protocol), and Node's."""
DEFAULT_MAX_HEADERS: Final = 100
"""R-HTTP-34: Apache's ``LimitRequestFields``."""
DEFAULT_MAX_CONNECTIONS: Final = 1000
"""R-HTTP-35: under the 1024 descriptors a process may commonly open."""
DEFAULT_MAX_SESSIONS_PER_PRINCIPAL: Final = 128
"""R-HTTP-36: an eighth of :data:`DEFAULT_MAX_SESSIONS`."""
KEEPALIVE: Final = b": keepalive\n\n"


@attrs.frozen(slots=True)
class Rejection:
    """An HTTP error answer: the status and a short reason (sent as a JSON-RPC error, no id)."""

    status: int
    reason: str


@attrs.frozen(slots=True, cache_hash=True)
class HttpOptions:
    """What the checks allow. ``port`` is the bound port (``None``: any port on a loopback
    name). ``allowed_hosts`` (``host`` or ``host:port``) and ``allowed_origins``
    (``scheme://host[:port]``) are added to the loopback defaults; empty means loopback only,
    never "anything" (R-HTTP-1, R-HTTP-2)."""

    port: int | None = None
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    max_body: int = DEFAULT_MAX_BODY
    idle_ms: int = DEFAULT_IDLE_MS
    max_sessions: int = DEFAULT_MAX_SESSIONS
    retry_ms: int = DEFAULT_RETRY_MS
    keepalive_ms: int = DEFAULT_KEEPALIVE_MS
    replay_events: int = DEFAULT_REPLAY_EVENTS
    replay_bytes: int = DEFAULT_REPLAY_BYTES
    replay_ttl_ms: int = DEFAULT_REPLAY_TTL_MS
    replay_streams: int = DEFAULT_REPLAY_STREAMS
    drain_bytes: int = DEFAULT_DRAIN_BYTES
    drain_ms: int = DEFAULT_DRAIN_MS
    body_timeout_ms: int = DEFAULT_BODY_TIMEOUT_MS
    header_timeout_ms: int = DEFAULT_HEADER_TIMEOUT_MS
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_headers: int = DEFAULT_MAX_HEADERS
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_sessions_per_principal: int = DEFAULT_MAX_SESSIONS_PER_PRINCIPAL

    def __attrs_post_init__(self) -> None:
        for name in (
            "max_body",
            "idle_ms",
            "max_sessions",
            "retry_ms",
            "keepalive_ms",
            "replay_events",
            "replay_bytes",
            "replay_ttl_ms",
            "replay_streams",
            "drain_bytes",
            "drain_ms",
            "body_timeout_ms",
            "header_timeout_ms",
            "max_header_bytes",
            "max_headers",
            "max_connections",
            "max_sessions_per_principal",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"askgate refuses to start: {name}={value!r} must be >= 1")


def _split_host(host: str) -> tuple[str, str | None]:
    """``("name", "port" | None)`` of a Host value; IPv6 literals keep their brackets."""
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return host, None
        rest = host[end + 1 :]
        return host[: end + 1], rest[1:] if rest.startswith(":") else None
    name, sep, port = host.rpartition(":")
    return (name, port) if sep else (host, None)


def host_allowed(host: str | None, options: HttpOptions) -> bool:
    """R-HTTP-1: the Host is a loopback name on the bound port, or in the allowlist."""
    if not host:
        return False
    host = host.strip().lower()
    if host in (h.lower() for h in options.allowed_hosts):
        return True
    name, port = _split_host(host)
    if name not in LOOPBACK_NAMES:
        return False
    if options.port is None:
        return port is None or port.isdigit()
    return port == str(options.port) or (port is None and options.port == 80)


def origin_allowed(origin: str | None, options: HttpOptions) -> bool:
    """R-HTTP-2: no Origin, or an http(s) origin on an allowed loopback host, or listed."""
    if origin is None:
        return True
    origin = origin.strip().lower()
    if origin in (o.lower().rstrip("/") for o in options.allowed_origins):
        return True
    for scheme in ("http://", "https://"):
        if origin.startswith(scheme):
            rest = origin[len(scheme) :]
            if "/" in rest or "@" in rest:
                return False
            name, _ = _split_host(rest)
            return name in LOOPBACK_NAMES and host_allowed(
                rest, attrs.evolve(options, allowed_hosts=())
            )
    return False


def loopback_address(host: str | None) -> bool:
    """Whether ``host`` (an IP address, bracketed or not, or a name) is a loopback address:
    ``localhost`` is the only name that counts."""
    if host is None:
        return False
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def auth_refusal(credentials: bool, challenge: str) -> tuple[Rejection, str]:
    """R-HTTP-9: the answer to a request its authentication provider names no principal for,
    and the ``WWW-Authenticate`` value to send with it (``""``: none). A provider that takes
    ``credentials`` (a token, a key, a callable's own check) refuses with 401 and its
    ``challenge``; one that takes none (loopback peers only) with 403, since nothing the client
    could send would change the answer."""
    if credentials:
        return Rejection(401, "Unauthorized"), challenge
    return Rejection(403, "Forbidden: loopback peers only"), ""


MEMO_VALUE_CHARS: Final = 256
"""Header values up to this length have their verdicts remembered (a client sends the same few
values on every request); longer ones are judged afresh each time, so the memo stays small."""


def reducer_principal(principal: str, credentials: bool) -> str | None:
    """R-HTTP-40: who the reducer is told authenticated a request its provider admitted as
    ``principal``: that principal when the provider takes credentials, else no one (``None``:
    ``--auth none`` names every loopback peer ``local``, which authenticates nobody, so each
    session is an owner of its own, R-PARK-5)."""
    return principal if credentials else None


def check_origin_and_host(headers: Mapping[str, str], options: HttpOptions) -> Rejection | None:
    """R-HTTP-1, R-HTTP-2: every request, before anything else is looked at."""
    origin = headers.get("origin")
    host = headers.get("host")
    if (origin is None or len(origin) <= MEMO_VALUE_CHARS) and (
        host is None or len(host) <= MEMO_VALUE_CHARS
    ):
        return _origin_and_host_memo(origin, host, options)
    return _origin_and_host(origin, host, options)


def _origin_and_host(
    origin: str | None, host: str | None, options: HttpOptions
) -> Rejection | None:
    if not origin_allowed(origin, options):
        return Rejection(403, "Forbidden: Origin not allowed")
    if not host_allowed(host, options):
        return Rejection(421, "Misdirected Request: Host not allowed")
    return None


_origin_and_host_memo = functools.lru_cache(maxsize=128)(_origin_and_host)


def _media_types(value: str) -> list[str]:
    return [part.split(";", 1)[0].strip().lower() for part in value.split(",") if part.strip()]


def _accepts(types: list[str], wanted: str) -> bool:
    major = wanted.split("/", 1)[0]
    return wanted in types or "*/*" in types or f"{major}/*" in types


def check_post_headers(headers: Mapping[str, str]) -> Rejection | None:
    """R-HTTP-3 (Content-Type), R-HTTP-4 (Accept) for a POST."""
    content_type = headers.get("content-type", "")
    accept = headers.get("accept", "")
    if len(content_type) <= MEMO_VALUE_CHARS and len(accept) <= MEMO_VALUE_CHARS:
        return _post_media_memo(content_type, accept)
    return _post_media(content_type, accept)


def _post_media(content_type_value: str, accept_value: str) -> Rejection | None:
    content_type = _media_types(content_type_value)
    if content_type != ["application/json"]:
        return Rejection(415, "Unsupported Media Type: Content-Type must be application/json")
    accept = _media_types(accept_value)
    if not (_accepts(accept, "application/json") and _accepts(accept, "text/event-stream")):
        return Rejection(
            406, "Not Acceptable: Accept must list application/json and text/event-stream"
        )
    return None


_post_media_memo = functools.lru_cache(maxsize=64)(_post_media)


def check_get_headers(headers: Mapping[str, str]) -> Rejection | None:
    """R-HTTP-4 for the standalone stream: a GET must accept text/event-stream."""
    if not _accepts(_media_types(headers.get("accept", "")), "text/event-stream"):
        return Rejection(406, "Not Acceptable: Accept must list text/event-stream")
    return None


def declared_too_large(headers: Mapping[str, str], options: HttpOptions) -> bool:
    """R-HTTP-5: a Content-Length over the cap is refused before reading (a smaller one is
    not believed: :func:`body_too_large` counts what arrives)."""
    length = headers.get("content-length", "").strip()
    return length.isdigit() and int(length) > options.max_body


def body_too_large(received: int, options: HttpOptions) -> bool:
    """R-HTTP-5: the bytes actually received so far exceed the cap."""
    return received > options.max_body


def header_block_too_large(received: int, fields: int, options: HttpOptions) -> Rejection | None:
    """R-HTTP-34: the answer to a request head of which ``received`` bytes (of a whole head:
    its request line, ``name: value`` lines and blank line; of a head not yet whole: the bytes
    read of it) and ``fields`` header fields have arrived, when that is over a bound; else
    ``None``. Also the verdict on a chunked body's trailer section."""
    if received > options.max_header_bytes:
        return Rejection(
            431,
            "Request Header Fields Too Large: the request head is over "
            f"{options.max_header_bytes} bytes",
        )
    if fields > options.max_headers:
        return Rejection(
            431, f"Request Header Fields Too Large: more than {options.max_headers} header fields"
        )
    return None


NOT_FOUND: Final = Rejection(404, "Not Found")
"""A request for a path the app does not serve."""

NOT_RUNNING: Final = Rejection(503, "Service Unavailable: not running")
"""A request to an app that is not running, or is stopping (R-STOP-1, R-HTTP-45)."""

METHOD_NOT_ALLOWED_MCP: Final = Rejection(405, "Method Not Allowed")
"""A request to ``/mcp`` with a method other than POST, GET and DELETE."""

ALLOWED_METHODS: Final = "GET, POST, DELETE"
"""The ``Allow`` header of :data:`METHOD_NOT_ALLOWED_MCP`."""


def unavailable(running: bool, stopping: bool, method: str) -> Rejection | None:
    """R-HTTP-45 (R-STOP-1): the answer to a request that reaches an app not running, or one
    told to stop; while it stops, a DELETE still ends its session (the client's goodbye is
    answered, not refused), every other request is 503. ``None``: served."""
    if not running or (stopping and method != "DELETE"):
        return NOT_RUNNING
    return None


def method_route(method: str) -> Literal["POST", "GET", "DELETE"] | Rejection:
    """How a request to ``/mcp`` is served by its method (R-HTTP-7, R-HTTP-10, R-HTTP-11), or
    405 with :data:`ALLOWED_METHODS`."""
    if method == "POST":
        return "POST"
    if method == "GET":
        return "GET"
    if method == "DELETE":
        return "DELETE"
    return METHOD_NOT_ALLOWED_MCP


UNKNOWN_SESSION: Final = Rejection(404, "Not Found: unknown session")
"""R-HTTP-9, R-HTTP-11: a session that is not (or no longer) this app's."""

SESSION_REQUIRED: Final = Rejection(400, "Bad Request: Mcp-Session-Id required")
"""R-HTTP-9: a POST other than ``initialize`` that names no session."""

ACCEPTED: Final = 202
"""R-HTTP-7: the status of a POST carrying a notification or a response."""


def post_session(named: bool, live: bool, kind: str) -> Literal["session", "mint"] | Rejection:
    """A POST's session once its body is read (R-HTTP-9, R-HTTP-11): the one it names
    (``named``) while it is still ``live`` (not ended by a DELETE or reaped while the body was
    read: else 404), or a new one minted for an ``initialize`` that names none (any other
    ``kind`` of body naming none: 400)."""
    if named:
        return "session" if live else UNKNOWN_SESSION
    return "mint" if kind == "initialize" else SESSION_REQUIRED


TRUSTED_PROXY: Final = "127.0.0.1"
"""R-HTTP-44: the one peer whose ``X-Forwarded-For`` names the client (a proxy on this host)."""


def forwarded_client(peer: str, forwarded_for: str) -> str:
    """R-HTTP-44: the client's address for a request from ``peer`` that carried
    ``X-Forwarded-For: forwarded_for`` (repeated headers joined by commas): from a trusted proxy,
    the nearest address the proxies did not add (the list read from its end), or the first when
    all are trusted; from any other peer, the peer itself."""
    if peer != TRUSTED_PROXY:
        return peer
    hops = [hop.strip() for hop in forwarded_for.split(",")]
    for hop in reversed(hops):
        if hop != TRUSTED_PROXY:
            return hop
    return hops[0]


TOO_MANY_CONNECTIONS: Final = Rejection(503, "Service Unavailable: too many open connections")
"""R-HTTP-35: the answer to a connection past ``max_connections``."""


def connection_refused(admitted: int, options: HttpOptions) -> Rejection | None:
    """R-HTTP-35: the answer to a new connection while ``admitted`` connections are open (not
    counting it), when it would be one too many; else ``None`` (it is admitted)."""
    if admitted >= options.max_connections:
        return TOO_MANY_CONNECTIONS
    return None


BODY_TIMEOUT: Final = Rejection(408, "Request Timeout: the body did not arrive in time")
"""R-HTTP-25: the answer to a body that did not arrive whole within ``body_timeout_ms``."""


def has_body(headers: Mapping[str, str]) -> bool:
    """R-HTTP-24: whether the request announces a body (a ``Content-Length`` other than 0, or a
    ``Transfer-Encoding``), which a response started before reading it must drain."""
    if "transfer-encoding" in headers:
        return True
    length = headers.get("content-length", "").strip()
    return length != "" and length.strip("0") != ""


def drain_over(discarded: int, options: HttpOptions) -> bool:
    """R-HTTP-24: a refused request's body has been drained as far as it will be: more than
    ``drain_bytes`` discarded (the connection closes even if the client is still writing)."""
    return discarded > options.drain_bytes


def check_version(headers: Mapping[str, str]) -> tuple[str, Rejection | None]:
    """R-HTTP-6: the ``MCP-Protocol-Version`` in force; absent means 2025-03-26."""
    version = headers.get(VERSION_HEADER)
    if version is None:
        return DEFAULT_VERSION, None
    version = version.strip()
    if version not in SUPPORTED_VERSIONS:
        return version, Rejection(400, "Bad Request: Unsupported MCP-Protocol-Version")
    return version, None


def post_version(headers: Mapping[str, str]) -> tuple[str, Rejection | None, Rejection | None]:
    """R-HTTP-6 for a POST: the version in force, the rejection due before the body is read,
    and the one deferred until it is (R-HTTP-26: a POST naming no session may be a modern
    request, whose body decides; a session's POST is refused at once)."""
    version, rejection = check_version(headers)
    if rejection is not None and SESSION_HEADER not in headers:
        return version, None, rejection
    return version, rejection, None


# -- the POST body ------------------------------------------------------------------------------


@attrs.frozen(slots=True)
class Body:
    """What a POST carried: ``kind`` is ``request``, ``initialize``, ``notification``,
    ``response`` or ``invalid``; ``request_id`` is set for requests."""

    kind: str
    request_id: object = None


def classify(decoded: Decoded) -> Body:
    """R-HTTP-7: how the shell answers the POST whose body :func:`askgate.core.codec.decode`
    made ``decoded`` (a stream or JSON for a request, 202 for a notification or a response); the
    reducer, fed the same value, decides what the message means (R-HTTP-23)."""
    if isinstance(decoded, Request):
        kind = "initialize" if door.opens_session(decoded) else "request"
        return Body(kind, decoded.id)
    if isinstance(decoded, Notification):
        return Body("notification")
    if isinstance(decoded, Response | ErrorResponse):
        return Body("response")
    return Body("invalid")


# -- where a push goes --------------------------------------------------------------------------


@attrs.frozen(slots=True)
class PushRoute:
    """R-HTTP-12: where the shell sends a push, tried in this order.

    ``call``: the id of the request whose open POST stream takes it (``None``: no call).
    ``withdraws``: the id of the server request a ``notifications/cancelled`` withdraws; the
    stream that carried that request takes it when ``call`` names no open stream, and forgets it.
    ``remember``: the id of a server request (an elicitation, a tool's own request) for the
    stream that takes it to remember, so that its withdrawal follows it. Otherwise the GET
    stream takes the push, or nothing does.
    """

    call: object = None
    withdraws: str | None = None
    remember: str | None = None


def route_push(message: Mapping[str, object], related: object) -> PushRoute:
    """R-HTTP-12: the route of a push ``message``, ``related`` to the request it is about."""
    method = message.get("method")
    withdraws = None
    if method == "notifications/cancelled":
        params = message.get("params")
        target = params.get("requestId") if isinstance(params, Mapping) else None
        withdraws = target if isinstance(target, str) else None
    request_id = message.get("id")
    remember = request_id if isinstance(method, str) and isinstance(request_id, str) else None
    return PushRoute(related, withdraws, remember)


Taker = Literal["call", "carrier", "get"]
"""The streams a push may go to (R-HTTP-12): the open POST stream of the call it is related
to, the stream that carried the server request it withdraws, the session's GET stream."""


@attrs.frozen(slots=True)
class PushTarget:
    """R-HTTP-12: what the shell does with a push. ``stream`` takes it (``None``: it is
    dropped); that stream remembers ``remember`` (a server request it carries, whose withdrawal
    follows it); ``forget`` (the server request the push withdraws) is forgotten, whichever
    stream takes the push."""

    stream: Taker | None
    remember: str | None = None
    forget: str | None = None


def push_target(route: PushRoute, *, call: bool, carrier: bool, get: bool) -> PushTarget:
    """R-HTTP-12: which stream takes a push of ``route``, given which of them is open: ``call``,
    the POST stream of ``route.call``; ``carrier``, the stream that carried ``route.withdraws``;
    ``get``, the session's GET stream. Tried in that order; none open: the push is dropped. Only
    a call's stream or a carrier remembers the server request a push makes (the GET stream is
    not a call's, so a withdrawal finds it by falling back to the GET stream anyway)."""
    if call and route.call is not None:
        return PushTarget("call", route.remember, route.withdraws)
    if carrier and route.withdraws is not None:
        return PushTarget("carrier", route.remember, route.withdraws)
    return PushTarget("get" if get else None, None, route.withdraws)


def request_answer(done: bool, events: int, replied: bool) -> Literal["json", "nothing", "stream"]:
    """R-HTTP-7: how a request's POST is answered, once the first message about its call is
    known (or the wait for one ended): its JSON reply when the call ended with a reply and
    nothing came before it; a stream carrying nothing when it ended with no answer (cancelled,
    its session ended; never a 202, which answers notifications); else an SSE stream."""
    if done and not events:
        return "json" if replied else "nothing"
    return "stream"


# -- resumable streams (R-HTTP-17 .. R-HTTP-22) ---------------------------------------------


def stream_tag(random: bytes) -> str:
    """R-HTTP-17: a stream's tag, made from ``random`` alone (at least 16 bytes from the shell's
    ``secrets``): URL-safe base64, no dot, so ``TAG.N`` splits one way only."""
    if len(random) < MIN_SESSION_ENTROPY:
        raise ValueError("a stream tag needs at least 16 random bytes")
    return base64.urlsafe_b64encode(random).rstrip(b"=").decode("ascii")


def event_id(tag: str, number: int) -> str:
    """R-HTTP-17: the id of event ``number`` of stream ``tag`` (0: the priming event)."""
    return f"{tag}.{number}"


def parse_event_id(value: str | None) -> tuple[str, int] | None:
    """R-HTTP-20: ``(tag, number)`` of a ``Last-Event-ID``, or ``None`` when it is not one of
    ours (absent, empty, malformed)."""
    if not value:
        return None
    tag, sep, number = value.strip().rpartition(".")
    if not sep or not tag or not number.isascii() or not number.isdigit() or len(number) > 18:
        return None
    return tag, int(number)


def primes(version: str) -> bool:
    """R-HTTP-18: whether a stream answering a request of ``version`` opens with a priming
    event (and so may have its connection closed early)."""
    return version >= PRIMING_VERSION


def sse_event(eid: str, data: bytes) -> bytes:
    """R-HTTP-17: one message as an SSE event with its id (the codec's JSON has no newline)."""
    return b"id: " + eid.encode("ascii") + b"\nevent: message\ndata: " + data + b"\n\n"


def priming_event(eid: str, retry_ms: int) -> bytes:
    """R-HTTP-18: an id, the ``retry`` the client waits before reconnecting, empty data."""
    return f"id: {eid}\nretry: {retry_ms}\ndata: \n\n".encode("ascii")


STALL_BYTES: Final = 4 * 1024 * 1024
"""R-HTTP-19, R-HTTP-16: bytes a connection has not written above which its reader stalled."""


def stalled(unwritten: int) -> bool:
    """R-HTTP-19: a connection with more than :data:`STALL_BYTES` not yet written has a reader
    that stopped reading: the shell closes it (a Streamable HTTP stream goes on without it; a
    2024-11-05 ``/sse`` stream, which is its session, ends, R-HTTP-16)."""
    return unwritten > STALL_BYTES


def trim_limit(last: int, cursor: int, *, writing: bool, opened: bool, unwritten: int) -> int:
    """R-HTTP-19: the newest event of a stream's buffer that trimming may drop. With a
    connection writing the stream (``writing``), or before its first connection (not yet
    ``opened``) while what waits for that connection is under the stall cap: the last event the
    connection took (``cursor``), so nothing unwritten is dropped. Otherwise any event up to the
    newest (``last``)."""
    if writing or (not opened and not stalled(unwritten)):
        return cursor
    return last


def trim_count(
    log: Iterable[tuple[int, bytes]], events: int, size: int, limit: int, options: HttpOptions
) -> int:
    """R-HTTP-19: how many of the oldest events of a buffer to drop. ``log`` holds its
    ``events`` events, ``(number, data)`` oldest first, ``size`` bytes of data in all; they go
    while the buffer is over the bounds, never the newest, never one numbered after ``limit``
    (:func:`trim_limit`)."""
    dropped = 0
    for number, data in log:
        left = events - dropped
        if left <= 1 or number > limit or not over_replay_bounds(left, size, options):
            break
        dropped += 1
        size -= len(data)
    return dropped


def over_replay_bounds(events: int, size: int, options: HttpOptions) -> bool:
    """R-HTTP-19: a buffer of ``events`` events, ``size`` bytes, must drop its oldest (the
    shell never drops the newest, nor one its connection has not written)."""
    return events > options.replay_events or size > options.replay_bytes


@attrs.frozen(slots=True)
class StreamView:
    """What a resume decision needs to know of a kept stream: the number of its oldest event
    still buffered (``last + 1`` when none is), of its newest, and when it ended (``None``:
    it has not)."""

    first: int
    last: int
    ended_at: int | None = None


RESUME_REFUSED: Final = Rejection(400, "Bad Request: unknown or expired Last-Event-ID")


def expired(ended_at: int | None, now: int, options: HttpOptions) -> bool:
    """R-HTTP-19: an ended stream is forgotten ``replay_ttl_ms`` after it ended."""
    return ended_at is not None and now - ended_at >= options.replay_ttl_ms


def resume(
    stream: StreamView | None, number: int, now: int, options: HttpOptions
) -> Rejection | None:
    """R-HTTP-20: ``None`` when a GET whose ``Last-Event-ID`` is event ``number`` of ``stream``
    (``None``: no such stream in this session) can be resumed: every event after it is still
    buffered. Otherwise the one refusal, whatever the reason."""
    if stream is None or expired(stream.ended_at, now, options):
        return RESUME_REFUSED
    if number > stream.last or number < stream.first - 1:
        return RESUME_REFUSED
    return None


def forget(ended: Sequence[tuple[str, int]], now: int, options: HttpOptions) -> tuple[str, ...]:
    """R-HTTP-19: the tags of the ended streams to forget, given ``(tag, ended_at)`` oldest
    first: the oldest beyond ``replay_streams``, and the expired ones from the oldest up to the
    first that is not (this runs whenever a stream ends, so it stops there rather than scan
    them all). One listed out of order waits for those before it; resuming checks a stream's
    time itself, so an expired stream is never resumed either way."""
    extra = len(ended) - options.replay_streams
    gone: list[str] = []
    for index, (tag, ended_at) in enumerate(ended):
        if index >= extra and not expired(ended_at, now, options):
            break
        gone.append(tag)
    return tuple(gone)


# -- sessions ----------------------------------------------------------------------------------


@attrs.frozen(slots=True)
class Session:
    """One session: its id, the principal that created it, its reducer connection id, when it
    was last used, and how many of its HTTP streams are open (a session with one is not idle)."""

    id: str
    principal: str
    conn: Hashable
    last_seen: int
    open_streams: int = 0
    get_open: bool = False


@attrs.frozen(slots=True)
class Sessions:
    """The session table, an immutable value (R-HTTP-8 .. R-HTTP-11)."""

    by_id: Map[str, Session] = attrs.field(factory=Map)
    next_conn: int = 0

    def __len__(self) -> int:
        return len(self.by_id)


PRINCIPAL_SESSIONS: Final = Rejection(
    429, "Too Many Requests: too many sessions for this principal"
)
"""R-HTTP-36: the answer to an ``initialize`` of a principal holding its quota of sessions."""


def mint(
    table: Sessions, random: bytes, principal: str, now: int, options: HttpOptions
) -> tuple[Sessions, Session | Rejection]:
    """R-HTTP-8: a new session for ``principal``; its id is made from ``random`` alone
    (at least 16 bytes from the shell's ``secrets``), visible ASCII only. Refused 503 at
    ``max_sessions`` in all, 429 at ``max_sessions_per_principal`` of this principal's
    (R-HTTP-36; counted only once the table holds that many, so a small table costs nothing)."""
    if len(random) < MIN_SESSION_ENTROPY:
        raise ValueError("a session id needs at least 16 random bytes")
    held = len(table.by_id)
    if held >= options.max_sessions:
        return table, Rejection(503, "Service Unavailable: too many sessions")
    quota = options.max_sessions_per_principal
    if held >= quota and sum(s.principal == principal for s in table.by_id.values()) >= quota:
        return table, PRINCIPAL_SESSIONS
    sid = base64.urlsafe_b64encode(random).rstrip(b"=").decode("ascii")
    if sid in table.by_id:
        raise ValueError("session id collision: the random bytes were reused")
    session = Session(sid, principal, ("http", table.next_conn), now)
    return Sessions(table.by_id.set(sid, session), table.next_conn + 1), session


def lookup(
    table: Sessions, sid: str | None, principal: str, *, initialize: bool = False
) -> Session | Rejection | None:
    """R-HTTP-9: the session a request names. ``None`` only for an ``initialize`` without one
    (a new session). No id on any other request: 400. An unknown or ended id, or one another
    principal created: the same 404."""
    if sid is None:
        return None if initialize else Rejection(400, "Bad Request: Mcp-Session-Id required")
    session = table.by_id.get(sid)
    if session is None or session.principal != principal:
        return Rejection(404, "Not Found: unknown session")
    return session


def _replace(table: Sessions, session: Session) -> Sessions:
    return Sessions(table.by_id.set(session.id, session), table.next_conn)


TOUCH_SHARE: Final = 64
"""R-HTTP-11: a request moves its session's recorded last use only once more than ``idle_ms``
divided by this (at most a second) has passed since the recorded one."""


def touch_resolution(options: HttpOptions) -> int:
    """R-HTTP-11: the milliseconds within which a request leaves its session's recorded last
    use where it is (``within`` of :func:`touch`): ``idle_ms // 64``, at most 1000.
    :func:`reap` waits that much more, so a session is reaped at most that much after
    ``idle_ms`` has passed since its last request, and never before."""
    return max(0, min(1000, options.idle_ms // TOUCH_SHARE))


def touch(table: Sessions, sid: str, now: int, streams: int = 0, within: int = 0) -> Sessions:
    """The session was used at ``now``; ``streams`` opened (+1) or closed (-1) a stream. A use
    at most ``within`` ms after the recorded one changes nothing (R-HTTP-11: the table is not
    rebuilt on every request; :func:`touch_resolution`)."""
    session = table.by_id.get(sid)
    if session is None:
        return table
    if streams == 0 and 0 <= now - session.last_seen <= within:
        return table  # nothing changes (requests in the same millisecond, or within)
    opened = max(0, session.open_streams + streams)
    s = session  # on every request: built directly, not through attrs.evolve
    return _replace(table, Session(s.id, s.principal, s.conn, now, opened, s.get_open))


def open_get(table: Sessions, sid: str, now: int) -> tuple[Sessions, Rejection | None]:
    """R-HTTP-10: one standalone GET stream per session; a second concurrent one is 409."""
    session = table.by_id.get(sid)
    if session is None:
        return table, Rejection(404, "Not Found: unknown session")
    if session.get_open:
        return table, Rejection(409, "Conflict: this session already has a GET stream")
    return _replace(table, attrs.evolve(session, get_open=True, last_seen=now)), None


def close_get(table: Sessions, sid: str, now: int) -> Sessions:
    session = table.by_id.get(sid)
    if session is None or not session.get_open:
        return table
    return _replace(table, attrs.evolve(session, get_open=False, last_seen=now))


def end(table: Sessions, sid: str) -> tuple[Sessions, Session | None]:
    """R-HTTP-11: the session ends (DELETE, reaping); the shell detaches its connection."""
    session = table.by_id.get(sid)
    if session is None:
        return table, None
    return attrs.evolve(table, by_id=table.by_id.delete(sid)), session


def reap(table: Sessions, now: int, options: HttpOptions) -> tuple[Sessions, tuple[Session, ...]]:
    """R-HTTP-11: ends every session with no open stream unused for ``idle_ms``. Its recorded
    last use may be up to :func:`touch_resolution` older than its last request, so a session is
    ended once that much more has passed: never before ``idle_ms``, at most that much after."""
    after = options.idle_ms + touch_resolution(options)
    idle = tuple(
        s for s in table.by_id.values() if s.open_streams == 0 and now - s.last_seen >= after
    )
    if not idle:
        return table, ()
    by_id = table.by_id.mutate()
    for session in idle:
        del by_id[session.id]
    return attrs.evolve(table, by_id=by_id.finish()), idle


# -- the deployment guard -----------------------------------------------------------------------


@attrs.frozen(slots=True)
class Listen:
    """R-HTTP-13: where ``askgate serve --http`` or ``Server.run_http`` listens, once nothing
    refuses it."""

    host: str
    port: int


Wording = Literal["python", "cli"]
"""Whose words a refusal uses: a Python caller's (parameters) or the command's (flags)."""


def deployment_refusal(
    configured_authorizer: bool, read_authorizer: bool, wording: Wording = "python"
) -> str | None:
    """R-HTTP-13: why a network transport refuses to start, or ``None``. One decision, said in
    the caller's words: ``"python"`` names the ``Server`` parameters, ``"cli"`` the flags."""
    missing = []
    if not configured_authorizer:
        missing.append("no tool authorizer was configured")
    if not read_authorizer:
        missing.append("no read authorizer")
    if not missing:
        return None
    if wording == "cli":
        return (
            "askgate refuses to start: --http needs --policy FILE (" + "; ".join(missing) + "). "
            'A policy file whose [[tools]] and [[reads]] allow match = "*" is an explicit '
            "opt-out; a served Server may instead bring its own authorizer "
            '(authorizer_source="configured") and read_authorizer.'
        )
    python = []
    if not configured_authorizer:
        python.append(
            "no tool authorizer was configured "
            '(pass authorizer=... with authorizer_source="configured")'
        )
    if not read_authorizer:
        python.append("no read authorizer (pass read_authorizer=...)")
    return (
        "askgate refuses to serve over the network: "
        + "; ".join(python)
        + ". To serve anyway, configure them explicitly: an allow-all policy "
        '(authorizer=lambda *a: Allow(), authorizer_source="configured", '
        "read_authorizer=lambda *a: Allow()) is an explicit opt-out."
    )


MAX_PORT: Final = 65535
"""The largest TCP port (R-HTTP-13)."""


def listen_or_refuse(
    address: str,
    auth: str,
    tokens: str | None,
    token_error: str | None,
    configured_authorizer: bool,
    read_authorizer: bool,
) -> Listen | str:
    """R-HTTP-13: what ``askgate serve --http ADDRESS`` does: where it listens, or the message
    it refuses to start with (exit status 2), in the command's words. ``auth`` is ``--auth``
    (``none``, ``bearer``, ``apikey``), ``tokens`` the ``--tokens`` file named (``None``:
    none), ``token_error`` why that file could not be used (the shell reads it, only for
    ``bearer`` and ``apikey``), and the two booleans what :func:`deployment_refusal` takes.
    Checked in this order: the address is ``HOST:PORT``; ``--auth none`` takes no tokens and
    listens on a loopback address only (it admits loopback peers only); another ``--auth``
    needs a usable tokens file; then the deployment guard."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not (port_text.isascii() and port_text.isdigit()) or not host:
        return f"askgate: --http wants HOST:PORT, got {address!r}"
    if int(port_text) > MAX_PORT:
        return f"askgate: --http wants a PORT from 0 to {MAX_PORT}, got {address!r}"
    if auth == "none":
        if tokens is not None:
            return "askgate: --tokens needs --auth bearer or --auth apikey"
        if not loopback_address(host):
            return (
                f"askgate refuses to start: --http {address} is not a loopback address and "
                "--auth none admits loopback peers only; use --auth bearer|apikey --tokens FILE"
            )
    else:
        if not tokens:
            return f"askgate: --auth {auth} needs --tokens FILE"
        if token_error is not None:
            return f"askgate refuses to start: {token_error}"
    refusal = deployment_refusal(configured_authorizer, read_authorizer, "cli")
    if refusal is not None:
        return refusal
    return Listen(host, int(port_text))


def run_http_refusal(
    host: str,
    port: object,
    loopback_only: bool,
    configured_authorizer: bool,
    read_authorizer: bool,
) -> str | None:
    """R-HTTP-13: why ``Server.run_http(host, port, auth=...)`` refuses to start (it returns
    exit status 2), in a Python caller's words, or ``None``. ``loopback_only`` says the
    authentication admits loopback peers only (``auth=None``). Checked in the order of
    :func:`listen_or_refuse`: the port is an integer from 0 to 65535; loopback-only
    authentication listens on a loopback address only; then the deployment guard."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= MAX_PORT:
        return f"askgate refuses to start: port={port!r} must be an integer from 0 to {MAX_PORT}"
    if loopback_only and not loopback_address(host):
        return (
            f"askgate refuses to start: host={host!r} is not a loopback address and auth=None "
            "admits loopback peers only; pass auth=BearerAuth(tokens) or ApiKeyAuth(tokens)"
        )
    refusal = deployment_refusal(configured_authorizer, read_authorizer)
    return None if refusal is None else str(OptionError("authorizer", None, refusal))


# -- the 2026-07-28 revision over HTTP (R-HTTP-26 ..) -------------------------------------------

METHOD_HEADER: Final = "mcp-method"
NAME_HEADER: Final = "mcp-name"
HEADER_MISMATCH: Final = -32020
"""The modern error for routing headers that disagree with the body (R-HTTP-27)."""
NAME_PARAMS: Final[Mapping[str, str]] = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",  # spec/tasks.md: the task a tasks/* request names (SEP-2663)
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
"""The methods whose ``Mcp-Name`` header mirrors a param, and that param (R-HTTP-27)."""
MODERN_STATUS: Final[Mapping[int, int]] = {
    -32700: 400,
    -32600: 400,
    -32602: 400,
    HEADER_MISMATCH: 400,
    -32021: 400,
    UNSUPPORTED_VERSION: 400,
    -32601: 404,
}
"""R-HTTP-28: the HTTP status of a modern request's JSON error answer, by its code (any other
code, and every result, is 200)."""


@attrs.frozen(slots=True)
class ModernRefusal:
    """R-HTTP-27: a modern request refused before it reaches the reducer: the HTTP status and
    the JSON-RPC error, answered under the request's own id."""

    status: int
    code: int
    message: str
    request_id: object = None

    def answer(self) -> dict[str, object]:
        """The JSON-RPC error message this refusal is sent as."""
        error = {"code": self.code, "message": self.message}
        return {"jsonrpc": "2.0", "id": self.request_id, "error": error}


def modern_header(headers: Mapping[str, str]) -> bool:
    """R-HTTP-26: the request's ``MCP-Protocol-Version`` names a version served statelessly."""
    return headers.get(VERSION_HEADER, "").strip() in MODERN_REVISIONS


_FIELD_VALUE: Final = re.compile(r"[\t\x20-\x7e]*")
"""RFC 9110 field-value characters, as the revision allows them: visible ASCII, space, tab."""
BASE64_PREFIX: Final = "=?base64?"
BASE64_SUFFIX: Final = "?="


def header_text(value: str) -> str:
    """R-HTTP-27, R-HTTP-47: an ``Mcp-Name`` or ``Mcp-Param-*`` value as the client meant it:
    the whitespace around it removed (RFC 9110), and one written ``=?base64?...?=`` (exactly
    so) decoded. ``ValueError``, with the reason, for a character other than visible ASCII,
    space and tab, or a wrapped value that is not canonical base64 (padding included) of
    UTF-8."""
    value = value.strip(" \t")
    if _FIELD_VALUE.fullmatch(value) is None:
        raise ValueError("has a character other than visible ASCII, space and tab")
    wrapped = value.startswith(BASE64_PREFIX) and value.endswith(BASE64_SUFFIX)
    if not wrapped or len(value) < len(BASE64_PREFIX) + len(BASE64_SUFFIX):
        return value
    payload = value[len(BASE64_PREFIX) : -len(BASE64_SUFFIX)]
    try:
        raw = base64.b64decode(payload, validate=True)
        if base64.b64encode(raw).decode("ascii") != payload:
            raise ValueError("not canonical")
        return raw.decode("utf-8")
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise ValueError("is not canonical base64 of UTF-8 inside =?base64?...?=") from None


def _header_value(value: str | None) -> str | None:
    """An ``Mcp-Name`` value as :func:`header_text` reads it; a malformed one is no value, so it
    never matches (R-HTTP-27)."""
    if value is None:
        return None
    try:
        return header_text(value)
    except ValueError:
        return None


_NUMBER: Final = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]{1,9})?")
"""A number as a header may write it; the exponent bounded, so :class:`Decimal` takes it."""


def _mirrors(text: str, value: str | float) -> bool:
    """R-HTTP-47: whether a header's decoded ``text`` is the argument ``value``: a string as it
    is, a boolean as ``true`` or ``false``, a number numerically."""
    if isinstance(value, bool):
        return text == ("true" if value else "false")
    if isinstance(value, str):
        return text == value
    return _NUMBER.fullmatch(text) is not None and Decimal(text) == Decimal(value)


def _argument_at(arguments: object, path: tuple[str, ...]) -> str | float | None:
    """The value at ``path`` (``properties`` keys) in a call's ``arguments`` that a client
    mirrors (a string, a number, a boolean); ``None`` when there is none (``null``, an object
    or an array is none: no header can carry it, R-HTTP-47)."""
    value = arguments
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value if isinstance(value, (str, int, float)) else None


def param_header_problem(
    headers: Mapping[str, str], tools: Mapping[str, ToolInfo], params: Mapping[str, object]
) -> str | None:
    """R-HTTP-47: what is wrong, one line, with the ``Mcp-Param-*`` headers of a ``tools/call``
    whose ``params`` name a tool of ``tools`` that marks parameters ``x-mcp-header``, or
    ``None``: for each marked parameter, a value and no header, a header and no value, a
    header that :func:`header_text` refuses, or one that does not mirror the value."""
    name = params.get("name")
    tool = tools.get(name) if isinstance(name, str) else None
    if tool is None or not tool.param_headers:
        return None
    arguments = params.get("arguments")
    for mark in tool.param_headers:
        where = "arguments." + ".".join(mark.path)
        value = _argument_at(arguments, mark.path)
        raw = headers.get(mark.field)
        if raw is None:
            if value is not None:
                return f"Header mismatch: {mark.header} header is missing but {where} is given"
            continue
        if value is None:
            return f"Header mismatch: {mark.header} header is sent but {where} is not given"
        try:
            text = header_text(raw)
        except ValueError as bad:
            return f"Header mismatch: {mark.header} header value {bad}"
        if not _mirrors(text, value):
            return f"Header mismatch: {mark.header} header value does not match {where}"
    return None


Sessionless = Literal["session", "stateless"]


NO_TOOLS: Final[Mapping[str, ToolInfo]] = Map()


def sessionless(
    headers: Mapping[str, str], decoded: Decoded, tools: Mapping[str, ToolInfo] = NO_TOOLS
) -> Sessionless | ModernRefusal:
    """R-HTTP-26, R-HTTP-27: how a POST that names no session is served, once its body is
    decoded. ``"stateless"``: a modern request, served on its own through the reducer. A
    request is modern when its ``params._meta`` names a protocol version or its
    ``MCP-Protocol-Version`` header names a modern one; an ``initialize`` that is not modern
    opens a session, and anything else that is not modern is ``"session"`` too (answered as the
    session rules say: an ``initialize`` mints one, the rest needs one). A modern request is
    refused, in this order: an ``initialize`` (the stateless revision has none) 404 ``-32601``;
    a ``_meta`` that is not an object or lacks the protocol version or the client capabilities
    400 ``-32602``; an ``MCP-Protocol-Version`` other than the ``_meta``'s version, an
    ``Mcp-Method`` other than the method, or, for ``tools/call``, ``prompts/get`` and
    ``resources/read``, an ``Mcp-Name`` other than the named param, 400 ``-32020``; then a
    ``tools/call`` of a tool of ``tools`` (the registered ones) whose ``Mcp-Param-*`` headers
    do not mirror its marked arguments, 400 ``-32020`` (R-HTTP-47). What the version means
    (``-32022``, ``-32602`` for a malformed one) is the reducer's (R-MRTR-10)."""
    if not isinstance(decoded, Request):
        return "session"
    params = decoded.params
    meta = params.get("_meta") if isinstance(params, dict) else None
    modern = (isinstance(meta, dict) and META_VERSION in meta) or modern_header(headers)
    if not modern:
        return "session"
    rid = decoded.id
    if door.opens_session(decoded):
        return ModernRefusal(404, -32601, "Method not found: initialize", rid)
    if not isinstance(meta, dict) or META_VERSION not in meta or META_CAPABILITIES not in meta:
        message = f"params._meta must carry {META_VERSION} and {META_CAPABILITIES}"
        return ModernRefusal(400, -32602, message, rid)
    version = headers.get(VERSION_HEADER)
    if version is None or version.strip() != meta[META_VERSION]:
        message = "MCP-Protocol-Version header does not match the request's protocol version"
        return ModernRefusal(400, HEADER_MISMATCH, message, rid)
    if headers.get(METHOD_HEADER, "").strip(" \t") != decoded.method:
        return ModernRefusal(
            400, HEADER_MISMATCH, "Mcp-Method header does not match the method", rid
        )
    key = NAME_PARAMS.get(decoded.method)
    named = None if key is None or not isinstance(params, dict) else params.get(key)
    if named is not None and _header_value(headers.get(NAME_HEADER)) != named:
        message = f"Mcp-Name header does not match the request's {key}"
        return ModernRefusal(400, HEADER_MISMATCH, message, rid)
    if decoded.method == "tools/call" and isinstance(params, dict):
        problem = param_header_problem(headers, tools, params)  # R-HTTP-47
        if problem is not None:
            return ModernRefusal(400, HEADER_MISMATCH, problem, rid)
    return "stateless"


def modern_status(message: Mapping[str, object] | None) -> int:
    """R-HTTP-28: the status of a modern request's JSON answer: its error's code mapped by
    :data:`MODERN_STATUS`, else 200."""
    error = None if message is None else message.get("error")
    code = error.get("code") if isinstance(error, Mapping) else None
    return MODERN_STATUS.get(code, 200) if isinstance(code, int) else 200


METHOD_NOT_ALLOWED: Final = Rejection(405, "Method Not Allowed: a modern request is a POST")


def modern_get_or_delete(headers: Mapping[str, str]) -> Rejection | None:
    """R-HTTP-26: a GET or a DELETE that names no session and a modern ``MCP-Protocol-Version``
    is 405 (the stateless revision is POST only); ``None`` for any other, served as before."""
    if SESSION_HEADER not in headers and modern_header(headers):
        return METHOD_NOT_ALLOWED
    return None
