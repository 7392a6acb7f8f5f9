"""Workspaces on Temporal (issue 39): the tree moves with the run across workers, approvals,
forks, retries, continue-as-new, sub-agents and a SIGKILLed worker; only refs enter history.

Each test's store is a `file://` directory of its own in tmp_path, shared by its workers.
"""

from __future__ import annotations

import asyncio
import base64
import re
import signal
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durable_agent import AgentBuilder, TestModel, ToolContext
from durable_agent.environments.workspace import TreeReader, open_store, tree_id_of
from durable_agent.temporal import (
    AgentActivityConfig,
    AgentClient,
    AgentRegistration,
    DurableAgentPlugin,
)
from durable_agent.temporal.client import AgentRunHandle
from durable_agent.temporal.devserver import DevServer

from .cli_support import cli_runner
from .helpers import call, text_response, tool_response
from .temporal_support import fast_activity, new_worker, start_worker_process, unique

pytestmark = pytest.mark.server

GENERATED = "GENERATED-CONTENT-3f9c"
INITIAL = "INITIAL-CONTENT-8e1d"


def files_of(store_url: str, ref: str) -> dict[str, str]:
    trees = TreeReader(open_store(store_url))
    return {p: trees.read_blob(e.id).decode() for p, e in trees.files(tree_id_of(ref)).items()}


async def until(handle: AgentRunHandle, check: Callable[[Any], bool], timeout: float = 30) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        view = await handle.status()
        if check(view):
            return view
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"run did not get there: {view}")
        await asyncio.sleep(0.1)


def history_texts(history: Any) -> str:
    """The history as JSON with every payload's data decoded, to search for content."""
    text = history.to_json()
    decoded = []
    for blob in re.findall(r'"data":\s*"([A-Za-z0-9+/=]+)"', text):
        try:
            decoded.append(base64.b64decode(blob).decode(errors="replace"))
        except ValueError:
            continue
    return text + "\n".join(decoded)


async def generate(ctx: ToolContext, path: str, copies: int) -> str:
    """Writes content the model never saw (so it can only reach history by mistake)."""
    assert ctx.workspace is not None
    ctx.workspace.write_text(path, f"{GENERATED}:{path}\n" * copies)
    return f"generated {path}"


def publish(ctx: ToolContext) -> str:
    workspace = ctx.workspace
    assert workspace is not None
    files = workspace.list()
    readme = workspace.read_text("README.md")
    generated = [workspace.read_text(p).startswith(GENERATED) for p in files if p != "README.md"]
    workspace.write_text("published.txt", "yes")
    return f"published {len(files)} files, readme ok: {readme == INITIAL}, generated: {generated}"


async def test_the_workspace_follows_the_run_across_workers_and_stays_out_of_history(
    client: Client, tmp_path: Path
) -> None:
    store = (tmp_path / "store").as_uri()
    name = unique("ws")
    model = TestModel.with_responses(
        [
            tool_response(
                call("generate", "c1", path="a.txt", copies=50),
                call("generate", "c2", path="src/b.txt", copies=50),
            ),
            tool_response(call("publish", "c3")),
            text_response("done"),
        ]
    )
    agent = (
        AgentBuilder(model)
        .name(name)
        .tool(generate)
        .tool(publish, requires_approval=True)
        .workspace({"README.md": INITIAL})
        .build()
    )
    registration = AgentRegistration(agent, AgentActivityConfig(tool_call=fast_activity()))
    queue = f"tq-{uuid.uuid4()}"
    agents = AgentClient(client, task_queue=queue)
    plugin = DurableAgentPlugin(workspace_store=store)
    async with new_worker(client, queue, agents=[registration], plugins=[plugin]):
        handle = await agents.start(name, "write and publish")
        waiting = await until(handle, lambda v: v.status == "waiting")
    assert waiting.environment_ref is not None
    assert set(files_of(store, waiting.environment_ref)) == {"README.md", "a.txt", "src/b.txt"}

    # another worker, that never materialized this run, goes on after the approval
    plugin = DurableAgentPlugin(workspace_store=store)
    async with new_worker(client, queue, agents=[registration], plugins=[plugin]):
        await handle.approve("c3", by="alice")
        result = await asyncio.wait_for(handle.result(), 60)
        final = await handle.status()
        conversation = await handle.conversation()
        evidence = await handle.checkpoints()

        # a fork from before the publish restores the tree as of its checkpoint
        at = min(
            i
            for i, e in enumerate(evidence)
            if e.node.value == "prepare_model_request"
            and e.environment_ref != evidence[0].environment_ref
        )
        fork = await handle.fork(at)
        fork_waiting = await until(fork, lambda v: v.status == "waiting")
    assert result.output == "done"
    assert result.environment_ref == final.environment_ref
    published = [
        p.content
        for m in conversation
        for p in getattr(m, "parts", [])
        if getattr(p, "tool_call_id", None) == "c3"
    ]
    assert published == ["published 3 files, readme ok: True, generated: [True, True]"]
    assert files_of(store, final.environment_ref)["published.txt"] == "yes"
    assert evidence[-1].environment_ref == final.environment_ref
    assert fork_waiting.environment_ref == evidence[at].environment_ref
    assert "published.txt" not in files_of(store, fork_waiting.environment_ref)

    # only refs in history: no file content, not even the initial tree's
    history = history_texts(await client.get_workflow_handle(handle.id).fetch_history())
    assert GENERATED not in history
    assert INITIAL not in history
    assert final.environment_ref in history
    kinds = re.findall(r'"activityType":\s*\{\s*"name":\s*"([a-z_]+)"', history)
    assert "workspace_merge" in kinds  # two calls of one response changed it


def bump(ctx: ToolContext) -> int:
    workspace = ctx.workspace
    assert workspace is not None
    count = int(workspace.read_text("count.txt")) if workspace.exists("count.txt") else 0
    workspace.write_text("count.txt", str(count + 1))
    return count + 1


async def test_continue_as_new_keeps_the_tree(
    client: Client, dev_server: DevServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = (tmp_path / "store").as_uri()
    name = unique("ws-can")
    script = [tool_response(call("bump", f"b{i}")) for i in range(5)] + [text_response("ok")]
    agent = AgentBuilder(TestModel.with_responses(script)).name(name).tool(bump).workspace().build()
    registration = AgentRegistration(
        agent, AgentActivityConfig(tool_call=fast_activity(), continue_as_new_after_steps=2)
    )
    plugin = DurableAgentPlugin(workspace_store=store)
    async with new_worker(client, agents=[registration], plugins=[plugin]) as worker:
        handle = await AgentClient(client, task_queue=worker.task_queue).start(name, "count")
        result = await asyncio.wait_for(handle.result(), 60)
        view = await handle.status()
        cli = cli_runner(dev_server.address, capsys)
        shown = await cli("status", handle.id)
        as_json = await cli("status", handle.id, "--json")
    assert view.continued_as_new >= 2
    assert result.environment_ref is not None
    assert view.environment_ref == result.environment_ref
    assert files_of(store, result.environment_ref) == {"count.txt": "5"}
    # `durable-agent status` shows it too
    assert f"workspace   {result.environment_ref}" in shown.out.splitlines()
    assert as_json.json()["view"]["environment_ref"] == result.environment_ref


async def test_a_retry_restores_the_tree_of_the_failed_run(client: Client, tmp_path: Path) -> None:
    store = (tmp_path / "store").as_uri()
    name = unique("ws-retry")
    broken = {"on": True}
    seen: list[str] = []

    def fragile(ctx: ToolContext) -> str:
        workspace = ctx.workspace
        assert workspace is not None
        seen.append(workspace.read_text("count.txt"))
        workspace.write_text("count.txt", "written by a failing call")
        if broken["on"]:
            raise RuntimeError("not yet")
        return "fine"

    script = [
        tool_response(call("bump", "b1")),
        tool_response(call("fragile", "f1")),
        text_response("ok"),
    ]
    agent = (
        AgentBuilder(TestModel.with_responses(script))
        .name(name)
        .tool(bump)
        .tool(fragile)
        .workspace()
        .build()
    )
    registration = AgentRegistration(
        agent, AgentActivityConfig(tool_call=fast_activity(maximum_attempts=2))
    )
    plugin = DurableAgentPlugin(workspace_store=store)
    async with new_worker(client, agents=[registration], plugins=[plugin]) as worker:
        source = await AgentClient(client, task_queue=worker.task_queue).start(name, "go")
        with pytest.raises(Exception, match="not yet"):
            await asyncio.wait_for(source.result(), 60)
        failed = await source.status()
        broken["on"] = False
        retried = await source.retry()
        result = await asyncio.wait_for(retried.result(), 60)
    # every attempt, the failed run's two and the retry's, started from the tree as it was
    assert seen == ["1", "1", "1"]
    assert failed.environment_ref is not None
    assert files_of(store, failed.environment_ref) == {"count.txt": "1"}
    assert files_of(store, result.environment_ref) == {"count.txt": "written by a failing call"}


async def test_sub_agents_on_temporal_start_from_the_parent_and_hand_back(
    client: Client, tmp_path: Path
) -> None:
    store = (tmp_path / "store").as_uri()
    child_saw: list[list[str]] = []

    async def child_list(ctx: ToolContext) -> str:
        assert ctx.workspace is not None
        child_saw.append(ctx.workspace.list())
        return "listed"

    async def listing(ctx: ToolContext) -> list[str]:
        assert ctx.workspace is not None
        return ctx.workspace.list()

    child = (
        AgentBuilder(
            TestModel.with_responses(
                [
                    tool_response(call("child_list", "k1")),
                    tool_response(call("generate", "k2", path="from-child.txt", copies=1)),
                    text_response("child done"),
                ]
            )
        )
        .name(unique("ws-child"))
        .tool(child_list)
        .tool(generate)
        .build()
    )
    name = unique("ws-parent")
    parent = (
        AgentBuilder(
            TestModel.with_responses(
                [
                    tool_response(call("generate", "c1", path="from-parent.txt", copies=1)),
                    tool_response(call("helper", "c2", prompt="work")),
                    tool_response(call("listing", "c3")),
                    text_response("ok"),
                ]
            )
        )
        .name(name)
        .tool(generate)
        .tool(listing)
        .subagent(child, name="helper")
        .workspace()
        .build()
    )
    plugin = DurableAgentPlugin(workspace_store=store)
    async with new_worker(client, agents=[parent], plugins=[plugin]) as worker:
        handle = await AgentClient(client, task_queue=worker.task_queue).start(name, "go")
        result = await asyncio.wait_for(handle.result(), 60)
        conversation = await handle.conversation()
    assert child_saw == [["from-parent.txt"]]
    listed = [
        p.content
        for m in conversation
        for p in getattr(m, "parts", [])
        if getattr(p, "tool_call_id", None) == "c3"
    ]
    assert listed == [["from-child.txt", "from-parent.txt"]]
    assert set(files_of(store, result.environment_ref)) == {"from-child.txt", "from-parent.txt"}


async def wait_for_lines(path: Path, lines: int, timeout: float = 60) -> list[str]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        if path.exists() and len(content := path.read_text().splitlines()) >= lines:
            return content
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{path} did not get {lines} line(s) within {timeout}s")
        await asyncio.sleep(0.05)


async def test_a_worker_killed_mid_tool_changes_nothing(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    store = (tmp_path / "store").as_uri()
    queue = f"ws-kill-{uuid.uuid4().hex[:8]}"
    processes: list[subprocess.Popen[bytes]] = []

    def start(n: int) -> subprocess.Popen[bytes]:
        scratch = tmp_path / f"tmp{n}"
        scratch.mkdir()
        process = start_worker_process(
            dev_server.address,
            queue,
            tmp_path,
            tmp_path / f"worker{n}.log",
            agents="tests.workspace_agents",
            environ={"DURABLE_AGENT_WORKSPACE_STORE": store, "TMPDIR": str(scratch)},
        )
        processes.append(process)
        return process

    try:
        first = start(1)
        handle = await AgentClient(client, task_queue=queue).start("ws-scribbler", "scribble")
        await wait_for_lines(tmp_path / "tool_started", 1)
        await asyncio.sleep(0.3)  # it wrote its files: then the worker dies
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        start(2)
        started = await wait_for_lines(tmp_path / "tool_started", 2)
        (tmp_path / "release").touch()
        result = await asyncio.wait_for(handle.result(), 60)
        conversation = await handle.conversation()
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(20)
    # the retry on the new worker started from the tree as it was: nothing the killed
    # attempt wrote (through the file methods or in local_dir) counted
    assert started == ["clean state.txt", "clean state.txt"]
    read = [
        p.content
        for m in conversation
        for p in getattr(m, "parts", [])
        if getattr(p, "tool_call_id", None) == "r1"
    ]
    assert read == ["written by attempt 2 | attempt-2.txt,state.txt"]
    assert result.environment_ref is not None
    assert files_of(store, result.environment_ref) == {
        "attempt-2.txt": "left in local_dir",
        "state.txt": "written by attempt 2",
    }


async def test_a_forged_or_missing_ref_fails_the_run_naming_it(
    client: Client, tmp_path: Path
) -> None:
    store = (tmp_path / "store").as_uri()
    name = unique("ws-forged")
    script = [tool_response(call("bump", "b1")), text_response("ok")]
    agent = AgentBuilder(TestModel.with_responses(script)).name(name).tool(bump).workspace().build()
    registration = AgentRegistration(agent, AgentActivityConfig(tool_call=fast_activity()))
    plugin = DurableAgentPlugin(workspace_store=store)
    missing = "workspace:" + "0" * 64
    async with new_worker(client, agents=[registration], plugins=[plugin]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        for forged, says in [
            ("hostdir:/etc", "no environment provider is registered for kind 'hostdir'"),
            (missing, "is missing from the store"),
        ]:
            handle = await agents.start(name, "go", metadata={"environment_ref": forged})
            with pytest.raises(Exception, match=says):
                await asyncio.wait_for(handle.result(), 60)
            view = await handle.status()
            assert view.status == "failed"
            assert view.error is not None
            assert "environment_restore_failed" in view.error


async def test_both_drivers_agree_on_a_workspace_run(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same scenario in-process and on Temporal: the same checkpoints (every one's
    environment_ref included: refs are the content's), records (workspace_changed too) and
    messages."""
    from .test_drivers import Scenario, run_in_process, run_on_temporal

    monkeypatch.setenv("DURABLE_AGENT_WORKSPACE_STORE", f"memory://drivers-{uuid.uuid4().hex}")

    def build(name: str) -> Any:
        model = TestModel.with_responses(
            [
                tool_response(
                    call("generate", "g1", path="a.txt", copies=2),
                    call("generate", "g2", path="a.txt", copies=3),
                    call("generate", "g3", path="b/c.txt", copies=1),
                ),
                tool_response(call("publish", "p1")),
                text_response("done"),
            ]
        )
        return (
            AgentBuilder(model)
            .name(name)
            .tool(generate)
            .tool(publish, requires_approval=True)
            .workspace({"README.md": INITIAL})
            .build()
        )

    from durable_agent import ToolApprovalDecision

    scenario = Scenario(build, decisions=[ToolApprovalDecision(approved=True)])
    name = unique("ws-drivers")
    here = await run_in_process(scenario, name)
    there = await run_on_temporal(client, scenario, name)
    assert here.status == "completed"
    refs = [e.environment_ref for e in here.evidence]
    assert len(set(refs)) == 3  # the initial tree, after the merge, after the publish
    assert there.evidence == here.evidence
    assert there.records == here.records
    assert there.messages == here.messages
    changed = [r for r in here.records if r["kind"] == "workspace_changed"]
    assert [r["data"]["added"] for r in changed] == [["a.txt", "b/c.txt"], ["published.txt"]]
