"""Per-run cache of message histories on the activity worker.

A model request carries only the messages added since the previous request, plus the
length and chained digest of the prefix. On a hit the activity rebuilds the full history
from its cache; on a miss (another worker, a restart) it reads the history from the
workflow by query, so Temporal stays the single source of truth.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_agent import ModelMessage
from durable_agent.temporal.history import EMPTY_DIGEST, extend_digest
from durable_agent.temporal.wire import HistoryPageQuery, HistoryRef, HistorySegment

__all__ = ["HistoryCache", "history_cache"]

PAGE = 200


@dataclass
class _Entry:
    messages: list[ModelMessage]
    digest: str


class HistoryCache:
    def __init__(self, max_runs: int = 512) -> None:
        self.max_runs = max_runs
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.hits = 0
        self.misses = 0

    # Entries are keyed by workflow id, not run id: the history carries over continue-as-new
    # (the digest tells a reused workflow id apart).

    def lookup(self, workflow_id: str, ref: HistoryRef) -> list[ModelMessage] | None:
        if ref.length == 0:
            return []
        entry = self._entries.get(workflow_id)
        if entry is None or len(entry.messages) != ref.length or entry.digest != ref.digest:
            return None
        self._entries.move_to_end(workflow_id)
        return entry.messages

    def clear(self) -> None:
        """Forgets every history, as a worker that just started knows none."""
        self._entries.clear()

    def store(self, workflow_id: str, messages: list[ModelMessage], digest: str) -> None:
        self._entries[workflow_id] = _Entry(messages, digest)
        self._entries.move_to_end(workflow_id)
        while len(self._entries) > self.max_runs:
            self._entries.popitem(last=False)

    async def resolve(self, workflow_id: str, run_id: str, ref: HistoryRef) -> list[ModelMessage]:
        """The `ref.length` messages the workflow means, from cache or by query."""
        cached = self.lookup(workflow_id, ref)
        if cached is not None:
            self.hits += 1
            return list(cached)
        self.misses += 1
        messages = await self._read_from_workflow(workflow_id, run_id, ref)
        if len(messages) != ref.length or extend_digest(EMPTY_DIGEST, messages) != ref.digest:
            raise ApplicationError(
                f"message history of {workflow_id} does not match the digest the workflow "
                f"sent ({len(messages)} of {ref.length} messages read); retrying",
                type="history_mismatch",
            )
        return messages

    async def _read_from_workflow(
        self, workflow_id: str, run_id: str, ref: HistoryRef
    ) -> list[ModelMessage]:
        """Pages through every run that holds part of the history (continue-as-new)."""
        client = activity.client()
        current = client.get_workflow_handle(workflow_id, run_id=run_id)
        segments = await current.query("history_segments", result_type=list[HistorySegment])
        messages: list[ModelMessage] = []
        for segment in segments:
            handle = client.get_workflow_handle(workflow_id, run_id=segment.run_id)
            while len(messages) < min(segment.end, ref.length):
                activity.heartbeat()
                page = await handle.query(
                    "message_history_page",
                    HistoryPageQuery(offset=len(messages), limit=PAGE),
                    result_type=list[ModelMessage],
                )
                if not page:
                    break
                messages.extend(page)
        return messages[: ref.length]


history_cache = HistoryCache()
