"""One activity per working node, each a thin wrapper around `durable_agent.nodes`.

Activities look the agent up by name, heartbeat while user code runs (so cancellation
reaches them), and turn errors a retry cannot fix into non-retryable application errors.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any, TypeVar

import structlog
from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_agent import AgentError, ModelHTTPError, ModelRequest, ModelResponse
from durable_agent.contract.environment import ENVIRONMENT_REF, EnvironmentChange
from durable_agent.contract.toolsets import ToolsetListing
from durable_agent.engine import nodes
from durable_agent.engine.quotas import model_key
from durable_agent.engine.spec import AgentSpec
from durable_agent.environments import EnvironmentHost
from durable_agent.models.fallback import FallbackModel
from durable_agent.temporal.wire import (
    ListToolsActivityInput,
    ModelRequestActivityInput,
    PrepareActivityInput,
    ToolCallActivityInput,
    ValidateOutputActivityInput,
    WorkspaceMergeActivityInput,
)

from .compaction.caches import PayloadCaches
from .compaction.format import pack_response, pack_tool_outcome
from .compaction.resolver import remember_answer, resolve_request, resolve_tool_call
from .deltas import DeltaPublisher
from .forks import load_checkpoint
from .hosting import Hosting
from .quota.activities import pause_key, tell_sent, wait_for_slot
from .registry import AgentRegistration
from .tool_threads import ToolThreads
from .toolsets import ToolsetPool

__all__ = ["NodeActivities"]

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
    """Heartbeats while the body runs and classifies what it raises.

    The first heartbeat is due a third of the heartbeat timeout in, from a timer rather
    than a task: most node activities are over long before, and never pay for one."""
    logger = _bind(agent, node, step)
    timeout = activity.info().heartbeat_timeout
    beat = _Heartbeat(timeout.total_seconds()) if timeout else None
    logger.debug("activity started")
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


class _Heartbeat:
    """Heartbeats every third of the heartbeat timeout, from timers of the event loop.

    An object rather than a closure that schedules itself: such a closure refers to itself,
    a cycle that kept every activity's context (its info, its timer, the context variables)
    alive until the garbage collector found it."""

    def __init__(self, timeout: float) -> None:
        self._interval = max(timeout / 3, 0.05)
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(self._interval, self._beat)

    def _beat(self) -> None:
        activity.heartbeat()
        self._timer = self._loop.call_later(self._interval, self._beat)

    def cancel(self) -> None:
        """Cancelling the timer drops its callback, the one reference back to this object."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class NodeActivities:
    """The node activities of one worker, bound to the parts of its `WorkerRuntime` they
    use: the agents they look up (and the quotas, in `hosting`), the caches they rebuild
    packed inputs from, the threads and toolsets they run tools on are that worker's own."""

    def __init__(
        self,
        hosting: Hosting,
        caches: PayloadCaches,
        tool_threads: ToolThreads,
        toolsets: ToolsetPool,
        environments: Callable[[], EnvironmentHost],
    ) -> None:
        self._hosting = hosting
        self._caches = caches
        self._tool_threads = tool_threads
        self._toolsets = toolsets
        self._environments = environments

    def all(self) -> list[Callable[..., Any]]:
        """Every activity a worker hosting agents runs (`load_checkpoint` keeps no state)."""
        return [
            self.prepare_model_request,
            self.model_request,
            self.list_tools,
            self.tool_call,
            self.validate_output,
            self.workspace_merge,
            load_checkpoint,
        ]

    def _registration(self, name: str) -> AgentRegistration:
        return self._hosting.agents.get(name)

    @activity.defn(name="prepare_model_request")
    async def prepare_model_request(self, input: PrepareActivityInput) -> ModelRequest:
        async with _guard(input.agent, "prepare_model_request", input.input.run_step):
            agent = self._hosting.agents.agent_for(input.agent, input.overrides)
            return _checked(
                await nodes.prepare_model_request(agent, input.input), "prepare_model_request"
            )

    @activity.defn(name="model_request")
    async def model_request(self, input: ModelRequestActivityInput) -> dict[str, Any]:
        step = input.input.run_step if input.input is not None else input.run_step
        async with _guard(input.agent, "model_request", step + 1) as logger:
            registration = self._registration(input.agent)
            agent = self._hosting.agents.agent_for(input.agent, input.overrides)
            info = activity.info()
            workflow_id, run_id = info.workflow_id, info.workflow_run_id
            if workflow_id is None or run_id is None:
                raise ApplicationError(
                    "model_request reads its history from its workflow; run it from AgentWorkflow",
                    type="not_in_workflow",
                    non_retryable=True,
                )
            caches = self._caches
            request, digest = await resolve_request(caches, input, workflow_id, run_id)
            member = input.model_index
            # The keeper hears of the send while the request is on its way (the signal
            # carries the send's time); it is heard before this activity's result, so
            # before the run's release.
            told = None
            if input.quota is not None:
                await wait_for_slot(input.quota)
                told = asyncio.ensure_future(tell_sent(activity.client(), input.quota))
            with FallbackModel.pinned(member) if member is not None else contextlib.nullcontext():
                try:
                    if input.stream_deltas and agent.model.streams:
                        attempt = (member or 0) * FALLBACK_ATTEMPT_STRIDE + info.attempt
                        interval = registration.activities.delta_flush_interval
                        response = await _streamed(
                            agent, request, workflow_id, run_id, attempt, interval
                        )
                    else:
                        response = await nodes.model_request(agent, request)
                except ModelHTTPError as error:
                    await self._refused(agent, info.task_queue, error)
                    raise
                finally:
                    if told is not None:
                        await told
            remember_answer(
                caches, workflow_id, request, response, digest, waits=agent.needs_approval
            )
            logger.debug(
                "model responded", parts=len(response.parts), history=len(request.messages)
            )
            return _checked(pack_response(response), "model_request")

    async def _refused(self, agent: AgentSpec, task_queue: str, error: ModelHTTPError) -> None:
        """A 429 for a key with a quota here pauses the key for every run of the queue."""
        key = model_key(agent.model)
        if error.status_code == 429 and key in self._hosting.quotas:
            await pause_key(activity.client(), task_queue, key, error)

    @activity.defn(name="list_tools")
    async def list_tools(self, input: ListToolsActivityInput) -> ToolsetListing:
        """Lists one toolset's tools for a run; the workflow keeps the listing in its state,
        so neither a later step nor a replay asks the server again."""
        name = input.input.toolset
        async with _guard(input.agent, f"list_tools:{name}", input.input.run_step) as logger:
            agent = self._registration(input.agent).agent
            await self._toolsets.acquire(agent.toolset(name))
            listing = await nodes.list_tools(agent, input.input)
            logger.info("tools listed", toolset=name, tools=len(listing.tools))
            return _checked(listing, f"list_tools of {name!r}")

    @activity.defn(name="tool_call")
    async def tool_call(self, input: ToolCallActivityInput) -> dict[str, Any]:
        call = input.input.call
        async with _guard(input.agent, f"tool_call:{call.name}", input.input.run_step) as logger:
            agent = self._registration(input.agent).agent
            info = activity.info()
            request = resolve_tool_call(input, info.workflow_id or "")
            if request.toolset_tool is not None:
                await self._toolsets.acquire(agent.toolset(request.toolset_tool.toolset))
            threads = self._tool_threads.executor()
            environments = self._environments() if ENVIRONMENT_REF in request.metadata else None
            outcome = await nodes.tool_call(
                agent, request, executor=threads, environments=environments
            )
            if isinstance(outcome, nodes.ToolReturned):
                size = outcome.tool_return.metadata.get("truncated_from_bytes")
                if size is not None:
                    logger.warning("tool result truncated", size=size)
                if info.workflow_id is not None:
                    self._caches.tool_returns.store(info.workflow_id, outcome.tool_return)
            return _checked(
                pack_tool_outcome(
                    outcome, call.id, call.name, request.metadata.get(ENVIRONMENT_REF)
                ),
                f"tool {call.name!r} (call {call.id})",
            )

    @activity.defn(name="validate_output")
    async def validate_output(self, input: ValidateOutputActivityInput) -> nodes.OutputOutcome:
        async with _guard(input.agent, "validate_output", input.input.run_step):
            agent = self._registration(input.agent).agent
            outcome = _checked(await nodes.validate_output(agent, input.input), "validate_output")
            workflow_id = activity.info().workflow_id
            if isinstance(outcome, nodes.OutputOk) and workflow_id is not None:
                self._caches.histories.forget(workflow_id)
            return outcome

    @activity.defn(name="workspace_merge")
    async def workspace_merge(self, input: WorkspaceMergeActivityInput) -> EnvironmentChange:
        """Merges the workspace changes of one response's calls in the worker's store (only
        refs come in and go out)."""
        request = input.input
        async with _guard(input.agent, "workspace_merge", request.run_step):
            spec = self._registration(input.agent).agent.workspace
            host = self._environments()
            return await host.merge(request.base, request.current, request.changes, spec)


FALLBACK_ATTEMPT_STRIDE = 1000
"""The attempts of a `FallbackModel`'s member `i` are numbered from `i * 1000 + 1` in its
deltas, so a later member's text supersedes an earlier one's as a retry's does."""


async def _streamed(
    agent: AgentSpec,
    request: nodes.ModelRequestInput,
    workflow_id: str,
    run_id: str,
    attempt: int,
    interval: timedelta,
) -> ModelResponse:
    """The model request with its deltas signalled to this run as they arrive, marked with
    this attempt so the workflow can tell a retry's text from the attempt it replaces."""
    handle = activity.client().get_workflow_handle(workflow_id, run_id=run_id)
    publisher = DeltaPublisher(
        handle, run_step=request.run_step + 1, attempt=attempt, interval=interval.total_seconds()
    )
    async with publisher:
        return await nodes.model_request(agent, request, on_delta=publisher.add)


PAYLOAD_LIMIT_BYTES = 1_900_000
"""Just under Temporal's default 2 MB payload limit, above which the server rejects a result."""

R = TypeVar("R", bound=BaseModel | dict[str, Any])
"""Any activity result: a pydantic model, or a packed one (`compact`)."""


def _checked(result: R, what: str) -> R:
    """Fails clearly (and for good) instead of letting the server reject the payload.
    Measured as the worker's payload converter writes it: bytes, not characters."""
    size = activity.payload_converter().to_payload(result).ByteSize()
    if size > PAYLOAD_LIMIT_BYTES:
        raise ApplicationError(
            f"{what} produced {size} bytes, more than Temporal accepts in one payload "
            f"({PAYLOAD_LIMIT_BYTES}); return a reference to large data instead",
            type="payload_too_large",
            non_retryable=True,
        )
    return result
