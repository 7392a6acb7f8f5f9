"""Runs started by the previous release finish after the worker is upgraded to today's code.

A worker of an earlier release (v0.1.0 at commit ad71c7d, v0.2.0 at 754ebe6, the library
layout, v0.3.0 at 6019c80, and 80075cc, the last commit before the 0.4 layout; each tree
extracted with `git archive`, run as its own `worker.py`) starts three runs: one waiting
for approval, one suspended at a boundary after its tools ran, one in the middle of a tool
call. The worker is SIGKILLed, a worker of today's tree takes over, and each run is
approved, resumed or released. Every run completes with its output, no workflow task fails
(today's code replays what the release recorded), and no model request or tool call that
completed before the upgrade runs again.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError
from temporalio.service import RPCError

from durable_agent.temporal import AgentStatusView, AgentWorkflow, ApprovalSignal, ResumeSignal
from durable_agent.temporal.devserver import DevServer

from .faults.support import worker_log_errors
from .record_release_histories import (
    ROOT,
    WORKFLOW,
    ReleaseMissing,
    TreeWorkers,
    extract_release,
    suspended,
    wait_for,
    wait_for_tool_attempt,
    waiting_for_approval,
)
from .temporal_support import unique

RELEASES = {
    "v0.1.0": "ad71c7d",
    "v0.2.0": "754ebe6",
    "v0.3.0": "6019c80",
    "v0.3.x-tip": "80075cc",
}
"""Earlier releases by their commits: v0.1.0 the last commit before the move to
durable_agent.temporal, v0.2.0 the one-package library (whose activity inputs and results
were still written whole), v0.3.0 the last before the workflow was split into components
(one process-wide registry; packed payloads), and v0.3.x-tip (80075cc) the last commit
before the 0.4 layout (issue 37: contract/engine/agent floors, typed stream records, one
approval decision). 80075cc was never tagged, but users ran it: its runs left mid-flight
are what the reorganised workflow must replay and finish, so it is tested as a release."""


@pytest.fixture(scope="session", params=sorted(RELEASES))
def release(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="session")
def release_tree(release: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release's tree, extracted once per session."""
    try:
        return extract_release(RELEASES[release], tmp_path_factory.mktemp("release") / "tree")
    except ReleaseMissing as error:
        pytest.fail(f"the upgrade test needs release {release}: {error}", pytrace=False)


async def test_runs_started_on_an_earlier_release_finish_on_the_new_code(
    dev_server: DevServer, client: Client, release: str, release_tree: Path, tmp_path: Path
) -> None:
    async with TreeWorkers(dev_server.address, tmp_path, "upgrade") as workers:
        try:
            await asyncio.wait_for(upgrade(workers, client, release, release_tree), 90)
        finally:
            (workers.dir / "release").touch()  # lets a blocked call end, so workers stop fast


async def task_failures(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """Each WorkflowTaskFailed event of a run: its event id, cause and failure message (for a
    replay that diverged, the command and event the SDK compared)."""
    history = await handle.fetch_history()
    return [
        f"{handle.id} event {event.event_id} WorkflowTaskFailed "
        f"({WorkflowTaskFailedCause.Name(attributes.cause)}): {attributes.failure.message}"
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        for attributes in [event.workflow_task_failed_event_attributes]
    ]


async def status_on_new_worker(
    handle: WorkflowHandle[Any, Any], timeout: float = 30, **expected: Any
) -> AgentStatusView:
    """Waits for the `status` fields in `expected`; fails at once if today's code cannot
    replay the run (a failed workflow task, or a query failing with a nondeterminism error).

    The first task after the kill waits for the dead worker's sticky queue to time out (5 s),
    then goes to the new worker, which replays the release's history."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        failures = await task_failures(handle)
        assert not failures, "\n".join(failures)
        last: object
        try:
            last = view = await handle.query(AgentWorkflow.status)
            if all(getattr(view, key) == value for key, value in expected.items()):
                return view
        except WorkflowQueryFailedError as error:
            if "Nondeterminism" in str(error):
                raise AssertionError(
                    f"{handle.id}: today's code diverges from the release's history: {error}"
                ) from None
            last = error
        except RPCError as error:  # e.g. the query timed out on the dead worker's queue
            last = error
        if loop.time() > deadline:
            raise AssertionError(f"{handle.id}: status never had {expected} (last: {last!r})")
        await asyncio.sleep(0.1)


async def finish(
    workers: TreeWorkers, handle: WorkflowHandle[Any, Any], timeout: float = 45
) -> dict[str, Any]:
    """The run's result; fails at once, naming the divergence, if a workflow task fails."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    result = asyncio.ensure_future(handle.result())
    try:
        while True:
            done, _ = await asyncio.wait({result}, timeout=0.5)
            if done:
                value: dict[str, Any] = result.result()
                return value
            failures = await task_failures(handle)
            assert not failures, "\n".join(failures)
            if loop.time() > deadline:
                raise AssertionError(
                    f"{handle.id} did not finish within {timeout}s; status: "
                    f"{await workers.describe_status(handle)}"
                )
    finally:
        result.cancel()


def work_done(
    workers: TreeWorkers, runs: dict[str, WorkflowHandle[Any, Any]]
) -> dict[str, tuple[list[int], list[str]]]:
    """Per run: the steps of the model requests served and the ids of the quick tool calls
    that ran (one line each in the side-effect files, whichever worker did it)."""
    return {
        name: (workers.steps("model_requests", run.id), sorted(workers.calls("tool_runs", run.id)))
        for name, run in runs.items()
    }


async def upgrade(workers: TreeWorkers, client: Client, release: str, release_tree: Path) -> None:
    old = await workers.start_tree_worker(release_tree, f"{release}-worker")

    async def start(name: str, fields: dict[str, Any]) -> WorkflowHandle[Any, Any]:
        # What a client of the release sends: the workflow type by name, a JSON object.
        return await client.start_workflow(
            WORKFLOW, fields, id=unique(f"upgrade-{name}"), task_queue=workers.task_queue
        )

    approval = await start("approval", {"agent": "upgrade-deployer", "prompt": "ship it"})
    boundary = await start(
        "boundary",
        {
            "agent": "upgrade-weather",
            "prompt": "weather?",
            "suspend_at": ["before_model_request"],
        },
    )
    blocked = await start("blocked", {"agent": "upgrade-blocker", "prompt": "do the slow thing"})
    runs = {"approval": approval, "boundary": boundary, "blocked": blocked}

    # On the old worker: each run reaches its state, with some work done.
    await wait_for(approval, waiting_for_approval("d1"), f"approval of d1 ({release})")
    await wait_for(boundary, suspended(0), f"first suspension ({release})")
    await boundary.signal("resume", {})
    await wait_for(boundary, suspended(1), f"second suspension, tools done ({release})")
    await workers.wait_for_line("tool_started", blocked.id)
    await wait_for_tool_attempt(blocked)

    before = work_done(workers, runs)
    assert before == {
        "approval": ([0, 1], ["c1"]),
        "boundary": ([0], ["w1", "w2"]),
        "blocked": ([0], []),
    }

    old.kill()
    new = await workers.start_tree_worker(ROOT, "new-worker")

    # On the new worker, through today's client models.
    approval_run = client.get_workflow_handle_for(AgentWorkflow.run, approval.id)
    boundary_run = client.get_workflow_handle_for(AgentWorkflow.run, boundary.id)
    view = await status_on_new_worker(approval_run, status="waiting")
    assert [p.tool_call_id for p in view.pending_approvals] == ["d1"]
    await approval_run.execute_update(
        AgentWorkflow.submit_approval,
        ApprovalSignal(tool_call_id="d1", approved=True, decided_by="alice"),
    )
    view = await status_on_new_worker(boundary_run, status="waiting")
    assert view.suspend_reason is not None
    await boundary_run.execute_update(AgentWorkflow.resume_run, ResumeSignal())
    (workers.dir / "release").touch()

    results = dict(
        zip(
            runs,
            await asyncio.gather(*(finish(workers, run) for run in runs.values())),
            strict=True,
        )
    )
    outputs = {name: (r["status"], r["output"]) for name, r in results.items()}
    assert outputs == {
        "approval": ("completed", "done: deployed to prod"),
        "boundary": ("completed", "weather: sunny in Paris; sunny in Oslo"),
        "blocked": ("completed", "finished: slow done"),
    }

    for run in runs.values():
        assert await task_failures(run) == []

    # Every model request and tool call ran exactly once, before or after the upgrade.
    after = work_done(workers, runs)
    assert after == {
        "approval": ([0, 1, 2], ["c1", "d1"]),
        "boundary": ([0, 1], ["w1", "w2"]),
        "blocked": ([0, 1], []),
    }

    # The call the kill interrupted ran again on the new worker (same idempotency key) and
    # finished once: at most two attempts, one per worker.
    started = workers.lines("tool_started", blocked.id)
    finished = workers.lines("tool_finished", blocked.id)
    pids = [old.process.pid, new.process.pid]
    assert [(row[1], int(row[2])) for row in started] == [("s1", pid) for pid in pids]
    assert [(row[1], int(row[2])) for row in finished] == [("s1", new.process.pid)]
    assert Counter(row[3] for row in started) == {f"{blocked.id}:s1": 2}

    assert worker_log_errors([old, new]) == []
