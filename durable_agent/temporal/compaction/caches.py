"""The activity worker's caches: message histories, tool results, toolset definitions.

A model request carries only the messages added since the previous request, plus the
length and chained digest of the prefix. On a hit the activity rebuilds the full history
from its cache; on a miss (another worker, a restart) it reads the history from the
workflow by query, so Temporal stays the single source of truth. Tool results are kept
for the model request that sends them to the model next, which names them instead of
carrying them again (`.format`). Toolset tool definitions are kept by digest, read from
the workflow's `toolset_tools` query on a miss.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.client import WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from durable_agent import ModelMessage, ToolDefinition, ToolReturn

from ..wire import HistoryPageQuery, HistoryRef, HistorySegment
from .digest import EMPTY_DIGEST, definitions_digest, extend_digest

__all__ = [
    "HistoryCache",
    "PayloadCaches",
    "ToolDefinitionsCache",
    "ToolReturnCache",
]

PAGE = 200
T = TypeVar("T")

QUERY_WAIT = timedelta(seconds=20)
"""How long one read-back query may wait for its answer."""
UNANSWERED = frozenset(
    {
        RPCStatusCode.CANCELLED,  # the client's own timeout ("Timeout expired")
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.RESOURCE_EXHAUSTED,
    }
)
"""A query that failed with one of these was not answered yet; it was not refused."""
RETRY_DELAYS = (0.5, 1.0, 2.0, 5.0)
"""Seconds between asks, then the last one again."""


async def ask_workflow(
    handle: WorkflowHandle[Any, Any], query: str, *args: Any, result_type: type[T]
) -> T:
    """`query` of the workflow, asked again until it answers.

    A workflow answers a query only once the workflow task it has pending is done, and on
    a busy fleet (a backlog after a restart or an upgrade) that task can wait in the queue
    for minutes. Failing the activity then would spend the model request's attempts (five
    by default) on the fleet's backlog and fail a run that was fine (seen in the rolling
    upgrade under load, tests/upgrade_load.py). So an unanswered query is asked again,
    heartbeating, until it is answered or the activity's own timeouts end the attempt; a
    refusal (a failed query, a workflow not found) still fails at once."""
    delays = iter(RETRY_DELAYS)
    while True:
        try:
            answer: T = await handle.query(
                query, args=args, result_type=result_type, rpc_timeout=QUERY_WAIT
            )
            return answer
        except RPCError as error:
            if error.status not in UNANSWERED:
                raise
        if activity.in_activity():
            activity.heartbeat()
        await asyncio.sleep(next(delays, RETRY_DELAYS[-1]))


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
        self.tail_reads = 0
        """Model requests whose new messages were read back by query (`read_tail`)."""

    # Entries are keyed by workflow id, not run id: the history carries over continue-as-new
    # (the digest tells a reused workflow id apart).

    def lookup(self, workflow_id: str, ref: HistoryRef) -> list[ModelMessage] | None:
        if ref.length == 0:
            return []
        found = self._lookup(workflow_id, ref)
        return None if found is None else found.messages

    def _lookup(self, workflow_id: str, ref: HistoryRef) -> _Entry | None:
        # Inputs of this release carry a shortened digest; earlier ones the whole of it.
        entry = self._entries.get(workflow_id)
        if entry is None or len(entry.messages) != ref.length:
            return None
        if not entry.digest.startswith(ref.digest):
            return None
        self._entries.move_to_end(workflow_id)
        return entry

    def clear(self) -> None:
        """Forgets every history, as a worker that just started knows none."""
        self._entries.clear()

    def holds(self, workflow_id: str) -> bool:
        return workflow_id in self._entries

    def forget(self, workflow_id: str) -> None:
        """Drops a run's history once its output is accepted: it makes no further request
        unless it goes on (a session's next turn, which then reads it back once). A cache
        full of ended runs' conversations would hold most of a busy worker's objects,
        and every full garbage collection walks them all."""
        self._entries.pop(workflow_id, None)

    def store(self, workflow_id: str, messages: list[ModelMessage], digest: str) -> None:
        self._entries[workflow_id] = _Entry(messages, digest)
        self._entries.move_to_end(workflow_id)
        while len(self._entries) > self.max_runs:
            self._entries.popitem(last=False)

    async def resolve_with_digest(
        self, workflow_id: str, run_id: str, ref: HistoryRef
    ) -> tuple[list[ModelMessage], str]:
        """The messages `ref` names and their whole digest (`ref` may carry a prefix of it)."""
        if ref.length == 0:
            return [], EMPTY_DIGEST
        cached = self._lookup(workflow_id, ref)
        if cached is not None:
            self.hits += 1
            return list(cached.messages), cached.digest
        self.misses += 1
        messages = await self._read_from_workflow(workflow_id, run_id, ref)
        digest = extend_digest(EMPTY_DIGEST, messages)
        if len(messages) != ref.length or not digest.startswith(ref.digest):
            raise _mismatch(workflow_id, len(messages), ref.length)
        return messages, digest

    async def read_tail(
        self, workflow_id: str, run_id: str, start: int, end: int, *, after: str, through: str
    ) -> tuple[list[ModelMessage], str]:
        """Messages `[start, end)`, which the workflow run `run_id` has just added, and the
        digest they extend `after` (the first `start` messages' digest) to; it must start
        with `through`, the workflow's."""
        self.tail_reads += 1
        handle = activity.client().get_workflow_handle(workflow_id, run_id=run_id)
        messages: list[ModelMessage] = []
        while start + len(messages) < end:
            page = await ask_workflow(
                handle,
                "message_history_page",
                HistoryPageQuery(offset=start + len(messages), limit=PAGE),
                result_type=list[ModelMessage],
            )
            if not page:
                break
            messages.extend(page)
        messages = messages[: end - start]
        digest = extend_digest(after, messages)
        if len(messages) < end - start or not digest.startswith(through):
            raise _mismatch(workflow_id, start + len(messages), end)
        return messages, digest

    async def _read_from_workflow(
        self, workflow_id: str, run_id: str, ref: HistoryRef
    ) -> list[ModelMessage]:
        """Pages through every run that holds part of the history (continue-as-new)."""
        client = activity.client()
        current = client.get_workflow_handle(workflow_id, run_id=run_id)
        segments = await ask_workflow(current, "history_segments", result_type=list[HistorySegment])
        messages: list[ModelMessage] = []
        for segment in segments:
            handle = client.get_workflow_handle(workflow_id, run_id=segment.run_id)
            while len(messages) < min(segment.end, ref.length):
                activity.heartbeat()
                page = await ask_workflow(
                    handle,
                    "message_history_page",
                    HistoryPageQuery(offset=len(messages), limit=PAGE),
                    result_type=list[ModelMessage],
                )
                if not page:
                    break
                messages.extend(page)
        return messages[: ref.length]


def _mismatch(workflow_id: str, read: int, meant: int) -> ApplicationError:
    return ApplicationError(
        f"message history of {workflow_id} does not match the digest the workflow "
        f"sent ({read} of {meant} messages read); retrying",
        type="history_mismatch",
    )


class ToolReturnCache:
    """The latest tool results of recent runs, by workflow id and tool call id, until the
    model request that sends them on takes them."""

    def __init__(self, max_returns: int = 4096) -> None:
        self.max_returns = max_returns
        self._returns: OrderedDict[tuple[str, str], ToolReturn] = OrderedDict()

    def store(self, workflow_id: str, tool_return: ToolReturn) -> None:
        key = (workflow_id, tool_return.tool_call_id)
        self._returns[key] = tool_return
        self._returns.move_to_end(key)
        while len(self._returns) > self.max_returns:
            self._returns.popitem(last=False)

    def get(self, workflow_id: str, tool_call_id: str) -> ToolReturn | None:
        return self._returns.get((workflow_id, tool_call_id))

    def take(self, workflow_id: str, tool_call_id: str) -> ToolReturn | None:
        """`get`, for the one model request that sends the result on: from then on the
        history cache holds it, and a retried request reads it back (`read_tail`)."""
        return self._returns.pop((workflow_id, tool_call_id), None)

    def holds(self, workflow_id: str) -> bool:
        return any(key[0] == workflow_id for key in self._returns)

    def clear(self) -> None:
        self._returns.clear()


class ToolDefinitionsCache:
    """A run's listed toolset tools by the digest of their definitions (`.digest`): model
    requests carry the digest instead of the schemas (tens of kB for a large server)."""

    def __init__(self, max_entries: int = 256) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, list[ToolDefinition]] = OrderedDict()
        self.misses = 0

    def store(self, digest: str, definitions: list[ToolDefinition]) -> None:
        self._entries[digest] = definitions
        self._entries.move_to_end(digest)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    async def resolve(self, workflow_id: str, run_id: str, digest: str) -> list[ToolDefinition]:
        cached = self._entries.get(digest)
        if cached is not None:
            self._entries.move_to_end(digest)
            return cached
        self.misses += 1
        handle = activity.client().get_workflow_handle(workflow_id, run_id=run_id)
        definitions = await ask_workflow(handle, "toolset_tools", result_type=list[ToolDefinition])
        if definitions_digest(definitions) != digest:
            raise ApplicationError(
                f"the toolset tools of {workflow_id} do not match the digest the workflow "
                "sent; retrying",
                type="toolset_mismatch",
            )
        self.store(digest, definitions)
        return definitions


@dataclass
class PayloadCaches:
    """One worker's caches (`WorkerRuntime.caches`): what its activities rebuild packed
    inputs from. Another worker's are as good as none: a miss reads from the workflow."""

    histories: HistoryCache = field(default_factory=HistoryCache)
    tool_returns: ToolReturnCache = field(default_factory=ToolReturnCache)
    tool_definitions: ToolDefinitionsCache = field(default_factory=ToolDefinitionsCache)
