"""What every measure shares: a dev server, worker processes, CPU and wall clocks, medians,
history figures and the JSON file a measure writes."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

import temporalio
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History, HistoryEvent
from temporalio.client import Client, WorkflowHandle, WorkflowHistory

from durable_agent.temporal import DurableAgentPlugin
from durable_agent.temporal.devserver import DevServer, die_with_parent

E = EventType
Handle = WorkflowHandle[Any, Any]
ROOT = Path(__file__).parent.parent


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_sides(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`parser`'s arguments and, before them, the sides to look at: A (ours), B (bare
    Temporal) or, when none is named, both."""
    # Checked below, not with `choices`: argparse (3.11) checks an empty `*` argument's
    # value against them as one value, and refuses it.
    parser.add_argument("sides", nargs="*", metavar="{A,B}", help="default: both")
    args = parser.parse_args(argv)
    wrong = [side for side in args.sides if side not in ("A", "B")]
    if wrong:
        parser.error(f"unknown side {wrong[0]!r}: name A (ours), B (bare Temporal) or none")
    args.sides = args.sides or ["A", "B"]
    return args


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "system": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "temporalio": temporalio.__version__,
        "load": list(os.getloadavg()),
    }


def write_json(
    path: Path, measure: str, command: str, took: float, results: dict[str, Any]
) -> None:
    """One measure's file: what ran, when, where, how long, and its figures."""
    data = {
        "measure": measure,
        "command": command,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "took_s": round(took),
        "machine": machine(),
        "results": results,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def process_cpu(pid: int) -> float:
    """utime + stime of a process, in seconds, from /proc (Linux only)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# -- processes -------------------------------------------------------------------------------


class WorkerProcess:
    """A `python -m benchmarks.worker` child on a task queue of its own."""

    def __init__(self, kind: str, queue: str, process: asyncio.subprocess.Process, gc: Path):
        self.kind, self.queue, self.process, self.gc_file = kind, queue, process, gc
        self._asked = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu(self) -> float:
        return process_cpu(self.pid)

    async def collector(self) -> dict[str, list[float]]:
        """The worker's garbage collector so far: collections and seconds per generation."""
        return await self._ask(signal.SIGUSR1, self.gc_file, "collector figures")

    async def census(self) -> dict[str, int]:
        """The objects the worker's collector tracks, by type, after a full collection."""
        types: dict[str, int] = (await self.memory())["types"]
        return types

    async def memory(self) -> dict[str, Any]:
        """After a full collection: the objects the collector tracks by type (`types`), the
        resident memory (`rss_kb`) and the interpreter's allocated blocks (`blocks`)."""
        found: dict[str, Any] = await self._ask(
            signal.SIGUSR2, self.gc_file.with_suffix(".census"), "census"
        )
        return found

    async def _ask(self, sent: signal.Signals, written: Path, what: str) -> Any:
        self._asked += 1
        self.process.send_signal(sent)
        for _ in range(500):
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
                stats: dict[str, Any] = json.loads(written.read_text())  # noqa: ASYNC240 (tiny)
                if stats["asked"] >= self._asked:
                    return stats
            await asyncio.sleep(0.02)
        raise TimeoutError(f"the {self.kind} worker wrote no {what}")

    async def stop(self) -> int:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 30)
            except TimeoutError:
                self.process.kill()
        return await self.process.wait()


class Session:
    """A headless dev server (temporary SQLite file), a client, and the workers started on
    it; `async with` stops them all, on error too."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="durable-agent-bench-"))
        self.server = DevServer(self.directory / "bench.db", port=free_port(), ui_port=None)
        self.workers: list[WorkerProcess] = []
        self.client: Client

    async def __aenter__(self) -> Session:
        log(f"dev server on {self.server.address}")
        try:
            await self.server.start()
            self.client = await Client.connect(self.server.address, plugins=[DurableAgentPlugin()])
        except BaseException:
            self._cleanup()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            for worker in list(self.workers):
                await self.stop(worker)
        finally:
            self._cleanup()

    def _cleanup(self) -> None:
        try:
            self.server.stop()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def server_cpu(self) -> float:
        assert self.server.process is not None
        return process_cpu(self.server.process.pid)

    async def worker(self, kind: str, *args: str, queue: str | None = None) -> WorkerProcess:
        """Starts a worker of `kind` (agent, bare or quota), waiting until it polls, on
        `queue` (default: a task queue of its own)."""
        queue = queue or f"bench-{kind}-{uuid.uuid4().hex[:8]}"
        gc_file = self.directory / f"{queue}-{uuid.uuid4().hex[:8]}.gc.json"
        command = [sys.executable, "-m", "benchmarks.worker", kind, self.server.address, queue]
        process = await asyncio.create_subprocess_exec(
            *command,
            "--gc-file",
            str(gc_file),
            *args,
            cwd=ROOT,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            preexec_fn=die_with_parent,
        )
        worker = WorkerProcess(kind, queue, process, gc_file)
        self.workers.append(worker)
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 120)
        if line.strip() != b"ready":
            await self.stop(worker)
            raise RuntimeError(f"the {kind} worker did not start; its error is above")
        log(f"{kind} worker: pid {worker.pid}, task queue {queue}")
        return worker

    async def pair(self, *args: str, kinds: Sequence[str] = ("A", "B")) -> dict[str, WorkerProcess]:
        """A worker for each side of `kinds` (A's, L's, B's), each warmed up by a 2-step
        run (imports, sandbox setup)."""
        from benchmarks import workload

        started = await asyncio.gather(*(self.worker(WORKERS[k], *args) for k in kinds))
        pair = dict(zip(kinds, started, strict=True))
        for kind, worker in pair.items():
            await (await workload.start(self.client, kind, worker.queue, 2)).result()
        return pair

    async def stop(self, worker: WorkerProcess) -> int:
        self.workers.remove(worker)
        code = await worker.stop()
        if code != 0:
            log(f"the {worker.kind} worker exited with code {code}")
        return code

    @contextlib.asynccontextmanager
    async def timed(self, worker: WorkerProcess) -> AsyncIterator[dict[str, float]]:
        """Wall seconds, and CPU seconds of `worker` and of the server, over the block."""
        sample: dict[str, float] = {}
        cpu, server, began = worker.cpu(), self.server_cpu(), time.perf_counter()
        yield sample
        sample["wall"] = time.perf_counter() - began
        sample["worker_cpu"] = worker.cpu() - cpu
        sample["server_cpu"] = self.server_cpu() - server


WORKERS = {"A": "agent", "L": "local", "B": "bare"}
"""The worker process of each side: A the agent as configured by default, L the same with
its quick nodes as local activities, B the bare workflow."""


def order(round: int, kinds: Sequence[str] = ("A", "B")) -> tuple[str, ...]:
    """Each round starts one side later: A B, B A, ... (A L B, L B A, B A L, ... for three)."""
    shift = round % len(kinds)
    return (*kinds[shift:], *kinds[:shift])


def compare(rows: list[dict[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    """Medians of `keys` over each side's rows, and each side's ratio to B: X/B of the
    medians, and round by round (`paired` for A, `paired L` for L)."""
    kinds = [k for k in WORKERS if any(r["kind"] == k for r in rows)]
    side = {kind: [r for r in rows if r["kind"] == kind] for kind in kinds}
    out: dict[str, Any] = {
        kind: {k: median(r[k] for r in side[kind]) for k in keys} for kind in side
    }
    for kind in kinds:
        if kind == "B":
            continue
        out[f"{kind}/B"] = {k: ratio(out[kind][k], out["B"][k]) for k in keys}
        out["paired" if kind == "A" else f"paired {kind}"] = {
            k: [ratio(x[k], b[k]) for x, b in zip(side[kind], side["B"], strict=True)] for k in keys
        }
    return out


# -- histories -------------------------------------------------------------------------------


async def chain(client: Client, handle: Handle) -> list[WorkflowHistory]:
    """The history of every run of a workflow, following continue-as-new."""
    histories = []
    run_id = handle.first_execution_run_id or handle.run_id
    while True:
        history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        histories.append(history)
        last = history.events[-1]
        if last.event_type != E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            return histories
        run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id


def _event_name(event: HistoryEvent, activities: dict[int, str]) -> str:
    name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()
    if event.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        activity = event.activity_task_scheduled_event_attributes.activity_type.name
        activities[event.event_id] = activity
        return f"{name} {activity}"
    for field in ("activity_task_started", "activity_task_completed"):
        if event.HasField(f"{field}_event_attributes"):
            attrs = getattr(event, f"{field}_event_attributes")
            return f"{name} {activities.get(attrs.scheduled_event_id, '?')}"
    return name


def _leaf_bytes(value: Any, key: str, out: Counter[str]) -> None:
    if isinstance(value, dict):
        for name, item in value.items():
            _leaf_bytes(item, name, out)
    elif isinstance(value, list):
        for item in value:
            _leaf_bytes(item, key, out)
    else:
        out[key] += len(json.dumps({key: value}, separators=(",", ":"))) - 2


def history_figures(histories: Sequence[WorkflowHistory]) -> dict[str, Any]:
    """Events and bytes (protobuf size as fetched) summed over a chain, by event type, and
    the activity payloads' JSON bytes by leaf key (`"key":value`)."""
    by_type: Counter[str] = Counter()
    bytes_by_type: Counter[str] = Counter()
    keys: Counter[str] = Counter()
    workflow_tasks = 0
    for history in histories:
        activities: dict[int, str] = {}
        for event in history.events:
            name = _event_name(event, activities)
            by_type[name] += 1
            bytes_by_type[name] += event.ByteSize()
            workflow_tasks += event.event_type == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
            if event.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                payloads = event.activity_task_scheduled_event_attributes.input.payloads
            elif event.event_type == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                payloads = event.activity_task_completed_event_attributes.result.payloads
            else:
                continue
            for payload in payloads:
                _leaf_bytes(json.loads(payload.data), "(value)", keys)
    sizes = [History(events=h.events).ByteSize() for h in histories]
    return {
        "runs": len(histories),
        "events": sum(by_type.values()),
        "bytes": sum(sizes),
        "largest_run_bytes": max(sizes),
        "workflow_tasks": workflow_tasks,
        "events_by_type": {n: [by_type[n], bytes_by_type[n]] for n in sorted(by_type)},
        "payload_bytes_by_key": dict(keys.most_common()),
    }


async def wait_until(check: Any, timeout: float, what: str) -> None:
    """Polls the coroutine function `check` until it is true."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout:.0f} s")
        await asyncio.sleep(0.2)
