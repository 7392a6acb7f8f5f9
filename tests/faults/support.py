"""Harness for the fault suite: worker processes, side-effect files, runs and diagnostics.

`Faults` owns everything a test starts (worker processes, and its own dev server when the
test kills the server). Leaving it stops all of it (SIGTERM, then SIGKILL), and when the
test failed it prints the task queue, the worker logs (paths and tails) and every
side-effect file, so a failure can be read without re-running.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from durable_agent.temporal import (
    AgentWorkflow,
    AgentWorkflowInput,
    AgentWorkflowResult,
    HistoryPageQuery,
)
from durable_agent.temporal.devserver import DevServer, die_with_parent
from durable_agent.temporal.wire import HistorySegment
from tests.helpers import normalized
from tests.temporal_support import connect

ROOT = Path(__file__).resolve().parents[2]
AGENTS_MODULE = "tests.faults.agents"
WORKER_READY = "worker started"

T = TypeVar("T")
Handle = WorkflowHandle[Any, AgentWorkflowResult]


def _die_with_parent() -> None:
    """SIGKILL a worker if the test process dies, so a crashed or interrupted test run never
    leaves worker processes behind."""
    die_with_parent(signal.SIGKILL)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def wait_until(
    probe: Callable[[], Awaitable[T | None]] | Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
) -> T:
    """Polls `probe` until it returns something truthy; fails naming `what` on timeout."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: object = None
    while True:
        try:
            value = probe()
            if asyncio.iscoroutine(value):
                value = await value
            last = value
            if value:
                return value  # type: ignore[return-value]
        except Exception as error:  # a query may fail while a worker is down
            last = error
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        await asyncio.sleep(interval)


@dataclass
class WorkerProcess:
    label: str
    process: subprocess.Popen[bytes]
    log: Path
    started_at: float

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, in-flight tasks are simply lost."""
        if self.alive:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        """SIGTERM (finish in-flight tasks), then SIGKILL if it does not exit."""
        if not self.alive:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def ready(self) -> bool:
        return self.log.exists() and WORKER_READY in self.log.read_text(errors="replace")


class Faults:
    """One test's workers, files and runs on one task queue."""

    def __init__(self, address: str, directory: Path, name: str) -> None:
        self.address = address
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.task_queue = unique(f"faults-{name}")
        self.workers: list[WorkerProcess] = []
        self.servers: list[DevServer] = []
        self._client: Client | None = None
        self.started = time.monotonic()

    async def __aenter__(self) -> Faults:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for worker in self.workers:
            try:
                worker.stop()
            except Exception:
                traceback.print_exc()
        for server in self.servers:
            server.stop()
        if exc is not None:
            self.print_diagnostics()

    # -- processes -----------------------------------------------------------------------

    def spawn_worker(self, label: str | None = None) -> WorkerProcess:
        label = label or f"worker{len(self.workers) + 1}"
        log = self.dir / f"{label}.log"
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": self.address,
            "TEMPORAL_TASK_QUEUE": self.task_queue,
            "DA_TEST_DIR": str(self.dir),
            "PYTHONPATH": str(ROOT),
        }
        with open(log, "ab") as out:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "worker.py",
                    "--no-examples",
                    "--agents",
                    AGENTS_MODULE,
                    "--log-format",
                    "json",
                ],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        worker = WorkerProcess(label, process, log, time.monotonic())
        self.workers.append(worker)
        return worker

    async def start_worker(self, label: str | None = None, timeout: float = 30) -> WorkerProcess:
        """A worker process, once it polls the task queue."""
        worker = self.spawn_worker(label)

        def ready() -> bool:
            if not worker.alive:
                raise AssertionError(f"{worker.label} exited early; see {worker.log}")
            return worker.ready()

        await wait_until(ready, timeout=timeout, what=f"{worker.label} to start ({worker.log})")
        return worker

    @property
    def alive_workers(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w.alive]

    async def client(self) -> Client:
        if self._client is None:
            self._client = await connect(self.address)
        return self._client

    def reconnect(self, address: str | None = None) -> None:
        self.address = address or self.address
        self._client = None

    # -- side-effect files ---------------------------------------------------------------

    def lines(self, name: str, workflow_id: str | None = None) -> list[list[str]]:
        """The lines of a side-effect file, split into fields; only `workflow_id`'s if given."""
        path = self.dir / name
        if not path.exists():
            return []
        rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
        return [r for r in rows if workflow_id is None or r[0] == workflow_id]

    def steps(self, name: str, workflow_id: str) -> list[int]:
        """Model steps recorded in `model_requests` / `model_responses` for one run."""
        return [int(row[1]) for row in self.lines(name, workflow_id)]

    def calls(self, name: str, workflow_id: str) -> list[str]:
        """Tool call ids recorded in `tool_started` / `tool_finished` for one run."""
        return [row[1] for row in self.lines(name, workflow_id)]

    async def wait_for_line(
        self, name: str, workflow_id: str, count: int = 1, timeout: float = 30
    ) -> list[list[str]]:
        return await wait_until(
            lambda: rows if len(rows := self.lines(name, workflow_id)) >= count else None,
            timeout=timeout,
            what=f"{count} line(s) for {workflow_id} in {self.dir / name}",
        )

    def block_model(self, workflow_id: str, step: int) -> None:
        (self.dir / f"block-model-{workflow_id}-{step}").touch()

    def block_tool(self, workflow_id: str, call_id: str) -> None:
        (self.dir / f"block-tool-{workflow_id}-{call_id}").touch()

    def release(self, workflow_id: str) -> None:
        (self.dir / f"release-{workflow_id}").touch()

    # -- runs ----------------------------------------------------------------------------

    async def start_run(
        self, agent: str, prompt: str, *, workflow_id: str | None = None, **options: Any
    ) -> Handle:
        client = await self.client()
        return await client.start_workflow(
            AgentWorkflow.run,
            AgentWorkflowInput(agent=agent, prompt=prompt, **options),
            id=workflow_id or unique(f"{self.name}-{agent}"),
            task_queue=self.task_queue,
        )

    async def handle(self, workflow_id: str) -> Handle:
        client = await self.client()
        return client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)

    async def result(self, handle: Handle, timeout: float = 45) -> AgentWorkflowResult:
        try:
            return await asyncio.wait_for(handle.result(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"run {handle.id} did not finish within {timeout}s; status: "
                f"{await self.describe_status(handle)}"
            ) from None

    async def describe_status(self, handle: Handle) -> str:
        try:
            view = await asyncio.wait_for(handle.query(AgentWorkflow.status), 5)
            return repr(view)
        except Exception as error:
            return f"(status query failed: {error!r})"

    async def status(self, handle: Handle, timeout: float = 30, **expected: Any) -> Any:
        """Waits until the `status` query shows every field in `expected`."""

        async def probe() -> Any:
            view = await handle.query(AgentWorkflow.status)
            return view if all(getattr(view, k) == v for k, v in expected.items()) else None

        return await wait_until(probe, timeout=timeout, what=f"{handle.id} status {expected}")

    async def transcript(self, handle: Handle) -> list[dict[str, Any]]:
        """The whole conversation, normalized, across continue-as-new runs.

        Read from the workflow itself: the `latest_checkpoint` query when the run never
        continued as new, else every run's `message_history_page` (as `history_segments`
        lists them).
        """
        client = await self.client()
        latest_run = client.get_workflow_handle(handle.id)
        segments = await latest_run.query(
            AgentWorkflow.history_segments, result_type=list[HistorySegment]
        )
        if len(segments) == 1:
            checkpoint = await latest_run.query(AgentWorkflow.latest_checkpoint)
            assert checkpoint is not None, f"{handle.id} has no checkpoint"
            return normalized(checkpoint.state.message_history)
        messages: list[Any] = []
        for segment in segments:
            run = client.get_workflow_handle(handle.id, run_id=segment.run_id)
            while len(messages) < segment.end:
                page = await run.query(
                    AgentWorkflow.message_history_page,
                    HistoryPageQuery(offset=len(messages), limit=200),
                )
                if not page:
                    break
                messages.extend(page)
        return normalized(messages)

    async def undisturbed(
        self, agent: str, prompt: str, *, decide: Callable[[Handle], Awaitable[None]] | None = None
    ) -> tuple[AgentWorkflowResult, list[dict[str, Any]]]:
        """A reference run of `agent` with nothing killed: its result and transcript."""
        handle = await self.start_run(agent, prompt, workflow_id=unique(f"{self.name}-reference"))
        if decide is not None:
            await decide(handle)
        result = await self.result(handle)
        return result, await self.transcript(handle)

    async def event_types(self, handle: Handle) -> list[str]:
        history = await handle.fetch_history()
        return [EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in history.events]

    # -- diagnostics ---------------------------------------------------------------------

    def print_diagnostics(self) -> None:
        print(f"\n=== fault diagnostics: {self.name} ===")
        print(f"server {self.address}, task queue {self.task_queue}, files in {self.dir}")
        print(f"elapsed {time.monotonic() - self.started:.1f}s")
        for server in self.servers:
            print(f"dev server log: {server.log_file}")
        for worker in self.workers:
            state = "running" if worker.alive else f"exit code {worker.process.returncode}"
            print(f"--- {worker.label} (pid {worker.process.pid}, {state}): {worker.log}")
            if worker.log.exists():
                for line in worker.log.read_text(errors="replace").splitlines()[-25:]:
                    print(f"    {line[:400]}")
        for path in sorted(self.dir.iterdir()):
            if path.is_file() and path.suffix != ".log" and path.stat().st_size:
                text = path.read_text(errors="replace").splitlines()
                print(f"--- {path.name} ({len(text)} lines)")
                for line in text[-40:]:
                    print(f"    {line}")


def worker_log_errors(workers: Sequence[WorkerProcess]) -> list[str]:
    """Log lines at error level or above (crashed workflow tasks, fatal worker errors)."""
    found = []
    for worker in workers:
        if worker.log.exists():
            for line in worker.log.read_text(errors="replace").splitlines():
                if '"level": "error"' in line or '"level": "critical"' in line:
                    found.append(f"{worker.label}: {line[:300]}")
    return found
