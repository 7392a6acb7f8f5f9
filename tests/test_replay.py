"""Recorded histories replay against today's workflow code: determinism is checked in CI.

`tests/histories/*.json` were recorded with today's tree (`tests.record_histories`, agents
in `replay_agents.py`); `tests/histories/<release>/*.json` by a previous release's own worker
(`tests.record_release_histories`, agents in `upgrade_agents.py`), including runs that
release left waiting for approval, suspended at a boundary and in the middle of a tool call.
Every `*.json` under tests/histories replays here, through the test kit users get
(`durable_agent.testing.replay_folder`, one test per file, on `replay_histories`).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from durable_agent.temporal.placement import INLINE_PATCH_PREFIX, VISIBILITY_PATCH
from durable_agent.testing import NonDeterministicReplay, replay_folder, replay_histories

from .replay_agents import REPLAY_QUOTAS, replay_agents
from .temporal_support import event_types
from .upgrade_agents import AGENTS as UPGRADE_AGENTS

HISTORY_DIR = Path(__file__).resolve().parent / "histories"
HISTORIES = sorted(HISTORY_DIR.rglob("*.json"))
RELEASE_RUNS = {
    "tool_run",
    "suspend_resume",
    "approved",
    "denied",
    "waiting_for_approval",
    "suspended_at_boundary",
    "mid_tool_call",
}
RELEASES = {
    "v0.1.0": RELEASE_RUNS,
    "v0.2.0": RELEASE_RUNS,
    "v0.3.0": RELEASE_RUNS,
    "v0.4.0": RELEASE_RUNS,
}


def history_id(path: Path) -> str:
    return path.relative_to(HISTORY_DIR).with_suffix("").as_posix()


def test_histories_are_recorded() -> None:
    names = {path.stem for path in HISTORIES if path.parent == HISTORY_DIR}
    assert {"tool_run", "suspend_resume", "approved", "denied", "local_activities"} <= names
    # a quota's runs and its keeper, asking and telling with local activities
    assert {"quota_first", "quota_second", "quota_keeper"} <= names


def marker_details(path: Path, detail: str) -> list[Any]:
    """The JSON in the `detail` payloads of a recorded history's markers, in order."""
    history = json.loads(path.read_text())
    found = []
    for event in history["events"]:
        details = event.get("markerRecordedEventAttributes", {}).get("details", {})
        for payload in details.get(detail, {}).get("payloads", []):
            found.append(json.loads(base64.b64decode(payload["data"])))
    return found


def test_the_quota_histories_hold_the_direct_path() -> None:
    """The recorded keeper granted the second run's slot ahead (a timer shorter than the
    window, then its grants told by a local activity), so replay covers that path."""

    def local_activities(name: str) -> list[str]:
        return [d["activity_type"] for d in marker_details(HISTORY_DIR / f"{name}.json", "data")]

    assert local_activities("quota_keeper") == ["tell_quota_grants"] * 2
    assert local_activities("quota_second") == ["ask_quota_keeper", "release_to_quota_keeper"]
    keeper = WorkflowHistory.from_json(
        "quota_keeper", json.loads((HISTORY_DIR / "quota_keeper.json").read_text())
    )
    types = event_types(keeper)
    assert "TIMER_FIRED" in types
    assert "WORKFLOW_EXECUTION_COMPLETED" not in types


def test_the_histories_of_today_hold_the_coalesced_path() -> None:
    """Runs of today's tree record `VISIBILITY_PATCH` at their start (its replay path is
    covered here) and no longer the inline marker; the releases' own keep the old path."""

    def patches(path: Path) -> list[str]:
        return [d["id"] for d in marker_details(path, "patch-data")]

    for name in ("tool_run", "suspend_resume", "approved", "denied"):
        assert VISIBILITY_PATCH in patches(HISTORY_DIR / f"{name}.json"), name
        assert INLINE_PATCH_PREFIX + "prepare_model_request" not in patches(
            HISTORY_DIR / f"{name}.json"
        )
    old = patches(HISTORY_DIR / "v0.4.0" / "approved.json")
    assert VISIBILITY_PATCH not in old
    assert INLINE_PATCH_PREFIX + "prepare_model_request" in old


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_release_histories_are_recorded(release: str) -> None:
    names = {path.stem for path in (HISTORY_DIR / release).glob("*.json")}
    assert names >= RELEASES[release], f"missing in tests/histories/{release}"
    assert (HISTORY_DIR / release / "README.md").exists()


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_release_histories_include_unfinished_runs(release: str) -> None:
    """What the release left running stays unfinished in the files: the replay covers a
    run waiting for approval, one suspended at a boundary and one with a tool call running."""
    closed = {
        f"WORKFLOW_EXECUTION_{end}"
        for end in ("COMPLETED", "FAILED", "CANCELED", "TERMINATED", "TIMED_OUT")
    } | {"WORKFLOW_EXECUTION_CONTINUED_AS_NEW"}
    histories = {
        name: WorkflowHistory.from_json(
            name, json.loads((HISTORY_DIR / release / f"{name}.json").read_text())
        )
        for name in ("waiting_for_approval", "suspended_at_boundary", "mid_tool_call")
    }
    for name, history in histories.items():
        assert not closed & set(event_types(history)), name
    mid = histories["mid_tool_call"]
    last = mid.events[-1]
    assert last.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    assert last.activity_task_scheduled_event_attributes.activity_type.name == "tool_call"


def every_agent() -> list[object]:
    return [*replay_agents(), *UPGRADE_AGENTS]


REPLAY_OPTIONS = {"quotas": REPLAY_QUOTAS}
"""The recording workers' configuration the histories need (the quota runs and keeper)."""

test_history_replays = replay_folder(HISTORY_DIR, agents=every_agent, plugin_options=REPLAY_OPTIONS)
"""One test per file under tests/histories, named by its path there (`v0.2.0/approved`)."""


def test_every_history_file_has_its_replay_test() -> None:
    marker = test_history_replays.pytestmark[0]  # type: ignore[attr-defined]
    assert list(marker.args[1]) == HISTORIES
    assert marker.kwargs["ids"] == [history_id(p) for p in HISTORIES]


async def test_a_changed_agent_fails_replay() -> None:
    """The check is real: the same agent, now asking approval for its tool, diverges."""
    from durable_agent import AgentBuilder, TestModel

    from .helpers import call, text_response, tool_response
    from .replay_agents import get_weather

    model = TestModel.with_responses(
        [
            tool_response(
                call("get_weather", "w1", city="Paris"), call("get_weather", "w2", city="Oslo")
            ),
            text_response("Both sunny."),
        ]
    )
    changed = (
        AgentBuilder(model)
        .name("replay-weather")
        .instructions("Be brief.")
        .tool(get_weather)
        .approval_required_tools(["get_weather"])
        .build()
    )
    path = HISTORY_DIR / "tool_run.json"
    with pytest.raises(NonDeterministicReplay) as failed:
        await replay_histories([path], agents=[changed])
    assert "Nondeterminism" in str(failed.value.failure)
    assert failed.value.workflow_id == "tool_run"
    assert failed.value.event.startswith("event ")
    assert f"{path}: workflow 'tool_run'" in str(failed.value)
