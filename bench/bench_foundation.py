"""Benchmark: fabricjax against the plain numpy/networkx reference, measured in one run.

    .venv/bin/python bench/bench_foundation.py            # everything (about 10 minutes on 2 cores)
    .venv/bin/python bench/bench_foundation.py --quick    # small fabrics only

Part 1, growing fabrics (random permutation, ecmp and spray): the reference's time (graph,
path lookup, loads, progressive filling) against fabricjax's (fabric build, slot draws, one
jitted solve), with compile (first call) and without (a second call with new random draws of
the same shapes), and the largest disagreement between the two on P100 and on the max-min
rates. Part 2, the 131,072-GPU ring all-reduce step (contiguous and scheduler-scattered ring
order), each case in a fresh process so peak memory (max RSS) is its own.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZES = [(128, 16), (512, 32), (2048, 64), (8192, 128)]


def scenario_for(gpus: int, radix: int, policy: str, order: str = "random", workload="permutation"):
    from fabricjax.scenario import parse_scenario

    item = ({"collective": "permutation", "size": "256MiB"} if workload == "permutation" else
            {"collective": "all-reduce", "size": "1GiB", "order": order})
    return parse_scenario({"fabric": {"gpus": gpus, "planes": 8, "radix": radix},
                           "workload": [item], "policies": [policy], "seed": 3,
                           "solver": {"eps": 0.0}})


def fabricjax_once(scenario, seed: int):
    from fabricjax.analysis import policy_slots, solve_policy_phase, solve_slots
    from fabricjax.fabric import build_fabric
    from fabricjax.workload import build_workload

    start = time.perf_counter()
    fabric = build_fabric(scenario.fabric)
    flows = build_workload(scenario, np.random.default_rng([seed, 0]))[0].phases[0].flows
    policy = scenario.policies[0]
    if policy in ("mrc", "optimal"):
        scenario = scenario.model_copy(update={"seed": seed})
        result = solve_policy_phase(policy, scenario, fabric, flows, (0, 0)).result
        return time.perf_counter() - start, result, None
    plane, spine = policy_slots(policy, scenario, fabric, flows, np.random.default_rng([seed, 1]))
    result = solve_slots(fabric, flows, plane, spine, scenario)
    return time.perf_counter() - start, result, (fabric, flows, plane, spine)


def reference_once(scenario, fabric, flows, plane, spine):
    import numpy_reference as ref

    from fabricjax.analysis import offered_demand

    g = fabric.geometry
    start = time.perf_counter()
    graph = ref.build_graph(g)
    links = ref.path_links(graph, g, flows.src, flows.dst, plane, spine)
    weights = np.full(plane.shape, 1.0 / plane.shape[1])
    demand = offered_demand(flows, g.nic_gbps, g.gpus).astype(np.float64)
    load = ref.link_load(links, weights, demand, graph.number_of_edges())
    rates, rounds = ref.max_min_rates(links, weights, np.full(flows.num_flows, g.nic_gbps),
                                      fabric.capacity)
    elapsed = time.perf_counter() - start
    return elapsed, float((load / fabric.capacity).max()), rates, rounds


def part1(max_ref_gpus: int, sizes) -> list[dict]:
    rows = []
    for gpus, radix in sizes:
        for policy in ("ecmp", "spray"):
            scenario = scenario_for(gpus, radix, policy)
            first, _, _ = fabricjax_once(scenario, 11)
            steady, result, problem = fabricjax_once(scenario, 12)
            row = {"gpus": gpus, "radix": radix, "policy": policy,
                   "flows_x_slots": int(problem[2].size), "fabricjax_first_s": first,
                   "fabricjax_s": steady, "rounds": int(result.rounds)}
            if gpus <= max_ref_gpus:
                ref_s, ref_p100, ref_rates, ref_rounds = reference_once(scenario, *problem)
                row.update(reference_s=ref_s, reference_rounds=ref_rounds,
                           speedup=ref_s / steady, speedup_with_compile=ref_s / first,
                           p100_diff=abs(ref_p100 - float(result.stats[0, 2])),
                           rate_rel_diff=float(np.max(np.abs(ref_rates - result.rates) /
                                                      ref_rates)))
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def big_case(policy: str, order: str) -> dict:
    if policy == "mrc-rate":
        return mrc_rates(131072, 512, order, ref_iters=2)
    """One 131,072-GPU ring step, run in this (fresh) process."""
    from fabricjax.scenario import parse_scenario

    scenario = parse_scenario({
        "fabric": {"gpus": 131072, "planes": 8, "radix": 512},
        "workload": [{"collective": "all-reduce", "size": "1GiB", "order": order}],
        "policies": [policy], "seed": 5})
    start = time.perf_counter()
    import jax  # noqa: F401  (import time counts: this is a user's wall time)

    first, result, _ = fabricjax_once(scenario, 21)
    steady, result, _ = fabricjax_once(scenario, 22)
    total = time.perf_counter() - start
    return {"policy": policy, "order": order, "first_s": first, "steady_s": steady,
            "wall_s_incl_import": total, "rounds": int(result.rounds),
            "p100": float(result.stats[0, 2]),
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def part2() -> list[dict]:
    rows = []
    for order in ("linear", "random"):
        for policy in ("ecmp", "spray", "mrc"):
            out = subprocess.run([sys.executable, __file__, "--big-case", policy, order],
                                 capture_output=True, text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


MRC_SIZES = [(1024, 64), (4096, 128), (16384, 256)]


def mrc_rates(gpus: int, radix: int, order: str = "random", ref_iters: int = 5) -> dict:
    """Time per MRC iteration: fabricjax (difference between a 1- and a 21-iteration jitted
    run, so evaluation and compile cancel) against the numpy reference iteration; and time to
    convergence with the default settings."""
    import jax

    import numpy_reference as ref

    from fabricjax.analysis import offered_demand, _tier_bounds, solve_policy_phase
    from fabricjax.fabric import build_fabric
    from fabricjax.mrc import solve_mrc_phase
    from fabricjax.paths import spread_slots
    from fabricjax.workload import build_workload

    scenario = scenario_for(gpus, radix, "mrc", order=order, workload="all-reduce")
    scenario = scenario.model_copy(update={"solver": scenario.solver.model_copy(
        update={"eps": 0.01})})
    fabric = build_fabric(scenario.fabric)
    g = fabric.geometry
    flows = build_workload(scenario, np.random.default_rng([3, 0]))[0].phases[0].flows
    plane, spine = spread_slots(g, flows.num_flows, 128, np.random.default_rng(4))
    demand = offered_demand(flows, g.nic_gbps, g.gpus)
    alive = np.ones(fabric.num_links, bool)

    def run(iters: int) -> float:
        args = (flows.src, flows.dst, plane, spine, demand, flows.size.astype(np.float32),
                np.full_like(demand, g.nic_gbps), fabric.capacity, alive, jax.random.key(1),
                # threshold 0 marks every cross-T0 EV, so every iteration runs in full
                np.float32(0.0), np.float32(0.3), np.float32(0.0), np.float32(0.01),
                np.int32(2000))
        out = solve_mrc_phase(g, *args, max_iters=iters, patience=10**9,
                              tier_bounds=_tier_bounds(fabric), top_k=5)
        jax.block_until_ready(out)
        start = time.perf_counter()
        out = solve_mrc_phase(g, *args, max_iters=iters, patience=10**9,
                              tier_bounds=_tier_bounds(fabric), top_k=5)
        jax.block_until_ready(out)
        assert int(out[0].iterations) == iters
        return time.perf_counter() - start

    per_iter = (run(21) - run(1)) / 20
    rng = np.random.default_rng(5)
    start = time.perf_counter()
    s = spine
    for _ in range(ref_iters):
        s, _ = ref.mrc_iteration(g, flows.src.astype(np.int64), flows.dst.astype(np.int64),
                                 plane.astype(np.int64), s.astype(np.int64),
                                 demand.astype(np.float64), fabric.capacity, rng)
    ref_per_iter = (time.perf_counter() - start) / ref_iters
    start = time.perf_counter()
    outcome = solve_policy_phase("mrc", scenario, fabric, flows, (0, 0))
    to_converge = time.perf_counter() - start
    return {"gpus": gpus, "evs": 128, "order": order, "fabricjax_per_iter_s": per_iter,
            "reference_per_iter_s": ref_per_iter, "speedup": ref_per_iter / per_iter,
            "iterations": outcome.iterations, "convergence": outcome.convergence,
            "to_convergence_s_incl_compile": to_converge,
            "p100": float(outcome.result.stats[0, 2])}


def part3(sizes) -> list[dict]:
    rows = []
    for gpus, radix in sizes:
        row = mrc_rates(gpus, radix)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def machine() -> str:
    import jax

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            names = [l.split(":", 1)[1].strip() for l in handle if l.startswith("model name")]
            cpu = names[0] if names else cpu
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, JAX {jax.__version__} on "
            f"{jax.devices()[0].platform}, numpy {np.__version__}")


def markdown(rows1, rows2, rows3=()) -> str:
    lines = ["| GPUs | policy | flows x slots | reference | fabricjax (first call) | fabricjax | "
             "speed-up | max-min rounds (ref / fabricjax) | agreement (P100, rates) |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows1:
        if "reference_s" in r:
            lines.append(
                f"| {r['gpus']:,} | {r['policy']} | {r['flows_x_slots']:,} | "
                f"{r['reference_s']:.2f} s | {r['fabricjax_first_s']:.2f} s | "
                f"{r['fabricjax_s']:.3f} s | "
                f"{r['speedup']:.0f}x ({r['speedup_with_compile']:.0f}x with compile) | "
                f"{r['reference_rounds']} / {r['rounds']} | {r['p100_diff']:.1e}, "
                f"{r['rate_rel_diff']:.1e} |")
        else:
            lines.append(
                f"| {r['gpus']:,} | {r['policy']} | {r['flows_x_slots']:,} | not run | "
                f"{r['fabricjax_first_s']:.2f} s | {r['fabricjax_s']:.3f} s | — | "
                f"— / {r['rounds']} | — |")
    if rows2:
        lines += ["", "| 131,072-GPU ring step | policy | start to result (imports + first call, "
                  "with compile) | second call (compiled) | max-min rounds | P100 | peak memory |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for r in rows2:
            start_to_result = r["wall_s_incl_import"] - r["steady_s"]
            lines.append(f"| {r['order']} ring | {r['policy']} | {start_to_result:.1f} s | "
                         f"{r['steady_s']:.1f} s | {r['rounds']} | "
                         f"{r['p100']:.3f} | {r['peak_rss_gib']:.1f} GiB |")
    if rows3:
        lines += ["", "| mrc, ring step (random order), 128 EVs | fabricjax per iteration | "
                  "numpy reference per iteration | speed-up | iterations to converge | "
                  "time to converge (incl. compile) | P100 |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for r in rows3:
            lines.append(f"| {r['gpus']:,} GPUs | {r['fabricjax_per_iter_s'] * 1e3:.1f} ms | "
                         f"{r['reference_per_iter_s'] * 1e3:.1f} ms | {r['speedup']:.1f}x | "
                         f"{r['iterations']} ({r['convergence']}) | "
                         f"{r['to_convergence_s_incl_compile']:.1f} s | {r['p100']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small fabrics, no 131k cases")
    parser.add_argument("--max-ref-gpus", type=int, default=2048,
                        help="largest fabric the reference runs on (it is slow by design)")
    parser.add_argument("--big-case", nargs=2, metavar=("POLICY", "ORDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.big_case:
        print(json.dumps(big_case(*args.big_case)))
        return
    print(f"machine: {machine()}", flush=True)
    sizes = SIZES[:2] if args.quick else SIZES
    rows1 = part1(args.max_ref_gpus, sizes)
    rows2 = [] if args.quick else part2()
    rows3 = part3(MRC_SIZES[:1] if args.quick else MRC_SIZES)
    if not args.quick:
        out = subprocess.run([sys.executable, __file__, "--big-case", "mrc-rate", "random"],
                             capture_output=True, text=True, check=True)
        rows3.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows3[-1]), flush=True)
    print()
    print(markdown(rows1, rows2, rows3))


if __name__ == "__main__":
    main()
