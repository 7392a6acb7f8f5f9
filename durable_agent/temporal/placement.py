"""Where a run's quick nodes run: in the workflow itself, as local activities, or as
activities. Each is decided once per run, at the node's first run, and recorded as a patch
marker, so a replay decides the same whatever the replaying worker's settings say, and runs
recorded before a setting existed keep their activities.

A patch costs its marker and the SDK's own `TemporalChangeVersion` upsert: two commands
that a run keeps in its worker's cache for as long as it is cached (the SDK's core keeps a
state machine per command). So one decision taken at a run's start (`VISIBILITY_PATCH`)
also stands for another that such runs always took.
"""

from __future__ import annotations

from temporalio import workflow

from durable_agent.engine.spec import AgentSpec

from .registry import AgentActivityConfig, LocalNode

__all__ = ["INLINE_PATCH_PREFIX", "LOCAL_PATCH_PREFIX", "VISIBILITY_PATCH", "NodePlacement"]

INLINE_PATCH_PREFIX = "durable-agent-inline-"
"""With the node's name: marks a run whose quick node runs in the workflow itself
(`AgentActivityConfig.inline_quick_nodes`, for a node that is pure for the agent)."""
LOCAL_PATCH_PREFIX = "durable-agent-local-"
"""With the node's name: marks the runs whose `prepare_model_request` / `validate_output`
run as local activities (`AgentActivityConfig.local_activities`)."""
VISIBILITY_PATCH = "durable-agent.inline-prepare-and-coalesced-upserts"
"""Marks a run, at its start, that coalesces its search-attribute upserts
(`Visibility.begin`) and whose `prepare_model_request` runs in the workflow itself.
One marker for two decisions: it takes the place of the `prepare_model_request` inline
marker such runs recorded before, so the run records two upserts fewer and no more
markers. A run whose `prepare_model_request` may not run inline (instructions from a
function, a local activity, `inline_quick_nodes` off) takes both decisions as before."""


class NodePlacement:
    """One run's decisions of where its quick nodes run (a fresh one per workflow run)."""

    def __init__(self, agent: AgentSpec, config: AgentActivityConfig) -> None:
        self._agent = agent
        self._config = config
        self._local: dict[LocalNode, bool] = {}
        self._inline: dict[LocalNode, bool] = {}

    def batches_visibility(self) -> bool:
        """At the run's start, before its first command: whether it records
        `VISIBILITY_PATCH` (wanted when `prepare_model_request` may run inline; recorded,
        it is that node's inline decision too)."""
        node: LocalNode = "prepare_model_request"
        batched = _patched_if(self._may_inline(node), VISIBILITY_PATCH)
        if batched:
            self._inline[node] = True
        return batched

    def inline(self, node: LocalNode) -> bool:
        """Whether `node` runs in the workflow itself."""
        inline = self._inline.get(node)
        if inline is None:
            inline = _patched_if(self._may_inline(node), INLINE_PATCH_PREFIX + node)
            self._inline[node] = inline
        return inline

    def local(self, node: LocalNode) -> bool:
        """Whether `node` runs as a local activity (when it does not run inline)."""
        local = self._local.get(node)
        if local is None:
            wanted = node in self._config.local_activities
            local = _patched_if(wanted, LOCAL_PATCH_PREFIX + node)
            self._local[node] = local
        return local

    def _may_inline(self, node: LocalNode) -> bool:
        """Whether `node` is pure for the run's agent and this worker's config allows it
        in the workflow."""
        agent = self._agent
        if node == "prepare_model_request":
            pure = agent.instructions is None or isinstance(agent.instructions, str)
        else:
            pure = not agent.output_validators
        config = self._config
        return pure and config.inline_quick_nodes and node not in config.local_activities


def _patched_if(wanted: bool, patch: str) -> bool:
    """`patch`, recorded when `wanted`; otherwise only a run that recorded it takes it."""
    if wanted:
        return workflow.patched(patch)
    return workflow.unsafe.is_replaying_history_events() and workflow.patched(patch)
