"""Cold start: what a one-off question costs, and where the time goes.

    .venv/bin/python bench/bench_coldstart.py            # every case (about 6 min on 2 cores)
    .venv/bin/python bench/bench_coldstart.py --cases 1k-single-plane,quickstart

For each case and policy set, fresh processes:
  cold  `fabricjax analyze CASE -p ... -q` with an empty cache folder (wall, from the shell:
        Python start, imports, tracing, compiling, running, printing);
  warm  the same command again on the folder the cold run filled (compiled executables,
        core.executables, and JAX's compilation cache);
  jit   the warm command with FABRICJAX_EXEC_CACHE=off on a folder that a cold run with it
        off filled: JAX's compilation cache alone, so every program is traced and lowered
        before its binary is found (the path before the executable cache), measured beside
        the others on the same machine load;
  parts a process that imports fabricjax and runs `analyze` twice, once on the cold run's
        folder (the warm split) and once on a new empty folder (the cold split): imports,
        then, during the first call, the seconds spent tracing (jaxpr), lowering (MLIR) and
        XLA-compiling (from `jax.monitoring`), loading stored executables (read, check,
        deserialise), and "run", the remainder (host work and device time); "again" is the
        second call in the same process (a sweep point of the same shapes).
The packet-level reference (htsim_uec on this 2-core CPU, measured once): 17 to 25 s per
policy for the 1k single-plane case, 65 s for ecmp + spray + mrc. The ratios printed are that
time over fabricjax's (17 s per policy: the least favourable); only fabricjax is rerun.

Cases: the 1k single-plane case (1,024 GPUs, one plane of 64-port 100G switches,
a random permutation of 4 MB flows), the bundled quickstart, and the 8k and 131k ring
all-reduce steps of bench_scale (8 planes of 100G; radix 128 and 512).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# htsim_uec on the 1k single-plane case, as measured then: 17 to 25 s per policy (the
# ratios below take the 17 s, the least favourable to fabricjax) and 65 s for the three
HTSIM_1K_PER_POLICY_S = 17.0
HTSIM_1K_THREE_S = 65.0


def htsim_seconds(case: str, policies: str) -> float | None:
    names = policies.split(",")
    if case != "1k-single-plane" or "optimal" in names:
        return None
    return HTSIM_1K_THREE_S if len(names) == 3 else HTSIM_1K_PER_POLICY_S * len(names)

CASES = {
    "1k-single-plane": {"name": "single-plane-1k", "seed": 1,
                        "fabric": {"gpus": 1024, "planes": 1, "port_gbps": "100G",
                                   "radix": 64},
                        "workload": [{"name": "perm", "collective": "permutation",
                                      "size": "4MB"}]},
    "quickstart": None,       # scenarios/quickstart.yaml as shipped
    "8k-ring": {"name": "ring-8k", "seed": 5, "fabric": {"gpus": 8192, "planes": 8,
                                                         "radix": 128},
                "workload": [{"collective": "all-reduce", "size": "1GiB",
                              "order": "random"}]},
    "131k-ring": {"name": "ring-131k", "seed": 5, "fabric": {"gpus": 131072, "planes": 8,
                                                             "radix": 512},
                  "workload": [{"collective": "all-reduce", "size": "1GiB",
                                "order": "random"}]},
}
RUNS = {
    "1k-single-plane": ["ecmp", "spray", "mrc", "optimal", "ecmp,spray,mrc"],
    "quickstart": ["ecmp,spray,mrc,optimal"],
    "8k-ring": ["ecmp,spray,mrc"],
    "131k-ring": ["ecmp,spray,mrc"],
}


def scenario_file(case: str, folder: Path) -> Path:
    if CASES[case] is None:
        return ROOT / "scenarios" / f"{case}.yaml"
    import yaml

    path = folder / f"{case}.yaml"
    path.write_text(yaml.safe_dump(CASES[case]))
    return path


def policy_args(policies: str) -> list[str]:
    return [arg for p in policies.split(",") for arg in ("-p", p)]


def cli_wall(path: Path, policies: str, cache: Path, exec_cache: bool = True) -> float:
    """Wall seconds of `fabricjax analyze` in a fresh process on the cache folder `cache`."""
    exe = Path(sys.executable).with_name("fabricjax")
    env = {**os.environ, "FABRICJAX_EXEC_CACHE": "on" if exec_cache else "off"}
    start = time.perf_counter()
    proc = subprocess.run([str(exe), "analyze", str(path), *policy_args(policies), "-q",
                           "--cache-dir", str(cache)], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    return wall


def measure(path: str, policies: str, cache: str) -> dict:
    """In this (fresh) process: import, analyze twice on the cache folder `cache`, and the
    split of the first call."""
    from collections import defaultdict

    start = time.perf_counter()
    import jax
    from jax import monitoring

    from fabricjax.core import executables
    from fabricjax.core.cache import enable_compile_cache
    from fabricjax.scenario import load_scenario, with_overrides
    from fabricjax.study.analyze import analyze

    imported = time.perf_counter() - start
    enable_compile_cache(cache)
    seconds: dict = defaultdict(float)
    counts: dict = defaultdict(int)

    def listen(event: str, duration: float, **_) -> None:
        seconds[event] += duration
        counts[event] += 1

    monitoring.register_event_duration_secs_listener(listen)
    scenario = with_overrides(load_scenario(path), policies=policies.split(","))
    t0 = time.perf_counter()
    analyze(scenario)
    first = time.perf_counter() - t0
    snapshot = dict(seconds), dict(counts), executables.counters()
    t0 = time.perf_counter()
    analyze(scenario)
    again = time.perf_counter() - t0
    seconds, counts, stored = snapshot
    trace = seconds.get("/jax/core/compile/jaxpr_trace_duration", 0.0)
    lower = seconds.get("/jax/core/compile/jaxpr_to_mlir_module_duration", 0.0)
    compile_ = seconds.get("/jax/core/compile/backend_compile_duration", 0.0)
    load = stored["load_s"]
    return {"import_s": imported, "first_s": first, "again_s": again,
            "traced": counts.get("/jax/core/compile/jaxpr_to_mlir_module_duration", 0),
            "loaded": stored["loaded"], "trace_s": trace, "lower_s": lower,
            "compile_s": compile_, "load_s": load,
            "run_s": max(first - trace - lower - compile_ - load, 0.0),
            "jax": jax.__version__}


def parts(path: Path, policies: str, cache: Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--measure", str(path), policies,
                           str(cache)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--measure", nargs=3, metavar=("SCENARIO", "POLICIES", "CACHE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for case in args.cases.split(","):
            path = scenario_file(case, folder)
            for policies in RUNS[case]:
                tag = f"{case}-{policies.replace(',', '+')}"
                cache = folder / f"cache-{tag}"
                row = {"case": case, "policies": policies,
                       "cold_s": cli_wall(path, policies, cache),
                       "warm_s": cli_wall(path, policies, cache),
                       # JAX's cache alone, warmed by its own cold run (the wrapper's
                       # compiles never write JAX's cache: core.executables)
                       "jit_cold_s": cli_wall(path, policies, folder / f"jit-{tag}",
                                              exec_cache=False),
                       "jit_s": cli_wall(path, policies, folder / f"jit-{tag}",
                                         exec_cache=False),
                       "warm": parts(path, policies, cache),
                       "cold": parts(path, policies, folder / f"empty-{tag}")}
                rows.append(row)
                print(json.dumps(row), flush=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{os.cpu_count()}-core CPU, JAX {rows[0]['warm']['jax']}, load average "
          f"{load:.1f} at the end; seconds. cold / warm / jit: `fabricjax analyze` from the "
          "shell on an empty folder / on the folder the cold run filled / warm without the "
          "executable cache (JAX's compilation cache alone, on its own folder). Warm and cold splits: the "
          "first analyze in a fresh process on a filled / an empty folder (import, trace, "
          "lower, XLA compile, load of stored executables, run); programs traced / loaded; "
          "again: the same analyze a second time in that process.")
    header = ("case", "policies", "cold", "warm", "jit", "import", "warm: traced/loaded",
              "trace", "lower", "load", "run", "cold: trace", "lower", "compile", "again",
              "htsim/warm", "htsim/again")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        w, c = r["warm"], r["cold"]
        htsim = htsim_seconds(r["case"], r["policies"])
        ratio_warm = f"{htsim / r['warm_s']:.0f}x" if htsim else "—"
        per_policy = w["again_s"] / len(r["policies"].split(","))
        ratio_again = f"{htsim / w['again_s']:,.0f}x" if htsim else "—"
        print(f"| {r['case']} | {r['policies'].replace(',', ' + ')} | {r['cold_s']:.1f} | "
              f"{r['warm_s']:.1f} | {r['jit_s']:.1f} | {w['import_s']:.2f} | "
              f"{w['traced']}/{w['loaded']} | {w['trace_s']:.2f} | {w['lower_s']:.2f} | "
              f"{w['load_s']:.2f} | {w['run_s']:.2f} | {c['trace_s']:.2f} | "
              f"{c['lower_s']:.2f} | {c['compile_s']:.1f} | {w['again_s'] * 1e3:.0f} ms "
              f"({per_policy * 1e3:.0f} ms per policy) | {ratio_warm} | {ratio_again} |")


if __name__ == "__main__":
    main()
