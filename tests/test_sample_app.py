"""The sample application as `python worker.py` runs it (issue 25, item 6).

`worker.py` wires the library's worker with this repository's agents, its own workflow
(`ReleaseWorkflow`: the deployer agent as a child, then an activity) and its activity; the
run below goes through all of them on a real dev server, with a human's approval in between.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from temporalio.client import Client

from durable_agent.temporal import AgentClient
from durable_agent.temporal.devserver import DevServer

ROOT = Path(__file__).resolve().parents[1]


async def test_release_workflow_runs_the_deployer_as_a_child_then_its_activity(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    queue = f"sample-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "worker.log"
    env = {**os.environ, "TEMPORAL_ADDRESS": dev_server.address, "TEMPORAL_TASK_QUEUE": queue}
    env.pop("OPENAI_API_KEY", None)
    env.pop("OPENAI_BASE_URL", None)
    with open(log, "ab") as output:
        worker = subprocess.Popen(
            [sys.executable, "worker.py", "--log-format", "json"],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        handle = await client.start_workflow(
            "ReleaseWorkflow",
            {"version": "v2.2", "env": "staging"},
            id=f"release-{uuid.uuid4().hex[:6]}",
            task_queue=queue,
        )
        agents = AgentClient(client, task_queue=queue)
        child = agents.get(f"{handle.id}-deployer")
        view = None
        for _ in range(600):
            try:
                view = await child.status()
            except Exception:
                view = None
            if view is not None and view.status == "waiting":
                break
            await asyncio.sleep(0.1)
        assert view is not None, log.read_text()
        assert view.status == "waiting", log.read_text()
        asked = {p.tool_call_id: p.arguments for p in view.pending_approvals}
        assert asked == {"call_deploy_0": {"env": "staging", "version": "v2.2"}}
        await child.approve("call_deploy_0", by="dev")
        result = await asyncio.wait_for(handle.result(), 60)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    assert result == "#releases: Done. deployed v2.2 to staging"
    assert worker.returncode == 0, log.read_text()
