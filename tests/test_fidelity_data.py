"""The committed htsim calibration data (bench/fidelity) is whole and consistent: the matrices
are what make_matrices.py writes, a multi-plane case's per-plane matrix carries 1/P of every
connection, and every case of compare.py has htsim's per-flow FCTs for every policy and seed,
one per connection of its matrix, none faster than the bytes allow at line rate. And
transport_stats.py reads the counters that htsim_transport_stats.patch adds to htsim's log,
which run_htsim.sh's STATS switches on, and ev_paths.py puts a flow's EVs on the paths that the
route-dump patch's EV_ROUTES lines name."""

from __future__ import annotations

import csv
import fnmatch
import gzip
import importlib.util
import re
from pathlib import Path

import numpy as np
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


def test_every_ecmp_run_has_its_paths_on_the_edge_list(matrices, tmp_path):
    """routes/ holds htsim's hashed path of every ECMP connection (a multi-plane case: of
    every plane's run), and each is exactly one of fabricjax's equal-cost candidates for that
    flow (on several planes: its QP on that plane takes the spine that plane's run hashed it
    to)."""
    compare = _module("compare")
    for case, (_, _, seeds, _) in matrices.CASES.items():
        for seed in seeds:
            path = compare.routes_path(case, seed)
            planes = matrices.planes(case)
            if planes > 1:
                assert not path.exists(), path.name
                per_plane = [compare.routes_path(case, seed, p) for p in range(planes)]
                assert all(p.exists() for p in per_plane), case
                if seed != seeds[0]:
                    continue
                scenario, fabric, flows, stream, _ = compare.case_phase(case, seed, tmp_path)
                routed = compare.routed_ecmp(case, seed, scenario, fabric, flows, stream)
                ids = sorted(_read_matrix(compare.matrix_path(case, seed)))
                for plane in (0, planes - 1):
                    with gzip.open(per_plane[plane], "rt") as fh:
                        rows = list(csv.DictReader(fh))
                    for row in rows[:64]:
                        if row["from"].startswith("LS") and row["to"].startswith("US"):
                            f = ids.index(int(row["id"]))
                            on_plane = routed.choice[f, routed.plane[f] == plane]
                            assert on_plane.size and np.all(on_plane == int(row["to"][2:])), (
                                per_plane[plane].name, row)
                continue
            assert path.exists(), path.name
            if seed != seeds[0]:      # the mapping on one seed per case keeps this quick
                continue
            scenario, fabric, flows, stream, _ = compare.case_phase(case, seed, tmp_path)
            routed = compare.routed_ecmp(case, seed, scenario, fabric, flows, stream)
            with gzip.open(path, "rt") as fh:
                rows = list(csv.DictReader(fh))
            ids = sorted(_read_matrix(compare.matrix_path(case, seed)))
            topo = compare.CASES[case][0]
            if topo in compare.FAILURE_SETS:
                # the Clos a failure set runs on: the slot's choice is the spine htsim's
                # leaf hashed the flow to
                for row in rows[:64]:
                    if row["from"].startswith("LS") and row["to"].startswith("US"):
                        f = ids.index(int(row["id"]))
                        assert routed.choice[f, 0] == int(row["to"][2:]), (path.name, row)
                continue
            cand, _ = fabric.candidate_paths(flows.src, flows.dst, "equal-cost")
            links = cand[range(flows.num_flows), routed.choice[:, 0]]
            names = fabric.node_names
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


# transport_stats.py reads these lines as htsim writes them with STATS set (stdout and stderr in
# one log; shortened)
TRANSPORT_LOG = """\
Flow Uec_3_1 flowId 2 uecSrc 1 finished at 120.5 total messages 1 total packets 256 RTS 0
flowstats Uec_3_1 new 256 resent 4 timeouts 0 nacks 4
Flow Uec_0_2 flowId 1 uecSrc 0 finished at 100.0 total messages 1 total packets 256 RTS 0
flowstats Uec_0_2 new 256 resent 1 timeouts 1 nacks 0
reps packets 520 recycled 130 random 390 exploring 0 frozen 0 good 140 ecn 30 nack 4 timeout 1 freezes 1
trims LS->US arrivals 1000 trimmed 40 per_50us 30/600 10/400
trims US->LS arrivals 980 trimmed 0 per_50us 0/590 0/390
"""


@pytest.fixture(scope="module")
def transport_stats():
    return _module("transport_stats")


def test_transport_stats_reads_a_log_flow_by_flow(transport_stats, tmp_path):
    path = tmp_path / "case_mrc_reps_s1.log"
    path.write_text(TRANSPORT_LOG)
    got = transport_stats.read_log(path)
    # flows in name order: Uec_0_2, then Uec_3_1
    np.testing.assert_array_equal(got.fct_us, [100.0, 120.5])
    np.testing.assert_array_equal(got.ids, [1, 2])          # htsim's flowIds, in that order
    np.testing.assert_array_equal(got.counters, [[256, 1, 1, 0], [256, 4, 0, 4]])
    assert got.tiers == {"LS->US": (1000, 40, (30, 10)), "US->LS": (980, 0, (0, 0))}
    assert got.reps["recycled"] == 130 and got.reps["freezes"] == 1
    lines = transport_stats.htsim_lines("case", "mrc_reps", got)
    assert lines[0].endswith("+1.00")          # two flows: the slower one has the NACKs
    # 30 of 40 trims in the first 50 us: half by 50 us, 90% (36) by 100 us
    assert any("LS->US" in line and "4.00%" in line and "half of them by 50 us, 90% by 100 us"
               in line for line in lines)
    assert not any("US->LS" in line for line in lines)   # a tier without trims is left out
    assert any("recycled 25.0%" in line and "random 75.0%" in line for line in lines)


def _ten_flows_log(path: Path, counters) -> Path:
    """A log of ten flows (Uec_<i>_0 ends at 100 + 5.5 i us, so Uec_9_0 is the slowest tenth)
    whose flowstats lines end with `counters(i)`."""
    lines = []
    for i in range(10):
        lines += [f"Flow Uec_{i}_0 flowId {i} uecSrc {i} finished at {100 + 5.5 * i} total",
                  f"flowstats Uec_{i}_0 new 100 resent 0 timeouts 0 nacks 0 {counters(i)}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_transport_stats_reads_the_ack_counters_where_the_log_has_them(transport_stats,
                                                                      tmp_path):
    # the older log above has no AR or ACK counters: no ACK lines
    path = tmp_path / "old_mrc_reps_s1.log"
    path.write_text(TRANSPORT_LOG)
    got = transport_stats.read_log(path)
    assert got.acks is None
    assert not any("ACKs" in line for line in transport_stats.htsim_lines("c", "r", got))
    # ten flows; the slowest (Uec_9_0, 150 us) is the slowest tenth
    counts = {9: (50, 30, 20)}                       # AR, marked ACKs, clean ACKs
    path = _ten_flows_log(tmp_path / "new_mrc_reps_s1.log", lambda i: "ar {} ecnacks {} "
                          "goodacks {}".format(*counts.get(i, (10, 0, 64))))
    got = transport_stats.read_log(path)
    np.testing.assert_array_equal(got.acks[9], [50, 30, 20])
    out = transport_stats.htsim_lines("c", "r", got)
    # over all flows: clean (9 x 64 + 20) / 1000, marked 30 / 1000, AR (9 x 10 + 50) / 1000
    assert any("all flows:" in line and "clean 0.596, marked 0.030; AR on 14.0%" in line
               for line in out), out
    assert any("slowest tenth:" in line and "clean 0.200, marked 0.300; AR on 50.0%" in line
               for line in out), out


def test_transport_stats_counts_quick_adapts_where_the_log_has_them(transport_stats,
                                                                    tmp_path):
    path = tmp_path / "old_spray_s1.log"
    path.write_text(TRANSPORT_LOG)                  # no qa field: no QA line
    got = transport_stats.read_log(path)
    assert got.quick_adapts is None
    assert not any("quick adapt" in line for line in transport_stats.htsim_lines("c", "r", got))
    # ten flows, quick adapt on two of them (3 times on the slowest, once on another)
    path = _ten_flows_log(tmp_path / "new_spray_s1.log",
                          lambda i: f"ar 10 ecnacks 0 goodacks 64 qa {({9: 3, 4: 1}.get(i, 0))}")
    got = transport_stats.read_log(path)
    np.testing.assert_array_equal(got.quick_adapts, [0, 0, 0, 0, 1, 0, 0, 0, 0, 3])
    out = transport_stats.htsim_lines("c", "r", got)
    assert any("quick adapt fired on 20% of the flows, 0.40 times a flow (slowest tenth: "
               "100%, 3.00)" in line for line in out), out


def test_transport_stats_refuses_a_log_without_its_counters(transport_stats, tmp_path):
    path = tmp_path / "plain.log"
    path.write_text("\n".join(line for line in TRANSPORT_LOG.splitlines()
                              if not line.startswith("flowstats")))
    with pytest.raises(SystemExit, match="STATS"):
        transport_stats.read_log(path)


def test_transport_stats_says_when_it_finds_no_log(transport_stats, tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["transport_stats.py", "--logs", str(tmp_path)])
    with pytest.raises(SystemExit, match="no htsim logs of seed 1"):
        transport_stats.main()


def test_stats_switches_on_every_counter_of_the_patch():
    patch = (FIDELITY / "htsim_transport_stats.patch").read_text()
    read = set(re.findall(r'getenv\("(HTSIM_\w+)"\)', patch))
    script = (FIDELITY / "run_htsim.sh").read_text()
    exported = set(re.findall(r"(HTSIM_\w+_STATS)=1", script))
    assert read == {"HTSIM_TRIM_STATS", "HTSIM_FLOW_STATS", "HTSIM_REPS_STATS"}
    assert read <= exported
    assert "htsim_transport_stats.patch" in (FIDELITY / "build_htsim.sh").read_text()


def test_run_htsim_takes_each_cases_own_matrices_only(matrices):
    """run_htsim.sh finds a case's seeds by globbing its matrices: the glob must not take the
    matrices of a case whose name begins with this one's (ft128_1os_a2a, ft128_1os_a2a_shift)."""
    script = (FIDELITY / "run_htsim.sh").read_text()
    pattern = re.search(r'matrices/"\$\{case\}"(_s\S*?\.cm)', script)[1]
    files = [p.name for p in (FIDELITY / "matrices").glob("*.cm")]
    for case, (_, _, seeds, _) in matrices.CASES.items():
        assert sorted(fnmatch.filter(files, case + pattern)) == sorted(
            f"{case}_s{seed}.cm" for seed in seeds), case


def test_the_reference_runs_with_the_nics_turns_fixed_and_double_turn_runs_beside(matrices):
    """The one-turn patch is applied by build_htsim.sh and does nothing unless its switch is
    exported, which run_htsim.sh does on every run but a DOUBLE_TURN one. Every committed
    double-turn run (htsim's NIC as pinned) holds its matrix's flows, has a reference run of
    the same name, and ends some flow at another time than it (else it tells nothing)."""
    patch = (FIDELITY / "htsim_one_turn.patch").read_text()
    assert set(re.findall(r'getenv\("(HTSIM_\w+)"\)', patch)) == {"HTSIM_ONE_TURN"}
    assert "htsim_one_turn.patch" in (FIDELITY / "build_htsim.sh").read_text()
    script = (FIDELITY / "run_htsim.sh").read_text()
    assert 'if [ -z "${DOUBLE_TURN:-}" ]; then export HTSIM_ONE_TURN=1; fi' in script
    compare = _module("compare")
    runs = sorted((FIDELITY / "results" / "double_turn").glob("*.csv.gz"))
    assert runs
    for path in runs:
        m = re.fullmatch(r"(.+)_(ecmp|spray|mrc_reps|mrc_bitmap)_s(\d)\.csv\.gz", path.name)
        assert m and m[1] in matrices.CASES, path.name
        assert compare.result_path(m[1], m[2], int(m[3]), "double_turn") == path
        conns = _read_matrix(FIDELITY / "matrices" / f"{m[1]}_s{m[3]}.cm")
        pinned = _fcts(path)
        reference = _fcts(compare.result_path(m[1], m[2], int(m[3])))
        assert [row[:3] for row in pinned] == [conns[fid] for fid in sorted(conns)], path.name
        assert [row[:3] for row in reference] == [row[:3] for row in pinned], path.name
        assert [row[3] for row in reference] != [row[3] for row in pinned], path.name


def test_ev_paths_puts_each_ev_on_the_path_htsim_named(tmp_path):
    """An evroute line moves that flow's EV (htsim's entropy modulo the 128 paths) to the
    candidate through the spine it names; every other slot keeps fabricjax's draw."""
    compare, ev_paths = _module("compare"), _module("ev_paths")
    case, seed = "ls1024_perm1MB", 1
    scenario, fabric, flows, stream, _ = compare.case_phase(case, seed, tmp_path)
    base = ev_paths.initial_slots(ev_paths.get_policy("spray"), scenario, fabric, flows,
                                  stream)
    ids = compare.matrix_ids(case, seed)
    hops = compare.candidate_hops(fabric, flows)
    # two flows, each with one EV sent to a spine that fabricjax's draw did not give it
    lines, want = [], {}
    for f, entropy in ((0, 0x2345), (5, 0x0081)):
        ev = entropy & 127
        now = int(base.choice[f, ev])
        k = next(k for k in range(len(hops[f])) if k != now and hops[f][k] != hops[f][now])
        (up,) = [(a, b) for a, b in hops[f][k] if a.startswith("leaf") and b.startswith("spine")]
        lines.append(f"evroute {ids[f]} {entropy} compqueue(100000Mb/s,120640bytes)"
                     f"LS{up[0][4:]}->US{up[1][5:]}(0)")
        want[f, ev] = k
    log = tmp_path / "run.log"
    log.write_text("\n".join(["route 1 ignored", *lines]) + "\n")
    slots, moved = ev_paths.htsim_ev_slots(case, seed, fabric, flows, base, log)
    assert moved == 2
    changed = np.argwhere(slots.choice != base.choice)
    assert {tuple(map(int, rc)) for rc in changed} == set(want)
    for (f, ev), k in want.items():
        assert slots.choice[f, ev] == k
    # the lines come from the route-dump patch, which run_htsim.sh's EV_ROUTES switches on
    assert 'getenv("HTSIM_EV_ROUTES")' in (FIDELITY / "htsim_route_dump.patch").read_text()
    assert "export HTSIM_EV_ROUTES=1" in (FIDELITY / "run_htsim.sh").read_text()
    # a hop that no candidate of the flow has is refused by name
    log.write_text(f"evroute {ids[0]} 3 compqueue(x)LS9999->US1(0)\n")
    with pytest.raises(SystemExit, match="none of fabricjax's"):
        ev_paths.htsim_ev_slots(case, seed, fabric, flows, base, log)
