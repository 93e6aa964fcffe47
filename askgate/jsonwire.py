"""The versioned JSON encoding of the reducer's events and effects (spec/embedding.md, R-EMB-*).

Pure: no I/O, no clock, no global state. :func:`encode` turns one event or effect into a JSON
object (an envelope ``{"v": 1, "kind": <class name>, "fields": {...}}``); :func:`decode` turns
such an object back into the event or effect, or raises :class:`WireError` saying what is wrong
and where. :func:`dumps` and :func:`loads` do the same for one line of text. Field values use
plain JSON where JSON can say them exactly (``null``, booleans, strings, lists, objects with
string keys, integers of at most 53 bits, finite floats) and a tagged object ``{"$": tag, ...}``
for everything else: tuples, frozensets, bytes, immutables maps, dicts that plain JSON cannot
hold, large integers, non-finite floats, enum members and nested attrs values.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import math
import types
import typing
from collections.abc import Callable, Hashable
from typing import Any, Final, Literal

import attrs
from immutables import Map

from askgate.core import codec, decisions, effects, events, jobs
from askgate.core.options import Options
from askgate.core.record import record
from askgate.core.state import Stage

VERSION: Final = 1
"""The version every envelope carries (R-EMB-1)."""

MAX_SAFE_INT: Final = 2**53 - 1
"""The largest integer written as a JSON number; larger ones are tagged (R-EMB-4)."""

EVENTS: Final[tuple[type[Any], ...]] = typing.get_args(events.Event)
EFFECTS: Final[tuple[type[Any], ...]] = typing.get_args(effects.Effect)
VALUES: Final[tuple[type[Any], ...]] = (
    *typing.get_args(jobs.Job),
    *typing.get_args(decisions.Decision),
    decisions.Failure,
    decisions.Raised,
    decisions.NeedsInput,
    jobs.Round,
    *typing.get_args(codec.Decoded),
    Options,
)
"""The attrs classes a field value may hold (R-EMB-6): jobs, decisions, failures, a round's
request for input and a job's round, the codec's decoded messages, and the options."""

ENUMS: Final[tuple[type[enum.Enum], ...]] = (Stage,)

KINDS: Final[dict[str, type[Any]]] = {cls.__name__: cls for cls in (*EVENTS, *EFFECTS)}
_NAMED: Final[dict[str, type[Any]]] = {cls.__name__: cls for cls in (*EVENTS, *EFFECTS, *VALUES)}
_ENUMS: Final[dict[str, type[enum.Enum]]] = {cls.__name__: cls for cls in ENUMS}
_BUILTIN_TAGS: Final = frozenset({"int", "float", "tuple", "frozenset", "bytes", "dict", "map"})


class WireError(ValueError):
    """A value that has no encoding, or JSON that is not an encoding: the message says what and
    where (``fields.arguments[2]``)."""


# -- field checks (R-EMB-8) ------------------------------------------------------------------------


def _checker(hint: object) -> Callable[[object], bool] | None:
    """A test for the values of a field of type ``hint`` that the shell controls and the
    reducer trusts (R-EMB-8): integers (``now``, worker refs, deadlines), hashable ids and keys,
    timer keys, modes, principals and logger names (text or null, R-EMB-21), the shell's names
    and flags (text, booleans, R-EMB-22). ``None`` for every other type: the reducer takes those
    values as they come and answers bad ones itself."""
    if hint is int:
        return lambda v: type(v) is int
    if hint is str:
        return lambda v: type(v) is str
    if hint is bool:
        return lambda v: type(v) is bool
    if hint is Hashable:
        return _hashable
    origin = typing.get_origin(hint)
    if origin is Literal:
        allowed = typing.get_args(hint)
        return lambda v: any(type(v) is type(a) and v == a for a in allowed)
    if origin is tuple:
        return lambda v: type(v) is tuple and _hashable(v)
    if origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(inner) == 1 and inner[0] is str:  # a principal, a logger's name (R-EMB-21)
            return lambda v: v is None or type(v) is str
        check = _checker(inner[0]) if len(inner) == 1 and inner[0] is Hashable else None
        if check is not None:
            return lambda v: v is None or check(v)
    return None


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _describe(hint: object) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


@record
class _Shape:
    cls: type[Any]
    names: tuple[str, ...]
    required: frozenset[str]
    checks: dict[str, tuple[Callable[[object], bool], str]]


_PEER_FIELDS: Final = frozenset({("ToolCallReceived", "tool"), ("ReadRequested", "method")})
"""Text fields of events that a peer controls (the tool a call names, the method of a read):
taken as they come, the reducer answers a bad one itself (R-EMB-8, R-EMB-22)."""


def _shape(cls: type[Any], checked: bool) -> _Shape:
    """How to build ``cls`` from its fields; ``checked``: the types of the fields the shell
    controls are checked (the fields of events and effects, not of the values they hold)."""
    hints = typing.get_type_hints(cls)
    fields = attrs.fields(cls)
    checks = {}
    for f in fields:
        peer = (cls.__name__, f.name) in _PEER_FIELDS
        check = _checker(hints[f.name]) if checked and not peer else None
        if check is not None:
            checks[f.name] = (check, _describe(hints[f.name]))
    return _Shape(
        cls,
        tuple(f.name for f in fields),
        frozenset(f.name for f in fields if f.default is attrs.NOTHING),
        checks,
    )


_SHAPES: Final[dict[str, _Shape]] = {
    name: _shape(cls, checked=name in KINDS) for name, cls in _NAMED.items()
}


# -- values --------------------------------------------------------------------------------------


def encode_value(value: Any, where: str = "value") -> Any:
    """The JSON form of one field value (R-EMB-3 .. R-EMB-7); raises :class:`WireError` for a
    value of a type the encoding does not have."""
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        n: int = value
        return n if -MAX_SAFE_INT <= n <= MAX_SAFE_INT else {"$": "int", "v": str(n)}
    if kind is float:
        x: float = value
        if math.isfinite(x):
            return x
        return {"$": "float", "v": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}
    if kind is list:
        return [encode_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if kind is dict:
        d: dict[Any, Any] = value
        if "$" not in d and all(type(k) is str for k in d):
            return {k: encode_value(v, f"{where}.{k}") for k, v in d.items()}
        return {"$": "dict", "v": _pairs(d.items(), where)}
    if kind is tuple:
        return {"$": "tuple", "v": [encode_value(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if kind is frozenset:
        items = [encode_value(v, f"{where}{{}}") for v in value]
        items.sort(key=lambda e: json.dumps(e, sort_keys=True, separators=(",", ":")))
        return {"$": "frozenset", "v": items}
    if kind is bytes:
        return {"$": "bytes", "b64": base64.b64encode(value).decode("ascii")}
    if kind is Map:
        return {"$": "map", "v": _pairs(value.items(), where)}
    name = kind.__name__
    if _NAMED.get(name) is kind:
        return {"$": name, "fields": _encode_fields(value, where)}
    if _ENUMS.get(name) is kind:
        return {"$": name, "value": value.value}
    raise WireError(f"{where}: a {name} has no JSON encoding (spec/embedding.md, R-EMB-3)")


def _pairs(items: Any, where: str) -> list[list[Any]]:
    return [[encode_value(k, f"{where} key"), encode_value(v, f"{where}[{k!r}]")] for k, v in items]


def _encode_fields(value: Any, where: str) -> dict[str, Any]:
    return {
        f.name: encode_value(getattr(value, f.name), f"{where}.{f.name}")
        for f in attrs.fields(type(value))
    }


def decode_value(data: Any, where: str = "value") -> Any:
    """The value the JSON ``data`` encodes (the inverse of :func:`encode_value`)."""
    kind = type(data)
    if data is None or kind is bool or kind is str:
        return data
    if kind is float:
        if not math.isfinite(data):
            raise WireError(f"{where}: {data} is out of a double's range; tag it (R-EMB-4)")
        return data
    if kind is int:
        n: int = data
        if not -MAX_SAFE_INT <= n <= MAX_SAFE_INT:
            raise WireError(f"{where}: {n} is out of the 53-bit range; tag it as int (R-EMB-4)")
        return n
    if kind is list:
        return [decode_value(v, f"{where}[{i}]") for i, v in enumerate(data)]
    if kind is not dict:
        raise WireError(f"{where}: a {kind.__name__} is not JSON")
    obj: dict[str, Any] = data
    if "$" not in obj:
        return {k: decode_value(v, f"{where}.{k}") for k, v in obj.items()}
    return _decode_tagged(obj, where)


def _member(obj: dict[str, Any], key: str, where: str, kind: type[Any]) -> Any:
    if set(obj) != {"$", key}:
        extra = sorted(set(obj) - {"$", key})
        what = f"unknown member(s) {extra}" if extra else f"no {key!r}"
        raise WireError(f"{where}: a {obj['$']!r} value has {what} (R-EMB-3)")
    value = obj[key]
    if type(value) is not kind:
        raise WireError(f"{where}: {obj['$']!r}.{key} must be a {kind.__name__}")
    return value


def _decode_tagged(obj: dict[str, Any], where: str) -> Any:
    tag = obj["$"]
    if tag == "int":
        text = _member(obj, "v", where, str)
        try:
            n = int(text, 10)
        except ValueError:
            raise WireError(f"{where}: {text!r} is not a decimal integer") from None
        if -MAX_SAFE_INT <= n <= MAX_SAFE_INT:
            raise WireError(f"{where}: {n} fits a JSON number; write it plain (R-EMB-4)")
        return n
    if tag == "float":
        text = _member(obj, "v", where, str)
        if text not in ("nan", "inf", "-inf"):
            raise WireError(f"{where}: a tagged float is nan, inf or -inf, not {text!r}")
        return float(text)
    if tag == "tuple":
        items = _member(obj, "v", where, list)
        return tuple(decode_value(v, f"{where}[{i}]") for i, v in enumerate(items))
    if tag == "frozenset":
        items = _member(obj, "v", where, list)
        return frozenset(_hashed(decode_value(v, f"{where}{{}}"), where) for v in items)
    if tag == "bytes":
        if set(obj) == {"$", "utf8"}:
            return _member(obj, "utf8", where, str).encode("utf-8", "surrogatepass")
        text = _member(obj, "b64", where, str)
        try:
            return base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise WireError(f"{where}: bytes.b64 is not base64") from None
    if tag in ("dict", "map"):
        pairs = _member(obj, "v", where, list)
        out: dict[Any, Any] = {}
        for i, pair in enumerate(pairs):
            if type(pair) is not list or len(pair) != 2:
                raise WireError(f"{where}[{i}]: a {tag} entry is a [key, value] pair")
            key = _hashed(decode_value(pair[0], f"{where}[{i}] key"), f"{where}[{i}]")
            out[key] = decode_value(pair[1], f"{where}[{i}]")
        return out if tag == "dict" else Map(out)
    if type(tag) is str and tag in _ENUMS:
        value = _member(obj, "value", where, str)
        try:
            return _ENUMS[tag](value)
        except ValueError:
            raise WireError(f"{where}: {value!r} is no {tag}") from None
    if type(tag) is str and tag in _SHAPES:
        return _build(_SHAPES[tag], _member(obj, "fields", where, dict), where)
    raise WireError(f"{where}: unknown tag {tag!r} (spec/embedding.md, R-EMB-3)")


def _hashed(value: object, where: str) -> Any:
    if not _hashable(value):
        raise WireError(f"{where}: a key or set member must be hashable, not a list or object")
    return value


def _build(shape: _Shape, fields: dict[str, Any], where: str) -> Any:
    unknown = sorted(set(fields) - set(shape.names))
    if unknown:
        raise WireError(f"{where}: {shape.cls.__name__} has no field(s) {unknown} (R-EMB-8)")
    missing = sorted(shape.required - set(fields))
    if missing:
        raise WireError(f"{where}: {shape.cls.__name__} needs field(s) {missing} (R-EMB-8)")
    values = {}
    for name, raw in fields.items():
        value = decode_value(raw, f"{where}.{name}")
        check = shape.checks.get(name)
        if check is not None and not check[0](value):
            raise WireError(f"{where}.{name}: must be {check[1]}, not {raw!r:.60} (R-EMB-8)")
        values[name] = value
    try:
        return shape.cls(**values)
    except (TypeError, ValueError) as refused:  # a validator of the class said no
        raise WireError(f"{where}: {shape.cls.__name__}: {refused}") from None


# -- envelopes -----------------------------------------------------------------------------------


def encode(item: Any) -> dict[str, Any]:
    """The envelope of one event or effect (R-EMB-1, R-EMB-2)."""
    kind = type(item)
    if KINDS.get(kind.__name__) is not kind:
        raise WireError(f"a {kind.__name__} is neither an event nor an effect (R-EMB-2)")
    return {"v": VERSION, "kind": kind.__name__, "fields": _encode_fields(item, "fields")}


def decode(data: Any) -> Any:
    """The event or effect the envelope ``data`` encodes; raises :class:`WireError`."""
    if type(data) is not dict:
        raise WireError("an envelope is a JSON object (R-EMB-1)")
    envelope: dict[str, Any] = data
    version = envelope.get("v")
    if type(version) is not int or version != VERSION:
        raise WireError(f"v: {version!r} is not a version this side speaks: [{VERSION}] (R-EMB-1)")
    kind = envelope.get("kind")
    if type(kind) is not str or kind not in KINDS:
        raise WireError(f"kind: {kind!r} is no event or effect (R-EMB-2)")
    fields = envelope.get("fields", {})
    if type(fields) is not dict:
        raise WireError("fields: must be a JSON object (R-EMB-2)")
    return _build(_SHAPES[kind], fields, "fields")


def _no_constant(name: str) -> Any:
    raise WireError(f"{name} is not JSON (R-EMB-9)")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise WireError("an object repeats a key (R-EMB-9)")
    return out


def dumps(obj: object) -> str:
    """One line of JSON text for ``obj`` (an envelope or any reply built of JSON values):
    compact, ASCII only, no newline (R-EMB-9)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def loads(text: str | bytes) -> Any:
    """The JSON value of one line; raises :class:`WireError` for text that is not strict JSON
    (``NaN``, a repeated key, invalid UTF-8, trailing data) (R-EMB-9)."""
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique)
    except WireError:
        raise
    except (ValueError, RecursionError) as bad:
        raise WireError(f"not JSON: {str(bad)[:120]} (R-EMB-9)") from None
