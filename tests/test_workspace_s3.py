"""Workspaces on a real S3 API (issue 39, part 2): moto's standalone server over HTTP, reached
through `AWS_ENDPOINT_URL` and credentials in the environment as a fleet would be, with the
store `s3://bucket/prefix`. A run on Temporal whose tools write files (through the file
methods and in `local_dir()`), resumed after its approval on another worker that never saw
it, forked from a checkpoint before the publish, read and diffed with the CLI; the objects
are in the bucket under the prefix, and the gc reads the store's ages from its listing.
"""

from __future__ import annotations

import asyncio
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_agent import AgentBuilder, TestModel, ToolContext
from durable_agent.environments.workspace import TreeReader, open_store, tree_id_of
from durable_agent.environments.workspace.gc import collect
from durable_agent.environments.workspace.stores import FsspecStore
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
from .temporal_support import fast_activity, new_worker, unique
from .test_long_conversations import moto_s3

pytestmark = pytest.mark.server

BUCKET = "workspaces"


@pytest.fixture
def s3_store() -> Iterator[str]:
    """`s3://workspaces/<prefix>` on a moto server of the test's own."""
    with moto_s3() as env:
        import boto3

        boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"]).create_bucket(Bucket=BUCKET)
        yield f"s3://{BUCKET}/team-a/{unique('runs')}"


async def until(handle: AgentRunHandle, status: str, timeout: float = 30) -> object:
    deadline = time.monotonic() + timeout
    while True:
        view = await handle.status()
        if view.status == status:
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"{handle.id} did not become {status}: {view}")
        await asyncio.sleep(0.1)


def scaffold(ctx: ToolContext) -> str:
    workspace = ctx.workspace
    assert workspace is not None
    workspace.write_text("src/app.py", "print('app')\n")
    (workspace.local_dir() / "notes").mkdir()
    (workspace.local_dir() / "notes" / "todo.md").write_text("- ship it\n")
    workspace.write_bytes("blob.bin", bytes(range(256)) * 4096)  # 1 MiB, streamed
    return "scaffolded"


def publish(ctx: ToolContext) -> str:
    workspace = ctx.workspace
    assert workspace is not None
    found = workspace.read_text("src/app.py") + workspace.read_text("notes/todo.md")
    workspace.write_text("published.txt", found)
    return f"published {len(workspace.list())} files"


async def test_a_run_on_s3_moves_workers_forks_and_reads_with_the_cli(
    client: Client,
    dev_server: DevServer,
    s3_store: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = unique("ws-s3")
    script = [
        tool_response(call("scaffold", "s1")),
        tool_response(call("publish", "p1")),
        text_response("done"),
    ]
    agent = (
        AgentBuilder(TestModel.with_responses(script))
        .name(name)
        .tool(scaffold)
        .tool(publish, requires_approval=True)
        .workspace({"README.md": "on s3\n"})
        .build()
    )
    registration = AgentRegistration(agent, AgentActivityConfig(tool_call=fast_activity()))
    queue = unique("tq-s3")
    agents = AgentClient(client, task_queue=queue)
    first = DurableAgentPlugin(workspace_store=s3_store)
    async with new_worker(client, queue, agents=[registration], plugins=[first]):
        handle = await agents.start(name, "scaffold and publish")
        await until(handle, "waiting")

    # another worker, with nothing of this run on its disk, goes on after the approval
    second = DurableAgentPlugin(workspace_store=s3_store)
    async with new_worker(client, queue, agents=[registration], plugins=[second]):
        await handle.approve("p1", by="alice")
        result = await asyncio.wait_for(handle.result(), 60)
        evidence = await handle.checkpoints()
        # the model request after the scaffold: the fork asks for the publish again
        before_publish = min(
            i
            for i, e in enumerate(evidence)
            if e.node.value == "prepare_model_request"
            and e.environment_ref != evidence[0].environment_ref
        )
        fork = await handle.fork(before_publish)
        await until(fork, "waiting")
        await fork.approve("p1", by="bob")
        forked = await asyncio.wait_for(fork.result(), 60)

        cli = cli_runner(dev_server.address, capsys)
        listed = await cli("workspace", handle.id, "--store", s3_store, "--json")
        diff = await cli("workspace", handle.id, "--store", s3_store, "--diff", "0", "--json")
        cat = await cli("workspace", handle.id, "published.txt", "--store", s3_store)
        tar = tmp_path / "run.tar"
        exported = await cli("workspace", fork.id, "--store", s3_store, "--export", str(tar))

    assert result.output == "done"
    assert forked.output == "done"
    assert listed.code == 0, listed.err
    assert [f["path"] for f in listed.json()] == [
        "README.md",
        "blob.bin",
        "notes/todo.md",
        "published.txt",
        "src/app.py",
    ]
    assert diff.json() == {
        "added": ["blob.bin", "notes/todo.md", "published.txt", "src/app.py"],
        "modified": [],
        "deleted": [],
    }
    assert cat.out == "print('app')\n- ship it\n"
    assert exported.code == 0, exported.err
    with tarfile.open(tar) as archive:
        names = sorted(archive.getnames())
        blob = archive.extractfile("blob.bin")
        assert blob is not None
        assert blob.read() == bytes(range(256)) * 4096
    assert "published.txt" in names

    # a fork and its source share unchanged objects, never each other's writes
    assert result.environment_ref is not None
    assert forked.environment_ref is not None
    assert forked.environment_ref == result.environment_ref  # the same work, the same tree
    assert evidence[before_publish].environment_ref is not None
    trees = TreeReader(open_store(s3_store))
    at_fork = trees.files(tree_id_of(evidence[before_publish].environment_ref))
    assert "published.txt" not in at_fork

    # the objects are S3 objects under the prefix, and their ages come from its listing
    store = open_store(s3_store)
    assert isinstance(store, FsspecStore)
    aged = list(store.aged())
    assert len(aged) >= 8
    assert all(time.time() - when < 600 for _, when, _ in aged)
    import boto3

    keys = [
        item["Key"]
        for item in boto3.client("s3")
        .list_objects_v2(Bucket=BUCKET, Prefix=s3_store.split("/", 3)[3])
        .get("Contents", [])
    ]
    assert len(keys) == len(aged)
    assert all("/objects/" in key for key in keys)
    kept = [tree_id_of(result.environment_ref)]
    report = collect(store, kept, older_than=0, dry_run=True)
    assert report.objects == len(aged)
    assert report.reachable == len(trees.reachable(kept))
