"""attrs as askgate's record classes use it, with a ``__repr__`` that is not compiled per class.

The modules that define record classes import this module as ``attrs`` at run time (and the
real attrs when type checking, so mypy's attrs plugin sees every class as it is). Everything is
attrs's own (module ``__getattr__``) except :func:`frozen` and :func:`define`: they build the
class with attrs, told not to generate a ``__repr__``, and give it instead a closure over its
fields that returns what attrs's generated one returns, character for character:
``ClassName(field=value, ...)`` with each field's ``repr`` (or its own ``repr=`` callable),
``repr=False`` fields left out, and ``...`` for an instance met again while it is being
represented. attrs compiles a generated ``__repr__`` from source for each class; that was about
a fifth of the time ``import askgate`` took. A class that defines its own ``__repr__`` keeps it,
as with attrs (``auto_detect``). ``__init__``, ``__eq__`` and ``__hash__`` stay attrs's compiled
ones: a closure comparing field by field, in order, as attrs's ``__eq__`` does, measured three
to four times slower, and equality is on the hot paths of the model-based tests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import attrs
from attrs import (
    NOTHING,
    Attribute,
    Factory,
    asdict,
    astuple,
    converters,
    evolve,
    field,
    fields,
    fields_dict,
    has,
    setters,
    validators,
)

__all__ = [
    "NOTHING",
    "Attribute",
    "Factory",
    "asdict",
    "astuple",
    "converters",
    "define",
    "evolve",
    "field",
    "fields",
    "fields_dict",
    "frozen",
    "has",
    "install_repr",
    "setters",
    "validators",
]

_repring = threading.local()
"""The ids of the instances being represented in this thread (attrs's recursion guard)."""


def __getattr__(name: str) -> Any:
    return getattr(attrs, name)


def define(maybe_cls: type | None = None, **options: Any) -> Any:
    """:func:`attrs.define`, with the ``__repr__`` of :func:`install_repr`."""
    return _build(attrs.define, maybe_cls, options)


def frozen(maybe_cls: type | None = None, **options: Any) -> Any:
    """:func:`attrs.frozen`, with the ``__repr__`` of :func:`install_repr`."""
    return _build(attrs.frozen, maybe_cls, options)


def _build(maker: Callable[..., Any], maybe_cls: type | None, options: dict[str, Any]) -> Any:
    wanted = options.pop("repr", None)

    def wrap(cls: type) -> type:
        built: type = maker(cls, repr=False, **options)
        own = "__repr__" in cls.__dict__ and options.get("auto_detect", True)
        if wanted is True or (wanted is None and not own):
            install_repr(built)
        return built

    return wrap if maybe_cls is None else wrap(maybe_cls)


def install_repr(cls: type) -> None:
    """Gives the attrs class ``cls`` the ``__repr__`` attrs would have generated for it."""
    shown = tuple(
        (one.name, None if one.repr is True else one.repr, one.init)
        for one in fields(cls)
        if one.repr is not False
    )
    missing = NOTHING

    def represent(self: Any) -> str:
        seen: set[int] | None = getattr(_repring, "ids", None)
        if seen is None:
            seen = _repring.ids = set()
        key = id(self)
        if key in seen:
            return "..."
        seen.add(key)
        try:
            parts = []
            for name, custom, init in shown:
                value = getattr(self, name) if init else getattr(self, name, missing)
                parts.append(f"{name}={value!r}" if custom is None else f"{name}={custom(value)}")
            return f"{self.__class__.__qualname__.rsplit('>.', 1)[-1]}({', '.join(parts)})"
        finally:
            seen.discard(key)

    represent.__name__ = "__repr__"
    represent.__qualname__ = f"{cls.__qualname__}.__repr__"
    represent.__module__ = cls.__module__
    setattr(cls, "__repr__", represent)  # noqa: B010 (a method of the class, set once)
