"""BENCHMARKS.md's scale-curve section and goals, from `sluice bench scale --json`
(scripts/render_benchmarks.py includes them when the run collected scale.json)."""


def redis_name(row):
    if row["masters"] == 0:
        return "one server"
    return f"Cluster, {row['masters']} master" + ("s" if row["masters"] > 1 else "")


def section(scale, chart="docs/scale.svg"):
    """The section's lines: the command, what each column means, the table, the chart."""
    lines = [
        "### The scale curve (issue 49)",
        "",
        f"`sluice bench scale --json --chart {chart}` — for 1 to 32 processes on one key of a "
        "private `redis-server`, then a Cluster of 1 and of 3 masters with 100 credentials spread "
        "over its slots, each limiter in turn: sluice's, and the two peers above. A process is one "
        "limiter with its own connection (for sluice its own `RedisBudget`: connection, lease "
        "pool, breaker and heartbeat id), all in the one benchmark process, sharing its two cores. "
        f"{scale['callers_per_process']} callers per process, {scale['seconds']:g} s per "
        f"measurement, sluice's `max_lease` {scale['max_lease']}. Decisions per second with a limit "
        "that never binds (callers back to back); then the same callers offering three times each "
        "key's limit: admitted starts, Redis round trips per admitted call (sluice's from "
        "`INFO commandstats` on every node, heartbeats and lease returns included; the peers "
        "count their own), and the most starts of any one key in any rolling second (a sluice "
        "grant starts when it came back plus its wait).",
        "",
        "| Redis | processes | keys | limiter | decisions/s | per process | round trips per decision "
        "| at 3x: admitted/s | round trips per admitted | busiest second (limit) |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in scale["rows"]:
        for m in row["limiters"]:
            lines.append(
                f"| {redis_name(row)} | {row['processes']} | {row['keys']} | {m['limiter']} | "
                f"{m['decisions_per_second']:.0f} | {m['decisions_per_second_per_process']:.0f} | "
                f"{m['round_trips_per_decision']:.3f} | {m['admitted_per_second']:.1f} | "
                f"{m['round_trips_per_admitted']:.3f} | {m['busiest_window']} ({m['limit']}) |")
    lines += ["", f"![The scale curve]({chart})", ""]
    return lines


def sluice_rows(scale):
    for row in scale["rows"]:
        for m in row["limiters"]:
            if m["limiter"].startswith("sluice"):
                yield row, m


def goals(scale, goal):
    """Issue 49's goals, checked against the run (`goal(met, text)` formats one)."""
    out = []
    rows = list(sluice_rows(scale))
    if not rows:
        return out
    for name, of in (("one key", lambda r: r["masters"] == 0),
                     ("the Cluster's credentials", lambda r: r["masters"] > 0)):
        trips = [(r, m["round_trips_per_admitted"]) for r, m in rows if of(r)]
        if trips:
            row, worst = max(trips, key=lambda t: t[1])
            out.append(goal(worst <= 0.15,
                            f"scale curve (issue 49): ≤ 0.15 Redis round trips per admitted call at "
                            f"3x the limit, {name}: worst {worst:.3f} ({redis_name(row)}, "
                            f"{row['processes']} processes)"))
    one = [m for row, m in rows if row["masters"] == 0 and row["processes"] == 1]
    if one:
        rate = one[0]["decisions_per_second_per_process"]
        out.append(goal(rate >= 50000,
                        f"scale curve (issue 49): ≥ 50,000 decisions per second, one process on "
                        f"one key: {rate:.0f}"))
    over = [(row, m) for row, m in rows if m["busiest_window"] > m["limit"]]
    out.append(goal(not over,
                    "scale curve (issue 49): no row's busiest second above the limit"
                    + ("" if not over else ": " + ", ".join(
                        f"{redis_name(r)} × {r['processes']}: {m['busiest_window']} ({m['limit']})"
                        for r, m in over))))
    return out
