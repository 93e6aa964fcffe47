"""A Hypothesis-driven fuzzer against a live askgate server, over stdio and over Streamable HTTP.

The servers run for the length of a :class:`Live` in a thread of their own (an anyio blocking
portal), stdio over a pair of pipes, HTTP under uvicorn on 127.0.0.1.

Inputs are episodes (:func:`programs`): a call and what may follow it, hostile bytes, a ping.
The steps:

- ``Call``: a ``tools/call`` of a tool that is allowed, asks or is denied, with hostile
  arguments (any JSON where a string is expected, long and odd text);
- ``Answer``: an answer to a recent elicitation, or to one never sent: the exact
  approval, an approval with extra fields or the wrong type, decline, cancel, a JSON-RPC error,
  any JSON as the result;
- ``Cancel``: ``notifications/cancelled`` for an earlier call (or an id never used);
- ``Raw``: bytes built from valid envelopes: wrong types at every key, truncated, two messages
  concatenated, batches, any JSON value, any bytes;
- ``Ping``.

After each input the three checks of issue #12 run: the server still answers ``ping``; the
reducer's open calls, parked calls, workers, client requests, stateless calls, live timers and
(HTTP) sessions are back to their baseline once every elicitation left open is declined; no
tool ran without a matching approval: the guarded tool's runs are, argument for argument, at
most the exact approvals (``{"approve": true}``, nothing else) the fuzzer gave to elicitations
naming those arguments, and the denied tool never ran. A failure raises
:class:`AssertionError` with the step that led to it.

Every wait is bounded (:data:`DEADLINE`); nothing sleeps to synchronise: the checks read the
state after a ``ping`` answered on the same connection, which the server answers after every
message sent before it.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread
import attrs
import httpx2
from hypothesis import strategies as st

from askgate import Allow, Ask, Deny
from askgate.core import http as rules
from askgate.server import Server
from askgate.transports.http import HttpApp
from askgate.transports.runtime import Runtime, completes_without_suspending
from askgate.transports.stdio import FdReceiveStream, FdSendStream, StdioTransport, serve_stdio

from .harness import without_digest
from .listener import uvicorn_serving

DEADLINE = 20.0
APPROVE: dict[str, Any] = {"action": "accept", "content": {"approve": True}}
INIT_PARAMS: dict[str, Any] = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"elicitation": {}},
    "clientInfo": {"name": "fuzz", "version": "0"},
}
ASKS = "guarded"
DENIED = "forbidden"


def digest(arguments: object) -> str:
    """What names a call's arguments in its prompt: the guarded tool's runs are matched to
    the approvals of prompts with the same digest."""
    text = json.dumps(arguments, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Runs:
    """What the tools of one server ran, by tool: the digests of their arguments."""

    def __init__(self) -> None:
        self.runs: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )

    def ran(self, tool: str, arguments: dict[str, Any]) -> None:
        self.runs[tool][digest(arguments)] += 1


def build_server(runs: Runs) -> Server:
    """Four tools: ``echo`` is allowed, ``guarded`` asks (its prompt names the digest of its
    arguments), ``forbidden`` is denied, ``sensitive`` asks and is marked sensitive."""

    @completes_without_suspending  # decided within the step: the elicitation goes out at once
    async def authorize(tool: str, arguments: Any, _context: Any) -> object:
        if tool == "echo":
            return Allow()
        if tool in (ASKS, "sensitive"):
            return Ask(f"approve {tool} {digest(arguments)}")
        return Deny("forbidden by the fuzzer's policy")

    @completes_without_suspending
    async def authorize_read(_method: str, _params: Any, _context: Any) -> object:
        return Allow()

    server = Server(
        "fuzz",
        authorizer=authorize,
        read_authorizer=authorize_read,
        authorizer_source="configured",
        elicitation_timeout_ms=60_000,
    )

    @server.tool()
    @completes_without_suspending
    async def echo(text: str) -> str:
        """Allowed."""
        runs.ran("echo", {"text": text})
        return text

    @server.tool()
    @completes_without_suspending
    async def guarded(text: str) -> str:
        """Asks first."""
        runs.ran(ASKS, {"text": text})
        return text

    @server.tool(annotations={"sensitive": True})
    @completes_without_suspending
    async def sensitive(text: str) -> str:
        """Asks first, and is sensitive."""
        runs.ran("sensitive", {"text": text})
        return text

    @server.tool()
    @completes_without_suspending
    async def forbidden(text: str = "") -> str:
        """Denied: never runs."""
        runs.ran(DENIED, {"text": text})
        return text

    @server.resource("fuzz://status", name="status")
    async def status() -> str:
        """A resource to read."""
        return "ok"

    @server.prompt()
    async def hello(name: str) -> str:
        """A prompt to get."""
        return f"hello {name}"

    return server


# -- the inputs ----------------------------------------------------------------------------------


@attrs.frozen
class Call:
    tool: str
    text: object  # usually a string; sometimes not
    extra: dict[str, Any] | None  # extra arguments the schema does not have


@attrs.frozen
class Answer:
    which: int  # the n-th most recent elicitation seen (0: the last), or -1: one never sent
    how: str
    junk: object = None


@attrs.frozen
class Cancel:
    which: int  # the n-th most recent call sent (0: the last), or -1: an id never used


@attrs.frozen
class Raw:
    data: bytes


@attrs.frozen
class Ping:
    pass


Step = Call | Answer | Cancel | Raw | Ping

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
hostile_text = st.one_of(
    st.text(max_size=60),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=300),
    st.sampled_from(
        [
            "",
            "[link](https://evil.example)",
            "](javascript:alert(1))",
            "\u202e\u200b\x00\x1b[31m",
            "a" * 70_000,
            '{"approve": true}',
            "\n\r\n",
        ]
    ),
)

TEMPLATES: tuple[dict[str, Any], ...] = (
    {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": ASKS, "arguments": {"text": "x"}},
    },
    {"jsonrpc": "2.0", "id": "p", "method": "ping"},
    {"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {}},
    {"jsonrpc": "2.0", "id": 9, "method": "resources/read", "params": {"uri": "fuzz://status"}},
    {
        "jsonrpc": "2.0",
        "id": 10,
        "method": "prompts/get",
        "params": {"name": "hello", "arguments": {"name": "n"}},
    },
    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}},
    {"jsonrpc": "2.0", "id": 11, "method": "logging/setLevel", "params": {"level": "debug"}},
    {"jsonrpc": "2.0", "id": "e-1", "result": APPROVE},
    {"jsonrpc": "2.0", "id": "e-1", "error": {"code": -1, "message": "no"}},
    {
        "jsonrpc": "2.0",
        "id": 12,
        "method": "completion/complete",
        "params": {"ref": {"type": "ref/prompt", "name": "hello"}, "argument": {"name": "name"}},
    },
)


def _paths(value: object, prefix: tuple[object, ...] = ()) -> Iterator[tuple[object, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _paths(inner, (*prefix, index))


def _replace(value: Any, path: tuple[object, ...], new: object) -> object:
    if not path:
        return new
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replace(value[path[0]], path[1:], new)
    return copy


@st.composite
def wrong_type_at_a_key(draw: st.DrawFn) -> bytes:
    template = draw(st.sampled_from(TEMPLATES))
    path = draw(st.sampled_from(list(_paths(template))))
    new = draw(json_values)
    return json.dumps(_replace(template, path, new)).encode()


def _encoded(message: object) -> bytes:
    return json.dumps(message).encode()


raw_inputs = st.one_of(
    wrong_type_at_a_key(),
    st.builds(
        lambda m, cut: _encoded(m)[: cut % max(1, len(_encoded(m)))],
        st.sampled_from(TEMPLATES),
        st.integers(0, 10_000),
    ),  # truncated
    st.builds(
        lambda a, b: _encoded(a) + _encoded(b),
        st.sampled_from(TEMPLATES),
        st.sampled_from(TEMPLATES),
    ),  # concatenated
    st.builds(_encoded, st.lists(st.sampled_from(TEMPLATES), min_size=0, max_size=3)),  # a batch
    json_values.map(_encoded),
    st.binary(max_size=200),
).map(Raw)

calls = st.builds(
    Call,
    tool=st.sampled_from((ASKS, ASKS, ASKS, "sensitive", "echo", DENIED, "nope")),
    text=st.one_of(hostile_text, hostile_text, json_values),
    extra=st.one_of(st.none(), st.dictionaries(st.text(max_size=6), json_values, max_size=2)),
)
answers = st.builds(
    Answer,
    which=st.sampled_from((0, 0, 0, 1, 2, -1)),
    how=st.sampled_from(
        ("approve", "approve", "extra", "truthy", "decline", "cancel", "error", "junk")
    ),
    junk=json_values,
)
cancels = st.builds(Cancel, st.integers(-1, 3))
after_a_call = st.lists(st.one_of(answers, answers, answers, cancels, raw_inputs), max_size=3)


@st.composite
def programs(draw: st.DrawFn, max_episodes: int = 4) -> list[Step]:
    """A fuzz input: a few episodes, each a call followed by what may follow it (answers to
    recent elicitations or to none, cancels, hostile bytes), or hostile bytes alone, or a ping;
    the answers of one episode may land on another's elicitations."""
    program: list[Step] = []
    for _ in range(draw(st.integers(1, max_episodes))):
        kind = draw(st.sampled_from(("call", "call", "call", "raw", "ping")))
        if kind == "call":
            program.append(draw(calls))
            program.extend(draw(after_a_call))
        elif kind == "raw":
            program.extend(draw(st.lists(raw_inputs, min_size=1, max_size=3)))
        else:
            program.append(Ping())
    return program


def answer_message(answer: Answer, eid: object) -> tuple[dict[str, Any], bool]:
    """The answer to elicitation ``eid``, and whether it is the exact approval."""
    how = answer.how
    if how == "error":
        return {"jsonrpc": "2.0", "id": eid, "error": {"code": -1, "message": "no"}}, False
    result: object
    if how == "approve":
        result = APPROVE
    elif how == "extra":
        result = {"action": "accept", "content": {"approve": True, "x": answer.junk}}
    elif how == "truthy":
        result = {"action": "accept", "content": {"approve": answer.junk or 1}}
    elif how in ("decline", "cancel"):
        result = {"action": how}
    else:
        result = answer.junk
    # Whatever the answer was drawn as, it approves when it is the exact approval ("truthy"
    # with a junk of True is): compared as JSON text, where True and 1 differ.
    exact = json.dumps(result, sort_keys=True, default=repr) == json.dumps(APPROVE, sort_keys=True)
    return {"jsonrpc": "2.0", "id": eid, "result": result}, exact


# -- one connection, either transport ------------------------------------------------------------


class Peer:
    """What a fuzzing connection keeps: the elicitations seen, answered or not, the calls sent,
    the approvals given, and what came back."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []  # elicitation/create requests, in order
        self.answered: set[object] = set()
        self.call_ids: list[object] = []
        self.approved: collections.Counter[str] = collections.Counter()
        self.replies: dict[object, dict[str, Any]] = {}
        self.got = anyio.Event()
        self.next_id = 0

    def take(self, message: object) -> None:
        if not isinstance(message, dict):
            return
        if message.get("method") == "elicitation/create":
            self.asked.append(message)
        elif "method" not in message and "id" in message:
            with contextlib.suppress(TypeError):  # an id that is not hashable: kept nowhere
                self.replies[message["id"]] = message
        self.got.set()

    def fresh_id(self) -> str:
        self.next_id += 1
        return f"fz-{self.next_id}"

    def approve_seen(self, ask: dict[str, Any]) -> None:
        """Counts an exact approval of ``ask``: the digest its prompt names (the authorizer's
        text, before the arguments' digest every prompt ends with, R-DLV-5)."""
        words = without_digest(str(ask.get("params", {}).get("message", ""))).split()
        if len(words) == 3 and words[0] == "approve":
            self.approved[words[2]] += 1


def call_message(step: Call, request_id: object) -> dict[str, Any]:
    arguments: dict[str, Any] = {"text": step.text}
    if step.extra:
        arguments.update(step.extra)
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": step.tool, "arguments": arguments},
    }


def outgoing(peer: Peer, step: Step) -> list[bytes]:
    """The bodies one step sends (already encoded; stdio adds the newline)."""
    if isinstance(step, Raw):
        return [step.data]
    if isinstance(step, Ping):
        return [_encoded({"jsonrpc": "2.0", "id": peer.fresh_id(), "method": "ping"})]
    if isinstance(step, Call):
        request_id = peer.fresh_id()
        peer.call_ids.append(request_id)
        return [_encoded(call_message(step, request_id))]
    if isinstance(step, Cancel):
        if step.which < 0 or not peer.call_ids:
            target: object = "never-sent"
        else:
            target = peer.call_ids[-1 - step.which % len(peer.call_ids)]
        params = {"requestId": target, "reason": "fuzz"}
        return [_encoded({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})]
    if step.which < 0 or not peer.asked:
        eid: object = "never-sent-elicitation"
        message, _ = answer_message(step, eid)
        return [_encoded(message)]
    ask = peer.asked[-1 - step.which % len(peer.asked)]
    message, approves = answer_message(step, ask["id"])
    if approves and ask["id"] not in peer.answered:
        peer.approve_seen(ask)
    peer.answered.add(ask["id"])
    return [_encoded(message)]


def declines(peer: Peer) -> list[bytes]:
    """Declines of every elicitation seen and not answered yet."""
    out = []
    for ask in peer.asked:
        if ask["id"] not in peer.answered:
            peer.answered.add(ask["id"])
            out.append(
                _encoded({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "decline"}})
            )
    return out


# -- the checks ----------------------------------------------------------------------------------


def baseline(runtime: Runtime) -> dict[str, int]:
    """What must be back where it was after each input."""
    state = runtime.state
    return {
        "calls": len(state.calls),
        "parked": len(state.parked),
        "workers": len(state.workers),
        "in_flight_total": state.in_flight_total,
        "client_requests": len(state.client_requests),
        "stateless": len(state.stateless),
        "timers": len(runtime.live_timers),
        "live_workers": len(runtime.live_workers),
        "subscribed": sum(1 for conn in state.conns.values() if conn.subscribed),
    }


def check_runs(runs: Runs, approved: collections.Counter[str], where: str) -> None:
    """No tool that asks ran without a matching exact approval; the denied one never ran."""
    assert not runs.runs[DENIED], f"{where}: the denied tool ran {runs.runs[DENIED]}"
    for tool in (ASKS, "sensitive"):
        for key, count in runs.runs[tool].items():
            assert count <= approved[key], (
                f"{where}: {tool} ran {count} time(s) with arguments {key}, "
                f"approved {approved[key]} time(s)"
            )


# -- the live servers ----------------------------------------------------------------------------


class Live:
    """Both servers, running in a portal thread; :meth:`run_stdio` and :meth:`run_http` feed
    one input each and check it."""

    def __init__(self, portal: anyio.from_thread.BlockingPortal) -> None:
        self.portal = portal
        self.stdio_runs = Runs()
        self.http_runs = Runs()
        self.inputs = collections.Counter[str]()
        self.stdio_runtime: Runtime | None = None
        self.stdio_in: FdSendStream | None = None
        self.stdio_out: FdReceiveStream | None = None
        self.stdio_peer = Peer()
        self.stdio_buffer = b""
        self.stdio_base: dict[str, int] = {}
        self.http_app: HttpApp | None = None
        self.http_url = ""
        self.http_base: dict[str, int] = {}
        self.http_sessions_base = 0
        self.http_approved: collections.Counter[str] = collections.Counter()

    # stdio: one connection for the whole run, as a process would have

    async def _stdio_read(self) -> None:
        assert self.stdio_out is not None
        while b"\n" not in self.stdio_buffer:
            self.stdio_buffer += await self.stdio_out.receive()
        line, _, self.stdio_buffer = self.stdio_buffer.partition(b"\n")
        message = json.loads(line)
        assert isinstance(message, dict), line
        self.stdio_peer.take(message)

    async def _stdio_send(self, data: bytes) -> None:
        assert self.stdio_in is not None
        await self.stdio_in.send(data + b"\n")

    async def _stdio_ping(self) -> None:
        request_id = self.stdio_peer.fresh_id()
        await self._stdio_send(_encoded({"jsonrpc": "2.0", "id": request_id, "method": "ping"}))
        for _ in range(100_000):
            if request_id in self.stdio_peer.replies:
                reply = self.stdio_peer.replies.pop(request_id)
                assert reply.get("result") == {}, reply
                return
            await self._stdio_read()
        raise AssertionError("no answer to ping")

    async def _stdio_settle(self) -> None:
        """Declines what is left open until a ping round trip shows nothing new."""
        for _ in range(50):
            await self._stdio_ping()
            left = declines(self.stdio_peer)
            if not left:
                return
            for data in left:
                await self._stdio_send(data)
        raise AssertionError("the server kept asking")

    async def _stdio_input(self, program: list[Step]) -> None:
        with anyio.fail_after(DEADLINE):
            for step in program:
                for data in outgoing(self.stdio_peer, step):
                    await self._stdio_send(data.replace(b"\n", b" "))
                # what the step brought back, up to a ping's answer
                await self._stdio_ping()
            await self._stdio_settle()
            assert self.stdio_runtime is not None
            # A read runs as a task of its own: its answer is the sign it ended.
            while baseline(self.stdio_runtime) != self.stdio_base:
                await self._stdio_read()
        assert baseline(self.stdio_runtime) == self.stdio_base, program
        check_runs(self.stdio_runs, self.stdio_peer.approved, "stdio")
        self.stdio_peer.replies.clear()

    def run_stdio(self, program: list[Step]) -> None:
        self.inputs["stdio"] += 1
        self.portal.call(self._stdio_input, program)

    # HTTP: a session per input, ended at the end of it

    async def _http_input(self, program: list[Step]) -> None:
        peer = Peer()
        headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
        }
        async with httpx2.AsyncClient(timeout=DEADLINE) as http, anyio.create_task_group() as tg:
            with anyio.fail_after(DEADLINE):
                init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INIT_PARAMS}
                response = await http.post(self.http_url, json=init, headers=headers)
                assert response.status_code == 200, response.text
                headers["mcp-session-id"] = response.headers["mcp-session-id"]
                headers["mcp-protocol-version"] = "2025-11-25"
                note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                response = await http.post(self.http_url, json=note, headers=headers)
                assert response.status_code == 202, response.text
                streams: list[anyio.Event] = []

                async def post(data: bytes, done: anyio.Event, first: anyio.Event) -> None:
                    try:
                        await self._http_post(http, headers, data, peer, first)
                    finally:
                        done.set()
                        first.set()

                async def send(data: bytes) -> None:
                    done, first = anyio.Event(), anyio.Event()
                    streams.append(done)
                    tg.start_soon(post, data, done, first)
                    # A stream that stays open (a parked call) must not hold the next step
                    # back: the step goes on once its request got a first message or ended.
                    await first.wait()

                for step in program:
                    for data in outgoing(peer, step):
                        await send(data)
                    await self._http_ping(http, headers, peer)
                for _ in range(50):
                    left = declines(peer)
                    for data in left:
                        await send(data)
                    for done in streams:
                        if not left:
                            await done.wait()
                    await self._http_ping(http, headers, peer)
                    if not left and all(d.is_set() for d in streams) and not declines(peer):
                        break
                else:
                    raise AssertionError("the server kept asking")
                assert self.http_app is not None
                runtime = self.http_app.runtime
                response = await http.delete(self.http_url, headers=headers)
                assert response.status_code == 204, response.text
        assert baseline(runtime) == self.http_base, program
        assert self.http_app is not None
        assert len(self.http_app.sessions) == self.http_sessions_base
        self.http_approved.update(peer.approved)
        check_runs(self.http_runs, self.http_approved, "HTTP")

    async def _http_post(
        self,
        http: httpx2.AsyncClient,
        headers: dict[str, str],
        data: bytes,
        peer: Peer,
        first: anyio.Event | None = None,
    ) -> None:
        """POSTs ``data`` and reads the answer, JSON or SSE, to the end; ``first`` is set
        once the first message was taken."""
        async with http.stream("POST", self.http_url, content=data, headers=headers) as response:
            kind = response.headers.get("content-type", "")
            if kind.startswith("application/json"):
                body = await response.aread()
                # 202: a notification or a response; 400 with no body: a message the codec
                # refuses with no reply to send (R-WIRE, spec/codec.md), such as ``{}``
                assert body or response.status_code in (202, 400), (
                    response.status_code,
                    data[:200],
                )
                if body:
                    peer.take(json.loads(body))
                return
            if not kind.startswith("text/event-stream"):
                await response.aread()
                assert response.status_code < 500, (response.status_code, data[:200])
                return
            async for line in _sse_lines(response):
                if line.startswith("data:") and line[5:].strip():
                    peer.take(json.loads(line[5:]))
                    if first is not None:
                        first.set()

    async def _http_ping(
        self, http: httpx2.AsyncClient, headers: dict[str, str], peer: Peer
    ) -> None:
        request_id = peer.fresh_id()
        ping = {"jsonrpc": "2.0", "id": request_id, "method": "ping"}
        await self._http_post(http, headers, _encoded(ping), peer)
        reply = peer.replies.pop(request_id, None)
        assert reply is not None, "no answer to ping"
        assert reply.get("result") == {}, reply

    def run_http(self, program: list[Step]) -> None:
        self.inputs["http"] += 1
        self.portal.call(self._http_input, program)


async def _sse_lines(response: httpx2.Response) -> AsyncIterator[str]:
    """The lines of an SSE stream, split where SSE splits them (CR, LF or CRLF) and nowhere
    else: ``aiter_lines`` also splits on U+0085 and the other Unicode line breaks, which a JSON
    string may carry unescaped, and would cut a ``data:`` line in two."""
    pending = b""
    async for chunk in response.aiter_bytes():
        pending += chunk
        *lines, pending = pending.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        for line in lines:
            yield line.decode("utf-8")
    if pending:
        yield pending.decode("utf-8")


@asynccontextmanager
async def _serving(live: Live) -> AsyncIterator[None]:
    stdio_server = build_server(live.stdio_runs)
    http_server = build_server(live.http_runs)
    to_server, from_client = os.pipe()
    to_client, from_server = os.pipe()
    live.stdio_in = FdSendStream(from_client)
    live.stdio_out = FdReceiveStream(to_client)

    def make(port: int) -> HttpApp:
        return HttpApp(http_server, options=rules.HttpOptions(port=port))

    transport = StdioTransport(stdio_server)
    server_in, server_out = FdReceiveStream(to_server), FdSendStream(from_server)
    served = anyio.Event()

    async def serve() -> None:
        try:
            await serve_stdio(transport.runtime, server_in, server_out)
        finally:
            served.set()

    async with (
        transport.running(),
        uvicorn_serving(make) as (app, port),
        app.running(),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(serve)
        live.stdio_runtime = transport.runtime
        live.http_app = app
        live.http_url = f"http://127.0.0.1:{port}/mcp"
        with anyio.fail_after(DEADLINE):
            init = {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": INIT_PARAMS}
            await live._stdio_send(_encoded(init))
            while "init" not in live.stdio_peer.replies:
                await live._stdio_read()
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            await live._stdio_send(_encoded(initialized))
            await live._stdio_ping()
        live.stdio_base = baseline(transport.runtime)
        live.http_base = baseline(app.runtime)
        live.http_sessions_base = len(app.sessions)
        try:
            yield
        finally:
            await live.stdio_in.aclose()
            os.close(from_client)  # end of input: the stdio server ends
            with anyio.move_on_after(DEADLINE):
                await served.wait()
            tg.cancel_scope.cancel()
    for stream in (server_in, server_out, live.stdio_out):
        await stream.aclose()
    for fd in (to_server, to_client, from_server):
        os.close(fd)


@contextmanager
def live_servers() -> Iterator[Live]:
    """Both live servers for the length of the block."""
    with anyio.from_thread.start_blocking_portal("asyncio") as portal:
        live = Live(portal)
        with portal.wrap_async_context_manager(_serving(live)):
            yield live
