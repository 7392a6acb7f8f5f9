"""Renders the one report, benchmarks/RESULTS.md, from the measures' JSON files."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import report_fleet as fleet
from benchmarks.tables import fmt, goal, span, table


def comparison(data: dict[str, Any], keys: Sequence[str]) -> list[str]:
    """A, B, A/B of the medians, and the range of A/B round by round (and L's beside A's
    where the measure ran L)."""
    if "L" not in data:
        rows = [
            [k, data["A"][k], data["B"][k], data["A/B"][k], span(data["paired"][k])] for k in keys
        ]
        return table(["median", "A", "B", "A/B", "A/B by round"], rows)
    rows = [
        [
            k,
            data["A"][k],
            data["L"][k],
            data["B"][k],
            data["A/B"][k],
            span(data["paired"][k]),
            data["L/B"][k],
            span(data["paired L"][k]),
        ]
        for k in keys
    ]
    header = ["median", "A", "L", "B", "A/B", "A/B by round", "L/B", "L/B by round"]
    return table(header, rows)


def summary(m: dict[str, Any]) -> list[str]:
    rows = []
    if "throughput" in m:
        for name, tp in m["throughput"].items():
            # issue 41's goals: one-step runs at ≤ 1.25× bare CPU, ten-step runs at ≤ 1.12×
            cpu = "≤ 1.25" if name.endswith("x1") else "≤ 1.12"
            rows.append([f"{name} steps/s", tp["A/B"]["steps_per_s"], "≥ 0.90"])
            rows.append([f"{name} worker CPU per step", tp["A/B"]["worker_cpu_ms"], cpu])
            if "L/B" in tp:
                rows.append(
                    [f"{name} steps/s, L (local quick nodes)", tp["L/B"]["steps_per_s"], "≥ 0.90"]
                )
                rows.append([f"{name} worker CPU per step, L", tp["L/B"]["worker_cpu_ms"], cpu])
    if "history" in m:
        h = m["history"]
        rows.append([f"history bytes per step, k = {h['steps']}", h["A/B"]["bytes_per_step"], ""])
        rows.append([f"worker CPU per step, k = {h['steps']}", h["A/B"]["worker_cpu_ms"], ""])
    if "replay" in m:
        rows.append(
            [f"replay of a {m['replay']['steps']}-step run", m["replay"]["A/B"]["replay_ms"], ""]
        )
    if "memory" in m:
        rows.append(
            ["memory a waiting run keeps (RSS)", m["memory"]["A/B"]["rss_kb_per_run"], "≤ 1.5"]
        )
    head = table(["A/B (medians)", "value", "goal"], rows)
    if "loop" in m:
        lp = m["loop"]
        short, long = lp["lengths"]
        loop_rows = [
            [
                name,
                r["median_us_per_step"][str(short)],
                r["median_us_per_step"][str(long)],
                r[f"{long}/{short}"],
            ]
            for name, r in lp["models"].items()
        ]
        head += table(
            ["in-process loop, model", f"µs/step, {short}", f"µs/step, {long}", f"{long}/{short}"],
            loop_rows,
        )
        head += ["Goal: ≤ 150 µs a step, within 10% between the lengths.", ""]
        counts = lp.get("instructions")
        if counts:
            head += table(
                [
                    "in-process loop, model",
                    f"instructions/step, {short}",
                    f"instructions/step, {long}",
                    f"{long}/{short}",
                ],
                [
                    [
                        name,
                        r["per_step"][str(short)],
                        r["per_step"][str(long)],
                        r[f"{long}/{short}"],
                    ]
                    for name, r in counts["models"].items()
                ],
            )
            head += [
                f"Counted by callgrind: a run of N steps minus one of {counts['base_steps']}, "
                "over the difference; the same on a busy minute as on a quiet one.",
                "",
            ]
    if "quota" in m:
        q = m["quota"]
        head += table(
            [
                f"{q['runs']} runs × {q['steps']} steps, {q['limit']} requests / "
                f"{q['window_s']:.0f} s (medians)",
                "completion s",
                "ideal s",
                "completion / ideal",
                "429s",
                "requests",
                "all completed",
            ],
            [
                [
                    side,
                    q[side]["completion_s"],
                    q["ideal_s"],
                    q[side]["vs_ideal"],
                    q[side]["refused"],
                    q[side]["requests"],
                    "yes" if q[side]["all_completed"] else "**no**",
                ]
                for side in ("with quota", "without quota")
            ],
        )
        head += ["Goal (issue 41): with the quota ≤ 1.15× the ideal, no 429.", ""]
    if "upgrade" in m:
        head += fleet.upgrade_summary(m["upgrade"])
    return head


def throughput(data: dict[str, Any]) -> list[str]:
    lines = []
    for name, tp in data.items():
        lines += [f"### {name}: {tp['runs']} concurrent {tp['steps']}-step runs a round", ""]
        rows = [
            [
                r["round"],
                r["kind"],
                r["wall_s"],
                r["steps_per_s"],
                r["worker_cpu_ms"],
                r["server_cpu_ms"],
                r["gc_ms"],
                r["gc_collections"],
                r.get("gc_freed", "-"),
                r["workflow_tasks"],
                r["history_bytes"],
            ]
            for r in tp["rounds"]
        ]
        lines += table(
            [
                "round",
                "kind",
                "wall s",
                "steps/s",
                "worker CPU ms/step",
                "server CPU ms/step",
                "gc ms/step",
                "collections gen 0/1/2",
                "freed by gc/step",
                "workflow tasks/step",
                "bytes/step",
            ],
            rows,
        )
        lines += comparison(tp, list(tp["A"]))
    return lines


def history(data: dict[str, Any]) -> list[str]:
    k = data["steps"]
    lines = comparison(data, ["wall_ms", "worker_cpu_ms", "events_per_step", "bytes_per_step"])
    a, b = data["median_run"]["A"], data["median_run"]["B"]
    lines += [f"Events by type, the median-time run of each (count, bytes/step), k = {k}:", ""]
    none = [0, 0]
    types = sorted(
        set(a["events_by_type"]) | set(b["events_by_type"]),
        # Ties broken by name: a set's order changes from one process to the next, and the
        # report must come out the same when it is written again from the same results.
        key=lambda t: (
            -a["events_by_type"].get(t, none)[1] - b["events_by_type"].get(t, none)[1],
            t,
        ),
    )
    rows = [
        [
            t,
            a["events_by_type"].get(t, none)[0],
            a["events_by_type"].get(t, none)[1] / k,
            b["events_by_type"].get(t, none)[0],
            b["events_by_type"].get(t, none)[1] / k,
        ]
        for t in types
    ]
    rows.append(["**total**", a["events"], a["bytes"] / k, b["events"], b["bytes"] / k])
    lines += table(["event", "A count", "A bytes/step", "B count", "B bytes/step"], rows)
    lines += ['Activity payload JSON bytes/step by leaf key (`"key":value`):', ""]
    keys = list(dict.fromkeys([*a["payload_bytes_by_key"], *b["payload_bytes_by_key"]]))[:14]
    rows = [
        [f"`{n}`", a["payload_bytes_by_key"].get(n, 0) / k, b["payload_bytes_by_key"].get(n, 0) / k]
        for n in keys
    ]
    return lines + table(["key", "A", "B"], rows)


def replay(data: dict[str, Any]) -> list[str]:
    rows = [[r["kind"], r["replay_ms"], r["ms_per_step"]] for r in data["replays"]]
    return table(["kind", "replay ms", "ms/step"], rows) + comparison(
        data, ["replay_ms", "events", "bytes"]
    )


def profile(data: dict[str, Any]) -> list[str]:
    lines = [
        f"{data['runs']} x {data['steps']} steps; worker CPU {fmt(data['worker_cpu_ms'])} "
        f"ms/step, profiled threads {fmt(data['profiled_ms'])} ms/step.",
        "",
    ]
    lines += table(["side", "ms/step"], list(data["sides_ms"].items()))
    packages = list(data["by_package_ms"].items())[:20]
    lines += table(["package (own time), top 20", "ms/step"], packages)
    rows = [
        [f"`{f['function']}`", f["calls"], f["tottime_ms"], f["cumtime_ms"]]
        for f in data["top_functions"]
    ]
    return lines + table(["function", "calls", "own ms/step", "cumulative ms/step"], rows)


def objects(data: dict[str, Any]) -> list[str]:
    sides = ("A", "L", "B")
    lines = [
        f"{data['runs']} runs of {data['steps']} steps left waiting; objects the collector "
        f"tracks, per run, over the idle worker's: "
        + ", ".join(f"{k} {fmt(data[k]['objects_per_run'])}" for k in sides)
        + f" (A/B {fmt(data['A/B'])}, L/B {fmt(data['L/B'])}).",
        "",
    ]
    names = list(dict.fromkeys(n for k in sides for n in data[k]["by_type"]))
    rows = [[f"`{n}`", *(data[k]["by_type"].get(n, "-") for k in sides)] for n in names]
    return lines + table(["type (the most numerous of each side)", *sides], rows)


def streaming(data: dict[str, Any]) -> list[str]:
    rows = [
        [
            label,
            r["ms_per_step"],
            r["events_per_step"],
            r["bytes_per_step"],
            r["bytes_vs_off"],
            r["bytes_vs_bare"],
            r["signals"],
            r["updates"],
            r["records_read"] if r["records_read"] is not None else "-",
        ]
        for label, r in data["runs"].items()
    ]
    lines = table(
        [
            "run",
            "ms/step",
            "events/step",
            "bytes/step",
            "bytes vs off",
            "bytes vs B",
            "signals",
            "updates",
            "records read",
        ],
        rows,
    )
    lat = [[name, ms, len(data["latency"][name])] for name, ms in data["latency_median_ms"].items()]
    return lines + table(["latency", "median ms", "samples"], lat)


def quota(data: dict[str, Any]) -> list[str]:
    lines = [
        f"{data['runs']} runs of {data['steps']} model requests each, started at once on two "
        f"worker processes, against a server refusing with 429 + Retry-After beyond "
        f"{data['limit']} requests in any {data['window_s']:.0f} s; with the quota "
        f"`{data['quota']}` on both workers, and without. Ideal: the last of "
        f"{data['requests_needed']} requests can go at {fmt(data['ideal_s'])} s.",
        "",
    ]
    rows = [
        [
            r["round"],
            r["side"],
            r["completion_s"],
            r["vs_ideal"],
            r["answered"],
            r["refused"],
            r["refused_share"],
            r["completed"],
            r["worker_cpu_s"],
            r["server_cpu_s"],
        ]
        for r in data["rounds"]
    ]
    header = ["round", "side", "completion s", "/ ideal", "answered", "429s", "429 share"]
    return lines + table([*header, "completed", "worker CPU s", "server CPU s"], rows)


def loop(data: dict[str, Any]) -> list[str]:
    rows = [
        [name, int(steps), len(t), min(t), max(t)]
        for name, r in data["models"].items()
        for steps, t in r["us_per_step"].items()
    ]
    return table(["model", "steps", "timings", "min µs/step", "max µs/step"], rows)


def testkit(data: dict[str, Any]) -> list[str]:
    env = data["env"]
    lines = [
        f"`AgentTestEnvironment` (time-skipping server, worker, clients) from `async with` to a "
        f"run's first result: {fmt(env['first_result_s'])} s (median of {env['rounds']}, max "
        f"{fmt(env['first_result_max_s'])} s; goal {fmt(env['goal_s'])} s), teardown "
        f"{fmt(env['teardown_s'])} s.",
        "",
    ]
    lines += table(
        [
            f"{data['cases']} runs × {data['steps']} model requests, "
            f"{data['concurrency']} at a time (medians of {data['rounds']})",
            "wall s",
        ],
        [["started directly", data["direct_s"]], ["evaluate()", data["evaluate_s"]]],
    )
    lines += [
        f"evaluate / direct: {fmt(data['evaluate/direct'])} (goal ≤ {fmt(data['goal_ratio'])}).",
        "",
    ]
    return lines


def workspace(data: dict[str, Any]) -> list[str]:
    goals, large, small = data["goals"], data["snapshot"], data["small"]
    checkout, runs = data["materialize"], data["history"]
    files = f"{large['files']:,} files / {large['bytes'] / 1e6:.0f} MB"
    lines = [
        f"One `file://` store on this machine's disk; medians of {data['rounds']} "
        "rounds (`benchmarks/workspace.py` says what each figure times).",
        "",
    ]
    lines += table(
        ["figure", "value", "goal"],
        [
            [
                f"new objects of a one-file change, {files} (bytes)",
                goal(large["new_bytes"], goals["new_bytes"]),
                f"≤ {fmt(goals['new_bytes'])}",
            ],
            ["objects written for it", large["new_objects"], ""],
            [
                f"snapshot of a one-file change (file methods), {files}, ms",
                goal(large["snapshot_ms"], goals["snapshot_ms"]),
                f"≤ {fmt(goals['snapshot_ms'])}",
            ],
            [
                f"the same, {small['files']} files, ms",
                small["snapshot_ms"],
                "",
            ],
            [
                f"{large['files']:,} files / {small['files']} files",
                goal(data["large/small"], goals["small_ratio"]),
                f"≤ {fmt(goals['small_ratio'])}",
            ],
            [
                f"snapshot of a one-file change made in local_dir() (a scan), {files}, ms",
                large["scan_snapshot_ms"],
                "",
            ],
            [f"the same, {small['files']} files, ms", small["scan_snapshot_ms"], ""],
            [f"the agent's initial upload of {files}, s", large["upload_s"], ""],
            ["hashing it when the agent is built, s", large["build_hash_s"], ""],
            [
                f"fresh checkout of {files}, s (median)",
                checkout["fresh_median_s"],
                "",
            ],
            ["`cp -r` of the same tree, s (median)", checkout["cp_median_s"], ""],
            [
                "fresh checkout / `cp -r`",
                goal(checkout["fresh/cp"], goals["fresh_vs_cp"]),
                f"≤ {fmt(goals['fresh_vs_cp'])}",
            ],
            ["the same, round by round", span(checkout["fresh/cp by round"]), ""],
            [
                "CPU s: fresh checkout, `cp -r` (medians)",
                f"{fmt(checkout.get('fresh_cpu_s'))}, {fmt(checkout.get('cp_cpu_s'))}",
                "",
            ],
            ["fresh checkout / `cp -r`, CPU", checkout.get("fresh/cp CPU"), ""],
            [
                "checkout on a worker that has the previous tree, ms",
                goal(checkout["incremental_ms"], goals["incremental_ms"]),
                f"≤ {fmt(goals['incremental_ms'])}",
            ],
            [
                f"history bytes of a {runs['steps']}-step run changing a file a step, with / "
                "without a workspace",
                goal(runs["ratio"], goals["history_ratio"]),
                f"≤ {fmt(goals['history_ratio'])}",
            ],
            ["  with a workspace, bytes", runs["with_workspace_bytes"], ""],
            ["  without, bytes", runs["without_bytes"], ""],
            ["  added per step, bytes", runs["extra_bytes_per_step"], ""],
        ],
    )
    rows = [[side, *(fmt(v) for v in checkout[f"{side}_s"])] for side in ("fresh", "cp")]
    lines += table(
        ["checkout, s, by round", *(str(i + 1) for i in range(len(checkout["fresh_s"])))], rows
    )
    return lines


SECTIONS = {
    "throughput": ("Throughput, A and B workers side by side", throughput),
    "history": ("History and cost per step, one run at a time", history),
    "replay": ("Replay of a run left waiting", replay),
    "profile": ("Profile of A's worker", profile),
    "objects": ("What a run in flight keeps alive", objects),
    "memory": ("Memory a waiting run keeps in its worker", fleet.memory),
    "upgrade": ("A rolling upgrade under load", fleet.upgrade),
    "streaming": ("The live event stream", streaming),
    "quota": ("Model quotas: many runs, one provider limit", quota),
    "testkit": ("The test kit: a test environment, evals on the fleet", testkit),
    "workspace": ("Workspaces: snapshots, checkouts, history", workspace),
    "loop": ("In-process loop", loop),
}


def render(folder: Path) -> str:
    files = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}
    measures = {name: f["results"] for name, f in files.items()}
    lines = ["# Benchmark report", "", "Rendered by `benchmarks/report.py` from:", ""]
    lines += table(
        ["measure", "command", "date", "took s", "machine (cores, load)"],
        [
            [
                n,
                f"`{f['command']}`",
                f["date"],
                f["took_s"],
                f"{f['machine']['cores']}, {fmt(f['machine']['load'])}",
            ]
            for n, f in files.items()
        ],
    )
    lines += [
        "A = `AgentWorkflow` (default options), L = the same with `local_activities` for "
        "its quick nodes, B = bare Temporal; see docs/benchmarks.md.",
        "",
        "## Summary",
        "",
    ]
    lines += summary(measures)
    for name, (title, render_section) in SECTIONS.items():
        if name in measures:
            lines += [f"## {title}", "", *render_section(measures[name])]
    return "\n".join(lines).rstrip() + "\n"
