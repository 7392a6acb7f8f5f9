"""The workflows this application's worker runs.

`AgentWorkflow` is the library's (`durable_agent.temporal.workflow`); what this
application adds is its agents (`workflows.agents`), which the workflow runs by name.
"""

from __future__ import annotations

from durable_agent.temporal import AgentWorkflow

__all__ = ["WORKFLOWS", "AgentWorkflow"]

WORKFLOWS = [AgentWorkflow]
