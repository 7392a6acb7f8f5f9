"""`python -m benchmarks --quick` runs every measure, writes their JSON and renders the report.

Performance is measured, not asserted: these tests check the fields, never a figure's size.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import loop

ROOT = Path(__file__).parent.parent
pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]


@pytest.mark.slow
def test_the_loop_is_counted_in_instructions_a_step() -> None:
    """Two runs under callgrind (half a minute each): the difference over the steps between
    them is what a step costs."""
    counts = loop.counted([30], 20, models=["test"])
    assert counts is not None, "valgrind is installed here (scripts/test installs it)"
    per_step = counts["models"]["test"]["per_step"]["30"]
    assert 100_000 < per_step < 100_000_000, per_step
    assert counts["models"]["test"]["30/30"] == 1.0


@pytest.mark.parametrize("model", ["test", "unscripted"])
def test_a_loop_run_makes_every_lookup_with_either_model(model: str) -> None:
    elapsed, checkpoints = asyncio.run(loop.one_run(7, model))
    assert elapsed > 0
    # five boundaries a lookup; run_start, the final request's three, validate_output
    # and run_complete make six more
    assert checkpoints == 5 * 7 + 6


@pytest.mark.slow
def test_the_quick_mode_writes_every_measure_and_one_report(tmp_path: Path) -> None:
    out, report = tmp_path / "results", tmp_path / "RESULTS.md"
    command = [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out)]
    subprocess.run([*command, "--report", str(report)], cwd=ROOT, check=True, timeout=400)

    files = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert set(files) == {
        "loop",
        "throughput",
        "history",
        "replay",
        "profile",
        "objects",
        "memory",
        "streaming",
        "quota",
        "testkit",
        "workspace",
    }
    for name, data in files.items():
        assert data["measure"] == name
        assert data["command"].startswith("python -m benchmarks --quick")
        assert {"date", "took_s", "machine", "results"} <= set(data)
    results = {name: data["results"] for name, data in files.items()}

    (throughput,) = results["throughput"].values()
    assert {r["kind"] for r in throughput["rounds"]} == {"A", "L", "B"}
    assert throughput["A"]["gc_ms"] >= 0  # B may collect nothing in a round
    for key in ("steps_per_s", "worker_cpu_ms", "server_cpu_ms", "history_bytes"):
        for side in ("A", "L"):
            assert throughput[side][key] > 0
            assert throughput[f"{side}/B"][key] == pytest.approx(
                throughput[side][key] / throughput["B"][key], abs=1e-3
            )
        assert throughput["B"][key] > 0
    # A's quick nodes run in the workflow, L's as local activities: neither side schedules
    # them as activities, so neither takes more workflow tasks a run than the other's
    assert throughput["L"]["workflow_tasks"] == pytest.approx(
        throughput["A"]["workflow_tasks"], rel=0.25
    )
    history = results["history"]
    assert history["A/B"]["bytes_per_step"] > 0
    assert history["median_run"]["A"]["events_by_type"]
    assert history["median_run"]["B"]["payload_bytes_by_key"]["content"] > 0
    assert results["replay"]["A/B"]["replay_ms"] > 0
    assert results["profile"]["top_functions"]
    assert not any("/" in name for name in results["profile"]["by_package_ms"])
    objects = results["objects"]
    for side in ("A", "L", "B"):
        # a waiting run holds at least its workflow object, its coroutine and their dicts
        assert objects[side]["objects_per_run"] > 3
        counts = list(objects[side]["by_type"].values())
        assert len(counts) == 15
        assert counts == sorted(counts, reverse=True)
    memory = results["memory"]
    for side in ("A", "B"):
        assert memory[side]["objects_per_run"] > 3
        assert memory[side]["blocks_per_run"] > 0
        assert memory[side]["by_type"]
    assert memory["A/B"]["objects_per_run"] == pytest.approx(
        memory["A"]["objects_per_run"] / memory["B"]["objects_per_run"], abs=1e-3
    )
    longer = memory["longer"]
    assert (longer["steps"], memory["steps"]) == (10, 1)
    for side in ("A", "B"):
        assert longer[side]["objects_per_run"] > 3
        assert longer["rss_kb_per_step"][side] == pytest.approx(
            (longer[side]["rss_kb_per_run"] - memory[side]["rss_kb_per_run"]) / 9
        )
    waves = memory["in_waves"]
    assert (waves["steps"], waves["wave"], longer["wave"]) == (10, 10, None)
    for side in ("A", "B"):
        assert waves[side]["objects_per_run"] > 3
    assert set(results["streaming"]["runs"]) == {
        "A streaming, stream()",
        "A streaming off",
        "B bare",
        "A streaming, subscribe()",
    }
    for model in results["loop"]["models"].values():
        assert len(model["median_us_per_step"]) == 2
    quota = results["quota"]
    assert quota["requests_needed"] == quota["runs"] * quota["steps"]
    assert quota["ideal_s"] > 0
    assert {r["side"] for r in quota["rounds"]} == {"with quota", "without quota"}
    for row in quota["rounds"]:
        assert row["answered"] >= quota["requests_needed"]
        assert row["requests"] == row["answered"] + row["refused"]
        assert row["completed"] == quota["runs"]
    for side in ("with quota", "without quota"):
        assert quota[side]["all_completed"] is True
        assert quota[side]["completion_s"] > 0
        assert quota[side]["vs_ideal"] > 0
        assert quota[side]["requests"] >= quota["requests_needed"]
        assert 0 <= quota[side]["refused_share"] < 1
    workspace = results["workspace"]
    assert workspace["snapshot"]["new_objects"] >= 2  # the file and the folders above it
    assert workspace["snapshot"]["new_bytes"] > 0
    for key in ("snapshot_ms", "scan_snapshot_ms", "upload_s"):
        assert workspace["snapshot"][key] > 0
        assert workspace["small"][key] > 0
    checkout = workspace["materialize"]
    assert len(checkout["fresh_s"]) == len(checkout["cp_s"]) == workspace["rounds"]
    assert checkout["fresh/cp"] == pytest.approx(
        checkout["fresh_median_s"] / checkout["cp_median_s"], abs=1e-3
    )
    assert checkout["incremental_ms"] > 0
    assert workspace["history"]["with_workspace_bytes"] > workspace["history"]["without_bytes"]

    text = report.read_text()
    assert "python -m benchmarks --quick" in text
    assert "## Workspaces: snapshots, checkouts, history" in text
    for heading in ("## Summary", "## Throughput", "## History", "## Replay", "## Profile"):
        assert heading in text
    assert "## The live event stream" in text
    assert "## In-process loop" in text
    assert "## Model quotas" in text
    assert "## What a run in flight keeps alive" in text
    assert "## Memory a waiting run keeps in its worker" in text

    again = tmp_path / "again.md"
    subprocess.run(
        [sys.executable, "-m", "benchmarks", "report", "--out", str(out), "--report", str(again)],
        cwd=ROOT,
        check=True,
        timeout=60,
    )
    assert again.read_text() == text


def test_the_report_orders_rows_the_same_in_every_process(tmp_path: Path) -> None:
    """Event types whose bytes tie must not come out in a set's order, which changes with
    each process's hash seed: `report` writes the same page again from the same results."""
    data = json.loads((ROOT / "benchmarks" / "results" / "history.json").read_text())
    median = data["results"]["median_run"]
    tied = 113 * data["results"]["steps"]
    for name in ("started tool_call", "started validate_output", "completed tool_call"):
        median["A"]["events_by_type"][f"activity_task_{name}"] = [10, tied]
    for name in ("started bare_tool_call", "completed bare_tool_call"):
        median["B"]["events_by_type"][f"activity_task_{name}"] = [10, tied]
    results = tmp_path / "history.json"
    results.write_text(json.dumps(data["results"]))
    script = (
        "import json, sys; from benchmarks import report; "
        "print('\\n'.join(report.history(json.load(open(sys.argv[1])))))"
    )
    pages = {
        subprocess.run(
            [sys.executable, "-c", script, str(results)],
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(6)
    }
    assert len(pages) == 1
    assert "activity_task_completed bare_tool_call" in pages.pop()
