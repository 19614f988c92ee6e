"""A Clos's T1s are the switches as built: below full size a physical spine takes a bundle of
every T0's uplinks, and failure names, random draws and link names all speak of it (a
"T1 down" is the switch `topo` counts, not one logical spine of it)."""

from __future__ import annotations

import numpy as np
import pytest

from fabricjax.config import ClosConfig, SwitchFailureConfig
from fabricjax.core.errors import ScenarioError
from fabricjax.fabric.clos import build_fabric, clos_geometry, fabric_summary
from fabricjax.fabric.failures import (drawn_component, parse_component, population,
                                       sample_failures)
from fabricjax.scenario import parse_scenario
from fabricjax.study.analyze import analyze

QUICKSTART = ClosConfig(gpus=1024, planes=8, port_gbps=100.0, radix=64)


def test_a_t1_is_the_physical_switch_topo_counts():
    geom = clos_geometry(QUICKSTART)
    summary = fabric_summary(QUICKSTART)
    assert geom.t1_switches == summary["t1_per_plane"] == 16 and geom.spine_bundle == 2
    spine = parse_component(geom, "switches", "plane2/t1-4", "failures.switches")
    # logical spines 8 and 9 of plane 2: the two uplinks of every T0 into physical T1 4
    first_t1 = geom.gpus + geom.planes * geom.t0s + 2 * geom.spines
    assert spine.nodes == (first_t1 + 8, first_t1 + 9)
    with pytest.raises(ScenarioError, match=r"t1 0\.\.15"):
        parse_component(geom, "switches", "plane2/t1-16", "failures.switches")
    tier = SwitchFailureConfig(random=1, tier="t1")
    assert population(geom, "switches", tier) == 8 * 16
    drawn = {drawn_component(geom, "switches", tier, i).name for i in range(8 * 16)}
    assert drawn == {f"plane{p}/t1-{j}" for p in range(8) for j in range(16)}


def test_link_names_name_the_physical_t1_and_parse_back():
    fabric = build_fabric(QUICKSTART)
    geom = fabric.geometry
    lo, hi = fabric.tier_bounds[2]
    for link in np.linspace(lo, hi - 1, 97).astype(int).tolist():
        name = fabric.link_name(link)
        switch = int(name.split("/")[1][3:])
        assert switch < geom.t1_switches and "#" in name
        assert link in parse_component(geom, "links", name, "failures.links").links
    # a downlink's name without the cable index is cable #0 of the bundle
    assert (parse_component(geom, "links", "plane0/t1-3/down5", "f").links ==
            parse_component(geom, "links", "plane0/t1-3/down5#0", "f").links)
    with pytest.raises(ScenarioError, match="failures.links"):
        parse_component(geom, "links", "plane0/t1-3/down5#2", "failures.links")


def spine_failure(gpus, radix):
    return parse_scenario({
        "fabric": {"gpus": gpus, "planes": 8, "port_gbps": 100.0, "radix": radix},
        "workload": [{"collective": "permutation", "size": 2**20, "shift": radix // 2}],
        "failures": {"switches": {"random": 1, "tier": "t1"}, "samples": 2, "seed": 5},
        "policies": ["optimal"]})


def test_a_random_t1_failure_costs_optimal_its_bundle():
    """1,024 GPUs on radix 64: 16 T1s a plane as built, two uplinks of each T0 into each; a
    T1 down leaves a T0 of that plane 30 of its 32 uplinks: optimal 32/30 on a shift by one
    T0 (each flow keeps 1/8 of its bytes on every plane)."""
    scenario = spine_failure(1024, 64)
    batch = sample_failures(scenario)
    report = analyze(scenario)
    (summary,) = report.failures.summaries
    assert summary.p100_utilisation["max"] == pytest.approx(32 / 30, rel=1e-4)
    assert summary.p100_utilisation["p50"] == pytest.approx(32 / 30, rel=1e-4)
    assert len(batch.names) == 2 and all(len(n) == 1 for n in batch.names)


@pytest.mark.slow
def test_a_random_t1_failure_at_16k_costs_optimal_32_over_31():
    """16,384 GPUs, 8 x 100G, radix 512: 32 T1s a plane as built (8 uplinks of each T0 into
    each); one down costs optimal 256/248 = 32/31 on a shift permutation."""
    report = analyze(spine_failure(16384, 512))
    (summary,) = report.failures.summaries
    assert summary.p100_utilisation["max"] == pytest.approx(32 / 31, rel=1e-4)


def test_the_reliability_what_if_counts_switches_as_built():
    """Spraying touches every switch: 8 planes x (32 T0s + 16 T1s as built), not the 32
    logical spines a plane's T0 uplinks make."""
    scenario = parse_scenario({
        "fabric": {"gpus": 1024, "planes": 8, "port_gbps": 100.0, "radix": 64},
        "workload": [{"collective": "permutation", "size": 2**20}],
        "reliability": {"switch_failures_per_hour": 1e-3}, "policies": ["spray"]})
    (row,) = analyze(scenario).reliability
    assert row.switches_used == 8 * (32 + 16)
    assert row.fabric_events_per_hour == pytest.approx(1e-3 * 8 * (32 + 16))
