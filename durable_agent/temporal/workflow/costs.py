"""The run's cost in its memo, so `durable-agent list` (and the visibility store) can show it
without asking a worker.

Written only when the run's status changes, the moments `AgentStatus` is upserted anyway, and
only when the cost changed: it adds no command while a run works. A new command in a
workflow's history, so it is behind a patch marker: runs recorded before it replay as they were.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ...contract.usage import Usage

__all__ = ["COST_MEMO", "COST_MEMO_PATCH", "CostMemo"]

COST_MEMO = "cost"
"""The memo key: the run's `Usage.cost` in US dollars, as of its last status change."""
COST_MEMO_PATCH = "durable-agent-cost-memo"


class CostMemo:
    def __init__(self) -> None:
        self._status: str | None = None
        self._cost: float | None = None

    def publish(self, status: str, usage: Usage | None) -> None:
        if status == self._status:
            return
        self._status = status
        cost = usage.cost if usage is not None else None
        if cost is None or cost == self._cost or not workflow.patched(COST_MEMO_PATCH):
            return
        self._cost = cost
        workflow.upsert_memo({COST_MEMO: cost})
