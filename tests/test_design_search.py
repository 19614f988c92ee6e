"""The design search (`fabricjax design`, `fj.design`): on a small space it returns what an
exhaustive sweep of the same space finds (the cheapest feasible design and the Pareto front),
its bounds are true lower bounds of what the static level measures, its drops say why, and
bad design files are one-line errors.

The space is built from two made-up switch parts laid over the catalog (`design.catalog`),
small enough that 32 GPUs need two tiers: 1.6 and 3.2 Tbit/s boxes, 400G NICs as 1 x 400G or
4 x 100G, 1:1 or 3:1 at the T0s. The exhaustive reference evaluates every candidate the
search enumerates with the plain sweep (`sweeps.run_sweep`, no bounds, no pruning) and reads
the target metric off the rows with its own arithmetic.
"""

from __future__ import annotations

import json

import pytest

from fabricjax.config import DesignConfig
from fabricjax.scenario import load_design, parse_design, parse_scenario
from fabricjax.core.errors import ScenarioError
from fabricjax.sweeps import Point, run_sweep
from fabricjax.sweeps.design import (bundled_catalog, design_search, enumerate_designs,
                                     item_bounds, merged_catalog)
from fabricjax.workload.build import build_workload
from test_cli import assert_one_line_error, fabricjax

import numpy as np

TINY_PARTS = {"tiny-1.6T": {"capacity_gbps": 1600, "port_speeds": [100, 400], "watts": 80,
                            "price_usd": 3000},
              "tiny-3.2T": {"capacity_gbps": 3200, "port_speeds": [100, 400], "watts": 150,
                            "price_usd": 5000}}
SCENARIO = {"name": "tiny-design", "seed": 2, "fabric": {"gpus": 32},
            "workload": [{"name": "ring", "collective": "all-reduce", "order": "random",
                          "size": 16 * 2**20},
                         {"name": "perm", "collective": "permutation", "size": 4 * 2**20}],
            "policies": ["ecmp", "spray"], "spray": {"evs": 8},
            "failures": {"samples": 4, "links": {"random": 2}}}
DESIGN = {"nic_gbps": 400,
          "space": {"switches": ["tiny-1.6T", "tiny-3.2T"], "planes": [1, 4],
                    "tiers": [2, 3], "oversubscription": [1, 3]},
          "target": {"metric": "slowdown", "max": 1.6, "quantile": "p99"},
          "catalog": {"switches": TINY_PARTS}, "confirm": {"dynamic": False}}


def _scenario():
    return parse_scenario(SCENARIO)


def _p99_slowdown(row: dict) -> float | None:
    """The reference's own reading: the p99 failure completion over the perfect network's
    time (the healthy completion over its fabric slowdown)."""
    if row["failures_completion_p99_s"] is None or not row["fabric_slowdown"]:
        return None
    return row["failures_completion_p99_s"] * row["fabric_slowdown"] / row["completion_s"]


@pytest.fixture(scope="module")
def searched():
    base, spec = _scenario(), parse_design(DESIGN)
    return base, spec, design_search(base, spec)


def test_search_finds_what_the_exhaustive_sweep_finds(searched):
    base, spec, result = searched
    kept, _ = enumerate_designs(base, spec, merged_catalog(spec.catalog))
    assert len(kept) >= 4
    designs = []
    for cand, scenario, cost in kept:
        rows = run_sweep([Point(cand.values, scenario)]).rows
        for policy in {r["policy"] for r in rows}:
            values = [_p99_slowdown(r) for r in rows if r["policy"] == policy]
            worst = None if None in values else max(values)
            designs.append({"design": cand.name, "policy": policy, "cost": cost["cost_usd"],
                            "watts": cost["watts"], "metric": worst})
    feasible = [d for d in designs if d["metric"] is not None and d["metric"] <= 1.6]
    assert feasible and len(feasible) < len(designs), "the target must split the space"
    cheapest = min(d["cost"] for d in feasible)
    best_names = {(d["design"], d["policy"]) for d in feasible if d["cost"] == cheapest}
    assert (result.best["design"], result.best["policy"]) in best_names

    def point(d):   # rounded: equal bottlenecks read equal up to the last bits
        return (d["cost"], d["watts"], float(f"{d['metric']:.9g}"))
    known = feasible          # the front is the trade among designs that meet the target
    front = {(d["design"], d["policy"]) for d in known
             if not any(all(a <= b for a, b in zip(point(e), point(d))) and
                        point(e) != point(d) for e in known)}
    assert {(d["design"], d["policy"]) for d in result.front} == front


def test_the_search_prunes_and_says_why(searched):
    _, _, result = searched
    stages = {d["stage"] for d in result.dropped}
    assert "enumerate" in stages and "bound" in stages, result.dropped
    reasons = " | ".join(d["reason"] for d in result.dropped)
    assert "reach" in reasons or "exceed" in reasons      # too few tiers for 32 GPUs
    assert "no policy can meet slowdown <= 1.6" in reasons  # an oversubscribed T0's cut
    counts = {s["stage"]: s for s in result.stages}
    assert counts["enumerate"]["designs_in"] == result.candidates == 16
    assert sum(s["dropped"] for s in result.stages) == len(result.dropped)


def test_bounds_are_below_what_the_static_level_measures(searched):
    base, spec, result = searched
    kept, _ = enumerate_designs(base, spec, merged_catalog(spec.catalog))
    collectives = build_workload(base, np.random.default_rng([base.seed, 0]))
    measured = {(d["design"], d["policy"]): d for d in result.designs}
    checked = 0
    for cand, scenario, _ in kept:
        bounds = {b["workload"]: b for b in item_bounds(scenario, collectives, cand)}
        for (name, policy), d in measured.items():
            if name != cand.name:
                continue
            rows = run_sweep([Point(cand.values, scenario)]).rows
            for row in rows:
                b = bounds[row["workload"]]
                assert b["completion_s"] <= row["completion_s"] * (1 + 1e-9)
                assert b["completion_s"] / b["endpoint_s"] <= row["fabric_slowdown"] + 1e-9
                checked += 1
            break
    assert checked >= 4


def test_the_catalog_cites_a_source_for_every_part():
    catalog = bundled_catalog()
    parts = [*catalog.switches.values(), *catalog.optics.values(), catalog.copper, catalog.nic]
    assert len(catalog.switches) >= 3 and all(p.source for p in parts)
    assert "not" in catalog.note and "quote" in catalog.note


@pytest.mark.parametrize("section, fragment", [
    ({"target": {"max": 1.05}, "space": {"planez": [8]}}, "design.space.planez: unknown field 'planez'; allowed: switches, planes"),
    ({"target": {"min": 1.05}}, "design.target: slowdown needs 'max' alone"),
    ({"target": {"metric": "step_time_s", "max": 2.0}}, "healthy fabric only"),
    ({"target": {"max": 1.05}, "objective": "price"}, "design.objective"),
    ({"target": {"max": 1.05}, "space": {"planes": [8, 8]}}, "appear once"),
    ([1, 2], "design: expected a mapping"),
])
def test_bad_design_sections_name_the_field(section, fragment):
    with pytest.raises(ScenarioError) as caught:
        parse_design(section)
    assert fragment in str(caught.value)


def test_design_refuses_optimal_and_unknown_parts():
    base = _scenario()
    with pytest.raises(ScenarioError, match="design.space.policies: optimal is a bound"):
        design_search(base, parse_design({**DESIGN, "space": {**DESIGN["space"],
                                                              "policies": ["optimal"]}}))
    with pytest.raises(ScenarioError, match="design.space.switches: unknown part 'nope'"):
        design_search(base, parse_design({**DESIGN, "space": {"switches": ["nope"]}}))
    healthy = parse_scenario({k: v for k, v in SCENARIO.items() if k != "failures"})
    with pytest.raises(ScenarioError, match="design.target.quantile: p99 is over the failure"):
        design_search(healthy, parse_design(DESIGN))


def _design_file(tmp_path, design=None):
    import yaml
    path = tmp_path / "d.yaml"
    data = {**SCENARIO, "design": design or {**DESIGN, "space": {
        **DESIGN["space"], "switches": ["tiny-3.2T"], "planes": [1], "tiers": [2]}}}
    path.write_text(yaml.safe_dump(data))
    return path


def test_cli_design_prints_the_best_writes_json_and_resumes(tmp_path):
    path = _design_file(tmp_path)
    first = fabricjax("design", path, "--json", "out.json", "--quiet", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "Cheapest design meeting slowdown <= 1.6 at p99" in first.stdout
    assert "Pareto front" in first.stdout and "dropped at bound" in first.stdout
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["best"]["design"].startswith("2-tier 1x400G tiny-3.2T")
    assert data["front"] and all(d["cost_usd"] > 0 for d in data["front"])
    assert (tmp_path / "out.jsonl").exists()
    again = fabricjax("design", path, "--json", "out.json", "--resume", "--quiet",
                      cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "1 solve(s) taken from out.jsonl" in again.stdout
    assert json.loads((tmp_path / "out.json").read_text())["best"] == data["best"]


def test_cli_design_errors_are_one_line(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("workload: [{collective: permutation}]\n")
    assert_one_line_error(fabricjax("design", scenario, cwd=tmp_path),
                          "design: required field is missing")
    bad = _design_file(tmp_path, {"target": {"max": 1.05}, "space": {"tiers": [4]}})
    assert_one_line_error(fabricjax("design", bad, "--json", "x.json", cwd=tmp_path),
                          "design.space.tiers[0]")
    assert not (tmp_path / "x.json").exists()


def test_design_config_documents_every_field():
    for model in (DesignConfig,):
        for name, field in model.model_fields.items():
            assert field.description, name


def test_a_design_file_loads(tmp_path):
    base, spec = load_design(_design_file(tmp_path))
    assert base.fabric.gpus == 32 and spec.nic_gbps == 400


def test_each_design_takes_its_kinds_fields(tmp_path):
    """A fat-tree design takes `design.paths` and no rails, a Clos design its T0 ratio and
    the file's rails; a design file's `fabric.paths` (which a Clos design has not) is refused
    naming where it goes."""
    import yaml
    path = _design_file(tmp_path, {**DESIGN, "paths": 4})
    data = yaml.safe_load(path.read_text())
    # 16 GPUs: three tiers of the 1.6T part's 4 x 400G reach them, two do not
    data["fabric"].update(gpus=16, rail_optimised=True)
    path.write_text(yaml.safe_dump(data))
    base, spec = load_design(path)
    kept, _ = enumerate_designs(base, spec, merged_catalog(spec.catalog))
    fabrics = {cand.tiers: scenario.fabric for cand, scenario, _ in kept}
    assert fabrics[3].kind == "fat-tree" and fabrics[3].paths == 4
    assert not hasattr(fabrics[3], "rail_optimised")
    assert fabrics[2].kind == "multiplane-clos" and fabrics[2].rail_optimised
    data["fabric"]["paths"] = 4
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError, match=r"fabric.paths: is set by each design.*design.paths"):
        load_design(path)


def test_upgrades_name_the_links_of_the_binding_item():
    """ECMP's hash collisions make the healthy ring link-bound: the gradients name links, and
    each one named saves time."""
    base = _scenario()
    spec = parse_design({**DESIGN, "upgrades": True,
                         "target": {"metric": "slowdown", "max": 10.0, "quantile": "p99"},
                         "space": {**DESIGN["space"], "switches": ["tiny-3.2T"], "planes": [1],
                                   "tiers": [2], "policies": ["ecmp"]}})
    result = design_search(base, spec)
    upgrades = result.best["upgrades"]
    assert 1 <= len(upgrades) <= 3, upgrades
    assert all(u["us_saved_per_gbps"] > 0 and u["utilisation"] > 0 for u in upgrades)
    saved = [u["us_saved_per_gbps"] for u in upgrades]
    assert saved == sorted(saved, reverse=True)
