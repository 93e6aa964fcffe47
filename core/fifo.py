"""A persistent first-in-first-out queue that also removes from the middle.

The reducer needs "the oldest X" in a few places (the owner that has held the top parked count
longest, the oldest capability entry of a group, the oldest closed nonce)
without scanning and without copying. Entries get consecutive positions; removing one leaves a
hole that ``head`` skips, so ``first`` is O(1) and each hole is skipped once on a linear
history. Every operation returns a new queue and leaves the old one untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

import attrs
from immutables import Map

from .record import record

T = TypeVar("T")


@record
class Fifo(Generic[T]):
    """Entries by position; ``head`` is the lowest occupied position (or ``tail`` if empty)."""

    items: Map[int, T] = attrs.field(factory=Map)
    head: int = 0
    tail: int = 0

    def push(self, value: T) -> tuple[Fifo[T], int]:
        """Appends ``value``; returns the new queue and the position it took."""
        pos = self.tail
        return Fifo(self.items.set(pos, value), self.head, pos + 1), pos

    def remove(self, pos: int) -> Fifo[T]:
        """Removes the entry at ``pos`` (which must be occupied)."""
        items = self.items.delete(pos)
        head = self.head
        if pos == head:
            tail = self.tail
            head += 1
            while head < tail and head not in items:
                head += 1
        return Fifo(items, head, self.tail)

    def first(self) -> T | None:
        """The oldest entry, or ``None`` when empty."""
        return self.items.get(self.head)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[T]:
        """Entries oldest first (a scan: for checks and rendering, never the hot path)."""
        items = self.items
        for pos in range(self.head, self.tail):
            value = items.get(pos)
            if value is not None:
                yield value

    def check(self) -> None:
        """Raises ``AssertionError`` if ``head`` is not the lowest occupied position."""
        if self.items:
            if min(self.items.keys()) != self.head:
                raise AssertionError(f"fifo head {self.head} is not its lowest position")
            if max(self.items.keys()) >= self.tail:
                raise AssertionError("fifo entry at or past its tail")
        elif self.head != self.tail:
            raise AssertionError("empty fifo with head != tail")
