"""Instructions a Streamable HTTP server executes per exchange, counted by valgrind: a figure
machine load does not move, for comparing two builds (or two event loops) on a shared, noisy
machine; the HTTP counterpart of ``bench/stdio_instructions.py``.

    python bench/http_instructions.py \\
        --server "env PYTHONPATH=/tmp/base python -P -m askgate serve --http 127.0.0.1:{port} \\
                  --demo" --label base \\
        --server "python -m askgate serve --http 127.0.0.1:{port} --demo" --label mine \\
        [--phase echo --phase elicit --phase modern] [--counts 100 300]

``/tmp/base`` is a checkout laid out as its wheel would be (``python bench/trees.py CHECKOUT
/tmp/base``: a checkout is not importable as it stands, docs/performance.md).

Each ``--server`` (split like a shell would; ``{port}`` replaced by a free port on 127.0.0.1)
serves MCP Streamable HTTP at ``/mcp`` and is run under ``valgrind --tool=callgrind`` (its whole
process tree: interpreter, imports, event loop, HTTP server). The client opens a session
(``initialize``, ``notifications/initialized``), then makes ``N`` sequential exchanges of one
phase on keep-alive connections (each request's head and body written in one ``send``), each
waiting for its answer: ``echo`` (``tools/call echo``);
``elicit`` (``tools/call guarded_echo`` on one connection, its SSE stream read up to the
``elicitation/create``, the accepting answer POSTed on a second connection, then the stream read
to its result and end); ``modern`` (the 2026-07-28 stateless approval: the call, its
input-required answer, the approving retry with the ``requestState``). The server is stopped
with SIGTERM. Every server runs once per phase and count; the figure is the difference of the
instruction totals of the two counts divided by the difference of the counts, so start-up and
shutdown cancel out. Valgrind counts user-space instructions only (a system call's kernel time
is not in it) and slows the server about fifty times: compare builds with this, and quote
wall-clock figures from ``http_bench.py``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

VERSION = "2025-06-18"
MODERN = "2026-07-28"
META = "io.modelcontextprotocol/"
COLLECTED = re.compile(rb"Collected : (\d+)")
DEADLINE = 600.0
JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


class _OnePiece(http.client.HTTPConnection):
    """Writes a request's head and its body in one ``send``, as ``http_bench.py`` does (the
    standard client sends them apart): whether the body comes in the read that brought the head
    then does not depend on timing, and neither does the path the server takes."""

    def _send_output(self, message_body: Any = None, encode_chunked: bool = False) -> None:
        if not isinstance(message_body, bytes):
            super()._send_output(message_body, encode_chunked)  # type: ignore[misc]
            return
        self._buffer.extend((b"", b""))  # type: ignore[attr-defined]
        head = b"\r\n".join(self._buffer)  # type: ignore[attr-defined]
        del self._buffer[:]  # type: ignore[attr-defined]
        self.send(head + message_body)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Peer:
    """A server under valgrind, spoken to over HTTP on keep-alive connections."""

    def __init__(self, command: list[str]) -> None:
        self.port = _free_port()
        valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
        valgrind.append("--trace-children=yes")  # through env, into the server it starts
        argv = [part.replace("{port}", str(self.port)) for part in command]
        # Standard error goes to a file, read at the end: a server that logs each call (the
        # default of `serve --http`, R-HTTP-46) would fill a pipe nobody reads, and block.
        self.err = tempfile.TemporaryFile()  # noqa: SIM115 (closed by count, at the end)
        self.proc = subprocess.Popen([*valgrind, *argv], stdout=subprocess.DEVNULL, stderr=self.err)
        began = time.monotonic()
        while True:  # bounded: the port accepts, the server exits, or the deadline passes
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self._stderr()[-500:]!r}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() - began > DEADLINE:
                    raise RuntimeError("the server did not listen in time") from None
                time.sleep(0.2)
        self.a = self._connection()
        self.b = self._connection()
        self.session = ""

    def _stderr(self) -> bytes:
        self.err.seek(0)
        return self.err.read()

    def _connection(self) -> http.client.HTTPConnection:
        return _OnePiece("127.0.0.1", self.port, timeout=DEADLINE)

    def post(
        self, conn: http.client.HTTPConnection, message: dict[str, Any], **headers: str
    ) -> http.client.HTTPResponse:
        sent = {**JSON_HEADERS, **headers}
        if self.session:
            sent["Mcp-Session-Id"] = self.session
            sent["MCP-Protocol-Version"] = VERSION
        conn.request("POST", "/mcp", json.dumps(message).encode(), sent)
        return conn.getresponse()

    def call(self, message: dict[str, Any], **headers: str) -> dict[str, Any]:
        """A request answered as JSON or as an SSE stream: its answer (the last message)."""
        answer = self.post(self.a, message, **headers)
        body = answer.read()
        if answer.headers.get("content-type", "").startswith("text/event-stream"):
            lines = [line for line in body.split(b"\n") if line.startswith(b"data:")]
            body = lines[-1][5:]
        found: dict[str, Any] = json.loads(body)
        return found

    def handshake(self) -> None:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": VERSION,
                "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "askgate-http-instructions", "version": "0.1.0"},
            },
        }
        answer = self.post(self.a, init)
        answer.read()
        self.session = answer.headers["mcp-session-id"]
        done = self.post(self.a, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        done.read()

    def finish(self) -> int:
        for conn in (self.a, self.b):
            conn.close()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=DEADLINE)
        err = self._stderr()
        totals = [int(n) for n in COLLECTED.findall(err)]
        if not totals:
            raise RuntimeError(f"valgrind reported no count: {err[-500:]!r}")
        return sum(totals)


def _elicit(peer: Peer, n: int) -> None:
    params = {"name": "guarded_echo", "arguments": {"text": "hello"}}
    stream = peer.post(
        peer.a, {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}
    )
    ask: dict[str, Any] | None = None
    while ask is None:  # bounded by the connection's timeout
        line = stream.readline()
        if not line:
            raise RuntimeError("the stream ended before its elicitation/create")
        if line.startswith(b"data:"):
            ask = json.loads(line[5:])
    answer = {"action": "accept", "content": {"approve": True}}
    accepted = peer.post(peer.b, {"jsonrpc": "2.0", "id": ask["id"], "result": answer})
    accepted.read()
    if accepted.status != 202:
        raise RuntimeError(f"the answer was answered {accepted.status}")
    rest = stream.read()
    if b'"text":"hello"' not in rest:
        raise RuntimeError(f"guarded_echo was not answered: {rest[-300:]!r}")


def _modern(peer: Peer, n: int) -> None:
    meta = {
        f"{META}protocolVersion": MODERN,
        f"{META}clientCapabilities": {"elicitation": {}},
        f"{META}clientInfo": {"name": "askgate-http-instructions", "version": "0.1.0"},
    }
    headers = {
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "guarded_echo",
    }
    params: dict[str, Any] = {"name": "guarded_echo", "arguments": {"text": "hello"}, "_meta": meta}
    first = peer.call(
        {"jsonrpc": "2.0", "id": 2 * n, "method": "tools/call", "params": params}, **headers
    )
    result = first["result"]
    ((key, _),) = result["inputRequests"].items()
    params = {
        **params,
        "inputResponses": {key: {"action": "accept", "content": {"approve": True}}},
        "requestState": result["requestState"],
    }
    retry = {"jsonrpc": "2.0", "id": 2 * n + 1, "method": "tools/call", "params": params}
    final = peer.call(retry, **headers)
    if final.get("result", {}).get("content") != [{"type": "text", "text": "hello"}]:
        raise RuntimeError(f"the retry was answered {final!r}")


def exchange(peer: Peer, phase: str, n: int) -> None:
    if phase == "echo":
        params = {"name": "echo", "arguments": {"text": "hello"}}
        answer = peer.call({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params})
        if "result" not in answer:
            raise RuntimeError(f"echo was answered {answer!r}")
    elif phase == "elicit":
        _elicit(peer, n)
    else:
        _modern(peer, n)


def count(command: list[str], phase: str, n: int) -> int:
    peer = Peer(command)
    try:
        if phase != "modern":
            peer.handshake()
        for i in range(1, n + 1):
            exchange(peer, phase, i)
        return peer.finish()
    finally:
        if peer.proc.poll() is None:
            peer.proc.kill()
            peer.proc.wait()
        peer.err.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--server", action="append", required=True, help="command line")
    parser.add_argument("--label", action="append", default=[], help="one per --server")
    parser.add_argument("--phase", action="append", choices=["echo", "elicit", "modern"])
    parser.add_argument("--counts", type=int, nargs=2, default=[100, 300], metavar=("A", "B"))
    args = parser.parse_args()
    labels = args.label + [f"server{i + 1}" for i in range(len(args.label), len(args.server))]
    low, high = args.counts
    for phase in args.phase or ["echo", "elicit", "modern"]:
        for label, server in zip(labels, args.server, strict=True):
            command = shlex.split(server)
            per = (count(command, phase, high) - count(command, phase, low)) / (high - low)
            print(f"{label:>16} {phase:>7}: {per:12,.0f} instructions per exchange", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
