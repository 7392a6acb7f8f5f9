"""Where ids and time come from.

The loop never calls `uuid4()` or `datetime.now()` itself: in-process it uses the system
source, inside a Temporal workflow it is handed one backed by `workflow.uuid4()` and
`workflow.now()`, so replay produces the same ids and timestamps.
"""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["IdSource", "SystemIdSource", "format_timestamp"]


class IdSource(Protocol):
    def uuid4(self) -> uuid.UUID: ...

    def now(self) -> datetime: ...


class SystemIdSource:
    """Random ids and wall-clock time, for runs outside a workflow."""

    def uuid4(self) -> uuid.UUID:
        return uuid.uuid4()

    def now(self) -> datetime:
        return datetime.now(UTC)


def format_timestamp(moment: datetime) -> str:
    """RFC 3339 with a `Z`, as starweaver writes it (kept as text to preserve nanoseconds)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def new_id(source: IdSource, prefix: str) -> str:
    if type(source) is SystemIdSource:
        return f"{prefix}_{_random_uuid4()}"
    return f"{prefix}_{source.uuid4()}"


def _random_uuid4() -> str:
    """`str(uuid.uuid4())` without the `UUID` object: in-process, a loop step takes five."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
