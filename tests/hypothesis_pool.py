"""Hypothesis's pool of local constants, pinned empty for the test suite (tests/conftest.py).

Hypothesis (since 6.131) draws, now and then (one draw in twenty, half of those from this
pool), a literal found in the source of the non-test modules imported so far in the process,
and it rescans them whenever ``len(sys.modules)`` changes. A derandomized test's histories then
depend on the modules earlier tests imported: after tests/test_conformance_fixture.py had
loaded the examples/ servers, the derandomized ContextMachine histories of
tests/test_model.py differed from a run alone, and a planted bug went uncaught. With the pool
pinned, a derandomized test draws the same histories whatever ran before it in the process,
in any subset of the suite; Hypothesis's own built-in constants still apply.

This replaces one private function of Hypothesis (``providers._get_local_constants``, read
once per test case); tests/test_hypothesis_pool.py fails if the pin stops taking effect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from hypothesis.internal.conjecture import providers
from hypothesis.internal.constants_ast import Constants

NO_LOCAL_CONSTANTS = Constants()

if not callable(getattr(providers, "_get_local_constants", None)):
    raise RuntimeError("hypothesis no longer has providers._get_local_constants: pin anew")
SCANNED: Callable[[], Constants] = providers._get_local_constants


def no_local_constants() -> Constants:
    """The pool every Hypothesis test case in the suite sees: empty."""
    return NO_LOCAL_CONSTANTS


def _use(pool: Callable[[], Constants]) -> None:
    providers._get_local_constants = pool
    providers.CONSTANTS_CACHE.cache.clear()  # its entries were filtered from the other pool


def pin() -> None:
    """From now on every test case draws from the empty pool."""
    _use(no_local_constants)


@contextmanager
def scanned() -> Iterator[None]:
    """Hypothesis's own pool (scanned from ``sys.modules``) inside the block, then the pin."""
    _use(SCANNED)
    try:
        yield
    finally:
        pin()
