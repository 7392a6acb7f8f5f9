"""The threads sync tools run on inside the `tool_call` activity.

Not the event loop's default executor: that has `min(32, cores + 4)` threads, so on a small
machine calls queued for a thread while their start-to-close clock ran, timed out and ran
twice. Each worker has its own (`WorkerRuntime.tool_threads`), a thread for every activity
slot of the worker, and nobody waits for it at exit: a tool that ignores cancellation
cannot hold a stopping worker past its graceful timeout (the process ends, and the call is
retried elsewhere).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["DEFAULT_ACTIVITY_SLOTS", "ToolThreads"]

DEFAULT_ACTIVITY_SLOTS = 100
"""What a temporalio `Worker` allows when `max_concurrent_activities` is not set."""


class ToolThreads:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reserved = 0
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0

    @property
    def size(self) -> int:
        """Threads for every reserved slot (a default worker's worth when none is)."""
        return self._reserved or DEFAULT_ACTIVITY_SLOTS

    def reserve(self, slots: int) -> None:
        """A worker starts with `slots` activity slots: make room for all of them."""
        with self._lock:
            self._reserved += slots
            if self._pool is not None and self._pool_size < self.size:
                # Threads cannot be added to a pool; calls already running finish on the old one.
                self._pool.shutdown(wait=False)
                self._pool = None

    def release(self, slots: int) -> None:
        """The worker stopped: its threads end once their calls do (none is waited for)."""
        with self._lock:
            self._reserved = max(self._reserved - slots, 0)
            if self._reserved == 0 and self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None

    def executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool_size = self.size
                self._pool = ThreadPoolExecutor(
                    max_workers=self._pool_size, thread_name_prefix="durable-agent-tool"
                )
            return self._pool
