"""A raw JSON-RPC peer for an askgate stdio server run as a subprocess, for the stdio tests.

Everything it waits for is bounded: every read has a deadline, and the process is killed when
the block ends. Every line the server writes is kept, and :meth:`RawPeer.recv` fails the test
when one is not a JSON object (stdout must carry nothing but JSON-RPC).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc

READ_TIMEOUT = 20.0
ELICIT_CAPS: dict[str, Any] = {"elicitation": {}}


def demo_command(*extra: str, backend: str = "asyncio") -> list[str]:
    return [sys.executable, "-m", "askgate", "serve", "--demo", "--backend", backend, *extra]


class RawPeer:
    """Writes lines to the server's stdin and reads its stdout line by line."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self._buffer = bytearray()
        self.lines: list[bytes] = []  # every stdout line read so far
        self.stderr = bytearray()
        self.stderr_closed = anyio.Event()
        self._stdin_open = True

    async def send_bytes(self, data: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(data)

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_bytes(json.dumps(message).encode() + b"\n")

    async def request(self, request_id: object, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)

    async def call(self, request_id: object, tool: str, **arguments: Any) -> None:
        await self.request(request_id, "tools/call", {"name": tool, "arguments": arguments})

    async def close_stdin(self) -> None:
        if self._stdin_open:
            assert self.process.stdin is not None
            await self.process.stdin.aclose()
            self._stdin_open = False

    async def _read_line(self) -> bytes | None:
        """The next stdout line, or None at end of output."""
        assert self.process.stdout is not None
        while b"\n" not in self._buffer:
            try:
                chunk = await self.process.stdout.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return None
            self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        self.lines.append(line)
        return line

    async def recv(self, timeout: float = READ_TIMEOUT) -> dict[str, Any]:
        """The next message; fails when a line is not a JSON object or none comes in time."""
        with anyio.fail_after(timeout):
            line = await self._read_line()
        assert line is not None, f"the server closed stdout; stderr: {self.stderr.decode()!r}"
        message = json.loads(line)
        assert isinstance(message, dict), line
        return message

    async def recv_until(
        self, accept: Callable[[dict[str, Any]], bool], timeout: float = READ_TIMEOUT
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The first message ``accept`` takes, and the ones before it."""
        before: list[dict[str, Any]] = []
        with anyio.fail_after(timeout):
            for _ in range(10_000):
                message = await self.recv(timeout)
                if accept(message):
                    return message, before
                before.append(message)
        raise AssertionError("no such message in 10 000")

    async def reply_to(self, request_id: object) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The response to ``request_id`` (and what came before it)."""
        return await self.recv_until(lambda m: m.get("id") == request_id and "method" not in m)

    async def rest(self, timeout: float = READ_TIMEOUT) -> list[dict[str, Any]]:
        """Every message until the server closes stdout, each checked to be a JSON object."""
        messages: list[dict[str, Any]] = []
        with anyio.fail_after(timeout):
            for _ in range(100_000):
                line = await self._read_line()
                if line is None:
                    return messages
                message = json.loads(line)
                assert isinstance(message, dict), line
                messages.append(message)
        raise AssertionError("the server did not close stdout")

    async def wait_exit(self, timeout: float = READ_TIMEOUT) -> int:
        with anyio.fail_after(timeout):
            return await self.process.wait()

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        await self.request(
            0,
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": capabilities if capabilities is not None else {},
                "clientInfo": {"name": "raw-peer", "version": "0"},
            },
        )
        reply, _ = await self.reply_to(0)
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return reply


@asynccontextmanager
async def raw_server(command: list[str]) -> AsyncIterator[RawPeer]:
    """Runs ``command`` with piped stdio; the process is killed when the block ends."""
    process = await anyio.open_process(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    peer = RawPeer(process)

    async def drain_stderr() -> None:
        assert process.stderr is not None
        try:
            async for chunk in process.stderr:
                peer.stderr += chunk
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return
        finally:
            peer.stderr_closed.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain_stderr)
            try:
                yield peer
                if process.returncode is not None:  # let the test read all of stderr
                    with anyio.move_on_after(READ_TIMEOUT):
                        await peer.stderr_closed.wait()
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
                with anyio.move_on_after(5):
                    await process.wait()
            await process.aclose()


def result_text(message: dict[str, Any]) -> str:
    """The text of a tools/call result's first content block."""
    content = message["result"]["content"]
    assert content, message
    assert content[0]["type"] == "text", message
    text = content[0]["text"]
    assert isinstance(text, str)
    return text


# spec/rules.md R-DLV-4: the sentence of each fixed deny detail, written out.
WHY = {
    "sensitive tool unguarded": "it is marked sensitive and the server has no policy to allow it",
    "authorizer failed": "the server's policy failed to decide on it",
    "too many elicitations pending": "this connection already has too many approvals pending",
    "too many elicitations pending on this server": "too many approvals are pending on this server",
    "evicted to make room on this server": (
        "it was evicted to make room on this server while it waited for approval"
    ),
    "declined": "the approval was declined",
    "cancelled": "the approval was cancelled",
    "not approved": "the answer did not approve it",
    "elicitation failed": "the client answered the approval request with an error",
}
CANNOT_ASK = "it needs approval and this client cannot be asked"


def policy_denies(reason: str) -> str:
    return f"the server's policy denies it ({reason})"


def deny_payload(tool: str, decision: str, detail: str, why: str | None = None) -> dict[str, str]:
    """The deny of R-DLV-4; ``why`` defaults to the sentence of the fixed ``detail``."""
    return {
        "error": "authorization_required",
        "tool": tool,
        "decision": decision,
        "detail": detail,
        "message": f"{tool} was not run: {WHY[detail] if why is None else why}",
    }
