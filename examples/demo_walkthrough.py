"""A scripted walkthrough: the official ``mcp`` SDK client drives ``askgate serve --demo``.

    python examples/demo_walkthrough.py        (or: make demo)
    python examples/demo_walkthrough.py --log-level info   (the server's operator log too)

The client launches the demo server over stdio and calls ``echo`` (allowed), ``guarded_echo``
twice (the policy asks: approved, then declined) and ``forbidden`` (denied), printing what the
server asked and answered. The answers to the prompts are scripted; a real client shows them to
a person. Arguments are passed on to ``askgate serve --demo``; the server's log goes to
standard error. ``--help`` says so and starts nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import StdioServerParameters


def describe(result: types.CallToolResult) -> str:
    if result.structured_content is not None:
        return f"isError={result.is_error} {result.structured_content}"
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    return f"isError={result.is_error} {' '.join(texts)!r}"


def parse(argv: list[str]) -> tuple[str, list[str]]:
    """The client's mode and the arguments for ``askgate serve --demo`` (every other one);
    ``-h``/``--help`` prints this script's own help and exits 0 before anything starts."""
    parser = argparse.ArgumentParser(
        prog="demo_walkthrough.py",
        allow_abbrev=False,  # --he is passed on, not taken for --help
        description="The official mcp client drives `askgate serve --demo` over stdio: echo "
        "(allowed), guarded_echo twice (asked: approved, then declined) and forbidden (denied).",
        epilog="Every other argument is passed on to `askgate serve --demo` (for instance "
        "--log-level info, --trace FILE, --audit-log FILE); see `askgate serve --help`.",
    )
    parser.add_argument(
        "--client-mode",
        choices=["legacy", "default"],
        default="legacy",
        help="the client's mode: legacy (the 2025 revisions, elicitation over the wire) or "
        "the official client's default (2026-07-28: an approval is a retry) (default: legacy)",
    )
    known, rest = parser.parse_known_args(argv)
    return known.client_mode, rest


async def main(client_mode: str, serve_args: list[str]) -> None:
    answers: Iterator[types.ElicitResult] = iter(
        [
            types.ElicitResult(action="accept", content={"approve": True}),
            types.ElicitResult(action="decline"),
        ]
    )

    async def ask_the_user(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        answer = next(answers)
        print(f"  server asks ({context.request_id}): {params.message}")
        print(f"  the user answers: {answer.action}")
        return answer

    server = StdioServerParameters(
        command=sys.executable, args=["-m", "askgate", "serve", "--demo", *serve_args]
    )
    with anyio.fail_after(60):
        mode: dict[str, Any] = {"mode": "legacy"} if client_mode == "legacy" else {}
        async with Client(server, elicitation_callback=ask_the_user, **mode) as client:
            assert client.server_info is not None
            print(f"connected to {client.server_info.name} ({client.protocol_version})")
            tools = await client.list_tools()
            print("tools offered:", ", ".join(tool.name for tool in tools.tools))
            steps = [
                ("echo", {"text": "hello"}, "allowed by policy"),
                ("guarded_echo", {"text": "hello"}, "the policy asks; the user approves"),
                ("guarded_echo", {"text": "hello"}, "the policy asks; the user declines"),
                ("forbidden", {}, "denied by policy"),
            ]
            for name, arguments, what in steps:
                print(f"\n{name}({arguments}): {what}")
                result = await client.call_tool(name, arguments)
                print(f"  -> {describe(result)}")


if __name__ == "__main__":
    anyio.run(main, *parse(sys.argv[1:]))
