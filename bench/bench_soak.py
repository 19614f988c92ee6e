"""Soak: does a long sweep's memory stay flat? A 1,000-point sweep of a small scenario, run as
`fabricjax sweep` runs it (`sweeps.run_sweep`, every point streamed to a JSON Lines file and a
CSV through `sweeps.SweepStreams`), printing the process's resident memory (RSS) every 100
points.

    .venv/bin/python bench/bench_soak.py                 # 1,000 points (a few minutes)
    .venv/bin/python bench/bench_soak.py --points 200    # shorter

The grid: 2 oversubscription values x 2 EV counts (4 array shapes, so the compiled programs
are reused after the first points) x seeds, on 32 GPUs / 2 planes with ecmp and spray and 8
failure sets per point. Target: RSS after 1,000 points within 10% of RSS after 100.
A second run, `--new-shapes`, sweeps the GPU count instead (16, 17, ... GPUs on radix 32: a new
array shape, so new compiled programs, at every point; spray alone and no failure sets, to keep
the compiling short) to show that `core.devices.bound_compiled` keeps that bounded; `--limit N`
overrides the bound (`--limit 100000`: no bound). Results go to bench/soak_last_run.log
(bench/soak_new_shapes_last_run.log).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

import fabricjax.sweeps.run  # noqa: E402
from fabricjax.core.devices import compiled_programs  # noqa: E402
from fabricjax.scenario import parse_scenario  # noqa: E402
from fabricjax.sweeps import (SweepStreams, parse_sets, run_sweep, sweep_device,  # noqa: E402
                              sweep_header, sweep_points)

REPO = Path(__file__).resolve().parents[1]
BASE = {
    "name": "soak",
    "fabric": {"gpus": 32, "planes": 2, "radix": 8},
    "workload": [{"collective": "permutation", "size": "4MB"}],
    "policies": ["ecmp", "spray"],
    "spray": {"evs": 8},
    "solver": {"progressive": False},
    "failures": {"samples": 8, "links": {"random": 2}},
}


def rss_mib() -> float:
    """Resident memory of this process now (not the peak), from /proc."""
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def grid(points: int, new_shapes: bool) -> list[str]:
    if new_shapes:   # every point a new GPU count: new array shapes, new compiled programs
        return [f"fabric.gpus,fabric.radix={','.join(f'{16 + i}:32' for i in range(points))}"]
    seeds = max(1, points // 4)     # seeds slowest: the 4 shapes all come in the first points
    return [f"seed={','.join(str(s) for s in range(seeds))}",
            "fabric.oversubscription=1,3", "spray.evs=8,16"]


def soak(points: int, new_shapes: bool, every: int, log) -> list[tuple[int, float]]:
    settings = dict(BASE)
    if new_shapes:
        settings.update(policies=["spray"], failures=None)
    base = parse_scenario(settings)
    axes = parse_sets(grid(points, new_shapes))
    grid_points = sweep_points(base, axes)[:points]
    samples: list[tuple[int, float]] = [(0, rss_mib())]
    started = time.perf_counter()
    clears = {"before": compiled_programs()}

    with tempfile.TemporaryDirectory() as folder:
        first = sweep_header(base, axes, grid_points, sweep_device())
        streams = SweepStreams.open(grid_points, first, jsonl=f"{folder}/soak.jsonl",
                                    csv_path=f"{folder}/soak.csv", done=[], resumed=False)

        def on_point(result) -> None:
            streams(result)
            n = result.index + 1
            if n % every == 0 or n == len(grid_points):
                samples.append((n, rss_mib()))
                line = (f"{n:6,d} points  RSS {samples[-1][1]:8.1f} MiB  "
                        f"{time.perf_counter() - started:7.1f} s  compiled since last clear "
                        f"{compiled_programs():4d}")
                print(line, flush=True)
                log.append(line)

        result = run_sweep(grid_points, on_point=on_point)
        streams.close()
        size = os.path.getsize(f"{folder}/soak.jsonl")
    line = (f"{len(result.rows):,} rows, stream {size / 2**20:.1f} MiB, "
            f"{time.perf_counter() - started:.1f} s; programs compiled before the sweep: "
            f"{clears['before']}")
    print(line)
    log.append(line)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--new-shapes", action="store_true",
                        help="sweep the GPU count: a new array shape at every point")
    parser.add_argument("--limit", type=int, default=None,
                        help="override sweep.COMPILED_LIMIT (programs kept before a clear)")
    args = parser.parse_args()
    if args.limit is not None:
        fabricjax.sweeps.run.COMPILED_LIMIT = args.limit
    log = [f"machine: {platform.machine()}, {os.cpu_count()} cores, "
           f"JAX {jax.__version__} on {jax.devices()[0].platform}; COMPILED_LIMIT "
           f"{fabricjax.sweeps.run.COMPILED_LIMIT}",
           f"sweep: {args.points:,} points, " + (
               "a new GPU count per point, spray, no failure sets" if args.new_shapes else
               "2 oversubscriptions x 2 EV counts x seeds, ecmp + spray, 8 failure sets per "
               "point")]
    for line in log:
        print(line)
    samples = soak(args.points, args.new_shapes, args.every, log)
    at = dict(samples)
    if args.every in at and samples[-1][0] > args.every:
        first, last = at[args.every], samples[-1][1]
        line = (f"RSS after {samples[-1][0]:,} points / after {args.every}: {last:.1f} / "
                f"{first:.1f} MiB = {last / first:.3f} ({(last / first - 1) * 100:+.1f}%)")
        print(line)
        log.append(line)
    name = "soak_new_shapes_last_run.log" if args.new_shapes else "soak_last_run.log"
    (REPO / "bench" / name).write_text("\n".join(log) + "\n")


if __name__ == "__main__":
    main()
