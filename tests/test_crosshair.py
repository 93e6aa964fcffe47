"""CrossHair checks the contracts (``pre:``/``post:``) of the reducer's decision functions.

Each test runs ``crosshair check`` on one function of ``askgate.core.decide`` with a small time
budget per condition; ``make crosshair`` runs the same with a larger one. CrossHair reports a
counterexample (exit status 1) when it finds inputs that break a postcondition.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CROSSHAIR = Path(sys.executable).with_name("crosshair")


def crosshair(function: str, seconds: int = 3) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(CROSSHAIR),
            "check",
            "--analysis_kind=PEP316",
            f"--per_condition_timeout={seconds}",
            f"askgate.core.decide.{function}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _holds(function: str) -> None:
    done = crosshair(function)
    assert done.returncode == 0, done.stdout + done.stderr


pytestmark = pytest.mark.skipif(not CROSSHAIR.exists(), reason="crosshair-tool not installed")


def test_R_ADM_5_crosshair_busy_scope() -> None:
    _holds("busy_scope")


def test_R_PARK_1_crosshair_park_verdict() -> None:
    _holds("park_verdict")


def test_R_PARK_3_crosshair_park_verdict_eviction_only_on_a_full_server() -> None:
    _holds("park_verdict")


def test_R_CAP_4_crosshair_can_elicit() -> None:
    _holds("can_elicit")


def test_R_CLOSE_1_crosshair_is_approval() -> None:
    _holds("is_approval")


def test_R_CLOSE_2_crosshair_refusal_detail() -> None:
    _holds("refusal_detail")


def test_R_ADM_0_crosshair_is_request_id() -> None:
    _holds("is_request_id")


def test_crosshair_finds_a_broken_contract(tmp_path: Path) -> None:
    """The check can fail: a contract that does not hold is reported with a counterexample."""
    module = tmp_path / "broken_decide.py"
    module.write_text(
        "def busy(total: int, limit: int) -> bool:\n"
        '    """\n'
        "    pre: 0 <= total <= limit\n"
        "    post: __return__ == (total >= limit)\n"
        '    """\n'
        "    return total > limit\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [
            str(CROSSHAIR),
            "check",
            "--analysis_kind=PEP316",
            "--per_condition_timeout=3",
            str(module),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "false when calling busy" in done.stdout
