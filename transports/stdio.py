"""The stdio transport: JSON-RPC lines on standard input and output.

Bytes in and out, unchanged: the reader splits standard input into lines itself and hands each
line, as bytes, to the reducer (``MessageReceived``), whose codec answers anything that is not a
JSON-RPC message (invalid UTF-8 included) for that line only. One trailing ``\\r`` is stripped
and empty lines are skipped. A line longer than the byte cap is never buffered whole: its first
``cap + 1`` bytes go to the reducer (whose codec answers ``-32700``) and the rest of the line is
discarded as it arrives.

Every line goes to the reducer in read order, without waiting for the replies to earlier ones.
The reader reads in chunks, never per line, and pauses only while too much output is waiting
for the peer to read it, which bounds memory when the peer stops reading. Pipes and sockets are
read and written in non-blocking mode, waiting for them on the event loop; a descriptor that
cannot be polled (a regular file, ``/dev/null``) takes one worker-thread hop per chunk. On
asyncio a polled input stays watched between reads, and the reading task is woken once per
chunk (no private hook of asyncio's is used to run it without that wake-up). The replies to one
chunk's lines go out in one write as soon as the chunk is handed to the reducer, when the
output can be polled and is not full; every other reply (a tool that ran in its own task, a
timer) produced while the writer waits for its turn goes out in one write from the writer's
task.

The whole process is one connection (``"stdio"``), subscribed at start. At end of input the
connection is detached: the reducer drops everything still running or parked, with no reply;
every reply already produced is written (within a bounded drain) and serving ends. Standard
output carries nothing but JSON-RPC: :func:`run_stdio` moves the wire onto private file
descriptors and points fd 1 (and ``sys.stdout``) at standard error and fd 0 at ``/dev/null``,
so a tool that prints, or a child process it starts, cannot write into the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import importlib.util
import logging
import os
import signal
import stat
import sys
import threading
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from typing import Any, ClassVar, Final

import anyio
import anyio.abc
import anyio.lowlevel

from askgate.core import ServerStopping, State, SubscriberAttached, SubscriberDetached
from askgate.core.codec import MAX_BYTES
from askgate.core.events import MessageReceived
from askgate.core.options import OptionError, Transport
from askgate.transports.loop import LOOP_ENV, event_loop

from .base import Serving
from .runtime import Runtime

__all__ = [
    "CHUNK_BYTES",
    "STDIO_CONN",
    "FdReceiveStream",
    "FdSendStream",
    "LineSplitter",
    "Outbox",
    "StdioTransport",
    "WireIsolation",
    "run_stdio",
    "serve_stdio",
]

logger = logging.getLogger("askgate.stdio")

STDIO_CONN: Final = "stdio"
CHUNK_BYTES: Final = 64 * 1024
OUTPUT_HIGH_WATER: Final = 8 * 1024 * 1024
"""Bytes waiting for the peer above which the reader stops reading until they are written."""
DRAIN_SECONDS: Final = 10.0
"""How long the replies produced before end of input may take to be written."""


class LineSplitter:
    """Splits a byte stream into lines, holding at most ``max_bytes + 2`` bytes of a line.

    :meth:`feed` returns the complete lines in a chunk (without ``\\n``, one trailing ``\\r``
    stripped, empty lines left out). A line over ``max_bytes`` is returned as its first
    ``max_bytes + 1`` bytes, once, as soon as that is known; the rest of it is discarded.
    """

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self._max = max_bytes
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already searched for a newline
        self._skipping = False  # inside a line already reported as over the cap

    def _line(self, raw: bytes | bytearray) -> bytes | None:
        end = len(raw) - 1 if raw.endswith(b"\r") else len(raw)
        return bytes(raw[: min(end, self._max + 1)]) if end else None

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf
        if (
            not buf
            and not self._skipping
            and len(chunk) <= self._max
            and 13 not in chunk  # (a byte's value: ``b"\r" in`` costs a raised TypeError)
            and chunk.find(b"\n\n") < 0
            and chunk[:1] != b"\n"
        ):
            # The common chunk: whole lines, none blank, none with a \r, none over the cap
            # (the chunk is not), and maybe the start of the next line: split without copies.
            lines = chunk.split(b"\n")
            rest = lines.pop()
            if rest:
                buf += rest
                self._scanned = len(rest)
            return lines
        lines = []
        buf += chunk
        start = 0
        newline = buf.find(b"\n", self._scanned)
        while newline >= 0:
            if self._skipping:
                self._skipping = False
            else:
                line = self._line(buf[start:newline])
                if line is not None:
                    lines.append(line)
            start = newline + 1
            newline = buf.find(b"\n", start)
        del buf[:start]
        if self._skipping:
            buf.clear()
        elif len(buf) > self._max + 1:  # over the cap even if a \r ends it
            with memoryview(buf) as view:  # one copy of the head, not two
                lines.append(bytes(view[: self._max + 1]))
            buf.clear()
            self._skipping = True
        self._scanned = len(buf)
        return lines

    def finish(self) -> list[bytes]:
        """The last line, when the input ended without a newline."""
        raw, skipping = bytes(self._buf), self._skipping
        self._buf.clear()
        self._scanned = 0
        self._skipping = False
        line = None if skipping else self._line(raw)
        return [] if line is None else [line]


class Outbox:
    """One connection's output: :meth:`write` buffers (it never blocks), :meth:`pump` writes.

    Messages are written in the order they were given, one per line, batched into one write
    when several are waiting. Between :meth:`hold` and :meth:`release` (the reader handing one
    chunk's lines to the reducer, with no await between) the pump is not woken: ``release``
    first writes what is waiting at once through ``write_now``, when given and the pump is not
    in the middle of a write, and wakes the pump only for what that left.
    """

    def __init__(self, high_water: int = OUTPUT_HIGH_WATER) -> None:
        self._chunks: list[bytes] = []
        self._pending = 0  # bytes given and not yet written
        self._high_water = high_water
        self._closed = False
        self._holding = False
        self._sending = False  # the pump is in a write (waiting for the peer to read)
        self.broken = False
        self._wake: anyio.Event | None = None
        self._room: anyio.Event | None = None

    def write(self, message: bytes) -> None:
        if self._closed:
            return
        self._chunks += (message, b"\n")
        self._pending += len(message) + 1
        wake = self._wake
        if wake is not None and not self._holding:
            # The pump waits: wake it once, whatever comes before it runs.
            self._wake = None
            wake.set()

    def hold(self) -> None:
        """Writes from now on wait for :meth:`release` (call both with no await between)."""
        self._holding = True

    def release(self, write_now: Callable[[bytes], int] | None = None) -> None:
        """Ends :meth:`hold`: writes what is waiting with ``write_now`` (it returns how many
        bytes it wrote, and returns 0 or raises ``BlockingIOError`` when the peer's pipe is
        full, and raises ``OSError`` when it cannot write: nothing written, either way), then
        wakes the pump if anything is left."""
        self._holding = False
        if not self._chunks:
            return
        if write_now is not None and not self._sending and not self._closed:
            blob = b"".join(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
            self._chunks.clear()
            try:
                written = write_now(blob)
            except OSError:
                written = 0  # the pump meets the same error and ends as it says
            self._pending -= written
            if written < len(blob):
                self._chunks.append(blob[written:])
            elif self._room is not None and self._pending <= self._high_water:
                self._room.set()
        if self._chunks and self._wake is not None:
            wake, self._wake = self._wake, None
            wake.set()

    def close(self) -> None:
        """No more writes; :meth:`pump` returns once everything given is written."""
        self._closed = True
        if self._wake is not None:
            self._wake.set()

    def has_room(self) -> bool:
        """Whether the bytes waiting to be written are at most the high-water mark."""
        return self._pending <= self._high_water or self.broken

    async def wait_for_room(self) -> None:
        """Returns once the bytes waiting to be written are at most the high-water mark."""
        while self._pending > self._high_water and not self.broken:
            self._room = anyio.Event()
            await self._room.wait()

    async def pump(self, stream: anyio.abc.ByteSendStream) -> None:
        """Writes everything given, in order, until closed. A peer that closed the stream
        (broken pipe) ends the pump with :attr:`broken` set; nothing more is written."""
        try:
            while True:
                if self._chunks:
                    blob = b"".join(self._chunks)
                    self._chunks.clear()
                    self._sending = True
                    try:
                        await stream.send(blob)
                    finally:
                        self._sending = False
                    self._pending -= len(blob)
                    if self._room is not None and self._pending <= self._high_water:
                        self._room.set()
                    continue
                if self._closed:
                    return
                self._wake = anyio.Event()
                await self._wake.wait()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            logger.warning("standard output was closed by the peer; nothing more is written")
            self.broken = True
            self._closed = True
            self._chunks.clear()
            if self._room is not None:
                self._room.set()


async def serve_stdio(
    runtime: Runtime,
    stdin: anyio.abc.ByteReceiveStream,
    stdout: anyio.abc.ByteSendStream,
    *,
    conn: Hashable = STDIO_CONN,
    max_bytes: int = MAX_BYTES,
    drain_seconds: float = DRAIN_SECONDS,
    stop: anyio.Event | None = None,
) -> None:
    """Serves one connection over a pair of byte streams until end of input (or until the
    peer closes the output, or ``stop`` is set: then every open call is ended with its answer,
    R-STOP-1, and what that produced is written). ``runtime`` must be running."""
    outbox = Outbox()
    splitter = LineSplitter(max_bytes)
    # A descriptor polled on the event loop takes the replies to a chunk's lines in one write
    # as soon as they are produced, without waking the writer's task.
    write_now = stdout.nowait_writer() if isinstance(stdout, FdSendStream) else None
    pumped = anyio.Event()
    reading = anyio.CancelScope()
    stopping = False

    async def watch(stop: anyio.Event) -> None:
        nonlocal stopping
        await stop.wait()
        stopping = True
        reading.cancel()

    async def pump() -> None:
        try:
            await outbox.pump(stdout)
        finally:
            pumped.set()
            reading.cancel()  # the output is gone (or everything was written after the input)

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump, name="askgate stdout")
        if stop is not None:
            tg.start_soon(watch, stop, name="askgate stop")
        runtime.attach(conn, outbox.write)
        feed = runtime.feed
        feed(SubscriberAttached(conn, runtime.now()))

        def handle(chunk: bytes) -> None:
            """Feeds one chunk's lines."""
            now = runtime.now()  # the lines of one chunk arrived together
            outbox.hold()
            try:
                for line in splitter.feed(chunk):
                    feed(MessageReceived(conn, line, now))
            finally:
                outbox.release(write_now)

        receive, has_room = stdin.receive, outbox.has_room
        try:
            with reading:
                while True:
                    if not has_room():  # no coroutine per chunk while there is room
                        await outbox.wait_for_room()
                    try:
                        handle(await receive(CHUNK_BYTES))
                    except (
                        anyio.EndOfStream,
                        anyio.ClosedResourceError,
                        anyio.BrokenResourceError,
                    ):
                        break
                for line in splitter.finish():
                    runtime.feed(MessageReceived(conn, line, runtime.now()))
            if stopping:  # R-STOP-1: every call answered, every prompt withdrawn
                runtime.feed(ServerStopping(runtime.now()))
            # End of input: everything still running or parked is dropped with no reply.
            runtime.feed(SubscriberDetached(conn, runtime.now()))
        finally:
            runtime.detach(conn)
            outbox.close()
        with anyio.move_on_after(drain_seconds) as drain:
            await pumped.wait()
        if drain.cancelled_caught:
            logger.warning(
                "gave up writing replies after %.0f s: the peer is not reading", drain_seconds
            )
        tg.cancel_scope.cancel()


def _pollable(fd: int) -> bool:
    """Whether ``fd`` can wait for readiness on the event loop: a pipe or a socket. Regular
    files and ``/dev/null`` cannot be polled (epoll refuses them), and a terminal is left in
    blocking mode because the shell that owns it shares its flags."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class _Fd:
    """A descriptor in non-blocking mode for the life of the stream, when it can be polled.

    The original flags are put back by :meth:`restore` (the descriptor's open file may be shared
    with the process that started us).
    """

    def __init__(self, fd: int, *, poll: bool | None = None) -> None:
        self._fd = fd
        self._saved_flags: int | None = None
        self.polled = _pollable(fd) if poll is None else poll
        if self.polled:
            try:
                flags = fcntl.fcntl(fd, fcntl.F_GETFL)
                if not flags & os.O_NONBLOCK:
                    fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
                    self._saved_flags = flags
            except OSError:
                self.polled = False

    def restore(self) -> None:
        if self._saved_flags is not None:
            with contextlib.suppress(OSError):
                fcntl.fcntl(self._fd, fcntl.F_SETFL, self._saved_flags)
            self._saved_flags = None


class FdReceiveStream(anyio.abc.ByteReceiveStream):
    """Reads a file descriptor in chunks.

    A pipe or a socket is read in non-blocking mode, waiting for it on the event loop (no
    thread), into one buffer kept for the life of the stream, each chunk a copy of exactly the
    bytes read; on asyncio the descriptor stays watched from one read to the next (until end
    of input, an error, a cancelled read or :meth:`aclose`), and the loop's callback reads at
    most one chunk ahead of the reader. Anything else (a regular file, ``/dev/null``, a
    terminal) is read with one worker-thread hop per chunk, abandoned on cancel. Either way a
    chunk, never a line.
    """

    def __init__(self, fd: int, *, poll: bool | None = None) -> None:
        self._fd = fd
        self._mode = _Fd(fd, poll=poll)
        self._limiter = anyio.CapacityLimiter(1)
        self._buffer = memoryview(bytearray(0))  # grown to the largest read asked for
        # On asyncio: the loop watching the descriptor (None: not watched), the chunk its
        # callback read and nobody took yet (or the error it met), the reader waiting for it.
        self._watcher: asyncio.AbstractEventLoop | None = None
        self._ready: bytes | OSError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._want = CHUNK_BYTES

    def _read_polled(self, max_bytes: int) -> bytes:
        """One non-blocking read of at most ``max_bytes`` into the kept buffer, copied out at
        its exact size; raises ``BlockingIOError`` when nothing is there."""
        # Not os.read(fd, max_bytes): it allocates max_bytes on the heap for each read and
        # shrinks the block to what was read; longer-lived objects then take the block's rest,
        # and the heap keeps growing with free holes (measured: about 130 KiB a minute under
        # bench/soak.py over stdio, the bytes in use flat).
        if len(self._buffer) < max_bytes:
            self._buffer = memoryview(bytearray(max_bytes))
        view = self._buffer[:max_bytes]
        count = os.readv(self._fd, (view,))
        return view[:count].tobytes()

    @property
    def polled(self) -> bool:
        """Whether the descriptor is waited for on the event loop (non-blocking mode)."""
        return self._mode.polled

    def _on_readable(self) -> None:
        """The loop's callback while the descriptor is watched: reads one chunk for the reader
        and wakes it; with a chunk already waiting to be taken, stops watching instead."""
        if self._ready is not None:
            self._unwatch()  # watched again when the reader takes it
            return
        try:
            self._ready = self._read_polled(self._want)
        except BlockingIOError:
            return
        except OSError as exc:
            self._ready = exc
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _unwatch(self) -> None:
        if self._watcher is not None:
            self._watcher.remove_reader(self._fd)
            self._watcher = None

    async def receive(self, max_bytes: int = CHUNK_BYTES) -> bytes:
        loop = self._watcher or (_asyncio_loop() if self._mode.polled else None)
        if loop is not None:
            # On asyncio: the descriptor stays watched between reads (no registration per
            # wait), its callback reading each chunk as it comes; the reader wakes once per
            # chunk. In this method itself: no coroutine of its own per chunk.
            if self._waiter is not None:
                raise anyio.BusyResourceError("reading from")
            self._want = max_bytes
            try:
                if self._ready is None:
                    if self._watcher is None:
                        loop.add_reader(self._fd, self._on_readable)
                        self._watcher = loop
                    waiter = self._waiter = loop.create_future()
                    await waiter
            except BaseException:
                self._waiter = None
                self._unwatch()  # cancelled: nobody reads until the next receive
                raise
            data, self._ready = self._ready, None
            if isinstance(data, OSError):
                self._unwatch()
                raise data
            if not data:
                self._unwatch()  # end of input
        elif self._mode.polled:
            waited = False
            while True:
                try:
                    data = self._read_polled(max_bytes)
                except BlockingIOError:
                    await anyio.wait_readable(self._fd)
                    waited = True
                    continue
                if not waited:
                    # Let the rest of the loop run (workers, the writer) before this chunk, so
                    # that a peer that never pauses cannot starve them. A wait for input did.
                    await anyio.lowlevel.checkpoint()
                break
        else:
            data = await anyio.to_thread.run_sync(
                os.read, self._fd, max_bytes, abandon_on_cancel=True, limiter=self._limiter
            )
        if not data:
            raise anyio.EndOfStream
        return data

    async def aclose(self) -> None:
        """The descriptor belongs to whoever opened it: it is left open, its flags as found."""
        self._unwatch()
        self._mode.restore()


def _asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or ``None`` (trio)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class FdSendStream(anyio.abc.ByteSendStream):
    """Writes a file descriptor completely, in the order given.

    A pipe or a socket is written in non-blocking mode, waiting on the event loop while it is
    full (no thread); anything else is written in a worker thread.
    """

    def __init__(self, fd: int, *, poll: bool | None = None) -> None:
        self._fd = fd
        self._mode = _Fd(fd, poll=poll)
        self._limiter = anyio.CapacityLimiter(1)

    @property
    def polled(self) -> bool:
        """Whether the descriptor is waited for on the event loop (non-blocking mode)."""
        return self._mode.polled

    def nowait_writer(self) -> Callable[[bytes], int] | None:
        """What :meth:`send_nowait` does, as one C call (``os.write`` on the descriptor): it
        raises ``BlockingIOError`` instead of returning 0 when the descriptor is full, and
        callers take any ``OSError`` as nothing written. ``None`` when not :attr:`polled`."""
        return functools.partial(os.write, self._fd) if self._mode.polled else None

    def send_nowait(self, item: bytes) -> int:
        """Writes what the descriptor takes of ``item`` now, without waiting: how many bytes
        (0 when it is full). Only for a descriptor that is :attr:`polled`."""
        try:
            return os.write(self._fd, item)
        except BlockingIOError:
            return 0

    async def send(self, item: bytes) -> None:
        try:
            if self._mode.polled:
                fd = self._fd
                view = memoryview(item)
                while view:
                    try:
                        written = os.write(fd, view)
                    except BlockingIOError:
                        await anyio.wait_writable(fd)  # the peer is not reading: wait for room
                        continue
                    view = view[written:]
            else:
                await anyio.to_thread.run_sync(
                    _write_all, self._fd, item, abandon_on_cancel=True, limiter=self._limiter
                )
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        """The descriptor belongs to whoever opened it: it is left open, its flags as found."""
        self._mode.restore()


class WireIsolation:
    """Moves the JSON-RPC wire onto private descriptors for the life of the block.

    fd 0 becomes ``/dev/null`` and fd 1 a copy of fd 2, and ``sys.stdout`` is ``sys.stderr``,
    so nothing user code (or a child process it starts) reads or writes reaches the wire.
    :attr:`wire_in` and :attr:`wire_out` are the private descriptors.
    """

    def __init__(self) -> None:
        self.wire_in = -1
        self.wire_out = -1
        self._saved_in = -1
        self._saved_out = -1
        self._saved_stdout = sys.stdout

    def __enter__(self) -> WireIsolation:
        sys.stdout.flush()
        self.wire_in = os.dup(0)
        self.wire_out = os.dup(1)
        self._saved_in = os.dup(0)
        self._saved_out = os.dup(1)
        devnull = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(devnull, 0)
        finally:
            os.close(devnull)
        os.dup2(2, 1)
        self._saved_stdout = sys.stdout
        sys.stdout = sys.stderr
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stdout = self._saved_stdout
        os.dup2(self._saved_in, 0)
        os.dup2(self._saved_out, 1)
        for fd in (self._saved_in, self._saved_out, self.wire_in, self.wire_out):
            os.close(fd)


class StdioTransport:
    """stdio as a transport (:class:`askgate.transports.base.Transport`): built from the server
    it serves, over ``stdin`` and ``stdout`` (byte streams; ``None``: this process's standard
    input and output, descriptors 0 and 1), starting from ``state`` if given. :meth:`running`
    runs the server's runtime for the length of the block; :meth:`serve` runs it and serves
    the one connection until end of input (use :func:`run_stdio` for a whole process)."""

    name: ClassVar[Transport] = "stdio"

    def __init__(
        self,
        server: Serving,
        stdin: anyio.abc.ByteReceiveStream | None = None,
        stdout: anyio.abc.ByteSendStream | None = None,
        *,
        state: State | None = None,
        stop: anyio.Event | None = None,
    ) -> None:
        self.server = server
        self.stdin = stdin
        self.stdout = stdout
        self.state = state
        self.stop = stop  # set: the server stops (R-STOP-1)
        self._runtime: Runtime | None = None

    @property
    def runtime(self) -> Runtime:
        """The server's runtime; raises when the transport is not running."""
        if self._runtime is None:
            raise RuntimeError("the stdio transport is not running: use `transport.serve()`")
        return self._runtime

    @asynccontextmanager
    async def running(self) -> AsyncIterator[StdioTransport]:
        """Runs the server's runtime for the length of the block."""
        async with self.server.running(self.name, state=self.state) as runtime:
            self._runtime = runtime
            try:
                yield self
            finally:
                self._runtime = None

    async def serve(self) -> None:
        """Runs the server and serves its one connection until end of input (or until the peer
        closes the output). Streams it opened itself (descriptors 0 and 1) it closes, leaving
        the descriptors open, their flags as found."""
        async with self.running():
            source = self.stdin if self.stdin is not None else FdReceiveStream(0)
            sink = self.stdout if self.stdout is not None else FdSendStream(1)
            try:
                await serve_stdio(self.runtime, source, sink, stop=self.stop)
            finally:
                if self.stdin is None:
                    await source.aclose()
                if self.stdout is None:
                    await sink.aclose()


def run_stdio(server: Serving, *, backend: str = "asyncio") -> int:
    """Serves ``server`` on this process's standard input and output until end of input, or
    until the process gets SIGINT (Ctrl-C) or SIGTERM, and returns the exit status.

    - 0: serving ended (end of input, or a signal: logged at info as ``stopped by SIGINT``);
    - 1: the server's own machinery failed (said on standard error, with the traceback);
    - 2: the server refused to start (an :class:`~askgate.core.OptionError`, such as a
      sensitive tool nothing authorizes, R-OPT-2, or an ``ASKGATE_LOOP`` it cannot follow,
      docs/performance.md): its one-line reason is printed on standard error and nothing is served.

    On asyncio (``backend``) it runs on uvloop's event loop when uvloop is installed, unless
    ``ASKGATE_LOOP=asyncio`` (docs/performance.md, the event loop).

    A script ends with ``raise SystemExit(server.run_stdio())``.
    """
    try:
        state = server.initial_state("stdio")
    except OptionError as refused:
        print(refused, file=sys.stderr)
        return 2
    options: dict[str, Any] = {}
    if backend == "asyncio":  # uvloop's loop when installed, as ASKGATE_LOOP says
        loop, loop_refusal = event_loop(
            os.environ.get(LOOP_ENV), importlib.util.find_spec("uvloop") is not None
        )
        if loop is None:
            print(loop_refusal, file=sys.stderr)
            return 2
        options["use_uvloop"] = loop == "uvloop"
    stopped: list[str] = []
    with WireIsolation() as wire:

        async def main() -> None:
            if backend == "asyncio":  # the loop it runs on, read off the running loop
                running = type(asyncio.get_running_loop()).__module__.partition(".")[0]
                logger.info("serving stdio (event loop: %s)", running)
            stdin, stdout = FdReceiveStream(wire.wire_in), FdSendStream(wire.wire_out)
            try:
                async with anyio.create_task_group() as tg:
                    stop = anyio.Event()
                    if threading.current_thread() is threading.main_thread():
                        await tg.start(_stop_on_signal, stop, tg.cancel_scope, stopped)
                    await StdioTransport(server, stdin, stdout, state=state, stop=stop).serve()
                    tg.cancel_scope.cancel()  # served to the end: stop watching for signals
            finally:
                with anyio.CancelScope(shield=True):
                    await stdin.aclose()
                    await stdout.aclose()

        try:
            anyio.run(main, backend=backend, backend_options=options)
        except KeyboardInterrupt:  # Ctrl-C before the signal watcher started
            stopped.append("SIGINT")
        except BaseException:  # the machinery, not a callback: callbacks never get here
            logger.critical("askgate stopped: the server failed", exc_info=True)
            print("askgate: the server failed; see the traceback above", file=sys.stderr)
            return 1
    if stopped:
        logger.info("stopped by %s", stopped[0])
    return 0


async def _stop_on_signal(
    stop: anyio.Event,
    scope: anyio.CancelScope,
    stopped: list[str],
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Sets ``stop`` at the first SIGINT or SIGTERM, noting the signal's name (the transport
    ends every call, writes the answers, within ``DRAIN_SECONDS``, and returns: R-STOP-1);
    cancels ``scope`` at a second one."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            if stop.is_set():
                scope.cancel()
                return
            stopped.append(signal.Signals(signum).name)
            stop.set()
