"""Real Temporal servers for tests, and a `new_worker` helper with a fresh task queue."""

from __future__ import annotations

import contextlib
import socket
import uuid
from collections.abc import AsyncIterator

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from workflows import DurableAgentPlugin


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def connect(address: str) -> Client:
    return await Client.connect(address, plugins=[DurableAgentPlugin()])


@contextlib.asynccontextmanager
async def new_worker(
    client: Client, task_queue: str | None = None, **options: object
) -> AsyncIterator[Worker]:
    async with Worker(client, task_queue=task_queue or f"tq-{uuid.uuid4()}", **options) as worker:  # type: ignore[arg-type]
        yield worker


async def activity_summaries(handle: WorkflowHandle[object, object]) -> list[tuple[str, str]]:
    """(activity type, summary) for every scheduled activity, in history order."""
    history = await handle.fetch_history()
    converter = handle._client.data_converter.payload_converter
    out = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            summary = converter.from_payload(event.user_metadata.summary, str)
            out.append((attrs.activity_type.name, summary))
    return out


def event_types(history: object) -> list[str]:
    return [EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in history.events]  # type: ignore[attr-defined]
