"""Reference models of the specification, checked against :mod:`askgate.core`.

They run on Hypothesis, which ``pip install 'askgate[models]'`` installs with askgate.
"""

try:
    import hypothesis  # noqa: F401
except ImportError as missing:  # pragma: no cover - the test extra installs it
    raise ImportError("askgate.models needs Hypothesis: pip install 'askgate[models]'") from missing
