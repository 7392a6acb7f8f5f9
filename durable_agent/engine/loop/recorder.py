"""The run's stream records: numbered in order, handed to the driver's sink.

Every record gets the next `seq` whether anyone listens or not, so a run's numbering (and
each checkpoint's `stream_cursor`) is the same in-process, on Temporal and on replay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...contract._fields import trusted
from ...contract.checkpoint import AgentExecutionNode
from ...contract.records import AgentStreamRecord, RecordData, StreamSink
from ...contract.state import AgentRunState

__all__ = ["Recorder"]


class Recorder:
    """Numbers and publishes one run's records. `driving` is True while the loop drives
    the run; records emitted outside a drive (a human's decision arriving while the run
    waits) move `state.stream_seq` on themselves."""

    def __init__(self, state: AgentRunState, sink: StreamSink | None, start: int) -> None:
        self.state = state
        self.sink = sink
        self.seq = start
        self.driving = False

    def emit(self, node: AgentExecutionNode | None, data: RecordData) -> int:
        """Publishes `data` as the next record (of kind `data.KIND`); returns its seq."""
        seq = self.seq
        self.seq += 1
        if not self.driving:
            self.state.stream_seq = self.seq
        if self.sink is not None:
            self.sink(
                trusted(
                    AgentStreamRecord,
                    seq=seq,
                    kind=data.KIND,
                    run_id=self.state.run_id,
                    node=node.value if node else None,
                    data=data,
                    workflow_id=None,
                    depth=0,
                )
            )
        return seq

    def record(self, node: AgentExecutionNode | None, kind: type[RecordData], **fields: Any) -> int:
        """`emit` of a `kind` payload made of `fields` (every field of it, as `trusted`
        takes them), made only when a sink listens: most of a step's records are
        numbered and dropped when nobody reads them."""
        if self.sink is not None:
            return self.emit(node, trusted(kind, **fields))
        seq = self.seq
        self.seq += 1
        if not self.driving:
            self.state.stream_seq = self.seq
        return seq

    def emit_built(
        self,
        node: AgentExecutionNode | None,
        kind: type[RecordData],
        build: Callable[[], RecordData],
    ) -> int:
        """`emit` for a record whose payload costs something to build: built only when a
        sink listens, numbered either way."""
        if self.sink is None:
            return self.emit(node, _unbuilt(kind))
        return self.emit(node, build())


_UNBUILT: dict[type[RecordData], RecordData] = {}


def _unbuilt(kind: type[RecordData]) -> RecordData:
    """A stand-in payload of `kind` for a record nobody reads (only its number counts)."""
    payload = _UNBUILT.get(kind)
    if payload is None:
        payload = _UNBUILT[kind] = kind.model_construct()
    return payload
