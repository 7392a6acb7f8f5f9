"""This application's own activity: announcing a release once the agent has deployed it.

A plain Temporal activity, registered on the worker next to the agents' node activities.
"""

from __future__ import annotations

from pydantic import BaseModel
from temporalio import activity

__all__ = ["Announcement", "announce_release"]


class Announcement(BaseModel):
    """What `announce_release` posts: where it went and what the agent said."""

    channel: str
    text: str


@activity.defn
async def announce_release(announcement: Announcement) -> str:
    """Posts the deployer's answer to a release channel (here: the worker's log and the
    activity's result; a real application would call its chat or changelog API, passing
    `activity.info().activity_id` as the idempotency key)."""
    line = f"#{announcement.channel}: {announcement.text}"
    activity.logger.info("release announced: %s", line)
    return line
