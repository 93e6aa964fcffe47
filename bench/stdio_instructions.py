"""Instructions a stdio server executes per exchange, counted by valgrind: a figure machine load
does not move, for comparing two builds on a shared, noisy machine.

    python bench/stdio_instructions.py \\
        --server "env PYTHONPATH=/tmp/base python -P -m askgate serve --stdio --demo" \\
        --label base \\
        --server "python -m askgate serve --stdio --demo" --label mine \\
        [--phase ping --phase elicit] [--counts 200 600]

``/tmp/base`` is a checkout laid out as its wheel would be (``python bench/trees.py CHECKOUT
/tmp/base``: a checkout is not importable as it stands, docs/performance.md).

Each ``--server`` (split like a shell would) serves MCP on stdin/stdout and is run under
``valgrind --tool=callgrind`` (its whole process: interpreter, imports, event loop). The client
does the handshake, then ``N`` sequential exchanges of one phase, each waiting for its answer:
``ping``; ``echo`` (``tools/call echo``); ``elicit`` (``tools/call guarded_echo``, answering its
``elicitation/create`` with accept). Every server runs once per phase and count; the figure is
the difference of the instruction totals of the two counts divided by the difference of the
counts, so start-up and shutdown cancel out. ``start`` is the other way round: the whole
process's instructions when it is started, answers ``initialize`` and reads the end of its input
(no exchange), once per server: what ``start + initialize`` costs, imports included, on a figure
machine load does not move (``startup_profile.py`` times it). It counts compiling the tree's
modules when their bytecode is not cached (``python -m compileall`` the tree first, or run it
once without ``PYTHONDONTWRITEBYTECODE``). Valgrind slows the server about fifty times, so
an exchange's timing (how often input is already waiting when the server reads) is not the
native one: compare builds with this, and quote wall-clock figures from ``stdio_bench.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from typing import Any

INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": {"name": "askgate-stdio-instructions", "version": "0.1.0"},
    },
}
COLLECTED = re.compile(rb"Collected : (\d+)")


class Peer:
    """A server under valgrind, spoken to in JSON-RPC lines."""

    def __init__(self, command: list[str]) -> None:
        valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
        valgrind.append("--trace-children=yes")  # through env, into the server it starts
        self.proc = subprocess.Popen(
            [*valgrind, *command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
        )
        self.buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while b"\n" not in self.buffer:
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise RuntimeError("the server ended")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def finish(self) -> int:
        """Ends the input and returns the instructions valgrind counted."""
        assert self.proc.stdin is not None
        assert self.proc.stderr is not None
        self.proc.stdin.close()
        err = self.proc.stderr.read()
        self.proc.wait()
        found = COLLECTED.search(err)
        if found is None:
            raise RuntimeError(f"no instruction count: {err[-500:].decode(errors='replace')}")
        return int(found.group(1))


def exchange(peer: Peer, phase: str, n: int) -> None:
    text = {"text": "hello"}
    if phase == "ping":
        peer.send({"jsonrpc": "2.0", "id": n, "method": "ping"})
        peer.receive()
    elif phase == "echo":
        params = {"name": "echo", "arguments": text}
        peer.send({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params})
        peer.receive()
    else:
        params = {"name": "guarded_echo", "arguments": text}
        peer.send({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params})
        ask = peer.receive()
        answer = {"action": "accept", "content": {"approve": True}}
        peer.send({"jsonrpc": "2.0", "id": ask["id"], "result": answer})
        if "result" not in peer.receive():
            raise RuntimeError(f"guarded_echo was not answered: {ask}")


def count(command: list[str], phase: str, n: int) -> int:
    peer = Peer(command)
    peer.send(INIT)
    peer.receive()
    peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    for i in range(1, n + 1):
        exchange(peer, phase, i)
    return peer.finish()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--server", action="append", required=True, help="command line")
    parser.add_argument("--label", action="append", default=[], help="one per --server")
    parser.add_argument("--phase", action="append", choices=["ping", "echo", "elicit", "start"])
    parser.add_argument("--counts", type=int, nargs=2, default=[200, 600], metavar=("A", "B"))
    args = parser.parse_args()
    labels = args.label + [f"server{i + 1}" for i in range(len(args.label), len(args.server))]
    low, high = args.counts
    for phase in args.phase or ["ping", "elicit"]:
        for label, server in zip(labels, args.server, strict=True):
            command = shlex.split(server)
            if phase == "start":
                total = count(command, phase, 0)
                print(f"{label:>12} {phase:>7}: {total:12,} instructions in all", flush=True)
                continue
            per = (count(command, phase, high) - count(command, phase, low)) / (high - low)
            print(f"{label:>12} {phase:>7}: {per:12,.0f} instructions per exchange", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
