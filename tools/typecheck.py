"""mypy over the checkout as its wheel lays it out, naming the checkout's own files.

    python tools/typecheck.py -p askgate                 # make typecheck
    python tools/typecheck.py tests bench examples tools

mypy finds a package by its folders and does not read pyproject.toml's
``[tool.setuptools.package-dir]`` (``askgate.core`` is ``core/``) nor the editable install's
import hook, so it cannot follow ``askgate.core`` in the checkout as it stands. This lays the
checkout's packages out as the wheel does, in ``.typecheck/`` (``bench/trees.py``), puts that
folder first on mypy's path (``MYPYPATH``), runs mypy with the given arguments from the
checkout, and prints what mypy says with each laid-out file named as the checkout's file
(``.typecheck/askgate/core/reducer.py`` -> ``core/reducer.py``). The exit status is mypy's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VIEW = ".typecheck"

sys.path.insert(0, str(ROOT / "bench"))
from trees import lay_out, where_from  # noqa: E402

LAID_OUT_FILE = re.compile(rf"^{re.escape(VIEW)}/(\S+?\.pyi?)(?=:)", re.MULTILINE)


def main(argv: list[str]) -> int:
    lay_out(ROOT, ROOT / VIEW, compile_them=False)
    env = dict(os.environ, MYPYPATH=str(ROOT / VIEW))
    mypy = [sys.executable, "-m", "mypy", *argv]
    done = subprocess.run(mypy, check=False, cwd=ROOT, env=env, capture_output=True, text=True)
    sys.stdout.write(LAID_OUT_FILE.sub(lambda m: where_from(ROOT, m.group(1)), done.stdout))
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
