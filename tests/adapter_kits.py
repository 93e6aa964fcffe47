"""One guarded server per framework, and the official client connected to it in memory.

A kit builds the same four tools (``read_file``, ``delete_file`` marked ``destructiveHint``,
``boom`` that raises, ``hang`` that never returns), a resource (``notes://today``) and a prompt
(``greet``) with a framework, puts askgate's gate in front of them with that framework's
adapter, and can add and remove a tool while serving. :func:`connected` serves one connection
of a kit's low-level server over memory streams to an ``mcp.ClientSession``; :func:`client`
connects the official high-level ``mcp.Client`` to it in process, in its default mode (the
2026-07-28 revision) or in ``mode="legacy"``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from fastmcp import FastMCP
from fastmcp.tools import Tool
from mcp import Client
from mcp.client.session import ClientSession, ElicitationFnT
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.shared.memory import create_client_server_memory_streams

from askgate.adapters import Gate
from askgate.adapters import fastmcp as fastmcp_adapter
from askgate.adapters import sdk as sdk_adapter
from askgate.server import Authorizer

GUARDED = {"destructiveHint": True}


NOTES = "the notes"


class Kit:
    """A guarded server of one framework; ``ran`` lists the tool runs as ``(tool, path)`` (and
    the reads as ``("notes", None)``, ``("greet", name)``). Its gate checks the reducer's
    invariants after every step."""

    framework = ""
    server: Any  # the framework's server object

    def __init__(self, authorizer: Authorizer | None, **options: Any) -> None:
        self.ran: list[tuple[str, object]] = []
        options.setdefault("check_invariants", True)  # R-INV-*, after every step
        self.gate = self.build(authorizer, **options)

    def build(self, authorizer: Authorizer | None, **options: Any) -> Gate:
        raise NotImplementedError

    @property
    def lowlevel(self) -> Server[Any]:
        raise NotImplementedError

    def add_tool(self, name: str) -> None:
        raise NotImplementedError

    def remove_tool(self, name: str) -> None:
        raise NotImplementedError


class MCPServerKit(Kit):
    framework = "mcpserver"

    def build(self, authorizer: Authorizer | None, **options: Any) -> Gate:
        self.server = server = MCPServer("files")
        ran = self.ran

        @server.tool()
        def read_file(path: str) -> str:
            ran.append(("read_file", path))
            return f"read {path}"

        @server.tool(annotations=types.ToolAnnotations(destructive_hint=True))
        def delete_file(path: str) -> str:
            ran.append(("delete_file", path))
            return f"deleted {path}"

        @server.tool()
        def boom() -> str:
            ran.append(("boom", None))
            raise RuntimeError("secret detail")

        @server.tool()
        async def hang() -> str:
            ran.append(("hang", None))
            await anyio.sleep_forever()
            return "never"

        @server.resource("notes://today")
        def notes() -> str:
            ran.append(("notes", None))
            return NOTES

        @server.prompt()
        def greet(name: str) -> str:
            ran.append(("greet", name))
            return f"hello {name}"

        return sdk_adapter.guard(server, authorizer, **options)

    @property
    def lowlevel(self) -> Server[Any]:
        lowlevel: Server[Any] = self.server._lowlevel_server
        return lowlevel

    def add_tool(self, name: str) -> None:
        ran = self.ran

        def added(path: str) -> str:
            ran.append((name, path))
            return f"{name} {path}"

        self.server.add_tool(added, name=name)

    def remove_tool(self, name: str) -> None:
        self.server.remove_tool(name)


class LowLevelKit(Kit):
    framework = "lowlevel"

    def build(self, authorizer: Authorizer | None, **options: Any) -> Gate:
        schema = {"type": "object", "properties": {"path": {"type": "string"}}}
        self.tools = {
            "read_file": types.Tool(name="read_file", input_schema=schema),
            "delete_file": types.Tool(
                name="delete_file",
                input_schema=schema,
                annotations=types.ToolAnnotations(destructive_hint=True),
            ),
            "boom": types.Tool(name="boom", input_schema={"type": "object"}),
            "hang": types.Tool(name="hang", input_schema={"type": "object"}),
        }

        async def list_tools(
            _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            return types.ListToolsResult(tools=list(self.tools.values()))

        async def call_tool(
            _ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
        ) -> types.CallToolResult:
            path = (params.arguments or {}).get("path")
            self.ran.append((params.name, path))
            if params.name == "boom":
                raise RuntimeError("secret detail")
            if params.name == "hang":
                await anyio.sleep_forever()
            text = {"read_file": "read", "delete_file": "deleted"}.get(params.name, params.name)
            return types.CallToolResult(content=[types.TextContent(text=f"{text} {path}")])

        async def read_resource(
            _ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
        ) -> types.ReadResourceResult:
            if params.uri != "notes://today":
                raise MCPError(-32002, "Resource not found")
            self.ran.append(("notes", None))
            contents = types.TextResourceContents(uri=params.uri, text=NOTES)
            return types.ReadResourceResult(contents=[contents])

        async def get_prompt(
            _ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
        ) -> types.GetPromptResult:
            name = (params.arguments or {}).get("name")
            self.ran.append(("greet", name))
            message = types.PromptMessage(
                role="user", content=types.TextContent(text=f"hello {name}")
            )
            return types.GetPromptResult(messages=[message])

        async def list_prompts(
            _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
        ) -> types.ListPromptsResult:
            return types.ListPromptsResult(prompts=[types.Prompt(name="greet")])

        self.server = Server(
            "files",
            on_list_prompts=list_prompts,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_read_resource=read_resource,
            on_get_prompt=get_prompt,
        )
        return sdk_adapter.guard(self.server, authorizer, **options)

    @property
    def lowlevel(self) -> Server[Any]:
        lowlevel: Server[Any] = self.server
        return lowlevel

    def add_tool(self, name: str) -> None:
        self.tools[name] = types.Tool(name=name, input_schema={"type": "object"})

    def remove_tool(self, name: str) -> None:
        del self.tools[name]


class FastMCPKit(Kit):
    framework = "fastmcp"

    def build(self, authorizer: Authorizer | None, **options: Any) -> Gate:
        self.server = server = FastMCP("files")
        ran = self.ran

        @server.tool()
        def read_file(path: str) -> str:
            ran.append(("read_file", path))
            return f"read {path}"

        @server.tool(annotations=GUARDED)
        def delete_file(path: str) -> str:
            ran.append(("delete_file", path))
            return f"deleted {path}"

        @server.tool()
        def boom() -> str:
            ran.append(("boom", None))
            raise RuntimeError("secret detail")

        @server.tool()
        async def hang() -> str:
            ran.append(("hang", None))
            await anyio.sleep_forever()
            return "never"

        @server.resource("notes://today")
        def notes() -> str:
            ran.append(("notes", None))
            return NOTES

        @server.prompt()
        def greet(name: str) -> str:
            ran.append(("greet", name))
            return f"hello {name}"

        return fastmcp_adapter.guard(server, authorizer, **options)

    @property
    def lowlevel(self) -> Server[Any]:
        lowlevel: Server[Any] = self.server._mcp_server
        return lowlevel

    def add_tool(self, name: str) -> None:
        ran = self.ran

        def added(path: str) -> str:
            ran.append((name, path))
            return f"{name} {path}"

        self.server.add_tool(Tool.from_function(added, name=name))

    def remove_tool(self, name: str) -> None:
        self.server.local_provider.remove_tool(name)


KITS: dict[str, Callable[..., Kit]] = {
    "mcpserver": MCPServerKit,
    "lowlevel": LowLevelKit,
    "fastmcp": FastMCPKit,
}


@asynccontextmanager
async def connected(
    kit: Kit, elicitation: ElicitationFnT | None = None, *, modern: bool = False
) -> AsyncIterator[ClientSession]:
    """An initialized official client on one connection of ``kit``'s server, in memory (of
    the 2026-07-28 revision, discovered instead of initialized, when ``modern``). On leaving,
    the connection is closed and the server's side of it has ended."""
    lowlevel = kit.lowlevel
    async with create_client_server_memory_streams() as (client, server):
        ended = anyio.Event()

        async def serve() -> None:
            try:
                await lowlevel.run(server[0], server[1], lowlevel.create_initialization_options())
            finally:
                ended.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            try:
                async with ClientSession(
                    client[0], client[1], elicitation_callback=elicitation
                ) as session:
                    if modern:
                        await session.discover()
                    else:
                        await session.initialize()
                    yield session
            finally:
                await client[1].aclose()
                await server[1].aclose()
                with anyio.fail_after(10):
                    await ended.wait()


@asynccontextmanager
async def client(
    kit: Kit, elicitation: ElicitationFnT | None = None, *, mode: str = "auto"
) -> AsyncIterator[Client]:
    """The official ``mcp.Client`` connected to ``kit``'s server in process: in its default
    mode (``"auto"``: it discovers the 2026-07-28 revision, each request served on its own) or
    in ``"legacy"`` (an ``initialize``d session of a 2025 revision)."""
    async with Client(kit.lowlevel, mode=mode, elicitation_callback=elicitation) as connected:
        yield connected


class Asked:
    """An elicitation callback answering each request with ``answer`` (a result, an error, or
    ``None``: wait until released or withdrawn). It records the messages it was asked and the
    requests withdrawn (cancelled by the server's ``notifications/cancelled``)."""

    def __init__(self, answer: types.ElicitResult | types.ErrorData | None = None) -> None:
        self.answer = answer
        self.asked: list[str] = []
        self.withdrawn: list[str] = []
        self.waiting = 0
        self.changed = anyio.Event()
        self.release = anyio.Event()

    def _changed(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    async def __call__(
        self,
        context: Any,  # noqa: ARG002 (ElicitationFnT's signature)
        params: types.ElicitRequestParams,
    ) -> types.ElicitResult | types.ErrorData:
        message = params.message
        self.asked.append(message)
        if self.answer is not None:
            return self.answer
        self.waiting += 1
        self._changed()
        try:
            await self.release.wait()
        except BaseException:
            self.withdrawn.append(message)
            self.waiting -= 1
            self._changed()
            raise
        self.waiting -= 1
        return types.ElicitResult(action="accept", content={"approve": True})

    async def until(self, test: Callable[[], bool]) -> None:
        """Waits (at most 10 s) until ``test()`` holds, woken by each change."""
        with anyio.fail_after(10):
            while not test():
                await self.changed.wait()


APPROVE = types.ElicitResult(action="accept", content={"approve": True})


def denial(result: types.CallToolResult) -> dict[str, Any]:
    """The deny object of an ``isError`` result (R-DLV-4), checked to be one."""
    assert result.is_error is True
    structured = result.structured_content
    assert isinstance(structured, dict)
    assert structured["error"] == "authorization_required"
    return structured


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


__all__ = [
    "APPROVE",
    "KITS",
    "NOTES",
    "Asked",
    "Kit",
    "MCPError",
    "client",
    "connected",
    "denial",
    "text",
]
