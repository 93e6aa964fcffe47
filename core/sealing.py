"""The sealed approval state of the 2026-07-28 revision: ``requestState`` (spec/modern.md).

An ASK in the modern era is answered with an input-required result whose ``requestState`` is a
token sealed here; the client's retry echoes it, and :func:`open_sealed` says whether it is the
token this server minted for that principal, tool and arguments, and still in time. Single use
is not decided here: the nonce a valid token carries names the parked call, which the reducer
closes once (spec/modern.md, "Planned rules").

Pure like the rest of ``core/``: no clock (``now`` is an argument, in milliseconds), no
randomness (the nonce is an argument; the shell draws it from ``secrets``), no I/O (key bytes
come in from the shell). HMAC-SHA256 from the standard library; every comparison of a MAC or a
tag is constant-time (:func:`hmac.compare_digest`).

The token, before base64url (unpadded), is::

    version (1 byte, 1) | key id length (1) | key id (1..16, ASCII) | nonce (16)
    | expiry (8, unsigned big-endian ms) | principal tag (16) | tool tag (16)
    | arguments tag (16) | MAC (32)

A tag is HMAC-SHA256 under the key of a label and the bound value, truncated to 16 bytes; the MAC
is HMAC-SHA256 under the key of everything before it. Nothing the token carries is secret or
identifying (the bound values appear only as keyed tags), so no encryption is needed: what the
state must have is integrity and binding (R-MRTR-1).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import re
from typing import Final, Literal

import attrs
import rapidjson

from .record import record

TOKEN_VERSION: Final = 1
NONCE_BYTES: Final = 16
TAG_BYTES: Final = 16
MAC_BYTES: Final = 32
EXPIRY_BYTES: Final = 8
MIN_SECRET_BYTES: Final = 32
MAX_KEY_ID_CHARS: Final = 16
MAX_TOKEN_CHARS: Final = 256
"""A longer ``requestState`` is malformed before it is decoded (R-MRTR-7); the longest token
this module mints is 163 characters."""

_KEY_ID: Final = re.compile(r"[A-Za-z0-9._-]{1,16}")
_BASE64URL: Final = re.compile(r"[A-Za-z0-9_-]*")
_LABEL: Final = b"askgate/mrtr/v1/"
_FIXED: Final = NONCE_BYTES + EXPIRY_BYTES + 3 * TAG_BYTES + MAC_BYTES

Verdict = Literal[
    "valid",
    "malformed",
    "unknown key",
    "tampered",
    "foreign principal",
    "other tool",
    "changed arguments",
    "expired",
]

# The `detail` of the authorization_required deny (decision "ask") for each verdict but "valid"
# (R-MRTR-8), in the style of R-CLOSE-2.
MALFORMED: Final = "request state malformed"
UNKNOWN_KEY: Final = "request state key unknown"
TAMPERED: Final = "request state tampered"
FOREIGN_PRINCIPAL: Final = "request state of another principal"
OTHER_TOOL: Final = "request state of another tool"
CHANGED_ARGUMENTS: Final = "arguments changed"
EXPIRED: Final = "request state expired"
DENY_DETAIL: Final[dict[Verdict, str]] = {
    "malformed": MALFORMED,
    "unknown key": UNKNOWN_KEY,
    "tampered": TAMPERED,
    "foreign principal": FOREIGN_PRINCIPAL,
    "other tool": OTHER_TOOL,
    "changed arguments": CHANGED_ARGUMENTS,
    "expired": EXPIRED,
}


def _check_key_id(_: object, __: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not _KEY_ID.fullmatch(value):
        raise ValueError(f"a key id is 1 to {MAX_KEY_ID_CHARS} of A-Z a-z 0-9 . _ -: {value!r}")


def _check_secret(_: object, __: attrs.Attribute[bytes], value: bytes) -> None:
    if not isinstance(value, bytes) or len(value) < MIN_SECRET_BYTES:
        raise ValueError(f"a key's secret is at least {MIN_SECRET_BYTES} bytes")


@record
class Key:
    """One sealing key: a public name (it travels in every token) and its secret bytes."""

    key_id: str = attrs.field(validator=_check_key_id)
    secret: bytes = attrs.field(validator=_check_secret, repr=False)


@record
class Keyring:
    """The current key, which seals and opens, and the key it replaced at ``rotated_at``, which
    opens for one ``ttl`` after that (R-MRTR-6). ``ttl`` (ms) is also every token's lifetime."""

    current: Key
    ttl: int
    previous: Key | None = None
    rotated_at: int | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.ttl, int) or isinstance(self.ttl, bool) or self.ttl < 1:
            raise ValueError(f"the ttl is a whole number of milliseconds, at least 1: {self.ttl!r}")
        if (self.previous is None) != (self.rotated_at is None):
            raise ValueError("a previous key comes with the time it was rotated out, and only then")
        if self.previous is not None and self.previous.key_id == self.current.key_id:
            raise ValueError("the previous key has the current key's id")


def rotate(ring: Keyring, key: Key, now: int) -> Keyring:
    """``key`` seals from ``now`` on; the current key opens for one ttl more, the previous one no
    longer (rotating twice within one ttl ends the oldest key's window early)."""
    return Keyring(current=key, ttl=ring.ttl, previous=ring.current, rotated_at=now)


@record
class Opened:
    """What opening a token found: the verdict, and once the MAC verified (every verdict after
    "tampered", and "valid") the nonce, expiry and key id it carries; empty otherwise."""

    verdict: Verdict
    nonce: bytes = b""
    expiry: int = 0
    key_id: str = ""


def arguments_digest(arguments: object) -> str:
    """SHA-256 (hex) of the canonical JSON text of ``arguments`` (R-MRTR-3).

    Canonical: rapidjson's compact writing (no whitespace), object keys sorted, strings as UTF-8
    without escaping beyond JSON's, numbers as decoded: an integer and a float differ (``1`` and
    ``1.0``), two spellings of one float agree (``1e2`` and ``100.0``). Raises ValueError for a
    value JSON cannot carry (NaN, an infinity, bytes, a non-string key, a lone surrogate), which
    askgate's codec never decodes.
    """
    try:
        text = rapidjson.dumps(
            arguments,
            sort_keys=True,
            ensure_ascii=False,
            number_mode=rapidjson.NM_NONE,
            bytes_mode=rapidjson.BM_NONE,
        )
        data = text.encode("utf-8")
    except (TypeError, ValueError, OverflowError, RecursionError) as bad:
        raise ValueError(f"not a JSON value: {bad}") from None
    return hashlib.sha256(data).hexdigest()


def keyed_digest(key: bytes, arguments: object) -> str:
    """The keyed digest of ``arguments`` the decision log records (R-AUD-2) and an approval
    prompt shows the start of (R-DLV-5): BLAKE2b-128 keyed with ``key`` over their canonical
    JSON text (sorted keys, compact, as R-MRTR-3 writes them), hex. Arguments JSON cannot carry
    digest their ``repr``. A value that carries its recorded digest (``keyed_digest``, a trace's
    redacted arguments, R-AUD-4) is that digest."""
    if type(arguments) is not dict:  # a trace's redacted arguments carry their digest (R-AUD-4)
        recorded = getattr(arguments, "keyed_digest", None)
        if isinstance(recorded, str):
            return recorded
    try:
        text = rapidjson.dumps(arguments, sort_keys=True, ensure_ascii=False).encode()
    except (TypeError, ValueError, OverflowError, RecursionError):
        text = repr(arguments).encode("utf-8", "backslashreplace")
    hasher = keyed_hasher(key).copy()
    hasher.update(text)
    return hasher.hexdigest()


@functools.lru_cache(maxsize=8)
def keyed_hasher(key: bytes) -> hashlib.blake2b:
    """A BLAKE2b-128 keyed with ``key``, fed nothing: each keyed digest (the arguments' here,
    an elicitation id's, R-ID-1) copies it, as keying costs more than copying. It is never fed
    itself, so the cache holds no state of any step."""
    return hashlib.blake2b(key=key[:64], digest_size=16)


def _tag(secret: bytes, label: bytes, value: str) -> bytes:
    data = _LABEL + label + b"\0" + value.encode("utf-8", "surrogatepass")
    return hmac.digest(secret, data, "sha256")[:TAG_BYTES]  # one call: no HMAC object


def _mac(secret: bytes, body: bytes) -> bytes:
    return hmac.digest(secret, _LABEL + b"token\0" + body, "sha256")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def seal(ring: Keyring, principal: str, tool: str, digest: str, nonce: bytes, now: int) -> str:
    """The ``requestState`` binding ``principal``, ``tool``, the arguments ``digest`` and
    ``nonce``, sealed with the ring's current key, expiring at ``now + ring.ttl`` (R-MRTR-2)."""
    if not isinstance(nonce, bytes) or len(nonce) != NONCE_BYTES:
        raise ValueError(f"the nonce is {NONCE_BYTES} bytes")
    if not isinstance(now, int) or isinstance(now, bool) or now < 0:
        raise ValueError(f"now is a whole number of milliseconds, at least 0: {now!r}")
    key = ring.current
    kid = key.key_id.encode("ascii")
    body = (
        bytes((TOKEN_VERSION, len(kid)))
        + kid
        + nonce
        + (now + ring.ttl).to_bytes(EXPIRY_BYTES, "big")
        + _tag(key.secret, b"principal", principal)
        + _tag(key.secret, b"tool", tool)
        + _tag(key.secret, b"arguments", digest)
    )
    return _b64(body + _mac(key.secret, body))


def previous_key_opens(now: int, rotated_at: int, ttl: int) -> bool:
    """Whether the key rotated out at ``rotated_at`` still opens tokens at ``now``: for one ttl,
    up to and excluding ``rotated_at + ttl`` (R-MRTR-6).

    post: __return__ == (now < rotated_at + ttl)
    """
    return now < rotated_at + ttl


def opening_key(ring: Keyring, key_id: str, now: int) -> Key | None:
    """The key that opens a token naming ``key_id`` at ``now``, or None (R-MRTR-6)."""
    if key_id == ring.current.key_id:
        return ring.current
    previous = ring.previous
    if previous is not None and key_id == previous.key_id:
        assert ring.rotated_at is not None  # Keyring's invariant
        if previous_key_opens(now, ring.rotated_at, ring.ttl):
            return previous
    return None


@record
class _Parsed:
    body: bytes
    key_id: str
    nonce: bytes
    expiry: int
    principal_tag: bytes
    tool_tag: bytes
    arguments_tag: bytes
    mac: bytes


def _decoded(token: object, max_chars: int) -> bytes | None:
    """The bytes of a canonical unpadded base64url string of at most ``max_chars``, or None; the
    length bound is checked first (R-MRTR-7)."""
    if not isinstance(token, str) or len(token) > max_chars:
        return None
    if len(token) % 4 == 1 or not _BASE64URL.fullmatch(token):
        return None
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    if _b64(raw) != token:  # unused bits set: not the one spelling this module writes
        return None
    return raw


def _parse(token: object) -> _Parsed | None:
    """The parts of a well-formed token, or None; the length bound is checked first (R-MRTR-7)."""
    raw = _decoded(token, MAX_TOKEN_CHARS)
    if raw is None or len(raw) < 2 or raw[0] != TOKEN_VERSION:
        return None
    kid_len = raw[1]
    if not 1 <= kid_len <= MAX_KEY_ID_CHARS or len(raw) != 2 + kid_len + _FIXED:
        return None
    key_id = raw[2 : 2 + kid_len].decode("latin-1")
    if not _KEY_ID.fullmatch(key_id):
        return None
    at = 2 + kid_len
    nonce, at = raw[at : at + NONCE_BYTES], at + NONCE_BYTES
    expiry, at = int.from_bytes(raw[at : at + EXPIRY_BYTES], "big"), at + EXPIRY_BYTES
    tags = [raw[at + i * TAG_BYTES : at + (i + 1) * TAG_BYTES] for i in range(3)]
    at += 3 * TAG_BYTES
    return _Parsed(raw[:at], key_id, nonce, expiry, tags[0], tags[1], tags[2], raw[at:])


def verdict(
    well_formed: bool,
    key_known: bool,
    authentic: bool,
    principal_matches: bool,
    tool_matches: bool,
    arguments_match: bool,
    now: int,
    expiry: int,
) -> Verdict:
    """The verdict on a token, from its checks, in their fixed order (R-MRTR-4, R-MRTR-5): only
    a well-formed token under a known key is authenticated, only an authentic one's claims
    count, and it is valid iff every bound value matches and ``now`` is before its expiry.

    post: (__return__ == "malformed") == (not well_formed)
    post: (__return__ == "unknown key") == (well_formed and not key_known)
    post: (__return__ == "tampered") == (well_formed and key_known and not authentic)
    post: (__return__ == "foreign principal") == (well_formed and key_known and authentic and not principal_matches)
    post: (__return__ == "other tool") == (well_formed and key_known and authentic and principal_matches and not tool_matches)
    post: (__return__ == "changed arguments") == (well_formed and key_known and authentic and principal_matches and tool_matches and not arguments_match)
    post: (__return__ == "expired") == (well_formed and key_known and authentic and principal_matches and tool_matches and arguments_match and now >= expiry)
    post: (__return__ == "valid") == (well_formed and key_known and authentic and principal_matches and tool_matches and arguments_match and now < expiry)
    """  # noqa: E501
    if not well_formed:
        return "malformed"
    if not key_known:
        return "unknown key"
    if not authentic:
        return "tampered"
    if not principal_matches:
        return "foreign principal"
    if not tool_matches:
        return "other tool"
    if not arguments_match:
        return "changed arguments"
    if now >= expiry:
        return "expired"
    return "valid"


def open_sealed(
    ring: Keyring, token: object, principal: str, tool: str, digest: str, now: int
) -> Opened:
    """Opens a ``requestState`` presented by ``principal`` on a retry of ``tool`` with arguments
    whose :func:`arguments_digest` is ``digest`` (R-MRTR-4). Total: any ``token`` (not only a
    string) gets a verdict, and none raises."""
    return _judged(ring, _parse(token), principal, tool, digest, now)


def _judged(
    ring: Keyring, parsed: _Parsed | None, principal: str, tool: str, digest: str, now: int
) -> Opened:
    """The verdict on a parsed token (``None``: malformed), R-MRTR-4's checks in their order."""
    key = None if parsed is None else opening_key(ring, parsed.key_id, now)
    if parsed is None or key is None:
        return Opened(verdict(parsed is not None, False, False, False, False, False, now, 0))
    secret = key.secret
    if not hmac.compare_digest(_mac(secret, parsed.body), parsed.mac):
        return Opened(verdict(True, True, False, False, False, False, now, 0))
    found = verdict(
        True,
        True,
        True,
        hmac.compare_digest(_tag(secret, b"principal", principal), parsed.principal_tag),
        hmac.compare_digest(_tag(secret, b"tool", tool), parsed.tool_tag),
        hmac.compare_digest(_tag(secret, b"arguments", digest), parsed.arguments_tag),
        now,
        parsed.expiry,
    )
    return Opened(found, parsed.nonce, parsed.expiry, parsed.key_id)


# -- round states (R-MRTR-21) ----------------------------------------------------------------

ROUND_VERSION: Final = 2
MAX_ROUND_STATE_BYTES: Final = 1024
"""The most a callback's own state may take in a round state, as canonical JSON (R-MRTR-21)."""
MAX_ROUND_TOKEN_CHARS: Final = 1600
"""A longer round state is malformed before it is decoded (R-MRTR-21); the longest minted is
1534 characters."""
_ROUND_EXTRA: Final = 1 + 2  # the approved flag, the state's length


def token_version(token: object) -> int | None:
    """The version byte of a ``requestState``, read from its first four characters alone, or
    None when they are not base64url or the token is over every bound (R-MRTR-21)."""
    if not isinstance(token, str) or not 4 <= len(token) <= MAX_ROUND_TOKEN_CHARS:
        return None
    head = token[:4]
    if not _BASE64URL.fullmatch(head):
        return None
    return base64.urlsafe_b64decode(head)[0]


def state_bytes(value: object) -> bytes | None:
    """A callback's round state as canonical JSON bytes (as :func:`arguments_digest` writes
    them), or None when JSON cannot carry it or it is over :data:`MAX_ROUND_STATE_BYTES`."""
    try:
        text = rapidjson.dumps(
            value,
            sort_keys=True,
            ensure_ascii=False,
            number_mode=rapidjson.NM_NONE,
            bytes_mode=rapidjson.BM_NONE,
        )
        data = text.encode("utf-8")
    except (TypeError, ValueError, OverflowError, RecursionError):
        return None
    return data if len(data) <= MAX_ROUND_STATE_BYTES else None


def state_value(data: bytes) -> object:
    """The JSON value of a round state's bytes (written by :func:`state_bytes`); ``None`` for
    none. Only an authentic token's bytes are read, so they always decode."""
    return rapidjson.loads(data.decode("utf-8")) if data else None


def seal_round(
    ring: Keyring,
    principal: str,
    tool: str,
    digest: str,
    nonce: bytes,
    now: int,
    approved: bool,
    state: bytes,
) -> str:
    """A round's ``requestState`` (R-MRTR-21): :func:`seal`'s bindings under version byte 2,
    then whether the call's approval was granted and the callback's ``state`` (canonical JSON,
    at most :data:`MAX_ROUND_STATE_BYTES`), all under the MAC."""
    if len(state) > MAX_ROUND_STATE_BYTES:
        raise ValueError(f"a round's state is at most {MAX_ROUND_STATE_BYTES} bytes")
    sealed = _decoded(seal(ring, principal, tool, digest, nonce, now), MAX_TOKEN_CHARS)
    assert sealed is not None
    secret = ring.current.secret
    body = (
        bytes((ROUND_VERSION,))
        + sealed[1:-MAC_BYTES]
        + bytes((1 if approved else 0,))
        + len(state).to_bytes(2, "big")
        + state
    )
    return _b64(body + _mac(secret, body))


@record
class RoundOpened:
    """What opening a round state found: :class:`Opened`'s fields, and once the MAC verified,
    whether the approval was granted and the callback's state bytes."""

    verdict: Verdict
    nonce: bytes = b""
    expiry: int = 0
    key_id: str = ""
    approved: bool = False
    state: bytes = b""


def _parse_round(token: object) -> tuple[_Parsed, bool, bytes] | None:
    raw = _decoded(token, MAX_ROUND_TOKEN_CHARS)
    if raw is None or len(raw) < 2 or raw[0] != ROUND_VERSION:
        return None
    kid_len = raw[1]
    fixed = 2 + kid_len + _FIXED - MAC_BYTES
    if not 1 <= kid_len <= MAX_KEY_ID_CHARS or len(raw) < fixed + _ROUND_EXTRA + MAC_BYTES:
        return None
    flag = raw[fixed]
    size = int.from_bytes(raw[fixed + 1 : fixed + 3], "big")
    if flag > 1 or size > MAX_ROUND_STATE_BYTES or len(raw) != fixed + 3 + size + MAC_BYTES:
        return None
    v1 = bytes((TOKEN_VERSION,)) + raw[1:fixed] + raw[-MAC_BYTES:]
    parsed = _parse(_b64(v1))
    if parsed is None:
        return None
    body = raw[:-MAC_BYTES]
    parsed = attrs.evolve(parsed, body=body)
    return parsed, flag == 1, raw[fixed + 3 : fixed + 3 + size]


def open_round(
    ring: Keyring, token: object, principal: str, tool: str, digest: str, now: int
) -> RoundOpened:
    """Opens a round's ``requestState`` as :func:`open_sealed` opens an approval's, with the same
    verdicts in the same order (R-MRTR-4, R-MRTR-21). Total: none raises."""
    found = _parse_round(token)
    opened = _judged(ring, None if found is None else found[0], principal, tool, digest, now)
    if found is None or not opened.nonce:  # the MAC did not verify: nothing it carries counts
        return RoundOpened(opened.verdict)
    return RoundOpened(opened.verdict, opened.nonce, opened.expiry, opened.key_id, *found[1:])
