"""One run controller, two drivers: each scenario runs in-process and on a real Temporal dev
server, and must give the same checkpoints (nodes and resume evidence), stream records,
messages and outcome on both."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from durable_agent import (
    Agent,
    AgentBuilder,
    AgentError,
    AgentResumeEvidence,
    AgentStreamRecord,
    CallDeferred,
    DeferredToolResult,
    FunctionModel,
    ModelRetry,
    TestModel,
    ToolApprovalDecision,
    UsageLimits,
)
from durable_agent.engine.spec import agent_tree
from durable_agent.temporal import (
    AgentActivityConfig,
    AgentClient,
    AgentRegistration,
    AgentWorkflow,
    ApprovalSignal,
    DeferredResultSignal,
)

from .helpers import RecordingExecutor, call, normalized, text_response, tool_response
from .temporal_support import fast_activity, new_worker, start_agent, unique

Decision = ToolApprovalDecision | DeferredToolResult


@dataclass
class Scenario:
    build: Callable[[str], Agent[Any]]
    prompt: str = "go"
    decisions: list[Decision] = field(default_factory=list)


@dataclass
class Observed:
    evidence: list[AgentResumeEvidence]
    records: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    status: str
    error: tuple[str, str] | None = None


def lookup(city: str) -> str:
    return f"sunny in {city}"


async def slow_lookup(city: str) -> str:
    await asyncio.sleep(0)
    return f"sunny in {city}"


def deploy(env: str) -> str:
    return f"deployed to {env}"


def broken(city: str) -> str:
    raise RuntimeError(f"the weather service is down for {city}")


def dump() -> str:
    return "x" * 5_000


def ticket(subject: str) -> str:
    raise CallDeferred(f"ticket for {subject!r} needs a human")


class Forecast(BaseModel):
    city: str
    sunny: bool


def _model_down(messages: list[Any], info: Any) -> Any:
    raise RuntimeError("the model server is down")


def _retry_once() -> Callable[[Any], Any]:
    seen: list[int] = []

    def check(value: Any) -> Any:
        # Both drivers call validators with the attempt in ctx; the value decides here.
        if value.city != "Paris":
            seen.append(1)
            raise ModelRetry("the city must be Paris")
        return value

    return check


def _agent(name: str, model: TestModel, *tools: Any) -> AgentBuilder:
    return AgentBuilder(model).name(name).instructions("Be brief.").tools(list(tools))


SCENARIOS: dict[str, Scenario] = {
    "text": Scenario(lambda n: _agent(n, TestModel.with_text("hello there")).build()),
    "one_tool": Scenario(
        lambda n: _agent(
            n,
            TestModel.with_responses(
                [tool_response(call("lookup", "c1", city="Paris")), text_response("sunny")]
            ),
            lookup,
        ).build()
    ),
    "parallel_tools": Scenario(
        lambda n: _agent(
            n,
            TestModel.with_responses(
                [
                    tool_response(
                        call("slow_lookup", "p1", city="Paris"),
                        call("slow_lookup", "p2", city="Oslo"),
                        call("slow_lookup", "p3", city="Rome"),
                    ),
                    text_response("all sunny"),
                ]
            ),
            slow_lookup,
        ).build()
    ),
    "output_retry": Scenario(
        lambda n: (
            _agent(
                n,
                TestModel.with_responses(
                    [
                        text_response('{"city": "Lyon", "sunny": true}'),
                        text_response('{"city": "Paris", "sunny": true}'),
                    ]
                ),
            )
            .output_type(Forecast)
            .output_validator(_retry_once())
            .output_retries(2)
            .build()
        )
    ),
    "approval": Scenario(
        lambda n: (
            _agent(
                n,
                TestModel.with_responses(
                    [tool_response(call("deploy", "d1", env="prod")), text_response("done")]
                ),
                deploy,
            )
            .approval_required_tools(["deploy"])
            .build()
        ),
        decisions=[ToolApprovalDecision.approve(decided_by="alice")],
    ),
    "denial": Scenario(
        lambda n: (
            _agent(
                n,
                TestModel.with_responses(
                    [tool_response(call("deploy", "d1", env="prod")), text_response("not deployed")]
                ),
                deploy,
            )
            .approval_required_tools(["deploy"])
            .build()
        ),
        decisions=[ToolApprovalDecision.deny("change freeze", decided_by="bob")],
    ),
    "deferred": Scenario(
        lambda n: _agent(
            n,
            TestModel.with_responses(
                [tool_response(call("ticket", "t1", subject="disk")), text_response("filed")]
            ),
            ticket,
        ).build(),
        decisions=[DeferredToolResult("t1", "success", "ticket #42")],
    ),
    "repeated_tool_call_ids": Scenario(
        lambda n: _agent(
            n,
            TestModel.with_responses(
                [
                    tool_response(
                        call("lookup", "same", city="Paris"), call("lookup", "same", city="Oslo")
                    ),
                    text_response("both sunny"),
                ]
            ),
            lookup,
        ).build()
    ),
    "usage_limit": Scenario(
        lambda n: (
            _agent(
                n,
                TestModel.with_responses(
                    [tool_response(call("lookup", "c1", city="Paris")), text_response("sunny")]
                ),
                lookup,
            )
            .usage_limits(UsageLimits(request_limit=1))
            .build()
        )
    ),
    "failure": Scenario(
        lambda n: _agent(
            n,
            TestModel.with_responses(
                [tool_response(call("broken", "b1", city="Paris")), text_response("never")]
            ),
            broken,
        ).build()
    ),
    "oversized_tool_result": Scenario(
        lambda n: (
            _agent(
                n,
                TestModel.with_responses([tool_response(call("dump", "big")), text_response("ok")]),
                dump,
            )
            .max_tool_result_bytes(1_000)
            .build()
        )
    ),
    "empty_prompt": Scenario(
        lambda n: _agent(n, TestModel.with_text("unused")).build(), prompt="   "
    ),
    "subagent": Scenario(
        lambda n: (
            _agent(
                n,
                TestModel.with_responses(
                    [
                        tool_response(call(f"{n}-child", "s1", prompt="weather in Paris?")),
                        text_response("the child says sunny"),
                    ]
                ),
            )
            .subagent(
                _agent(
                    f"{n}-child",
                    TestModel.with_responses(
                        [tool_response(call("lookup", "c1", city="Paris")), text_response("sunny")]
                    ),
                    lookup,
                ).build()
            )
            .build()
        )
    ),
    "subagent_failure": Scenario(
        lambda n: (
            _agent(
                n,
                TestModel.with_responses(
                    [
                        tool_response(call(f"{n}-child", "s1", prompt="try")),
                        text_response("the child failed"),
                    ]
                ),
            )
            .subagent(
                _agent(f"{n}-child", TestModel.with_text("unused"))
                .usage_limits(UsageLimits(request_limit=0))
                .build()
            )
            .build()
        )
    ),
    "subagent_model_raises": Scenario(
        lambda n: (
            _agent(
                n,
                TestModel.with_responses(
                    [
                        tool_response(call(f"{n}-child", "s1", prompt="try")),
                        text_response("the child's model is down"),
                    ]
                ),
            )
            .subagent(AgentBuilder(FunctionModel(_model_down)).name(f"{n}-child").build())
            .build()
        )
    ),
}
"""A sub-agent waiting for a human is not in the matrix on purpose: on Temporal the parent
waits inside its tool call (the child holds the call), in-process it goes to `waiting` and
resumes, so their boundaries differ; their messages and usage agree (test_subagents)."""


def _records(records: list[AgentStreamRecord]) -> list[dict[str, Any]]:
    """Records without the ids each driver makes its own way (uuid4 vs workflow.uuid4)."""
    out = []
    for record in records:
        data = {
            k: v for k, v in record.data.items() if k not in ("checkpoint_id", "conversation_id")
        }
        if record.kind == "subagent_start":
            data.pop("workflow_id")  # the child's id starts with the workflow's or run's id
        out.append({"seq": record.seq, "kind": record.kind, "node": record.node, "data": data})
    return out


def _own(executor: RecordingExecutor) -> list[AgentResumeEvidence]:
    """The run's own boundaries: in-process its sub-agents' reach the same executor (each
    naming its parent), on Temporal they are their child workflows'."""
    return [c.resume for c in executor.checkpoints if c.metadata.parent_run_id is None]


async def run_in_process(scenario: Scenario, name: str = "in-process") -> Observed:
    executor = RecordingExecutor()
    agent = scenario.build(name).with_executor(executor)
    records: list[AgentStreamRecord] = []
    try:
        result = await agent.run(scenario.prompt, sink=records.append)
        if scenario.decisions:
            approvals = {
                p.tool_call_id: d
                for p, d in zip(result.pending_approvals, scenario.decisions, strict=False)
                if isinstance(d, ToolApprovalDecision)
            }
            deferred = [d for d in scenario.decisions if isinstance(d, DeferredToolResult)]
            result = await agent.resume_after_hitl(
                result.state, approvals=approvals, deferred_results=deferred, sink=records.append
            )
    except Exception as error:
        # A tool's own exception ends the run as it is; the agent's errors carry a kind.
        kind = error.kind if isinstance(error, AgentError) else type(error).__name__
        last = executor.checkpoints[-1].state if executor.checkpoints else None
        return Observed(
            evidence=_own(executor),
            records=_records(records),
            messages=normalized(last.message_history) if last else [],
            status="failed",
            error=(kind, str(error)),
        )
    return Observed(
        evidence=_own(executor),
        records=_records(records),
        messages=normalized(result.messages),
        status=result.status.value,
    )


async def run_on_temporal(client: Client, scenario: Scenario, name: str) -> Observed:
    fast = fast_activity(maximum_attempts=2, initial_interval=0.05, maximum_interval=0.05)
    config = AgentActivityConfig(
        prepare_model_request=fast, model_request=fast, tool_call=fast, validate_output=fast
    )
    # Sub-agents first: each agent of the tree gets these options, not a parent's defaults.
    tree = reversed(agent_tree(scenario.build(name)))
    hosted = [AgentRegistration(agent, config) for agent in tree]
    error: tuple[str, str] | None = None
    async with new_worker(client, agents=hosted) as worker:
        handle = await start_agent(client, worker, name, scenario.prompt)
        pending = list(scenario.decisions)
        result_task = asyncio.ensure_future(handle.result())
        while pending and not result_task.done():
            view = await handle.query(AgentWorkflow.status)
            if view.status != "waiting":
                await asyncio.sleep(0.05)
                continue
            decision = pending.pop(0)
            if isinstance(decision, ToolApprovalDecision):
                await handle.execute_update(
                    AgentWorkflow.submit_approval,
                    ApprovalSignal(
                        tool_call_id=view.pending_approvals[0].tool_call_id,
                        approved=decision.approved,
                        reason=decision.reason,
                        decided_by=decision.decided_by,
                    ),
                )
            else:
                await handle.execute_update(
                    AgentWorkflow.submit_deferred_result,
                    DeferredResultSignal(
                        tool_call_id=decision.tool_call_id,
                        status=decision.status,
                        response=decision.response,
                    ),
                )
        try:
            result = await asyncio.wait_for(result_task, 30)
            status = result.status
        except WorkflowFailureError as failure:
            cause = failure.cause
            assert isinstance(cause, ApplicationError), cause
            error = (cause.type or "", cause.message)
            status = "failed"
        evidence = (await handle.query(AgentWorkflow.checkpoints)).checkpoints
        latest = await handle.query(AgentWorkflow.latest_checkpoint)
        records = [r async for r in AgentClient(client).get(handle.id).stream()]
    messages = normalized(latest.state.message_history) if latest else []
    return Observed(evidence, _records(records), messages, status, error)


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_both_drivers_agree(client: Client, name: str) -> None:
    scenario = SCENARIOS[name]
    agent_name = unique("drivers")
    here = await run_in_process(scenario, agent_name)
    there = await run_on_temporal(client, scenario, agent_name)
    assert [e.node for e in there.evidence] == [e.node for e in here.evidence]
    assert there.evidence == here.evidence
    assert there.records == here.records
    assert there.messages == here.messages
    assert (there.status, there.error) == (here.status, here.error)


def test_the_matrix_covers_what_the_drivers_must_agree_on() -> None:
    """Each scenario exercises what its name says, so an empty observation cannot pass."""
    observed = {name: asyncio.run(run_in_process(s)) for name, s in SCENARIOS.items()}
    nodes = {name: [e.node.value for e in o.evidence] for name, o in observed.items()}
    assert nodes["text"][-1] == "run_complete"
    assert nodes["parallel_tools"].count("tool_call") == 3
    assert nodes["output_retry"].count("validate_output") == 2
    assert observed["approval"].status == "completed"
    assert "approval_denied" in str(observed["denial"].messages)
    assert "ticket #42" in str(observed["deferred"].messages)
    repeated = observed["repeated_tool_call_ids"]
    assert repeated.status == "completed"
    assert "call_1_1" in str(repeated.messages), "the second 'same' call got an id of its own"
    assert observed["usage_limit"].error is not None
    assert observed["usage_limit"].error[0] == "usage_limit_exceeded"
    assert observed["failure"].error == (
        "RuntimeError",
        "the weather service is down for Paris",
    )
    assert "[truncated by durable-agent" in str(observed["oversized_tool_result"].messages)
    assert observed["empty_prompt"].error == (
        "invalid_input",
        "the prompt is empty; send the task for the agent",
    )
    assert observed["empty_prompt"].evidence == []
    assert "the child says sunny" in str(observed["subagent"].messages)
    assert "'content': 'sunny'" in str(observed["subagent"].messages)
    assert "subagent_failed" in str(observed["subagent_failure"].messages)
    assert observed["subagent_failure"].status == "completed"
    down = observed["subagent_model_raises"]
    assert down.status == "completed", down.error
    assert "the model server is down" in str(down.messages)
    assert "subagent_failed" in str(down.messages)
    seqs = [r["seq"] for r in observed["approval"].records]
    assert seqs == list(range(len(seqs))), "stream numbering goes on after the decision"
