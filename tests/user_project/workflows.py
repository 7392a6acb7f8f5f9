"""The user's workflow: the inventory agent answers as a child workflow, then the user's
own activity files a report on that answer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities import file_report
    from durable_agent.temporal import AgentWorkflow, AgentWorkflowInput


@dataclass
class StockQuestion:
    sku: str


@dataclass
class StockAnswer:
    agent_output: str
    report: str
    agent_workflow_id: str


@workflow.defn
class ParentWorkflow:
    @workflow.run
    async def run(self, question: StockQuestion) -> StockAnswer:
        child_id = f"{workflow.info().workflow_id}-agent"
        result = await workflow.execute_child_workflow(
            AgentWorkflow.run,
            AgentWorkflowInput(agent="inventory", prompt=f"How many {question.sku} are left?"),
            id=child_id,
        )
        report = await workflow.execute_activity(
            file_report, str(result.output), start_to_close_timeout=timedelta(seconds=30)
        )
        return StockAnswer(
            agent_output=str(result.output), report=report, agent_workflow_id=child_id
        )
