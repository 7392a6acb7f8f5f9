"""The payload sizes of a run's latest stream records, from which the continue-as-new
handoff picks what it carries (`EventStream.handoff`)."""

from __future__ import annotations

from array import array

__all__ = ["RecentSizes"]

_COMPACT_AFTER = 64
"""Sizes dropped off the front are let go of in bulk, once there are this many and more
than half the array."""


class RecentSizes:
    """The latest sizes whose total stays within `bound` bytes (the newest always kept).

    An array of machine integers, not a deque of ints: a run that waits for days keeps
    one of these, its int objects and its deque's block included."""

    def __init__(self, bound: int) -> None:
        self._bound = bound
        self._sizes = array("L")
        self._first = 0
        """Where the kept sizes start: those before dropped off the front."""
        self._total = 0

    def add(self, size: int) -> None:
        sizes = self._sizes
        sizes.append(size)
        self._total += size
        while self._total > self._bound and len(sizes) - self._first > 1:
            self._total -= sizes[self._first]
            self._first += 1
        if self._first > _COMPACT_AFTER and self._first * 2 > len(sizes):
            del sizes[: self._first]
            self._first = 0

    def fitting(self, limit: int, records: int | None = None) -> int:
        """How many of the latest sizes fit in `limit` bytes (and `records`, if given)."""
        kept = total = 0
        for size in reversed(self._sizes[self._first :]):
            if total + size > limit or (records is not None and kept >= records):
                break
            total += size
            kept += 1
        return kept

    def __len__(self) -> int:
        return len(self._sizes) - self._first
