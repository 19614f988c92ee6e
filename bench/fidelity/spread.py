"""htsim's own spread: how far its FCT quantiles move when the same case is run again.

    .venv/bin/python bench/fidelity/spread.py                 # every case with reseeded runs
    .venv/bin/python bench/fidelity/spread.py --case ls1024_failed8_perm1MB --model none

`run_htsim.sh` with RESEED set reruns a case's seed-1 matrix with other htsim seeds: the same
flows on the same fabric, only the hash salts (which path an EV takes) and the random draws
(REPS's fresh EVs, the bitmap walk's start, ECN's coin) change. Their per-flow FCTs are in
`results/reseed/<case>_<run>_s1_r<seed>.csv.gz`, beside the committed seed-1 run. For every
case and htsim run that has them, this prints the median, P99 and max of the seed-1 run and
their least, mean and largest over all the runs (seed 1 included). Unless `--model none`, the
dynamic level runs the same matrix with the same seeds (its hash salts and draws: compare.py's
`--seeds 1` row for seed 1) beside them: its seed-1 figure, its mean and spread, and the
errors seed 1 against seed 1 and mean against mean. A maximum is one flow's time: where it
moves from run to run as much as the target allows, one run's row says little.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare  # noqa: E402

RESEED_DIR = compare.HERE / "results" / "reseed"


def reseeded(case: str, run: str) -> dict[int, np.ndarray]:
    """{htsim seed: per-flow FCTs (s)} of every rerun of the case's seed-1 matrix for one
    htsim run."""
    runs = {int(path.name.split("_r")[-1].split(".")[0]): compare.read_fcts(path)
            for path in RESEED_DIR.glob(f"{case}_{run}_s1_r*.csv.gz")}
    return dict(sorted(runs.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(compare.CASES),
                        help="cases to show (default: every case with reseeded runs)")
    parser.add_argument("--model", choices=["dynamic", "none"], default="dynamic",
                        help="fabricjax's dynamic level beside htsim's runs, or none")
    args = parser.parse_args()
    cases = args.case or list(compare.CASES)
    header = (f"{'case':<24} {'htsim run':<11} {'runs':>4}  {'quantile':<8} {'seed 1':>8} "
              f"{'least':>8} {'mean':>8} {'largest':>8}  {'spread':>6}")
    if args.model != "none":
        header += (f"   {'fj s1':>8} {'fj mean':>8} {'spread':>6}  {'err s1':>7} {'err mean':>8}"
                   f"  target")
    print("FCTs in us; spread = (largest - least) / mean over the runs of the same matrix")
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            target = compare.CASES[case][3]
            ours = None
            for policy, runs in compare.POLICIES.items():
                for run in runs:
                    first = compare.htsim_fcts(case, run, 1)
                    again = reseeded(case, run)
                    if first is None or not again:
                        continue
                    if ours is None and args.model != "none":
                        ours = np.array([[compare.dynamic_fcts(
                            case, seed, Path(tmp), matrix_seed=1,
                            policies=("spray", "mrc"))[p][:3] for p in ("spray", "mrc")]
                            for seed in (1, *again)]) * 1e6      # [seed, policy, quantile]
                    q = np.array([compare.quantiles(f) for f in [first, *again.values()]]) * 1e6
                    for col, name in ((0, "p50"), (1, "p99"), (2, "max")):
                        values = q[:, col]
                        line = (f"{case:<24} {run:<11} {len(q):>4}  {name:<8} {values[0]:8.1f} "
                                f"{values.min():8.1f} {values.mean():8.1f} {values.max():8.1f}  "
                                f"{(values.max() - values.min()) / values.mean():6.1%}")
                        if ours is not None and policy != "ecmp":
                            fj = ours[:, ("spray", "mrc").index(policy), col]
                            line += (f"   {fj[0]:8.1f} {fj.mean():8.1f} "
                                     f"{(fj.max() - fj.min()) / fj.mean():6.1%}  "
                                     f"{fj[0] / values[0] - 1:+7.1%} "
                                     f"{fj.mean() / values.mean() - 1:+8.1%}  {target:>5.0%}")
                        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
