"""Fabric design through the command line: `topo` prints the bill of materials and its baseline,
`sweep` evaluates a grid and writes CSV / JSON, `analyze --sensitivity` names the links to
upgrade, `--plot` writes figures. Tiny fabrics; the numbers are checked in test_bom,
test_sweep, test_sensitivity and test_plots."""

from __future__ import annotations

import csv
import json
import pathlib

from test_cli import assert_one_line_error, fabricjax

TINY = ("fabric: {gpus: 32, planes: 2, radix: 8}\n"
        "workload: [{name: perm, collective: permutation, size: 8MiB}]\n"
        "policies: [ecmp, spray]\nspray: {evs: 8}\n")


def test_topo_prints_the_bom_and_the_published_comparison(tmp_path):
    """The stargate fabric: 6,144 switches in two tiers; 800G single-plane on the same ASIC
    needs four tiers for 131,072 GPUs; per GPU against the three-tier tree 3/5 the switches
    and 2/3 the optics."""
    repo = pathlib.Path(__file__).resolve().parent.parent
    proc = fabricjax("topo", str(repo / "scenarios" / "stargate.yaml"), "--json", "t.json",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Bill of materials" in proc.stdout and "6,144" in proc.stdout
    assert "0.60x the switches, 0.67x the optics" in proc.stdout
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["bom"]["switches"] == 6144 and data["bom"]["tiers"] == 2
    assert [b["tiers"] for b in data["baselines"]] == [4, 3]


def test_topo_says_when_no_baseline_makes_sense(tmp_path):
    """The quickstart (64 x 100G ganged by 8: 8-port 800G switches, 5 tiers) and 2 x 1.6T
    NICs (a 3.2T single-plane port has no optic) print why there is no baseline; before, the
    first was compared with a five-tier tree and the second failed on `overrides.optic_watts`."""
    repo = pathlib.Path(__file__).resolve().parent.parent
    proc = fabricjax("topo", str(repo / "scenarios" / "quickstart.yaml"), "--json", "q.json",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "single-plane baseline: none sensible" in proc.stdout
    data = json.loads((tmp_path / "q.json").read_text())
    assert data["baselines"] == [] and "5 tiers" in data["baseline_note"]
    (tmp_path / "fast.yaml").write_text(
        "fabric: {gpus: 1024, planes: 2, port_gbps: 1.6T, radix: 64}\n"
        "workload: [{name: p, collective: permutation, size: 1MiB}]\n")
    proc = fabricjax("topo", "fast.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "no 3200G module" in " ".join(proc.stdout.split())


def test_sweep_writes_a_grid_and_refuses_bad_sets(tmp_path):
    (tmp_path / "s.yaml").write_text(TINY)
    proc = fabricjax("sweep", "s.yaml", "--set", "fabric.planes,fabric.port_gbps=1:200G,2:100G",
                     "--set", "seed=1,2", "--csv", "out.csv", "--json", "out.json", "-q",
                     "-p", "ecmp", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader((tmp_path / "out.csv").open()))
    assert len(rows) == 2 * 2              # 4 points x 1 policy x 1 workload
    assert {r["fabric.planes"] for r in rows} == {"1", "2"}
    assert all(float(r["switches"]) > 0 and float(r["watts"]) > 0 for r in rows)
    assert len(json.loads((tmp_path / "out.json").read_text())["points"]) == 4
    proc = fabricjax("sweep", "s.yaml", "--set", "fabric.plane=1,2", "--csv", "bad.csv",
                     cwd=tmp_path)
    assert_one_line_error(proc, "--set", "planes")
    assert not (tmp_path / "bad.csv").exists()


def test_analyze_sensitivity_names_the_bottleneck_link(tmp_path):
    (tmp_path / "s.yaml").write_text(TINY)
    proc = fabricjax("analyze", "s.yaml", "--sensitivity", "--json", "r.json", "-q",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Which links to upgrade" in proc.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    ecmp = next(r for r in report["sensitivity"] if r["policy"] == "ecmp")
    worst = next(r for r in report["results"] if r["policy"] == "ecmp")
    top = ecmp["links"][0]
    assert top["utilisation"] == worst["p100_utilisation"] and top["d_p100_d_gbps"] < 0


def test_plot_writes_figures_and_refuses_a_file(tmp_path):
    (tmp_path / "s.yaml").write_text(TINY)
    proc = fabricjax("analyze", "s.yaml", "--plot", "figs", "-q", "-p", "spray", "-p", "mrc",
                     "--json", "r.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in (tmp_path / "figs").iterdir())
    # mrc's convergence only when it iterated (a one-point trace is not a figure)
    iterated = any(r["iterations"] for r in json.loads((tmp_path / "r.json").read_text())[
        "results"] if r["policy"] == "mrc")
    assert names == ["completion.png"] + ["mrc_trace.png"] * iterated + ["utilisation_cdf.png"]
    assert all((tmp_path / "figs" / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names)
    (tmp_path / "afile").write_text("x")
    proc = fabricjax("sweep", "s.yaml", "--set", "seed=1,2", "--plot", "afile", cwd=tmp_path)
    assert_one_line_error(proc, "--plot", "folder")
