"""MCP servers over stdio, side by side: echo tools/call throughput, ping latency, CPU per call.

    python bench/stdio_bench.py --server "python bench/sdk_echo_server.py" --label sdk \\
        [--server "python -m askgate serve --stdio --demo" --label askgate] \\
        [--calls 5000] [--in-flight 32] [--pings 1000] [--rounds 3] [--out bench/results/stdio.json]

Each ``--server`` is a command line (split like a shell would, no shell involved) that serves MCP
on its stdin/stdout and has a tool ``echo(text)`` that returns ``text`` as one text content block
and runs without asking. ``--label`` names the servers in order (default: ``server1``, ...). The
servers are run one after the other, each in a fresh process, and measured the same way:

1. handshake: ``initialize`` (protocolVersion 2025-06-18), ``notifications/initialized``, then
   ``tools/list``, which must list ``echo``; a server that does not answer either within
   ``--init-timeout`` seconds, or exits, is reported as failed and the others still run;
2. warm-up: ``--warmup`` echo calls, pipelined like the next phase, not measured;
3. throughput: ``--calls`` echo ``tools/call`` requests with exactly ``--in-flight`` outstanding
   (the window is refilled as replies arrive), every reply checked; calls/s over wall time, and
   the server's CPU time (user+sys from ``/proc/<pid>/stat``, summed over its process tree,
   including reaped children) across this phase divided by the number of calls;
4. latency: ``--pings`` sequential ``ping`` requests, p50 and p99 round trip in microseconds
   (and p10, p25, p75, p90 and the max: the distribution the report draws);
5. elicitation: ``--elicitations`` sequential calls of ``guarded_echo(text)``, each answered
   when the server asks (its ``elicitation/create``) with ``accept`` and ``{"approve": true}``;
   the round trip from the call to its result, p50 and p99 in microseconds. A server that lists
   no ``guarded_echo`` reports no figure here (n/a), and ``--elicitations 0`` skips the phase.

Beside these, each server's start-up (from starting its process to the ``initialize`` result,
in milliseconds) and its peak resident memory at the end (``VmHWM`` of its process tree, KiB).
The client declares the form elicitation capability in ``initialize``.

The client speaks raw JSON-RPC lines over the pipes, from one thread, with ``poll`` deadlines on
every read; its own CPU per call and its CPU utilisation during the throughput phase are reported
too, so that a saturated client (utilisation near 1.0) shows instead of passing for a slow server.
A watchdog kills a server that is still running ``--timeout`` seconds after it was started.

With ``--rounds R`` (default 3) the servers take turns R times, a fresh process each time, and
each figure is the median of the rounds; a server that fails once is not run again. The table
goes to stdout; the figures, one object per label, to ``--out`` as JSON. The exit status is 0
when at least one server completed, 1 when all of them failed.

With ``--profile DIR`` each server written ``PYTHON [-opts] -m MODULE ...`` or ``PYTHON
SCRIPT.py ...`` is run in-process under a CPU-time stack sampler (``SIGPROF`` every
``--profile-hz`` of its CPU time; the kernel's tick bounds the rate), switched on for exactly
the throughput phase (``SIGUSR1`` / ``SIGUSR2`` from the client). The stacks of every round go
to ``DIR/<label>.folded`` (one ``frame;frame;... count`` per line, flame-graph input); those of
the elicitation phase, sampled the same way, to ``DIR/<label>.1.folded`` (:func:`phase_file`:
each ``SIGUSR2`` starts the next phase's file). The report adds, per server, the functions
taking the most CPU per call (self and inclusive, in microseconds: the share of samples times
the server CPU per call; for the elicitation phase, shares only). The sampler costs about one
percent; the figures of a profiled run are still its own. Stacks are those of the main
thread: CPU spent in other threads is counted where the main thread stands (waiting, often).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import platform
import runpy
import select
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

PROTOCOL_VERSION = "2025-06-18"
CLIENT_INFO = {"name": "askgate-stdio-bench", "version": "0.1.0"}
READ_CHUNK = 1 << 16
STDERR_TAIL = 2000


class BenchError(Exception):
    """A server failed the run; the message says how, for the report."""


class NoReplyError(BenchError):
    """A read's deadline passed (the server is still running)."""


@dataclass
class Config:
    calls: int
    in_flight: int
    pings: int
    warmup: int
    text: str
    init_timeout: float
    timeout: float
    elicitations: int = 0
    profiled: bool = False


@dataclass
class Result:
    label: str
    command: list[str]
    ok: bool = False
    error: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"label": self.label, "command": self.command, "ok": self.ok}
        if self.error is not None:
            out["error"] = self.error
        out.update(self.figures)
        return out


# --- server CPU from /proc ------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid: int) -> list[bytes] | None:
    """Fields of /proc/<pid>/stat from field 3 (state) on; None when the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces or parentheses.
    return raw[raw.rindex(b")") + 2 :].split()


def _children(pid: int) -> list[int]:
    """Live child processes of pid (from /proc/<pid>/task/*/children, else a scan of /proc)."""
    tasks = Path(f"/proc/{pid}/task")
    try:
        files = [t / "children" for t in tasks.iterdir()]
    except OSError:
        return []
    if files and files[0].exists():
        kids: list[int] = []
        for f in files:
            try:
                kids.extend(int(x) for x in f.read_text().split())
            except OSError:
                continue
        return kids
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and int(fields[1]) == pid:
                found.append(int(entry))
    return found


def tree_peak_rss_kib(pid: int) -> int | None:
    """The sum of VmHWM (peak resident set) over pid and its live descendants, in KiB."""
    total = 0
    for each in [pid, *_children(pid)]:
        try:
            status = Path(f"/proc/{each}/status").read_text()
        except OSError:
            if each == pid:
                return None
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1])
    return total


def tree_cpu_seconds(pid: int) -> float | None:
    """User+system CPU of pid and its live descendants, plus the children they have reaped.

    Counting reaped children keeps the sum continuous when a descendant exits and is waited for
    during a measurement. None when /proc is not there.
    """
    if not Path("/proc/self/stat").exists():
        return None
    ticks = 0
    stack = [pid]
    seen: set[int] = set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        fields = _stat_fields(p)
        if fields is None:
            continue
        # utime, stime, cutime, cstime are fields 14..17, i.e. indexes 11..14 from field 3.
        ticks += sum(int(v) for v in fields[11:15])
        stack.extend(_children(p))
    return ticks / CLK_TCK


# --- the pipe client --------------------------------------------------------------------------


class WatchedProcess:
    """A server process in its own process group, killed by a watchdog past its timeout.

    The stdio and HTTP benchmarks' servers share this; ``OUTPUT`` names where its output went.
    """

    OUTPUT = "output"

    def __init__(
        self, label: str, argv: list[str], timeout: float, stderr: IO[bytes], **popen: Any
    ) -> None:
        self.label = label
        self.stderr = stderr
        self.killed_by_watchdog = False
        try:
            self.proc = subprocess.Popen(
                argv,
                stderr=self.stderr,
                start_new_session=True,  # its own process group, so that a stop reaches all of it
                **popen,
            )
        except OSError as exc:
            raise BenchError(f"server {label} could not be started: {exc}") from exc
        self.started = time.monotonic()
        self.hard_deadline = self.started + timeout
        self.watchdog = threading.Timer(timeout, self._kill)
        self.watchdog.daemon = True
        self.watchdog.start()

    def _kill(self) -> None:
        if self.proc.poll() is None:
            self.killed_by_watchdog = True
            self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        """sig to the server's process group (what it started too), else to the server alone."""
        try:
            os.killpg(self.proc.pid, sig)
        except OSError:
            with suppress(OSError):
                self.proc.send_signal(sig)

    def stderr_tail(self) -> str:
        self.stderr.flush()
        self.stderr.seek(0, os.SEEK_END)
        size = self.stderr.tell()
        self.stderr.seek(max(0, size - STDERR_TAIL))
        return self.stderr.read().decode("utf-8", "replace").strip()

    def budget(self) -> float:
        return round(self.hard_deadline - self.started, 1)

    def gone(self, how: str) -> BenchError:
        """The error for a server that stopped doing its part: how, its status, its output."""
        if self.killed_by_watchdog:
            how = f"was killed: no result within the {self.budget()}s timeout"
        code = self.proc.poll()
        status = "" if code is None or self.killed_by_watchdog else f" (exit status {code})"
        tail = self.stderr_tail()
        ends = f"; its {self.OUTPUT} ends:\n{tail}" if tail else ""
        return BenchError(f"server {self.label} {how}{status}{ends}")


class Peer(WatchedProcess):
    """A server process and raw JSON-RPC lines over its stdin and stdout."""

    OUTPUT = "stderr"

    def __init__(self, label: str, argv: list[str], timeout: float, stderr: IO[bytes]) -> None:
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "bufsize": 0}
        super().__init__(label, argv, timeout, stderr, **pipes)
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.wfd = self.proc.stdin.fileno()
        self.rfd = self.proc.stdout.fileno()
        self.poller = select.poll()
        self.poller.register(self.rfd, select.POLLIN | select.POLLHUP | select.POLLERR)
        self.buf = b""

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.wfd, view) :]
        except OSError as exc:  # BrokenPipeError when the server is gone
            raise self.gone(f"stopped reading its stdin ({exc.strerror})") from exc

    def receive(self, deadline: float, what: str) -> list[dict[str, Any]]:
        """Every complete message available, waiting for at least one until deadline."""
        deadline = min(deadline, self.hard_deadline)
        while True:
            if b"\n" in self.buf:
                *lines, self.buf = self.buf.split(b"\n")
                messages: list[dict[str, Any]] = []
                for line in lines:
                    if not line.strip():
                        continue
                    try:
                        msg = json.loads(line)
                    except ValueError as exc:
                        excerpt = line[:200].decode("utf-8", "replace")
                        raise BenchError(
                            f"server {self.label} wrote a line that is not JSON: {excerpt!r}"
                        ) from exc
                    if not isinstance(msg, dict):
                        raise BenchError(f"server {self.label} wrote a non-object: {msg!r}")
                    messages.append(msg)
                if messages:
                    return messages
            left = deadline - time.monotonic()
            if left <= 0 or not self.poller.poll(math.ceil(left * 1000)):
                if self.killed_by_watchdog or time.monotonic() >= self.hard_deadline:
                    raise self.gone(f"did not finish within the {self.budget()}s timeout")
                if time.monotonic() >= deadline:
                    raise NoReplyError(f"server {self.label} did not answer {what}")
                continue
            chunk = os.read(self.rfd, READ_CHUNK)
            if not chunk:
                raise self.gone(f"closed its stdout while waiting for {what}")
            self.buf += chunk

    def close(self) -> None:
        """EOF on stdin, then a bounded wait; terminate, then kill, if it does not exit."""
        self.watchdog.cancel()
        if self.proc.stdin is not None:
            with suppress(OSError):
                self.proc.stdin.close()
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                self._signal(sig)
            try:
                self.proc.wait(timeout=3)
                break
            except subprocess.TimeoutExpired:
                continue
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@contextmanager
def running(label: str, argv: list[str], timeout: float) -> Iterator[Peer]:
    with tempfile.TemporaryFile() as stderr:
        peer = Peer(label, argv, timeout, stderr)
        try:
            yield peer
        finally:
            peer.close()


def frame(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


def request(peer: Peer, rid: int, method: str, params: dict[str, Any], deadline: float) -> Any:
    """One request, its reply's result; anything else the server sends meanwhile is answered
    (requests: method not found) or ignored (notifications)."""
    peer.send(frame({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}))
    while True:
        for msg in peer.receive(deadline, method):
            if msg.get("id") == rid and "method" not in msg:
                if "error" in msg:
                    raise BenchError(f"server {peer.label} answered {method} with {msg['error']}")
                return msg.get("result")
            answer_server_request(peer, msg)


def answer_server_request(peer: Peer, msg: dict[str, Any]) -> None:
    if "method" in msg and "id" in msg:
        error = {"code": -32601, "message": "the benchmark client serves no requests"}
        peer.send(frame({"jsonrpc": "2.0", "id": msg["id"], "error": error}))


# --- the phases -------------------------------------------------------------------------------


def handshake(peer: Peer, cfg: Config) -> dict[str, Any]:
    """initialize (its result, with ``startup_ms`` added), initialized, tools/list (its names
    under ``tools``)."""
    params = {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": CLIENT_INFO,
    }
    result = timed_request(peer, cfg, 0, "initialize", params)
    if not isinstance(result, dict):
        raise BenchError(f"server {peer.label} answered initialize with {result!r}")
    result["startup_ms"] = round((time.monotonic() - peer.started) * 1000, 1)
    peer.send(frame({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    tools = timed_request(peer, cfg, 1, "tools/list", {})
    listed = tools.get("tools") if isinstance(tools, dict) else None
    names = [t.get("name") for t in listed or [] if isinstance(t, dict)]
    if "echo" not in names:
        raise BenchError(f"server {peer.label} lists no echo tool (tools: {names})")
    result["tools"] = names
    return result


def timed_request(peer: Peer, cfg: Config, rid: int, method: str, params: dict[str, Any]) -> Any:
    try:
        return request(peer, rid, method, params, time.monotonic() + cfg.init_timeout)
    except NoReplyError:
        raise BenchError(
            f"server {peer.label} did not answer {method} within {cfg.init_timeout:g}s"
        ) from None


def echo_burst(peer: Peer, cfg: Config, first_id: int, count: int) -> dict[str, int]:
    """count echo calls, ids first_id.., with cfg.in_flight outstanding until the tail."""
    head = b'{"jsonrpc":"2.0","id":'
    tail = (
        ',"method":"tools/call","params":'
        + json.dumps({"name": "echo", "arguments": {"text": cfg.text}}, separators=(",", ":"))
        + "}\n"
    ).encode()
    expected = [{"type": "text", "text": cfg.text}]
    outstanding: set[int] = set()
    end_id = first_id + count
    next_id = first_id
    received = reordered = last = 0

    window = []
    while next_id < end_id and len(outstanding) < cfg.in_flight:
        window.append(head + str(next_id).encode() + tail)
        outstanding.add(next_id)
        next_id += 1
    peer.send(b"".join(window))
    while received < count:
        refill: list[bytes] = []
        for msg in peer.receive(peer.hard_deadline, "tools/call echo"):
            rid = msg.get("id")
            if "method" in msg or rid not in outstanding:
                answer_server_request(peer, msg)
                continue
            outstanding.remove(rid)
            received += 1
            result = msg.get("result")
            if (
                not isinstance(result, dict)
                or result.get("content") != expected
                or result.get("isError")
            ):
                raise BenchError(f"server {peer.label} answered echo call {rid} with {msg!r}")
            if rid < last:
                reordered += 1
            last = rid
            if next_id < end_id:
                refill.append(head + str(next_id).encode() + tail)
                outstanding.add(next_id)
                next_id += 1
        if refill:
            peer.send(b"".join(refill))
    return {"replies_out_of_order": reordered}


def throughput(peer: Peer, cfg: Config, first_id: int) -> dict[str, Any]:
    server0 = tree_cpu_seconds(peer.proc.pid)
    client0 = time.process_time()
    t0 = time.perf_counter()
    extra = echo_burst(peer, cfg, first_id, cfg.calls)
    wall = time.perf_counter() - t0
    client = time.process_time() - client0
    server1 = tree_cpu_seconds(peer.proc.pid)
    server = None if server0 is None or server1 is None else server1 - server0
    return {
        "calls": cfg.calls,
        "in_flight": cfg.in_flight,
        "throughput_wall_s": round(wall, 4),
        "calls_per_s": round(cfg.calls / wall, 1),
        "server_cpu_s": None if server is None else round(server, 3),
        "server_cpu_us_per_call": None if server is None else round(server / cfg.calls * 1e6, 2),
        "server_cpu_utilisation": None if server is None else round(server / wall, 3),
        "client_cpu_us_per_call": round(client / cfg.calls * 1e6, 2),
        "client_cpu_utilisation": round(client / wall, 3),
        **extra,
    }


def percentile(sorted_values: list[int], p: float) -> int:
    """Nearest-rank percentile of an ascending list."""
    return sorted_values[max(0, math.ceil(p / 100 * len(sorted_values)) - 1)]


SPREAD = (10, 25, 50, 75, 90, 99)  # the percentiles kept of each latency phase, and its max


def spread(prefix: str, sorted_ns: list[int]) -> dict[str, float]:
    """A latency phase's distribution, in microseconds: ``prefix_p10_us`` ... ``prefix_p99_us``
    (nearest rank) and ``prefix_max_us``, from its samples in nanoseconds, ascending."""
    out = {f"{prefix}_p{p}_us": round(percentile(sorted_ns, p) / 1000, 1) for p in SPREAD}
    out[f"{prefix}_max_us"] = round(sorted_ns[-1] / 1000, 1)
    return out


def latency(peer: Peer, cfg: Config, first_id: int) -> dict[str, Any]:
    samples: list[int] = []
    for rid in range(first_id, first_id + cfg.pings):
        line = b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % rid
        t0 = time.perf_counter_ns()
        peer.send(line)
        answered = False
        while not answered:
            for msg in peer.receive(peer.hard_deadline, "ping"):
                if msg.get("id") == rid and "method" not in msg:
                    if msg.get("result") != {}:
                        raise BenchError(f"server {peer.label} answered ping with {msg!r}")
                    answered = True
                else:
                    answer_server_request(peer, msg)
        samples.append(time.perf_counter_ns() - t0)
    samples.sort()
    return {"pings": cfg.pings, **spread("ping", samples)}


def elicitation(peer: Peer, cfg: Config, first_id: int) -> dict[str, Any]:
    """cfg.elicitations sequential guarded_echo calls, each approved when asked."""
    samples: list[int] = []
    expected = [{"type": "text", "text": cfg.text}]
    params = {"name": "guarded_echo", "arguments": {"text": cfg.text}}
    approve = {"action": "accept", "content": {"approve": True}}
    for rid in range(first_id, first_id + cfg.elicitations):
        t0 = time.perf_counter_ns()
        peer.send(frame({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}))
        asked = False
        result: Any = None
        while result is None:
            for msg in peer.receive(peer.hard_deadline, "tools/call guarded_echo"):
                if msg.get("method") == "elicitation/create" and "id" in msg:
                    asked = True
                    peer.send(frame({"jsonrpc": "2.0", "id": msg["id"], "result": approve}))
                elif msg.get("id") == rid and "method" not in msg:
                    result = msg.get("result", msg)
                else:
                    answer_server_request(peer, msg)
        samples.append(time.perf_counter_ns() - t0)
        if not asked or not isinstance(result, dict) or result.get("content") != expected:
            raise BenchError(
                f"server {peer.label} answered guarded_echo call {rid} "
                f"({'asked' if asked else 'without asking'}) with {result!r}"
            )
    samples.sort()
    return {"elicitations": cfg.elicitations, **spread("elicit", samples)}


def bench_one(label: str, argv: list[str], cfg: Config) -> Result:
    result = Result(label, argv)
    try:
        with running(label, argv, cfg.timeout) as peer:
            init = handshake(peer, cfg)
            info = init.get("serverInfo") or {}
            result.figures["server_info"] = f"{info.get('name')} {info.get('version')}"
            result.figures["protocol_version"] = init.get("protocolVersion")
            result.figures["startup_ms"] = init["startup_ms"]
            next_id = 2
            if cfg.warmup:
                echo_burst(peer, cfg, next_id, cfg.warmup)
                next_id += cfg.warmup
            if cfg.profiled:
                peer.proc.send_signal(signal.SIGUSR1)  # the sampler: on
            result.figures.update(throughput(peer, cfg, next_id))
            if cfg.profiled:
                peer.proc.send_signal(signal.SIGUSR2)  # off
            next_id += cfg.calls
            result.figures.update(latency(peer, cfg, next_id))
            next_id += cfg.pings
            if cfg.elicitations and "guarded_echo" in init["tools"]:
                if cfg.profiled:
                    peer.proc.send_signal(signal.SIGUSR1)  # the sampler: on, phase 1
                result.figures.update(elicitation(peer, cfg, next_id))
                if cfg.profiled:
                    peer.proc.send_signal(signal.SIGUSR2)
            result.figures["peak_rss_kib"] = tree_peak_rss_kib(peer.proc.pid)
            result.ok = True
    except BenchError as exc:
        result.error = str(exc)
    return result


# --- the profile ------------------------------------------------------------------------------

SAMPLED_RUN = "--sampled-run"


def profiled_argv(argv: list[str], out: Path) -> list[str] | None:
    """``argv`` run under this file's sampler writing to ``out``; None when argv is neither
    ``PYTHON [-opts] -m MODULE ...`` nor ``PYTHON SCRIPT.py ...``."""
    prefix: list[str] = []
    if argv and Path(argv[0]).name == "env":  # env NAME=VALUE ... PYTHON ...
        prefix.append(argv[0])
        while len(argv) > len(prefix) and "=" in argv[len(prefix)]:
            prefix.append(argv[len(prefix)])
    python, rest = argv[len(prefix) : len(prefix) + 1], argv[len(prefix) + 1 :]
    if python and rest and ("-m" in rest[:-1] or rest[0].endswith(".py")):
        return [*prefix, *python, str(Path(__file__).resolve()), SAMPLED_RUN, str(out), *rest]
    return None


def phase_file(out: Path, phase: int) -> Path:
    """Where the stacks of the ``phase``-th sampled phase go (0: ``out`` itself,
    ``DIR/label.folded``; then ``DIR/label.1.folded``, ...)."""
    return out if phase == 0 else out.with_name(f"{out.stem}.{phase}{out.suffix}")


def profile_servers(servers: list[tuple[str, list[str]]], where: Path, hz: int) -> dict[str, Path]:
    """Wraps each Python server of ``servers`` (in place) in the stack sampler, writing to
    ``where/label.folded`` (and its phase files, emptied first) at ``hz`` samples per CPU
    second; returns where each profiled server's stacks go. Other commands run unprofiled."""
    where.mkdir(parents=True, exist_ok=True)
    os.environ["STDIO_BENCH_HZ"] = str(hz)  # the servers inherit it
    folded: dict[str, Path] = {}
    for i, (label, argv) in enumerate(servers):
        out = where / f"{label}.folded"
        wrapped = profiled_argv(argv, out)
        if wrapped is None:
            print(f"{label}: not a Python command line; not profiled", file=sys.stderr)
            continue
        out.unlink(missing_ok=True)
        phase_file(out, 1).unlink(missing_ok=True)
        folded[label] = out
        servers[i] = (label, wrapped)
    return folded


def sampled_run(out: Path, args: list[str], hz: int) -> None:
    """Runs ``[-opts] -m MODULE ARGS`` or ``SCRIPT.py ARGS`` in this process, sampling its
    stacks on SIGPROF between SIGUSR1 and SIGUSR2; each SIGUSR2 ends a phase. At exit (also at
    ``os._exit``, which servers that abandon threads call) the folded stacks of phase k are
    appended to ``phase_file(out, k)``."""
    phases: list[collections.Counter[str]] = [collections.Counter()]
    names: dict[types.CodeType, str] = {}

    def name(code: types.CodeType) -> str:
        text = names.get(code)
        if text is None:
            where = code.co_filename
            if "/site-packages/" in where:
                where = where.split("/site-packages/", 1)[1]
            elif "/lib/python3" in where:
                where = where.split("/lib/python3", 1)[1].partition("/")[2]
            elif where.startswith(os.getcwd() + os.sep):
                where = where[len(os.getcwd()) + 1 :]
            text = names[code] = f"{code.co_qualname} ({where}:{code.co_firstlineno})"
        return text

    def sample(_signum: int, frame: types.FrameType | None) -> None:
        frames = []
        while frame is not None:
            frames.append(name(frame.f_code))
            frame = frame.f_back
        phases[-1][";".join(reversed(frames))] += 1

    def switch(signum: int, _frame: types.FrameType | None) -> None:
        period = 1 / hz if signum == signal.SIGUSR1 else 0
        signal.setitimer(signal.ITIMER_PROF, period, period)
        if signum == signal.SIGUSR2:
            phases.append(collections.Counter())

    written = False

    def dump() -> None:
        nonlocal written
        if not written:
            written = True
            signal.setitimer(signal.ITIMER_PROF, 0, 0)
            for phase, stacks in enumerate(phases):
                if stacks:
                    with phase_file(out, phase).open("a", encoding="utf-8") as f:
                        f.writelines(f"{stack} {n}\n" for stack, n in stacks.items())

    exit_now = os._exit

    def exit_after_dump(status: int) -> None:
        dump()
        exit_now(status)

    os._exit = exit_after_dump  # type: ignore[assignment]
    signal.signal(signal.SIGPROF, sample)
    signal.signal(signal.SIGUSR1, switch)
    signal.signal(signal.SIGUSR2, switch)
    try:
        if "-m" in args[:-1]:
            at = args.index("-m")
            sys.argv = [args[at + 1], *args[at + 2 :]]
            runpy.run_module(args[at + 1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(args)
            runpy.run_path(args[0], run_name="__main__")
    finally:
        dump()


def profile_table(path: Path, cpu_us_per_call: float | None, top: int) -> str:
    """The functions of a folded-stacks file taking the most CPU, self and inclusive."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        frames = stack.split(";")
        total += n
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + n
    if not total:
        return f"{path}: no samples"
    scale = cpu_us_per_call or 0.0
    lines = [f"{path}: {total} samples; us per call = share x {scale:.1f} us server CPU per call"]
    for title, counts in (("self", own), ("inclusive", inclusive)):
        lines.append(f"  -- {title}")
        for frame, n in sorted(counts.items(), key=lambda kv: -kv[1])[:top]:
            lines.append(f"  {100 * n / total:5.1f}% {scale * n / total:7.2f} us  {frame}")
    return "\n".join(lines)


# --- the report -------------------------------------------------------------------------------

HEADLINE = ["calls_per_s", "server_cpu_us_per_call", "ping_p50_us", "ping_p99_us"]
TAKE_MAX = {"replies_out_of_order", "ping_max_us", "elicit_max_us", "peak_rss_kib"}


def combine(rounds: list[Result]) -> Result:
    """One result from a server's rounds: the median of each figure (the max of a few), and
    the per-round headline figures under "rounds"; a failed round makes the result a failure."""
    failed = [r for r in rounds if not r.ok]
    if failed:
        return failed[0]
    first = rounds[0]
    out = Result(first.label, first.command, ok=True)
    for key, value in first.figures.items():
        values = [r.figures.get(key) for r in rounds]
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        if len(numbers) != len(values) or len(set(numbers)) == 1:
            out.figures[key] = value
        elif key in TAKE_MAX:
            out.figures[key] = max(numbers)
        else:
            out.figures[key] = round(statistics.median(numbers), 3)
    out.figures["rounds"] = [{k: r.figures.get(k) for k in HEADLINE} for r in rounds]
    return out


ROWS = [
    ("calls_per_s", "echo tools/call, calls/s"),
    ("server_cpu_us_per_call", "server CPU per call, us"),
    ("server_cpu_utilisation", "server CPU utilisation"),
    ("ping_p50_us", "ping p50, us"),
    ("ping_p99_us", "ping p99, us"),
    ("ping_max_us", "ping max, us"),
    ("elicit_p50_us", "elicitation trip p50, us"),
    ("elicit_p99_us", "elicitation trip p99, us"),
    ("startup_ms", "start + initialize, ms"),
    ("peak_rss_kib", "peak RSS, KiB"),
    ("client_cpu_us_per_call", "client CPU per call, us"),
    ("client_cpu_utilisation", "client CPU utilisation"),
    ("replies_out_of_order", "echo replies out of order"),
]


def table(
    results: list[Result],
    rows: list[tuple[str, str]] | None = None,
    versus: Callable[[Result, Result], str] | None = None,
) -> str:
    """The figures side by side (``rows``: key and title; default this benchmark's), each
    server against the first (``versus``), and the servers that failed."""
    rows = ROWS if rows is None else rows
    versus = _versus if versus is None else versus
    ok = [r for r in results if r.ok]
    lines: list[str] = []
    if ok:
        width = max(12, *(len(r.label) for r in ok))
        lines.append(f"{'':30}" + "".join(f"{r.label:>{width + 2}}" for r in ok))
        for key, title in rows:
            cells = "".join(f"{_cell(r.figures.get(key)):>{width + 2}}" for r in ok)
            lines.append(f"{title:30}{cells}")
        base = ok[0]
        lines.extend(versus(other, base) for other in ok[1:])
        saturated = [r.label for r in ok if (r.figures.get("client_cpu_utilisation") or 0) > 0.9]
        if saturated:
            lines.append(
                "warning: the client was near one full core against "
                + ", ".join(saturated)
                + "; the throughput there may be the client's limit"
            )
    lines.extend(f"FAILED {r.label}: {r.error}" for r in results if not r.ok)
    return "\n".join(lines)


def _cell(value: object) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _versus(other: Result, base: Result) -> str:
    """other's figures as multiples of base's (CPU and latency: base / other, higher is better)."""

    def times(key: str, lower_is_better: bool = False) -> str:
        a, b = other.figures.get(key), base.figures.get(key)
        if not a or not b:
            return "n/a"
        return f"{(b / a if lower_is_better else a / b):.2f}x"

    return (
        f"{other.label} vs {base.label}: throughput {times('calls_per_s')}; "
        f"CPU per call 1/{times('server_cpu_us_per_call', True)}; "
        f"ping p50 1/{times('ping_p50_us', True)}; "
        f"elicitation p50 1/{times('elicit_p50_us', True)}; "
        f"start 1/{times('startup_ms', True)}; peak RSS 1/{times('peak_rss_kib', True)}"
    )


def positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def rounds(
    servers: list[tuple[str, list[str]]],
    count: int,
    bench: Callable[[str, list[str]], Result],
    headline: Sequence[str],
    combined: Callable[[list[Result]], Result],
) -> list[Result]:
    """``count`` interleaved rounds over ``servers`` (a server that fails once is not run
    again), each line of progress on stderr; one result per server, in order, ``combined``
    from its rounds."""
    runs: dict[str, list[Result]] = {label: [] for label, _ in servers}
    for n in range(1, count + 1):
        for label, argv in servers:
            done = runs[label]
            if done and not done[-1].ok:
                continue
            print(f"round {n}/{count}: {label}: {shlex.join(argv)}", file=sys.stderr, flush=True)
            result = bench(label, argv)
            if result.ok:
                brief = ", ".join(f"{k} {_cell(result.figures.get(k))}" for k in headline)
                print(f"  {brief}", file=sys.stderr, flush=True)
            else:
                print(f"  FAILED: {result.error}", file=sys.stderr, flush=True)
            done.append(result)
    return [combined(runs[label]) for label, _ in servers]


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == SAMPLED_RUN:
        sampled_run(Path(sys.argv[2]), sys.argv[3:], int(os.environ.get("STDIO_BENCH_HZ", "1000")))
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--server", action="append", required=True, help="command line, repeatable")
    parser.add_argument("--label", action="append", default=[], help="one per --server, in order")
    parser.add_argument("--calls", type=positive, default=5000)
    parser.add_argument("--in-flight", type=positive, default=32)
    parser.add_argument("--pings", type=positive, default=1000)
    parser.add_argument("--elicitations", type=int, default=300, help="guarded_echo round trips")
    parser.add_argument("--warmup", type=int, default=500, help="echo calls before measuring")
    parser.add_argument("--text", default="hello from the stdio benchmark")
    parser.add_argument("--init-timeout", type=float, default=10.0, help="seconds")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per server, in all")
    parser.add_argument("--rounds", type=positive, default=3, help="runs per server, interleaved")
    parser.add_argument("--out", type=Path, default=Path("bench/results/stdio.json"))
    parser.add_argument("--profile", type=Path, metavar="DIR", help="sample each server's stacks")
    parser.add_argument("--profile-hz", type=positive, default=1000, help="samples per CPU second")
    parser.add_argument("--profile-top", type=positive, default=30, help="functions listed")
    args = parser.parse_args()
    if len(args.label) > len(args.server):
        parser.error("more --label than --server")
    labels = args.label + [f"server{i + 1}" for i in range(len(args.label), len(args.server))]
    if len(set(labels)) != len(labels):
        parser.error(f"labels must differ: {labels}")
    cfg = Config(
        calls=args.calls,
        in_flight=args.in_flight,
        pings=args.pings,
        warmup=max(0, args.warmup),
        text=args.text,
        init_timeout=args.init_timeout,
        timeout=args.timeout,
        elicitations=max(0, args.elicitations),
        profiled=args.profile is not None,
    )

    servers = [
        (label, shlex.split(command)) for label, command in zip(labels, args.server, strict=True)
    ]
    folded: dict[str, Path] = {}
    if args.profile is not None:
        folded = profile_servers(servers, args.profile, args.profile_hz)
    results = rounds(
        servers, args.rounds, lambda label, argv: bench_one(label, argv, cfg), HEADLINE, combine
    )

    report = {
        "params": {
            "calls": cfg.calls,
            "in_flight": cfg.in_flight,
            "pings": cfg.pings,
            "elicitations": cfg.elicitations,
            "warmup": cfg.warmup,
            "text": cfg.text,
            "protocol_version": PROTOCOL_VERSION,
            "rounds": args.rounds,
        },
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
            "clk_tck": CLK_TCK,
        },
        "servers": {r.label: r.as_json() for r in results},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(table(results))
    for r in results:
        if r.label in folded and folded[r.label].exists():
            cpu = r.figures.get("server_cpu_us_per_call")
            print(profile_table(folded[r.label], cpu, args.profile_top))
        if r.label in folded and phase_file(folded[r.label], 1).exists():
            print(profile_table(phase_file(folded[r.label], 1), None, args.profile_top))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0 if any(r.ok for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
