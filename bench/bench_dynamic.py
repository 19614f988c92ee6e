"""The dynamic level's speed: warm in-process wall time of `engine.dynamic.solve_dynamic_phase`
(the static solve it starts from included) on the sizes the design targets, and on the
calibration cases beside htsim's own wall time for the same run (htsim_walltimes.tsv).

    python bench/bench_dynamic.py                 # targets + ft128_1os_perm2MB, ls1024os_perm1MB
    python bench/bench_dynamic.py --skip-8k       # without the 8,192-GPU target
    python bench/bench_dynamic.py --case ft128_1os_a2a

Targets (DESIGN.md §8): a 1,024-GPU permutation of 4 MB with 128 EVs under 2 s warm, 8,192 GPUs
under 30 s, on this project's 2-core CPU. Each figure is the best of `--repeat` warm runs (the
first run, which compiles, is reported apart).
"""

from __future__ import annotations

import argparse
import csv
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent / "fidelity"))

import compare  # noqa: E402
from fabricjax.engine.dynamic import solve_dynamic_phase  # noqa: E402
from fabricjax.fabric.build import build  # noqa: E402
from fabricjax.scenario import parse_scenario  # noqa: E402
from fabricjax.workload.build import build_workload  # noqa: E402

WALLTIMES = Path(__file__).resolve().parent / "fidelity" / "htsim_walltimes.tsv"
HTSIM_RUN = {"ecmp": "ecmp", "spray": "spray", "mrc": "mrc_reps"}


def timed(scenario, policy: str, repeat: int) -> tuple[float, float, object, int]:
    """(first run s, best warm run s, outcome, flows) of one phase."""
    fabric = build(scenario)
    collective = build_workload(scenario, np.random.default_rng([scenario.seed, 0]))[0]
    flows = collective.phases[0].flows
    stream = (collective.stream, 0)
    start = time.perf_counter()
    out = solve_dynamic_phase(policy, scenario, fabric, flows, stream)
    first = time.perf_counter() - start
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        out = solve_dynamic_phase(policy, scenario, fabric, flows, stream)
        best = min(best, time.perf_counter() - start)
    return first, best, out, flows.num_flows


def clos(gpus: int, radix: int) -> dict:
    return {"name": f"perm{gpus}", "seed": 1,
            "fabric": {"kind": "multiplane-clos", "gpus": gpus, "planes": 8,
                       "port_gbps": "100G", "radix": radix},
            "workload": [{"name": "perm", "collective": "permutation", "size": "4MB"}],
            "policies": ["ecmp", "spray", "mrc"], "spray": {"evs": 128}, "mrc": {"evs": 128}}


def htsim_wall(case: str, policy: str, seed: int = 1) -> float | None:
    if not WALLTIMES.exists():
        return None
    with open(WALLTIMES) as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            if row["run"] == f"{case}_{HTSIM_RUN[policy]}_s{seed}":
                return float(row["wall_s"])
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--skip-8k", action="store_true")
    parser.add_argument("--case", action="append", choices=sorted(compare.CASES),
                        help="calibration cases (default: ft128_1os_perm2MB, ls1024os_perm1MB)")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {platform.system()}; warm = best of {args.repeat}")
    print(f"{'run':<34} {'policy':<6} {'flows':>6} {'steps':>6} {'first s':>8} {'warm s':>8}"
          f"  {'target / htsim s':>16} {'ratio':>7}")
    targets = [(1024, 64, 2.0)] + ([] if args.skip_8k else [(8192, 128, 30.0)])
    for gpus, radix, limit in targets:
        sc = parse_scenario(clos(gpus, radix))
        for policy in ("ecmp", "spray", "mrc"):
            first, warm, out, flows = timed(sc, policy, args.repeat)
            print(f"{f'clos {gpus} GPUs, 128 EVs, 4 MB':<34} {policy:<6} {flows:>6} "
                  f"{out.steps:>6} {first:8.2f} {warm:8.2f}  {limit:>16.1f} "
                  f"{warm / limit:7.2f}")
    cases = args.case or ["ft128_1os_perm2MB", "ls1024os_perm1MB"]
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            sc = compare.case_scenario(case, 1, Path(tmp))
            for policy in ("ecmp", "spray", "mrc"):
                first, warm, out, flows = timed(sc, policy, args.repeat)
                theirs = htsim_wall(case, policy)
                ratio = f"{warm / theirs:7.3f}" if theirs else "      -"
                print(f"{case + ' (seed 1)':<34} {policy:<6} {flows:>6} {out.steps:>6} "
                      f"{first:8.2f} {warm:8.2f}  {theirs or float('nan'):>16.1f} {ratio}")
    print("ratio: warm / target for the targets, warm / htsim's wall time for the cases "
          "(htsim_walltimes.tsv, one run on the same machine, nice 19)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
