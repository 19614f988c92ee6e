"""Fat-tree and graph fabrics through `analyze` and the command line (the fabric families):
full-bisection fat trees spray at P100 1, a graph file's degraded cable shows up, and what
the graph path does not model is refused naming the field."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fabricjax.study.analyze import analyze
from fabricjax.core.errors import ScenarioError
from fabricjax.core.registry import lookup
from fabricjax.scenario import load_scenario, parse_scenario
from test_cli import assert_one_line_error, fabricjax

REPO = Path(__file__).resolve().parent.parent
FAT = {"kind": "fat-tree", "tiers": 3, "gpus": 16, "radix": 4, "port_gbps": 100.0,
       "planes": 1, "paths": 4}


def fat_tree(**extra):
    return parse_scenario({"fabric": FAT, "workload": [{"collective": "permutation",
                                                       "size": 4 * 2**20}],
                           "policies": ["ecmp", "spray"], **extra})


def test_full_fat_tree_sprays_at_line_rate_and_ecmp_collides():
    """k = 4: 16 hosts, 4 core paths between pods; spraying over all of them is
    full bisection (P100 1), ECMP's one hash per flow collides on some seeds."""
    worst = 0.0
    for seed in range(4):
        ecmp, spray = analyze(fat_tree(seed=seed)).records
        assert spray.p100_utilisation == pytest.approx(1.0, rel=1e-5)
        # the endpoint bound: every host sending alone at its NIC rate, with the same
        # headers and latency; the line rate has no overhead, so the slowdown is the
        # transport's alone
        assert spray.fabric_slowdown == pytest.approx(1.0, rel=1e-5)
        assert spray.slowdown == pytest.approx(spray.completion_s / spray.line_rate_s,
                                               rel=1e-9)
        assert 1.0 < spray.slowdown < 1.1
        worst = max(worst, ecmp.p100_utilisation)
    assert worst >= 2.0


def test_graph_file_scenario_loads_and_refuses_what_it_does_not_model(tmp_path):
    shutil.copytree(REPO / "scenarios" / "graphs", tmp_path / "graphs")
    shutil.copy(REPO / "scenarios" / "graph-leaf-spine.yaml", tmp_path / "g.yaml")
    scenario = load_scenario(tmp_path / "g.yaml")
    report = analyze(scenario)
    assert {r.policy for r in report.records} == {"ecmp", "spray", "mrc", "optimal"}
    assert all(r.status == "ok" and r.completion_s > 0 for r in report.records)
    # from the command line too (topo: no compilation; `analyze` is the same call as above)
    proc = fabricjax("topo", "g.yaml", cwd=tmp_path)
    assert proc.returncode == 0 and "Fabric (graph)" in proc.stdout


@pytest.mark.parametrize("fabric,extra,field", [
    ({"kind": "graph", "gpus": 4}, {}, "fabric.file"),
    ({**FAT, "tiers": 2}, {}, "fabric.tiers"),
    ({**FAT, "gpus": 20}, {}, "fabric.gpus"),
    ({**FAT, "planes": 2, "paths": 3}, {}, "fabric.paths"),
    ({"gpus": 16, "radix": 8, "tiers": 3}, {}, "fabric.tiers"),
])
def test_bad_families_name_the_field(fabric, extra, field):
    with pytest.raises(ScenarioError) as err:
        scenario = parse_scenario({"fabric": fabric, "workload": [
            {"collective": "permutation"}], "policies": ["spray"], **extra})
        analyze(scenario)
    assert err.value.field == field, err.value


def test_graph_file_must_stay_in_the_scenarios_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "g.yaml").write_text(
        "fabric: {kind: graph, file: ../x.graphml, gpus: 4}\n"
        "workload: [{collective: permutation}]\npolicies: [spray]\n")
    proc = fabricjax("analyze", "g.yaml", cwd=tmp_path / "sub")
    assert_one_line_error(proc, "fabric.file", "outside")


def test_a_graph_file_takes_any_ev_count_and_no_clos_field(tmp_path):
    """A graph file declares no planes: spraying's EVs need not be a multiple of the Clos's
    default 8 (they had to be), and a field only a built fabric has is refused by name."""
    shutil.copytree(REPO / "scenarios" / "graphs", tmp_path / "graphs")
    fabric = {"kind": "graph", "file": "graphs/leaf-spine-64.graphml", "gpus": 64}
    data = {"fabric": fabric, "workload": [{"collective": "permutation"}],
            "policies": ["spray"], "spray": {"evs": 4, "placement": "hashed"}}
    scenario = parse_scenario(data, base_dir=tmp_path)
    lookup("spray").check(scenario)
    assert not hasattr(scenario.fabric, "planes")
    for field, value in (("radix", 32), ("oversubscription", 3), ("rail_optimised", True)):
        with pytest.raises(ScenarioError) as err:
            parse_scenario({**data, "fabric": {**fabric, field: value}}, base_dir=tmp_path)
        assert err.value.field == f"fabric.{field}" and "unknown field" in str(err.value)
