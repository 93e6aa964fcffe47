"""Tool schemas checked without jsonschema-rs while every check passes (docs/performance.md).

A schema is *plain* when it is ``True``, ``False`` or an object whose keys are among
``type`` (one of the seven type names), ``properties``, ``required`` (distinct names),
``additionalProperties``, ``items``, ``anyOf`` (at least one schema), ``title``,
``description`` and ``default``, each subschema plain again, every value plain JSON (below).
Such a schema is always a valid draft 2020-12 schema, so registering it needs no compiler, and
:class:`PlainValidator` decides ``is_valid`` itself for a *plain JSON* instance: ``dict`` with
``str`` keys, ``list``, ``str`` that encodes as UTF-8, ``int``, ``float``, ``bool`` and
``None``, of those exact types (a part nested more than :data:`MAX_DEPTH` levels below what
the schema describes goes to jsonschema-rs). Each schema becomes a :func:`checker`, closures
specialised to its keywords, built once at registration. Its verdict is
jsonschema-rs's (an integer is an ``int`` or a ``float`` with no fraction; a number is an
``int`` or a finite ``float``; ``bool`` is neither). Anything else (a failed check, whose
messages go on the wire, an instance that is not plain JSON, a schema that is not plain) goes
to the jsonschema-rs validator of the same schema, imported and compiled on first use, so every
message and every exception is jsonschema-rs's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from math import isfinite
from typing import Any

MAX_DEPTH = 64
"""How deep :func:`plain_json` and :func:`plain_schema` look (deeper goes to jsonschema-rs)."""

_TYPES = frozenset({"string", "boolean", "integer", "number", "object", "array", "null"})
_SUBSCHEMA = frozenset({"additionalProperties", "items"})
_NOTES = frozenset({"title", "description"})
_KEYS = frozenset({"type", "properties", "required", "anyOf", "default"}) | _SUBSCHEMA | _NOTES


def plain_json(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is plain JSON (see the module's docstring)."""
    kind = type(value)
    if kind is str:
        return value.isascii() or _encodes(value)
    if kind is int or kind is float or kind is bool or value is None:
        return True
    if depth >= MAX_DEPTH:
        return False
    if kind is dict:
        return all(
            type(key) is str and (key.isascii() or _encodes(key)) and plain_json(item, depth + 1)
            for key, item in value.items()
        )
    if kind is list:
        return all(plain_json(item, depth + 1) for item in value)
    return False


def _copy(value: Any) -> Any:
    """A copy of the plain JSON ``value`` sharing no container with it."""
    if type(value) is dict:
        return {key: _copy(item) for key, item in value.items()}
    if type(value) is list:
        return [_copy(item) for item in value]
    return value


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def plain_schema(schema: object, depth: int = 0) -> bool:
    """Whether ``schema`` is plain (see the module's docstring)."""
    if schema is True or schema is False:
        return True
    if type(schema) is not dict or depth >= MAX_DEPTH or not plain_json(schema):
        return False
    for key, value in schema.items():
        if key not in _KEYS:
            return False
        if key == "type":
            if type(value) is not str or value not in _TYPES:
                return False
        elif key == "properties":
            if type(value) is not dict:
                return False
            if not all(plain_schema(one, depth + 1) for one in value.values()):
                return False
        elif key == "required":
            if type(value) is not list or not all(type(name) is str for name in value):
                return False
            if len(set(value)) != len(value):
                return False
        elif key == "anyOf":
            if type(value) is not list or not value:
                return False
            if not all(plain_schema(one, depth + 1) for one in value):
                return False
        elif key in _SUBSCHEMA:
            if not plain_schema(value, depth + 1):
                return False
        elif key in _NOTES and type(value) is not str:
            return False
    return True


Check = Callable[[Any], bool]
"""A plain schema's check: true only when the value is plain JSON and matches (false when it
does not match or is not plain JSON, or when a deeper part is not: those go to jsonschema-rs)."""


def _plain_check(value: Any) -> bool:
    return plain_json(value)


def _never(_value: Any) -> bool:
    return False


def _string(value: Any) -> bool:
    return type(value) is str and (value.isascii() or _encodes(value))


def _integer(value: Any) -> bool:
    return type(value) is int or (type(value) is float and value.is_integer())


def _number(value: Any) -> bool:
    return type(value) is int or (type(value) is float and isfinite(value))


def _object(value: Any) -> bool:
    return type(value) is dict and plain_json(value)


def _array(value: Any) -> bool:
    return type(value) is list and plain_json(value)


_KINDS: dict[str, Check] = {
    "string": _string,
    "integer": _integer,
    "number": _number,
    "boolean": lambda value: type(value) is bool,
    "null": lambda value: value is None,
    "object": _object,
    "array": _array,
}
"""The check of each type name alone (the value's plainness included)."""

_SHAPES: dict[str, Check] = {
    "object": lambda value: type(value) is dict,
    "array": lambda value: type(value) is list,
}
"""The container types' checks for a value whose members were checked already."""


def checker(schema: Any) -> Check:
    """The check of the plain ``schema``: true when a plain JSON value satisfies it."""
    if schema is True:
        return _plain_check
    if schema is False:
        return _never
    kind = schema.get("type")
    shaped = {"properties", "required", "additionalProperties", "items", "anyOf"} & schema.keys()
    if not shaped:
        return _plain_check if kind is None else _KINDS[kind]
    properties = {name: checker(sub) for name, sub in (schema.get("properties") or {}).items()}
    required = tuple(schema.get("required") or ())
    extra = schema.get("additionalProperties")
    other = _plain_check if extra is None else checker(extra)
    items = schema.get("items")
    item = _plain_check if items is None else checker(items)
    choices = tuple(checker(one) for one in schema.get("anyOf") or ())
    # A dict or list value that passed members() or item() is plain JSON already (every Check
    # is true of plain JSON only), so its type is all that is left to check.
    of_kind = None if kind is None else _SHAPES.get(kind, _KINDS[kind])

    def members(value: dict[Any, Any]) -> bool:
        for name, member in value.items():
            if type(name) is not str:
                return False
            sub = properties.get(name)
            if sub is None:  # a key no property names: it must encode too
                if not (name.isascii() or _encodes(name)):
                    return False
                sub = other
            if not sub(member):
                return False
        for name in required:  # noqa: SIM110 (a loop: all() and its generator cost more)
            if name not in value:
                return False
        return True

    if kind == "object" and not choices:

        def check_object(value: Any) -> bool:  # the common tool schema, without check()'s steps
            return type(value) is dict and members(value)

        return check_object

    def check(value: Any) -> bool:
        got = type(value)
        if got is dict:
            if not members(value):
                return False
        elif got is list:
            if not all(item(member) for member in value):
                return False
        elif not plain_json(value):
            return False
        if of_kind is not None and not of_kind(value):
            return False
        for choice in choices:
            if choice(value):
                return True
        return not choices

    return check


class PlainValidator:
    """A validator of a plain ``schema`` with jsonschema-rs's ``is_valid`` and ``iter_errors``:
    passing checks of plain JSON are decided here, everything else by jsonschema-rs."""

    __slots__ = ("_check", "_compiled", "schema")

    def __init__(self, schema: Any) -> None:
        self.schema = _copy(schema)  # as registered: what compiles later is what was checked
        self._check = checker(self.schema)
        self._compiled: Any = None

    def compiled(self) -> Any:
        """The jsonschema-rs validator of the schema, compiled on first use."""
        if self._compiled is None:
            import jsonschema_rs  # noqa: PLC0415 - only when a check needs it (docs/performance.md)

            self._compiled = jsonschema_rs.validator_for(self.schema)
        return self._compiled

    def is_valid(self, instance: Any) -> bool:
        """jsonschema-rs's verdict on ``instance`` (a pass decided here, the rest by it)."""
        return self._check(instance) or bool(self.compiled().is_valid(instance))

    def iter_errors(self, instance: Any) -> Iterator[Any]:
        """jsonschema-rs's errors for ``instance`` (none without compiling when it is valid)."""
        if self._check(instance):
            return iter(())
        return iter(self.compiled().iter_errors(instance))
