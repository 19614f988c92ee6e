"""Fabrics as built and as refused: `topo` counts spines sized by the ports they terminate
(bundled T0-T1 cables) and says when a fabric is below full size; oversized fabrics of every
kind are refused in closed form, before a graph or a link array exists."""

from __future__ import annotations

import json

from rich.console import Console
from test_cli import fabricjax

from fabricjax.config import FabricConfig
from fabricjax.fabric.clos import fabric_summary
from fabricjax.report.topo import topo_table

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


def test_topo_table_rows_as_built():
    console = Console(width=200, record=True)
    cfg = FabricConfig(gpus=16_384, planes=4, port_gbps=200.0, radix=512, oversubscription=3)
    console.print(topo_table(fabric_summary(cfg)))
    text = " ".join(console.export_text().split())
    assert "16 per plane, 64 total as built, bundles of 8 cables per T0" in text
    assert "│ switches │ 236 │" in text
    full = Console(width=200, record=True)
    full.print(topo_table(fabric_summary(FabricConfig(gpus=131_072, planes=8, radix=512))))
    text = " ".join(full.export_text().split())
    assert "256 per plane, 2,048 total │" in text and "│ switches │ 6,144 │" in text
