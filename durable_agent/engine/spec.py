"""An agent's configuration as plain data the engine reads: `AgentSpec` and `SubAgent`.

The loop, the nodes and the run controller read an agent only through these: its tools,
model, limits and sub-agents, and the few questions asked of them (does this tool need
approval, which toolset is this, what does the model see). `durable_agent.Agent` is an
`AgentSpec` that can also run itself in-process; the Temporal integration hosts the same
objects on a worker.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from ..contract.checkpoint import AgentExecutor, DirectAgentExecutor
from ..contract.errors import InvalidInput, UserError
from ..contract.messages import ModelMessage, ToolCall
from ..contract.tools import OUTPUT_TOOL_NAME, ToolContext, ToolDefinition
from ..contract.toolsets import Toolset
from ..contract.usage import UsageLimits
from ..environments.workspace.spec import WorkspaceSpec
from ..models.base import Model, ModelRequestParameters, ModelSettings
from .approvers import ApproverMap
from .history_processors import HistoryProcessor, apply_history_processors
from .output import OutputValidator
from .overrides import AgentOverrides, merge_settings
from .tools import Tool

__all__ = [
    "AgentSpec",
    "Instructions",
    "OversizedToolResult",
    "SubAgent",
    "SubagentArguments",
    "agent_tree",
    "default_description",
]

OversizedToolResult = Literal["truncate", "fail"]
Instructions = str | Callable[[ToolContext], str | Awaitable[str]]


class SubagentArguments(BaseModel):
    """What the parent's model sends a sub-agent: the task, as a prompt."""

    model_config = ConfigDict(extra="forbid")
    prompt: str


_SCHEMA = SubagentArguments.model_json_schema()


@dataclass(frozen=True)
class AgentSpec:
    """An agent's configuration as the engine reads it: immutable, with the questions the
    loop and the nodes ask of it. `durable_agent.Agent` adds running it in-process."""

    model: Model
    name: str = "agent"
    instructions: Instructions | None = None
    tools: Mapping[str, Tool] = field(default_factory=dict)
    output_type: type[BaseModel] | None = None
    output_validators: Sequence[OutputValidator] = ()
    output_retries: int = 1
    approval_required: frozenset[str] = frozenset()
    approvers: ApproverMap = field(default_factory=dict)
    """Tool name → the users and groups who may decide its approvals (see `.approvers`)."""
    usage_limits: UsageLimits = field(default_factory=UsageLimits)
    max_steps: int | None = None
    parallel_tool_calls: bool = True
    max_concurrent_tools: int | None = None
    model_settings: ModelSettings | None = None
    max_tool_result_bytes: int = 256_000
    """Tool results larger than this (as JSON) are truncated or fail the run."""
    oversized_tool_result: OversizedToolResult = "truncate"
    toolsets: Sequence[Toolset] = ()
    """Sources of tools listed at run time (MCP servers), each under a name of its own."""
    history_processors: Sequence[HistoryProcessor] = ()
    """Applied in order to what the model sees, and to what a run carries across
    continue-as-new."""
    allowed_models: Mapping[str, Model] = field(default_factory=dict)
    """The models a resumed or forked run may switch to, by name (`AgentOverrides.model`)."""
    subagents: Mapping[str, SubAgent] = field(default_factory=dict)
    """Agents this one's model may delegate to, each a tool by its name (`.subagent`)."""
    executor: AgentExecutor = field(default_factory=DirectAgentExecutor)
    workspace: WorkspaceSpec | None = None
    """The run's file tree (`AgentBuilder.workspace`): the tree a new run starts from and
    its size limit; None for an agent whose runs have none."""

    def with_executor(self, executor: AgentExecutor) -> Self:
        return replace(self, executor=executor)

    def with_overrides(self, overrides: AgentOverrides | None) -> Self:
        """This agent as it runs a resumed or forked run with `overrides` (itself when there
        are none); `InvalidInput` for a model name that is not in `allowed_models`."""
        if overrides is None or overrides.empty:
            return self
        model = self.model
        if overrides.model is not None:
            allowed = self.allowed_models.get(overrides.model)
            if allowed is None:
                raise InvalidInput(
                    f"agent {self.name!r} has no allowed model named {overrides.model!r} "
                    f"(allowed: {', '.join(sorted(self.allowed_models)) or 'none'}); add it "
                    "with AgentBuilder.allowed_models({name: model})"
                )
            model = allowed
        instructions = self.instructions
        if overrides.instructions is not None:
            instructions = overrides.instructions
        return replace(
            self,
            model=model,
            model_settings=merge_settings(self.model_settings, overrides.model_settings),
            instructions=instructions,
        )

    # -- configuration read by the loop and the nodes ------------------------------------

    def needs_approval(self, tool_name: str) -> bool:
        tool = self.tools.get(tool_name)
        return tool_name in self.approval_required or (tool is not None and tool.requires_approval)

    def approvers_of(self, tool_name: str) -> frozenset[str] | None:
        """Who may decide a call of `tool_name`; None when anyone may."""
        return self.approvers.get(tool_name)

    def tool_max_retries(self, tool_name: str) -> int:
        tool = self.tools.get(tool_name)
        return tool.max_retries if tool is not None else 1

    def process_history(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        """The messages the model is sent: the history after this agent's processors."""
        if not self.history_processors:
            return messages
        return apply_history_processors(self.history_processors, messages)

    def is_output_tool(self, tool_name: str) -> bool:
        return self.output_type is not None and tool_name == OUTPUT_TOOL_NAME

    def toolset(self, name: str) -> Toolset:
        toolset = self._toolsets_by_name.get(name)
        if toolset is None:
            raise UserError(
                f"agent {self.name!r} has no toolset named {name!r} (toolsets: "
                f"{sorted(self._toolsets_by_name) or 'none'}); the run was started with another "
                "definition of this agent, so register the same toolsets on every worker"
            )
        return toolset

    @functools.cached_property
    def _toolsets_by_name(self) -> dict[str, Toolset]:
        return {toolset.name: toolset for toolset in self.toolsets}

    @contextlib.asynccontextmanager
    async def open_toolsets(self) -> AsyncIterator[None]:
        """Keeps every toolset open while the block runs: an in-process run opens its
        servers' sessions for the run (a toolset already open stays open after it)."""
        async with contextlib.AsyncExitStack() as stack:
            for toolset in self.toolsets:
                await stack.enter_async_context(toolset)
            yield

    def request_parameters(
        self, toolset_tools: Sequence[ToolDefinition] = ()
    ) -> ModelRequestParameters:
        """The request's tools and output settings; `toolset_tools` (the run's listed
        toolset tools) are shown to the model after the function tools."""
        if not toolset_tools:
            return self._request_parameters
        base = self._request_parameters
        return base.model_copy(update={"function_tools": [*base.function_tools, *toolset_tools]})

    @functools.cached_property
    def _request_parameters(self) -> ModelRequestParameters:
        tools = [tool.definition() for tool in self.tools.values()]
        tools.extend(subagent.definition() for subagent in self.subagents.values())
        if self.output_type is None:
            return ModelRequestParameters(function_tools=tools, settings=self.model_settings)
        schema = self.output_type.model_json_schema()
        mode = self.model.structured_output_mode
        return ModelRequestParameters(
            function_tools=tools,
            output_mode=mode,
            output_schema=schema,
            output_schema_name=self.output_type.__name__,
            output_tool=ToolDefinition(
                name=OUTPUT_TOOL_NAME,
                description=f"Return the final result as {self.output_type.__name__}.",
                parameters_json_schema=schema,
            )
            if mode == "tool"
            else None,
            settings=self.model_settings,
        )

    async def render_instructions(self, ctx: ToolContext) -> str | None:
        if self.instructions is None or isinstance(self.instructions, str):
            return self.instructions
        rendered = self.instructions(ctx)
        if inspect.isawaitable(rendered):
            rendered = await rendered
        return rendered


@dataclass(frozen=True)
class SubAgent:
    """A sub-agent as its parent holds it. `timeout` bounds one call (in-process and on
    Temporal, where it is the child workflow's execution timeout); `task_queue` runs its
    child workflows on another worker pool (default: the parent's)."""

    agent: AgentSpec
    name: str
    description: str
    timeout_seconds: float | None = None
    task_queue: str | None = None

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name, description=self.description, parameters_json_schema=_SCHEMA
        )

    def prompt_of(self, call: ToolCall, override: Mapping[str, Any] | None = None) -> str:
        """The prompt the parent's model sent; `UserError` names what is wrong with it."""
        arguments: Any = override if override is not None else call.arguments
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except json.JSONDecodeError as error:
                raise UserError(f"arguments are not JSON: {error}") from error
        try:
            prompt = SubagentArguments.model_validate(arguments).prompt
        except ValidationError as error:
            raise UserError(
                f'sub-agent {self.name!r} takes {{"prompt": "..."}}: {error.errors()[0]["msg"]}'
            ) from error
        if not prompt.strip():
            raise UserError(f"sub-agent {self.name!r} needs a non-empty prompt")
        return prompt


def default_description(agent: AgentSpec) -> str:
    """The tool's description when the parent gives none: the sub-agent's instructions when
    they are text, else its name."""
    if isinstance(agent.instructions, str) and agent.instructions.strip():
        return agent.instructions.strip()
    return f"Delegate a task to the {agent.name!r} agent; send the task as the prompt."


def agent_tree(agent: AgentSpec) -> list[AgentSpec]:
    """`agent` and every sub-agent below it, each once: what registering `agent` registers."""
    found: list[AgentSpec] = []
    pending = [agent]
    while pending:
        current = pending.pop(0)
        if any(current is known for known in found):
            continue
        found.append(current)
        pending.extend(subagent.agent for subagent in current.subagents.values())
    return found
