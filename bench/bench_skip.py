"""The dynamic level's steady-state skipping (`dynamic.skip_steady`) against stepping through
the whole phase, side by side in one process: wall time (warm: each program is compiled
before either is timed), steps stepped and skipped, and the largest relative difference of
the FCT quantiles (P50, P99, max) and the completion.

    python bench/bench_skip.py                               # the quickstart's permutation
    python bench/bench_skip.py --policy mrc --size 64MiB
    python bench/bench_skip.py --scenario scenarios/x.yaml --item 1 --tolerance 0.1 --rtts 32

Writes nothing; `make bench-dynamic` tees it to bench/skip_last_run.log.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fabricjax.engine.dynamic import solve_dynamic_phase  # noqa: E402
from fabricjax.fabric.build import build  # noqa: E402
from fabricjax.scenario import parse_scenario  # noqa: E402
from fabricjax.workload.build import build_workload  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def figures(out) -> np.ndarray:
    fct = out.fct_s[np.isfinite(out.fct_s)]
    return np.append(np.quantile(fct, [0.5, 0.99, 1.0]), out.completion_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "quickstart.yaml"))
    parser.add_argument("--item", type=int, default=0, help="the workload item (default 0)")
    parser.add_argument("--size", help="the item's size instead of the scenario's")
    parser.add_argument("--policy", action="append",
                        help="policies (default: spray, mrc)")
    parser.add_argument("--tolerance", type=float, help="dynamic.steady_tolerance")
    parser.add_argument("--rtts", type=float, help="dynamic.steady_rtts")
    args = parser.parse_args()
    doc = yaml.safe_load(Path(args.scenario).read_text())
    item = dict(doc["workload"][args.item], **({"size": args.size} if args.size else {}))
    doc["workload"] = [item]
    print(f"machine: {platform.machine()}, {platform.system()}; {Path(args.scenario).name} "
          f"item {item['name']} ({item.get('size')}); warm, one run each")
    print(f"{'policy':8} {'mode':9} {'steps':>7} {'skipped':>8} {'wall s':>8} "
          f"{'P50 ms':>9} {'P99 ms':>9} {'max ms':>9} {'compl ms':>9}")
    for policy in args.policy or ["spray", "mrc"]:
        runs = {}
        for skip in (False, True):
            dynamic = dict(doc.get("dynamic", {}), skip_steady=skip)
            if skip and args.tolerance is not None:
                dynamic["steady_tolerance"] = args.tolerance
            if skip and args.rtts is not None:
                dynamic["steady_rtts"] = args.rtts
            sc = parse_scenario(dict(doc, dynamic=dynamic))
            fabric = build(sc)
            collective = build_workload(sc, np.random.default_rng([sc.seed, 0]))[0]
            flows, stream = collective.phases[0].flows, (collective.stream, 0)
            if not runs:    # compile: the same phase cut to a few steps (the step bound
                # and skipping are traced, so both runs below use this program)
                brief = parse_scenario(dict(doc, dynamic=dict(
                    dynamic, horizon_completions=1e-3, horizon_rtts=0.0)))
                solve_dynamic_phase(policy, brief, fabric, flows, stream)
            start = time.perf_counter()
            out = solve_dynamic_phase(policy, sc, fabric, flows, stream)
            wall = time.perf_counter() - start
            runs[skip] = (out, wall)
            f = figures(out) * 1e3
            print(f"{policy:8} {'skipping' if skip else 'stepping':9} {out.steps:7d} "
                  f"{out.skipped_steps:8d} {wall:8.2f} {f[0]:9.4f} {f[1]:9.4f} {f[2]:9.4f} "
                  f"{f[3]:9.4f}", flush=True)
        (stepped, t0), (skipping, t1) = runs[False], runs[True]
        err = np.abs(figures(skipping) / figures(stepped) - 1.0).max()
        print(f"{policy:8} skipping / stepping wall time {t1 / t0:.2f}; largest quantile or "
              f"completion difference {err * 100:.2f}%", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
