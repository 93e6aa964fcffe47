"""The operator's log (docs/auditing.md, "Operator logs"): the shell formats the reducer's records
(R-LOG-1 .. R-LOG-4) on ``askgate.calls``, names a failing callback, gives a callback the
principal in its ``Context``, and logs HTTP refusals on ``askgate.http``."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client

from askgate import Allow, Context
from askgate.core import http as rules
from askgate.server import Server
from askgate.transports.calllog import describe
from askgate.transports.http import HttpApp

from .test_http import DEADLINE, Asker, serving, serving_server, text

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
ROOT = Path(__file__).resolve().parent.parent
EID = r"askgate-elicit-[A-Za-z0-9_-]{22}"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn runs on asyncio


def test_the_demo_walkthrough_log_says_who_asked_what_was_decided_and_how_it_ended() -> None:
    """The acceptance test of issue #10's logs: ``make demo`` against ``--log-level info``."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo_walkthrough.py"), "--log-level", "info"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    calls = [line for line in done.stderr.splitlines() if "askgate.calls:" in line]
    expected = [
        r"call 3 conn stdio: echo allow -> result in \d+\.\d\d s",
        rf"call 4 conn stdio: guarded_echo ask \({EID}\) -> parked",
        rf"call 4 conn stdio: guarded_echo ask \({EID}\) -> approved -> result in \d+\.\d\d s",
        rf"call 5 conn stdio: guarded_echo ask \({EID}\) -> parked",
        rf"call 5 conn stdio: guarded_echo ask \({EID}\) -> denied: declined in \d+\.\d\d s",
        r"call 6 conn stdio: forbidden deny -> denied: forbidden by policy in \d+\.\d\d s",
    ]
    assert len(calls) == len(expected), done.stderr
    for line, pattern in zip(calls, expected, strict=True):
        assert re.search(rf"askgate\.calls: {pattern}$", line), (line, pattern)
    # The prompt and the arguments are not in the log.
    assert "hello" not in "\n".join(calls)


def _ended(**fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "conn": ("http", 1),
        "request_id": 4,
        "tool": "delete_file",
        "decision": None,
        "approved": None,
        "outcome": "result",
        "detail": None,
        "elicitation_id": None,
        "evicted_by": None,
        "started_ms": 0,
        "duration_ms": 2_310,
    }
    record.update(fields)
    return record


def _nobody(_conn: Hashable) -> str | None:
    return None


def test_an_eviction_line_names_who_evicted() -> None:
    known: dict[Hashable, str] = {("http", 1): "alice", ("http", 2): "bob"}

    def principals(conn: Hashable) -> str | None:
        return known.get(conn)

    line = describe(
        "call_ended",
        _ended(
            decision="ask",
            approved=False,
            outcome="denied",
            detail="evicted to make room on this server",
            elicitation_id="askgate-elicit-x",
            evicted_by=("http", 2),
        ),
        principals,
    )
    assert line == (
        "call 4 conn http-1 principal alice: delete_file ask (askgate-elicit-x) -> denied: "
        "evicted to make room on this server (by conn http-2 principal bob) in 2.31 s"
    )
    dropped = describe("call_ended", _ended(outcome="dropped", detail="caller gone"), _nobody)
    assert dropped == "call 4 conn http-1: delete_file -> dropped: caller gone in 2.31 s"
    assert describe("client_capabilities_evicted", {}, _nobody) is None


@pytest.mark.anyio
async def test_over_http_the_log_and_the_context_name_the_principal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="askgate.calls")
    seen: list[str | None] = []

    def authorize(_tool: str, _arguments: dict[str, Any], ctx: Context) -> Allow:
        seen.append(ctx.principal)
        return Allow()

    server = Server("who", authorizer=authorize, authorizer_source="configured")

    @server.tool()
    def whoami(ctx: Context) -> str:
        return str(ctx.principal)

    async with serving_server(server, _app) as (_, url):
        with anyio.fail_after(DEADLINE):
            async with Client(url, mode="legacy") as client:
                assert text(await client.call_tool("whoami", {})) == "local"
    assert seen  # the call, and the listing the client may do
    assert set(seen) == {"local"}
    lines = [r.getMessage() for r in caplog.records if r.name == "askgate.calls"]
    assert len(lines) == 1
    assert re.fullmatch(
        r"call \d+ conn http-\d+ principal local: whoami allow -> result in \d+\.\d\d s", lines[0]
    )


def _app(server: Server, port: int) -> Any:
    return HttpApp(server, options=rules.HttpOptions(port=port), guard=False)


@pytest.mark.anyio
async def test_the_demo_over_http_logs_an_approval_with_its_principal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="askgate.calls")
    async with serving() as (_, url):
        with anyio.fail_after(DEADLINE):
            yes = Asker(types.ElicitResult(action="accept", content={"approve": True}))
            async with Client(url, mode="legacy", elicitation_callback=yes) as client:
                assert text(await client.call_tool("guarded_echo", {"text": "yo"})) == "yo"
    lines = [r.getMessage() for r in caplog.records if r.name == "askgate.calls"]
    assert re.fullmatch(
        rf"call \d+ conn http-\d+ principal local: guarded_echo ask \({EID}\) -> approved -> "
        r"result in \d+\.\d\d s",
        lines[-1],
    )


@pytest.mark.anyio
async def test_http_refusals_are_logged_with_the_reason_and_the_peer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="askgate.http")
    async with serving() as (_, url):
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        }
        async with httpx2.AsyncClient() as http:
            unknown = {**headers, "mcp-session-id": "nope"}
            body = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
            response = await http.post(url, content=body, headers=unknown)
            assert response.status_code == 404
            response = await http.post(url, content=body, headers=headers)
            assert response.status_code == 400
    lines = [r for r in caplog.records if r.name == "askgate.http"]
    assert [r.levelname for r in lines] == ["INFO", "INFO"]
    assert re.fullmatch(
        r"refused 404 Not Found: unknown session: POST /mcp from 127\.0\.0\.1:\d+",
        lines[0].getMessage(),
    )
    assert lines[1].getMessage().startswith("refused 400 Bad Request: Mcp-Session-Id required")
    assert "nope" not in caplog.text  # no header value is logged


@pytest.mark.anyio
async def test_a_crashing_tool_is_logged_with_its_name(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with serving() as (_, url):
        with anyio.fail_after(DEADLINE):
            async with Client(url, mode="legacy") as client:
                result = await client.call_tool("crash", {})
                assert result.is_error
    failures = [r for r in caplog.records if r.getMessage().startswith("callback failed")]
    assert len(failures) == 1
    assert re.fullmatch(
        r"callback failed: tool crash \(conn http-\d+, worker \d+\)", failures[0].getMessage()
    )
    assert failures[0].exc_info is not None  # with its traceback
    calls = [r.getMessage() for r in caplog.records if r.name == "askgate.calls"]
    assert re.fullmatch(
        r"call \d+ conn http-\d+ principal local: crash allow -> failed .*", calls[-1]
    )


def _serve_demo_http(*flags: str) -> tuple[list[str], str]:
    """``askgate serve --demo --http`` on a free port of 127.0.0.1 with ``flags``: an echo
    call once it says where it listens, then SIGTERM; its standard error, line by line, and
    the first line."""
    import signal  # noqa: PLC0415
    import socket  # noqa: PLC0415

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "askgate", "serve", "--demo", "--http", f"127.0.0.1:{port}"]
    proc = subprocess.Popen([*command, *flags], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    try:
        first = ""
        for _ in range(200):  # bounded: the server says where it listens
            first = proc.stderr.readline()
            if not first or "serving Streamable HTTP on" in first:
                break
        assert proc.poll() is None, "the server did not start"
        url = f"http://127.0.0.1:{port}/mcp"
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2025-06-18",
        }
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        }
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}},
        }
        with httpx2.Client(timeout=DEADLINE) as http:
            started = http.post(url, json=init, headers=headers)
            headers["mcp-session-id"] = started.headers["mcp-session-id"]
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert http.post(url, json=initialized, headers=headers).status_code == 202
            assert '"text":"hi"' in http.post(url, json=call, headers=headers).text
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(timeout=DEADLINE) == 0
        return rest.splitlines(), first.rstrip("\n")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEADLINE)


def test_R_HTTP_46_serve_http_logs_at_info_by_default() -> None:
    """Without ``--log-level``, ``askgate serve --http`` says where it listens and logs each
    decision, in the operator's format; at ``--log-level warning`` it still says where it
    listens, in one line, and nothing about the call."""
    lines, first = _serve_demo_http()
    assert re.fullmatch(
        r"askgate INFO askgate(\.\w+)*: serving Streamable HTTP on "
        r"http://127\.0\.0\.1:\d+/mcp \(event loop: \w+\)",
        first,
    ), first
    decisions = [line for line in lines if line.startswith("askgate INFO askgate.calls: ")]
    assert any("echo allow -> result" in line for line in decisions), lines
    quiet, said = _serve_demo_http("--log-level", "warning")
    assert re.fullmatch(r"askgate: serving Streamable HTTP on http://127\.0\.0\.1:\d+/mcp", said)
    assert not [line for line in quiet if "askgate.calls" in line], quiet
