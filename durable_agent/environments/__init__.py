"""Environments that move with a run, restored only through providers registered by kind.

A run's environment is a ref in its state (`state.metadata["environment_ref"]`,
`"<kind>:<id>"`). State is data, never authority: a host restores a ref only through the
provider registered for its kind, and a provider that would reach host resources named in
state (a host directory, credentials) must be registered with the policy that allows it
(`allow_host_resources=True`). An unknown kind fails the run with
`environment_restore_failed`; so does anything a provider cannot restore exactly.

Each driver has one `EnvironmentHost`: the in-process runner a process-wide one per store
URL (`default_host`), a Temporal worker its `WorkerRuntime`'s. The host holds the
providers, the `workspace` one first (`durable_agent.environments.workspace`).

This package sits right above the contract: the engine's tool node opens a call's
environment through it, and it imports nothing of the package but the contract.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from ..contract.environment import ENVIRONMENT_REF, EnvironmentChange
from ..contract.errors import EnvironmentRestoreFailed, UserError
from .workspace.provider import WorkspaceProvider
from .workspace.spec import WorkspaceSpec
from .workspace.stores import ObjectStore, default_store_url, open_store

__all__ = [
    "ENVIRONMENT_REF",
    "EnvironmentHost",
    "EnvironmentProvider",
    "EnvironmentSession",
    "default_host",
    "register_provider",
]


class EnvironmentSession(Protocol):
    """One call's environment: handed to the tool (`ctx.workspace`), then committed (the
    call returned) or discarded (it failed). `failure` is a restore failure the tool may
    have swallowed: the call fails with it."""

    failure: EnvironmentRestoreFailed | None

    def prepare(self) -> None:
        """Restores the environment now (called in a thread, before an async tool that
        may use it runs, so restoring does not block the event loop)."""
        ...

    def commit(self) -> EnvironmentChange | None: ...

    def discard(self) -> None: ...


class EnvironmentProvider(Protocol):
    """Restores the refs of one kind. `host_resources`: restoring may reach resources of
    the host that the ref names (only registered with `allow_host_resources=True`)."""

    kind: str
    host_resources: bool

    def open(self, ref: str, run: str, spec: Any) -> EnvironmentSession: ...

    def merge(
        self, base: str, current: str, changes: Sequence[str], spec: Any = None
    ) -> EnvironmentChange: ...


class EnvironmentHost:
    """The providers of one driver (a worker, or this process in-process), by kind."""

    def __init__(self, store: ObjectStore | str | None = None, cache_dir: Path | None = None):
        resolved = store if isinstance(store, ObjectStore) else open_store(store)
        self.workspace = WorkspaceProvider(resolved, cache_dir)
        self._providers: dict[str, EnvironmentProvider] = {}
        self.register(self.workspace)

    @property
    def store(self) -> ObjectStore:
        return self.workspace.store

    def register(
        self, provider: EnvironmentProvider, *, allow_host_resources: bool = False
    ) -> None:
        """Adds (or replaces) this host's provider of `provider.kind`."""
        self._providers[_checked(provider, allow_host_resources)] = provider

    def provider(self, ref: object) -> EnvironmentProvider:
        if not isinstance(ref, str) or ":" not in ref:
            raise EnvironmentRestoreFailed(f"{ref!r} is not an environment ref (<kind>:<id>)")
        kind = ref.partition(":")[0]
        provider = self._providers.get(kind) or _REGISTERED.get(kind)
        if provider is None:
            raise EnvironmentRestoreFailed(
                f"no environment provider is registered for kind {kind!r} (ref {ref!r}); "
                f"registered: {', '.join(sorted({*self._providers, *_REGISTERED}))}"
            )
        return provider

    def open(self, ref: object, run: str, spec: WorkspaceSpec | None) -> EnvironmentSession:
        return self.provider(ref).open(str(ref), run, spec)

    async def commit(self, session: EnvironmentSession) -> EnvironmentChange | None:
        """The call's change, stored (in a thread: it hashes and uploads)."""
        return await asyncio.to_thread(session.commit)

    async def discard(self, session: EnvironmentSession) -> None:
        await asyncio.to_thread(session.discard)

    async def merge(
        self, base: str, current: str, changes: Sequence[str], spec: WorkspaceSpec | None = None
    ) -> EnvironmentChange:
        provider = self.provider(base)
        return await asyncio.to_thread(provider.merge, base, current, list(changes), spec)

    def close(self) -> None:
        self.workspace.close()


def _checked(provider: EnvironmentProvider, allow_host_resources: bool) -> str:
    kind = getattr(provider, "kind", None)
    if not isinstance(kind, str) or not kind or ":" in kind:
        raise UserError(f"an environment provider needs a kind without ':', got {kind!r}")
    if getattr(provider, "host_resources", True) and not allow_host_resources:
        raise UserError(
            f"environment provider {kind!r} reaches host resources named in run state; "
            "register it with allow_host_resources=True if this host trusts that"
        )
    return kind


_REGISTERED: dict[str, EnvironmentProvider] = {}


def register_provider(provider: EnvironmentProvider, *, allow_host_resources: bool = False) -> None:
    """Registers `provider` for its kind with every host of this process (the in-process
    driver's and every worker's): how a user adds an environment (a cloud sandbox, say).
    A provider that says it reaches host resources named in state (`host_resources`) is
    refused unless the host's owner allows it here."""
    _REGISTERED[_checked(provider, allow_host_resources)] = provider


_HOSTS: dict[str, EnvironmentHost] = {}
_HOSTS_LOCK = threading.Lock()


def default_host() -> EnvironmentHost:
    """This process's host for the store `DURABLE_AGENT_WORKSPACE_STORE` names (the
    in-process driver's): one per store URL, so runs resumed later find their checkouts."""
    url = default_store_url()
    with _HOSTS_LOCK:
        host = _HOSTS.get(url)
        if host is None:
            host = _HOSTS[url] = EnvironmentHost(url)
        return host
