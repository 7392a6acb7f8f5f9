"""The report's sections on a fleet (issue 41): the memory a waiting run keeps, and a rolling
upgrade under load."""

from __future__ import annotations

from typing import Any

from benchmarks.tables import fmt, goal, table

__all__ = ["memory", "upgrade", "upgrade_summary"]


def memory(data: dict[str, Any]) -> list[str]:
    ratios = data["A/B"]
    lines = [
        f"{data['runs']} runs of {data['steps']} step left waiting in each side's cache (A's "
        "for an approval, B's for a signal), measured between a tenth of them and all of "
        f"them. A/B per run: resident memory {goal(ratios['rss_kb_per_run'], data['goal'])}, "
        f"objects {fmt(ratios['objects_per_run'])}, allocated blocks "
        f"{fmt(ratios['blocks_per_run'])} (goal ≤ {data['goal']}).",
        "",
    ]
    rows = [
        [label, fmt(data["A"][key]), fmt(data["B"][key]), fmt(ratios.get(key))]
        for label, key in (
            ("resident memory (kB) a run", "rss_kb_per_run"),
            ("of it, Python's small-object arenas (kB)", "arenas_kb_per_run"),
            ("the C heap in use (kB)", "heap_kb_per_run"),
            ("the C heap freed but held (kB)", "heap_free_kb_per_run"),
            ("objects tracked a run", "objects_per_run"),
            ("allocated blocks a run", "blocks_per_run"),
        )
        if key in data["A"] and key in data["B"]
    ]
    lines += table(["a waiting run keeps", "A", "B", "A/B"], rows)
    names = list(dict.fromkeys(n for k in ("A", "B") for n in data[k]["by_type"]))
    rows = [[f"`{n}`", *(fmt(data[k]["by_type"].get(n)) for k in ("A", "B"))] for n in names]
    lines += ["", *table(["type (the most numerous of each side), a run", "A", "B"], rows)]
    longer = data.get("longer")
    if longer is None:
        return lines
    a, b = longer["A"], longer["B"]
    step = longer["rss_kb_per_step"]
    lines += [
        "",
        f"{longer['runs']} runs of {longer['steps']} steps left waiting the same way: A "
        f"{fmt(a['rss_kb_per_run'])} kB a run, B {fmt(b['rss_kb_per_run'])} kB (A/B "
        f"{fmt(longer['A/B']['rss_kb_per_run'])}); objects {fmt(a['objects_per_run'])} and "
        f"{fmt(b['objects_per_run'])}. Each step beyond the first adds {fmt(step['A'])} kB to "
        f"a waiting A run and {fmt(step['B'])} kB to a B run.",
    ]
    waves = data.get("in_waves")
    if waves is None:
        return lines
    a, b = waves["A"], waves["B"]
    return [
        *lines,
        "",
        f"The same {waves['runs']} runs of {waves['steps']} steps started {waves['wave']} at a "
        "time, each wave waiting before the next starts (as runs arriving over time do): A "
        f"{fmt(a['rss_kb_per_run'])} kB a run, B {fmt(b['rss_kb_per_run'])} kB (A/B "
        f"{fmt(waves['A/B']['rss_kb_per_run'])}).",
    ]


def upgrade(data: dict[str, Any]) -> list[str]:
    kinds = ", ".join(f"{count} {kind}" for kind, count in data["by_kind"].items())
    problems = data["problems"]
    delay = data.get("delay_s", {})
    slowest = data.get("slowest_run")
    lines = [
        f"{data['runs']} runs ({kinds}) started on {data['previous_release']}'s worker; "
        "the server and that worker SIGKILLed together once all waited; today's worker, with "
        "one of the previous release beside it until drained (SIGTERM), finishes them.",
        "",
        f"Completed {data.get('completed', 0)} of {data['runs']}; workflow task failures "
        f"{data.get('workflow_task_failures', 'n/a')} in {data.get('histories_checked', 0)} "
        "histories"
        + _races(data)
        + f"; problems: {len(problems)}"
        + (" (the first: " + "; ".join(problems[:3]) + ")" if problems else "")
        + ".",
        "",
    ]
    rows = [
        [label, data[key]]
        for label, key in (
            ("runs started (s from the first start)", "started_s"),
            ("all waiting (s from the first start)", "waiting_s"),
            ("server back (s after the kill)", "server_down_s"),
            ("workers ready (s after the kill)", "workers_ready_s"),
            ("decisions sent (s after the kill)", "decisions_sent_s"),
            ("all closed (s after the kill)", "upgrade_s"),
            ("wall time, first start to last close (s)", "wall_s"),
        )
        if key in data
    ]
    lines += table(["phase", "s"], rows)
    by_kind = data.get("delay_s_by_kind", {})
    rows = [
        [kind, *(spread.get(k) for k in ("median", "p95", "max"))]
        for kind, spread in {"all": delay, **by_kind}.items()
    ]
    lines += table(["delay from let go to end (s)", "median", "p95", "max"], rows)
    if slowest:
        lines += [
            f"The slowest run: `{slowest['id']}` ({slowest['kind']}), {fmt(slowest['delay_s'])} s.",
            "",
        ]
    return lines


def _races(data: dict[str, Any]) -> str:
    """The previous release's own close race, counted apart from the upgrade's failures."""
    races = data.get("previous_release_close_races")
    if not races:
        return ""
    return (
        f" (and {races} by the previous release's worker closing a run before its last "
        "signal was confirmed, a race fixed since: the task is retried and the run completes)"
    )


def upgrade_summary(data: dict[str, Any]) -> list[str]:
    slowest = data.get("slowest_run") or {}
    return [
        f"Rolling upgrade under load: {data.get('completed', 0)} of {data['runs']} runs "
        f"completed, {len(data['problems'])} problems, "
        f"{data.get('workflow_task_failures', 'n/a')} workflow task failures; all closed "
        f"{fmt(data.get('upgrade_s'))} s after the kill, the slowest run's delay "
        f"{fmt(slowest.get('delay_s'))} s (goal: no run lost, no tool redone or run when "
        "denied, no task failure).",
        "",
    ]
