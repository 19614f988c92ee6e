"""Flow start times: a phase's clock is relative to its first start, float64 on the host, and
the transport's overheads stretch durations, never start times. The baseline and every failure
set finish a phase through the same host function, so an all-alive failure set equals the
baseline to the bit, whatever the offsets.

The case is the one a user met: two 1 MB flows on a 400G fabric from a CSV traffic file, the
second starting late (0, 1 ms, 1000 s). A flow alone on its path takes its wire bytes at
400 Gbit/s plus the transport latency, wherever it sits in time."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from fabricjax.engine.timing import arrival_cohorts, fabric_end_s, transport_latency_s, wire_factor
from fabricjax.scenario import load_scenario
from fabricjax.study.analyze import analyze
from fabricjax.workload.flows import Flows

SIZE = 1_000_000        # bytes
NIC_GBPS = 400.0


def scenario(tmp_path, late_s: float, policies=("ecmp", "spray"), failures: bool = False):
    # T0s of 4 GPUs: the flows cross T0 0 -> 2 and 1 -> 3, so they share no link
    (tmp_path / "flows.csv").write_text(f"src,dst,bytes,start\n0,9,{SIZE},0\n"
                                        f"4,13,{SIZE},{late_s!r}\n")
    text = {
        "name": "late-flow",
        "fabric": {"gpus": 32, "planes": 1, "port_gbps": NIC_GBPS, "radix": 8},
        "workload": [{"name": "late", "collective": "traffic", "file": "flows.csv"}],
        "policies": list(policies),
        "solver": {"progressive": True},
    }
    if failures:
        # every set fails a cable of a T0 no flow touches: all alive for these flows
        text["failures"] = {"links": ["plane0/t0-7/up0"]}
    path = tmp_path / "sc.yaml"
    path.write_text(yaml.safe_dump(text))
    return load_scenario(path)


def alone_s(sc) -> float:
    """One 1 MB flow alone across the spines: its wire bytes at line rate plus the latency of
    its four links until the last byte arrives."""
    return SIZE * 8e-9 * wire_factor(sc) / NIC_GBPS + float(transport_latency_s(sc, 4))


@pytest.mark.parametrize("late_s", [0.0, 1e-3, 1000.0])
def test_late_flow_completion_and_fct(tmp_path, late_s):
    sc = scenario(tmp_path, late_s)
    report = analyze(sc)
    one = alone_s(sc)
    fct = one + float(transport_latency_s(sc, 4, acknowledged=True)) - float(
        transport_latency_s(sc, 4))
    for record in report.records:
        # the late flow ends its own duration after it starts (at 0 they run side by side)
        expected = max(late_s + one, one)
        assert record.completion_s == pytest.approx(expected, rel=1e-6, abs=1e-12)
        assert record.progressive_s == pytest.approx(expected, rel=1e-6, abs=1e-12)
        # every flow's FCT is the same whenever it starts
        assert record.fct_max_s == pytest.approx(fct, rel=1e-5)
        assert record.fct_p50_s == pytest.approx(fct, rel=1e-5)


@pytest.mark.parametrize("late_s", [1e-3, 1000.0])
def test_failure_sets_keep_start_times(tmp_path, late_s):
    sc = scenario(tmp_path, late_s, failures=True)
    report = analyze(sc)
    for record, summary in zip(report.records, report.failures.summaries):
        assert summary.completion_s["max"] == record.completion_s
        assert summary.slowdown["max"] == pytest.approx(record.slowdown, rel=1e-12)


def test_cohorts_by_hand():
    flows = Flows(np.array([0, 1, 2]), np.array([3, 4, 5]), np.array([1.0, 1.0, 0.0]),
                  np.array([1000.0, 1000.0 + 2e-6, 5.0]))
    cohorts = arrival_cohorts(flows, padded=5)
    # the empty flow's start does not move the phase's origin
    np.testing.assert_allclose(cohorts.base[:2], [0.0, 2e-6], rtol=1e-8)
    assert cohorts.count == 2
    np.testing.assert_array_equal(cohorts.cohort, [0, 1, 0, 0, 0])
    np.testing.assert_array_equal(cohorts.offset, 0.0)
    assert fabric_end_s(cohorts, np.array([3e-6, 1e-6])) == pytest.approx(3e-6, rel=1e-12)
    assert fabric_end_s(cohorts, np.array([-np.inf, 1e-6])) == pytest.approx(3e-6, rel=1e-12)
    many = Flows(np.zeros(200, np.int64), np.ones(200, np.int64), np.ones(200),
                 np.arange(200) * 1e-3 + 1000.0)
    grouped = arrival_cohorts(many)
    assert grouped.count == 64
    starts = grouped.base[grouped.cohort] + grouped.offset.astype(np.float64)
    np.testing.assert_allclose(starts, np.arange(200) * 1e-3, atol=1e-9)
