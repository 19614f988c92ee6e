"""Offered load follows the bytes: each GPU's NIC rate is shared among its flows in proportion
to the bytes each must move in the phase, so a byte-skewed phase shows its hot spot in P100
(equal flows are unchanged)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from fabricjax.engine.phase import offered_demand
from fabricjax.scenario import load_scenario
from fabricjax.study.analyze import analyze
from fabricjax.workload.flows import Flows


def test_offered_demand_by_hand():
    flows = Flows(np.array([0, 0, 1, 1, 2]), np.array([1, 2, 0, 2, 0]),
                  np.array([9.0, 1.0, 5.0, 5.0, 0.0]))
    np.testing.assert_allclose(offered_demand(flows, 100.0, 3), [90, 10, 50, 50, 100])
    # per-GPU NIC rates, and a GPU whose flows carry nothing shares equally (inert flows)
    flows = Flows(np.array([0, 1, 1]), np.array([1, 0, 2]), np.array([3.0, 0.0, 0.0]))
    np.testing.assert_allclose(offered_demand(flows, np.array([400.0, 200.0, 0.0]), 3),
                               [400, 100, 100])


def test_a_hot_receiver_shows_in_p100(tmp_path):
    """GPUs 0 and 4 each send 9 MB to GPU 9 and 1 MB elsewhere: GPU 9's downlink is offered
    2 x 0.9 of a NIC (1.8), though each sender has two flows (an equal split said 1.0)."""
    (tmp_path / "flows.csv").write_text("src,dst,bytes\n0,9,9e6\n0,13,1e6\n4,9,9e6\n4,14,1e6\n")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "name": "hot", "fabric": {"gpus": 32, "planes": 1, "port_gbps": 400, "radix": 8},
        "workload": [{"name": "hot", "collective": "traffic", "file": "flows.csv"}],
        "policies": ["spray", "optimal"], "transport": {"enabled": False}}))
    report = analyze(load_scenario(path))
    for record in report.records:
        assert record.p100_utilisation == pytest.approx(1.8, rel=1e-5)
        assert record.utilisation_by_tier["t0-gpu"]["p100"] == pytest.approx(1.8, rel=1e-5)
        # the receiver takes 18 MB at 400G: 360 us, what the completion and its bound say
        assert record.endpoint_bound_s == pytest.approx(18e6 * 8 / 400e9, rel=1e-9)
        assert record.completion_s == pytest.approx(record.endpoint_bound_s, rel=1e-4)
