"""Guards found by review: input bounds, YAML details, output files, lost planes, bisection."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fabricjax.engine.phase import solve_policy_phase
from fabricjax.core.errors import ScenarioError
from fabricjax.fabric.clos import build_fabric, fabric_summary
from fabricjax.config import ClosConfig
from fabricjax.scenario import load_scenario, parse_scenario
from fabricjax.workload.build import build_workload

REPO = Path(__file__).resolve().parents[1]
PERM = "workload: [{collective: permutation, size: 4MB}]\n"
SMALL = "fabric: {gpus: 64, planes: 2, radix: 16}\n"


def _load(tmp_path, text):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return load_scenario(path)


def test_yaml_12_exponent_floats_are_numbers(tmp_path):
    s = _load(tmp_path, PERM + "optimal: {tol: 1e-4}\nsolver: {eps: 5e-3}\n")
    assert s.optimal.tol == 1e-4 and s.solver.eps == 5e-3


def test_a_key_given_twice_is_an_error(tmp_path):
    with pytest.raises(ScenarioError) as err:
        _load(tmp_path, PERM + "fabric: {gpus: 64, gpus: 32}\n")
    assert "appears twice" in err.value.message and "line 2" in err.value.message


@pytest.mark.parametrize("text,field,words", [
    ("workload: [{collective: permutation, size: 1e300}]\n", "workload[0].size", "2^60"),
    (PERM + "fabric: {port_gbps: 1e-50}\n", "fabric.port_gbps", "0.001"),
    (PERM + "solver: {step_latency_us: .inf}\n", "solver.step_latency_us", "finite"),
    (PERM + "spray: {evs: 12}\n", "spray.evs", "multiples of fabric.planes"),
    (PERM + "mrc: {evs: 4}\n", "mrc.evs", "multiples of fabric.planes"),
    (PERM + "fabric: {radix: 4096, gpus: 8388608, planes: 64}\n", "fabric.gpus", "int32"),
])
def test_out_of_range_values_are_refused(tmp_path, text, field, words):
    with pytest.raises(ScenarioError) as err:
        _load(tmp_path, text)
    assert err.value.field == field and words in err.value.message


@pytest.mark.parametrize("gpus,expected_tbps", [(40, 2.0), (33, 1.6), (96, 4.8), (64, 3.2)])
def test_bisection_cuts_the_gpus_in_half(gpus, expected_tbps):
    s = fabric_summary(ClosConfig(gpus=gpus, planes=1, radix=64))
    assert s["bisection_gbps"] == pytest.approx(expected_tbps * 1000) and s["full_bisection"]


def test_optimal_caps_a_flow_that_lost_a_plane():
    """GPU 0's plane-0 NIC port is dead: optimal can carry only its plane-1 share (100G), like
    every other policy, and says so in the record's status."""
    scenario = parse_scenario({"fabric": {"gpus": 32, "planes": 2, "radix": 8},
                               "workload": [{"collective": "permutation", "shift": 4}]})
    fabric = build_fabric(scenario.fabric)
    flows = build_workload(scenario, np.random.default_rng(0))[0].phases[0].flows
    alive = np.ones(fabric.num_links, dtype=bool)
    alive[fabric.geometry.gpu_up(0, 0)] = False
    f0 = int(np.flatnonzero(flows.src == 0)[0])
    for policy in ("spray", "mrc", "optimal"):
        out = solve_policy_phase(policy, scenario, fabric, flows, (0, 0), alive=alive)
        assert out.result.rates[f0] <= 100.0 * (1 + 1e-5), policy
    assert out.adaptation.lost_plane


def _cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-m", "fabricjax_cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_cli_output_guards(tmp_path):
    (tmp_path / "m.yaml").write_text(
        'workload: [{collective: permutation, name: "[/bold]y", size: 4MB}]\n' + SMALL +
        "policies: [spray]\n")
    # markup in a name is text, not a rich tag; the report is an ordinary 0644-style file
    proc = _cli("analyze", "m.yaml", "--json", "o.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "[/bold]y" in proc.stdout
    mode = stat.S_IMODE((tmp_path / "o.json").stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask
    report = json.loads((tmp_path / "o.json").read_text())
    assert report["config"]["fabric"]["gpus"] == 64 and report["config"]["spray"]["evs"] == 128
    # the scenario itself is never overwritten
    before = (tmp_path / "m.yaml").read_text()
    proc = _cli("analyze", "m.yaml", "--json", "m.yaml", cwd=tmp_path)
    assert proc.returncode == 2 and "input scenario" in proc.stderr
    assert (tmp_path / "m.yaml").read_text() == before
