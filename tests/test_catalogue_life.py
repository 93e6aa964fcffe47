"""Issue #28, items 7 and 8: the lifecycle's edges and the approval prompt's digest, from the
bad-input catalogue (catalogue cases C30, C31).

By example on the reducer (a virtual clock, every effect seen), then against a live server over
stdio and over Streamable HTTP (tests/test_catalogue.py's wires). Nothing sleeps to synchronise:
the live tests wait on messages, and on the runtime's tap for the step that parks a call.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from askgate.audit import AuditLog, Auditor, Trace
from askgate.core import (
    Ask,
    ClientReady,
    Effect,
    ElicitationAnswered,
    Emit,
    Event,
    MessageReceived,
    Options,
    Push,
    ServerStopping,
    StartWorker,
    SubscriberAttached,
    SubscriberDetached,
    TimerFired,
    ToolCallReceived,
    ToolInfo,
    WorkerFinished,
    door,
    initial_state,
)
from askgate.core import messages as m
from askgate.core.codec import decode, encode
from askgate.trace import digest as trace_digest
from askgate.trace import read_keys, read_trace, replay

from .harness import ELICIT, Harness, only_reply, pushes
from .test_catalogue import (
    APPROVE,
    DEADLINE,
    INVALID,
    PROMPT,
    VERSION,
    HttpWire,
    Wire,
    answer,
    anyio_backend,
    call,
    denied,
    http_server,
    initialize,
    open_session,
    request,
    stdio_wire,
    text_of,
)

pytestmark = pytest.mark.anyio
__all__ = ["anyio_backend"]  # the fixture: uvicorn runs on asyncio

INITIALIZED: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/initialized"}
ALREADY = {"code": -32600, "message": "Invalid Request: the session is already initialized"}


def feed(h: Harness, conn: str, message: dict[str, Any]) -> list[Effect]:
    return h.feed(MessageReceived(conn, encode(message), h.now))


def prompts(effects: list[Effect]) -> list[Push]:
    return [p for p in pushes(effects) if p.message.get("method") == "elicitation/create"]


def withdrawals(effects: list[Effect]) -> list[Push]:
    return [p for p in pushes(effects) if p.message.get("method") == "notifications/cancelled"]


def initialized_but_not_ready(**options: Any) -> Harness:
    """Connection "s": subscribed, ``initialize`` answered, no ``notifications/initialized``."""
    h = Harness(has_authorizer=True, elicitation_timeout_ms=1000, **options)
    h.feed(SubscriberAttached("s"))
    reply = only_reply(feed(h, "s", initialize(0)))
    assert reply["result"]["protocolVersion"] == VERSION
    return h


def held_park(h: Harness, rid: object) -> list[Effect]:
    """Calls ``echo`` on "s" and has the authorizer ask."""
    h.call("s", rid, arguments={"text": f"t{rid}"})
    return h.finish(h.worker(), Ask("ok?"))


# -- R-PROTO-23: a second initialize ------------------------------------------------------------


def test_R_PROTO_23_the_reducer_refuses_a_second_initialize_and_keeps_the_first() -> None:
    h = initialized_but_not_ready()
    feed(h, "s", INITIALIZED)
    before = h.state
    again = initialize(1, {})  # drops elicitation, asks another version
    again["params"]["protocolVersion"] = "2025-03-26"
    assert only_reply(feed(h, "s", again)) == {"jsonrpc": "2.0", "id": 1, "error": ALREADY}
    assert h.state == before
    assert h.state.conns["s"].version == VERSION
    assert h.state.conns["s"].can_elicit
    assert prompts(held_park(h, 2))  # still asked: the first capabilities hold


@asynccontextmanager
async def _http(**options: Any) -> AsyncIterator[HttpWire]:
    async with http_server(**options) as (server, runs, app, url, http):
        wire = await open_session(server, runs, app, url, http, ELICIT)
        async with anyio.create_task_group() as tg:
            wire.tg = tg
            yield wire
            tg.cancel_scope.cancel()


async def test_R_PROTO_23_a_second_initialize_is_refused_over_stdio() -> None:
    async with stdio_wire() as wire:
        await _second_initialize_refused(wire)


async def test_R_PROTO_23_a_second_initialize_is_refused_over_http() -> None:
    async with _http() as wire:
        await _second_initialize_refused(wire)


async def _second_initialize_refused(wire: Wire) -> None:
    again = initialize(1, {})  # drops elicitation
    again["params"]["protocolVersion"] = "2025-03-26"
    if isinstance(wire, HttpWire):  # on the live session: its Mcp-Session-Id
        response = await wire.post(again)
        assert response.status_code == 200
        reply = response.json()
    else:
        await wire.send(again)
        reply = await wire.reply_to(1)
    assert reply["error"] == ALREADY
    assert reply["error"]["code"] == INVALID
    conns = wire.runtime().state.conns
    assert [c.version for c in conns.values()] == [VERSION]
    await wire.send(call(2))
    ask = await wire.elicitation()  # still askable: the first capabilities hold
    await wire.approve(ask, "t2")
    assert text_of(await wire.reply_to(2)) == "t2"
    await wire.settled()


async def test_R_PROTO_23_a_second_initialize_cannot_add_elicitation() -> None:
    async with stdio_wire(init={}) as wire:
        await wire.send(initialize(1, ELICIT))
        assert (await wire.reply_to(1))["error"] == ALREADY
        await wire.send(call(2))
        assert denied(await wire.reply_to(2)) == PROMPT  # still not askable
        await wire.settled()


# -- R-PARK-8, R-PARK-9: an ASK before notifications/initialized ------------------------------


def test_R_PARK_8_a_prompt_waits_for_notifications_initialized() -> None:
    h = initialized_but_not_ready(max_parked_elicitations=2)
    effects = held_park(h, 1)
    assert not pushes(effects)  # parked, counted, timed: nothing sent
    assert h.state.parked_total == 1
    [parked] = [e for e in effects if isinstance(e, Emit) and e.name == "call_parked"]
    eid = parked.fields["elicitation_id"]
    assert feed(h, "s", answer(eid, APPROVE)) == []  # a prompt never sent is unknown
    effects = held_park(h, 2)
    assert not pushes(effects)
    effects = held_park(h, 3)  # the caps count held calls: the third is refused
    assert only_reply(effects)["result"]["structuredContent"]["detail"] == m.TOO_MANY_PENDING
    effects = feed(h, "s", INITIALIZED)
    asked = prompts(effects)
    assert [p.related for p in asked] == [1, 2]  # in parking order, each naming its call
    assert asked[0].message["id"] == eid
    assert feed(h, "s", INITIALIZED) == []  # once
    effects = h.answer("s", eid, APPROVE)
    assert [e for e in effects if isinstance(e, StartWorker)]  # approved: the tool runs
    assert prompts(held_park(h, 4))  # ready now: a prompt is sent as its call parks


def test_R_PARK_9_a_timeout_before_initialized_is_the_usual_deny_with_nothing_pushed() -> None:
    h = initialized_but_not_ready()
    held_park(h, 1)
    [eid] = h.state.parked
    h.now = 1000
    effects = h.feed(TimerFired(("elicitation", eid), h.now))
    assert not pushes(effects)  # no prompt, no withdrawal of one
    deny = only_reply(effects)["result"]["structuredContent"]
    assert deny["detail"] == m.TIMED_OUT
    assert deny["message"] == "echo was not run: no one approved it within 1 s"
    assert feed(h, "s", INITIALIZED) == []  # nothing left to send
    assert h.state.parked_total == 0


@pytest.mark.parametrize("how", ["cancel", "detach", "stop", "evict"])
def test_R_PARK_9_every_other_end_of_a_held_call_withdraws_nothing(how: str) -> None:
    h = initialized_but_not_ready(max_parked_elicitations=1, max_parked_elicitations_total=1)
    held_park(h, 1)
    if how == "cancel":
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
        effects = feed(h, "s", cancel)
    elif how == "detach":
        effects = h.feed(SubscriberDetached("s"))
    elif how == "stop":
        effects = h.feed(ServerStopping(h.now))
    else:  # another owner, holding fewer, evicts it (R-PARK-3, R-PARK-4)
        h.connect("t", ELICIT)
        h.call("t", 9)
        effects = h.finish(h.worker(), Ask("ok?"))
        assert [p.conn for p in pushes(effects)] == ["t"]  # only the evictor's prompt
    assert not [p for p in pushes(effects) if p.conn == "s"]
    assert h.state.parked_total == (1 if how == "evict" else 0)
    assert all(c.held is None or not c.held for c in h.state.conns.values())


class _Parks:
    """A runtime tap: set once a step parks a call (its ``call_parked`` record)."""

    def __init__(self) -> None:
        self.parked = anyio.Event()

    def __call__(self, _before: object, _event: object, _after: object, effects: Any) -> None:
        if any(isinstance(e, Emit) and e.name == "call_parked" for e in effects):
            self.parked.set()


async def test_R_PARK_8_live_the_prompt_comes_after_notifications_initialized_stdio() -> None:
    async with stdio_wire(init=None) as wire:
        parks = _Parks()
        wire.runtime().tap(parks)
        await wire.send(initialize(0))
        await wire.reply_to(0)
        await wire.send(call(1))
        with anyio.fail_after(DEADLINE):
            await parks.parked.wait()
        before = await wire.ping()  # everything the server wrote so far
        assert all(msg.get("method") != "elicitation/create" for msg in before), before
        await wire.send(INITIALIZED)
        ask = await wire.elicitation()
        await wire.approve(ask, "t1")
        assert text_of(await wire.reply_to(1)) == "t1"
        await wire.settled()


async def test_R_PARK_8_live_the_prompt_comes_after_notifications_initialized_http() -> None:
    async with http_server() as (server, runs, app, url, http):
        wire = await open_session(server, runs, app, url, http, None)
        response = await wire.post(initialize(0))
        wire.sid = response.headers["mcp-session-id"]
        parks = _Parks()
        app.runtime.tap(parks)
        async with anyio.create_task_group() as tg:
            wire.tg = tg
            await wire.send(call(1))
            with anyio.fail_after(DEADLINE):
                await parks.parked.wait()
            [conn] = app.runtime.state.conns
            assert app.runtime.state.conns[conn].held  # parked, its prompt not sent
            assert (await wire.post(INITIALIZED)).status_code == 202
            ask = await wire.elicitation()
            await wire.approve(ask, "t1")
            assert text_of(await wire.reply_to(1)) == "t1"
            await wire.settled()
            tg.cancel_scope.cancel()


async def test_R_PARK_9_live_a_timeout_before_initialized_pushes_nothing() -> None:
    async with stdio_wire(init=None, elicitation_timeout_ms=50) as wire:
        await wire.send(initialize(0))
        await wire.reply_to(0)
        await wire.send(call(1))
        seen = await wire.until(lambda msg: msg.get("id") == 1 and "method" not in msg)
        assert denied(seen[-1]) == "elicitation timed out"
        seen += await wire.settled()
        methods = [msg.get("method") for msg in seen]
        assert "elicitation/create" not in methods
        assert "notifications/cancelled" not in methods
        assert wire.runs.ran == []


def test_R_PARK_8_only_an_initialize_answered_holds_and_only_its_connection_is_told() -> None:
    h = Harness(has_authorizer=True)
    before = h.state
    assert h.feed(ClientReady("nobody")) == []  # a connection that never initialized
    assert h.state == before
    h.connect("e", ELICIT)  # an embedder's handshake (no request id): ready at once
    h.feed(SubscriberAttached("s"))
    feed(h, "s", initialize(0))  # "s" is not ready yet
    h.call("e", 1)
    assert [p.conn for p in prompts(h.finish(h.worker(), Ask("ok?")))] == ["e"]
    h.call("s", 2)
    assert not pushes(h.finish(h.worker(), Ask("ok?")))
    assert h.feed(ClientReady("e")) == []  # another connection's readiness sends nothing
    assert [(p.conn, p.related) for p in prompts(h.feed(ClientReady("s")))] == [("s", 2)]


def test_R_PROTO_24_notifications_initialized_is_client_ready() -> None:
    assert door.meaning("s", decode(encode(INITIALIZED)), 7) == ClientReady("s", 7)
    assert door.wire_form(ClientReady("s", 7)) == INITIALIZED
    h = initialized_but_not_ready()
    held_park(h, 1)
    assert prompts(feed(h, "s", INITIALIZED))  # the bytes reach the same handler
    before = h.state
    assert feed(h, "s", INITIALIZED) == []  # a second one: nothing
    assert h.state == before


# -- R-DLV-5: the prompt names the arguments by the decision log's digest -----------------------

DIGEST_KEY = b"d" * 32


def _digest_in(prompt: str) -> str:
    match = re.fullmatch(r".* \(arguments digest ([0-9a-f]{12})\)", prompt, re.DOTALL)
    assert match is not None, prompt
    return match.group(1)


def test_R_DLV_5_the_prompt_shows_the_decision_logs_digest_in_every_era() -> None:
    tools = (ToolInfo("echo", sensitive=False, derived=False),)
    options = Options(has_authorizer=True)
    h = Harness(has_authorizer=True)
    h.state = initial_state(options, id_key=b"k" * 32, tools=tools, digest_key=DIGEST_KEY)
    log = AuditLog(io.StringIO())
    auditor = Auditor(log=log)  # no key of its own: it takes the state's
    auditor.start(h.state, lambda _conn: None)

    def fed(event: Event) -> list[Effect]:
        before = h.state
        effects = h.feed(event)
        auditor(before, event, h.state, effects)
        return effects

    fed(SubscriberAttached("s"))
    fed(MessageReceived("s", encode(initialize(0)), 0))
    fed(MessageReceived("s", encode(INITIALIZED), 0))
    arguments = {"text": "rm -rf /tmp/build"}
    fed(ToolCallReceived("s", 1, "echo", arguments, 0))
    [prompt] = prompts(fed(WorkerFinished(h.worker(), Ask("Run it?"), 0)))
    shown = _digest_in(prompt.message["params"]["message"])
    assert prompt.message["params"]["message"] == f"Run it? (arguments digest {shown})"
    # the modern revision's input request (R-MRTR-12) shows the same digest
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": ELICIT,
        "io.modelcontextprotocol/clientInfo": {"name": "m", "version": "0"},
    }
    call = request(2, "tools/call", {"name": "echo", "arguments": arguments, "_meta": meta})
    fed(MessageReceived("m", encode(call), 0))
    effects = fed(WorkerFinished(h.worker(), Ask("Run it?"), 0))
    assert f"Run it? (arguments digest {shown})" in json.dumps(only_reply(effects))
    fed(ElicitationAnswered("s", prompt.message["id"], {"action": "decline"}, 0))
    auditor.close()
    stream = log.sink._stream
    assert isinstance(stream, io.StringIO)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    logged = {line["arguments_digest"] for line in lines if line.get("request_id") == 1}
    assert len(logged) == 1
    [digest] = logged
    assert digest[:12] == shown  # the prompt's digest is the decision log's
    assert digest == trace_digest(DIGEST_KEY, arguments)


async def test_R_DLV_5_live_two_look_alike_arguments_are_told_apart_and_logged() -> None:
    log = AuditLog(io.StringIO())
    stream = log.sink._stream
    assert isinstance(stream, io.StringIO)
    look_alike = ("pay-acme", "pay-acme\u200b")  # the second ends in a zero-width space
    shown: list[str] = []
    # the server draws the key; the prompts and the log share it
    async with stdio_wire(prepare=lambda server: server.audit(log=log)) as wire:
        for rid, tag in enumerate(look_alike, 1):
            await wire.send(call(rid, tag=tag))
            ask = await wire.elicitation()
            shown.append(_digest_in(ask["params"]["message"]))
            await wire.send(answer(ask["id"], {"action": "decline"}))
            assert denied(await wire.reply_to(rid)) == "declined"
        await wire.settled()
    assert shown[0] != shown[1]
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    for rid in (1, 2):
        logged = {line["arguments_digest"][:12] for line in lines if line.get("request_id") == rid}
        assert logged == {shown[rid - 1]}


@pytest.mark.parametrize("redact", [True, False])
async def test_R_DLV_5_a_trace_of_prompts_with_digests_replays(redact: bool) -> None:
    text = io.StringIO()
    keys = io.StringIO()  # the digest key of a trace with arguments goes there (R-AUD-11)
    trace = Trace(text, redact=redact, keys=keys)
    async with stdio_wire(prepare=lambda server: server.audit(trace=trace)) as wire:
        await wire.send(call(1, tag="secret"))
        ask = await wire.elicitation()
        _digest_in(ask["params"]["message"])
        await wire.approve(ask, "secret")
        assert text_of(await wire.reply_to(1)) == "secret"
        await wire.settled()
    head, steps = read_trace(text.getvalue().splitlines())
    assert (head["digest_key"] == "redacted") is redact  # the key only beside the arguments
    assert keys.getvalue()
    assert keys.getvalue().split()[-1] not in text.getvalue()  # no key in the trace: R-AUD-10
    count, difference = replay(head, steps, keys=read_keys(keys.getvalue().splitlines()))
    assert difference is None, difference
    assert count == len(steps)
