"""The dynamic level's speed against its targets, beside the static level in the same run and
beside htsim's recorded wall times on the calibration cases.

    python bench/bench_dynamic.py                      # every target, then the cases
    python bench/bench_dynamic.py --only quickstart --timeout 600
    python bench/bench_dynamic.py --no-targets --case ft128_1os_a2a

**Targets** are whole processes, as a user waits for them: `fabricjax analyze FILE --model
dynamic` against `--model static` on the same file, each run twice in a fresh compilation
cache (the first run compiles and fills it; the second, the *warm* figure, loads it). A run
past `--timeout` seconds is stopped and reported as `>T`; a run the level refuses before
computing (the memory check) is reported as `refused` with the reason. A dynamic run whose
first try took more than half the timeout is not rerun: its figure is the cold one, marked
`(cold)`. The targets, on the 2-core CPU:

- quickstart: `scenarios/quickstart.yaml` (4 policies, 2 workloads) under 15 s;
- perm8k: an 8,192-GPU permutation of 4 MiB (8 planes x 100G, radix 128; ECMP, spraying
  and MRC at 128 EVs) under 1 s a policy;
- a2a1k: a 1,024-GPU all-to-all of 2 MiB (the quickstart's fabric, 3 policies) under 30 s
  a policy;
- all-to-all: `scenarios/all-to-all.yaml` under 60 s;
- ring131k: one step of a ring all-reduce of 1 GiB over 131,072 GPUs (8 planes x 100G,
  radix 512; 3 policies) under 2 minutes;
- failures1k: `scenarios/failures.yaml`'s 100 failure sets on its 1,024-GPU fabric, MRC on
  the permutation, under 60 s.

**Cases** are in-process (`bench/fidelity/compare.py`'s runs, warm: each is run twice and
the second timed), per policy, against htsim's wall time for the same run on this machine
(`bench/fidelity/htsim_walltimes.tsv`, seed 1).

Writes nothing but its temporary folder; `make bench-dynamic` tees it to
bench/dynamic_last_run.log.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "fidelity"))

import compare  # noqa: E402

WALLTIMES = ROOT / "bench" / "fidelity" / "htsim_walltimes.tsv"
FABRICJAX = Path(sys.executable).with_name("fabricjax")
THREE = ["ecmp", "spray", "mrc"]


def bundled(name: str, **changes) -> dict:
    doc = yaml.safe_load((ROOT / "scenarios" / f"{name}.yaml").read_text())
    return {**doc, **changes}


def clos(gpus: int, radix: int, item: dict) -> dict:
    return {"name": f"clos{gpus}", "seed": 1,
            "fabric": {"kind": "multiplane-clos", "gpus": gpus, "planes": 8,
                       "port_gbps": "100G", "radix": radix},
            "workload": [item], "policies": THREE, "spray": {"evs": 128}, "mrc": {"evs": 128}}


def failure_drill() -> dict:
    doc = bundled("failures", policies=["mrc"])
    doc["workload"] = [doc["workload"][0]]
    return doc


# name: (scenario, target seconds, what the target is)
TARGETS = {
    "quickstart": (lambda: bundled("quickstart"), 15.0, "4 policies x 2 workloads"),
    "perm8k": (lambda: clos(8192, 128, {"name": "perm", "collective": "permutation",
                                        "size": "4MiB"}), 3.0, "1 s a policy"),
    "a2a1k": (lambda: clos(1024, 64, {"name": "a2a", "collective": "all-to-all",
                                      "size": "2MiB"}), 90.0, "30 s a policy"),
    "all-to-all": (lambda: bundled("all-to-all"), 60.0, "4 policies x 2 workloads"),
    "ring131k": (lambda: clos(131072, 512, {"name": "ring", "collective": "all-reduce",
                                            "algorithm": "ring", "size": "1GiB"}),
                 120.0, "3 policies, one ring step"),
    "failures1k": (failure_drill, 60.0, "100 sets, mrc, permutation"),
}


def run_cli(path: Path, model: str, cache: Path, timeout: float) -> tuple[str, float | None]:
    """('ok' | 'timeout' | 'refused: ...' | 'failed: ...', wall seconds) of one analyze."""
    env = dict(os.environ, FABRICJAX_CACHE_DIR=str(cache))
    command = [str(FABRICJAX), "analyze", str(path), "--model", model, "--quiet",
               "--json", str(path.with_suffix(f".{model}.json"))]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", None
    wall = time.perf_counter() - start
    if done.returncode == 0:
        return "ok", wall
    last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
    return ("refused: " if done.returncode == 2 else "failed: ") + last, wall


def level_time(path: Path, model: str, cache: Path, timeout: float) -> str:
    """The level's warm time as a cell: its second run, or the cold one when the first
    took more than half the timeout, '>T' when stopped, the reason when refused."""
    status, first = run_cli(path, model, cache, timeout)
    if status == "timeout":
        return f">{timeout:.0f}"
    if status != "ok":
        return status
    if first > timeout / 2:
        return f"{first:.1f} (cold)"
    status, warm = run_cli(path, model, cache, timeout)
    return f"{warm:.1f}" if status == "ok" else (f">{timeout:.0f}" if status == "timeout"
                                                 else status)


def seconds_of(cell: str) -> float | None:
    try:
        return float(cell.split()[0])
    except ValueError:
        return None


def targets(names: list[str], timeout: float) -> None:
    print(f"{'target':<12} {'what':<28} {'goal s':>7} {'static s':>11} {'dynamic s':>12} "
          f"{'dyn/goal':>9} {'dyn/static':>11}")
    notes = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            make, goal, what = TARGETS[name]
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(yaml.safe_dump(make(), sort_keys=False))
            cache = Path(tmp) / f"cache-{name}"
            cells = []
            for model in ("static", "dynamic"):
                cell = level_time(path, model, cache, timeout)
                if cell.startswith(("refused", "failed")):     # the reason below the table
                    notes.append(f"  {name}, {model}: {cell.replace(str(path), name)}")
                    cell = cell.split(":")[0]
                cells.append(cell)
            s, d = (seconds_of(cell) for cell in cells)
            over = f"{d / goal:9.2f}" if d else f"{'-':>9}"
            ratio = f"{d / s:11.1f}" if d and s else f"{'-':>11}"
            print(f"{name:<12} {what:<28} {goal:7.0f} {cells[0]:>11} {cells[1]:>12} {over} "
                  f"{ratio}", flush=True)
    print("warm whole-process wall time: the second of two runs in a fresh compilation "
          "cache; >T: stopped at the timeout")
    print("\n".join(notes))


def htsim_wall(case: str, run: str, seed: int = 1) -> float | None:
    with open(WALLTIMES) as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            if row["run"] == f"{case}_{run}_s{seed}":
                return float(row["wall_s"])
    return None


def cases(names: list[str]) -> None:
    runs = {"ecmp": "ecmp", "spray": "spray", "mrc": "mrc_bitmap", "mrc_reps": "mrc_reps"}
    print(f"{'case (seed 1)':<26} {'static s':>9} {'dynamic s':>10} {'htsim s':>8}  "
          f"dynamic / htsim per run ({', '.join(runs.values())})")
    with tempfile.TemporaryDirectory() as tmp:
        for case in names:
            wall, warm = {}, {}
            for model, fcts in compare.MODELS.items():
                fcts(case, 1, Path(tmp))                      # compiles
                start = time.perf_counter()
                warm[model] = fcts(case, 1, Path(tmp))
                wall[model] = time.perf_counter() - start
            compare.release_when_crowded()
            theirs = {policy: htsim_wall(case, run) for policy, run in runs.items()}
            per_run = [f"{warm['dynamic'][p][3] / theirs[p]:.3f}" if theirs[p] else "-"
                       for p in runs]
            htsim = sum(t for t in theirs.values() if t)
            print(f"{case:<26} {wall['static']:9.2f} {wall['dynamic']:10.2f} {htsim:8.1f}  "
                  f"{' '.join(per_run)}", flush=True)
    print("in-process warm seconds of every run of the case (the second of two); htsim: the "
          "sum of its runs, each once on the same machine at nice 19 (htsim_walltimes.tsv)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=list(TARGETS),
                        help="targets to run (default: all)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds before a run is stopped (default 300)")
    parser.add_argument("--no-targets", action="store_true")
    parser.add_argument("--case", action="append", choices=sorted(compare.CASES),
                        help="calibration cases (default: ft128_1os_perm2MB, ft128_1os_a2a, "
                             "ls1024os_perm1MB, mp4_ls1024_perm2MB)")
    parser.add_argument("--no-cases", action="store_true")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {platform.system()}, {os.cpu_count()} CPUs")
    if not args.no_targets:
        targets(args.only or list(TARGETS), args.timeout)
    if not args.no_cases:
        cases(args.case or ["ft128_1os_perm2MB", "ft128_1os_a2a", "ls1024os_perm1MB",
                            "mp4_ls1024_perm2MB"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
