"""A CrossHair plugin for askgate's contracts (``--extra_plugin=tests/crosshair_plugin.py``).

It does three things, each needed for a contract to be checked at all:

- ``is`` on a value whose type CrossHair has not decided yet. CrossHair models a parameter
  annotated ``object`` (a peer's answer, its capabilities) as a proxy whose type is decided
  lazily, by the first ``isinstance`` that asks; ``is`` compares the proxy itself, so without
  this ``content.get("approve") is True`` is false on every path: ``decide.approves`` could never
  return True under CrossHair, its contract would hold vacuously on the approving side, and a
  version that never approves would pass. Before an ``is`` against ``None``, ``True`` or
  ``False``, the plugin decides the proxy's type the way ``isinstance`` would (a branch CrossHair
  explores both ways) and, when it is that singleton's type, hands ``is`` the concrete value.
  Python code never sees such a proxy, so this only makes CrossHair's ``is`` match Python's.
- Values drawn as trees (see ``tree_only``): no counterexample that contains itself.
- ``Options`` built from symbolic integers (see ``any_options``).

CrossHair runs the file with ``exec`` inside one of its functions, so everything is bound inside
``_install``. It uses CrossHair internals (tested with crosshair-tool 0.0.113);
``tests/test_crosshair.py::test_crosshair_refutes_wrong_copies`` fails if a contract stops
catching the bugs it plants, which is what happens when one of these stops working.
"""

# ruff: noqa: PLC0415  (the imports must run inside _install, see above)
from __future__ import annotations


def _install() -> None:
    import dis
    from collections.abc import Callable
    from types import CodeType, FrameType
    from typing import Any

    from crosshair.core import python_type, realize, register_opcode_patch
    from crosshair.libimpl.builtinslib import SymbolicObject, _issubclass
    from crosshair.statespace import SnapshotRef, StateSpace
    from crosshair.tracers import (  # type: ignore[attr-defined]
        NoTracing,
        ResumedTracing,
        TracingModule,
        frame_stack_read,
        frame_stack_write,
    )

    class DecideTypeBeforeIs(TracingModule):
        opcodes_wanted = frozenset([dis.opmap["IS_OP"]])

        def trace_op(self, frame: FrameType, codeobj: CodeType, codenum: int) -> None:  # noqa: ARG002
            for here, there in ((-1, -2), (-2, -1)):
                value = frame_stack_read(frame, here)
                other = frame_stack_read(frame, there)
                if not isinstance(value, SymbolicObject):
                    continue
                if not (other is None or other is True or other is False):
                    continue
                typ = python_type(value)
                with ResumedTracing():  # type: ignore[no-untyped-call]
                    same_type = bool(_issubclass(typ, type(other)))  # type: ignore[no-untyped-call]
                if same_type:
                    frame_stack_write(frame, here, realize(value))

    register_opcode_patch(DecideTypeBeforeIs())

    # A value CrossHair draws from its heap may be one it made before (aliasing), so a drawn
    # dict can contain itself; realizing such a counterexample to print it recursed without end
    # (a RecursionError in about one run in twenty). The values these functions read come from
    # JSON, which has no shared or cyclic parts, so a heap reference only ever names the value
    # made for that same reference.
    latest = SnapshotRef(-1)

    def tree_only(
        self: StateSpace,
        ref: Any,
        typ: type,
        proxy_generator: Callable[[type], object],
        snapshot: SnapshotRef = latest,
    ) -> object:
        with NoTracing():  # type: ignore[no-untyped-call]
            for known, _, value in self.heaps[snapshot]:
                if known.eq(ref):
                    return value
            value = proxy_generator(typ)
            self.add_value_to_heaps(ref, typ, value)
            return value

    # Fails loudly if a CrossHair release renames what is patched (the pin in pyproject.toml
    # is what keeps these internals as written).
    assert callable(getattr(StateSpace, "find_key_in_heap", None)), "crosshair internals moved"
    StateSpace.find_key_in_heap = tree_only  # type: ignore[method-assign]

    # CrossHair cannot build an Options itself (crosshair-tool 0.0.113 fails on its Literal
    # fields), so it is built here: every option R-OPT-1 constrains is any integer (the share
    # also None), the others keep their defaults. Values of other types (a bool, a float) would
    # multiply the paths to search for each of the nine options; the rule that refuses them is
    # tested by example (tests/test_rules.py, test_R_OPT_1_values_below_one_refuse_to_start).
    from crosshair import register_type
    from crosshair.core import SymbolicFactory

    from askgate.core.options import _POSITIVE, Options

    def any_options(factory: SymbolicFactory) -> Options:
        values: dict[str, Any] = {name: factory(int, "_" + name) for name in _POSITIVE}
        values["max_in_flight_per_connection"] = factory(int | None, "_share")
        return Options(**values)

    register_type(Options, any_options)

    # A parameter annotated ``object`` is drawn as any class in memory, and importlib.metadata
    # (loaded by CrossHair itself) holds ``FoldedCase``, a str whose ``==`` calls ``.lower()`` on
    # the other side: drawn as a dict key beside an int, it made CrossHair's own check that a
    # dict's keys are unique raise AttributeError and end the whole run (crosshair-tool 0.0.113,
    # by chance, more often with the four modules in one run). A FoldedCase is never drawn; a
    # plain str, drawn as well, covers what it would. CrossHair leaves out pdb's str subclass
    # for the same reason.
    from importlib.metadata._text import FoldedCase  # type: ignore[import-not-found]

    from crosshair.util import IgnoreAttempt

    def no_folded_case(factory: SymbolicFactory) -> object:  # noqa: ARG001
        raise IgnoreAttempt

    register_type(FoldedCase, no_folded_case)


_install()
