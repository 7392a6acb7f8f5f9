"""The workspace store's garbage collector (issue 39, part 2): the sweep and its grace
period, in-process against real stores (`memory://`, `file://`). `durable-agent workspace gc`
on a Temporal server (marking from every run the server has) is in
tests/test_workspace_cli.py.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from durable_agent import AgentBuilder, DirectNodeRunner, TestModel, ToolContext
from durable_agent.contract.environment import ENVIRONMENT_REF
from durable_agent.environments import EnvironmentHost
from durable_agent.environments.workspace import (
    EMPTY_TREE_ID,
    Entry,
    FileStore,
    MemoryStore,
    ObjectStore,
    TreeReader,
    blob_id,
    open_store,
    tree_id_of,
)
from durable_agent.environments.workspace.gc import collect, mark
from durable_agent.environments.workspace.stores import REFRESH_SECONDS

from .helpers import call, text_response, tool_response

HOUR = 3600.0


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "memory":
        return open_store(f"memory://gc-{uuid.uuid4().hex}")
    return open_store((tmp_path / "store").as_uri())


def age(store: ObjectStore, oid: str, seconds: float) -> None:
    """Makes an object look `seconds` old, as time would."""
    if isinstance(store, MemoryStore):
        store.age(oid, seconds)
    else:
        assert isinstance(store, FileStore)
        past = time.time() - seconds
        os.utime(store.root / "objects" / oid[:2] / oid[2:], (past, past))


def tree_of(store: ObjectStore, files: dict[str, bytes]) -> str:
    trees = TreeReader(store)
    entries = []
    for path, data in files.items():
        store.put(blob_id(data), data)
        entries.append((path, Entry(path.rsplit("/", 1)[-1], "file", blob_id(data), len(data))))
    return trees.build(entries)[0]


def test_what_no_kept_tree_reaches_goes_once_it_is_old(store: ObjectStore) -> None:
    kept = tree_of(store, {"a.txt": b"shared", "src/b.txt": b"kept only"})
    gone = tree_of(store, {"a.txt": b"shared", "src/c.txt": b"deleted run's"})
    for oid in [*store.list()]:
        age(store, oid, 2 * HOUR)
    young = tree_of(store, {"d.txt": b"a tool's upload of a moment ago"})

    reached, unreadable = mark(TreeReader(store), [kept])
    assert unreadable == []
    assert blob_id(b"shared") in reached
    assert blob_id(b"deleted run's") not in reached

    only_gone = TreeReader(store).reachable([gone]) - TreeReader(store).reachable([kept])
    dry = collect(store, [kept], older_than=HOUR, dry_run=True)
    assert dry.dry_run
    assert dry.removed
    assert all(store.exists(o) for o in dry.removed)

    report = collect(store, [kept], older_than=HOUR)
    assert sorted(report.removed) == sorted(dry.removed)
    assert set(report.removed) == only_gone  # its root, its src/, its own file
    assert report.reachable == len(TreeReader(store).reachable([kept]))
    assert report.young == len(TreeReader(store).reachable([young]))
    assert report.removed_bytes > 0
    trees = TreeReader(store)
    assert {p: trees.read_blob(e.id) for p, e in trees.files(kept).items()} == {
        "a.txt": b"shared",
        "src/b.txt": b"kept only",
    }
    assert not store.exists(gone)
    assert store.exists(young)
    young_objects = TreeReader(store).reachable([young])
    assert set(collect(store, [kept], older_than=0).removed) == young_objects


def test_a_put_that_reuses_an_old_object_makes_it_young_again(store: ObjectStore) -> None:
    data = b"left by a deleted run"
    oid = blob_id(data)
    store.put(oid, data)
    age(store, oid, REFRESH_SECONDS + 60)
    before = store.writes
    assert store.put(oid, data) is False  # not written again: refreshed
    assert store.writes == before
    when = store.modified(oid)
    assert when is not None
    assert time.time() - when < 60
    assert collect(store, [], older_than=REFRESH_SECONDS).removed == []


def test_a_marked_tree_the_store_lacks_is_reported_not_fatal(store: ObjectStore) -> None:
    lost = "0" * 64
    leftover = tree_of(store, {"x": b"x"})
    for oid in [*store.list()]:
        age(store, oid, 2 * HOUR)
    report = collect(store, [lost], older_than=HOUR)
    assert report.unreadable == [lost]
    assert leftover in report.removed
    assert EMPTY_TREE_ID not in report.removed


def test_collect_refuses_a_negative_grace() -> None:
    with pytest.raises(ValueError, match="-1"):
        collect(MemoryStore(), [], older_than=-1)


def write(ctx: ToolContext, path: str, text: str) -> str:
    assert ctx.workspace is not None
    ctx.workspace.write_text(path, text)
    return "written"


async def test_a_run_whose_initial_tree_a_gc_removed_gets_it_uploaded_again(
    store: ObjectStore,
) -> None:
    """The initial tree comes from the agent's definition: a worker that finds it gone (a
    gc ran while no run reached it, even though this worker saw it before) uploads it again
    rather than fail the run."""
    initial = {"README.md": "hello", "src/app.py": "print(1)\n"}

    def agent() -> object:
        model = TestModel.with_responses(
            [tool_response(call("write", "c1", path="new.txt", text="n")), text_response("ok")]
        )
        return AgentBuilder(model).name("gc-initial").tool(write).workspace(initial).build()

    host = EnvironmentHost(store)
    first = agent()
    await first.run("go", runner=DirectNodeRunner(first, host))  # type: ignore[attr-defined]
    for oid in [*store.list()]:
        age(store, oid, 2 * HOUR)
    assert len(collect(store, [], older_than=HOUR).removed) > 3
    assert [*store.list()] == []

    second = agent()
    result = await second.run("go", runner=DirectNodeRunner(second, host))  # type: ignore[attr-defined]
    assert result.status == "completed"
    trees = TreeReader(store)
    files = trees.files(tree_id_of(result.state.metadata[ENVIRONMENT_REF]))
    assert {p: trees.read_blob(e.id).decode() for p, e in files.items()} == {
        **initial,
        "new.txt": "n",
    }


def test_the_collector_finds_every_tree_a_history_payload_names() -> None:
    """A tool call's packed result names its new tree by id alone (`"ref"`); the other
    payloads by ref: the marking reads both."""
    import json

    from durable_agent import ToolReturn
    from durable_agent.cli.workspace_gc import REF
    from durable_agent.contract.environment import EnvironmentChange
    from durable_agent.engine.node_io import ToolReturned
    from durable_agent.environments.workspace import workspace_ref
    from durable_agent.temporal.compaction.format import pack_tool_outcome

    base, new = workspace_ref("a" * 64), workspace_ref("b" * 64)
    change = EnvironmentChange(base=base, environment_ref=new, added=["x.txt"])
    outcome = ToolReturned(
        tool_return=ToolReturn(tool_call_id="c1", name="t", content="ok"), workspace=change
    )
    packed = json.dumps(pack_tool_outcome(outcome, "c1", "t", base), separators=(",", ":"))
    assert REF.findall(packed) == ["b" * 64]
    call_input = json.dumps({"metadata": {"environment_ref": base}}, indent=1)
    assert REF.findall(call_input) == ["a" * 64]
