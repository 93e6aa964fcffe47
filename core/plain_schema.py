"""Tool schemas checked without jsonschema-rs while every check passes (R-EMB-18).

A schema is *plain* when it is ``True``, ``False`` or an object whose keys are among
``type`` (one of the seven type names), ``properties``, ``required`` (distinct names),
``additionalProperties``, ``items``, ``anyOf`` (at least one schema), ``title``,
``description`` and ``default``, each subschema plain again, every value plain JSON (below).
Such a schema is always a valid draft 2020-12 schema, so registering it needs no compiler, and
:class:`PlainValidator` decides ``is_valid`` itself for a *plain JSON* instance: ``dict`` with
``str`` keys, ``list``, ``str`` that encodes as UTF-8, ``int``, ``float``, ``bool`` and
``None``, of those exact types and at most :data:`MAX_DEPTH` deep. Its verdict is
jsonschema-rs's (an integer is an ``int`` or a ``float`` with no fraction; a number is an
``int`` or a finite ``float``; ``bool`` is neither). Anything else (a failed check, whose
messages go on the wire, an instance that is not plain JSON, a schema that is not plain) goes
to the jsonschema-rs validator of the same schema, imported and compiled on first use, so every
message and every exception is jsonschema-rs's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from math import isfinite
from typing import Any

MAX_DEPTH = 64
"""How deep a plain-JSON value may nest (deeper ones go to jsonschema-rs)."""

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


def _valid(schema: Any, value: Any) -> bool:
    """Whether the plain JSON ``value`` satisfies the plain ``schema``."""
    if schema is True:
        return True
    if schema is False:
        return False
    kind = schema.get("type")
    if kind is not None and not _of_type(kind, value):
        return False
    if type(value) is dict:
        properties = schema.get("properties")
        if properties is not None:
            for name, item in value.items():
                sub = properties.get(name)
                if sub is not None and not _valid(sub, item):
                    return False
        required = schema.get("required")
        if required is not None and not all(name in value for name in required):
            return False
        extra = schema.get("additionalProperties")
        if extra is not None and extra is not True:
            known = properties or {}
            for name, item in value.items():
                if name not in known and not _valid(extra, item):
                    return False
    elif type(value) is list:
        items = schema.get("items")
        if items is not None and not all(_valid(items, item) for item in value):
            return False
    choices = schema.get("anyOf")
    return choices is None or any(_valid(one, value) for one in choices)


def _of_type(kind: str, value: Any) -> bool:
    got = type(value)
    if kind == "string":
        return got is str
    if kind == "object":
        return got is dict
    if kind == "integer":
        return got is int or (got is float and value.is_integer())
    if kind == "number":
        return got is int or (got is float and isfinite(value))
    if kind == "boolean":
        return got is bool
    if kind == "array":
        return got is list
    return value is None  # "null"


class PlainValidator:
    """A validator of a plain ``schema`` with jsonschema-rs's ``is_valid`` and ``iter_errors``:
    passing checks of plain JSON are decided here, everything else by jsonschema-rs."""

    __slots__ = ("_compiled", "schema")

    def __init__(self, schema: Any) -> None:
        self.schema = _copy(schema)  # as registered: what compiles later is what was checked
        self._compiled: Any = None

    def compiled(self) -> Any:
        """The jsonschema-rs validator of the schema, compiled on first use."""
        if self._compiled is None:
            import jsonschema_rs  # noqa: PLC0415 - only when a check needs it (R-EMB-18)

            self._compiled = jsonschema_rs.validator_for(self.schema)
        return self._compiled

    def is_valid(self, instance: Any) -> bool:
        """jsonschema-rs's verdict on ``instance``."""
        if plain_json(instance):
            return _valid(self.schema, instance)
        return bool(self.compiled().is_valid(instance))

    def iter_errors(self, instance: Any) -> Iterator[Any]:
        """jsonschema-rs's errors for ``instance`` (none without compiling when it is valid)."""
        if plain_json(instance) and _valid(self.schema, instance):
            return iter(())
        return iter(self.compiled().iter_errors(instance))
