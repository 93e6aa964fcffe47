"""Who is asking: authentication providers for the HTTP transport.

A provider takes the request's headers (lower-case names) and the peer's address and returns
the principal (a non-empty string) or ``None``: 401 with its ``challenge`` (``WWW-Authenticate``),
or 403 when its ``credentials`` attribute is false (it takes none; a provider without the
attribute takes some), R-HTTP-9. Sessions belong to the principal that created them (R-HTTP-9).
Secrets are compared with :func:`hmac.compare_digest` over every entry, and never logged or put
in an error message.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Callable, Mapping
from pathlib import Path

from askgate.core.http import loopback_address

__all__ = [
    "ApiKeyAuth",
    "AuthProvider",
    "BearerAuth",
    "LoopbackOnly",
    "TokenFileError",
    "is_loopback",
    "load_tokens",
]

AuthProvider = Callable[[Mapping[str, str], "str | None"], "str | None"]
"""``(headers, client_host) -> principal | None``."""


is_loopback = functools.lru_cache(maxsize=256)(loopback_address)
""":func:`askgate.core.http.loopback_address`, remembered: asked on every request."""


class LoopbackOnly:
    """No credentials: every peer on a loopback address is the principal ``local``; any other
    peer is refused (403: it takes no credentials, R-HTTP-9). ``local`` binds sessions and names
    the logs, but authenticates no one: the reducer is told no principal, so each session is
    an owner of its own (R-HTTP-40)."""

    credentials = False
    challenge = ""

    def __call__(self, headers: Mapping[str, str], client: str | None) -> str | None:  # noqa: ARG002
        return "local" if is_loopback(client) else None


class TokenFileError(ValueError):
    """A tokens file that cannot be used (the message never quotes a token)."""


def load_tokens(path: str | Path) -> dict[str, str]:
    """``principal token`` lines (blank lines and ``#`` comments skipped) as principal -> token."""
    tokens: dict[str, str] = {}
    owners: dict[str, tuple[str, int]] = {}  # token -> its principal and line (R-HTTP-43)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as bad:
        why = bad.strerror or type(bad).__name__
        raise TokenFileError(f"cannot read the tokens file {path}: {why}") from None
    except UnicodeDecodeError as bad:
        raise TokenFileError(f"the tokens file {path} is not UTF-8 (byte {bad.start})") from None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise TokenFileError(f"{path} line {number}: expected 'principal token'")
        principal, token = parts
        if len(token) < 16:
            raise TokenFileError(f"{path} line {number}: a token must be at least 16 characters")
        if principal in tokens:
            raise TokenFileError(f"{path} line {number}: principal {principal!r} given twice")
        first = owners.setdefault(token, (principal, number))
        if first[0] != principal:
            raise TokenFileError(
                f"{path} line {number}: principal {principal!r} is given the token that line "
                f"{first[1]} gives to {first[0]!r}: a token belongs to one principal"
            )
        tokens[principal] = token
    if not tokens:
        raise TokenFileError(f"{path} holds no tokens")
    return tokens


def _one_owner(tokens: Mapping[str, str]) -> dict[str, str]:
    """``tokens`` as a dict; raises ValueError, naming the principals and never the token, when
    two principals have the same token (R-HTTP-43)."""
    owners: dict[str, str] = {}
    for principal, token in tokens.items():
        first = owners.setdefault(token, principal)
        if first != principal:
            raise ValueError(
                f"principals {first!r} and {principal!r} have the same token: a token belongs "
                "to one principal"
            )
    return dict(tokens)


def _match(tokens: Mapping[str, str], given: str) -> str | None:
    found = None
    raw = given.encode("utf-8", "surrogateescape")
    for principal, token in tokens.items():  # every entry compared: no early exit
        if hmac.compare_digest(raw, token.encode("utf-8")):
            found = principal
    return found


class BearerAuth:
    """``Authorization: Bearer <token>``; the principal is the token's owner."""

    credentials = True
    challenge = 'Bearer realm="askgate"'
    header = ("Authorization", "Bearer <token>")
    """The header a client sends, as an MCP client configuration writes it."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        if not tokens:
            raise ValueError("BearerAuth needs at least one token")
        self._tokens = _one_owner(tokens)

    def __call__(self, headers: Mapping[str, str], client: str | None) -> str | None:  # noqa: ARG002
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return _match(self._tokens, token.strip())


class ApiKeyAuth:
    """``X-API-Key: <key>``; the principal is the key's owner."""

    credentials = True
    challenge = ""
    header = ("X-API-Key", "<key>")
    """The header a client sends, as an MCP client configuration writes it."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        if not tokens:
            raise ValueError("ApiKeyAuth needs at least one key")
        self._tokens = _one_owner(tokens)

    def __call__(self, headers: Mapping[str, str], client: str | None) -> str | None:  # noqa: ARG002
        key = headers.get("x-api-key", "").strip()
        return _match(self._tokens, key) if key else None
