"""A soak: random clients against `askgate serve --demo` over stdio and Streamable HTTP for a
while, the server checking the reducer's invariants after every step.

    python bench/soak.py --duration 600 --transport both

Each server is the real command in a subprocess, run with ``ASKGATE_CHECK_INVARIANTS=1`` (the
runtime's debug mode: ``check_invariants`` after every step, and a log line on standard error
each time the largest size of one of the state's maps grows), on 127.0.0.1 for HTTP, with small
caps so parking, eviction and timeouts happen all the time. Random clients call the demo's
tools and, for the calls that ask, approve, decline, cancel the elicitation, let it time out,
answer with an error, cancel the call, or (HTTP) drop the call's stream and resume it with
``Last-Event-ID``; HTTP clients open sessions, end them and open new ones. Over stdio one
process serves one connection (its end of input ends the server), so the stdio clients share
it and never disconnect.

It prints, per transport: calls served, elicitations received, denials by detail, other
outcomes, the largest state the server saw, RSS and open descriptors at start and end and at
each minute, and any invariant failure (a failing check stops the server with a traceback,
which ends the run and is reported). Every loop is bounded in count and time. The figures are
written as JSON to ``--out`` when given.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.abc
import httpx2

CHECK_ENV = "ASKGATE_CHECK_INVARIANTS"
TIMEOUT_MS = 1500  # elicitation timeout: short, so "let it time out" costs little
CAPS = ["--max-parked", "3", "--max-parked-total", "8", "--elicitation-timeout-ms", str(TIMEOUT_MS)]
WAIT = TIMEOUT_MS / 1000 + 10  # the longest a client waits for anything
MAX_OPS_PER_CLIENT = 1_000_000  # the loops' count bound (time is the other)
SAMPLE_EVERY = 5.0
BEHAVIOURS = ("approve", "decline", "cancel", "timeout", "error", "cancel_call", "junk")
HTTP_BEHAVIOURS = (*BEHAVIOURS, "drop_and_resume")
LARGEST = re.compile(r"largest state so far: (.*)$")


async def wait_listening(url: str, log: object) -> None:
    """Until the HTTP server at ``url`` answers (any status), polling for at most ~10 s;
    exits naming ``log`` if it never does."""
    async with httpx2.AsyncClient(timeout=2) as probe:
        for _ in range(100):  # bounded
            try:
                await probe.get(url)
                return
            except httpx2.HTTPError:
                await anyio.sleep(0.1)
    raise SystemExit(f"the HTTP server did not start; see {log}")


def proc_figures(pid: int) -> tuple[int, int]:
    """RSS (KiB) and open descriptors of process ``pid``."""
    rss = 0
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


class Tally:
    """What the clients of one transport saw."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.denied: collections.Counter[str] = collections.Counter()
        self.problems: list[str] = []

    def outcome(self, message: dict[str, Any] | None) -> None:
        """Counts the answer to a tools/call (``None``: none came, as after a cancel)."""
        if message is None:
            self.counts["no answer"] += 1
            return
        if "error" in message:
            self.counts[f"error {message['error'].get('code')}"] += 1
            return
        result = message.get("result", {})
        payload = result.get("structuredContent") or {}
        if result.get("isError") and payload.get("error") == "authorization_required":
            self.denied[str(payload.get("detail"))] += 1
            self.counts["denied"] += 1
        elif result.get("isError"):
            self.counts["tool error"] += 1
        else:
            self.counts["served"] += 1


def call_message(request_id: object, rng: random.Random) -> tuple[dict[str, Any], str]:
    """A random tools/call and the tool it names."""
    tool = rng.choice(
        ("echo", "guarded_echo", "guarded_echo", "delete_file", "forbidden", "crash", "sleep")
    )
    token = f"t{rng.getrandbits(48):x}"
    arguments: dict[str, Any] = {"path": token} if tool == "delete_file" else {"text": token}
    if tool in ("forbidden", "crash"):
        arguments = {}
    elif tool == "sleep":
        arguments = {"ms": rng.randrange(300)}
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}, tool


def answer_for(behaviour: str, eid: object) -> dict[str, Any] | None:
    """The client's answer to elicitation ``eid`` under ``behaviour`` (None: no answer)."""
    if behaviour in {"approve", "drop_and_resume"}:
        result: object = {"action": "accept", "content": {"approve": True}}
    elif behaviour == "decline":
        result = {"action": "decline"}
    elif behaviour == "cancel":
        result = {"action": "cancel"}
    elif behaviour == "junk":
        result = {"action": "accept", "content": {"approve": "yes", "x": [1, 2]}}
    elif behaviour == "error":
        return {"jsonrpc": "2.0", "id": eid, "error": {"code": -1, "message": "no"}}
    else:
        return None
    return {"jsonrpc": "2.0", "id": eid, "result": result}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


TRACES: list[Path] = []
"""With ``--trace DIR``: the directory each server records its trace in (spec/audit.md)."""


def server_command(http_port: int | None, tokens: Path | None = None) -> list[str]:
    command = [sys.executable, "-m", "askgate", "serve", "--demo", *CAPS]
    if TRACES:  # every event and effect, arguments kept, for `askgate replay` and `explain`
        name = "stdio" if http_port is None else "http"
        trace = TRACES[0] / f"{name}.trace"
        keys = ["--trace-keys", str(trace.with_suffix(".keys"))]  # `replay --keys` (R-AUD-11)
        command += ["--trace", str(trace), "--trace-arguments", *keys]
    if http_port is not None:
        command += ["--http", f"127.0.0.1:{http_port}"]
    if tokens is not None:
        command += ["--auth", "bearer", "--tokens", str(tokens)]
    return command


def client_token(n: int) -> str:
    """The bearer token of HTTP client ``n``: each client is a principal of its own, so that
    its parked calls count against its own parking owner (R-PARK-1)."""
    return f"soak-client-{n}-token-0123456789abcdef"


class Sampler:
    """RSS and descriptors of the server every few seconds."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, int, int]] = []  # (seconds since start, rss KiB, fds)
        self.start = time.monotonic()

    def sample(self) -> None:
        try:
            rss, fds = proc_figures(self.pid)
        except OSError:
            return
        self.samples.append((time.monotonic() - self.start, rss, fds))

    async def run(self, until: float) -> None:
        for _ in range(1_000_000):
            self.sample()
            if time.monotonic() >= until:
                return
            await anyio.sleep(SAMPLE_EVERY)

    def per_minute(self) -> list[dict[str, float]]:
        minutes: list[dict[str, float]] = []
        for at, rss, fds in self.samples:
            if at >= 60 * len(minutes):
                minutes.append({"minute": len(minutes), "rss_kib": rss, "fds": fds})
        return minutes

    def span_from(self, seconds: float) -> dict[str, int]:
        """Smallest and largest RSS and fds from ``seconds`` on."""
        late = [(rss, fds) for at, rss, fds in self.samples if at >= seconds] or [(0, 0)]
        return {
            "rss_min_kib": min(r for r, _ in late),
            "rss_max_kib": max(r for r, _ in late),
            "fds_min": min(f for _, f in late),
            "fds_max": max(f for _, f in late),
        }


# -- stdio ------------------------------------------------------------------------------------


class StdioLink:
    """One stdio connection shared by several virtual clients: responses go to whoever waits
    for their id, elicitations to whoever's call they ask about (found by its token)."""

    def __init__(self, process: anyio.abc.Process, tally: Tally) -> None:
        self.process = process
        self.tally = tally
        self.waiting: dict[object, tuple[anyio.Event, list[dict[str, Any]]]] = {}
        self.asking: dict[str, Callable[[dict[str, Any]], None]] = {}
        self.lock = anyio.Lock()
        self.closed = anyio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        async with self.lock:
            await self.process.stdin.send(json.dumps(message).encode() + b"\n")

    async def read(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        try:
            async for chunk in self.process.stdout:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    self.dispatch(json.loads(line))
        finally:
            self.closed.set()

    def dispatch(self, message: dict[str, Any]) -> None:
        if message.get("method") == "elicitation/create":
            self.tally.counts["elicitations"] += 1
            text = json.dumps(message["params"].get("message", ""))
            for token, handler in list(self.asking.items()):
                if token in text:
                    handler(message)
                    return
            self.tally.counts["elicitation for no waiting call"] += 1
        elif "method" not in message and message.get("id") in self.waiting:
            event, box = self.waiting.pop(message["id"])
            box.append(message)
            event.set()

    async def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        event, box = anyio.Event(), cast(list[dict[str, Any]], [])
        self.waiting[message["id"]] = (event, box)
        await self.send(message)
        with anyio.move_on_after(timeout):
            await event.wait()
        self.waiting.pop(message["id"], None)
        return box[0] if box else None


async def stdio_call(link: StdioLink, request_id: str, rng: random.Random) -> None:
    """One random tools/call on the shared connection, its elicitation answered as drawn."""
    message, _ = call_message(request_id, rng)
    behaviour = rng.choice(BEHAVIOURS)
    arguments = message["params"]["arguments"]
    token = str(arguments.get("text") or arguments.get("path") or "")
    asks: list[dict[str, Any]] = []
    asked = anyio.Event()

    def on_ask(ask: dict[str, Any]) -> None:
        asks.append(ask)
        asked.set()

    async def answer(done: anyio.Event) -> None:
        await asked.wait()
        if behaviour == "cancel_call":
            cancel = {"requestId": request_id, "reason": "soak"}
            await link.send(
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
            )
            done.set()  # a cancelled request gets no answer
        elif (out := answer_for(behaviour, asks[0]["id"])) is not None:
            await link.send(out)

    if token:
        link.asking[token] = on_ask
    event, box = anyio.Event(), cast(list[dict[str, Any]], [])
    link.waiting[request_id] = (event, box)
    try:
        await link.send(message)
        with anyio.move_on_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(answer, event)
                await event.wait()
                tg.cancel_scope.cancel()
    finally:
        link.waiting.pop(request_id, None)
        link.asking.pop(token, None)
    if behaviour == "cancel_call" and asks and not box:
        link.tally.counts["cancelled calls"] += 1
    else:
        link.tally.outcome(box[0] if box else None)


async def stdio_client(link: StdioLink, n: int, rng: random.Random, until: float) -> None:
    for op in range(MAX_OPS_PER_CLIENT):
        if time.monotonic() >= until or link.closed.is_set():
            return
        request_id = f"c{n}-{op}"
        if rng.random() < 0.1:
            reply = await link.request({"jsonrpc": "2.0", "id": request_id, "method": "ping"}, WAIT)
            link.tally.counts["pings answered" if reply else "pings lost"] += 1
        else:
            await stdio_call(link, request_id, rng)


async def soak_stdio(duration: float, clients: int, seed: int, log: Path) -> dict[str, Any]:
    tally = Tally()
    env = {**os.environ, CHECK_ENV: "1"}
    with open(log, "wb") as stderr:
        process = await anyio.open_process(
            server_command(None),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
        )
    link = StdioLink(process, tally)
    sampler = Sampler(process.pid)
    until = time.monotonic() + duration
    async with process:
        async with anyio.create_task_group() as tg:
            tg.start_soon(link.read)
            init = {
                "jsonrpc": "2.0",
                "id": "init",
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"elicitation": {}},
                    "clientInfo": {"name": "soak", "version": "0"},
                },
            }
            reply = await link.request(init, WAIT)
            if reply is None:
                raise SystemExit(f"the stdio server did not initialize; see {log}")
            await link.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            sampler.sample()
            async with anyio.create_task_group() as clients_tg:
                clients_tg.start_soon(sampler.run, until)
                for n in range(clients):
                    clients_tg.start_soon(stdio_client, link, n, random.Random(seed + n), until)
            sampler.sample()
            assert process.stdin is not None
            await process.stdin.aclose()
            with anyio.move_on_after(30):
                await process.wait()
            tg.cancel_scope.cancel()
        if process.returncode is None:
            process.kill()
            await process.wait()
    return report("stdio", tally, sampler, log, process.returncode)


# -- HTTP -------------------------------------------------------------------------------------


class HttpClient:
    """One client over raw Streamable HTTP: sessions, calls, answers, dropped streams."""

    def __init__(self, url: str, tally: Tally, rng: random.Random, token: str) -> None:
        self.url = url
        self.tally = tally
        self.rng = rng
        self.sid = ""
        self.token = token

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "authorization": f"Bearer {self.token}",
            "mcp-protocol-version": "2025-11-25",
            **extra,
        }
        if self.sid:
            headers["mcp-session-id"] = self.sid
        return headers

    async def open(self, http: httpx2.AsyncClient) -> bool:
        self.sid = ""
        params = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "soak", "version": "0"},
        }
        message = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
        response = await http.post(self.url, json=message, headers=self.headers())
        if response.status_code != 200:
            self.tally.counts[f"initialize {response.status_code}"] += 1
            return False
        self.sid = response.headers["mcp-session-id"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await http.post(self.url, json=note, headers=self.headers())
        self.tally.counts["sessions opened"] += 1
        return True

    async def close(self, http: httpx2.AsyncClient) -> None:
        if self.sid:
            response = await http.delete(self.url, headers=self.headers())
            self.tally.counts[f"session delete {response.status_code}"] += 1
            self.sid = ""

    async def stream(
        self,
        http: httpx2.AsyncClient,
        method: str,
        on_message: Callable[[dict[str, Any], str], Any],
        **kw: Any,
    ) -> tuple[int, str]:
        """Reads one response as SSE (or JSON), handing each message and its event id to
        ``on_message``, which returns "stop" to stop reading; returns the status and the last
        event id seen."""
        last = ""
        async with http.stream(method, self.url, headers=kw.pop("headers"), **kw) as response:
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                body = await response.aread()
                if response.status_code == 200 and body:
                    await on_message(json.loads(body), "")
                return response.status_code, last
            fields: dict[str, str] = {}
            async for line in response.aiter_lines():
                if line:
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")
                    continue
                last = fields.get("id", last)
                data = fields.get("data")
                if data and await on_message(json.loads(data), last) == "stop":
                    return response.status_code, last
                fields = {}
        return response.status_code, last

    async def one_call(self, http: httpx2.AsyncClient, request_id: str) -> None:
        message, tool = call_message(request_id, self.rng)
        behaviour = self.rng.choice(HTTP_BEHAVIOURS)
        box: list[dict[str, Any]] = []
        dropped: list[object] = []  # the elicitation whose stream was dropped

        async def on_message(got: dict[str, Any], _event_id: str) -> str | None:
            if got.get("method") == "elicitation/create" and dropped:
                return None  # replayed on resume: answered already
            if got.get("method") == "elicitation/create":
                self.tally.counts["elicitations"] += 1
                if behaviour == "cancel_call":
                    cancel = {
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": request_id, "reason": "soak"},
                    }
                    await http.post(self.url, json=cancel, headers=self.headers())
                    return "stop"
                answer = answer_for(behaviour, got["id"])
                if behaviour == "drop_and_resume":
                    dropped.append(got["id"])
                    return "stop"  # leaves the stream: the connection closes
                if answer is not None:
                    await http.post(self.url, json=answer, headers=self.headers())
                return None
            if got.get("id") == request_id and "method" not in got:
                box.append(got)
                return "stop"
            return None

        with anyio.move_on_after(WAIT):
            status, last = await self.stream(
                http, "POST", on_message, json=message, headers=self.headers()
            )
            if status != 200:
                self.tally.counts[f"tools/call {status}"] += 1
                return
            if dropped:
                self.tally.counts["streams dropped"] += 1
                answer = answer_for("approve", dropped[0])
                await http.post(self.url, json=answer, headers=self.headers())
                resumed, _ = await self.stream(
                    http, "GET", on_message, headers=self.headers(**{"last-event-id": last})
                )
                self.tally.counts[f"resume {resumed}"] += 1
        if behaviour == "cancel_call" and not box and tool in ("guarded_echo", "delete_file"):
            self.tally.counts["cancelled calls"] += 1
            return
        self.tally.outcome(box[0] if box else None)


async def http_client(url: str, n: int, tally: Tally, seed: int, until: float) -> None:
    rng = random.Random(seed)
    client = HttpClient(url, tally, rng, client_token(n))
    limits = httpx2.Limits(max_connections=8, max_keepalive_connections=4)
    async with httpx2.AsyncClient(timeout=WAIT, limits=limits) as http:
        for op in range(MAX_OPS_PER_CLIENT):
            if time.monotonic() >= until:
                break
            try:
                if not client.sid:
                    with anyio.move_on_after(WAIT):
                        await client.open(http)
                    if not client.sid:
                        continue
                if rng.random() < 0.05:
                    await client.close(http)  # a session ends; the next op opens another
                    continue
                if rng.random() < 0.2:  # a burst: several calls at once, past the caps
                    async with anyio.create_task_group() as burst:
                        for k in range(rng.randint(2, 5)):
                            burst.start_soon(client.one_call, http, f"c{n}-{op}-{k}")
                else:
                    await client.one_call(http, f"c{n}-{op}")
            except (httpx2.HTTPError, OSError) as exc:
                tally.counts[f"client error {type(exc).__name__}"] += 1
                client.sid = ""
        with anyio.move_on_after(WAIT):
            await client.close(http)


async def soak_http(duration: float, clients: int, seed: int, log: Path) -> dict[str, Any]:
    tally = Tally()
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    env = {**os.environ, CHECK_ENV: "1"}
    tokens = log.with_name(log.name + ".tokens")
    tokens.write_text("".join(f"client-{n} {client_token(n)}\n" for n in range(clients)))
    with open(log, "wb") as stderr:
        process = await anyio.open_process(
            server_command(port, tokens),
            stdin=subprocess.DEVNULL,
            stdout=stderr,
            stderr=stderr,
            env=env,
        )
    sampler = Sampler(process.pid)
    async with process:
        await wait_listening(url, log)
        sampler.sample()
        until = time.monotonic() + duration
        async with anyio.create_task_group() as tg:
            tg.start_soon(sampler.run, until)
            for n in range(clients):
                tg.start_soon(http_client, url, n, tally, seed + n, until)
        sampler.sample()
        process.terminate()
        with anyio.move_on_after(30):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
    return report("http", tally, sampler, log, process.returncode)


# -- the report -------------------------------------------------------------------------------


def report(
    transport: str, tally: Tally, sampler: Sampler, log: Path, exit_status: int | None
) -> dict[str, Any]:
    text = log.read_text(encoding="utf-8", errors="replace")
    largest = ""
    for line in text.splitlines():
        if match := LARGEST.search(line):
            largest = match.group(1)
    failures = [line for line in text.splitlines() if "InvariantError" in line]
    start, end = sampler.samples[0], sampler.samples[-1]
    return {
        "transport": transport,
        "seconds": round(end[0], 1),
        "counts": dict(sorted(tally.counts.items())),
        "denied_by_detail": dict(sorted(tally.denied.items())),
        "largest_state": largest,
        "invariant_failures": failures,
        # the demo's crash tool raises on purpose: its tracebacks are logged and expected
        "tracebacks": text.count("Traceback") - text.count("callback failed: tool crash"),
        "server_exit": exit_status,
        "rss_kib": {"start": start[1], "end": end[1]},
        "fds": {"start": start[2], "end": end[2]},
        "from_minute_2": sampler.span_from(120),
        "per_minute": sampler.per_minute(),
    }


def print_report(figures: dict[str, Any]) -> None:
    print(f"== {figures['transport']}: {figures['seconds']} s")
    for name, count in figures["counts"].items():
        print(f"  {name}: {count}")
    print("  denied by detail:")
    for detail, count in figures["denied_by_detail"].items():
        print(f"    {detail}: {count}")
    print(f"  largest state: {figures['largest_state']}")
    print(f"  invariant failures: {len(figures['invariant_failures'])}")
    for line in figures["invariant_failures"][:5]:
        print(f"    {line}")
    print(
        f"  tracebacks on stderr (beside the crash tool's): {figures['tracebacks']}; "
        f"server exit {figures['server_exit']}"
    )
    print(f"  RSS KiB start {figures['rss_kib']['start']} end {figures['rss_kib']['end']}")
    print(f"  fds start {figures['fds']['start']} end {figures['fds']['end']}")
    print(f"  from minute 2: {figures['from_minute_2']}")
    for minute in figures["per_minute"]:
        print(f"    minute {minute['minute']}: RSS {minute['rss_kib']} KiB, fds {minute['fds']}")


async def main(args: argparse.Namespace) -> int:
    logs = Path(tempfile.mkdtemp(prefix="askgate-soak-"))
    if args.trace is not None:
        args.trace.mkdir(parents=True, exist_ok=True)
        TRACES.append(args.trace)
    results: list[dict[str, Any]] = []

    async def run(which: str) -> None:
        log = logs / f"{which}.log"
        if which == "stdio":
            results.append(await soak_stdio(args.duration, args.clients, args.seed, log))
        else:
            results.append(await soak_http(args.duration, args.clients, args.seed, log))

    which = ("stdio", "http") if args.transport == "both" else (args.transport,)
    async with anyio.create_task_group() as tg:
        for name in which:
            tg.start_soon(run, name)
    for figures in sorted(results, key=lambda f: str(f["transport"])):
        print_report(figures)
    print(f"server logs: {logs}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    bad = any(
        f["invariant_failures"] or f["tracebacks"] or f["server_exit"] not in (0, None)
        for f in results
    )
    return 1 if bad else 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per transport")
    parser.add_argument("--transport", choices=("stdio", "http", "both"), default="both")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", help="write the figures as JSON here")
    parser.add_argument(
        "--trace", type=Path, metavar="DIR", help="each server records its trace in DIR"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(anyio.run(main, parse()))
