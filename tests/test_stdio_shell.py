"""The stdio shell's machinery, piece by piece: the writer's batching, the reader's watched
descriptor, the authorizer's own copy of the arguments. Each read has a deadline."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable

import anyio
import anyio.abc
import pytest

from askgate.server import _own_copy
from askgate.transports.stdio import CHUNK_BYTES, FdReceiveStream, Outbox

pytestmark = pytest.mark.anyio

DEADLINE = 10.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


class Pipe(anyio.abc.ByteSendStream):
    """A send stream that records what it was given, one entry per send; while ``gate`` is
    set to an unset event, a send waits for it."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.gate: anyio.Event | None = None
        self.sending = anyio.Event()

    async def send(self, item: bytes) -> None:
        self.sending.set()
        if self.gate is not None:
            await self.gate.wait()
        self.sent.append(item)

    async def aclose(self) -> None:
        pass


def test_the_authorizers_copy_is_a_deep_copy_that_keeps_shared_parts_shared() -> None:
    shared = [1, {"deep": "x"}]
    arguments: dict[str, object] = {"a": shared, "b": shared, "t": (1, [2])}
    copied = _own_copy(arguments)
    assert copied == copy.deepcopy(arguments) == arguments
    assert isinstance(copied, dict)
    assert copied["a"] is copied["b"]  # shared stays shared
    assert copied["a"] is not shared
    assert copied["t"][1] is not arguments["t"][1]  # type: ignore[index]
    plain = {"text": "hello", "n": 1, "nested": {"list": [{"x": None}]}}
    mine = _own_copy(plain)
    assert mine == plain
    assert mine is not plain
    assert mine["nested"] is not plain["nested"]
    assert mine["nested"]["list"][0] is not plain["nested"]["list"][0]  # type: ignore[index]
    looped: list[object] = []
    looped.append(looped)
    again = _own_copy(looped)
    assert isinstance(again, list)
    assert again[0] is again
    assert again is not looped


def taking_all() -> tuple[list[bytes], Callable[[bytes], int]]:
    """A descriptor write that takes every byte it is given, and what it was given."""
    taken: list[bytes] = []

    def write_now(data: bytes) -> int:
        taken.append(data)
        return len(data)

    return taken, write_now


async def test_a_chunks_replies_go_out_at_once_in_one_write_without_the_pump() -> None:
    outbox, pipe, (direct, write_now) = Outbox(), Pipe(), taking_all()

    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(outbox.pump, pipe)
            await anyio.wait_all_tasks_blocked()
            outbox.hold()
            outbox.write(b"a")
            outbox.write(b"b")
            assert direct == []  # nothing before release
            outbox.release(write_now)
            assert direct == [b"a\nb\n"]
            outbox.close()
    assert pipe.sent == []  # the pump had nothing left to write


async def test_what_the_descriptor_did_not_take_is_written_by_the_pump_in_order() -> None:
    outbox, pipe = Outbox(), Pipe()
    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(outbox.pump, pipe)
            await anyio.wait_all_tasks_blocked()
            outbox.hold()
            outbox.write(b"first")
            outbox.write(b"second")
            outbox.release(lambda _data: 3)  # the pipe took b"fir"
            outbox.write(b"third")
            outbox.close()
    assert b"".join(pipe.sent) == b"st\nsecond\nthird\n"


async def test_nothing_is_written_at_once_while_the_pump_is_in_a_write() -> None:
    outbox, pipe, (direct, write_now) = Outbox(), Pipe(), taking_all()
    pipe.gate = anyio.Event()

    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(outbox.pump, pipe)
            outbox.write(b"one")  # the pump takes it and waits in its write
            await pipe.sending.wait()
            outbox.hold()
            outbox.write(b"two")
            outbox.release(write_now)
            assert direct == []  # "two" waits for the pump, after "one"
            pipe.gate.set()
            outbox.close()
    assert pipe.sent == [b"one\n", b"two\n"]


async def test_a_read_ahead_or_a_cancelled_read_loses_no_input() -> None:
    read_fd, write_fd = os.pipe()
    stream = FdReceiveStream(read_fd, poll=True)
    try:
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as tg:  # a read cancelled before input came
                tg.start_soon(stream.receive)
                await anyio.wait_all_tasks_blocked()
                tg.cancel_scope.cancel()
            os.write(write_fd, b"one\n")
            assert await stream.receive(CHUNK_BYTES) == b"one\n"
            os.write(write_fd, b"two\n")
            await anyio.wait_all_tasks_blocked()  # the loop may read ahead: kept for the reader
            assert await stream.receive(CHUNK_BYTES) == b"two\n"
            os.close(write_fd)
            write_fd = -1
            with pytest.raises(anyio.EndOfStream):
                await stream.receive()
    finally:
        await stream.aclose()
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
