"""External payload storage: large payloads (a long conversation carried across
continue-as-new, a big tool result) leave history, which keeps a reference.

This is Temporal's own External Storage (`temporalio.converter.ExternalStorage`) with one of
its drivers: the S3 driver (`temporalio.contrib.aws.s3driver`, for production) or
`FileStorageDriver` here (a folder on local disk, for the embedded dev server and tests).
Workers and every client that reads such payloads must be configured alike, which
`DURABLE_AGENT_STORAGE` does for the worker, the CLI and `DurableAgentPlugin.from_env()`:

    DURABLE_AGENT_STORAGE=file:///path/to/payloads     # or file:relative/path
    DURABLE_AGENT_STORAGE=s3://bucket                  # AWS credentials and region from the
                                                       # usual AWS_* variables; AWS_ENDPOINT_URL
                                                       # for an S3-compatible server
    DURABLE_AGENT_STORAGE_THRESHOLD=65536              # bytes; smaller payloads stay inline
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriverClient
from temporalio.converter import (
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from ..contract.errors import UserError

__all__ = [
    "DEFAULT_THRESHOLD",
    "STORAGE_ENV",
    "THRESHOLD_ENV",
    "FileStorageDriver",
    "StorageConfigError",
    "external_storage_from_env",
]

STORAGE_ENV = "DURABLE_AGENT_STORAGE"
THRESHOLD_ENV = "DURABLE_AGENT_STORAGE_THRESHOLD"


class StorageConfigError(UserError):
    kind = "storage_config"


class FileStorageDriver(StorageDriver):
    """Payloads as files under one folder, named by the SHA-256 of their bytes.

    Content addressing makes a retried store harmless and lets equal payloads share a
    file. Every process that reads the payloads needs the same folder, so this is for one
    machine (the embedded dev server); use S3 or GCS across machines.
    """

    def __init__(self, directory: str | os.PathLike[str], *, name: str = "file") -> None:
        self.directory = Path(directory)
        self._name = name

    def name(self) -> str:
        return self._name

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        return await asyncio.to_thread(self._store, payloads)

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return await asyncio.to_thread(self._retrieve, claims)

    def _path(self, digest: str) -> Path:
        return self.directory / digest[:2] / digest

    def _store(self, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        claims = []
        for payload in payloads:
            data = payload.SerializeToString(deterministic=True)
            digest = hashlib.sha256(data).hexdigest()
            path = self._path(digest)
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                partial = path.with_suffix(f".{os.getpid()}.tmp")
                partial.write_bytes(data)
                partial.replace(path)
            claims.append(StorageDriverClaim(claim_data={"sha256": digest}))
        return claims

    def _retrieve(self, claims: Sequence[StorageDriverClaim]) -> list[Payload]:
        payloads = []
        for claim in claims:
            digest = claim.claim_data.get("sha256", "")
            path = self._path(digest)
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"external payload {digest} is not in {self.directory}; point "
                    f"{STORAGE_ENV} at the folder the worker stores payloads in"
                ) from None
            if hashlib.sha256(data).hexdigest() != digest:
                raise ValueError(f"external payload file {path} does not match its digest")
            payload = Payload()
            payload.ParseFromString(data)
            payloads.append(payload)
        return payloads


def external_storage_from_env(environ: Mapping[str, str] | None = None) -> ExternalStorage | None:
    """The `ExternalStorage` that `DURABLE_AGENT_STORAGE` names, or None when it is unset.
    An S3 client is opened on first use and lives as long as the process."""
    env = os.environ if environ is None else environ
    spec = env.get(STORAGE_ENV, "").strip()
    if not spec:
        return None
    threshold = _threshold(env.get(THRESHOLD_ENV))
    url = urlparse(spec)
    if url.scheme == "file":
        folder = (url.netloc + url.path) if url.netloc else url.path
        if not folder:
            raise StorageConfigError(f"{STORAGE_ENV}={spec!r} names no folder")
        driver: StorageDriver = FileStorageDriver(Path(folder).expanduser().resolve())
    elif url.scheme == "s3":
        if not url.netloc:
            raise StorageConfigError(f"{STORAGE_ENV}={spec!r} names no bucket: s3://BUCKET")
        driver = _s3_driver(url.netloc, env)
    else:
        raise StorageConfigError(
            f"{STORAGE_ENV}={spec!r}: use file:///folder (one machine) or s3://bucket"
        )
    return ExternalStorage(drivers=[driver], payload_size_threshold=threshold)


DEFAULT_THRESHOLD = 64 * 1024
"""Below Temporal's 256 KiB default: a carried conversation grows with every
continue-as-new, and inline ones add up in history; references stay a few hundred bytes."""


def _threshold(value: str | None) -> int:
    if value is None or not value.strip():
        return DEFAULT_THRESHOLD
    try:
        threshold = int(value)
    except ValueError:
        raise StorageConfigError(f"{THRESHOLD_ENV}={value!r} is not a number of bytes") from None
    if threshold < 0:
        raise StorageConfigError(f"{THRESHOLD_ENV}={value!r} must be 0 or more bytes")
    return threshold


def _s3_driver(bucket: str, env: Mapping[str, str]) -> StorageDriver:
    try:
        import aioboto3
        from temporalio.contrib.aws.s3driver import S3StorageDriver
        from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client
    except ImportError as error:
        raise StorageConfigError(
            f"{STORAGE_ENV}=s3://{bucket} needs aioboto3: pip install 'durable-agent[s3]'"
        ) from error
    return S3StorageDriver(client=_LazyS3(aioboto3, new_aioboto3_client, env), bucket=bucket)


class _LazyS3(S3StorageDriverClient):
    """Opens the aioboto3 client on first use: the environment is read now, but the client
    needs a running event loop, which a worker's configuration does not have yet."""

    def __init__(self, aioboto3: Any, wrap: Any, env: Mapping[str, str]) -> None:
        self._aioboto3 = aioboto3
        self._wrap = wrap
        self._endpoint = env.get("AWS_ENDPOINT_URL") or None
        self._client: Any = None
        self._lock: asyncio.Lock | None = None

    async def _get(self) -> Any:
        if self._client is None:
            self._lock = self._lock or asyncio.Lock()
            async with self._lock:
                if self._client is None:
                    session = self._aioboto3.Session()
                    raw = await session.client("s3", endpoint_url=self._endpoint).__aenter__()
                    self._client = self._wrap(raw)
        return self._client

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        await (await self._get()).put_object(bucket=bucket, key=key, data=data)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        exists: bool = await (await self._get()).object_exists(bucket=bucket, key=key)
        return exists

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        data: bytes = await (await self._get()).get_object(bucket=bucket, key=key)
        return data
