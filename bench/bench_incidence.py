"""Link loads on stored-path fabrics: `jax.ops.segment_sum` over stored link ids against the
`jax.experimental.sparse` BCOO path-link incidence matrix (and scipy's CSR as a yardstick).

    .venv/bin/python bench/bench_incidence.py            # the table (about a minute)
    .venv/bin/python bench/bench_incidence.py --quick    # the two small cases

Every row is one fabric and workload: the phase's candidate paths come from the library
(`fabric.graph.candidate_paths`, as `engine.phase.host_routes` builds them), each flow splits
equally over its K slots, and the three methods compute the same float32 loads (checked).
Times are the median of repeated calls after the compiling one: `segment_sum` is the engine's
hot loop (`solver.maxmin.link_load`); BCOO is `demand @ A` with A built once
(`solver.incidence.incidence_matrix`, its build timed apart); CSR is scipy's matvec on the
host. Printed with the machine it ran on; results go to bench/incidence_last_run.log.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse  # noqa: E402

from fabricjax.engine.phase import host_routes, offered_demand  # noqa: E402
from fabricjax.fabric.build import build  # noqa: E402
from fabricjax.scenario import parse_scenario  # noqa: E402
from fabricjax.solver.incidence import incidence_matrix  # noqa: E402
from fabricjax.solver.maxmin import link_load  # noqa: E402
from fabricjax.workload.build import build_workload  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CASES = {
    "fat tree k=8, 128 GPUs, all-to-all, K=16": (
        {"kind": "fat-tree", "tiers": 3, "gpus": 128, "radix": 8, "port_gbps": 400.0,
         "planes": 1, "paths": 16}, {"collective": "all-to-all", "size": "1GiB"}),
    "graph leaf-spine-64, all-to-all, K=4": (
        {"kind": "graph", "file": "graphs/leaf-spine-64.graphml", "gpus": 64, "paths": 4},
        {"collective": "all-to-all", "size": "64MiB"}),
    "fat tree k=16, 1,024 GPUs, permutation, K=64": (
        {"kind": "fat-tree", "tiers": 3, "gpus": 1024, "radix": 16, "port_gbps": 400.0,
         "planes": 1, "paths": 64}, {"collective": "permutation", "size": "256MiB"}),
    "fat tree k=16 x 4 planes, 1,024 GPUs, permutation, K=256": (
        {"kind": "fat-tree", "tiers": 3, "gpus": 1024, "radix": 16, "port_gbps": 100.0,
         "planes": 4, "paths": 256}, {"collective": "permutation", "size": "256MiB"}),
}
QUICK = list(CASES)[:2]


def median_seconds(fn, repeats: int = 7) -> float:
    fn()                                       # compile / warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def row(name: str) -> dict:
    fabric_cfg, item = CASES[name]
    scenario = parse_scenario({"fabric": fabric_cfg, "workload": [item], "seed": 1},
                              base_dir=REPO / "scenarios")
    fabric = build(scenario)
    flows = build_workload(scenario, np.random.default_rng([1, 0]))[0].phases[0].flows
    routes = host_routes(fabric, flows, "candidates")
    links = routes.cand
    num_flows, num_slots, hops = links.shape
    weights = np.full((num_flows, num_slots), 1.0 / num_slots, np.float32)
    demand = offered_demand(flows, fabric.gpu_nic_gbps, fabric.gpus)
    segments = fabric.num_links + 1

    seg = jax.jit(link_load, static_argnums=3)
    dev = jax.device_put((links, weights, demand))
    seg_load = np.asarray(seg(*dev, segments))
    seg_s = median_seconds(lambda: jax.block_until_ready(seg(*dev, segments)))

    start = time.perf_counter()
    matrix = jax.block_until_ready(incidence_matrix(*jax.device_put((links, weights)),
                                                    fabric.num_links))
    bcoo_build_s = time.perf_counter() - start
    product = jax.jit(lambda a, d: d @ a)
    dem = jax.device_put(demand)
    bcoo_load = np.asarray(product(matrix, dem))
    bcoo_s = median_seconds(lambda: jax.block_until_ready(product(matrix, dem)))

    rows = np.broadcast_to(np.arange(num_flows)[:, None, None], links.shape).reshape(-1)
    data = np.broadcast_to(weights[:, :, None], links.shape).reshape(-1)
    csr = scipy.sparse.csr_matrix((data, (rows, links.reshape(-1))),
                                  shape=(num_flows, segments))
    csr_t = csr.T.tocsr()
    csr_load = csr_t @ demand
    csr_s = median_seconds(lambda: csr_t @ demand)

    # all three against float64 sums (the sentinel's padding column left out)
    exact = np.bincount(links.reshape(-1), minlength=segments,
                        weights=(demand.astype(np.float64)[:, None, None] * weights[:, :, None]
                                 * np.ones(links.shape)).reshape(-1))
    errors = {}
    for method, load in (("segment_sum", seg_load), ("bcoo", bcoo_load), ("csr", csr_load)):
        error = np.abs(load[:-1] - exact[:-1]) / np.maximum(exact[:-1], 1e-9)
        errors[method] = float(error[exact[:-1] > 0].max(initial=0.0))
        assert errors[method] < 1e-4, (method, errors[method])
    return {"case": name, "entries": num_flows * num_slots * hops, "segment_sum_ms":
            seg_s * 1e3, "bcoo_ms": bcoo_s * 1e3, "bcoo_build_ms": bcoo_build_s * 1e3,
            "csr_ms": csr_s * 1e3, "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="only the two small cases")
    args = parser.parse_args()
    names = QUICK if args.quick else list(CASES)
    lines = [f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
             f"JAX {jax.__version__} on {jax.devices()[0].platform}",
             f"{'case':58} {'entries':>12} {'segment_sum':>12} {'BCOO':>10} {'BCOO/seg':>9} "
             f"{'BCOO build':>11} {'scipy CSR':>10}"]
    for name in names:
        r = row(name)
        lines.append(f"{r['case']:58} {r['entries']:>12,} {r['segment_sum_ms']:>9.2f} ms "
                     f"{r['bcoo_ms']:>7.2f} ms {r['bcoo_ms'] / r['segment_sum_ms']:>8.1f}x "
                     f"{r['bcoo_build_ms']:>8.1f} ms {r['csr_ms']:>7.2f} ms")
        print(lines[-1] if len(lines) > 2 else "\n".join(lines), flush=True)
    if not args.quick:
        (REPO / "bench" / "incidence_last_run.log").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
