"""Who owns a request (spec/rules.md R-SUB-3, R-SUB-4, R-PARK-5 .. R-PARK-7, R-ADM-6; spec/http.md
R-HTTP-40 .. R-HTTP-42): the owner every per-owner bound counts against is derived in one place,
from the principal the connection attached with; without credentials a 2025 session is an owner
of its own, and every stateless request without credentials is one owner.

The reducer's examples first, then the issue's scenarios over HTTP in this process (uvicorn on
127.0.0.1): every wait is on a message or an event under a deadline; nothing sleeps to
synchronise, and every loop is bounded.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest

from askgate import Allow
from askgate.core import (
    Ask,
    ClientInitialized,
    SubscriberAttached,
    SubscriberDetached,
    ToolCallReceived,
)
from askgate.core import http as rules
from askgate.core import messages as m
from askgate.core.reducer import ANONYMOUS_OWNER, owner_of
from askgate.server import Server
from askgate.transports.auth import BearerAuth
from askgate.transports.http import HttpApp

from .harness import APPROVE, Harness, deny_payload, elicitation_id, only_reply
from .listener import uvicorn_serving
from .test_catalogue import (
    DEADLINE,
    ELICIT,
    HttpWire,
    Runs,
    answer,
    call,
    catalogue_server,
    http_server,
    initialize,
    open_session,
)
from .test_http_modern import routing
from .test_modern import harness, meta
from .test_sse_legacy import Events, _call, serving

TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789"}
PENDING = "too many elicitations pending"
BY_CONNECTION = "this connection already has too many approvals pending"
BY_PRINCIPAL = "this principal already has too many approvals pending"
BY_ANONYMOUS = "requests without credentials already have too many approvals pending"
DECLINE: dict[str, Any] = {"action": "decline"}


def modern_ask(h: Harness, conn: object, rid: object, principal: str | None = None) -> Any:
    """A modern ``rm`` call on ``conn`` whose authorizer asks; the reply's message."""
    event = ToolCallReceived(
        conn, rid, "rm", {"path": "/x"}, h.now, meta=meta(), principal=principal
    )
    h.feed(event)
    return only_reply(h.finish(h.worker(), Ask("Allow rm?")))


def why(message: dict[str, Any]) -> str:
    payload = deny_payload(message)
    assert payload["detail"] == PENDING, payload
    return str(payload["message"]).partition(" was not run: ")[2]


# -- the reducer ---------------------------------------------------------------------------------


def test_R_SUB_3_a_modern_call_on_a_session_counts_against_the_sessions_principal() -> None:
    """The issue's item 2 in the reducer: a modern call on a session attached for alice, fed
    without a principal (as the legacy POST feeds it), is alice's: her second session's ASK
    finds her cap full."""
    h = harness(max_parked_elicitations=1, max_parked_elicitations_total=4)
    for conn in ("s1", "s2"):
        h.feed(SubscriberAttached(conn, 0, "alice"))
    assert modern_ask(h, "s1", 1)["result"]["resultType"] == "input_required"
    assert why(modern_ask(h, "s2", 1)) == BY_PRINCIPAL
    assert h.state.store.count(("principal", "alice")) == 1
    assert owner_of(h.state, "s2") == owner_of(h.state, "s2", "mallory") == ("principal", "alice")


def test_R_SUB_4_a_per_request_connection_without_a_principal_is_the_anonymous_owner() -> None:
    h = harness()
    h.feed(SubscriberAttached("p1", 0, None, per_request=True))
    h.feed(SubscriberAttached("p2", 0, "", per_request=True))  # "" names no one (R-SUB-1)
    h.feed(SubscriberAttached("p3", 0, "bob", per_request=True))
    h.feed(SubscriberAttached("s", 0, None, per_request="yes"))  # type: ignore[arg-type]
    assert owner_of(h.state, "p1") == owner_of(h.state, "p2") == ANONYMOUS_OWNER
    assert owner_of(h.state, "p3") == ("principal", "bob")
    assert owner_of(h.state, "s") == "s"


def test_R_PARK_5_an_owner_is_fixed_when_its_call_is_admitted() -> None:
    """Workers and the parking place count against the owner the call was admitted under."""
    h = Harness(has_authorizer=True, max_parked_elicitations=1)
    h.feed(ToolCallReceived("c", 1, "echo", {}, 0))  # before any subscriber: owned by "c"
    ref = h.worker()
    h.feed(SubscriberAttached("c", 0, "alice"))
    h.feed(ClientInitialized("c", ELICIT))
    h.finish(ref, Ask("ok?"))
    assert h.state.store.count("c") == 1
    assert h.state.store.count(("principal", "alice")) == 0
    h.answer("c", elicitation_id(h.effects), APPROVE)  # its tool's worker: "c"'s as well
    assert dict(h.state.owner_in_flight) == {"c": 1}
    h.feed(ToolCallReceived("d", 1, "echo", {}, 0))  # the same, parked, then "d" goes away
    ref = h.worker()
    h.feed(SubscriberAttached("d", 0, "alice"))
    h.feed(ClientInitialized("d", ELICIT))
    h.finish(ref, Ask("ok?"))
    assert h.state.store.count("d") == 1
    h.feed(SubscriberDetached("d", 0))  # its parked call goes with it (R-DROP-3)
    assert ("d", 1) not in h.state.calls
    assert h.state.store.count("d") == 0


def test_R_PARK_6_the_per_owner_deny_names_the_owners_scope() -> None:
    h = harness(max_parked_elicitations=1, max_parked_elicitations_total=8)
    h.feed(SubscriberAttached("p", 0, "alice"))
    h.feed(SubscriberAttached("q", 0, "alice"))
    modern_ask(h, "p", 1)
    assert why(modern_ask(h, "q", 1)) == BY_PRINCIPAL
    for conn in ("x", "y"):
        h.feed(SubscriberAttached(conn, 0, None, per_request=True))
    modern_ask(h, "x", 1)
    assert why(modern_ask(h, "y", 1)) == BY_ANONYMOUS
    modern_ask(h, "z", 1)  # never attached: its own owner
    assert why(modern_ask(h, "z", 2)) == BY_CONNECTION
    texts = {why(modern_ask(h, c, 9)) for c in ("q", "y", "z")}
    assert texts == set(m.OWNER_FULL.values())


def test_R_PARK_7_stateless_requests_without_credentials_share_one_cap_and_one_share() -> None:
    h = harness(max_parked_elicitations=2, max_parked_elicitations_total=8, max_in_flight=4)
    conns = [f"r{i}" for i in range(4)]
    for conn in conns:
        h.feed(SubscriberAttached(conn, 0, None, per_request=True))
    answers = [modern_ask(h, conn, 1) for conn in conns[:3]]
    assert [a["result"]["resultType"] for a in answers[:2]] == ["input_required"] * 2
    assert why(answers[2]) == BY_ANONYMOUS
    assert h.state.store.count(ANONYMOUS_OWNER) == 2


def test_R_ADM_6_the_in_flight_share_is_the_owners() -> None:
    """alice's stateless calls fill her share (2 of 4), not the server: bob's call starts."""
    h = harness(max_in_flight=4)
    for i in range(4):
        h.feed(SubscriberAttached(f"a{i}", 0, "alice", per_request=True))
        h.call(f"a{i}", 1, "echo", {}, meta=meta())
    assert sorted(h.state.working) == [("a0", 1), ("a1", 1)]  # a2 and a3 were busy
    effects = h.call("a3", 2, "echo", {}, meta=meta())
    assert only_reply(effects)["result"]["structuredContent"] == {
        "error": "server_busy",
        "scope": "principal",
    }
    h.feed(SubscriberAttached("b", 0, "bob", per_request=True))
    h.call("b", 1, "echo", {}, meta=meta())
    assert h.worker()  # started
    assert dict(h.state.owner_in_flight) == {("principal", "alice"): 2, ("principal", "bob"): 1}


# -- over HTTP -------------------------------------------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn runs on asyncio


def bearer(principal: str) -> dict[str, str]:
    return {"authorization": f"Bearer {TOKENS[principal]}"}


def modern_call(request_id: object, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments, "_meta": meta({"elicitation": {"form": {}}})}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


@pytest.mark.anyio
async def test_R_HTTP_41_a_principal_over_many_legacy_sessions_stays_within_its_cap() -> None:
    """The issue's scenario: alice, with max-parked 4 and max-parked-total 8, posts a modern
    ``tools/call`` on each of 12 un-initialized ``/sse`` sessions; she parks 4, the other 8 are
    denied as hers, and bob's pending approval survives."""
    options = {"max_parked_elicitations": 4, "max_parked_elicitations_total": 8}
    async with (
        serving(BearerAuth(TOKENS), **options) as (app, _pair, base),
        httpx2.AsyncClient(timeout=DEADLINE) as http,
    ):
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tg:
                bob = await Events(http, base, bearer("bob")).start(tg)
                assert (await bob.post(_call(1))).status_code == 202
                assert (await bob.next_message())["method"] == "elicitation/create"
                outcomes: list[dict[str, Any]] = []
                sessions = []
                for _ in range(12):
                    alice = Events(http, base, bearer("alice"))
                    tg.start_soon(alice.run)
                    await alice.started.wait()
                    assert alice.status == 200
                    asked = modern_call(1, "guarded_echo", {"text": "x"})
                    assert (await alice.post(asked)).status_code == 202
                    outcomes.append((await alice.next_message())["result"])
                    sessions.append(alice)
                state = app.runtime.state
                assert state.store.count(("principal", "alice")) == 4
                assert state.store.count(("principal", "bob")) == 1
                kinds = [o.get("resultType") for o in outcomes]
                assert kinds[:4] == ["input_required"] * 4
                for denied in outcomes[4:]:
                    payload = denied["structuredContent"]
                    assert (payload["detail"], payload["message"]) == (
                        PENDING,
                        f"guarded_echo was not run: {BY_PRINCIPAL}",
                    )
                assert [key[1] for key in state.waiting] == [1]  # bob's call still parked
                messages = [data for name, data in bob.events if name == "message"]
                assert not messages[bob.read :]  # no withdrawal, no deny reached bob
                for session in [bob, *sessions]:
                    session.stop.set()


def sleeping_server(release: anyio.Event, entered: list[str], progress: list[anyio.Event]) -> Any:
    """``sleep`` waits for ``release``; ``echo`` answers at once; every call is allowed."""

    async def allow(*_args: Any) -> Any:
        return Allow()

    server = Server(
        "owners",
        authorizer=allow,
        authorizer_source="configured",
        read_authorizer=allow,
        max_in_flight=4,
    )

    @server.tool()
    async def sleep(tag: str) -> str:
        entered.append(tag)
        progress[0].set()
        await release.wait()
        return tag

    @server.tool()
    async def echo(text: str) -> str:
        return text

    return server


@pytest.mark.anyio
async def test_R_HTTP_42_a_principals_slow_stateless_calls_leave_anothers_call_served() -> None:
    """alice's slow stateless calls take her share (2 of max_in_flight 4), no more: her third
    and fourth are busy naming her principal, and bob's ``echo`` is answered."""
    release = anyio.Event()
    entered: list[str] = []
    progress = [anyio.Event()]
    server = sleeping_server(release, entered, progress)

    def make(port: int) -> HttpApp:
        return HttpApp(server, auth=BearerAuth(TOKENS), options=rules.HttpOptions(port=port))

    answers: list[dict[str, Any]] = []

    async def post(http: httpx2.AsyncClient, url: str, who: str, message: Any) -> None:
        headers = {**routing(message), **bearer(who)}
        response = await http.post(url, json=message, headers=headers)
        answers.append(json.loads(response.text.rpartition("data: ")[2] or response.text))
        progress[0].set()

    async with (
        uvicorn_serving(make) as (app, port),
        app.running(),
        httpx2.AsyncClient(timeout=DEADLINE) as http,
    ):
        url = f"http://127.0.0.1:{port}/mcp"
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tg:
                for i in range(4):  # one at a time: each starts, or is answered busy
                    progress[0] = anyio.Event()
                    sleeping = modern_call(i, "sleep", {"tag": f"t{i}"})
                    tg.start_soon(post, http, url, "alice", sleeping)
                    await progress[0].wait()
                echo = modern_call("bob-1", "echo", {"text": "hi"})
                headers = {**routing(echo), **bearer("bob")}
                served = (await http.post(url, json=echo, headers=headers)).json()
                assert served["result"]["content"][0]["text"] == "hi", served
                assert len(entered) == 2
                busy = [a["result"]["structuredContent"] for a in answers]
                assert busy == [{"error": "server_busy", "scope": "principal"}] * 2
                release.set()
            assert sorted(entered) == ["t0", "t1"]
            assert app.runtime.state.in_flight_total == 0


@asynccontextmanager
async def two_sessions(
    auth: Any, who: tuple[str, str], **options: Any
) -> AsyncIterator[tuple[HttpWire, HttpWire]]:
    """Two 2025 sessions on one catalogue server (``guarded`` asks), authenticated as ``who``
    (with ``auth``; ``None``: ``--auth none``, loopback peers only)."""
    if auth is None:
        async with http_server(**options) as (server, runs, app, url, http):
            a = await open_session(server, runs, app, url, http, ELICIT)
            b = await open_session(server, runs, app, url, http, ELICIT)
            async with anyio.create_task_group() as tg:
                a.tg = b.tg = tg
                yield a, b
                tg.cancel_scope.cancel()
        return
    runs = Runs()
    server = catalogue_server(runs, **options)

    def make(port: int) -> HttpApp:
        return HttpApp(server, auth=auth, options=rules.HttpOptions(port=port))

    async with (
        uvicorn_serving(make) as (app, port),
        app.running(),
        httpx2.AsyncClient(timeout=DEADLINE) as http,
    ):
        url = f"http://127.0.0.1:{port}/mcp"
        wires = []
        for principal in who:
            wire = BearerWire(server, runs, app, http, url)
            wire.credentials = bearer(principal)
            response = await wire.post(initialize(0, ELICIT))
            assert response.status_code == 200, response.text
            wire.sid = response.headers["mcp-session-id"]
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await wire.post(note)).status_code == 202
            wires.append(wire)
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tg:
                wires[0].tg = wires[1].tg = tg
                yield wires[0], wires[1]
                tg.cancel_scope.cancel()


class BearerWire(HttpWire):
    credentials: dict[str, str]

    def headers(self) -> dict[str, str]:
        return {**super().headers(), **self.credentials}


async def outcome(wire: HttpWire, request_id: object) -> dict[str, Any]:
    """The prompt for ``request_id``'s call, or its reply when it was answered instead."""
    seen = await wire.until(
        lambda msg: msg.get("method") == "elicitation/create" or msg.get("id") == request_id
    )
    return seen[-1]


@pytest.mark.anyio
async def test_R_HTTP_40_under_auth_none_two_local_sessions_are_two_owners() -> None:
    """``--auth none``: one local session's full cap blocks not the other's ASK, the deny says
    "this connection", and the other session's ASK on the full server evicts the first's
    oldest (R-PARK-3), as between any two owners."""
    options = {"max_parked_elicitations": 2, "max_parked_elicitations_total": 3}
    async with two_sessions(None, ("", ""), **options) as (a, b):
        prompts = []
        for rid in (1, 2):
            await a.send(call(rid))
            prompts.append(await outcome(a, rid))
        assert [p.get("method") for p in prompts] == ["elicitation/create"] * 2
        await a.send(call(3))
        denied = await a.reply_to(3)
        assert why(denied) == BY_CONNECTION
        await b.send(call(1))
        first = await outcome(b, 1)
        assert first.get("method") == "elicitation/create", first
        await b.send(call(2))  # the server is full; b holds 1 < a's 2: a's oldest yields
        second = await outcome(b, 2)
        assert second.get("method") == "elicitation/create", second
        evicted = await a.reply_to(1)
        assert deny_payload(evicted)["detail"] == m.EVICTED
        await a.send(answer(prompts[1]["id"], DECLINE))
        await a.reply_to(2)
        for prompt, rid in ((first, 1), (second, 2)):
            await b.send(answer(prompt["id"], DECLINE))
            await b.reply_to(rid)
        await a.settled(sessions=2)


@pytest.mark.anyio
async def test_R_HTTP_40_with_bearer_auth_a_principals_sessions_are_one_owner_named_so() -> None:
    options = {"max_parked_elicitations": 1, "max_parked_elicitations_total": 4}
    async with two_sessions(BearerAuth(TOKENS), ("alice", "alice"), **options) as (a, b):
        await a.send(call(1))
        prompt = await outcome(a, 1)
        assert prompt.get("method") == "elicitation/create", prompt
        await b.send(call(1))
        assert why(await b.reply_to(1)) == BY_PRINCIPAL
        await a.send(answer(prompt["id"], DECLINE))
        await a.reply_to(1)
        await a.settled(sessions=2)


def test_R_HTTP_40_the_shell_tells_the_reducer_a_principal_only_with_credentials() -> None:
    server = catalogue_server(Runs(), authorizer=None)
    assert HttpApp(server).authenticated("local") is None  # LoopbackOnly: takes no credentials
    assert HttpApp(server, auth=BearerAuth(TOKENS)).authenticated("bob") == "bob"

    def custom(_headers: Any, _client: Any) -> str:
        return "carol"

    assert HttpApp(server, auth=custom).authenticated("carol") == "carol"  # takes some
