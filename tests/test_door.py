"""The door (R-PROTO-15): every client message becomes one typed event, handled once."""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from askgate.core import (
    CancelRequested,
    ClientInitialized,
    ClientReady,
    ElicitationAnswered,
    Event,
    MessageReceived,
    PingReceived,
    ReadRequested,
    State,
    ToolCallReceived,
    door,
    step,
)
from askgate.core.codec import Decoded, Invalid, Request, decode, encode
from askgate.core.messages import invalid_id
from tests.test_totality import IDS, JSON_VALUES, METHODS, PARAMS_VALUES, STATES, peer_events


@st.composite
def client_events(draw: st.DrawFn, state: State) -> Event:
    """A typed client event with any JSON where a peer's field goes: the kinds of
    ``peer_events`` plus pings, initialize requests and tool calls carrying ``_meta``."""
    conn = draw(st.sampled_from(("a", "b", "c")))
    rid = draw(st.sampled_from(IDS) | JSON_VALUES)
    kind = draw(st.sampled_from(("peer", "ping", "initialize", "meta")))
    if kind == "ping":
        return PingReceived(conn, rid, 3)
    if kind == "initialize":
        version = draw(st.none() | st.sampled_from(("2025-06-18", "2025-11-25")) | JSON_VALUES)
        return ClientInitialized(conn, draw(JSON_VALUES), 3, rid, version)
    if kind == "meta":
        meta = draw(PARAMS_VALUES)
        tool = draw(st.sampled_from(("echo", "rm")))
        mode: Any = draw(st.sampled_from(("reply", "push")))
        return ToolCallReceived(conn, rid, tool, {}, 3, mode, "k", meta)
    return draw(peer_events(state).filter(lambda e: not isinstance(e, MessageReceived)))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_R_PROTO_15_a_typed_event_and_its_wire_form_do_the_same(data: st.DataObject) -> None:
    """From any reached state, feeding a typed client event and feeding the message that means
    it (as bytes, and as the codec's decoded value) give the same state and the same effects."""
    before = data.draw(st.sampled_from(STATES), label="state")
    event = data.draw(client_events(before), label="event")
    wired = door.wire_event(event)
    if wired is None:
        return
    typed_state, typed_effects = step(before, event)
    wire_state, wire_effects = step(before, wired)
    assert wire_effects == typed_effects
    assert wire_state == typed_state
    assert isinstance(wired.data, bytes)
    decoded_state, decoded_effects = step(before, attrs.evolve(wired, data=decode(wired.data)))
    assert (decoded_state, decoded_effects) == (typed_state, typed_effects)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_R_PROTO_15_the_door_inverts_wire_form(data: st.DataObject) -> None:
    event = data.draw(client_events(STATES[0]), label="event")
    wired = door.wire_event(event)
    if wired is None:
        return
    assert isinstance(wired.data, bytes)
    meant = door.meaning(wired.conn, decode(wired.data), wired.now, wired.mode, wired.caller)
    if isinstance(meant, dict | None):  # an id the codec refuses: its reply, or nothing
        return
    if isinstance(event, ElicitationAnswered) and event.error is not None:
        event = attrs.evolve(event, result=None)  # an error answer carries no result
    assert meant == event


def _both_reply() -> object:
    decoded = decode(b'{"jsonrpc":"2.0","id":1,"result":1,"error":{}}')
    assert isinstance(decoded, Invalid)
    assert decoded.reply is not None
    return decoded.reply


def _meaning(message: dict[str, Any]) -> object:
    decoded: Decoded = decode(encode(message))
    return door.meaning("a", decoded, 9, "push", "k")


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo"}},
            ToolCallReceived("a", 1, "echo", {}, 9, "push", "k", None),
        ),
        (
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"x": 1}, "_meta": {"progressToken": 5}},
            },
            ToolCallReceived("a", 1, "echo", {"x": 1}, 9, "push", "k", {"progressToken": 5}),
        ),
        (
            {
                "jsonrpc": "2.0",
                "id": "i",
                "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}},
            },
            ClientInitialized("a", {}, 9, "i", "2025-06-18"),
        ),
        ({"jsonrpc": "2.0", "id": 2, "method": "ping"}, PingReceived("a", 2, 9)),
        (
            {"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": "u"}},
            ReadRequested("a", 3, "resources/read", {"uri": "u"}, 9, "k"),
        ),
        (
            {"jsonrpc": "2.0", "id": 4, "method": "server/discover"},
            ReadRequested("a", 4, "server/discover", None, 9, "k"),
        ),
        (
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}},
            CancelRequested("a", 4, 9),
        ),
        ({"jsonrpc": "2.0", "method": "notifications/initialized"}, ClientReady("a", 9)),
        (
            {"jsonrpc": "2.0", "id": "e", "result": {"action": "decline"}},
            ElicitationAnswered("a", "e", {"action": "decline"}, 9),
        ),
        (
            {"jsonrpc": "2.0", "id": "e", "error": {"code": -1, "message": "no"}},
            ElicitationAnswered("a", "e", None, 9, {"code": -1, "message": "no"}),
        ),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, invalid_id()),
        ({"jsonrpc": "2.0", "id": 1, "result": 1, "error": {}}, _both_reply()),
        ({"jsonrpc": "1.0", "id": 1, "result": 1}, None),
    ],
)
def test_R_PROTO_15_each_row_of_the_door(message: dict[str, Any], expected: object) -> None:
    assert _meaning(message) == expected


@pytest.mark.parametrize("entry", door.DOOR, ids=lambda e: e.message)
def test_R_PROTO_15_the_rendered_door_table_is_what_the_door_does(entry: door.Entry) -> None:
    """Each row of the table spec/transitions.md renders, applied to its example."""
    meant = door.meaning("a", decode(entry.example), 0)
    assert (None if meant is None else type(meant)) is entry.becomes


@pytest.mark.parametrize("method", METHODS)
def test_R_PROTO_15_a_session_opens_on_what_the_door_calls_initialize(method: str) -> None:
    request = decode(encode({"jsonrpc": "2.0", "id": 1, "method": method}))
    assert isinstance(request, Request)
    meant = door.meaning("a", request, 0)
    assert door.opens_session(request) is isinstance(meant, ClientInitialized)


def test_R_PROTO_15_every_method_the_models_send_has_one_event_kind() -> None:
    """Each request method becomes one kind of event, whatever its params."""
    kinds: dict[str, set[type]] = {}
    for method in METHODS:
        for params in (None, {}, {"name": "echo", "capabilities": {}}):
            message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
            if params is not None:
                message["params"] = params
            kinds.setdefault(method, set()).add(type(_meaning(message)))
    assert all(len(k) == 1 for k in kinds.values()), kinds
    assert kinds["tools/call"] == {ToolCallReceived}
    assert kinds["initialize"] == {ClientInitialized}
    assert kinds["ping"] == {PingReceived}
    assert kinds["nope"] == {ReadRequested}


def test_R_PROTO_15_an_embedders_initialize_has_no_wire_form() -> None:
    assert door.wire_form(ClientInitialized("a", {"elicitation": {}})) is None
    assert door.wire_event(ToolCallReceived("a", 1, "echo", {"x": float("nan")}, 0)) is None


ROOT = Path(__file__).resolve().parent.parent
SHELL = [*sorted((ROOT / "transports").glob("*.py")), ROOT / "askgate" / "server.py"]


def _constructed_in_shell() -> set[str]:
    """The names the shipped shell calls, e.g. ``MessageReceived(...)``."""
    names: set[str] = set()
    for path in SHELL:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                names.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ""))
    return names


def _readme_feeders() -> dict[str, str]:
    """Event name -> who feeds it, from docs/architecture.md's "One way in" table."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## One way in", 1)[1].split("\n## ", 1)[0]
    feeders: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            for name in re.findall(r"`(\w+)`", cells[0]):
                assert name not in feeders, f"{name} listed twice"
                feeders[name] = cells[1]
    return feeders


def test_R_PROTO_15_every_event_kind_is_fed_by_the_shell_or_an_embedders_entry() -> None:
    """Every event kind is either emitted by a shipped transport (or the Server) or documented
    in docs/architecture.md as an embedder's entry, and it says which, truly."""
    kinds = {kind.__name__ for kind in typing.get_args(Event)}
    feeders = _readme_feeders()
    assert set(feeders) == kinds
    shell = _constructed_in_shell()
    for name, who in feeders.items():
        if "embedder's entry" in who:
            assert name not in shell, f"docs/architecture.md calls {name} an embedder's entry"
        else:
            assert name in shell, f"docs/architecture.md says the shell feeds {name}; it does not"
