"""A run's histories: the whole continue-as-new chain fetched from the server, made
readable anywhere, optionally redacted, and written to (or read from) one JSON file.

The file `durable-agent export` writes:

    {"format": "durable-agent-history", "version": 1, "workflow_id": "...",
     "redacted": false, "runs": [{"run_id": "...", "history": {"events": [...]}}, ...]}

`runs` are the chain's executions, oldest first, each history in the Temporal CLI's JSON
format (what `temporal workflow show --output json` writes and
`temporalio.client.WorkflowHistory.from_json` reads). Its payloads are decoded through the
exporting client's data converter (decrypted by its codec, external payloads fetched in),
so the file replays and feeds a `ReplayModel` on a machine without the keys or the payload
store: treat it as the run's data, or export with `redact=True` (`--redact`), which
replaces message text, prompts, outputs and tool arguments before anything is written.
A file holding one plain history (`{"events": [...]}`, as `tests/histories/` keeps) reads
as a chain of one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import DataConverter

__all__ = [
    "FORMAT",
    "VERSION",
    "HistoryFileError",
    "RunChain",
    "export_chain",
    "fetch_chain",
    "redacted_value",
]

FORMAT = "durable-agent-history"
VERSION = 1
REDACTED = "[redacted]"
TEXT_KEYS = frozenset(
    {
        "content",
        "text",
        "prompt",
        "message",
        "output",
        "structured_output",
        "instructions",
        "reason",
        "note",
        "response",
        "delta",
    }
)
"""JSON keys whose values are what people and models wrote: replaced by `[redacted]`."""
ARGUMENT_KEYS = frozenset({"arguments", "override_arguments", "args"})
"""JSON keys whose values are tool arguments: replaced by `{}`."""
_PAYLOAD = "temporal.api.common.v1.Payload"
_SKIPPED = frozenset({"temporal.api.common.v1.SearchAttributes"})
"""Payload holders not encoded by a codec (search attributes are indexed as they are)."""
_SUMMARIZED_WORK = frozenset(
    {EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, EventType.EVENT_TYPE_TIMER_STARTED}
)
"""Events whose summaries name the work (`model_request · step 2`), kept when redacting;
the run's own summary and details quote its prompt and calls."""


class HistoryFileError(ValueError):
    """A file (or JSON) that is not a workflow history nor an exported chain."""


@dataclass
class RunChain:
    """One workflow's continue-as-new chain of executions, oldest first."""

    workflow_id: str
    histories: list[WorkflowHistory]
    redacted: bool = False

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "workflow_id": self.workflow_id,
            "redacted": self.redacted,
            "runs": [
                {"run_id": _run_id(history), "history": history.to_json_dict()}
                for history in self.histories
            ],
        }

    def write(self, path: str | os.PathLike[str]) -> None:
        Path(path).write_text(json.dumps(self.to_json_dict(), indent=1) + "\n")

    @classmethod
    def read(cls, source: str | os.PathLike[str] | Mapping[str, Any]) -> RunChain:
        """An exported chain, or one plain history, from a path, JSON text or its dict;
        `HistoryFileError` (naming the file) for anything else."""
        name, data = _load(source)
        if not isinstance(data, Mapping):
            raise HistoryFileError(f"{name}: not a workflow history (a JSON object is expected)")
        if "events" in data:
            return cls(name, [_history(name, name, data)])
        if data.get("format") != FORMAT:
            raise HistoryFileError(
                f"{name}: not a workflow history: neither an `events` list (a history) nor "
                f"an export of `durable-agent export` (`format: {FORMAT}`)"
            )
        if data.get("version") != VERSION:
            raise HistoryFileError(
                f"{name}: export version {data.get('version')!r}; this release reads {VERSION}"
            )
        workflow_id = str(data.get("workflow_id") or name)
        runs = data.get("runs")
        if not isinstance(runs, list) or not runs:
            raise HistoryFileError(f"{name}: the export holds no runs")
        histories = []
        for index, run in enumerate(runs):
            if not isinstance(run, Mapping) or not isinstance(run.get("history"), Mapping):
                raise HistoryFileError(f"{name}: run {index} has no history")
            histories.append(_history(f"{name} (run {index})", workflow_id, run["history"]))
        return cls(workflow_id, histories, bool(data.get("redacted")))


def _load(source: str | os.PathLike[str] | Mapping[str, Any]) -> tuple[str, Any]:
    if isinstance(source, Mapping):
        return "history", source
    if isinstance(source, str) and source.lstrip().startswith(("{", "[")):
        text, name = source, "history"
    else:
        path = Path(source)
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as error:
            raise HistoryFileError(f"{path}: cannot be read as a history ({error})") from None
        name = path.stem
    try:
        return name, json.loads(text)
    except json.JSONDecodeError as error:
        raise HistoryFileError(f"{name}: not a workflow history (not JSON: {error})") from None


def _history(name: str, workflow_id: str, data: Mapping[str, Any]) -> WorkflowHistory:
    events = data.get("events")
    if not isinstance(events, list) or not events:
        raise HistoryFileError(f"{name}: not a workflow history (no events)")
    try:
        history = WorkflowHistory.from_json(workflow_id, dict(data))
    except Exception as error:
        raise HistoryFileError(f"{name}: not a workflow history ({error})") from None
    first = history.events[0]
    if first.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        raise HistoryFileError(
            f"{name}: not a workflow history (it starts with "
            f"{EventType.Name(first.event_type)}, not a workflow execution's start)"
        )
    return history


def _run_id(history: WorkflowHistory) -> str:
    """The execution's run id, as its start event names it (its `original_execution_run_id`)."""
    started = history.events[0].workflow_execution_started_event_attributes
    return started.original_execution_run_id or started.first_execution_run_id


async def fetch_chain(
    client: Client, workflow_id: str, run_id: str | None = None
) -> list[WorkflowHistory]:
    """The histories of `workflow_id`'s chain up to `run_id` (default: its latest run),
    oldest first, as the server stores them: each run's start names the run it continued."""
    histories: list[WorkflowHistory] = []
    current: str | None = run_id
    while True:
        handle = client.get_workflow_handle(workflow_id, run_id=current)
        history = await handle.fetch_history()
        histories.append(history)
        started = history.events[0].workflow_execution_started_event_attributes
        current = started.continued_execution_run_id or None
        if current is None:
            return histories[::-1]


async def export_chain(
    client: Client, workflow_id: str, *, run_id: str | None = None, redact: bool = False
) -> RunChain:
    """`fetch_chain`, its payloads decoded through the client's converter (see the module
    docstring), and with `redact` its text and tool arguments replaced."""
    histories = []
    for history in await fetch_chain(client, workflow_id, run_id):
        events = []
        for event in history.events:
            plain = HistoryEvent()
            plain.CopyFrom(event)
            await _decode_message(plain, client.data_converter, redact=redact)
            if redact and event.event_type not in _SUMMARIZED_WORK:
                await _redact_metadata(plain, client.data_converter)
            events.append(plain)
        histories.append(WorkflowHistory(workflow_id, events))
    return RunChain(workflow_id, histories, redact)


async def _decode_message(message: Message, converter: DataConverter, *, redact: bool) -> None:
    """Replaces every payload under `message` by its plain form, in place."""
    for field, value in message.ListFields():
        kind = field.message_type
        if kind is None or kind.full_name in _SKIPPED:
            continue
        if kind.GetOptions().map_entry:
            entry = kind.fields_by_name["value"].message_type
            if entry is None:
                continue
            for key in list(value):
                if entry.full_name == _PAYLOAD:
                    value[key].CopyFrom(await _plain(value[key], converter, redact))
                else:
                    await _decode_message(value[key], converter, redact=redact)
        elif field.is_repeated:
            for item in value:
                if kind.full_name == _PAYLOAD:
                    item.CopyFrom(await _plain(item, converter, redact))
                else:
                    await _decode_message(item, converter, redact=redact)
        elif kind.full_name == _PAYLOAD:
            value.CopyFrom(await _plain(value, converter, redact))
        else:
            await _decode_message(value, converter, redact=redact)


async def _plain(payload: Payload, converter: DataConverter, redact: bool) -> Payload:
    """The payload as the payload converter wrote it: decoded (codec, external storage)
    to its value and converted back without them."""
    [value] = await converter.decode([payload])
    if redact:
        value = redacted_value(value)
    [plain] = converter.payload_converter.to_payloads([value])
    return plain


async def _redact_metadata(event: HistoryEvent, converter: DataConverter) -> None:
    if not event.HasField("user_metadata"):
        return
    for name in ("summary", "details"):
        if event.user_metadata.HasField(name):
            [payload] = converter.payload_converter.to_payloads([REDACTED])
            getattr(event.user_metadata, name).CopyFrom(payload)


def redacted_value(value: Any, key: str | None = None) -> Any:
    """`value` (a decoded payload) with text and tool arguments replaced, by JSON key."""
    if key in ARGUMENT_KEYS and value is not None:
        return {}
    if key in TEXT_KEYS and value is not None and not isinstance(value, bool | int | float):
        return REDACTED
    if isinstance(value, Mapping):
        return {k: redacted_value(v, str(k)) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [redacted_value(item, key) for item in value]
    return value
