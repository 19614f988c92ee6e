"""The sweep engine: `--set` parsing, the grid of validated scenarios, one analysis per point.

Contract checked here: the grid is the Cartesian product in option order (zipped paths move
together), every user error is a ScenarioError naming `--set` before anything is computed,
a swept row equals what `analyze` gives on the same point's scenario, points of the same
shapes reuse the compiled solve, and CSV / JSON are written whole or not at all.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from fabricjax.core.errors import ScenarioError
from fabricjax.metrics import transport_latency_s
from fabricjax.scenario import parse_scenario
from fabricjax.sweeps import (BOM_COLUMNS, FAILURE_METRICS, MAX_POINTS, METRICS, parse_sets,
                              run_sweep, sweep_points, sweep_table_rows, write_csv, write_json)

TINY = {
    "name": "tiny-sweep",
    "fabric": {"gpus": 32, "planes": 2, "radix": 8},
    "workload": [{"name": "perm", "collective": "permutation", "size": "4MB"},
                 {"name": "ring", "collective": "all-reduce", "size": "8MB", "order": "random"}],
    "policies": ["ecmp", "spray"],
    "spray": {"evs": 8},
    "solver": {"progressive": False},
}


@pytest.fixture
def base():
    return parse_scenario(dict(TINY))


def _error(call) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        call()
    assert info.value.field.startswith("--set"), str(info.value)
    assert "Traceback" not in str(info.value) and "\n" not in str(info.value)
    return info.value


# --------------------------------------------------------------------------- parsing

def test_grid_size_and_order(base):
    points = sweep_points(base, parse_sets(["seed=1,2", "name=a,b,c"]))
    assert len(points) == 6
    assert [tuple(p.values.values()) for p in points] == [
        (1, "a"), (1, "b"), (1, "c"), (2, "a"), (2, "b"), (2, "c")]
    assert [(p.scenario.seed, p.scenario.name) for p in points] == [
        (1, "a"), (1, "b"), (1, "c"), (2, "a"), (2, "b"), (2, "c")]
    assert points[0].label == "seed=1, name=a"
    assert base.seed == 0 and base.name == "tiny-sweep"         # the base is untouched


def test_no_axes_is_one_point_the_base(base):
    (point,) = sweep_points(base, parse_sets([]))
    assert point.values == {} and point.scenario == base


def test_zipped_axes_move_together(base):
    axes = parse_sets(["fabric.planes,fabric.port_gbps,spray.evs=1:200G:4, 2:100G:8",
                       "seed=0,5"])
    assert [len(a) for a in axes] == [2, 2]
    assert axes[0].paths == ("fabric.planes", "fabric.port_gbps", "spray.evs")
    points = sweep_points(base, axes)
    assert [(p.scenario.fabric.planes, p.scenario.fabric.port_gbps, p.scenario.spray.evs,
             p.scenario.seed) for p in points] == [
        (1, 200.0, 4, 0), (1, 200.0, 4, 5), (2, 100.0, 8, 0), (2, 100.0, 8, 5)]


def test_values_are_yaml_scalars(base):
    (axis,) = parse_sets(["x.y=1, 1.5, true, 100G, 1GiB, 1e-3, null"])
    assert [v for (v,) in axis.values] == [1, 1.5, True, "100G", "1GiB", 0.001, None]
    assert isinstance(axis.values[0][0], int) and isinstance(axis.values[2][0], bool)
    points = sweep_points(base, parse_sets(["fabric.port_gbps=100G,0.4T",
                                            "workload[0].size=1GiB",
                                            "solver.progressive=true,false"]))
    assert [p.scenario.fabric.port_gbps for p in points] == [100.0, 100.0, 400.0, 400.0]
    assert {p.scenario.workload[0].size for p in points} == {2.0**30}
    assert [p.scenario.solver.progressive for p in points] == [True, False, True, False]
    assert points[1].label == ("fabric.port_gbps=100G, workload[0].size=1GiB, "
                               "solver.progressive=false")


def test_path_into_a_list_changes_that_item_only(base):
    points = sweep_points(base, parse_sets(["workload[1].size=1MB,2MB"]))
    assert [p.scenario.workload[1].size for p in points] == [1e6, 2e6]
    assert all(p.scenario.workload[0].size == 4e6 for p in points)


def test_missing_optional_section_is_created(base):
    assert base.failures is None and base.reliability is None
    points = sweep_points(base, parse_sets(["failures.links.random=0,16",
                                            "reliability.hours=12"]))
    assert [p.scenario.failures.links.random for p in points] == [0, 16]
    assert [p.scenario.failures.num_samples for p in points] == [1, 100]   # defaults apply
    assert all(p.scenario.reliability.hours == 12 for p in points)


def test_private_attributes_are_carried(base, tmp_path):
    base._base_dir = tmp_path
    base._traffic_flows[("workload", 9)] = 7
    for point in sweep_points(base, parse_sets(["seed=1,2"])):
        assert point.scenario._base_dir == tmp_path
        assert point.scenario._traffic_flows == {("workload", 9): 7}
        assert point.scenario._traffic_flows is not base._traffic_flows


# --------------------------------------------------------------------------- errors

PARSE_ERRORS = [
    (["fabric.planes"], "no '='"),
    (["fabric.planes="], "has no values"),
    (["fabric.planes= , "], "empty value"),
    (["fabric.planes=1,,2"], "empty value"),
    (["fabric.planes,fabric.port_gbps=1:800G,2:"], "empty value"),
    (["fabric.planes=1", "fabric.planes=2"], "twice"),
    (["fabric.planes,fabric.planes=1:1"], "twice"),
    (["fabric=1", "fabric.planes=2"], "overlap"),
    (["fabric.planes,fabric.port_gbps=1:800G,2"], "2 fields"),
    (["fabric.planes=1:800G:3,2"], "1:800G:3"),           # one path: colons stay in the value
    (["fabric..planes=1"], "not a field path"),
    (["workload[x].size=1"], "not a field path"),
    (["=1"], "not a field path"),
    (["seed=[1"], "not a YAML value"),
    (["fabric.planes=1,1"], "twice"),
    ([f"seed={','.join(map(str, range(101)))}", f"name={','.join(f'n{i}' for i in range(100))}"],
     f"{MAX_POINTS:,} grid points"),
]


@pytest.mark.parametrize("options,fragment", PARSE_ERRORS)
def test_parse_errors_name_set(base, options, fragment):
    def call():
        sweep_points(base, parse_sets(options))
    err = _error(call)
    assert fragment in str(err)


PATH_ERRORS = [
    ("fabric.plane=1,2", "--set fabric.plane", "allowed: kind, gpus, port_gbps"),
    ("failures.linkz=1", "--set failures.linkz", "allowed: samples, seed, links"),
    ("workload[0].shiftt=1", "--set workload[0].shiftt", "allowed: name, gpus"),
    ("bogus=1", "--set bogus", "allowed: name, seed, fabric"),
    ("workload[2].size=1", "--set workload[2].size", "allowed: [0]..[1]"),
    ("workload.size=1", "--set workload.size", "workload[0].size"),
    ("fabric.gpus.x=1", "--set fabric.gpus.x", "is a value"),
    ("jobs[0].size=1", "--set jobs[0].size", "empty"),
]


@pytest.mark.parametrize("option,field,fragment", PATH_ERRORS)
def test_unknown_paths_name_set_and_the_allowed_fields(base, option, field, fragment):
    err = _error(lambda: sweep_points(base, parse_sets([option])))
    assert err.field == field
    assert fragment in err.message


def test_bad_value_names_set_path_value_and_the_scenario_message(base):
    err = _error(lambda: sweep_points(base, parse_sets(["seed=1,2",
                                                         "fabric.port_gbps=100G,0G"])))
    assert err.field == "--set fabric.port_gbps=0G"
    assert err.message.startswith("fabric.port_gbps: must be a positive rate")
    # a problem that no single swept path owns names every value of the point
    err = _error(lambda: sweep_points(base, parse_sets(["seed=4", "fabric.planes=3"])))
    assert err.field == "--set seed=4 --set fabric.planes=3"
    assert err.message.startswith("spray.evs: 8 EVs cannot be split equally over 3 planes")
    err = _error(lambda: sweep_points(base, parse_sets(["fabric.planes,spray.evs=2:8,3:8"])))
    assert err.field == "--set fabric.planes=3 --set spray.evs=8"


def test_compute_time_error_names_the_point(base):
    def refuse(scenario, progress=None):
        raise ScenarioError("policies", "too big for this machine")
    points = sweep_points(base, parse_sets(["seed=7", "fabric.port_gbps=1T"]))
    err = _error(lambda: run_sweep(points, analyze_fn=refuse))
    assert str(err) == ("--set seed=7 --set fabric.port_gbps=1T: policies: too big for this "
                        "machine")


# --------------------------------------------------------------------------- running

def _fake_report(scenario, failures: bool):
    records = [SimpleNamespace(policy=p, workload=w, gpus=32, p100_utilisation=2.0,
                               p99_utilisation=1.5, completion_s=None if p == "spray" else 1e-3,
                               slowdown=None if p == "spray" else 2.0,
                               fabric_slowdown=None if p == "spray" else 2.0,
                               busbw_gbps=None if p == "spray" else 50.0,
                               status="ok" if p == "ecmp" else "stalled")
               for p in scenario.policies for w in ("perm", "ring")]
    study = None
    if failures:
        dist = {"p50": 1.0, "p99": 3.0, "max": 4.0}
        study = SimpleNamespace(summaries=[
            SimpleNamespace(policy=p, workload=w, p100_utilisation=dist,
                            completion_s=None if p == "spray" else dist,
                            fabric_slowdown=None if p == "spray" else dist,
                            stalled_sets=5 if p == "spray" else 0, status="ok")
            for p in scenario.policies for w in ("perm", "ring")])
    return SimpleNamespace(records=records, failures=study)


def test_failure_columns_come_from_the_matching_summary(base):
    points = sweep_points(base, parse_sets(["failures.links.random=0,1"]))
    result = run_sweep(points, analyze_fn=lambda s, progress=None: _fake_report(
        s, s.failures.links.random > 0))
    assert result.columns[-len(FAILURE_METRICS):] == FAILURE_METRICS
    assert len(result.rows) == 2 * 2 * 2
    without, ecmp, spray = result.rows[0], result.rows[4], result.rows[6]
    assert all(without[c] is None for c in FAILURE_METRICS)
    assert (ecmp["policy"], ecmp["failures_p100_p99"], ecmp["failures_completion_max_s"],
            ecmp["stalled_sets"]) == ("ecmp", 3.0, 4.0, 0)
    assert (spray["policy"], spray["failures_completion_p50_s"], spray["stalled_sets"]) == (
        "spray", None, 5)
    # the failure slowdown: a set's completion over the healthy one (1 ms) of the same row
    assert ecmp["failures_slowdown_p99"] == pytest.approx(3.0 / 1e-3)
    assert ecmp["failures_slowdown_max"] == pytest.approx(4.0 / 1e-3)
    assert spray["failures_slowdown_p99"] is None       # stalled: no completion to compare
    headers, rows = sweep_table_rows(result)
    assert headers[-4:] == ["fail P100 p99", "fail completion p99", "fail slowdown p99",
                            "stalled sets"]
    assert rows[6][-4:] == ["3.000", "—", "—", "5"] and rows[0][-4:] == ["—"] * 4
    assert rows[4][-2] == "3000.000×"


def test_points_run_without_the_progressive_simulation(base):
    """No sweep column carries the flow-level figures, so a point never simulates them."""
    points = sweep_points(base, parse_sets(["seed=0,1", "solver.progressive=auto,true"]))
    seen = []

    def record(scenario, progress=None):
        seen.append(scenario.solver.progressive)
        return _fake_report(scenario, False)

    run_sweep(points, analyze_fn=record)
    assert seen == [False] * 4
    # the points themselves (and so the stream's header and the rows' values) are untouched
    assert [p.scenario.solver.progressive for p in points] == ["auto", True] * 2


def test_tiny_sweep_rows_match_analyze_on_the_point(base, tmp_path):
    from fabricjax.engine.phase import run_phase
    from fabricjax.study.analyze import analyze

    points = sweep_points(base, parse_sets(["workload[0].size=1MB,4MB", "seed=0,1"]))
    cache_sizes, calls = [], []

    def counting(scenario, progress=None):
        report = analyze(scenario, progress=progress)
        cache_sizes.append(run_phase._cache_size())
        return report

    result = run_sweep(points, analyze_fn=counting,
                       progress=lambda message, done, total: calls.append((done, total)))
    # same shapes at every point: the first point compiles, the others reuse it
    assert cache_sizes[1:] == [cache_sizes[0]] * 3, cache_sizes
    assert calls[0] == (0, 4) and calls[-1] == (4, 4)
    assert [d for d, _ in calls if d < 4] == sorted(d for d, _ in calls if d < 4)
    assert {d for d, _ in calls} == {0, 1, 2, 3, 4}
    assert len(result.wall_s) == 4 and all(w > 0 for w in result.wall_s)
    assert result.total_s >= sum(result.wall_s) * 0.99
    assert result.columns == ("point", "workload[0].size", "seed", "policy", "workload",
                              *METRICS, *BOM_COLUMNS)
    assert len(result.rows) == 4 * 2 * 2           # points x policies x items
    for index, point in enumerate(points):
        report = analyze(point.scenario)
        rows = [r for r in result.rows if r["point"] == index]
        assert len(rows) == len(report.records)
        for row, record in zip(rows, report.records):
            assert row["workload[0].size"] == point.values["workload[0].size"]
            assert row["seed"] == point.scenario.seed
            assert (row["policy"], row["workload"]) == (record.policy, record.workload)
            for name in METRICS:
                assert row[name] == getattr(record, name), (index, name)
    sizes = {r["workload[0].size"]: r["completion_s"] for r in result.rows
             if r["policy"] == "spray" and r["workload"] == "perm" and r["seed"] == 0}
    # really swept: the time on the fabric scales with the size, the transport latency not
    latency = float(transport_latency_s(base, 4))
    assert sizes["4MB"] - latency == pytest.approx(4 * (sizes["1MB"] - latency), rel=1e-3)

    headers, table = sweep_table_rows(result)
    # swept fields by their last component (the table's caption names them in full)
    assert headers[:4] == ["size", "seed", "policy", "workload"]
    assert len(table) == len(result.rows) and all(len(r) == len(headers) for r in table)
    assert all(isinstance(c, str) for r in table for c in r)
    _check_files(result, tmp_path)


def _check_files(result, tmp_path: Path) -> None:
    csv_path, json_path = tmp_path / "sweep.csv", tmp_path / "sweep.json"
    write_csv(result, csv_path)
    write_json(result, json_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.csv", "sweep.json"]
    with open(csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == [*result.columns, "point_wall_s"]
    assert len(rows) == len(result.rows)
    for row, original in zip(rows, result.rows):
        assert row["workload[0].size"] == original["workload[0].size"]
        assert float(row["p100_utilisation"]) == original["p100_utilisation"]
        assert float(row["point_wall_s"]) == result.wall_s[original["point"]]
    data = json.loads(json_path.read_text())
    assert data["rows"] == result.rows
    assert data["columns"] == list(result.columns)
    assert [p["values"] for p in data["points"]] == [p.values for p in result.points]
    assert [p["wall_s"] for p in data["points"]] == result.wall_s
    # a NaN is a bug: refused before anything is written, the old files stay whole
    before = (csv_path.read_bytes(), json_path.read_bytes())
    result.rows[0]["p99_utilisation"] = math.nan
    for write, path in ((write_csv, csv_path), (write_json, json_path)):
        with pytest.raises(ValueError):
            write(result, path)
    assert (csv_path.read_bytes(), json_path.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.csv", "sweep.json"]
