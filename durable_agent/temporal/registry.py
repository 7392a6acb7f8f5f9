"""Agents by name, with the activity options their nodes run under.

Each worker has its own registry (`WorkerRuntime.agents`), filled before it polls; its
workflows and activities look agents up by the name in `AgentWorkflowInput.agent` (the
workflows through `.hosting`), so they read the same registrations.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, get_args

from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityConfig, LocalActivityConfig

from ..contract.errors import UnknownAgentError, UserError
from ..engine.overrides import AgentOverrides
from ..engine.spec import AgentSpec, agent_tree

__all__ = [
    "DEFAULT_DELTA_FLUSH_INTERVAL",
    "ActivityConfig",
    "AgentActivityConfig",
    "AgentNameTaken",
    "AgentRegistration",
    "AgentRegistry",
    "LocalNode",
    "NodeActivity",
]

NodeActivity = Literal[
    "prepare_model_request", "model_request", "list_tools", "tool_call", "validate_output"
]

LocalNode = Literal["prepare_model_request", "validate_output"]
"""The nodes that may run as local activities: they do no I/O of their own (rendering
instructions, validating output), so a worker's restart costs them nothing worth a task of
their own."""
LOCAL_NODES: tuple[LocalNode, ...] = get_args(LocalNode)
_ACTIVITY_OPTIONS = ActivityConfig.__required_keys__ | ActivityConfig.__optional_keys__
"""What `workflow.execute_activity` takes."""
_LOCAL_OPTIONS = _ACTIVITY_OPTIONS & (
    LocalActivityConfig.__required_keys__ | LocalActivityConfig.__optional_keys__
)
"""What both `workflow.execute_activity` and `execute_local_activity` take: a node's options
must suit either, as a run keeps the kind its node first ran as whatever they say now."""

_RETRIES = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=5,
)
_QUICK = ActivityConfig(start_to_close_timeout=timedelta(seconds=30), retry_policy=_RETRIES)
_WORK = ActivityConfig(
    start_to_close_timeout=timedelta(seconds=120),
    heartbeat_timeout=timedelta(seconds=30),
    retry_policy=_RETRIES,
)
DEFAULTS: Mapping[NodeActivity, ActivityConfig] = {
    "prepare_model_request": _QUICK,
    "model_request": _WORK,
    "list_tools": _QUICK,
    "tool_call": _WORK,
    "validate_output": _QUICK,
}
"""Rendering and validation are quick; model requests and tools may run long, so they
heartbeat and a dead worker's call is retried within 30 s instead of after 120 s. Listing a
toolset's tools (starting an MCP server on first use) is quick too."""


DEFAULT_DELTA_FLUSH_INTERVAL = timedelta(milliseconds=250)
"""At most four batches of text a second per streaming model request."""


@dataclass(frozen=True)
class AgentActivityConfig:
    """Per-node and per-tool activity options for one agent, in Temporal's own terms.

    Each `ActivityConfig` (`temporalio.workflow.ActivityConfig`: every option
    `workflow.execute_activity` takes) is laid over the node's default, so
    `tool_call=ActivityConfig(start_to_close_timeout=timedelta(minutes=10))` keeps the
    default retry policy; `tools` is laid over `tool_call` for the tools it names. The
    summary is the workflow's own (`tool deploy · call_1`) and cannot be set here.
    `toolsets` (by toolset name, e.g. an MCP server's) is laid over `list_tools` and
    `tool_call` for that toolset; `tools` still wins for the tools it names.
    """

    prepare_model_request: ActivityConfig = field(default_factory=lambda: ActivityConfig())
    model_request: ActivityConfig = field(default_factory=lambda: ActivityConfig())
    tool_call: ActivityConfig = field(default_factory=lambda: ActivityConfig())
    validate_output: ActivityConfig = field(default_factory=lambda: ActivityConfig())
    tools: Mapping[str, ActivityConfig] = field(default_factory=dict)
    list_tools: ActivityConfig = field(default_factory=lambda: ActivityConfig())
    toolsets: Mapping[str, ActivityConfig] = field(default_factory=dict)
    max_concurrent_tool_activities: int = 16
    """At most this many tool activities in flight per step; more calls wait their turn."""
    continue_as_new_after_steps: int | None = None
    """Continue as new after this many model requests in one run, besides whenever Temporal
    suggests it (history near its size or event limits)."""
    delta_flush_interval: timedelta = DEFAULT_DELTA_FLUSH_INTERVAL
    """How long a streaming `model_request` activity collects deltas before it signals them
    to the workflow (the first delta goes at once). Each batch is one signal and a workflow
    task in history (~4 events, ~0.5 kB), so this trades how smoothly text appears against
    how fast history grows while the model writes."""
    inline_quick_nodes: bool = True
    """Run `prepare_model_request` and `validate_output` in the workflow itself when they are
    pure for this agent (instructions a string or none; no output validators: then they only
    assemble the request and parse the answer, work a replay redoes exactly), instead of as
    activities: a one-step run then costs one activity, as a hand-written workflow's does.
    The Web UI shows the model and tool activities only. A run records that it inlines (a
    patch marker) and keeps doing so, so runs recorded before replay as they ran; like any
    new command, a run started this way cannot be replayed by a worker of an earlier
    release (drain those, or pin runs with Worker Deployments). A node listed in
    `local_activities` runs as one; False keeps both nodes activities."""
    local_activities: tuple[LocalNode, ...] = ()
    """Nodes that run as local activities (`prepare_model_request`, `validate_output`): on
    the worker that runs the workflow task, recorded as a marker, without a task of their
    own on the server. A run saves two activity tasks and two workflow tasks; in exchange
    the Web UI shows them as markers, not activities, their options are only those of
    `temporalio.workflow.LocalActivityConfig`, and a crash mid-node reruns it from the
    last workflow task. A run records the kind of each node's first run and keeps it,
    so changing this with runs in flight is safe: a waiting run replays as it ran. Turn
    it on once every worker of the task queue runs a release that has it: an older
    worker cannot replay a run that ran a node locally."""

    def __post_init__(self) -> None:
        for where, config in self._named():
            if "summary" in config:
                raise UserError(
                    f"AgentActivityConfig {where}: 'summary' is set by the workflow for each "
                    "activity; remove it"
                )
            unknown = sorted(set(config) - _ACTIVITY_OPTIONS)
            if unknown:
                # execute_activity would raise TypeError in the workflow: a task failure,
                # retried for ever, rather than a run that fails
                raise UserError(
                    f"AgentActivityConfig {where}: {', '.join(map(repr, unknown))} is not an "
                    "option of temporalio.workflow.ActivityConfig; remove it"
                )
        if self.delta_flush_interval <= timedelta(0):
            raise UserError(
                f"delta_flush_interval must be above 0, got {self.delta_flush_interval}"
            )
        given: Any = self.local_activities
        if isinstance(given, str):
            given = (given,)
        if not isinstance(given, tuple | list | set | frozenset):
            raise UserError(
                f"AgentActivityConfig local_activities must be a tuple of node names, got "
                f"{given!r}; e.g. ('prepare_model_request', 'validate_output')"
            )
        for node in given:
            if node not in LOCAL_NODES:
                raise UserError(
                    f"AgentActivityConfig local_activities: {node!r} cannot run as a local "
                    f"activity; only {', '.join(LOCAL_NODES)} can (the others do I/O and "
                    "may run long)"
                )
            remote = sorted(set(getattr(self, node)) - _LOCAL_OPTIONS)
            if remote:
                raise UserError(
                    f"AgentActivityConfig {node}: {', '.join(map(repr, remote))} cannot be set "
                    "for a node in local_activities (local activities take only "
                    f"{', '.join(sorted(_LOCAL_OPTIONS))}); remove it or run the node as an "
                    "activity"
                )
        # one order, no repeats: equal options compare equal (`AgentRegistry.host`)
        object.__setattr__(self, "local_activities", tuple(n for n in LOCAL_NODES if n in given))
        if self.max_concurrent_tool_activities < 1:
            raise UserError(
                "max_concurrent_tool_activities must be at least 1, got "
                f"{self.max_concurrent_tool_activities}"
            )

    def _named(self) -> Iterator[tuple[str, ActivityConfig]]:
        for node in DEFAULTS:
            yield node, getattr(self, node)
        for tool, config in self.tools.items():
            yield f"tools[{tool!r}]", config
        for toolset, config in self.toolsets.items():
            yield f"toolsets[{toolset!r}]", config

    def options(
        self, node: NodeActivity, tool: str | None = None, *, toolset: str | None = None
    ) -> dict[str, Any]:
        """The `execute_activity` keyword arguments for one node (or one tool's calls, or
        one toolset's)."""
        merged: dict[str, Any] = {**DEFAULTS[node], **getattr(self, node)}
        if toolset is not None:
            merged.update(self.toolsets.get(toolset, {}))
        if tool is not None:
            merged.update(self.tools.get(tool, {}))
        return merged

    def local_options(self, node: LocalNode) -> dict[str, Any]:
        """The `execute_local_activity` keyword arguments for one node: its options, less
        those only activities take (a run that started with the node local keeps it local
        even if the node's options change to ones it cannot take)."""
        return {k: v for k, v in self.options(node).items() if k in _LOCAL_OPTIONS}


OVERRIDDEN_AGENTS_KEPT = 64
"""Agents built for runs with overrides, kept per registered agent (the newest)."""


@dataclass(frozen=True)
class AgentRegistration:
    agent: AgentSpec
    activities: AgentActivityConfig = field(default_factory=AgentActivityConfig)


class AgentNameTaken(UserError):
    """One name for two agents (or for one agent with two sets of activity options)."""

    kind = "agent_name_taken"


class AgentRegistry:
    """One worker's agents by name, and the agents it built for runs with overrides.

    Its workflows (on the SDK's workflow threads) and its activities (on the event loop)
    look agents up at once: the agents built for overrides are kept under a lock, so a
    lookup never sees a half-evicted cache and each overrides is built into one agent."""

    def __init__(self) -> None:
        self._agents: dict[str, AgentRegistration] = {}
        self._overridden: dict[str, dict[str, AgentSpec]] = {}
        """Agent name → its overrides' JSON → the agent built for them, oldest first."""
        self._lock = threading.Lock()

    def register(
        self,
        agent: AgentSpec,
        activities: AgentActivityConfig | None = None,
        *,
        replace: bool = False,
    ) -> AgentSpec:
        """Registers `agent` under `agent.name`; names must be unique unless `replace`."""
        if agent.name in self._agents and not replace:
            raise ValueError(
                f"an agent named {agent.name!r} is already registered; give each agent a unique "
                "name with AgentBuilder.name(...)"
            )
        registration = AgentRegistration(agent, activities or AgentActivityConfig())
        with self._lock:
            self._agents[agent.name] = registration
            self._overridden.pop(agent.name, None)
        return agent

    def host(self, agent: AgentSpec, activities: AgentActivityConfig | None = None) -> None:
        """Registers `agent` and every sub-agent its runs may start (those with default
        options), each once: the same object again changes nothing. A different agent under
        a taken name (it would silently run in place of the first, as runs find agents by
        name) or other activity options for one raise `AgentNameTaken`."""
        for member in agent_tree(agent):
            ours = activities if member is agent else None
            if member.name not in self._agents:
                self.register(member, ours)
                continue
            existing = self._agents[member.name]
            if existing.agent is not member:
                raise AgentNameTaken(
                    f"two different agents are named {member.name!r}; give each a unique "
                    "name with AgentBuilder.name(...)"
                )
            if ours is not None and ours != existing.activities:
                raise AgentNameTaken(
                    f"agent {member.name!r} is given two different AgentActivityConfigs; "
                    "register it once"
                )

    def get(self, name: str) -> AgentRegistration:
        try:
            return self._agents[name]
        except KeyError:
            known = ", ".join(sorted(self._agents)) or "none"
            raise UnknownAgentError(
                f"no agent named {name!r} is registered on this worker (registered: {known}); "
                "start the worker with --agents your.module to register it"
            ) from None

    def agent_for(self, name: str, overrides: AgentOverrides | None) -> AgentSpec:
        """Agent `name` as a run with `overrides` runs it (`InvalidInput` for a model it does
        not allow), built once for each distinct overrides so its tool schemas are too: the
        workflow and every activity of such a run ask for it. `UnknownAgentError` for a name
        not registered here."""
        registration = self.get(name)
        if overrides is None or overrides.empty:
            return registration.agent
        key = overrides.model_dump_json()
        with self._lock:
            built = self._overridden.get(name, {}).get(key)
        if built is not None:
            return built
        built = registration.agent.with_overrides(overrides)
        with self._lock:
            if self._agents.get(name) is not registration:
                return built  # replaced meanwhile: not kept for the agent that replaced it
            kept = self._overridden.setdefault(name, {})
            built = kept.setdefault(key, built)  # one agent, whoever built it first
            if len(kept) > OVERRIDDEN_AGENTS_KEPT:
                del kept[next(iter(kept))]
        return built

    def names(self) -> list[str]:
        return sorted(self._agents)

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    def __iter__(self) -> Iterator[AgentRegistration]:
        return iter(self._agents.values())

    def clear(self) -> None:
        with self._lock:
            self._agents.clear()
            self._overridden.clear()
