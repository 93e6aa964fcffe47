"""A checkout laid out as its wheel installs it, for running it uninstalled beside another.

    python bench/trees.py CHECKOUT DEST    # then: env PYTHONPATH=DEST python -P -m askgate ...

askgate's wheel has one import root, ``askgate``, built from several folders of the checkout
(pyproject.toml, ``[tool.setuptools.package-dir]``: ``askgate.core`` is ``core/``,
``askgate.transports`` is ``transports/``, ``askgate.models`` is ``models/``). A checkout is
therefore not importable as it stands with ``PYTHONPATH=<checkout>``; :func:`lay_out` copies it
into ``DEST/askgate`` as the wheel lays it out, and compiles its bytecode (so that a count of a
start does not include compiling). Older checkouts, whose ``askgate/core`` and the like were
symlinks to the top-level folders, are laid out alike: the links are followed and copied.
The benchmarks that compare two checkouts (``--tree``) lay each out with this.
"""

from __future__ import annotations

import compileall
import contextlib
import os
import shutil
import sys
import tempfile
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path

IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


def package_dirs(checkout: Path) -> dict[str, str]:
    """The checkout's ``[tool.setuptools.package-dir]``: package -> folder, relative to the
    checkout (``{"askgate.core": "core", ...}``); empty for a checkout whose packages all live
    under ``askgate/`` (an older one, with symlinks)."""
    project = tomllib.loads((checkout / "pyproject.toml").read_text(encoding="utf-8"))
    mapping: dict[str, str] = project.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    return dict(mapping)


def _inside(package: str) -> Path:
    """Where a package goes below the import root: ``askgate.core`` -> ``askgate/core``."""
    return Path(*package.split("."))


def lay_out(checkout: Path, dest: Path, compile_them: bool = True) -> Path:
    """Copies ``checkout``'s packages into ``dest`` as its wheel lays them out (``dest/askgate``,
    with ``dest/askgate/core`` from ``checkout/core`` and so on), compiles them (unless told
    not to), and returns ``dest``: the folder to put on ``PYTHONPATH``."""
    checkout, dest = checkout.resolve(), dest.resolve()
    root = dest / "askgate"
    if root.exists():
        shutil.rmtree(root)
    # symlinks=False: an older checkout's askgate/core -> ../core is copied as a folder.
    shutil.copytree(checkout / "askgate", root, symlinks=False, ignore=IGNORED)
    for package, folder in package_dirs(checkout).items():
        shutil.copytree(checkout / folder, dest / _inside(package), ignore=IGNORED)
    if compile_them and not compileall.compile_dir(root, quiet=1):
        raise SystemExit(f"{root}: a module does not compile")
    return dest


@contextlib.contextmanager
def laid_out(checkouts: Sequence[str]) -> Iterator[list[str]]:
    """Each checkout :func:`lay_out` in a temporary folder of its own, in order (what to put on
    ``PYTHONPATH`` for it), removed at the end of the block."""
    with tempfile.TemporaryDirectory(prefix="askgate-trees-") as scratch:
        yield [str(lay_out(Path(c), Path(scratch) / str(i))) for i, c in enumerate(checkouts)]


def where_from(checkout: Path, laid_out_file: str) -> str:
    """The checkout's file a laid-out file was copied from, both relative:
    ``askgate/core/reducer.py`` -> ``core/reducer.py``; ``askgate/server.py`` stays."""
    parts = Path(laid_out_file).parts
    for package, folder in package_dirs(checkout).items():
        inside = _inside(package).parts
        if parts[: len(inside)] == inside:
            return str(Path(folder, *parts[len(inside) :]))
    return laid_out_file


def link_in_place(checkout: Path) -> None:
    """Makes ``checkout`` importable with ``PYTHONPATH=<checkout>`` by linking each mapped
    folder where the wheel puts it (``checkout/askgate/core -> ../core``): for a scratch copy
    whose files must stay where they are (bench/mutate.py edits ``core/*.py`` in place). Never
    for the repository itself, which has no links."""
    for package, folder in package_dirs(checkout).items():
        link = checkout / _inside(package)
        if not link.exists():
            os.symlink(os.path.relpath(checkout / folder, link.parent), link)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1].strip() if __doc__ else "", file=sys.stderr)
        return 2
    print(lay_out(Path(argv[0]), Path(argv[1])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
