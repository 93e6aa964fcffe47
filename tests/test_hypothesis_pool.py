"""A derandomized run draws the same whatever modules the process imported before it
(tests/hypothesis_pool.py pins Hypothesis's local constants; tests/conftest.py applies it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from .hypothesis_pool import scanned

# A module of the kind a test imports on its way (an example server, say): literals of every
# kind Hypothesis collects, most inside the ranges drawn below.
NEW_MODULE = "\n".join(
    [
        f"NUMBERS = {[100 + 24_999 * i for i in range(40)]!r}",
        f"WORDS = {[f'probe-{i}' for i in range(40)]!r}",
        "RATIOS = (0.25, 1.5, 2.75)",
        "",
    ]
)


def _draws() -> list[object]:
    """What one derandomized run of 50 examples draws (the same test function every call)."""
    drawn: list[object] = []

    @settings(max_examples=50, derandomize=True, database=None, phases=[Phase.generate])
    @given(st.lists(st.integers(0, 1_000_000) | st.text(max_size=8), min_size=10, max_size=10))
    def record(values: list[object]) -> None:
        drawn.extend(values)

    record()
    return drawn


def _import_new_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "pool_probe.py"
    path.write_text(NEW_MODULE, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("askgate_pool_probe", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "askgate_pool_probe", module)
    spec.loader.exec_module(module)


def test_derandomized_runs_do_not_depend_on_the_modules_imported_before_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    draws = _draws()
    with scanned():
        unpinned = _draws()
    _import_new_module(tmp_path, monkeypatch)
    with scanned():
        # The perturbation is real: Hypothesis's own pool takes the new module's literals,
        # and an unpinned run's draws move.
        assert _draws() != unpinned
    assert _draws() == draws
