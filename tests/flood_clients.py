"""The flood of issue #12 as clients over Streamable HTTP (bench/flood.py measures it against a
server process, tests/test_flood.py runs a small one in process).

Against a server whose tool ``guarded_echo`` asks, with per-session cap ``per_conn`` and total
cap ``total``, in this order:

1. victims: ``victims`` sessions, each of its own principal ``victim-<n>``, park one call each;
2. a crowd: ``crowd`` sessions, each of its own principal ``crowd-<n>``, each ask three times
   their cap at once;
3. one connection: one session of principal ``single`` asks ten times the total cap at once;
4. one principal with many sessions: ``mallory`` spreads ten times the total cap over
   ``mallory_sessions`` sessions (none: no such phase);
5. one principal in the modern era: ``modern`` sends ``modern_asks`` stateless 2026-07-28
   ``tools/call`` requests at once, each answered at once (an input-required result whose nonce
   holds a parking place, R-MRTR-12, or a deny), never retried (none: no such phase);
6. one principal over legacy sessions: ``legacy`` opens ``legacy_sessions`` 2024-11-05 ``/sse``
   sessions and, without initializing them, posts on each a ``tools/call`` in the 2026-07-28
   shape (its ``_meta``) and then one in the session's own shape, ten times the total cap between
   them (none: no such phase);
7. two principals over stateless requests: ``slow`` sends ``slow_calls`` stateless ``sleep``
   calls at once, and once at least ``slow_calls - max_in_flight`` of them are answered (every
   worker the server has is then taken or refused to it), each victim principal sends one
   stateless ``echo``, which must be served; then every sleep ends by itself (none: no such
   phase).

Every ask of a phase is sent at once and the phase ends when each has its first answer (its
elicitation, or its result). The parked calls of the flood are never answered. Then every victim
approves: each must get its tool's result, not a deny. Then every session is deleted, which ends
what is still parked. Every wait is bounded by ``deadline``.
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import httpx2

from askgate.core.messages import CANNOT_ASK

MAX_SESSIONS = 64  # victims and crowd sessions, each its own principal
TOKENS = {
    **{f"victim-{n}": f"victim-{n}-token-0123456789abcdef" for n in range(MAX_SESSIONS)},
    **{f"crowd-{n}": f"crowd-{n}-token-0123456789abcdef" for n in range(MAX_SESSIONS)},
    "single": "single-token-0123456789abcdef",
    "mallory": "mallory-token-0123456789abcdef",
    "modern": "modern-token-0123456789abcdef",
    "legacy": "legacy-token-0123456789abcdef",
    "slow": "slow-token-0123456789abcdef",
}
VERSION = "2025-11-25"
MODERN = "2026-07-28"
LEGACY_ID = re.compile(r"legacy-\d+-\d+")


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    "io.modelcontextprotocol/clientInfo": {"name": "flood", "version": "0"},
}


def modern_call(request_id: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A ``tools/call`` in the 2026-07-28 shape (its ``_meta``)."""
    params = {"name": tool, "arguments": arguments, "_meta": MODERN_META}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def modern_ask(
    http: httpx2.AsyncClient,
    url: str,
    principal: str,
    request_id: str,
    tool: str = "guarded_echo",
    arguments: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One stateless 2026-07-28 ``tool`` call (no session; ``guarded_echo`` of its id unless
    said otherwise); its one answer."""
    call = modern_call(request_id, tool, {"text": request_id} if arguments is None else arguments)
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "authorization": f"Bearer {TOKENS[principal]}",
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": tool,
    }
    try:
        response = await http.post(url, json=call, headers=headers)
    except httpx2.HTTPError as exc:
        return {"client error": type(exc).__name__}
    if response.status_code != 200:
        return {"status": response.status_code}
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        found: list[dict[str, Any]] = [
            json.loads(line[5:])
            for line in response.text.splitlines()
            if line.startswith("data:") and line[5:].strip()
        ]
        return next((m for m in found if m.get("id") == request_id), {"status": 200})
    answer: dict[str, Any] = response.json()
    return answer


class Figures:
    """What the clients saw."""

    def __init__(self) -> None:
        self.parked: collections.Counter[str] = collections.Counter()  # elicitations, by phase
        self.denied: collections.Counter[str] = collections.Counter()  # by detail
        self.other: collections.Counter[str] = collections.Counter()
        self.victims_served = 0
        self.victims_denied: list[str] = []
        self.stateless_victims_served = 0
        self.stateless_victims_denied: list[str] = []

    def as_dict(self) -> dict[str, Any]:
        return {
            "parked_by_phase": dict(self.parked),
            "denied_by_detail": dict(self.denied),
            "other": dict(self.other),
            "victims_served": self.victims_served,
            "victims_denied": self.victims_denied,
            "stateless_victims_served": self.stateless_victims_served,
            "stateless_victims_denied": self.stateless_victims_denied,
        }


class Session:
    """One session of one principal."""

    def __init__(self, http: httpx2.AsyncClient, url: str, principal: str) -> None:
        self.http = http
        self.url = url
        self.headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "authorization": f"Bearer {TOKENS[principal]}",
        }

    async def open(self) -> None:
        params = {
            "protocolVersion": VERSION,
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "flood", "version": "0"},
        }
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
        response = await self.http.post(self.url, json=init, headers=self.headers)
        assert response.status_code == 200, response.text
        self.headers["mcp-session-id"] = response.headers["mcp-session-id"]
        self.headers["mcp-protocol-version"] = VERSION
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        response = await self.http.post(self.url, json=note, headers=self.headers)
        assert response.status_code == 202, response.text

    async def close(self) -> None:
        response = await self.http.delete(self.url, headers=self.headers)
        assert response.status_code in (204, 404), response.status_code

    async def ask(
        self,
        request_id: str,
        first: anyio.Event,
        on_message: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        """A ``guarded_echo`` call; each message about it goes to ``on_message``; ``first`` is
        set at the first one (or when the call's answer ended without one)."""
        params = {"name": "guarded_echo", "arguments": {"text": request_id}}
        call = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        try:
            async with self.http.stream(
                "POST", self.url, json=call, headers=self.headers
            ) as response:
                kind = response.headers.get("content-type", "")
                if kind.startswith("application/json"):
                    await on_message(json.loads(await response.aread()))
                    return
                if not kind.startswith("text/event-stream"):
                    await response.aread()
                    await on_message({"status": response.status_code})
                    return
                async for line in response.aiter_lines():
                    if line.startswith("data:") and line[5:].strip():
                        await on_message(json.loads(line[5:]))
                        first.set()
        except httpx2.HTTPError as exc:
            await on_message({"client error": type(exc).__name__})
        finally:
            first.set()


class LegacySession:
    """One 2024-11-05 ``/sse`` session of one principal: its stream is read by a task of its
    own, which hands every message to ``on_message``; cancelling ``scope`` ends the session."""

    def __init__(self, http: httpx2.AsyncClient, url: str, principal: str) -> None:
        self.http = http
        self.origin = url.rsplit("/", 1)[0]  # the server's root: /sse and /messages are there
        self.headers = {"authorization": f"Bearer {TOKENS[principal]}"}
        self.endpoint = ""
        self.scope = anyio.CancelScope()

    async def open(
        self,
        tg: anyio.abc.TaskGroup,
        on_message: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        """Opens the stream; returns once its ``endpoint`` event has come."""
        ready = anyio.Event()
        tg.start_soon(self._read, ready, on_message)
        await ready.wait()
        assert self.endpoint, "the /sse stream ended before its endpoint event"

    async def _read(
        self, ready: anyio.Event, on_message: Callable[[dict[str, Any]], Awaitable[None]]
    ) -> None:
        with self.scope:
            try:
                headers = {**self.headers, "accept": "text/event-stream"}
                async with self.http.stream("GET", f"{self.origin}/sse", headers=headers) as sse:
                    event = ""
                    async for line in sse.aiter_lines():
                        if line.startswith("event:"):
                            event = line[6:].strip()
                        elif line.startswith("data:") and event == "endpoint":
                            self.endpoint = self.origin + line[5:].strip()
                            ready.set()
                        elif line.startswith("data:") and line[5:].strip():
                            await on_message(json.loads(line[5:]))
            finally:
                ready.set()

    async def post(self, message: dict[str, Any]) -> int:
        """Posts ``message`` to the session; the HTTP status (its answer comes on the stream)."""
        headers = {**self.headers, "content-type": "application/json"}
        response = await self.http.post(self.endpoint, json=message, headers=headers)
        return response.status_code


def detail_of(message: dict[str, Any]) -> str:
    """How a call ended, from its final message."""
    if "status" in message:
        return f"HTTP {message['status']}"
    if "client error" in message:
        return str(message["client error"])
    if "error" in message:
        return f"error {message['error'].get('code')}"
    result = message.get("result", {})
    payload = result.get("structuredContent") or {}
    if result.get("isError") and payload.get("error") == "authorization_required":
        if str(payload.get("message", "")).endswith(CANNOT_ASK):  # its detail is the prompt
            return "client cannot be asked"
        return str(payload.get("detail"))
    if result.get("isError"):
        return str(payload.get("error") or "tool error")
    return "served"


def holds_a_place(message: dict[str, Any]) -> bool:
    """Whether ``message`` says a call took a parking place: its elicitation, or a 2026-07-28
    input-required result (whose nonce holds one, R-MRTR-12)."""
    if message.get("method") == "elicitation/create":
        return True
    result = message.get("result")
    return isinstance(result, dict) and result.get("resultType") == "input_required"


async def flood(
    url: str,
    *,
    victims: int,
    crowd: int,
    per_conn: int,
    total: int,
    mallory_sessions: int,
    deadline: float,
    during: Callable[[str], None] | None = None,
    modern_asks: int = 0,
    legacy_sessions: int = 0,
    slow_calls: int = 0,
    max_in_flight: int = 32,
    slow_ms: int = 5_000,
) -> Figures:
    """Runs the flood against ``url``; ``during(phase)`` is called after each phase."""
    figures = Figures()
    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=64)
    async with (
        httpx2.AsyncClient(timeout=deadline, limits=limits) as http,
        anyio.create_task_group() as tg,
    ):
        sessions: list[Session] = []
        victim_asks: list[tuple[Session, list[object], anyio.Event, list[str]]] = []

        async def opened(principal: str) -> Session:
            session = Session(http, url, principal)
            await session.open()
            sessions.append(session)
            return session

        async def phase(name: str, asks: list[tuple[Session, str]]) -> None:
            firsts = []
            for session, request_id in asks:
                first = anyio.Event()
                firsts.append(first)

                async def on_message(message: dict[str, Any], rid: str = request_id) -> None:
                    if message.get("method") == "elicitation/create":
                        figures.parked[name] += 1
                    elif (
                        message.get("id") == rid
                        or "status" in message
                        or "client error" in (message)
                    ):
                        figures.denied[detail_of(message)] += 1

                tg.start_soon(session.ask, request_id, first, on_message)
            with anyio.fail_after(deadline):
                for first in firsts:
                    await first.wait()
            if during is not None:
                during(name)

        with anyio.fail_after(deadline):
            # 1. the victims park one call each, and wait
            for n in range(victims):
                session = await opened(f"victim-{n}")
                asked: list[object] = []
                ended = anyio.Event()
                outcome: list[str] = []
                first = anyio.Event()

                async def on_victim(
                    message: dict[str, Any],
                    asked: list[object] = asked,
                    ended: anyio.Event = ended,
                    outcome: list[str] = outcome,
                    rid: str = f"victim-{n}",
                ) -> None:
                    if message.get("method") == "elicitation/create":
                        asked.append(message["id"])
                    elif message.get("id") == rid or "status" in message:
                        outcome.append(detail_of(message))
                        ended.set()

                tg.start_soon(session.ask, f"victim-{n}", first, on_victim)
                await first.wait()
                assert asked, f"victim {n} was not asked: {outcome}"
                figures.parked["victims"] += 1
                victim_asks.append((session, asked, ended, outcome))
            if during is not None:
                during("victims")
            # 2. a crowd of sessions, each asking three times its cap
            crowd_sessions = [await opened(f"crowd-{n}") for n in range(crowd)]
            await phase(
                "crowd",
                [
                    (s, f"crowd-{i}-{k}")
                    for i, s in enumerate(crowd_sessions)
                    for k in range(3 * per_conn)
                ],
            )
            # 3. one connection asking ten times the total cap
            single = await opened("single")
            await phase("single", [(single, f"single-{k}") for k in range(10 * total)])
            # 4. one principal with many sessions asking ten times the total cap between them
            if mallory_sessions:
                spread = [await opened("mallory") for _ in range(mallory_sessions)]
                each = -(-10 * total // mallory_sessions)
                await phase(
                    "mallory",
                    [(s, f"m-{i}-{k}") for i, s in enumerate(spread) for k in range(each)],
                )
            # 5. one principal flooding modern ASKs, each answered at once, never retried
            if modern_asks:
                answers: list[dict[str, Any]] = []

                async def modern(request_id: str) -> None:
                    answers.append(await modern_ask(http, url, "modern", request_id))

                async with anyio.create_task_group() as asks:
                    for k in range(modern_asks):
                        asks.start_soon(modern, f"modern-{k}")
                for answer in answers:
                    result = answer.get("result") or {}
                    if result.get("resultType") == "input_required":
                        figures.parked["modern"] += 1
                    else:
                        figures.denied[detail_of(answer)] += 1
                if during is not None:
                    during("modern")
            # 6. one principal over legacy sessions, each posting both eras' shapes of an ASK
            legacy_streams: list[LegacySession] = []
            if legacy_sessions:
                await legacy_phase(http, url, tg, figures, legacy_sessions, total, legacy_streams)
                if during is not None:
                    during("legacy")
            # 7. two principals over stateless requests: slow sleeps, then the victims' echoes
            if slow_calls:
                await stateless_phase(
                    http, url, figures, victims, slow_calls, max_in_flight, slow_ms
                )
                if during is not None:
                    during("stateless")
        # the victims approve: each gets its result
        with anyio.fail_after(deadline):
            for session, asked, ended, outcome in victim_asks:
                answer = {
                    "jsonrpc": "2.0",
                    "id": asked[0],
                    "result": {"action": "accept", "content": {"approve": True}},
                }
                response = await http.post(url, json=answer, headers=session.headers)
                assert response.status_code == 202, response.text
                await ended.wait()
                if outcome == ["served"]:
                    figures.victims_served += 1
                else:
                    figures.victims_denied.extend(outcome)
            for session in sessions:
                await session.close()
            for stream in legacy_streams:
                stream.scope.cancel()
        tg.cancel_scope.cancel()
    return figures


async def legacy_phase(
    http: httpx2.AsyncClient,
    url: str,
    tg: anyio.abc.TaskGroup,
    figures: Figures,
    sessions: int,
    total: int,
    streams: list[LegacySession],
) -> None:
    """Phase 6: ``legacy`` opens ``sessions`` /sse sessions and posts ten times ``total`` ASKs
    over them, alternating the 2026-07-28 shape and the 2025 one, never initializing; returns
    once every ASK has its first message (its elicitation, an input-required result, or its
    answer)."""
    each = -(-10 * total // sessions)
    firsts: dict[str, anyio.Event] = {}
    for n in range(sessions):
        stream = LegacySession(http, url, "legacy")

        async def on_message(message: dict[str, Any]) -> None:
            if message.get("method") == "elicitation/create":
                # An elicitation names its call by the prompt, which quotes the call's text.
                found = LEGACY_ID.search(json.dumps(message.get("params")))
                rid = found.group(0) if found else None
            else:
                rid = message.get("id")
            if isinstance(rid, str) and rid in firsts and not firsts[rid].is_set():
                if holds_a_place(message):
                    figures.parked["legacy"] += 1
                    if "result" in message:  # a nonce (R-MRTR-12), kept after the session
                        figures.other["legacy nonces"] += 1
                else:
                    figures.denied[detail_of(message)] += 1
                firsts[rid].set()

        await stream.open(tg, on_message)
        streams.append(stream)
        for k in range(each):
            rid = f"legacy-{n}-{k}"
            firsts[rid] = anyio.Event()
            if k % 2 == 0:
                message = modern_call(rid, "guarded_echo", {"text": rid})
            else:
                params = {"name": "guarded_echo", "arguments": {"text": rid}}
                message = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
            status = await stream.post(message)
            if status != 202:
                figures.denied[f"HTTP {status}"] += 1
                firsts[rid].set()
    with anyio.fail_after(30):
        for first in firsts.values():
            await first.wait()


async def stateless_phase(
    http: httpx2.AsyncClient,
    url: str,
    figures: Figures,
    victims: int,
    slow_calls: int,
    max_in_flight: int,
    slow_ms: int,
) -> None:
    """Phase 7: ``slow`` sends ``slow_calls`` stateless ``sleep`` calls of ``slow_ms`` each; once
    at least ``slow_calls - max_in_flight`` are answered (busy), so that every worker of the
    server is taken by them or refused to them, each victim principal's stateless ``echo`` must
    be served; the phase ends when every sleep has its answer."""
    answered = 0
    enough = anyio.Event()
    need = max(0, slow_calls - max_in_flight)

    async def sleeper(k: int) -> None:
        nonlocal answered
        answer = await modern_ask(http, url, "slow", f"slow-{k}", "sleep", {"ms": slow_ms})
        figures.denied[detail_of(answer)] += 1
        answered += 1
        if answered >= need:
            enough.set()

    async with anyio.create_task_group() as sleeps:
        for k in range(slow_calls):
            sleeps.start_soon(sleeper, k)
        if need == 0:
            enough.set()
        await enough.wait()
        for n in range(victims):
            rid = f"victim-{n}-echo"
            answer = await modern_ask(http, url, f"victim-{n}", rid, "echo", {"text": rid})
            if detail_of(answer) == "served":
                figures.stateless_victims_served += 1
            else:
                figures.stateless_victims_denied.append(detail_of(answer))
