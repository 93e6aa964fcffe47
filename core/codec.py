"""The wire codec: one JSON-RPC message as bytes in, one decoded shape out (spec/codec.md).

Pure: no I/O, no clock, no global state. :func:`decode` never raises: whatever arrives, it
returns a :class:`Request`, :class:`Notification`, :class:`Response`, :class:`ErrorResponse`, or
an :class:`Invalid` carrying the complete error reply to send (``None`` when nothing may be
sent). :func:`encode` writes one compact UTF-8 line without its newline, which the framing adds.

Parsing is python-rapidjson in strict mode (``NM_NONE``: no ``NaN``/``Infinity``, no number that
overflows a double, big integers kept exact) with a decoder that collects every object as
key/value pairs so that a duplicate key at any depth is an error instead of "last one wins". A
message of up to 8 KiB is first parsed without that callback per object and kept when counting
proves that no key was repeated (:func:`_parse`); otherwise the strict decoder decides.
"""

from __future__ import annotations

from array import array
from itertools import accumulate
from typing import Any, Final, TypeGuard, cast

import rapidjson

from .messages import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    JsonObject,
    RequestId,
    error,
    invalid_id,
)
from .record import record

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "Decoded",
    "EncodeError",
    "ErrorResponse",
    "Invalid",
    "Notification",
    "Request",
    "Response",
    "decode",
    "encode",
]

MAX_BYTES: Final = 4 * 1024 * 1024
"""The default byte cap of one message, 4 MiB (R-WIRE-2)."""

MAX_DEPTH: Final = 64
"""The deepest nesting accepted; the top-level object is depth 1 (R-WIRE-6)."""


@record
class Request:
    """A request: it has a valid ``id`` and expects exactly one answer.

    ``params`` is ``None`` when absent or ``null``; otherwise an object.
    """

    id: RequestId
    method: str
    params: JsonObject | None


@record
class Notification:
    """A request without ``id``: it is never answered, not even with an error."""

    method: str
    params: JsonObject | None


@record
class Response:
    """A peer's success answer to one of our requests (``result`` is any JSON value)."""

    id: RequestId
    result: object


@record
class ErrorResponse:
    """A peer's error answer to one of our requests (``error`` is always an object)."""

    id: RequestId
    error: JsonObject


@record
class Invalid:
    """A message that is not acted on.

    ``reply`` is the error to send back, or ``None`` when nothing may be sent (a malformed
    notification or response). ``reason`` is a short fixed text for logs; it never quotes input.
    """

    reply: JsonObject | None
    reason: str = ""


Decoded = Request | Notification | Response | ErrorResponse | Invalid


class EncodeError(ValueError):
    """The message holds something strict JSON cannot carry (R-WIRE-13)."""


# --- parsing ------------------------------------------------------------------------------------


class _DuplicateKeyError(ValueError):
    pass


class _StrictDecoder(rapidjson.Decoder):
    """Objects arrive as a list of (key, value) pairs; a repeated key is a parse error."""

    # A type, not a function: rapidjson calls it with no argument and gets a fresh list from C.
    start_object = list

    @staticmethod
    def end_object(pairs: list[tuple[str, Any]]) -> JsonObject:
        obj = dict(pairs)
        if len(obj) != len(pairs):
            raise _DuplicateKeyError
        return obj


_decode_json = _StrictDecoder(number_mode=rapidjson.NM_NONE, parse_mode=rapidjson.PM_NONE)
_decode_plain = rapidjson.Decoder(number_mode=rapidjson.NM_NONE, parse_mode=rapidjson.PM_NONE)

_PLAIN_BYTES: Final = 8 * 1024
"""Messages up to this size are parsed without a callback per object (:func:`_parse`)."""


def _keys_in(obj: JsonObject) -> int:
    """How many keys the objects of ``obj`` hold, ``obj`` itself included, at every depth."""
    n = len(obj)
    for value in obj.values():
        kind = type(value)
        if kind is dict:
            n += _keys_in(value)
        elif kind is list:
            n += _keys_in_list(value)
    return n


def _keys_in_list(items: list[Any]) -> int:
    n = 0
    for value in items:
        kind = type(value)
        if kind is dict:
            n += _keys_in(value)
        elif kind is list:
            n += _keys_in_list(value)
    return n


def _keys_near(msg: JsonObject) -> int:
    """How many keys ``msg``, its ``params`` (else its ``result``) and the objects directly in
    that hold: where a JSON-RPC message keeps its objects, counted without a call per object.
    At most :func:`_keys_in` of ``msg`` (these objects are some of those)."""
    n = len(msg)
    body = msg.get("params")
    if type(body) is not dict:
        body = msg.get("result")
        if type(body) is not dict:
            return n
    n += len(body)
    for value in body.values():
        if type(value) is dict:
            n += len(value)
    return n


def _colons_in(value: Any) -> int:
    """How many keys the objects of ``value`` hold plus how many colons its strings hold."""
    kind = type(value)
    if kind is dict:
        return sum(1 + key.count(":") + _colons_in(item) for key, item in value.items())
    if kind is list:
        return sum(_colons_in(item) for item in value)
    return value.count(":") if kind is str else 0


def _parse(data: bytes) -> Any:
    """The JSON value of ``data``, a repeated key at any depth raising _DuplicateKeyError.

    A small message is parsed without a Python callback per object, then checked by counting:
    outside strings a colon follows each key and appears nowhere else, so the colons of the text
    number at least its keys, which number at least the keys of the parsed objects, with
    equality throughout exactly when no string holds a colon and no key was repeated (a repeat
    keeps one of its values). Strings that hold colons (URIs) are counted too when the text
    has no backslash: then every string is spelled as it reads, and a repeated key would drop
    a key and perhaps colons. When the counts differ, or the text is not JSON, the strict
    decoder parses it again and decides (and tells a repeated key from any other fault).
    """
    if len(data) <= _PLAIN_BYTES:
        try:
            msg = _decode_plain(data)
        except Exception:
            pass  # the strict decoder below says why
        else:
            colons = data.count(b":")
            kind = type(msg)
            if kind is dict:
                # (a lower bound of the keys first: equal to the colons, it is the count)
                if colons == len(msg) or colons == _keys_near(msg) or colons == _keys_in(msg):
                    return msg
            elif colons == (_keys_in_list(msg) if kind is list else 0):
                return msg
            if 92 not in data and colons == _colons_in(msg):  # 92: no backslash
                return msg
    return _decode_json(data)


_SIGNS: Final = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")  # +1 / -1 as signed bytes
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")


def _deeper_than(data: bytes, limit: int) -> bool:
    """Whether JSON text ``data`` nests deeper than ``limit``, read off the bytes before parsing.

    Brackets inside strings do not count: escaped backslashes, then escaped quotes, are cut
    out, so every quote left delimits a string and every other piece between quotes is outside
    one. The depth is the highest running sum of +1 per opening and -1 per closing bracket. For
    bytes that are not JSON the answer does not matter: the parse rejects them with the same code.
    """
    if data.count(b"[") + data.count(b"{") <= limit:  # brackets in strings too: an upper bound
        return False
    unescaped = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(unescaped.split(b'"')[::2])
    signs = outside.translate(_SIGNS, _NOT_BRACKETS)
    return bool(signs) and max(accumulate(array("b", signs))) > limit


def _parse_error(reason: str) -> Invalid:
    return Invalid(error(None, PARSE_ERROR, f"Parse error: {reason}"), reason)


# --- shape --------------------------------------------------------------------------------------


def _valid_id(value: object) -> TypeGuard[RequestId]:
    # bool is a subclass of int, and `true` is no id.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _reject(request_id: RequestId | None, code: int, reason: str) -> Invalid:
    """The error reply to a request, or nothing for a notification (``request_id`` None)."""
    if request_id is None:
        return Invalid(None, reason)
    label = "Invalid params" if code == INVALID_PARAMS else "Invalid Request"
    return Invalid(error(request_id, code, f"{label}: {reason}"), reason)


def _classify_any(msg: object) -> Decoded:
    if not isinstance(msg, dict):
        return Invalid(
            error(None, INVALID_REQUEST, "Invalid Request: not a JSON object"), "not a JSON object"
        )
    if "method" not in msg and ("result" in msg or "error" in msg):
        return _classify_response(msg)

    request_id: RequestId | None = None  # None: a notification
    if "id" in msg:
        if not _valid_id(msg["id"]):
            return Invalid(invalid_id(), "id neither string nor integer")
        request_id = msg["id"]

    method = msg.get("method")
    if not isinstance(method, str):
        reason = "method is not a string" if "method" in msg else "missing method"
        return _reject(request_id, INVALID_REQUEST, reason)
    if msg.get("jsonrpc") != "2.0":
        return _reject(request_id, INVALID_REQUEST, 'jsonrpc is not "2.0"')
    if "result" in msg or "error" in msg:
        return _reject(request_id, INVALID_REQUEST, "a request carries no result or error")

    params = msg.get("params")  # null counts as absent
    if params is not None and not isinstance(params, dict):
        return _reject(request_id, INVALID_PARAMS, "params is not an object")

    if request_id is None:
        return Notification(method, params)
    return Request(request_id, method, params)


def _classify_response(msg: JsonObject) -> Decoded:
    if "result" in msg and "error" in msg:
        reason = "a response carries both result and error"
        return Invalid(error(None, INVALID_REQUEST, f"Invalid Request: {reason}"), reason)
    # Anything else wrong with a response is dropped: answering an answer helps no one, and two
    # peers that answer each other's bad answers never stop.
    if msg.get("jsonrpc") != "2.0":
        return Invalid(None, 'response: jsonrpc is not "2.0"')
    response_id = msg.get("id")
    if not _valid_id(response_id):
        return Invalid(None, "response: id neither string nor integer")
    if "result" in msg:
        return Response(response_id, msg["result"])
    err = msg["error"]
    if not isinstance(err, dict):
        return Invalid(None, "response: error is not an object")
    return ErrorResponse(response_id, err)


def decode(data: bytes, *, max_bytes: int = MAX_BYTES) -> Decoded:
    """Decode one message (one stdio line without its newline, or one HTTP body).

    Never raises. The byte cap is checked before anything is parsed.
    """
    try:
        if len(data) > max_bytes:
            return _parse_error("message over the byte cap")
        # (brackets in strings count too: an upper bound of the depth, read before parsing)
        if data.count(b"[") + data.count(b"{") > MAX_DEPTH and _deeper_than(data, MAX_DEPTH):
            return _parse_error(f"nesting deeper than {MAX_DEPTH}")
        # (a byte's value: ``b"\x00" in data`` tries it as an int first, and that raises)
        if 0 in data:  # never JSON outside a string either; rapidjson stops reading there
            return _parse_error("not JSON")
        msg = _parse(data)
    except _DuplicateKeyError:
        return _parse_error("duplicate key")
    except Exception:
        # Every failure ends here, never in the caller: ValueError, UnicodeDecodeError,
        # OverflowError, RecursionError, MemoryError, TypeError (not bytes) ...
        return _parse_error("not JSON")
    # The common shapes first, on exact types: anything else takes the full path.
    if type(msg) is dict and "error" not in msg:
        if "result" not in msg:
            method = msg.get("method")
            if type(method) is str and msg.get("jsonrpc") == "2.0":
                params = msg.get("params")
                if params is None or type(params) is dict:
                    if "id" not in msg:
                        return Notification(method, params)
                    request_id = msg["id"]
                    if type(request_id) is int or type(request_id) is str:
                        return Request(request_id, method, params)
        elif "method" not in msg and msg.get("jsonrpc") == "2.0":  # a success response
            response_id = msg.get("id")
            if type(response_id) is int or type(response_id) is str:
                return Response(response_id, msg["result"])
    return _classify_any(msg)


# --- encoding -----------------------------------------------------------------------------------

_encode_json = rapidjson.Encoder(
    ensure_ascii=False,
    number_mode=rapidjson.NM_NONE,  # NaN and +-Infinity raise instead of being written
    bytes_mode=rapidjson.BM_NONE,  # bytes are not text: refused, never guessed as UTF-8
    write_mode=rapidjson.WM_COMPACT,
)


def encode(message: JsonObject) -> bytes:
    """One message as compact UTF-8 JSON, non-ASCII written as is, no trailing newline.

    Raises :class:`EncodeError` when the message holds something strict JSON cannot carry:
    ``NaN`` or an infinity, a lone surrogate, a non-string key, bytes or another non-JSON value,
    a cycle.
    """
    try:
        text = cast(str, _encode_json(message))  # a str: no stream is given
        return text.encode("utf-8")
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise EncodeError(f"not encodable as strict JSON: {type(exc).__name__}") from exc
