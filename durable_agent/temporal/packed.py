"""A list of byte strings a waiting run keeps packed, so a cached run that waits for days
holds its past boundaries and unread stream records as one compressed block.

A run keeps each boundary's checkpoint as JSON (forks and the `checkpoints` query read them)
and, until someone polls, the stream's records as JSON. Consecutive ones differ in a few
fields, so zlib packs them several times smaller; but a step cannot spare the time to pack
each one (short runs are measured against bare Temporal), so they are packed only when the
run starts to wait for a person (`pack`), once per wait. Reading a packed value unpacks the
block (queries, forks, a poll: rare next to the wait), and values kept after a wait stay
plain until the next one.
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Iterator
from itertools import accumulate

__all__ = ["PackedBytes"]

PACK_LEVEL = 6
"""zlib's default: on ~1 kB JSON values it is within a few percent of level 9's size."""
_NO_ENDS = array("L")
"""Every empty instance's `_ends` (replaced, never changed in place): a waiting run keeps
several of these, and an array or a list made for nothing is an object of each cached run."""
_NO_TAIL: tuple[bytes, ...] = ()


class PackedBytes:
    """Append, index, iterate and `len` as a list of bytes; `pack` to shrink it."""

    __slots__ = ("_block", "_ends", "_tail")

    def __init__(self) -> None:
        self._block = b""
        """The packed values, one zlib stream (empty: none packed)."""
        self._ends = _NO_ENDS
        """Where each packed value ends in the unpacked block (an array: one block of
        machine words, not an int object each)."""
        self._tail: list[bytes] | tuple[bytes, ...] = _NO_TAIL
        """Values appended since the last `pack`: a list once there is one."""

    def append(self, value: bytes) -> None:
        tail = self._tail
        if isinstance(tail, list):
            tail.append(value)
        else:
            self._tail = [value]

    def __len__(self) -> int:
        return len(self._ends) + len(self._tail)

    def __getitem__(self, index: int) -> bytes:
        if index < 0:
            index += len(self)
        packed = len(self._ends)
        if index >= packed:
            return self._tail[index - packed]
        if index < 0:
            raise IndexError(index)
        block = zlib.decompress(self._block)
        start = self._ends[index - 1] if index else 0
        return block[start : self._ends[index]]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.since(0))

    def since(self, start: int) -> list[bytes]:
        """The values from `start` on (one unpack for all the packed ones among them)."""
        packed = len(self._ends)
        if start >= packed:
            tail = self._tail  # a list, or the shared empty tuple
            return tail[start - packed :] if isinstance(tail, list) else []
        block = zlib.decompress(self._block)
        starts = (0, *self._ends[:-1])
        values = [block[starts[i] : self._ends[i]] for i in range(start, packed)]
        values += self._tail
        return values

    def clear(self) -> None:
        self._block, self._ends, self._tail = b"", _NO_ENDS, _NO_TAIL

    def pack(self) -> None:
        """Packs every value kept so far into one block (nothing new: nothing to do)."""
        if not self._tail:
            return
        values = self.since(0)
        self._block = zlib.compress(b"".join(values), PACK_LEVEL)
        self._ends = array("L", accumulate(len(value) for value in values))
        self._tail = _NO_TAIL

    @property
    def packed_bytes(self) -> int:
        """The packed block's size (what `pack` saved is visible against the values')."""
        return len(self._block)
