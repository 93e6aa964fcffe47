"""The repository's own tools, run from a checkout (``python tools/specdoc.py .``); not part of
the wheel. A package so that the tests import them as ``tools.specdoc``."""
