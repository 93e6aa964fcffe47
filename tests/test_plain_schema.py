"""Plain tool schemas: askgate's own checks give jsonschema-rs's verdicts (docs/performance.md,
"Plain schemas")."""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from askgate.core.options import OptionError
from askgate.core.plain_schema import MAX_DEPTH, PlainValidator, plain_json, plain_schema
from askgate.core.tools import argument_problem, output_problem, tool_info

NAMES = ("a", "b", "c", "é")
TYPES = ("string", "boolean", "integer", "number", "object", "array", "null")

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4)
scalars |= st.sampled_from([0.0, -0.0, 1.0, 2.0**70, 1e300, 2**64, -(2**63) - 1])
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from((*NAMES, "d")), inner, max_size=4)
    ),
    max_leaves=12,
)


CORPUS: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    1.0,
    -0.0,
    1.5,
    float("nan"),
    float("inf"),
    2**70,
    1e300,
    "",
    "a",
    [],
    [1],
    ["a", None],
    {},
    {"a": 1},
    {"a": "x", "b": 2.0},
    {"b": [], "c": {}},
    {"d": False},
    {"é": 1.0, "a": None},
    {"a": float("nan")},
    {"a": 1.0, "b": True},
    {"a": True},
    {"a": 1, "b": 0},
    {"b": 1.5},
    [1.5, float("inf")],
    [True, 1],
]
"""Values every drawn schema is checked against, beside the drawn ones."""


def _object(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(TYPES),
            "properties": st.dictionaries(st.sampled_from(NAMES), children, max_size=3),
            "required": st.lists(st.sampled_from((*NAMES, "d")), unique=True, max_size=3),
            "additionalProperties": children,
            "items": children,
            "anyOf": st.lists(children, min_size=1, max_size=3),
            "title": st.text(max_size=3),
            "description": st.text(max_size=3),
            "default": json_values,
        },
    )


leaf_schemas = st.booleans() | st.fixed_dictionaries(
    {}, optional={"type": st.sampled_from(TYPES), "description": st.text(max_size=3)}
)
schemas = st.recursive(leaf_schemas, _object, max_leaves=8)


def _errors(validator: Any, instance: Any) -> list[tuple[str, list[Any]]]:
    return [(e.message, list(e.instance_path)) for e in validator.iter_errors(instance)]


@settings(max_examples=50, deadline=None)
@given(schema=schemas, drawn=st.lists(json_values, max_size=3))
def test_plain_schemas_get_jsonschema_rs_verdicts(schema: Any, drawn: list[Any]) -> None:
    assert plain_schema(schema)
    compiled = jsonschema_rs.validator_for(schema)  # a plain schema is always a valid one
    plain = PlainValidator(schema)
    for instance in CORPUS + drawn:
        assert plain_json(instance)
        assert plain.is_valid(instance) is compiled.is_valid(instance)
        assert plain._check(instance) is compiled.is_valid(instance)  # decided here
        assert _errors(plain, instance) == _errors(compiled, instance)


SHAPES: list[Any] = [
    *({"type": kind} for kind in TYPES),
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    {"properties": {"a": {"type": "number"}}, "additionalProperties": {"type": "boolean"}},
    {"type": "object", "properties": {"a": True}, "additionalProperties": False},
    {"type": "array", "items": {"type": "number"}},
    {"anyOf": [{"type": "null"}, {"type": "integer"}]},
    {"required": ["a", "b"], "anyOf": [{"type": "object"}, {"type": "boolean"}]},
    {"properties": {"a": False}},
    True,
    False,
]


@pytest.mark.parametrize("schema", SHAPES)
def test_each_keyword_gets_jsonschema_rs_verdicts(schema: Any) -> None:
    assert plain_schema(schema)
    compiled, plain = jsonschema_rs.validator_for(schema), PlainValidator(schema)
    for instance in CORPUS:
        assert plain.is_valid(instance) is compiled.is_valid(instance), instance
        assert plain._check(instance) is compiled.is_valid(instance), instance


class _Text(str):
    pass


@pytest.mark.parametrize(
    "instance",
    [
        ("a",),
        {"a": {1, 2}},
        {1: "a"},
        {"a": b"x"},
        "x\ud800",
        {"x\ud800": 1},
        _Text("a"),
        {_Text("a"): 1},
        {"a": _Text("x")},
        {"a": 2**70, "b": "x\ud800"},
        [[[[1]]]],
    ],
)
@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "array"}},
        {"type": "object", "properties": {"a": True}, "additionalProperties": {"type": "string"}},
        {"anyOf": [{"type": "string"}, {"properties": {"a": {"type": "integer"}}}]},
    ],
)
def test_what_is_not_plain_json_goes_to_jsonschema_rs(schema: Any, instance: Any) -> None:
    compiled, plain = jsonschema_rs.validator_for(schema), PlainValidator(schema)

    def outcome(check: Any) -> object:
        try:
            return check(instance)
        except Exception as bad:  # the refusal itself is what must agree
            return (type(bad), str(bad))

    assert outcome(plain.is_valid) == outcome(compiled.is_valid)
    assert outcome(lambda one: _errors(plain, one)) == outcome(lambda one: _errors(compiled, one))
    deep: Any = "x"
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    assert not plain_json(deep)
    assert plain.is_valid(deep) is compiled.is_valid(deep)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "strin"},
        {"type": ["string", "null"]},
        {"required": ["a", "a"]},
        {"required": [1]},
        {"anyOf": []},
        {"enum": [1]},
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "string"},
        {"type": "string", "default": (1,)},
        {"description": 1},
        {"properties": {"a": {"minLength": 1}}},
        {"items": [{"type": "string"}]},
    ],
)
def test_other_schemas_are_compiled_at_registration(schema: Any) -> None:
    assert not plain_schema(schema)
    definition = {"name": "t", "inputSchema": schema}
    try:
        expected: object = type(jsonschema_rs.validator_for(schema))
    except (jsonschema_rs.ValidationError, ValueError) as bad:
        expected = str(bad).split("\n", 1)[0]
    try:
        got: object = type(tool_info("t", False, False, definition).validator)
    except OptionError as refused:
        got = refused.rule.removeprefix("is not a valid JSON Schema: ")
    assert got == expected


def test_a_plain_tools_checks_say_what_jsonschema_rs_says() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"text": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    out = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    definition = {"name": "t", "inputSchema": schema, "outputSchema": out}
    tool = tool_info("t", False, False, definition)
    assert isinstance(tool.validator, PlainValidator)
    schema["required"] += ["n"]  # the schema as registered is what is checked
    assert argument_problem(tool, {"text": "hi"}) is None
    assert argument_problem(tool, {"text": 1}) == 'text: 1 is not of type "string"'
    assert argument_problem(tool, {"n": 1.5, "text": ""}) == 'n: 1.5 is not of type "integer"'
    assert argument_problem(tool, ["text"]) == "arguments must be an object"
    good = {"content": [], "structuredContent": {"n": 2}}
    assert output_problem(tool, good) is None
    bad = {"content": [], "structuredContent": {"n": "2"}}
    assert output_problem(tool, bad) == '"2" is not of type "integer"'
