"""The work both sides do. A: `AgentWorkflow` hosting a `TestModel` agent that scripts k
`lookup` calls, then a text. B: bare Temporal, a hand-written loop of the same two activities
per step (a model call that receives the previous tool result, a tool call). Both tools
return 250 bytes."""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.client import Client, WorkflowHandle
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from durable_agent import (
        AgentBuilder,
        ModelResponse,
        TestModel,
        TextPart,
        ToolCallPart,
        UsageLimits,
    )
    from durable_agent.agent.agent import Agent
    from durable_agent.temporal import (
        AgentActivityConfig,
        AgentRegistration,
        AgentWorkflow,
        AgentWorkflowInput,
        DurableAgentPlugin,
    )

RESULT = "x" * 250
TIMEOUT = dt.timedelta(seconds=120)


# -- A --------------------------------------------------------------------------------------


async def lookup(key: int) -> str:
    """Looks a key up.

    Args:
        key: the key
    """
    return RESULT


async def deploy(key: int) -> str:
    """Deploys a key; every call waits for a human's approval.

    Args:
        key: the key
    """
    return "deployed"


def agent_name(steps: int, waiting: bool = False) -> str:
    return f"bench-{steps}-steps" + ("-then-approval" if waiting else "")


@functools.cache
def agent(steps: int, waiting: bool = False) -> Agent[Any]:
    """k lookups then a text; `waiting`: then a `deploy` call, which waits for approval. One
    object per name: the plugins of one worker share its registry, which refuses a second."""
    script = [
        ModelResponse(parts=[ToolCallPart(id=f"c{i}", name="lookup", arguments={"key": i})])
        for i in range(steps)
    ]
    if waiting:
        script.append(
            ModelResponse(parts=[ToolCallPart(id="d", name="deploy", arguments={"key": 0})])
        )
    script.append(ModelResponse(parts=[TextPart(text="done")]))
    builder = AgentBuilder(TestModel.with_responses(script)).name(agent_name(steps, waiting))
    builder = builder.tool(lookup).usage_limits(UsageLimits(request_limit=None))
    if waiting:
        builder = builder.tool(deploy, requires_approval=True)
    return builder.build()


LOCAL = AgentActivityConfig(local_activities=("prepare_model_request", "validate_output"))
"""L's activity options: A's agents with their quick nodes as local activities."""


# -- B --------------------------------------------------------------------------------------


class BareStart(BaseModel):
    steps: int
    wait_at_end: bool = False
    """Wait for the `resume` signal after the last step, as A waits for an approval."""


class ModelInput(BaseModel):
    step: int
    steps: int
    content: str
    """The prompt on the first call, then the previous tool result."""


class ModelOutput(BaseModel):
    tool: str | None = None
    call_id: str | None = None
    arguments: dict[str, int] | None = None
    text: str | None = None


class ToolInput(BaseModel):
    tool: str
    call_id: str
    arguments: dict[str, int]


@activity.defn(name="bare_model_call")
async def bare_model_call(input: ModelInput) -> ModelOutput:
    if input.step < input.steps:
        return ModelOutput(tool="lookup", call_id=f"c{input.step}", arguments={"key": input.step})
    return ModelOutput(text="done")


@activity.defn(name="bare_tool_call")
async def bare_tool_call(input: ToolInput) -> str:
    return RESULT


@workflow.defn(name="BareAgentWorkflow")
class BareAgentWorkflow:
    def __init__(self) -> None:
        self.waiting = False
        self.resumed = False

    @workflow.run
    async def run(self, start: BareStart) -> str:
        content, step = "go", 0
        while True:
            reply = await workflow.execute_activity(
                bare_model_call,
                ModelInput(step=step, steps=start.steps, content=content),
                start_to_close_timeout=TIMEOUT,
            )
            if reply.tool is None or reply.call_id is None:
                break
            step += 1
            content = await workflow.execute_activity(
                bare_tool_call,
                ToolInput(tool=reply.tool, call_id=reply.call_id, arguments=reply.arguments or {}),
                start_to_close_timeout=TIMEOUT,
            )
        if start.wait_at_end:
            self.waiting = True
            await workflow.wait_condition(lambda: self.resumed)
        return reply.text or ""

    @workflow.signal
    def resume(self) -> None:
        self.resumed = True

    @workflow.query
    def is_waiting(self) -> bool:
        return self.waiting


BARE_ACTIVITIES = [bare_model_call, bare_tool_call]


async def start(
    client: Client, kind: str, queue: str, steps: int, waiting: bool = False
) -> WorkflowHandle[Any, Any]:
    """Starts a k-step run of A, L (A's agent on a worker running its quick nodes locally)
    or B on `queue`."""
    id = f"bench-{kind}-{steps}-{uuid.uuid4().hex[:10]}"
    if kind in ("A", "L"):
        request = AgentWorkflowInput(agent=agent_name(steps, waiting), prompt="go")
        return await client.start_workflow(AgentWorkflow.run, request, id=id, task_queue=queue)
    bare = BareStart(steps=steps, wait_at_end=waiting)
    return await client.start_workflow(BareAgentWorkflow.run, bare, id=id, task_queue=queue)


async def is_waiting(kind: str, handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether a run started with `waiting` waits now: A's and L's for the approval of its
    last call (RuntimeError if it ended instead), B's for its signal."""
    if kind == "B":
        return bool(await handle.query(BareAgentWorkflow.is_waiting))
    view = await handle.query(AgentWorkflow.status)
    if view.status in ("failed", "completed", "cancelled"):
        raise RuntimeError(f"the waiting {kind} run ended: {view.status} {view.error}")
    return view.status == "waiting" and bool(view.pending_approvals)


async def in_process_side(address: str, kind: str, steps: int = 1) -> tuple[Client, dict[str, Any]]:
    """A client of side `kind` and what its worker in this process hosts (the diagnoses'
    workers, which share the caller's process): A's plugin hosts the k-step agent that then
    waits for an approval; B's worker has bare Temporal's converter and nothing of ours."""
    if kind == "A":
        registration = AgentRegistration(agent(steps, waiting=True), AgentActivityConfig())
        plugin = DurableAgentPlugin(agents=[registration])
        return await Client.connect(address, plugins=[plugin]), {}
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    return client, {"workflows": [BareAgentWorkflow], "activities": BARE_ACTIVITIES}


def sandbox_runner() -> SandboxedWorkflowRunner:
    """Temporal's sandbox passing `pydantic` and `benchmarks` through, for both sides (A's
    plugin adds its own modules), so neither re-imports its workflow module per run."""
    restrictions = SandboxRestrictions.default.with_passthrough_modules(
        "pydantic", "pydantic_core", "benchmarks"
    )
    return SandboxedWorkflowRunner(restrictions=restrictions)
