"""The metrics workflow code records: runs ended, approvals waiting, time to a decision.

Live only (callers check the workflow is not replaying, or record from code that runs only
live), outside the sandbox's restrictions (an exporter may do I/O), and never failing the
workflow task. The model and tool metrics of the GenAI conventions are the activities'
(`durable_agent.telemetry`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog
from temporalio import workflow

from durable_agent.contract.records import ApprovalDecidedData, ApprovalRequestedData
from durable_agent.engine import telemetry

__all__ = ["approvals_waiting", "decision_duration", "run_ended"]

log = structlog.get_logger("durable_agent.tracing")


def run_ended(agent: str, failure: Any, error: BaseException | None) -> None:
    """`durable_agent.runs`: runs that ended, by agent and how they ended."""
    if isinstance(error, asyncio.CancelledError):
        status = "cancelled"
    else:
        status = "failed" if failure is not None else "completed"
    attributes = {"gen_ai.agent.name": agent, "durable_agent.status": status}
    _record(
        "durable_agent.runs",
        lambda meter: meter.create_counter(
            "durable_agent.runs", unit="{run}", description="Agent runs ended"
        ).add(1, attributes),
    )


def approvals_waiting(data: ApprovalRequestedData | ApprovalDecidedData) -> None:
    """`durable_agent.approvals.waiting`: calls waiting for a human's approval, by tool (an
    up-down counter: +1 when a call starts waiting, -1 when it is decided). Live only, so
    the sum over every worker that ever ran the run is what waits now."""
    if workflow.unsafe.is_replaying_history_events():
        return
    tool = data.tool_name or "tool"
    change = 1 if isinstance(data, ApprovalRequestedData) else -1
    _record(
        "durable_agent.approvals.waiting",
        lambda meter: meter.create_up_down_counter(
            "durable_agent.approvals.waiting",
            unit="{call}",
            description="Tool calls waiting for an approval",
        ).add(change, {"gen_ai.tool.name": tool}),
    )


def decision_duration(kind: str, tool: str, seconds: float) -> None:
    """`durable_agent.human.decision.duration`: from a run's wait to a human's decision."""
    _record(
        "durable_agent.human.decision.duration",
        lambda meter: meter.create_histogram(
            "durable_agent.human.decision.duration",
            unit="s",
            description="From a run's wait to a human's decision",
        ).record(seconds, {"durable_agent.human.decision": kind, "gen_ai.tool.name": tool}),
    )


def _record(name: str, record: Callable[[Any], None]) -> None:
    try:
        with workflow.unsafe.sandbox_unrestricted(), workflow.unsafe.imports_passed_through():
            from opentelemetry import metrics

            record(metrics.get_meter(telemetry.INSTRUMENTATION))
    except Exception as error:
        log.warning("could not record a workflow metric", metric=name, error=repr(error))
