"""The stdio transport over raw pipes: ``askgate serve --demo`` as a subprocess (seed 002).

Each test runs the server on the same event loop as the test (asyncio and trio) and talks raw
JSON-RPC lines to it, so it can send what no SDK client would: duplicate ids, bad JSON, lines
over the cap, invalid UTF-8, batches. Every read has a deadline; nothing waits on a sleep.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from askgate.core.codec import MAX_BYTES
from askgate.transports.stdio import CHUNK_BYTES, FdReceiveStream, LineSplitter

from .stdio_peer import (
    CANNOT_ASK,
    ELICIT_CAPS,
    READ_TIMEOUT,
    demo_command,
    deny_payload,
    raw_server,
    result_text,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


APPROVE = {"action": "accept", "content": {"approve": True}}


def is_elicitation(message: dict[str, Any]) -> bool:
    return message.get("method") == "elicitation/create"


async def test_R_ADM_1_over_stdio_a_reused_id_is_refused_and_the_first_call_keeps_its_outcome(
    anyio_backend: str,
) -> None:
    async with raw_server(demo_command(backend=anyio_backend)) as peer:
        await peer.initialize(ELICIT_CAPS)
        await peer.call(7, "guarded_echo", text="first")
        elicitation, _ = await peer.recv_until(is_elicitation)
        await peer.call(7, "echo", text="second")
        duplicate, _ = await peer.reply_to(7)
        assert duplicate["error"]["code"] == -32600
        await peer.send({"jsonrpc": "2.0", "id": elicitation["id"], "result": APPROVE})
        outcome, _ = await peer.reply_to(7)
        assert result_text(outcome) == "first"


async def test_bad_json_is_answered_parse_error_with_null_id_and_serving_goes_on(
    anyio_backend: str,
) -> None:
    async with raw_server(demo_command(backend=anyio_backend)) as peer:
        await peer.send_bytes(b"hello\n")
        error = await peer.recv()
        assert error == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32700, "message": "Parse error: not JSON"},
        }
        await peer.request(1, "ping")
        assert (await peer.recv()) == {"jsonrpc": "2.0", "id": 1, "result": {}}


async def test_a_line_over_the_cap_is_answered_before_it_ends_and_the_rest_is_skipped(
    anyio_backend: str,
) -> None:
    async with raw_server(demo_command(backend=anyio_backend)) as peer:
        head = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"'
        await peer.send_bytes(head + b"a" * (MAX_BYTES + 64 * 1024))
        # The line has not ended yet: the server answered without buffering it whole.
        error = await peer.recv()
        assert error["id"] is None
        assert error["error"]["code"] == -32700
        await peer.send_bytes(b"a" * (MAX_BYTES // 2) + b'"}}\n')
        await peer.request(2, "ping")
        assert (await peer.recv()) == {"jsonrpc": "2.0", "id": 2, "result": {}}


async def test_a_line_exactly_at_the_cap_is_served(anyio_backend: str) -> None:
    async with raw_server(demo_command(backend=anyio_backend)) as peer:
        head = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"'
        tail = b'"}}'
        line = head + b"a" * (MAX_BYTES - len(head) - len(tail)) + tail
        assert len(line) == MAX_BYTES
        await peer.send_bytes(line + b"\r\n")
        assert (await peer.recv()) == {"jsonrpc": "2.0", "id": 1, "result": {}}


async def test_invalid_utf8_is_a_parse_error_for_that_line_only(anyio_backend: str) -> None:
    async with raw_server(demo_command(backend=anyio_backend)) as peer:
        await peer.send_bytes(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\xff"}}\n')
        await peer.request(2, "ping")
        error = await peer.recv()
        assert error["id"] is None
        assert error["error"]["code"] == -32700
        assert (await peer.recv()) == {"jsonrpc": "2.0", "id": 2, "result": {}}


async def test_non_ascii_text_goes_through_unchanged(anyio_backend: str) -> None:
    async with raw_server(demo_command(backend=anyio_backend)) as peer:
        await peer.initialize()
        text = "héllo wörld ✓ 𝄞"
        await peer.send_bytes(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": text}},
                },
                ensure_ascii=False,
            ).encode("utf-8")
            + b"\n"
        )
        reply, _ = await peer.reply_to(1)
        assert result_text(reply) == text
        assert text.encode("utf-8") in peer.lines[-1]  # written as UTF-8, not escaped


async def test_a_batch_array_is_refused_and_no_element_runs(anyio_backend: str) -> None:
    async with raw_server(demo_command(backend=anyio_backend)) as peer:
        await peer.initialize()
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "crash"}},
        ]
        await peer.send_bytes(json.dumps(batch).encode() + b"\n")
        await peer.request(3, "ping")
        error = await peer.recv()
        assert error["id"] is None
        assert error["error"]["code"] == -32600
        assert (await peer.recv()) == {"jsonrpc": "2.0", "id": 3, "result": {}}


async def test_crlf_and_empty_lines_are_tolerated(anyio_backend: str) -> None:
    async with raw_server(demo_command(backend=anyio_backend)) as peer:
        await peer.send_bytes(b'\n\r\n{"jsonrpc":"2.0","id":1,"method":"ping"}\r\n\n')
        await peer.request(2, "ping")
        assert (await peer.recv()) == {"jsonrpc": "2.0", "id": 1, "result": {}}
        assert (await peer.recv()) == {"jsonrpc": "2.0", "id": 2, "result": {}}


async def test_end_of_input_drops_parked_and_running_calls_and_exits_0(
    anyio_backend: str,
) -> None:
    async with raw_server(demo_command(backend=anyio_backend)) as peer:
        await peer.initialize(ELICIT_CAPS)
        await peer.call(1, "guarded_echo", text="parked")
        await peer.recv_until(is_elicitation)
        await peer.call(2, "sleep", ms=600_000)
        await peer.request(3, "ping")  # answered inline, after the sleep started
        await peer.reply_to(3)
        await peer.request(4, "ping")  # answered before end of input: must be flushed
        await peer.close_stdin()
        rest = await peer.rest()
        assert await peer.wait_exit() == 0
    ids = [m.get("id") for m in rest]
    assert 4 in ids
    assert 1 not in ids
    assert 2 not in ids


async def test_stdout_carries_only_json_while_tools_print(anyio_backend: str) -> None:
    async with raw_server(demo_command(backend=anyio_backend)) as peer:
        await peer.initialize(ELICIT_CAPS)
        await peer.call(1, "delete_file", path="/tmp/nothing")
        elicitation, _ = await peer.recv_until(is_elicitation)
        await peer.send({"jsonrpc": "2.0", "id": elicitation["id"], "result": APPROVE})
        approved, _ = await peer.reply_to(1)
        assert result_text(approved) == "pretended to delete /tmp/nothing"
        await peer.call(2, "crash")
        crashed, _ = await peer.reply_to(2)
        assert crashed["result"]["structuredContent"] == {"error": "callback_failed"}
        await peer.close_stdin()
        await peer.rest()
        assert await peer.wait_exit() == 0
        assert all(isinstance(json.loads(line), dict) for line in peer.lines)
        with anyio.fail_after(READ_TIMEOUT):
            await peer.stderr_closed.wait()
        assert b"demo: would delete /tmp/nothing" in peer.stderr
        assert b"demo: crash is about to raise" in peer.stderr
        assert b"never sent" not in b"\n".join(peer.lines)


PRINTING_SERVER = textwrap.dedent(
    """
    import os, subprocess, sys
    from askgate import Server

    server = Server("printer")

    @server.tool()
    def noisy() -> str:
        print("print() from a tool")
        sys.__stdout__.write("sys.__stdout__ from a tool\\n")
        sys.__stdout__.flush()
        os.write(1, b"os.write(1) from a tool\\n")
        subprocess.run([sys.executable, "-c", "print('a child process')"], check=True)
        return "done"

    raise SystemExit(server.run_stdio(backend=sys.argv[1]))
    """
)


async def test_prints_writes_to_fd_1_and_child_processes_never_reach_the_wire(
    anyio_backend: str, tmp_path: Path
) -> None:
    script = tmp_path / "printing_server.py"
    script.write_text(PRINTING_SERVER)
    async with raw_server([sys.executable, str(script), anyio_backend]) as peer:
        await peer.initialize()
        await peer.call(1, "noisy")
        reply, before = await peer.reply_to(1)
        assert result_text(reply) == "done"
        assert before == []
        await peer.close_stdin()
        assert await peer.rest() == []
        assert await peer.wait_exit() == 0
        with anyio.fail_after(READ_TIMEOUT):
            await peer.stderr_closed.wait()
        for noise in (b"print() from", b"sys.__stdout__ from", b"os.write(1)", b"a child"):
            assert noise in peer.stderr
            assert not any(noise in line for line in peer.lines)


async def test_R_AUTH_3_over_stdio_a_client_that_cannot_be_asked_gets_the_deny_and_no_elicitation(
    anyio_backend: str,
) -> None:
    async with raw_server(demo_command(backend=anyio_backend)) as peer:
        await peer.initialize({})
        await peer.call(1, "guarded_echo", text="x")
        reply, before = await peer.reply_to(1)
        assert before == []
        assert reply["result"]["isError"] is True
        assert reply["result"]["structuredContent"] == deny_payload(
            "guarded_echo", "ask", 'Allow guarded_echo to echo "x"?', CANNOT_ASK
        )


async def test_R_CLOSE_4_over_stdio_a_cancelled_parked_call_is_dropped_and_its_prompt_withdrawn(
    anyio_backend: str,
) -> None:
    async with raw_server(demo_command(backend=anyio_backend)) as peer:
        await peer.initialize(ELICIT_CAPS)
        await peer.call(1, "guarded_echo", text="x")
        elicitation, _ = await peer.recv_until(is_elicitation)
        await peer.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
        )
        withdrawn = await peer.recv()
        assert withdrawn["method"] == "notifications/cancelled"
        assert withdrawn["params"]["requestId"] == elicitation["id"]
        # A late approval is ignored: no reply to it, and call 1 is never answered.
        await peer.send({"jsonrpc": "2.0", "id": elicitation["id"], "result": APPROVE})
        await peer.request(2, "ping")
        assert (await peer.recv()) == {"jsonrpc": "2.0", "id": 2, "result": {}}


async def test_option_values_out_of_range_refuse_to_start_with_exit_2(anyio_backend: str) -> None:
    command = demo_command("--max-parked", "64", "--max-parked-total", "8", backend=anyio_backend)
    async with raw_server(command) as peer:
        assert await peer.wait_exit() == 2
        assert await peer.rest() == []
    assert (
        peer.stderr
        == b"askgate refuses to start: --max-parked 64: may not exceed --max-parked-total (8)\n"
    )


async def test_R_HTTP_13_http_without_a_configured_authorizer_refuses_to_start(
    anyio_backend: str,  # noqa: ARG001  (the peer's loop; HTTP serves on asyncio)
    tmp_path: Path,
) -> None:
    (tmp_path / "bare.py").write_text("from askgate import Server\nserver = Server('bare')\n")
    target = f"{tmp_path / 'bare.py'}:server"
    command = [sys.executable, "-m", "askgate", "serve", target, "--http", "127.0.0.1:0"]
    async with raw_server(command) as peer:
        assert await peer.wait_exit() == 2
    assert peer.stderr.startswith(b"askgate refuses to start: --http needs --policy FILE (")
    assert b"no tool authorizer was configured" in peer.stderr
    assert b"no read authorizer" in peer.stderr
    assert peer.stderr.count(b"\n") == 1


BROKEN_REDUCER_SERVER = textwrap.dedent(
    """
    import sys
    import askgate.transports.runtime as runtime
    from askgate import Server

    real_step = runtime.step

    def broken_step(state, event):
        if b"boom" in getattr(event, "data", b""):
            raise RuntimeError("a bug in the machinery")
        return real_step(state, event)

    runtime.step = broken_step
    raise SystemExit(Server("broken").run_stdio(backend=sys.argv[1]))
    """
)


async def test_a_failure_of_the_machinery_is_said_on_stderr_and_exits_non_zero(
    anyio_backend: str, tmp_path: Path
) -> None:
    script = tmp_path / "broken_server.py"
    script.write_text(BROKEN_REDUCER_SERVER)
    async with raw_server([sys.executable, str(script), anyio_backend]) as peer:
        await peer.request(1, "ping")
        assert (await peer.recv()) == {"jsonrpc": "2.0", "id": 1, "result": {}}
        await peer.request("boom", "ping")
        assert await peer.wait_exit() == 1
        assert await peer.rest() == []
    assert b"askgate: the server failed" in peer.stderr
    assert b"a bug in the machinery" in peer.stderr


def _read_line(fd: int, timeout: float) -> bytes:
    """One line from a pipe, waiting at most ``timeout`` seconds in all."""
    data = b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"no line within {timeout} s"
        chunk = os.read(fd, 1)
        assert chunk, "end of output"
        data += chunk
    return data


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_peer_that_closes_stdout_ends_serving_without_a_traceback_loop(backend: str) -> None:
    # Plain pipes: closing our end of the server's stdout must really close the descriptor.
    process = subprocess.Popen(
        demo_command(backend=backend),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdin is not None
        assert process.stdout is not None
        lines = [
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"capabilities": ELICIT_CAPS},
            },
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "guarded_echo", "arguments": {"text": "x"}},
            },
        ]
        for line in lines:
            process.stdin.write(json.dumps(line).encode() + b"\n")
            process.stdin.flush()
            assert json.loads(_read_line(process.stdout.fileno(), READ_TIMEOUT))
            if line["id"] == 0:  # R-PARK-8: a prompt is sent once the client is initialized
                process.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
                process.stdin.flush()
        process.stdout.close()  # the server's next write breaks
        process.stdin.write(b'{"jsonrpc":"2.0","id":2,"method":"ping"}\n')
        process.stdin.flush()
        assert process.wait(READ_TIMEOUT) == 0
        assert process.stderr is not None
        stderr = process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
    assert b"standard output was closed by the peer" in stderr
    assert b"Traceback" not in stderr


# --- framing, without a server ------------------------------------------------------------------

_PLAIN_LINE = st.lists(st.sampled_from([b"a", b"{", b"\xff"]), min_size=1, max_size=30).map(
    b"".join
)
_ANY_LINE = st.lists(st.sampled_from([b"a", b"{", b"\r", b"\xff"]), max_size=30).map(b"".join)


@settings(max_examples=400)
@given(
    st.lists(_PLAIN_LINE, max_size=12) | st.lists(_PLAIN_LINE | _ANY_LINE, max_size=12),
    st.booleans(),
    st.integers(4, 24),
    st.lists(st.integers(1, 60), min_size=1, max_size=8),
)
def test_line_splitting_does_not_depend_on_how_the_input_is_chunked(
    lines: list[bytes], ends_with_newline: bool, cap: int, sizes: list[int]
) -> None:
    """Whatever the chunks, the lines are those of the whole input: one trailing \\r stripped,
    blank ones skipped, one over the cap cut to its first ``cap + 1`` bytes."""
    data = b"\n".join(lines) + (b"\n" if ends_with_newline else b"")
    expected = []
    for line in data.split(b"\n"):
        stripped = line.removesuffix(b"\r")
        if stripped:
            expected.append(stripped[: cap + 1])
    splitter = LineSplitter(cap)
    got: list[bytes] = []
    start, turn = 0, 0
    while start < len(data):
        size = sizes[turn % len(sizes)]
        got.extend(splitter.feed(data[start : start + size]))
        start, turn = start + size, turn + 1
    got.extend(splitter.finish())
    assert got == expected
    assert all(type(line) is bytes for line in got)


async def test_a_read_from_a_pipe_allocates_only_the_bytes_it_read() -> None:
    """Each chunk read from a pipe is the bytes read, copied out of one kept buffer: no read
    allocates ``CHUNK_BYTES`` to shrink it afterwards, which fragmented the heap (RSS grew
    about 130 KiB a minute under the stdio soak while the bytes in use stayed flat)."""
    line = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
    read_fd, write_fd = os.pipe()
    stream = FdReceiveStream(read_fd)
    try:
        assert stream.polled
        os.write(write_fd, line)
        assert await stream.receive() == line  # the first read makes the kept buffer
        tracemalloc.start()
        try:
            for _ in range(20):
                os.write(write_fd, line)
                assert await stream.receive() == line
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < CHUNK_BYTES // 4, peak
        os.write(write_fd, b"x" * 1000)  # within the pipe's capacity: the write cannot block
        assert await stream.receive(10) == b"x" * 10  # at most what was asked for
        assert await stream.receive(2 * CHUNK_BYTES) == b"x" * 990
    finally:
        await stream.aclose()
        os.close(read_fd)
        os.close(write_fd)
