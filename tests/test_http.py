"""The Streamable HTTP transport (spec/http.md): the pure checks, then the app under uvicorn.

Servers under test listen on 127.0.0.1 on a port the kernel chose, through a socket bound and
listening before uvicorn starts (so a client can connect at once: nothing polls). Every wait is
on a message or an event, under a deadline; no sleep synchronises anything.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext

from askgate import Allow, Context
from askgate.__main__ import main
from askgate.core import OptionError, codec
from askgate.core import http as rules
from askgate.demo import build_demo
from askgate.server import Server
from askgate.transports.auth import ApiKeyAuth, BearerAuth, LoopbackOnly, is_loopback, load_tokens
from askgate.transports.http import HttpApp
from askgate.transports.http_server import SHUTDOWN_GRACE_S

from .harness import without_digest
from .listener import GetWatched, count_decodes, uvicorn_serving
from .stdio_peer import deny_payload

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

DEADLINE = 20.0
OPTS = rules.HttpOptions(port=8765)
GOOD = {"host": "127.0.0.1:8765"}
TOKENS = {"alice": "alice-token-0123456789", "mallory": "mallory-token-0123456789"}


# -- the pure checks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("127.0.0.1:8765", True),
        ("localhost:8765", True),
        ("[::1]:8765", True),
        ("LOCALHOST:8765", True),
        ("127.0.0.1:8766", False),
        ("evil.example:8765", False),
        ("localhost.evil.example:8765", False),
        ("", False),
        (None, False),
    ],
)
def test_R_HTTP_1_host_is_loopback_on_the_bound_port(host: str | None, ok: bool) -> None:
    headers = {} if host is None else {"host": host}
    rejection = rules.check_origin_and_host(headers, OPTS)
    assert (rejection is None) is ok
    if not ok:
        assert rejection == rules.Rejection(421, "Misdirected Request: Host not allowed")
    allowed = rules.HttpOptions(port=8765, allowed_hosts=("mcp.example.com",))
    assert rules.host_allowed("mcp.example.com", allowed)
    assert not rules.host_allowed("mcp.example.com", OPTS)


@pytest.mark.parametrize(
    ("origin", "ok"),
    [
        (None, True),
        ("http://127.0.0.1:8765", True),
        ("http://localhost:8765", True),
        ("https://evil.example", False),
        ("null", False),
        ("http://localhost.evil.example", False),
        ("http://localhost:9999", False),
        ("http://user@localhost:8765", False),
        ("file://", False),
    ],
)
def test_R_HTTP_2_origin_is_absent_loopback_or_listed(origin: str | None, ok: bool) -> None:
    headers = dict(GOOD) if origin is None else {**GOOD, "origin": origin}
    rejection = rules.check_origin_and_host(headers, OPTS)
    assert (rejection is None) is ok
    if not ok:
        assert rejection is not None
        assert rejection.status == 403
    listed = rules.HttpOptions(port=8765, allowed_origins=("https://app.example",))
    assert rules.origin_allowed("https://app.example", listed)
    assert not rules.origin_allowed("https://app.example", OPTS)  # empty list: loopback only


POST_OK = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "", "multipart/form-data"]
)
def test_R_HTTP_3_a_post_body_is_json(content_type: str) -> None:
    rejection = rules.check_post_headers({**POST_OK, "content-type": content_type})
    assert rejection is not None
    assert rejection.status == 415
    assert (
        rules.check_post_headers({**POST_OK, "content-type": "application/json; charset=utf-8"})
        is None
    )


def test_R_HTTP_4_accept_lists_json_and_event_stream() -> None:
    assert rules.check_post_headers(POST_OK) is None
    assert rules.check_post_headers({**POST_OK, "accept": "*/*"}) is None
    rejection = rules.check_post_headers({**POST_OK, "accept": "application/json"})
    assert rejection is not None
    assert rejection.status == 406
    assert rules.check_get_headers({"accept": "text/event-stream"}) is None
    get_rejection = rules.check_get_headers({"accept": "application/json"})
    assert get_rejection is not None
    assert get_rejection.status == 406


def test_R_HTTP_1_R_HTTP_4_remembered_verdicts_match_fresh_ones() -> None:
    """The header checks remember their verdicts for short values; a value asked twice, and
    one too long to remember, get the verdict judging it afresh gives."""
    long_host = "localhost:8765" + " " * rules.MEMO_VALUE_CHARS
    long_accept = "application/json, text/event-stream" + ", x/y" * rules.MEMO_VALUE_CHARS
    for host in ("127.0.0.1:8765", "evil.example:8765", long_host, "e" * 300):
        for origin in (None, "http://localhost:8765", "https://evil.example"):
            headers = {"host": host} if origin is None else {"host": host, "origin": origin}
            fresh = rules._origin_and_host(origin, host, OPTS)
            assert rules.check_origin_and_host(headers, OPTS) == fresh
            assert rules.check_origin_and_host(headers, OPTS) == fresh
    assert rules.check_origin_and_host({"host": long_host}, OPTS) is None
    assert rules.check_origin_and_host({"host": "e" * 300}, OPTS) is not None
    for content_type in ("application/json", "text/plain", "application/json" + " " * 300):
        for accept in (POST_OK["accept"], "application/json", long_accept, "text/html" * 40):
            fresh = rules._post_media(content_type, accept)
            headers = {"content-type": content_type, "accept": accept}
            assert rules.check_post_headers(headers) == fresh
            assert rules.check_post_headers(headers) == fresh
    assert (
        rules.check_post_headers({"content-type": "application/json", "accept": long_accept})
        is None
    )
    refused = rules.check_post_headers({**POST_OK, "accept": "text/html" * 40})
    assert refused is not None
    assert refused.status == 406


def test_R_HTTP_5_the_cap_counts_bytes_received() -> None:
    small = rules.HttpOptions(max_body=10)
    assert rules.declared_too_large({"content-length": "11"}, small)
    assert not rules.declared_too_large({"content-length": "10"}, small)
    assert not rules.declared_too_large({}, small)
    assert not rules.body_too_large(10, small)
    assert rules.body_too_large(11, small)
    assert rules.HttpOptions().max_body == 4 * 1024 * 1024


def test_R_HTTP_6_protocol_version_header() -> None:
    assert rules.check_version({}) == ("2025-03-26", None)
    assert rules.check_version({"mcp-protocol-version": "2025-06-18"}) == ("2025-06-18", None)
    _, rejection = rules.check_version({"mcp-protocol-version": "1999-01-01"})
    assert rejection is not None
    assert rejection.status == 400


def test_R_HTTP_8_sessions_are_minted_from_random_bytes_only() -> None:
    table = rules.Sessions()
    table, first = rules.mint(table, b"\x01" * 32, "alice", 0, OPTS)
    table, second = rules.mint(table, b"\x02" * 32, "alice", 0, OPTS)
    assert isinstance(first, rules.Session)
    assert isinstance(second, rules.Session)
    assert first.conn != second.conn
    assert all(0x21 <= ord(ch) <= 0x7E for ch in first.id)
    assert len(first.id) >= 40
    with pytest.raises(ValueError, match="16 random bytes"):
        rules.mint(table, b"short", "alice", 0, OPTS)
    full = rules.HttpOptions(max_sessions=2)
    _, refused = rules.mint(table, b"\x03" * 32, "alice", 0, full)
    assert refused == rules.Rejection(503, "Service Unavailable: too many sessions")


def test_R_HTTP_9_a_session_answers_only_its_principal() -> None:
    table, session = rules.mint(rules.Sessions(), b"\x01" * 32, "alice", 0, OPTS)
    assert isinstance(session, rules.Session)
    assert rules.lookup(table, session.id, "alice") == session
    foreign = rules.lookup(table, session.id, "mallory")
    unknown = rules.lookup(table, "nope", "alice")
    assert foreign == unknown == rules.Rejection(404, "Not Found: unknown session")
    missing = rules.lookup(table, None, "alice")
    assert isinstance(missing, rules.Rejection)
    assert missing.status == 400
    assert rules.lookup(table, None, "alice", initialize=True) is None


def test_R_HTTP_10_one_get_stream_per_session() -> None:
    table, session = rules.mint(rules.Sessions(), b"\x01" * 32, "alice", 0, OPTS)
    assert isinstance(session, rules.Session)
    table, refused = rules.open_get(table, session.id, 1)
    assert refused is None
    _, again = rules.open_get(table, session.id, 2)
    assert again is not None
    assert again.status == 409
    table = rules.close_get(table, session.id, 3)
    _, reopened = rules.open_get(table, session.id, 4)
    assert reopened is None


def test_R_HTTP_11_idle_sessions_are_reaped_and_ended_ones_are_gone() -> None:
    options = rules.HttpOptions(idle_ms=1000)
    table, a = rules.mint(rules.Sessions(), b"\x01" * 32, "alice", 0, options)
    table, b = rules.mint(table, b"\x02" * 32, "alice", 0, options)
    assert isinstance(a, rules.Session)
    assert isinstance(b, rules.Session)
    table = rules.touch(table, b.id, 500, +1)  # b has an open stream: never idle
    after = 1000 + rules.touch_resolution(options)  # idle_ms, and the recording's resolution
    table, reaped = rules.reap(table, after - 1, options)
    assert reaped == ()
    table, reaped = rules.reap(table, after, options)
    assert [s.id for s in reaped] == [a.id]
    assert rules.lookup(table, a.id, "alice") == rules.Rejection(404, "Not Found: unknown session")
    table, ended = rules.end(table, b.id)
    assert ended is not None
    assert len(table) == 0


def test_R_HTTP_11_a_request_within_the_resolution_leaves_the_recorded_use() -> None:
    assert rules.touch_resolution(rules.HttpOptions()) == 1000  # 30 minutes / 64: capped
    assert rules.touch_resolution(rules.HttpOptions(idle_ms=6400)) == 100
    assert rules.touch_resolution(rules.HttpOptions(idle_ms=63)) == 0  # to the millisecond
    options = rules.HttpOptions(idle_ms=6400)
    within = rules.touch_resolution(options)
    table, minted = rules.mint(rules.Sessions(), b"\x01" * 32, "alice", 0, options)
    assert isinstance(minted, rules.Session)
    sid = minted.id
    assert rules.touch(table, sid, 100, within=within) is table  # within: nothing rebuilt
    table = rules.touch(table, sid, 101, within=within)  # past it: recorded
    assert table.by_id[sid].last_seen == 101
    assert rules.touch(table, sid, 101) is table  # the same millisecond, as before
    assert rules.touch(table, sid, 102).by_id[sid].last_seen == 102  # within=0: every ms
    opened = rules.touch(table, sid, 150, +1, within=within)  # a stream always counts
    assert (opened.by_id[sid].open_streams, opened.by_id[sid].last_seen) == (1, 150)
    # A use left unrecorded (at 101 + within) keeps the session for idle_ms after it: it is
    # reaped idle_ms after that use, never before (at most ``within`` late after a recorded one).
    last = 101 + within
    quiet = rules.touch(table, sid, last, within=within)
    assert quiet is table
    _, reaped = rules.reap(quiet, last + 6400 - 1, options)
    assert reaped == ()
    _, reaped = rules.reap(quiet, last + 6400, options)
    assert [s.id for s in reaped] == [sid]


def test_R_HTTP_12_a_related_push_is_routed_to_its_call() -> None:
    ask = {"jsonrpc": "2.0", "id": "eid-1", "method": "elicitation/create", "params": {}}
    assert rules.route_push(ask, 7) == rules.PushRoute(call=7, remember="eid-1")
    sample = {"jsonrpc": "2.0", "id": "askgate-request-2", "method": "sampling/createMessage"}
    assert rules.route_push(sample, "c") == rules.PushRoute(call="c", remember="askgate-request-2")
    for method in ("notifications/progress", "notifications/message"):
        note: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": {}}
        assert rules.route_push(note, 7) == rules.PushRoute(call=7)
    withdraw = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": "eid-1", "reason": "timed out"},
    }
    assert rules.route_push(withdraw, 7) == rules.PushRoute(call=7, withdraws="eid-1")
    assert rules.route_push(withdraw, None) == rules.PushRoute(withdraws="eid-1")
    # Unrelated pushes (list changes, the server's own log) go to the GET stream.
    changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    assert rules.route_push(changed, None) == rules.PushRoute()
    # A request id that is not a string is never remembered (askgate mints strings).
    assert rules.route_push({**ask, "id": 3}, 7) == rules.PushRoute(call=7)


def test_R_HTTP_12_a_push_tries_its_call_then_the_carrier_then_get_then_is_dropped() -> None:
    both = rules.PushRoute(call=7, withdraws="eid-1", remember="eid-2")
    for call in (True, False):
        for carrier in (True, False):
            for get in (True, False):
                taken = rules.push_target(both, call=call, carrier=carrier, get=get)
                chosen = "call" if call else "carrier" if carrier else "get" if get else None
                assert taken.stream == chosen, (call, carrier, get)
                assert taken.forget == "eid-1"  # forgotten whichever stream takes the push
                # Only a call's stream or a carrier remembers; the GET stream is no call's.
                assert taken.remember == ("eid-2" if chosen in ("call", "carrier") else None)
    # A route that names no call, or withdraws nothing, never goes there, open or not.
    unrelated = rules.PushRoute()
    assert rules.push_target(unrelated, call=True, carrier=True, get=True) == rules.PushTarget(
        "get"
    )
    assert rules.push_target(unrelated, call=True, carrier=True, get=False) == rules.PushTarget(
        None
    )
    asks = rules.PushRoute(call=7, remember="eid-3")
    assert rules.push_target(asks, call=False, carrier=True, get=True) == rules.PushTarget("get")
    assert rules.push_target(asks, call=True, carrier=False, get=False) == rules.PushTarget(
        "call", "eid-3"
    )
    withdraws = rules.PushRoute(withdraws="eid-1")
    assert rules.push_target(withdraws, call=True, carrier=False, get=False) == rules.PushTarget(
        None, forget="eid-1"
    )


def test_R_HTTP_9_no_principal_is_401_or_403_by_whether_the_provider_takes_credentials() -> None:
    assert rules.auth_refusal(True, 'Bearer realm="askgate"') == (
        rules.Rejection(401, "Unauthorized"),
        'Bearer realm="askgate"',
    )
    assert rules.auth_refusal(True, "") == (rules.Rejection(401, "Unauthorized"), "")
    assert rules.auth_refusal(False, "ignored") == (
        rules.Rejection(403, "Forbidden: loopback peers only"),
        "",
    )
    tokens = {"alice": "alice-token-0123456789"}
    assert LoopbackOnly.credentials is False
    assert BearerAuth(tokens).credentials is True
    assert ApiKeyAuth(tokens).credentials is True
    assert BearerAuth.challenge == 'Bearer realm="askgate"'
    for host, loopback in [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        ("localhost.evil.example", False),
        (None, False),
    ]:
        assert rules.loopback_address(host) is loopback, host
        assert is_loopback(host) is loopback, host


def test_R_HTTP_13_one_decision_says_where_the_cli_listens_or_why_it_refuses() -> None:
    def listen(
        address: str = "127.0.0.1:8765",
        auth: str = "none",
        tokens: str | None = None,
        token_error: str | None = None,
        configured: bool = True,
        read: bool = True,
    ) -> rules.Listen | str:
        return rules.listen_or_refuse(address, auth, tokens, token_error, configured, read)

    assert listen() == rules.Listen("127.0.0.1", 8765)
    assert listen("[::1]:80") == rules.Listen("[::1]", 80)
    assert listen("0.0.0.0:1", "bearer", "t") == rules.Listen("0.0.0.0", 1)
    for address in ("8765", ":8765", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:-1"):
        assert listen(address) == f"askgate: --http wants HOST:PORT, got {address!r}"
    assert listen("127.0.0.1:65535") == rules.Listen("127.0.0.1", 65535)
    for address in ("127.0.0.1:65536", "127.0.0.1:99999"):
        assert listen(address) == f"askgate: --http wants a PORT from 0 to 65535, got {address!r}"
    assert listen(tokens="t") == "askgate: --tokens needs --auth bearer or --auth apikey"
    assert listen("0.0.0.0:1") == (
        "askgate refuses to start: --http 0.0.0.0:1 is not a loopback address and --auth none "
        "admits loopback peers only; use --auth bearer|apikey --tokens FILE"
    )
    assert listen(auth="apikey") == "askgate: --auth apikey needs --tokens FILE"
    assert listen(auth="bearer", tokens="") == "askgate: --auth bearer needs --tokens FILE"
    assert listen(auth="bearer", tokens="t", token_error="bad file") == (
        "askgate refuses to start: bad file"
    )
    for configured, read in [(False, True), (True, False), (False, False)]:
        guard = rules.deployment_refusal(configured, read, "cli")  # the command's words
        assert guard is not None
        assert guard.startswith("askgate refuses to start: --http needs --policy FILE (")
        assert "authorizer=None" not in guard
        assert 'authorizer_source="configured")' not in guard.partition(".")[0]
        assert ("no tool authorizer was configured" in guard) is not configured
        assert ("no read authorizer" in guard) is not read
        assert listen(configured=configured, read=read) == guard
    # In this order: the address, then the auth and its tokens, then the guard.
    assert str(listen("nope", tokens="t", configured=False)).startswith("askgate: --http wants")
    assert str(listen("0.0.0.0:1", configured=False)).endswith("--tokens FILE")
    assert listen(auth="bearer", tokens="t", token_error="bad", read=False) == (
        "askgate refuses to start: bad"
    )


def test_R_HTTP_13_the_deployment_guard_names_what_is_missing() -> None:
    assert rules.deployment_refusal(True, True) is None
    both = rules.deployment_refusal(False, False)
    assert both is not None
    assert "tool authorizer" in both
    assert "read authorizer" in both
    assert "explicit opt-out" in both
    read_only = rules.deployment_refusal(True, False)
    assert read_only is not None
    assert "tool authorizer" not in read_only
    with pytest.raises(OptionError, match="read authorizer"):
        HttpApp(Server("x", authorizer=lambda *_: Allow(), authorizer_source="configured"))
    with pytest.raises(OptionError, match="tool authorizer"):
        HttpApp(build_demo(configured=False))  # its policy, marked chosen by no one
    HttpApp(build_demo())  # serving the demo is an operator's choice: its policy counts


def test_R_HTTP_13_the_cli_refuses_an_unguarded_or_exposed_server(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    unguarded = tmp_path / "unguarded.py"
    unguarded.write_text("from askgate import Server\nserver = Server('unguarded')\n")
    # no authorizer configured: refused in the command's words
    assert main(["serve", f"{unguarded}:server", "--http", "127.0.0.1:1"]) == 2
    printed = capsys.readouterr().err
    assert printed == f"{rules.deployment_refusal(False, False, 'cli')}\n"
    assert printed.startswith("askgate refuses to start: --http needs --policy FILE (")
    assert "no tool authorizer was configured" in printed
    assert "authorizer=None" not in printed
    assert main(["serve", "--demo", "--http", "localhost"]) == 2
    assert capsys.readouterr().err == "askgate: --http wants HOST:PORT, got 'localhost'\n"
    assert main(["serve", "--demo", "--http", "0.0.0.0:1"]) == 2  # auth none, not loopback
    assert main(["serve", "--demo", "--http", "0.0.0.0:1", "--auth", "bearer"]) == 2
    bad = tmp_path / "tokens"
    bad.write_text("alice short\n")
    assert (
        main(["serve", "--demo", "--http", "127.0.0.1:1", "--auth", "bearer", "--tokens", str(bad)])
        == 2
    )


def test_R_HTTP_13_run_http_decides_as_the_command_does_in_python_words() -> None:
    """Server.run_http refuses what the command refuses, naming parameters, not flags."""
    assert rules.run_http_refusal("127.0.0.1", 8765, True, True, True) is None
    assert rules.run_http_refusal("::1", 0, True, True, True) is None
    assert rules.run_http_refusal("0.0.0.0", 65535, False, True, True) is None
    for port in (-1, 65536, "8765", True, None):
        assert rules.run_http_refusal("127.0.0.1", port, True, True, True) == (
            f"askgate refuses to start: port={port!r} must be an integer from 0 to 65535"
        )
    assert rules.run_http_refusal("0.0.0.0", 1, True, True, True) == (
        "askgate refuses to start: host='0.0.0.0' is not a loopback address and auth=None "
        "admits loopback peers only; pass auth=BearerAuth(tokens) or ApiKeyAuth(tokens)"
    )
    for configured, read in [(False, True), (True, False), (False, False)]:
        guard = rules.deployment_refusal(configured, read)
        assert guard is not None
        assert "--policy" not in guard
        refused = rules.run_http_refusal("127.0.0.1", 1, True, configured, read)
        assert refused == str(OptionError("authorizer", None, guard))
    # In this order: the port, then the address for loopback-only auth, then the guard.
    assert "port=" in str(rules.run_http_refusal("0.0.0.0", -1, True, False, False))
    assert "host=" in str(rules.run_http_refusal("0.0.0.0", 1, True, False, False))


def test_R_HTTP_9_token_files_and_providers(tmp_path: Any) -> None:
    path = tmp_path / "tokens"
    path.write_text("# who\nalice alice-token-0123456789\n\nbob bob-token-0123456789-xx\n")
    tokens = load_tokens(path)
    bearer = BearerAuth(tokens)
    assert bearer({"authorization": "Bearer alice-token-0123456789"}, None) == "alice"
    assert bearer({"authorization": "Bearer bob-token-0123456789-xx"}, None) == "bob"
    assert bearer({"authorization": "Bearer nope"}, None) is None
    assert bearer({"authorization": "Basic alice-token-0123456789"}, None) is None
    assert bearer({}, None) is None
    key = ApiKeyAuth(tokens)
    assert key({"x-api-key": "alice-token-0123456789"}, None) == "alice"
    assert key({"authorization": "Bearer alice-token-0123456789"}, None) is None


# -- the app under uvicorn ----------------------------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn runs on asyncio


@asynccontextmanager
async def serving(app_of: Any = None, **options: Any) -> AsyncIterator[tuple[HttpApp, str]]:
    """The demo (configured) over HTTP on 127.0.0.1, a free port; yields the app and its URL."""
    async with serving_server(build_demo(configured=True, **options), app_of) as served:
        yield served


@asynccontextmanager
async def serving_server(server: Server, app_of: Any = None) -> AsyncIterator[tuple[HttpApp, str]]:
    """``server`` over HTTP on 127.0.0.1, a free port; yields the app and its URL."""

    def make(port: int) -> HttpApp:
        if app_of is not None:
            made: HttpApp = app_of(server, port)
            return made
        return HttpApp(server, options=rules.HttpOptions(port=port))

    async with uvicorn_serving(make) as (app, port), app.running():
        yield app, f"http://127.0.0.1:{port}/mcp"


class Asker:
    def __init__(self, answer: types.ElicitResult | None = None) -> None:
        self.answer = answer
        self.prompts: list[str] = []
        self.asked = anyio.Event()
        self.cancelled = anyio.Event()

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        assert context.request_id is not None
        self.prompts.append(params.message)
        self.asked.set()
        if self.answer is not None:
            return self.answer
        try:
            await anyio.Event().wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled.set()
            raise
        raise AssertionError("unreachable")


def structured(result: types.CallToolResult) -> Any:
    assert result.structured_content is not None
    return result.structured_content


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@pytest.mark.anyio
async def test_R_HTTP_7_the_sdk_client_approves_declines_and_times_out() -> None:
    async with serving(elicitation_timeout_ms=300) as (app, url):
        with anyio.fail_after(DEADLINE):
            yes = Asker(types.ElicitResult(action="accept", content={"approve": True}))
            async with Client(url, mode="legacy", elicitation_callback=yes) as client:
                assert text(await client.call_tool("echo", {"text": "hi"})) == "hi"
                assert text(await client.call_tool("guarded_echo", {"text": "yo"})) == "yo"
            assert [without_digest(p) for p in yes.prompts] == ['Allow guarded_echo to echo "yo"?']
            no = Asker(types.ElicitResult(action="decline"))
            async with Client(url, mode="legacy", elicitation_callback=no) as client:
                result = await client.call_tool("guarded_echo", {"text": "yo"})
                assert structured(result) == deny_payload("guarded_echo", "ask", "declined")
            silent = Asker()
            async with Client(url, mode="legacy", elicitation_callback=silent) as client:
                result = await client.call_tool("guarded_echo", {"text": "yo"})
                assert structured(result) == deny_payload(
                    "guarded_echo",
                    "ask",
                    "elicitation timed out",
                    "no one approved it within 300 ms",
                )
                await silent.cancelled.wait()  # the withdrawal reached the client (R-CLOSE-4)
        assert app.runtime.state.parked_total == 0
        assert len(app.sessions) == 0  # every client ended its session with DELETE


@pytest.mark.anyio
async def test_R_HTTP_7_the_sdk_client_cancels_a_parked_call() -> None:
    async with serving() as (app, url):
        asker = Asker()
        with anyio.fail_after(DEADLINE):
            async with Client(url, mode="legacy", elicitation_callback=asker) as client:
                outcome: list[Any] = []
                async with anyio.create_task_group() as tg:

                    async def call() -> None:
                        outcome.append(await client.call_tool("guarded_echo", {"text": "x"}))

                    tg.start_soon(call)
                    await asker.asked.wait()
                    tg.cancel_scope.cancel()
                await asker.cancelled.wait()
                assert outcome == []
                assert app.runtime.state.parked_total == 0
                asker.answer = types.ElicitResult(action="accept", content={"approve": True})
                assert text(await client.call_tool("guarded_echo", {"text": "again"})) == "again"


# -- raw HTTP -----------------------------------------------------------------------------------

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _init(request_id: int = 0, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"elicitation": {}} if capabilities is None else capabilities,
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }


def _call(request_id: object, tool: str = "guarded_echo", **arguments: Any) -> dict[str, Any]:
    args = arguments or {"text": "x"}
    params = {"name": tool, "arguments": args}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


class Raw:
    """One session over raw HTTP; ``auth`` headers identify its principal."""

    def __init__(self, http: httpx2.AsyncClient, url: str, auth: dict[str, str] | None = None):
        self.http = http
        self.url = url
        self.auth = auth or {}
        self.sid = ""

    def headers(self, sid: str | None = None) -> dict[str, str]:
        headers = {**HEADERS, **self.auth, "mcp-protocol-version": "2025-06-18"}
        chosen = self.sid if sid is None else sid
        if chosen:
            headers["mcp-session-id"] = chosen
        return headers

    async def start(self, capabilities: dict[str, Any] | None = None) -> Raw:
        message = _init(capabilities=capabilities)
        response = await self.http.post(self.url, json=message, headers=self.headers())
        assert response.status_code == 200, response.text
        self.sid = response.headers["mcp-session-id"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await self.post(note)).status_code == 202
        return self

    async def post(self, message: object, sid: str | None = None) -> httpx2.Response:
        return await self.http.post(self.url, json=message, headers=self.headers(sid))


class CallStream:
    """A tools/call POST answered with an SSE stream, read message by message."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.read = 0
        self.status = 0
        self._got = anyio.Event()
        self.done = anyio.Event()

    async def run(self, raw: Raw, message: dict[str, Any]) -> None:
        try:
            async with raw.http.stream(
                "POST", raw.url, json=message, headers=raw.headers()
            ) as response:
                self.status = response.status_code
                if response.headers.get("content-type", "").startswith("application/json"):
                    self._add(json.loads(await response.aread()))
                    return
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        self._add(json.loads(line[6:]))
        finally:
            self.done.set()
            self._got.set()

    def _add(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self._got.set()

    async def next_message(self) -> dict[str, Any]:
        """The next message not yet returned, waiting for it (bounded by the test's deadline)."""
        while len(self.messages) <= self.read:
            if self.done.is_set():
                raise AssertionError("the stream ended")
            self._got = anyio.Event()
            await self._got.wait()
        self.read += 1
        return self.messages[self.read - 1]


def bearer_app(server: Any, port: int) -> HttpApp:
    return HttpApp(server, auth=BearerAuth(TOKENS), options=rules.HttpOptions(port=port))


def as_(principal: str) -> dict[str, str]:
    return {"authorization": f"Bearer {TOKENS[principal]}"}


@pytest.mark.anyio
async def test_R_HTTP_12_a_session_cannot_see_answer_or_read_another_sessions_call() -> None:
    async with serving(bearer_app) as (app, url), httpx2.AsyncClient(timeout=DEADLINE) as http:
        with anyio.fail_after(DEADLINE):
            alice = await Raw(http, url, as_("alice")).start()
            mallory = await Raw(http, url, as_("mallory")).start()
            stream = CallStream()
            async with anyio.create_task_group() as tg:
                tg.start_soon(stream.run, alice, _call(0))
                ask = await stream.next_message()
                assert ask["method"] == "elicitation/create"
                eid = ask["id"]
                accept = {
                    "jsonrpc": "2.0",
                    "id": eid,
                    "result": {"action": "accept", "content": {"approve": True}},
                }
                # Mallory, knowing the id, answers on her own session: ignored (R-CLOSE-5).
                assert (await mallory.post(accept)).status_code == 202
                # ... and on Alice's session with her own token: the same 404 as unknown.
                assert (await mallory.post(accept, sid=alice.sid)).status_code == 404
                assert (await mallory.post(accept, sid="no-such-session")).status_code == 404
                assert app.runtime.state.parked_total == 1
                # Mallory's own call id 0 is hers, and her stream carries nothing of Alice's.
                theirs = CallStream()
                tg.start_soon(theirs.run, mallory, _call(0, "echo", text="mine"))
                reply = await theirs.next_message()
                assert reply["result"]["content"][0]["text"] == "mine"
                # Alice answers: her stream gets her result, and only hers.
                assert (await alice.post(accept)).status_code == 202
                result = await stream.next_message()
                assert result["id"] == 0
                assert result["result"]["content"][0]["text"] == "x"
                await stream.done.wait()
            assert all(m.get("id") != eid for m in theirs.messages)
            assert app.runtime.state.parked_total == 0


@pytest.mark.anyio
async def test_R_HTTP_12_a_tools_logs_progress_and_requests_ride_its_call_stream() -> None:
    server = Server(
        "context",
        authorizer=lambda *_: Allow(),
        read_authorizer=lambda *_: Allow(),
        authorizer_source="configured",
    )

    @server.tool()
    async def chatty(ctx: Context) -> str:
        await ctx.log("info", "started")
        await ctx.report_progress(1, 2)
        answer = await ctx.sample({"messages": [], "maxTokens": 5})
        return str(answer["content"]["text"])

    async with serving_server(server) as (app, url), httpx2.AsyncClient(timeout=DEADLINE) as http:
        with anyio.fail_after(DEADLINE):
            raw = await Raw(http, url).start({"sampling": {}})
            level = {"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel"}
            assert (await raw.post({**level, "params": {"level": "debug"}})).status_code == 200
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "chatty", "arguments": {}, "_meta": {"progressToken": "p-1"}},
            }
            stream = CallStream()
            async with anyio.create_task_group() as tg:
                # No GET stream is open: everything about the call rides its POST stream.
                tg.start_soon(stream.run, raw, call)
                log = await stream.next_message()
                assert log["method"] == "notifications/message"
                assert log["params"]["data"] == "started"
                progress = await stream.next_message()
                assert progress["method"] == "notifications/progress"
                assert progress["params"]["progressToken"] == "p-1"
                ask = await stream.next_message()
                assert ask["method"] == "sampling/createMessage"
                answer = {
                    "role": "assistant",
                    "content": {"type": "text", "text": "hello"},
                    "model": "m",
                }
                response = {"jsonrpc": "2.0", "id": ask["id"], "result": answer}
                assert (await raw.post(response)).status_code == 202
                result = await stream.next_message()
                assert result["id"] == 2
                assert result["result"]["content"][0]["text"] == "hello"
                await stream.done.wait()
            assert not app.sessions.by_id[raw.sid].get_open


@pytest.mark.anyio
async def test_R_HTTP_11_delete_drops_a_parked_call_and_ends_the_session() -> None:
    async with serving() as (app, url), httpx2.AsyncClient(timeout=DEADLINE) as http:
        with anyio.fail_after(DEADLINE):
            raw = await Raw(http, url).start()
            stream = CallStream()
            async with anyio.create_task_group() as tg:
                tg.start_soon(stream.run, raw, _call(1))
                assert (await stream.next_message())["method"] == "elicitation/create"
                assert app.runtime.state.parked_total == 1
                response = await http.delete(url, headers=raw.headers())
                assert response.status_code == 204
                await stream.done.wait()  # its stream ended, with no result
            assert [m.get("method") for m in stream.messages] == ["elicitation/create"]
            state = app.runtime.state
            assert state.parked_total == 0
            assert len(state.calls) == 0
            assert len(app.sessions) == 0
            assert (
                await raw.post({"jsonrpc": "2.0", "id": 2, "method": "ping"})
            ).status_code == 404


@pytest.mark.anyio
async def test_R_HTTP_11_an_idle_session_is_reaped() -> None:
    async with serving() as (app, url), httpx2.AsyncClient(timeout=DEADLINE) as http:
        with anyio.fail_after(DEADLINE):
            raw = await Raw(http, url).start()
            assert app.reap(0) == 0
            assert app.reap(10**15) == 1
            assert (
                await raw.post({"jsonrpc": "2.0", "id": 2, "method": "ping"})
            ).status_code == 404


@pytest.mark.anyio
async def test_two_servers_one_after_the_other_in_one_event_loop() -> None:
    """The helper cancels uvicorn before its shutdown closes the listener, then closes it through
    the loop (tests/listener.py). Closing only the socket left its fd in the loop's selector: the
    next socket given that fd number was never polled (a listener: initialize hung) or could not
    be registered (a client: "All connection attempts failed")."""
    for _ in range(2):
        async with serving() as (_app, url), httpx2.AsyncClient(timeout=DEADLINE) as http:
            with anyio.fail_after(DEADLINE):
                await Raw(http, url).start()


@pytest.mark.anyio
async def test_R_HTTP_10_a_second_get_stream_is_409() -> None:
    async with serving() as (_app, url), httpx2.AsyncClient(timeout=DEADLINE) as http:
        with anyio.fail_after(DEADLINE):
            raw = await Raw(http, url).start()
            headers = {**raw.headers(), "accept": "text/event-stream"}
            async with http.stream("GET", url, headers=headers) as first:
                assert first.status_code == 200
                second = await http.get(url, headers=headers)
                assert second.status_code == 409
            assert (
                await http.get(url, headers={**headers, "mcp-session-id": "x"})
            ).status_code == 404
            no_session = {k: v for k, v in headers.items() if k != "mcp-session-id"}
            assert (await http.get(url, headers=no_session)).status_code == 400


@pytest.mark.anyio
async def test_R_PARK_1_the_per_session_cap_holds_over_http() -> None:
    async with (
        serving(max_parked_elicitations=1) as (_app, url),
        httpx2.AsyncClient(timeout=DEADLINE) as http,
    ):
        with anyio.fail_after(DEADLINE):
            raw = await Raw(http, url).start()
            first, second = CallStream(), CallStream()
            async with anyio.create_task_group() as tg:
                tg.start_soon(first.run, raw, _call(1))
                assert (await first.next_message())["method"] == "elicitation/create"
                tg.start_soon(second.run, raw, _call(2))
                denied = await second.next_message()
                assert denied["result"]["structuredContent"] == deny_payload(
                    "guarded_echo", "ask", "too many elicitations pending"
                )
                await http.delete(url, headers=raw.headers())


@pytest.mark.anyio
async def test_R_PARK_3_on_a_full_server_the_biggest_holder_yields_its_oldest() -> None:
    """Two sessions of two principals (R-PARK-1: sessions of one principal are one owner)."""
    options = {"max_parked_elicitations": 2, "max_parked_elicitations_total": 2}

    def bearer(server: Any, port: int) -> HttpApp:
        return HttpApp(server, auth=BearerAuth(TOKENS), options=rules.HttpOptions(port=port))

    async with (
        serving(bearer, **options) as (app, url),
        httpx2.AsyncClient(timeout=DEADLINE) as http,
    ):
        with anyio.fail_after(DEADLINE):
            a = await Raw(http, url, {"authorization": f"Bearer {TOKENS['alice']}"}).start()
            b = await Raw(http, url, {"authorization": f"Bearer {TOKENS['mallory']}"}).start()
            a1, a2, b1 = CallStream(), CallStream(), CallStream()
            async with anyio.create_task_group() as tg:
                tg.start_soon(a1.run, a, _call(1))
                assert (await a1.next_message())["method"] == "elicitation/create"
                tg.start_soon(a2.run, a, _call(2))
                assert (await a2.next_message())["method"] == "elicitation/create"
                tg.start_soon(b1.run, b, _call(1))
                assert (await b1.next_message())["method"] == "elicitation/create"
                withdrawn = await a1.next_message()
                assert withdrawn["method"] == "notifications/cancelled"
                evicted = await a1.next_message()
                assert evicted["id"] == 1
                assert evicted["result"]["structuredContent"] == deny_payload(
                    "guarded_echo", "ask", "evicted to make room on this server"
                )
                assert app.runtime.state.parked_total == 2
                for raw in (a, b):
                    await http.delete(url, headers=raw.headers())
            assert app.runtime.state.parked_total == 0
            assert a2.messages[-1]["method"] == "elicitation/create"  # dropped: no result


async def _raw_request(port: int, head: bytes, body: bytes) -> bytes:
    """Sends bytes as they are (a body longer than its Content-Length) and reads the answer."""
    async with await anyio.connect_tcp("127.0.0.1", port) as conn:
        await conn.send(head + body)
        data = b""
        with anyio.move_on_after(DEADLINE):
            while b"\r\n\r\n" not in data:
                data += await conn.receive()
        return data


@pytest.mark.anyio
async def test_R_HTTP_5_a_body_larger_than_its_length_says_is_413_and_leaves_nothing() -> None:
    port_of: list[int] = []

    def small_app(server: Any, port: int) -> HttpApp:
        port_of.append(port)
        return HttpApp(server, options=rules.HttpOptions(port=port, max_body=1024))

    async with serving(small_app) as (app, _url):
        port = port_of[0]
        with anyio.fail_after(DEADLINE):
            body = json.dumps(_init()).encode() + b" " * 4096
            for length in (b"10", None):
                head = (
                    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % port
                    + b"Content-Type: application/json\r\n"
                    + b"Accept: application/json, text/event-stream\r\n"
                )
                if length is None:  # chunked, no length at all
                    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
                    answer = await _raw_request(
                        port, head + b"Transfer-Encoding: chunked\r\n\r\n", chunked
                    )
                    assert answer.startswith(b"HTTP/1.1 413"), answer[:80]
                else:
                    # A lying Content-Length: uvicorn (h11) reads 10 bytes; the request is not
                    # an initialize, so no session is made either way.
                    answer = await _raw_request(port, head + b"Content-Length: 10\r\n\r\n", body)
                    assert answer.split(b" ")[1] in (b"400", b"413"), answer[:80]
            assert len(app.sessions) == 0
            assert app.runtime.state.parked_total == 0


@pytest.mark.anyio
async def test_R_HTTP_3_bad_requests_get_their_status_and_leave_nothing_behind() -> None:
    async with serving(bearer_app) as (app, url), httpx2.AsyncClient(timeout=DEADLINE) as http:
        with anyio.fail_after(DEADLINE):
            alice = await Raw(http, url, as_("alice")).start()
            good = alice.headers("")
            init = json.dumps(_init()).encode()
            cases: list[tuple[dict[str, str], bytes, int]] = [
                ({**good, "origin": "https://evil.example"}, init, 403),
                ({**good, "origin": "null"}, init, 403),
                ({**good, "origin": "http://localhost.evil.example"}, init, 403),
                ({**good, "host": "evil.example"}, init, 421),
                ({**good, "content-type": "text/plain"}, init, 415),
                ({**good, "accept": "application/json"}, init, 406),
                ({**good, "mcp-protocol-version": "1999-01-01"}, init, 400),
                ({**good, "authorization": "Bearer wrong"}, init, 401),
                ({k: v for k, v in good.items() if k != "authorization"}, init, 401),
                (good, b"x" * (5 * 1024 * 1024), 413),
                (good, json.dumps(_call(1)).encode(), 400),  # no session, not initialize
                (
                    {
                        **as_("mallory"),
                        **{k: v for k, v in alice.headers().items() if k != "authorization"},
                    },
                    json.dumps(_call(1)).encode(),
                    404,
                ),
            ]
            for headers, body, status in cases:
                response = await http.post(url, content=body, headers=headers)
                assert response.status_code == status, (headers, response.text)
                assert "mcp-session-id" not in response.headers
            assert len(app.sessions) == 1  # Alice's only
            assert app.runtime.state.parked_total == 0
            assert len(app.runtime.state.calls) == 0


def _bare_call(request_id: int, tool: str) -> dict[str, Any]:
    params = {"name": tool, "arguments": {}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def _waiting_server() -> tuple[Server, anyio.Event]:
    """A server whose tool `wait` signals it started, then waits until cancelled; and `burst`,
    which logs six times without ever suspending, then answers."""
    started = anyio.Event()
    server = Server(
        "waiting",
        authorizer=lambda *_: Allow(),
        authorizer_source="configured",
        read_authorizer=lambda *_: Allow(),
    )

    @server.tool()
    async def wait() -> str:
        started.set()
        await anyio.Event().wait()
        return "never"

    @server.tool()
    async def burst(ctx: Context) -> str:
        for n in range(6):
            await ctx.log("info", f"line {n}")
        return "done"

    return server, started


@pytest.mark.anyio
async def test_R_HTTP_7_a_request_cancelled_before_its_answer_gets_a_stream_carrying_nothing() -> (
    None
):
    server, started = _waiting_server()
    with anyio.fail_after(20):
        async with serving_server(server) as (_app, url), httpx2.AsyncClient() as http:
            raw = await Raw(http, url).start()
            call = CallStream()
            async with anyio.create_task_group() as tg:
                tg.start_soon(call.run, raw, _bare_call(5, "wait"))
                await started.wait()
                cancel = {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": 5},
                }
                assert (await raw.post(cancel)).status_code == 202
                await call.done.wait()
            assert call.status == 200  # not 202: that answers notifications only
            assert call.messages == []


@pytest.mark.anyio
async def test_R_HTTP_7_messages_pushed_before_the_response_starts_are_all_sent() -> None:
    """Six logs pushed in the step that runs the tool, before the POST's response opens its
    stream, with a replay buffer of 3: none is trimmed away before the first connection."""
    server, _ = _waiting_server()

    def app_of(server: Server, port: int) -> HttpApp:
        return HttpApp(server, options=rules.HttpOptions(port=port, replay_events=3))

    with anyio.fail_after(20):
        async with serving_server(server, app_of) as (_app, url), httpx2.AsyncClient() as http:
            raw = await Raw(http, url).start()
            level = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "logging/setLevel",
                "params": {"level": "info"},
            }
            assert (await raw.post(level)).status_code == 200
            call = CallStream()
            await call.run(raw, _bare_call(2, "burst"))
            logs = [m["params"]["data"] for m in call.messages if "method" in m]
            assert logs == [f"line {n}" for n in range(6)]
            assert call.messages[-1]["result"]["content"][0]["text"] == "done"


@pytest.mark.anyio
async def test_R_HTTP_7_a_session_ended_while_its_body_arrives_is_404() -> None:
    server, _ = _waiting_server()
    with anyio.fail_after(20):
        async with serving_server(server) as (_app, url), httpx2.AsyncClient() as http:
            raw = await Raw(http, url).start()
            body = json.dumps(_bare_call(3, "wait")).encode()
            port = int(url.split(":")[2].split("/")[0])
            head = (
                f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
                "content-type: application/json\r\naccept: application/json, text/event-stream\r\n"
                f"mcp-session-id: {raw.sid}\r\nmcp-protocol-version: 2025-06-18\r\n"
                f"content-length: {len(body)}\r\n\r\n"
            ).encode()
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await stream.send(head + body[:5])
                gone = await http.delete(url, headers=raw.headers())
                assert gone.status_code == 204
                await stream.send(body[5:])
                reply = b""
                while b"\r\n" not in reply:
                    reply += await stream.receive()
            assert reply.startswith(b"HTTP/1.1 404"), reply


def test_askgate_serve_http_stops_on_sigterm_with_a_stream_open() -> None:
    """An open SSE stream never ends by itself; `askgate serve --http` still stops when told
    to (uvicorn's wait for open responses is bounded: SHUTDOWN_GRACE_S), and exits 0."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    command = [
        sys.executable,
        "-m",
        "askgate",
        "serve",
        "--demo",
        "--http",
        f"127.0.0.1:{port}",
        "--log-level",
        "info",
    ]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for _ in range(200):  # bounded: uvicorn says when it listens
            line = proc.stderr.readline()
            if not line or "serving Streamable HTTP on" in line:
                break
        assert proc.poll() is None, "the server did not start"
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(f"GET /sse HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n".encode())
            seen = b""
            while b"event: endpoint" not in seen:
                chunk = client.recv(4096)
                assert chunk, "the stream closed before its endpoint event"
                seen += chunk
            began = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=SHUTDOWN_GRACE_S + 20) == 0
            assert time.monotonic() - began < SHUTDOWN_GRACE_S + 20
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.anyio
async def test_R_HTTP_23_a_post_body_is_decoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    real = codec.decode  # the pure part below reads bodies without being counted
    decoded = count_decodes(monkeypatch)
    async with serving() as (_, url), httpx2.AsyncClient() as http:
        with anyio.fail_after(DEADLINE):
            raw = await Raw(http, url).start()  # an initialize, then a notification
            assert len(decoded) == 2
            call = json.dumps(_call(5, "echo", text="once")).encode()
            answered = await http.post(url, content=call, headers=raw.headers())
            assert answered.status_code == 200
            assert answered.json()["id"] == 5  # the shell and the reducer read the same call
            assert decoded[2:] == [call]
            bad = await http.post(url, content=b"{not json", headers=raw.headers())
            assert bad.status_code == 400
            assert bad.json()["error"]["code"] == -32700
            assert decoded[3:] == [b"{not json"]
    # The pure part: how a POST is answered, read from the decoded value.
    assert rules.classify(real(json.dumps(_init(3)).encode())) == rules.Body("initialize", 3)
    assert rules.classify(real(call)) == rules.Body("request", 5)
    assert rules.classify(real(b'{"jsonrpc":"2.0","method":"x"}')) == rules.Body("notification")
    assert rules.classify(real(b'{"jsonrpc":"2.0","id":"e","result":{}}')) == rules.Body("response")
    error = b'{"jsonrpc":"2.0","id":"e","error":{"code":1,"message":"no"}}'
    assert rules.classify(real(error)) == rules.Body("response")
    assert rules.classify(real(b"[]")) == rules.Body("invalid")


@pytest.mark.anyio
async def test_R_HTTP_19_a_stalled_reader_loses_its_connection_and_frees_the_session() -> None:
    """A GET whose client stops reading: past the stall cap the connection is closed, even with
    a write blocked on it, so the session has no open stream and may open a new GET."""

    def app_of(server: Server, port: int) -> HttpApp:
        return GetWatched(server, options=rules.HttpOptions(port=port))

    server = build_demo(configured=True)
    with anyio.fail_after(30):
        async with serving_server(server, app_of) as (app, url), httpx2.AsyncClient() as http:
            assert isinstance(app, GetWatched)
            raw = await Raw(http, url).start()
            level = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "logging/setLevel",
                "params": {"level": "info"},
            }
            assert (await raw.post(level)).status_code == 200
            port = int(url.split(":")[2].split("/")[0])
            stalled = socket.socket()
            stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stalled.connect(("127.0.0.1", port))
            try:
                request = (
                    f"GET /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
                    "accept: text/event-stream\r\nmcp-protocol-version: 2025-06-18\r\n"
                    f"mcp-session-id: {raw.sid}\r\n\r\n"
                ).encode()
                stalled.sendall(request)
                await app.writing.wait()  # the server holds the GET open
                assert app.sessions.by_id[raw.sid].get_open
                chunk = "x" * 100_000
                # 16 MB to a reader that never reads: the kernel's buffers take a few MB, and the
                # rest waits in the stream until it passes the 4 MiB cap.
                for _ in range(160):
                    server.log("info", chunk)
                    await anyio.lowlevel.checkpoint()
                await app.get_done.wait()
                session = app.sessions.by_id[raw.sid]
                assert (session.open_streams, session.get_open) == (0, False)
            finally:
                stalled.close()


def test_R_HTTP_7_how_a_request_post_is_answered() -> None:
    assert rules.request_answer(done=True, events=0, replied=True) == "json"
    assert rules.request_answer(done=True, events=0, replied=False) == "nothing"  # never 202
    assert rules.request_answer(done=True, events=2, replied=True) == "stream"
    assert rules.request_answer(done=False, events=0, replied=False) == "stream"  # keep-alive
    assert rules.request_answer(done=False, events=1, replied=False) == "stream"


def test_R_HTTP_44_forwarded_for_names_the_client_only_from_a_local_proxy() -> None:
    """From 127.0.0.1 the nearest address the proxies did not add (read from the end), the
    first when every hop is a proxy; from any other peer the peer, whatever the header says."""
    assert rules.forwarded_client("127.0.0.1", "192.0.2.7") == "192.0.2.7"
    assert rules.forwarded_client("127.0.0.1", "198.51.100.1, 192.0.2.7") == "192.0.2.7"
    assert rules.forwarded_client("127.0.0.1", "192.0.2.7, 127.0.0.1") == "192.0.2.7"
    assert rules.forwarded_client("127.0.0.1", "127.0.0.1,127.0.0.1") == "127.0.0.1"
    assert rules.forwarded_client("127.0.0.2", "192.0.2.7") == "127.0.0.2"
    assert rules.forwarded_client("203.0.113.9", "127.0.0.1") == "203.0.113.9"
