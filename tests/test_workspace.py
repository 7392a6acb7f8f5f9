"""Workspaces in-process (issue 39, contract section 10): the file methods, what a tool may
not do, snapshots, restore on every way a run goes on, sub-agents, restore failures.

Stores are real (`memory://` and `file://` in tmp_path); each test gets its own store and
a fresh `EnvironmentHost` stands for "another worker" where a test needs one.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from durable_agent import (
    AgentBuilder,
    DirectNodeRunner,
    EnvironmentRestoreFailed,
    ModelRetry,
    RunStatus,
    TestModel,
    ToolApprovalDecision,
    ToolContext,
    UserError,
)
from durable_agent.contract.environment import ENVIRONMENT_REF
from durable_agent.environments import EnvironmentHost
from durable_agent.environments.workspace import MemoryStore, TreeReader, open_store, tree_id_of

from .helpers import RecordingExecutor, call, text_response, tool_response


@pytest.fixture(params=["memory", "file"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return f"memory://test-{uuid.uuid4().hex}"
    return (tmp_path / "store").as_uri()


@pytest.fixture
def host(store_url: str, monkeypatch: pytest.MonkeyPatch) -> EnvironmentHost:
    monkeypatch.setenv("DURABLE_AGENT_WORKSPACE_STORE", store_url)
    return EnvironmentHost(store_url)


def files_of(host: EnvironmentHost, ref: str) -> dict[str, bytes]:
    trees = TreeReader(host.store)
    return {p: trees.read_blob(e.id) for p, e in trees.files(tree_id_of(ref)).items()}


def ref_of(result: Any) -> str:
    ref = result.state.metadata[ENVIRONMENT_REF]
    assert isinstance(ref, str)
    return ref


seen: list[Any] = []


def write(ctx: ToolContext, path: str, text: str) -> str:
    assert ctx.workspace is not None
    ctx.workspace.write_text(path, text)
    return "written"


async def awrite(ctx: ToolContext, path: str, text: str) -> str:
    assert ctx.workspace is not None
    ctx.workspace.write_text(path, text)
    return "written"


async def read(ctx: ToolContext, path: str) -> str:
    assert ctx.workspace is not None
    return ctx.workspace.read_text(path)


async def listing(ctx: ToolContext, prefix: str = "") -> list[str]:
    assert ctx.workspace is not None
    return ctx.workspace.list(prefix)


def run_agent(responses: list[Any], *tools: Any, initial: Any = None, **options: Any) -> Any:
    builder = AgentBuilder(TestModel.with_responses(responses)).name("coder")
    for tool in tools or (write, awrite, read, listing):
        builder = builder.tool(tool)
    return builder.workspace(initial, **options).build()


def returns(result: Any) -> dict[str, Any]:
    """Each call's return content (or error) by call id."""
    out: dict[str, Any] = {}
    for message in result.messages:
        for part in getattr(message, "parts", []):
            if part.kind == "tool_return":
                out[part.tool_call_id] = part.content
    return out


# -- the file methods ------------------------------------------------------------------------


async def test_every_method_of_the_workspace(host: EnvironmentHost) -> None:
    observed: dict[str, Any] = {}

    def everything(ctx: ToolContext) -> str:
        ws = ctx.workspace
        assert ws is not None
        observed["initial"] = ws.read_text("README.md")
        ws.write_text("src/app.py", "print('hi')\n")
        ws.write_bytes("data/blob.bin", b"\x00\x01\xff")
        observed["bytes"] = ws.read_bytes("data/blob.bin")
        observed["exists"] = (ws.exists("src/app.py"), ws.exists("nope.txt"), ws.exists("src"))
        observed["list"] = ws.list()
        observed["src"] = ws.list("src/")
        ws.delete("README.md")
        observed["after_delete"] = ws.exists("README.md")
        local = ws.local_dir()
        observed["local"] = sorted(
            p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()
        )
        (local / "made_by_process.txt").write_text("from a process")
        return "done"

    agent = run_agent(
        [tool_response(call("everything", "c1")), text_response("ok")],
        everything,
        initial={"README.md": "# hello"},
    )
    records: list[Any] = []
    result = await agent.run("go", sink=records.append, runner=DirectNodeRunner(agent, host))
    assert observed["initial"] == "# hello"
    assert observed["bytes"] == b"\x00\x01\xff"
    assert observed["exists"] == (True, False, True)
    assert observed["list"] == ["README.md", "data/blob.bin", "src/app.py"]
    assert observed["src"] == ["src/app.py"]
    assert observed["after_delete"] is False
    assert observed["local"] == ["data/blob.bin", "src/app.py"]
    assert files_of(host, ref_of(result)) == {
        "data/blob.bin": b"\x00\x01\xff",
        "made_by_process.txt": b"from a process",
        "src/app.py": b"print('hi')\n",
    }
    changed = [r.data for r in records if r.kind == "workspace_changed"]
    assert len(changed) == 1
    assert changed[0].added == ["data/blob.bin", "made_by_process.txt", "src/app.py"]
    assert changed[0].deleted == ["README.md"]
    assert changed[0].environment_ref == ref_of(result)
    assert result.state.metadata[ENVIRONMENT_REF] == ref_of(result)


async def test_an_agent_without_a_workspace_has_none() -> None:
    got: list[Any] = []

    def look(ctx: ToolContext) -> str:
        got.append(ctx.workspace)
        return "ok"

    model = TestModel.with_responses([tool_response(call("look", "c1")), text_response("ok")])
    result = await AgentBuilder(model).tool(look).build().run("go")
    assert got == [None]
    assert ENVIRONMENT_REF not in result.state.metadata


@pytest.mark.parametrize("tool", [write, awrite], ids=["sync", "async"])
async def test_sync_and_async_tools_alike(host: EnvironmentHost, tool: Any) -> None:
    name = tool.__name__
    agent = run_agent(
        [tool_response(call(name, "c1", path="a.txt", text="A")), text_response("ok")], tool
    )
    result = await agent.run("go", runner=DirectNodeRunner(agent, host))
    assert files_of(host, ref_of(result)) == {"a.txt": b"A"}


# -- what a tool may not do ------------------------------------------------------------------


async def test_paths_out_of_the_workspace_are_tool_errors(
    host: EnvironmentHost, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")

    def link_out(ctx: ToolContext) -> str:
        assert ctx.workspace is not None
        os.symlink(outside, ctx.workspace.local_dir() / "out")
        return ctx.workspace.read_text("out/secret.txt")

    def fifo(ctx: ToolContext) -> str:
        assert ctx.workspace is not None
        os.mkfifo(ctx.workspace.local_dir() / "pipe")
        return ctx.workspace.read_text("pipe")

    def make_link(ctx: ToolContext) -> str:
        assert ctx.workspace is not None
        os.symlink(outside / "secret.txt", ctx.workspace.local_dir() / "link.txt")
        return "made"

    def make_fifo(ctx: ToolContext) -> str:
        assert ctx.workspace is not None
        os.mkfifo(ctx.workspace.local_dir() / "pipe")
        return "made"

    agent = run_agent(
        [
            tool_response(call("write", "c1", path="/etc/passwd", text="x")),
            tool_response(call("write", "c2", path="../escape.txt", text="x")),
            tool_response(call("read", "c3", path="a/../../x")),
            tool_response(call("link_out", "c4")),
            tool_response(call("fifo", "c5")),
            tool_response(call("make_link", "c6")),
            tool_response(call("make_fifo", "c7")),
            tool_response(call("read", "c8", path="missing.txt")),
            text_response("ok"),
        ],
        write,
        read,
        link_out,
        fifo,
        make_link,
        make_fifo,
        initial={"keep.txt": "kept"},
    )
    result = await agent.run("go", runner=DirectNodeRunner(agent, host))
    assert result.status is RunStatus.COMPLETED
    errors = returns(result)
    for call_id, needle in [
        ("c1", "absolute"),
        ("c2", "not a path inside the workspace"),
        ("c3", "not a path inside the workspace"),
        ("c4", "link"),
        ("c5", "not a regular file"),
        ("c6", "link out of the workspace"),
        ("c7", "not a regular file"),
        ("c8", "no such file"),
    ]:
        assert errors[call_id].startswith("workspace error:"), (call_id, errors[call_id])
        assert needle in errors[call_id], (call_id, errors[call_id])
    assert not (tmp_path / "escape.txt").exists()
    assert files_of(host, ref_of(result)) == {"keep.txt": b"kept"}
    assert result.state.metadata[ENVIRONMENT_REF] == agent.workspace.initial_ref


async def test_the_size_limit_is_a_tool_error_and_keeps_nothing(host: EnvironmentHost) -> None:
    def big_file(ctx: ToolContext) -> str:
        assert ctx.workspace is not None
        (ctx.workspace.local_dir() / "big.bin").write_bytes(b"x" * 5000)
        return "wrote"

    agent = run_agent(
        [
            tool_response(call("write", "c1", path="a.txt", text="y" * 2000)),
            tool_response(call("big_file", "c2")),
            tool_response(call("write", "c3", path="small.txt", text="ok")),
            text_response("ok"),
        ],
        write,
        big_file,
        max_bytes=1000,
    )
    result = await agent.run("go", runner=DirectNodeRunner(agent, host))
    errors = returns(result)
    assert "over its limit of 1000" in errors["c1"]
    assert "over its limit of 1000" in errors["c2"]
    assert errors["c3"] == "written"
    assert files_of(host, ref_of(result)) == {"small.txt": b"ok"}


# -- snapshots -------------------------------------------------------------------------------


async def test_equal_trees_give_equal_refs(tmp_path: Path, host: EnvironmentHost) -> None:
    folder = tmp_path / "initial"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "a.py").write_text("a = 1\n")
    (folder / "b.txt").write_text("b")
    from_dir = run_agent([text_response("ok")], initial=folder)
    from_dict = run_agent([text_response("ok")], initial={"b.txt": "b", "src/a.py": b"a = 1\n"})
    assert from_dir.workspace.initial_ref == from_dict.workspace.initial_ref
    empty = run_agent([text_response("ok")])
    assert empty.workspace.initial_ref != from_dict.workspace.initial_ref

    # two runs (different hosts) that make the same tree by different steps
    one = run_agent(
        [
            tool_response(call("write", "c1", path="x.txt", text="1")),
            tool_response(call("write", "c2", path="x.txt", text="2")),
            text_response("ok"),
        ],
        write,
    )
    two = run_agent(
        [tool_response(call("write", "c1", path="x.txt", text="2")), text_response("ok")], write
    )
    first = await one.run("go", runner=DirectNodeRunner(one, EnvironmentHost(host.store)))
    second = await two.run("go", runner=DirectNodeRunner(two, EnvironmentHost(host.store)))
    assert ref_of(first) == ref_of(second)


async def test_a_one_file_change_writes_the_file_and_the_folders_on_its_path() -> None:
    store = MemoryStore("depth")
    files = {
        f"d{i}/e{j}/f{k}.txt": f"{i}{j}{k}" for i in range(5) for j in range(5) for k in range(8)
    }
    agent = run_agent(
        [tool_response(call("write", "c1", path="d2/e3/f4.txt", text="new")), text_response("ok")],
        write,
        initial=files,
    )
    host = EnvironmentHost(store)
    result = await agent.run("go", runner=DirectNodeRunner(agent, host))
    assert store.writes > 200  # the initial tree's upload
    before = store.writes
    store.writes = 0
    # the same change again from the same tree writes nothing new; a new content writes
    # its blob and the three folders above it and the root: O(depth)
    agent2 = run_agent(
        [
            tool_response(call("write", "c1", path="d2/e3/f4.txt", text="newer")),
            text_response("ok"),
        ],
        write,
        initial=files,
    )
    await agent2.run("go", runner=DirectNodeRunner(agent2, host))
    assert store.writes == 1 + 3, store.writes
    assert before > 200
    assert files_of(host, ref_of(result))["d2/e3/f4.txt"] == b"new"


# -- failures change nothing -----------------------------------------------------------------


async def test_a_failing_tool_changes_nothing(host: EnvironmentHost) -> None:
    attempts: list[str] = []

    def flaky(ctx: ToolContext) -> str:
        assert ctx.workspace is not None
        attempts.append(ctx.workspace.read_text("state.txt"))
        ctx.workspace.write_text("state.txt", "broken")
        (ctx.workspace.local_dir() / "junk").mkdir()
        (ctx.workspace.local_dir() / "junk" / "f").write_text("junk")
        if len(attempts) < 2:
            raise ModelRetry("try again")
        return "ok"

    def crash(ctx: ToolContext) -> str:
        assert ctx.workspace is not None
        ctx.workspace.write_text("state.txt", "crashed")
        raise RuntimeError("boom")

    agent = run_agent(
        [
            tool_response(call("flaky", "c1")),
            tool_response(call("flaky", "c2")),
            tool_response(call("read", "c3", path="state.txt")),
            tool_response(call("crash", "c4")),
        ],
        flaky,
        read,
        crash,
        initial={"state.txt": "clean"},
    )
    executor = RecordingExecutor()
    with pytest.raises(RuntimeError, match="boom"):
        await agent.with_executor(executor).run("go", runner=DirectNodeRunner(agent, host))
    # the retry started from the tree as it was; the crash left nothing either
    assert attempts == ["clean", "clean"]
    last = executor.checkpoints[-1]
    assert last.node.value == "run_failed"
    assert files_of(host, last.resume.environment_ref) == {
        "junk/f": b"junk",
        "state.txt": b"broken",
    }
    # the next call of this run on this host (whose checkout the crash left dirty) sees
    # the tree as of its checkpoint, not what the crash wrote
    before_crash = [c for c in executor.checkpoints if c.node.value == "prepare_model_request"]
    script = [
        tool_response(call("flaky", "c1")),
        tool_response(call("flaky", "c2")),
        tool_response(call("read", "c3", path="state.txt")),
        tool_response(call("read", "c9", path="state.txt")),
        text_response("ok"),
    ]
    reader = run_agent(script, flaky, read)
    resumed = await reader.resume(before_crash[-1], runner=DirectNodeRunner(reader, host))
    assert returns(resumed)["c9"] == "broken"


# -- one response's calls --------------------------------------------------------------------


async def test_calls_of_one_response_start_from_one_snapshot_and_apply_in_call_order(
    host: EnvironmentHost,
) -> None:
    both_started = asyncio.Event()
    started: list[str] = []
    saw: dict[str, list[str]] = {}

    async def edit(ctx: ToolContext, path: str, text: str) -> str:
        ws = ctx.workspace
        assert ws is not None
        started.append(ctx.tool_call_id)
        if len(started) == 2:
            both_started.set()
        await both_started.wait()
        ws.write_text(path, text)
        ws.write_text(f"by-{ctx.tool_call_id}.txt", ctx.tool_call_id)
        await asyncio.sleep(0.01)
        saw[ctx.tool_call_id] = ws.list()
        return "ok"

    agent = run_agent(
        [
            tool_response(
                call("edit", "c1", path="shared.txt", text="first"),
                call("edit", "c2", path="shared.txt", text="second"),
            ),
            tool_response(call("read", "c3", path="shared.txt")),
            text_response("ok"),
        ],
        edit,
        read,
        initial={"base.txt": "base"},
    )
    records: list[Any] = []
    result = await agent.run("go", sink=records.append, runner=DirectNodeRunner(agent, host))
    assert saw["c1"] == ["base.txt", "by-c1.txt", "shared.txt"]
    assert saw["c2"] == ["base.txt", "by-c2.txt", "shared.txt"]
    assert returns(result)["c3"] == "second"
    assert files_of(host, ref_of(result)) == {
        "base.txt": b"base",
        "by-c1.txt": b"c1",
        "by-c2.txt": b"c2",
        "shared.txt": b"second",
    }
    changed = [r.data for r in records if r.kind == "workspace_changed"]
    assert len(changed) == 1
    assert changed[0].added == ["by-c1.txt", "by-c2.txt", "shared.txt"]


async def test_sequential_calls_of_one_response_also_start_from_one_snapshot(
    host: EnvironmentHost,
) -> None:
    agent = run_agent(
        [
            tool_response(
                call("write", "c1", path="a.txt", text="1"),
                call("listing", "c2"),
                call("write", "c3", path="a.txt", text="3"),
            ),
            text_response("ok"),
        ],
        write,
        listing,
    )
    result = await agent.run("go", runner=DirectNodeRunner(agent, host))
    assert returns(result)["c2"] == []
    assert files_of(host, ref_of(result)) == {"a.txt": b"3"}


# -- restore ---------------------------------------------------------------------------------


def counter_script() -> list[Any]:
    return [
        tool_response(call("bump", "c1")),
        tool_response(call("bump", "c2")),
        tool_response(call("bump", "c3")),
        text_response("done"),
    ]


def bump(ctx: ToolContext) -> int:
    ws = ctx.workspace
    assert ws is not None
    count = int(ws.read_text("count.txt")) if ws.exists("count.txt") else 0
    ws.write_text("count.txt", str(count + 1))
    ws.write_text(f"log/{count + 1}.txt", ctx.tool_call_id)
    return count + 1


async def test_resume_from_any_checkpoint_restores_the_tree_as_of_it(
    host: EnvironmentHost,
) -> None:
    executor = RecordingExecutor()
    agent = run_agent(counter_script(), bump)
    reference = await agent.with_executor(executor).run("go", runner=DirectNodeRunner(agent, host))
    assert returns(reference) == {"c1": 1, "c2": 2, "c3": 3}
    final = ref_of(reference)
    for checkpoint in executor.checkpoints:
        if checkpoint.node.value == "run_complete":
            continue
        # another "worker": a host that never materialized this run
        fresh = EnvironmentHost(host.store)
        again = run_agent(counter_script(), bump)
        resumed = await again.resume(checkpoint, runner=DirectNodeRunner(again, fresh))
        assert ref_of(resumed) == final, checkpoint.node
        assert returns(resumed) == {"c1": 1, "c2": 2, "c3": 3}


async def test_resume_after_hitl_on_another_host_sees_the_files(host: EnvironmentHost) -> None:
    def publish(ctx: ToolContext) -> str:
        assert ctx.workspace is not None
        return "published " + ctx.workspace.read_text("draft.md")

    model_script = [
        tool_response(call("write", "c1", path="draft.md", text="v1")),
        tool_response(call("publish", "c2")),
        text_response("ok"),
    ]
    agent = (
        AgentBuilder(TestModel.with_responses(model_script))
        .tool(write)
        .tool(publish, requires_approval=True)
        .workspace()
        .build()
    )
    waiting = await agent.run("go", runner=DirectNodeRunner(agent, host))
    assert waiting.status is RunStatus.WAITING
    assert files_of(host, ref_of(waiting)) == {"draft.md": b"v1"}
    fresh = EnvironmentHost(host.store)
    done = await agent.resume_after_hitl(
        waiting.state,
        approvals={"c2": ToolApprovalDecision(approved=True)},
        runner=DirectNodeRunner(agent, fresh),
    )
    assert returns(done)["c2"].startswith("published v1")


async def test_forks_never_see_each_others_writes(host: EnvironmentHost) -> None:
    executor = RecordingExecutor()
    base = run_agent(
        [tool_response(call("write", "c1", path="common.txt", text="c")), text_response("ok")],
        write,
    )
    await base.with_executor(executor).run("go", runner=DirectNodeRunner(base, host))
    fork_point = [c for c in executor.checkpoints if c.node.value == "prepare_model_request"][-1]
    refs = []
    for name in ("left", "right"):
        branch = run_agent(
            [
                tool_response(call("write", "c1", path="common.txt", text="c")),
                tool_response(call("write", "c2", path=f"{name}.txt", text=name)),
                tool_response(call("listing", "c3")),
                text_response("ok"),
            ],
            write,
            listing,
        )
        result = await branch.resume(fork_point, runner=DirectNodeRunner(branch, host))
        assert returns(result)["c3"] == ["common.txt", f"{name}.txt"]
        refs.append(ref_of(result))
    assert files_of(host, refs[0]) == {"common.txt": b"c", "left.txt": b"left"}
    assert files_of(host, refs[1]) == {"common.txt": b"c", "right.txt": b"right"}


# -- sub-agents ------------------------------------------------------------------------------


async def test_sub_agents_start_from_the_parent_and_hand_back_their_changes(
    host: EnvironmentHost,
) -> None:
    child_saw: list[list[str]] = []

    async def child_list(ctx: ToolContext) -> list[str]:
        assert ctx.workspace is not None
        child_saw.append(ctx.workspace.list())
        return child_saw[-1]

    def explode(ctx: ToolContext) -> str:
        assert ctx.workspace is not None
        ctx.workspace.write_text("failed-child.txt", "x")
        raise UserError("child failed")

    helper = (
        AgentBuilder(
            TestModel.with_responses(
                [
                    tool_response(call("child_list", "k1")),
                    tool_response(call("awrite", "k2", path="from-child.txt", text="child")),
                    text_response("child done"),
                ]
            )
        )
        .name("helper")
        .tool(child_list)
        .tool(awrite)
        .build()
    )
    breaker = (
        AgentBuilder(TestModel.with_responses([tool_response(call("explode", "k3"))]))
        .name("breaker")
        .tool(explode)
        .build()
    )
    parent = (
        AgentBuilder(
            TestModel.with_responses(
                [
                    tool_response(call("awrite", "c1", path="from-parent.txt", text="parent")),
                    tool_response(call("helper", "c2", prompt="work")),
                    tool_response(call("breaker", "c3", prompt="fail")),
                    tool_response(call("listing", "c4")),
                    text_response("ok"),
                ]
            )
        )
        .tool(awrite)
        .tool(listing)
        .subagent(helper)
        .subagent(breaker)
        .workspace()
        .build()
    )
    result = await parent.run("go", runner=DirectNodeRunner(parent, host))
    assert child_saw == [["from-parent.txt"]]
    assert returns(result)["c4"] == ["from-child.txt", "from-parent.txt"]
    assert "failed" in str(returns(result)["c3"])


# -- restore failures ------------------------------------------------------------------------


async def test_restore_failures_fail_the_run_naming_what(
    tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DURABLE_AGENT_WORKSPACE_STORE", store_url)
    store = open_store(store_url)
    executor = RecordingExecutor()
    agent = run_agent(
        [tool_response(call("write", "c1", path="a/b.txt", text="B")), text_response("ok")],
        write,
    )
    done = await agent.with_executor(executor).run(
        "go", runner=DirectNodeRunner(agent, EnvironmentHost(store))
    )
    tree = tree_id_of(ref_of(done))
    resume_at = [c for c in executor.checkpoints if c.node.value == "prepare_model_request"][-1]
    trees = TreeReader(store)
    blob = trees.files(tree)["a/b.txt"].id

    async def resume_with(state_ref: str | None = None) -> None:
        checkpoint = resume_at
        if state_ref is not None:
            state = checkpoint.state.model_copy(
                update={"metadata": {**checkpoint.state.metadata, ENVIRONMENT_REF: state_ref}}
            )
            checkpoint = checkpoint.model_copy(update={"state": state})
        reader = run_agent(
            [
                tool_response(call("write", "c1", path="a/b.txt", text="B")),
                tool_response(call("read", "r1", path="a/b.txt")),
                text_response("ok"),
            ],
            write,
            read,
        )
        await reader.resume(checkpoint, runner=DirectNodeRunner(reader, EnvironmentHost(store)))

    # an unknown kind
    with pytest.raises(EnvironmentRestoreFailed, match=r"no environment provider.*'sandbox'"):
        await resume_with("sandbox:abc")
    # a tree missing from the store
    with pytest.raises(EnvironmentRestoreFailed, match="missing from the store"):
        await resume_with("workspace:" + "0" * 64)
    # a corrupt object (content that does not match its hash)
    original = store.get(blob)
    if isinstance(store, MemoryStore):
        store.corrupt(blob, b"tampered")
    else:
        path = Path(store.root) / "objects" / blob[:2] / blob[2:]  # type: ignore[attr-defined]
        path.write_bytes(b"tampered")
    with pytest.raises(EnvironmentRestoreFailed, match="does not match its hash"):
        await resume_with()
    # a missing object
    store.delete(blob)
    with pytest.raises(EnvironmentRestoreFailed, match=f"{blob} is missing"):
        await resume_with()
    store.put(blob, original)

    # a missing initial directory: at build time, or gone before its upload
    gone = tmp_path / "gone"
    missing = run_agent([text_response("ok")], initial=gone)
    with pytest.raises(
        EnvironmentRestoreFailed, match=r"initial directory .*gone.* does not exist"
    ):
        await missing.run("go")
    later = tmp_path / "later"
    later.mkdir()
    (later / "f.txt").write_text("f")
    removed = run_agent(
        [tool_response(call("read", "c1", path="f.txt")), text_response("ok")], read, initial=later
    )
    (later / "f.txt").unlink()
    later.rmdir()
    with pytest.raises(EnvironmentRestoreFailed, match=r"initial directory .*later.* is missing"):
        await removed.run(
            "go", runner=DirectNodeRunner(removed, EnvironmentHost(MemoryStore("fresh")))
        )


async def test_a_tool_that_swallows_a_restore_failure_still_fails_the_run() -> None:
    def careless(ctx: ToolContext) -> str:
        try:
            assert ctx.workspace is not None
            ctx.workspace.list()
        except Exception:
            return "ignored"
        return "listed"

    agent = run_agent([tool_response(call("careless", "c1")), text_response("ok")], careless)
    state_metadata = {ENVIRONMENT_REF: "workspace:" + "1" * 64}
    with pytest.raises(EnvironmentRestoreFailed):
        await agent.run(
            "go",
            metadata=state_metadata,
            runner=DirectNodeRunner(agent, EnvironmentHost(MemoryStore("swallow"))),
        )


@pytest.mark.server  # it starts a process
async def test_local_dir_for_processes(host: EnvironmentHost) -> None:
    import subprocess
    import sys

    def compile_check(ctx: ToolContext, path: str) -> str:
        assert ctx.workspace is not None
        where = ctx.workspace.local_dir()
        done = subprocess.run(
            [sys.executable, "-m", "py_compile", path], cwd=where, capture_output=True, text=True
        )
        return "compiles" if done.returncode == 0 else "error: " + done.stderr.splitlines()[-1]

    agent = run_agent(
        [
            tool_response(call("write", "c1", path="pkg/good.py", text="x = 1\n")),
            tool_response(call("compile_check", "c2", path="pkg/good.py")),
            tool_response(call("write", "c3", path="pkg/bad.py", text="def (:\n")),
            tool_response(call("compile_check", "c4", path="pkg/bad.py")),
            text_response("ok"),
        ],
        write,
        compile_check,
    )
    result = await agent.run("go", runner=DirectNodeRunner(agent, host))
    assert returns(result)["c2"] == "compiles"
    assert returns(result)["c4"].startswith("error: SyntaxError")
    # what the process left (its bytecode) is the call's change too
    kept = files_of(host, ref_of(result))
    assert {"pkg/good.py", "pkg/bad.py"} <= set(kept)
    assert any(p.startswith("pkg/__pycache__/good") for p in kept)
