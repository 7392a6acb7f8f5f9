"""`durable-agent workspace gc`: remove the store objects no run the server still has reaches.

A workspace store outlives runs: the namespace's retention deletes a closed run's history
after a while, but the objects its trees hold stay. The collector keeps every tree any
`AgentWorkflow` execution the server still has may restore, and removes the rest
(`durable_agent.environments.workspace.gc` sweeps):

- **Every execution, closed ones too** (listed through visibility: a continue-as-new
  chain's earlier runs, sub-agents' child workflows and forks are executions of their own),
  since a closed run can still be forked from any of its checkpoints.
- **From its history**: every `workspace:<id>` ref in its decoded payloads (the client's
  codec and payload store decode them, as `durable-agent export` does). A run's refs all
  come through history: the tree each model request and tool call starts from, each call's
  change and each merge, a fork's loaded checkpoint, a continued run's state, a sub-agent's
  start and result. Closed runs need nothing more, and no worker.
- **From its queries, while it runs**: its checkpoints and its current ref (`status`), the
  run's own word on what it holds now. A running run whose worker does not answer stops the
  gc before anything is removed (exit 5): a waiting run is never guessed at.

Executions are listed again once marking is done, so a run started meanwhile is marked too,
and objects written or reused within the grace period (`--older-than`, default one hour)
stay whatever the marks say: a running tool's upload reaches history only when its call
returns. The collector sees one namespace: a store several namespaces share needs each
one's marks (run it per namespace with `--dry-run` and compare), so keep one store per
namespace.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import click
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from durable_agent.environments.workspace.gc import collect
from durable_agent.environments.workspace.stores import REFRESH_SECONDS, open_store
from durable_agent.temporal import AgentWorkflow
from durable_agent.temporal.client import AgentRunError, NoWorker
from durable_agent.temporal.wire import WORKFLOW_TYPE, AgentStatusView, CheckpointsView

from .context import (
    EPILOG,
    EXIT_OK,
    Settings,
    connection_options,
    workspace_store_option,
    workspace_store_url,
)
from .output import err, out

__all__ = ["DEFAULT_GRACE", "gc", "marked_trees", "parse_duration"]

DEFAULT_GRACE = "1h"
REF = re.compile(r'(?:workspace:|"ref":\s*")([0-9a-f]{64})')
"""A workspace ref, or a tree id as a tool call's packed change names it (`"ref": "<id>"`,
`durable_agent.temporal.compaction.format`)."""
_RAW_REFS = (b"workspace:", b'"ref"')
_PAYLOAD = "temporal.api.common.v1.Payload"
_SKIPPED = frozenset({"temporal.api.common.v1.SearchAttributes"})
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_READERS = 8
"""Histories read at once."""


def parse_duration(text: str) -> float:
    """`90`, `90s`, `30m`, `1h`, `7d` (or a sum: `1h30m`) as seconds; ValueError naming
    the text otherwise."""
    value = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise ValueError(
            f"{text!r} is not a duration: give seconds (3600) or a number and unit (90s, "
            "30m, 1h, 7d)"
        )
    return sum(float(number) * _UNITS[unit] for number, unit in parts)


class Duration(click.ParamType[float, Any]):
    name = "DURATION"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            return parse_duration(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


@dataclass
class Marks:
    """The trees existing runs reach, and where they were read from."""

    trees: set[str] = field(default_factory=set)
    executions: int = 0
    running: int = 0
    queried: int = 0


# -- reading refs --------------------------------------------------------------------------


def _payloads(message: Message) -> Iterator[Payload]:
    """Every payload under `message` (search attributes left out: indexed, not encoded)."""
    for descriptor, value in message.ListFields():
        kind = descriptor.message_type
        if kind is None or kind.full_name in _SKIPPED:
            continue
        if kind.GetOptions().map_entry:
            entry = kind.fields_by_name["value"].message_type
            if entry is None:
                continue
            for item in value.values():
                if entry.full_name == _PAYLOAD:
                    yield item
                else:
                    yield from _payloads(item)
        elif descriptor.is_repeated:
            for item in value:
                if kind.full_name == _PAYLOAD:
                    yield item
                else:
                    yield from _payloads(item)
        elif kind.full_name == _PAYLOAD:
            yield value
        else:
            yield from _payloads(value)


async def history_refs(client: Client, workflow_id: str, run_id: str) -> set[str]:
    """The trees every payload of one execution's history names. Plain JSON payloads
    without a ref are skipped unread; anything else (encrypted, stored apart) is decoded
    through the client's converter first."""
    found: set[str] = set()
    converter = client.data_converter
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    async for event in handle.fetch_history_events():
        pending = []
        for payload in _payloads(event):
            plain = payload.metadata.get("encoding") in (b"json/plain", b"binary/null")
            if plain:
                if any(marker in payload.data for marker in _RAW_REFS):
                    found.update(REF.findall(payload.data.decode(errors="replace")))
            else:
                pending.append(payload)
        if pending:
            values = await converter.decode(pending)
            found.update(REF.findall(json.dumps(values, default=str)))
    return found


async def live_refs(client: Client, workflow_id: str, run_id: str, timeout: float) -> set[str]:
    """A running execution's checkpoints' trees and its tree now, by query; nothing when
    it closed meanwhile (its history then says it all)."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    try:
        raw = await asyncio.wait_for(handle.query("checkpoints", result_type=Any), timeout)
        view: AgentStatusView = await asyncio.wait_for(handle.query(AgentWorkflow.status), timeout)
    except (TimeoutError, RPCError, WorkflowQueryFailedError) as error:
        description = await handle.describe()
        if description.status != WorkflowExecutionStatus.RUNNING:
            return set()
        why = "no worker answered" if isinstance(error, TimeoutError) else str(error)
        raise NoWorker(
            f"cannot read running run {workflow_id!r} ({run_id}): {why} within {timeout:g}s. "
            "The collector removes nothing while a running run cannot say what it holds: "
            "start its worker (or end the run) and run gc again",
            workflow_id=workflow_id,
        ) from None
    if isinstance(raw, list):
        refs = [item.get("environment_ref") for item in raw if isinstance(item, dict)]
    else:
        refs = [c.environment_ref for c in CheckpointsView.model_validate(raw).checkpoints]
    refs.append(view.environment_ref)
    return {m for ref in refs if isinstance(ref, str) for m in REF.findall(ref)}


async def marked_trees(client: Client, timeout: float) -> Marks:
    """Every tree an `AgentWorkflow` execution of the namespace reaches (see the module)."""
    marks = Marks()
    done: set[tuple[str, str]] = set()
    gate = asyncio.Semaphore(_READERS)

    async def read(workflow_id: str, run_id: str, running: bool) -> None:
        async with gate:
            try:
                marks.trees |= await history_refs(client, workflow_id, run_id)
            except RPCError as error:
                if error.status != RPCStatusCode.NOT_FOUND:
                    raise
                return  # deleted since it was listed: nothing to keep for it
            if running:
                marks.trees |= await live_refs(client, workflow_id, run_id, timeout)
                marks.queried += 1

    for _ in range(2):  # again once marked: runs started meanwhile
        tasks = []
        async for execution in client.list_workflows(f"WorkflowType = '{WORKFLOW_TYPE}'"):
            key = (execution.id, execution.run_id)
            if key in done:
                continue
            done.add(key)
            running = execution.status == WorkflowExecutionStatus.RUNNING
            marks.executions += 1
            marks.running += running
            tasks.append(asyncio.ensure_future(read(execution.id, execution.run_id, running)))
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        if not tasks:
            break
    return marks


# -- the command ---------------------------------------------------------------------------


@click.command("gc", epilog=EPILOG)
@click.option("--dry-run", is_flag=True, help="report what would be removed; remove nothing")
@click.option(
    "--older-than",
    "older_than",
    type=Duration(),
    default=DEFAULT_GRACE,
    show_default=True,
    help="keep objects written or reused more recently than this (90s, 30m, 1h, 7d)",
)
@workspace_store_option
@connection_options(group=False)
@click.pass_obj
def gc(settings: Settings, dry_run: bool, older_than: float, store: str | None) -> Awaitable[int]:
    """Remove the workspace store's objects that no run of this namespace still reaches
    (runs the namespace's retention deleted), keeping everything a running, waiting or
    closed run, a fork or a sub-agent can restore, and everything written within
    --older-than. Reads every agent run's history (and asks each running run for its
    checkpoints: their workers must answer)."""
    url = workspace_store_url(store)
    if older_than < REFRESH_SECONDS:
        err(
            f"warning: --older-than {older_than:g}s is under {REFRESH_SECONDS:g}s: an object "
            "a running tool reuses may be removed before its run records it; use it only "
            "while no worker runs"
        )

    async def run() -> int:
        began = time.time()
        agents = await settings.connect()
        try:
            marks = await marked_trees(agents.client, settings.timeout)
        except RPCError as error:
            raise AgentRunError(f"gc could not list the runs: {error.message}") from None
        report = await asyncio.to_thread(
            collect,
            open_store(url),
            marks.trees,
            older_than=older_than,
            started=began,
            dry_run=dry_run,
        )
        if settings.json:
            out(
                json.dumps(
                    {
                        **asdict(report),
                        "namespace": agents.namespace,
                        "executions": marks.executions,
                        "running": marks.running,
                        "trees": len(marks.trees),
                    },
                    indent=2,
                )
            )
            return EXIT_OK
        verb = "would remove" if dry_run else "removed"
        out(
            f"{verb} {len(report.removed)} objects ({report.removed_bytes:,} bytes) of "
            f"{report.objects} in {report.store}"
        )
        err(
            f"kept {report.reachable} reached by {len(marks.trees)} trees of "
            f"{marks.executions} runs in namespace {agents.namespace!r} ({marks.running} "
            f"running), and {report.young} written within {older_than:g}s"
        )
        if report.unreadable:
            err(
                f"note: {len(report.unreadable)} trees runs name are not in this store (runs "
                f"on another store, or objects already gone): {', '.join(report.unreadable[:3])}"
            )
        return EXIT_OK

    return run()
