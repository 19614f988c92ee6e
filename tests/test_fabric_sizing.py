"""Fabrics as built and as refused: `topo` counts spines sized by the ports they terminate
(bundled T0-T1 cables) and says when a fabric is below full size; oversized fabrics of every
kind are refused in closed form, before a graph or a link array exists."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from test_cli import assert_one_line_error, fabricjax

from fabricjax.config import ClosConfig
from fabricjax.core.errors import ScenarioError
from fabricjax.fabric import build as build_module
from fabricjax.fabric import fattree as fattree_module
from fabricjax.fabric import graphfile as graphfile_module
from fabricjax.fabric.clos import fabric_summary
from fabricjax.fabric.fattree import fat_tree_graph
from fabricjax.fabric.graphfile import load_graph
from fabricjax.fabric.spec import MAX_EDGES, fat_tree_edges
from fabricjax.report.topo import topo_table
from fabricjax.scenario import parse_scenario

DATA = Path(__file__).parent / "data" / "graphs"

SIXTEEN_K = ("fabric: {gpus: 16384, planes: 4, port_gbps: 200G, radix: 512, "
             "oversubscription: 3}\n"
             "workload: [{name: p, collective: permutation, size: 1MiB}]\n")


def test_topo_counts_spines_as_built(tmp_path):
    """43 T0s of 128 uplinks per plane: 16 spines with bundles of 8 (not 128), the switch
    total and the BOM agree, and both the table and the words say below full size."""
    (tmp_path / "s.yaml").write_text(SIXTEEN_K)
    proc = fabricjax("topo", "s.yaml", "--json", "t.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "below full size, 4 × 200G" in text and "43 of 512 T0s per plane" in text
    assert "0.71x the switches" in text
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["bom"]["switches"] == 236 and data["bom"]["bundles"] == {"t0-t1": 8}
    assert data["bom"]["links"] == data["cables"] == 87_552
    # the summary counts what is built too, and names the spines the analysis models
    assert data["switches"] == data["bom"]["switches"] and data["t1_per_plane"] == 16
    assert data["t1_per_plane_analysed"] == 128 and data["cables_per_t0_t1_pair"] == 8


def test_topo_table_rows_as_built():
    console = Console(width=200, record=True)
    cfg = ClosConfig(gpus=16_384, planes=4, port_gbps=200.0, radix=512, oversubscription=3)
    console.print(topo_table(fabric_summary(cfg)))
    text = " ".join(console.export_text().split())
    assert "│ T1 switches │ 16 per plane, 64 total (as built) │" in text
    assert "│ T0-T1 cables per pair │ 8 (analysed: 128 T1s per plane, 1 cable each) │" in text
    assert "│ switches │ 236 │" in text
    full = Console(width=200, record=True)
    full.print(topo_table(fabric_summary(ClosConfig(gpus=131_072, planes=8, radix=512))))
    text = " ".join(full.export_text().split())
    assert "256 per plane, 2,048 total │" in text and "│ switches │ 6,144 │" in text
    assert "cables per pair" not in text


# --------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("radix, tiers, planes", [(4, 3, 1), (6, 3, 2), (8, 3, 1), (8, 2, 1),
                                                  (10, 3, 1), (12, 2, 3)])
def test_fat_tree_edges_closed_form_matches_the_built_graph(radix, tiers, planes):
    """Every size up to the reach: the closed form counts the edges the builder makes."""
    h = radix // 2
    for gpus in range(2, 2 * h ** tiers + 1):
        graph = fat_tree_graph(gpus, radix, 100.0, tiers=tiers, planes=planes)
        assert fat_tree_edges(gpus, radix, tiers, planes) == graph.number_of_edges(), gpus


TEN_MILLION = {"kind": "fat-tree", "tiers": 3, "gpus": 10_000_000, "radix": 512,
               "port_gbps": 100.0, "planes": 1, "paths": 4}


def _refuse(*_, **__):
    raise AssertionError("built a graph for a fabric that is refused in closed form")


def test_ten_million_gpu_fat_tree_is_refused_before_building(monkeypatch):
    """The refusal comes from the closed form: building a networkx graph, or any fat tree,
    fails this test. The message names the field and how many GPUs would fit."""
    monkeypatch.setattr(fattree_module.nx, "Graph", _refuse)
    monkeypatch.setattr(build_module, "fat_tree_graph", _refuse)
    monkeypatch.setattr(build_module, "build_graph_fabric", _refuse)
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"fabric": TEN_MILLION,
                        "workload": [{"collective": "permutation", "size": "1MiB"}]})
    error = str(info.value)
    assert error.startswith("fabric.gpus: ") and "\n" not in error
    edges = fat_tree_edges(10_000_000, 512)
    fit = int(re.search(r"up to ([\d,]+) GPUs", error).group(1).replace(",", ""))
    assert f"{edges:,} edges" in error and f"at most {MAX_EDGES:,}" in error
    assert fat_tree_edges(fit, 512) <= MAX_EDGES < fat_tree_edges(fit + 1, 512)
    # the direct builder refuses the same way, before its first node
    with pytest.raises(ScenarioError, match="edges; allowed: at most"):
        fat_tree_graph(10_000_000, 512, 100.0)


def test_oversized_fat_tree_from_the_command_line(tmp_path):
    (tmp_path / "big.yaml").write_text(
        "fabric: {kind: fat-tree, tiers: 3, gpus: 10000000, radix: 512, port_gbps: 100G, "
        "planes: 1, paths: 4}\nworkload: [{name: p, collective: permutation, size: 1MiB}]\n")
    for command in ("topo", "analyze"):
        proc = fabricjax(command, "big.yaml", cwd=tmp_path)
        assert_one_line_error(proc, "fabric.gpus", "allowed: at most 1,000,000 edges",
                              "GPUs at this radix")


def test_graphml_edges_counted_before_parsing(tmp_path, monkeypatch):
    """A GraphML file over the edge bound is refused by a byte scan, never parsed; the scan
    counts tags cut by its read boundaries once."""
    text = (DATA / "leaf_spine.graphml").read_text()
    path = tmp_path / "g.graphml"
    path.write_text(text)
    monkeypatch.setattr(graphfile_module.nx, "read_graphml", _refuse)
    monkeypatch.setattr(graphfile_module, "MAX_EDGES", 7)
    with pytest.raises(ScenarioError, match="more than 7 edges"):
        load_graph(path)
    for size in (1, 5, 7, 64, 1 << 20):
        monkeypatch.setattr(graphfile_module, "_SCAN_BYTES", size)
        monkeypatch.setattr(graphfile_module, "MAX_EDGES", 7)
        with pytest.raises(ScenarioError, match="more than 7 edges"):
            load_graph(path)
        monkeypatch.setattr(graphfile_module, "MAX_EDGES", 8)
        with pytest.raises(AssertionError, match="built a graph"):   # 8 edges: parsed
            load_graph(path)
