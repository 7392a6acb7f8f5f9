"""The workspace's object format, stores, trees, materializer and provider registry, below
the agent (issue 39): what the front ends (`durable-agent workspace`, the inbox's diff, gc)
build on."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from durable_agent import EnvironmentRestoreFailed, UserError, WorkspaceError
from durable_agent.contract.environment import EnvironmentChange
from durable_agent.environments import EnvironmentHost, register_provider
from durable_agent.environments.workspace import (
    EMPTY_TREE_ID,
    Entry,
    FileStore,
    MemoryStore,
    TreeReader,
    WorkspaceSpec,
    blob_id,
    tree_id_of,
    workspace_ref,
)
from durable_agent.environments.workspace.materializer import Materializer
from durable_agent.environments.workspace.objects import check_path, decode_tree, encode_tree


def build(trees: TreeReader, files: dict[str, bytes]) -> str:
    entries = []
    for path, data in files.items():
        trees.store.put(blob_id(data), data)
        entries.append((path, Entry(path.rsplit("/", 1)[-1], "file", blob_id(data), len(data))))
    return trees.build(entries)[0]


def contents(trees: TreeReader, tree: str) -> dict[str, bytes]:
    return {p: trees.read_blob(e.id) for p, e in trees.files(tree).items()}


def test_the_format_is_canonical_and_checked() -> None:
    a = Entry("b.txt", "file", "1" * 64, 3)
    b = Entry("a", "dir", "2" * 64, 10)
    data = encode_tree([a, b])
    assert data == encode_tree([b, a])
    assert json.loads(data) == {
        "entries": [
            {"id": "2" * 64, "kind": "dir", "name": "a", "size": 10},
            {"id": "1" * 64, "kind": "file", "name": "b.txt", "size": 3},
        ]
    }
    assert b" " not in data
    assert encode_tree([Entry("run.sh", "file", "3" * 64, 1, True)]).count(b'"x":true') == 1
    assert tree_id_of(workspace_ref(EMPTY_TREE_ID)) == EMPTY_TREE_ID
    for bad in ("workspace:xyz", "sandbox:" + "0" * 64, "workspace", "/etc/passwd"):
        with pytest.raises(EnvironmentRestoreFailed):
            tree_id_of(bad)
    for name in ("..", "a/b", "", "."):
        forged = json.dumps(
            {"entries": [{"id": "1" * 64, "kind": "file", "name": name, "size": 1}]}
        ).encode()
        with pytest.raises(EnvironmentRestoreFailed, match="invalid entry"):
            decode_tree(forged, blob_id(forged))
    for path in ("/abs", "..", "a/../b", "a//b", "./a", ""):
        with pytest.raises(WorkspaceError):
            check_path(path)
    assert check_path("src/app.py") == ("src", "app.py")


def test_equal_trees_equal_ids_whatever_the_store() -> None:
    files = {"a.txt": b"a", "src/x/y.py": b"y", "src/z.py": b"z"}
    one = build(TreeReader(MemoryStore("one")), files)
    two = build(TreeReader(MemoryStore("two")), dict(reversed(list(files.items()))))
    assert one == two
    spec = WorkspaceSpec.of({p: d for p, d in files.items()}, 1000)
    assert spec.initial_ref == workspace_ref(one)


def test_diff_merge_export_and_reachable() -> None:
    trees = TreeReader(MemoryStore("ops"))
    base = build(trees, {"keep.txt": b"k", "src/a.py": b"a", "x": b"file x"})
    left = build(trees, {"keep.txt": b"k", "src/a.py": b"A", "new.txt": b"l", "x": b"file x"})
    right = build(trees, {"keep.txt": b"k", "src/a.py": b"AA", "x/inner.txt": b"dir x"})
    diff = trees.diff(base, right)
    assert sorted(diff.added) == ["x/inner.txt"]
    assert sorted(diff.modified) == ["src/a.py"]
    assert sorted(diff.deleted) == ["x"]
    assert not trees.diff(base, base)
    merged = trees.merge(base, [left, right])
    assert contents(trees, merged) == {
        "keep.txt": b"k",
        "new.txt": b"l",
        "src/a.py": b"AA",  # both changed it: the later change wins
        "x/inner.txt": b"dir x",  # a directory replaced the file
    }
    assert contents(trees, trees.merge(base, [right, left])) == {
        "keep.txt": b"k",
        "new.txt": b"l",
        "src/a.py": b"A",
        "x/inner.txt": b"dir x",
    }
    out = io.BytesIO()
    trees.export_tar(merged, out)
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        exported = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert exported == contents(trees, merged)
    reached = trees.reachable([merged])
    assert merged in reached
    assert blob_id(b"dir x") in reached
    assert blob_id(b"file x") not in reached
    assert trees.entry(merged, "x").kind == "dir"  # type: ignore[union-attr]
    assert trees.entry(merged, "nope") is None


def test_a_file_store_writes_each_object_once_and_atomically(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    assert store.put(blob_id(b"x"), b"x") is True
    assert store.put(blob_id(b"x"), b"x") is False
    big = tmp_path / "big.bin"
    big.write_bytes(b"y" * (3 << 20))
    assert store.put_file(blob_id(big.read_bytes()), big)
    assert store.writes == 2
    assert sorted(store.list()) == sorted([blob_id(b"x"), blob_id(big.read_bytes())])
    assert list((tmp_path / "store" / "tmp").iterdir()) == []
    with store.open(blob_id(b"x")) as handle:
        assert handle.read() == b"x"
    store.delete(blob_id(b"x"))
    with pytest.raises(KeyError):
        store.get(blob_id(b"x"))


def test_materializing_applies_only_the_difference(tmp_path: Path) -> None:
    trees = TreeReader(MemoryStore("mat"))
    files = {f"d{i}/f{j}.txt": f"{i}-{j}".encode() for i in range(10) for j in range(10)}
    first = build(trees, files)
    second = build(trees, {**files, "d3/f3.txt": b"changed"})
    materializer = Materializer(trees, tmp_path / "cache")
    checkout = materializer.acquire("run-1", first)
    untouched = (checkout.path / "d0/f0.txt").stat()
    touched = (checkout.path / "d3/f3.txt").stat()
    materializer.release(checkout)
    again = materializer.acquire("run-1", second)
    assert again is checkout
    assert (again.path / "d3/f3.txt").read_bytes() == b"changed"
    after = (again.path / "d0/f0.txt").stat()
    assert (after.st_ino, after.st_ctime_ns) == (untouched.st_ino, untouched.st_ctime_ns)
    assert (again.path / "d3/f3.txt").stat().st_ctime_ns >= touched.st_ctime_ns
    # a concurrent call of the same run gets a checkout of its own
    other = materializer.acquire("run-1", first)
    assert other.path != again.path
    assert (other.path / "d3/f3.txt").read_bytes() == b"3-3"
    materializer.release(other)
    materializer.release(again)
    materializer.close()
    assert not (tmp_path / "cache").exists()


class Sandbox:
    """A provider of another kind, as a user would register one."""

    kind = "sandbox"
    host_resources = False

    def open(self, ref: str, run: str, spec: Any) -> Any:
        raise EnvironmentRestoreFailed(f"sandbox {ref} is gone")

    def merge(
        self, base: str, current: str, changes: Sequence[str], spec: Any = None
    ) -> EnvironmentChange:
        raise NotImplementedError


class HostDirectory(Sandbox):
    kind = "hostdir"
    host_resources = True


def test_providers_are_registered_by_kind_and_host_resources_need_a_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import durable_agent.environments as environments

    monkeypatch.setattr(environments, "_REGISTERED", {})  # this process's, for this test
    host = EnvironmentHost(MemoryStore("registry"))
    with pytest.raises(EnvironmentRestoreFailed, match=r"no environment provider.*'sandbox'"):
        host.provider("sandbox:abc")
    with pytest.raises(EnvironmentRestoreFailed, match="not an environment ref"):
        host.provider("no-kind-here")
    host.register(Sandbox())
    with pytest.raises(EnvironmentRestoreFailed, match="sandbox sandbox:abc is gone"):
        host.open("sandbox:abc", "run", None)
    with pytest.raises(UserError, match="allow_host_resources=True"):
        host.register(HostDirectory())
    with pytest.raises(UserError, match="allow_host_resources=True"):
        register_provider(HostDirectory())
    host.register(HostDirectory(), allow_host_resources=True)
    assert isinstance(host.provider("hostdir:/data"), HostDirectory)
    register_provider(Sandbox())
    assert isinstance(EnvironmentHost(MemoryStore("other")).provider("sandbox:x"), Sandbox)


def test_a_tool_outcome_in_history_names_its_change_without_repeating_its_base() -> None:
    from durable_agent import ToolReturn
    from durable_agent.engine.node_io import ToolReturned
    from durable_agent.temporal.compaction.format import pack_tool_outcome, unpack_tool_outcome

    base, new = workspace_ref("a" * 64), workspace_ref("b" * 64)
    change = EnvironmentChange(base=base, environment_ref=new, added=["x.txt"])
    outcome = ToolReturned(
        tool_return=ToolReturn(tool_call_id="c1", name="t", content="ok"), workspace=change
    )
    packed = pack_tool_outcome(outcome, "c1", "t", base)
    # the return itself, its change beside it: the new tree's id, the paths
    assert packed == {"content": "ok", "ws": {"ref": "b" * 64, "added": ["x.txt"]}}
    assert unpack_tool_outcome(packed, "c1", "t", base) == outcome
    # the first packing of part 1 (kind, environment_ref without base) still reads
    first = {
        "kind": "return",
        "tool_return": {"content": "ok"},
        "workspace": {"environment_ref": new, "added": ["x.txt"]},
    }
    assert unpack_tool_outcome(first, "c1", "t", base) == outcome
    # a change from another base (never, today) keeps it, and its whole ref
    other = pack_tool_outcome(outcome, "c1", "t", new)["ws"]
    assert other == {"base": base, "ref": new, "added": ["x.txt"]}
    assert unpack_tool_outcome(pack_tool_outcome(outcome, "c1", "t", new), "c1", "t", new) == (
        outcome
    )
    # with a toolset change too, the outcome keeps its kind and its change
    both = outcome.model_copy(update={"toolset_changed": True})
    assert unpack_tool_outcome(pack_tool_outcome(both, "c1", "t", base), "c1", "t", base) == both
    # an outcome without a change packs as it always did
    plain = ToolReturned(tool_return=ToolReturn(tool_call_id="c1", name="t", content="ok"))
    assert "kind" not in pack_tool_outcome(plain, "c1", "t", base)
