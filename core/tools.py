"""Tools as the reducer keeps them: the registry entry and its input-schema validator.

The validator is built once, when the tool is registered, with ``jsonschema-rs`` (draft
2020-12 unless the schema names another), and used on every ``tools/call`` before the
authorizer sees the arguments (R-PROTO-6).
"""

from __future__ import annotations

from typing import Any

import attrs
import jsonschema_rs

from .options import OptionError


@attrs.frozen(slots=True)
class ToolInfo:
    """A registered tool. ``definition`` is its ``tools/list`` entry; ``validator`` checks its
    arguments against the entry's ``inputSchema`` (built once, at registration)."""

    name: str
    sensitive: bool
    derived: bool
    definition: Any = attrs.field(default=None, eq=False, hash=False)
    validator: Any = attrs.field(default=None, eq=False, hash=False, repr=False)


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


def tool_info(name: str, sensitive: bool, derived: bool, definition: object) -> ToolInfo:
    """A tool as the reducer keeps it, with its input schema's validator built once."""
    validator = None
    if isinstance(definition, dict) and isinstance(definition.get("inputSchema"), dict):
        try:
            validator = jsonschema_rs.validator_for(definition["inputSchema"])
        except (jsonschema_rs.ValidationError, ValueError) as bad:
            problem = str(bad).split("\n", 1)[0]
            raise OptionError(
                "inputSchema", name, f"is not a valid JSON Schema: {problem}"
            ) from None
    notes = definition.get("annotations") if isinstance(definition, dict) else None
    if isinstance(notes, dict):  # R-TOOL-1: the annotations make a tool sensitive too
        sensitive = sensitive or notes.get("destructiveHint") is True
        sensitive = sensitive or notes.get("sensitive") is True
    return ToolInfo(name, bool(sensitive), bool(derived), definition, validator)
