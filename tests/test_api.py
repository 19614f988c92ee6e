"""The Python API, every call as a notebook user writes it:

    import fabricjax as fj
    sc = fj.load("scenarios/quickstart.yaml")
    sc2 = sc.replace({"fabric.planes": 4, "spray.evs": 64})
    rep = fj.analyze(sc2, policies=["ecmp", "mrc"])
    df = rep.to_pandas()
    sw = fj.sweep(sc, {"fabric.planes": [1, 2, 4, 8]})
    fj.plot.cdf(rep)

plus what it promises: `import fabricjax` loads no JAX, errors are `fj.ScenarioError`s naming
the field as the user wrote it, pandas is optional, and the CLI runs through the same calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fabricjax as fj
from fabricjax.scenario import load_scenario

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "scenarios" / "quickstart.yaml"
TINY = {"name": "tiny", "seed": 3, "fabric": {"gpus": 16, "planes": 8, "radix": 8},
        "workload": [{"name": "perm", "collective": "permutation", "size": "4MiB"},
                     {"name": "ring", "collective": "all-reduce", "size": "4MiB",
                      "order": "random"}],
        "policies": ["ecmp", "spray"], "spray": {"evs": 8},
        "solver": {"progressive": False}}


def _python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def test_import_fabricjax_is_light_until_a_computation_runs():
    proc = _python(
        "import sys\nimport fabricjax as fj\n"
        "heavy = [m for m in ('jax', 'matplotlib', 'pandas') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "sc = fj.load('scenarios/quickstart.yaml').replace({'fabric.planes': 4})\n"
        "assert 'jax' not in sys.modules\n"
        "print(callable(fj.sweep), callable(fj.analyze), callable(fj.plot.cdf))\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "True"]


@pytest.fixture(scope="module")
def quickstart():
    return fj.load("scenarios/quickstart.yaml") if Path.cwd() == REPO else fj.load(QUICKSTART)


@pytest.fixture(scope="module")
def analysis(quickstart):
    sc2 = quickstart.replace({"fabric.planes": 4, "spray.evs": 64})
    return fj.analyze(sc2, policies=["ecmp", "mrc"])


def test_load_and_replace_give_validated_scenarios(quickstart):
    assert isinstance(quickstart, fj.Scenario)
    assert quickstart.fabric.planes == 8 and quickstart.spray.evs == 128
    sc2 = quickstart.replace({"fabric.planes": 4, "spray.evs": 64})
    assert (sc2.fabric.planes, sc2.spray.evs, sc2.fabric.gpus) == (4, 64, 1024)
    assert quickstart.fabric.planes == 8              # the original is unchanged
    assert sc2.replace(seed=11).seed == 11
    sized = quickstart.replace({"workload[1].size": "4GiB"})
    assert sized.workload[1].size == 4 * 2**30
    # the same scenario as the CLI's loader reads
    assert quickstart.to_dict() == load_scenario(QUICKSTART).model_dump(mode="json")


def test_from_dict_is_the_file_without_the_file():
    sc = fj.Scenario.from_dict(TINY)
    assert sc.name == "tiny" and sc.fabric.gpus == 16 and sc.policies == ["ecmp", "spray"]


@pytest.mark.parametrize("change, field, words", [
    ({"fabric.planes": 3}, "spray.evs", "multiples of fabric.planes"),
    ({"fabric.plane": 4}, "fabric.plane", "allowed: kind, gpus, port_gbps"),
    ({"workload[5].size": "1GiB"}, "workload[5].size", "has 2 item(s)"),
    ({"fabric..planes": 4}, "fabric..planes", "not a field path"),
    ({"fabric.gpus": "many"}, "fabric.gpus", "many"),
])
def test_a_bad_replacement_names_the_field_as_written(quickstart, change, field, words):
    with pytest.raises(fj.ScenarioError) as caught:
        quickstart.replace(change)
    assert caught.value.field == field
    assert words in str(caught.value)


def test_analyze_runs_the_policies_asked_for_on_the_replaced_scenario(analysis):
    records = analysis.records
    assert [(r.policy, r.workload) for r in records] == [
        ("ecmp", "permutation"), ("ecmp", "ring-allreduce"),
        ("mrc", "permutation"), ("mrc", "ring-allreduce")]
    assert analysis.report.fabric["planes"] == 4
    assert analysis.report.config["spray"]["evs"] == 64
    # ECMP's hash collisions against MRC's adaptation, on the same fabric
    assert all(e.p100_utilisation > m.p100_utilisation
               for e, m in zip(records[:2], records[2:]))
    assert analysis.to_dict()["results"][0]["policy"] == "ecmp"


def test_to_pandas_has_one_row_per_policy_and_workload_item(analysis):
    df = analysis.to_pandas()
    records = analysis.to_records()
    assert len(df) == len(records) == 4
    assert list(df["policy"]) == ["ecmp", "ecmp", "mrc", "mrc"]
    for row, record in zip(df.to_dict("records"), analysis.records):
        assert row["p100_utilisation"] == record.p100_utilisation
        assert row["completion_s"] == record.completion_s
        assert row["p100_t0-t1"] == record.utilisation_by_tier["t0-t1"]["p100"]


def test_to_records_needs_no_pandas(analysis, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)      # as if it were not installed
    assert len(analysis.to_records()) == 4
    with pytest.raises(ImportError, match=r"fabricjax\[pandas\]"):
        analysis.to_pandas()


def test_plot_returns_a_figure_and_writes_nothing(analysis, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    monkeypatch.chdir(tmp_path)
    fig = fj.plot.cdf(analysis)
    assert isinstance(fig, Figure)
    assert len(fig.axes[0].lines) >= 2                    # a line per policy, and capacity
    assert isinstance(fj.plot.completion(analysis), Figure)
    assert list(tmp_path.iterdir()) == []


def test_analyze_errors_are_exceptions_in_the_callers_words(quickstart):
    with pytest.raises(fj.ScenarioError) as caught:
        fj.analyze(quickstart, policies=["mcr"])
    assert caught.value.field == "policies"
    with pytest.raises(fj.ScenarioError, match="max_memory"):
        fj.analyze(quickstart, max_memory="1KiB")
    with pytest.raises(fj.ScenarioError) as caught:
        fj.analyze(quickstart, samples=3)
    assert caught.value.field == "samples" and "no `failures` section" in caught.value.message


def test_sweep_is_a_frame_whose_points_match_one_analysis_each():
    sc = fj.Scenario.from_dict(TINY)
    sw = fj.sweep(sc, {"fabric.planes": [1, 2, 4, 8]})
    assert len(sw) == 4 * 2 * 2
    assert list(dict.fromkeys(sw["fabric.planes"])) == [1, 2, 4, 8]
    assert {"policy", "workload", "p100_utilisation", "completion_s", "switches"} <= set(
        sw.columns)
    # a point of the sweep is the analysis of the scenario with that value
    one = fj.analyze(sc.replace({"fabric.planes": 2}))
    rows = sw[sw["fabric.planes"] == 2].to_dict("records")
    for row, record in zip(rows, one.records):
        assert (row["policy"], row["workload"]) == (record.policy, record.workload)
        assert row["p100_utilisation"] == pytest.approx(record.p100_utilisation, rel=1e-6)
        assert row["completion_s"] == pytest.approx(record.completion_s, rel=1e-6)
    with pytest.raises(fj.ScenarioError) as caught:
        fj.sweep(sc, {"fabric.planes": [3]})
    assert caught.value.field == "fabric.planes=3"


def test_the_cli_runs_through_the_api(monkeypatch, tmp_path):
    """`fabricjax analyze` computes through `fabricjax.api.analyze` (one path, not two)."""
    from typer.testing import CliRunner

    import fabricjax.api
    from fabricjax_cli.main import app

    calls = []
    real = fabricjax.api.analyze

    def spy(*args, **kwargs):
        calls.append(kwargs.get("names"))
        return real(*args, **kwargs)

    monkeypatch.setattr(fabricjax.api, "analyze", spy)
    path = tmp_path / "tiny.yaml"
    path.write_text(json.dumps(dict(TINY, policies=["spray"])))
    result = CliRunner().invoke(app, ["analyze", str(path), "-q"])
    assert result.exit_code == 0, result.output
    assert len(calls) == 1 and calls[0]["policies"] == "--policy"
    assert "Collective completion" in result.output


def test_the_cli_checks_a_scenario_once(monkeypatch, tmp_path):
    """`fabricjax analyze` prepares the scenario (memory check, cache) before it writes
    anything, and `api.analyze` takes the prepared scenario as it is: one memory check."""
    from typer.testing import CliRunner

    import fabricjax.api
    from fabricjax_cli.main import app

    checks = []
    real = fabricjax.api.check_memory

    def spy(*args, **kwargs):
        checks.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(fabricjax.api, "check_memory", spy)
    path = tmp_path / "tiny.yaml"
    path.write_text(json.dumps(dict(TINY, policies=["spray"])))
    result = CliRunner().invoke(app, ["analyze", str(path), "-q", "--max-memory", "8GiB"])
    assert result.exit_code == 0, result.output
    assert checks == [8 * 2**30]


def test_a_prepared_scenario_carries_its_overrides(quickstart):
    with pytest.raises(fj.ScenarioError, match="max_memory"):
        fj.prepare(quickstart, max_memory="1KiB")
    prepared = fj.prepare(quickstart, policies=["spray"], seed=3)
    assert prepared.config.policies == ["spray"] and prepared.config.seed == 3
    with pytest.raises(ValueError, match="prepare"):
        fj.analyze(prepared, seed=4)
