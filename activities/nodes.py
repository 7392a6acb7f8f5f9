"""One activity per working node, each a thin wrapper around `durable_agent.nodes`.

Activities look the agent up by name, heartbeat while user code runs (so cancellation
reaches them), and turn errors a retry cannot fix into non-retryable application errors.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta

import structlog
from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_agent import AgentError, ModelHTTPError, ModelRequest, ModelResponse, nodes
from workflows.history import extend_digest
from workflows.inputs import (
    ModelRequestActivityInput,
    PrepareActivityInput,
    ToolCallActivityInput,
    ValidateOutputActivityInput,
)

from .history_cache import history_cache
from .registry import registry

__all__ = [
    "ALL_ACTIVITIES",
    "model_request",
    "prepare_model_request",
    "tool_call",
    "validate_output",
]

log = structlog.get_logger("durable_agent.activities")


def _bind(agent: str, node: str, step: int) -> structlog.stdlib.BoundLogger:
    info = activity.info()
    bound: structlog.stdlib.BoundLogger = log.bind(
        workflow_id=info.workflow_id,
        run_id=info.workflow_run_id,
        agent=agent,
        node=node,
        step=step,
        attempt=info.attempt,
    )
    return bound


@contextlib.asynccontextmanager
async def _guard(agent: str, node: str, step: int) -> AsyncIterator[structlog.stdlib.BoundLogger]:
    """Heartbeats while the body runs and classifies what it raises."""
    logger = _bind(agent, node, step)
    timeout = activity.info().heartbeat_timeout
    beat: asyncio.Task[None] | None = None
    if timeout:
        interval = max(timeout.total_seconds() / 3, 0.05)

        async def heartbeat() -> None:
            while True:
                activity.heartbeat()
                await asyncio.sleep(interval)

        beat = asyncio.create_task(heartbeat())
    logger.info("activity started")
    try:
        yield logger
    except ModelHTTPError as error:
        logger.warning("model request failed", status=error.status_code, retryable=error.retryable)
        raise ApplicationError(
            error.message,
            {"status_code": error.status_code},
            type=error.kind,
            non_retryable=not error.retryable,
            next_retry_delay=timedelta(seconds=error.retry_after) if error.retry_after else None,
        ) from error
    except AgentError as error:
        logger.warning("activity failed", kind=error.kind, error=error.message)
        raise ApplicationError(
            error.message, type=error.kind, non_retryable=not error.retryable
        ) from error
    except Exception as error:
        logger.warning("activity attempt failed; Temporal retries it", error=repr(error))
        raise
    else:
        logger.info("activity completed")
    finally:
        if beat is not None:
            beat.cancel()


@activity.defn(name="prepare_model_request")
async def prepare_model_request(input: PrepareActivityInput) -> ModelRequest:
    async with _guard(input.agent, "prepare_model_request", input.input.run_step):
        agent = registry.get(input.agent).agent
        return await nodes.prepare_model_request(agent, input.input)


@activity.defn(name="model_request")
async def model_request(input: ModelRequestActivityInput) -> ModelResponse:
    async with _guard(input.agent, "model_request", input.input.run_step + 1) as logger:
        agent = registry.get(input.agent).agent
        prefix = await history_cache.resolve(input.history)
        new = input.input.messages
        messages = [*prefix, *new]
        response = await nodes.model_request(
            agent, input.input.model_copy(update={"messages": messages})
        )
        history_cache.store(
            input.history,
            [*messages, response],
            extend_digest(input.history.digest, [*new, response]),
        )
        logger.info("model responded", parts=len(response.parts), history=len(messages))
        return response


@activity.defn(name="tool_call")
async def tool_call(input: ToolCallActivityInput) -> nodes.ToolCallOutcome:
    call = input.input.call
    async with _guard(input.agent, f"tool_call:{call.name}", input.input.run_step):
        agent = registry.get(input.agent).agent
        return await nodes.tool_call(agent, input.input, sync_in_thread=True)


@activity.defn(name="validate_output")
async def validate_output(input: ValidateOutputActivityInput) -> nodes.OutputOutcome:
    async with _guard(input.agent, "validate_output", input.input.run_step):
        agent = registry.get(input.agent).agent
        return await nodes.validate_output(agent, input.input)


ALL_ACTIVITIES = (prepare_model_request, model_request, tool_call, validate_output)
