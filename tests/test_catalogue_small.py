"""Issue #28 item 9, the smaller edges: a principal that is not text at the sidecar's JSON door
(R-EMB-21), a token given to two principals (R-HTTP-43), a trace line nested too deep for
replay (R-AUD-13), and policy names that look like globs or carry spaces (R-POL-11, R-POL-12)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from askgate import core, sidecar, trace
from askgate.transports.auth import ApiKeyAuth, BearerAuth, TokenFileError, load_tokens
from tests.test_embedding import GUARDED, _call, _line, _reply

# -- R-EMB-21: the sidecar's JSON door ------------------------------------------------------------


def test_R_EMB_21_a_principal_that_is_not_text_is_refused_at_the_door() -> None:
    session = sidecar.Session(init=GUARDED)
    witness = sidecar.Session(init=GUARDED)
    current = session.current
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    initialize = {"$": "bytes", "utf8": json.dumps(hello)}
    bad = [
        _line(
            "ToolCallReceived", conn="a", request_id=1, tool="rm", arguments={}, now=0, principal=7
        ),
        _line("SubscriberAttached", conn="c", now=0, principal=[1]),
        _line("MessageReceived", conn="c", data=initialize, now=0, principal={"who": 1}),
        _line(
            "ReadRequested",
            conn="c",
            request_id=2,
            method="tools/list",
            params={},
            now=0,
            principal=True,
        ),
        _line("LogEmitted", level="info", data="x", now=0, logger=3),
    ]
    for number, line in enumerate(bad, start=1):
        text = session.handle(line)
        assert text is not None
        assert "\n" not in text
        reply = json.loads(text)
        assert reply["kind"] == "error", reply
        assert reply["line"] == number
        assert "fields.principal" in reply["error"] or "fields.logger" in reply["error"]
        assert session.current == current  # nothing was stepped
    assert _reply(session, _call())["effects"] == _reply(witness, _call())["effects"]
    # over the stream, the line after a refused one is served, and text principals pass
    stream = [
        _line("SubscriberAttached", conn="c", now=0, principal=7),
        _line("SubscriberAttached", conn="c", now=0, principal="alice"),
        _line("MessageReceived", conn="c", data=initialize, now=0, principal="alice"),
    ]
    out = io.BytesIO()
    sidecar.serve_lines(sidecar.Session(init=GUARDED), io.BytesIO("\n".join(stream).encode()), out)
    replies: list[dict[str, Any]] = [json.loads(r) for r in out.getvalue().splitlines()]
    assert [r["kind"] for r in replies] == ["error", "effects", "effects"]
    assert "fields.principal" in replies[0]["error"]
    answer = replies[2]["effects"][0]["fields"]["message"]
    assert answer["id"] == 1
    assert "result" in answer


# -- R-HTTP-43: a tokens file ---------------------------------------------------------------------


def test_R_HTTP_43_a_token_given_to_two_principals_is_refused(tmp_path: Path) -> None:
    shared = "shared-token-0123456789"
    path = tmp_path / "tokens"
    path.write_text(f"# who\nalice {shared}\ncarol carol-token-0123456789\n\nbob {shared}\n")
    with pytest.raises(TokenFileError) as refused:
        load_tokens(path)
    message = str(refused.value)
    assert "\n" not in message
    assert "'alice'" in message
    assert "'bob'" in message
    assert "line 5" in message
    assert "line 2" in message
    assert shared not in message
    assert "shared" not in message
    for provider in (BearerAuth, ApiKeyAuth):
        with pytest.raises(ValueError, match="'alice' and 'bob'") as mapped:
            provider({"alice": shared, "bob": shared})
        assert shared not in str(mapped.value)
    # one principal per token, as before: each token is its own principal's
    path.write_text(f"alice {shared}\nbob bob-token-0123456789-xx\n")
    bearer = BearerAuth(load_tokens(path))
    assert bearer({"authorization": f"Bearer {shared}"}, None) == "alice"
    assert bearer({"authorization": "Bearer bob-token-0123456789-xx"}, None) == "bob"


# -- R-AUD-13: replay and explain of a trace nested too deep --------------------------------------


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = {"a": value} if level % 2 else [value]
    return value


def _trace_of(*events: Any) -> list[str]:
    """A trace of one run stepping ``events`` from a fresh state, as the recorder writes it."""
    state = core.initial_state(core.Options(), id_key=b"k" * 32)
    lines = [json.dumps(trace.header(state, redacted=False))]
    for n, event in enumerate(events, 1):
        state, out = core.step(state, event)
        encoded = [trace.encode(effect) for effect in out]
        lines.append(json.dumps({"n": n, "event": trace.encode(event), "effects": encoded}))
    return lines


def _askgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "askgate", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_R_AUD_13_a_trace_line_nested_too_deep_is_one_line_of_error(tmp_path: Path) -> None:
    deep = core.ToolCallReceived("a", 1, "nope", {"x": _nested(150)}, 0)
    lines = _trace_of(deep)
    path = tmp_path / "fine.trace"
    path.write_text("\n".join(lines) + "\n")
    fine = _askgate("replay", str(path))  # a line deeper than any message, within the limit
    assert fine.returncode == 0, fine.stderr
    assert "1 steps replayed, every effect identical" in fine.stdout
    hostile = "[" * 100_000 + "]" * 100_000
    over = json.dumps({"n": 2, "event": _nested(200), "effects": []})
    for bad, number in ((hostile, 4), (over, 4), ("{" + hostile, 4)):
        path.write_text("\n".join([*lines, "", bad]) + "\n")
        for command in ("replay", "explain"):
            done = _askgate(command, str(path))
            assert done.returncode == 2, done
            assert done.stdout == ""
            assert "Traceback" not in done.stderr
            assert done.stderr.count("\n") == 1, done.stderr[:2000]
            assert done.stderr.startswith(f"askgate {command}: {path}: line {number}: ")
            assert "nested" in done.stderr
    assert getattr(trace, "MAX_DEPTH", None) == 200  # the line above is one level deeper
