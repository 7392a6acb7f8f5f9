"""The search attributes the Web UI and `durable-agent list` filter on.

`ForkedFrom` is set only on forks and retries (the source's workflow id), so
`ForkedFrom="w1"` lists every run that went on from one of w1's checkpoints.
"""

from __future__ import annotations

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError

__all__ = [
    "AGENT_NAME",
    "AGENT_STATUS",
    "FORKED_FROM",
    "PENDING_APPROVALS",
    "SEARCH_ATTRIBUTES",
    "ensure_search_attributes",
]

AGENT_NAME = SearchAttributeKey.for_keyword("AgentName")
AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
PENDING_APPROVALS = SearchAttributeKey.for_int("PendingApprovals")
FORKED_FROM = SearchAttributeKey.for_keyword("ForkedFrom")

SEARCH_ATTRIBUTES = [AGENT_NAME, AGENT_STATUS, PENDING_APPROVALS, FORKED_FROM]
"""Register these on the server (the dev launcher and docker compose file do)."""


async def ensure_search_attributes(client: Client) -> list[str]:
    """Registers any of our search attributes the namespace lacks; returns those added.

    A workflow that upserts an unknown search attribute fails its task over and over, so the
    worker checks at start-up. Servers that forbid registration (Temporal Cloud) raise; their
    attributes are created in the cloud console instead.
    """
    types = {
        "Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
        "Int": IndexedValueType.INDEXED_VALUE_TYPE_INT,
    }
    wanted = {
        AGENT_NAME.name: types["Keyword"],
        AGENT_STATUS.name: types["Keyword"],
        PENDING_APPROVALS.name: types["Int"],
        FORKED_FROM.name: types["Keyword"],
    }
    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
        existing = set(listed.custom_attributes) | set(listed.system_attributes)
    except RPCError:
        existing = set()
    missing = {name: kind for name, kind in wanted.items() if name not in existing}
    if missing:
        try:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=client.namespace, search_attributes=missing)
            )
        except RPCError as error:
            if "already exists" not in str(error):
                raise
    return sorted(missing)
