"""The report's fleet sections render what `python -m benchmarks upgrade` and `memory` write
(the quick mode leaves the upgrade out; tests/test_upgrade_load.py runs the upgrade itself)."""

from __future__ import annotations

from benchmarks import report_fleet
from benchmarks.worker import arenas_kb, c_heap_kb


def upgrade_figures(problems: list[str]) -> dict[str, object]:
    return {
        "previous_release": "80075cc",
        "problems": problems,
        "runs": 4,
        "by_kind": {"deployer": 2, "slow": 1, "quoted": 1},
        "completed": 4 - len(problems),
        "workflow_task_failures": 0,
        "histories_checked": 5,
        "started_s": 0.4,
        "waiting_s": 3.0,
        "upgrade_s": 12.5,
        "wall_s": 20.1,
        "delay_s": {"median": 1.0, "p95": 4.0, "max": 4.5},
        "delay_s_by_kind": {"deployer": {"median": 1.0, "p95": 1.5, "max": 1.5}},
        "slowest_run": {"id": "slow-0000-abc", "kind": "slow", "delay_s": 4.5},
    }


def test_the_upgrade_section_names_the_runs_the_phases_and_the_slowest_run() -> None:
    text = "\n".join(report_fleet.upgrade(upgrade_figures([])))
    assert "4 runs (2 deployer, 1 slow, 1 quoted) started on 80075cc's worker" in text
    assert "Completed 4 of 4; workflow task failures 0 in 5 histories; problems: 0." in text
    assert "| all closed (s after the kill) | 12.5 |" in text
    assert "| deployer | 1.00 | 1.50 | 1.50 |" in text
    assert "The slowest run: `slow-0000-abc` (slow), 4.50 s." in text
    summary = "\n".join(report_fleet.upgrade_summary(upgrade_figures([])))
    assert "4 of 4 runs completed, 0 problems" in summary
    raced = {**upgrade_figures([]), "previous_release_close_races": 1}
    text = "\n".join(report_fleet.upgrade(raced))
    assert "failures 0 in 5 histories (and 1 by the previous release's worker closing" in text


def test_the_upgrade_section_quotes_its_first_problems() -> None:
    text = "\n".join(report_fleet.upgrade(upgrade_figures(["run x lost", "tool ran twice"])))
    assert "problems: 2 (the first: run x lost; tool ran twice)." in text


def test_the_memory_section_sets_the_ratio_beside_its_goal() -> None:
    side = {
        "rss_kb_per_run": 20.0,
        "arenas_kb_per_run": 8.0,
        "objects_per_run": 300.0,
        "blocks_per_run": 900.0,
    }
    data = {
        "runs": 1000,
        "steps": 1,
        "goal": 1.5,
        "A": {**side, "by_type": {"dict": 80.0}},
        "B": {**side, "rss_kb_per_run": 10.0, "by_type": {"dict": 20.0, "list": 3.0}},
        "A/B": {
            "rss_kb_per_run": 2.0,
            "arenas_kb_per_run": 1.0,
            "objects_per_run": 1.0,
            "blocks_per_run": 1.0,
        },
    }
    text = "\n".join(report_fleet.memory(data))
    assert "resident memory 2.00 (**missed**)" in text
    assert "| of it, Python's small-object arenas (kB) | 8.00 | 8.00 | 1.00 |" in text
    assert "| `list` | n/a | 3.00 |" in text
    assert "steps left waiting the same way" not in text  # results of before the second measure
    longer = {
        "runs": 300,
        "steps": 10,
        "A": {**side, "rss_kb_per_run": 29.0},
        "B": {**side, "rss_kb_per_run": 14.5},
        "A/B": {"rss_kb_per_run": 2.0},
        "rss_kb_per_step": {"A": 1.0, "B": 0.5},
    }
    text = "\n".join(report_fleet.memory({**data, "longer": longer}))
    assert (
        "300 runs of 10 steps left waiting the same way: A 29.0 kB a run, B 14.5 kB (A/B 2.00)"
        in text
    )
    assert "adds 1.00 kB to a waiting A run and 0.50 kB to a B run." in text
    assert "at a time" not in text  # results of before the third measure
    waves = {**longer, "runs": 300, "wave": 20, "A/B": {"rss_kb_per_run": 1.5}}
    text = "\n".join(report_fleet.memory({**data, "longer": longer, "in_waves": waves}))
    assert "The same 300 runs of 10 steps started 20 at a time" in text
    assert "A 29.0 kB a run, B 14.5 kB (A/B 1.50)." in text


def test_the_census_reads_the_small_object_arenas_of_this_interpreter() -> None:
    """`arenas_kb` parses `sys._debugmallocstats`' text: a CPython that words it otherwise
    makes the memory measure's arena figure 0, and this test fail."""
    assert arenas_kb() > 0  # this test's interpreter holds arenas for its own objects


def test_the_census_reads_the_c_heap_of_this_process() -> None:
    """`c_heap_kb` reads glibc's `mallinfo2`: a libc without it leaves the memory measure
    without its C heap figures, and this test fails."""
    heap = c_heap_kb()
    assert heap["heap_kb"] > 0  # the interpreter's own allocations over 512 bytes at least
    assert heap["heap_free_kb"] >= 0
