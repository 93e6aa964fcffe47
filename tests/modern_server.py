"""A stdio server for the modern-era end-to-end tests (tests/test_stdio_e2e.py): a tool that
logs, one that asks its client, and one that registers another tool (a tools list change).

Run as ``python -m tests.modern_server [--backend asyncio|trio]``.
"""

from __future__ import annotations

import sys

from askgate.server import ClientRequestError, Context, Server


def build_server() -> Server:
    server = Server(name="modern-e2e")

    @server.tool()
    async def logs(ctx: Context) -> str:
        """Logs once at each of three levels."""
        for level in ("debug", "info", "error"):
            await ctx.log(level, f"at {level}")
        return "logged"

    @server.tool()
    async def asks(ctx: Context) -> str:
        """Asks its client a question of its own and says how that went."""
        try:
            result = await ctx.elicit("Your name?", {"type": "object", "properties": {}})
        except ClientRequestError as failed:
            return f"refused: {failed.reason}"
        return f"answered: {result.get('action')}"

    @server.tool()
    async def grows() -> str:
        """Registers one more tool."""

        @server.tool(name="grown")
        async def grown() -> str:
            return "grown"

        return "grew"

    return server


if __name__ == "__main__":
    backend = sys.argv[sys.argv.index("--backend") + 1] if "--backend" in sys.argv else "asyncio"
    raise SystemExit(build_server().run_stdio(backend=backend))
