"""Model failures: transient ones are retried within the policy, permanent ones fail the run
promptly, and neither leaves a workflow stuck on failing workflow tasks."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError

from durable_agent.temporal import AgentWorkflow
from durable_agent.temporal.devserver import DevServer

from .support import Faults

pytestmark = pytest.mark.server


async def test_transient_model_errors_recover(dev_server: DevServer, tmp_path: Path) -> None:
    async with Faults(dev_server.address, tmp_path, "flaky") as faults:
        await faults.start_worker()
        handle = await faults.start_run("fault-flaky", "hello")
        result = await faults.result(handle, timeout=30)
        events = await faults.event_types(handle)
        history = await handle.fetch_history()

        assert result.output == "recovered"
        assert result.status == "completed"
        # 503, 503, TimeoutError, then success: four attempts of one request, one response.
        assert [row[2] for row in faults.lines("model_requests", handle.id)] == ["1", "2", "3", "4"]
        assert faults.steps("model_responses", handle.id) == [1]
        assert result.usage.requests == 1
        assert "WORKFLOW_TASK_FAILED" not in events
        assert "ACTIVITY_TASK_FAILED" not in events  # retries happen inside one activity
        started = [
            e.activity_task_started_event_attributes.attempt
            for e in history.events
            if e.HasField("activity_task_started_event_attributes")
        ]
        assert 4 in started, started
        assert events[-1] == "WORKFLOW_EXECUTION_COMPLETED"


async def test_permanent_model_error_fails_the_run(dev_server: DevServer, tmp_path: Path) -> None:
    async with Faults(dev_server.address, tmp_path, "bad-request") as faults:
        await faults.start_worker()
        began = time.monotonic()
        handle = await faults.start_run("fault-bad-request", "hello")
        with pytest.raises(WorkflowFailureError) as failure:
            await faults.result(handle, timeout=30)
        waited = time.monotonic() - began
        description = await handle.describe()
        events = await faults.event_types(handle)
        view = await handle.query(AgentWorkflow.status)

        cause = failure.value.cause
        assert isinstance(cause, ApplicationError), repr(cause)
        assert cause.type == "model_http_error"
        assert "context length exceeded" in cause.message
        assert cause.non_retryable
        # The activity's own failure is kept as the cause chain, not retried.
        assert not isinstance(cause, ActivityError)
        assert faults.steps("model_requests", handle.id) == [1], "a 400 must not be retried"
        assert description.status == WorkflowExecutionStatus.FAILED
        assert description.close_time is not None
        closed_after = (description.close_time - description.start_time).total_seconds()
        assert closed_after < 5, f"the run took {closed_after:.1f}s to fail"
        assert waited < 10
        assert "WORKFLOW_TASK_FAILED" not in events, events
        assert events[-1] == "WORKFLOW_EXECUTION_FAILED"
        assert view.status == "failed"
        assert view.error is not None
        assert view.error.startswith("model_http_error")
