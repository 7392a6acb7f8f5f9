"""Workspaces (issue 39): what a snapshot stores and costs, materializing against `cp -r`,
and what a workspace adds to a run's history.

`snapshot`: a workspace of `files` files (`mb` MB: 100 folders of equal files of random
bytes) in a `file://` store; a tool call changes one file through `ctx.workspace`
(`write_text`, then the call's commit), timed from the write to the stored change, with
the new objects' bytes; again with the change made in `local_dir()` (the commit scans the
directory); the same on a workspace of 100 files. Goals: at most 1 MB of new objects and
50 ms (median) for 10,000 files; 100 files within 2x of that (the ratio is 10,000's over
100's). The agent's initial upload of the directory is timed once.

`materialize`: the tree checked out on a worker that never saw it (a fresh provider, its
own cache folder), against `cp -r` of the same tree, rounds alternating which goes first,
the disk synced before each (a copy is not charged for the one before's writeback). Goal:
within 2x; the ratio is reported round by round, and in CPU seconds (this process's for
the checkout, which runs in one thread on a local store; `cp`'s from its rusage), which
swing less than the wall clock on a shared machine. Then a worker that has the previous tree
gets the next (one file changed on another worker): goal 50 ms.

`history`: a 10-step run whose tool changes one file each step, on Temporal, and the same
agent without a workspace (its tool writes nothing, returns the same); history bytes over
the run's chain. Goal: within 1.10x.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.harness import Session, chain, history_figures, log, median, ratio
from durable_agent import (
    AgentBuilder,
    ModelResponse,
    TestModel,
    TextPart,
    ToolCallPart,
    ToolContext,
)

FOLDERS = 100
GOALS = {
    "new_bytes": 1_000_000,
    "snapshot_ms": 50.0,
    "small_ratio": 2.0,
    "fresh_vs_cp": 2.0,
    "incremental_ms": 50.0,
    "history_ratio": 1.10,
}


def make_tree(root: Path, files: int, total: int) -> Path:
    """`files` files of `total // files` random bytes in up to 100 folders."""
    size = total // files
    per_folder = max(1, files // FOLDERS)
    for index in range(files):
        folder = root / f"d{index // per_folder:03}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{index % per_folder:03}.txt").write_bytes(os.urandom(size))
    return root


def _object_sizes(store: Any) -> dict[str, int]:
    return {oid: size for oid, _, size in store.aged()}


def snapshot(work: Path, files: int, total: int, rounds: int) -> dict[str, Any]:
    """Snapshots of a one-file change on a workspace of `files` files."""
    from durable_agent.environments.workspace import WorkspaceSpec, open_store
    from durable_agent.environments.workspace.provider import WorkspaceProvider

    source = make_tree(work / f"source-{files}", files, total)
    os.sync()
    began = time.perf_counter()
    spec = WorkspaceSpec.of(source, 1 << 34)
    built = time.perf_counter() - began
    store = open_store((work / f"store-{files}").as_uri())
    os.sync()
    began = time.perf_counter()
    spec.upload(store)
    uploaded = time.perf_counter() - began
    provider = WorkspaceProvider(store, work / f"cache-{files}")
    ref = spec.start_ref()
    session = provider.open(ref, "bench", spec)
    session.prepare()
    session.discard()
    middle = f"d{FOLDERS // 2:03}/f000.txt"
    rows: dict[str, list[float]] = {"methods": [], "scan": []}
    new_bytes: list[int] = []
    new_objects: list[int] = []
    for index in range(rounds):
        for way in ("methods", "scan"):
            session = provider.open(ref, "bench", spec)
            session.prepare()
            before = _object_sizes(store)
            began = time.perf_counter()
            if way == "methods":
                session.write_text(middle, f"changed by round {index}\n")
            else:
                (session.local_dir() / middle).write_text(f"changed in local_dir, {index}\n")
            change = session.commit()
            took = time.perf_counter() - began
            assert change is not None
            ref = change.environment_ref
            rows[way].append(took * 1e3)
            if way == "methods":
                after = _object_sizes(store)
                added = set(after) - set(before)
                new_objects.append(len(added))
                new_bytes.append(sum(after[o] for o in added))
    provider.close()
    return {
        "files": files,
        "bytes": total,
        "build_hash_s": built,
        "upload_s": uploaded,
        "snapshot_ms": median(rows["methods"]),
        "scan_snapshot_ms": median(rows["scan"]),
        "new_bytes": median(new_bytes),
        "new_objects": median(new_objects),
        "rounds_ms": rows,
    }


def _children_cpu() -> float:
    """User and system seconds of this process's finished children (`cp`)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def materialize(work: Path, files: int, total: int, rounds: int) -> dict[str, Any]:
    """Fresh checkouts against `cp -r`, then incremental ones."""
    from durable_agent.environments.workspace import WorkspaceSpec, open_store
    from durable_agent.environments.workspace.provider import WorkspaceProvider

    source = make_tree(work / "mat-source", files, total)
    spec = WorkspaceSpec.of(source, 1 << 34)
    store = open_store((work / "mat-store").as_uri())
    spec.upload(store)
    ref = spec.start_ref()
    fresh: list[float] = []
    copied: list[float] = []
    cpu: dict[str, list[float]] = {"fresh": [], "cp": []}
    for index in range(rounds):
        for side in ("fresh", "cp") if index % 2 == 0 else ("cp", "fresh"):
            target = work / f"mat-{side}-{index}"
            os.sync()
            began = time.perf_counter()
            if side == "cp":
                children = _children_cpu()
                subprocess.run(["cp", "-r", str(source), str(target)], check=True)
                copied.append(time.perf_counter() - began)
                cpu["cp"].append(_children_cpu() - children)
            else:
                own = time.process_time()
                provider = WorkspaceProvider(store, target)
                session = provider.open(ref, "bench", spec)
                session.prepare()
                fresh.append(time.perf_counter() - began)
                cpu["fresh"].append(time.process_time() - own)
                session.discard()
                provider.close()
            shutil.rmtree(target, ignore_errors=True)
    # a worker that has the run's tree gets the next one, changed by another worker
    here = WorkspaceProvider(store, work / "mat-here")
    there = WorkspaceProvider(store, work / "mat-there")
    session = here.open(ref, "bench", spec)
    session.prepare()
    session.discard()
    incremental: list[float] = []
    for index in range(rounds * 2):
        elsewhere = there.open(ref, "bench", spec)
        elsewhere.write_text(f"d{index % FOLDERS:03}/f001.txt", f"next {index}\n")
        change = elsewhere.commit()
        assert change is not None
        ref = change.environment_ref
        began = time.perf_counter()
        session = here.open(ref, "bench", spec)
        session.prepare()
        incremental.append((time.perf_counter() - began) * 1e3)
        session.discard()
    here.close()
    there.close()
    by_round = [ratio(f, c) for f, c in zip(fresh, copied, strict=True)]
    return {
        "files": files,
        "bytes": total,
        "fresh_s": fresh,
        "cp_s": copied,
        "fresh_median_s": median(fresh),
        "cp_median_s": median(copied),
        "fresh/cp": ratio(median(fresh), median(copied)),
        "fresh/cp by round": by_round,
        "fresh_cpu_s": median(cpu["fresh"]),
        "cp_cpu_s": median(cpu["cp"]),
        "fresh/cp CPU": ratio(median(cpu["fresh"]), median(cpu["cp"])),
        "incremental_ms": median(incremental),
        "incremental_rounds_ms": incremental,
    }


# -- history on Temporal ---------------------------------------------------------------------

RESULT = "x" * 250


async def edit_file(ctx: ToolContext, key: int) -> str:
    """Changes one file of the workspace (when the agent has one).

    Args:
        key: which file
    """
    if ctx.workspace is not None:
        ctx.workspace.write_text(f"src/file{key}.txt", f"edited by step {key}\n")
    return RESULT


def _agents(steps: int) -> list[Any]:
    """The same scripted agent twice: with a workspace, and without one."""
    script = [
        ModelResponse(parts=[ToolCallPart(id=f"c{i}", name="edit_file", arguments={"key": i})])
        for i in range(steps)
    ]
    script.append(ModelResponse(parts=[TextPart(text="done")]))
    built = []
    for name, workspace in (("bench-ws-files", True), ("bench-ws-none", False)):
        builder = AgentBuilder(TestModel.with_responses(script)).name(name).tool(edit_file)
        if workspace:
            builder = builder.workspace({"README.md": "a workspace\n"})
        built.append(builder.build())
    return built


async def history(session: Session, work: Path, steps: int, rounds: int) -> dict[str, Any]:
    from temporalio.worker import Worker

    from durable_agent.temporal import AgentWorkflow, AgentWorkflowInput, DurableAgentPlugin

    plugin = DurableAgentPlugin(_agents(steps), workspace_store=(work / "hist").as_uri())
    queue = f"bench-ws-{uuid.uuid4().hex[:8]}"
    sizes: dict[str, list[int]] = {"bench-ws-files": [], "bench-ws-none": []}
    async with Worker(session.client, task_queue=queue, plugins=[plugin]):
        for index in range(rounds):
            for agent in sorted(sizes, reverse=index % 2 == 1):
                handle = await session.client.start_workflow(
                    AgentWorkflow.run,
                    AgentWorkflowInput(agent=agent, prompt="edit"),
                    id=f"{agent}-{uuid.uuid4().hex[:8]}",
                    task_queue=queue,
                )
                await handle.result()
                figures = history_figures(await chain(session.client, handle))
                sizes[agent].append(figures["bytes"])
    with_files = median(sizes["bench-ws-files"])
    without = median(sizes["bench-ws-none"])
    return {
        "steps": steps,
        "with_workspace_bytes": with_files,
        "without_bytes": without,
        "ratio": ratio(with_files, without),
        "extra_bytes_per_step": (with_files - without) / steps,
        "runs": sizes,
    }


async def measure(session: Session, quick: bool) -> dict[str, Any]:
    files, total, rounds = (500, 5_000_000, 2) if quick else (10_000, 100_000_000, 7)
    work = Path(tempfile.mkdtemp(prefix="durable-agent-ws-bench-"))
    try:
        log(f"  workspace: snapshots of {files} files, {total / 1e6:.0f} MB")
        large = await asyncio.to_thread(snapshot, work, files, total, rounds)
        log(
            f"  workspace: snapshot {large['snapshot_ms']:.1f} ms, "
            f"{large['new_bytes']:,} new bytes; upload {large['upload_s']:.2f} s"
        )
        small = await asyncio.to_thread(snapshot, work, 100, total // 100, rounds)
        log(f"  workspace: materialize {files} files, {rounds} rounds against cp -r")
        checkout = await asyncio.to_thread(materialize, work, files, total, rounds)
        log(
            f"  workspace: fresh {checkout['fresh_median_s']:.2f} s, cp -r "
            f"{checkout['cp_median_s']:.2f} s; incremental {checkout['incremental_ms']:.1f} ms"
        )
        log("  workspace: history of a 10-step run, with and without a workspace")
        runs = await history(session, work, 10, 1 if quick else 3)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "goals": GOALS,
        "rounds": rounds,
        "snapshot": large,
        "small": small,
        "large/small": ratio(large["snapshot_ms"], small["snapshot_ms"]),
        "materialize": checkout,
        "history": runs,
    }
