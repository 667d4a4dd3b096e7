#!/usr/bin/env python3
"""Renders BENCHMARKS.md from the outputs scripts/bench.sh collected.

Every table says which command produced it; every goal is checked against
the measured figure, and a missed one says by how much.
"""
import datetime
import json
import os
import platform
import re
import sys

# `render_benchmarks.py --budgets DIR` prints only the budget scenarios' sections and goals
# (from DIR/scenarios.json), for a run of `sluice bench scenarios --scenario llm-tokens` and
# `--scenario priority` alone.
budgets_only = sys.argv[1] == "--budgets"
results = sys.argv[2] if budgets_only else sys.argv[1]


def read(name):
    with open(os.path.join(results, name), encoding="utf-8") as f:
        return f.read()


def criterion(text):
    """{benchmark id: median estimate in nanoseconds} from criterion's output.

    Criterion prints `ID time: [low median high]`, with the id on the line
    before when it is long.
    """
    units = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}
    found = {}
    previous = None
    for line in text.splitlines():
        t = re.search(r"time:\s*\[\S+ \S+ (\S+) (\S+) \S+ \S+\]", line)
        if t:
            name = line.split("time:")[0].strip() or previous
            if name:
                found[name] = float(t.group(1)) * units[t.group(2)]
        elif line.strip():
            previous = line.strip()
    return found


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def goal(met, text):
    return ("met" if met else "**missed**") + f": {text}"


def budget_sections(scenarios):
    """The llm-tokens and priority sections, as lines."""
    out = []
    llm = [r for r in scenarios if r["scenario"] == "llm-tokens"]
    if llm:
        out += ["", "### llm-tokens", "",
                "`sluice bench scenarios --scenario llm-tokens --json` — LLM-style calls (`POST "
                "/v1/chat`, a JSON body with `max_tokens` uniform in 500-1500) offered at 90 per second "
                "against a key allowing 500 requests and 150,000 tokens in any 5 s (a minute's limits "
                "scaled down), 20-80 ms per answer. The fake charges `max_tokens` while a call is in "
                "flight and keeps only the answer's `usage.total_tokens` (30-70% of it) once answered. "
                "`requests-only`: an exact sliding window on requests; `reserve-reconcile`: LiteLLM's "
                "shape, fixed 5 s windows reserving the estimate and reconciling it to the usage; both "
                "retry 429s like the OpenAI SDK (twice, after Retry-After). `sluice`: `rate = \"500/5s\"`, "
                "`units.tokens.rate = \"150000/5s\"`, `max_in_flight = 48`, `cost = { tokens = \"{max_tokens}\" }`, "
                "`settle = { tokens = \"/usage/total_tokens\" }`, the default 2 s inline threshold; "
                "`sluice-100ms`: the same with a 100 ms inline threshold (a call waiting for its slot "
                "holds its estimate meanwhile, so reservations far ahead are priced at estimates). Token goodput: tokens the server "
                "accepted per second over its token limit per second; windows over-spent: 5 s windows "
                "of the run in which the server refused a request for want of budget.", "",
                "| strategy | token goodput | throttled by the server | windows over-spent | p50 ms | p99 ms | calls ok |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        for r in llm:
            out.append(f"| {r['strategy']} | {r['token_goodput']:.3f} | {r['throttled_ratio'] * 100:.1f}% | "
                       f"{r['overspent_windows']}/{r['windows']} | {r['p50_ms']} | {r['p99_ms']} | "
                       f"{r['ok_ratio'] * 100:.0f}% |")
    prio = [r for r in scenarios if r["scenario"] == "priority"]
    if prio:
        out += ["", "### priority", "",
                "`sluice bench scenarios --scenario priority --json` — one gate on a key at 20 requests "
                "per rolling second (50-150 ms per answer): a production job at 4 calls per second and "
                "an agent flooding at 60 per second. `fifo`: both at normal priority; `sluice`: "
                "production `priority = \"high\"`, the agent `\"low\"` with `priorities.low = \"75%\"`. "
                "A production call fails when it is not answered `ok`; its wait is its whole call time.", "",
                "| strategy | production failures | production p50 ms | production p99 ms | agent goodput | throttled by the server |",
                "|---|---:|---:|---:|---:|---:|"]
        for r in prio:
            out.append(f"| {r['strategy']} | {r['production_failures']}/{r['production_calls']} | "
                       f"{r['production_p50_ms']} | {r['production_p99_ms']} | {r['agent_goodput']:.2f} | "
                       f"{r['throttled_ratio'] * 100:.1f}% |")
    return out


def budget_goals(scenarios):
    """Issue 14's goals for the budget scenarios, as `goal()` lines."""
    goals = []
    llm = {r["strategy"]: r for r in scenarios if r["scenario"] == "llm-tokens"}
    for name in ["sluice", "sluice-100ms"]:
        s = llm.get(name)
        if not s:
            continue
        goals.append(goal(s["token_goodput"] >= 0.95 and s["throttled_ratio"] <= 0.01
                          and s["overspent_windows"] == 0,
                          f"llm-tokens: {name} token goodput {s['token_goodput']:.3f} (≥ 0.95), throttled "
                          f"{s['throttled_ratio'] * 100:.1f}% (≤ 1%), windows over-spent "
                          f"{s['overspent_windows']} (0)"))
    p = {r["strategy"]: r for r in scenarios if r["scenario"] == "priority"}.get("sluice")
    if p:
        goals.append(goal(p["production_failures"] == 0 and p["production_p99_ms"] <= p["inline_threshold_ms"],
                          f"priority: production failures {p['production_failures']} (0), p99 "
                          f"{p['production_p99_ms']} ms (≤ the inline threshold, {p['inline_threshold_ms']} ms)"))
    return goals


if budgets_only:
    budget_scenarios = json.loads(read("scenarios.json"))
    print("\n".join(budget_sections(budget_scenarios)))
    print("")
    for g in budget_goals(budget_scenarios):
        print(f"- {g}")
    sys.exit(0)

limiter = criterion(read("limiter.txt"))
gate = criterion(read("gate.txt"))
# The keyed scopes' ratio in alternating batches (`--bench keyed_ratio`), when the run had it.
keyed = re.search(r"keyed scopes, interleaved: ratio ([\d.]+) \(median of (\d+) pairs of (\d+) calls; "
                  r"([\d.]+) µs against ([\d.]+) µs", read("gate.txt"))
# The memory bench's allocation count (issue 18), when the run had it.
allocated = (re.search(r"allocated per idle scope: (\d+) bytes in ([\d.]+) blocks \((\d+) scopes", read("memory.txt"))
             if os.path.exists(os.path.join(results, "memory.txt")) else None)
scenarios = json.loads(read("scenarios.json"))
overhead = json.loads(read("overhead.json"))
# The same bench with GitHub's rate-limit fields on every upstream answer, when the run had it.
overhead_github = (json.loads(read("overhead-github.json"))
                   if os.path.exists(os.path.join(results, "overhead-github.json")) else None)
shared = json.loads(read("shared.json"))
# `sluice bench scale`'s curve, when the run had it (scripts/render_scale.py renders it).
scale = json.loads(read("scale.json")) if os.path.exists(os.path.join(results, "scale.json")) else None
# python/bench/compare.py's figures, when the run had the Python package.
python = json.loads(read("python.json")) if os.path.exists(os.path.join(results, "python.json")) else None


def ns(key, table):
    value = table.get(key)
    return f"{value:.1f} ns" if value is not None else "n/a"


def python_intro(data):
    return (f"`python3 python/bench/compare.py --json` (a release build of `python/`; load average "
            f"{data['machine']['load']:.2f} when it started, Python {data['machine']['python']}) — "
            f"{data['setup']['turns']} turns of {data['setup']['turn_calls']} calls every "
            f"{data['setup']['turn_every_ms']} ms against the fake API, whose key allows "
            f"{data['setup']['limit']} requests in any rolling second (answers in "
            f"{data['setup']['latency_ms']} ms); each limiter set to that limit, each driving an httpx "
            "client, the fake's records the witness. Then the cost a user feels, side by side: an httpx "
            "GET to a loopback server (the fake, in-process) bare and through `sluice.HTTPTransport`, "
            "and a no-op function tool bare and through a turn. As context, the cost of a call that "
            "does not wait, on httpx's in-memory MockTransport (no network): a request through each "
            "limiter minus the same request without one, and each library's acquire alone.")


def python_tables(data):
    load = data["load"]
    rows = [("calls", "calls"), ("requests sent", "requests"),
            ("most starts in a rolling second", "most_in_rolling_second"), ("server 429s", "server_429s"),
            ("answered", "answered"), ("deferred to the model (`rate_limited`)", "deferred"),
            ("failed", "failed"), ("run time (s)", "elapsed_s")]
    out = ["| | " + " | ".join(h["limiter"] for h in load) + " |",
           "|---|" + "---:|" * len(load)]
    for label, key in rows:
        out.append(f"| {label} | " + " | ".join(str(h[key]) for h in load) + " |")
    cost = data["overhead"]
    if "loopback_bare_us" in cost:
        out += ["", "| the cost a user feels (median of interleaved rounds) | |", "|---|---:|"]
        for label, key, unit in [("GET to a loopback server (the fake API), bare", "loopback_bare_us", "µs"),
                                 ("the same through `sluice.HTTPTransport`", "loopback_sluice_us", "µs"),
                                 ("**added to the request**", "loopback_added_pct", "%"),
                                 ("a no-op tool awaited directly", "noop_tool_directly_us", "µs"),
                                 ("the same tool through a turn", "sluice_function_tool_call_us", "µs"),
                                 ("**added to the function tool**", "sluice_function_tool_overhead_us", "µs")]:
            out.append(f"| {label} | {cost[key]:.2f} {unit} |")
    out += ["", "| context: per call, no wait, in-memory transport (median of rounds) | µs |", "|---|---:|"]
    for label, key in [("request, no limiter", "bare_request_us"),
                       ("request through sluice's transport", "sluice_request_us"),
                       ("request inside `async with` aiolimiter", "aiolimiter_request_us"),
                       ("request after pyrate-limiter's `try_acquire_async`", "pyrate_request_us"),
                       ("**sluice's overhead per request**", "sluice_overhead_us"),
                       ("aiolimiter's overhead per request", "aiolimiter_overhead_us"),
                       ("pyrate-limiter's overhead per request", "pyrate_overhead_us"),
                       ("aiolimiter `acquire()` alone", "aiolimiter_acquire_us"),
                       ("pyrate-limiter `try_acquire_async()` alone", "pyrate_acquire_us"),
                       ("a no-op tool awaited directly", "noop_tool_directly_us"),
                       ("the same tool as a sluice function tool", "sluice_function_tool_call_us"),
                       ("sluice's overhead per function-tool call", "sluice_function_tool_overhead_us")]:
        out.append(f"| {label} | {cost[key]:.2f} |")
    return out


def python_goals(data):
    # Issue 52 replaced the goal against aiolimiter's acquire() (kept in the
    # table, as context) with the two a user would feel.
    sluice_row = data["load"][0]
    cost = data["overhead"]
    ratio = data["overhead"]["sluice_overhead_us"] / data["overhead"]["aiolimiter_acquire_us"]
    return [
        goal(sluice_row["most_in_rolling_second"] <= data["setup"]["limit"],
             f"python: sluice never over {data['setup']['limit']} in any rolling second: "
             f"{sluice_row['most_in_rolling_second']} (server 429s: {sluice_row['server_429s']})"),
    ] + ([
        goal(cost["loopback_added_pct"] <= 5.0, f"python (issue 52): a GET to a loopback server through "
             f"`sluice.HTTPTransport` costs at most 5% more than bare: +{cost['loopback_added_pct']:.1f}% "
             f"({cost['loopback_sluice_us']:.0f} against {cost['loopback_bare_us']:.0f} µs)"),
        goal(cost["sluice_function_tool_overhead_us"] <= 10.0, f"python (issue 52): a function tool "
             f"through a turn adds at most 10 µs: {cost['sluice_function_tool_overhead_us']:.1f} µs"),
    ] if "loopback_bare_us" in cost else [
        goal(ratio <= 2.0, f"python: a non-waiting sluice call costs at most 2x aiolimiter's `acquire()`: "
             f"{ratio:.0f}x ({data['overhead']['sluice_overhead_us']:.1f} µs against "
             f"{data['overhead']['aiolimiter_acquire_us']:.2f} µs)"),
    ])


lines = []
w = lines.append
w("# Benchmarks")
w("")
w(f"Regenerated by `scripts/bench.sh` on {datetime.date.today().isoformat()}; "
  f"{os.cpu_count()} cores, {cpu_model()}, {platform.system()} {platform.release()}.")
w("Every figure below comes from one run of that script on that machine; the command that "
  "produced each table is given beside it. Loopback only; the load generator, the servers and "
  "Redis share the same cores, so absolute figures are low and ratios are what to compare. "
  "Every Rust binary and bench is built with the workspace's release profile (one code-generation "
  "unit, fat link-time optimization), as `cargo build --release` builds it.")
w("")

# Micro
w("## Micro: one reservation, one gate call")
w("")
w("`cargo bench -p sluice --bench limiter`, `cargo bench -p sluice-bench --bench gate` "
  "(criterion, median estimate) and `cargo bench -p sluice-bench --bench memory` (a counting allocator). "
  "\"engine clock\": the clock a production build reads (the TSC through quanta, "
  "microseconds straight off the counter) and the scope's lock, as a call reserves. The gate "
  "bench builds its gates on a running runtime, so its calls read the same counter as production "
  "(a gate reads tokio's clock only when built on a paused runtime).")
w("")
w("| benchmark | uncontended | 2 threads, one cell |")
w("|---|---:|---:|")
for label, key in [("sluice sliding window", "sluice sliding window"), ("sluice GCRA", "sluice gcra"),
                   ("sluice GCRA, engine clock", "sluice gcra, engine clock"),
                   ("sluice sliding window, engine clock", "sluice sliding window, engine clock"),
                   ("governor `check()` (its TSC clock)", "governor check"),
                   ("governor `check()`, std clock", "governor check, std clock")]:
    w(f"| {label} | {ns('reservation/uncontended/' + key, limiter)} | "
      f"{ns('reservation/2 threads, one cell/' + key, limiter)} |")
w("")
w("| part of a reservation | time |")
w("|---|---:|")
for key in ["clock read", "engine clock read (TSC)", "engine clock read (TSC), as an instant",
            "uncontended lock", "sliding window cell alone", "gcra cell alone"]:
    w(f"| {key} | {ns('reservation/parts/' + key, limiter)} |")
w("")
w("| gate | time per call |")
w("|---|---:|")
for key in ["gate call, no wait/write (admission, permit, reservation, outcome)",
            "gate call, no wait/read in its own turn (plus single-flight)",
            "gate call, no wait/read answered by the turn's cache",
            "gate call, no wait/write, a 2 KB answer",
            "gate call, no wait/read answered by the turn's cache, a 2 KB answer",
            "keyed scopes/call on one of 1,000,000 idle credentials",
            "keyed scopes/call on the only credential"]:
    w(f"| {key.split('/', 1)[1]} | {ns(key, gate)} |")
if keyed:
    w(f"| the two above in {keyed.group(2)} alternating pairs of {int(keyed.group(3)):,}-call batches "
      f"(`--bench keyed_ratio`), the median pair | {keyed.group(4)} against {keyed.group(5)} µs: "
      f"{keyed.group(1)}x |")
if allocated:
    w(f"| memory per idle scope ({int(allocated.group(3)):,} scopes, bytes allocated and kept) | "
      f"{allocated.group(1)} bytes in {allocated.group(2)} blocks |")
w("")
w("Body signals (issue 15): reading a 200 with a small JSON body. A body that cannot matter "
  "is not looked at, so the default costs what the header-only reader did; a credential "
  "marked `body_signals = \"graphql\"` parses it, on purpose.")
w("")
w("| a 200 with a small JSON body | time |")
w("|---|---:|")
for key in ["signals of a 200 with a small JSON body/headers only (the reader before body signals)",
            "signals of a 200 with a small JSON body/with the body reader (body_signals = errors)",
            "signals of a 200 with a small JSON body/with the body reader (body_signals = graphql)",
            "gate call, a 200 with a small JSON body/write (body_signals = errors)",
            "gate call, a 200 with a small JSON body/write (body_signals = graphql)"]:
    group, name = key.split('/', 1)
    label = name if group.startswith("signals") else f"gate call: {name}"
    w(f"| {label} | {ns(key, gate)} |")
w("")

# Scenarios
w("## Scenarios: what a key's quota turns into")
w("")
w("`sluice bench scenarios --json` — real loopback HTTP against the fake API (a key at 20 "
  "requests per rolling second, 50-150 ms per answer), every strategy in the same run, 20 s each. "
  "Goodput: accepted agent requests per second over the key's limit; throttled: the share of "
  "agent requests refused; amplification: agent requests per logical call (below 1: coalesced "
  "or deferred calls that sent nothing).")
for scenario in ["burst", "overload", "shared-key", "unknown-limit"]:
    w("")
    w(f"### {scenario}")
    w("")
    w("| strategy | goodput | throttled | amplification | victim failures | p50 ms | p99 ms | ok within deadline |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in [r for r in scenarios if r["scenario"] == scenario]:
        w(f"| {r['strategy']} | {r['goodput_ratio']:.2f} | {r['throttled_ratio'] * 100:.1f}% | "
          f"{r['amplification']:.2f} | {r['victim_failures']} | {r['p50_ms']} | {r['p99_ms']} | "
          f"{r['answered_within_deadline'] * 100:.0f}% |")
for line in budget_sections(scenarios):
    w(line)
w("")

# Overhead
w("## Sidecar overhead")
w("")
w("`sluice bench overhead --json` — the servers in their own processes: the fake API directly, "
  "`sluice serve`'s proxy with limits far above the load, and nginx `proxy_pass` (one process, "
  "keep-alive upstream) in front of the same fake. The fixed-rate load runs in the bench process, "
  "16 keep-alive connections on threads timed by the OS's high-resolution timer, each latency "
  "counted from the request's scheduled start; rounds are interleaved across targets and the "
  "median round is shown, with every round's p99 beside it to show the machine's noise. CPU per "
  "request is the serving process's user+system time (procfs) over the fixed-rate rounds: the "
  "fake's for the direct target, the proxy's alone for the others. The highest rate is closed-loop "
  "(64 connections from the bench process's async client), measured in each round after its "
  "fixed-rate load; the median round's is shown with every round's beside it, and \"vs nginx\" is "
  "the median of each round's ratio to nginx's rate in the same round.")
w("")
direct = overhead[0] if overhead else None
nginx = next((o for o in overhead if o["target"].startswith("nginx")), None)


def versus_nginx(o, nginx=nginx):
    """The median of each round's rate against nginx's (the bench's own figure), or, from a bench
    run before rounds measured rates, the ratio of the two rates."""
    if o.get("max_rate_vs_nginx") is not None:
        return o["max_rate_vs_nginx"]
    return o["max_rate"] / nginx["max_rate"] if nginx else None


def overhead_table(rows):
    """One overhead run's rows: the first is the upstream directly, the others are measured against it."""
    direct = rows[0] if rows else None
    nginx = next((o for o in rows if o["target"].startswith("nginx")), None)
    w("| target | p50 | p99 | p99 of each round | added p50 | added p99 | CPU per request | highest rate | of each round | vs nginx | first byte of a stream | added |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for o in rows:
        a50 = (o["p50_us"] - direct["p50_us"]) / 1000
        a99 = (o["p99_us"] - direct["p99_us"]) / 1000
        vs = f"{versus_nginx(o, nginx):.2f}" if versus_nginx(o, nginx) is not None else "-"
        rounds = ", ".join(f"{us / 1000:.2f}" for us in o.get("p99_rounds_us", []))
        rates = ", ".join(f"{rate:.0f}" for rate in o.get("max_rate_rounds", [])) or "-"
        cpu = f"{o['cpu_us_per_request']:.0f} µs" if o.get("cpu_us_per_request") is not None else "-"
        ttfb = f"{o['ttfb_us'] / 1000:.2f} ms" if o.get("ttfb_us") is not None else "-"
        tadd = (f"{(o['ttfb_us'] - direct['ttfb_us']) / 1000:+.2f} ms"
                if o.get("ttfb_us") is not None and direct.get("ttfb_us") is not None else "-")
        w(f"| {o['target']} | {o['p50_us'] / 1000:.2f} ms | {o['p99_us'] / 1000:.2f} ms | {rounds} | "
          f"{a50:+.2f} ms | {a99:+.2f} ms | {cpu} | {o['max_rate']:.0f}/s | {rates} | {vs} | {ttfb} | {tadd} |")


overhead_table(overhead)
w(f"\nFixed rate: {overhead[0]['rate'] if overhead else '?'} requests per second. The first byte of a "
  "stream: the median time from a request to the first body byte of an event stream whose events "
  "come 100 ms apart (the upstream directly on the first row, through each sidecar below).")
plain = next((o for o in overhead if o["target"] == "sluice serve proxy"), None)
scrubbed = next((o for o in overhead if "scrubbed" in o["target"]), None)
if plain and scrubbed and plain.get("cpu_us_per_request") and scrubbed.get("cpu_us_per_request"):
    extra = scrubbed["cpu_us_per_request"] - plain["cpu_us_per_request"]
    w(f"\nScrubbing one configured secret from every answer costs {extra:+.1f} µs of CPU per request "
      f"({extra / plain['cpu_us_per_request'] * 100:+.0f}%) and {(scrubbed['p50_us'] - plain['p50_us']) / 1000:+.2f} ms "
      "at p50; with no secret configured the scrubber is not installed.")
w("")
if overhead_github:
    w("### With GitHub's rate-limit fields on every answer")
    w("")
    w("`sluice bench overhead --upstream-headers github --json` — the same bench, the fake API "
      "answering every request with GitHub's five `X-RateLimit-*` fields, as GitHub, OpenAI and "
      "Anthropic answer every request: the sidecar reads them on every answer (nginx passes them "
      "on). The goals above are judged on the run without them.")
    w("")
    overhead_table(overhead_github)
    sluice_row = next((o for o in overhead_github if o["target"] == "sluice serve proxy"), None)
    nginx_row = next((o for o in overhead_github if o["target"].startswith("nginx")), None)
    if sluice_row and nginx_row and sluice_row.get("cpu_us_per_request") and nginx_row.get("cpu_us_per_request"):
        w(f"\nCPU per request against nginx's with the fields: "
          f"{sluice_row['cpu_us_per_request'] / nginx_row['cpu_us_per_request']:.2f}x.")
    w("")

# MCP over Streamable HTTP
if os.path.exists(os.path.join(results, "mcp.json")):
    mcp = json.loads(read("mcp.json"))
    w("## MCP over Streamable HTTP")
    w("")
    w(f"`{mcp['command']} --json` — a stub MCP server in the bench process (its own thread and "
      "runtime) answering every `tools/call` POST at once with a JSON result, reached directly and "
      "through `sluice mcp --listen --upstream` (one client session, limits far above the load). "
      "The fixed-rate load is the overhead benchmark's (keep-alive connections on threads, latency "
      "from each call's scheduled start), interleaved rounds, the median round shown; the highest "
      f"rate is closed-loop (4,000 calls on 16 connections). Load average at the run: {mcp['loadavg']}.")
    w("")
    w("| target | p50 | p99 | p99 of each round | added p99 | failed | highest rate |")
    w("|---|---:|---:|---:|---:|---:|---:|")
    base = mcp["rows"][0]
    for r in mcp["rows"]:
        rounds = ", ".join(f"{us / 1000:.2f}" for us in r["p99_rounds_us"])
        added = (r["p99_us"] - base["p99_us"]) / 1000
        w(f"| {r['target']} | {r['p50_us'] / 1000:.2f} ms | {r['p99_us'] / 1000:.2f} ms | {rounds} | "
          f"{added:+.2f} ms | {r['failed']}/{r['sent']} | {r['max_rate']:.0f}/s |")
    proxied = mcp["rows"][-1]
    added = (proxied["p99_us"] - base["p99_us"]) / 1000
    w("")
    w(goal(added <= 1.0, f"≤ 1 ms added p99 at {proxied['rate']} calls/s: {added:+.2f} ms"))
    w("")

# Shared
w("## Shared limiter on Redis")
w("")
w("`sluice bench shared --json` — a private `redis-server`; 64 callers in one process reserving "
  "back to back; then three `sluice serve` processes with `shared = true` driven hard on one key. "
  "The callers ask as the engine does: the window widened by the default 20 ms `window_margin`, "
  "and a slot allowed to start 10 ms late (the guard, measured in one sitting against the code "
  "before the exactness work: [PERFORMANCE](docs/PERFORMANCE.md#shared-limiter-redis-round-trips-per-admitted-call)).")
w("")
w("| measurement | figure |")
w("|---|---:|")
w(f"| decisions per second, one process, with leases | {shared['decisions_per_second_with_leases']:.0f} |")
w(f"| Redis round trips per decision, with leases | {shared['round_trips_per_decision_with_leases']:.3f} |")
w(f"| decisions per second, without leases | {shared['decisions_per_second_without_leases']:.0f} |")
w(f"| Redis round trips per decision, without leases | {shared['round_trips_per_decision_without_leases']:.3f} |")
w(f"| three processes on one key at {shared['three_processes_allowed']}/s: busiest second | "
  f"{shared['three_processes_busiest_second']} ({shared['three_processes_ratio']:.2f} x allowed) |")
w(f"| Redis round trips per admitted call, three processes | "
  f"{shared['three_processes_round_trips_per_admitted_call']:.3f} |")
if shared.get("three_processes_decisions"):
    d = shared["three_processes_decisions"]
    w(f"| three processes' script calls: grants from Redis, leased slots taken, denials (by Redis "
      f"or by what it said), leased slots returned | {d['commands']}: {d['shared']}, {d['leased']}, "
      f"{d['denied']}, {d['returned']} |")
w("")
if shared.get("peers"):
    w("Side by side in the same run: sluice's limiter, a fixed window (`INCR` + `EXPIRE` in one "
      "pipeline) and a sliding log (one Lua script over a sorted set), each written in "
      "`crates/sluice-cli/src/bench/peers.rs`. Decisions per second with a limit that never binds; "
      "then the same callers offering three times the limit: admitted starts, round trips per "
      "admitted start, and the most starts in any one-second window against the limit, counted "
      "where each caller starts (for sluice, when it wakes for its slot). sluice asks Redis for "
      "the limit as its engine does: the window widened by the default 20 ms `window_margin`, "
      "which absorbs a caller that wakes a little after its slot; the peers have no such setting.")
    w("")
    w("| limiter | decisions/s | round trips per decision | at 3x: admitted/s | round trips per admitted | most starts in any second (limit) |")
    w("|---|---:|---:|---:|---:|---:|")
    for p in shared["peers"]:
        w(f"| {p['limiter']} | {p['decisions_per_second']:.0f} | {p['round_trips_per_decision']:.3f} | "
          f"{p['admitted_per_second']:.1f} | {p['round_trips_per_admitted']:.3f} | "
          f"{p['busiest_second']} ({p['limit']}) |")
    w("")
if scale:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import render_scale
    lines.extend(render_scale.section(scale))

# Python
if python:
    w("## Python: sluice next to aiolimiter and pyrate-limiter")
    w("")
    w(python_intro(python))
    w("")
    for line in python_tables(python):
        w(line)
    w("")

# Goals
w("## Goals")
w("")
gcra = limiter.get("reservation/uncontended/sluice gcra")
window = limiter.get("reservation/uncontended/sluice sliding window")
gov = limiter.get("reservation/uncontended/governor check")
gov_std = limiter.get("reservation/uncontended/governor check, std clock")
call = gate.get("gate call, no wait/write (admission, permit, reservation, outcome)")
over = {r["strategy"]: r for r in scenarios if r["scenario"] == "overload"}
shared_key = {r["strategy"]: r for r in scenarios if r["scenario"] == "shared-key"}
unknown = {r["strategy"]: r for r in scenarios if r["scenario"] == "unknown-limit"}
goals = []
# Each library on the clock it reads in production (sluice's engine clock,
# governor's TSC clock), and both on the same std clock.
gcra_engine = limiter.get("reservation/uncontended/sluice gcra, engine clock")
window_engine = limiter.get("reservation/uncontended/sluice sliding window, engine clock")
if gcra_engine and gcra and gov and gov_std:
    goals.append(goal(gcra_engine <= 1.5 * gov, f"GCRA reservation within 1.5x governor's `check()`: "
                      f"{gcra_engine / gov:.2f}x each on its production clock; {gcra / gov_std:.2f}x on the "
                      f"same std clock (a std clock read alone takes "
                      f"{limiter.get('reservation/parts/clock read', 0):.0f} ns here)"))
if window_engine and window and gov and gov_std:
    goals.append(goal(window_engine <= 3 * gov, f"sliding-window reservation within 3x governor: "
                      f"{window_engine / gov:.2f}x each on its production clock, "
                      f"{window / gov_std:.2f}x on the same std clock"))
if call:
    goals.append(goal(call < 2000, f"a non-waiting gate call under 2 µs: {call / 1000:.2f} µs"))
    goals.append(goal(call <= 500, f"engine (issue 18): a non-waiting write through the gate ≤ 0.5 µs: "
                      f"{call / 1000:.2f} µs"))
cached = gate.get("gate call, no wait/read answered by the turn's cache")
if cached:
    goals.append(goal(cached <= 250, f"engine (issue 18): a read answered by the turn's cache ≤ 0.25 µs: "
                      f"{cached / 1000:.2f} µs"))
many = gate.get("keyed scopes/call on one of 1,000,000 idle credentials")
only = gate.get("keyed scopes/call on the only credential")
if keyed:
    # Judged on the alternating batches: each pair's ratio is taken at one moment of the machine.
    ratio = float(keyed.group(1))
    separate = f"; {many / only:.2f}x from the two criterion runs" if many and only else ""
    goals.append(goal(ratio <= 2, f"engine (issue 18): a call on one of 1,000,000 idle credentials ≤ 2x the "
                      f"single-credential call: {ratio:.2f}x in alternating batches ({keyed.group(4)} against "
                      f"{keyed.group(5)} µs){separate}"))
elif many and only:
    goals.append(goal(many <= 2 * only, f"engine (issue 18): a call on one of 1,000,000 idle credentials ≤ 2x the "
                      f"single-credential call: {many / only:.2f}x ({many / 1000:.2f} against {only / 1000:.2f} µs)"))
if allocated:
    goals.append(goal(int(allocated.group(1)) <= 300, f"engine (issue 18): memory per idle scope ≤ 300 bytes: "
                      f"{allocated.group(1)} bytes allocated and kept"))
if gcra_engine and gov:
    goals.append(goal(gcra_engine <= gov, f"clock (issue 18): GCRA reservation on the engine's clock ≤ 1.0x "
                      f"governor's `check()` with its own clock: {gcra_engine / gov:.2f}x "
                      f"({gcra_engine:.1f} against {gov:.1f} ns)"))
s = over.get("sluice")
if s:
    best_other = max((r["goodput_ratio"] for k, r in over.items() if k not in ("sluice", "sluice-auto")), default=0)
    fewest = min((r["throttled_ratio"] for k, r in over.items() if k not in ("sluice", "sluice-auto")), default=1)
    goals.append(goal(s["goodput_ratio"] >= 0.95 and s["throttled_ratio"] <= 0.01 and s["amplification"] <= 1.05,
                      f"overload: sluice goodput {s['goodput_ratio']:.2f} (≥ 0.95), throttled "
                      f"{s['throttled_ratio'] * 100:.1f}% (≤ 1%), amplification {s['amplification']:.2f} (≤ 1.05)"))
    goals.append(goal(s["goodput_ratio"] >= best_other and s["throttled_ratio"] <= fewest,
                      f"overload: better than every baseline on goodput (best baseline {best_other:.2f}) "
                      f"and throttled share (fewest {fewest * 100:.1f}%)"))
if "sluice" in shared_key:
    goals.append(goal(shared_key["sluice"]["victim_failures"] == 0,
                      f"shared-key: zero victim failures: {shared_key['sluice']['victim_failures']}"))
if "sluice-auto" in unknown:
    auto = unknown["sluice-auto"]
    goals.append(goal(auto["goodput_ratio"] >= 0.9 and auto["throttled_ratio"] <= 0.01,
                      f"unknown-limit (issue 18's adaptive goal): sluice-auto goodput ≥ 0.9 with ≤ 1% "
                      f"throttled: {auto['goodput_ratio']:.2f}, {auto['throttled_ratio'] * 100:.1f}%"))
sidecar = next((o for o in overhead if o["target"] == "sluice serve proxy"), None)
if sidecar and direct:
    added = (sidecar["p99_us"] - direct["p99_us"]) / 1000
    goals.append(goal(added <= 0.5, f"sidecar: added p99 ≤ 0.5 ms at {sidecar['rate']}/s, limits in force: "
                      f"{added:+.2f} ms"))
if sidecar and nginx:
    ratio = versus_nginx(sidecar)
    goals.append(goal(ratio >= 1.0, f"sidecar: highest sustained rate ≥ 1.0x nginx's (median of each "
                      f"round's): {ratio:.2f}x"))
    if sidecar.get("cpu_us_per_request") and nginx.get("cpu_us_per_request"):
        cpu = sidecar["cpu_us_per_request"] / nginx["cpu_us_per_request"]
        goals.append(goal(cpu <= 1.2, f"sidecar: CPU per request ≤ 1.2x nginx's: {cpu:.2f}x "
                          f"({sidecar['cpu_us_per_request']:.0f} µs against {nginx['cpu_us_per_request']:.0f} µs)"))
if sidecar and direct and sidecar.get("ttfb_us") is not None and direct.get("ttfb_us") is not None:
    added = (sidecar["ttfb_us"] - direct["ttfb_us"]) / 1000
    goals.append(goal(added <= 1.0, f"streaming: time to the first body byte through the proxy within 1 ms of "
                      f"the upstream's: {added:+.2f} ms"))
goals.append(goal(shared["decisions_per_second_with_leases"] >= 20000,
                  f"shared limiter: ≥ 20,000 decisions per second per process with leases: "
                  f"{shared['decisions_per_second_with_leases']:.0f}"))
goals.append(goal(shared["three_processes_round_trips_per_admitted_call"] <= 0.2,
                  f"shared limiter: ≤ 0.2 Redis commands per admitted call under load: "
                  f"{shared['three_processes_round_trips_per_admitted_call']:.3f}"))
# Issue 18's own figures: the three sidecars at three times the key's
# limit are the product's path, so they judge; the one-process figure at 3x
# (the peers table) is given beside it.
own = next((p for p in shared.get("peers", []) if p["limiter"].startswith("sluice")), None)
beside = f"; one process at 3x, the peers table: {own['round_trips_per_admitted']:.3f}" if own else ""
goals.append(goal(shared["three_processes_round_trips_per_admitted_call"] <= 0.15,
                  f"shared limiter (issue 18): ≤ 0.15 Redis round trips per admitted call at 3x the limit, "
                  f"three sidecars on one key: {shared['three_processes_round_trips_per_admitted_call']:.3f}"
                  f"{beside}"))
goals.append(goal(shared["decisions_per_second_with_leases"] >= 50000,
                  f"shared limiter (issue 18): ≥ 50,000 decisions per second per process with leases: "
                  f"{shared['decisions_per_second_with_leases']:.0f}"))
goals.append(goal(shared["three_processes_ratio"] <= 1.02,
                  f"shared limiter: aggregate ≤ 1.02 x allowed: {shared['three_processes_ratio']:.2f}"))
goals.extend(budget_goals(scenarios))
goals.extend(render_scale.goals(scale, goal) if scale else [])
if python:
    goals.extend(python_goals(python))
for g in goals:
    w(f"- {g}")
w("")
w("Where a goal is missed, `docs/PERFORMANCE.md` says what the profile shows is in the way.")
print("\n".join(lines))
