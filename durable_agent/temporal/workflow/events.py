"""The run's event stream on the workflow side: records out, model deltas in.

Every `AgentStreamRecord` the loop emits is published on the run's Workflow Stream (topic
`events`) at offset == seq. Invariants: offsets stay equal to seqs (outside publishers are
refused), a model's delta batches count once and in order, and a continue-as-new hands the
successor only the latest records, bounded by `HANDOFF_RECORDS` and `HANDOFF_BYTES`.

Records nobody is reading wait as JSON bytes and enter the stream's log when something reads
it: a poll (update or query), the offset query, or the handoff (`flush`; the plugin's
`StreamPollInterceptor` calls it before the stream's handlers, and while a poll is in flight
every record goes in at once, so a waiting poll wakes as before). The log holds a
`WorkflowStreamItem` and a `Payload` a record, two objects for the garbage collector to walk
for as long as the run is cached; bytes are none. What a reader sees is the same either way:
the same records at the same offsets, and no command depends on it, so replays are unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pydantic_core import to_json
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState
from temporalio.converter import PayloadConverter

with workflow.unsafe.imports_passed_through():
    from ...contract.checkpoint import AgentExecutionNode
    from ...contract.records import AgentStreamRecord, ModelRetryData
    from ...models.base import ModelDelta
    from ..executor import TemporalExecutor
    from ..packed import PackedBytes
    from ..wire import EVENTS_TOPIC, Continuation, ModelDeltaBatch, StreamPoll
    from .live import LiveRun
    from .port import WorkflowPort
    from .record_sizes import RecentSizes
    from .subscribers import SUBSCRIBER_HANDOFF_BYTES, Subscribers

__all__ = [
    "EVENTS_TOPIC",
    "HANDOFF_BYTES",
    "HANDOFF_RECORDS",
    "EventStream",
    "merged_deltas",
    "writes_plain",
]

HANDOFF_RECORDS = 64
HANDOFF_BYTES = 16_384
"""The most records (and bytes of them) a run hands to its continue-as-new successor's
stream: enough for a plain Workflow Streams subscriber that lags a little to cross the
boundary without a gap, bounded so history does not carry the transcript."""
SUBSCRIBER_HANDOFF_PATCH = "durable-agent.subscriber-handoff"
"""Patch marker of a continuation that kept more records for a lagging subscriber."""
_JSON_PLAIN = Payload(metadata={"encoding": b"json/plain"})
"""An empty plain-JSON payload, copied for each stream record (`plain_payload`)."""
_JSON_PLAIN_SIZE = _JSON_PLAIN.ByteSize()


def plain_size(data: bytes) -> int:
    """`Payload.ByteSize()` of `data` as a plain-JSON payload, without building it: the
    metadata, then the data field (tag, varint length, bytes), absent when empty."""
    length = len(data)
    if not length:
        return _JSON_PLAIN_SIZE
    return _JSON_PLAIN_SIZE + 1 + (length.bit_length() + 6) // 7 + length


_PROBE = AgentStreamRecord(
    seq=0, kind="run_started", run_id="probe", data={"text": "é", "items": [1, 2.5, None]}
)


def writes_plain(converter: PayloadConverter) -> bool:
    """Whether `converter` writes a stream record as plain pydantic JSON, as `publish`
    writes it itself: asked once a run, of a probe with text, numbers and nulls."""
    payload = converter.to_payload(_PROBE)
    return payload == Payload(metadata=_JSON_PLAIN.metadata, data=to_json(_PROBE))


def plain_payload(data: bytes) -> Payload:
    payload = Payload()
    payload.CopyFrom(_JSON_PLAIN)
    payload.data = data
    return payload


class EventStream:
    """The run's Workflow Stream and what it publishes."""

    def __init__(
        self,
        continuation: Continuation | None,
        live: LiveRun,
        executor: TemporalExecutor,
        port: WorkflowPort,
    ) -> None:
        # Handlers only, no commands: runs recorded before the stream replay unchanged.
        self.stream = WorkflowStream(_stream_state(continuation))
        self.events = self.stream.topic(EVENTS_TOPIC, type=AgentStreamRecord)
        self._live = live
        self._executor = executor
        self._port = port
        self._recent = RecentSizes(SUBSCRIBER_HANDOFF_BYTES)
        """Payload sizes of the latest records, for the continue-as-new handoff: the records
        handed over by the run before, then this run's."""
        carried = continuation.stream if continuation is not None else None
        for item in carried.log if carried is not None else []:
            self._recent.add(len(item.data))
        polls = continuation.stream_polls if continuation is not None else []
        self.subscribers = Subscribers(port, polls)
        self.carried_polls: list[StreamPoll] = []
        """What `handoff` decided the successor carries of `subscribers`."""
        self._plain_records = writes_plain(workflow.payload_converter())
        """Whether the worker's converter writes a record as plain pydantic JSON (the
        plugin's does): then `publish` writes the same bytes itself, without the
        converter's dispatch (a step publishes some twenty records, and a replay writes them
        all again), and no record waits as a `Payload`, whose protobuf arena (about 1 kB
        of C heap, `benchmarks.memory_native`) a cached run would keep."""
        self._unread = PackedBytes()
        """Plain-JSON records not yet in the stream's log (see the module's docstring)."""
        executor.on_wait = self.pack  # the run's long waits pack these too
        self._readers = 0
        """Polls in flight: while there are any, records go into the log at once."""
        self._deltas: tuple[int, int, int] | None = None
        """(step, attempt, next batch) of the model deltas published last."""

    def publish(self, record: AgentStreamRecord) -> None:
        if self._plain_records:
            data = to_json(record)
            self._recent.add(plain_size(data))
            self._unread.append(data)
            if self._readers:
                self.flush()
            return
        payload = workflow.payload_converter().to_payload(record)
        self._recent.add(payload.ByteSize())
        self.events.publish(payload)

    def flush(self) -> None:
        """Puts the records that wait as bytes into the stream's log, in order."""
        unread = self._unread
        if unread:
            self._unread = PackedBytes()
            publish = self.events.publish
            for data in unread:
                publish(plain_payload(data))

    def pack(self) -> None:
        """The run starts a long wait: the records no poll has read yet are packed."""
        self._unread.pack()

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Around a poll: the log holds every record from its start until it returns."""
        self.flush()
        self._readers += 1
        try:
            yield
        finally:
            self._readers -= 1

    def detach(self) -> None:
        """Waiting subscribers get what is there and follow on (or learn the run ended)."""
        self.stream.detach_pollers()

    def handoff(self) -> WorkflowStreamState:
        """The stream's state for the successor: the latest records (at most
        `HANDOFF_RECORDS`, `HANDOFF_BYTES`), or, when a plain subscriber that polled lately
        is further behind, every record from where it is (at most
        `SUBSCRIBER_HANDOFF_BYTES`), so it goes on without a gap. The rest stay readable in
        this run (the stream's poll query, `_sdk.STREAM_POLL`) while it is retained."""
        self.flush()
        seq = self._live.seq
        start = seq - self._recent.fitting(HANDOFF_BYTES, HANDOFF_RECORDS)
        slowest = self.subscribers.slowest()
        # Runs recorded before subscribers were followed continue as they did.
        if slowest is not None and self._port.patched(SUBSCRIBER_HANDOFF_PATCH):
            start = min(
                start, max(slowest, seq - self._recent.fitting(SUBSCRIBER_HANDOFF_BYTES, None))
            )
            self.carried_polls = self.subscribers.carry()
        self.stream.truncate(start)
        return self.stream.get_state()

    def refuse_publish(self, *inputs: Any) -> None:
        """Workflow Streams' publish signal (`_sdk.STREAM_PUBLISH_SIGNAL`), refused: the run's
        own records are all its stream holds, so offsets stay equal to seqs."""
        self._port.logger.warning(
            "Workflow Streams publish ignored: this run's stream holds only its own records "
            "(topic %r); subscribe to it instead",
            EVENTS_TOPIC,
        )

    def take_deltas(self, batch: ModelDeltaBatch) -> None:
        """Publishes a `model_request` activity's batch of deltas as `model_delta` records.

        Only batches of the request in flight count, in order, once: a late batch of an
        earlier step, one of an attempt already superseded, and a resent batch are dropped.
        The first batch of a newer attempt after an older attempt published text emits
        `model_retry` first, so clients drop the superseded text."""
        loop = self._live.driving_loop()
        if (
            loop is None
            or self._executor.node is not AgentExecutionNode.BEFORE_MODEL_REQUEST
            or batch.run_step != loop.state.run_step + 1
        ):
            self._port.logger.debug(
                "model_deltas of step %d dropped: not in flight", batch.run_step
            )
            return
        step, attempt, expected = self._deltas or (batch.run_step, batch.attempt, 0)
        if step != batch.run_step:
            step, attempt, expected = batch.run_step, batch.attempt, 0
        if batch.attempt < attempt or (batch.attempt == attempt and batch.batch < expected):
            return
        if batch.attempt > attempt:
            if self._deltas is not None and self._deltas[0] == step:
                loop.emit(
                    AgentExecutionNode.BEFORE_MODEL_REQUEST,
                    ModelRetryData(run_step=step, attempt=batch.attempt, superseded=attempt),
                )
            attempt, expected = batch.attempt, 0
        for part, text in merged_deltas(batch.deltas):
            loop.emit_delta(step, attempt, part, text)
        self._deltas = (step, attempt, batch.batch + 1)


def _stream_state(continuation: Continuation | None) -> WorkflowStreamState | None:
    """Where this run's stream begins: where the run before it stopped (continuations
    from before the event stream carry only `stream_seq`)."""
    if continuation is None:
        return None
    if continuation.stream is not None:
        return continuation.stream
    return WorkflowStreamState(base_offset=continuation.stream_seq)


def merged_deltas(deltas: Sequence[ModelDelta]) -> list[tuple[str, str]]:
    """Consecutive deltas of one kind joined: one record per run of text or thinking."""
    out: list[tuple[str, str]] = []
    for delta in deltas:
        if out and out[-1][0] == delta.kind:
            out[-1] = (delta.kind, out[-1][1] + delta.text)
        elif delta.text:
            out.append((delta.kind, delta.text))
    return out
