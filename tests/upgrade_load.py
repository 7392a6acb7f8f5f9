"""A rolling upgrade under load (issue 41, item 2), for tests/test_upgrade_load.py (a CI
size) and `python -m benchmarks upgrade` (2,000 runs).

1. A dev server on a SQLite file, a chat-completions server limiting requests as providers
   do (tests/support/limited_server.py), and a worker of the previous release (its tree
   extracted with `git archive`, run as its own `worker.py` with the agents of
   tests/upgrade_load_agents.py and `--quota openai:gpt-4o-mini=rpm:N`).
2. Runs of four kinds start on it and reach their waits: `load-deployer` runs waiting for
   the approval of `deploy`, `load-slow` runs in the middle of a tool call, `load-lead`
   runs whose sub-agent waits for the approval of `publish`, and `load-quoted` runs
   waiting for the model quota (the quota's keeper has runs queued).
3. The server and the worker are SIGKILLed together; the server restarts on the same file.
4. A worker of today's tree starts, with one worker of the previous release beside it.
   Decisions are sent (half approved, half denied), the slow tools are let go, and after
   `overlap` seconds the old worker is drained (SIGTERM: it finishes what it holds).
5. Today's worker finishes the rest.

Checked (`Outcome.problems`): every run completed with its expected output, an approved
tool ran exactly once and a denied one never (the tools append to `tool_runs`), each slow
call finished exactly once, and no history on the task queue (runs, sub-agents, the
quota's keeper) has a WorkflowTaskFailed event. Measured: the phases' wall times and each
run's delay, from what let it go on (its decision, the release of its tool, the server
back for a quota wait) to its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import math
import signal
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowHandle, WorkflowHistory

from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.quota import keeper_id

from .faults.support import WorkerProcess, worker_log_errors
from .record_release_histories import ROOT, WORKFLOW, TreeWorkers, extract_release
from .support.limited_server import LimitedServer, limited_server
from .support.openai_server import TextReply, ToolCall, ToolCallsReply
from .temporal_support import free_port
from .upgrade_load_agents import QUOTA_KEY, RELEASE_FILE

__all__ = ["CI", "FULL", "PREVIOUS_RELEASE", "Load", "Outcome", "rolling_upgrade"]

PREVIOUS_RELEASE = "80075cc"
"""The last commit before this round's work: the release a fleet upgrades from."""
WINDOW = 10.0
"""The chat-completions server's window: a `--quota` of rpm:N lets N/6 go in 10 s."""


@dataclass(frozen=True)
class Load:
    """How many runs of each kind, and how the upgrade goes."""

    deployers: int
    slow: int
    leads: int
    quoted: int
    rpm: int
    """The quota (`--quota openai:gpt-4o-mini=rpm:N`): low enough that quoted runs wait."""
    overlap: float
    """Seconds the old worker serves beside today's before it is drained."""
    activities: int = 500
    """Each worker's `--max-concurrent-activities`: every slow call blocks a slot."""
    timeout: float = 600.0
    """For each phase: the runs reaching their waits, and finishing after the restart."""
    poll: float = 2.0
    """Seconds between counts of the runs that wait or closed (visibility queries)."""

    @property
    def runs(self) -> int:
        return self.deployers + self.slow + self.leads + self.quoted


CI = Load(deployers=50, slow=30, leads=30, quoted=30, rpm=120, overlap=15, timeout=180)
"""140 runs (and 30 sub-agents): about two minutes on a 2-core machine."""
FULL = Load(
    deployers=900,
    slow=300,
    leads=500,
    quoted=300,
    rpm=120,
    overlap=60,
    activities=1000,
    timeout=2400,
    poll=5,
)
"""2,000 runs (and 500 sub-agents), the benchmark's."""


@dataclass
class Run:
    id: str
    kind: str
    approve: bool | None = None
    """The decision sent after the restart (deployers and leads' sub-agents)."""
    child: str | None = None
    """A lead's sub-agent run, which waits for the approval."""
    unblocked: float | None = None
    """When what let it go on happened (wall clock, seconds since the epoch)."""
    closed: float | None = None
    result: dict[str, Any] | None = None


@dataclass
class Outcome:
    load: Load
    runs: list[Run]
    problems: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


def expected_output(run: Run) -> str:
    if run.kind == "deployer":
        return "deployed: deployed to prod" if run.approve else "not done"
    if run.kind == "slow":
        return "finished: slow done"
    if run.kind == "lead":
        return "lead: published: published tides" if run.approve else "lead: not done"
    return "done"


def answer(body: dict[str, Any]) -> Any:
    """The quoted runs' model: a `lookup` call, then (with its result) a text."""
    if any(m["role"] == "tool" for m in body["messages"]):
        return TextReply("done")
    return ToolCallsReply([ToolCall("k1", "lookup", {"key": 1})])


class LoadWorkers(TreeWorkers):
    agents_module = "upgrade_load_agents"


async def gather_limited(jobs: list[Callable[[], Awaitable[Any]]], limit: int = 25) -> list[Any]:
    """Runs the jobs, at most `limit` at once (the dev server and two cores are shared)."""
    gate = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            return await job()

    return await asyncio.gather(*(one(job) for job in jobs))


async def until(
    check: Callable[[], Awaitable[str | None]],
    timeout: float,
    log: Callable[[str], None],
    every: float = 1.0,
) -> None:
    """Polls `check` every `every` seconds (None: done; else what it still waits for,
    logged now and then)."""
    deadline = time.monotonic() + timeout
    said = 0.0
    while (left := await check()) is not None:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s: {left}")
        if time.monotonic() - said > 10:
            log(f"  waiting: {left}")
            said = time.monotonic()
        await asyncio.sleep(every)


UNHANDLED = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND
CONFIRMED = EventType.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED


@dataclasses.dataclass(frozen=True)
class TaskFailure:
    text: str
    worker_pid: str
    """The pid in the failing worker's identity (`pid@host`)."""
    closed_before_confirmed: bool
    """The server refused the task's completion (`UNHANDLED_COMMAND`) because the
    confirmation of a signal the run had sent came in meanwhile (the next event)."""


async def task_failures(handle: WorkflowHandle[Any, Any]) -> list[TaskFailure]:
    return failures_in(await handle.fetch_history())


def failures_in(history: WorkflowHistory) -> list[TaskFailure]:
    events = list(history.events)
    return [
        TaskFailure(
            f"{history.workflow_id} event {event.event_id} WorkflowTaskFailed "
            f"({WorkflowTaskFailedCause.Name(attributes.cause)}): {attributes.failure.message}",
            attributes.identity.partition("@")[0],
            attributes.cause == UNHANDLED
            and index + 1 < len(events)
            and events[index + 1].event_type == CONFIRMED,
        )
        for index, event in enumerate(events)
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        for attributes in [event.workflow_task_failed_event_attributes]
    ]


def previous_release_race(failure: TaskFailure, previous_pids: set[str]) -> bool:
    """A task the previous release's worker failed because it closed a run with its last
    signal (a quota release) not yet confirmed, and the confirmation came in while the run
    closed: 80075cc's own race, which the release after it fixed (a run waits for its
    signals before it ends, `DRAIN_PATCH`). The server retries the task and the run
    completes; it says nothing about the upgrade, so it is counted apart."""
    return failure.closed_before_confirmed and failure.worker_pid in previous_pids


def spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    return {
        "median": round(statistics.median(ordered), 2),
        "p95": round(ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)], 2),
        "max": round(ordered[-1], 2),
    }


async def rolling_upgrade(
    directory: Path,
    load: Load,
    log: Callable[[str], None] = print,
    previous: str = PREVIOUS_RELEASE,
) -> Outcome:
    """Does the whole upgrade in `directory` (a tree, a server file, logs, side effects)."""
    tree = extract_release(previous, directory / "previous")
    server = DevServer(
        directory / "server" / "dev.db",
        port=free_port(),
        ui_port=None,
        dynamic_config={"frontend.enableUpdateWorkflowExecution": "true"},
    )
    burst = max(1, load.rpm * int(WINDOW) // 60)
    options = {"limit": burst, "window": WINDOW, "retry_after": None, "replies": 100_000}
    with limited_server(**options, answer=answer) as limited:
        workers = LoadWorkers(server.address, directory / "side-effects", "upgrade-load")
        workers.extra_args = (
            *("--quota", f"{QUOTA_KEY}=rpm:{load.rpm}"),
            *("--max-concurrent-activities", str(load.activities)),
        )
        workers.extra_env = {"OPENAI_BASE_URL": limited.server.base_url}
        workers.servers.append(server)
        async with workers:
            try:
                return await _upgrade(workers, server, limited, tree, load, log)
            finally:
                (workers.dir / RELEASE_FILE).touch()  # lets blocked calls end: fast exits


async def _upgrade(
    workers: LoadWorkers,
    server: DevServer,
    limited: LimitedServer,
    tree: Path,
    load: Load,
    log: Callable[[str], None],
) -> Outcome:
    queue = workers.task_queue
    tag = uuid.uuid4().hex[:6]
    runs = [
        *(
            Run(f"deployer-{i:04d}-{tag}", "deployer", approve=i % 2 == 0)
            for i in range(load.deployers)
        ),
        *(Run(f"slow-{i:04d}-{tag}", "slow") for i in range(load.slow)),
        *(Run(f"lead-{i:04d}-{tag}", "lead", approve=i % 2 == 0) for i in range(load.leads)),
        *(Run(f"quoted-{i:04d}-{tag}", "quoted") for i in range(load.quoted)),
    ]
    by_kind: dict[str, list[Run]] = {}
    for run in runs:
        by_kind.setdefault(run.kind, []).append(run)
    figures: dict[str, Any] = {
        "runs": len(runs),
        "by_kind": {k: len(v) for k, v in by_kind.items()},
    }
    outcome = Outcome(load, runs, figures=figures)

    await server.start()
    old = await workers.start_tree_worker(tree, "previous-1")
    client = await Client.connect(server.address)
    began = time.monotonic()
    agents = {"deployer": "load-deployer", "slow": "load-slow", "lead": "load-lead"}
    agents["quoted"] = "load-quoted"

    def starter(run: Run) -> Callable[[], Awaitable[Any]]:
        # What a client of the release sends: the workflow type by name, a JSON object.
        fields = {"agent": agents[run.kind], "prompt": f"go {run.id}"}
        return lambda: client.start_workflow(WORKFLOW, fields, id=run.id, task_queue=queue)

    # Quoted runs last: the quota still has a queue when the others reach their waits.
    await gather_limited([starter(run) for run in runs])
    figures["started_s"] = round(time.monotonic() - began, 1)
    log(f"  {len(runs)} runs started in {figures['started_s']} s")

    keeper = client.get_workflow_handle(keeper_id(queue, QUOTA_KEY))
    waiting_for_quota = 0

    async def count(query: str) -> int:
        return (await client.count_workflows(f"TaskQueue = '{queue}' AND {query}")).count

    async def waits() -> str | None:
        # Counts, not listings: the server's SQLite file is busy enough with the runs.
        nonlocal waiting_for_quota
        deployers = await count("AgentName = 'load-deployer' AND PendingApprovals > 0")
        children = await count("AgentName = 'load-publisher' AND PendingApprovals > 0")
        started = {row[0] for row in workers.lines("tool_started")}
        slow = sum(1 for r in by_kind.get("slow", []) if r.id in started)
        if by_kind.get("quoted"):
            with contextlib.suppress(Exception):
                state = await keeper.query("state", result_type=dict)
                waiting_for_quota = int(state["waiting"])
        left = []
        if deployers < load.deployers:
            left.append(f"{deployers}/{load.deployers} deployers waiting for approval")
        if children < load.leads:
            left.append(f"{children}/{load.leads} sub-agents waiting for approval")
        if slow < load.slow:
            left.append(f"{slow}/{load.slow} slow calls started")
        if load.quoted and not waiting_for_quota:
            left.append("no run waiting for the quota")
        return "; ".join(left) or None

    await until(waits, load.timeout, log, every=load.poll)
    query = f"TaskQueue = '{queue}' AND AgentName = 'load-publisher'"
    children = {w.id async for w in client.list_workflows(query)}
    for lead in by_kind.get("lead", []):
        lead.child = next((c for c in children if c.startswith(f"{lead.id}--")), None)
    figures["waiting_s"] = round(time.monotonic() - began, 1)
    figures["at_kill"] = {
        "waiting_for_quota": waiting_for_quota,
        "quota_requests_answered": limited.answered,
        "slow_calls_in_flight": len(workers.lines("tool_started")),
    }
    log(f"  all waiting after {figures['waiting_s']} s: {figures['at_kill']}")

    # -- the crash: server and worker together --------------------------------------------
    killed = time.monotonic()
    assert server.process is not None
    old.process.send_signal(signal.SIGKILL)
    server.stop(signal.SIGKILL)
    old.process.wait(10)
    await server.start()  # the same file, the same port
    back = time.time()
    figures["server_down_s"] = round(time.monotonic() - killed, 1)
    client = await Client.connect(server.address)
    log(f"  server back after {figures['server_down_s']} s")

    # -- the upgrade: today's worker, one old worker beside it for a while -----------------
    new, beside = await asyncio.gather(
        workers.start_tree_worker(ROOT, "today"),
        workers.start_tree_worker(tree, "previous-2"),
    )
    figures["workers_ready_s"] = round(time.monotonic() - killed, 1)
    for run in by_kind.get("quoted", []):
        run.unblocked = back

    def decide(run: Run) -> Callable[[], Awaitable[None]]:
        target = run.child if run.kind == "lead" else run.id
        call = "p1" if run.kind == "lead" else "d1"
        decision: dict[str, Any] = {
            "tool_call_id": call,
            "approved": run.approve,
            "decided_by": "upgrade-load",
        }
        if not run.approve:
            decision["reason"] = "not this one"

        async def send() -> None:
            assert target is not None
            await client.get_workflow_handle(target).signal("approval", decision)
            run.unblocked = time.time()

        return send

    (workers.dir / RELEASE_FILE).touch()
    released = time.time()
    for run in by_kind.get("slow", []):
        run.unblocked = released
    decided = [r for r in runs if r.approve is not None]
    await gather_limited([decide(run) for run in decided])
    figures["decisions_sent_s"] = round(time.monotonic() - killed, 1)
    log(f"  {len(decided)} decisions sent, slow calls released")

    async def closed() -> int:
        return (
            await client.count_workflows(
                f"TaskQueue = '{queue}' AND WorkflowType = '{WORKFLOW}' "
                "AND ExecutionStatus != 'Running'"
            )
        ).count

    total = len(runs) + len(by_kind.get("lead", []))
    drain_at = time.monotonic() + load.overlap
    while time.monotonic() < drain_at:
        await asyncio.sleep(1)
    closed_at_drain = await closed()
    drained = time.monotonic()
    beside.process.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(_exit_code, beside, 120)
    figures["drain"] = {
        "after_s": round(drained - killed, 1),
        "closed_before": closed_at_drain,
        "took_s": round(time.monotonic() - drained, 1),
        "exit_code": code,
    }
    log(f"  previous-2 drained: {figures['drain']}")
    if code != 0:
        outcome.problems.append(f"the drained worker exited with {code}; see {beside.log}")

    async def finished() -> str | None:
        done = await closed()
        return None if done >= total else f"{done}/{total} workflows closed"

    try:
        await until(finished, load.timeout, log, every=load.poll)
    except AssertionError as error:
        outcome.problems.append(str(error))
    last = time.monotonic()
    figures["upgrade_s"] = round(last - killed, 1)
    figures["wall_s"] = round(last - began, 1)
    log(f"  all closed {figures['upgrade_s']} s after the kill")

    await _check(client, workers, outcome, [old, new, beside], limited)
    return outcome


def _exit_code(worker: WorkerProcess, timeout: float) -> int | None:
    try:
        return worker.process.wait(timeout)
    except Exception:
        worker.process.kill()
        return None


async def _check(
    client: Client,
    workers: LoadWorkers,
    outcome: Outcome,
    processes: list[WorkerProcess],
    limited: LimitedServer,
) -> None:
    problems, figures, runs = outcome.problems, outcome.figures, outcome.runs

    async def read(run: Run) -> None:
        handle = client.get_workflow_handle(run.id)
        description = await handle.describe()
        if description.close_time is not None:
            run.closed = description.close_time.timestamp()
            with contextlib.suppress(Exception):
                run.result = await handle.result()

    await gather_limited([functools.partial(read, run) for run in runs])
    lost = [r for r in runs if r.result is None or r.result.get("status") != "completed"]
    wrong = [
        f"{r.id}: {r.result.get('output')!r}, not {expected_output(r)!r}"
        for r in runs
        if r.result is not None and r not in lost and r.result.get("output") != expected_output(r)
    ]
    figures["completed"] = len(runs) - len(lost)
    if lost:
        problems.append(f"{len(lost)} runs lost (not completed), e.g. {[r.id for r in lost[:5]]}")
    if wrong:
        problems.append(f"{len(wrong)} runs with another output, e.g. {wrong[:3]}")

    # Tools: approved exactly once, denied never; each slow call finished once.
    ran = Counter((row[0], row[2]) for row in workers.lines("tool_runs"))
    for run in runs:
        if run.kind in ("deployer", "lead"):
            holder, tool = (run.id, "deploy") if run.kind == "deployer" else (run.child, "publish")
            times = ran[(holder or "?", tool)]
            if times != (1 if run.approve else 0):
                decided = "approved" if run.approve else "denied"
                problems.append(f"{run.id}: {decided} {tool} ran {times} times")
    finished = Counter(row[0] for row in workers.lines("tool_finished"))
    started = Counter(row[0] for row in workers.lines("tool_started"))
    for run in runs:
        if run.kind == "slow" and finished[run.id] != 1:
            problems.append(f"{run.id}: slow_step finished {finished[run.id]} times")
    pids = {str(w.process.pid): w.label for w in processes}
    figures["slow_calls"] = {
        "attempts": sum(started[r.id] for r in runs if r.kind == "slow"),
        "finished_by": dict(
            Counter(pids.get(row[2], row[2]) for row in workers.lines("tool_finished"))
        ),
    }

    # No workflow task failed, in any history of the task queue.
    executions = [
        (w.id, w.run_id) async for w in client.list_workflows(f"TaskQueue = '{workers.task_queue}'")
    ]
    found: list[TaskFailure] = []

    async def inspect(workflow_id: str, run_id: str | None) -> None:
        found.extend(await task_failures(client.get_workflow_handle(workflow_id, run_id=run_id)))

    await gather_limited([functools.partial(inspect, *w) for w in executions])
    previous_pids = {str(w.process.pid) for w in processes if w.label.startswith("previous")}
    races = [f for f in found if previous_release_race(f, previous_pids)]
    failures = [f.text for f in found if f not in races]
    figures["histories_checked"] = len(executions)
    figures["workflow_task_failures"] = len(failures)
    figures["previous_release_close_races"] = len(races)
    if failures:
        problems.append(f"{len(failures)} workflow tasks failed, e.g.:\n" + "\n".join(failures[:5]))

    # What each run waited after what let it go on.
    delays = [
        (r.closed - r.unblocked, r)
        for r in runs
        if r.closed is not None and r.unblocked is not None
    ]
    figures["delay_s"] = spread([d for d, _ in delays])
    figures["delay_s_by_kind"] = {
        kind: spread([d for d, r in delays if r.kind == kind])
        for kind in dict.fromkeys(r.kind for r in runs)
    }
    if delays:
        slowest, run = max(delays, key=lambda item: item[0])
        figures["slowest_run"] = {"id": run.id, "kind": run.kind, "delay_s": round(slowest, 2)}
    figures["quota"] = {"answered": limited.answered, "refused_429": limited.refused}
    figures["worker_log_errors"] = {w.label: len(worker_log_errors([w])) for w in processes}
    figures["load"] = dataclasses.asdict(outcome.load)
