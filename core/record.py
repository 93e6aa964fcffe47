"""The one way askgate declares a record: :func:`record`, :func:`attrs.frozen` to the type checker.

Every event, effect, job, decision, the state and each value in it is a record: an attrs
class, slotted, compared and hashed by its fields (R-INV-10). mypy (and every type checker that
reads attrs) sees :func:`record` as :func:`attrs.frozen`, so an assignment to a field anywhere
in the code it checks is a type error. At run time a record is an :func:`attrs.define` class
hashed by value (``unsafe_hash``, as a frozen class is): its ``__init__`` stores each field
plainly, where a frozen class's calls ``object.__setattr__`` for each, and the reducer builds
several records on every step. Nothing refuses an assignment at run time; the reducer never
makes one, which mypy checks, and ``ASKGATE_FROZEN_RECORDS=1`` in a process's environment
builds every record frozen (an assignment raises ``attrs.exceptions.FrozenInstanceError``),
which the test of R-INV-10 runs the reducer under.

A record has no ``__weakref__`` slot (nothing refers to a record weakly): a smaller object that
costs less to build and to free, and the reducer builds several on every step.

A record's ``__repr__`` is :func:`record_repr`, one function for every class, unless the class
defines its own: attrs writes and compiles a ``__repr__`` per class, about a third of what
building a record class costs, paid by every process at start-up for about eighty classes.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import attrs

__all__ = ["FROZEN_AT_RUN_TIME", "record", "record_repr"]

FROZEN_AT_RUN_TIME = os.environ.get("ASKGATE_FROZEN_RECORDS", "") == "1"
"""Whether this process builds records frozen (``ASKGATE_FROZEN_RECORDS=1``, for checking)."""


def record_repr(self: attrs.AttrsInstance) -> str:
    """``Name(field=value, ...)``, what attrs's generated ``__repr__`` returns: each field
    that is shown (``repr=False`` hides one; a callable ``repr`` formats its value)."""
    shown = []
    for field in attrs.fields(type(self)):
        if field.repr is False:
            continue
        value = getattr(self, field.name)
        text = repr(value) if field.repr is True else field.repr(value)
        shown.append(f"{field.name}={text}")
    name = type(self).__qualname__.rsplit(">.", 1)[-1]  # a local class's name, as attrs's
    return f"{name}({', '.join(shown)})"


if TYPE_CHECKING:
    from attrs import frozen as record
else:

    def record(maybe_cls: type | None = None, **options: Any) -> Any:
        """:func:`attrs.frozen` to the type checker; at run time :func:`attrs.define`, hashed
        by value, or :func:`attrs.frozen` itself under ``ASKGATE_FROZEN_RECORDS=1``; without a
        ``__weakref__`` slot unless asked for one; with :func:`record_repr` unless the class
        defines a ``__repr__``."""

        def build(cls: type) -> type:
            own_repr = "__repr__" in vars(cls)
            options.setdefault("weakref_slot", False)
            if FROZEN_AT_RUN_TIME:
                built = attrs.frozen(cls, repr=False, **options)
            else:
                built = attrs.define(cls, repr=False, unsafe_hash=True, **options)
            if not own_repr:
                built.__repr__ = record_repr
            return built

        return build if maybe_cls is None else build(maybe_cls)
