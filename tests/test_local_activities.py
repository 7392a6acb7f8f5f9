"""`AgentActivityConfig(local_activities=...)`: the quick nodes as local activities.

A run gives the same result, checkpoints and stream either way; its history records the two
nodes as markers instead of activity tasks. The option can be turned on or off while runs
wait: each run keeps the kind it started with, on a real server, through a replay by a
worker configured the other way: each node keeps the kind of its first run in the run.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.workflow import ActivityConfig

from durable_agent import AgentBuilder, TestModel, UserError
from durable_agent.temporal import (
    AgentActivityConfig,
    AgentRegistration,
    AgentWorkflow,
    ApprovalSignal,
)
from durable_agent.temporal.placement import VISIBILITY_PATCH
from durable_agent.temporal.search_attributes import AGENT_NAME, AGENT_STATUS, PENDING_APPROVALS

from .helpers import CallLog, call, text_response, tool_response
from .temporal_support import (
    new_replayer,
    new_worker,
    start_agent,
    unique,
    wait_for_status,
)

LOCAL = AgentActivityConfig(local_activities=("prepare_model_request", "validate_output"))
ACTIVITIES = AgentActivityConfig(inline_quick_nodes=False)
"""The quick nodes as activities (not inline in the workflow, the default where pure)."""


def scheduled(history: WorkflowHistory) -> list[str]:
    """The activity types scheduled as activity tasks, in order."""
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


def local_markers(history: WorkflowHistory) -> int:
    return sum(
        1
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    )


def deploying_agent(
    log: CallLog, activities: AgentActivityConfig | None = None
) -> AgentRegistration:
    def deploy(env: str) -> str:
        log.record("deploy", env=env)
        return f"deployed to {env}"

    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env="prod")), text_response("finished")]
    )
    name = unique("local")
    agent = AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"])
    return AgentRegistration(agent.build(), activities or AgentActivityConfig())


# -- options ---------------------------------------------------------------------------------


def test_only_the_quick_nodes_can_run_locally() -> None:
    with pytest.raises(UserError, match=r"'model_request' cannot run as a local activity"):
        AgentActivityConfig(local_activities=("model_request",))  # type: ignore[arg-type]


def test_a_local_node_refuses_options_only_activities_take() -> None:
    with pytest.raises(UserError, match=r"prepare_model_request: 'heartbeat_timeout'"):
        AgentActivityConfig(
            prepare_model_request=ActivityConfig(heartbeat_timeout=timedelta(seconds=5)),
            local_activities=("prepare_model_request",),
        )


def test_options_no_activity_takes_are_refused_for_any_node() -> None:
    # a local-only option would break the runs whose node runs as an activity
    with pytest.raises(UserError, match=r"validate_output: 'local_retry_threshold' is not"):
        AgentActivityConfig(
            validate_output={"local_retry_threshold": timedelta(seconds=1)},  # type: ignore[typeddict-unknown-key]
            local_activities=("validate_output",),
        )
    with pytest.raises(UserError, match=r"tools\['deploy'\]: 'timeout' is not"):
        AgentActivityConfig(tools={"deploy": {"timeout": 3}})  # type: ignore[typeddict-unknown-key]


def test_local_activities_are_normalised_and_checked() -> None:
    one = AgentActivityConfig(local_activities=("validate_output", "prepare_model_request"))
    other = AgentActivityConfig(
        local_activities=["prepare_model_request", "validate_output", "validate_output"]  # type: ignore[arg-type]
    )
    assert one == other
    assert one.local_activities == ("prepare_model_request", "validate_output")
    with pytest.raises(UserError, match="must be a tuple of node names, got None"):
        AgentActivityConfig(local_activities=None)  # type: ignore[arg-type]


def test_one_node_name_is_read_as_one_node_and_local_options_keep_only_what_they_take() -> None:
    config = AgentActivityConfig(
        validate_output=ActivityConfig(start_to_close_timeout=timedelta(seconds=7)),
        local_activities="validate_output",  # type: ignore[arg-type]
    )
    assert config.local_activities == ("validate_output",)
    options = config.local_options("validate_output")
    assert options["start_to_close_timeout"] == timedelta(seconds=7)
    assert "retry_policy" in options
    # a node the run decided to run locally keeps only the local options of its config
    assert set(
        AgentActivityConfig(
            prepare_model_request=ActivityConfig(task_queue="elsewhere")
        ).local_options("prepare_model_request")
    ) == {"start_to_close_timeout", "retry_policy"}


# -- on a server -----------------------------------------------------------------------------


async def test_local_or_inline_quick_nodes_give_the_same_run_with_fewer_tasks(
    client: Client,
) -> None:
    hosted = {
        "activities": deploying_agent(CallLog(), ACTIVITIES),
        "local": deploying_agent(CallLog(), LOCAL),
        "inline": deploying_agent(CallLog()),  # the default: pure quick nodes run inline
    }
    names = {kind: registration.agent.name for kind, registration in hosted.items()}
    runs: dict[str, Any] = {}
    async with new_worker(client, agents=list(hosted.values())) as worker:
        for kind, name in names.items():
            handle = await start_agent(client, worker, name, "ship it")
            await wait_for_status(handle, "waiting")
            await handle.signal(
                AgentWorkflow.approval, ApprovalSignal(tool_call_id="d1", approved=True)
            )
            result = await handle.result()
            checkpoints = await handle.query(AgentWorkflow.checkpoints)
            runs[kind] = (result, checkpoints, await handle.fetch_history())
    (regular, regular_marks, regular_history) = runs["activities"]
    for kind in ("local", "inline"):
        (other, other_marks, _) = runs[kind]
        assert (other.output, other.status, other.run_step, other.usage) == (
            regular.output,
            regular.status,
            regular.run_step,
            regular.usage,
        )
        assert [c.node for c in other_marks.checkpoints] == [
            c.node for c in regular_marks.checkpoints
        ]
    local_history, inline_history = runs["local"][2], runs["inline"][2]
    assert scheduled(regular_history) == [
        "prepare_model_request",
        "model_request",
        "tool_call",
        "model_request",
        "validate_output",
    ]
    assert scheduled(local_history) == ["model_request", "tool_call", "model_request"]
    assert scheduled(inline_history) == ["model_request", "tool_call", "model_request"]
    assert local_markers(local_history) == 2
    assert local_markers(regular_history) == local_markers(inline_history) == 0
    workflow_tasks = [
        sum(1 for e in h.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
        for h in (regular_history, local_history, inline_history)
    ]
    assert workflow_tasks[1] < workflow_tasks[0], workflow_tasks
    assert workflow_tasks[2] <= workflow_tasks[1], workflow_tasks
    # a replayer configured any way replays all three as they ran
    for activities in (ACTIVITIES, LOCAL, AgentActivityConfig()):
        agents = [AgentRegistration(h.agent, activities) for h in hosted.values()]
        for history in (regular_history, local_history, inline_history):
            await new_replayer(agents=agents).replay_workflow(history)


@pytest.mark.parametrize("started_local", [True, False], ids=["turned-off", "turned-on"])
async def test_a_waiting_run_keeps_its_kind_when_the_option_changes(
    client: Client, started_local: bool
) -> None:
    log = CallLog()
    before, after = (LOCAL, ACTIVITIES) if started_local else (ACTIVITIES, LOCAL)
    first = deploying_agent(log, before)
    name = first.agent.name
    async with new_worker(client, agents=[first]) as worker:
        queue = worker.task_queue
        handle = await start_agent(client, worker, name, "ship it")
        await wait_for_status(handle, "waiting")
    changed = AgentRegistration(first.agent, after)
    # a new worker has none of the run cached: it replays the run from its start
    async with new_worker(client, task_queue=queue, agents=[changed]):
        await handle.signal(
            AgentWorkflow.approval, ApprovalSignal(tool_call_id="d1", approved=True)
        )
        result = await handle.result()
    assert result.output == "finished"
    assert log.calls == [("deploy", {"env": "prod"})]
    history = await handle.fetch_history()
    # each node keeps the kind of its first run; validate_output, first run after the
    # change, takes the new one
    if started_local:
        assert scheduled(history) == [
            "model_request",
            "tool_call",
            "model_request",
            "validate_output",
        ]
    else:
        assert scheduled(history) == [
            "prepare_model_request",
            "model_request",
            "tool_call",
            "model_request",
        ]
    assert local_markers(history) == 1
    await new_replayer(agents=[changed]).replay_workflow(history)


async def test_quick_nodes_that_run_the_users_code_stay_activities(client: Client) -> None:
    """Dynamic instructions and output validators may do I/O: their nodes are activities,
    whose results history keeps, even where pure quick nodes run inline."""

    def instructions(ctx: Any) -> str:
        return "Be brief."

    def checked(value: str) -> str:
        return value

    model = TestModel.with_responses([text_response("done")])
    agent = (
        AgentBuilder(model)
        .name(unique("dynamic"))
        .instructions(instructions)
        .output_validator(checked)
        .build()
    )
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, agent.name, "go")
        result = await handle.result()
        history = await handle.fetch_history()
    assert result.output == "done"
    assert scheduled(history) == ["prepare_model_request", "model_request", "validate_output"]


# -- the start-of-run decision ---------------------------------------------------------------


def patch_markers(history: WorkflowHistory) -> list[str]:
    return [
        e.marker_recorded_event_attributes.details["patch-data"].payloads[0].data.decode()
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and "patch-data" in e.marker_recorded_event_attributes.details
    ]


def upserts_per_task(history: WorkflowHistory) -> list[list[set[str]]]:
    """The run's own search-attribute upserts (not the SDK's `TemporalChangeVersion`),
    grouped by the workflow task that made them."""
    tasks: list[list[set[str]]] = [[]]
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            tasks.append([])
        elif e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = e.upsert_workflow_search_attributes_event_attributes.search_attributes
            names = set(fields.indexed_fields)
            if names != {"TemporalChangeVersion"}:
                tasks[-1].append(names)
    return [task for task in tasks if task]


async def test_a_run_decides_at_its_start_and_coalesces_its_upserts(client: Client) -> None:
    """One marker at the start (`VISIBILITY_PATCH`) stands for the inline
    `prepare_model_request` marker, and the run coalesces its search-attribute upserts:
    fewer commands, which a cached waiting run keeps in its worker."""
    log = CallLog()
    batched, unbatched = deploying_agent(log), deploying_agent(log, ACTIVITIES)
    histories = {}
    async with new_worker(client, agents=[batched, unbatched]) as worker:
        for registration in (batched, unbatched):
            handle = await start_agent(client, worker, registration.agent.name, "ship it")
            await wait_for_status(handle, "waiting")
            attributes = (await handle.describe()).typed_search_attributes
            assert attributes[AGENT_NAME] == registration.agent.name
            assert attributes[AGENT_STATUS] == "waiting"
            assert attributes[PENDING_APPROVALS] == 1
            await handle.signal(
                AgentWorkflow.approval, ApprovalSignal(tool_call_id="d1", approved=True)
            )
            assert (await handle.result()).output == "finished"
            attributes = (await handle.describe()).typed_search_attributes
            assert (attributes[AGENT_STATUS], attributes[PENDING_APPROVALS]) == ("completed", 0)
            histories[registration.agent.name] = await handle.fetch_history()
    history = histories[batched.agent.name]
    assert [m for m in patch_markers(history) if "inline-prepare" in m or "one-upsert" in m] == [
        f'{{"id":"{VISIBILITY_PATCH}","deprecated":false}}'
    ]
    tasks = upserts_per_task(history)
    # the name with the first status; the wait's status and count at once, not after the
    # checkpoint's "running" with one approval pending
    assert tasks[:2] == [
        [{"AgentName", "AgentStatus", "PendingApprovals"}],
        [{"AgentStatus", "PendingApprovals"}],
    ], tasks
    assert scheduled(history) == ["model_request", "tool_call", "model_request"]
    # not batched: as before, the name on its own, then each change of status
    old = histories[unbatched.agent.name]
    assert not any(VISIBILITY_PATCH in m for m in patch_markers(old))
    assert upserts_per_task(old)[0][0] == {"AgentName"}
    assert sum(map(len, upserts_per_task(old))) == sum(map(len, tasks)) + 2
    # the decision is recorded: replayers configured any way replay both as they ran
    for activities in (ACTIVITIES, LOCAL, AgentActivityConfig()):
        agents = [AgentRegistration(r.agent, activities) for r in (batched, unbatched)]
        for recorded in (history, old):
            await new_replayer(agents=agents).replay_workflow(recorded)
