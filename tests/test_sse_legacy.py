"""The 2024-11-05 HTTP+SSE pair on the same app (spec/http.md, R-HTTP-14 .. R-HTTP-16).

The pure decisions first, then the app under uvicorn on 127.0.0.1: the official SDK's
``sse_client`` against the demo, raw HTTP for the errors and for closing the stream. Servers
listen on a socket bound before uvicorn starts; every wait is on a message or an event, under a
deadline; no sleep synchronises anything.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.sse import sse_client

from askgate.core import http as rules
from askgate.core import sse_legacy as legacy
from askgate.core.codec import decode
from askgate.demo import build_demo
from askgate.transports.auth import BearerAuth
from askgate.transports.http import HttpApp
from askgate.transports.sse_legacy import LegacySse, _Stream

from .harness import without_digest
from .listener import count_decodes, uvicorn_serving
from .stdio_peer import deny_payload

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

DEADLINE = 20.0
TOKENS = {"alice": "alice-token-0123456789", "mallory": "mallory-token-0123456789"}
JSON = {"content-type": "application/json"}


# -- the pure decisions -------------------------------------------------------------------------


def test_R_HTTP_14_the_endpoint_event_names_the_message_path_and_session() -> None:
    sid = "AbC-_09"
    assert legacy.endpoint_event("", sid) == (
        b"event: endpoint\ndata: /messages?sessionId=AbC-_09\n\n"
    )
    assert legacy.endpoint_event("/api/", sid).startswith(b"event: endpoint\ndata: /api/messages?")
    assert legacy.message_event(b'{"a":1}') == b'event: message\ndata: {"a":1}\n\n'
    assert legacy.KEEPALIVE.startswith(b":")  # a comment: readers skip it
    assert legacy.route("/sse", "GET") == legacy.Route("open")
    assert legacy.route("/messages/", "POST") == legacy.Route("post")
    refused = legacy.route("/sse", "POST")
    assert refused is not None
    assert refused.rejection is not None
    assert refused.rejection.status == 405
    assert legacy.route("/mcp", "POST") is None


def test_R_HTTP_15_post_checks_are_the_mcp_ones() -> None:
    assert legacy.check_post(JSON) is None  # no Accept needed from a 2024-11-05 client
    assert legacy.check_post({"content-type": "application/json; charset=utf-8"}) is None
    for wrong in ("text/plain", "", "application/x-www-form-urlencoded"):
        rejection = legacy.check_post({"content-type": wrong})
        assert rejection is not None
        assert rejection.status == 415
    small = rules.HttpOptions(max_body=10)
    assert legacy.check_length({"content-length": "11"}, small) == rules.Rejection(
        413, "Payload Too Large"
    )
    assert legacy.check_length({"content-length": "10"}, small) is None
    assert legacy.session_param(b"sessionId=abc") == "abc"
    assert legacy.session_param(b"sessionId=abc&sessionId=abc") == "abc"
    for query in (b"", b"sessionId=", b"session_id=abc", b"sessionId=a&sessionId=b"):
        refused = legacy.session_param(query)
        assert isinstance(refused, rules.Rejection)
        assert refused.status == 400
    note = decode(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    assert legacy.answer(note) == (202, b"")
    status, body = legacy.answer(decode(b"{not json"))
    assert status == 400
    assert json.loads(body)["error"]["code"] == -32700


def test_R_HTTP_15_a_session_is_found_only_by_its_principal_and_only_if_legacy() -> None:
    table, session = rules.mint(rules.Sessions(), bytes(32), "alice", 0, rules.HttpOptions())
    assert isinstance(session, rules.Session)
    assert legacy.lookup(table, session.id, "alice", {session.id}) == session
    unknown = rules.Rejection(404, "Not Found: unknown session")
    assert legacy.lookup(table, session.id, "mallory", {session.id}) == unknown
    assert legacy.lookup(table, session.id, "alice", set()) == unknown  # a Streamable one
    assert legacy.lookup(table, "nope", "alice", {"nope"}) == unknown


# -- the app under uvicorn ----------------------------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn runs on asyncio


class Watched(LegacySse):
    """The legacy pair, reporting each session it ends (so a test can wait for it)."""

    def __init__(self, app: HttpApp, **options: Any) -> None:
        super().__init__(app, **options)
        self.ended = anyio.Event()

    def _end(self, sid: str, conn: Hashable) -> None:
        super()._end(sid, conn)
        self.ended.set()


@asynccontextmanager
async def serving(
    auth: Any = None, keepalive_ms: int = 60_000, max_body: int = 4 * 1024 * 1024, **options: Any
) -> AsyncIterator[tuple[HttpApp, Watched, str]]:
    """The demo (configured) on 127.0.0.1, a free port; yields the app, its legacy pair and the
    base URL."""
    server = build_demo(configured=True, **options)

    def make(port: int) -> HttpApp:
        app = HttpApp(server, auth=auth, options=rules.HttpOptions(port=port, max_body=max_body))
        app.legacy = Watched(app, keepalive_ms=keepalive_ms)
        return app

    async with uvicorn_serving(make) as (app, port), app.running():
        assert isinstance(app.legacy, Watched)
        yield app, app.legacy, f"http://127.0.0.1:{port}"


class Asker:
    def __init__(self, answer: types.ElicitResult | None = None) -> None:
        self.answer = answer
        self.prompts: list[str] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        assert context.request_id is not None
        self.prompts.append(params.message)
        assert self.answer is not None
        return self.answer


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@pytest.mark.anyio
async def test_R_HTTP_14_the_sdk_sse_client_initializes_echoes_approves_and_declines() -> None:
    async with serving() as (app, pair, base):
        with anyio.fail_after(DEADLINE):
            yes = Asker(types.ElicitResult(action="accept", content={"approve": True}))
            async with Client(
                sse_client(f"{base}/sse"), mode="legacy", elicitation_callback=yes
            ) as client:
                assert len(pair) == 1
                assert len(app.sessions) == 1
                assert text(await client.call_tool("echo", {"text": "hi"})) == "hi"
                assert text(await client.call_tool("guarded_echo", {"text": "yo"})) == "yo"
            assert [without_digest(p) for p in yes.prompts] == ['Allow guarded_echo to echo "yo"?']
            no = Asker(types.ElicitResult(action="decline"))
            async with Client(
                sse_client(f"{base}/sse"), mode="legacy", elicitation_callback=no
            ) as client:
                result = await client.call_tool("guarded_echo", {"text": "yo"})
                assert result.structured_content == deny_payload("guarded_echo", "ask", "declined")
            assert [without_digest(p) for p in no.prompts] == ['Allow guarded_echo to echo "yo"?']
            while len(pair):  # bounded by the deadline: each close ends its session
                pair.ended = anyio.Event()
                await pair.ended.wait()
            assert len(app.sessions) == 0
            assert app.runtime.state.parked_total == 0


# -- raw HTTP -----------------------------------------------------------------------------------


def _init(request_id: int = 0) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": "2024-11-05",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }


def _call(request_id: object, tool: str = "guarded_echo", **arguments: Any) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments or {"text": "x"}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


class Events:
    """One raw ``GET /sse`` connection: its events as they arrive, and where to POST."""

    def __init__(self, http: httpx2.AsyncClient, base: str, headers: dict[str, str]) -> None:
        self.http = http
        self.base = base
        self.headers = headers
        self.events: list[tuple[str, str]] = []
        self.comments = 0
        self.status = 0
        self.endpoint = ""
        self.read = 0
        self._got = anyio.Event()
        self.done = anyio.Event()
        self.started = anyio.Event()
        self.stop = anyio.Event()

    @property
    def sid(self) -> str:
        return self.endpoint.rpartition("sessionId=")[2]

    async def run(self) -> None:
        try:
            async with self.http.stream("GET", f"{self.base}/sse", headers=self.headers) as resp:
                self.status = resp.status_code
                if resp.status_code != 200:
                    return
                async with anyio.create_task_group() as tg:

                    async def read() -> None:
                        name = ""
                        async for line in resp.aiter_lines():
                            if line.startswith(":"):
                                self.comments += 1
                                self._got.set()
                            elif line.startswith("event: "):
                                name = line[7:]
                            elif line.startswith("data: "):
                                self.events.append((name, line[6:]))
                                if name == "endpoint" and not self.endpoint:
                                    self.endpoint = line[6:]
                                    self.started.set()
                                self._got.set()
                        tg.cancel_scope.cancel()

                    tg.start_soon(read)
                    await self.stop.wait()  # the test closes the stream
                    tg.cancel_scope.cancel()
        finally:
            self.done.set()
            self.started.set()
            self._got.set()

    async def next_message(self) -> dict[str, Any]:
        """The next ``message`` event not yet returned (bounded by the test's deadline)."""
        while True:
            messages = [data for name, data in self.events if name == "message"]
            if len(messages) > self.read:
                self.read += 1
                parsed: dict[str, Any] = json.loads(messages[self.read - 1])
                return parsed
            if self.done.is_set():
                raise AssertionError("the stream ended")
            self._got = anyio.Event()
            await self._got.wait()

    async def wait_comment(self) -> None:
        while self.comments == 0:
            if self.done.is_set():
                raise AssertionError("the stream ended")
            self._got = anyio.Event()
            await self._got.wait()

    async def post(
        self, message: object, headers: dict[str, str] | None = None, url: str | None = None
    ) -> httpx2.Response:
        return await self.http.post(
            url or f"{self.base}{self.endpoint}",
            content=message if isinstance(message, bytes) else json.dumps(message).encode(),
            headers={**self.headers, **JSON, **(headers or {})},
        )

    async def start(self, tg: anyio.abc.TaskGroup) -> Events:
        tg.start_soon(self.run)
        await self.started.wait()
        assert self.status == 200
        assert (await self.post(_init())).status_code == 202
        reply = await self.next_message()
        assert reply["id"] == 0
        assert reply["result"]["serverInfo"]["name"] == "askgate-demo"
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await self.post(note)).status_code == 202
        return self


def as_(principal: str) -> dict[str, str]:
    return {"authorization": f"Bearer {TOKENS[principal]}"}


@pytest.mark.anyio
async def test_R_HTTP_14_the_stream_opens_with_the_endpoint_and_keeps_alive() -> None:
    async with (
        serving(keepalive_ms=20) as (app, pair, base),
        httpx2.AsyncClient(timeout=DEADLINE) as http,
    ):
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tg:
                conn = await Events(http, base, {}).start(tg)
                assert conn.events[0] == ("endpoint", f"/messages?sessionId={conn.sid}")
                assert len(conn.sid) == 43  # 32 random bytes, URL-safe base64
                session = app.sessions.by_id[conn.sid]
                assert session.principal == "local"
                assert pair.owns(conn.sid)
                # The same table as Streamable HTTP, but not usable there (nor the reverse).
                headers = {**JSON, "accept": "application/json, text/event-stream"}
                ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
                on_mcp = await http.post(
                    f"{base}/mcp", json=ping, headers={**headers, "mcp-session-id": conn.sid}
                )
                assert on_mcp.status_code == 404
                initialized = await http.post(f"{base}/mcp", json=_init(), headers=headers)
                streamable = initialized.headers["mcp-session-id"]
                other = f"{base}/messages?sessionId={streamable}"
                assert (await conn.post(ping, url=other)).status_code == 404
                # Replies ride the stream; the POST is 202.
                assert (await conn.post(ping)).status_code == 202
                assert await conn.next_message() == {"jsonrpc": "2.0", "id": 9, "result": {}}
                await conn.wait_comment()  # a keep-alive after a quiet 20 ms
                conn.stop.set()
            await pair.ended.wait()
            assert conn.sid not in app.sessions.by_id


@pytest.mark.anyio
async def test_R_HTTP_15_bad_requests_get_their_status_and_reach_no_connection() -> None:
    async with (
        serving(BearerAuth(TOKENS), max_body=1024) as (app, pair, base),
        httpx2.AsyncClient(timeout=DEADLINE) as http,
    ):
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tg:
                alice = await Events(http, base, as_("alice")).start(tg)
                call = json.dumps(_call(1)).encode()
                mine = f"{base}{alice.endpoint}"
                cases: list[tuple[str, dict[str, str], bytes, int]] = [
                    (f"{base}/messages", {}, call, 400),  # no sessionId
                    (f"{base}/messages?sessionId=", {}, call, 400),
                    (f"{base}/messages?sessionId=nope", {}, call, 404),
                    (mine, as_("mallory"), call, 404),  # another principal: same as unknown
                    (mine, {"authorization": "Bearer wrong"}, call, 401),
                    (mine, {"host": "evil.example"}, call, 421),
                    (mine, {"origin": "https://evil.example"}, call, 403),
                    (mine, {"origin": "null"}, call, 403),
                    (mine, {"content-type": "text/plain"}, call, 415),
                    (mine, {}, b"x" * 2048, 413),
                ]
                for url, headers, body, status in cases:
                    response = await alice.post(body, headers, url)
                    assert response.status_code == status, (url, headers, response.text)
                # The body cap counts bytes received, whatever the length said (chunked here).

                async def chunks() -> AsyncIterator[bytes]:
                    for _ in range(4):
                        yield b" " * 512

                chunked = await http.post(mine, content=chunks(), headers={**as_("alice"), **JSON})
                assert chunked.status_code == 413
                # Not one JSON-RPC message: 400 with the codec's error, and its reply on the stream.
                bad = await alice.post(b"{not json")
                assert bad.status_code == 400
                assert bad.json()["error"]["code"] == -32700
                assert (await alice.next_message())["error"]["code"] == -32700
                # GET /sse checks Host, Origin and the principal before minting anything.
                for headers, status in [
                    ({**as_("alice"), "host": "evil.example"}, 421),
                    ({**as_("alice"), "origin": "https://evil.example"}, 403),
                    ({}, 401),
                    (as_("mallory") | {"origin": "http://localhost.evil.example"}, 403),
                ]:
                    assert (await http.get(f"{base}/sse", headers=headers)).status_code == status
                assert (await http.post(f"{base}/sse", headers=as_("alice"))).status_code == 405
                assert (await http.get(mine, headers=as_("alice"))).status_code == 405
                # Nothing reached Alice's connection: no call, no parked prompt, one session.
                state = app.runtime.state
                assert len(state.calls) == 0
                assert state.parked_total == 0
                assert len(app.sessions) == 1
                assert len(pair) == 1
                alice.stop.set()


@pytest.mark.anyio
async def test_R_HTTP_23_a_legacy_post_body_is_decoded_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    decoded = count_decodes(monkeypatch)
    async with serving() as (_, pair, base), httpx2.AsyncClient(timeout=DEADLINE) as http:
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tg:
                conn = await Events(http, base, {}).start(tg)
                assert len(decoded) == 2  # its initialize and its notification
                decoded.clear()
                ping = b'{"jsonrpc":"2.0","id":9,"method":"ping"}'
                assert (await conn.post(ping)).status_code == 202
                assert await conn.next_message() == {"jsonrpc": "2.0", "id": 9, "result": {}}
                assert decoded == [ping]
                bad = await conn.post(b"{not json")
                assert bad.status_code == 400
                assert bad.json()["error"]["code"] == -32700
                assert (await conn.next_message())["error"]["code"] == -32700
                assert decoded == [ping, b"{not json"]
                conn.stop.set()
            await pair.ended.wait()


@pytest.mark.anyio
async def test_R_HTTP_16_closing_the_stream_drops_its_parked_call_and_ends_the_session() -> None:
    async with serving() as (app, pair, base), httpx2.AsyncClient(timeout=DEADLINE) as http:
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tg:
                conn = await Events(http, base, {}).start(tg)
                assert (await conn.post(_call(1))).status_code == 202
                ask = await conn.next_message()
                assert ask["method"] == "elicitation/create"
                assert app.runtime.state.parked_total == 1
                conn.stop.set()
                await pair.ended.wait()
            state = app.runtime.state
            assert state.parked_total == 0
            assert len(state.calls) == 0
            assert len(app.sessions) == 0
            accept = {
                "jsonrpc": "2.0",
                "id": ask["id"],
                "result": {"action": "accept", "content": {"approve": True}},
            }
            assert (await conn.post(accept)).status_code == 404


@pytest.mark.anyio
async def test_R_HTTP_14_caps_and_eviction_hold_across_both_transports() -> None:
    """Two principals, one on each transport: the caps and the eviction count by principal
    (R-PARK-1) whichever transport each came by."""
    options = {"max_parked_elicitations": 2, "max_parked_elicitations_total": 2}
    async with (
        serving(BearerAuth(TOKENS), **options) as (app, _pair, base),
        httpx2.AsyncClient(timeout=DEADLINE) as http,
    ):
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tg:
                old = await Events(http, base, as_("alice")).start(tg)
                for request_id in (1, 2):
                    assert (await old.post(_call(request_id))).status_code == 202
                    assert (await old.next_message())["method"] == "elicitation/create"
                assert app.runtime.state.parked_total == 2
                # A Streamable HTTP session asks on the full server: the legacy connection, the
                # biggest holder, loses its oldest prompt (R-PARK-3), on its own stream.
                headers = {**JSON, "accept": "application/json, text/event-stream"}
                headers.update(as_("mallory"))
                init = await http.post(f"{base}/mcp", json=_init(), headers=headers)
                headers["mcp-session-id"] = init.headers["mcp-session-id"]
                headers["mcp-protocol-version"] = "2025-06-18"
                note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                assert (
                    await http.post(f"{base}/mcp", json=note, headers=headers)
                ).status_code == 202
                got: list[dict[str, Any]] = []
                async with http.stream(
                    "POST", f"{base}/mcp", json=_call(1), headers=headers
                ) as response:
                    async for line in response.aiter_lines():
                        if line.startswith("data: "):
                            got.append(json.loads(line[6:]))
                            break
                    withdrawn = await old.next_message()
                    assert withdrawn["method"] == "notifications/cancelled"
                    evicted = await old.next_message()
                    assert evicted["id"] == 1
                    assert evicted["result"]["structuredContent"] == deny_payload(
                        "guarded_echo", "ask", "evicted to make room on this server"
                    )
                    assert app.runtime.state.parked_total == 2
                    assert (await http.delete(f"{base}/mcp", headers=headers)).status_code == 204
                assert got[0]["method"] == "elicitation/create"
                old.stop.set()


@pytest.mark.anyio
async def test_R_HTTP_16_stopping_the_app_detaches_every_legacy_connection() -> None:
    """The app stops while a client holds /sse open with a call parked: the connection is
    detached (its call dropped) while the runtime still runs, and the session table is emptied."""
    with anyio.fail_after(DEADLINE):
        async with httpx2.AsyncClient(timeout=DEADLINE) as http, anyio.create_task_group() as tg:
            async with serving() as (app, _pair, base):
                conn = await Events(http, base, {}).start(tg)
                assert (await conn.post(_call(1))).status_code == 202
                assert (await conn.next_message())["method"] == "elicitation/create"
                runtime = app.runtime
                assert runtime.state.parked_total == 1
            # the app stopped with the client still connected
            assert runtime.state.parked_total == 0
            assert len(runtime.state.calls) == 0
            assert not runtime.state.conns
            assert len(app.sessions) == 0
            conn.stop.set()


def test_R_HTTP_14_the_keepalive_period_is_the_apps() -> None:
    app = HttpApp(build_demo(configured=True), options=rules.HttpOptions(keepalive_ms=1234))
    assert app.legacy is not None
    assert app.legacy.keepalive_ms == 1234
    assert LegacySse(app, keepalive_ms=50).keepalive_ms == 50


@pytest.mark.anyio
async def test_R_HTTP_16_a_stream_whose_reader_stalled_ends() -> None:
    """Past the stall cap of R-HTTP-19, an /sse stream drops what waits and finishes, which ends
    its session (its writer sees it finished and the session ends as on a close)."""
    stream = _Stream()
    chunk = b"x" * (1024 * 1024)
    for _ in range(4):  # exactly the cap: not stalled
        stream.put(chunk)
    assert not stream.done
    stream.put(b"y")
    assert stream.done
    assert await stream.take() == ([], True)  # nothing more to write, and finished
    stream.put(b"late")  # a finished stream takes nothing
    assert await stream.take() == ([], True)
