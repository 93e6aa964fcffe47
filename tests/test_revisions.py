"""Protocol revisions (spec/revisions.md, R-REV-*): what differs on the wire, in one place."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from askgate.core import (
    Ask,
    ClientInitialized,
    ClientReady,
    Options,
    Push,
    StartWorker,
    SubscriberAttached,
    ToolCallReceived,
    ToolInfo,
    ToolRequested,
    WorkerFinished,
    initial_state,
    step,
)
from askgate.core.protocol import SUPPORTED_VERSIONS
from askgate.core.revisions import DEFAULT, REVISIONS, revision_for

ROOT = Path(__file__).resolve().parent.parent
VERSION_LITERAL = re.compile(r"^\d{4}-\d{2}-\d{2}$")
ELICIT = {"message": "Name?", "requestedSchema": {"type": "object", "properties": {}}}


def _parked(version: str | None) -> tuple[Any, list[Any]]:
    """A state where connection ``a`` (initialized with ``version``, or an embedder's entry
    without one) has one call parked, and the effects of parking it."""
    state = initial_state(
        Options(has_authorizer=True), id_key=b"k" * 32, tools=(ToolInfo("rm", True, False),)
    )
    state, _ = step(state, SubscriberAttached("a"))
    caps: dict[str, object] = {"elicitation": {}}
    init = (
        ClientInitialized("a", caps)
        if version is None
        else ClientInitialized("a", caps, 0, 0, version)
    )
    state, _ = step(state, init)
    state, _ = step(state, ClientReady("a"))  # R-PARK-8: the prompt is sent at once
    state, effects = step(state, ToolCallReceived("a", 1, "rm", {}, 0))
    ref = next(e.ref for e in effects if isinstance(e, StartWorker))
    return step(state, WorkerFinished(ref, Ask("Remove it?"), 1))


def _asked(effects: list[Any]) -> dict[str, Any]:
    return next(
        e.message
        for e in effects
        if isinstance(e, Push) and e.message.get("method") == "elicitation/create"
    )


def test_R_REV_1_every_negotiable_version_has_a_revision() -> None:
    assert set(REVISIONS) == set(SUPPORTED_VERSIONS)
    assert revision_for("") is DEFAULT
    assert revision_for(SUPPORTED_VERSIONS[0]) is DEFAULT  # the latest


@pytest.mark.parametrize(
    ("version", "mode"),
    [
        ("2025-11-25", True),
        ("2025-06-18", False),
        ("2025-03-26", False),
        ("2024-11-05", False),
        ("1999-01-01", True),  # negotiated to the latest
        (None, True),  # an embedder's connection that negotiated nothing
    ],
)
def test_R_REV_1_a_connection_is_asked_in_the_revision_it_negotiated(
    version: str | None, mode: bool
) -> None:
    _, effects = _parked(version)
    assert ("mode" in _asked(effects)["params"]) is mode


def test_R_REV_1_no_handler_compares_version_strings() -> None:
    """The reducer names no protocol version: the revision module holds every difference."""
    for name in ("reducer.py", "decide.py", "state.py", "door.py"):
        tree = ast.parse((ROOT / "core" / name).read_text(encoding="utf-8"))
        literals = [
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and VERSION_LITERAL.match(node.value)
        ]
        assert literals == [], name


@pytest.mark.parametrize(("version", "mode"), [("2025-11-25", True), ("2025-06-18", False)])
def test_R_REV_2_an_approval_is_an_elicitation_request(version: str, mode: bool) -> None:
    _, effects = _parked(version)
    asked = _asked(effects)
    params = asked["params"]
    assert asked["jsonrpc"] == "2.0"
    assert asked["id"].startswith("askgate-elicit-")
    assert params["message"] == "Remove it?"
    schema = params["requestedSchema"]
    assert schema["required"] == ["approve"]
    assert schema["properties"]["approve"]["type"] == "boolean"
    assert "rm" in schema["properties"]["approve"]["description"]
    assert ("mode" in params) is mode
    if mode:
        assert params["mode"] == "form"


def test_R_REV_3_a_withdrawal_is_a_cancellation_of_that_request() -> None:
    for revision in set(REVISIONS.values()):
        assert revision.withdraw("askgate-elicit-x", "timed out") == {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": "askgate-elicit-x", "reason": "timed out"},
        }


@pytest.mark.parametrize(("version", "mode"), [("2025-11-25", True), ("2024-11-05", False)])
def test_R_REV_4_a_tools_request_carries_the_revisions_shape(version: str, mode: bool) -> None:
    state = initial_state(Options(), id_key=b"k" * 32, tools=(ToolInfo("ask", False, False),))
    state, _ = step(state, SubscriberAttached("a"))
    state, _ = step(state, ClientInitialized("a", {"elicitation": {}}, 0, 0, version))
    state, effects = step(state, ToolCallReceived("a", 1, "ask", {}, 0))
    ref = next(e.ref for e in effects if isinstance(e, StartWorker))
    state, effects = step(state, ToolRequested(ref, "t", "elicitation/create", ELICIT, 1))
    sent = next(e.message for e in effects if isinstance(e, Push))
    assert sent["method"] == "elicitation/create"
    assert sent["params"]["message"] == "Name?"
    assert ("mode" in sent["params"]) is mode
    assert revision_for(version).request_params("roots/list", {}) is None
    assert revision_for(version).request_params("elicitation/create", {"message": 1}) is None
