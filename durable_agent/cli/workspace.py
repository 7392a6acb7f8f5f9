"""`durable-agent workspace`: a run's files, from the shell.

    durable-agent workspace ID                      # the files at the latest boundary
    durable-agent workspace ID src/app.py           # one file's bytes (a folder: its files)
    durable-agent workspace ID --at 4               # as of checkpoint #4 (or --at ckpt_...)
    durable-agent workspace ID --diff 0             # what changed since checkpoint #0
    durable-agent workspace ID --export tree.tar    # the whole tree as a tar
    durable-agent workspace gc --dry-run            # what the collector would remove

The run's checkpoints name its trees (`environment_ref`); their content is read from the
workspace store the workers write, `DURABLE_AGENT_WORKSPACE_STORE` (or `--store`), by the
same default a worker uses: `.durable-agent/workspaces` here, or the dev stack's
`.temporal/workspaces` when only that one exists. Reading the checkpoints needs a worker,
as `durable-agent checkpoints` does.

Exit codes: 0; 1 when the run has no workspace or the store lacks its objects; 2 for a bad
argument (an unknown checkpoint, a path not in the tree); 3 for an unknown workflow id.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from durable_agent.contract.errors import EnvironmentRestoreFailed
from durable_agent.environments.workspace import (
    STORE_ENV,
    Diff,
    Entry,
    TreeReader,
    open_store,
    tree_id_of,
)
from durable_agent.temporal.client import AgentRunError, AgentRunHandle
from durable_agent.temporal.wire import CheckpointLookup, CheckpointQuery

from .context import (
    EPILOG,
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_USAGE,
    Settings,
    connection_options,
    workspace_store_option,
    workspace_store_url,
)
from .output import _table, err, out, q
from .workspace_gc import gc

__all__ = ["workspace"]


class _Group(click.Group):
    """`workspace gc ...` is the collector; anything else is `workspace ID ...`."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] in self.commands:
            return super().resolve_command(ctx, args)
        return "show", self.commands["show"], args

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "ID [PATH] [OPTIONS] | gc [OPTIONS]")


@click.group(
    cls=_Group,
    epilog=EPILOG,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
def workspace() -> None:
    """A run's workspace: list its files (ID), print one (ID PATH), as of a checkpoint
    (--at), what changed since one (--diff), the tree as a tar (--export); `gc` removes
    the objects of runs the server no longer has."""


@workspace.command("show", epilog=EPILOG)
@click.argument("workflow_id", metavar="ID")
@click.argument("path", required=False)
@click.option("--at", "at", metavar="CHECKPOINT", help="as of this checkpoint (# or id)")
@click.option(
    "--diff", "since", metavar="CHECKPOINT", help="what changed since this checkpoint (# or id)"
)
@click.option(
    "--export",
    "export",
    type=click.Path(dir_okay=False, writable=True, allow_dash=True, path_type=Path),
    metavar="FILE.tar",
    help="write the tree as a tar (- for standard output)",
)
@workspace_store_option
@connection_options(group=False)
@click.pass_obj
def show(
    settings: Settings,
    workflow_id: str,
    path: str | None,
    at: str | None,
    since: str | None,
    export: Path | None,
    store: str | None,
) -> Awaitable[int]:
    """List run ID's files (PATH, SIZE) at its latest boundary, or print the file PATH (a
    folder: the files under it). --at CHECKPOINT: as of that boundary (its # from
    `durable-agent checkpoints ID`, or its id). --diff CHECKPOINT: the files added,
    modified and deleted since that boundary. --export FILE.tar: the whole tree."""
    if export is not None and (path is not None or since is not None):
        raise click.UsageError("--export writes the whole tree: give it without PATH or --diff")
    view = _View(settings, workflow_id, workspace_store_url(store))
    return view.run(path, _checkpoint(at, "--at"), _checkpoint(since, "--diff"), export)


workspace.add_command(gc)


def _checkpoint(value: str | None, option: str) -> int | str | None:
    if value is None:
        return None
    if value.isdigit():
        return int(value)
    if not value.strip() or value.startswith("-"):
        raise click.BadParameter(
            f"{value!r} is not a checkpoint: give its # (0 or more, as `durable-agent "
            "checkpoints ID` lists them) or its id",
            param_hint=f"'{option}'",
        )
    return value


class _Refused(Exception):
    """Ends the command with `code` after printing `message`."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class _View:
    settings: Settings
    workflow_id: str
    store_url: str

    async def run(
        self,
        path: str | None,
        at: int | str | None,
        since: int | str | None,
        export: Path | None,
    ) -> int:
        handle = (await self.settings.connect()).get(self.workflow_id)
        try:
            ref = await self.ref(handle, at)
            trees = TreeReader(open_store(self.store_url))
            tree = tree_id_of(ref)
            if since is not None:
                base = await self.ref(handle, since)
                return self.diff(trees.diff(tree_id_of(base), tree), path)
            if export is not None:
                return self.export(trees, tree, export)
            return self.files(trees, tree, path)
        except _Refused as refused:
            err(f"durable-agent: {refused}")
            return refused.code
        except EnvironmentRestoreFailed as error:
            err(
                f"durable-agent: {error} (is {self.store_url} the store the run's workers "
                f"use? set {STORE_ENV} or --store)"
            )
            return EXIT_REJECTED

    # -- which tree ----------------------------------------------------------------------

    async def ref(self, handle: AgentRunHandle, at: int | str | None) -> str:
        """The run's tree at its latest boundary, or at checkpoint `at`."""
        if isinstance(at, str):
            ref = await self._by_id(handle, at)
            where = f"checkpoint {at}"
        else:
            chain = await handle.checkpoint_chain()
            if not chain.checkpoints:
                raise _Refused(f"run {self.workflow_id!r} has no checkpoint yet", EXIT_REJECTED)
            if at is None:
                position = len(chain.checkpoints) - 1
            elif at in chain.indexes:
                position = chain.indexes.index(at)
            else:
                raise _Refused(
                    f"run {self.workflow_id!r} has no checkpoint #{at}; it has "
                    f"{_span(chain.indexes)} (durable-agent checkpoints {q(self.workflow_id)})",
                    EXIT_USAGE,
                )
            ref = chain.checkpoints[position].environment_ref
            where = f"checkpoint #{chain.indexes[position]}"
        if ref is None:
            raise _Refused(
                f"run {self.workflow_id!r} has no workspace at {where}: its agent has none "
                "(AgentBuilder.workspace gives it one)",
                EXIT_REJECTED,
            )
        try:
            tree_id_of(ref)
        except EnvironmentRestoreFailed:
            raise _Refused(
                f"run {self.workflow_id!r}'s environment at {where} is {ref!r}, not a workspace",
                EXIT_REJECTED,
            ) from None
        return ref

    async def _by_id(self, handle: AgentRunHandle, checkpoint_id: str) -> str | None:
        """A checkpoint's ref by its id, asked of each run of the chain, latest first."""
        await handle.describe()
        client = handle.agents.client
        query = CheckpointQuery(checkpoint_id=checkpoint_id)
        run_id: str | None = None
        while True:
            run = client.get_workflow_handle(self.workflow_id, run_id=run_id)
            try:
                lookup: CheckpointLookup = await run.query(
                    "checkpoint_at", query, result_type=CheckpointLookup
                )
            except Exception as error:  # a run retention deleted, a worker that is gone
                raise AgentRunError(
                    f"cannot look checkpoint {checkpoint_id!r} up in run {run_id or 'latest'} "
                    f"of {self.workflow_id!r}: {error}",
                    workflow_id=self.workflow_id,
                ) from None
            if lookup.checkpoint is not None:
                return lookup.checkpoint.resume.environment_ref
            if lookup.previous_run_id is None:
                raise _Refused(
                    f"run {self.workflow_id!r} has no checkpoint {checkpoint_id!r} (its "
                    f"checkpoints: durable-agent checkpoints {q(self.workflow_id)})",
                    EXIT_USAGE,
                )
            run_id = lookup.previous_run_id

    # -- what to print -------------------------------------------------------------------

    def files(self, trees: TreeReader, tree: str, path: str | None) -> int:
        files = trees.files(tree)
        if path is not None:
            wanted = path.strip("/")
            entry = trees.entry(tree, wanted) if wanted else None
            if entry is not None and entry.kind == "file":
                return self.cat(trees, wanted, entry)
            files = {p: e for p, e in files.items() if p.startswith(wanted + "/")}
            if not files:
                raise _Refused(
                    f"{path!r} is not in run {self.workflow_id!r}'s workspace (list its "
                    f"files: durable-agent workspace {q(self.workflow_id)})",
                    EXIT_USAGE,
                )
        if self.settings.json:
            out(json.dumps([{"path": p, "size": e.size} for p, e in files.items()], indent=2))
        elif not files:
            err("the workspace is empty")
        else:
            _table(["SIZE", "PATH"], [[str(e.size), p] for p, e in files.items()])
        return EXIT_OK

    def cat(self, trees: TreeReader, path: str, entry: Entry) -> int:
        if self.settings.json:
            data = trees.read_blob(entry.id)
            item: dict[str, Any] = {"path": path, "size": entry.size}
            try:
                item["text"] = data.decode()
            except UnicodeDecodeError:
                import base64

                item["base64"] = base64.b64encode(data).decode()
            out(json.dumps(item, ensure_ascii=False))
            return EXIT_OK
        sys.stdout.flush()
        trees.copy_blob(entry.id, sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return EXIT_OK

    def diff(self, diff: Diff, path: str | None) -> int:
        prefix = path.strip("/") if path else ""

        def kept(paths: dict[str, Entry]) -> list[str]:
            return sorted(p for p in paths if not prefix or f"{p}/".startswith(f"{prefix}/"))

        added, modified, deleted = kept(diff.added), kept(diff.modified), kept(diff.deleted)
        if self.settings.json:
            out(json.dumps({"added": added, "modified": modified, "deleted": deleted}, indent=2))
            return EXIT_OK
        rows = [
            *(["added", p] for p in added),
            *(["modified", p] for p in modified),
            *(["deleted", p] for p in deleted),
        ]
        if rows:
            _table(["CHANGE", "PATH"], sorted(rows, key=lambda r: r[1]))
        else:
            err("no changes")
        return EXIT_OK

    def export(self, trees: TreeReader, tree: str, target: Path) -> int:
        files = trees.files(tree)
        if str(target) == "-":
            trees.export_tar(tree, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        else:
            partial = target.with_name(f".{target.name}.partial")
            try:
                with partial.open("wb") as handle:
                    trees.export_tar(tree, handle)
                partial.replace(target)
            finally:
                partial.unlink(missing_ok=True)
        size = sum(e.size for e in files.values())
        if self.settings.json and str(target) != "-":
            out(json.dumps({"file": str(target), "files": len(files), "bytes": size}))
        elif str(target) != "-":
            out(str(target))
            err(f"exported {len(files)} files, {size} bytes of {self.workflow_id!r}")
        return EXIT_OK


def _span(indexes: list[int]) -> str:
    if not indexes:
        return "none"
    return f"#{indexes[0]}" if len(indexes) == 1 else f"#{indexes[0]} to #{indexes[-1]}"
