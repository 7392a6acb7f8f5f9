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


async def test_the_coder_writes_compiles_fixes_and_publishes_after_approval(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """`python worker.py` hosts `coder`: its first draft does not compile (a real
    `python -m py_compile` in the workspace's local_dir), it fixes it, waits for approval to
    publish; the files are the run's, in the store, and nothing of the compile is kept."""
    from durable_agent.environments.workspace import TreeReader, open_store, tree_id_of

    store = (tmp_path / "workspaces").as_uri()
    extra = {"DURABLE_AGENT_WORKSPACE_STORE": store}
    with sample_worker(dev_server, tmp_path / "worker.log", extra_env=extra) as env:
        agents = AgentClient(client, task_queue=env["TEMPORAL_TASK_QUEUE"])
        handle = await agents.start("coder", "Write greet.py that greets the world")
        view = None
        for _ in range(600):
            view = await handle.status()
            if view.status in ("waiting", "failed", "completed"):
                break
            await asyncio.sleep(0.1)
        assert view is not None
        assert view.status == "waiting", view
        assert [p.tool_name for p in view.pending_approvals] == ["publish_module"]
        trees = TreeReader(open_store(store))
        assert view.environment_ref is not None
        waiting = trees.files(tree_id_of(view.environment_ref))
        assert sorted(waiting) == ["README.md", "greet.py"]  # no __pycache__
        code = trees.read_blob(waiting["greet.py"].id).decode()
        compile(code, "greet.py", "exec")
        returns = [
            str(part.content)
            for message in await handle.conversation()
            for part in getattr(message, "parts", [])
            if part.kind == "tool_return" and part.name == "write_module"
        ]
        assert "does not compile" in returns[0]
        assert "SyntaxError" in returns[0] or "never closed" in returns[0]
        assert returns[1].endswith("it compiles")

        await handle.approve(view.pending_approvals[0].tool_call_id, by="reviewer")
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed"
    assert str(result.output).startswith("Done: published dist/greet.py")
    assert result.environment_ref is not None
    final = trees.files(tree_id_of(result.environment_ref))
    assert sorted(final) == ["README.md", "dist/greet.py", "greet.py"]
    assert trees.read_blob(final["dist/greet.py"].id).decode() == code
