"""The demo server of ``askgate serve --demo``: one tool for each kind of decision.

``echo`` is allowed, ``guarded_echo`` and ``delete_file`` ask, ``forbidden`` is denied,
``sleep`` and ``crash`` show a slow and a failing callback. The decisions come from the policy
file shipped beside this module (``demo_policy.toml``), or from ``policy`` when given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from askgate.policy import Policy, parse_policy
from askgate.server import Server
from askgate.transports.runtime import completes_without_suspending

DEMO_POLICY = "demo_policy.toml"


def demo_policy() -> Policy:
    """The policy shipped with the package: the file beside this module, or the package's
    resource where the package is not a folder (a zip)."""
    beside = Path(__file__).with_name(DEMO_POLICY)
    if beside.is_file():  # without importlib.resources, which imports zipfile and tempfile
        text = beside.read_text(encoding="utf-8")
    else:  # pragma: no cover - askgate is installed as folders
        from importlib import resources  # noqa: PLC0415

        text = resources.files("askgate").joinpath(DEMO_POLICY).read_text(encoding="utf-8")
    return parse_policy(text, f"askgate/{DEMO_POLICY}")


def build_demo(policy: Policy | None = None, *, configured: bool = True, **options: Any) -> Server:
    """The demo server, guarded by ``policy`` or the demo's own. Serving the demo is an
    operator's choice, so its policy counts as configured (R-HTTP-13) unless ``configured`` is
    false."""
    chosen = policy if policy is not None else demo_policy()
    server = Server(
        "askgate-demo",
        instructions="A demo of askgate: echo runs, guarded_echo asks first, forbidden is denied.",
        authorizer=chosen.authorize,
        read_authorizer=chosen.authorize_read,
        visibility=chosen.visible,
        authorizer_source="configured" if configured else "default",
        **options,
    )

    @server.tool()
    @completes_without_suspending  # it awaits nothing: run at once, without a task
    async def echo(text: str) -> str:
        """Echoes the text back (allowed)."""
        return text

    @server.tool()
    @completes_without_suspending
    async def guarded_echo(text: str) -> str:
        """Echoes the text back once you approve it (asks)."""
        return text

    @server.tool(annotations={"destructiveHint": True})
    def delete_file(path: str) -> str:
        """Pretends to delete a file (destructive: asks). Nothing is deleted."""
        print(f"demo: would delete {path}")  # goes to stderr: stdout is the wire
        return f"pretended to delete {path}"

    @server.tool()
    async def forbidden() -> str:
        """Never runs: the policy denies it."""
        return "this never runs"

    @server.tool()
    async def sleep(ms: int) -> str:
        """Sleeps for ms milliseconds, then answers."""
        await anyio.sleep(max(0, ms) / 1000)
        return f"slept {ms}ms"

    @server.tool()
    def crash() -> str:
        """Raises: the client gets callback_failed, never the exception's text."""
        print("demo: crash is about to raise")  # stderr, not the wire
        raise RuntimeError("the demo crash tool raised (this text is never sent)")

    @server.resource("demo://status", name="status", mime_type="application/json")
    async def status() -> dict[str, Any]:
        """The demo server's status."""
        return {"status": "ok", "server": "askgate-demo"}

    @server.prompt()
    async def greeting(name: str) -> str:
        """A greeting for someone."""
        return f"Please greet {name} warmly."

    return server
