"""The activities this application's worker runs.

The agent loop's node activities are the library's (`durable_agent.temporal.activities`);
the example agents' tools (`activities.tools`) run inside the `tool_call` activity.
"""

from __future__ import annotations

from durable_agent.temporal.activities import ALL_ACTIVITIES

__all__ = ["ACTIVITIES"]

ACTIVITIES = list(ALL_ACTIVITIES)
