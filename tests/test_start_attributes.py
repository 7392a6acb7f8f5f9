"""A run started through the plugin's client carries its first search attributes
(`durable_agent.temporal.start_attributes`): listed under its agent before any worker ran it,
and one upsert fewer in its history."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from typing import Any

from google.protobuf.duration_pb2 import Duration
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client, StartWorkflowInput, WorkflowExecutionStatus
from temporalio.common import SearchAttributePair, SearchAttributes, TypedSearchAttributes
from temporalio.service import RPCError

from durable_agent.temporal import AgentWorkflow, AgentWorkflowInput, DurableAgentPlugin
from durable_agent.temporal.search_attributes import (
    AGENT_NAME,
    AGENT_STATUS,
    FORKED_FROM,
    PENDING_APPROVALS,
)
from durable_agent.temporal.start_attributes import start_attributes
from durable_agent.temporal.wire import ResumeFrom

from .temporal_support import unique


def starting(*args: Any, workflow: str = "AgentWorkflow", **fields: Any) -> StartWorkflowInput:
    """A start as the client hands it to its interceptors (what these tests do not read is
    None)."""
    values: dict[str, Any] = {f.name: None for f in dataclasses.fields(StartWorkflowInput)}
    values.update(workflow=workflow, args=list(args), **fields)
    return StartWorkflowInput(**values)


def as_dict(attributes: TypedSearchAttributes | None) -> dict[str, Any]:
    assert attributes is not None
    return {pair.key.name: pair.value for pair in attributes}


def test_a_new_run_starts_with_its_name_status_and_count() -> None:
    found = start_attributes(starting(AgentWorkflowInput(agent="support", prompt="hi")))
    assert as_dict(found) == {
        "AgentName": "support",
        "AgentStatus": "running",
        "PendingApprovals": 0,
    }


def test_a_fork_starts_with_its_origin_too() -> None:
    origin = ResumeFrom(workflow_id="w1", checkpoint_id="c1")
    found = start_attributes(starting(AgentWorkflowInput(agent="a", resume_from=origin)))
    assert as_dict(found)["ForkedFrom"] == "w1"


def test_the_callers_attributes_stay_and_win() -> None:
    given = TypedSearchAttributes(
        [SearchAttributePair(AGENT_STATUS, "queued"), SearchAttributePair(FORKED_FROM, "x")]
    )
    found = start_attributes(
        starting(AgentWorkflowInput(agent="a", prompt="p"), search_attributes=given)
    )
    assert as_dict(found) == {
        "AgentStatus": "queued",
        "ForkedFrom": "x",
        "AgentName": "a",
        "PendingApprovals": 0,
    }


def test_other_starts_are_left_as_they_are() -> None:
    request = AgentWorkflowInput(agent="a", prompt="p")
    untyped: SearchAttributes = {"AgentStatus": ["mine"]}
    assert start_attributes(starting(request, search_attributes=untyped)) is None
    assert start_attributes(starting(request, workflow="OrderWorkflow")) is None
    assert start_attributes(starting({"agent": "a", "prompt": "p"})) is None
    full = TypedSearchAttributes(
        [
            SearchAttributePair(AGENT_NAME, "a"),
            SearchAttributePair(AGENT_STATUS, "running"),
            SearchAttributePair(PENDING_APPROVALS, 0),
        ]
    )
    assert start_attributes(starting(request, search_attributes=full)) is None


async def test_a_started_run_is_listed_under_its_agent_before_a_worker_runs_it(
    client: Client,
) -> None:
    agent = f"listed-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(
        AgentWorkflow.run,
        AgentWorkflowInput(agent=agent, prompt="hi"),
        id=unique("listed"),
        task_queue=unique("no-worker"),
    )
    try:
        attributes = (await handle.describe()).typed_search_attributes
        assert (attributes[AGENT_NAME], attributes[AGENT_STATUS]) == (agent, "running")
        assert attributes[PENDING_APPROVALS] == 0
        query = f"AgentName = '{agent}' AND AgentStatus = 'running'"
        deadline = time.monotonic() + 20
        while (await client.count_workflows(query)).count != 1:
            assert time.monotonic() < deadline, "the run was not listed under its agent"
            await asyncio.sleep(0.2)
    finally:
        await handle.terminate(reason="test: listed")


async def test_a_namespace_without_our_attributes_still_starts_runs(client: Client) -> None:
    """No worker has registered the attributes yet: the start goes again without them."""
    address = client.service_client.config.target_host
    name = f"bare-{uuid.uuid4().hex[:8]}"
    await client.workflow_service.register_namespace(
        RegisterNamespaceRequest(
            namespace=name, workflow_execution_retention_period=Duration(seconds=86400)
        )
    )
    bare = await Client.connect(address, namespace=name, plugins=[DurableAgentPlugin()])
    deadline = time.monotonic() + 30
    while True:
        try:
            await bare.count_workflows()
            break
        except RPCError:
            assert time.monotonic() < deadline, f"namespace {name} never came up"
            await asyncio.sleep(0.5)
    handle = await bare.start_workflow(
        AgentWorkflow.run,
        AgentWorkflowInput(agent="a", prompt="hi"),
        id=unique("bare"),
        task_queue=unique("no-worker"),
    )
    description = await handle.describe()
    assert description.status is WorkflowExecutionStatus.RUNNING
    assert AGENT_NAME not in description.typed_search_attributes
    await handle.terminate(reason="test: bare namespace")
