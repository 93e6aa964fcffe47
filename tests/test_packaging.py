"""What `pip install askgate` and its extras give a user."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_models_extra_brings_hypothesis() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(dep.startswith("hypothesis") for dep in project["dependencies"])
    assert any(dep.startswith("hypothesis") for dep in project["optional-dependencies"]["models"])
    assert "askgate[models]" in (ROOT / "docs" / "checking.md").read_text()


def test_askgate_models_without_hypothesis_says_which_extra_to_install() -> None:
    blocked = (
        "import sys; sys.modules['hypothesis'] = None\n"  # as if it were not installed
        "try:\n    import askgate.models\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", blocked], capture_output=True, text=True, check=True
    ).stdout
    assert "pip install 'askgate[models]'" in out


def test_the_server_does_not_need_hypothesis() -> None:
    script = (
        "import sys; sys.modules['hypothesis'] = None\n"
        "import askgate, askgate.server, askgate.demo, askgate.__main__, askgate.transports.http\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "ok"
