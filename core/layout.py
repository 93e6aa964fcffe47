"""Fast constructors and copiers for the reducer's frozen, slotted attrs records.

attrs' ``__init__`` for a frozen class sets each field through ``object.__setattr__`` (its own
``__setattr__`` refuses), which is the larger part of building a small record. The functions
here are generated once per class from the class's own field names and build the very object
attrs builds, faster; records that the reducer builds on every step are declared so that the
fastest form applies (see :func:`positional_constructor`).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
from attrs import AttrsInstance

from .lean_attrs import run_script

T = TypeVar("T", bound=AttrsInstance)


def _generate(name: str, params: list[str], body: list[str], scope: dict[str, Any]) -> Any:
    """The function ``name(*params)`` with ``body``, compiled once (ahead of time when
    :mod:`~askgate.core.compiled_scripts` has its source, as attrs's methods are). Callers build
    the source from an attrs class's own field names, nothing else."""
    source = "\n".join([f"def {name}({', '.join(params)}):", *(f"    {b}" for b in body)])
    run_script(source, scope, filename=f"<askgate.core.layout {name}>")
    return scope[name]


def _field_names(cls: type[AttrsInstance]) -> list[str]:
    fields = attrs.fields(cls)
    if any(f.validator or f.converter for f in fields) or hasattr(cls, "__attrs_post_init__"):
        raise TypeError(f"{cls.__name__} validates or converts: use its __init__")
    return [f.name for f in fields]


def _mutable_layout(cls: type[AttrsInstance], names: list[str]) -> type | None:
    """The mutable class that declares every slot of ``cls`` (its *layout*), when ``cls`` adds
    no slot to its first base and that base's instances take plain attribute stores into
    slots: a mutable, slotted attrs class or a class of bare ``__slots__``. Else ``None``."""
    if cls.__dict__.get("__slots__") != () or not cls.__bases__:
        return None
    base, *others = cls.__bases__
    if any(other.__dict__.get("__slots__") != () for other in others):
        return None
    if any("__setattr__" in vars(k) for k in base.__mro__[:-1]):  # a store that refuses
        return None
    if not all(isinstance(getattr(base, name, None), types.MemberDescriptorType) for name in names):
        return None
    return base


def _own(cls: type, name: str) -> Any:
    """The attribute ``name`` as ``cls``'s MRO first defines it (no descriptor bound)."""
    return next(vars(k)[name] for k in cls.__mro__ if name in vars(k))


def positional_constructor(cls: type[T]) -> Callable[..., T]:
    """A constructor taking every field of the frozen, slotted attrs class ``cls`` in order and
    building the object attrs' ``__init__`` builds: the same class, the same slots, frozen as
    ever (its ``__setattr__`` still refuses); trailing fields with plain defaults (not
    factories) may be left out, as with ``__init__``. Only for classes with no validators,
    converters or ``__attrs_post_init__``.

    When ``cls`` has a mutable layout (:func:`_mutable_layout`), the object is built as an
    instance of a mutable subclass of that layout, whose plain attribute stores Python runs
    fastest, and then takes ``cls`` as its class (same slots, nothing copied). A class without
    slots (as :class:`~askgate.core.state.State`) gets its ``__dict__`` built in one display.
    Otherwise each slot is set through its descriptor, which costs less than the
    ``object.__setattr__`` attrs' ``__init__`` calls for a frozen class.
    """
    names = _field_names(cls)
    layout = _mutable_layout(cls, names)
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    params: list[str] = []
    for i, field in reversed(list(enumerate(attrs.fields(cls)))):
        default = field.default
        plain = default is not attrs.NOTHING and not isinstance(default, attrs.Factory)  # type: ignore[arg-type]
        if plain and all("=" in p for p in params):  # only trailing plain defaults
            scope[f"_default{i}"] = default  # the very object attrs' __init__ would use
            params.insert(0, f"{field.name}=_default{i}")
        else:
            params.insert(0, field.name)
    if layout is not None:
        scope["_builder"] = type(f"_{cls.__name__}Builder", (layout,), {"__slots__": ()})
        # A layout of bare slots takes no arguments: calling it builds an empty instance for
        # less than ``object.__new__`` does (no argument tuple to build and unpack).
        bare = all(_own(layout, name) is vars(object)[name] for name in ("__init__", "__new__"))
        first = "self = _builder()" if bare else "self = _new(_builder)"
        body = [first, *(f"self.{name} = {name}" for name in names)]
        body.append("self.__class__ = _cls")
    elif "__slots__" not in vars(cls) and not any(
        isinstance(getattr(cls, name, None), types.MemberDescriptorType) for name in names
    ):  # no slots: the fields live in the instance's __dict__
        scope["_set_dict"] = _own(cls, "__dict__").__set__  # past a frozen __setattr__
        pairs = ", ".join(f"{name!r}: {name}" for name in names)
        body = ["self = _new(_cls)", f"_set_dict(self, {{{pairs}}})"]
    else:
        body = ["self = _new(_cls)"]
        for i, name in enumerate(names):
            scope[f"_set{i}"] = getattr(cls, name).__set__
            body.append(f"_set{i}(self, {name})")
    make: Callable[..., T] = _generate("make", params, [*body, "return self"], scope)
    return make
