"""`durable-agent workspace` (list, cat, --at, --diff, --export, gc) and `watch`'s workspace
lines, on a real dev server with a real worker and a `file://` store (issue 39, part 2).

The gc test works in a namespace of its own: the collector marks from every run of its
namespace, and the session's shared one holds other tests' runs, whose workers are gone.
"""

from __future__ import annotations

import asyncio
import base64
import os
import tarfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.duration_pb2 import Duration
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import (
    DeleteWorkflowExecutionRequest,
    RegisterNamespaceRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_agent import (
    AgentBuilder,
    FunctionModel,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TestModel,
    TextPart,
    ToolCallPart,
    ToolContext,
    UserPromptPart,
)
from durable_agent.environments.workspace import TreeReader, blob_id, open_store, tree_id_of
from durable_agent.models import AgentInfo
from durable_agent.temporal import (
    AgentActivityConfig,
    AgentClient,
    AgentRegistration,
    DurableAgentPlugin,
)
from durable_agent.temporal.client import AgentRunHandle
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.search_attributes import ensure_search_attributes
from durable_agent.temporal.wire import CheckpointLookup, CheckpointQuery

from .cli_support import cli_runner
from .helpers import call, text_response, tool_response
from .temporal_support import fast_activity, new_worker, unique

pytestmark = pytest.mark.server

BINARY = bytes(range(256)) * 3


def files_of(store_url: str, ref: str) -> dict[str, bytes]:
    trees = TreeReader(open_store(store_url))
    return {p: trees.read_blob(e.id) for p, e in trees.files(tree_id_of(ref)).items()}


async def until(handle: AgentRunHandle, status: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            view = await handle.status()
            if view.status == status:
                return view
        except Exception:  # not started yet
            view = None
        if time.monotonic() > deadline:
            raise AssertionError(f"{handle.id} did not become {status}: {view}")
        await asyncio.sleep(0.1)


def edit(ctx: ToolContext) -> str:
    """Adds a text and a binary file, changes one, deletes one."""
    workspace = ctx.workspace
    assert workspace is not None
    workspace.write_text("src/app.py", "print('hello')\n")
    workspace.write_bytes("data.bin", BINARY)
    workspace.write_text("README.md", "hello, edited\n")
    workspace.delete("old.txt")
    return "edited"


def publish(ctx: ToolContext) -> str:
    assert ctx.workspace is not None
    ctx.workspace.write_text("published.txt", "yes\n")
    return "published"


async def test_the_workspace_command_lists_prints_diffs_and_exports(
    client: Client, dev_server: DevServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = (tmp_path / "store").as_uri()
    name = unique("ws-cli")
    script = [
        tool_response(call("edit", "e1")),
        tool_response(call("publish", "p1")),
        text_response("done"),
    ]
    agent = (
        AgentBuilder(TestModel.with_responses(script))
        .name(name)
        .tool(edit)
        .tool(publish, requires_approval=True)
        .workspace({"README.md": "hello\n", "old.txt": "to delete\n"})
        .build()
    )
    plain = AgentBuilder(TestModel.with_text("no files")).name(unique("ws-none")).build()
    cli = cli_runner(dev_server.address, capsys)
    plugin = DurableAgentPlugin(workspace_store=store)
    registration = AgentRegistration(agent, AgentActivityConfig(tool_call=fast_activity()))
    async with new_worker(client, agents=[registration, plain], plugins=[plugin]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        handle = await agents.start(name, "edit then publish")
        await until(handle, "waiting")
        ws = ("workspace", handle.id, "--store", store)

        listed = await cli(*ws, "--json")
        assert listed.code == 0, listed.err
        assert listed.json() == [
            {"path": "README.md", "size": 14},
            {"path": "data.bin", "size": len(BINARY)},
            {"path": "src/app.py", "size": 15},
        ]
        table = await cli(*ws)
        rows = ["SIZE", "PATH", "14", "README.md", "768", "data.bin", "15", "src/app.py"]
        assert table.out.split() == rows
        assert (await cli(*ws, "src/app.py")).out == "print('hello')\n"
        binary = (await cli(*ws, "data.bin", "--json")).json()
        assert binary["path"] == "data.bin"
        assert "text" not in binary
        assert base64.b64decode(binary["base64"]) == BINARY
        assert (await cli(*ws, "src", "--json")).json() == [{"path": "src/app.py", "size": 15}]

        # as of the first checkpoint: the initial tree; what changed since
        first = (await cli(*ws, "--at", "0", "--json")).json()
        assert first == [{"path": "README.md", "size": 6}, {"path": "old.txt", "size": 10}]
        diff = await cli(*ws, "--diff", "0", "--json")
        assert diff.json() == {
            "added": ["data.bin", "src/app.py"],
            "modified": ["README.md"],
            "deleted": ["old.txt"],
        }
        lines = (await cli(*ws, "--diff", "0")).out.splitlines()
        assert lines[0].split() == ["CHANGE", "PATH"]
        assert [line.split() for line in lines[1:]] == [
            ["modified", "README.md"],
            ["added", "data.bin"],
            ["deleted", "old.txt"],
            ["added", "src/app.py"],
        ]
        # a checkpoint by id, as `checkpoint_at` names it
        lookup = await client.get_workflow_handle(handle.id).query(
            "checkpoint_at", CheckpointQuery(index=0), result_type=CheckpointLookup
        )
        assert lookup.checkpoint is not None
        by_id = await cli(*ws, "--at", lookup.checkpoint.checkpoint_id, "--json")
        assert by_id.json() == first

        exported = await cli(*ws, "--export", str(tmp_path / "tree.tar"))
        assert exported.code == 0, exported.err
        with tarfile.open(tmp_path / "tree.tar") as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
        assert members == {
            "README.md": b"hello, edited\n",
            "data.bin": BINARY,
            "src/app.py": b"print('hello')\n",
        }

        # clear errors, with their exit codes
        past = await cli(*ws, "--at", "999")
        assert past.code == 2
        assert "no checkpoint #999" in past.err
        assert "#0 to #" in past.err
        unknown = await cli(*ws, "--at", "ckpt_nope")
        assert unknown.code == 2
        assert "'ckpt_nope'" in unknown.err
        missing = await cli(*ws, "nope.txt")
        assert missing.code == 2
        assert "'nope.txt' is not in run" in missing.err
        empty_store = (tmp_path / "empty").as_uri()
        lacking = await cli("workspace", handle.id, "--store", empty_store)
        assert lacking.code == 1
        assert "missing from the store" in lacking.err
        assert empty_store in lacking.err
        gone = await cli("workspace", "no-such-run", "--store", store)
        assert gone.code == 3
        both = await cli(*ws, "src/app.py", "--export", str(tmp_path / "x.tar"))
        assert both.code == 2

        other = await agents.start(plain.name, "hi")
        await other.result()
        none = await cli("workspace", other.id, "--store", store)
        assert none.code == 1
        assert "has no workspace" in none.err

        # the store from the environment, as the worker's
        os.environ["DURABLE_AGENT_WORKSPACE_STORE"] = store
        try:
            assert (await cli("workspace", handle.id, "README.md")).out == "hello, edited\n"
        finally:
            del os.environ["DURABLE_AGENT_WORKSPACE_STORE"]

        await handle.approve("p1", by="alice")
        await handle.result()
        watched = await cli("watch", handle.id)
    assert watched.code == 0
    changes = [line for line in watched.out.splitlines() if " workspace: " in line]
    assert len(changes) == 2, watched.out
    assert "workspace: +data.bin +src/app.py ~README.md -old.txt (workspace:" in changes[0]
    assert "workspace: +published.txt (workspace:" in changes[1]


def bump(ctx: ToolContext) -> int:
    workspace = ctx.workspace
    assert workspace is not None
    count = int(workspace.read_text("count.txt")) if workspace.exists("count.txt") else 0
    workspace.write_text("count.txt", str(count + 1))
    workspace.write_text(f"step-{count + 1}.txt", "x")
    return count + 1


async def test_checkpoints_of_earlier_runs_of_a_continued_chain(
    client: Client, dev_server: DevServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = (tmp_path / "store").as_uri()
    name = unique("ws-cli-can")
    script = [tool_response(call("bump", f"b{i}")) for i in range(4)] + [text_response("ok")]
    agent = AgentBuilder(TestModel.with_responses(script)).name(name).tool(bump).workspace().build()
    registration = AgentRegistration(
        agent, AgentActivityConfig(tool_call=fast_activity(), continue_as_new_after_steps=2)
    )
    cli = cli_runner(dev_server.address, capsys)
    async with new_worker(
        client, agents=[registration], plugins=[DurableAgentPlugin(workspace_store=store)]
    ) as worker:
        handle = await AgentClient(client, task_queue=worker.task_queue).start(name, "count")
        await handle.result()
        chain = await handle.checkpoint_chain()
        assert (await handle.status()).continued_as_new >= 1
        ws = ("workspace", handle.id, "--store", store)
        latest = (await cli(*ws, "--json")).json()
        # the first boundary after the first bump, in the chain's first run
        first_bump = next(
            chain.indexes[i]
            for i, e in enumerate(chain.checkpoints)
            if e.environment_ref and "count.txt" in files_of(store, e.environment_ref)
        )
        early = (await cli(*ws, "--at", str(first_bump), "--json")).json()
        since = (await cli(*ws, "--diff", str(first_bump), "--json")).json()
    assert [f["path"] for f in latest] == [
        "count.txt",
        "step-1.txt",
        "step-2.txt",
        "step-3.txt",
        "step-4.txt",
    ]
    assert [f["path"] for f in early] == ["count.txt", "step-1.txt"]
    assert since == {
        "added": ["step-2.txt", "step-3.txt", "step-4.txt"],
        "modified": ["count.txt"],
        "deleted": [],
    }


# -- gc --------------------------------------------------------------------------------------


def _prompt(messages: list[ModelMessage]) -> str:
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    return part.text
    return ""


def _gc_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Writes `<prompt>.txt` (content unique to the run), then asks to publish."""
    step = sum(1 for m in messages if isinstance(m, ModelResponse))
    word = _prompt(messages)
    if step == 0:
        part = ToolCallPart(id="w1", name="note", arguments={"word": word})
        return ModelResponse(parts=[part])
    if step == 1:
        return ModelResponse(parts=[ToolCallPart(id="p1", name="publish", arguments={})])
    return ModelResponse(parts=[TextPart(text="done")])


def note(ctx: ToolContext, word: str) -> str:
    assert ctx.workspace is not None
    ctx.workspace.write_text(f"{word}.txt", f"{word} {GC_MARK}\n")
    return "noted"


GC_MARK = uuid.uuid4().hex


async def namespace_client(address: str) -> Client:
    """A client of a namespace of its own (registered now, with our search attributes)."""
    base = await Client.connect(address)
    name = f"gc-{uuid.uuid4().hex[:8]}"
    await base.workflow_service.register_namespace(
        RegisterNamespaceRequest(
            namespace=name, workflow_execution_retention_period=Duration(seconds=86400)
        )
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            client = await Client.connect(address, namespace=name, plugins=[DurableAgentPlugin()])
            await ensure_search_attributes(client)
            await client.count_workflows()
            return client
        except RPCError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def delete_run(client: Client, workflow_id: str) -> None:
    """Deletes a closed run as the namespace's retention would, and waits until neither
    the run nor its visibility record is left."""
    description = await client.get_workflow_handle(workflow_id).describe()
    await client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(
                workflow_id=workflow_id, run_id=description.run_id
            ),
        )
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            await client.get_workflow_handle(workflow_id).describe()
            present = True
        except RPCError as error:
            if error.status != RPCStatusCode.NOT_FOUND:
                raise
            present = False
        listed = [w async for w in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
        if not present and not listed:
            return
        assert time.monotonic() < deadline, f"{workflow_id} was not deleted"
        await asyncio.sleep(0.5)


async def reached(store: str, *runs: AgentRunHandle) -> set[str]:
    """Every object the trees of the runs' checkpoints reach."""
    trees = [
        tree_id_of(evidence.environment_ref)
        for run in runs
        for evidence in await run.checkpoints()
        if evidence.environment_ref
    ]
    return TreeReader(open_store(store)).reachable(trees)


def age_everything(store_path: Path, seconds: float) -> None:
    past = time.time() - seconds
    for path in (store_path / "objects").rglob("*"):
        if path.is_file():
            os.utime(path, (past, past))


async def test_gc_removes_deleted_runs_objects_and_keeps_what_waiting_runs_and_forks_need(
    dev_server: DevServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = await namespace_client(dev_server.address)
    store_path = tmp_path / "store"
    store = store_path.as_uri()
    name = unique("ws-gc")
    agent = (
        AgentBuilder(FunctionModel(_gc_script, name="gc-script"))
        .name(name)
        .tool(note)
        .tool(publish, requires_approval=True)
        .workspace({"README.md": "shared by every run\n"})
        .build()
    )
    registration = AgentRegistration(agent, AgentActivityConfig(tool_call=fast_activity()))
    cli = cli_runner(dev_server.address, capsys)
    gc = ("workspace", "gc", "--namespace", client.namespace, "--store", store, "--json")
    plugin = DurableAgentPlugin(workspace_store=store)
    async with new_worker(client, agents=[registration], plugins=[plugin]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        # alpha: forked while it waits, then finished and deleted; the fork waits across the gc
        alpha = await agents.start(name, "alpha")
        alpha_waiting = await until(alpha, "waiting")
        fork = await alpha.fork()
        fork_waiting = await until(fork, "waiting")
        assert fork_waiting.environment_ref == alpha_waiting.environment_ref
        await alpha.approve("p1", by="alice")
        alpha_done = await alpha.result()
        # beta waits across the gc; gamma finishes and is deleted
        beta = await agents.start(name, "beta")
        await until(beta, "waiting")
        gamma = await agents.start(name, "gamma")
        await until(gamma, "waiting")
        await gamma.approve("p1", by="alice")
        gamma_done = await gamma.result()
        assert alpha_done.environment_ref is not None
        assert gamma_done.environment_ref is not None
        deleted = await reached(store, alpha, gamma)
        needed = await reached(store, beta, fork)
        await delete_run(client, alpha.id)
        await delete_run(client, gamma.id)

        age_everything(store_path, 7200)
        upload = b"a running tool's upload, not in any history yet"
        open_store(store).put(blob_id(upload), upload)

        dry = await cli(*gc, "--dry-run")
        assert dry.code == 0, dry.err
        would = set(dry.json()["removed"])
        assert all(open_store(store).exists(o) for o in would)
        removed = await cli(*gc)
        assert removed.code == 0, removed.err
        report = removed.json()
        gone = set(report["removed"])

        assert gone == would
        assert gone == deleted - needed
        assert blob_id(f"gamma {GC_MARK}\n".encode()) in gone
        assert blob_id(b"yes\n") in gone  # published.txt: only the deleted runs had it
        assert blob_id(f"alpha {GC_MARK}\n".encode()) not in gone  # the fork needs it
        assert not any(open_store(store).exists(o) for o in gone)
        assert all(open_store(store).exists(o) for o in needed)
        assert open_store(store).exists(blob_id(upload))
        assert report["young"] >= 1
        assert report["executions"] >= 2

        # the waiting runs go on and finish with their files intact
        await beta.approve("p1", by="bob")
        await fork.approve("p1", by="bob")
        beta_done = await beta.result()
        fork_done = await fork.result()
    assert beta_done.environment_ref is not None
    assert fork_done.environment_ref is not None
    assert files_of(store, beta_done.environment_ref) == {
        "README.md": b"shared by every run\n",
        "beta.txt": f"beta {GC_MARK}\n".encode(),
        "published.txt": b"yes\n",
    }
    assert files_of(store, fork_done.environment_ref) == {
        "README.md": b"shared by every run\n",
        "alpha.txt": f"alpha {GC_MARK}\n".encode(),
        "published.txt": b"yes\n",
    }


async def test_gc_removes_nothing_when_a_running_run_cannot_answer(
    dev_server: DevServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = await namespace_client(dev_server.address)
    store_path = tmp_path / "store"
    name = unique("ws-gc-noworker")
    agent = (
        AgentBuilder(FunctionModel(_gc_script, name="gc-script"))
        .name(name)
        .tool(note)
        .tool(publish, requires_approval=True)
        .workspace()
        .build()
    )
    plugin = DurableAgentPlugin(workspace_store=store_path.as_uri())
    async with new_worker(client, agents=[agent], plugins=[plugin]) as worker:
        waiting = await AgentClient(client, task_queue=worker.task_queue).start(name, "delta")
        await until(waiting, "waiting")
    age_everything(store_path, 7200)
    before = sorted(p.name for p in (store_path / "objects").rglob("*") if p.is_file())
    cli = cli_runner(dev_server.address, capsys)
    refused = await cli(
        "workspace",
        "gc",
        "--namespace",
        client.namespace,
        "--store",
        store_path.as_uri(),
        "--timeout",
        "2",
    )
    assert refused.code == 5, refused.err
    assert waiting.id in refused.err
    assert "removes nothing" in refused.err
    after = sorted(p.name for p in (store_path / "objects").rglob("*") if p.is_file())
    assert after == before
