"""How the rolling upgrade test tells the upgrade's workflow task failures from the previous
release's own race (tests/upgrade_load.py): on a history the CI run recorded."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.client import WorkflowHistory

from .upgrade_load import TaskFailure, failures_in, previous_release_race

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "upgrade" / "closed_before_confirmed.json"
"""`quoted-0000`, run entirely by 80075cc's worker (pid 13433) before the kill: its last
task completed the run while its quota release was unconfirmed; the server refused it
(UNHANDLED_COMMAND) and the retry completed the run."""


def test_the_previous_releases_close_race_is_told_apart_from_other_failures() -> None:
    history = WorkflowHistory.from_json("quoted-0000", json.loads(FIXTURE.read_text()))
    [failure] = failures_in(history)
    assert failure.worker_pid == "13433"
    assert failure.closed_before_confirmed
    assert "UNHANDLED_COMMAND" in failure.text
    assert previous_release_race(failure, {"13433"})
    # Today's worker (any other pid) failing the same way is a failure of the upgrade.
    assert not previous_release_race(failure, {"999"})
    # So is any other cause on the previous release's worker.
    other = TaskFailure("x event 9 WorkflowTaskFailed (NON_DETERMINISTIC_ERROR)", "13433", False)
    assert not previous_release_race(other, {"13433"})
