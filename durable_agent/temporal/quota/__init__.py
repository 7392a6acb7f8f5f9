"""Model quotas on Temporal: a keeper workflow per key and task queue, asked by every run
before its model request (see `keeper`, `gate`, `activities`)."""

from __future__ import annotations

from .activities import QUOTA_ACTIVITIES, ensure_quota_keeper
from .keeper import QuotaKeeper
from .wire import KeeperView, QuotaWaitView, keeper_id

__all__ = [
    "QUOTA_ACTIVITIES",
    "KeeperView",
    "QuotaKeeper",
    "QuotaWaitView",
    "ensure_quota_keeper",
    "keeper_id",
]
