"""Runs one docs page's Python examples in order, in one namespace, as a reader would.

    python -m tests.support.docs_runner STEPS_JSON

run in the directory that stands for the reader's project (it goes first on `sys.path`, so
a `file` step's module is what `import NAME` finds). STEPS_JSON lists the page's steps in
page order, each `{"kind", "source", "path", "line", "name"}`:

- `run`: the code runs in the page's namespace. Top-level `await` works, as in `python -m
  asyncio` or a notebook: such a block runs on the page's event loop (one for the whole
  page, so a client made in one block serves the next); a block without one runs as a
  script does (it may call `asyncio.run`).
- `background`: a block that serves until stopped (`await worker.run()`) runs as a task on
  the page's loop while the steps after it run; it is cancelled when the page ends, and
  its failure fails the page.
- `file`: the code is written to `name` in the current directory instead of being run.

Each block is compiled under its page's path with its lines where the page has them, so a
traceback points at the line of the Markdown file. Exit status 0 when every step ran.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any


def _compile(step: dict[str, Any]) -> Any:
    source = "\n" * (step["line"] - 1) + step["source"]
    return compile(source, step["path"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def main(argv: list[str]) -> int:
    steps: list[dict[str, Any]] = json.loads(Path(argv[0]).read_text())
    sys.path.insert(0, os.getcwd())
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    loop = asyncio.new_event_loop()
    background: list[asyncio.Task[Any]] = []
    try:
        for step in steps:
            if step["kind"] == "file":
                Path(step["name"]).write_text(step["source"])
                continue
            code = _compile(step)
            if step["kind"] == "background":
                assert code.co_flags & inspect.CO_COROUTINE, "a background block awaits"
                background.append(loop.create_task(eval(code, namespace)))
            elif code.co_flags & inspect.CO_COROUTINE:
                loop.run_until_complete(eval(code, namespace))
            else:
                exec(code, namespace)
            for task in background:
                if task.done():
                    task.result()  # a background block that failed fails the page here
        return 0
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        for task in background:
            task.cancel()
        if background:
            loop.run_until_complete(asyncio.gather(*background, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # No interpreter shutdown: threads a page's Temporal client or worker left in the SDK's
    # runtime may call into Python while it finalizes (a fatal error, not the page's).
    os._exit(status)
