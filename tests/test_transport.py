"""Transport overheads: headers stretch a flow's bytes, every flow pays its path's
link latency, one packet's store-and-forward per switch and the acknowledgement's way back.
Every expected figure below is worked out by hand from the scenario's numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from fabricjax.fabric.build import build
from fabricjax.metrics import transport_latency_s, wire_factor
from fabricjax.scenario import parse_scenario
from fabricjax.study.analyze import analyze
from fabricjax.workload.flows import Flows
from fabricjax_cli.main import app

MIB = 2**20
FABRIC = {"gpus": 64, "planes": 1, "radix": 16, "gpus_per_server": 8}
PERM = [{"collective": "permutation", "size": MIB}]


def one_flow(transport: dict | None = None, src: int = 0, dst: int = 40):
    """One 4 MiB flow, alone on the fabric (GPU 0 to GPU 40: across the spines)."""
    data = {"fabric": FABRIC, "policies": ["ecmp"],
            "workload": [{"collective": "traffic", "file": "flows.csv"}],
            "solver": {"progressive": True}}
    if transport is not None:
        data["transport"] = transport
    return data, f"src,dst,size\n{src},{dst},{4 * MIB}\n"


def run(tmp_path, data, csv):
    (tmp_path / "flows.csv").write_text(csv)
    scenario = parse_scenario(data).located(tmp_path)
    return scenario, analyze(scenario).records[0]


def test_wire_factor_and_latency_by_hand():
    scenario = parse_scenario({"fabric": FABRIC, "workload": PERM})
    assert wire_factor(scenario) == 1.0 + 64 / 4096
    # 4 links of 1 us, 3 switches each holding one 4,160-byte packet for 4160 * 8 / 100e9 s
    # = 0.3328 us; the acknowledgement's way back: 4 us more
    assert transport_latency_s(scenario, 4) == pytest.approx(4e-6 + 3 * 0.3328e-6, rel=1e-12)
    assert transport_latency_s(scenario, 4, acknowledged=True) == pytest.approx(
        8e-6 + 3 * 0.3328e-6, rel=1e-12)
    assert transport_latency_s(scenario, 0, acknowledged=True) == 0.0
    no_ack = parse_scenario({"fabric": FABRIC, "workload": PERM,
                             "transport": {"ack_return": False}})
    assert transport_latency_s(no_ack, 2, acknowledged=True) == pytest.approx(
        2e-6 + 0.3328e-6, rel=1e-12)
    off = parse_scenario({"fabric": FABRIC, "workload": PERM, "transport": {"enabled": False}})
    assert wire_factor(off) == 1.0
    assert transport_latency_s(off, 4, acknowledged=True) == 0.0


def test_one_flow_completes_at_wire_bytes_over_the_rate_plus_its_latency(tmp_path):
    """Completion: the last byte arrives (4 links, 3 store-and-forwards). FCT: counted at the
    sender when that byte is acknowledged (4 us more)."""
    data, csv = one_flow()
    _, record = run(tmp_path, data, csv)
    wire_s = (4 * MIB + (4 * MIB // 4096) * 64) * 8 / 100e9
    arrives = wire_s + 4e-6 + 3 * 0.3328e-6
    assert record.completion_s == pytest.approx(arrives, rel=1e-5)
    assert record.progressive_s == pytest.approx(arrives, rel=1e-5)
    assert record.fct_max_s == pytest.approx(arrives + 4e-6, rel=1e-5)
    # the line rate is the payload at the NIC rate, no overhead: the slowdown is the
    # transport's; the endpoint bound pays the same transport, so the fabric adds nothing
    assert record.line_rate_s == pytest.approx(4 * MIB * 8 / 100e9, rel=1e-9)
    assert record.slowdown == pytest.approx(arrives / record.line_rate_s, rel=1e-5)
    assert record.fabric_slowdown == pytest.approx(1.0, rel=1e-5)


def test_transport_off_is_the_fluid_model(tmp_path):
    data, csv = one_flow({"enabled": False})
    _, record = run(tmp_path, data, csv)
    assert record.completion_s == pytest.approx(4 * MIB * 8 / 100e9, rel=1e-6)


def test_a_flow_within_a_t0_pays_two_links(tmp_path):
    data, csv = one_flow(src=0, dst=3)
    _, record = run(tmp_path, data, csv)
    wire_bytes = 4 * MIB * (1 + 64 / 4096)
    assert record.completion_s == pytest.approx(wire_bytes * 8 / 100e9 + 2e-6 + 0.3328e-6,
                                                rel=1e-5)
    assert record.fct_max_s == pytest.approx(wire_bytes * 8 / 100e9 + 4e-6 + 0.3328e-6,
                                             rel=1e-5)


GRAPH_EDGES = """\
gpu0 l0 100
gpu1 l0 100
gpu2 l1 100
gpu3 l1 100
l0 s0 100
l0 s1 100
l1 s0 100
l1 s1 100
"""


def test_hops_on_a_stored_path_fabric_are_its_shortest_paths(tmp_path):
    (tmp_path / "g.txt").write_text(GRAPH_EDGES)
    scenario = parse_scenario({"fabric": {"kind": "graph", "file": "g.txt", "gpus": 4},
                               "workload": PERM}).located(tmp_path)
    fabric = build(scenario)
    flows = Flows(np.array([0, 0, 2], np.int32), np.array([1, 2, 1], np.int32),
                  np.full(3, 1.0 * MIB))
    assert fabric.flow_hops(flows.src, flows.dst).tolist() == [2, 4, 4]


def test_report_records_the_transport_and_the_cli_says_it(tmp_path):
    data, csv = one_flow({"mtu_bytes": 8192, "header_bytes": 80, "link_latency_us": 0.5})
    (tmp_path / "flows.csv").write_text(csv)
    (tmp_path / "s.yaml").write_text(json.dumps(data))
    out = tmp_path / "r.json"
    result = CliRunner().invoke(app, ["analyze", str(tmp_path / "s.yaml"), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "transport 8192 B MTU + 80 B headers, 0.5 us per link, FCT at the last ACK" in \
        result.output
    assert json.loads(out.read_text())["config"]["transport"] == {
        "enabled": True, "mtu_bytes": 8192, "header_bytes": 80, "link_latency_us": 0.5,
        "ack_return": True}
    data["transport"] = {"enabled": False}
    (tmp_path / "s.yaml").write_text(json.dumps(data))
    result = CliRunner().invoke(app, ["analyze", str(tmp_path / "s.yaml")])
    assert "transport off (bytes over rate)" in result.output


def test_a_bad_transport_field_is_a_clear_error(tmp_path):
    (tmp_path / "s.yaml").write_text(
        "fabric: {gpus: 64, planes: 1, radix: 16}\ntransport: {mtu: 4096}\n"
        "workload: [{collective: permutation}]\n")
    result = CliRunner().invoke(app, ["analyze", str(tmp_path / "s.yaml")])
    assert result.exit_code == 2
    assert "transport.mtu" in result.output and "Traceback" not in result.output
