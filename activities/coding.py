"""The `coder` example agent's tools: they work in the run's workspace (`ctx.workspace`), a
file tree that moves with the run to whichever worker goes on with it, and is restored as it
was on a fork, a retry or a resume after a week-long approval wait.

`write_module` writes a file and checks it with `python -m py_compile` in `local_dir()` (a
real directory on the worker holding the workspace), in one call: the calls of one model
response each start from the same snapshot, so a compile in another call of the same
response would not see the write. `publish_module` needs a person's approval; it copies the
checked file to `dist/`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile

from durable_agent import ToolContext

__all__ = ["publish_module", "write_module"]

COMPILE_SECONDS = 60


def write_module(ctx: ToolContext, path: str, code: str) -> str:
    """Write a Python module into the workspace and compile it (`python -m py_compile`).

    Args:
        path: where, relative to the workspace, e.g. "greet.py"
        code: the module's source
    """
    workspace = ctx.workspace
    if workspace is None:
        raise RuntimeError("the coder's tools need an agent with a workspace")
    workspace.write_text(path, code)
    # The compiled file goes to a cache outside the workspace: what the tool leaves in
    # local_dir() is its change, and a .pyc is not one worth keeping.
    with tempfile.TemporaryDirectory(prefix="coder-pycache-") as cache:
        done = subprocess.run(
            [sys.executable, "-m", "py_compile", path],
            cwd=workspace.local_dir(),
            env={**os.environ, "PYTHONPYCACHEPREFIX": cache},
            capture_output=True,
            text=True,
            timeout=COMPILE_SECONDS,
            check=False,
        )
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return f"wrote {path}, but it does not compile:\n" + "\n".join(lines[-6:])
    return f"wrote {path} ({len(code.encode())} bytes); it compiles"


def publish_module(ctx: ToolContext, path: str) -> str:
    """Publish a module: copy it to dist/. Needs a human's approval.

    Args:
        path: the module to publish, relative to the workspace
    """
    workspace = ctx.workspace
    if workspace is None:
        raise RuntimeError("the coder's tools need an agent with a workspace")
    data = workspace.read_bytes(path)
    workspace.write_bytes(f"dist/{path}", data)
    digest = hashlib.sha256(data).hexdigest()[:12]
    return f"published dist/{path} ({len(data)} bytes, sha256 {digest})"
