"""Where ids and time come from.

The loop never calls `uuid4()` or `datetime.now()` itself: in-process it uses the system
source, inside a Temporal workflow it is handed one backed by `workflow.uuid4()` and
`workflow.now()`, so replay produces the same ids and timestamps.
"""

from __future__ import annotations

import os
import threading
import uuid
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["IdSource", "SystemIdSource", "format_timestamp", "new_id", "uuid4_text"]


class IdSource(Protocol):
    """Where a run's ids and time come from: the system in-process, the workflow's
    replay-safe random and clock on Temporal."""

    def uuid4(self) -> uuid.UUID: ...

    def uuid4_text(self) -> str:
        """`str(self.uuid4())`; sources answer it without building a `UUID` (a loop step
        takes five ids, and inside a workflow's sandbox a `UUID` object costs dearly)."""
        ...

    def now(self) -> datetime: ...


class SystemIdSource:
    """Random ids and wall-clock time, for runs outside a workflow. Safe to share between
    threads, and a forked child does not repeat its parent's ids."""

    _BATCH = 64 * 16
    """Bytes of `os.urandom` read at once: a loop step takes five ids, and a system call
    for each 16 bytes was a tenth of an in-process step."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._random = b""
        self._used = 0
        self._generation = _forks

    def uuid4(self) -> uuid.UUID:
        return uuid.uuid4()

    def uuid4_text(self) -> str:
        with self._lock:
            used = self._used
            if used + 16 > len(self._random) or self._generation != _forks:
                self._random, self._generation, used = os.urandom(self._BATCH), _forks, 0
            self._used = used + 16
            chunk = self._random[used : used + 16]
        return uuid4_text(int.from_bytes(chunk, "big"))

    def now(self) -> datetime:
        return datetime.now(UTC)


_forks = 0
"""Forks of this process so far, as its child sees them: random bytes read before a fork
are the parent's and must not be used again in the child."""


def _forked() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_forked)


def format_timestamp(moment: datetime) -> str:
    """RFC 3339 with a `Z`, as starweaver writes it (kept as text to preserve nanoseconds)."""
    if moment.tzinfo is not UTC:
        moment = (moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment).astimezone(UTC)
    return moment.isoformat().replace("+00:00", "Z")


def new_id(source: IdSource, prefix: str) -> str:
    """`<prefix>_<uuid4>`."""
    return f"{prefix}_{source.uuid4_text()}"


def uuid4_text(bits: int) -> str:
    """`str(uuid.UUID(int=bits, version=4))`, without the `UUID` object."""
    bits = (bits & ~(0xC000 << 48)) | (0x8000 << 48)
    bits = (bits & ~(0xF000 << 64)) | (4 << 76)
    h = f"{bits:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
