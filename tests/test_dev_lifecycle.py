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

pytestmark = pytest.mark.server

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
        # --no-examples without --agents: refused on a shared server, said out loud here.
        assert "this worker hosts no agents" in log.read_text()
        process.send_signal(sig)
        process.wait(30)
        if sig is signal.SIGHUP:
            assert process.returncode == 0, log.read_text()
            assert "worker stopped" in log.read_text()
        _wait(lambda: not _listening(port), 20, f"the dev server on port {port} to stop")
    finally:
        if process.poll() is None:
            process.kill()


def _dev(tmp_path: Path, log: Path, *flags: str) -> subprocess.Popen[bytes]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "OPENAI_", "DURABLE_AGENT_"))
    }
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "worker.py", "--dev", "--db", str(tmp_path / "dev.db"), *flags],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def test_a_second_dev_stack_refuses_to_start_naming_the_port_and_its_holder(
    tmp_path: Path,
) -> None:
    """Issue 26, item 4: it used to talk to the first one's server and run other agents on
    the same task queue."""
    first, port, _ = _start(tmp_path)
    try:
        ui_port = free_port()
        log = tmp_path / "second.log"
        second = _dev(tmp_path, log, "--no-inbox", "--port", str(port), "--ui-port", str(ui_port))
        code = second.wait(60)
        text = log.read_text()
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(60)
    assert code == 1, text
    assert f"the Temporal dev server's port {port} is in use by pid " in text
    assert "(temporal)" in text
    assert "Is `./scripts/dev` already running?" in text
    assert "worker started" not in text


def test_the_dev_banner_comes_last_and_restarts_add_no_demo_run(tmp_path: Path) -> None:
    """Issue 26, item 13: the approve/deny lines are printed after everything has started,
    and a restart finds the waiting demo run instead of starting another."""
    ports = ["--port", str(free_port()), "--ui-port", str(free_port()), "--no-inbox"]
    demos = []
    for attempt in range(2):
        log = tmp_path / f"dev{attempt}.log"
        process = _dev(tmp_path, log, *ports)
        try:
            _wait(
                lambda path=log, run=process: (
                    "Press Enter" in path.read_text() or run.poll() is not None
                ),
                120,
                str(log),
            )
            text = log.read_text()
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(60)
        banner = text[text.rindex("durable-agent dev stack is up.") :]
        assert "source .venv/bin/activate" in banner
        demo = banner.split("Demo run ", 1)[1].split(" ", 1)[0]
        assert f"durable-agent approve '{demo}' call_deploy_0 --by dev" in banner
        demos.append(demo)
    assert demos[0] == demos[1], "the second start reused the waiting demo run"
