"""The bad-input and fault catalogue (../shared/reference/security.md section 3, A1-H63) against
a live server, over stdio and over Streamable HTTP where a case applies.

Cases already checked in full elsewhere are listed in docs/robustness.md's table with the test that
covers them; this file holds the rest. Every case ends with the same three checks
(:meth:`Wire.settled`): the server still answers ``ping``; no call is open, parked or in flight,
no worker or client request is left, and (HTTP) the sessions are the ones the case started
with; and the guarded tool ran only for calls the case approved, once each.

The servers run in this process: stdio over memory streams, HTTP under uvicorn on 127.0.0.1.
Every wait is on a message, under a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import httpx2
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from askgate import Allow, Ask
from askgate.core import (
    ClientInitialized,
    Reply,
    StartWorker,
    SubscriberAttached,
    ToolCallReceived,
    ToolInfo,
)
from askgate.core import http as rules
from askgate.core import messages as m
from askgate.core.codec import MAX_BYTES
from askgate.core.sealing import arguments_digest
from askgate.policy import QUOTE_LIMIT, parse_policy
from askgate.server import Server
from askgate.transports.http import HttpApp
from askgate.transports.runtime import Runtime
from askgate.transports.stdio import serve_stdio

from .harness import Harness, without_digest
from .listener import uvicorn_serving

pytestmark = pytest.mark.anyio

DEADLINE = 20.0
PROMPT = "Run guarded?"
APPROVE: dict[str, Any] = {"action": "accept", "content": {"approve": True}}
ELICIT: dict[str, Any] = {"elicitation": {}}
VERSION = "2025-11-25"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn runs on asyncio


class Runs:
    """What the guarded tool ran with, and which calls the test approved."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.approved: list[str] = []

    def check(self) -> None:
        """No tool ran without a matching approval, and none ran twice."""
        assert len(self.ran) == len(set(self.ran)), self.ran
        assert set(self.ran) <= set(self.approved), (self.ran, self.approved)


Authorizer = Callable[[str, Any, Any], Awaitable[Any]]


def catalogue_server(runs: Runs, authorizer: Authorizer | None = None, **options: Any) -> Server:
    """``echo`` is allowed, ``guarded`` asks (and records each run of its ``tag``)."""

    async def decide(tool: str, _arguments: Any, _context: Any) -> Any:
        return Ask(PROMPT) if tool == "guarded" else Allow()

    async def reads(_method: str, _params: Any, _context: Any) -> Any:
        return Allow()

    server = Server(
        "catalogue",
        authorizer=authorizer or decide,
        authorizer_source="configured",
        read_authorizer=options.pop("read_authorizer", reads),
        **options,
    )

    @server.tool()
    async def echo(text: str) -> str:
        return text

    @server.tool()
    async def guarded(tag: str) -> str:
        runs.ran.append(tag)
        return tag

    return server


def request(request_id: object, method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def call(request_id: object, tool: str = "guarded", **arguments: Any) -> dict[str, Any]:
    args = arguments or {"tag": f"t{request_id}"}
    return request(request_id, "tools/call", {"name": tool, "arguments": args})


def initialize(request_id: object = 0, capabilities: Any = None) -> dict[str, Any]:
    params = {
        "protocolVersion": VERSION,
        "capabilities": ELICIT if capabilities is None else capabilities,
        "clientInfo": {"name": "catalogue", "version": "0"},
    }
    return request(request_id, "initialize", params)


def answer(eid: object, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": eid, "result": result}


def encode(message: object) -> bytes:
    return json.dumps(message).encode()


# -- the wires --------------------------------------------------------------------------------


class Wire:
    """One client connection to a live server. ``send`` writes one message (or raw bytes); what
    the server sends back is read with ``recv``."""

    kind = ""
    runs: Runs
    server: Server
    baseline_sessions = 0  # what the case starts with: one session per HTTP wire
    _pings = 0

    async def send(self, data: bytes | dict[str, Any]) -> None:
        raise NotImplementedError

    async def recv(self) -> dict[str, Any]:
        raise NotImplementedError

    def sessions(self) -> int:
        return 0

    def runtime(self) -> Runtime:
        raise NotImplementedError

    async def until(self, accept: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        """Messages up to and including the first ``accept`` takes."""
        seen: list[dict[str, Any]] = []
        while True:
            message = await self.recv()
            seen.append(message)
            if accept(message):
                return seen

    async def reply_to(self, request_id: object) -> dict[str, Any]:
        seen = await self.until(lambda m: m.get("id") == request_id and "method" not in m)
        return seen[-1]

    async def elicitation(self) -> dict[str, Any]:
        seen = await self.until(lambda m: m.get("method") == "elicitation/create")
        return seen[-1]

    async def ping(self) -> list[dict[str, Any]]:
        """Sends a ping, waits for its answer; returns what came before it."""
        Wire._pings += 1
        pid = f"ping-{Wire._pings}"
        await self.send(request(pid, "ping"))
        seen = await self.until(lambda m: m.get("id") == pid and "method" not in m)
        assert seen[-1]["result"] == {}, seen[-1]
        return seen[:-1]

    async def approve(self, elicitation: dict[str, Any], tag: str) -> None:
        self.runs.approved.append(tag)
        await self.send(answer(elicitation["id"], APPROVE))

    async def settled(self, sessions: int | None = None) -> list[dict[str, Any]]:
        """The three checks every case ends with; returns what arrived before the ping's answer."""
        before = await self.ping()
        state = self.runtime().state
        assert not state.calls, dict(state.calls)
        assert not state.parked
        assert state.parked_total == 0
        assert state.in_flight_total == 0
        assert not state.workers
        assert not state.client_requests
        assert not state.stateless
        if sessions is None:
            sessions = self.baseline_sessions
        assert self.sessions() == sessions
        self.runs.check()
        return before


class StdioWire(Wire):
    kind = "stdio"

    def __init__(
        self,
        server: Server,
        runs: Runs,
        runtime: Runtime,
        out: MemoryObjectSendStream[bytes],
        inp: MemoryObjectReceiveStream[bytes],
    ) -> None:
        self.server = server
        self.runs = runs
        self._out = out
        self._in = inp
        self._buffer = b""
        self._runtime = runtime

    def runtime(self) -> Runtime:
        return self._runtime

    async def send(self, data: bytes | dict[str, Any]) -> None:
        raw = data if isinstance(data, bytes) else encode(data)
        await self._out.send(raw if raw.endswith(b"\n") else raw + b"\n")

    async def recv(self) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            self._buffer += await self._in.receive()
        line, _, self._buffer = self._buffer.partition(b"\n")
        message = json.loads(line)
        assert isinstance(message, dict), line
        return message


class _ByteIn(anyio.abc.ByteReceiveStream):
    def __init__(self, inner: MemoryObjectReceiveStream[bytes]) -> None:
        self.inner = inner
        self.rest = b""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self.rest:
            self.rest = await self.inner.receive()
        chunk, self.rest = self.rest[:max_bytes], self.rest[max_bytes:]
        return chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class _ByteOut(anyio.abc.ByteSendStream):
    def __init__(self, inner: MemoryObjectSendStream[bytes]) -> None:
        self.inner = inner

    async def send(self, item: bytes) -> None:
        await self.inner.send(item)

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def stdio_wire(
    authorizer: Authorizer | None = None,
    *,
    init: Any = ELICIT,
    prepare: Callable[[Server], object] | None = None,
    **options: Any,
) -> AsyncIterator[StdioWire]:
    """A stdio connection to a fresh catalogue server, initialized with ``init`` as its
    capabilities (``None``: not initialized); ``prepare`` is given the server before it runs
    (to audit it, say)."""
    runs = Runs()
    server = catalogue_server(runs, authorizer, **options)
    if prepare is not None:
        prepare(server)
    to_server, server_in = anyio.create_memory_object_stream[bytes](1000)
    server_out, from_server = anyio.create_memory_object_stream[bytes](1000)
    with anyio.fail_after(DEADLINE):
        async with server.running("stdio") as runtime, anyio.create_task_group() as tg:
            tg.start_soon(serve_stdio, runtime, _ByteIn(server_in), _ByteOut(server_out))
            wire = StdioWire(server, runs, runtime, to_server, from_server)
            if init is not None:
                await wire.send(initialize(0, init))
                await wire.reply_to(0)
                await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            yield wire
            await to_server.aclose()


HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": VERSION,
}


class HttpWire(Wire):
    """One session. Each message is one POST; what its response carries (a JSON body or an SSE
    stream, read to its end in the background) joins one queue that ``recv`` reads."""

    kind = "http"
    baseline_sessions = 1

    def __init__(
        self, server: Server, runs: Runs, app: HttpApp, http: httpx2.AsyncClient, url: str
    ) -> None:
        self.server = server
        self.runs = runs
        self.app = app
        self.http = http
        self.url = url
        self.sid = ""
        self.statuses: list[int] = []
        self._send, self._recv = anyio.create_memory_object_stream[dict[str, Any]](1000)
        self.tg: anyio.abc.TaskGroup | None = None

    def headers(self) -> dict[str, str]:
        return {**HEADERS, "mcp-session-id": self.sid} if self.sid else dict(HEADERS)

    def sessions(self) -> int:
        return len(self.app.sessions.by_id)

    def runtime(self) -> Runtime:
        return self.app.runtime

    async def post(self, data: bytes | dict[str, Any]) -> httpx2.Response:
        """One POST, read whole (for messages whose response is not a stream)."""
        body = data if isinstance(data, bytes) else encode(data)
        return await self.http.post(self.url, content=body, headers=self.headers())

    async def send(self, data: bytes | dict[str, Any]) -> None:
        assert self.tg is not None
        started = anyio.Event()
        self.tg.start_soon(self._stream, data, started)
        await started.wait()

    async def _stream(self, data: bytes | dict[str, Any], started: anyio.Event) -> None:
        body = data if isinstance(data, bytes) else encode(data)
        try:
            async with self.http.stream(
                "POST", self.url, content=body, headers=self.headers()
            ) as response:
                self.statuses.append(response.status_code)
                started.set()
                kind = response.headers.get("content-type", "")
                if kind.startswith("application/json"):
                    raw = await response.aread()
                    if raw:
                        await self._send.send(json.loads(raw))
                    return
                async for line in response.aiter_lines():
                    if line.startswith("data: ") and line[6:]:
                        await self._send.send(json.loads(line[6:]))
        finally:
            started.set()

    async def recv(self) -> dict[str, Any]:
        return await self._recv.receive()


@asynccontextmanager
async def http_server(
    authorizer: Authorizer | None = None, **options: Any
) -> AsyncIterator[tuple[Server, Runs, HttpApp, str, httpx2.AsyncClient]]:
    runs = Runs()
    server = catalogue_server(runs, authorizer, **options)

    def make(port: int) -> HttpApp:
        return HttpApp(server, options=rules.HttpOptions(port=port))

    with anyio.fail_after(DEADLINE):
        async with (
            uvicorn_serving(make) as (app, port),
            app.running(),
            httpx2.AsyncClient(timeout=DEADLINE) as http,
        ):
            yield server, runs, app, f"http://127.0.0.1:{port}/mcp", http


async def open_session(
    server: Server, runs: Runs, app: HttpApp, url: str, http: httpx2.AsyncClient, init: Any
) -> HttpWire:
    wire = HttpWire(server, runs, app, http, url)
    if init is not None:
        response = await wire.post(initialize(0, init))
        assert response.status_code == 200, response.text
        wire.sid = response.headers["mcp-session-id"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await wire.post(note)).status_code == 202
    return wire


@asynccontextmanager
async def http_wire(
    authorizer: Authorizer | None = None, *, init: Any = ELICIT, **options: Any
) -> AsyncIterator[HttpWire]:
    """A session on a fresh catalogue server over HTTP."""
    async with http_server(authorizer, **options) as (server, runs, app, url, http):
        wire = await open_session(server, runs, app, url, http, init)
        async with anyio.create_task_group() as tg:
            wire.tg = tg
            yield wire
            tg.cancel_scope.cancel()


WIRES = {"stdio": stdio_wire, "http": http_wire}


@pytest.fixture(params=sorted(WIRES))
def wire_of(request: pytest.FixtureRequest) -> Any:
    return WIRES[request.param]


# -- A, B: framing, bytes, JSON and JSON-RPC shape ---------------------------------------------

PARSE, INVALID, PARAMS, METHOD = -32700, -32600, -32602, -32601
CALL_ECHO = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":'
NEST = b"[" * 100_000 + b"]" * 100_000

# case -> (the bytes, the error code and id of the answer (None: no answer), the HTTP status)
BAD_INPUT: dict[str, tuple[bytes, tuple[int, object] | None, int]] = {
    "A4_invalid_utf8_in_a_string": (CALL_ECHO + b'{"text":"\xff"}}}', (PARSE, None), 400),
    "A5_a_byte_order_mark": (
        b'\xef\xbb\xbf{"jsonrpc":"2.0","id":1,"method":"ping"}',
        (PARSE, None),
        400,
    ),
    "A7_a_raw_control_character": (CALL_ECHO + b'{"text":"a\x01b"}}}', (PARSE, None), 400),
    "A8_two_objects_on_one_line": (encode(call(1)) + encode(call(2)), (PARSE, None), 400),
    "A9_noise": (b"hello", (PARSE, None), 400),
    "B13_nesting_100000_deep": (NEST, (PARSE, None), 400),
    "B13_nesting_inside_params": (
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":' + NEST + b"}}",
        (PARSE, None),
        400,
    ),
    "B14_a_5000_digit_id": (
        b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}',
        (PARSE, None),
        400,
    ),
    "B14_a_5000_digit_argument": (
        CALL_ECHO + b'{"text":' + b"9" * 5000 + b"}}}",
        (PARSE, None),
        400,
    ),
    "B15_nan": (CALL_ECHO + b'{"text":NaN}}}', (PARSE, None), 400),
    "B15_infinity": (CALL_ECHO + b'{"text":-Infinity}}}', (PARSE, None), 400),
    "B15_overflow": (CALL_ECHO + b'{"text":1e999999}}}', (PARSE, None), 400),
    "B16_duplicate_id": (b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}', (PARSE, None), 400),
    "B16_duplicate_method": (
        b'{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}',
        (PARSE, None),
        400,
    ),
    "B17_id_true": (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', (INVALID, None), 400),
    "B18_id_1_0": (b'{"jsonrpc":"2.0","id":1.0,"method":"ping"}', (INVALID, None), 400),
    "B18_id_1_5": (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', (INVALID, None), 400),
    "B19_id_null": (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', (INVALID, None), 400),
    "B21_a_batch": (
        b"[" + encode(call(1, "echo", text="x")) + b"," + encode(call(2)) + b"]",
        (INVALID, None),
        400,
    ),
    "B22_jsonrpc_1_0": (b'{"jsonrpc":"1.0","id":99,"method":"ping"}', (INVALID, 99), 400),
    "B22_no_jsonrpc": (b'{"id":99,"method":"ping"}', (INVALID, 99), 400),
    "B23_method_and_result": (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","result":{}}',
        (INVALID, 1),
        400,
    ),
    "B23_result_and_error": (
        b'{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}',
        (INVALID, None),
        400,
    ),
    "B24_params_an_array": (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["guarded"]}',
        (PARAMS, 1),
        400,
    ),
    "B24_no_name": (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}',
        (PARAMS, 1),
        200,
    ),
    "B25_unknown_method": (b'{"jsonrpc":"2.0","id":1,"method":"no/such"}', (METHOD, 1), 200),
    "B25_unknown_notification": (b'{"jsonrpc":"2.0","method":"notifications/no_such"}', None, 202),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
async def test_A_B_bad_input_is_answered_R_WIRE_and_changes_nothing(
    wire_of: Any, case: str
) -> None:
    """A4-A9, B13-B25: each answered as spec/codec.md says (R-WIRE-2 .. R-WIRE-11, R-PROTO-5,
    R-PROTO-6), over stdio and HTTP alike; nothing parks or runs, and serving goes on."""
    data, expected, status = BAD_INPUT[case]
    async with wire_of() as wire:
        if isinstance(wire, HttpWire):
            response = await wire.post(data)
            assert response.status_code == status, response.text
            answers = [response.json()] if response.content else []
            before = await wire.settled(sessions=1)
        else:
            await wire.send(data)
            answers = before = await wire.settled()
        if expected is None:
            assert answers == []
        else:
            code, rid = expected
            assert len(answers) == 1, answers
            assert answers[0]["id"] == rid
            assert answers[0]["error"]["code"] == code
        if isinstance(wire, HttpWire):
            assert before == []


async def test_A6_crlf_is_tolerated_and_empty_lines_answer_nothing_R_WIRE_1() -> None:
    async with stdio_wire() as wire:
        await wire.send(encode(request(1, "ping")) + b"\r\n\r\n\n\r\n" + encode(request(2, "ping")))
        assert [(m["id"], m["result"]) for m in await wire.settled()] == [(1, {}), (2, {})]


async def test_B20_id_zero_and_empty_are_valid_and_a_cancel_of_0_cancels_R_WIRE_8(
    wire_of: Any,
) -> None:
    async with wire_of() as wire:
        await wire.send(request("", "ping"))
        assert (await wire.reply_to(""))["result"] == {}
        await wire.send(call(0))
        ask = await wire.elicitation()
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
        await wire.send({**cancel, "params": {"requestId": 0}})
        before = await wire.settled()
        await wire.approve(ask, "too late")  # the prompt is withdrawn: an answer changes nothing
        await wire.settled()
        assert wire.runs.ran == []
        if isinstance(wire, StdioWire):  # stdio: the call is dropped with no reply (R-CLOSE-4)
            assert [m.get("method") for m in before] == ["notifications/cancelled"]


# -- C, D, E: ids, consent answers, cancellation ------------------------------------------------

CANCELLED = "notifications/cancelled"


def denied(reply: dict[str, Any]) -> str:
    """The detail of a deny (R-DLV-4); fails when ``reply`` is not one."""
    result = reply["result"]
    assert result["isError"] is True, reply
    payload = result["structuredContent"]
    assert payload["error"] == "authorization_required", payload
    detail = payload["detail"]
    assert isinstance(detail, str)
    return detail


def text_of(reply: dict[str, Any]) -> str:
    text = reply["result"]["content"][0]["text"]
    assert isinstance(text, str)
    return text


async def test_C26_a_reused_id_while_parked_is_refused_and_the_first_keeps_its_outcome_R_ADM_1(
    wire_of: Any,
) -> None:
    async with wire_of() as wire:
        await wire.send(call(7))
        ask = await wire.elicitation()
        await wire.send(call(7, tag="second"))
        refused = await wire.reply_to(7)
        assert refused["error"]["code"] == INVALID
        await wire.approve(ask, "t7")
        assert text_of(await wire.reply_to(7)) == "t7"
        await wire.settled()
        assert wire.runs.ran == ["t7"]


async def test_C27_two_sessions_park_the_same_id_and_nothing_crosses_R_ADM_1() -> None:
    async with http_server() as (server, runs, app, url, http):
        one = await open_session(server, runs, app, url, http, ELICIT)
        two = await open_session(server, runs, app, url, http, ELICIT)
        async with anyio.create_task_group() as tg:
            one.tg = two.tg = tg
            await one.send(call(0, tag="one"))
            await two.send(call(0, tag="two"))
            ask_one, ask_two = await one.elicitation(), await two.elicitation()
            assert ask_one["id"] != ask_two["id"]
            await two.send(answer(ask_two["id"], {"action": "decline"}))
            assert denied(await two.reply_to(0)) == "declined"
            await one.approve(ask_one, "one")
            assert text_of(await one.reply_to(0)) == "one"
            await one.settled(sessions=2)
            await two.settled(sessions=2)
            tg.cancel_scope.cancel()
        assert runs.ran == ["one"]


async def test_C28_C29_D34_D41_unknown_and_late_answers_are_ignored_and_silence_times_out_R_CLOSE(
    wire_of: Any,
) -> None:
    """An answer to an id askgate never sent (an integer, the right id as another type, another
    string) changes nothing; the unanswered prompt ends in the deny at its deadline and is
    withdrawn with notifications/cancelled (R-PARK-5)."""
    async with wire_of(elicitation_timeout_ms=1_000) as wire:
        await wire.send(call(1))
        ask = await wire.elicitation()
        eid = ask["id"]
        assert isinstance(eid, str)
        assert list(wire.runtime().state.store.places) == [eid]
        deadline = wire.runtime().timer_deadline(("elicitation", eid))
        assert deadline is not None
        for wrong in (5, "5", eid + "x", [eid], {"id": eid}):
            await wire.send(answer(wrong, APPROVE))
        seen = await wire.until(lambda m: m.get("id") == 1)
        assert wire.runtime().now() >= deadline  # no wrong answer ended it
        assert denied(seen[-1]) == "elicitation timed out"
        withdrawn = [m for m in seen if m.get("method") == CANCELLED]
        assert [m["params"]["requestId"] for m in withdrawn] == [eid]
        await wire.approve(ask, "t1")  # D34: an answer after the deadline is ignored
        assert await wire.settled() == []
        assert wire.runs.ran == []


async def test_D35_the_first_answer_wins_R_CLOSE_2(wire_of: Any) -> None:
    async with wire_of() as wire:
        await wire.send(call(1))
        ask = await wire.elicitation()
        await wire.send(answer(ask["id"], {"action": "decline"}))
        await wire.approve(ask, "t1")  # after the decline: ignored
        assert denied(await wire.reply_to(1)) == "declined"
        await wire.send(call(2))
        ask = await wire.elicitation()
        await wire.approve(ask, "t2")
        await wire.approve(ask, "t2")  # twice: the tool runs once
        assert text_of(await wire.reply_to(2)) == "t2"
        await wire.settled()
        assert wire.runs.ran == ["t2"]


NOT_APPROVALS: dict[str, dict[str, Any]] = {
    "D36_approve_false": {"result": {"action": "accept", "content": {"approve": False}}},
    "D36_no_content": {"result": {"action": "accept"}},
    "D36_content_null": {"result": {"action": "accept", "content": None}},
    "D36_approve_a_string": {"result": {"action": "accept", "content": {"approve": "true"}}},
    "D36_approve_missing": {"result": {"action": "accept", "content": {}}},
    "D37_ACCEPT": {"result": {"action": "ACCEPT", "content": {"approve": True}}},
    "D37_accepted": {"result": {"action": "accepted", "content": {"approve": True}}},
    "D37_no_action": {"result": {"content": {"approve": True}}},
    "D37_action_1": {"result": {"action": 1, "content": {"approve": True}}},
    "D37_action_null": {"result": {"action": None, "content": {"approve": True}}},
    "D38_an_error_response": {"error": {"code": -32602, "message": "no"}},
    "D38_error_minus_1": {"error": {"code": -1, "message": "no"}},
    "D39_a_megabyte_beside_approve": {
        "result": {"action": "accept", "content": {"approve": True, "pad": "x" * 1_000_000}}
    },
}


@pytest.mark.parametrize("case", sorted(NOT_APPROVALS))
async def test_D36_D39_an_answer_that_is_not_exactly_an_approval_denies_R_CLOSE_1(
    wire_of: Any, case: str
) -> None:
    async with wire_of() as wire:
        await wire.send(call(1))
        ask = await wire.elicitation()
        await wire.send({"jsonrpc": "2.0", "id": ask["id"], **NOT_APPROVALS[case]})
        detail = denied(await wire.reply_to(1))
        expected = "elicitation failed" if case.startswith("D38") else "not approved"
        assert detail == expected
        await wire.settled()
        assert wire.runs.ran == []


@pytest.mark.parametrize("capabilities", [{}, {"elicitation": {"url": {}}}, {"elicitation": 1}])
async def test_D40_a_client_that_cannot_be_asked_is_denied_without_a_prompt_R_AUTH_3(
    wire_of: Any, capabilities: dict[str, Any]
) -> None:
    async with wire_of(init=capabilities) as wire:
        await wire.send(call(1))
        seen = await wire.until(lambda m: m.get("id") == 1)
        assert denied(seen[-1]) == PROMPT  # the deny-on-ASK: the prompt is its detail
        assert all(m.get("method") != "elicitation/create" for m in seen)
        await wire.settled()


async def test_R_AUTH_5_D43_an_authorizer_that_changes_the_arguments_changes_nothing_that_runs(
    wire_of: Any,
) -> None:
    """The tool runs with the arguments the call carried (and the prompt showed), whatever the
    authorizer did to the dict it was given."""

    async def meddling(tool: str, arguments: Any, _context: Any) -> Any:
        if tool != "guarded":
            return Allow()
        tag = arguments["tag"]
        arguments["tag"] = "changed"
        return Ask(f"Run guarded with {tag}?")

    async with wire_of(meddling) as wire:
        await wire.send(call(1))
        ask = await wire.elicitation()
        assert without_digest(ask["params"]["message"]) == "Run guarded with t1?"
        await wire.approve(ask, "t1")
        assert text_of(await wire.reply_to(1)) == "t1"
        await wire.settled()
        assert wire.runs.ran == ["t1"]


@pytest.mark.parametrize("first", ["cancel", "accept"])
async def test_E45_a_cancel_and_an_accept_in_one_turn_give_one_outcome_R_CLOSE_4(
    first: str,
) -> None:
    """Both lines arrive in one chunk, so they are stepped in the same event-loop turn."""
    async with stdio_wire() as wire:
        await wire.send(call(1))
        ask = await wire.elicitation()
        cancel = encode({"jsonrpc": "2.0", "method": CANCELLED, "params": {"requestId": 1}})
        accept = encode(answer(ask["id"], APPROVE))
        wire.runs.approved.append("t1")
        both = [cancel, accept] if first == "cancel" else [accept, cancel]
        await wire.send(b"\n".join(both))
        before = await wire.settled()
        replies = [m for m in before if m.get("id") == 1]
        assert len(replies) <= 1
        assert len(wire.runs.ran) <= 1
        if first == "cancel":
            assert replies == []
            assert wire.runs.ran == []


async def test_E46_cancels_of_unknown_ids_initialize_or_our_own_request_are_ignored_R_PROTO_13(
    wire_of: Any,
) -> None:
    async with wire_of() as wire:
        await wire.send(call(1))
        ask = await wire.elicitation()
        for rid in (12345, "nope", 0, ask["id"]):
            await wire.send({"jsonrpc": "2.0", "method": CANCELLED, "params": {"requestId": rid}})
        await wire.ping()
        assert wire.runtime().state.parked_total == 1
        await wire.approve(ask, "t1")
        assert text_of(await wire.reply_to(1)) == "t1"
        await wire.settled()


SECRET = "secret-text-of-the-exception"


async def raising(_tool: str, _arguments: Any, _context: Any) -> Any:
    raise RuntimeError(SECRET)


async def junk(_tool: str, _arguments: Any, _context: Any) -> Any:
    return SECRET


async def hanging(_tool: str, _arguments: Any, _context: Any) -> Any:
    await anyio.sleep_forever()


@pytest.mark.parametrize("authorizer", [raising, junk, hanging], ids=["raises", "junk", "hangs"])
async def test_E47_an_authorizer_that_fails_denies_without_saying_why_R_WORK_3(
    wire_of: Any, authorizer: Authorizer
) -> None:
    async with wire_of(authorizer, callback_timeout_ms=200) as wire:
        await wire.send(call(1))
        reply = await wire.reply_to(1)
        assert denied(reply) == "authorizer failed"
        assert SECRET not in json.dumps(reply)
        await wire.settled()
        assert wire.runs.ran == []


# -- H: faults and lifecycle ----------------------------------------------------------------


async def test_H59_a_client_gone_while_its_approved_tool_runs_leaves_the_server_serving() -> None:
    """HTTP: the POST stream of a running call is closed; the tool finishes, its result has
    nowhere to go, nothing raises, and the session is served."""
    release = anyio.Event()
    started = anyio.Event()

    async with http_server() as (server, runs, app, url, http):

        @server.tool()
        async def slow() -> str:
            started.set()
            await release.wait()
            return "done"

        wire = await open_session(server, runs, app, url, http, ELICIT)
        async with anyio.create_task_group() as tg:
            wire.tg = tg
            async with anyio.create_task_group() as caller:
                slow_call = request(1, "tools/call", {"name": "slow", "arguments": {}})
                caller.start_soon(wire._stream, slow_call, anyio.Event())
                await started.wait()
                caller.cancel_scope.cancel()  # the client goes away
            release.set()
            await wire.send(call(2, "echo", text="still here"))
            assert text_of(await wire.reply_to(2)) == "still here"
            await wire.settled(sessions=1)
            tg.cancel_scope.cancel()


# -- D42: arguments crafted to look like UI ---------------------------------------------------

GUARDED_POLICY = """
[[tools]]
match = "guarded"
decision = "ask"
prompt = "Run {tool} with {args.tag}?"

[[tools]]
match = "*"
decision = "allow"
"""


async def test_R_POL_6_D42_a_hostile_argument_is_quoted_escaped_cut_linkless_and_digested(
    wire_of: Any,
) -> None:
    policy = parse_policy(GUARDED_POLICY)
    hostile = (
        "\n\nApproved by admin. Click Accept \x1b[2J [link](https://evil.example) "
        "<https://evil.example> www.evil.example admin@evil.example " + "A" * 100_000
    )
    async with wire_of(policy.authorize) as wire:
        await wire.send(call(1, tag=hostile))
        ask = await wire.elicitation()
        prompt = without_digest(ask["params"]["message"])  # R-DLV-5's, after R-POL-6's
        assert prompt.startswith('Run "guarded" with "\\u000a\\u000aApproved by admin.')
        assert prompt.isprintable()
        assert len(prompt) < 400
        for link in ("://", "](", " <h", "www.", "n@e"):
            assert link not in prompt
        more = len(hostile.encode()) - QUOTE_LIMIT
        digest = arguments_digest({"tag": hostile})[:16]
        assert prompt.endswith(f'…" (and {more} more bytes)? (arguments sha256:{digest})')
        eid = ask["id"]
        await wire.send(answer(eid, {"action": "decline"}))
        assert denied(await wire.reply_to(1)) == "declined"
        await wire.settled()


# -- C30, C31: the lifecycle (and tests/test_catalogue_life.py) ----------------------------------


async def test_R_PROTO_22_C31_over_stdio_a_call_or_read_before_initialize_is_refused() -> None:
    async with stdio_wire(init=None) as wire:
        await wire.send(call(1, "echo", text="x"))
        await wire.send(call(2))
        await wire.send(request(3, "tools/list"))
        await wire.send(request(4, "server/discover"))  # unknown here: the SDK falls back
        for rid in (1, 2, 3):
            reply = await wire.reply_to(rid)
            assert reply["error"] == {
                "code": INVALID,
                "message": "Invalid Request: initialize first",
            }
        assert (await wire.reply_to(4))["error"]["code"] == METHOD
        before = await wire.settled()  # ping is answered before initialize
        assert all(m.get("method") != "elicitation/create" for m in before)
        await wire.send(initialize(0, ELICIT))
        await wire.reply_to(0)
        await wire.send(call(5, "echo", text="now"))
        assert text_of(await wire.reply_to(5)) == "now"
        await wire.settled()
        assert wire.runs.ran == []


def test_R_PROTO_22_the_typed_event_is_refused_the_same_and_only_on_stdio() -> None:
    for transport, refused in (("stdio", True), ("unknown", False), ("http", False)):
        h = Harness(tools=(ToolInfo("echo", sensitive=False, derived=False),), transport=transport)
        h.feed(SubscriberAttached("c"))
        effects = h.feed(ToolCallReceived("c", 1, "echo", {}, 0))
        started = [e for e in effects if isinstance(e, StartWorker)]
        if refused:
            assert effects == [Reply("c", 1, m.error(1, m.INVALID_REQUEST, m.INITIALIZE_FIRST))]
        else:
            assert len(started) == 1
        h.feed(ClientInitialized("c", {}, 0, 2, VERSION))
        effects = h.feed(ToolCallReceived("c", 3, "echo", {}, 0))
        assert len([e for e in effects if isinstance(e, StartWorker)]) == 1


# -- H60: a parked call whose POST stream lost its connection ----------------------------------


async def sse_events(response: httpx2.Response) -> AsyncIterator[tuple[str, str]]:
    """``(id, data)`` of each SSE event of ``response``."""
    eid, data = "", ""
    async for line in response.aiter_lines():
        if line.startswith("id: "):
            eid = line[4:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line == "" and eid:
            yield eid, data
            eid, data = "", ""


async def test_R_HTTP_31_H60_an_orphaned_parked_call_waits_for_a_resume_until_its_deadline() -> (
    None
):
    async with http_wire(elicitation_timeout_ms=3_000) as wire:
        # The call parks; its client reads the priming event and the prompt, then goes away.
        async with wire.http.stream(
            "POST", wire.url, content=encode(call(1)), headers=wire.headers()
        ) as response:
            events = sse_events(response)
            priming, _ = await events.__anext__()
            _, data = await events.__anext__()
            ask = json.loads(data)
            assert ask["method"] == "elicitation/create"
        await wire.ping()
        assert wire.runtime().state.parked_total == 1  # not a cancel: still parked
        # (and the approval below runs it, which only a call still parked can be)
        # It comes back with Last-Event-ID, is shown the prompt again, approves, gets the result.
        resume = {**wire.headers(), "accept": "text/event-stream", "last-event-id": priming}
        async with wire.http.stream("GET", wire.url, headers=resume) as response:
            assert response.status_code == 200
            events = sse_events(response)
            _, data = await events.__anext__()
            assert json.loads(data) == ask
            await wire.approve(ask, "t1")
            _, data = await events.__anext__()
            assert text_of(json.loads(data)) == "t1"
        await wire.settled(sessions=1)
        # A second call is left: it ends at its elicitation deadline, like any parked call; a
        # client resuming afterwards finds the withdrawal and the deny in the stream's buffer.
        async with wire.http.stream(
            "POST", wire.url, content=encode(call(2)), headers=wire.headers()
        ) as response:
            events = sse_events(response)
            priming, _ = await events.__anext__()
            await events.__anext__()
        (eid,) = wire.runtime().state.store.places
        deadline = wire.runtime().timer_deadline(("elicitation", eid))
        assert deadline is not None
        resume = {**resume, "last-event-id": priming}
        async with wire.http.stream("GET", wire.url, headers=resume) as response:
            replayed = [json.loads(data) async for _, data in sse_events(response)]
        assert wire.runtime().now() >= deadline
        assert [m.get("method") for m in replayed] == ["elicitation/create", CANCELLED, None]
        assert denied(replayed[-1]) == "elicitation timed out"
        await wire.settled(sessions=1)
        assert wire.runs.ran == ["t1"]


# -- A1, A2: lines past the cap -----------------------------------------------------------------


async def test_A1_a_10_MB_line_is_answered_at_the_cap_and_the_next_line_served_R_WIRE_2() -> None:
    async with stdio_wire() as wire:
        head = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"pad":"'
        await wire.send(head + b"a" * 10_000_000 + b'"}}')
        error = await wire.recv()
        assert error["id"] is None
        assert error["error"]["code"] == PARSE
        await wire.send(call(2, "echo", text="next"))
        assert text_of(await wire.reply_to(2)) == "next"
        assert await wire.settled() == []


async def test_A2_64_MiB_without_a_newline_then_end_of_input_stays_bounded() -> None:
    """The splitter answers once the line passes the cap and keeps nothing past it: what this
    process allocates while 64 MiB go through stays within twice the cap (the buffer, and the
    head of the line handed to the codec) plus 1 MiB, whatever the input's length."""
    runs = Runs()
    server = catalogue_server(runs)
    to_server, server_in = anyio.create_memory_object_stream[bytes](4)
    server_out, from_server = anyio.create_memory_object_stream[bytes](1000)
    chunk = b"a" * 65536
    tracemalloc.start()
    try:
        with anyio.fail_after(DEADLINE):
            async with server.running("stdio") as runtime, anyio.create_task_group() as tg:

                async def feed() -> None:
                    await to_server.send(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":"')
                    for _ in range(64 * 16):
                        await to_server.send(chunk)
                    await to_server.aclose()

                tg.start_soon(feed)
                await serve_stdio(runtime, _ByteIn(server_in), _ByteOut(server_out))
                _, peak = tracemalloc.get_traced_memory()
                assert not runtime.state.calls
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_BYTES + 1024 * 1024, peak  # the line's head and the buffer
    written = from_server.receive_nowait()
    assert json.loads(written)["error"]["code"] == PARSE
    assert runs.ran == []


# -- F48: the per-connection cap ----------------------------------------------------------------


async def test_F48_past_the_per_connection_cap_an_ask_is_denied_and_the_parked_stay_R_PARK_1(
    wire_of: Any,
) -> None:
    async with wire_of(max_parked_elicitations=2) as wire:
        await wire.send(call(1))
        first = await wire.elicitation()
        await wire.send(call(2))
        second = await wire.elicitation()
        await wire.send(call(3))
        assert denied(await wire.reply_to(3)) == "too many elicitations pending"
        assert wire.runtime().state.parked_total == 2
        await wire.approve(first, "t1")
        assert text_of(await wire.reply_to(1)) == "t1"
        await wire.send(answer(second["id"], {"action": "decline"}))
        assert denied(await wire.reply_to(2)) == "declined"
        await wire.settled()
        assert wire.runs.ran == ["t1"]


# -- H63: the wall clock ------------------------------------------------------------------------


async def test_H63_a_wall_clock_jump_moves_no_deadline(
    wire_of: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deadlines are on the event loop's monotonic clock: the wall clock jumping a day forward
    expires nothing, and jumping back delays nothing."""
    real = time.time
    async with wire_of(elicitation_timeout_ms=1_000) as wire:
        await wire.send(call(1))
        await wire.elicitation()
        (eid,) = wire.runtime().state.store.places
        deadline = wire.runtime().timer_deadline(("elicitation", eid))
        assert deadline is not None
        monkeypatch.setattr(time, "time", lambda: real() + 86_400)
        monkeypatch.setattr(time, "time_ns", lambda: int((real() + 86_400) * 1e9))
        await wire.ping()
        monkeypatch.setattr(time, "time", lambda: real() - 86_400)
        monkeypatch.setattr(time, "time_ns", lambda: int((real() - 86_400) * 1e9))
        # Not early (the jump forward), and not never (the jump back: the test's deadline).
        assert denied(await wire.reply_to(1)) == "elicitation timed out"
        assert wire.runtime().now() >= deadline
        monkeypatch.undo()
        await wire.settled()


async def test_R_AUTH_5_a_read_authorizer_that_changes_the_params_changes_nothing_read() -> None:
    async def meddling(_method: str, params: Any, _context: Any) -> Any:
        params["uri"] = "demo://b"
        return Allow()

    async with stdio_wire(read_authorizer=meddling) as wire:
        for uri in ("demo://a", "demo://b"):
            wire.server.resource(uri)(lambda uri=uri: f"contents of {uri}")
        await wire.send(request(1, "resources/read", {"uri": "demo://a"}))
        reply = await wire.reply_to(1)
        assert reply["result"]["contents"][0]["text"] == "contents of demo://a"
        await wire.settled()
