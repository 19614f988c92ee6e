"""The memory model against the measured peak: each row runs `fabricjax analyze` on a scenario
in a fresh process and prints its estimate (`engine.plan.estimate_memory`) beside the peak
resident memory the kernel reports for that process (ru_maxrss of the child). The estimate must
stay above the peak (it is what `--max-memory` and the available-memory check compare
against) without being wasteful; the last column is estimate / peak.

Usage: .venv/bin/python bench/memory_calibration.py [--quick]   (make bench-memory)
"""

from __future__ import annotations

import argparse
import os
import platform
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


QUICK = [_perm(1024, 64, "spray", 128), _perm(8192, 256, "spray", 128),
         _perm(8192, 256, "mrc", 128), _perm(8192, 256, "optimal", 128)]
FULL = QUICK + [_perm(32768, 512, "spray", 128), _perm(32768, 512, "spray", 256),
                _perm(32768, 512, "ecmp", 8), _perm(32768, 512, "mrc", 128),
                _perm(131072, 512, "ecmp", 8), _perm(131072, 512, "spray", 128)]
BUNDLED = ["quickstart", "failures", "single-plane-800g", "stargate"]


def _peak_of_child(path: Path) -> tuple[float, float]:
    """(peak MiB, seconds) of `fabricjax analyze path` in a fresh process (wait4 gives that
    child's own rusage)."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "fabricjax_cli.main", "analyze", str(path), "-q"],
                            cwd=REPO, stdout=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{path.stem}: fabricjax exited {proc.returncode}")
    return usage.ru_maxrss / 1024, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small rows only (~1 min)")
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
        estimates = {p: estimate_memory(load_scenario(p)).total / 2**20 for p in paths}
        for path in paths:
            peak, seconds = _peak_of_child(path)
            rows.append((path.stem, estimates[path], peak, seconds))
            print(f"{path.stem:24s} estimate {estimates[path]:8.0f} MiB   peak {peak:8.0f} MiB"
                  f"   {estimates[path] / peak:5.2f}x   ({seconds:.0f} s)", flush=True)
    print(f"# {platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}; "
          f"estimate / peak from {min(r[1] / r[2] for r in rows):.2f}x to "
          f"{max(r[1] / r[2] for r in rows):.2f}x; below 1.00x would be an underestimate")


if __name__ == "__main__":
    main()
