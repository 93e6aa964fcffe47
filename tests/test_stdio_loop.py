"""The event loop stdio runs on (docs/performance.md, "The event loop"): uvloop when installed,
unless ``ASKGATE_LOOP`` says otherwise; a setting it cannot follow is refused before anything is
served."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from askgate.transports.loop import LOOP_ENV, event_loop

DEADLINE = 30.0

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": {"name": "loop-test", "version": "0"},
    },
}


def _serve(loop: str | None, lines: list[dict[str, Any]], *extra: str) -> tuple[int, str, str]:
    """``askgate serve --stdio --demo`` with ``ASKGATE_LOOP`` set to ``loop`` (unset: None),
    given ``lines`` then end of input: (exit status, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if k != LOOP_ENV}
    if loop is not None:
        env[LOOP_ENV] = loop
    command = [sys.executable, "-m", "askgate", "serve", "--stdio", "--demo", *extra]
    done = subprocess.run(
        command,
        input="".join(json.dumps(line) + "\n" for line in lines),
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("loop", ["uvloop", "asyncio", "auto", None])
def test_stdio_serves_on_the_loop_the_setting_picks(loop: str | None) -> None:
    """It says which loop it runs on (the one ``event_loop`` picks for the setting and what is
    installed) and answers the same there: an echo call and a ping."""
    installed = True
    try:
        import uvloop  # noqa: F401, PLC0415
    except ImportError:
        installed = False
    expected, refusal = event_loop(loop, installed)
    if expected is None:
        pytest.skip(str(refusal))
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": f"on {loop}"}},
    }
    ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
    status, out, err = _serve(loop, [INIT, initialized, call, ping], "--log-level", "info")
    assert status == 0, err
    assert f"serving stdio (event loop: {expected})" in err
    assert "Traceback" not in err
    answers = {m["id"]: m for m in map(json.loads, out.splitlines())}
    assert answers[1]["result"]["protocolVersion"] == "2025-06-18"
    assert answers[2]["result"]["content"] == [{"type": "text", "text": f"on {loop}"}]
    assert answers[3] == {"jsonrpc": "2.0", "id": 3, "result": {}}


def test_an_unknown_loop_is_refused_before_serving() -> None:
    status, out, err = _serve("tornado", [INIT])
    assert status == 2
    assert out == ""
    assert err == "askgate refuses to start: ASKGATE_LOOP='tornado': one of auto, asyncio, uvloop\n"


def test_trio_runs_on_trio_whatever_the_setting() -> None:
    pytest.importorskip("trio")
    status, out, err = _serve("tornado", [INIT], "--backend", "trio", "--log-level", "info")
    assert status == 0, err
    assert "event loop:" not in err
    assert json.loads(out)["result"]["protocolVersion"] == "2025-06-18"


def test_stdio_decides_as_http_does() -> None:
    """The stdio decision is HTTP's: the one function both servers call, in a module
    a stdio server may import (docs/performance.md)."""
    from askgate.transports import http_server, stdio  # noqa: PLC0415

    assert vars(stdio)["event_loop"] is vars(http_server)["event_loop"] is event_loop
    assert event_loop.__module__ == "askgate.transports.loop"
