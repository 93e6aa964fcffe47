"""Tools as the reducer keeps them: the registry entry and its schema validators.

The validators are built once, when the tool is registered, with ``jsonschema-rs`` (draft
2020-12 unless the schema names another): the input schema's is used on every ``tools/call``
before the authorizer sees the arguments (R-PROTO-6), the output schema's on every result the
tool returns (R-PROTO-17). A plain schema gets a :class:`~.plain_schema.PlainValidator`, which
imports and compiles jsonschema-rs only when a check needs it (docs/performance.md).
"""

from __future__ import annotations

from typing import Any

import attrs

from .options import OptionError
from .plain_schema import PlainValidator, plain_schema
from .record import record


@record
class ToolInfo:
    """A registered tool. ``definition`` is its ``tools/list`` entry; ``validator`` checks its
    arguments against the entry's ``inputSchema`` and ``output_validator`` its results'
    structured content against the entry's ``outputSchema`` (each built once, at
    registration)."""

    name: str
    sensitive: bool
    derived: bool
    definition: Any = attrs.field(default=None, eq=False, hash=False)
    validator: Any = attrs.field(default=None, eq=False, hash=False, repr=False)
    output_validator: Any = attrs.field(default=None, eq=False, hash=False, repr=False)


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
    return ToolInfo(name, bool(sensitive), bool(derived), definition, validator, output_validator)
