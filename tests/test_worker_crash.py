"""A worker SIGKILLed in the middle of a tool call: a new worker process finishes the run."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import uuid
from pathlib import Path

from temporalio.client import Client

from durable_agent.temporal import AgentWorkflow, AgentWorkflowInput
from durable_agent.temporal.devserver import DevServer

from .temporal_support import start_worker_process

ROOT = Path(__file__).resolve().parents[1]


def start_worker(
    server: DevServer, task_queue: str, test_dir: Path, log: Path
) -> subprocess.Popen[bytes]:
    return start_worker_process(server.address, task_queue, test_dir, log)


async def wait_for_file(path: Path, lines: int = 1, timeout: float = 30) -> list[str]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        if path.exists() and len(content := path.read_text().splitlines()) >= lines:
            return content
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{path} did not get {lines} line(s) within {timeout}s")
        await asyncio.sleep(0.05)


async def test_worker_killed_during_tool_call(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    task_queue = f"crash-{uuid.uuid4().hex[:8]}"
    first = start_worker(dev_server, task_queue, tmp_path, tmp_path / "worker1.log")
    second: subprocess.Popen[bytes] | None = None
    try:
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentWorkflowInput(agent="crash-demo", prompt="do the slow thing"),
            id=f"crash-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        await wait_for_file(tmp_path / "tool_started")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        assert (tmp_path / "model_requests").read_text().splitlines() == ["request 1"]

        second = start_worker(dev_server, task_queue, tmp_path, tmp_path / "worker2.log")
        # The killed attempt is retried once its heartbeat times out (2s) on the new worker.
        started = await wait_for_file(tmp_path / "tool_started", lines=2, timeout=60)
        (tmp_path / "release").touch()
        result = await asyncio.wait_for(handle.result(), 60)
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(20)

    assert result.output == "finished after the slow tool"
    # Exactly one request per step: the one completed before the kill was not sent again.
    assert (tmp_path / "model_requests").read_text().splitlines() == ["request 1", "request 2"]
    # The call the kill hit ran again, with the same idempotency key; it finished once.
    assert len(started) == 2
    assert started[0].split()[1] == started[1].split()[1] == f"{handle.id}:slow_1"
    assert (tmp_path / "tool_finished").read_text().splitlines() == [started[0]]
