"""Rolling upgrades with Worker Deployments (#30.5), on a real dev server.

A run waits for a human on version v1 of the `agents` deployment; v2 starts and is made
current, v1 stops; the run, auto-upgrading, finishes on v2 once approved. Rolling back is
making v1 current again: a new run then goes to v1.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from temporalio.client import Client

from durable_agent.temporal.client import AgentClient
from durable_agent.temporal.devserver import DevServer

from .temporal_support import start_worker_process, unique

DEPLOYMENT = "agents"


def _temporal() -> str:
    return shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")


async def _make_current(server: DevServer, build_id: str, deployment: str) -> None:
    """`temporal worker deployment set-current-version`, retried until the server knows the
    version (it does once that version's worker has polled)."""
    command = [
        _temporal(),
        "worker",
        "deployment",
        "set-current-version",
        "--address",
        server.address,
        "--deployment-name",
        deployment,
        "--build-id",
        build_id,
        "--yes",
    ]
    for _ in range(100):
        done = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, text=True, timeout=30
        )
        if done.returncode == 0:
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"cannot make {build_id} current: {done.stderr}")


def _ran_on(log: Path) -> int:
    """How many activities a worker process completed."""
    count = 0
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        count += record.get("event") == "activity completed"
    return count


def _worker(server: DevServer, queue: str, tmp: Path, build: str, deployment: str) -> Any:
    return start_worker_process(
        server.address,
        queue,
        tmp,
        tmp / f"{build}.log",
        agents="tests.subagent_agents",
        extra=["--deployment-name", deployment, "--build-id", build],
    )


async def test_a_waiting_run_upgrades_to_the_new_version_and_a_rollback_routes_back(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    queue, deployment = unique("versioned"), unique(DEPLOYMENT)
    agents = AgentClient(client, task_queue=queue)
    v1 = _worker(dev_server, queue, tmp_path, "v1", deployment)
    v2 = v1_again = None
    try:
        await _make_current(dev_server, "v1", deployment)
        run = await agents.start("writer", "publish tides")
        await _until(run, "waiting")
        done_on_v1 = _ran_on(tmp_path / "v1.log")

        v2 = _worker(dev_server, queue, tmp_path, "v2", deployment)
        await _make_current(dev_server, "v2", deployment)
        v1.send_signal(signal.SIGTERM)
        v1.wait(30)
        await run.approve("p1", by="alice")
        result = await asyncio.wait_for(run.result(), 60)
        assert result.status == "completed"
        assert _ran_on(tmp_path / "v1.log") == done_on_v1  # nothing more ran on v1
        assert _ran_on(tmp_path / "v2.log") > 0
        description = await run.handle.describe()
        assert (
            description.raw_description.workflow_execution_info.versioning_info.deployment_version.build_id
            == "v2"
        )

        # Rollback: v1 current again; a new run goes there.
        (tmp_path / "v1.log").rename(tmp_path / "v1-first.log")
        v1_again = _worker(dev_server, queue, tmp_path, "v1", deployment)
        await _make_current(dev_server, "v1", deployment)
        second = await agents.start("researcher", "tides")
        assert (await asyncio.wait_for(second.result(), 60)).status == "completed"
        assert _ran_on(tmp_path / "v1.log") > 0
    finally:
        for process in (v1, v2, v1_again):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(30)


async def _until(run: Any, status: str) -> None:
    for _ in range(300):
        if (await run.status()).status == status:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{run.id} never became {status}")
