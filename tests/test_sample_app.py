"""The sample application as `python worker.py` runs it (issue 25, item 6).

`worker.py` wires the library's worker with this repository's agents, its own workflow
(`ReleaseWorkflow`: the deployer agent as a child, then an activity) and its activity; the
run below goes through all of them on a real dev server, with a human's approval in between.
In-process, its example agents answer the latest prompt of a conversation, not the first.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

from temporalio.client import Client

from durable_agent import ToolApprovalDecision
from durable_agent.temporal import AgentClient
from durable_agent.temporal.devserver import DevServer

from .sample_support import sample_worker

ROOT = Path(__file__).resolve().parent.parent


async def test_release_workflow_runs_the_deployer_as_a_child_then_its_activity(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    with sample_worker(dev_server, tmp_path / "worker.log") as env:
        handle = await client.start_workflow(
            "ReleaseWorkflow",
            {"version": "v2.2", "env": "staging"},
            id=f"release-{uuid.uuid4().hex[:6]}",
            task_queue=env["TEMPORAL_TASK_QUEUE"],
        )
        agents = AgentClient(client, task_queue=env["TEMPORAL_TASK_QUEUE"])
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
        assert view is not None
        assert view.status == "waiting"
        asked = {p.tool_call_id: p.arguments for p in view.pending_approvals}
        assert asked == {"call_deploy_0": {"env": "staging", "version": "v2.2"}}
        await child.approve("call_deploy_0", by="dev")
        result = await asyncio.wait_for(handle.result(), 60)
    assert result == "#releases: Done. deployed v2.2 to staging"


async def test_sample_agents_answer_the_latest_prompt() -> None:
    sys.path.insert(0, str(ROOT))
    from workflows.agents import build_deployer, build_weather

    weather = build_weather()
    first = await weather.run("Weather in Rome?")
    second = await weather.run("And in Oslo?", message_history=first.messages)
    assert "Oslo" in str(second.output)
    deployer = build_deployer()
    earlier = await deployer.run("Deploy v5 to prod")
    approvals = {p.tool_call_id: ToolApprovalDecision.approved() for p in earlier.pending_approvals}
    earlier = await deployer.resume_after_hitl(earlier.state, approvals=approvals)
    assert earlier.status == "completed"
    later = await deployer.run("Deploy v6 to staging", message_history=earlier.messages)
    asked = [p.arguments for p in later.pending_approvals]
    assert asked == [{"env": "staging", "version": "v6"}]
