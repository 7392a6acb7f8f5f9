"""Who may decide a tool's approval: `AgentBuilder.approvers({"deploy": ["alice", "ops"]})`.

Each name is a user or a group: a person may decide a call of `deploy` when their own name
or one of their groups is listed. A tool the mapping does not name may be decided by anyone.
The mapping does not make a tool wait for approval (that is `approval_required_tools` or a
tool raising `ApprovalRequired`); it says who may answer when it does.

On Temporal the workflow checks every decision against this list, using the `decided_by`
and `groups` the decision carries; with signed approvals on (`DURABLE_AGENT_APPROVAL_KEYS`)
those two are covered by the signature, so they are the inbox's word, not the sender's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..contract.errors import UserError

__all__ = ["ApproverMap", "approver_problem", "normalize_approvers"]

ApproverMap = Mapping[str, frozenset[str]]
"""Tool name → the users and groups who may decide its calls."""


def normalize_approvers(spec: Mapping[str, Sequence[str]]) -> dict[str, frozenset[str]]:
    """Checks the shape of `approvers({...})` and freezes it.

    A bare string where a list belongs would otherwise be read letter by letter
    (`{"deploy": "alice"}` allowing users "a", "l", ...), so it is refused by name.
    """
    if not isinstance(spec, Mapping):
        raise UserError(
            f'approvers takes a mapping of tool name to names, e.g. {{"deploy": ["alice", '
            f'"ops"]}}, got {type(spec).__name__}'
        )
    frozen: dict[str, frozenset[str]] = {}
    for tool, names in spec.items():
        if not isinstance(tool, str) or not tool:
            raise UserError(f"approvers: tool names must be non-empty strings, got {tool!r}")
        if isinstance(names, str) or not isinstance(names, Iterable):
            raise UserError(
                f"approvers[{tool!r}] must be a list of user or group names, got {names!r}"
            )
        listed = list(names)
        bad = [name for name in listed if not isinstance(name, str) or not name.strip()]
        if bad:
            raise UserError(f"approvers[{tool!r}]: names must be non-empty strings, got {bad[0]!r}")
        if not listed:
            raise UserError(
                f"approvers[{tool!r}] is empty, so nobody could ever decide that tool; list "
                "at least one user or group"
            )
        frozen[tool] = frozenset(name.strip() for name in listed)
    return frozen


def approver_problem(
    tool_name: str,
    allowed: frozenset[str] | None,
    decided_by: str | None,
    groups: Iterable[str] = (),
) -> str | None:
    """Why `decided_by` (in `groups`) may not decide a call of `tool_name`, or None.

    `allowed` is None when the agent restricts nobody for this tool.
    """
    if allowed is None:
        return None
    names = ", ".join(sorted(allowed))
    if not decided_by:
        return (
            f"tool {tool_name!r} may be decided only by {names}; this decision names no "
            "approver (decided_by)"
        )
    member = set(groups)
    if decided_by in allowed or member & allowed:
        return None
    listed = ", ".join(sorted(member)) or "none"
    return (
        f"{decided_by!r} (groups: {listed}) may not decide tool {tool_name!r}; its approvers "
        f"are {names}"
    )
