"""askgate.core.lean_attrs: attrs's classes with a shared ``__repr__`` that says what attrs's
generated one says, and every record class of the core built with it."""

from __future__ import annotations

import importlib
from typing import Any

import attrs
import pytest

from askgate.core import lean_attrs


def _pair(decorator_options: dict[str, Any], body: Any) -> tuple[type, type]:
    """The same class built by attrs and by lean_attrs, with one qualified name."""
    maker = attrs.define if decorator_options.pop("mutable", False) else attrs.frozen
    lean = lean_attrs.define if maker is attrs.define else lean_attrs.frozen
    built = []
    for make in (maker, lean):
        namespace = dict(body())
        namespace["__qualname__"] = "Record"
        built.append(make(type("Record", (), namespace), **decorator_options))
    return built[0], built[1]


def _fields() -> dict[str, Any]:
    return {
        "__annotations__": {"a": "int", "b": "str", "hidden": "bytes", "shown": "int"},
        "a": attrs.field(),
        "b": attrs.field(default="x"),
        "hidden": attrs.field(default=b"secret", repr=False),
        "shown": attrs.field(default=7, repr=lambda value: f"<{value}>"),
    }


@pytest.mark.parametrize("options", [{}, {"slots": True}, {"slots": False}, {"mutable": True}])
def test_the_repr_is_attrs_own(options: dict[str, Any]) -> None:
    original, lean = _pair(options, _fields)
    for args in ((1,), (2, "two", b"k", 3), ("quote's", None)):
        assert repr(lean(*args)) == repr(original(*args))
    assert repr(lean(1)) == "Record(a=1, b='x', shown=<7>)"
    nested_original = original(original(1), [original(2)])
    nested_lean = lean(lean(1), [lean(2)])
    assert repr(nested_lean) == repr(nested_original)
    assert lean.__repr__ is not original.__repr__


def test_an_instance_met_again_is_dots_as_with_attrs() -> None:
    original, lean = _pair({"mutable": True}, _fields)
    loops = []
    for kind in (original, lean):
        one = kind(1)
        one.b = [one]
        loops.append(repr(one))
    assert loops[1] == loops[0] == "Record(a=1, b=[...], shown=<7>)"


def test_an_unset_field_without_init_and_a_subclass_are_as_with_attrs() -> None:
    def body() -> dict[str, Any]:
        return {
            "__annotations__": {"a": "int", "later": "int"},
            "a": attrs.field(),
            "later": attrs.field(init=False),
        }

    original, lean = _pair({"mutable": True}, body)
    assert repr(lean(1)) == repr(original(1)) == "Record(a=1, later=NOTHING)"
    sub_original = type("Sub", (original,), {})
    sub_lean = type("Sub", (lean,), {})
    assert repr(sub_lean(2)) == repr(sub_original(2)) == "Sub(a=2, later=NOTHING)"


def test_a_class_of_its_own_repr_keeps_it_unless_told() -> None:
    def body() -> dict[str, Any]:
        return {"__annotations__": {"a": "int"}, "__repr__": lambda _self: "mine"}

    assert repr(lean_attrs.frozen(type("Own", (), body()))(1)) == "mine"
    assert repr(lean_attrs.frozen(type("Own", (), body()), repr=True)(1)) == "Own(a=1)"
    assert repr(
        lean_attrs.frozen(type("NoRepr", (), {"__annotations__": {"a": "int"}}), repr=False)(1)
    ).startswith("<")


CORE_MODULES = [
    "codec",
    "decisions",
    "door",
    "effects",
    "events",
    "fifo",
    "http",
    "jobs",
    "jsonwire",
    "options",
    "reducer",
    "revisions",
    "sealing",
    "sse_legacy",
    "state",
    "tools",
]


def test_every_record_class_of_the_core_and_the_server_has_the_shared_repr() -> None:
    counted = 0
    for name in [f"askgate.core.{module}" for module in CORE_MODULES] + ["askgate.server"]:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and attrs.has(value) and value.__module__ == name:
                code = value.__repr__.__code__
                assert code.co_filename == lean_attrs.__file__, value
                counted += 1
    assert counted >= 80  # the modules still define their classes
