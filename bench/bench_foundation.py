"""Benchmark: fabricjax against the plain numpy/networkx reference, measured in one run.

    .venv/bin/python bench/bench_foundation.py            # 128 to 8,192 GPUs (a few minutes)
    .venv/bin/python bench/bench_foundation.py --quick    # small fabrics only

Growing fabrics (random permutation, ecmp and spray): the reference's time (graph, path
lookup, loads, progressive filling) against fabricjax's (fabric build, slot draws, one jitted
solve with every flow's exact max-min rate, `solver.rates: full`), with compile (first call)
and without (a second call with new random draws of the same shapes), and the largest
disagreement between the two on P100 and on the max-min rates. The scale suite (1k to 131k
GPUs, every policy, failure sets, mrc iterations) is bench/bench_scale.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
                           # every flow's exact rate: what the reference computes
                           "solver": {"eps": 0.0, "rates": "full"}})


def fabricjax_once(scenario, seed: int):
    from fabricjax.engine.phase import solve_policy_phase, solve_slots
    from fabricjax.policies import get
    from fabricjax.fabric.clos import build_fabric
    from fabricjax.workload.build import build_workload

    start = time.perf_counter()
    fabric = build_fabric(scenario.fabric)
    flows = build_workload(scenario, np.random.default_rng([seed, 0]))[0].phases[0].flows
    policy = scenario.policies[0]
    if policy in ("mrc", "optimal"):
        scenario = scenario.model_copy(update={"seed": seed})
        result = solve_policy_phase(policy, scenario, fabric, flows, (0, 0)).result
        return time.perf_counter() - start, result, None
    slots = get(policy).init(scenario, fabric, flows, None, np.random.default_rng([seed, 1]))
    plane, spine = slots.plane, slots.choice
    result = solve_slots(fabric, flows, plane, spine, scenario)
    return time.perf_counter() - start, result, (fabric, flows, plane, spine)


def reference_once(scenario, fabric, flows, plane, spine):
    import numpy_reference as ref

    from fabricjax.engine.phase import offered_demand

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


def markdown(rows1) -> str:
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
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small fabrics only")
    parser.add_argument("--max-ref-gpus", type=int, default=2048,
                        help="largest fabric the reference runs on (it is slow by design)")
    args = parser.parse_args()
    print(f"machine: {machine()}", flush=True)
    sizes = SIZES[:2] if args.quick else SIZES
    rows1 = part1(args.max_ref_gpus, sizes)
    print()
    print(markdown(rows1))


if __name__ == "__main__":
    main()
