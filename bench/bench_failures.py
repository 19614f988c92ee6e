"""Benchmark: failure sets per second, batched, against evaluating the sets one by one.

    .venv/bin/python bench/bench_failures.py                 # 1,000 sets, 1,024 and 8,192 GPUs
    .venv/bin/python bench/bench_failures.py --sets 100 --quick

Each (fabric, policy) case runs in a fresh process so that its peak memory (max RSS) is its
own. Workload: a random permutation of 256 MiB per GPU; failure sets as in
scenarios/failures.yaml (four dead T0-T1 cables, one T1 switch, two NIC ports, two cables at
3/4 capacity, drawn at random per set). Per case it prints:

  * baseline: the no-failure analysis (fabric, slots, one solve; with compile);
  * 1st call: the first 16 sets through `resilience.solve_failure_sets`, compile included;
  * batched: all sets, drawn anew (another seed) with the same shapes, so nothing recompiles,
    in chunked jitted calls; and sets per second;
  * one call per set: the same jitted kernel with one set per call (what batching saves);
  * full analysis per set: the pre-failure-issue way, `engine.phase.solve_policy_phase` with the
    set's alive mask (full max-min rounds; mrc from its spraying start), timed on the first
    `--single` sets and scaled to all of them (labelled as scaled).
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FABRICS = {"1k": (1024, 64), "8k": (8192, 128)}


def scenario_for(gpus: int, radix: int, policy: str, sets: int):
    from fabricjax.scenario import parse_scenario

    return parse_scenario({
        "name": f"bench-{gpus}", "seed": 7,
        "fabric": {"gpus": gpus, "planes": 8, "radix": radix},
        "workload": [{"collective": "permutation", "size": "256MiB"}],
        "policies": [policy],
        "failures": {"samples": sets, "links": {"random": 4},
                     "switches": {"random": 1, "tier": "t1"}, "nic_ports": {"random": 2},
                     "degraded": {"random": 2, "factor": 0.75}},
    })


def one_case(fabric_key: str, policy: str, sets: int, single: int) -> dict:
    import jax

    from fabricjax.engine.phase import solve_policy_phase
    from fabricjax.fabric.clos import build_fabric
    from fabricjax.fabric.failures import alive_mask_host, sample_failures
    from fabricjax.engine.batch import solve_failure_sets
    from fabricjax.workload.build import build_workload

    gpus, radix = FABRICS[fabric_key]
    scenario = scenario_for(gpus, radix, policy, sets)
    t0 = time.perf_counter()
    fabric = build_fabric(scenario.fabric)
    flows = build_workload(scenario, np.random.default_rng([scenario.seed, 0]))[0].phases[0].flows
    base = solve_policy_phase(policy, scenario, fabric, flows, (0, 0))
    t_base = time.perf_counter() - t0

    batch = sample_failures(scenario)
    first = batch._replace(names=batch.names[:16], dead_links=batch.dead_links[:16],
                           dead_nodes=batch.dead_nodes[:16],
                           degraded_links=batch.degraded_links[:16],
                           degraded_factor=batch.degraded_factor[:16])
    t0 = time.perf_counter()
    solve_failure_sets(policy, scenario, fabric, base, first, (0, 0))
    t_first = time.perf_counter() - t0
    # new sets of the same shapes (another seed): no recompile
    scenario = scenario.model_copy(update={"failures": scenario.failures.model_copy(
        update={"seed": 8})})
    batch = sample_failures(scenario)
    t0 = time.perf_counter()
    out = solve_failure_sets(policy, scenario, fabric, base, batch, (0, 0))
    t_batched = time.perf_counter() - t0

    # the same kernel, one set per call (after compiling that shape once)
    one = batch._replace(names=batch.names[:1], dead_links=batch.dead_links[:1],
                         dead_nodes=batch.dead_nodes[:1], degraded_links=batch.degraded_links[:1],
                         degraded_factor=batch.degraded_factor[:1])
    solve_failure_sets(policy, scenario, fabric, base, one, (0, 0))
    count = min(single, sets)
    t0 = time.perf_counter()
    for b in range(count):
        sub = batch._replace(names=batch.names[b:b + 1], dead_links=batch.dead_links[b:b + 1],
                             dead_nodes=batch.dead_nodes[b:b + 1],
                             degraded_links=batch.degraded_links[b:b + 1],
                             degraded_factor=batch.degraded_factor[b:b + 1])
        solve_failure_sets(policy, scenario, fabric, base, sub, (0, 0))
    t_per_call = (time.perf_counter() - t0) / count

    # the pre-issue path: a full single-set analysis with the alive mask
    g = fabric.geometry
    masks = [alive_mask_host(g, fabric.link_src, fabric.link_dst, batch.dead_links[b],
                             batch.dead_nodes[b]) for b in range(count + 1)]
    solve_policy_phase(policy, scenario, fabric, flows, (0, 0), alive=masks[-1])  # compile
    t0 = time.perf_counter()
    for b in range(count):
        solve_policy_phase(policy, scenario, fabric, flows, (0, 0), alive=masks[b])
    t_full = (time.perf_counter() - t0) / count

    return {
        "fabric": fabric_key, "gpus": gpus, "policy": policy, "sets": sets,
        "baseline_s": t_base, "first_s": t_first, "batched_s": t_batched,
        "sets_per_s": sets / t_batched,
        "per_call_s": t_per_call, "full_per_set_s": t_full, "single_timed": count,
        "p100_median": float(np.median(out.stats[:, 0, -1])),
        "iterations_median": float(np.median(out.iterations)),
        "max_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "device": str(jax.devices()[0].platform),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", type=int, default=1000)
    parser.add_argument("--single", type=int, default=10,
                        help="sets timed one by one (scaled to --sets)")
    parser.add_argument("--quick", action="store_true", help="the 1,024-GPU fabric only")
    parser.add_argument("--policies", default="ecmp,spray,mrc,optimal")
    parser.add_argument("--fabrics", default=None, help="comma list of 1k, 8k")
    parser.add_argument("--case", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(one_case(args.case[0], args.case[1], args.sets, args.single)))
        return
    fabrics = (args.fabrics.split(",") if args.fabrics else
               (["1k"] if args.quick else ["1k", "8k"]))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}")
    header = (f"{'fabric':>6} {'policy':>8} {'sets':>5} {'baseline':>9} {'1st call':>9} "
              f"{'batched':>9} "
              f"{'sets/s':>8} {'1 call/set':>11} {'ratio':>6} {'full/set':>9} {'ratio':>7} "
              f"{'iters':>6} {'P100 med':>8} {'RSS GiB':>8}")
    print(header)
    for fabric_key in fabrics:
        for policy in args.policies.split(","):
            if policy == "optimal" and fabric_key != "1k":
                continue  # the bound's [F, P*S] grid: 8k is a capacity-planning run, not a bench
            proc = subprocess.run(
                [sys.executable, __file__, "--case", fabric_key, policy, "--sets",
                 str(args.sets), "--single", str(args.single)],
                capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{fabric_key:>6} {policy:>8} failed: {proc.stderr.strip()[-300:]}")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            scaled_call = r["per_call_s"] * r["sets"]
            scaled_full = r["full_per_set_s"] * r["sets"]
            print(f"{fabric_key:>6} {policy:>8} {r['sets']:>5} {r['baseline_s']:>8.2f}s "
                  f"{r['first_s']:>8.2f}s {r['batched_s']:>8.2f}s {r['sets_per_s']:>8.1f} "
                  f"{scaled_call:>10.1f}s "
                  f"{scaled_call / r['batched_s']:>5.1f}x {scaled_full:>8.1f}s "
                  f"{scaled_full / r['batched_s']:>6.1f}x {r['iterations_median']:>6.0f} "
                  f"{r['p100_median']:>8.3f} {r['max_rss_gib']:>8.2f}", flush=True)
    print("1st call: 16 sets, compile included; batched: all sets, new draws of the same "
          "shapes (no recompile);\n1 call/set and full/set are timed on the first --single "
          "sets and scaled to --sets; ratio = that / batched.")


if __name__ == "__main__":
    main()
