"""Benchmark: collectives' two fast paths against what they replace, side by side in one run.

    .venv/bin/python bench/bench_collectives.py            # both tables (about 2-3 min, 2 cores)
    .venv/bin/python bench/bench_collectives.py --quick    # tiny cases only (a smoke run)
    .venv/bin/python bench/bench_collectives.py --sizes 64,2048 --only aggregated

Table 1, progressive completion: `progressive.progressive_completion` (jitted, exact settings:
eps 0, batch 0) against `tests/reference.py::reference_progressive`, the plain numpy/Python
event-by-event simulation, on the same float32 inputs: spray slots (`paths.spread_slots`),
link ids (`paths.path_set`), equal split (`solver.uniform_live_split`) on small Clos fabrics;
random permutations and a skewed all-to-all, with unequal sizes (and staggered arrivals in
one case) so that nearly every flow is its own event. fabricjax's time is the median of a few
calls after the compiling first call; the Clos entry `solve_clos_progressive_uniform` (what
`analyze` runs) is timed beside it. The agreement column is the largest relative difference
of a flow's completion time (finish - start) between the two.

Table 2, aggregated all-to-all: classes (`tests.adapters.solve_aggregated_phase`) (per source/destination T0
class) against `engine.phase.solve_slots` (flow by flow, `rates: auto`) on uniform all-to-alls
over every GPU, spray with evs = planes x spines, so that both are exact and must agree. Each
size runs in a fresh process (its peak memory is its own); flow by flow runs up to
--max-flow-gpus (it grows as N^2 x K), larger sizes are aggregated only. Both times include
the host work each path needs from the flows (slot draw / class bincount) and exclude the
compiling first call; "from counts" solves the classes counted arithmetically
(`aggregate.all_to_all_classes`), never listing the flows.

Everything printed also goes to --log (bench/collectives_last_run.log by default).
"""

from __future__ import annotations

import argparse
import datetime
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(REPO))

# name: (description, fabric, workload item, EVs per flow, staggered arrivals). The reference
# re-solves max-min with Python loops over links x flows at every event, so these stay at
# 64-96 GPUs and 512-1,024 links (about 5-30 s each); 128 GPUs on 4 planes already takes 100 s.
PROGRESSIVE_CASES = {
    "perm64": ("permutation", dict(gpus=64, planes=2, radix=16),
               {"collective": "permutation", "size": "64MiB"}, 8, False),
    "perm64-4p": ("permutation", dict(gpus=64, planes=4, radix=16),
                  {"collective": "permutation", "size": "64MiB"}, 16, False),
    "a2a-skew": ("all-to-all, 10 GPUs, skew 1", dict(gpus=64, planes=2, radix=16),
                 {"collective": "all-to-all", "size": "640MiB", "gpus": 10,
                  "placement": "strided", "skew": 1.0}, 8, False),
    "perm96-arrivals": ("permutation, arrivals", dict(gpus=96, planes=2, radix=16),
                        {"collective": "permutation", "size": "64MiB"}, 8, True),
    "tiny": ("permutation", dict(gpus=16, planes=2, radix=8),
             {"collective": "permutation", "size": "64MiB"}, 4, False),
}
DEFAULT_CASES = "perm64,perm64-4p,a2a-skew,perm96-arrivals"
DEFAULT_SIZES = "64,128,256,512,2048,4096"
PLANES = 8   # table 2's fabrics: 8 planes of 100G, the smallest radix that seats the GPUs
SEED = 7


class Log:
    """print() that also appends each line to a log file (None: stdout only)."""

    def __init__(self, path: Path | None):
        self.handle = open(path, "w") if path else None

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        if self.handle:
            self.handle.write(line + "\n")
            self.handle.flush()


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def steady_seconds(fn, repeats: int = 5, budget_s: float = 3.0) -> float:
    """Median seconds of up to `repeats` calls of an already compiled `fn`, stopping early once
    `budget_s` is spent (a slow call is timed once, not five times)."""
    times = []
    while len(times) < repeats and sum(times) < budget_s:
        times.append(_timed(fn)[0])
    return float(np.median(times))


def seconds(x: float) -> str:
    """A duration for the tables: ms below a second, s above."""
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.1f} s"


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --------------------------------------------------------------------------- table 1

def progressive_row(name: str) -> dict:
    import jax

    from fabricjax.fabric.clos import build_fabric
    from fabricjax.fabric.paths import path_set, spread_slots
    from fabricjax.core.status import status_names
    from fabricjax.solver.progressive import progressive_completion
    from fabricjax.scenario import parse_scenario
    from fabricjax.solver.maxmin import uniform_live_split
    from fabricjax.workload.build import build_workload
    from tests.adapters import solve_clos_progressive_uniform
    from tests.reference import reference_progressive

    what, fabric_cfg, item, evs, arrivals = PROGRESSIVE_CASES[name]
    scenario = parse_scenario({"fabric": fabric_cfg, "workload": [item], "seed": SEED})
    fabric = build_fabric(scenario.fabric)
    g = fabric.geometry
    rng = np.random.default_rng([SEED, 1])
    flows = build_workload(scenario, rng)[0].phases[0].flows
    num_flows = flows.num_flows
    src, dst = flows.src, flows.dst
    # unequal sizes: equal ones on equal paths finish together in one event
    size = flows.size
    if item["collective"] == "permutation":
        size = size * rng.uniform(0.25, 1.0, num_flows)
    size = size.astype(np.float32)
    start = np.zeros(num_flows, np.float32)
    if arrivals:   # half the flows arrive within the first ~2/3 of a lone 64 MiB transfer
        late = rng.random(num_flows) < 0.5
        start[late] = rng.uniform(0.0, 2e-3, late.sum()).astype(np.float32)
    plane, spine = spread_slots(g, num_flows, evs, rng)
    links = path_set(g, src, dst, plane, spine).links
    alive = np.ones(fabric.num_links, bool)
    weights = np.asarray(uniform_live_split(links, np.append(alive, True)), np.float32)
    flow_cap = np.full(num_flows, g.nic_gbps, np.float32)
    capacity_ext = np.append(fabric.capacity, np.inf).astype(np.float32)

    ref_s, (ref_finish, ref_events) = _timed(lambda: reference_progressive(
        links, weights, size, start, flow_cap, capacity_ext))

    # a fresh function object per case, so its first call compiles whatever ran before
    run = jax.jit(lambda *a, **k: progressive_completion(*a, **k))
    settings = dict(eps=np.float32(0.0), max_rounds=np.int32(10_000),
                    max_events=np.int32(2 * num_flows + 1), batch=np.float32(0.0))
    args = jax.device_put((links, weights, size, start, flow_cap, capacity_ext))
    call = lambda: jax.block_until_ready(run(*args, **settings))  # noqa: E731
    first_s, out = _timed(call)
    fj_s = steady_seconds(call)
    out = jax.device_get(out)

    clos_args = jax.device_put((src, dst, plane, spine, size, start, flow_cap, fabric.capacity,
                                alive, settings["eps"], settings["max_rounds"],
                                settings["max_events"], settings["batch"]))
    clos = lambda: jax.block_until_ready(  # noqa: E731
        solve_clos_progressive_uniform(g, *clos_args))
    clos_first_s, clos_out = _timed(clos)
    clos_s = steady_seconds(clos)
    clos_out = jax.device_get(clos_out)

    sending = size > 0
    ref_fct = (ref_finish - start)[sending]

    def fct_rel_diff(finish) -> float:
        return float(np.max(np.abs((finish - start)[sending] - ref_fct) / ref_fct))

    return {"case": name, "what": what, "gpus": g.gpus, "planes": g.planes, "radix": g.radix,
            "links": fabric.num_links, "flows": num_flows, "evs": evs,
            "reference_events": int(ref_events), "events": int(out.events),
            "rounds": int(out.rounds), "status": status_names(int(out.status)),
            "reference_s": ref_s, "fabricjax_first_s": first_s, "fabricjax_s": fj_s,
            "ratio": ref_s / fj_s, "fct_rel_diff": fct_rel_diff(out.finish),
            "clos_first_s": clos_first_s, "clos_s": clos_s,
            "clos_status": status_names(int(clos_out.status)),
            "clos_fct_rel_diff": fct_rel_diff(clos_out.finish)}


def progressive_table(rows) -> str:
    lines = ["| case | GPUs x planes | links | flows x EVs | events (ref / fabricjax) | "
             "reference | fabricjax | compile + first call | ratio | Clos entry | "
             "max rel. diff of FCT |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['what']} | {r['gpus']} x {r['planes']} | {r['links']:,} | "
            f"{r['flows']} x {r['evs']} | {r['reference_events']} / {r['events']} | "
            f"{seconds(r['reference_s'])} | {seconds(r['fabricjax_s'])} | "
            f"{seconds(r['fabricjax_first_s'])} | {r['ratio']:,.0f}x | "
            f"{seconds(r['clos_s'])} | "
            f"{max(r['fct_rel_diff'], r['clos_fct_rel_diff']):.1e} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- table 2

def radix_for(gpus: int) -> int:
    """The smallest power-of-two radix (>= 16) whose two-tier Clos seats `gpus` GPUs:
    (radix / 2) GPUs per T0, radix T0s."""
    radix = 16
    while radix * radix // 2 < gpus:
        radix *= 2
    return radix


def aggregated_row(gpus: int, flow_by_flow: bool) -> dict:
    """One size, in its own process: aggregated first (its peak memory), then flow by flow."""
    from fabricjax.solver.aggregate import all_to_all_classes
    from tests.adapters import solve_aggregated_classes, solve_aggregated_phase
    from fabricjax.engine.phase import solve_slots
    from fabricjax.fabric.clos import build_fabric
    from fabricjax.fabric.paths import spread_slots
    from fabricjax.scenario import parse_scenario
    from fabricjax.workload.build import build_workload

    radix = radix_for(gpus)
    scenario = parse_scenario({
        "fabric": {"gpus": gpus, "planes": PLANES, "radix": radix},
        "workload": [{"collective": "all-to-all", "size": "1GiB"}], "seed": SEED,
        "solver": {"eps": 0.0, "rates": "auto"}})
    fabric = build_fabric(scenario.fabric)
    g = fabric.geometry
    evs = g.planes * g.spines          # K / P = S: spread_slots puts one EV on every spine
    flows = build_workload(scenario, np.random.default_rng([SEED, 0]))[0].phases[0].flows
    row = {"gpus": gpus, "radix": radix, "planes": g.planes, "spines": g.spines,
           "flows": flows.num_flows, "evs": evs, "flows_x_slots": flows.num_flows * evs}

    def aggregated():
        return solve_aggregated_phase(g, "spray", flows.src, flows.dst, None, flows.size,
                                      fabric.capacity, evs=evs)

    def from_counts():
        classes = all_to_all_classes(g, np.arange(gpus))
        return solve_aggregated_classes(g, "spray", classes, None, float(flows.size[0]),
                                        fabric.capacity, evs=evs)

    row["aggregated_first_s"], agg = _timed(aggregated)
    row["aggregated_s"] = steady_seconds(aggregated)
    row["from_counts_s"] = steady_seconds(from_counts)
    res = agg.result
    row.update(classes=agg.num_classes, aggregated_p100=float(res.stats[0, 2]),
               aggregated_time_s=float(res.phase_time),
               aggregated_rss_mib=peak_rss_mib())
    if flow_by_flow:
        draws = iter(range(1, 100))

        def per_flow():
            rng = np.random.default_rng([SEED, 2, next(draws)])
            plane, spine = spread_slots(g, flows.num_flows, evs, rng)
            return solve_slots(fabric, flows, plane, spine, scenario)

        row["flow_by_flow_first_s"], ref = _timed(per_flow)
        row["flow_by_flow_s"] = steady_seconds(per_flow, repeats=3, budget_s=4.0)
        p100 = float(ref.stats[0, 2])
        row.update(flow_by_flow_p100=p100, flow_by_flow_time_s=float(ref.phase_time),
                   ratio=row["flow_by_flow_s"] / row["aggregated_s"],
                   p100_diff=abs(p100 - row["aggregated_p100"]),
                   time_rel_diff=abs(float(ref.phase_time) - row["aggregated_time_s"]) /
                   float(ref.phase_time),
                   slowest_rate_rel_diff=abs(float(ref.rates.min()) - float(res.rates.min()))
                   / float(ref.rates.min()))
    row["peak_rss_mib"] = peak_rss_mib()
    return row


def aggregated_table(rows) -> str:
    lines = ["| GPUs (radix) | flows | flows x EVs | classes | flow by flow | aggregated | "
             "ratio | from counts | P100 diff | time rel. diff | peak RSS agg. / with f-by-f |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        head = (f"| {r['gpus']:,} ({r['radix']}) | {r['flows']:,} | {r['flows_x_slots']:,} | "
                f"{r['classes']:,} | ")
        agg, counts = seconds(r["aggregated_s"]), seconds(r["from_counts_s"])
        if "flow_by_flow_s" in r:
            lines.append(
                head + f"{seconds(r['flow_by_flow_s'])} | {agg} | {r['ratio']:,.0f}x | {counts} | "
                f"{r['p100_diff']:.1e} | {r['time_rel_diff']:.1e} | "
                f"{r['aggregated_rss_mib']:,.0f} / {r['peak_rss_mib']:,.0f} MiB |")
        else:
            lines.append(head + f"not run | {agg} | — | {counts} | — | — | "
                         f"{r['aggregated_rss_mib']:,.0f} / — MiB |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default=DEFAULT_CASES,
                        help=f"table 1 cases, of {', '.join(PROGRESSIVE_CASES)}")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="table 2 GPU counts")
    parser.add_argument("--max-flow-gpus", type=int, default=512,
                        help="largest all-to-all solved flow by flow (N^2 x K grows fast)")
    parser.add_argument("--only", choices=("progressive", "aggregated"), default=None)
    parser.add_argument("--quick", action="store_true", help="tiny cases only (smoke run)")
    parser.add_argument("--log", default=str(BENCH / "collectives_last_run.log"),
                        help="file the output also goes to ('' for none)")
    parser.add_argument("--case", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:   # one table-2 size in this (fresh) process
        print(json.dumps(aggregated_row(int(args.case[0]), args.case[1] == "1")))
        return
    if args.quick:   # tiny defaults; an explicit --cases / --sizes still wins
        args.cases = "tiny" if args.cases == DEFAULT_CASES else args.cases
        args.sizes = "64,128" if args.sizes == DEFAULT_SIZES else args.sizes

    from bench_foundation import machine

    log = Log(Path(args.log) if args.log else None)
    command = " ".join(["bench/bench_collectives.py", *sys.argv[1:]])
    log(f"# {command}  ({datetime.date.today().isoformat()})")
    log(f"machine: {machine()}")
    wall = time.perf_counter()
    rows1, rows2 = [], []
    if args.only != "aggregated":
        for name in args.cases.split(","):
            rows1.append(progressive_row(name))
            log(json.dumps(rows1[-1]))
    if args.only != "progressive":
        for gpus in (int(s) for s in args.sizes.split(",")):
            proc = subprocess.run(
                [sys.executable, __file__, "--case", str(gpus),
                 str(int(gpus <= args.max_flow_gpus))], capture_output=True, text=True)
            if proc.returncode != 0:
                log(f"{gpus} GPUs failed: {proc.stderr.strip()[-600:]}")
                continue
            rows2.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            log(json.dumps(rows2[-1]))
    if rows1:
        log()
        log("## Progressive completion: fabricjax (jitted, exact) vs the numpy event-by-event "
            "reference")
        log("Same float32 inputs; spray over the slots, sizes unequal. fabricjax: median after "
            "compile; Clos entry: solve_clos_progressive_uniform. FCT = finish - start.")
        log()
        log(progressive_table(rows1))
    if rows2:
        log()
        log("## Uniform all-to-all: aggregated by (source T0, destination T0) class vs flow by "
            "flow (solve_slots)")
        log(f"{PLANES} planes of 100G, spray with evs = planes x spines (both exact). Times "
            "after compile, host work from the flows included; from counts: classes counted "
            "arithmetically.")
        log()
        log(aggregated_table(rows2))
    log()
    log(f"total {time.perf_counter() - wall:.0f} s")


if __name__ == "__main__":
    main()
