"""Which event loop askgate serves on (docs/performance.md, "The event loop"): one decision
for both, in a module of its own so that a stdio server takes it without importing the HTTP side
(docs/performance.md)."""

from __future__ import annotations

from typing import Final, Literal

LOOP_ENV: Final = "ASKGATE_LOOP"
"""The environment variable that chooses the event loop (docs/performance.md)."""
LOOP_CHOICES: Final = ("auto", "asyncio", "uvloop")
Loop = Literal["asyncio", "uvloop"]


def event_loop(asked: str | None, uvloop_installed: bool) -> tuple[Loop, None] | tuple[None, str]:
    """The event loop ``askgate serve --http`` and ``Server.run_http`` run on,
    and ``askgate serve --stdio`` and ``Server.run_stdio`` run on asyncio's backend, from the value
    of ``ASKGATE_LOOP`` (``asked``; ``None`` when unset) and whether the ``uvloop`` package is
    importable: ``(loop, None)``, or ``(None, the one-line refusal)``."""
    choice = (asked or "auto").strip().lower() or "auto"
    if choice not in LOOP_CHOICES:
        return None, (
            f"askgate refuses to start: {LOOP_ENV}={asked!r}: one of " + ", ".join(LOOP_CHOICES)
        )
    if choice == "asyncio" or (choice == "auto" and not uvloop_installed):
        return "asyncio", None
    if not uvloop_installed:
        return None, (
            f"askgate refuses to start: {LOOP_ENV}=uvloop but uvloop is not installed "
            "(pip install 'askgate[fast]')"
        )
    return "uvloop", None
