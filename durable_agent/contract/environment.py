"""A run's environment as the shared nouns see it: the ref, a change, the tool's workspace.

A run that has an environment names it in `state.metadata["environment_ref"]`
(`ENVIRONMENT_REF`), a string `"<kind>:<id>"` whose kind says which registered provider
restores it (`durable_agent.environments`); the workspace's is `"workspace:<tree id>"`.
Only such refs travel in state, checkpoints and workflow history, never contents.

`Workspace` is what a tool reaches as `ctx.workspace`. It is a Protocol here, so the
contract (and a tool's signature) names it without importing the implementation.
"""

from __future__ import annotations

import pathlib
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from ._fields import WIRE_CONFIG, omit_empty

__all__ = ["ENVIRONMENT_REF", "EnvironmentBatch", "EnvironmentChange", "Workspace"]

ENVIRONMENT_REF = "environment_ref"
"""The `state.metadata` key of the run's environment ref (starweaver's place: the resume
evidence of every checkpoint reads it from there)."""


@runtime_checkable
class Workspace(Protocol):
    """The run's file tree as one tool call sees it: the tree as of the call's start, plus
    what the call itself wrote. Paths are relative POSIX paths (`src/app.py`); a path out
    of the workspace, a link out of it or a device file raises `WorkspaceError`, which the
    model reads as the tool's error. What the call leaves is its change when it returns;
    a call that raises changes nothing."""

    def read_bytes(self, path: str) -> bytes: ...

    def read_text(self, path: str) -> str: ...

    def write_bytes(self, path: str, data: bytes) -> None: ...

    def write_text(self, path: str, text: str) -> None: ...

    def delete(self, path: str) -> None: ...

    def exists(self, path: str) -> bool: ...

    def list(self, prefix: str = "") -> list[str]:
        """The files whose path starts with `prefix`, sorted."""
        ...

    def local_dir(self) -> pathlib.Path:
        """A real directory holding the workspace's files, for processes (a linter, a test
        run, git); what is there when the tool returns is its change."""
        ...


class EnvironmentChange(BaseModel):
    """What one call (or a merge of several) did to the run's environment: from the tree
    `base` to the tree `environment_ref`, the paths added, modified and deleted.

    `listed` is False when the paths are not known yet (a sub-agent's child workflow hands
    back only its final ref): the loop asks its runner to list them."""

    model_config = WIRE_CONFIG
    base: str
    environment_ref: str
    added: list[str] = omit_empty(factory=list)
    modified: list[str] = omit_empty(factory=list)
    deleted: list[str] = omit_empty(factory=list)
    listed: bool = Field(default=True, exclude_if=lambda v: v is True)


class EnvironmentBatch(BaseModel):
    """The environment of the calls of the latest model response: the ref they all start
    from (`base`), and the ref each call that changed it left, by call id. Kept in state
    so calls that run later (after an approval, or one by one) still start from the same
    snapshot, and their changes apply in call order however they were split."""

    model_config = WIRE_CONFIG
    step: int
    base: str
    changed: dict[str, str] = Field(default_factory=dict)
