"""The event loop the HTTP server runs on (docs/performance.md, "The event loop"): uvloop when
installed, asyncio's own when told so or without it. The served processes listen on 127.0.0.1 only;
every wait is on a line of output, an answer or the process's exit, under a deadline."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import urllib.request
from typing import Any

import pytest

from askgate.__main__ import main
from askgate.transports.loop import LOOP_ENV, event_loop

DEADLINE = 60.0


def test_the_loop_follows_the_setting_and_what_is_installed() -> None:
    for asked in (None, "", "auto", " Auto "):
        assert event_loop(asked, True) == ("uvloop", None)
        assert event_loop(asked, False) == ("asyncio", None)
    for installed in (True, False):
        assert event_loop("asyncio", installed) == ("asyncio", None)
        assert event_loop("ASYNCIO", installed) == ("asyncio", None)
    assert event_loop("uvloop", True) == ("uvloop", None)
    assert event_loop("uvloop", False) == (
        None,
        "askgate refuses to start: ASKGATE_LOOP=uvloop but uvloop is not installed "
        "(pip install 'askgate[fast]')",
    )
    for installed in (True, False):
        assert event_loop("trio", installed) == (
            None,
            "askgate refuses to start: ASKGATE_LOOP='trio': one of auto, asyncio, uvloop",
        )


def test_an_unknown_loop_is_refused_before_listening(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(LOOP_ENV, "tornado")
    assert main(["serve", "--demo", "--http", "127.0.0.1:0"]) == 2
    assert capsys.readouterr().err == (
        "askgate refuses to start: ASKGATE_LOOP='tornado': one of auto, asyncio, uvloop\n"
    )


def _post(url: str, message: dict[str, Any], session: str | None) -> tuple[int, Any, str | None]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if session is not None:
        headers["Mcp-Session-Id"] = session
        headers["MCP-Protocol-Version"] = "2025-06-18"
    request = urllib.request.Request(url, json.dumps(message).encode(), headers, method="POST")
    with urllib.request.urlopen(request, timeout=DEADLINE) as answer:
        body = answer.read()
        return answer.status, json.loads(body) if body else None, answer.headers["mcp-session-id"]


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_the_server_serves_on_uvloop_and_on_asyncio(loop: str) -> None:
    """``askgate serve --http`` with ``ASKGATE_LOOP`` set: it says which loop it runs on,
    answers initialize and an echo call, and stops cleanly on SIGTERM."""
    if loop == "uvloop":
        pytest.importorskip("uvloop")  # in the test extra; no wheels for Windows
    env = {**os.environ, LOOP_ENV: loop}
    command = [sys.executable, "-m", "askgate", "serve", "--demo", "--http", "127.0.0.1:0"]
    server = subprocess.Popen(
        [*command, "--log-level", "info"], env=env, stderr=subprocess.PIPE, text=True, bufsize=1
    )
    try:
        assert server.stderr is not None
        line = ""
        while "serving Streamable HTTP on" not in line:
            ready, _, _ = select.select([server.stderr], [], [], DEADLINE)
            assert ready, "the server did not say where it listens"
            line = server.stderr.readline()
            assert line, "the server ended before it listened"
        found = re.search(r"on (http://127\.0\.0\.1:\d+/mcp) \(event loop: (\w+)\)", line)
        assert found is not None, line
        url, running = found.groups()
        assert running == loop
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "loop-test", "version": "0"},
            },
        }
        status, answer, session = _post(url, init, None)
        assert status == 200
        assert answer["result"]["protocolVersion"] == "2025-06-18"
        assert session
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert _post(url, initialized, session)[0] == 202
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": f"on {loop}"}},
        }
        status, answer, _ = _post(url, call, session)
        assert status == 200
        assert answer["result"]["content"] == [{"type": "text", "text": f"on {loop}"}]
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=DEADLINE) == 0
        assert "Traceback" not in server.stderr.read()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=DEADLINE)
