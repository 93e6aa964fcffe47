"""Tools as the reducer keeps them: the registry entry and its schema validators.

The validators are built once, when the tool is registered, with ``jsonschema-rs`` (draft
2020-12 unless the schema names another): the input schema's is used on every ``tools/call``
before the authorizer sees the arguments (R-PROTO-6), the output schema's on every result the
tool returns (R-PROTO-17). A plain schema gets a :class:`~.plain_schema.PlainValidator`, which
imports and compiles jsonschema-rs only when a check needs it (docs/performance.md).
"""

from __future__ import annotations

import re
from typing import Any, Final

import attrs

from .options import OptionError
from .plain_schema import PlainValidator, plain_schema
from .record import record


@record
class ParamHeader:
    """R-HTTP-47: a tool parameter marked ``x-mcp-header``: the header that mirrors it
    (``header`` as the mark writes it, ``field`` lower-case, as the HTTP shell gives header
    names) and the parameter's path of ``properties`` keys in the call's arguments."""

    header: str
    field: str
    path: tuple[str, ...]


@record
class ToolInfo:
    """A registered tool. ``definition`` is its ``tools/list`` entry; ``validator`` checks its
    arguments against the entry's ``inputSchema`` and ``output_validator`` its results'
    structured content against the entry's ``outputSchema``; ``param_headers`` are the
    parameters its ``inputSchema`` marks ``x-mcp-header`` (empty when the marks are invalid,
    R-HTTP-48) (each built once, at registration)."""

    name: str
    sensitive: bool
    derived: bool
    definition: Any = attrs.field(default=None, eq=False, hash=False)
    validator: Any = attrs.field(default=None, eq=False, hash=False, repr=False)
    output_validator: Any = attrs.field(default=None, eq=False, hash=False, repr=False)
    param_headers: tuple[ParamHeader, ...] = attrs.field(default=(), eq=False, hash=False)


MARK: Final = "x-mcp-header"
"""The schema keyword that mirrors a tool parameter as an ``Mcp-Param-*`` header (R-HTTP-47)."""
MARK_DEPTH: Final = 64
"""How deep :func:`param_headers` walks an input schema (R-HTTP-48)."""
MARK_TYPES: Final = frozenset({"string", "integer", "boolean"})
"""The ``type`` a marked property may have (R-HTTP-48: no ``number``, no ``null``)."""
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""RFC 9110 ``1*tchar``: what a header name, and so a mark, is made of."""
_DATA_KEYWORDS: Final = frozenset({"const", "enum", "default", "examples"})
"""Keywords whose values are instances, not schemas: a mark-like key inside one is data."""
_SCHEMA_MAPS: Final = frozenset(
    {"$defs", "definitions", "patternProperties", "dependentSchemas", "dependencies"}
)
"""Keywords whose values map names to schemas, as ``properties`` does, off the static path."""


def param_headers(schema: object) -> tuple[ParamHeader, ...] | str:
    """R-HTTP-47, R-HTTP-48: the parameters ``schema`` (a tool's ``inputSchema``) marks
    ``x-mcp-header``, in the order the schema lists them, or what is wrong with its marks, one
    line. A mark is valid when it is a non-empty RFC 9110 token, unique but for case, on a
    property of ``type`` string, integer or boolean reached from the root through
    ``properties`` keys alone, within :data:`MARK_DEPTH` levels."""
    found: list[ParamHeader] = []
    problem = _walk_marks(schema, (), True, 0, found)
    if problem is not None:
        return problem
    seen: dict[str, ParamHeader] = {}
    for mark in found:
        first = seen.setdefault(mark.field, mark)
        if first is not mark:
            where, before = ".".join(mark.path), ".".join(first.path)
            return f"{MARK} at {where} repeats {before}'s header {first.header} (case aside)"
    return tuple(found)


def _walk_marks(
    schema: object, path: tuple[str, ...], static: bool, depth: int, found: list[ParamHeader]
) -> str | None:
    """One level of :func:`param_headers`: ``schema`` at ``path`` (its ``properties`` keys, or
    where it was reached from when ``static`` is false)."""
    if not isinstance(schema, dict):
        return None
    if depth > MARK_DEPTH:
        return f"inputSchema nests more than {MARK_DEPTH} levels deep"
    where = ".".join(path) or "the root"
    if MARK in schema:
        mark = schema[MARK]
        if not static or not path:
            return f"{MARK} at {where} is not reached through properties alone"
        if not isinstance(mark, str) or _TOKEN.fullmatch(mark) is None:
            return f"{MARK} {mark!r} at {where} is not an HTTP field-name token"
        if schema.get("type") not in MARK_TYPES:
            return f"{MARK} {mark!r} at {where} needs type string, integer or boolean"
        found.append(ParamHeader(f"Mcp-Param-{mark}", f"mcp-param-{mark.lower()}", path))
    for key, value in schema.items():
        if key in _DATA_KEYWORDS or key == MARK:
            continue
        if key == "properties" or key in _SCHEMA_MAPS:
            if not isinstance(value, dict):
                continue
            on_path = static and key == "properties"
            for name, sub in value.items():
                step = (*path, str(name)) if on_path else (*path, key, str(name))
                problem = _walk_marks(sub, step, on_path, depth + 1, found)
                if problem is not None:
                    return problem
            continue
        for sub in value if isinstance(value, list) else (value,):
            problem = _walk_marks(sub, (*path, key), False, depth + 1, found)
            if problem is not None:
                return problem
    return None


def argument_problem(tool: ToolInfo, arguments: object) -> str | None:
    """What is wrong with ``arguments`` for ``tool``'s input schema, or ``None`` (R-PROTO-6)."""
    validator = tool.validator
    if validator is None:
        return None
    if not isinstance(arguments, dict):
        return "arguments must be an object"
    if validator.is_valid(arguments):
        return None
    error = next(iter(validator.iter_errors(arguments)), None)
    if error is None:  # pragma: no cover - is_valid said no, so there is an error
        return "does not match the input schema"
    where = "/".join(str(part) for part in error.instance_path)
    return (f"{where}: {error.message}" if where else error.message)[:500]


def output_problem(tool: ToolInfo, result: dict[str, Any]) -> str | None:
    """What is wrong with a tool ``result`` for ``tool``'s output schema, or ``None``: a result
    that is not an error must carry ``structuredContent`` that matches it (R-PROTO-17)."""
    validator = tool.output_validator
    if validator is None or result.get("isError"):
        return None
    structured = result.get("structuredContent")
    if not isinstance(structured, dict):
        return "the tool has an output schema but returned no structured content"
    error = next(iter(validator.iter_errors(structured)), None)
    return None if error is None else str(error.message)[:500]


def _schema_validator(name: str, definition: object, field: str) -> Any:
    """The validator of ``definition[field]`` when it is a schema object, else ``None``."""
    if not isinstance(definition, dict) or not isinstance(definition.get(field), dict):
        return None
    if plain_schema(definition[field]):  # always a valid schema: compiled when a check needs it
        return PlainValidator(definition[field])
    import jsonschema_rs  # noqa: PLC0415 - a schema beyond the plain ones (docs/performance.md)

    try:
        return jsonschema_rs.validator_for(definition[field])
    except (jsonschema_rs.ValidationError, ValueError) as bad:
        problem = str(bad).split("\n", 1)[0]
        raise OptionError(field, name, f"is not a valid JSON Schema: {problem}") from None


def tool_info(name: str, sensitive: bool, derived: bool, definition: object) -> ToolInfo:
    """A tool as the reducer keeps it, with its schemas' validators built once (an output
    schema's first, so that it is named when both are broken)."""
    output_validator = _schema_validator(name, definition, "outputSchema")
    validator = _schema_validator(name, definition, "inputSchema")
    notes = definition.get("annotations") if isinstance(definition, dict) else None
    if isinstance(notes, dict):  # R-TOOL-1: the annotations make a tool sensitive too
        sensitive = sensitive or notes.get("destructiveHint") is True
        sensitive = sensitive or notes.get("sensitive") is True
    schema = definition.get("inputSchema") if isinstance(definition, dict) else None
    marks = param_headers(schema)  # R-HTTP-48: invalid marks are Server.tool's refusal
    headers = marks if isinstance(marks, tuple) else ()
    return ToolInfo(
        name, bool(sensitive), bool(derived), definition, validator, output_validator, headers
    )
