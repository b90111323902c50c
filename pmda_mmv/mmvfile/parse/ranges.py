"""Disjoint byte ranges with a payload each, for the parser's overlap checks."""

from __future__ import annotations

import bisect
from typing import Generic, TypeVar

T = TypeVar("T")


class Ranges(Generic[T]):
    """Disjoint byte ranges ``[start, end)`` with a payload each, sorted by start in blocks
    of at most ``2 * block``: an overlap query costs O(log n) and an insertion O(log n) plus
    moving at most one block, in whatever order the ranges come (a single sorted list
    would move O(n) entries per insertion: 200,000 indoms listed in reverse order took
    16 s).  The standard library has no sorted container, and ``check`` and ``dump`` run on
    the standard library alone."""

    def __init__(self, block: int = 512) -> None:
        self.block = block
        self.blocks: list[list[tuple[int, int, T]]] = []
        self.firsts: list[int] = []  # the first start of each block

    def overlapping(self, start: int, end: int) -> tuple[int, int, T] | None:
        """The range that overlaps ``[start, end)`` (the last one starting before ``end``
        is the only candidate, as the ranges are disjoint), or None."""
        b = bisect.bisect_left(self.firsts, end) - 1
        if b < 0:
            return None
        block = self.blocks[b]
        span = block[bisect.bisect_left(block, end, key=_start) - 1]
        return span if span[1] > start else None

    def add(self, start: int, end: int, payload: T) -> None:
        span = (start, end, payload)
        if not self.blocks:
            self.blocks.append([span])
            self.firsts.append(start)
            return
        b = max(bisect.bisect_right(self.firsts, start) - 1, 0)
        block = self.blocks[b]
        bisect.insort(block, span, key=_start)
        self.firsts[b] = block[0][0]
        half = self.block
        if len(block) > 2 * half:
            self.blocks[b : b + 1] = [block[:half], block[half:]]
            self.firsts[b : b + 1] = [block[0][0], block[half][0]]


def _start(span: tuple[int, int, object]) -> int:
    return span[0]
