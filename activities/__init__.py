"""This application's activities and the example agents' tools.

`ACTIVITIES` are the application's own Temporal activities (`worker.py` registers them); the
agents' tools (`activities.tools`) run inside the library's `tool_call` activity.
"""

from __future__ import annotations

from .release import announce_release

__all__ = ["ACTIVITIES"]

ACTIVITIES = [announce_release]
