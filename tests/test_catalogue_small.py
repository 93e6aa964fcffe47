"""Issue #28 item 9, the smaller edges: a principal that is not text at the sidecar's JSON door
(R-EMB-21), a token given to two principals (R-HTTP-43), a trace line nested too deep for
replay (R-AUD-13), and policy names that look like globs or carry spaces (R-POL-11, R-POL-12)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from askgate import sidecar
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
