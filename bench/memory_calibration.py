"""The memory model against the measured peak: each row runs `fabricjax analyze` on a scenario
in a fresh process with an empty cache (cold: it compiles, the larger peak) and prints its estimate (`engine.plan.estimate_memory`) beside the peak
resident memory the kernel reports for that process (ru_maxrss of the child). The estimate must
stay above the peak (it is what `--max-memory` and the available-memory check compare
against) without being wasteful; the last column is estimate / peak.

Usage: .venv/bin/python bench/memory_calibration.py [--quick]   (make bench-memory)
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fabricjax.engine.plan import estimate_memory
from fabricjax.scenario import load_scenario


def _perm(gpus: int, radix: int, policy: str, slots: int) -> dict:
    return {"name": f"{gpus // 1024}k-{policy}-{slots}",
            "fabric": {"gpus": gpus, "planes": 8, "radix": radix},
            "workload": [{"collective": "permutation", "size": "64MiB"}],
            "policies": [policy], "spray": {"evs": slots}, "mrc": {"evs": slots}}


def _fat_tree(gpus: int, radix: int, policies: list[str], **fabric) -> dict:
    return {"name": f"ft-k{radix}-{gpus // 1024}k-{'-'.join(policies)}",
            "fabric": {"kind": "fat-tree", "tiers": 3, "gpus": gpus, "radix": radix,
                       "planes": 1, "port_gbps": "400G", **fabric},
            "workload": [{"collective": "permutation", "size": "64MiB"}],
            "policies": policies}


def _planes(gpus: int, planes: int, port: str, policies: list[str]) -> dict:
    return {"name": f"{gpus // 1024}k-{planes}x{port}-{'-'.join(policies)}",
            "fabric": {"gpus": gpus, "planes": planes, "port_gbps": port, "radix": 512},
            "workload": [{"collective": "permutation", "size": "64MiB"}],
            "policies": policies}


def _dynamic(gpus: int, radix: int, policy: str) -> dict:
    return {"name": f"{gpus // 1024}k-dynamic-{policy}",
            "fabric": {"gpus": gpus, "planes": 8, "radix": radix},
            "workload": [{"collective": "permutation", "size": "256KiB"}],
            "policies": [policy], "solver": {"model": "dynamic"}}


def _one_cable(gpus: int, samples: int) -> dict:
    return {"name": f"{gpus // 1024}k-one-cable-{samples}-sets",
            "fabric": {"gpus": gpus, "planes": 8, "port_gbps": "100G", "radix": 512},
            "workload": [{"collective": "permutation", "size": "64MiB"}],
            "failures": {"links": {"random": 1}, "samples": samples},
            "policies": ["ecmp", "spray", "mrc", "optimal"]}


QUICK = [_perm(1024, 64, "spray", 128), _perm(8192, 256, "spray", 128),
         _perm(8192, 256, "mrc", 128), _perm(8192, 256, "optimal", 128)]
# the grid the estimate must bound within 2x: fabric kinds, sizes, both levels, a failure study
GRID = [_fat_tree(1024, 16, ["ecmp", "spray", "mrc", "optimal"]),
        _fat_tree(8192, 32, ["spray", "optimal"]),
        _fat_tree(16384, 64, ["spray"]),
        _planes(16384, 8, "100G", ["ecmp", "spray", "mrc", "optimal"]),
        _planes(16384, 4, "200G", ["ecmp", "spray", "mrc", "optimal"]),
        _planes(16384, 1, "800G", ["ecmp", "spray", "mrc", "optimal"]),
        _dynamic(1024, 64, "spray"), _dynamic(8192, 256, "spray"),
        _one_cable(16384, 100)]
FULL = QUICK + [_perm(32768, 512, "spray", 128), _perm(32768, 512, "spray", 256),
                _perm(32768, 512, "ecmp", 8), _perm(32768, 512, "mrc", 128),
                _perm(131072, 512, "ecmp", 8), _perm(131072, 512, "spray", 128)] + GRID
# every bundled scenario, as its docs run it: the 32k MoE plan with the policies that hold
# it (mrc and optimal keep per-flow state, which it refuses on purpose)
BUNDLED = sorted(p.stem for p in (REPO / "scenarios").glob("*.yaml"))
POLICIES = {"training-moe-32k": ["ecmp", "spray"]}


def _policy_args(path: Path) -> list[str]:
    return [arg for p in POLICIES.get(path.stem, ()) for arg in ("-p", p)]


def _estimate(path: Path) -> float:
    """The estimate in MiB, for the policies the row runs."""
    scenario = load_scenario(path)
    if path.stem in POLICIES:
        scenario = scenario.model_copy(update={"policies": POLICIES[path.stem]})
    return estimate_memory(scenario).total / 2**20


# Linux carries the peak RSS of the process that execs into the child's ru_maxrss, so the
# child is started by this small launcher (no JAX: tens of MiB) rather than by the bench (which
# has JAX loaded) or a test process (gigabytes, after a large case): it prints the child's
# peak in KiB and its exit code
LAUNCHER = ("import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:], "
            "stdout=subprocess.DEVNULL); _, status, usage = os.wait4(p.pid, 0); "
            "print(usage.ru_maxrss, os.waitstatus_to_exitcode(status))")


def _peak_of_child(path: Path) -> tuple[float, float]:
    """(peak MiB, seconds) of `fabricjax analyze path` in a fresh process, cold: with an empty
    cache folder of its own, so it compiles and stores every program, as a user's first run
    does (a warm run, which loads them, peaks lower: up to 1.9x on the smallest scenarios)."""
    start = time.perf_counter()
    cache = tempfile.mkdtemp(prefix="fabricjax-bench-cache-")
    out = subprocess.run([sys.executable, "-c", LAUNCHER, sys.executable, "-m",
                          "fabricjax_cli.main", "analyze", str(path), "-q", *_policy_args(path),
                          "--cache-dir", cache],
                         cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    shutil.rmtree(cache, ignore_errors=True)
    peak_kib, code = (int(x) for x in out.stdout.split())
    if code != 0:
        raise SystemExit(f"{path.stem}: fabricjax exited {code}")
    return peak_kib / 1024, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small rows only (~1 min)")
    parser.add_argument("--only", nargs="*", help="rows whose name contains one of these")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for data in (QUICK if args.quick else FULL):
            path = Path(tmp) / f"{data['name']}.yaml"
            path.write_text(yaml.safe_dump(data))
            paths.append(path)
        if not args.quick:
            paths += [REPO / "scenarios" / f"{name}.yaml" for name in BUNDLED]
        if args.only:
            paths = [p for p in paths if any(o in p.stem for o in args.only)]
        estimates = {p: _estimate(p) for p in paths}
        for path in paths:
            peak, seconds = _peak_of_child(path)
            rows.append((path.stem, estimates[path], peak, seconds))
            print(f"{path.stem:24s} estimate {estimates[path]:8.0f} MiB   peak {peak:8.0f} MiB"
                  f"   {estimates[path] / peak:5.2f}x   ({seconds:.0f} s)", flush=True)
    outside = [r[0] for r in rows if not 1.0 <= r[1] / r[2] <= 2.0]
    print(f"# {platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}; "
          f"estimate / peak from {min(r[1] / r[2] for r in rows):.2f}x to "
          f"{max(r[1] / r[2] for r in rows):.2f}x over {len(rows)} rows; target 1.00x-2.00x "
          f"(below 1.00x an underestimate); outside: {', '.join(outside) or 'none'}")


if __name__ == "__main__":
    main()
