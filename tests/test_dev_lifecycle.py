"""`./scripts/dev` (`python worker.py --dev`) leaves nothing behind: closing its terminal
(SIGHUP) stops it like Ctrl-C, and the embedded dev server dies with a worker that is
killed outright, instead of holding its port and SQLite file as an orphan."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .temporal_support import free_port

ROOT = Path(__file__).resolve().parents[1]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _wait(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _start(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int, Path]:
    port, ui_port = free_port(), free_port()
    log = tmp_path / "dev.log"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "OPENAI_", "DURABLE_AGENT_"))
    }
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "worker.py",
                "--dev",
                "--no-demo",
                "--no-examples",
                "--no-inbox",
                "--db",
                str(tmp_path / "dev.db"),
                "--port",
                str(port),
                "--ui-port",
                str(ui_port),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    _wait(lambda: "worker started" in log.read_text(), 90, f"the dev worker ({log})")
    assert _listening(port)
    return process, port, log


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGKILL], ids=["SIGHUP", "SIGKILL"])
def test_the_dev_server_does_not_outlive_its_worker(tmp_path: Path, sig: signal.Signals) -> None:
    process, port, log = _start(tmp_path)
    try:
        # The embedded default stores large payloads on disk next to its database.
        assert f"file://{tmp_path / 'payloads'}" in log.read_text()
        process.send_signal(sig)
        process.wait(30)
        if sig is signal.SIGHUP:
            assert process.returncode == 0, log.read_text()
            assert "worker stopped" in log.read_text()
        _wait(lambda: not _listening(port), 20, f"the dev server on port {port} to stop")
    finally:
        if process.poll() is None:
            process.kill()
