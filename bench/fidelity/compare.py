"""Calibration against packet level: fabricjax's flow completion times beside htsim's.

    .venv/bin/python bench/fidelity/compare.py            # every case with committed results
    .venv/bin/python bench/fidelity/compare.py --case ft128_1os_perm2MB --seeds 1
    .venv/bin/python bench/fidelity/compare.py --model dynamic --seeds 1   # one level only
    .venv/bin/python bench/fidelity/compare.py --case ft128_1os_perm2MB --seeds 1 \
        --record bench/fidelity/regression.tsv     # the rows make test holds the levels to

`make bench-fidelity` runs it. It needs no htsim: the packet-level side is the per-flow FCTs
committed in `results/<case>_<policy>_s<seed>.csv.gz` (written by `run_htsim.sh` from the
connection matrices in `matrices/`; HTSIM.md says how htsim was built and run). For every case
it builds htsim's topology as a fabricjax edge list (`fabric.kind: graph`: the same hosts,
switches, links, speeds), imports the same connection matrix (`traffic`, htsim format) and
runs fabricjax with one set of settings for all cases (`SETTINGS`: the product's defaults,
hashed EVs as htsim's switches hash them, the progressive simulation for per-flow FCTs).

Levels (`--model`, default both, one row each): `static` runs `analyze` (max-min rates, the
progressive simulation for per-flow FCTs); `dynamic` runs `engine.dynamic.solve_dynamic_phase`
(the fluid model in time steps) on the same scenario, fabric, flows and slots, with its one
set of defaults (engine.dynamic, solver.dynamic).

htsim is run as `run_htsim.sh` runs it: with its NIC's turns fixed (`htsim_one_turn.patch`, a
flow waits in its NIC's FIFO once; HTSIM.md, "One turn"), which changes only the all-to-alls.
Where `results/double_turn/` holds a run of htsim's NIC as pinned, its row follows the
reference's, marked `double turn` and not counted.

Policies: htsim `-paths 1` (one entropy per connection) against ecmp, on the paths htsim hashed
each connection to where `routes/` has them (both levels: HTSIM.md, "ECMP's paths"; the
static level then runs `solve_policy_phase` on those slots, as `analyze` would); `oblivious`
with 128 EVs against spray; `reps` and `bitmap` with 128 EVs against mrc (a case named
`..._ev<N>` has N EVs a plane instead). The static level's one mrc is scored against both; the
dynamic level's REPS rows are its mrc under `dynamic.mrc_ev_rule: reps`, its bitmap rows its
default walk, two predictions. Figures are
inverted-CDF quantiles of the per-flow FCTs, averaged over seeds on each side; error =
fabricjax / htsim - 1.
Targets: median and max within 10% on the full-bisection and oversubscribed cases,
15% on the degraded-link and incast cases.
"""

from __future__ import annotations

import argparse
import csv
import functools
import gzip
import platform
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fabricjax.core.executables import release_when_crowded  # noqa: E402
from fabricjax.solver import dynamic as dynamic_core  # noqa: E402
from fabricjax.engine.dynamic import fct_quantiles, solve_dynamic_phase  # noqa: E402
from fabricjax.engine.phase import initial_slots, solve_policy_phase  # noqa: E402
from fabricjax.engine.timing import transport_latency_s  # noqa: E402
from fabricjax.fabric.build import build  # noqa: E402
from fabricjax.fabric.failures import sample_failures  # noqa: E402
from fabricjax.policies import get as get_policy  # noqa: E402
from fabricjax.policies.base import Slots  # noqa: E402
from fabricjax.scenario import parse_scenario  # noqa: E402
from fabricjax.study.analyze import analyze  # noqa: E402
from fabricjax.study.resilience import set_fabric  # noqa: E402
from fabricjax.workload.build import build_workload  # noqa: E402

HERE = Path(__file__).resolve().parent
SEEDS = (1, 2, 3)
EVS = 128


def fat_tree_edges(tor_up: int, agg_down: int, agg_up: int, core_down: int,
                   hosts: int = 128, pod_hosts: int = 16, tor_down: int = 4) -> list[tuple]:
    """htsim's 3-tier fat tree (topologies/fat_tree_128_*.topo) as (u, v, Gbit/s) links:
    `tor_down` hosts per ToR, ToRs of a pod each wired to the pod's `tor_up` aggregation
    switches (agg k of a pod takes uplink k of every ToR), every agg with `agg_up` uplinks to
    the cores (agg k's uplink j to core k * agg_up + j, so cores serve one agg position of every
    pod), `core_down` pods per core. All links 100G."""
    tors_per_pod = pod_hosts // tor_down
    pods = hosts // pod_hosts
    assert agg_down == tors_per_pod and core_down == pods
    edges = []
    for h in range(hosts):
        edges.append((f"gpu{h}", f"tor{h // tor_down}", 100))
    for pod in range(pods):
        for t in range(tors_per_pod):
            tor = pod * tors_per_pod + t
            for k in range(tor_up):
                edges.append((f"tor{tor}", f"agg{pod * tor_up + k}", 100))
        for k in range(tor_up):
            for j in range(agg_up):
                edges.append((f"agg{pod * tor_up + k}", f"core{k * agg_up + j}", 100))
    return edges


def leaf_spine_edges(failed: int = 0, hosts: int = 1024, down: int = 32,
                     spines: int = 8) -> list[tuple]:
    """htsim's leaf_spine_1024_oversub.topo: 32 hosts and one 100G link to each of 8 spines
    per leaf (4:1). `failed` N: every leaf's links to spines 0..N-1 run at a quarter of their
    speed, as htsim's `-failed N` degrades them."""
    edges = [(f"gpu{h}", f"leaf{h // down}", 100) for h in range(hosts)]
    for leaf in range(hosts // down):
        for s in range(spines):
            edges.append((f"leaf{leaf}", f"spine{s}", 25 if s < failed else 100))
    return edges


def degraded_uplinks(spines: int, planes=(0,), t0s: int = 32) -> dict:
    """The scenario's `failures` for htsim's `-failed N` as a failure set: on each plane of
    `planes`, every T0's (leaf's) cables to T1s (spines) 0..N-1 at 25% of their speed."""
    names = [f"plane{p}/t0-{t}/up{s}" for p in planes for t in range(t0s) for s in range(spines)]
    return {"degraded": {"names": names, "factor": 0.25}}


# an edge list (fabricjax `graph`), or a fabric config (the multi-plane Clos itself)
FAT_TREES = {"ft128_1os": (4, 4, 4, 8), "ft128_4os": (4, 4, 1, 8), "ft128_8os": (1, 4, 2, 8)}
LS1024 = {"kind": "multiplane-clos", "planes": 1, "radix": 64}
LS1024OS = {"kind": "multiplane-clos", "planes": 1, "radix": 40, "oversubscription": 4}
TOPOLOGIES = {
    **{name: functools.partial(fat_tree_edges, *shape) for name, shape in FAT_TREES.items()},
    "ls1024os": lambda: leaf_spine_edges(0),
    # htsim's leaf_spine_1024_oversub.topo as a Clos (32 T0s, 32 down and 8 up, 8 T1s)
    "ls1024os_failed4": LS1024OS,
    # htsim's leaf_spine_1024.topo: 32 leaves of 32 hosts, one 100G link to each of 32 spines
    "ls1024": lambda: leaf_spine_edges(0, spines=32),
    "ls1024_failed8": LS1024,
    # 4 and 8 planes, each one leaf_spine_1024.topo (radix 64: 32 down, 32 up); htsim runs
    # the planes one by one (HTSIM.md, "Multi-plane fabrics")
    "mp4_ls1024": {**LS1024, "planes": 4},
    "mp8_ls1024": {**LS1024, "planes": 8},
    "mp8_ls1024_deg0": {**LS1024, "planes": 8},
}

# the degraded leaf-spines as edge lists (htsim's topology with its slow links), for the tools
# that read a flow's stored candidate paths (ev_paths.py)
GRAPHS = {
    "ls1024os_failed4": lambda: leaf_spine_edges(4),
    "ls1024_failed8": lambda: leaf_spine_edges(8, spines=32),
}

# Degraded cases run as the product runs a failure set (`failures:` in the scenario, the
# set's fabric from `study.resilience.set_fabric`), on the Clos as built: htsim's `-failed N`
FAILURE_SETS = {
    "ls1024os_failed4": degraded_uplinks(4),
    "ls1024_failed8": degraded_uplinks(8),
    "mp8_ls1024_deg0": degraded_uplinks(8, planes=(0,)),
}


def fabric_config(topo: str, hosts: int, paths: int, workdir: Path, graph: bool = False) -> dict:
    """The scenario's `fabric` for a topology: an edge list written into `workdir` and read as
    a `graph` with up to `paths` shortest paths per pair, or the multi-plane Clos (`graph`:
    a degraded leaf-spine's edge list, `GRAPHS`, instead of the Clos and its failure set)."""
    common = {"gpus": hosts, "gpus_per_server": 1, "port_gbps": 100}
    source = GRAPHS[topo] if graph else TOPOLOGIES[topo]
    if isinstance(source, dict):
        return {**source, **common}
    edges = workdir / f"{topo}{'_graph' if graph else ''}.txt"
    if not edges.exists():
        edges.write_text("".join(f"{u} {v} {gbps}\n" for u, v, gbps in source()))
    return {"kind": "graph", "file": edges.name, "paths": paths, **common}


# case: (topology, hosts, candidate paths per pair, target relative error)
CASES = {
    "single_2MB": ("ft128_1os", 128, 16, 0.10),      # one flow across pods: headers, latency
    "single_128KB": ("ft128_1os", 128, 16, 0.10),
    "ft128_1os_perm2MB": ("ft128_1os", 128, 16, 0.10),
    "ft128_4os_perm2MB": ("ft128_4os", 128, 16, 0.10),
    "ft128_8os_perm2MB": ("ft128_8os", 128, 16, 0.10),
    "ft128_1os_perm128KB": ("ft128_1os", 128, 16, 0.10),
    "ls1024os_perm1MB": ("ls1024os", 1024, 8, 0.10),
    "ls1024os_failed4_perm1MB": ("ls1024os_failed4", 1024, 8, 0.15),
    "ft128_1os_incast32": ("ft128_1os", 128, 16, 0.15),
    "ft128_1os_a2a": ("ft128_1os", 128, 16, 0.10),
    # the mission's fabric: 4 planes of a full-bisection two-tier plane (paths: every spine)
    "mp4_ls1024_perm2MB": ("mp4_ls1024", 1024, 32, 0.10),
    "mp4_ls1024_ring1MB": ("mp4_ls1024", 1024, 32, 0.10),   # one ring step, rank order
    "ls1024_perm1MB": ("ls1024", 1024, 32, 0.10),          # one such plane alone
    "ls1024_failed8_perm1MB": ("ls1024_failed8", 1024, 32, 0.15),
    "ft128_1os_perm64KB": ("ft128_1os", 128, 16, 0.10),     # short flows
    "ft128_1os_perm512KB": ("ft128_1os", 128, 16, 0.10),
    "ft128_1os_permmix": ("ft128_1os", 128, 16, 0.10),      # 64-512 KiB mixed
    "ft128_1os_ring2MB": ("ft128_1os", 128, 16, 0.10),      # one ring step, scattered ranks
    "ft128_1os_a2a_shift": ("ft128_1os", 128, 16, 0.10),    # the all-to-all, peers s + k
    # the mission's fabric as built: 8 planes x 100G, 16 EVs a plane; plane 0 degraded
    "mp8_ls1024_perm1MB": ("mp8_ls1024", 1024, 32, 0.10),
    "mp8_ls1024_perm8MB": ("mp8_ls1024", 1024, 32, 0.10),
    "mp8_ls1024_deg0_perm8MB": ("mp8_ls1024_deg0", 1024, 32, 0.15),
    # validation of the 8-plane model (no setting chosen on them): 16 MiB, 2 MiB at 8 EVs a
    # plane, 4 MiB at 32 EVs a plane healthy and with plane 0 degraded
    "mp8_ls1024_perm16MB": ("mp8_ls1024", 1024, 32, 0.10),
    "mp8_ls1024_perm2MB_ev8": ("mp8_ls1024", 1024, 32, 0.10),
    "mp8_ls1024_perm4MB_ev32": ("mp8_ls1024", 1024, 32, 0.10),
    "mp8_ls1024_deg0_perm4MB_ev32": ("mp8_ls1024_deg0", 1024, 32, 0.15),
    # the frozen validation set (summary.py, VALIDATION): scored, never tuned on
    "ft128_1os_perm1MB": ("ft128_1os", 128, 16, 0.10),
    "ft128_4os_perm512KB": ("ft128_4os", 128, 16, 0.10),
    "ft128_8os_perm4MB": ("ft128_8os", 128, 16, 0.10),
    "ft128_1os_ring512KB": ("ft128_1os", 128, 16, 0.10),
    "ft128_1os_incast16": ("ft128_1os", 128, 16, 0.15),
    "ft128_1os_a2a32_256KB": ("ft128_1os", 128, 16, 0.10),
    "ls1024os_perm2MB": ("ls1024os", 1024, 8, 0.10),
    "ls1024os_failed4_perm512KB": ("ls1024os_failed4", 1024, 8, 0.15),
    "ls1024_failed8_perm2MB": ("ls1024_failed8", 1024, 32, 0.15),
    "ls1024_ring2MB": ("ls1024", 1024, 32, 0.10),
    "mp4_ls1024_perm512KB": ("mp4_ls1024", 1024, 32, 0.10),
    "mp8_ls1024_deg0_perm2MB_ev8": ("mp8_ls1024_deg0", 1024, 32, 0.15),
}

# fabricjax policy <- htsim runs compared with it
POLICIES = {"ecmp": ("ecmp",), "spray": ("spray",), "mrc": ("mrc_reps", "mrc_bitmap")}

# One set of settings for every case: the product's defaults (transport: 4 KiB MTU, 64 B
# headers, 1 us per link, FCT at the last ACK) with the EVs hashed as htsim's switches hash
# them and the progressive simulation on for per-flow FCTs.
SETTINGS = {
    "ecmp": {"qps": 1},
    "spray": {"evs": EVS, "placement": "hashed"},
    "mrc": {"evs": EVS, "placement": "hashed"},
    "solver": {"progressive": True, "max_events": 4096},
}


# `--dynamic KEY=VALUE` settings of the dynamic level layered on SETTINGS (a what-if such as
# `skip_steady=true` scored on every case; empty: the product's defaults)
DYNAMIC_OVERRIDES: dict = {}


def case_settings(case: str) -> dict:
    """SETTINGS (with any `--dynamic` overrides), with the EVs a case names (`..._ev<N>`: N a
    plane) for spray and mrc."""
    settings = {**SETTINGS, "dynamic": dict(DYNAMIC_OVERRIDES)} if DYNAMIC_OVERRIDES else SETTINGS
    match = re.search(r"_ev(\d+)$", case)
    if match is None:
        return settings
    evs = int(match[1]) * TOPOLOGIES[CASES[case][0]].get("planes", 1)
    return {**settings, "spray": {**settings["spray"], "evs": evs},
            "mrc": {**settings["mrc"], "evs": evs}}


def matrix_path(case: str, seed: int) -> Path:
    return HERE / "matrices" / f"{case}_s{seed}.cm"


def result_path(case: str, run: str, seed: int, variant: str = "") -> Path:
    """One htsim run's committed FCTs; `variant` "double_turn": htsim's NIC as the pinned commit
    has it (run_htsim.sh's DOUBLE_TURN), where the reference ("") has its turns fixed."""
    return HERE / "results" / variant / f"{case}_{run}_s{seed}.csv.gz"


def read_fcts(path: Path) -> np.ndarray:
    """Per-flow FCTs (s) of one htsim run's CSV (run_htsim.sh's gzip src,dst,size_bytes,fct_us)."""
    with gzip.open(path, "rt") as fh:
        return np.array([float(row["fct_us"]) * 1e-6 for row in csv.DictReader(fh)])


def htsim_fcts(case: str, run: str, seed: int, variant: str = "") -> np.ndarray | None:
    """Per-flow FCTs (s) of one committed htsim run, or None if it is not committed."""
    path = result_path(case, run, seed, variant)
    return read_fcts(path) if path.exists() else None


def routes_path(case: str, seed: int, plane: int | None = None) -> Path:
    """The route dump of the case's ECMP run, or of one plane's run of a multi-plane case."""
    suffix = "" if plane is None else f"_p{plane}"
    return HERE / "routes" / f"{case}_ecmp_s{seed}{suffix}.csv.gz"


def has_routes(case: str, seed: int) -> bool:
    """Whether the case's ECMP route dump is committed (every plane's, on several planes)."""
    planes = TOPOLOGIES[CASES[case][0]]
    planes = planes.get("planes", 1) if isinstance(planes, dict) else 1
    return all(routes_path(case, seed, None if planes == 1 else p).exists()
               for p in range(planes))


def read_routes(path: Path, topo: str) -> dict[int, set]:
    """{flow id: its hops as (node, node) edge-list names} of one route dump."""
    chosen: dict[int, set] = {}
    with gzip.open(path, "rt") as fh:
        for row in csv.DictReader(fh):
            hop = tuple(switch_name(topo, n) for n in (row["from"], row["to"]))
            chosen.setdefault(int(row["id"]), set()).add(hop)
    return chosen


def leaf_spine(chosen: dict[int, set], flow_id: int, where: str) -> int | None:
    """The spine a leaf hashed flow `flow_id` to (None: it stayed under its leaf)."""
    spines = {int(v[len("spine"):]) for u, v in chosen.get(flow_id, set())
              if u.startswith("leaf") and v.startswith("spine")}
    if len(spines) > 1:
        raise SystemExit(f"{where}: flow {flow_id} took spines {spines}")
    return spines.pop() if spines else None


def switch_name(topo: str, htsim_name: str) -> str:
    """The edge list's name of an htsim switch (LS<n> edge or leaf, US<n> aggregation or
    spine, CS<n> core). htsim numbers a pod's agg k's uplink l to core k + l x (aggs per pod),
    `fat_tree_edges` to core k x (agg uplinks) + l: the same wiring, other core labels."""
    kind, n = htsim_name[:2], int(htsim_name[2:])
    if topo not in FAT_TREES:
        return {"LS": "leaf", "US": "spine"}[kind] + str(n)
    if kind == "CS":
        aggs_per_pod, _, agg_up, _ = FAT_TREES[topo]
        return f"core{n % aggs_per_pod * agg_up + n // aggs_per_pod}"
    return {"LS": "tor", "US": "agg"}[kind] + str(n)


def matrix_ids(case: str, seed: int) -> list[int]:
    """htsim's connection ids of the case's matrix, in fabricjax's flow order."""
    return [int(line.split()[2]) for line in matrix_path(case, seed).read_text().splitlines()
            if "->" in line]


def candidate_hops(fabric, flows) -> list[list[set]]:
    """Per flow, per equal-cost candidate path: its hops as (node, node) name pairs."""
    cand, _ = fabric.candidate_paths(flows.src, flows.dst, "equal-cost")
    node = np.asarray(fabric.node_names + [""])
    sentinel = fabric.num_links
    link_src = np.r_[fabric.link_src, len(node) - 1]
    link_dst = np.r_[fabric.link_dst, len(node) - 1]
    return [[{(node[link_src[i]], node[link_dst[i]]) for i in cand[f, k] if i != sentinel}
             for k in range(cand.shape[1])] for f in range(flows.num_flows)]


def candidate_of(hops: list[set], chosen: set, where: str) -> int:
    """The first candidate whose hops hold every hop htsim chose (`where` names the flow)."""
    for k, path in enumerate(hops):
        if chosen <= path:
            return k
    raise SystemExit(f"{where}: htsim's path {sorted(chosen)} is none of fabricjax's")


def htsim_slots(case: str, seed: int, fabric, flows, slots: Slots) -> Slots | None:
    """ECMP's slots on the paths htsim's switches hashed each connection to (`routes/`, the
    route dump of `run_htsim.sh`), or None where the case has none committed. A flow's path is
    the equal-cost candidate whose links hold every hop htsim chose: the ECMP rows then compare
    the transport on the same collisions instead of two draws of the hash."""
    topo = CASES[case][0]
    choice = np.array(slots.choice, copy=True)
    if isinstance(TOPOLOGIES[topo], dict):
        # a Clos: a slot's choice is the spine the leaf of its plane hashed the flow to (a
        # multi-plane case: each plane's own run and route dump)
        planes = TOPOLOGIES[topo].get("planes", 1)
        paths = ([routes_path(case, seed)] if planes == 1 else
                 [routes_path(case, seed, p) for p in range(planes)])
        if not all(path.exists() for path in paths):
            return None
        for p, path in enumerate(paths):
            chosen = read_routes(path, topo)
            for f, flow_id in enumerate(matrix_ids(case, seed)):
                spine = leaf_spine(chosen, flow_id, f"{case} seed {seed} plane {p}")
                if spine is not None:
                    choice[f, slots.plane[f] == p] = spine
        return Slots(slots.plane, choice, slots.state)
    path = routes_path(case, seed)
    if not path.exists():
        return None
    chosen = read_routes(path, topo)
    hops = candidate_hops(fabric, flows)
    for f, flow_id in enumerate(matrix_ids(case, seed)):
        choice[f, :] = candidate_of(hops[f], chosen.get(flow_id, set()),
                                    f"{case} seed {seed}: flow {flow_id}")
    return Slots(slots.plane, choice, slots.state)


def quantiles(values: np.ndarray) -> tuple[float, float, float]:
    """Median, P99 and max by the inverted CDF (as fabricjax's FCT figures are taken)."""
    p50, p99 = np.quantile(values, [0.5, 0.99], method="inverted_cdf")
    return float(p50), float(p99), float(values.max())


def case_scenario(case: str, seed: int, workdir: Path, policies=tuple(POLICIES),
                  matrix_seed: int | None = None, graph: bool = False):
    """The case's scenario for `seed` (its edge list and matrix copied into `workdir`)
    under `policies`; the matrix is that of `matrix_seed` where given (a rerun of the same
    flows with other hash salts and draws). `graph`: a degraded case as its edge list with
    the slow links in it (`GRAPHS`), not as the Clos and a failure set."""
    topo, hosts, paths, _ = CASES[case]
    # a scenario reads files inside its own folder only: the matrix joins the edge list there
    source = matrix_path(case, seed if matrix_seed is None else matrix_seed)
    matrix = workdir / source.name
    shutil.copyfile(source, matrix)
    scenario = parse_scenario({
        "name": f"{case}_s{seed}", "seed": seed,
        "fabric": fabric_config(topo, hosts, paths, workdir, graph),
        "policies": list(policies),
        "workload": [{"name": case, "collective": "traffic",
                      "file": matrix.name, "format": "htsim"}],
        **({"failures": FAILURE_SETS[topo]} if topo in FAILURE_SETS and not graph else {}),
        **case_settings(case)}).located(workdir)
    return scenario


def case_phase(case: str, seed: int, workdir: Path, matrix_seed: int | None = None,
               graph: bool = False):
    """(scenario, fabric, flows, stream, alive) of the case's one phase for `seed` (on the
    matrix of `matrix_seed` where given). A case with a failure set: its one set's fabric
    (degraded cables at their capacity) and alive mask, as the failure study solves a set
    (`graph`: the edge list with the slow links instead); alive None otherwise."""
    scenario = case_scenario(case, seed, workdir, matrix_seed=matrix_seed, graph=graph)
    fabric = build(scenario)
    alive = None
    if CASES[case][0] in FAILURE_SETS and not graph:
        alive, fabric = set_fabric(fabric, sample_failures(scenario, fabric=fabric), 0)
    collective = build_workload(scenario, np.random.default_rng([scenario.seed, 0]))[0]
    return scenario, fabric, collective.phases[0].flows, (collective.stream, 0), alive


def routed_ecmp(case: str, seed: int, scenario, fabric, flows, stream) -> Slots | None:
    """ECMP's slots on htsim's own paths for the case (None: none committed)."""
    ecmp = get_policy("ecmp")
    return htsim_slots(case, seed, fabric, flows,
                       initial_slots(ecmp, scenario, fabric, flows, stream))


def fabricjax_fcts(case: str, seed: int, workdir: Path) -> dict:
    """{policy: (p50, p99, max, seconds)} of fabricjax's static level on the case's matrix
    for `seed` (ECMP on htsim's paths where they are committed)."""
    # ECMP on htsim's paths is solved below, not by `analyze` on its own draw; a failure set
    # is solved as the failure study solves one, every policy on the set's fabric
    routed = has_routes(case, seed)
    failed = CASES[case][0] in FAILURE_SETS
    out = {}
    if not failed:
        scenario = case_scenario(case, seed, workdir,
                                 [p for p in POLICIES if not (routed and p == "ecmp")])
        start = time.perf_counter()
        report = analyze(scenario)
        seconds = time.perf_counter() - start
        for record in report.records:
            if record.fct_max_s is None:
                raise SystemExit(f"{case} seed {seed}: {record.policy} has no FCTs "
                                 f"({record.progressive_status})")
            out[record.policy] = (record.fct_p50_s, record.fct_p99_s, record.fct_max_s,
                                  seconds)
    if routed or failed:
        scenario, fabric, flows, stream, alive = case_phase(case, seed, workdir)
        for policy in POLICIES if failed else ("ecmp",):
            slots = (routed_ecmp(case, seed, scenario, fabric, flows, stream)
                     if policy == "ecmp" and routed else None)
            start = time.perf_counter()
            outcome = solve_policy_phase(policy, scenario, fabric, flows, stream, slots=slots,
                                         alive=alive, progressive=True)
            seconds = time.perf_counter() - start
            # as the report takes them: the progressive durations plus the last ACK's way back
            fct = np.asarray(outcome.progressive.duration, np.float64) + transport_latency_s(
                scenario, fabric.flow_hops(flows.src, flows.dst), acknowledged=True)
            out[policy] = (*quantiles(fct[flows.size > 0]), seconds)
    return out


def dynamic_outcomes(case: str, seed: int, workdir: Path, matrix_seed: int | None = None,
                     policies=tuple(POLICIES)):
    """(scenario, flows, {policy: (engine.dynamic's outcome, seconds)}) of fabricjax's dynamic
    level on the case's matrix for `seed`: the same scenario, fabric, flows and slots (the
    matrix of `matrix_seed` where given: htsim's slots only where the two seeds are one)."""
    scenario, fabric, flows, stream, alive = case_phase(case, seed, workdir, matrix_seed)
    routed = (routed_ecmp(case, seed, scenario, fabric, flows, stream)
              if matrix_seed in (None, seed) else None)
    out = {}
    for policy in policies:
        start = time.perf_counter()
        outcome = solve_dynamic_phase(policy, scenario, fabric, flows, stream, alive=alive,
                                      capacity=None if alive is None else fabric.capacity,
                                      slots=routed if policy == "ecmp" else None)
        seconds = time.perf_counter() - start
        if outcome.status:
            raise SystemExit(f"{case} seed {seed}: {policy}'s dynamic run hit its step bound")
        out[policy] = (outcome, seconds)
    return scenario, flows, out


def dynamic_fcts(case: str, seed: int, workdir: Path, matrix_seed: int | None = None,
                 policies=tuple(POLICIES)) -> dict:
    """{policy: (p50, p99, max, seconds)} of the dynamic level (`dynamic_outcomes`), and
    under "mrc_reps" mrc with REPS's EV rule (`dynamic.mrc_ev_rule: reps`), the prediction
    htsim's REPS runs are scored against ("mrc" is the bitmap walk's)."""
    scenario, flows, runs = dynamic_outcomes(case, seed, workdir, matrix_seed, policies)
    out = {policy: (*fct_quantiles(outcome, flows), seconds)
           for policy, (outcome, seconds) in runs.items()}
    if "mrc" in policies:
        reps = scenario.model_copy(update={"dynamic": scenario.dynamic.model_copy(
            update={"mrc_ev_rule": "reps"})})
        _, fabric, flows, stream, alive = case_phase(case, seed, workdir, matrix_seed)
        start = time.perf_counter()
        outcome = solve_dynamic_phase("mrc", reps, fabric, flows, stream, alive=alive,
                                      capacity=None if alive is None else fabric.capacity)
        if outcome.status:
            raise SystemExit(f"{case} seed {seed}: mrc (REPS)'s dynamic run hit its step bound")
        out["mrc_reps"] = (*fct_quantiles(outcome, flows), time.perf_counter() - start)
    return out


def scored_seeds(case: str, seeds) -> list[int]:
    """The seeds of `seeds` the case has a matrix and some committed htsim FCTs for."""
    return [s for s in seeds if matrix_path(case, s).exists() and any(
        htsim_fcts(case, run, s) is not None for runs in POLICIES.values() for run in runs)]


def scored_rows(case: str, seeds, ours: dict):
    """(policy, htsim run, variant, model, htsim's (p50, p99, max) us, fabricjax's, error)
    per row compare.py prints for `case`: each htsim run of each policy, against its
    reference NIC (variant "") and, where committed, its NIC as pinned ("double_turn"), for
    each level of `ours` ({model: {seed: MODELS[model]'s figures}}). Both sides are averaged
    over the seeds of `seeds` that run has committed; error = fabricjax / htsim - 1."""
    for policy, runs in POLICIES.items():
        for run in runs:
            for variant in ("", "double_turn"):
                theirs = {s: htsim_fcts(case, run, s, variant) for s in seeds}
                common = [s for s in seeds if theirs[s] is not None]
                if not common:
                    continue
                h = np.mean([quantiles(theirs[s]) for s in common], axis=0) * 1e6
                for model, figures in ours.items():
                    # a run's own prediction where the level has one (the dynamic level's
                    # REPS), else the policy's
                    key = run if run in figures[common[0]] else policy
                    f = np.mean([figures[s][key][:3] for s in common], axis=0) * 1e6
                    yield policy, run, variant, model, h, f, f / h - 1.0


MODELS = {"static": fabricjax_fcts, "dynamic": dynamic_fcts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES),
                        help="cases to run (default: every case with committed results)")
    parser.add_argument("--seeds", type=int, default=len(SEEDS), help="seeds per case (1..3)")
    parser.add_argument("--model", choices=[*MODELS, "both"], default="both",
                        help="fabricjax's level: static, dynamic or both side by side")
    parser.add_argument("--dynamic", action="append", default=[], metavar="KEY=VALUE",
                        help="a dynamic-level setting over the defaults, as YAML "
                             "(e.g. skip_steady=true); repeatable")
    parser.add_argument("--constant", action="append", default=[], metavar="NAME=VALUE",
                        help="a module constant of solver/dynamic.py over its value, for a "
                             "sensitivity run (e.g. RHO_MAX=0.95); repeatable")
    parser.add_argument("--record", metavar="TSV",
                        help="also write each scored row's errors (p50, p99, max) to TSV, as "
                             "regression.tsv holds them")
    args = parser.parse_args()
    for item in args.dynamic:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--dynamic {item!r}: expected KEY=VALUE")
        DYNAMIC_OVERRIDES[key] = yaml.safe_load(value)
    constants = {}
    for item in args.constant:
        name, sep, value = item.partition("=")
        old = getattr(dynamic_core, name, None)
        new = yaml.safe_load(value) if sep else None
        numeric = (bool, int, float)
        if (not name.isupper() or not isinstance(old, numeric) or not isinstance(new, numeric)
                or isinstance(old, bool) != isinstance(new, bool)):
            parser.error(f"--constant {item!r}: expected NAME=VALUE, NAME a constant "
                         f"of fabricjax/solver/dynamic.py and VALUE of its kind (a number, "
                         f"or true/false for a switch)")
        # read when the programs are traced, which happens after this in this process (no
        # compilation cache is on here, so no program traced with the old value is loaded)
        constants[name] = type(old)(new)
        setattr(dynamic_core, name, constants[name])
    models = list(MODELS) if args.model == "both" else [args.model]
    cases = args.case or list(CASES)
    seeds = SEEDS[:max(1, min(args.seeds, len(SEEDS)))]
    print(f"machine: {platform.machine()}, {platform.system()}; fabricjax against htsim "
          f"(committed per-flow FCTs); "
          f"seeds {', '.join(map(str, seeds))}"
          + "".join(f"; {name} = {value}" for name, value in constants.items()))
    header = (f"{'case':<26} {'policy':<6} {'htsim run':<11} {'model':<7} "
              f"{'htsim p50':>9} {'p99':>8} {'max':>8}   {'fj p50':>8} {'p99':>8} {'max':>8}"
              f"   {'err p50':>7} {'p99':>7} {'max':>7}  target  within")
    print(header)
    print("-" * len(header))
    rows = dict.fromkeys(models, 0)
    within = dict.fromkeys(models, 0)
    pinned_rows = dict.fromkeys(models, 0)
    pinned_within = dict.fromkeys(models, 0)
    record = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            target = CASES[case][3]
            used = scored_seeds(case, seeds)
            if not used:
                print(f"{case:<26} (no committed htsim results)")
                continue
            ours = {m: {s: MODELS[m](case, s, Path(tmp)) for s in used} for m in models}
            # every case compiles programs of its own shapes: one process over all of them
            # would pass the kernel's limit on memory mappings and crash inside XLA
            release_when_crowded()
            for policy, run, variant, model, h, f, err in scored_rows(case, used, ours):
                ok = abs(err[0]) <= target and abs(err[2]) <= target
                verdict = "yes" if ok else "NO"
                if variant:
                    pinned_rows[model] += 1
                    pinned_within[model] += ok
                    verdict = f"({verdict})  double turn"
                else:
                    rows[model] += 1
                    within[model] += ok
                    record.append((case, model, run, *err))
                print(f"{case:<26} {policy:<6} {run:<11} {model:<7} "
                      f"{h[0]:9.1f} {h[1]:8.1f} {h[2]:8.1f}   {f[0]:8.1f} "
                      f"{f[1]:8.1f} {f[2]:8.1f}   {err[0]:+7.1%} {err[1]:+7.1%} "
                      f"{err[2]:+7.1%}  {target:>5.0%}   {verdict}")
    if args.record:
        with open(args.record, "w") as fh:
            fh.write("case\tmodel\trun\terr_p50\terr_p99\terr_max\n")
            for case, model, run, *err in record:
                fh.write(f"{case}\t{model}\t{run}\t" + "\t".join(f"{e:+.4f}" for e in err)
                         + "\n")
    for model in models:
        line = (f"FCTs in us. {model}: {within[model]} of {rows[model]} rows within target "
                f"(median and max).")
        if pinned_rows[model]:
            line += (f" Against htsim's NIC as pinned (double turn, not counted): "
                     f"{pinned_within[model]} of {pinned_rows[model]}.")
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
