"""Failure sets (`fabricjax.fabric.failures`) and what they cost (`fabricjax.study.resilience`).

Names are checked against the fabric's link arrays and documented node numbering; masks and
masked loads against a slow reference that walks the reference graph (tests/reference.py) and
parses component names on its own; the batched per-policy solve against one-set-at-a-time calls
and the single-phase solver; the transient and reliability accounting against their formulas.

Cost: every jitted function compiles once per shape, so the tests share one fabric, one
workload and failure batches of one padded shape (the failure study of `analyze` then reuses
the chunk functions compiled for the direct calls). mrc and optimal compile slowly and are
marked slow.
"""

from __future__ import annotations

import collections
import json
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricjax.engine.phase import solve_policy_phase, solve_slots
from fabricjax.study.analyze import analyze
from fabricjax.core.errors import ScenarioError
from fabricjax.fabric.clos import build_fabric, clos_geometry
from fabricjax.engine.batch import (chunk_inputs as engine_chunk_inputs, failure_key, failure_mask,
                                   run_chunk, solve_failure_chunk)
from fabricjax.fabric.failures import (
    FailureBatch, alive_mask_host, batch_from_components, parse_component, sample_failures,
)
from fabricjax.fabric.paths import path_set
from fabricjax.report.json import report_dict
from fabricjax.engine.batch import solve_failure_sets
from fabricjax.metrics import failure_summary, set_records
from fabricjax.policies import get
from fabricjax.study.resilience import reliability_whatif
from fabricjax.config import ClosConfig, FailureKindConfig
from fabricjax.scenario import parse_scenario
from fabricjax.solver.maxmin import link_load, max_min_rates, slowest_rate, uniform_live_split
from fabricjax.workload.build import build_workload

from adapters import rehash_dead_slots
from reference import node_name, reference_fabric_graph, reference_max_min, reference_paths

# The shared fabric: 2 planes, 8 T0s x 8 GPUs, 8 spines per plane (128 fabric cables).
FABRIC = {"gpus": 64, "planes": 2, "radix": 16}
BASE = {
    "fabric": FABRIC,
    "workload": [{"collective": "permutation", "size": "64MiB"}],
    "spray": {"evs": 16},
    "mrc": {"evs": 16, "max_iters": 40, "patience": 10},
    "optimal": {"max_iters": 400},
    "solver": {"eps": 0.0},
}
# Failure sets of one padded shape ([8 sets, 8 dead links, 8 dead nodes, 8 degraded]): two
# fabric cables, one NIC port and one switch per set.
MIX = {"links": 2, "nic_ports": 1, "switches": 1, "samples": 8, "seed": 11}
# Every set kills both NIC ports of GPU 5 (it can neither send nor receive), plus two cables;
# the reconvergence window equals the transport timeout (a crash, at the boundary).
STALL_GPU = 5
STALL = {"nic_ports": {"names": [f"plane0/gpu{STALL_GPU}", f"plane1/gpu{STALL_GPU}"]},
         "links": 2, "samples": 8, "seed": 5, "reconvergence_s": 30.0,
         "transport_timeout_s": 30.0, "restart_s": 100.0}
RTOL = 1e-5


def scenario(failures: dict | None = None, **fields):
    data = {**BASE, **fields}
    if failures is not None:
        data["failures"] = failures
    return parse_scenario(data)


def names_error(data_failures: dict, fabric: dict = FABRIC) -> ScenarioError:
    with pytest.raises(ScenarioError) as err:
        parse_scenario({**BASE, "fabric": fabric, "failures": data_failures})
    return err.value


# --------------------------------------------------------------------------- reference

class Ref:
    """The reference graph of a fabric, the map from its directed edges to the library's link
    ids (through the documented node numbering), and failure components parsed from their
    names independently of `fabricjax.fabric.failures`."""

    def __init__(self, fabric_cfg: dict):
        cfg = ClosConfig(**fabric_cfg)
        self.fabric = build_fabric(cfg)
        self.geom = self.fabric.geometry
        self.graph = reference_fabric_graph(cfg)
        gg = self.graph.graph

        def name(node):
            return node_name(node, gg["gpus"], gg["planes"], gg["t0s"], gg["spines"])

        self.edges = [(name(s), name(d))
                      for s, d in zip(self.fabric.link_src, self.fabric.link_dst)]
        self.link_of = {e: i for i, e in enumerate(self.edges)}
        assert set(self.link_of) == set(self.graph.edges)
        self.num_links = len(self.edges)
        self._paths: dict = {}
        # T1s as built: the fewest whose ports take every T0 uplink, rounded up to a divisor
        # of the uplinks, so that each takes an equal bundle from every T0
        uplinks = gg["t0s"] * gg["spines"]
        built = next(n for n in range(1, gg["spines"] + 1)
                     if n * cfg.radix >= uplinks and gg["spines"] % n == 0)
        self.t1_bundle = gg["spines"] // built

    def gpu_t0(self, gpu: int, plane: int):
        (t0,) = [v for v in self.graph.successors(("gpu", gpu))
                 if self.graph.edges[("gpu", gpu), v]["plane"] == plane]
        return t0

    def component_links(self, name: str) -> set[int]:
        """Directed link ids a component name denotes (its own grammar, README style)."""
        graph = self.graph
        if m := re.fullmatch(r"plane(\d+)", name):
            p = int(m.group(1))
            edges = {e for e in graph.edges if graph.edges[e]["plane"] == p}
        elif m := re.fullmatch(r"plane(\d+)/t0-(\d+)", name):
            node = ("t0", int(m.group(1)), int(m.group(2)))
            edges = set(graph.in_edges(node)) | set(graph.out_edges(node))
        elif m := re.fullmatch(r"plane(\d+)/t1-(\d+)", name):
            # a physical T1: the `t1_bundle` consecutive logical spines (T0 uplinks) it takes
            p, j = int(m.group(1)), int(m.group(2))
            edges = set()
            for c in range(self.t1_bundle):
                node = ("t1", p, j * self.t1_bundle + c)
                edges |= set(graph.in_edges(node)) | set(graph.out_edges(node))
        elif m := re.fullmatch(r"plane(\d+)/gpu(\d+)", name):
            gpu = ("gpu", int(m.group(2)))
            t0 = self.gpu_t0(int(m.group(2)), int(m.group(1)))
            edges = {(gpu, t0), (t0, gpu)}
        elif m := re.fullmatch(r"plane(\d+)/t0-(\d+)/up(\d+)", name):
            p, t, s = (int(x) for x in m.groups())
            a, b = ("t0", p, t), ("t1", p, s)
            edges = {(a, b), (b, a)}
        else:
            raise AssertionError(f"reference cannot parse {name!r}")
        assert edges and all(graph.has_edge(*e) for e in edges)
        return {self.link_of[e] for e in edges}

    def dead_and_capacity(self, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(alive bool[L], capacity float64[L]) of a failure set given by component names
        (name@factor: a degraded cable at that fraction of its rate)."""
        alive = np.ones(self.num_links, dtype=bool)
        capacity = np.full(self.num_links, self.geom.port_gbps, dtype=np.float64)
        for full in names:
            name, _, factor = full.partition("@")
            links = sorted(self.component_links(name))
            if factor:
                capacity[links] = np.minimum(capacity[links],
                                             self.geom.port_gbps * float(factor))
            else:
                alive[links] = False
        return alive, capacity

    def path(self, src: int, dst: int, plane: int, spine: int) -> list[int]:
        key = (int(src), int(dst), int(plane), int(spine))
        if key not in self._paths:
            self._paths[key] = [self.link_of[e] for e in reference_paths(self.graph, *key)]
        return self._paths[key]


_REFS: dict = {}


def ref_for(fabric_cfg: dict) -> Ref:
    key = tuple(sorted(fabric_cfg.items()))
    if key not in _REFS:
        _REFS[key] = Ref(fabric_cfg)
    return _REFS[key]


def chunk_inputs(policy, scen, fabric, outcome):
    """The shared inputs of a chunk, on the device, as `solve_failure_sets` builds them (so
    direct calls and the failure study share compiled code)."""
    return engine_chunk_inputs(policy, scen, fabric, outcome, (0, 0))


def call_chunk(policy, scen, fabric, outcome, inputs, batch, width):
    out = run_chunk(policy, scen, fabric, outcome.prepared, inputs,
                    jax.device_put(batch.take(0, batch.size, batch.size)), vmap_width=width)
    return jax.device_get(out)


# --------------------------------------------------------------------------- shared state

@pytest.fixture(scope="module")
def world():
    """The shared fabric and the permutation's flows (the workload of every BASE scenario)."""
    scen = scenario()
    fabric = build_fabric(scen.fabric)
    collective = build_workload(scen, np.random.default_rng([scen.seed, 0]))[0]
    return dict(fabric=fabric, collective=collective, flows=collective.phases[0].flows)


_BASELINES: dict = {}


def baseline(policy: str, world):
    """The policy's no-failure outcome of the shared phase (the slots failures start from)."""
    if policy not in _BASELINES:
        _BASELINES[policy] = solve_policy_phase(policy, scenario(), world["fabric"],
                                                world["flows"], (0, 0))
    return _BASELINES[policy]


@pytest.fixture(scope="module")
def mix_batch():
    return sample_failures(scenario(MIX))


_SETS: dict = {}


def batched(policy: str, chunk: int, batch: FailureBatch, world, key: str = "mix"):
    """`solve_failure_sets` over `batch` with `failures.chunk` = chunk (sets per call)."""
    k = (policy, chunk, key)
    if k not in _SETS:
        scen = scenario({**MIX, "chunk": chunk})
        _SETS[k] = solve_failure_sets(policy, scen, world["fabric"], baseline(policy, world),
                                      batch, (0, 0))
    return _SETS[k]


# --------------------------------------------------------------------------- 1. names

# 4 planes, 8 T0s, 8 logical spines (T0 uplinks) on 4 physical T1s of 2 cables to each T0
NAMES_FABRIC = {"gpus": 64, "planes": 4, "radix": 16}


@pytest.fixture(scope="module")
def names_fabric():
    return build_fabric(ClosConfig(**NAMES_FABRIC))


def test_cable_names_round_trip(names_fabric):
    fabric = names_fabric
    g = fabric.geometry
    N, P, T, S = g.gpus, g.planes, g.t0s, g.spines
    src, dst = fabric.link_src, fabric.link_dst
    seen = set()
    for link in range(g.tier_starts[1], g.tier_starts[3]):      # every fabric link, both ways
        name = fabric.link_name(link)
        up = re.fullmatch(r"plane(\d+)/t0-(\d+)/up(\d+)", name)
        down = re.fullmatch(r"plane(\d+)/t1-(\d+)/down(\d+)#(\d+)", name)
        assert up or down, name
        # the name agrees with the documented node numbering of the link's ends
        if up:
            p, t, s = (int(x) for x in up.groups())
            assert (src[link], dst[link]) == (N + p * T + t, N + P * T + p * S + s)
        else:       # physical T1 j, cable c of its bundle: logical spine j * b + c
            p, j, t, c = (int(x) for x in down.groups())
            assert j < g.t1_switches and c < g.spine_bundle == 2
            s = j * g.spine_bundle + c
            assert (src[link], dst[link]) == (N + P * T + p * S + s, N + p * T + t)
        component = parse_component(g, "links", name, "failures.links.names[0]")
        a, b = src[link], dst[link]
        cable = set(np.flatnonzero(((src == a) & (dst == b)) | ((src == b) & (dst == a))))
        assert len(cable) == 2 and link in cable
        assert set(component.links) == cable and len(component.links) == 2
        assert component.nodes == ()
        # both directions name the same cable; it kills exactly t0_up and t1_down
        (twin,) = cable - {link}
        assert parse_component(g, "links", fabric.link_name(twin), "f") == component
        assert sorted(component.links) == [int(g.t0_up(p, t, s)), int(g.t1_down(p, t, s))]
        assert component.name == f"plane{p}/t0-{t}/up{s}"
        assert parse_component(g, "degraded", name, "f").links == component.links
        seen.add(component.name)
    assert len(seen) == P * T * S


@pytest.mark.parametrize("plane,gpu", [(1, 17), (0, 0), (3, 63), (2, 8)])
def test_nic_port_names(names_fabric, plane, gpu):
    fabric = names_fabric
    g = fabric.geometry
    on_plane = fabric.plane == plane
    expected = set(np.flatnonzero(on_plane & ((fabric.link_src == gpu) |
                                              (fabric.link_dst == gpu))))
    component = parse_component(g, "nic_ports", f"plane{plane}/gpu{gpu}",
                                "failures.nic_ports.names[0]")
    assert set(component.links) == expected and len(expected) == 2
    assert set(component.links) == {int(g.gpu_up(plane, gpu)), int(g.gpu_down(plane, gpu))}
    assert component.nodes == ()
    # the host cable by either of its link names (under `links`) is the same port
    for link in expected:
        by_link = parse_component(g, "links", fabric.link_name(link), "f")
        assert set(by_link.links) == expected


def test_switch_names(names_fabric):
    fabric = names_fabric
    g = fabric.geometry
    N, P, T, S = g.gpus, g.planes, g.t0s, g.spines
    # physical T1 2 of plane 2: logical spines 4 and 5 (two uplinks of every T0)
    t1 = parse_component(g, "switches", "plane2/t1-2", "f")
    assert t1.nodes == (N + P * T + 2 * S + 4, N + P * T + 2 * S + 5) and t1.links == ()
    # those nodes' incoming links are exactly the uplinks named .../up4 and .../up5 of plane 2
    into = {fabric.link_name(l) for l in np.flatnonzero(np.isin(fabric.link_dst, t1.nodes))}
    assert into == {f"plane2/t0-{t}/up{s}" for t in range(T) for s in (4, 5)}
    t0 = parse_component(g, "switches", "plane0/t0-3", "f")
    assert t0.nodes == (N + 3,) and t0.links == ()
    out = {fabric.link_name(l) for l in np.flatnonzero(fabric.link_src == t0.nodes[0])}
    assert out == ({f"plane0/t0-3/up{s}" for s in range(S)} |
                   {f"plane0/gpu{gpu}/down" for gpu in range(24, 32)})


def test_plane_names_and_bare_integers(names_fabric):
    fabric = names_fabric
    g = fabric.geometry
    on_plane = fabric.plane == 3
    switches = set(fabric.link_src[on_plane]) | set(fabric.link_dst[on_plane])
    switches = {int(n) for n in switches if n >= g.gpus}
    plane = parse_component(g, "planes", "plane3", "f")
    assert set(plane.nodes) == switches and len(plane.nodes) == g.t0s + g.spines
    data = yaml.safe_load("failures:\n  planes: [3]\n")
    assert data["failures"]["planes"] == [3]
    scen = parse_scenario({**BASE, "fabric": NAMES_FABRIC, **data})
    assert scen.failures.planes.names == ["plane3"]
    batch = sample_failures(scen)
    assert batch.names == [["plane3"]]
    dead_nodes = set(batch.dead_nodes[0][batch.dead_nodes[0] != g.num_nodes].tolist())
    assert dead_nodes == switches
    assert np.all(batch.dead_links == g.sentinel)


GOOD = {"links": "plane0/t0-0/up0", "degraded": "plane1/t1-2/down3",
        "nic_ports": "plane3/gpu63", "switches": "plane3/t1-3", "planes": "plane3"}
BAD = [
    ("links", "plane4/t0-0/up0"),        # plane out of range (4 planes)
    ("links", "plane0/t0-8/up0"),        # T0 out of range (8 per plane)
    ("links", "plane0/t0-0/up8"),        # spine out of range (8 per plane)
    ("links", "plane0/t1-8/down0"),      # spine out of range, by the down name
    ("links", "plane0/t1-0/down8"),      # T0 out of range, by the down name
    ("links", "plane0/t1-0/down0#2"),    # a bundle of 2 cables: #0 and #1
    ("links", "plane0/gpu64/up"),        # GPU out of range
    ("links", "plane0/t0-0"),            # a switch is not a link
    ("links", "cable7"),
    ("degraded", "plane0/t0-0/up9"),
    ("nic_ports", "plane0/gpu64"),
    ("nic_ports", "plane4/gpu0"),
    ("nic_ports", "plane0/t0-0/up0"),
    ("switches", "plane0/t1-8"),
    ("switches", "plane0/t0-8"),
    ("switches", "plane0/t2-0"),
    ("switches", "plane4/t0-0"),
    ("switches", "plane0/gpu1"),
    ("planes", "plane4"),
    ("planes", 4),                       # a bare integer out of range
    ("planes", "p1"),
]


@pytest.mark.parametrize("kind,bad", BAD, ids=[f"{k}-{b}" for k, b in BAD])
def test_bad_names_name_their_field(kind, bad):
    err = names_error({kind: {"names": [GOOD[kind], bad]}}, NAMES_FABRIC)
    assert err.field == f"failures.{kind}.names[1]"
    assert str(bad) in err.message


def test_good_names_parse(names_fabric):
    scen = parse_scenario({**BASE, "fabric": NAMES_FABRIC,
                           "failures": {kind: [name] for kind, name in GOOD.items()}})
    (names,) = sample_failures(scen).names
    # plane1/t1-2/down3 is cable #0 of T1 2's bundle to T0 3: that T0's uplink 4
    assert sorted(names) == sorted(["plane0/t0-0/up0", "plane1/t0-3/up4@0.5", "plane3/gpu63",
                                    "plane3/t1-3", "plane3"])


# --------------------------------------------------------------------------- 2. schema

def test_shorthands():
    short = scenario({"links": 4, "nic_ports": ["plane0/gpu3"], "samples": 2})
    long = scenario({"links": {"random": 4}, "nic_ports": {"names": ["plane0/gpu3"]},
                     "samples": 2})
    assert short.failures == long.failures
    assert short.failures.links == FailureKindConfig(random=4)
    assert short.failures.nic_ports.names == ["plane0/gpu3"]
    assert short.failures.nic_ports.random == 0
    b1, b2 = sample_failures(short), sample_failures(long)
    assert b1.names == b2.names


def test_unknown_field_lists_allowed_fields():
    err = names_error({"linkz": 3})
    assert err.field == "failures.linkz"
    assert "allowed" in err.message
    for field in ("links", "switches", "nic_ports", "planes", "degraded", "samples", "seed",
                  "reconvergence_s", "transport_timeout_s"):
        assert field in err.message
    err = names_error({"links": {"randm": 3}})
    assert err.field == "failures.links.randm"
    for field in ("names", "random", "probability"):
        assert field in err.message
    err = names_error({"switches": {"tier": "t2"}})
    assert err.field == "failures.switches.tier"


def test_random_count_bounded_by_population():
    cables = 2 * 8 * 8
    scenario({"links": cables})                               # every cable: allowed
    err = names_error({"links": cables + 1})
    assert err.field == "failures.links.random"
    # a named cable is not drawn again: one fewer to draw
    scenario({"links": {"names": ["plane0/t0-0/up0"], "random": cables - 1}})
    err = names_error({"links": {"names": ["plane0/t0-0/up0"], "random": cables}})
    assert err.field == "failures.links.random"
    err = names_error({"planes": 3})
    assert err.field == "failures.planes.random"
    err = names_error({"nic_ports": 2 * 64 + 1})
    assert err.field == "failures.nic_ports.random"
    # 2 planes x 4 physical T1s
    err = names_error({"switches": {"random": 8, "tier": "t1", "names": ["plane0/t1-0"]},
                       "samples": 2})
    assert err.field == "failures.switches.random"
    scenario({"switches": {"random": 7, "tier": "t1", "names": ["plane0/t1-0"]}})


def test_samples_need_something_random():
    err = names_error({"links": ["plane0/t0-0/up0"], "samples": 4})
    assert err.field == "failures.samples"
    scenario({"links": ["plane0/t0-0/up0"], "samples": 1})
    scenario({"links": {"probability": 0.01}, "samples": 4})
    assert scenario({"links": ["plane0/t0-0/up0"]}).failures.num_samples == 1
    assert scenario({"links": 1}).failures.num_samples == 100


@pytest.mark.parametrize("factor,ok", [(0.0, False), (1.0, False), (1.5, False), (-0.1, False),
                                       (0.25, True), (0.999, True)])
def test_degraded_factor_range(factor, ok):
    failures = {"degraded": {"random": 1, "factor": factor}, "samples": 2}
    if ok:
        scen = scenario(failures)
        assert scen.failures.degraded.factor == factor
    else:
        assert names_error(failures).field == "failures.degraded.factor"


# --------------------------------------------------------------------------- 3. sampling

CABLE = re.compile(r"^plane\d+/t0-\d+/up\d+$")
PORT = re.compile(r"^plane\d+/gpu\d+$")
T0 = re.compile(r"^plane\d+/t0-\d+$")
T1 = re.compile(r"^plane\d+/t1-\d+$")
SAMPLING = {"links": {"names": ["plane0/t0-1/up2", "plane1/t1-3/down4#1"], "random": 5},
            "switches": {"names": ["plane0/t1-1"], "random": 2, "tier": "t1"},
            "nic_ports": {"names": ["plane1/gpu7"], "random": 3},
            "samples": 60, "seed": 7}


def _bucket_ok(width: int, count: int) -> bool:
    """The padded width is the smallest power of two >= max(count, 8)."""
    return width >= 8 and width & (width - 1) == 0 and width >= count and (
        width == 8 or width // 2 < count)


def test_sampling_is_deterministic_and_seeded():
    a, b = sample_failures(scenario(SAMPLING)), sample_failures(scenario(SAMPLING))
    assert a.names == b.names
    for x, y in zip(a[1:], b[1:]):
        np.testing.assert_array_equal(x, y)
    other = sample_failures(scenario({**SAMPLING, "seed": 8}))
    assert other.names != a.names
    for x, y in zip(a[1:], other[1:]):
        assert x.shape == y.shape
    # without failures.seed the scenario's seed draws
    by_scenario = sample_failures(scenario({k: v for k, v in SAMPLING.items() if k != "seed"},
                                           seed=7))
    assert by_scenario.names == a.names
    assert sample_failures(scenario(SAMPLING), samples=5).size == 5


def test_one_cable_named_both_ways_is_one_component():
    batch = sample_failures(scenario({"links": ["plane0/t0-1/up2", "plane0/t1-1/down1#0"]}))
    assert batch.names == [["plane0/t0-1/up2"]]
    g = clos_geometry(ClosConfig(**FABRIC))
    dead = batch.dead_links[0][batch.dead_links[0] != g.sentinel]
    assert sorted(dead.tolist()) == [int(g.t0_up(0, 1, 2)), int(g.t1_down(0, 1, 2))]


def test_sets_hold_names_plus_exactly_random_draws():
    batch = sample_failures(scenario(SAMPLING))
    g = clos_geometry(ClosConfig(**FABRIC))
    assert batch.size == 60
    drawn = collections.Counter()
    for b, names in enumerate(batch.names):
        assert len(names) == len(set(names)), names              # nothing twice in a set
        cables = [n for n in names if CABLE.match(n)]
        ports = [n for n in names if PORT.match(n)]
        t1s = [n for n in names if T1.match(n)]
        assert len(cables) + len(ports) + len(t1s) == len(names), names
        assert not any(T0.match(n) for n in names)               # tier t1 only
        # the explicit ones (the down name is the same cable as plane1/t0-4/up7) ...
        assert {"plane0/t0-1/up2", "plane1/t0-4/up7"} <= set(cables)
        assert "plane0/t1-1" in t1s and "plane1/gpu7" in ports
        # ... plus exactly `random` more of each kind
        assert (len(cables), len(t1s), len(ports)) == (2 + 5, 1 + 2, 1 + 3)
        drawn.update(n for n in cables if n not in ("plane0/t0-1/up2", "plane1/t0-4/up7"))
        # the id lists hold exactly those components' links and switches
        dead = batch.dead_links[b][batch.dead_links[b] != g.sentinel]
        assert len(dead) == len(set(dead.tolist())) == 2 * (7 + 4)
        nodes = batch.dead_nodes[b][batch.dead_nodes[b] != g.num_nodes]
        # a physical T1 is its bundle's logical spines
        b = g.spine_bundle
        assert sorted(nodes.tolist()) == sorted(
            g.gpus + g.planes * g.t0s + int(p) * g.spines + int(j) * b + c
            for p, j in (re.match(r"plane(\d+)/t1-(\d+)", n).groups() for n in t1s)
            for c in range(b))
    assert _bucket_ok(batch.dead_links.shape[1], 22) and batch.dead_links.shape[1] == 32
    assert _bucket_ok(batch.dead_nodes.shape[1], 3 * g.spine_bundle)
    assert batch.degraded_links.shape[1] == 8 and batch.degraded_factor.shape[1] == 8
    assert np.all(batch.degraded_factor == 1.0)
    # random draws spread over the cables (300 draws of 126: many distinct ones)
    assert len(drawn) > 80


def test_random_never_repeats_an_explicit_component():
    # two planes: one named, one random: the random one is always the other plane
    batch = sample_failures(scenario({"planes": {"names": ["plane0"], "random": 1},
                                      "samples": 20}))
    assert all(sorted(names) == ["plane0", "plane1"] for names in batch.names)
    # every cable: one named (by its down name), the other 127 drawn
    batch = sample_failures(scenario({"links": {"names": ["plane1/t1-3/down0#1"], "random": 127},
                                      "samples": 3}))
    for names in batch.names:
        assert len(names) == len(set(names)) == 128
    g = clos_geometry(ClosConfig(**FABRIC))
    for row in batch.dead_links:
        assert sorted(row.tolist()) == list(range(g.tier_starts[1], g.tier_starts[3]))


@pytest.mark.parametrize("tier,pattern", [("t0", T0), ("t1", T1)])
def test_switch_tier_restriction(tier, pattern):
    batch = sample_failures(scenario({"switches": {"random": 3, "tier": tier},
                                      "samples": 40}))
    names = [n for s in batch.names for n in s]
    assert len(names) == 120 and all(pattern.match(n) for n in names)


def test_switch_tier_any_draws_both_tiers():
    batch = sample_failures(scenario({"switches": 3, "samples": 40}))
    names = [n for s in batch.names for n in s]
    assert any(T0.match(n) for n in names) and any(T1.match(n) for n in names)


def test_probability_mean_count():
    batch = sample_failures(scenario({
        "nic_ports": {"probability": 0.1},                       # population 128
        "switches": {"probability": 0.05, "tier": "t0"},          # population 16
        "links": {"names": ["plane0/t0-0/up0"], "random": 2, "probability": 0.2},
        "samples": 400, "seed": 1}))
    ports = np.array([sum(bool(PORT.match(n)) for n in s) for s in batch.names])
    t0s = np.array([sum(bool(T0.match(n)) for n in s) for s in batch.names])
    cables = np.array([sum(bool(CABLE.match(n)) for n in s) for s in batch.names])
    assert not any(T1.match(n) for s in batch.names for n in s)
    # means within ~6 standard errors of p * population
    assert abs(ports.mean() - 0.1 * 128) < 1.5, ports.mean()
    assert abs(t0s.mean() - 0.05 * 16) < 0.3, t0s.mean()
    # the named cable and the 2 random ones always, each of the other 125 with p = 0.2
    assert cables.min() >= 3
    assert abs(cables.mean() - (3 + 0.2 * 125)) < 3.0, cables.mean()
    assert ports.std() > 0                                       # the count does vary


# --------------------------------------------------------------------------- 4. masks

MASK_FABRIC = {"gpus": 32, "planes": 2, "radix": 8}      # 8 T0s x 4 GPUs, 4 spines per plane


def test_masks_match_host_twin_and_reference():
    ref = ref_for(MASK_FABRIC)
    fabric, g = ref.fabric, ref.geom
    scen = parse_scenario({**BASE, "fabric": MASK_FABRIC, "spray": {"evs": 8},
                           "mrc": {"evs": 8}, "failures": {
                               "links": 3, "switches": 1, "nic_ports": 2,
                               "planes": {"probability": 0.15},
                               "degraded": {"random": 3, "factor": 0.25},
                               "samples": 16, "seed": 3}})
    batch = sample_failures(scen)
    mask = jax.jit(failure_mask, static_argnames="num_nodes")
    dead_total, degraded_total, planes_hit = 0, 0, 0
    for b in range(batch.size):
        alive, capacity = jax.device_get(mask(
            fabric.link_src, fabric.link_dst, fabric.capacity, batch.dead_links[b],
            batch.dead_nodes[b], batch.degraded_links[b], batch.degraded_factor[b],
            num_nodes=g.num_nodes))
        host = alive_mask_host(g, fabric.link_src, fabric.link_dst, batch.dead_links[b],
                               batch.dead_nodes[b])
        # the definition, link by link: dead when listed or an end switch is dead
        listed = set(batch.dead_links[b].tolist())
        nodes = set(batch.dead_nodes[b].tolist())
        loop = np.array([not (l in listed or int(fabric.link_src[l]) in nodes or
                              int(fabric.link_dst[l]) in nodes) for l in range(g.num_links)])
        # from the names alone, on the reference graph
        ref_alive, ref_capacity = ref.dead_and_capacity(batch.names[b])
        np.testing.assert_array_equal(alive, ref_alive)
        np.testing.assert_array_equal(host, ref_alive)
        np.testing.assert_array_equal(loop, ref_alive)
        np.testing.assert_allclose(capacity, ref_capacity, rtol=1e-7)
        dead_total += int((~ref_alive).sum())
        degraded_total += int((ref_capacity < g.port_gbps).sum())
        planes_hit += any(re.fullmatch(r"plane\d+", n) for n in batch.names[b])
    assert dead_total > 0 and degraded_total > 0 and planes_hit > 0


def test_degraded_keeps_smallest_factor():
    g = clos_geometry(ClosConfig(**FABRIC))
    fabric = build_fabric(ClosConfig(**FABRIC))
    link = int(g.t0_up(1, 2, 3))
    degraded = np.array([link, link, g.sentinel, g.sentinel], np.int32)
    factor = np.array([0.5, 0.25, 1.0, 1.0], np.float32)
    alive, capacity = failure_mask(fabric.link_src, fabric.link_dst, fabric.capacity,
                                   np.array([g.sentinel], np.int32),
                                   np.array([g.num_nodes], np.int32), degraded, factor,
                                   num_nodes=g.num_nodes)
    assert bool(np.all(alive))
    expected = fabric.capacity.copy()
    expected[link] *= 0.25
    np.testing.assert_allclose(np.asarray(capacity), expected)


# --------------------------------------------------------------------------- 5. masked loads

def reference_spray(ref: Ref, flows, plane, spine, alive: np.ndarray):
    """(load float64[L], affected flows): each flow's demand split equally over its slots whose
    hops are all alive (paths walked on the graph); affected = some slot crosses a dead link."""
    demand_of = collections.Counter(flows.src.tolist())       # flows per sending GPU
    nic = ref.geom.planes * ref.geom.port_gbps
    load = np.zeros(ref.num_links)
    affected = 0
    for f in range(flows.num_flows):
        paths = [ref.path(flows.src[f], flows.dst[f], plane[f, k], spine[f, k])
                 for k in range(plane.shape[1])]
        live = [p for p in paths if all(alive[l] for l in p)]
        affected += len(live) < len(paths)
        for p in live:
            for l in p:
                load[l] += nic / demand_of[int(flows.src[f])] / len(live)
    return load, affected


def test_spray_masked_loads_match_reference(world, mix_batch):
    ref = ref_for(FABRIC)
    fabric, g, flows = world["fabric"], world["fabric"].geometry, world["flows"]
    out = baseline("spray", world).split
    paths = path_set(g, flows.src, flows.dst, out.plane, out.choice)
    demand = jnp.asarray(np.full(flows.num_flows, g.nic_gbps, np.float32))

    @jax.jit
    def loads(links, alive_ext):
        return link_load(links, uniform_live_split(links, alive_ext), demand, g.num_links + 1)

    sets = batched("spray", 8, mix_batch, world)
    for b in range(mix_batch.size):
        alive = alive_mask_host(g, fabric.link_src, fabric.link_dst, mix_batch.dead_links[b],
                                mix_batch.dead_nodes[b])
        ref_alive, _ = ref.dead_and_capacity(mix_batch.names[b])
        np.testing.assert_array_equal(alive, ref_alive)
        got = np.asarray(loads(paths.links, np.append(alive, True)))
        assert got[-1] == 0.0 or np.isfinite(got[-1])
        expected, affected = reference_spray(ref, flows, out.plane, out.choice, ref_alive)
        np.testing.assert_allclose(got[:-1], expected, rtol=1e-5, atol=1e-3)
        # the batched solve agrees: P100 over alive links, affected and stalled flows
        p100 = (expected / g.port_gbps)[ref_alive].max()
        np.testing.assert_allclose(sets.stats[b, 0, -1], p100, rtol=RTOL)
        assert int(sets.affected[b]) == affected
        assert int(sets.stalled[b]) == 0
    assert int(sets.affected.sum()) > 0


# --------------------------------------------------------------------------- 6. ECMP re-hash

rehash = jax.jit(rehash_dead_slots, static_argnums=0)


def _fabric_hops_alive_ref(ref: Ref, alive, src, dst, plane, spine) -> bool:
    path = ref.path(src, dst, plane, spine)
    return len(path) == 4 and bool(alive[path[1]] and alive[path[2]])


def test_rehash_moves_only_dead_qps_to_live_spines():
    ref = ref_for(FABRIC)
    fabric, g = ref.fabric, ref.geom
    rng = np.random.default_rng(0)
    F, K = 1500, 4
    src = rng.integers(0, g.gpus, F).astype(np.int32)
    dst = ((src + rng.integers(1, g.gpus, F)) % g.gpus).astype(np.int32)
    plane = np.broadcast_to(np.arange(K, dtype=np.int32) % g.planes, (F, K)).copy()
    spine = rng.integers(0, g.spines, (F, K)).astype(np.int32)
    names = [("links", "plane0/t0-1/up2"), ("links", "plane0/t1-3/down5"),
             ("links", "plane1/t0-2/up6"), ("switches", "plane1/t1-0"),
             ("nic_ports", "plane0/gpu9"), ("nic_ports", "plane1/gpu40"),
             ("switches", "plane0/t0-6")]     # no live spine from or to T0 6 on plane 0
    components = [parse_component(g, kind, n, "f") for kind, n in names]
    batch = batch_from_components(g, [components])
    alive = alive_mask_host(g, fabric.link_src, fabric.link_dst, batch.dead_links[0],
                            batch.dead_nodes[0])
    new = np.asarray(rehash(g, src, dst, plane, spine, np.append(alive, True),
                            jax.random.key(3)))
    kept = moved = behind_dead_port = stuck = 0
    for f in range(F):
        for k in range(K):
            s, d, p, old = int(src[f]), int(dst[f]), int(plane[f, k]), int(spine[f, k])
            path = ref.path(s, d, p, old)
            if len(path) == 4 and not any(_fabric_hops_alive_ref(ref, alive, s, d, p, x)
                                          for x in range(g.spines)):
                assert new[f, k] == old, (f, k)          # nowhere to go: it stays
                stuck += 1
                continue
            if len(path) == 2 or _fabric_hops_alive_ref(ref, alive, s, d, p, old):
                assert new[f, k] == old, (f, k)          # same T0, or its path is alive
                kept += 1
                if not (alive[path[0]] and alive[path[-1]]):
                    behind_dead_port += 1                # a dead NIC port: not moved
                continue
            assert 0 <= new[f, k] < g.spines
            assert new[f, k] != old
            assert _fabric_hops_alive_ref(ref, alive, s, d, p, int(new[f, k])), (f, k)
            moved += 1
    assert kept > 0 and moved > 0 and behind_dead_port > 0 and stuck > 0


def test_rehash_is_uniform_over_live_spines():
    from scipy.stats import chisquare

    g = clos_geometry(ClosConfig(**FABRIC))
    fabric = build_fabric(ClosConfig(**FABRIC))
    rng = np.random.default_rng(1)
    F = 1500
    src = rng.integers(0, g.gpus, F).astype(np.int32)
    # another T0: every plane-1 QP on spine 0 crosses the dead switch and must move
    dst = ((src + g.gpus_per_t0 * rng.integers(1, g.t0s, F)) % g.gpus).astype(np.int32)
    plane = np.broadcast_to(np.array([0, 1], np.int32), (F, 2)).copy()
    spine = np.zeros((F, 2), np.int32)
    batch = batch_from_components(g, [[parse_component(g, "switches", "plane1/t1-0", "f")]])
    alive = alive_mask_host(g, fabric.link_src, fabric.link_dst, batch.dead_links[0],
                            batch.dead_nodes[0])
    new = np.asarray(rehash(g, src, dst, plane, spine, np.append(alive, True),
                            jax.random.key(7)))
    np.testing.assert_array_equal(new[:, 0], 0)              # plane 0 is intact
    # physical T1 0 takes logical spines 0 and 1 (a bundle of 2 uplinks from every T0)
    dead = g.spine_bundle
    counts = np.bincount(new[:, 1], minlength=g.spines)
    assert np.all(counts[:dead] == 0) and counts.sum() == F
    assert chisquare(counts[dead:]).pvalue > 1e-4, counts
    # each live logical spine takes about its share (loose)
    live = g.spines - dead
    assert counts[dead:].max() < 1.5 * F / live and counts[dead:].min() > 0.6 * F / live


# --------------------------------------------------------------------------- 7. no recompile

def test_new_failure_sets_do_not_recompile(world):
    fabric = world["fabric"]
    scen = scenario({**MIX, "chunk": 8})
    a = sample_failures(scen)
    b = sample_failures(scenario({**MIX, "seed": 12}))
    assert a.names != b.names
    for x, y in zip(a[1:], b[1:]):
        assert x.shape == y.shape and x.dtype == y.dtype
    inputs = chunk_inputs("spray", scen, fabric, baseline("spray", world))
    first = call_chunk("spray", scen, fabric, baseline("spray", world), inputs, a, 8)
    size = solve_failure_chunk._cache_size()
    second = call_chunk("spray", scen, fabric, baseline("spray", world), inputs, b, 8)
    assert solve_failure_chunk._cache_size() == size
    assert not np.array_equal(first.affected, second.affected) or not np.array_equal(
        first.stats, second.stats)


# --------------------------------------------------------------------------- 8. batched

FIELDS_EXACT = ("stalled", "stalled_flows", "affected", "status", "adapt_status")
FIELDS_CLOSE = ("stats", "top_util", "cohort_end", "min_rate", "residual")


def _assert_same_set(x, y, i, j):
    for name in FIELDS_EXACT:
        np.testing.assert_array_equal(getattr(x, name)[i], getattr(y, name)[j], err_msg=name)
    for name in FIELDS_CLOSE:
        np.testing.assert_allclose(getattr(x, name)[i], getattr(y, name)[j], rtol=RTOL,
                                   atol=1e-6, err_msg=name)


def _repeated(batch: FailureBatch, b: int) -> FailureBatch:
    """Set b alone: a batch of the same shape holding only set b (no recompilation)."""
    index = np.full(batch.size, b)
    return FailureBatch([batch.names[b]] * batch.size, *(x[index] for x in batch[1:]))


def _batched_matches_single(policy, world, batch, widths):
    one = {w: batched(policy, w, batch, world) for w in widths}
    for b in range(batch.size):
        alone = batched(policy, 1, _repeated(batch, b), world, key=f"alone{b}")
        for w, out in one.items():
            _assert_same_set(out, alone, b, 0)
    return one[widths[0]]


@pytest.mark.parametrize("policy", ["ecmp", "spray"])
def test_batched_equals_one_by_one_and_single_solve(policy, world, mix_batch):
    fabric, g, flows = world["fabric"], world["fabric"].geometry, world["flows"]
    out = _batched_matches_single(policy, world, mix_batch, (1, 8))
    scen = scenario()
    base = baseline(policy, world).split
    key = failure_key(scen, policy, (0, 0))
    changed = 0
    for b in range(mix_batch.size):
        alive = alive_mask_host(g, fabric.link_src, fabric.link_dst, mix_batch.dead_links[b],
                                mix_batch.dead_nodes[b])
        spine = base.choice
        if policy == "ecmp":
            # the failure set's re-hash runs over the baseline's padded phase
            prepared = baseline(policy, world).prepared
            spine = np.asarray(rehash(g, prepared.arrays.src, prepared.arrays.dst,
                                      prepared.pad(base.plane, base.plane[0]),
                                      prepared.pad(base.choice, base.choice[0]),
                                      np.append(alive, True), key))[:flows.num_flows]
            changed += int(np.sum(spine != base.choice))
        single = solve_slots(fabric, flows, base.plane, spine, scen, alive)
        # failure sets keep the P100 of every range (all links, then per tier)
        assert out.stats[b].shape == (single.stats.shape[0], 1)
        np.testing.assert_allclose(out.stats[b, :, -1], single.stats[:, -1], rtol=RTOL,
                                   atol=1e-6)
        # slowest_only (all flows send 64 MiB) == the max-min phase time at eps = 0
        np.testing.assert_allclose(out.cohort_end[b, 0], single.phase_time, rtol=1e-4)
        assert int(out.stalled[b]) == int(single.stalled)
        np.testing.assert_allclose(out.min_rate[b], single.rates.min(), rtol=1e-4)
    if policy == "ecmp":
        assert changed > 0             # some QPs were actually re-hashed


def test_vmap_width_not_dividing_the_chunk(world, mix_batch):
    # vmapped groups of 3 over 8 sets (what an accelerator runs; lax.map runs the remainder
    # apart): the same sets as one at a time, to float32 rounding
    fabric = world["fabric"]
    scen = scenario(MIX)
    inputs = chunk_inputs("spray", scen, fabric, baseline("spray", world))
    out3 = call_chunk("spray", scen, fabric, baseline("spray", world), inputs, mix_batch, 3)
    out1 = call_chunk("spray", scen, fabric, baseline("spray", world), inputs, mix_batch, 1)
    assert out3.stats.shape[0] == out1.stats.shape[0] == mix_batch.size
    for b in range(mix_batch.size):
        _assert_same_set(out3, out1, b, b)


@pytest.mark.parametrize("policy", ["ecmp", "spray", "optimal",
                                    pytest.param("mrc", marks=pytest.mark.slow)])
def test_chunk_size_never_changes_a_bit(policy, world, mix_batch):
    """Determinism: on a CPU the failure sets of a call run one at a time whatever
    `failures.chunk` is, so 1, 3 (not dividing the 8 sets) and 16 sets per call give identical
    bytes (vmapping them changed optimal's last float32 bit)."""
    outs = [batched(policy, chunk, mix_batch, world) for chunk in (1, 3, 16)]
    for other in outs[1:]:
        for name, x, y in zip(outs[0]._fields, outs[0], other):
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), (policy, name)


@pytest.mark.slow
def test_batched_equals_one_by_one_mrc(world, mix_batch):
    out = _batched_matches_single("mrc", world, mix_batch, (1, 8))
    assert np.all(np.isfinite(out.stats)) and np.all(out.stalled == 0)
    assert np.all(out.iterations >= 1)


_slowest = jax.jit(slowest_rate)


@jax.jit
def _max_min(links, weights, flow_cap, capacity):
    return max_min_rates(links, weights, flow_cap, capacity, eps=0.0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_slowest_rate_is_max_min_minimum(seed):
    rng = np.random.default_rng(seed)
    F, K, H, L = 6, 3, 2, 8
    links = rng.integers(0, L + 1, (F, K, H)).astype(np.int32)       # L: the sentinel
    weights = rng.random((F, K)).astype(np.float32) * (rng.random((F, K)) < 0.7)
    weights[rng.random(F) < 0.25] = 0.0                              # flows with no path
    weights = weights / np.maximum(weights.sum(axis=1, keepdims=True), 1e-9)
    weights = weights.astype(np.float32)
    flow_cap = rng.uniform(0.5, 3.0, F).astype(np.float32)
    capacity = rng.uniform(0.5, 2.0, L + 1).astype(np.float32)
    capacity[rng.random(L + 1) < 0.1] = 0.0                          # dead links
    capacity[L] = np.inf
    rate, has_path = _slowest(links, weights, flow_cap, capacity)
    mm = _max_min(links, weights, flow_cap, capacity)
    expect_has_path = weights.sum(axis=1) > 0
    np.testing.assert_array_equal(np.asarray(has_path), expect_has_path)
    ref_rates, _ = reference_max_min(links, weights, flow_cap, capacity)
    if not expect_has_path.any():
        assert float(rate) == 0.0
        return
    assert int(mm.status) == 0
    np.testing.assert_allclose(float(rate), np.asarray(mm.rates)[expect_has_path].min(),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(float(rate), ref_rates[expect_has_path].min(), rtol=1e-4,
                               atol=1e-6)


# --------------------------------------------------------------------------- 9, 10. study

@pytest.fixture(scope="module")
def stall_report():
    return analyze(scenario(STALL, policies=["ecmp", "spray"]))


def _stall_pairs(flows) -> set[str]:
    return {f"gpu{s}->gpu{d}" for s, d in zip(flows.src, flows.dst)
            if STALL_GPU in (int(s), int(d))}


def _check_stalled_records(report, flows, policies):
    study = report.failures
    assert study is not None and study.samples == 8
    for policy in policies:
        records = [r for r in study.records if r["policy"] == policy]
        assert [r["failure_set"] for r in records] == list(range(8))
        for r in records:
            assert r["stalled_flows"] == 2, r
            assert r["completion_s"] is None and r["slowdown"] is None
            assert set(r["stalled_pairs"]) == _stall_pairs(flows)
            assert "stalled" in r["status"]
            assert math.isfinite(r["p100_utilisation"])
            assert f"plane0/gpu{STALL_GPU}" in r["components"]
            assert f"plane1/gpu{STALL_GPU}" in r["components"]
        (summary,) = [s for s in study.summaries if s.policy == policy]
        assert summary.stalled_sets == 8 and summary.completion_s is None
        assert summary.slowdown is None and summary.p100_utilisation is not None
    assert study.components_per_set == {"cable": {"p50": 2.0, "max": 2},
                                         "nic_port": {"p50": 2.0, "max": 2}}
    # JSON without NaN or infinity: the report and the failure study
    json.dumps(report_dict(report), allow_nan=False)
    text = json.dumps(study.as_dict(), allow_nan=False)
    assert '"stalled_pairs"' in text and "NaN" not in text and "Infinity" not in text


def test_stalled_flows_are_reported_not_nan(stall_report, world):
    _check_stalled_records(stall_report, world["flows"], ("ecmp", "spray"))


def test_report_json_carries_the_failure_study(stall_report):
    data = json.loads(json.dumps(report_dict(stall_report), allow_nan=False))
    records = data["failures"]["records"]
    assert len(records) == 2 * 8
    assert all(r["completion_s"] is None and r["stalled_flows"] == 2 for r in records)
    assert all(r["gpu_seconds_lost"] == pytest.approx(64 * 130.0) for r in records)


def test_transient_crash_when_window_reaches_timeout(stall_report):
    study = stall_report.failures
    for policy in ("ecmp", "spray"):
        records = [r for r in study.records if r["policy"] == policy]
        for r in records:
            assert r["affected_flows"] >= 2         # GPU 5's two flows lost their paths
            assert r["crash"] is True
            assert r["stall_s"] == 30.0
            assert r["gpu_seconds_lost"] == pytest.approx(64 * (30.0 + 100.0))
        (summary,) = [s for s in study.summaries if s.policy == policy]
        assert summary.sets_hit == 8 and summary.crashed_sets == 8
        assert summary.window_s == 30.0
        assert summary.gpu_seconds_lost_mean == pytest.approx(64 * 130.0)


def test_transient_accounting_per_policy(world):
    """The transient of every policy from one set of per-set outcomes (spray's, with some
    sets made unhit): a window below the timeout stalls, one at or above crashes."""
    fabric, collective = world["fabric"], world["collective"]
    scen = scenario({**STALL, "chunk": 8}, policies=["ecmp", "spray"])
    batch = sample_failures(scen)
    res = solve_failure_sets("spray", scen, fabric, baseline("spray", world), batch, (0, 0))
    assert np.all(res.affected > 0)
    affected = res.affected.copy()
    affected[[1, 4]] = 0                                   # two sets that hit nothing
    stalled = res.stalled.copy()
    assert np.all(stalled > 0)                             # GPU 5 has no plane left
    # the transient alone: as if every flow still had a live path after the reaction
    res, stalling = res._replace(affected=affected, stalled=np.zeros_like(stalled)), res
    ideal = baseline("spray", world).fabric_end_s
    hit = affected > 0
    gpus = collective.gpus

    def records(policy, **failures):
        s = scenario({**STALL, **failures}, policies=["ecmp", "spray"])
        window = get(policy).reaction_window_s(s.failures)
        recs = set_records(policy, collective, [res], [baseline("spray", world)], fabric, s,
                           batch, ideal, ideal, window)
        return recs, failure_summary(policy, collective.name, recs, window)

    for policy in ("ecmp", "spray"):
        recs, summary = records(policy)                       # window 30 >= timeout 30
        assert [r["crash"] for r in recs] == hit.tolist()
        assert [r["gpu_seconds_lost"] for r in recs] == pytest.approx(
            np.where(hit, gpus * 130.0, 0.0).tolist())
        assert summary.crashed_sets == 6 and summary.sets_hit == 6
        recs, summary = records(policy, reconvergence_s=29.5)  # just below: a stall
        assert not any(r["crash"] for r in recs)
        assert [r["stall_s"] for r in recs] == pytest.approx(np.where(hit, 29.5, 0).tolist())
        assert [r["gpu_seconds_lost"] for r in recs] == pytest.approx(
            np.where(hit, gpus * 29.5, 0.0).tolist())
    recs, summary = records("mrc")                             # 50 us default
    assert not any(r["crash"] for r in recs)
    assert [r["stall_s"] for r in recs] == pytest.approx(np.where(hit, 50e-6, 0).tolist())
    assert [r["gpu_seconds_lost"] for r in recs] == pytest.approx(
        np.where(hit, gpus * 50e-6, 0.0).tolist())
    assert summary.gpu_seconds_lost_mean == pytest.approx(6 / 8 * gpus * 50e-6)
    assert summary.window_s == pytest.approx(50e-6)
    recs, summary = records("optimal")
    assert all(r["stall_s"] is None and r["gpu_seconds_lost"] is None and not r["crash"]
               for r in recs)
    assert summary.stall_s_mean is None and summary.window_s is None
    # a set that leaves a flow without a live path stalls the job past the transport
    # timeout: it crashes whatever the policy's reaction window, and costs the restart
    res = stalling
    for policy in ("mrc", "optimal"):
        recs, summary = records(policy)
        assert all(r["crash"] and r["completion_s"] is None for r in recs)
        assert [r["gpu_seconds_lost"] for r in recs] == pytest.approx([gpus * 130.0] * 8)
        assert summary.crashed_sets == 8 and summary.stalled_sets == 8


@pytest.mark.slow
def test_study_all_policies(world):
    report = analyze(scenario(STALL))
    _check_stalled_records(report, world["flows"], ("ecmp", "spray", "mrc", "optimal"))
    study = report.failures
    by = collections.defaultdict(list)
    for r in study.records:
        by[r["policy"]].append(r)
    # a GPU that lost every plane leaves its flows without a live path: whatever the policy
    # reacts with, the job stalls for good, fails past the transport timeout and restarts
    restart = 64 * 130.0           # the scenario's transport timeout plus restart
    for r in by["mrc"]:
        assert r["affected_flows"] >= 2
        assert r["crash"] is True and r["completion_s"] is None
        assert r["stall_s"] == pytest.approx(50e-6)     # mrc's reaction window still shows
        assert r["gpu_seconds_lost"] == pytest.approx(restart)
    for r in by["optimal"]:
        assert r["stall_s"] is None and r["crash"] is True
        assert r["gpu_seconds_lost"] == pytest.approx(restart)
    for policy in ("ecmp", "spray"):
        assert all(r["crash"] for r in by[policy])


# --------------------------------------------------------------------------- 11. reliability

def _rows(report_or_rows):
    rows = getattr(report_or_rows, "reliability", report_or_rows)
    return {r.policy: r for r in rows}


def test_reliability_events_from_used_cables():
    rate = 1e-3
    report = analyze(scenario(policies=["ecmp", "spray"],
                              reliability={"link_failures_per_hour": rate, "hours": 10.0}))
    assert report.failures is None
    rows = _rows(report)
    assert set(rows) == {"ecmp", "spray"}
    cables = 2 * 8 * 8
    spray, ecmp = rows["spray"], rows["ecmp"]
    assert spray.cables_used == cables                 # 8 EVs per plane over 8 spines
    assert spray.events_per_hour == pytest.approx(rate * cables)
    assert spray.fabric_events_per_hour == pytest.approx(rate * cables)
    assert ecmp.cables_used <= cables and ecmp.cables_used > 0
    assert ecmp.events_per_hour == pytest.approx(rate * ecmp.cables_used)
    assert ecmp.events_per_hour <= spray.events_per_hour
    for row in rows.values():                           # 5 s reconvergence < 30 s timeout
        assert row.crash_probability == 0.0 and row.crashes_per_hour == 0.0
        assert row.stall_s_per_hour == pytest.approx(row.events_per_hour * 5.0)


@pytest.mark.parametrize("reconvergence,crash", [(30.0, True), (45.0, True), (29.9, False)])
def test_reliability_crash_probability(world, reconvergence, crash):
    rel = {"link_failures_per_hour": 2e-3, "switch_failures_per_hour": 1e-3,
           "nic_port_failures_per_hour": 5e-4, "hours": 7.0}
    scen = scenario({"reconvergence_s": reconvergence, "transport_timeout_s": 30.0},
                    policies=["ecmp", "spray"], reliability=rel)
    base = {(p, 0): [baseline(p, world)] for p in ("ecmp", "spray")}
    rows = _rows(reliability_whatif(scen, world["fabric"], [world["collective"]], base))
    spray = rows["spray"]
    # spraying touches every cable, switch and NIC port of this all-GPU permutation; the
    # switches as built: 2 planes x (8 T0s + 4 T1s, each taking 2 uplinks of every T0)
    assert spray.cables_used == 128 and spray.switches_used == 24
    assert spray.nic_ports_used == 128
    events = 2e-3 * 128 + 1e-3 * 24 + 5e-4 * 128
    assert spray.events_per_hour == pytest.approx(events)
    assert spray.fabric_events_per_hour == pytest.approx(events)
    for row in rows.values():
        assert row.events_per_hour <= spray.events_per_hour + 1e-12
        expected = -math.expm1(-row.events_per_hour * 7.0) if crash else 0.0
        assert row.crash_probability == pytest.approx(expected, rel=1e-12, abs=0.0)
        assert row.window_s == reconvergence
        assert row.gpu_seconds_lost_per_event == pytest.approx(
            64 * (30.0 + 600.0) if crash else 64 * reconvergence)


def test_draw_index_inverts_drawn_component():
    """Named components are excluded from the random draws by their draw-order index."""
    from fabricjax.fabric.failures import (
        draw_index as _draw_index, drawn_component as _drawn_component, population,
    )
    from fabricjax.config import SwitchFailureConfig

    g = build_fabric(ClosConfig(gpus=100, planes=3, radix=16)).geometry
    configs = [(kind, FailureKindConfig()) for kind in ("links", "degraded", "nic_ports",
                                                        "planes")]
    configs += [("switches", SwitchFailureConfig(tier=t)) for t in ("t0", "t1", "any")]
    for kind, cfg in configs:
        for i in range(population(g, kind, cfg)):
            assert _draw_index(g, kind, cfg, _drawn_component(g, kind, cfg, i)) == i, (kind, i)
    t1 = _drawn_component(g, "switches", SwitchFailureConfig(tier="t1"), 0)
    assert _draw_index(g, "switches", SwitchFailureConfig(tier="t0"), t1) is None
