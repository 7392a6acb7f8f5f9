"""The working nodes, as plain async functions of serializable inputs.

The in-process runner calls these directly; each Temporal activity is a thin wrapper that
looks the agent up by name and calls the same function. No agent logic lives elsewhere.
What they take and return (`RunRef`, the inputs, the outcomes) is in `node_io`, and
importable from here too.
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import Executor
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, to_json, to_jsonable_python

from ..contract._fields import replaced, trusted
from ..contract.environment import ENVIRONMENT_REF, Workspace
from ..contract.errors import (
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    ToolResultNotSerializable,
    ToolResultTooLarge,
    UserError,
    WorkspaceError,
)
from ..contract.messages import (
    InstructionPart,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,
    TextContent,
    ToolCall,
    ToolCallPart,
    ToolReturn,
    UserPromptPart,
)
from ..contract.tools import ToolContext
from ..contract.toolsets import ToolsetListing, ToolsetResult, ToolsetTool
from ..environments import EnvironmentHost, default_host
from ..models.base import DeltaSink, Model
from . import telemetry
from .node_io import (
    ListToolsInput,
    ModelRequestInput,
    OutputOk,
    OutputOutcome,
    OutputOutcomeAdapter,
    OutputRetry,
    PrepareModelRequestInput,
    RunRef,
    ToolApprovalNeeded,
    ToolCallInput,
    ToolCallOutcome,
    ToolCallOutcomeAdapter,
    ToolDeferred,
    ToolRetry,
    ToolReturned,
    ValidateOutputInput,
    WorkspaceMergeInput,
)
from .output import format_validation_error, parse_output, run_output_validator
from .pricing import price_response
from .spec import AgentSpec

__all__ = [
    "ListToolsInput",
    "ModelRequestInput",
    "OutputOk",
    "OutputOutcome",
    "OutputOutcomeAdapter",
    "OutputRetry",
    "PrepareModelRequestInput",
    "RunRef",
    "ToolApprovalNeeded",
    "ToolCallInput",
    "ToolCallOutcome",
    "ToolCallOutcomeAdapter",
    "ToolDeferred",
    "ToolReturned",
    "ToolRetry",
    "ValidateOutputInput",
    "WorkspaceMergeInput",
    "limit_tool_result",
    "list_tools",
    "model_request",
    "prepare_model_request",
    "tool_call",
    "unknown_tool",
    "validate_output",
]


def _context(ref: RunRef, **fields: Any) -> ToolContext:
    return ToolContext(
        run_id=ref.run_id,
        conversation_id=ref.conversation_id,
        run_step=ref.run_step,
        metadata=ref.metadata,
        **fields,
    )


async def prepare_model_request(agent: AgentSpec, input: PrepareModelRequestInput) -> ModelRequest:
    """Renders the parts that come from outside the conversation: instructions and prompt."""
    parts: list[ModelRequestPart] = []
    if input.include_instructions:
        instructions = await agent.render_instructions(
            _context(input, tool_name="instructions", tool_call_id="")
        )
        if instructions:
            parts.append(InstructionPart(content=instructions))
    if input.prompt is not None:
        parts.append(UserPromptPart(content=[TextContent(text=input.prompt)]))
    return ModelRequest(
        parts=parts,
        run_id=input.run_id,
        conversation_id=input.conversation_id,
        timestamp=input.timestamp,
    )


async def model_request(
    agent: AgentSpec, input: ModelRequestInput, *, on_delta: DeltaSink | None = None
) -> ModelResponse:
    """Asks the agent's model. With `on_delta` a streaming model hands its text and thinking
    over as it writes them (a model that does not stream just answers); without, even a
    streaming model is asked for the whole response at once, so streaming off costs nothing."""
    messages = agent.process_history(input.messages)
    params = agent.request_parameters(input.toolset_tools)

    async def ask(model: Model) -> ModelResponse:
        # Per model asked: a `FallbackModel` asks its members through here, one span each.
        with telemetry.chat_span(
            agent.name, model.model_name, model.provider, messages, settings=params.settings
        ) as span:
            if on_delta is not None and model.streams:
                response = await model.request_stream(messages, params, on_delta)
            else:
                response = await model.request(messages, params)
            response = price_response(response, model, input.timestamp)
            span.record(response)
        return response

    response = await agent.model.answer(ask)
    return replaced(
        response,
        parts=unique_tool_call_ids(response.parts, input.run_step + 1),
        run_id=input.run_id,
        conversation_id=input.conversation_id,
        timestamp=input.timestamp,
    )


def unique_tool_call_ids(parts: list[ModelResponsePart], step: int) -> list[ModelResponsePart]:
    """Gives empty or repeated tool call ids (OpenAI-compatible servers send both) ids of
    their own, derived from the step and position so a retried request gives the same ones.

    Every later step tells calls apart by id; two calls sharing one would loop forever.
    """
    seen: set[str] = set()
    out: list[ModelResponsePart] = []
    for index, part in enumerate(parts):
        if isinstance(part, ToolCallPart):
            if not part.id or part.id in seen:
                fresh = f"call_{step}_{index}"
                while fresh in seen:
                    fresh += "_"
                part = part.model_copy(update={"id": fresh})
            seen.add(part.id)
        out.append(part)
    return out


def _retry(call: ToolCall, message: str) -> ToolRetry:
    return ToolRetry(
        tool_return=ToolReturn(
            tool_call_id=call.id, name=call.name, content=message, is_error=True, retry=True
        ),
    )


def unknown_tool(call: ToolCall, available: list[str]) -> ToolCallOutcome:
    """The retry prompt for a call of a tool the agent does not have."""
    names = ", ".join(available) or "none"
    return _retry(call, f"Unknown tool name: {call.name!r}. Available tools: {names}")


async def list_tools(agent: AgentSpec, input: ListToolsInput) -> ToolsetListing:
    """Asks one of the agent's toolsets for its tools (it must be open)."""
    return await agent.toolset(input.toolset).list_tools()


async def tool_call(
    agent: AgentSpec,
    input: ToolCallInput,
    *,
    executor: Executor | None = None,
    environments: EnvironmentHost | None = None,
) -> ToolCallOutcome:
    """Runs one call. Workers pass an `executor` for sync tools so a blocking tool cannot
    stall them, and their `environments` (default: this process's) for runs that have a
    workspace."""
    with telemetry.tool_span(agent.name, input) as span:
        ref = input.metadata.get(ENVIRONMENT_REF) if input.metadata else None
        if ref is None:
            outcome = await _tool_call(agent, input, executor, None)
        else:
            host = environments or default_host()
            outcome = await _in_environment(agent, input, executor, host, ref)
        span.record(outcome)
    return outcome


async def _in_environment(
    agent: AgentSpec,
    input: ToolCallInput,
    executor: Executor | None,
    host: EnvironmentHost,
    ref: object,
) -> ToolCallOutcome:
    """The call with its workspace at the ref it starts from: on a return, what it changed
    is stored and named in the outcome; anything else (it raised, asked to retry, waits
    for a human) changes nothing."""
    session = host.open(ref, input.run_id, agent.workspace)
    workspace = session if isinstance(session, Workspace) else None
    tool = agent.tools.get(input.call.name) if input.toolset_tool is None else None
    try:
        if tool is not None and tool.is_async and tool.takes_ctx:
            # an async tool runs on the event loop: restore first, in a thread
            await asyncio.to_thread(session.prepare)
        outcome = await _tool_call(agent, input, executor, workspace)
    except WorkspaceError as error:
        session.discard()
        return _workspace_error(input.call, error)
    except BaseException:
        session.discard()
        raise
    if session.failure is not None or not isinstance(outcome, ToolReturned):
        session.discard()
        if session.failure is not None:
            raise session.failure
        return outcome
    try:
        change = await host.commit(session)
    except WorkspaceError as error:
        return _workspace_error(input.call, error)
    return outcome if change is None else replaced(outcome, workspace=change)


def _workspace_error(call: ToolCall, error: WorkspaceError) -> ToolCallOutcome:
    """What the workspace refused, as the tool's error return the model reads."""
    return ToolReturned(
        tool_return=ToolReturn(
            tool_call_id=call.id,
            name=call.name,
            content=f"workspace error: {error.message}",
            is_error=True,
            error_kind=error.kind,
        )
    )


async def _tool_call(
    agent: AgentSpec, input: ToolCallInput, executor: Executor | None, workspace: Workspace | None
) -> ToolCallOutcome:
    call = input.call
    if input.toolset_tool is not None:
        return await _toolset_call(agent, input, input.toolset_tool, workspace)
    tool = agent.tools.get(call.name)
    if tool is None:
        return unknown_tool(call, sorted(agent.tools))
    arguments = _arguments(input)
    if isinstance(arguments, ToolRetry):
        return arguments
    try:
        validated = tool.validate_arguments(arguments)
    except ValidationError as exc:
        return _retry(call, format_validation_error(exc))
    started = time.perf_counter()
    try:
        result = await tool.call(_tool_context(input, workspace), validated, executor=executor)
    except (ModelRetry, ApprovalRequired, CallDeferred) as exc:
        return _stopped(input, exc)
    tool_return = trusted(
        ToolReturn,
        tool_call_id=call.id,
        name=call.name,
        content=_jsonable(result, call),
        is_error=False,
        error_kind=None,
        retry=False,
        metadata=_duration(started),
    )
    return trusted(
        ToolReturned,
        kind="return",
        tool_return=limit_tool_result(agent, tool_return),
        toolset_changed=False,
        usage=None,
        workspace=None,
    )


def _stopped(
    input: ToolCallInput, exc: ModelRetry | ApprovalRequired | CallDeferred
) -> ToolCallOutcome:
    """What a tool's control-flow exception means for the run, the same for function and
    toolset tools: a retry prompt, a wait for approval, or a deferred result."""
    call = input.call
    if isinstance(exc, ModelRetry):
        return _retry(call, exc.message)
    if isinstance(exc, CallDeferred):
        return ToolDeferred(reason=exc.reason, metadata=exc.metadata)
    if input.approved:
        raise UserError(
            f"tool {call.name!r} raised ApprovalRequired for call {call.id!r} after it was "
            "approved; check ctx.approved before asking again"
        ) from exc
    return ToolApprovalNeeded(reason=exc.reason, metadata=exc.metadata)


def _arguments(input: ToolCallInput) -> dict[str, Any] | ToolRetry:
    """The arguments to run with: a human's override, else the model's (decoded), or the
    retry prompt for arguments that are not a JSON object."""
    if input.override_arguments is not None:
        return input.override_arguments
    try:
        return input.call.arguments_dict()
    except (json.JSONDecodeError, ValueError) as exc:
        return _retry(input.call, f"The arguments are not a valid JSON object: {exc}. Try again.")


def _duration(started: float) -> dict[str, Any]:
    # Whole microseconds: finer digits are noise, and would be written into every history.
    micros = round((time.perf_counter() - started) * 1_000_000)
    return {"duration_ms": micros // 1000, "duration_seconds": micros / 1_000_000}


def _tool_context(input: ToolCallInput, workspace: Workspace | None) -> ToolContext:
    call = input.call
    return _context(
        input,
        tool_name=call.name,
        tool_call_id=call.id,
        retry=input.retry,
        approved=input.approved,
        idempotency_key=input.idempotency_key or f"{input.run_id}:{call.id}",
        workspace=workspace,
    )


async def _toolset_call(
    agent: AgentSpec, input: ToolCallInput, tool: ToolsetTool, workspace: Workspace | None
) -> ToolCallOutcome:
    """A toolset tool's call: the same checks and control flow as a function tool's, with
    the arguments checked against the schema the run listed and the toolset running it."""
    call = input.call
    toolset = agent.toolset(tool.toolset)
    arguments = _arguments(input)
    if isinstance(arguments, ToolRetry):
        return arguments
    problem = toolset.argument_problem(tool, arguments)
    if problem is not None:
        return _retry(call, problem)
    started = time.perf_counter()
    try:
        result: ToolsetResult = await toolset.call_tool(
            _tool_context(input, workspace), tool, arguments
        )
    except (ModelRetry, ApprovalRequired, CallDeferred) as exc:
        return _stopped(input, exc)
    tool_return = ToolReturn(
        tool_call_id=call.id,
        name=call.name,
        content=_jsonable(result.content, call),
        is_error=result.is_error,
        error_kind=result.error_kind,
        metadata={**result.metadata, **_duration(started)},
    )
    changed = input.toolset_digest is not None and await toolset.tools_changed(input.toolset_digest)
    return ToolReturned(tool_return=limit_tool_result(agent, tool_return), toolset_changed=changed)


def _jsonable(result: object, call: ToolCall) -> Any:
    """The result as JSON data, or a failure no retry can fix: the tool already ran, and a
    retried attempt would only run it again."""
    if type(result) is str:
        return result
    try:
        data = to_jsonable_python(result)
        json.dumps(data)
    except (PydanticSerializationError, TypeError, ValueError) as exc:
        raise ToolResultNotSerializable(
            f"tool {call.name!r} (call {call.id}) returned a {type(result).__name__}, which "
            f"cannot be sent to the model as JSON ({exc}); return str, numbers, lists, dicts "
            "or pydantic models"
        ) from exc
    return data


def limit_tool_result(agent: AgentSpec, result: ToolReturn) -> ToolReturn:
    """Applies the agent's `max_tool_result_bytes`, so one huge result cannot fill the
    model's context (or, on Temporal, the run's history). Sizes are UTF-8 bytes of the JSON
    the payload carries (an emoji is four bytes, not a twelve-byte `\\ud83d\\ude80` escape)."""
    content = result.content
    if isinstance(content, str):
        encoded = content.encode("utf-8", "surrogatepass")
    else:
        encoded = to_json(content)
    size = len(encoded)
    limit = agent.max_tool_result_bytes
    if size <= limit:
        return result
    if agent.oversized_tool_result == "fail":
        raise ToolResultTooLarge(
            f"tool {result.name!r} (call {result.tool_call_id}) returned {size} bytes, over "
            f"max_tool_result_bytes={limit}; return less (or a reference to the data), or "
            "raise the limit with AgentBuilder.max_tool_result_bytes(...)"
        )
    kept = encoded[: max(limit - 200, 0)].decode(errors="ignore")
    return result.model_copy(
        update={
            "content": f"{kept}\n[truncated by durable-agent: the tool returned {size} bytes, "
            f"the limit is {limit}]",
            "metadata": {**result.metadata, "truncated_from_bytes": size},
        }
    )


async def validate_output(agent: AgentSpec, input: ValidateOutputInput) -> OutputOutcome:
    try:
        value = parse_output(agent.output_type, input.response)
        ctx = _context(input, tool_name="output", tool_call_id="", retry=input.attempt)
        for validator in agent.output_validators:
            value = await run_output_validator(validator, ctx, value)
    except ModelRetry as exc:
        return OutputRetry(retry_prompt=RetryPromptPart(content=exc.message))
    if isinstance(value, BaseModel):
        structured = value.model_dump(mode="json")
        return OutputOk(output=json.dumps(structured), structured_output=structured)
    return OutputOk(output=to_jsonable_python(value))
