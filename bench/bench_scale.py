"""Benchmark suite for scale: one command, one table, each case in a fresh process.

    .venv/bin/python bench/bench_scale.py                 # 1k to 131k (about 30 min on 2 cores)
    .venv/bin/python bench/bench_scale.py --sizes 1k,8k   # a subset
    .venv/bin/python bench/bench_scale.py --target        # only the 131k three-policy target run

Workload: one step of a ring all-reduce over every GPU in a scheduler-scattered (random) ring
order, so every flow crosses the spines: the ring step users run, in its hard form. Fabrics: 8
planes of 100G; radix 64, 128, 256 and 512 for 1,024, 8,192, 32,768 and 131,072 GPUs. Per
(fabric, policy), in a fresh process so that its peak memory is its own:

  * first result: from process start (imports included) to the first analysed phase, so
    compile included, what a user waits for;
  * evaluation: a second analysis of the phase with new random draws of the same shapes
    (compiled code reused), default settings (`solver.rates: auto`);
  * full max-min: the same with `solver.rates: full` (every flow's own rate, all rounds),
    the work the numpy reference does, for a like-for-like ratio;
  * mrc iteration: (21 - 1 iterations) / 20 inside one jitted loop, threshold 0 so that
    every iteration runs in full; and against memory: the bytes an iteration moves (a model,
    MRC_BYTES_PER_EV per EV) at the device's measured streaming bandwidth (a jitted pass over
    512 MiB, once per run in its own process), i.e. how far it is from memory-bound;
  * failure sets/s: sets as in scenarios/failures.yaml (4 cables, 1 T1, 2 NIC ports, 2 degraded
    cables) after a compiling first chunk, default `mrc.patience`;
  * reference: the plain numpy/networkx reference (bench/numpy_reference.py) on the same draws:
    graph, path lookup, loads and textbook progressive filling for ecmp and spray (ratio
    against the full max-min evaluation), one numpy EV-swap iteration for mrc (ratio against
    the mrc iteration); run up to --max-ref-gpus.
The --target run is `fabricjax analyze` on the 131,072-GPU ring step with ecmp, spray and mrc in
one process, timed from the command's start, with its peak memory.
"""

from __future__ import annotations

import time

_PROCESS_START = time.perf_counter()

import argparse  # noqa: E402  (after the clock starts: imports count for "first result")
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FABRICS = {"1k": (1024, 64), "8k": (8192, 128), "32k": (32768, 256), "131k": (131072, 512)}
POLICIES = ("ecmp", "spray", "mrc", "optimal")
FAILURES = {"links": {"random": 4}, "switches": {"random": 1, "tier": "t1"},
            "nic_ports": {"random": 2}, "degraded": {"random": 2, "factor": 0.75}}


def scenario_dict(gpus: int, radix: int, policies, *, rates: str = "auto",
                  failures: int | None = None) -> dict:
    out = {"name": f"scale-{gpus}", "seed": 5,
           "fabric": {"gpus": gpus, "planes": 8, "radix": radix},
           "workload": [{"collective": "all-reduce", "size": "1GiB", "order": "random"}],
           "policies": list(policies), "solver": {"rates": rates}}
    if failures:
        out["failures"] = {"samples": failures, **FAILURES}
    return out


REPEATS = 5    # timed calls per mrc iteration count, the best kept


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def mrc_iteration_s(scenario, fabric, flows) -> float:
    """Seconds per mrc iteration: a 21- minus a 1-iteration jitted run, over 20, each the best
    of REPEATS calls (on a GPU one call's fixed cost moves by more than 20 iterations take)."""
    import jax

    from fabricjax.fabric.paths import spread_slots
    from tests.adapters import phase_inputs as _phase_inputs
    from tests.adapters import solve_mrc_phase
    from tests.adapters import tier_bounds as _tier_bounds

    g = fabric.geometry
    plane, spine = spread_slots(g, flows.num_flows, scenario.mrc.evs, np.random.default_rng(4))
    demand, size32, flow_cap, capacity, alive, eps, max_rounds = _phase_inputs(
        fabric, flows, scenario, None)
    # threshold 0 marks every cross-T0 EV, so no iteration is cut short
    args = jax.device_put((flows.src, flows.dst, plane, spine, demand, size32, flow_cap,
                           capacity, alive, jax.random.key(1), np.float32(0.0),
                           np.float32(0.3), np.float32(0.0), eps, max_rounds))

    def run(iters: int) -> float:
        call = lambda: jax.block_until_ready(solve_mrc_phase(  # noqa: E731
            g, *args, max_iters=iters, patience=10**9, tier_bounds=_tier_bounds(fabric),
            top_k=5, slowest_only=True))
        call()
        best = math.inf
        for _ in range(REPEATS):
            seconds, out = _timed(call)
            assert int(out[0].iterations) == iters
            best = min(best, seconds)
        return best

    return (run(21) - run(1)) / 20


# Bytes one mrc iteration moves per EV, following its data flow (mrc.py): read the spine and
# the two hop bases (12), write the new spine (4), gather liveness of both hops (2), the scatter
# reads its values (4) and read-modify-writes two loads (16), gather utilisation of both hops
# (8), carry controlled + marked to the next iteration (10), select the best EV set (8), and
# the swap's coin and target arithmetic (8). Per link: zero the loads, read loads, capacity and
# liveness, write utilisation (about 20). A model, not a trace: compare it across devices.
MRC_BYTES_PER_EV = 72
MRC_BYTES_PER_LINK = 20


def stream_bandwidth() -> float:
    """Bytes per second of a jitted read-one-write-one pass over 512 MiB of float32 (the
    device's practical peak for streaming work, measured, best of 5)."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones(2**27, jnp.float32)
    step = jax.jit(lambda v: v * 1.000001 + 1.0)
    step(x).block_until_ready()
    best = min(_timed(lambda: step(x).block_until_ready())[0] for _ in range(5))
    return 2 * x.nbytes / best


def reference_row(policy: str, scenario, fabric, flows, outcome) -> dict:
    import numpy_reference as ref

    from fabricjax.engine.phase import offered_demand

    g = fabric.geometry
    demand = offered_demand(flows, g.nic_gbps, g.gpus).astype(np.float64)
    if policy == "mrc":
        rng = np.random.default_rng(5)
        iters = 3
        spine = outcome.split.choice.astype(np.int64)
        start = time.perf_counter()
        for _ in range(iters):
            spine, _ = ref.mrc_iteration(g, flows.src.astype(np.int64),
                                         flows.dst.astype(np.int64),
                                         outcome.split.plane.astype(np.int64), spine, demand,
                                         fabric.capacity, rng, threshold=0.0)
        return {"reference_mrc_iteration_s": (time.perf_counter() - start) / iters}
    plane, spine = outcome.split.plane, outcome.split.choice

    def solve():
        graph = ref.build_graph(g)
        links = ref.path_links(graph, g, flows.src, flows.dst, plane, spine)
        weights = np.full(plane.shape, 1.0 / plane.shape[1])
        load = ref.link_load(links, weights, demand, graph.number_of_edges())
        rates, rounds = ref.max_min_rates(links, weights, np.full(flows.num_flows, g.nic_gbps),
                                          fabric.capacity)
        return float((load / fabric.capacity).max()), rates, rounds

    seconds, (p100, rates, rounds) = _timed(solve)
    return {"reference_s": seconds, "reference_rounds": rounds, "reference_p100": p100,
            "reference_min_rate": float(rates.min())}


def one_case(size: str, policy: str, sets: int, max_ref_gpus: int) -> dict:
    import jax

    from fabricjax.engine.phase import solve_policy_phase
    from fabricjax.fabric.clos import build_fabric
    from fabricjax.fabric.failures import sample_failures
    from fabricjax.engine.batch import solve_failure_sets
    from fabricjax.scenario import parse_scenario
    from fabricjax.workload.build import build_workload

    gpus, radix = FABRICS[size]
    scenario = parse_scenario(scenario_dict(gpus, radix, [policy], failures=sets or None))
    fabric = build_fabric(scenario.fabric)
    flows = build_workload(scenario, np.random.default_rng([scenario.seed, 0]))[0].phases[0].flows
    first = solve_policy_phase(policy, scenario, fabric, flows, (0, 0))
    row = {"size": size, "gpus": gpus, "policy": policy, "flows": flows.num_flows,
           "slots": first.slots, "first_result_s": time.perf_counter() - _PROCESS_START,
           "p100": float(first.result.stats[0, 2]),
           "iterations": first.adaptation.iterations if first.adaptation else None,
           "convergence": first.adaptation.convergence if first.adaptation else None}
    # new draws of the same shapes: another (item, index) stream, nothing recompiles
    row["eval_s"], again = _timed(lambda: solve_policy_phase(policy, scenario, fabric, flows,
                                                             (0, 1)))
    full = parse_scenario(scenario_dict(gpus, radix, [policy], rates="full"))
    if policy in ("ecmp", "spray"):
        solve_policy_phase(policy, full, fabric, flows, (0, 0))    # compile the full rounds
        row["eval_full_s"], full_out = _timed(
            lambda: solve_policy_phase(policy, full, fabric, flows, (0, 0)))
        row["full_rounds"] = int(full_out.result.rounds)
        row["full_min_rate"] = float(np.min(full_out.result.rates))
        row["auto_min_rate"] = float(np.min(first.result.rates))
    if policy == "mrc":
        row["mrc_iteration_s"] = mrc_iteration_s(scenario, fabric, flows)
        row["mrc_bytes_per_iteration"] = (MRC_BYTES_PER_EV * flows.num_flows * first.slots +
                                          MRC_BYTES_PER_LINK * (fabric.num_links + 1))
    if sets:
        batch = sample_failures(scenario)
        head = batch._replace(**{k: getattr(batch, k)[:16] for k in batch._fields})
        row["failure_first_chunk_s"], _ = _timed(lambda: solve_failure_sets(
            policy, scenario, fabric, first, head, (0, 0)))
        seconds, out = _timed(lambda: solve_failure_sets(policy, scenario, fabric, first,
                                                         batch, (0, 0)))
        row.update(failure_sets=batch.size, failure_s=seconds,
                   sets_per_s=batch.size / seconds,
                   failure_iterations_median=float(np.median(out.iterations)))
    if gpus <= max_ref_gpus and policy != "optimal":
        row.update(reference_row(policy, scenario, fabric, flows, first))
    row["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    row["device"] = str(jax.devices()[0].platform)
    return row


def target_run() -> dict:
    """`fabricjax analyze` on the 131k ring step, ecmp + spray + mrc, one process."""
    import yaml

    gpus, radix = FABRICS["131k"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ring131k.yaml"
        path.write_text(yaml.safe_dump(scenario_dict(gpus, radix, ["ecmp", "spray", "mrc"])))
        exe = Path(sys.executable).with_name("fabricjax")
        start = time.perf_counter()
        proc = subprocess.run([str(exe), "analyze", str(path), "-q", "--json",
                               str(Path(tmp) / "out.json")], capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-2000:])
        report = json.loads((Path(tmp) / "out.json").read_text())
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    return {"wall_s": wall, "peak_rss_gib": peak,
            "p100": {r["policy"]: r["p100_utilisation"] for r in report["results"]},
            "mrc_iterations": next(r["iterations"] for r in report["results"]
                                   if r["policy"] == "mrc")}


def _mrc_cell(r) -> str:
    if "mrc_iteration_s" not in r:
        return "—"
    return (f"{r['mrc_iteration_s'] * 1e3:.1f} ms ({r['mrc_vs_memory_bound']:.1f}x of "
            f"{r['mrc_bytes_per_iteration'] / 1e6:.0f} MB at "
            f"{r['stream_bytes_per_s'] / 1e9:.1f} GB/s)")


def markdown(rows) -> str:
    lines = ["| GPUs | policy | flows x slots | first result | evaluation | full max-min "
             "(rounds) | mrc iteration (x memory-bound) | failure sets/s | peak memory | "
             "reference | ratio |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        full = (f"{r['eval_full_s']:.3f} s ({r['full_rounds']})" if "eval_full_s" in r
                else "—")
        ref, ratio = "—", "—"
        if "reference_s" in r:
            ref = f"{r['reference_s']:.1f} s"
            ratio = (f"{r['reference_s'] / r['eval_full_s']:.0f}x full, "
                     f"{r['reference_s'] / r['eval_s']:.0f}x default")
        elif "reference_mrc_iteration_s" in r:
            ref = f"{r['reference_mrc_iteration_s'] * 1e3:.0f} ms/iter"
            ratio = f"{r['reference_mrc_iteration_s'] / r['mrc_iteration_s']:.0f}x per iteration"
        sets = (f"{r['sets_per_s']:.1f} ({r['failure_sets']} sets)" if "sets_per_s" in r
                else "—")
        lines.append(
            f"| {r['gpus']:,} | {r['policy']} | {r['flows'] * r['slots']:,} | "
            f"{r['first_result_s']:.1f} s | {r['eval_s']:.3f} s | {full} | "
            f"{_mrc_cell(r)} | {sets} | "
            f"{r['peak_rss_gib']:.2f} GiB | {ref} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1k,8k,32k,131k")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--sets", default="1k:200,8k:100,32k:32,131k:8",
                        help="failure sets per fabric size (size:count, 0 to skip)")
    parser.add_argument("--max-ref-gpus", type=int, default=8192,
                        help="largest fabric the reference runs on (it is slow by design)")
    parser.add_argument("--target", action="store_true", help="only the 131k target run")
    parser.add_argument("--no-target", action="store_true", help="skip the 131k target run")
    parser.add_argument("--case", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--stream", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stream:
        print(json.dumps({"stream_bytes_per_s": stream_bandwidth()}))
        return
    if args.case:
        size, policy, sets, max_ref = args.case
        print(json.dumps(one_case(size, policy, int(sets), int(max_ref))))
        return
    from bench_foundation import machine

    print(f"machine: {machine()}", flush=True)
    rows = []
    # in its own process: its 1 GiB of buffers must not count in a case's peak memory
    stream = json.loads(subprocess.run([sys.executable, __file__, "--stream"], check=True,
                                       capture_output=True, text=True).stdout)
    print(json.dumps(stream), flush=True)
    if not args.target:
        sets_for = dict(item.split(":") for item in args.sets.split(","))
        for size in args.sizes.split(","):
            for policy in args.policies.split(","):
                if policy == "optimal" and FABRICS[size][0] > 32768:
                    continue   # the bound's [T0 pairs, P, S] arrays: about 1 GB each at 131k
                proc = subprocess.run(
                    [sys.executable, __file__, "--case", size, policy,
                     sets_for.get(size, "0"), str(args.max_ref_gpus)],
                    capture_output=True, text=True)
                if proc.returncode != 0:
                    print(f"{size} {policy} failed: {proc.stderr.strip()[-600:]}", flush=True)
                    continue
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                if "mrc_iteration_s" in row:
                    row.update(stream)
                    row["mrc_vs_memory_bound"] = row["mrc_iteration_s"] / (
                        row["mrc_bytes_per_iteration"] / row["stream_bytes_per_s"])
                rows.append(row)
                print(json.dumps(row), flush=True)
    target = None
    if args.target or (not args.no_target and "131k" in args.sizes):
        target = target_run()
        print(json.dumps({"target_131k_ecmp_spray_mrc": target}), flush=True)
    print()
    if rows:
        print(markdown(rows))
    if target is not None:
        print(f"\n131,072-GPU ring step (random order), `fabricjax analyze` with ecmp + spray + "
              f"mrc in one process: {target['wall_s']:.1f} s from start to result, peak "
              f"{target['peak_rss_gib']:.2f} GiB; P100 {target['p100']}, mrc iterations "
              f"{target['mrc_iterations']}")


if __name__ == "__main__":
    main()
