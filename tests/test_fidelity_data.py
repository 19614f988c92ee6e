"""The committed htsim calibration data (bench/fidelity) is whole and consistent: the matrices
are what make_matrices.py writes, a multi-plane case's per-plane matrix carries 1/P of every
connection, and every case of compare.py has htsim's per-flow FCTs for every policy and seed,
one per connection of its matrix, none faster than the bytes allow at line rate."""

from __future__ import annotations

import csv
import gzip
import importlib.util
import re
from pathlib import Path

import pytest

FIDELITY = Path(__file__).resolve().parents[1] / "bench" / "fidelity"
RUNS = ("ecmp", "spray", "mrc_reps", "mrc_bitmap")
PORT_BPS = 100e9     # every htsim link in these cases
MSS, WIRE = 4096, 4160


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, FIDELITY / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def matrices():
    return _module("make_matrices")


def _read_matrix(path: Path) -> dict[int, tuple[int, int, int]]:
    conns = {}
    for line in path.read_text().splitlines():
        m = re.match(r"(\d+)->(\d+) id (\d+) start 0 size (\d+)$", line)
        if m:
            conns[int(m[3])] = (int(m[1]), int(m[2]), int(m[4]))
    return conns


def test_matrices_are_what_the_script_writes(matrices, tmp_path):
    matrices.main(tmp_path)
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.cm"))
    committed = sorted(p.relative_to(FIDELITY / "matrices")
                       for p in (FIDELITY / "matrices").rglob("*.cm"))
    assert written == committed
    for rel in written:
        assert (tmp_path / rel).read_text() == (FIDELITY / "matrices" / rel).read_text(), rel


def test_per_plane_matrices_carry_an_equal_share(matrices):
    cases = [c for c in matrices.CASES if matrices.planes(c) > 1]
    assert cases
    for case in cases:
        planes = matrices.planes(case)
        for seed in matrices.CASES[case][2]:
            full = _read_matrix(FIDELITY / "matrices" / f"{case}_s{seed}.cm")
            share = _read_matrix(FIDELITY / "matrices" / "per_plane" / f"{case}_s{seed}.cm")
            assert share.keys() == full.keys()
            for fid, (src, dst, size) in full.items():
                assert share[fid] == (src, dst, size // planes)
                assert size % (planes * MSS) == 0


def test_every_case_has_all_its_htsim_runs(matrices):
    for case, (_, _, seeds, _) in matrices.CASES.items():
        planes = matrices.planes(case)
        for seed in seeds:
            conns = _read_matrix(FIDELITY / "matrices" / f"{case}_s{seed}.cm")
            for run in RUNS:
                path = FIDELITY / "results" / f"{case}_{run}_s{seed}.csv.gz"
                with gzip.open(path, "rt") as fh:
                    rows = list(csv.DictReader(fh))
                assert len(rows) == len(conns), path.name
                for fid, row in zip(sorted(conns), rows):
                    src, dst, size = conns[fid]
                    assert (int(row["src"]), int(row["dst"]), int(row["size_bytes"])) == \
                        (src, dst, size), path.name
                    # a plane's share, in whole packets, at one port's line rate
                    packets = -(-size // planes // MSS)
                    floor_us = packets * WIRE * 8 / PORT_BPS * 1e6
                    assert float(row["fct_us"]) > floor_us, (path.name, fid)


def test_compare_table_runs_every_case(matrices):
    compare = _module("compare")
    assert set(compare.CASES) == set(matrices.CASES)
    for case, (topo, hosts, _, target) in compare.CASES.items():
        assert hosts == matrices.CASES[case][0] and topo in compare.TOPOLOGIES
        assert target in (0.10, 0.15)


def test_every_single_plane_ecmp_run_has_its_paths_on_the_edge_list(matrices, tmp_path):
    """routes/ holds htsim's hashed path of every ECMP connection of a single-plane case, and
    each is exactly one of fabricjax's equal-cost candidates for that flow."""
    compare = _module("compare")
    for case, (_, _, seeds, _) in matrices.CASES.items():
        for seed in seeds:
            path = compare.routes_path(case, seed)
            if matrices.planes(case) > 1:
                assert not path.exists(), path.name
                continue
            assert path.exists(), path.name
            if seed != seeds[0]:      # the mapping on one seed per case keeps this quick
                continue
            scenario, fabric, flows, stream = compare.case_phase(case, seed, tmp_path)
            routed = compare.routed_ecmp(case, seed, scenario, fabric, flows, stream)
            cand, _ = fabric.candidate_paths(flows.src, flows.dst, "equal-cost")
            links = cand[range(flows.num_flows), routed.choice[:, 0]]
            names = fabric.node_names
            with gzip.open(path, "rt") as fh:
                rows = list(csv.DictReader(fh))
            ids = sorted(_read_matrix(compare.matrix_path(case, seed)))
            topo = compare.CASES[case][0]
            for row in rows[:64]:
                f = ids.index(int(row["id"]))
                hops = {(names[fabric.link_src[i]], names[fabric.link_dst[i]])
                        for i in links[f] if i < fabric.num_links}
                want = tuple(compare.switch_name(topo, n) for n in (row["from"], row["to"]))
                assert want in hops, (path.name, row)


def _fcts(path: Path) -> list[tuple[int, int, int, float]]:
    with gzip.open(path, "rt") as fh:
        return [(int(r["src"]), int(r["dst"]), int(r["size_bytes"]), float(r["fct_us"]))
                for r in csv.DictReader(fh)]


def test_every_rerun_is_the_seed_1_matrix_again(matrices):
    """results/reseed holds reruns of a case's seed-1 matrix with other htsim seeds
    (run_htsim.sh's RESEED, read by spread.py): the same connections in the same order, every
    flow finished, and other finish times than the committed seed-1 run's."""
    reruns = sorted((FIDELITY / "results" / "reseed").glob("*.csv.gz"))
    assert reruns
    spread = _module("spread")
    name = re.compile(r"(.+)_(ecmp|spray|mrc_reps|mrc_bitmap)_s1_r(\d+)\.csv\.gz$")
    for path in reruns:
        m = name.match(path.name)
        assert m and m[1] in matrices.CASES, path.name
        case, run = m[1], m[2]
        conns = _read_matrix(FIDELITY / "matrices" / f"{case}_s1.cm")
        again = _fcts(path)
        first = _fcts(FIDELITY / "results" / f"{case}_{run}_s1.csv.gz")
        assert [row[:3] for row in again] == [conns[fid] for fid in sorted(conns)], path.name
        assert [row[3] for row in again] != [row[3] for row in first], path.name
        assert len(spread.reseeded(case, run)) == sum(
            1 for p in reruns if p.name.startswith(f"{case}_{run}_s1_r"))
