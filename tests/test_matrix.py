"""The decision matrix and `askgate spec` (spec/semantics.md R-SEM-1, R-SEM-2)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from askgate import matrix
from askgate.__main__ import main
from askgate.core import Ask, Deny, TimerFired
from askgate.core import reducer as reducer_module
from askgate.core.reducer import ELICITATION_TIMER
from tests.harness import APPROVE, ELICIT, Harness, deny_payload, only_reply, records

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def _found() -> dict[matrix.Combination, matrix.Outcome]:
    return matrix.outcomes()


@functools.cache
def _rows() -> list[tuple[tuple[str, ...], matrix.Outcome]]:
    return matrix.rows(_found())


def _row(combination: matrix.Combination) -> matrix.Outcome:
    covering = [o for cells, o in _rows() if matrix.covers(cells, combination)]
    assert len(covering) == 1, (combination, covering)
    return covering[0]


def test_R_SEM_1_every_combination_is_covered_by_one_row_with_its_outcome() -> None:
    found = _found()
    assert len(_rows()) < len(found) / 10  # the merging is what makes it readable
    for combination, result in found.items():
        assert _row(combination) == result, combination
    # What cannot occur is left out, and only that.
    assert ("Ask(prompt)", "no elicitation", "its connection at its cap", "declines") not in found
    assert ("Allow", "no elicitation", "room", "declines") in found


def _parked(capabilities: object = ELICIT) -> tuple[Harness, str]:
    h = Harness(has_authorizer=True, max_parked_elicitations=2, max_parked_elicitations_total=3)
    h.connect("c", capabilities)
    return h, h.park("c", "call", prompt=matrix.PROMPT)


ENDINGS: dict[str, Any] = {
    "declines": {"action": "decline"},
    "cancels": {"action": "cancel"},
    "accepts without approving": {"action": "accept", "content": {"approve": False}},
}


@pytest.mark.parametrize("answer", sorted(ENDINGS))
def test_R_SEM_1_the_matrix_says_what_the_reducer_answers(answer: str) -> None:
    """Independent of the matrix's own driver: tests/harness.py drives the reducer, and the
    row covering the combination says the same decision and detail."""
    h, eid = _parked()
    payload = deny_payload(only_reply(h.answer("c", eid, ENDINGS[answer])))
    row = _row(("Ask(prompt)", "form elicitation", "room", answer))
    assert row.caller_gets == "authorization_required"
    assert (row.decision, row.detail) == (f"`{payload['decision']}`", f"`{payload['detail']}`")
    h, eid = _parked()
    h.feed(TimerFired((ELICITATION_TIMER, eid), h.now))
    timed_out = _row(("Ask(prompt)", "form elicitation", "room", "no answer before the timeout"))
    assert timed_out.detail == f"`{records(h.effects)[0]['detail']}`"
    h, eid = _parked()
    h.answer("c", eid, APPROVE)
    assert _row(("Ask(prompt)", "form elicitation", "room", "approves")).caller_gets == (
        "the tool's result"
    )
    h = Harness(has_authorizer=True)
    h.connect("c", {})
    h.call("c", "call")
    wire = deny_payload(only_reply(h.finish(h.worker(), Ask(matrix.PROMPT))))
    cannot = _row(("Ask(prompt)", "no elicitation", "room", "declines"))
    assert wire["detail"] == matrix.PROMPT
    assert cannot.detail == "*the prompt*"
    assert f"`{records(h.effects)[0]['detail']}`" in cannot.recorded
    h = Harness(has_authorizer=True)
    h.connect("c")
    h.call("c", "call")
    denied = deny_payload(only_reply(h.finish(h.worker(), Deny(matrix.REASON))))
    assert denied["decision"] == "deny"
    assert _row(("Deny(reason)", "form elicitation", "room", "approves")).detail == "*the reason*"


def test_R_SEM_1_a_changed_decision_in_the_reducer_changes_the_matrix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = matrix.render(_found())
    monkeypatch.setattr(reducer_module, "refusal_detail", lambda _result: "declined")
    after = matrix.render()
    assert after != before
    cells = [line.split(" | ") for line in after.splitlines() if line.startswith("| Ask(prompt)")]
    cancels = [row for row in cells if "cancels" in row[3].split(" or ")]
    assert cancels  # an answer cancelling the prompt now reads as a decline
    assert {row[6] for row in cancels} == {"`declined`"}


def test_R_SEM_2_askgate_spec_prints_the_committed_tables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    committed = {
        name: (ROOT / "spec" / name).read_text(encoding="utf-8")
        for name in ("matrix.md", "transitions.md")
    }
    assert main(["spec"]) == 0
    assert capsys.readouterr().out == committed["matrix.md"] + "\n" + committed["transitions.md"]
    assert main(["spec", "--only", "transitions"]) == 0
    assert capsys.readouterr().out == committed["transitions.md"]
    assert main(["spec", "--only", "matrix"]) == 0
    assert capsys.readouterr().out == committed["matrix.md"]
