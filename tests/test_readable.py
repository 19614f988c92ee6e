"""Results a network engineer reads right the first time.

Each test here failed before the change it guards: an incast read "slowdown 1.000x" against
an "ideal" that already counted the receiver's NIC; `event_limit` sat in the completion
table's status; ties named one link at random; a single failure set printed three equal
figures; fat-tree tiers were named like a Clos's; sweep headers were truncated. Units
(test_units), plots (test_plots), baselines (test_bom, test_design_cli) and the wheel
(test_packaging) have their own files.
"""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
from rich.console import Console

from fabricjax.fabric.build import build
from fabricjax.policies import get
from fabricjax.report.json import report_dict
from fabricjax.report.tables import (bottleneck_lines, failure_table, flow_table,
                                     sensitivity_table, sweep_table, time_table, trace_lines)
from fabricjax.core.status import Status
from fabricjax.engine.timing import endpoint_bound_time_s, line_rate_time_s
from fabricjax.metrics import progressive_figures
from fabricjax.scenario import parse_scenario
from fabricjax.study.analyze import analyze
from fabricjax.solver.progressive import Progressive
from fabricjax.sweeps import short_names
from fabricjax.workload.build import build_workload
from fabricjax.workload.flows import Flows
from test_cli import assert_one_line_error, fabricjax

TINY_FABRIC = {"gpus": 64, "planes": 2, "port_gbps": "100G", "radix": 16}


def rendered(table) -> str:
    console = Console(width=250, record=True, color_system=None)
    console.print(table)
    return console.export_text()


@pytest.fixture(scope="module")
def hot_spots():
    """Spraying on a 32-to-1 incast and a Zipf-skewed all-to-all: hot receivers, no fabric
    hot spot (64 GPUs, two planes). The fluid model (transport off): the ratios are exact."""
    scenario = parse_scenario({
        "name": "hot", "seed": 1, "fabric": TINY_FABRIC, "policies": ["spray"],
        "transport": {"enabled": False},
        "workload": [
            {"name": "incast", "collective": "incast", "size": "4MiB", "gpus": 33},
            {"name": "moe", "collective": "all-to-all", "size": "16MiB", "skew": 1.0}]})
    return analyze(scenario)


def test_incast_is_32x_line_rate_but_the_fabric_adds_nothing(hot_spots):
    incast, moe = hot_spots.records
    # before: slowdown 1.000x against an "ideal" that already shared the receiver's NIC
    assert incast.slowdown == pytest.approx(32.0, rel=1e-3)
    assert incast.fabric_slowdown == pytest.approx(1.0, rel=1e-3)
    assert incast.endpoint_bound_s == pytest.approx(32 * incast.line_rate_s, rel=1e-3)
    # the skewed all-to-all: every GPU sends the same bytes, hot experts receive most of them
    assert moe.slowdown > 5 and moe.fabric_slowdown == pytest.approx(1.0, rel=1e-3)
    assert moe.line_rate_busbw_gbps == pytest.approx(200.0, rel=0.05)   # 2 x 100G NICs
    # the same names in JSON and tables; nothing called "ideal" any more
    record = report_dict(hot_spots)["results"][0]
    for key in ("line_rate_s", "endpoint_bound_s", "slowdown", "fabric_slowdown",
                "line_rate_busbw_gbps"):
        assert key in record
    assert not any("ideal" in key for key in record)
    text = rendered(time_table(hot_spots))
    for header in ("line rate", "slowdown", "endpoint bound", "fabric slowdown"):
        assert header in text
    assert "32.000×" in text and "ideal" not in text


def slow_nic_time(gpus, size, start, nic) -> float:
    """One NIC at a time, one flow at a time, in start order: when the busiest is done."""
    done = 0.0
    for g in set(gpus.tolist()):
        mine = sorted((0.0 if start is None else start[i], size[i]) for i in range(size.size)
                      if gpus[i] == g and size[i] > 0)
        clock = 0.0
        for begin, bytes_ in mine:
            clock = max(clock, begin) + bytes_ * 8e-9 / nic[g]
        done = max(done, clock)
    return done


def test_line_rate_and_endpoint_bound_against_a_slow_reference():
    rng = np.random.default_rng(7)
    for case in range(200):
        n, gpus = int(rng.integers(1, 30)), int(rng.integers(2, 6))
        src = rng.integers(0, gpus, n)
        dst = (src + rng.integers(1, gpus, n)) % gpus
        size = rng.integers(0, 5, n) * 1e6
        start = rng.integers(0, 4, n) * 1e-4 if case % 2 else None
        nic = rng.uniform(50, 400, gpus)
        flows = Flows(src=src, dst=dst, size=size, start=start)
        # times run from the phase's first start (of a flow with bytes)
        if start is not None and np.any(size > 0):
            start = start - start[size > 0].min()
        line = slow_nic_time(src, size, start, nic)
        assert line_rate_time_s(flows, nic) == pytest.approx(line)
        assert endpoint_bound_time_s(flows, nic, 1.0) == pytest.approx(
            max(line, slow_nic_time(dst, size, start, nic)))
        wire = 1.25      # headers stretch the bytes, not the start times
        assert endpoint_bound_time_s(flows, nic, wire) == pytest.approx(
            max(slow_nic_time(src, size * wire, start, nic),
                slow_nic_time(dst, size * wire, start, nic)))


def test_the_fabric_share_is_never_below_one(hot_spots):
    for record in hot_spots.records:
        assert record.fabric_slowdown >= 1 - 1e-6
        assert record.slowdown >= record.fabric_slowdown - 1e-6


def test_event_limit_marks_the_progressive_figures_not_the_completion():
    """A progressive simulation capped at 2 events: the static completion's status stays ok,
    the flow table's figures carry a star and say why."""
    scenario = parse_scenario({
        "name": "capped", "seed": 3, "fabric": TINY_FABRIC, "policies": ["spray"],
        "solver": {"max_events": 2, "progressive": True},
        "workload": [{"name": "moe", "collective": "all-to-all", "size": "16MiB",
                      "skew": 1.0}]})
    report = analyze(scenario)
    (record,) = report.records
    assert record.status == "ok" and record.progressive_status == "event_limit"
    assert "event_limit" not in rendered(time_table(report))
    flows = rendered(flow_table(report))
    assert "*" in flows and "hit solver.max_events" in flows


def test_a_given_up_simulation_shows_no_figures_and_says_why():
    """`progressive: auto` gave the simulation up (Status.SKIPPED): the record keeps the event
    count, no progressive time or FCT, status `skipped`; the flow table says so."""
    scenario = parse_scenario({
        "name": "given-up", "seed": 3, "fabric": TINY_FABRIC, "policies": ["spray"],
        "workload": [{"name": "moe", "collective": "all-to-all", "size": "16MiB",
                      "skew": 1.0}]})
    report = analyze(scenario)
    (collective,) = build_workload(scenario, np.random.default_rng([scenario.seed, 0]))
    outcome = types.SimpleNamespace(slots=1, progressive=Progressive(
        finish=np.full(collective.phases[0].flows.num_flows, np.inf),
        duration=np.full(collective.phases[0].flows.num_flows, np.inf), events=np.int32(32),
        rounds=np.int32(3), status=np.int32(Status.SKIPPED)))
    assert progressive_figures(collective, [outcome], scenario, build(scenario)) == {
        "events": 32, "skipped": True}
    given_up = dataclasses.replace(report, records=[fake_record(
        report, progressive_s=None, fct_p50_s=None, fct_p99_s=None, fct_max_s=None,
        events=32, progressive_status="skipped")])
    flows = rendered(flow_table(given_up))
    assert "skipped (32)" in flows and "gave it up" in flows and "*" not in flows


def fake_record(report, **changes):
    return dataclasses.replace(report.records[0], **changes)


def test_loose_lines_have_headings_and_read_right(hot_spots):
    links = [{"link": f"plane0/gpu{i}/up", "utilisation": 1.0} for i in range(5)]
    flat = fake_record(hot_spots, bottleneck_links=links, p50_utilisation=1.0)
    lines = bottleneck_lines(dataclasses.replace(hot_spots, records=[flat]))
    assert lines[0].startswith("Busiest link")
    assert "all links at 1.000 (P50 = P100)" in lines[1] and "gpu0" not in lines[1]
    # many tied links, but not all: says so, with examples
    tied = fake_record(hot_spots, bottleneck_links=links, p50_utilisation=0.5)
    (line,) = bottleneck_lines(dataclasses.replace(hot_spots, records=[tied]))[1:]
    assert "5 or more links tied at 1.000, e.g." in line
    # the trace includes and marks the iteration the policy returned, even off the grid
    trace = [2.0, 1.9, 1.8, 1.7, 1.6, 1.5, 1.4, 1.3, 1.2, 1.1, 1.0, 1.05, 1.1, 1.2, 1.3]
    traced = fake_record(hot_spots, policy="mrc", trace=trace)
    lines = trace_lines(dataclasses.replace(hot_spots, records=[traced]))
    assert lines[0].startswith("P100 by iteration") and "1.000@10 (returned)" in lines[1]


def test_sensitivity_never_prints_minus_zero(hot_spots):
    row = {"policy": "spray", "workload": "incast", "links": [
        {"link": "plane0/t1-0/down1", "utilisation": 1.0, "d_time_d_gbps": 0.0,
         "d_p100_d_gbps": -0.0001},
        {"link": "plane1/t1-0/down1", "utilisation": 1.0, "d_time_d_gbps": -0.0,
         "d_p100_d_gbps": -0.0}]}
    text = rendered(sensitivity_table(dataclasses.replace(hot_spots, sensitivity=[row])))
    assert "-0 " not in text and "-0\n" not in text and "│ -0" not in text


def test_zero_iterations_read_as_what_they_are():
    assert get("optimal").convergence(0, 0) == "solved at the first check (gap)"
    assert get("optimal").convergence(0, 12) == "converged (gap)"
    assert get("mrc").convergence(0, 0) == "balanced at the start (nothing marked)"
    assert get("mrc").convergence(int(Status.SETTLED), 9) == "converged (settled)"


def test_a_single_failure_set_shows_one_figure():
    scenario = parse_scenario({
        "name": "one-set", "seed": 2, "fabric": TINY_FABRIC, "policies": ["spray"],
        "failures": {"links": {"random": 2}, "samples": 1},
        "workload": [{"name": "perm", "collective": "permutation", "size": "1MiB"}]})
    text = rendered(failure_table(analyze(scenario)))
    assert "in the one failure set" in text
    assert " / " not in text.split("\n", 2)[2]           # no "6.000 / 6.000 / 6.000"


def test_fat_tree_tiers_are_named_as_fat_tree_tiers():
    scenario = parse_scenario({
        "name": "ft", "fabric": {"kind": "fat-tree", "radix": 4, "gpus": 16, "tiers": 3},
        "workload": [{"name": "perm", "collective": "permutation", "size": "1MiB"}]})
    fabric = build(scenario)
    assert list(fabric.tier_names) == ["host-edge", "edge-agg", "agg-core", "core-agg",
                                       "agg-edge", "edge-host"]


def test_sweep_headers_fit_the_screen():
    paths = ("fabric.planes", "workload[0].size", "spray.evs", "mrc.evs")
    assert short_names(paths) == {"fabric.planes": "planes", "workload[0].size": "size",
                                  "spray.evs": "spray.evs", "mrc.evs": "mrc.evs"}
    headers = ["planes", "size", "policy", "P100 util"]
    text = rendered(sweep_table(headers, [["8", "1MiB", "spray", "1.000"]],
                                legend="planes = fabric.planes; size = workload[0].size"))
    header_line = next(line for line in text.splitlines() if "planes" in line and "size" in line)
    assert "…" not in header_line
    assert "swept: planes = fabric.planes" in text


@pytest.mark.parametrize("args, yaml, fragments, absent", [
    (["-p", "mcr"], "", ["--policy", "'mcr'", "spray"], "policies[0]"),
    ([], "fabric: [gpus, 64]\n", ["fabric", "mapping"], "Config"),
])
def test_errors_speak_the_users_words(tmp_path, args, yaml, fragments, absent):
    text = yaml or "fabric: {gpus: 64, planes: 2, radix: 16}\n"
    (tmp_path / "s.yaml").write_text(
        text + "workload: [{name: p, collective: permutation, size: 1MiB}]\n")
    line = assert_one_line_error(fabricjax("analyze", "s.yaml", *args, cwd=tmp_path),
                                 *fragments)
    assert absent not in line


def test_oversubscription_reads_as_a_ratio():
    scenario = parse_scenario({
        "fabric": {"gpus": 64, "planes": 2, "radix": 16, "oversubscription": "3:1"},
        "workload": [{"name": "p", "collective": "permutation", "size": "4Mb"}]})
    assert scenario.fabric.oversubscription == 3.0
    assert scenario.workload[0].size == 500_000           # 4 megabits, not 4 megabytes
