"""The one way core declares a record: :func:`record`, attrs's ``frozen`` to the type checker.

Every event, effect, job, state and value of the reducer is a record: an attrs class, slotted,
compared and hashed by its fields. mypy (and every type checker that reads attrs) sees
:func:`record` as :func:`attrs.frozen`, so assigning a field anywhere in the code it checks is
a type error. At run time a record is an ``attrs.define`` class with a generated ``__hash__``
(``unsafe_hash``: hashed by value, as a frozen class is): its ``__init__`` stores each field
plainly, which costs less than the ``object.__setattr__`` a frozen class's ``__init__`` calls
for each field, and the reducer builds several records on every step. Nothing refuses an
assignment at run time; the reducer never makes one (R-INV-10), which mypy checks, and
``ASKGATE_FROZEN_RECORDS=1`` in the environment of a process builds every record frozen
(assignments raise ``attrs.exceptions.FrozenInstanceError``), which a test runs the reducer
under.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import attrs

__all__ = ["FROZEN_AT_RUN_TIME", "record"]

FROZEN_AT_RUN_TIME = os.environ.get("ASKGATE_FROZEN_RECORDS", "") == "1"
"""Whether this process builds records frozen (``ASKGATE_FROZEN_RECORDS=1``, for checking)."""

if TYPE_CHECKING:
    from attrs import frozen as record
else:

    def record(maybe_cls: type | None = None, **options: Any) -> Any:
        """:func:`attrs.frozen` to the type checker; at run time :func:`attrs.define`, hashed
        by value, or :func:`attrs.frozen` itself under ``ASKGATE_FROZEN_RECORDS=1``."""
        if FROZEN_AT_RUN_TIME:
            return attrs.frozen(maybe_cls, **options)
        return attrs.define(maybe_cls, unsafe_hash=True, **options)
