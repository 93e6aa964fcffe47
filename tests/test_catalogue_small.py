"""Issue #28 item 9, the smaller edges: a principal that is not text at the sidecar's JSON door
(R-EMB-21), a token given to two principals (R-HTTP-43), a trace line nested too deep for
replay (R-AUD-13), and policy names that look like globs or carry spaces (R-POL-11, R-POL-12)."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from askgate import core, sidecar, trace
from askgate import policy_analysis as analysis
from askgate.__main__ import main
from askgate.core import Allow, Ask, Deny
from askgate.policy import PolicyError, load_policy, parse_policy
from askgate.transports.auth import ApiKeyAuth, BearerAuth, TokenFileError, load_tokens
from tests.test_embedding import GUARDED, _call, _line, _reply

from .test_catalogue import initialize

# -- R-EMB-21: the sidecar's JSON door ------------------------------------------------------------


def test_R_EMB_21_a_principal_that_is_not_text_is_refused_at_the_door() -> None:
    session = sidecar.Session(init=GUARDED)
    witness = sidecar.Session(init=GUARDED)
    current = session.current
    hello = {"$": "bytes", "utf8": json.dumps(initialize(1, {}))}
    bad = [
        _line(
            "ToolCallReceived", conn="a", request_id=1, tool="rm", arguments={}, now=0, principal=7
        ),
        _line("SubscriberAttached", conn="c", now=0, principal=[1]),
        _line("MessageReceived", conn="c", data=hello, now=0, principal={"who": 1}),
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
        _line("MessageReceived", conn="c", data=hello, now=0, principal="alice"),
    ]
    out = io.BytesIO()
    sidecar.serve_lines(sidecar.Session(init=GUARDED), io.BytesIO("\n".join(stream).encode()), out)
    replies: list[dict[str, Any]] = [json.loads(r) for r in out.getvalue().splitlines()]
    assert [r["kind"] for r in replies] == ["error", "effects", "effects"]
    assert "fields.principal" in replies[0]["error"]
    answer = replies[2]["effects"][0]["fields"]["message"]
    assert answer["id"] == 1
    assert "result" in answer


def test_R_EMB_22_the_shells_names_and_flags_of_another_type_are_refused_at_the_door() -> None:
    session = sidecar.Session(init=GUARDED)
    current = session.current
    bad = [
        (_line("ToolRegistered", name=7), "fields.name"),
        (_line("ToolRegistered", name="ls", sensitive="yes"), "fields.sensitive"),
        (_line("ToolRegistered", name="ls", derived=1), "fields.derived"),
        (_line("ToolUnregistered", name=["rm"]), "fields.name"),
        (_line("ResourceUpdated", uri=[7], now=0), "fields.uri"),
        (_line("LogEmitted", level=7, data="x", now=0), "fields.level"),
    ]
    for number, (line, field) in enumerate(bad, start=1):
        reply = _reply(session, line)
        assert reply["kind"] == "error", reply
        assert reply["line"] == number
        assert field in reply["error"]
        assert session.current == current
    # the next line is served, and a listing names the tools registered as text
    listing = _reply(
        session,
        _line("ReadRequested", conn="c", request_id=2, method="tools/list", params={}, now=0),
    )
    assert listing["kind"] == "effects", listing
    tools = listing["effects"][0]["fields"]["message"]["result"]["tools"]
    assert [t["name"] for t in tools] == ["rm"]
    # what a peer controls is the reducer's to answer: a tool named 7 is an error reply
    odd = _reply(
        session, _line("ToolCallReceived", conn="a", request_id=1, tool=7, arguments={}, now=0)
    )
    assert odd["kind"] == "effects"
    assert "error" in odd["effects"][0]["fields"]["message"]


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


# -- R-POL-11, R-POL-12: policy names with glob characters or spaces ------------------------------

LITERAL = """[[tools]]
match = "del*te"
literal = true
decision = "deny"
reason = "the tool named del*te"

[[tools]]
match = "read[1]"
literal = true
decision = "ask"
prompt = "Read with {tool}?"

[[tools]]
match = "*"
decision = "allow"
"""


def test_R_POL_11_a_literal_entry_matches_exactly_its_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = parse_policy(LITERAL, "p.toml")
    assert policy.warnings == ()

    def verdict(name: str) -> object:
        return asyncio.run(policy.authorize(name, {}, None))

    assert verdict("del*te") == Deny("the tool named del*te")
    assert verdict("read[1]") == Ask('Read with "read[1]"?')
    for other in ("delete", "delXte", "del*te ", " del*te", "del**te", "read1", "read[1] "):
        assert verdict(other) == Allow(), other
    assert asyncio.run(policy.visible("del*te", None)) is False
    assert asyncio.run(policy.visible("delete", None)) is True
    # the analysis reads it as the name too: explain, shadowing, diff
    found = analysis.explain(policy, "del*te")
    assert (found.index, found.decision) == (0, "deny")
    assert analysis.explain(policy, "delete").index == 2
    assert analysis.check(policy) == []
    after_glob = parse_policy(
        '[[tools]]\nmatch = "fs.*"\ndecision = "allow"\n\n'
        '[[tools]]\nmatch = "fs.*"\nliteral = true\ndecision = "deny"\nreason = "r"\n'
        '[[tools]]\nmatch = "*"\nliteral = true\ndecision = "deny"\nreason = "r"\n',
        "s.toml",
    )
    shadowed = analysis.check(after_glob)
    assert [f.line for f in shadowed] == [5]  # the literal fs.* is a name fs.* already fits
    assert "(match = 'fs.*' (literal)) never applies" in shadowed[0].message
    globbing = parse_policy('[[tools]]\nmatch = "del*te"\ndecision = "allow"\n', "g.toml")
    changes = analysis.diff(globbing, policy)
    named = {c.name for c in changes if c.name is not None}
    assert {"del*te", "read[1]"} <= named
    # a literal key that is not a boolean is refused, naming its line
    with pytest.raises(PolicyError) as refused:
        parse_policy(LITERAL.replace("literal = true", 'literal = "yes"', 1), "p.toml")
    assert str(refused.value).startswith("p.toml, line 3: [[tools]] entry 1: literal = 'yes'")
    path = tmp_path / "literal.toml"
    path.write_text(LITERAL, encoding="utf-8")
    assert main(["policy", "explain", str(path), "del*te"]) == 0
    assert "(match = 'del*te' (literal)) decides del*te: deny" in capsys.readouterr().out


def test_R_POL_12_check_warns_about_names_that_read_as_globs_or_carry_spaces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def entry(match: str, extra: str = "") -> str:
        return f'[[tools]]\nmatch = {json.dumps(match)}\n{extra}decision = "allow"\n\n'

    reported = ["del*te ", "read[1]", " fs.*", "a?c", "x**y"]
    quiet = ["*", "fs.*", "*_admin", "net.[a-m]*", "[!x]y", "del[*]te", "a[b", "x]", "e"]
    text = "".join(entry(m) for m in reported + quiet)
    path = tmp_path / "names.toml"
    path.write_text(text, encoding="utf-8")
    policy = load_policy(path)
    names = [f for f in analysis.check(policy) if f.kind == "name"]
    assert [f.line for f in names] == [1, 5, 9, 13, 17]
    first, second, third = (f.message for f in names[:3])
    assert first.startswith(f"{path}, line 1: [[tools]] entry 1 (match = 'del*te ') ends with ")
    assert "whitespace" in first
    assert "a * between two characters" in first
    assert "'delte '" in first  # a name the glob matches that is not the one written
    assert "literal = true" in first
    assert "does not match" not in first
    assert "not the name 'read[1]' itself but 'read1'" in second
    assert "starts with whitespace" in third
    assert "glob" not in third.split("(write")[0]
    assert main(["policy", "check", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1].endswith("findings")
    assert sum(" (write literal = true if it is a name" in line for line in out) == 5
    marked = tmp_path / "marked.toml"  # an entry with a literal key said what it means
    said = entry("del*te ", "literal = true\n") + entry("a?c", "literal = false\n")
    marked.write_text(said + entry("*"), encoding="utf-8")
    assert main(["policy", "check", str(marked)]) == 0
    assert capsys.readouterr().out == "no findings\n"
