"""What `pip install askgate` and its extras give a user."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

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


# -- The layout: one import root, askgate, from the folders that show the architecture ------------

LAID_OUT = {"askgate.core": "core", "askgate.transports": "transports", "askgate.models": "models"}
"""Each package the wheel builds from a top-level folder of its own, and that folder."""


def _setuptools() -> dict[str, Any]:
    tool: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    return dict(tool["setuptools"])


def test_the_wheel_has_one_import_root_built_from_the_folders() -> None:
    """Every package the wheel holds is askgate or below it; askgate.core is core/,
    askgate.transports transports/ and askgate.models models/; every folder of Python files
    there is a package listed; the repository's tools/ is not in the wheel."""
    setuptools = _setuptools()
    packages = set(setuptools["packages"])
    assert {name.split(".")[0] for name in packages} == {"askgate"}
    assert setuptools["package-dir"] == LAID_OUT
    for package, folder in LAID_OUT.items():
        assert package in packages
        below = {
            ".".join((package, *path.parent.relative_to(ROOT / folder).parts))
            for path in (ROOT / folder).rglob("__init__.py")
        }
        assert below <= packages, f"{folder}/ holds packages the wheel leaves out"
    assert (ROOT / "tools" / "specdoc.py").is_file()
    assert not any(name.startswith("tools") for name in packages)


def test_askgate_core_is_imported_from_the_top_level_folders() -> None:
    """Installed (``pip install -e .``), askgate's packages are the checkout's folders, from
    anywhere: a traceback or an editor names core/reducer.py, the file that runs."""
    script = (
        "import askgate, askgate.core.reducer, askgate.transports.stdio, askgate.models.explore\n"
        "for m in (askgate, askgate.core.reducer, askgate.transports.stdio, "
        "askgate.models.explore):\n"
        "    print(m.__file__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-P", "-c", script], capture_output=True, text=True, check=True, cwd="/"
    ).stdout.split()
    assert out == [
        str(ROOT / "askgate" / "__init__.py"),
        str(ROOT / "core" / "reducer.py"),
        str(ROOT / "transports" / "stdio.py"),
        str(ROOT / "models" / "explore.py"),
    ]


def test_the_tree_holds_no_symlinks() -> None:
    """The layout is pyproject.toml's, not links: no folder of source holds a symlink (a link
    would give a module two paths, one in tracebacks and another in the editor)."""
    folders = ("askgate", *LAID_OUT.values(), "tools", "tests", "bench", "examples")
    links = [
        str(path.relative_to(ROOT))
        for folder in folders
        for path in (ROOT / folder).rglob("*")
        if path.is_symlink()
    ]
    assert links == []


def test_core_holds_decisions_only() -> None:
    """What the shell decides on its own (the event loop, the marks on callbacks) is in
    transports/, and the sidecar's JSON encoding in askgate/, beside their users."""
    assert not (ROOT / "core" / "loop.py").exists()
    assert not (ROOT / "core" / "callbacks.py").exists()
    assert not (ROOT / "core" / "jsonwire.py").exists()
    assert (ROOT / "transports" / "loop.py").is_file()
    assert (ROOT / "transports" / "callbacks.py").is_file()
    assert (ROOT / "askgate" / "jsonwire.py").is_file()
