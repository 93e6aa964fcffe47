"""Auditing (spec/audit.md): the decision log, traces, replay, explain and the rule ids they cite.

The reducer is driven through :class:`Audited`, a harness whose every step goes through the same
:class:`~askgate.audit.Auditor` the runtime taps; one demo walkthrough is recorded end to end by
``askgate serve --demo --trace --audit-log`` under the official client.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import re
import resource
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from askgate.__main__ import main
from askgate.audit import AuditLog, Auditor, LineSink, Trace
from askgate.core import (
    Ask,
    CallerExited,
    CancelRequested,
    ClientInitialized,
    Deny,
    Event,
    ServerStopping,
    SubscriberAttached,
    SubscriberDetached,
    TimerFired,
    ToolInfo,
    WorkerFailed,
)
from askgate.core import messages as m
from askgate.core import reducer as core_reducer
from askgate.core.codec import encode as encode_message
from askgate.core.events import MessageReceived
from askgate.core.tools import tool_info
from askgate.explain import explain, render
from askgate.ruleids import DENY_RULES, DROP_RULES, OUTCOME_RULES, STEP_RULES
from askgate.trace import digest, read_keys, read_trace, replay
from tools import specdoc

from .harness import APPROVE, Harness

ROOT = Path(__file__).resolve().parent.parent
RESULT = {"content": [{"type": "text", "text": "done"}]}
PRINCIPALS = {"A": "alice", "B": "bob"}


def _principal(conn: object) -> str | None:
    return PRINCIPALS.get(conn) if isinstance(conn, str) else None


class Audited(Harness):
    """A harness whose steps go through an :class:`Auditor` (the runtime's tap), writing the
    decision log and the trace to memory."""

    def __init__(
        self,
        *,
        redact: bool = True,
        log: AuditLog | None = None,
        tools: tuple[ToolInfo, ...] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(tools, has_authorizer=True, **options)
        self.log = log or AuditLog(io.StringIO())
        self.trace_text = io.StringIO()
        self.auditor = Auditor(
            trace=Trace(self.trace_text, redact=redact),
            log=self.log,
            key=b"k" * 32,
            entry=lambda tool: f"policy.toml:{len(tool)}",
        )
        self.auditor.start(self.state, _principal)

    def feed(self, event: Event) -> list[Any]:
        before = self.state
        effects = super().feed(event)
        self.auditor(before, event, self.state, effects)
        return effects

    def lines(self) -> list[dict[str, Any]]:
        self.auditor.close()
        text = self.log.sink._stream
        assert isinstance(text, io.StringIO)
        return [json.loads(line) for line in text.getvalue().splitlines()]

    def trace(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        self.auditor.close()
        return read_trace(self.trace_text.getvalue().splitlines())


def _ended(lines: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    return {line["request_id"]: line for line in lines if line["kind"] == "ended"}


def test_R_AUD_1_every_ending_of_an_ask_is_in_the_decision_log_with_its_detail() -> None:
    h = Audited(max_parked_elicitations=2, max_parked_elicitations_total=2)
    h.connect("A")
    h.connect("B")
    h.feed(SubscriberAttached("C"))
    h.feed(ClientInitialized("C", {}))  # C cannot be asked
    # approved, declined, cancelled, not approved, failed answer
    for rid, result, error in [
        (1, APPROVE, None),
        (2, {"action": "decline"}, None),
        (3, {"action": "cancel"}, None),
        (4, {"action": "accept", "content": {"approve": False}}, None),
        (5, None, {"code": -1, "message": "no"}),
    ]:
        eid = h.park("A", rid)
        h.answer("A", eid, result, error)
        if rid == 1:
            h.finish(h.worker(), RESULT)
    eid = h.park("A", 6)
    h.feed(TimerFired(("elicitation", eid), 1))  # timed out
    h.park("A", 7)
    h.park("A", 8)  # A holds two: the server is full
    h.park("B", 9)  # evicts A's oldest (7), by B
    h.feed(CancelRequested("B", 9, 2))  # dropped: cancelled
    h.park("B", 10, caller="proc")
    h.feed(CallerExited("proc", 3))  # dropped: caller gone
    h.park("B", 11)
    h.feed(SubscriberDetached("B", 4))  # dropped: connection gone
    h.call("C", 12)
    h.finish(h.worker(), Ask("ok?"))  # the client cannot be asked
    h.feed(ServerStopping(5))  # A's 8 is parked: stopped
    ended = _ended(h.lines())
    expected = {
        1: ("result", None),
        2: ("denied", "declined"),
        3: ("denied", "cancelled"),
        4: ("denied", "not approved"),
        5: ("denied", "elicitation failed"),
        6: ("denied", "elicitation timed out"),
        7: ("denied", "evicted to make room on this server"),
        8: ("denied", "server stopping"),
        9: ("dropped", "cancelled"),
        10: ("dropped", "caller gone"),
        11: ("dropped", "connection gone"),
        12: ("denied", "client cannot be asked"),
    }
    assert {rid: (e["outcome"], e["detail"]) for rid, e in ended.items()} == expected
    for rid, line in ended.items():
        assert line["decision"] == "ask", line
        assert line["rules"], line
        assert line["entry"] == "policy.toml:4"
        if rid != 12:
            assert line["approval_id"].startswith("askgate-elicit-"), line
    assert ended[1]["approved"] is True
    assert ended[1]["approved_by"] == {"conn": "A", "principal": "alice"}
    assert ended[7]["evicted_by"] == {"conn": "B", "principal": "bob"}
    assert ended[7]["rules"] == ["R-PARK-3", "R-PARK-4"]
    assert "approved_by" not in ended[2]


def test_R_AUD_1_decided_lines_name_the_verdict_principal_and_entry() -> None:
    h = Audited()
    h.connect("A")
    h.allow("A", 1, arguments={"x": 1})
    h.call("A", 2, arguments={"x": 2})
    h.finish(h.worker(), Deny("no"))
    h.call("A", 3)
    h.feed(WorkerFailed(h.worker(), 0))
    decided = [line for line in h.lines() if line["kind"] == "decided"]
    assert [(d["request_id"], d["decision"]) for d in decided] == [
        (1, "allow"),
        (2, "deny"),
        (3, "failed"),
    ]
    assert all(d["principal"] == "alice" and d["entry"] == "policy.toml:4" for d in decided)
    assert decided[0]["arguments_digest"] == digest(b"k" * 32, {"x": 1})
    assert decided[2]["rules"] == ["R-AUTH-4"]


def test_R_AUD_1_an_embedder_gets_the_lines_through_its_own_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="embedder.audit")
    h = Audited(log=AuditLog(logging.getLogger("embedder.audit")))
    h.connect("A")
    h.allow("A", 1)
    h.finish(h.worker(), RESULT)
    h.auditor.close()
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "embedder.audit"]
    assert [line["kind"] for line in lines] == ["decided", "ended"]
    assert lines[1]["outcome"] == "result"


def test_R_AUD_2_arguments_are_digested_unless_asked_and_masked_fields_hidden() -> None:
    secret = {"path": "/etc/passwd", "auth": {"token": "s3cret-value"}}
    shown = Audited(log=AuditLog(io.StringIO(), arguments=True, mask=["token"]))
    digested = Audited()
    for h in (shown, digested):
        h.connect("A")
        h.call("A", 1, arguments=secret)
        h.finish(h.worker(), Deny("no"))
    lines = shown.lines()
    assert lines[-1]["arguments"] == {"path": "/etc/passwd", "auth": {"token": "***"}}
    assert "s3cret-value" not in json.dumps(lines)
    plain = digested.lines()
    assert "/etc/passwd" not in json.dumps(plain)
    assert [line["arguments_digest"] for line in plain] == [digest(b"k" * 32, secret)] * 2
    assert digest(b"k" * 32, secret) != digest(b"r" * 32, secret)  # keyed


SCHEMA_TOOL = {
    "name": "echo",
    "inputSchema": {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
    },
}


def _messages(h: Audited) -> None:
    h.connect("A")
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    for rid, arguments in [(1, {"n": 7, "note": "valid-secret"}), (2, {"n": "secret-text"})]:
        message = {**call, "id": rid, "params": {"name": "echo", "arguments": arguments}}
        h.feed(MessageReceived("A", encode_message(message), 1))
        if rid == 1:  # the valid call reaches its authorizer; the other is refused (R-PROTO-6)
            h.finish(h.worker(), Ask("ok?"))


def test_R_AUD_4_redacted_arguments_keep_their_digest_and_schema_verdict() -> None:
    tools = (tool_info("echo", False, False, SCHEMA_TOOL),)
    h = Audited(tools=tools)
    _messages(h)
    head, steps = h.trace()
    text = json.dumps(steps)
    assert "valid-secret" not in text
    assert digest(b"k" * 32, {"n": 7, "note": "valid-secret"}) in text
    assert digest(b"k" * 32, {"n": "secret-text"}) in text
    problems = [
        e["params"]["arguments"]["problem"]
        for s in steps
        for e in [s["event"].get("data")]
        if isinstance(e, dict) and e.get("method") == "tools/call"
    ]
    assert problems[0] is None
    assert "is not of type" in problems[1]
    assert head["redacted"] is True
    count, difference = replay(head, steps)
    assert difference is None
    assert count == len(steps)
    kept = Audited(tools=tools, redact=False)  # kept as they came when asked
    _messages(kept)
    head, steps = kept.trace()
    assert "valid-secret" in json.dumps(steps)
    assert head["redacted"] is False
    assert replay(head, steps)[1] is None


# -- the demo walkthrough, recorded end to end ----------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    where = tmp_path_factory.mktemp("demo")
    trace, log = where / "demo.trace", where / "demo.log"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "demo_walkthrough.py"),
            "--trace",
            str(trace),
            "--trace-keys",
            str(trace.with_suffix(".keys")),
            "--audit-log",
            str(log),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return trace, log


@pytest.fixture(scope="module")
def default_mode(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The demo walkthrough with the official client in its default mode (2026-07-28: an
    approval is a sealed state and a retry), traced twice: redacted (the default) and keeping
    the arguments, each with its key file beside it."""
    where = tmp_path_factory.mktemp("default_mode")
    redacted, kept = where / "redacted.trace", where / "kept.trace"
    for trace, extra in ((redacted, []), (kept, ["--trace-arguments"])):
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "examples" / "demo_walkthrough.py"),
                "--client-mode",
                "default",
                "--trace",
                str(trace),
                "--trace-keys",
                str(trace.with_suffix(".keys")),
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    return redacted, kept


def _read(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return read_trace(path.read_text(encoding="utf-8").splitlines())


def _keys(trace: Path) -> dict[str, bytes]:
    """The keys the demo wrote beside its trace (``--trace-keys``, R-AUD-11)."""
    return read_keys(trace.with_suffix(".keys").read_text(encoding="utf-8").splitlines())


def test_R_AUD_3_the_demo_is_traced_at_the_one_door_with_its_initial_state(
    demo: tuple[Path, Path],
) -> None:
    trace, _ = demo
    assert os.stat(trace).st_mode & 0o777 == 0o600
    head, steps = _read(trace)
    assert head["askgate_trace"] == 2
    assert head["redacted"] is True
    assert {t[0] for t in head["tools"]} >= {"echo", "guarded_echo", "forbidden"}
    assert [s["n"] for s in steps] == list(range(1, len(steps) + 1))
    kinds = [s["event"]["$type"] for s in steps]
    assert kinds.count("WorkerFinished") >= 8  # 4 authorizers, 2 tools ran... and the listing
    assert "SubscriberAttached" in kinds
    assert "MessageReceived" in kinds
    calls = [
        s["event"]["data"]["params"]["arguments"]
        for s in steps
        if s["event"]["$type"] == "MessageReceived"
        and s["event"]["data"].get("method") == "tools/call"
    ]
    assert len(calls) == 4
    assert all(set(arguments) == {"$redacted", "problem"} for arguments in calls), calls


@pytest.mark.parametrize(
    "command",
    [
        ["explain", "{trace}"],
        ["replay", "{trace}"],
        ["policy", "diff", "askgate/demo_policy.toml", "examples/revised_policy.toml"],
        ["spec"],
    ],
    ids=["explain", "replay", "policy diff", "spec"],
)
def test_R_AUD_14_a_closed_standard_output_ends_the_command_quietly(
    demo: tuple[Path, Path], command: list[str]
) -> None:
    """Standard output is a pipe whose reader is gone before the first byte: every write
    fails (EPIPE), as under ``| head`` once head has left; the command says nothing, exits 141."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "askgate", *(a.format(trace=demo[0]) for a in command)],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    assert done.stderr == ""
    assert done.returncode == 141


def test_R_AUD_5_the_demo_replays_with_identical_effects(demo: tuple[Path, Path]) -> None:
    head, steps = _read(demo[0])
    count, difference = replay(head, steps, keys=_keys(demo[0]))
    assert difference is None, difference and difference.text()
    assert count == len(steps)
    assert main(["replay", str(demo[0]), "--keys", str(demo[0].with_suffix(".keys"))]) == 0


def test_R_AUD_15_a_default_mode_trace_replays_checking_all_but_the_arguments_it_binds(
    default_mode: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Redacted, with its keys: every effect identical, the two steps that seal an approval
    state named in one line, exit 3; kept, with its keys: every step verified, exit 0."""
    redacted, kept = default_mode
    head, steps = _read(redacted)
    assert head["redacted"] is True
    done = replay(head, steps, keys=_keys(redacted))
    assert done.difference is None, done.difference and done.difference.text()
    assert len(done.unbound) == 2  # the approval, then the decline
    assert done.unverified == done.unbound
    sealed = [
        s["n"]
        for s in steps
        if any("requestState" in json.dumps(e) for e in s["effects"] if e.get("$type") == "Reply")
    ]
    assert list(done.unbound) == sealed
    assert main(["replay", str(redacted), "--keys", str(redacted.with_suffix(".keys"))]) == 3
    out = capsys.readouterr().out
    assert out == (
        f"{redacted}: {len(steps)} steps replayed, every effect identical, but steps "
        f"{sealed[0]}, {sealed[1]} could not be verified: their 2026-07-28 approval states bind "
        "the call's arguments, which a redacted trace does not hold (record with "
        "--trace-arguments to verify them)\n"
    )
    kept_head, kept_steps = _read(kept)
    done = replay(kept_head, kept_steps, keys=_keys(kept))
    assert (done.difference, done.unverified) == (None, ())
    assert main(["replay", str(kept), "--keys", str(kept.with_suffix(".keys"))]) == 0


def test_R_AUD_15_a_redacted_state_that_differs_in_what_it_does_hold_is_a_difference(
    default_mode: tuple[Path, Path],
) -> None:
    """The recorded approval state with one byte of its nonce changed (everywhere it occurs,
    its MAC left as it was): not the state the reducer seals, a difference at that step."""
    redacted = default_mode[0]
    text = redacted.read_text()
    state = re.search(r'"requestState": ?"([A-Za-z0-9_-]+)"', text)
    assert state is not None
    token = state.group(1)
    raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    raw[2 + raw[1]] ^= 1  # the nonce's first byte
    forged = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    head, steps = read_trace(text.replace(token, forged).splitlines())
    done = replay(head, steps, keys=_keys(redacted))
    assert done.difference is not None
    assert "requestState" in done.difference.where


def test_R_AUD_7_explain_links_a_2026_approval_to_the_retry_it_allowed(
    default_mode: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The default-mode demo: guarded_echo's approval (approved) and its retry, then another
    approval (declined) and its retry, each pair linked both ways with the approval id."""
    redacted = default_mode[0]
    paths = explain(*_read(redacted))
    assert [p["tool"] for p in paths] == ["echo", *["guarded_echo"] * 4, "forbidden"]
    first, retry, second, declined = paths[1:5]
    assert (retry["retry_of"], first["retried_by"]) == (first["call"], [retry["call"]])
    assert (declined["retry_of"], second["retried_by"]) == (second["call"], [declined["call"]])
    approval = next(s["approval"] for s in first["steps"] if "approval" in s)
    admitted = retry["steps"][0]
    assert admitted["what"] == f"admitted, retry of call {first['call']} (approval {approval})"
    assert {"R-MRTR-12", "R-MRTR-13"} <= set(admitted["rules"])
    assert first["steps"][-1]["what"] == f"retried as call {retry['call']}"
    assert first["steps"][-1]["step"] == admitted["step"]
    assert [s["what"] for s in retry["steps"][1:]] == ["ran", "replied"]
    assert declined["steps"][1]["what"] == "ended (denied: declined)"
    assert "retry_of" not in paths[0]
    assert main(["explain", str(redacted)]) == 0
    assert f"admitted, retry of call {first['call']} (approval {approval})" in (
        capsys.readouterr().out
    )


def test_R_AUD_7_explain_says_no_call_for_an_id_the_trace_lacks(
    demo: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", str(demo[0]), "--call", "99"]) == 1
    said = capsys.readouterr()
    assert said.out == ""
    assert said.err.count("\n") == 1
    assert said.err.startswith(f"askgate explain: {demo[0]}: no call 99 (its calls: stdio/")


def test_R_AUD_5_a_decision_log_given_for_a_trace_is_said_to_be_one(
    demo: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    log = demo[1]
    for command in ("replay", "explain"):
        assert main([command, str(log)]) == 2
        said = capsys.readouterr()
        assert said.err == (
            f"askgate {command}: {log}: line 1: a line of a decision log (askgate serve "
            "--audit-log), not of a trace: replay and explain read the file askgate serve "
            "--trace writes\n"
        )


def test_R_AUD_5_each_run_appended_to_a_trace_replays_from_its_own_header(
    demo: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    twice = tmp_path / "twice.trace"
    twice.write_text(demo[0].read_text() * 2)
    assert main(["replay", str(twice), "--keys", str(demo[0].with_suffix(".keys"))]) == 0
    out = capsys.readouterr().out
    assert "run 1 of 2" in out
    assert "run 2 of 2" in out
    assert main(["explain", str(twice), "--call", "4", "--format", "json"]) == 0
    assert [path["run"] for path in json.loads(capsys.readouterr().out)] == [1, 2]
    assert main(["explain", str(twice), "--call", "4"]) == 0  # R-AUD-7: each run apart
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "run 1 of 2:"
    assert lines[lines.index("run 2 of 2:") - 1] == ""
    assert sum(line.startswith("call stdio/4 ") for line in lines) == 2


def test_R_AUD_5_a_changed_decision_is_reported_at_its_step_with_rules_on_both_sides(
    demo: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    head, steps = _read(demo[0])
    # The step that takes guarded_echo's first ASK: the authorizer's report that parks it.
    parks = [
        s["n"]
        for s in steps
        if any(e.get("name") == "call_parked" for e in s["effects"] if isinstance(e, dict))
    ]
    assert parks, "the demo parks a call"
    monkeypatch.setattr(core_reducer, "can_elicit", lambda _caps: False)  # planted
    _, difference = replay(head, steps, keys=_keys(demo[0]))
    assert difference is not None
    assert difference.n == parks[0]
    assert difference.event == "WorkerFinished"
    assert "R-AUTH-3" in difference.recorded_rules
    assert "R-PARK-2" in difference.recorded_rules
    assert difference.replayed_rules == ("R-AUTH-3",)  # denied: the client cannot be asked
    assert difference.recorded["$type"] != difference.replayed["$type"]
    assert difference.hint == ""
    assert main(["replay", str(demo[0]), "--keys", str(demo[0].with_suffix(".keys"))]) == 1
    out = capsys.readouterr().out
    assert f"step {parks[0]} (WorkerFinished)" in out
    assert "rules: R-AUTH-3" in out


def test_R_AUD_6_every_rule_id_cited_is_a_rule_of_the_spec() -> None:
    headings = set(specdoc.rules(ROOT))
    tables = (OUTCOME_RULES, DENY_RULES, DROP_RULES, STEP_RULES)
    cited = {rule for table in tables for rules in table.values() for rule in rules}
    assert cited, "the tables name rules"
    assert sorted(cited - headings) == []
    # every deny detail the reducer can record has its own row
    assert set(m.WHY) - {m.SENSITIVE_UNGUARDED} <= set(DENY_RULES) | {m.SENSITIVE_UNGUARDED}


def test_R_AUD_7_explain_gives_each_demo_call_its_path_with_a_rule_on_every_step(
    demo: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    head, steps = _read(demo[0])
    paths = explain(head, steps)
    assert [p["tool"] for p in paths] == ["echo", "guarded_echo", "guarded_echo", "forbidden"]
    whats = [[s["what"].split(" (")[0] for s in p["steps"]] for p in paths]
    assert whats == [
        ["admitted, authorizer asked", "authorized: allow", "ran", "replied"],
        ["admitted, authorizer asked", "parked", "answered: approved", "ran", "replied"],
        ["admitted, authorizer asked", "parked", "answered", "replied"],
        ["admitted, authorizer asked", "ended", "replied"],
    ]
    for p in paths:
        for s in p["steps"]:
            assert s["rules"], s
            assert isinstance(s["now"], int), s
    assert paths[2]["steps"][2]["detail"] == "declined"
    assert main(["explain", str(demo[0]), "--call", "4", "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [p["request_id"] for p in shown] == [4]
    assert render(paths).count("[R-") == sum(len(p["steps"]) for p in paths)


def test_R_AUD_1_the_demo_log_says_who_approved_each_call_under_which_entry(
    demo: tuple[Path, Path],
) -> None:
    lines = [json.loads(line) for line in demo[1].read_text().splitlines()]
    ended = _ended(lines)
    assert [(e["tool"], e["decision"], e["approved"], e["outcome"]) for e in ended.values()] == [
        ("echo", "allow", None, "result"),
        ("guarded_echo", "ask", True, "result"),
        ("guarded_echo", "ask", False, "denied"),
        ("forbidden", "deny", None, "denied"),
    ]
    for line in lines:
        assert re.fullmatch(r"askgate/demo_policy\.toml:\d+", line["entry"]), line
        assert line["rules"]
        assert line["time"].endswith("+00:00")
    assert ended[4]["approved_by"] == {"conn": "stdio", "principal": None}
    assert ended[5]["detail"] == "declined"


# -- failures -------------------------------------------------------------------------------------


class _Broken(io.StringIO):
    def write(self, s: str) -> int:  # noqa: ARG002
        raise OSError(28, "No space left on device")


def test_R_AUD_8_a_write_that_fails_is_reported_and_stops_or_serves_as_configured(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stopped: list[bool] = []
    sink = LineSink(_Broken(), what="decision log", stop=lambda: stopped.append(True))
    sink.put(str, "line")
    sink.put(str, "line")
    sink.close()
    assert stopped == [True]  # once, though two lines were lost
    assert sink.lost == 2
    assert "No space left on device" in (sink.failure or "")
    assert "the decision log cannot be written" in caplog.text
    kept: list[bool] = []
    sink = LineSink(_Broken(), what="trace", on_failure="serve", stop=lambda: kept.append(True))
    sink.put(str, "line")
    sink.close()
    assert kept == []
    assert sink.lost == 1
    with pytest.raises(ValueError, match="on_failure"):
        LineSink(io.StringIO(), what="x", on_failure="ignore")  # type: ignore[arg-type]


def test_R_AUD_8_a_full_queue_is_a_failure_and_the_loop_never_waits() -> None:
    release = threading.Event()

    class Slow(io.StringIO):
        def write(self, s: str) -> int:
            release.wait(30)
            return super().write(s)

    stopped: list[bool] = []
    sink = LineSink(Slow(), what="trace", capacity=1, stop=lambda: stopped.append(True))
    for _ in range(3):  # the writer holds at most one, the queue one: the third cannot wait
        sink.put(str, "line")
    assert stopped == [True]
    assert sink.lost >= 1
    release.set()
    sink.close()


def test_audit_flags_refuse_a_file_that_cannot_be_opened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--demo", "--audit-log", str(tmp_path / "no" / "such" / "log")]) == 2
    assert "cannot open" in capsys.readouterr().err


def test_replay_and_explain_refuse_a_trace_they_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.trace"
    bad.write_text('{"askgate_trace": 99}\n')
    assert main(["replay", str(bad)]) == 2
    bad.write_text("not json\n")
    assert main(["explain", str(bad)]) == 2
    assert "line 1: not JSON" in capsys.readouterr().err


def _no_file_space() -> None:
    """The child may write no byte to a file (RLIMIT_FSIZE 0; Python ignores SIGXFSZ): each
    write to one fails with EFBIG, as on a full disk."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def test_R_AUD_8_a_full_disk_stops_the_served_demo_as_sigterm_does(tmp_path: Path) -> None:
    """A decision log that cannot grow (once ``--audit-log /dev/full``, which R-AUD-9 now
    refuses: not a regular file): the first flush fails, which is logged, and the server stops
    (its stdin still open) with every call answered, exit status 0."""
    log = tmp_path / "audit.log"
    argv = ["serve", "--demo", "--audit-log", str(log), "--log-level", "info"]
    server = subprocess.Popen(
        [sys.executable, "-m", "askgate", *argv],
        preexec_fn=_no_file_space,  # noqa: PLW1509 (sets a limit, starts no thread)
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert server.stdin is not None
    try:
        lines = [
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "hi"}},
            },
        ]
        server.stdin.write(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
        server.stdin.flush()
        assert server.wait(timeout=60) == 0
        err = server.stderr.read().decode() if server.stderr else ""
        out = server.stdout.read().decode() if server.stdout else ""
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
        server.stdin.close()
    assert "the decision log cannot be written: OSError: [Errno 27] File too large" in err
    assert "stopping the server" in err
    assert "stopped by SIGTERM" in err
    assert '"id":2' in out.replace(" ", "")  # the call was answered
