"""`AgentBuilder`: chainable configuration, checked by `build()` into an immutable `Agent`."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Generic, cast

from pydantic import BaseModel

from ..contract.errors import UserError
from ..contract.tools import OUTPUT_TOOL_NAME
from ..contract.toolsets import Toolset
from ..contract.usage import UsageLimits
from ..engine.approvers import normalize_approvers
from ..engine.history_processors import HistoryProcessor
from ..engine.output import OutputValidator
from ..engine.spec import Instructions, OversizedToolResult, SubAgent, default_description
from ..engine.tools import TOOL_NAME as _TOOL_NAME
from ..engine.tools import Tool, ToolFunc
from ..environments.workspace.spec import DEFAULT_MAX_BYTES, WorkspaceSpec
from ..models.base import Model, ModelSettings
from .agent import Agent, NewOutputT, OutputT

__all__ = ["AgentBuilder"]


class AgentBuilder(Generic[OutputT]):
    """Chainable configuration; `build()` checks it and returns an `Agent`."""

    def __init__(self, model: Model) -> None:
        if not isinstance(model, Model):
            raise UserError(
                f"AgentBuilder needs a Model (TestModel, FunctionModel, OpenAIChatModel, ...), "
                f"got {type(model).__name__}"
            )
        self._model = model
        self._name = "agent"
        self._instructions: Instructions | None = None
        self._tools: list[Tool] = []
        self._output_type: type[BaseModel] | None = None
        self._validators: list[OutputValidator] = []
        self._output_retries = 1
        self._approval: list[str] = []
        self._approvers: dict[str, frozenset[str]] = {}
        self._limits = UsageLimits()
        self._max_steps: int | None = None
        self._parallel = True
        self._max_concurrent: int | None = None
        self._settings: ModelSettings | None = None
        self._max_tool_result_bytes = 256_000
        self._oversized: OversizedToolResult = "truncate"
        self._toolsets: list[Toolset] = []
        self._history_processors: list[HistoryProcessor] = []
        self._allowed_models: dict[str, Model] = {}
        self._subagents: list[SubAgent] = []
        self._workspace: tuple[Any, int] | None = None

    def name(self, name: str) -> AgentBuilder[OutputT]:
        self._name = name
        return self

    def instructions(self, instructions: Instructions) -> AgentBuilder[OutputT]:
        self._instructions = instructions
        return self

    def tool(self, tool: ToolFunc | Tool, **options: Any) -> AgentBuilder[OutputT]:
        self._tools.append(tool if isinstance(tool, Tool) else Tool(tool, **options))
        return self

    def tools(self, tools: Sequence[ToolFunc | Tool]) -> AgentBuilder[OutputT]:
        for tool in tools:
            self.tool(tool)
        return self

    def toolset(self, toolset: Toolset) -> AgentBuilder[OutputT]:
        """Adds a source of tools listed at run time, e.g. `durable_agent.mcp.MCPServerStdio`;
        an agent may have several, each under its own name."""
        if not isinstance(toolset, Toolset):
            raise UserError(
                f"toolset needs a Toolset (MCPServerStdio, MCPServerStreamableHTTP, ...), got "
                f"{type(toolset).__name__}"
            )
        self._toolsets.append(toolset)
        return self

    def output_type(self, output_type: type[NewOutputT]) -> AgentBuilder[NewOutputT]:
        if not (isinstance(output_type, type) and issubclass(output_type, BaseModel)):
            raise UserError(f"output_type must be a pydantic model class, got {output_type!r}")
        self._output_type = output_type
        return cast(AgentBuilder[NewOutputT], self)

    def output_validator(self, validator: OutputValidator) -> AgentBuilder[OutputT]:
        self._validators.append(validator)
        return self

    def output_retries(self, retries: int) -> AgentBuilder[OutputT]:
        self._output_retries = retries
        return self

    def approvers(self, approvers: Mapping[str, Sequence[str]]) -> AgentBuilder[OutputT]:
        """Limits who may decide each named tool's approvals: `{"deploy": ["alice", "ops"]}`
        (users or groups). Tools left out may be decided by anyone; a later call for the same
        tool replaces its list."""
        self._approvers.update(normalize_approvers(approvers))
        return self

    def approval_required_tools(self, names: Sequence[str]) -> AgentBuilder[OutputT]:
        self._approval.extend(names)
        return self

    def usage_limits(self, limits: UsageLimits) -> AgentBuilder[OutputT]:
        self._limits = limits
        return self

    def max_steps(self, steps: int) -> AgentBuilder[OutputT]:
        if steps < 1:
            raise UserError(f"max_steps must be at least 1, got {steps}")
        self._max_steps = steps
        return self

    def sequential_tool_calls(self, sequential: bool = True) -> AgentBuilder[OutputT]:
        self._parallel = not sequential
        return self

    def max_concurrent_tools(self, limit: int) -> AgentBuilder[OutputT]:
        if limit < 1:
            raise UserError(f"max_concurrent_tools must be at least 1, got {limit}")
        self._max_concurrent = limit
        return self

    def model_settings(self, settings: ModelSettings) -> AgentBuilder[OutputT]:
        self._settings = settings
        return self

    def max_tool_result_bytes(
        self, limit: int, *, oversized: OversizedToolResult = "truncate"
    ) -> AgentBuilder[OutputT]:
        """Bounds what one tool result may put into the conversation (256 kB by default):
        larger results are truncated with a note the model can read, or fail the run."""
        if limit < 1:
            raise UserError(f"max_tool_result_bytes must be at least 1, got {limit}")
        if oversized not in ("truncate", "fail"):
            raise UserError(f"oversized must be 'truncate' or 'fail', got {oversized!r}")
        self._max_tool_result_bytes = limit
        self._oversized = oversized
        return self

    def history_processor(self, processor: HistoryProcessor) -> AgentBuilder[OutputT]:
        """Adds a processor (see `durable_agent.history_processors`: `keep_last_messages`,
        `drop_old_tool_returns`, or your own deterministic function); several run in order."""
        if not callable(processor):
            raise UserError(f"history_processor needs a function, got {processor!r}")
        self._history_processors.append(processor)
        return self

    def allowed_models(self, models: Mapping[str, Model]) -> AgentBuilder[OutputT]:
        """Names models a resumed or forked run may switch to (`AgentOverrides(model=name)`,
        `durable-agent fork ID --model NAME`): only a name travels, so a fork can use no
        model, endpoint or key the agent's owner did not configure here."""
        for name, model in models.items():
            if not isinstance(name, str) or not name:
                raise UserError(f"allowed_models needs non-empty names, got {name!r}")
            if not isinstance(model, Model):
                raise UserError(
                    f"allowed_models[{name!r}] must be a Model (TestModel, FunctionModel, "
                    f"OpenAIChatModel, ...), got {type(model).__name__}"
                )
            self._allowed_models[name] = model
        return self

    def subagent(
        self,
        agent: Agent[Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_seconds: float | None = None,
        task_queue: str | None = None,
    ) -> AgentBuilder[OutputT]:
        """Offers `agent` to this agent's model as a tool named `name` (default: the
        sub-agent's name) taking `{"prompt": str}`; its output is the tool's result. On
        Temporal each call is a child workflow (on `task_queue`, default the parent's),
        failed after `timeout_seconds`."""
        if not isinstance(agent, Agent):
            raise UserError(
                f"subagent needs a built Agent (AgentBuilder(...).build()), got "
                f"{type(agent).__name__}"
            )
        if timeout_seconds is not None and timeout_seconds <= 0:
            raise UserError(f"subagent timeout_seconds must be positive, got {timeout_seconds}")
        tool_name = name or agent.name
        if not _TOOL_NAME.match(tool_name):
            raise UserError(
                f"sub-agent tool name {tool_name!r} is not allowed: use 1-64 letters, digits, "
                "'_' or '-' (pass name=...)"
            )
        self._subagents.append(
            SubAgent(
                agent=agent,
                name=tool_name,
                description=description or default_description(agent),
                timeout_seconds=timeout_seconds,
                task_queue=task_queue,
            )
        )
        return self

    def workspace(
        self,
        initial: Mapping[str, str | bytes] | str | os.PathLike[str] | None = None,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> AgentBuilder[OutputT]:
        """Gives the agent's runs a workspace: a versioned file tree its tools reach as
        `ctx.workspace`, starting empty, from `initial` (a local directory, copied in, or a
        `{path: str | bytes}` dict), its files at most `max_bytes` (1 GiB by default). It
        moves with the run: every checkpoint names its tree, and every way a run goes on
        restores it (see docs/workspaces.md)."""
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
            raise UserError(f"workspace max_bytes must be a positive int, got {max_bytes!r}")
        self._workspace = (initial, max_bytes)
        return self

    def build(self) -> Agent[OutputT]:
        tools: dict[str, Tool] = {}
        for tool in self._tools:
            if tool.name in tools:
                raise UserError(f"two tools are named {tool.name!r}; tool names must be unique")
            if self._output_type is not None and tool.name == OUTPUT_TOOL_NAME:
                raise UserError(f"{OUTPUT_TOOL_NAME!r} is reserved for structured output")
            tools[tool.name] = tool
        subagents: dict[str, SubAgent] = {}
        for subagent in self._subagents:
            if subagent.name in tools or subagent.name in subagents:
                raise UserError(
                    f"sub-agent {subagent.name!r} has the name of another tool or sub-agent; "
                    "give it another with subagent(..., name=...)"
                )
            subagents[subagent.name] = subagent
        names = [toolset.name for toolset in self._toolsets]
        if len(set(names)) < len(names):
            twice = sorted({name for name in names if names.count(name) > 1})
            raise UserError(
                f"two toolsets are named {twice[0]!r}; give each server a unique name (name=...)"
            )
        # A toolset's tools are known only once a run lists them: names that may be theirs
        # are checked then (see AgentLoop._check_listed_names).
        known = {*tools, *subagents}
        unknown = sorted(set(self._approval) - known) if not self._toolsets else []
        if unknown:
            raise UserError(
                f"approval_required_tools names unknown tool(s) {unknown}; "
                f"registered tools: {sorted(known) or 'none'}"
            )
        unknown = sorted(set(self._approvers) - known) if not self._toolsets else []
        if unknown:
            raise UserError(
                f"approvers names unknown tool(s) {unknown}; "
                f"registered tools: {sorted(known) or 'none'}"
            )
        return Agent(
            model=self._model,
            name=self._name,
            instructions=self._instructions,
            tools=tools,
            output_type=self._output_type,
            output_validators=tuple(self._validators),
            output_retries=self._output_retries,
            approval_required=frozenset(self._approval),
            approvers=dict(self._approvers),
            usage_limits=self._limits,
            max_steps=self._max_steps,
            parallel_tool_calls=self._parallel,
            max_concurrent_tools=self._max_concurrent,
            model_settings=self._settings,
            max_tool_result_bytes=self._max_tool_result_bytes,
            oversized_tool_result=self._oversized,
            toolsets=tuple(self._toolsets),
            history_processors=tuple(self._history_processors),
            allowed_models=dict(self._allowed_models),
            subagents=subagents,
            # the initial tree's ref: a pure function of its content, computed now
            workspace=WorkspaceSpec.of(*self._workspace) if self._workspace else None,
        )
