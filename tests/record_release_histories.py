"""Records histories with a released tree's own worker, for test_replay.py to replay.

    python -m tests.record_release_histories --commit ad71c7d --out tests/histories/v0.1.0

The release's tree is extracted with `git archive <commit> | tar -x`, and its `worker.py`
runs as a subprocess with that tree as its working directory (the script's directory comes
first on sys.path, so the release's own `durable_agent`, `workflows` and `activities` are
imported, not the editable install of today's tree; this is checked). It hosts the agents of
`tests/upgrade_agents.py` (`--agents upgrade_agents`, tests/ on PYTHONPATH). This process
drives the runs with plain temporalio, by workflow type, signal, update and query names, with
JSON dict inputs, so nothing recorded depends on either release's Python models.

Recorded: complete runs (`tool_run`, `approved`, `denied`, `suspend_resume`) and runs left
unfinished (`waiting_for_approval`, `suspended_at_boundary`, `mid_tool_call`). Run it once
per release with that release's commit and commit the JSON files and README.md it writes.

`tests/test_upgrade.py` uses `extract_release`, `TreeWorkers` and the status helpers too.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import temporalio
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowHandle, WorkflowHistory

from durable_agent.temporal.devserver import DevServer

from .faults.support import Faults, WorkerProcess, _die_with_parent, wait_until
from .temporal_support import free_port

ROOT = Path(__file__).resolve().parents[1]
AGENTS_DIR = Path(__file__).resolve().parent
"""Holds upgrade_agents.py; it goes on the workers' PYTHONPATH."""
AGENTS_MODULE = "upgrade_agents"
WORKFLOW = "AgentWorkflow"


class ReleaseMissing(RuntimeError):
    pass


def extract_release(commit: str, directory: Path) -> Path:
    """`git archive <commit> | tar -x -C <directory>`, run in the repository root."""
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        raise ReleaseMissing(
            f"commit {commit} is not in the repository at {ROOT}, so its tree cannot be "
            "extracted; fetch the full history (e.g. `git fetch --unshallow`)"
        )
    directory.mkdir(parents=True, exist_ok=True)
    archive = subprocess.Popen(["git", "archive", commit], cwd=ROOT, stdout=subprocess.PIPE)
    untar = subprocess.run(["tar", "-x", "-C", str(directory)], stdin=archive.stdout)
    if archive.stdout is not None:
        archive.stdout.close()
    if archive.wait() != 0 or untar.returncode != 0:
        raise RuntimeError(f"git archive {commit} | tar -x -C {directory} failed")
    if not (directory / "worker.py").exists():
        raise RuntimeError(f"{commit} has no worker.py at its root")
    return directory


class TreeWorkers(Faults):
    """`Faults` (tests/faults/support.py) for workers of any tree: one task queue, worker
    processes stopped on exit, logs and side-effect files printed when something failed.

    Each worker is `python worker.py --no-examples --agents upgrade_agents` (or
    `agents_module`, with `extra_args`) with the tree as its working directory, tests/ on
    PYTHONPATH and $UPGRADE_TEST_DIR = `self.dir` (and `extra_env`).
    """

    tree: Path = ROOT
    agents_module: str = AGENTS_MODULE
    extra_args: Sequence[str] = ()
    """More `worker.py` options (a `--quota`, say), for every worker started."""
    extra_env: dict[str, str] = {}  # noqa: RUF012 (replaced, never changed in place)
    """More environment (a model's base URL, say), for every worker started."""

    async def __aenter__(self) -> TreeWorkers:
        return self

    def spawn_worker(self, label: str | None = None) -> WorkerProcess:
        label = label or f"worker{len(self.workers) + 1}"
        log = self.dir / f"{label}.log"
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": self.address,
            "TEMPORAL_TASK_QUEUE": self.task_queue,
            "UPGRADE_TEST_DIR": str(self.dir),
            "PYTHONPATH": str(AGENTS_DIR),
            **self.extra_env,
        }
        env.pop("DURABLE_AGENT_ENCRYPTION_KEYS", None)
        with open(log, "ab") as out:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "worker.py",
                    "--no-examples",
                    "--agents",
                    self.agents_module,
                    "--log-format",
                    "json",
                    *self.extra_args,
                ],
                cwd=self.tree,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        worker = WorkerProcess(label, process, log, time.monotonic())
        self.workers.append(worker)
        return worker

    async def start_tree_worker(self, tree: Path, label: str, timeout: float = 30) -> WorkerProcess:
        """A worker of `tree`, once it polls; fails unless it imported `tree`'s own
        `durable_agent` (not, say, the editable install of another tree)."""
        self.tree = tree
        worker = await self.start_worker(label, timeout=timeout)
        package = self.imported_from(worker)
        expected = (tree / "durable_agent").resolve()
        assert package == expected, f"{label} imported {package}, not {expected}"
        return worker

    def imported_from(self, worker: WorkerProcess) -> Path:
        """The `durable_agent` package directory a worker process imported."""
        for line in self.lines("imports"):
            if int(line[0]) == worker.process.pid:
                return Path(line[1]).parent
        raise AssertionError(f"{worker.label} did not import {self.agents_module}")


# -- driving runs with plain temporalio ----------------------------------------------------


async def status(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    view: dict[str, Any] = await handle.query("status", result_type=dict)
    return view


async def wait_for(
    handle: WorkflowHandle[Any, Any],
    check: Callable[[dict[str, Any]], bool],
    what: str,
    timeout: float = 30,
) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        view = await status(handle)
        return view if check(view) else None

    return await wait_until(probe, timeout=timeout, what=f"{handle.id}: {what}")


def waiting_for_approval(call_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda view: (
        view["status"] == "waiting"
        and any(p["tool_call_id"] == call_id for p in view["pending_approvals"])
    )


def suspended(run_step: int) -> Callable[[dict[str, Any]], bool]:
    """Suspended at `before_model_request` with `run_step` model requests done."""
    return lambda view: (
        view["status"] == "waiting"
        and view.get("suspend_reason") is not None
        and view["node"] == "before_model_request"
        and view["run_step"] == run_step
    )


async def settled_history(handle: WorkflowHandle[Any, Any], timeout: float = 20) -> WorkflowHistory:
    """The history once no workflow task is pending and it stopped growing."""

    async def probe() -> WorkflowHistory | None:
        description = await handle.describe()
        if description.raw_description.HasField("pending_workflow_task"):
            return None
        history = await handle.fetch_history()
        await asyncio.sleep(0.3)
        again = await handle.fetch_history()
        return again if len(again.events) == len(history.events) else None

    return await wait_until(probe, timeout=timeout, what=f"{handle.id}: history to settle")


async def wait_for_tool_attempt(handle: WorkflowHandle[Any, Any], timeout: float = 30) -> None:
    """Until a `tool_call` activity attempt of the run is running (started, not completed)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        description = await handle.describe()
        if any(
            a.activity_type.name == "tool_call"
            and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            for a in description.raw_description.pending_activities
        ):
            return
        if loop.time() > deadline:
            raise AssertionError(f"{handle.id}: no tool_call attempt running after {timeout}s")
        await asyncio.sleep(0.05)


async def record(commit: str, out: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="durable-agent-release-"))
    try:
        tree = extract_release(commit, work / "tree")
    except Exception:
        shutil.rmtree(work, ignore_errors=True)
        raise
    server = DevServer(
        work / "dev.db",
        port=free_port(),
        ui_port=None,
        dynamic_config={"frontend.enableUpdateWorkflowExecution": "true"},
    )
    await server.start()
    try:
        async with TreeWorkers(server.address, work / "side-effects", "record") as workers:
            await record_runs(workers, tree, commit, out)
    finally:
        server.stop()
    shutil.rmtree(work, ignore_errors=True)  # kept when recording failed, for its logs


async def record_runs(workers: TreeWorkers, tree: Path, commit: str, out: Path) -> None:
    worker = await workers.start_tree_worker(tree, f"release-{commit}")
    print(f"worker of {commit} imports {workers.imported_from(worker)}")
    client = await Client.connect(workers.address)
    task_queue = workers.task_queue

    async def start(label: str, fields: dict[str, Any]) -> WorkflowHandle[Any, Any]:
        return await client.start_workflow(
            WORKFLOW,
            fields,
            id=f"release-{label}-{uuid.uuid4().hex[:6]}",
            task_queue=task_queue,
        )

    runs: dict[str, WorkflowHandle[Any, Any]] = {}
    weather = {"agent": "upgrade-weather", "prompt": "weather?"}
    deployer = {"agent": "upgrade-deployer", "prompt": "ship it"}
    at_boundary = {**weather, "suspend_at": ["before_model_request"]}

    runs["tool_run"] = await start("tool-run", weather)
    await runs["tool_run"].result()

    handle = runs["suspend_resume"] = await start("suspend-resume", at_boundary)
    await wait_for(handle, suspended(0), "first suspension")
    await handle.signal("resume", {})
    await wait_for(handle, suspended(1), "second suspension")
    await handle.execute_update("resume_run", {"reason": "go on"})
    await handle.result()

    handle = runs["approved"] = await start("approved", deployer)
    await wait_for(handle, waiting_for_approval("d1"), "approval of d1")
    await handle.execute_update(
        "submit_approval", {"tool_call_id": "d1", "approved": True, "decided_by": "alice"}
    )
    await handle.result()

    handle = runs["denied"] = await start("denied", deployer)
    await wait_for(handle, waiting_for_approval("d1"), "approval of d1")
    await handle.signal(
        "approval",
        {"tool_call_id": "d1", "approved": False, "reason": "freeze", "decided_by": "bob"},
    )
    await handle.result()

    # Unfinished: each is recorded as it stands.
    handle = runs["waiting_for_approval"] = await start("waiting", deployer)
    await wait_for(handle, waiting_for_approval("d1"), "approval of d1")

    handle = runs["suspended_at_boundary"] = await start("suspended", at_boundary)
    await wait_for(handle, suspended(0), "first suspension")
    await handle.signal("resume", {})
    await wait_for(handle, suspended(1), "second suspension (tools done)")

    handle = runs["mid_tool_call"] = await start(
        "mid-tool-call", {"agent": "upgrade-blocker", "prompt": "do the slow thing"}
    )
    await workers.wait_for_line("tool_started", handle.id)
    await wait_for_tool_attempt(handle)

    out.mkdir(parents=True, exist_ok=True)
    recorded = []
    for label, run in runs.items():
        history = await settled_history(run)
        (out / f"{label}.json").write_text(history.to_json())
        recorded.append((label, len(history.events)))
        print(f"recorded {label}: {len(history.events)} events")
    (workers.dir / "release").touch()
    write_readme(out, commit, recorded)


def write_readme(out: Path, commit: str, recorded: Sequence[tuple[str, int]]) -> None:
    full = subprocess.run(
        ["git", "rev-parse", commit], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    rows = "\n".join(
        f"| `{label}.json` | {events} | {DESCRIPTIONS[label]} |" for label, events in recorded
    )
    shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    (out / "README.md").write_text(
        f"""# Histories recorded by release {out.name} (commit {full[:7]})

Made on {datetime.date.today().isoformat()} with

    python -m tests.record_release_histories --commit {commit} --out {shown}

which ran that commit's own `worker.py` (tree extracted with `git archive {full[:7]}`,
temporalio {temporalio.__version__}, `temporal` dev server) hosting the agents of
`tests/upgrade_agents.py`, and drove the runs with plain temporalio (JSON inputs, signal,
update and query names). `tests/test_replay.py` replays every file here with today's code;
a failure means today's workflow issues different commands for a run that release started.
Never re-record these: they are what that release left in users' servers.

| file | events | run |
| --- | ---: | --- |
{rows}
"""
    )


DESCRIPTIONS = {
    "tool_run": "`upgrade-weather`: two tool calls, then text; completed",
    "suspend_resume": "`upgrade-weather` suspended at both `before_model_request` boundaries, "
    "resumed by signal then by the `resume_run` update; completed",
    "approved": "`upgrade-deployer`: `check_env`, then `deploy` approved by the "
    "`submit_approval` update; completed",
    "denied": "`upgrade-deployer`: `deploy` denied by the `approval` signal; completed",
    "waiting_for_approval": "`upgrade-deployer` after `check_env`, waiting for approval of "
    "`deploy` (unfinished)",
    "suspended_at_boundary": "`upgrade-weather` after its tool calls, suspended at the second "
    "`before_model_request` (unfinished)",
    "mid_tool_call": "`upgrade-blocker` with its `slow_step` tool activity started and not "
    "completed (unfinished; Temporal writes `ActivityTaskStarted` only when an attempt ends, "
    "so the history ends at the `ActivityTaskScheduled`)",
}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", required=True, help="the release's commit")
    parser.add_argument("--out", required=True, type=Path, help="e.g. tests/histories/v0.1.0")
    args = parser.parse_args(argv)
    asyncio.run(record(args.commit, args.out.resolve()))


if __name__ == "__main__":
    main()
