"""Bill of materials: closed forms against fabrics and networkx graphs built link by link."""

from __future__ import annotations

import math
from collections import Counter

import networkx as nx
import pytest

from fabricjax.fabric.bom import (
    DEFAULT_ASSUMPTIONS, MAX_BASELINE_TIERS, baseline_designs, bom, bom_comparison,
    fat_tree_bom, fat_tree_reach, mrc_claim_comparison, smallest_fabric, t0_ports,
    three_tier_fat_tree_bom, tiers_needed,
)
from fabricjax.core.errors import ScenarioError
from fabricjax.fabric.clos import build_fabric, clos_geometry
from fabricjax.config import ClosConfig

TWO_TIER_CONFIGS = [
    ClosConfig(gpus=64, planes=1, port_gbps=800.0, radix=16),
    ClosConfig(gpus=100, planes=8, port_gbps=100.0, radix=16),          # partial last T0
    ClosConfig(gpus=96, planes=4, port_gbps=200.0, radix=16, oversubscription=3.0),
    ClosConfig(gpus=1024, planes=2, port_gbps=400.0, radix=64),
]
STARGATE = ClosConfig(gpus=131_072, planes=8, port_gbps=100.0, radix=512)


# --------------------------------------------------------------------------- two tiers

@pytest.mark.parametrize("cfg", TWO_TIER_CONFIGS, ids=lambda c: f"{c.gpus}g{c.planes}p")
def test_two_tier_counts_match_built_fabric(cfg):
    """The analysed fabric has one logical spine per T0 uplink; built, logical spine s sits
    in physical spine s // bundle. Counted from the link arrays after that grouping."""
    fabric = build_fabric(cfg)
    g = clos_geometry(cfg)
    b = bom(cfg)
    P = cfg.planes
    bundle = b["bundles"]["t0-t1"]
    assert g.spines % bundle == 0
    physical = {}       # node id -> the switch it is part of as built
    for node in range(cfg.gpus, g.num_nodes):
        local = node - cfg.gpus - P * g.t0s
        if local < 0:
            physical[node] = ("t0", node)
        else:
            plane, spine = divmod(local, g.spines)
            physical[node] = ("t1", plane, spine // bundle)
    used = {physical[int(s)] for s in fabric.link_src if int(s) in physical}
    assert b["switches"] == len(used)
    assert b["switches_by_tier"] == {t: sum(1 for u in used if u[0] == t) for t in ("t0", "t1")}
    # links (both directions of a cable) and switch ports, counted from the link arrays
    tiers = Counter(fabric.tier.tolist())
    assert b["links_by_layer"] == {"host-t0": tiers[0], "t0-t1": tiers[1]}
    assert tiers[0] == tiers[3] and tiers[1] == tiers[2]
    out_ports = Counter(physical[int(s)] for s in fabric.link_src if int(s) in physical)
    assert b["switch_ports_used"] == {t: sum(n for u, n in out_ports.items() if u[0] == t)
                                      for t in ("t0", "t1")}
    assert max(out_ports.values()) <= cfg.radix
    # every T0 reaches every physical spine of its plane by the same number of cables
    ups = Counter((int(s), physical[int(d)]) for s, d, t in
                  zip(fabric.link_src, fabric.link_dst, fabric.tier) if t == 1)
    assert set(ups.values()) == {bundle}
    assert len(ups) == P * g.t0s * b["switches_per_plane"]["t1"]
    assert b["gpus_reached"] == cfg.radix * g.gpus_per_t0
    assert (b["below_full_size"] is None) == (g.t0s == cfg.radix)


def test_two_tier_modules_round_up_per_switch():
    # 100 GPUs, 8 x 100G, radix 16: per plane 12 full T0s + one with 4 GPUs, 8 spines
    b = bom(TWO_TIER_CONFIGS[1])
    assert b["modules_nic"] == 100                     # one 8-lane OSFP per NIC
    assert b["modules_by_layer"] == {"host-t0": 100 + 8 * 13,
                                     "t0-t1": 8 * (13 * 1 + 8 * math.ceil(13 / 8))}


def test_stargate_two_tier_closed_form():
    b = bom(STARGATE)
    assert b["switches_per_plane"] == {"t0": 512, "t1": 256}
    assert b["switches"] == 8 * 768 == 6144
    assert b["gpus_reached"] == 131_072 == 512**2 // 2
    assert b["links_by_layer"] == {"host-t0": 8 * 131_072, "t0-t1": 8 * 512 * 256}
    assert b["switch_ports_used"]["t0"] + b["switch_ports_used"]["t1"] == b["switch_ports_total"]
    # one 800G OSFP per NIC carries all 8 planes; one per 8 switch ports (8 x 100G breakout)
    assert b["ports_per_module"] == 8
    assert b["modules_nic"] == 131_072
    assert b["modules_switch"] == b["switch_ports_total"] // 8
    assert b["modules"] == 4 * 131_072
    assert b["transceivers"] == 2 * b["links"]
    assert b["watts_switches"] == 6144 * 2000.0
    assert b["watts_optics"] == 4 * 131_072 * 16.0


# --------------------------------------------------------------------------- fat trees

def _classic_fat_tree(k: int) -> nx.MultiGraph:
    """Al-Fares et al.'s k-ary fat tree, node by node: k pods of k/2 edge and k/2
    aggregation switches, (k/2)^2 cores, core (i, j) to aggregation i of every pod."""
    h = k // 2
    graph = nx.MultiGraph()
    for pod in range(k):
        for e in range(h):
            graph.add_node(("t0", pod, e), tier=0)
            for host in range(h):
                graph.add_edge(("gpu", pod, e, host), ("t0", pod, e), layer="host-t0")
            for a in range(h):
                graph.add_edge(("t0", pod, e), ("t1", pod, a), layer="t0-t1")
        for a in range(h):
            graph.nodes[("t1", pod, a)]["tier"] = 1
            for j in range(h):
                graph.add_edge(("t1", pod, a), ("t2", a, j), layer="t1-t2")
                graph.nodes[("t2", a, j)]["tier"] = 2
    return graph


def _sized_fat_tree(gpus: int, k: int) -> nx.MultiGraph:
    """A 3-tier fat tree for `gpus` hosts wired by the rule `three_tier_fat_tree_bom` counts:
    whole T0s, whole pods, and per T1 position j a group of ceil(pods/2) cores that takes
    the T0s' uplinks round robin (so every core also reaches pod 0)."""
    return _oversubscribed_fat_tree(gpus, k, k // 2, k // 2)


def _oversubscribed_fat_tree(gpus: int, k: int, down: int, up: int) -> nx.MultiGraph:
    """A 3-tier tree for `gpus` hosts with T0s of `down` hosts and `up` uplinks and 1:1 tiers
    above, wired as `fat_tree_bom` counts it: pods of k/2 T0s, each T0 linked once to each of
    its pod's `up` T1s; per T1 position j a group of ceil(pods/2) cores taking the uplinks
    round robin."""
    h = k // 2
    graph = nx.MultiGraph()
    t0s = math.ceil(gpus / down)
    pods = math.ceil(t0s / h)
    last_pod = t0s - (pods - 1) * h
    # a partial last pod: the fewest T1s whose h down ports take its T0s' uplinks, rounded
    # up to a divisor of `up` (equal bundles), found by trying every count
    last_t1s = min(n for n in range(1, up + 1) if up % n == 0 and last_pod * up <= n * h)

    def t1(t0: int, j: int) -> tuple:
        pod = t0 // h
        return ("t1", pod, j if pod < pods - 1 else j // (up // last_t1s))

    for gpu in range(gpus):
        graph.add_edge(("gpu", gpu), ("t0", gpu // down), layer="host-t0")
    for t0 in range(t0s):
        for j in range(up):
            graph.add_edge(("t0", t0), t1(t0, j), layer="t0-t1")
    for j in range(up):
        for t0 in range(t0s):
            graph.add_edge(t1(t0, j), ("t2", j, t0 % math.ceil(pods / 2)), layer="t1-t2")
    return graph


@pytest.mark.parametrize("ratio, split", [(3.0, (6, 2)), (5 / 3, (5, 3))])
def test_oversubscribed_fat_tree_is_buildable(ratio, split):
    """Oversubscribed at the T0s only (as a designer builds it), 1:1 above: the closed form's
    switches and links match a tree wired link by link for every size up to its reach, no
    switch needs more than k ports, and the cut between the halves of the pods carries all
    the T0s' uplinks can send (full bisection above the T0s) when the core groups divide."""
    k, h = 8, 4
    down, up = split
    assert t0_ports(k, ratio) == split
    reach = fat_tree_reach(k, 3, ratio)
    assert reach == 2 * h ** 2 * down                  # k pods of h T0s of `down` hosts
    for gpus in range(2, reach + 1):
        graph = _oversubscribed_fat_tree(gpus, k, down, up)
        switches, layers, max_degree = _count(graph)
        b = fat_tree_bom(gpus, k, 800.0, tiers=3, oversubscription=ratio)
        assert b["switches_by_tier"] == {"t0": switches["t0"], "t1": switches["t1"],
                                         "t2": switches["t2"]}, gpus
        assert b["links_by_layer"] == dict(layers), gpus
        assert b["t0_down_up"] == [down, up]
        assert max_degree <= k and nx.is_connected(graph), gpus
        t0s = math.ceil(gpus / down)
        pods = math.ceil(t0s / h)
        if h % math.ceil(pods / 2) == 0 and pods >= 2:
            left_t0s = (pods // 2) * h
            hosts = [min(down, gpus - t * down) for t in range(t0s)]
            sends = [min(n, up) for n in hosts]
            expected = min(sum(sends[:left_t0s]), sum(sends[left_t0s:]))
            assert _bisection_flow_t0(graph, left_t0s * down) == expected, gpus
    with pytest.raises(ScenarioError, match="exceed"):
        fat_tree_bom(reach + 1, k, 800.0, tiers=3, oversubscription=ratio)


def _bisection_flow_t0(graph: nx.MultiGraph, left_hosts: int) -> int:
    """Max flow from hosts numbered below `left_hosts` to the others, unit links."""
    flow = nx.DiGraph()
    for u, v in graph.edges():
        for a, b in ((u, v), (v, u)):
            cap = flow.get_edge_data(a, b, {"capacity": 0})["capacity"]
            flow.add_edge(a, b, capacity=cap + 1)
    for node in list(flow):
        if node[0] == "gpu":
            if node[1] < left_hosts:
                flow.add_edge("src", node, capacity=1)
            else:
                flow.add_edge(node, "dst", capacity=1)
    return int(nx.maximum_flow_value(flow, "src", "dst"))


def _count(graph: nx.MultiGraph) -> tuple[Counter, Counter, int]:
    switches = Counter(node[0] for node in graph if node[0] != "gpu")
    layers = Counter(layer for _, _, layer in graph.edges(data="layer"))
    max_degree = max(d for node, d in graph.degree() if node[0] != "gpu")
    return switches, layers, max_degree


@pytest.mark.parametrize("k", [4, 8])
def test_three_tier_closed_form_matches_classic_fat_tree(k):
    graph = _classic_fat_tree(k)
    switches, layers, max_degree = _count(graph)
    b = three_tier_fat_tree_bom(k**3 // 4, k, 800.0)
    assert b["gpus_reached"] == fat_tree_reach(k, 3) == k**3 // 4
    assert b["switches_by_tier"] == {"t0": switches["t0"], "t1": switches["t1"],
                                     "t2": switches["t2"]}
    assert switches["t2"] == (k // 2) ** 2 and b["switches"] == 5 * k * k // 4
    assert b["links_by_layer"] == dict(layers)
    assert max_degree == k and b["switch_ports_used"] == {"t0": k**3 // 2, "t1": k**3 // 2,
                                                          "t2": k**3 // 4}
    assert b["switch_ports_total"] == sum(b["switch_ports_used"].values())


@pytest.mark.parametrize("k", [4, 8])
def test_three_tier_sized_below_maximum_is_buildable(k):
    for gpus in range(2, k**3 // 4 + 1):
        graph = _sized_fat_tree(gpus, k)
        switches, layers, max_degree = _count(graph)
        b = three_tier_fat_tree_bom(gpus, k, 800.0)
        assert b["switches_by_tier"] == {"t0": switches["t0"], "t1": switches["t1"],
                                         "t2": switches["t2"]}, gpus
        assert b["links_by_layer"] == dict(layers), gpus
        assert max_degree <= k, gpus                      # the core count is enough
        assert nx.is_connected(graph), gpus
        # round-robin uplinks split every pod evenly over its core group when the group size
        # ceil(pods/2) divides k/2 (always at full size): then the bisection is full
        group = math.ceil(math.ceil(gpus / (k // 2) ** 2) / 2)
        if (k // 2) % group == 0:
            assert _bisection_flow(graph, k) == _half_hosts(gpus, k), gpus


def _half_hosts(gpus: int, k: int) -> int:
    h = k // 2
    pods = math.ceil(gpus / (h * h))
    left = min(gpus, (pods // 2) * h * h)
    return min(left, gpus - left)


def _bisection_flow(graph: nx.MultiGraph, k: int) -> int:
    """Max flow from the hosts of the first half of the pods to the rest, unit links."""
    h = k // 2
    gpus = sum(1 for node in graph if node[0] == "gpu")
    pods = math.ceil(gpus / (h * h))
    if (pods // 2) * h * h in (0, gpus):
        return 0
    return _bisection_flow_t0(graph, (pods // 2) * h * h)


def test_fat_tree_full_size_formulas():
    for k in (4, 8, 16):
        h = k // 2
        for tiers in (3, 4):
            b = fat_tree_bom(fat_tree_reach(k, tiers), k, 400.0, tiers=tiers, planes=2)
            per_plane = b["switches_per_plane"]
            assert sum(per_plane.values()) == (2 * tiers - 1) * h ** (tiers - 1)
            assert per_plane[f"t{tiers - 1}"] == h ** (tiers - 1)
            assert b["switch_ports_used"] == {t: n * k for t, n in b["switches_by_tier"].items()}
            assert set(b["links_by_layer"].values()) == {2 * fat_tree_reach(k, tiers)}


def test_fat_tree_refuses_beyond_reach():
    with pytest.raises(ScenarioError, match="65536"):
        three_tier_fat_tree_bom(131_072, 64, 800.0)


# --------------------------------------------------------------------------- optics and watts

def test_optics_at_both_ends_of_every_link():
    for b in (bom(TWO_TIER_CONFIGS[0]), three_tier_fat_tree_bom(1000, 16, 800.0)):
        assert b["ports_per_module"] == 1
        assert b["transceivers"] == 2 * b["links"] == b["modules"]
        assert all(b["modules_by_layer"][n] == 2 * links
                   for n, links in b["links_by_layer"].items())
    copper = bom(TWO_TIER_CONFIGS[0], overrides={"host_links": "copper"})
    assert copper["copper_links"] == copper["links_by_layer"]["host-t0"]
    assert copper["transceivers"] == 2 * copper["links_by_layer"]["t0-t1"] == copper["modules"]
    assert copper["modules_nic"] == 0


def test_overrides_change_watts():
    base = bom(STARGATE)
    flat = bom(STARGATE, overrides={"switch_watts": 1500.0})
    assert flat["watts_switches"] == 6144 * 1500.0
    assert flat["watts_optics"] == base["watts_optics"]
    lpo = bom(STARGATE, overrides={"optic_watts": {800: 8.0}})
    assert lpo["watts_optics"] == base["watts_optics"] / 2
    assert lpo["watts"] == base["watts_switches"] + base["watts_optics"] / 2
    # no breakout: one 100G module per port, 3.5 W each
    single = bom(STARGATE, overrides={"module_gbps": 100.0})
    assert single["modules"] == base["transceivers"]
    assert single["watts_optics"] == base["transceivers"] * 3.5
    # switch power scales with capacity: a 25.6T box draws half a 51.2T one
    assert bom(TWO_TIER_CONFIGS[0])["watts_per_switch"] == 2000.0 * 16 * 800 / 51_200
    assert DEFAULT_ASSUMPTIONS.host_links == "optics"


def test_bad_overrides_name_the_field():
    with pytest.raises(ScenarioError, match="bom.switch_wats"):
        bom(STARGATE, overrides={"switch_wats": 1.0})
    with pytest.raises(ScenarioError, match="bom.host_links"):
        bom(STARGATE, overrides={"host_links": "fibre"})
    with pytest.raises(ScenarioError, match="bom.optic_watts"):
        bom(ClosConfig(gpus=64, planes=1, port_gbps=3200.0, radix=16))


# --------------------------------------------------------------------------- tiers, claim

def test_smallest_fabric_tiers():
    assert tiers_needed(512**2 // 2, 512) == 2
    assert tiers_needed(512**2 // 2 + 1, 512) == 3
    assert tiers_needed(64**3 // 4, 64) == 3
    assert tiers_needed(131_072, 64) == 4
    tiers, b = smallest_fabric(131_072, 512, 100.0, planes=8)
    assert tiers == 2 and b["switches"] == 6144
    tiers, b = smallest_fabric(65_536, 64, 800.0)
    assert tiers == 3 and b["switches"] == 5120
    # a 102.4T ASIC (128 x 800G) reaches 131,072 GPUs in three tiers
    tiers, b = smallest_fabric(131_072, 128, 800.0)
    assert tiers == 3 and b["switches"] == 5 * 131_072 // 128


def test_bom_comparison_same_size():
    cmp = bom_comparison(STARGATE, bom(STARGATE, tiers=3))
    assert cmp["tiers"] == (2, 3)
    assert cmp["ratio"] == cmp["ratio_per_gpu"]


def test_published_claim_131k():
    """2/3 the optics and 3/5 the switches hold per GPU, physical modules counted, against a
    3-tier 64 x 800G fat tree (which tops out at 65,536 GPUs); as one fabric for 131,072 GPUs
    the single-plane design needs 4 tiers and the ratios are 1/2 and 3/7."""
    claim = mrc_claim_comparison()
    three = claim["three_tier"]
    assert three["tiers"] == (2, 3) and three["gpus"] == (131_072, 65_536)
    assert three["ratio_per_gpu"]["switches"] == pytest.approx(3 / 5, rel=1e-12)
    assert three["ratio_per_gpu"]["modules"] == pytest.approx(2 / 3, rel=1e-12)
    assert three["ratio_per_gpu"]["watts"] == pytest.approx(0.625, abs=0.01)
    single = claim["single_fabric"]
    assert claim["single_plane_tiers"] == 4 and single["tiers"] == (2, 4)
    assert single["ratio"]["switches"] == pytest.approx(3 / 7, rel=1e-12)
    assert single["ratio"]["modules"] == pytest.approx(1 / 2, rel=1e-12)
    # with copper host links the optics ratio against three tiers falls to 1/2
    copper = mrc_claim_comparison(overrides={"host_links": "copper"})["three_tier"]
    assert copper["ratio_per_gpu"]["modules"] == pytest.approx(1 / 2, rel=1e-12)


# --------------------------------------------------------------------------- baselines

def test_baseline_is_what_a_designer_would_build():
    """Same NIC bandwidth on one plane, the ASIC's ports ganged to it, same oversubscription;
    none (with the reason) when that is not a fabric anyone would build."""
    # quickstart: 64 x 100G ganged by 8 is an 8-port 800G switch, 5 tiers for 1,024 GPUs
    quick = baseline_designs(ClosConfig(gpus=1024, planes=8, port_gbps=100.0, radix=64))
    assert quick.designs == [] and "need 5 tiers" in quick.note
    assert MAX_BASELINE_TIERS == 4
    # 3:1 at 512 x 100G: the baseline is 3:1 too (it was 1:1 before: 0.26x the switches)
    over = ClosConfig(gpus=65_536, planes=8, port_gbps=100.0, radix=512, oversubscription=3)
    base = baseline_designs(over)
    assert [(b["tiers"], b["t0_down_up"], b["radix"], b["port_gbps"]) for b in base.designs] \
        == [(3, [48, 16], 64, 800.0)]
    assert base.note is None
    full = baseline_designs(over.model_copy(update={"oversubscription": 1.0})).designs[0]
    assert base.designs[0]["switches"] < full["switches"]
    # 2 x 1.6T: a 3.2T single-plane port has no optic in the table -- a note, not an error
    fast = baseline_designs(ClosConfig(gpus=1024, planes=2, port_gbps=1600.0, radix=64))
    assert fast.designs == [] and "no 3200G module" in fast.note
    four = baseline_designs(ClosConfig(gpus=1024, planes=4, port_gbps=1600.0, radix=64))
    assert four.designs == [] and "6400G" in four.note
    # 4 planes of 200G on 256 ports: 64 x 800G, three tiers for 8,192 GPUs
    (tree,) = baseline_designs(ClosConfig(gpus=8192, planes=4, port_gbps=200.0,
                                            radix=256)).designs
    assert (tree["tiers"], tree["radix"], tree["port_gbps"]) == (3, 64, 800.0)
    # ports that do not gang evenly are named; a single plane is its own baseline
    odd = baseline_designs(ClosConfig(gpus=256, planes=8, port_gbps=100.0, radix=68))
    assert odd.designs and "4 of each switch's 68 ports are left over" in odd.note
    assert baseline_designs(ClosConfig(gpus=64, planes=1, port_gbps=800.0,
                                         radix=16)).note.startswith("none")
    # a split the ganged radix cannot make exactly is named: 80 ports 3:1 is 60:20, 10 -> 8:2
    near = baseline_designs(ClosConfig(gpus=512, planes=8, port_gbps=100.0, radix=80,
                                         oversubscription=3))
    assert near.designs[0]["t0_down_up"] == [8, 2] and "4:1" in near.note


# --------------------------------------------------------------------------- below full size

@pytest.mark.parametrize("cfg, t0s, spines, bundle", [
    # 4 x 200G, 512 ports at 3:1: 384 down, 128 up; 43 T0s need ceil(43*128/512) = 11
    # spines' ports, and 16 is the fewest that divide 128: bundles of 8
    (ClosConfig(gpus=16_384, planes=4, port_gbps=200.0, radix=512, oversubscription=3),
     43, 16, 8),
    # 8 x 100G, 64 ports at 1:1: 32 T0s of 32 GPUs, 32*32/64 = 16 spines, bundles of 2
    (ClosConfig(gpus=1024, planes=8, port_gbps=100.0, radix=64), 32, 16, 2),
    # 2 x 400G, 64 ports: 19 T0s (the last with 24 GPUs), ceil(19*32/64) = 10 -> 16
    (ClosConfig(gpus=600, planes=2, port_gbps=400.0, radix=64), 19, 16, 2),
], ids=["16k-3to1", "1k", "600"])
def test_two_tier_below_full_size_against_hand_counts(cfg, t0s, spines, bundle):
    b = bom(cfg)
    P, (down, up) = cfg.planes, b["t0_down_up"]
    assert b["switches_per_plane"] == {"t0": t0s, "t1": spines}
    assert b["bundles"] == {"t0-t1": bundle} and spines * bundle == up
    assert b["switches"] == P * (t0s + spines)
    assert b["links_by_layer"] == {"host-t0": P * cfg.gpus, "t0-t1": P * t0s * up}
    assert b["switch_ports_used"] == {"t0": P * (cfg.gpus + t0s * up), "t1": P * t0s * up}
    assert b["switch_ports_total"] == b["switches"] * cfg.radix
    ppm = min(8, int(800 // cfg.port_gbps))
    last = cfg.gpus - (t0s - 1) * down
    t0_modules = (t0s - 1) * math.ceil(down / ppm) + math.ceil(last / ppm) \
        + t0s * math.ceil(up / ppm)
    t1_modules = spines * math.ceil(t0s * bundle / ppm)
    nic_modules = cfg.gpus * math.ceil(P / ppm)
    assert b["modules"] == nic_modules + P * (t0_modules + t1_modules)
    watts_switch = 2000.0 * cfg.radix * cfg.port_gbps / 51_200
    assert b["watts_switches"] == b["switches"] * watts_switch
    assert b["watts"] == b["watts_switches"] + b["modules"] * 16.0
    assert f"{t0s} of {cfg.radix} T0s" in b["below_full_size"]


def test_sixteen_thousand_gpus_at_three_to_one():
    """16,384 GPUs on 4 x 200G planes at 3:1: 236 switches as built (not 684), against the
    three-tier single-plane tree: no longer twice the switches."""
    cfg = ClosConfig(gpus=16_384, planes=4, port_gbps=200.0, radix=512, oversubscription=3)
    b = bom(cfg)
    assert b["switches"] == 4 * (43 + 16) == 236
    assert b["modules"] == 16_384 + 4 * (42 * 96 + 64) + 4 * (43 * 32 + 16 * 86) == 43_776
    (single,) = baseline_designs(cfg).designs
    # 1 x 800G of 128 ports at 3:1 (96:32): 171 T0s, 3 pods (the last of 43 T0s: 22 T1s'
    # ports, rounded up to 32), 32 core groups of 2
    assert single["switches_per_plane"] == {"t0": 171, "t1": 96, "t2": 64}
    ratio = (b["switches"] / b["gpus"]) / (single["switches"] / single["gpus"])
    assert ratio == pytest.approx(236 / 331)


def test_full_size_unchanged():
    """131,072 GPUs on 8 x 100G planes of 512 ports fill every spine: nothing bundles."""
    b = bom(STARGATE)
    assert b["bundles"] == {"t0-t1": 1} and b["below_full_size"] is None
    assert b["switches_per_plane"] == {"t0": 512, "t1": 256} and b["switches"] == 6144
    assert b["links"] == 8 * (131_072 + 512 * 256)
    assert b["modules"] == 4 * 131_072 and b["watts"] == 6144 * 2000.0 + 4 * 131_072 * 16.0
    tree = fat_tree_bom(fat_tree_reach(64, 3), 64, 800.0, tiers=3)
    assert tree["below_full_size"] is None and tree["bundles"] == {"t0-t1": 1}


def test_single_plane_baseline_bundles_by_the_same_rule():
    # 1,000 GPUs, 2 x 400G on 128 ports: 16 T0s, 8 spines in bundles of 8; the baseline,
    # 1 x 800G on 64 ports, has 32 T0s and 16 spines in bundles of 2
    cfg = ClosConfig(gpus=1000, planes=2, port_gbps=400.0, radix=128)
    assert bom(cfg)["switches_per_plane"] == {"t0": 16, "t1": 8}
    (single,) = baseline_designs(cfg).designs
    assert single["tiers"] == 2 and single["switches_per_plane"] == {"t0": 32, "t1": 16}
    assert single["bundles"] == {"t0-t1": 2}
    # a three-tier tree's partial last pod: 40 GPUs on radix 8 are 10 T0s in pods of 4,
    # 4, 2; the last pod's 2 T0s x 4 uplinks fill 2 T1s of 4 down ports (bundles of 2)
    tree = fat_tree_bom(40, 8, 800.0, tiers=3)
    assert tree["switches_per_plane"] == {"t0": 10, "t1": 4 + 4 + 2, "t2": 4 * 2}
    assert tree["bundles"] == {"t0-t1": 2} and "40 of 128 GPUs" in tree["below_full_size"]
