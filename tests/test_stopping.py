"""R-STOP-1: a server told to stop ends every open call with an answer to its owner; the
reducer and the reference model (models/reference.py) alike."""

from __future__ import annotations

import json
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import httpx2
import pytest

from askgate.core import (
    Allow,
    Ask,
    CancelTimer,
    Emit,
    KillWorker,
    Options,
    Push,
    ReadRequested,
    ServerStopping,
    SubscriberAttached,
    ToolCallReceived,
    ToolRequested,
    WorkerFinished,
)
from askgate.core.events import ClientInitialized
from askgate.models.reference import ReferenceModel
from askgate.transports.http_server import SHUTDOWN_GRACE_S
from askgate.transports.stdio import DRAIN_SECONDS
from tests.harness import Harness, deny_payload, records, replies
from tests.test_modern import APPROVE, ask, call, harness

FORM: dict[str, Any] = {
    "mode": "form",
    "message": "name?",
    "requestedSchema": {"type": "object", "properties": {"n": {"type": "string"}}},
}


def test_R_STOP_1_every_open_call_is_answered_and_every_prompt_withdrawn() -> None:
    h = Harness(has_authorizer=True, has_read_authorizer=True)
    h.connect("a", {"elicitation": {}, "sampling": {}})
    eid = h.park("a", 1)  # parked
    h.call("a", 2)  # its authorizer running
    authorizer = h.worker()
    tool = h.allow("a", 3)  # its tool running, with a request of its own
    asked = h.feed(ToolRequested(tool, "t", "elicitation/create", FORM, 0))
    own = next(p.message["id"] for p in asked if isinstance(p, Push))
    h.feed(ReadRequested("a", 4, "resources/read", {"uri": "demo://x"}, 0))  # a read
    reader = h.worker()
    h.park("a", 5, mode="push")  # parked in push mode: answered with nothing already

    effects = h.feed(ServerStopping(9))

    assert len(h.state.calls) == 0
    assert len(h.state.parked) == 0
    assert len(h.state.workers) == 0
    assert len(h.state.client_requests) == 0
    for ref in (authorizer, tool, reader):
        assert KillWorker(ref) in effects
        assert CancelTimer(("worker", ref)) in effects
    assert CancelTimer(("elicitation", eid)) in effects
    withdrawn = [
        p.message["params"]
        for p in effects
        if isinstance(p, Push) and p.message.get("method") == "notifications/cancelled"
    ]
    assert {"requestId": eid, "reason": "server stopping"} in withdrawn
    assert {"requestId": own, "reason": "request cancelled"} in withdrawn
    assert len(withdrawn) == 3  # two prompts, the tool's own request
    answered = {r.request_id: r.message or {} for r in replies(effects)}
    assert set(answered) == {1, 2, 3, 4}
    parked = deny_payload(answered[1])
    assert (parked["decision"], parked["detail"]) == ("ask", "server stopping")
    assert parked["message"] == "echo was not run: the server is stopping"
    authorizing = deny_payload(answered[2])
    assert (authorizing["decision"], authorizing["detail"]) == ("deny", "server stopping")
    running = answered[3]["result"]
    assert running["isError"] is True
    assert running["structuredContent"] == {"error": "server_stopping"}
    assert answered[4]["error"]["data"] == {
        "error": "server_stopping",
        "method": "resources/read",
    }
    pushed = [
        p for p in effects if isinstance(p, Push) and p.related == 5 and "result" in p.message
    ]
    assert len(pushed) == 1  # the push-mode call's deny (R-DLV-3)
    assert deny_payload(pushed[0].message)["detail"] == "server stopping"
    ended = {r["request_id"]: (r["outcome"], r["detail"]) for r in records(effects)}
    assert ended == {
        1: ("denied", "server stopping"),
        2: ("denied", "server stopping"),
        3: ("stopped", None),
        5: ("denied", "server stopping"),
    }
    # Calls end in admission order, each answer after its withdrawal.
    order = [r.request_id for r in replies(effects)]
    assert order == [1, 2, 3, 4]
    # Stopping again, or with nothing open, does nothing.
    assert h.feed(ServerStopping(10)) == []


def test_R_STOP_1_the_reference_model_ends_calls_the_same_way() -> None:
    options = Options(has_authorizer=True)
    model = ReferenceModel(options, [("echo", False)])
    model.apply(SubscriberAttached("a"))
    model.apply(ClientInitialized("a", {"elicitation": {}}))
    model.apply(ToolCallReceived("a", 1, "echo", {}, 0))
    (first,) = [c.worker for c in model.calls if c.worker is not None]
    model.apply(WorkerFinished(first, Ask("ok?"), 0))
    model.apply(ToolCallReceived("a", 2, "echo", {}, 0))
    second = next(c.worker for c in model.calls if c.request_id == 2 and c.worker is not None)
    model.apply(WorkerFinished(second, Allow(), 0))
    eid = next(str(c.elicitation_id) for c in model.calls if c.request_id == 1)

    effects = model.apply(ServerStopping(5))

    assert model.calls == []
    assert any(
        isinstance(e, Push)
        and e.message.get("params") == {"requestId": eid, "reason": "server stopping"}
        for e in effects
    )
    answered = {r.request_id: r.message or {} for r in replies(effects)}
    assert deny_payload(answered[1])["detail"] == "server stopping"
    assert answered[2]["result"]["structuredContent"] == {"error": "server_stopping"}
    outcomes = [e.fields["outcome"] for e in effects if isinstance(e, Emit)]
    assert outcomes == ["denied", "stopped"]


# -- the whole process, told to stop with a parked call -------------------------------------------

DEADLINE = 60.0
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
CALL = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "guarded_echo", "arguments": {"text": "hi"}},
}


class Lines:
    """A pipe's lines, read by a thread, each waited for under the deadline (a buffered
    reader may hold lines a ``select`` on its descriptor would not see)."""

    def __init__(self, stream: Any) -> None:
        self.queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.queue.put(line)
        self.queue.put("")

    def next(self) -> dict[str, Any]:
        line = self.queue.get(timeout=DEADLINE)
        assert line, "the server closed its output"
        message: dict[str, Any] = json.loads(line)
        return message

    def rest(self) -> str:
        """What follows, up to the end of the output."""
        text = ""
        while line := self.queue.get(timeout=DEADLINE):
            text += line
        return text


def _check_stopped_call(messages: list[dict[str, Any]], eid: str) -> None:
    """The prompt withdrawn, then the call denied `server stopping` (R-STOP-1)."""
    withdrawn = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": eid, "reason": "server stopping"},
    }
    assert withdrawn in messages, messages
    (reply,) = [m for m in messages if m.get("id") == 2]
    assert messages.index(withdrawn) < messages.index(reply)
    payload = deny_payload(reply)
    assert (payload["detail"], payload["decision"]) == ("server stopping", "ask")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_R_STOP_1_stdio_answers_a_parked_call_and_exits_0(
    backend: str, signum: signal.Signals
) -> None:
    command = [sys.executable, "-m", "askgate", "serve", "--demo", "--backend", backend]
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        for message in (INITIALIZE, INITIALIZED, CALL):
            proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        lines = Lines(proc.stdout)
        assert lines.next()["id"] == 1
        asked = lines.next()
        assert asked["method"] == "elicitation/create"
        began = time.monotonic()
        proc.send_signal(signum)  # the client never answers the prompt
        messages = [lines.next(), lines.next()]
        assert proc.wait(timeout=DRAIN_SECONDS + 20) == 0
        assert time.monotonic() - began < DRAIN_SECONDS + 20
        assert lines.rest() == ""  # nothing more
        _check_stopped_call(messages, str(asked["id"]))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEADLINE)


def _http_demo() -> tuple[subprocess.Popen[str], str]:
    """``askgate serve --demo --http`` on a free port of 127.0.0.1, once it listens, and its
    base URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "askgate", "serve", "--demo", "--http", f"127.0.0.1:{port}"]
    proc = subprocess.Popen([*command, "--log-level", "info"], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for _ in range(200):  # bounded: the server says when it listens
        line = proc.stderr.readline()
        if not line or "serving Streamable HTTP on" in line:
            break
    assert proc.poll() is None, "the server did not start"
    return proc, f"http://127.0.0.1:{port}"


def test_R_STOP_1_http_answers_a_parked_call_on_its_stream_and_exits_0() -> None:
    proc, base = _http_demo()
    url = f"{base}/mcp"
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2025-06-18",
    }
    try:
        with httpx2.Client(timeout=DEADLINE) as http:
            started = http.post(url, json=INITIALIZE, headers=headers)
            headers["mcp-session-id"] = started.headers["mcp-session-id"]
            assert http.post(url, json=INITIALIZED, headers=headers).status_code == 202
            messages: list[dict[str, Any]] = []
            began = 0.0
            with http.stream("POST", url, json=CALL, headers=headers) as stream:
                for line in stream.iter_lines():  # ends when the server ends the stream
                    if not line.startswith("data: ") or line == "data: ":
                        continue
                    messages.append(json.loads(line[len("data: ") :]))
                    if messages[-1].get("method") == "elicitation/create":
                        began = time.monotonic()
                        proc.send_signal(signal.SIGTERM)  # the prompt is never answered
        assert messages[0]["method"] == "elicitation/create"
        _check_stopped_call(messages[1:], str(messages[0]["id"]))
        assert proc.wait(timeout=SHUTDOWN_GRACE_S + 20) == 0
        # The call was answered at once: no open response made uvicorn wait out its grace.
        assert time.monotonic() - began < SHUTDOWN_GRACE_S, time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEADLINE)


def test_R_STOP_1_http_ends_a_legacy_sse_stream_with_its_answers_and_exits_0() -> None:
    """A 2024-11-05 ``/sse`` stream ends once it carries the stop's answers, so uvicorn has
    no open response to wait its grace out for."""
    proc, base = _http_demo()
    try:
        with httpx2.Client(timeout=DEADLINE) as http:
            messages: list[dict[str, Any]] = []
            began = 0.0
            with http.stream("GET", f"{base}/sse") as stream:
                event = ""
                for line in stream.iter_lines():  # ends when the server ends the stream
                    if line.startswith("event: "):
                        event = line[len("event: ") :]
                    if not line.startswith("data: "):
                        continue
                    data = line[len("data: ") :]
                    if event == "endpoint":
                        post = f"{base}{data}"
                        for message in (INITIALIZE, INITIALIZED, CALL):
                            assert http.post(post, json=message).status_code == 202
                        continue
                    messages.append(json.loads(data))
                    if messages[-1].get("method") == "elicitation/create":
                        began = time.monotonic()
                        proc.send_signal(signal.SIGTERM)  # the prompt is never answered
            ended = time.monotonic() - began
        assert messages[0]["id"] == 1  # the initialize answer
        assert messages[1]["method"] == "elicitation/create"
        _check_stopped_call(messages[2:], str(messages[1]["id"]))
        assert proc.wait(timeout=SHUTDOWN_GRACE_S + 20) == 0
        # The stream ended with its answers, not when uvicorn's grace ran out.
        assert ended < SHUTDOWN_GRACE_S, ended
        assert time.monotonic() - began < SHUTDOWN_GRACE_S, time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEADLINE)


def test_R_STOP_1_a_modern_nonce_is_not_an_open_call_and_stays_parked() -> None:
    """The input-required result already answered its request: stopping sends it nothing."""
    h = harness()
    state = ask(h, "c", 1)["requestState"]
    assert len(h.state.parked) == 1
    assert h.feed(ServerStopping(h.now)) == []
    assert len(h.state.parked) == 1  # the process ends with it
    # Until the process ends the nonce still answers its retry as before.
    assert h.worker(call(h, "c", 2, state=state, responses=APPROVE)) is not None


def test_R_HTTP_45_a_delete_during_a_stop_is_answered_and_other_requests_are_503() -> None:
    """While the app stops, a session's DELETE ends it (204), another request is 503 and the
    deleted session is gone (404 for a DELETE naming it again); once the app no longer runs a
    DELETE is 503 too. Served by askgate's own HTTP/1.1 server on 127.0.0.1."""
    import anyio  # noqa: PLC0415

    from askgate.core import http as rules  # noqa: PLC0415
    from askgate.demo import build_demo  # noqa: PLC0415
    from askgate.transports.http import HttpApp  # noqa: PLC0415

    from .listener import askgate_serving  # noqa: PLC0415

    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2025-06-18",
    }

    def opened(url: str) -> dict[str, str]:
        with httpx2.Client(timeout=DEADLINE) as http:
            started = http.post(url, json=INITIALIZE, headers=headers)
            session = {**headers, "mcp-session-id": started.headers["mcp-session-id"]}
            assert http.post(url, json=INITIALIZED, headers=session).status_code == 202
        return session

    def stopping(url: str, session: dict[str, str]) -> list[int]:
        with httpx2.Client(timeout=DEADLINE) as http:
            ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
            return [
                http.post(url, json=ping, headers=session).status_code,
                http.delete(url, headers=session).status_code,
                http.delete(url, headers=session).status_code,
            ]

    def deleted(url: str, session: dict[str, str]) -> int:
        with httpx2.Client(timeout=DEADLINE) as http:
            return http.delete(url, headers=session).status_code

    async def scenario() -> tuple[list[int], int]:
        def make(port: int) -> HttpApp:
            return HttpApp(build_demo(configured=True), options=rules.HttpOptions(port=port))

        async with askgate_serving(make) as (app, port):
            url = f"http://127.0.0.1:{port}/mcp"
            with anyio.fail_after(DEADLINE):
                async with app.running():
                    session = await anyio.to_thread.run_sync(opened, url)
                    app.stop()
                    during = await anyio.to_thread.run_sync(stopping, url, session)
                after = await anyio.to_thread.run_sync(deleted, url, session)
        return during, after

    during, after = anyio.run(scenario, backend="asyncio")
    assert during == [503, 204, 404]
    assert after == 503
