"""The speed paths must not change what is computed.

* `solver.rates: auto` (the slowest max-min rate in one pass when every flow sends the same
  bytes) gives the phase time and slowest rate of the full progressive filling;
* failure sets sharded over several devices (`shard_map`, here virtual host devices from
  XLA_FLAGS in a fresh process) give the same per-set outcomes as one device, byte for byte
  (the optimal bound to float32 rounding);
* `analyze --distributed` over two CPU processes (jax.distributed, gloo) writes the same report
  as one process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricjax.engine.phase import solve_policy_phase
from fabricjax.fabric.clos import build_fabric
from fabricjax.scenario import parse_scenario
from fabricjax.workload.build import build_workload

from conftest import COMPILE_FLAGS

ROOT = Path(__file__).resolve().parents[1]


def _scenario(gpus: int, radix: int, planes: int, rates: str, seed: int, workload: dict):
    return parse_scenario({"fabric": {"gpus": gpus, "planes": planes, "radix": radix},
                           "workload": [workload], "seed": seed,
                           "policies": ["ecmp", "spray", "mrc", "optimal"],
                           "ecmp": {"qps": 1}, "spray": {"evs": 16}, "mrc": {"evs": 16},
                           "solver": {"eps": 0.0, "rates": rates}})


@pytest.mark.parametrize("seed, policy, which, dead", [(3, "ecmp", 0, 4), (8, "mrc", 2, 2)])
def test_auto_rates_match_full_rounds_on_two_cases(seed, policy, which, dead):
    """The quick path's two cases of the property below (a permutation under ECMP with dead
    links; a random-order all-reduce under mrc on a single plane)."""
    test_auto_rates_give_the_full_max_min_phase_time.hypothesis.inner_test(
        seed=seed, policy=policy, which=which, dead=dead)


@pytest.mark.slow   # every policy on three fabrics: about 24 programs to compile
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), policy=st.sampled_from(["ecmp", "spray", "mrc", "optimal"]),
       which=st.sampled_from([0, 1, 2]), dead=st.integers(0, 6))
def test_auto_rates_give_the_full_max_min_phase_time(seed, policy, which, dead):
    """Equal sizes: phase time, slowest rate, stalled count and statistics agree between the
    one-pass slowest rate and the full rounds, with and without dead links."""
    gpus, radix, planes = [(64, 16, 2), (96, 16, 4), (30, 8, 1)][which]
    item = ({"collective": "permutation", "size": "64MiB"} if seed % 2 else
            {"collective": "all-reduce", "size": "256MiB", "order": "random"})
    auto = _scenario(gpus, radix, planes, "auto", seed, item)
    full = _scenario(gpus, radix, planes, "full", seed, item)
    fabric = build_fabric(auto.fabric)
    flows = build_workload(auto, np.random.default_rng([seed, 0]))[0].phases[0].flows
    rng = np.random.default_rng(seed)
    alive = np.ones(fabric.num_links, dtype=bool)
    alive[rng.choice(fabric.num_links, size=dead, replace=False)] = False
    a = solve_policy_phase(policy, auto, fabric, flows, (0, 0), alive=alive).result
    f = solve_policy_phase(policy, full, fabric, flows, (0, 0), alive=alive).result
    assert int(a.rounds) == 1
    assert int(a.stalled) == int(f.stalled)
    np.testing.assert_allclose(a.phase_time, f.phase_time, rtol=2e-5)
    sending = (flows.size > 0) & (np.asarray(f.rates) > 0)
    if sending.any():
        np.testing.assert_allclose(np.min(np.asarray(a.rates)[sending]),
                                   np.min(np.asarray(f.rates)[sending]), rtol=2e-5)
    np.testing.assert_array_equal(a.stats, f.stats)


def test_auto_rates_fall_back_to_full_rounds_for_unequal_sizes():
    """A phase whose flows send different bytes runs the full rounds even under `auto`."""
    from fabricjax.engine.plan import slowest_only
    from fabricjax.workload.flows import Flows

    scenario = _scenario(64, 16, 2, "auto", 1, {"collective": "permutation"})
    equal = Flows(np.arange(4), np.arange(1, 5), np.full(4, 8.0))
    unequal = Flows(np.arange(4), np.arange(1, 5), np.array([8.0, 8.0, 4.0, 8.0]))
    idle = Flows(np.arange(4), np.arange(1, 5), np.array([8.0, 0.0, 8.0, 0.0]))
    assert slowest_only(scenario, equal) and slowest_only(scenario, idle)
    assert not slowest_only(scenario, unequal)
    full = scenario.model_copy(update={"solver": scenario.solver.model_copy(
        update={"rates": "full"})})
    assert not slowest_only(full, equal)


SHARD_SCRIPT = r"""
import json, sys
import numpy as np
import jax
from fabricjax.study.analyze import analyze
from fabricjax.scenario import parse_scenario
from fabricjax.core.devices import compute_devices
policies = sys.argv[1].split(",")
scenario = parse_scenario({
    "fabric": {"gpus": 128, "planes": 4, "radix": 16}, "seed": 5,
    "workload": [{"collective": "permutation", "size": "64MiB"}],
    "policies": policies, "ecmp": {"qps": 1}, "spray": {"evs": 16}, "mrc": {"evs": 16},
    "failures": {"samples": 7, "links": {"random": 3}, "nic_ports": {"random": 1},
                 "switches": {"random": 1, "tier": "t1"}, "chunk": 4}})
report = analyze(scenario)
print(json.dumps({"devices": len(compute_devices()), "records": report.failures.records}))
"""


def _run_sharded(devices: int, policies: str) -> dict:
    flags = f"{COMPILE_FLAGS} --xla_force_host_platform_device_count={devices}"
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", SHARD_SCRIPT, policies], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# the quick path shards the two static policies; the adaptive ones (their own programs, the
# slowest to compile) run with the slow tests
@pytest.mark.parametrize("policies", ["ecmp,spray", pytest.param("optimal",
                                                                  marks=pytest.mark.slow),
                                      pytest.param("mrc", marks=pytest.mark.slow)])
def test_failure_sets_sharded_over_devices_match_one_device(policies):
    """7 sets in chunks of 4 (rounded up to 6) over 1 and 3 virtual CPU devices (so chunks are
    padded and a device can get only padding): the same records, byte for byte (optimal: to
    rounding)."""
    one = _run_sharded(1, policies)
    assert one["devices"] == 1
    for devices in (3,):
        many = _run_sharded(devices, policies)
        assert many["devices"] == devices
        assert len(many["records"]) == len(one["records"])
        for a, b in zip(many["records"], one["records"]):
            if a["policy"] == "optimal":
                # the bound's commodity solve is compiled per device count and XLA's CPU
                # reductions may then sum in another order: equal to float32 rounding
                assert_records_close(a, b)
            else:
                assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def assert_records_close(a, b, rtol=1e-5):
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, float) and isinstance(y, float):
            assert x == pytest.approx(y, rel=rtol, abs=1e-7), key
        elif isinstance(x, dict):
            assert_records_close(x, y, rtol)
        elif key != "p100_link":     # a tie between equally loaded links may break either way
            assert x == y, key


DIST_SCENARIO = """
name: dist
seed: 3
fabric: {gpus: 64, planes: 2, radix: 16}
workload:
  - {collective: permutation, size: 64MiB}
policies: [ecmp, spray]
spray: {evs: 8}
failures: {samples: 6, links: {random: 2}, nic_ports: {random: 1}, chunk: 4}
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def test_distributed_run_over_two_processes_matches_one(tmp_path):
    """`analyze --distributed` as two CPU processes (a coordinator on localhost, gloo between
    them): process 0 writes the report, process 1 writes nothing and prints nothing, and the
    results and failure records equal a single process's, byte for byte."""
    (tmp_path / "d.yaml").write_text(DIST_SCENARIO)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    env["XLA_FLAGS"] = COMPILE_FLAGS      # no device count of the parent's
    single = subprocess.run([sys.executable, "-m", "fabricjax_cli.main", "analyze", "d.yaml", "-q",
                             "--json", "one.json"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-2000:]
    port = _free_port()
    procs = [subprocess.Popen(
        [sys.executable, "-m", "fabricjax_cli.main", "analyze", "d.yaml", "-q", "--distributed", "--json",
         "two.json"], cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=dict(env, JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_NUM_PROCESSES="2",
                 JAX_PROCESS_ID=str(i))) for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    # (gloo itself prints a "[Gloo] Rank i is connected" line on stdout in every process)
    assert "dist:" in outs[0][0] and "dist:" not in outs[1][0]
    assert "wrote" not in outs[1][0]
    one = json.loads((tmp_path / "one.json").read_text())
    two = json.loads((tmp_path / "two.json").read_text())
    assert two["versions"]["processes"] == 2 and two["versions"]["devices_used"] == 2
    assert one["versions"]["processes"] == 1
    for key in ("results", "failures"):
        assert json.dumps(two[key], sort_keys=True) == json.dumps(one[key], sort_keys=True)



def _distributed(args: list[str], cwd: Path, env: dict) -> list[tuple[str, str]]:
    port = _free_port()
    procs = [subprocess.Popen(
        [sys.executable, "-m", "cli.main", *args, "--distributed"], cwd=cwd, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=dict(env, JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_NUM_PROCESSES="2",
                 JAX_PROCESS_ID=str(i))) for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    return outs


def _rows_without_times(path: Path) -> list:
    data = json.loads(path.read_text())
    return [data["rows"], [p["values"] for p in data["points"]], data["columns"]]


def _sweep_two_ways(tmp_path: Path) -> tuple[list, dict]:
    (tmp_path / "d.yaml").write_text(DIST_SCENARIO)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    env["XLA_FLAGS"] = COMPILE_FLAGS      # no device count of the parent's
    args = ["sweep", "d.yaml", "-q", "--set", "seed=1,2,3,4,5", "-p", "spray"]
    single = subprocess.run([sys.executable, "-m", "cli.main", *args, "--csv", "one.csv",
                             "--json", "one.json"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-2000:]
    outs = _distributed(args + ["--csv", "two.csv", "--json", "two.json"], tmp_path, env)
    assert "5 point(s)" in outs[0][0] and "point(s)" not in outs[1][0]
    assert "wrote" not in outs[1][0]
    _same_sweep(tmp_path)
    assert json.loads((tmp_path / "two.json").read_text())["versions"]["processes"] == 2
    lines = (tmp_path / "two.jsonl").read_text().splitlines(keepends=True)
    assert lines[0] == (tmp_path / "one.jsonl").read_text().splitlines(keepends=True)[0]
    return args, env


def _same_sweep(tmp_path: Path) -> None:
    def csv_rows(name):
        return [line.rsplit(",", 1)[0] for line in (tmp_path / name).read_text().splitlines()]

    assert _rows_without_times(tmp_path / "two.json") == _rows_without_times(
        tmp_path / "one.json")
    assert csv_rows("two.csv") == csv_rows("one.csv")


@pytest.mark.slow   # two more processes; the distributed run above keeps the quick path's
def test_distributed_sweep_over_two_processes_matches_one(tmp_path):
    """`sweep --distributed` as two CPU processes: the points are dealt out (5 points, so the
    last round has one), process 0 gathers them in point order and alone prints and writes,
    and the rows, CSV and stream header equal one process's (the measured seconds aside)."""
    _sweep_two_ways(tmp_path)


@pytest.mark.slow
def test_distributed_sweep_resumes(tmp_path):
    """A distributed --resume from a stream cut after two points computes only the other
    three (process 0 reads the stream and hands it to process 1): the same rows again."""
    args, env = _sweep_two_ways(tmp_path)
    lines = (tmp_path / "two.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "two.jsonl").write_text("".join(lines[:3]))          # header + points 0, 1
    outs = _distributed(args + ["--csv", "two.csv", "--json", "two.json", "--resume"],
                        tmp_path, env)
    assert "5 point(s) (2 from two.jsonl)" in outs[0][0]
    _same_sweep(tmp_path)
