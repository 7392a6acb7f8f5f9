"""A rolling upgrade under load, at CI's size (issue 41, item 2; the benchmark runs the same
at 2,000 runs: `python -m benchmarks upgrade`).

Runs of four kinds (approval waits, slow tool calls, sub-agents waiting for approval, runs
waiting for the model quota) start on the previous release's worker; the server and that
worker are SIGKILLed together; today's worker, with one of the previous release beside it
until that one is drained, finishes them all. See tests/upgrade_load.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .upgrade_load import CI, rolling_upgrade

pytestmark = [pytest.mark.server, pytest.mark.upgrade_load]


@pytest.mark.timeout(600)
async def test_a_fleet_upgraded_under_load_loses_no_run_and_redoes_no_tool(
    tmp_path: Path,
) -> None:
    outcome = await rolling_upgrade(tmp_path, CI)
    print(json.dumps(outcome.figures, indent=1))
    assert outcome.problems == []
    assert outcome.figures["completed"] == CI.runs
    assert outcome.figures["workflow_task_failures"] == 0
    # The kill found runs in each of their waits.
    assert outcome.figures["at_kill"]["waiting_for_quota"] > 0
    assert outcome.figures["at_kill"]["slow_calls_in_flight"] >= CI.slow
