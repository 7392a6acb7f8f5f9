"""Reading a run's event stream and checkpoints across its continue-as-new chain.

Every run publishes its `AgentStreamRecord`s on topic `events` of its Workflow Stream
(`temporalio.contrib.workflow_streams`); an item's offset is its record's `seq`. A plain
Workflow Streams client follows it with `WorkflowStreamClient.subscribe(["events"])`, whose
polls are workflow updates: each one adds events to history. `StreamReader` reads the same
items with the stream's poll *query* instead, which adds nothing to history however many
people watch, at the price of asking every `poll_interval` seconds.

A continued-as-new run starts its stream where the run before it stopped and does not
carry the earlier records along (history would grow with the transcript); they stay in
the earlier runs, which the `runs` query names, and are read from there while retention
keeps those runs. Records of a run retention deleted are skipped: the reader logs which.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, Field
from temporalio.api.common.v1 import Payload
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.contrib.workflow_streams import PollInput, PollResult
from temporalio.service import RPCError, RPCStatusCode

from durable_agent import AgentResumeEvidence
from durable_agent.contract.records import TERMINAL_KINDS, AgentStreamRecord, SuspendedData

from ._sdk import STREAM_OFFSET_QUERY, STREAM_POLL
from .executor import CONTINUE_AS_NEW
from .run_errors import AgentRunError, CannotConnect, NoWorker, RunNotFound
from .wire import EVENTS_TOPIC, CheckpointsView, RunLink
from .workflow import AgentWorkflow

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "CheckpointChain",
    "MissingCheckpoints",
    "StreamPastEnd",
    "StreamReader",
]

DEFAULT_POLL_INTERVAL = 0.1
"""Seconds between polls of a run that has nothing new: the most a record waits for a
reader that is caught up (plus one round trip)."""
CLOSED_CHECK_SECONDS = 1.0
"""How often an idle reader asks the server whether the run has ended."""
RETRY_SECONDS = (0.5, 1.0, 2.0, 5.0)
"""Waits between polls of a running run no worker answers (a worker restarting)."""
CLOSED = frozenset(
    {
        WorkflowExecutionStatus.COMPLETED,
        WorkflowExecutionStatus.FAILED,
        WorkflowExecutionStatus.CANCELED,
        WorkflowExecutionStatus.TERMINATED,
        WorkflowExecutionStatus.TIMED_OUT,
    }
)

T = TypeVar("T")
log = logging.getLogger("durable_agent.client")


class StreamPastEnd(AgentRunError):
    """`stream(after=...)` of a run that has ended before that seq; `last_seq` is its last
    record's (-1: it has none)."""

    def __init__(self, workflow_id: str, after: int, last_seq: int) -> None:
        super().__init__(
            f"run {workflow_id!r} has ended; its last record is seq {last_seq}, so there is "
            f"nothing after seq {after}",
            workflow_id=workflow_id,
        )
        self.last_seq = last_seq


class MissingCheckpoints(BaseModel):
    """Boundaries `first`..`last` (indexes over the chain) were held by run `run_id`, which
    the server no longer has (namespace retention deleted it)."""

    run_id: str
    first: int
    last: int


class CheckpointChain(BaseModel):
    """Every boundary of a workflow's continue-as-new chain that can still be read, in
    order, with each one's index over the chain, and the ones that cannot."""

    checkpoints: list[AgentResumeEvidence] = Field(default_factory=list)
    indexes: list[int] = Field(default_factory=list)
    missing: list[MissingCheckpoints] = Field(default_factory=list)


class _Gone(Exception):
    """The run asked about no longer exists."""


def decode_records(result: PollResult, client: Client) -> list[AgentStreamRecord]:
    """The records in a poll result (items are base64 of a serialized `Payload`, the
    Workflow Streams wire format)."""
    converter = client.data_converter.payload_converter
    out = []
    for item in result.items:
        payload = Payload()
        payload.ParseFromString(base64.b64decode(item.data))
        out.append(converter.from_payload(payload, AgentStreamRecord))
    return out


class StreamReader:
    """Reads one workflow's records and checkpoints; `timeout` bounds each call."""

    def __init__(self, client: Client, workflow_id: str, timeout: float) -> None:
        self.client = client
        self.workflow_id = workflow_id
        self.timeout = timeout

    # -- calls ------------------------------------------------------------------------------

    def _run(self, run_id: str | None) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle(self.workflow_id, run_id=run_id)

    async def _ask(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await asyncio.wait_for(call(), self.timeout)
        except TimeoutError:
            raise NoWorker(
                f"no worker answered the {what} for {self.workflow_id!r} within "
                f"{self.timeout:g}s; is a worker running on its task queue?",
                workflow_id=self.workflow_id,
            ) from None
        except WorkflowQueryFailedError as error:
            raise AgentRunError(
                f"{what} failed: {error.message} (is the run's worker older than the event "
                "stream? upgrade it)",
                workflow_id=self.workflow_id,
            ) from None
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                raise _Gone(error.message) from None
            if error.status == RPCStatusCode.UNAVAILABLE:
                raise CannotConnect(
                    f"lost the connection to the Temporal server: {error.message}",
                    workflow_id=self.workflow_id,
                ) from None
            if error.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
                raise NoWorker(
                    f"no worker answered the {what} for {self.workflow_id!r}",
                    workflow_id=self.workflow_id,
                ) from None
            raise AgentRunError(
                f"{what} failed: {error.message}", workflow_id=self.workflow_id
            ) from None

    async def _poll(self, run_id: str, offset: int) -> PollResult:
        result: PollResult = await self._ask(
            "stream query",
            lambda: self._run(run_id).query(
                STREAM_POLL,
                PollInput(topics=[EVENTS_TOPIC], from_offset=offset),
                result_type=PollResult,
            ),
        )
        return result

    async def _status(self, run_id: str | None) -> WorkflowExecutionStatus | None:
        description = await self._ask("describe", lambda: self._run(run_id).describe())
        return description.status

    async def links(self) -> list[RunLink]:
        """The runs of the chain, oldest first, from the latest run's `runs` query."""
        try:
            links: list[RunLink] = await self._ask(
                "runs query", lambda: self._run(None).query(AgentWorkflow.runs)
            )
        except _Gone:
            raise RunNotFound(
                f"no workflow with id {self.workflow_id!r}", workflow_id=self.workflow_id
            ) from None
        return links

    async def position(self) -> int:
        """The seq the latest run's next record will get."""
        offset: int = await self._ask(
            "stream offset query",
            lambda: self._run(None).query(STREAM_OFFSET_QUERY, result_type=int),
        )
        return offset

    # -- records ----------------------------------------------------------------------------

    async def records(
        self, after: int | None, *, poll_interval: float = DEFAULT_POLL_INTERVAL
    ) -> AsyncIterator[AgentStreamRecord]:
        """Records with a seq above `after`, oldest first, live until the chain's last run
        ends (see `AgentRunHandle.stream`)."""
        want = 0 if after is None else after + 1
        links = await self.links()
        index = max((i for i, link in enumerate(links) if link.first_seq <= want), default=0)
        while True:
            link = links[index]
            if index + 1 < len(links):
                end = links[index + 1].first_seq
                async for record in self._closed(link.run_id, want, end):
                    want = record.seq + 1
                    yield record
                want = max(want, end)
                index += 1
                continue
            async for record in self._follow(link.run_id, want, poll_interval):
                want = record.seq + 1
                yield record
            status = await self._status(link.run_id)
            if status != WorkflowExecutionStatus.CONTINUED_AS_NEW:
                return
            links = await self._successors(links, link.run_id)
            index += 1

    async def _successors(self, links: list[RunLink], run_id: str) -> list[RunLink]:
        """The chain again, once `run_id` has continued as new: from the latest run, which
        names `run_id` among its earlier runs (asked again while the successor starts)."""
        fresh = links
        for delay in (0.0, *RETRY_SECONDS):
            await asyncio.sleep(delay)
            fresh = await self.links()
            ids = [link.run_id for link in fresh]
            if run_id in ids and ids[-1] != run_id:
                return fresh
        # A chain continued before runs named their predecessors: go on with the latest.
        latest = await self._ask("describe", lambda: self._run(None).describe())
        if latest.run_id in (None, run_id):
            raise AgentRunError(
                f"run {run_id} of {self.workflow_id!r} continued as new, but no run after it "
                "has started yet; watch it again in a moment",
                workflow_id=self.workflow_id,
            )
        return [*links, RunLink(run_id=latest.run_id, first_seq=links[-1].first_seq)]

    async def _closed(self, run_id: str, want: int, end: int) -> AsyncIterator[AgentStreamRecord]:
        """A run that continued as new: its records from `want` up to `end`."""
        offset = want
        while offset < end:
            try:
                result = await self._poll(run_id, offset)
            except _Gone:
                log.warning(
                    "records %d-%d of %r are gone: run %s no longer exists (retention)",
                    offset,
                    end - 1,
                    self.workflow_id,
                    run_id,
                )
                return
            records = decode_records(result, self.client)
            for record in records:
                if offset <= record.seq < end:
                    yield record
            if not records or not result.more_ready:
                return
            offset = result.next_offset

    async def _follow(
        self, run_id: str, want: int, poll_interval: float
    ) -> AsyncIterator[AgentStreamRecord]:
        """The chain's latest run, live: polls until the run has closed and everything it
        published has been read."""
        offset = want
        checked = time.monotonic()
        closed = False
        retry = 0
        first = True
        while True:
            try:
                result = await self._poll(run_id, offset)
            except NoWorker:
                if closed:
                    raise
                if await self._status(run_id) in CLOSED:
                    if first:
                        raise
                    # It closed while this poll waited: its worker went away (a poll then
                    # waits on the worker's sticky queue) and another one finished it. Read
                    # once more what it published before it closed.
                    closed = True
                    continue
                delay = RETRY_SECONDS[min(retry, len(RETRY_SECONDS) - 1)]
                if retry == 0:
                    log.warning("no worker answers for %r; polling again", self.workflow_id)
                retry += 1
                await asyncio.sleep(delay)
                continue
            except _Gone:
                raise RunNotFound(
                    f"run {run_id} of {self.workflow_id!r} no longer exists",
                    workflow_id=self.workflow_id,
                ) from None
            retry = 0
            records = decode_records(result, self.client)
            if first and records and records[0].seq > offset:
                log.warning(
                    "records %d-%d of %r are not available (an earlier run that no longer "
                    "exists, or one that does not name it)",
                    offset,
                    records[0].seq - 1,
                    self.workflow_id,
                )
            first = first and not records
            ending = False
            for record in records:
                if record.seq < offset:
                    continue
                offset = record.seq + 1
                ending = ending or _ends(record)
                yield record
            if result.more_ready:
                continue
            if closed:
                if result.next_offset < want:
                    raise StreamPastEnd(self.workflow_id, want - 1, result.next_offset - 1)
                return
            now = time.monotonic()
            if ending or now - checked >= CLOSED_CHECK_SECONDS:
                checked = now
                status = await self._status(run_id)
                if status in CLOSED or status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
                    closed = True  # read once more: what it published before it closed
                    continue
            await asyncio.sleep(poll_interval)

    # -- checkpoints ------------------------------------------------------------------------

    async def checkpoints(self) -> CheckpointChain:
        """Every boundary of the chain: the latest run's `checkpoints` query names the runs
        before it, each asked for its own."""
        latest = await self._view(None)
        if latest is None:
            raise RunNotFound(
                f"no workflow with id {self.workflow_id!r}", workflow_id=self.workflow_id
            )
        chain = CheckpointChain()
        bounds = [
            *latest.earlier_runs,
            RunLink(run_id=latest.run_id, first_checkpoint=latest.first_index),
        ]
        for position, link in enumerate(bounds[:-1]):
            end = bounds[position + 1].first_checkpoint
            view = await self._view(link.run_id)
            if view is None:
                if end > link.first_checkpoint:
                    chain.missing.append(
                        MissingCheckpoints(
                            run_id=link.run_id, first=link.first_checkpoint, last=end - 1
                        )
                    )
                continue
            _extend(chain, view, end)
        if latest.first_index > 0 and not latest.earlier_runs:
            # A chain continued before runs named their predecessors.
            chain.missing.append(
                MissingCheckpoints(run_id="?", first=0, last=latest.first_index - 1)
            )
        _extend(chain, latest, None)
        return chain

    async def _view(self, run_id: str | None) -> CheckpointsView | None:
        try:
            raw: Any = await self._ask(
                "checkpoints query",
                lambda: self._run(run_id).query("checkpoints", result_type=Any),
            )
        except _Gone:
            return None
        if isinstance(raw, list):  # a worker from before the view: this run's list only
            evidence = [AgentResumeEvidence.model_validate(item) for item in raw]
            return CheckpointsView(run_id=run_id or "", checkpoints=evidence)
        return CheckpointsView.model_validate(raw)


def _extend(chain: CheckpointChain, view: CheckpointsView, end: int | None) -> None:
    for offset, evidence in enumerate(view.checkpoints):
        index = view.first_index + offset
        if end is not None and index >= end:
            break
        chain.checkpoints.append(evidence)
        chain.indexes.append(index)


def _ends(record: AgentStreamRecord) -> bool:
    """A record after which the run has (probably) closed: worth asking the server."""
    if record.kind in TERMINAL_KINDS:
        return True
    data = record.data
    return isinstance(data, SuspendedData) and data.reason == CONTINUE_AS_NEW
