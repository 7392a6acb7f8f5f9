"""Replaying recorded histories against today's code: does a new release still run the
runs in flight?

    await replay_histories(["bug-1234.json", "tests/histories/tool_run.json"], agents=[...])

Each execution of each file (an export of `durable-agent export`, or one plain history)
replays on a `temporalio.worker.Replayer` configured by `DurableAgentPlugin(agents=...)`,
as the workers are; a run whose code no longer makes the commands its history recorded
raises `NonDeterministicReplay` naming the file, the workflow, the run and the event.
`replay_folder(folder, agents=...)` makes one pytest test per file of a folder, for CI.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from ..engine.spec import AgentSpec
from ..temporal.plugin import DurableAgentPlugin
from ..temporal.registry import AgentRegistration
from .histories import RunChain

__all__ = [
    "NonDeterministicReplay",
    "replay_folder",
    "replay_histories",
    "replay_histories_async",
]

Hosted = AgentSpec | AgentRegistration
_EVENT_ID = re.compile(r"(?:event[ _]?id|HistoryEvent\(id)[:= ]+(\d+)|event (\d+)", re.I)


class NonDeterministicReplay(AssertionError):
    """A recorded run does not replay on today's code: `workflow_id`, `run_id` and
    `event_id` (0 when the failure names none) say where; `failure` is the replayer's."""

    def __init__(
        self, source: str, workflow_id: str, run_id: str, event: str, failure: BaseException
    ) -> None:
        super().__init__(
            f"{source}: workflow {workflow_id!r} (run {run_id}) does not replay on this code "
            f"at {event}: {failure}"
        )
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.event = event
        self.failure = failure


def replay_histories(
    paths: Iterable[str | os.PathLike[str]],
    agents: Sequence[Hosted] = (),
    *,
    plugin_options: dict[str, Any] | None = None,
    workflows: Sequence[type] = (),
) -> Any:
    """Replays every execution in `paths` (see the module docstring) and answers how many
    replayed. `plugin_options` go to `DurableAgentPlugin` (quotas, role queues...: what the
    workers were configured with), `workflows` are other workflows of the worker.
    `HistoryFileError` for a file that is not a history.

    Called from a coroutine it answers an awaitable (`await replay_histories(...)`); from
    plain code (a synchronous test, a script) it replays at once and answers the count."""
    replay = replay_histories_async(
        paths, agents, plugin_options=plugin_options, workflows=workflows
    )
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(replay)
    return replay


async def replay_histories_async(
    paths: Iterable[str | os.PathLike[str]],
    agents: Sequence[Hosted] = (),
    *,
    plugin_options: dict[str, Any] | None = None,
    workflows: Sequence[type] = (),
) -> int:
    """`replay_histories`, always as a coroutine."""
    chains = [(str(path), RunChain.read(path)) for path in paths]
    replayer = Replayer(
        workflows=list(workflows),
        plugins=[DurableAgentPlugin(list(agents), **(plugin_options or {}))],
    )
    count = 0
    for source, chain in chains:
        for history in chain.histories:
            result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            if result.replay_failure is not None:
                raise _explained(source, history, result.replay_failure)
            count += 1
    return count


def _explained(source: str, history: WorkflowHistory, failure: BaseException) -> Exception:
    started = history.events[0].workflow_execution_started_event_attributes
    run_id = started.original_execution_run_id or "?"
    return NonDeterministicReplay(
        source, history.workflow_id, run_id, _event(history, str(failure)), failure
    )


def _event(history: WorkflowHistory, failure: str) -> str:
    """The event the failure names (`event 12 (ACTIVITY_TASK_SCHEDULED model_request)`),
    else the last workflow task the run completed before it."""
    match = _EVENT_ID.search(failure)
    if match:
        wanted = int(match.group(1) or match.group(2))
        for event in history.events:
            if event.event_id == wanted:
                return f"event {wanted} ({_describe(event)})"
        return f"event {wanted}"
    return f"event {len(history.events)} (the last; the replayer named none)"


def _describe(event: HistoryEvent) -> str:
    name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
    if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        return f"{name} {event.activity_task_scheduled_event_attributes.activity_type.name}"
    return name


def replay_folder(
    folder: str | os.PathLike[str],
    agents: Sequence[Hosted] | Callable[[], Sequence[Hosted]] = (),
    *,
    pattern: str = "**/*.json",
    plugin_options: dict[str, Any] | None = None,
) -> Callable[..., Any]:
    """A pytest test replaying every file of `folder` matching `pattern`, one test per
    file (its id: the path inside the folder), for CI:

        test_histories = replay_folder("tests/histories", agents=my_agents)

    `agents` may be a function, called when a test runs (so collecting builds nothing).
    The test is synchronous (it runs its own event loop), so it needs no asyncio plugin."""
    import pytest

    root = Path(folder)
    paths = sorted(root.glob(pattern))

    @pytest.mark.parametrize(
        "history_file", paths, ids=[p.relative_to(root).with_suffix("").as_posix() for p in paths]
    )
    def test_history_replays(history_file: Path) -> None:
        hosted = agents() if callable(agents) else agents
        asyncio.run(replay_histories_async([history_file], hosted, plugin_options=plugin_options))

    return test_history_replays
