"""Issue #28, item 6: the files auditing writes, and the keys a trace no longer holds
(spec/audit.md, R-AUD-9 .. R-AUD-12).

The served demo (a subprocess, its stdin a pipe or closed: it ends at end of input) checks the
flags end to end; a reducer run recorded in memory through the runtime's tap (the
:class:`~askgate.audit.Auditor`), with keys drawn at random as the shell draws them, checks what
a trace holds and what replay says with and without the key file.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from askgate.__main__ import main
from askgate.audit import Auditor, Trace
from askgate.core import Effect, Event, Options, State, initial_state
from askgate.core import reducer as core_reducer
from askgate.core.sealing import Key, Keyring
from askgate.trace import key_lines, read_keys, read_trace, replay

from .harness import APPROVE, Harness
from .test_catalogue import initialize
from .test_model import STEPS, ApprovedRounds, Context
from .test_modern import APPROVE as MODERN_APPROVE
from .test_modern import TOOLS, ask
from .test_modern import call as modern_call

RESULT = {"content": [{"type": "text", "text": "done"}]}

INIT_AND_CALL = b"".join(
    json.dumps(line).encode() + b"\n"
    for line in (
        initialize(1, {}),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}},
        },
    )
)


def _serve(*flags: str, stdin: bytes = b"", umask: int = -1) -> subprocess.CompletedProcess[str]:
    """``askgate serve --demo`` with ``flags``, fed ``stdin`` then end of input."""
    return subprocess.run(
        [sys.executable, "-m", "askgate", "serve", "--demo", *flags],
        input=stdin.decode(),
        capture_output=True,
        text=True,
        timeout=60,
        umask=umask,
        check=False,
    )


# -- R-AUD-9: private files, never through a link ------------------------------------------------


def test_R_AUD_9_new_trace_key_and_log_files_are_0600_whatever_the_umask(tmp_path: Path) -> None:
    trace, keys, log = tmp_path / "t.trace", tmp_path / "t.keys", tmp_path / "a.log"
    flags = ("--trace", str(trace), "--trace-keys", str(keys), "--audit-log", str(log))
    done = _serve(*flags, stdin=INIT_AND_CALL, umask=0)
    assert done.returncode == 0, done.stderr
    for path in (trace, keys, log):
        assert path.stat().st_mode & 0o777 == 0o600, path
    assert '"id":2' in done.stdout.replace(" ", "")  # it served the call
    head, _ = read_trace(trace.read_text().splitlines())
    assert head["id_key"]["$key"] in read_keys(keys.read_text().splitlines())
    # Private files of this user are appended to: a second run adds its header and its keys.
    assert _serve(*flags, stdin=INIT_AND_CALL).returncode == 0
    headers = [line for line in trace.read_text().splitlines() if "askgate_trace" in line]
    assert len(headers) == 2
    # a comment, the id key, the sealing key, the prompts' digest key (R-DLV-5), twice
    assert len(keys.read_text().splitlines()) == 2 * 4


FLAGS = [
    ["--trace", "{}"],
    ["--audit-log", "{}"],
    ["--trace", "{}.trace", "--trace-keys", "{}"],
]


def _flags(flags: list[str], path: Path) -> list[str]:
    return [flag.format(path) for flag in flags]


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


@pytest.mark.parametrize("flags", FLAGS, ids=["trace", "audit-log", "trace-keys"])
def test_R_AUD_9_a_symlink_is_refused_and_its_target_untouched(
    tmp_path: Path, flags: list[str]
) -> None:
    target = tmp_path / "target"
    target.write_text("kept\n")
    target.chmod(0o600)
    link = tmp_path / "link"
    link.symlink_to(target)
    done = _serve(*_flags(flags, link))
    assert done.returncode == 2
    line = _one_line(done.stderr)
    assert str(link) in line
    assert "symbolic link" in line
    assert target.read_text() == "kept\n"
    assert target.stat().st_mode & 0o777 == 0o600
    # A dangling link: its target is not created.
    missing = tmp_path / "nowhere"
    dangling = tmp_path / "dangling"
    dangling.symlink_to(missing)
    done = _serve(*_flags(flags, dangling))
    assert done.returncode == 2
    assert "symbolic link" in _one_line(done.stderr)
    assert not missing.exists()


@pytest.mark.parametrize("flags", FLAGS, ids=["trace", "audit-log", "trace-keys"])
def test_R_AUD_9_an_existing_file_others_can_read_is_refused_in_one_line(
    tmp_path: Path, flags: list[str]
) -> None:
    path = tmp_path / "shared"
    path.write_text("old\n")
    path.chmod(0o644)
    done = _serve(*_flags(flags, path))
    assert done.returncode == 2
    line = _one_line(done.stderr)
    assert str(path) in line
    assert "0644" in line
    assert path.read_text() == "old\n"
    # Another user's file, however private (only root can make one here).
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.write_text("theirs\n")
        theirs.chmod(0o600)
        os.chown(theirs, 65534, 65534)
        done = _serve(*_flags(flags, theirs))
        assert done.returncode == 2
        assert "belongs to another user" in _one_line(done.stderr)
        assert theirs.read_text() == "theirs\n"
    # A FIFO is not a regular file: refused at once, never waited on for a reader.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    done = _serve(*_flags(flags, fifo))
    assert done.returncode == 2
    assert "not a regular file" in _one_line(done.stderr)


# -- R-AUD-10 .. R-AUD-12: keys named, never written; replay with and without them -------------


class Recorded(Harness):
    """A reducer run with random keys, as the shell draws them, recorded through the tap."""

    def __init__(self, trace: Trace) -> None:
        super().__init__(TOOLS, has_authorizer=True)
        options = Options(has_authorizer=True)
        self.id_key = os.urandom(32)
        self.secret = os.urandom(32)
        ring = Keyring(Key("live", self.secret), options.elicitation_timeout_ms)
        self.state = initial_state(options, id_key=self.id_key, tools=TOOLS, keyring=ring)
        self.auditor = Auditor(trace=trace, key=os.urandom(32))
        self.auditor.start(self.state, lambda _conn: None)

    def feed(self, event: Event) -> list[Any]:
        before = self.state
        effects = super().feed(event)
        self.auditor(before, event, self.state, effects)
        return effects

    def run(self) -> None:
        """A 2025 ask approved, a modern ask approved by its retry, a tampered retry."""
        self.connect("A")
        eid = self.park("A", 1)
        self.answer("A", eid, APPROVE)
        self.finish(self.worker(), RESULT)
        state = ask(self, "m", 2)["requestState"]
        self.finish(
            self.worker(modern_call(self, "m", 3, state=state, responses=MODERN_APPROVE)), RESULT
        )
        modern_call(self, "m", 4, state=state[:-4] + "AAAA", responses=MODERN_APPROVE)
        self.auditor.close()


def _spellings(secret: bytes) -> list[str]:
    return [
        secret.hex(),
        secret.hex().upper(),
        base64.b64encode(secret).decode(),
        base64.urlsafe_b64encode(secret).decode().rstrip("="),
        base64.b64encode(secret).decode().rstrip("="),
    ]


def test_R_AUD_10_a_trace_holds_no_key_material() -> None:
    text = io.StringIO()
    h = Recorded(Trace(text, redact=False))
    h.run()
    trace = text.getvalue()
    head, steps = read_trace(trace.splitlines())
    assert len(steps) > 10
    assert "requestState" in trace  # the run sealed states, and minted elicitation ids
    for secret in (h.id_key, h.secret):
        for spelling in _spellings(secret):
            assert spelling not in trace
    assert set(head["id_key"]) == {"$key"}
    assert set(head["keyring"]["current"]["secret"]) == {"$key"}
    assert head["keyring"]["current"]["key_id"] == "live"


def _recorded(tmp_path: Path, *, keys_file: bool = True) -> tuple[Path, Path, list[int]]:
    """A recorded run in files: the trace, the key file (written if ``keys_file``), the steps
    that minted ids or sealed states."""
    trace, keys = tmp_path / "run.trace", tmp_path / "run.keys"
    if keys_file:
        Recorded(Trace(str(trace), redact=False, keys=str(keys))).run()
    else:
        Recorded(Trace(str(trace), redact=False)).run()
    _, steps = read_trace(trace.read_text().splitlines())
    minted = [
        s["n"]
        for s in steps
        if any(e.get("name") == "call_parked" for e in s["effects"] if isinstance(e, dict))
    ]
    assert len(minted) == 2  # the 2025 ask and the modern one
    return trace, keys, minted


def test_R_AUD_11_replay_with_the_key_file_verifies_every_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, keys, _ = _recorded(tmp_path)
    assert keys.stat().st_mode & 0o777 == 0o600
    head, steps = read_trace(trace.read_text().splitlines())
    done = replay(head, steps, keys=read_keys(keys.read_text().splitlines()))
    assert done.difference is None
    assert (done.count, done.unverified, done.missing) == (len(steps), (), ())
    assert main(["replay", str(trace), "--keys", str(keys)]) == 0
    out = capsys.readouterr().out
    assert f"{len(steps)} steps replayed, every effect identical\n" in out
    assert "could not" not in out
    assert main(["explain", str(trace), "--keys", str(keys), "--format", "json"]) == 0
    paths = json.loads(capsys.readouterr().out)
    assert "answered: approved" in [s["what"] for s in paths[0]["steps"]]
    # A key file whose secret is not its key's is refused, naming the line, quoting no secret.
    lines = keys.read_text().splitlines()
    name, secret = lines[1].split()
    keys.write_text(f"{lines[0]}\n{name} {'00' * 32}\n")
    assert main(["replay", str(trace), "--keys", str(keys)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "line 2" in err
    assert secret not in err
    # Keys without a trace to go with: refused before serving.
    assert main(["serve", "--demo", "--trace-keys", str(tmp_path / "alone.keys")]) == 2
    assert "--trace-keys needs --trace" in capsys.readouterr().err
    assert not (tmp_path / "alone.keys").exists()
    # Nor into the trace itself.
    same = tmp_path / "same.trace"
    assert main(["serve", "--demo", "--trace", str(same), "--trace-keys", str(same)]) == 2
    assert "it is the trace itself" in _one_line(capsys.readouterr().err)
    assert same.read_text() == ""


def test_R_AUD_12_replay_without_keys_names_the_steps_it_could_not_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace, _, minted = _recorded(tmp_path, keys_file=False)
    assert main(["replay", str(trace)]) == 3
    captured = capsys.readouterr()
    line = _one_line(captured.out)
    assert "could not be verified" in line
    assert f"steps {minted[0]}, {minted[1]} " in line
    assert "--keys" in line
    assert captured.err == ""
    head, steps = read_trace(trace.read_text().splitlines())
    done = replay(head, steps)
    assert done.difference is None, done.difference and done.difference.text()
    assert list(done.unverified) == minted
    assert len(done.missing) == 2  # the id key and the sealing key
    # Every later step was still compared: the answer to the first ask went through, and
    # explain without keys follows both approved calls.
    assert main(["explain", str(trace), "--format", "json"]) == 0
    paths = json.loads(capsys.readouterr().out)
    whats = {p["request_id"]: [s["what"].split(" (")[0] for s in p["steps"]] for p in paths}
    assert whats[1][-3:] == ["answered: approved", "ran", "replied"]
    assert whats[3][-2:] == ["ran", "replied"]  # the modern retry, its state opened
    assert [p["steps"][-2].get("detail") for p in paths if p["request_id"] == 4] == [
        "request state tampered"
    ]
    # A decision that changed is still a difference without keys (exit 1), not unverified.
    monkeypatch.setattr(core_reducer, "can_elicit", lambda _caps: False)
    changed = replay(head, steps)
    assert changed.difference is not None
    assert changed.difference.n == minted[0]
    assert main(["replay", str(trace)]) == 1


def _traced(base: type[Any]) -> type[Any]:
    """``base``, a machine of tests/test_model.py, recording each history through the tap and
    replaying it at its end with the keys (exact, nothing unverified) and without them (no
    difference: what the stand-ins change is learned, R-AUD-12)."""

    class Traced(base):  # type: ignore[misc]
        tally: ClassVar[dict[str, int]] = {"runs": 0, "steps": 0, "unverified": 0}

        def initial_state_fn(self, options: Options, tools: Any) -> Any:
            state = super().initial_state_fn(options, tools)
            self.text = io.StringIO()
            self.auditor = Auditor(trace=Trace(self.text, redact=False), key=b"k" * 32)
            self.auditor.start(state, lambda _conn: None)
            self.keys = read_keys(key_lines(state))
            return state

        def _step(self, ev: Event) -> list[Effect]:
            before: State = self.state
            effects: list[Effect] = super()._step(ev)
            self.auditor(before, ev, self.state, effects)
            return effects

        def teardown(self) -> None:
            if not hasattr(self, "auditor"):
                return
            self.auditor.close()
            head, steps = read_trace(self.text.getvalue().splitlines())
            keyed = replay(head, steps, keys=self.keys)
            assert keyed.difference is None, keyed.difference.text()
            assert keyed.unverified == ()
            bare = replay(head, steps)
            assert bare.difference is None, bare.difference.text()
            Traced.tally["runs"] += 1
            Traced.tally["steps"] += len(steps)
            Traced.tally["unverified"] += len(bare.unverified)

    return Traced


@pytest.mark.parametrize("base", [Context, ApprovedRounds], ids=["context", "approved-rounds"])
def test_R_AUD_12_random_histories_replay_without_keys_with_no_false_difference(
    base: type[Any],
) -> None:
    """Histories of the model's machines (running tools asking their clients; modern approvals
    and rounds, retried, forged, replayed, expired), 25 of up to 40 steps each."""
    machine = _traced(base)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=25,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    tally = machine.tally
    assert tally["runs"] >= 20
    assert tally["unverified"] > 0, tally  # the histories minted ids and sealed states
