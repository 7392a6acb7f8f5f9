"""What a worker hosts and how, as its workflows read it: the one seam between workflow code
and the worker it runs on.

A workflow needs its agent's definition and a few settings of its worker (approval keys,
model quotas, role queues, external storage). They live in that worker's `WorkerRuntime`
(`.runtime`), not in module globals, so two workers in one process never see each other's.
Workflow code reads them with `hosting()`, which asks the sandbox's extern functions,
filled for each worker by its `RuntimeInterceptor`.

Replay-safe because everything here is configuration fixed before the worker polls, and
must be the same on every worker of the task queue (a run replays on any of them): nothing
a workflow reads here changes while it runs. The state activities keep (caches, pools,
open toolsets) is not here, out of workflow code's reach.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from temporalio import workflow

from ..engine.quotas import ModelQuota
from .registry import AgentRegistry
from .signing import ApprovalKeys

__all__ = ["HOSTING_EXTERN", "Hosting", "hosting"]

HOSTING_EXTERN = "durable_agent.hosting"
"""The extern function through which workflow code reads its worker's `Hosting`."""


@dataclass
class Hosting:
    """A worker's agents and the settings its workflows follow."""

    agents: AgentRegistry = field(default_factory=AgentRegistry)
    approval_keys: ApprovalKeys | None = None
    """Decisions must be signed with one of these (`.signing`); None accepts unsigned ones."""
    quotas: dict[str, ModelQuota] = field(default_factory=dict)
    """Model key → the quota this queue's runs keep to before each model request."""
    role_split: bool = False
    """Model and tool activities go to the role queues (`roles.role_queue`), served by
    `--role models` and `--role tools` workers."""
    external_storage: bool = False
    """Large payloads are stored outside history: a run may carry a conversation larger than
    one payload across continue-as-new."""


def hosting() -> Hosting:
    """The `Hosting` of the worker running the current workflow (workflow code only)."""
    extern: Callable[[], Hosting] | None = workflow.extern_functions().get(HOSTING_EXTERN)
    if extern is None:
        raise RuntimeError(
            "AgentWorkflow runs only on a worker configured by DurableAgentPlugin (pass it "
            "to Client.connect(..., plugins=[...])); this worker has none, so it hosts no "
            "agents"
        )
    return extern()
