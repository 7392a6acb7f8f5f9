"""The search attributes the Web UI and `durable-agent list` filter on."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

__all__ = ["AGENT_NAME", "AGENT_STATUS", "PENDING_APPROVALS", "SEARCH_ATTRIBUTES"]

AGENT_NAME = SearchAttributeKey.for_keyword("AgentName")
AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
PENDING_APPROVALS = SearchAttributeKey.for_int("PendingApprovals")

SEARCH_ATTRIBUTES = [AGENT_NAME, AGENT_STATUS, PENDING_APPROVALS]
"""Register these on the server (the dev launcher and docker compose file do)."""
