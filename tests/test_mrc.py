"""MRC adaptive spraying (`fabricjax.policies.mrc`) against a slow reference of one iteration's
measurement, its invariants on random small fabrics, the adaptation's benefit over oblivious
spraying, determinism and retracing, eager == jit, and dead links (the bundled quickstart's mrc
is checked in `test_analysis.py`, beside its other policies)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fabricjax.engine.phase import offered_demand, solve_policy_phase
from fabricjax.solver.maxmin import TOP_LINKS
from fabricjax.study.analyze import analyze
from fabricjax.fabric.build import build
from fabricjax.fabric.clos import build_fabric
from fabricjax.fabric.paths import clos_path_links, hashed_slots, spread_slots
from fabricjax.config import ClosConfig
from fabricjax.scenario import parse_scenario
from fabricjax.core.status import Status
from fabricjax.policies.mrc import LOCAL_SLACK
from fabricjax.engine.phase import run_phase
from fabricjax.solver.maxmin import uniform_live_split
from fabricjax.workload.build import build_workload

from adapters import (MRC_BALANCED, MRC_ENDINGS, MRC_ITERATION_CAP, MRC_SETTLED,
                      MRC_STATUS_NAMES,
                      solve_mrc_phase)
from adapters import clos_mrc_fixed_point as mrc_fixed_point
from conftest import assert_close
from reference import (
    TIER_T0_T1, TIER_T1_T0, node_name, reference_fabric_graph, reference_paths,
)

SEEDS = st.integers(0, 2**32 - 1)
# float32 utilisations against the float64 reference: a threshold comparison closer than this
# (relative) may go either way and is not held against the library
TIE = 1e-4


# --------------------------------------------------------------------------- reference

class ReferenceClos:
    """A fabric as the reference graph (built link by link from the definition), with the map
    from its directed edges to the library's link ids (through the documented node numbering,
    checked in test_fabric_paths) and each link's tier read off the graph."""

    def __init__(self, cfg: ClosConfig):
        self.cfg = cfg
        self.fabric = build_fabric(cfg)
        self.geom = self.fabric.geometry
        self.graph = reference_fabric_graph(cfg)
        g = self.graph.graph
        self.spines = g["spines"]
        self.planes = g["planes"]

        def name(node):
            return node_name(node, g["gpus"], g["planes"], g["t0s"], g["spines"])

        self.link_of = {(name(s), name(d)): i
                        for i, (s, d) in enumerate(zip(self.fabric.link_src, self.fabric.link_dst))}
        self.tier = np.empty(self.fabric.num_links, dtype=np.int64)
        for (u, v), i in self.link_of.items():
            self.tier[i] = self.graph.edges[u, v]["tier"]
        self._paths = {}

    def ev_links(self, src, dst, plane, spine) -> list[list[list[int]]]:
        """Link ids of every EV's path, [F][K][hops], found by walking the graph."""
        out = []
        for f in range(spine.shape[0]):
            row = []
            for k in range(spine.shape[1]):
                key = (int(src[f]), int(dst[f]), int(plane[f, k]), int(spine[f, k]))
                if key not in self._paths:
                    edges = reference_paths(self.graph, *key)
                    self._paths[key] = [self.link_of[e] for e in edges]
                row.append(self._paths[key])
            out.append(row)
        return out


def reference_measure(ref: ReferenceClos, src, dst, plane, spine, demand, capacity, alive,
                      threshold) -> dict:
    """MRC's measurement of one EV set, from the module docstring, in float64 loops:
    spray equally over live EVs, link utilisation, per-EV controlled utilisation (worst of the
    T0->T1 and T1->T0 hops; inf when the path has a dead link), the marked mask (only EVs of
    flows whose GPUs sit under different T0s), P100 over usable links and the fabric overload
    (sum over t0-t1 and t1-t0 links of max(load - cap, 0) / their total load)."""
    capacity = np.asarray(capacity, dtype=np.float64)
    alive = np.asarray(alive, dtype=bool)
    demand = np.asarray(demand, dtype=np.float64)
    num_flows, num_slots = spine.shape
    paths = ref.ev_links(src, dst, plane, spine)
    dead = np.array([[not all(alive[i] for i in paths[f][k]) for k in range(num_slots)]
                     for f in range(num_flows)], dtype=bool).reshape(num_flows, num_slots)
    # a path of four hops goes through a spine: the flow's GPUs are under different T0s
    cross = np.array([len(paths[f][0]) == 4 for f in range(num_flows)], dtype=bool)
    live = (~dead).sum(axis=1)
    load = np.zeros(capacity.shape[0])
    for f in range(num_flows):
        for k in range(num_slots):
            if not dead[f, k]:
                np.add.at(load, paths[f][k], demand[f] / live[f])
    usable = alive & (capacity > 0)
    util = np.where(usable, load / np.where(usable, capacity, 1.0),
                    np.where(load > 0, np.inf, 0.0))
    controlled = np.zeros((num_flows, num_slots))
    for f in range(num_flows):
        for k in range(num_slots):
            if dead[f, k]:
                controlled[f, k] = np.inf
            elif cross[f]:
                controlled[f, k] = max(util[l] for l in paths[f][k]
                                       if ref.tier[l] in (TIER_T0_T1, TIER_T1_T0))
    fabric = np.isin(ref.tier, (TIER_T0_T1, TIER_T1_T0))
    excess = np.maximum(load - threshold * np.where(usable, capacity, 0.0), 0.0)
    overload = excess[fabric].sum() / max(load[fabric].sum(), 1e-30)

    # an EV behind a dead NIC port (first or last hop) is retired for good: never marked
    host_dead = np.array([[not (alive[paths[f][k][0]] and alive[paths[f][k][-1]])
                           for k in range(num_slots)] for f in range(num_flows)],
                         dtype=bool).reshape(num_flows, num_slots)

    # an EV's own level, when higher: at each of its controlled hops the mean utilisation of
    # the usable links leaving the same switch upward (T0 -> T1) or entering it downward
    # (T1 -> T0), the worst of its hops
    usable_ev = cross[:, None] & ~host_dead & ~dead
    src_node, dst_node = ref.fabric.link_src, ref.fabric.link_dst

    def sibling_mean(link):
        if ref.tier[link] == TIER_T0_T1:
            same = (ref.tier == TIER_T0_T1) & (src_node == src_node[link])
        else:
            same = (ref.tier == TIER_T1_T0) & (dst_node == dst_node[link])
        same &= usable
        return util[same].mean() if same.any() else 0.0

    local = np.zeros((num_flows, num_slots))
    for f in range(num_flows):
        for k in range(num_slots):
            if cross[f]:
                local[f, k] = max(sibling_mean(l) for l in paths[f][k]
                                  if ref.tier[l] in (TIER_T0_T1, TIER_T1_T0))

    # a dead EV is retired where it stands, and replaced only when its plane has no usable
    # EV left in its flow
    plane_empty = np.array([[not any(usable_ev[f, j] for j in range(num_slots)
                                     if plane[f, j] == plane[f, k])
                             for k in range(num_slots)] for f in range(num_flows)], bool)

    def marked_at(level):
        own = level * np.maximum(1.0, local * (1 + LOCAL_SLACK))
        return cross[:, None] & ~host_dead & ((dead & plane_empty) |
                                              (~dead & (controlled > own)))

    return dict(
        load=load, util=util, dead=dead, cross=cross, controlled=controlled, host_dead=host_dead,
        marked=marked_at(threshold),
        level=threshold * np.maximum(1.0, local * (1 + LOCAL_SLACK)),
        replaced=cross[:, None] & ~host_dead & dead & plane_empty,
        marked_strict=marked_at(threshold * (1 + TIE)),   # certainly marked in float32
        marked_loose=marked_at(threshold * (1 - TIE)),    # possibly marked in float32
        p100=util[usable].max() if usable.any() else -np.inf,
        overload=overload,
    )


# --------------------------------------------------------------------------- random cases

# TINY: 2 planes, 4 T0s x 4 spines, last T0 short. SKEWED: 3 planes, 2:1 oversubscribed
# (8 down, 4 up), 3 T0s with the last one short.
TINY = ClosConfig(gpus=14, planes=2, radix=8)
SKEWED = ClosConfig(gpus=21, planes=3, radix=12, oversubscription=2)
_REFS: dict = {}


def reference_clos(cfg: ClosConfig) -> ReferenceClos:
    key = tuple(sorted(cfg.model_dump().items()))
    if key not in _REFS:
        _REFS[key] = ReferenceClos(cfg)
    return _REFS[key]


def random_case(ref: ReferenceClos, rng: np.random.Generator, *, flows: int, slots: int,
                dead_links: int) -> dict:
    """Random flows (a quarter of them inside one T0), spread or hashed EVs, demands up to the
    NIC rate, link capacities scattered around the port rate (so that every link's utilisation
    is distinct and a wrong link id shows), and `dead_links` random dead links of any tier."""
    geom = ref.geom
    n, per_t0 = geom.gpus, geom.gpus_per_t0
    src = rng.integers(0, n, size=flows)
    dst = (src + rng.integers(1, n, size=flows)) % n
    for f in range(flows // 4):
        t0 = src[f] // per_t0
        mates = [g for g in range(t0 * per_t0, min((t0 + 1) * per_t0, n)) if g != src[f]]
        if mates:
            dst[f] = rng.choice(mates)
    if rng.random() < 0.5:
        plane, spine = spread_slots(geom, flows, slots, rng)
    else:
        plane, spine = hashed_slots(geom, flows, slots // geom.planes, rng)
    demand = (rng.uniform(0.3, 1.0, size=flows) * geom.nic_gbps).astype(np.float32)
    capacity = (ref.fabric.capacity * rng.uniform(0.5, 1.5, size=ref.fabric.num_links)
                ).astype(np.float32)
    alive = np.ones(ref.fabric.num_links, dtype=bool)
    alive[rng.choice(ref.fabric.num_links, size=dead_links, replace=False)] = False
    return dict(src=src.astype(np.int32), dst=dst.astype(np.int32),
                plane=np.ascontiguousarray(plane), spine=np.ascontiguousarray(spine),
                demand=demand, capacity=capacity, alive=alive)


_mrc_jit = jax.jit(mrc_fixed_point, static_argnums=0, static_argnames=("max_iters", "patience"))


def run_mrc(ref, case, *, seed, threshold, damping, tol, max_iters, patience, jit=True):
    """mrc_fixed_point on a random case, under strict dtype promotion (always, so that the
    promotion mode never makes a second compile of the same shapes)."""
    fn = _mrc_jit if jit else mrc_fixed_point
    with jax.numpy_dtype_promotion("strict"):
        out = fn(ref.geom, case["src"], case["dst"], case["plane"], case["spine"],
                 case["demand"], case["capacity"], case["alive"], jax.random.key(seed),
                 np.float32(threshold), np.float32(damping), np.float32(tol),
                 max_iters=max_iters, patience=patience)
    return jax.device_get(out)


def measure(ref, case, spine, threshold):
    return reference_measure(ref, case["src"], case["dst"], case["plane"], spine, case["demand"],
                             case["capacity"], case["alive"], threshold)


def pick_threshold(controlled: np.ndarray, rng) -> float:
    """A threshold in the widest gap between the finite controlled utilisations around their
    median (some EVs above, some below, none within float32 noise of it)."""
    values = np.unique(controlled[np.isfinite(controlled) & (controlled > 0)])
    if values.size < 2:
        return float(rng.uniform(0.5, 1.5))
    lo, hi = values.size // 4, max(values.size * 3 // 4, values.size // 4 + 1)
    gaps = values[lo + 1:hi + 1] - values[lo:hi]
    i = lo + int(np.argmax(gaps))
    return float((values[i] + values[i + 1]) / 2)


# --------------------------------------------------------------------------- 1. one iteration

T1_FLOWS, T1_SLOTS = 16, 6


def live_alternative(ref: ReferenceClos, case: dict, dead: np.ndarray) -> np.ndarray:
    """bool[F, K]: the EV's path is dead and another spine of its plane has a live path."""
    out = np.zeros_like(dead)
    for f, k in zip(*np.nonzero(dead)):
        others = np.array([[s for s in range(ref.spines) if s != case["spine"][f, k]]])
        if others.size:
            paths = ref.ev_links(case["src"][f:f + 1], case["dst"][f:f + 1],
                                 np.full_like(others, case["plane"][f, k]), others)[0]
            out[f, k] = any(all(case["alive"][l] for l in hops) for hops in paths)
    return out


@settings(max_examples=15, deadline=None)
@given(seed=SEEDS, dead_links=st.integers(0, 3))
def test_first_measurement_matches_reference(seed, dead_links):
    """trace[0] and excess_trace[0] (plain spraying) equal the slow reference; with damping 0
    no congested EV moves, so when no EV is on a dead path the final state is the initial
    one: its marked count, status and residual are the reference's. (Whether damping also
    scales the replacement of EVs on dead paths is tested below.)"""
    ref = reference_clos(TINY)
    rng = np.random.default_rng(seed)
    case = random_case(ref, rng, flows=T1_FLOWS, slots=T1_SLOTS, dead_links=dead_links)
    probe = measure(ref, case, case["spine"], 1.0)
    threshold = pick_threshold(probe["controlled"], rng)
    expect = measure(ref, case, case["spine"], threshold)
    out = run_mrc(ref, case, seed=seed, threshold=threshold, damping=0.0, tol=0.01,
                  max_iters=1, patience=5)

    assert out.trace.shape == out.excess_trace.shape == (2,)
    assert out.trace.dtype == out.excess_trace.dtype == np.float32
    assert_close(out.trace[0], expect["p100"])
    assert_close(out.excess_trace[0], expect["overload"])
    retired = expect["dead"] & expect["cross"][:, None]
    congested = ~expect["dead"]
    np.testing.assert_array_equal(out.spine[congested], case["spine"][congested])
    if retired.any():
        assert int(out.iterations) == 1
        return
    n_marked = int(out.marked)
    assert expect["marked_strict"].sum() <= n_marked <= expect["marked_loose"].sum()
    np.testing.assert_array_equal(out.spine, case["spine"])
    assert int(out.iterations) == (1 if n_marked else 0)
    assert int(out.status) == (MRC_ITERATION_CAP if n_marked else MRC_BALANCED)
    assert_close(out.residual, expect["overload"])
    assert_close(out.trace[-1], expect["p100"])


@settings(max_examples=15, deadline=None)
@given(seed=SEEDS, dead_links=st.integers(0, 3), damping=st.sampled_from([0.4, 1.0]))
def test_one_iteration_moves_only_marked_evs_within_their_plane(seed, dead_links, damping):
    """One reaction step: only marked EVs move, each to another spine of its plane; with
    damping 1 every EV on a dead path that MRC replaces (its flow has no usable EV left on
    its plane) and that has a live alternative moves, and the other dead ones stay (retired
    where they are); trace[1] and
    excess_trace[1] are the reference's measurement of the moved EV set."""
    ref = reference_clos(TINY)
    rng = np.random.default_rng(seed)
    case = random_case(ref, rng, flows=T1_FLOWS, slots=T1_SLOTS, dead_links=dead_links)
    threshold = float(rng.uniform(0.6, 1.4))
    before = measure(ref, case, case["spine"], threshold)
    out = run_mrc(ref, case, seed=seed, threshold=threshold, damping=damping, tol=0.01,
                  max_iters=1, patience=5)
    moved = out.final_spine != case["spine"]
    assert not np.any(moved & ~before["marked_loose"]), "an unmarked EV moved"
    assert np.all((out.final_spine >= 0) & (out.final_spine < ref.spines))
    if damping == 1.0:
        must = live_alternative(ref, case, before["replaced"])
        assert np.all(moved[must]), "an EV on a dead path stayed at damping 1"
    retired = before["dead"] & ~before["replaced"]
    assert not np.any(moved[retired]), "a retired EV moved while its plane had live ones"
    if int(out.iterations) == 1:
        after = measure(ref, case, out.final_spine, threshold)
        assert_close(out.trace[1], after["p100"])
        assert_close(out.excess_trace[1], after["overload"])
        assert before["marked_loose"].any()
    else:
        assert not before["marked_strict"].any()
        np.testing.assert_array_equal(out.spine, case["spine"])


def test_reaction_probability_and_target_are_as_documented():
    """Over many keys, a marked EV (all links alive) moves with probability
    damping * (u - level) / u, level its own (`threshold` x max(1, its plane's mean)), and lands uniformly on one of the other S - 1 spines."""
    ref = reference_clos(TINY)
    rng = np.random.default_rng(2024)
    case = random_case(ref, rng, flows=T1_FLOWS, slots=T1_SLOTS, dead_links=0)
    threshold, damping, trials = 0.8, 0.7, 300
    before = measure(ref, case, case["spine"], threshold)
    u = before["controlled"]
    assert before["marked_strict"].sum() >= 10 and np.all(np.isfinite(u))
    share = (u - before["level"]) / np.maximum(u, 1e-30)
    p = np.where(before["marked"], np.clip(damping * share, 0.0, 1.0), 0.0)
    moves = np.zeros(case["spine"].shape)
    offsets = np.zeros(ref.spines, dtype=np.int64)
    for seed in range(trials):
        out = run_mrc(ref, case, seed=seed, threshold=threshold, damping=damping, tol=0.01,
                      max_iters=1, patience=5)
        moved = out.final_spine != case["spine"]
        moves += moved
        np.add.at(offsets, ((out.final_spine - case["spine"]) % ref.spines)[moved], 1)
    freq = moves / trials
    sigma = np.sqrt(p * (1 - p) / trials)
    assert np.all(np.abs(freq - p) <= 5 * sigma + 0.02), np.max(np.abs(freq - p))
    assert abs(moves.sum() - p.sum() * trials) <= 5 * math.sqrt((p * (1 - p)).sum() * trials) + 1
    assert offsets[0] == 0, "a move that stays on its spine"
    expected = offsets.sum() / (ref.spines - 1)
    assert np.all(np.abs(offsets[1:] - expected) <= 5 * math.sqrt(expected) + 1), offsets


# --------------------------------------------------------------------------- 2. invariants

# (config, flows, slots, max_iters, patience): fixed shapes per fabric, so hypothesis varies
# values only (one compile per row); TINY's row is reused by the eager-vs-jit test.
INVARIANT_CASES = [(TINY, 12, 4, 5, 3), (SKEWED, 18, 6, 40, 5)]


def replay_stopping_rule(excess: np.ndarray, iterations: int, tol: float, patience: int):
    """Iterations since the overload last improved by `tol` on its best so far, after each
    iteration, replayed from the excess trace in float32 as the loop compares it."""
    best = np.float32(excess[0])
    since = 0
    history = [0]
    one_minus_tol = np.float32(1.0) - np.float32(tol)
    for j in range(1, iterations + 1):
        value = np.float32(excess[j])
        improved = value < best * one_minus_tol
        best = min(best, value)
        since = 0 if improved else since + 1
        history.append(since)
    return history


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS, which=st.sampled_from([0, 1]), dead_links=st.integers(0, 2),
       threshold=st.sampled_from([0.7, 1.0, 1.3, 2.5]), damping=st.floats(0.1, 1.0),
       tol=st.sampled_from([0.0, 0.01, 0.1]))
# two EVs of a plane hashed onto one hot spine: marked against their own mean they never moved
@example(seed=70882, which=0, dead_links=0, threshold=1.0, damping=1.0, tol=0.0)
def test_fixed_point_invariants(seed, which, dead_links, threshold, damping, tol):
    cfg, flows, slots, max_iters, patience = INVARIANT_CASES[which]
    ref = reference_clos(cfg)
    rng = np.random.default_rng(seed)
    case = random_case(ref, rng, flows=flows, slots=slots, dead_links=dead_links)
    out = run_mrc(ref, case, seed=seed, threshold=threshold, damping=damping, tol=tol,
                  max_iters=max_iters, patience=patience)
    it = int(out.iterations)
    status = int(out.status)

    # planes never change: same shape, slot k still on plane k % P (the plane array is the
    # caller's), spines in range; per-flow per-plane EV counts are therefore unchanged
    assert out.spine.shape == case["spine"].shape and out.spine.dtype == np.int32
    assert np.all((out.spine >= 0) & (out.spine < ref.spines))
    planes = case["plane"]
    np.testing.assert_array_equal(planes, np.broadcast_to(np.arange(slots) % ref.planes,
                                                          planes.shape))
    for p in range(ref.planes):
        np.testing.assert_array_equal((planes == p).sum(axis=1), slots // ref.planes)
    # EVs of flows inside one T0 have no spine choice and never move
    start = measure(ref, case, case["spine"], threshold)
    final = measure(ref, case, out.spine, threshold)
    local = ~start["cross"]
    np.testing.assert_array_equal(out.spine[local], case["spine"][local])

    # bounded loop, finite traces frozen after the last iteration
    assert 0 <= it <= max_iters
    assert out.trace.shape == out.excess_trace.shape == (max_iters + 1,)
    assert np.all(np.isfinite(out.trace)) and np.all(np.isfinite(out.excess_trace))
    assert np.all(out.trace[it:] == out.trace[it])
    assert np.all(out.excess_trace[it:] == out.excess_trace[it])
    assert_close(out.trace[0], start["p100"])
    assert_close(out.excess_trace[0], start["overload"])
    # the last entries describe the EV set the loop stopped on ...
    last = measure(ref, case, out.final_spine, threshold)
    assert_close(out.trace[it], last["p100"])
    assert_close(out.excess_trace[it], last["overload"])
    # ... and the returned one is that balanced set, or else the best reached: fewest EVs on
    # dead paths first (moves only land on live paths, so that count never grows), then the
    # lowest P100 the trace saw, never above spraying's when no EV started on a dead path
    def dead_evs(m):
        return int((m["dead"] & m["cross"][:, None] & ~m["host_dead"]).sum())

    assert dead_evs(final) <= dead_evs(start) and dead_evs(last) <= dead_evs(start)
    if status == MRC_BALANCED:
        np.testing.assert_array_equal(out.spine, out.final_spine)
    elif dead_evs(start) == 0:
        assert_close(out.trace[: it + 1].min(), final["p100"])
        assert final["p100"] <= start["p100"] + 1e-5
    else:
        seen = out.trace[: it + 1]
        assert np.min(np.abs(seen - final["p100"])) <= 1e-4 * max(1.0, final["p100"])
        if dead_evs(final) < dead_evs(start):  # a set with dead EVs never wins over one without
            assert np.any(np.abs(seen[1:] - final["p100"]) <= 1e-4 * max(1.0, final["p100"]))
    assert_close(out.residual, final["overload"])
    assert final["marked_strict"].sum() <= int(out.marked) <= final["marked_loose"].sum()

    # the status agrees with the reference and with the stopping rule replayed from the trace
    assert status in MRC_STATUS_NAMES
    since = replay_stopping_rule(out.excess_trace, it, tol, patience)
    for j in range(it):  # the loop went on: under the cap and patience at every earlier step
        assert since[j] < patience and j < max_iters
    if status == MRC_BALANCED:
        assert int(out.marked) == 0
        assert not final["marked_strict"].any(), "balanced, yet an EV is over threshold"
        if threshold <= 1.0:
            assert out.residual <= 1e-5  # nothing over capacity when nothing is over 1
    elif status == MRC_SETTLED:
        assert int(out.marked) > 0 and since[it] >= patience
    else:
        assert int(out.marked) > 0 and it == max_iters and since[it] < patience
    if int(out.marked) == 0:
        assert status == MRC_BALANCED


def test_nothing_marked_means_nothing_moves():
    """A threshold above every utilisation and no dead link: zero iterations, untouched EVs."""
    cfg, flows, slots, max_iters, patience = INVARIANT_CASES[0]
    ref = reference_clos(cfg)
    case = random_case(ref, np.random.default_rng(5), flows=flows, slots=slots, dead_links=0)
    threshold = 1.01 * measure(ref, case, case["spine"], 1.0)["controlled"].max()
    out = run_mrc(ref, case, seed=0, threshold=threshold, damping=1.0, tol=0.01,
                  max_iters=max_iters, patience=patience)
    assert int(out.iterations) == 0 and int(out.status) == MRC_BALANCED
    np.testing.assert_array_equal(out.spine, case["spine"])
    assert np.all(out.trace == out.trace[0])


# --------------------------------------------------------------------------- 3. adaptation

# 64 GPUs on 2 planes of radix 16 (8 GPUs and 8 spines per T0): 8 EVs per flow, i.e. 4 per
# plane over 8 spines, so that oblivious spraying leaves uplinks unevenly loaded.
ADAPT_FABRIC = dict(gpus=64, planes=2, radix=16)
ADAPT_EVS = 8


def adapt_scenario(seed: int):
    return parse_scenario({
        "fabric": ADAPT_FABRIC, "workload": [{"collective": "permutation"}],
        "policies": ["spray", "mrc"], "spray": {"evs": ADAPT_EVS}, "mrc": {"evs": ADAPT_EVS},
        "seed": seed,
    })


def adapt_phase(seed: int):
    scenario = adapt_scenario(seed)
    fabric = build_fabric(scenario.fabric)
    collective = build_workload(scenario, np.random.default_rng([seed, 0]))[0]
    return scenario, fabric, collective.phases[0].flows


def test_mrc_never_worse_than_spray_and_better_on_average():
    spray_p100, mrc_p100 = [], []
    for seed in range(12):
        scenario, fabric, flows = adapt_phase(seed)
        spray = solve_policy_phase("spray", scenario, fabric, flows, (0, 0))
        mrc = solve_policy_phase("mrc", scenario, fabric, flows, (0, 0), trace=True)
        # same initial EV draw: mrc's first measurement is spraying's P100
        assert_close(mrc.adaptation.trace[0], spray.result.stats[0, 2])
        assert mrc.adaptation.convergence in MRC_ENDINGS
        spray_p100.append(float(spray.result.stats[0, 2]))
        mrc_p100.append(float(mrc.result.stats[0, 2]))
        # the returned EV set is the best the trace saw (or the balanced one it stopped on)
        assert_close(mrc.adaptation.trace.min(), mrc_p100[-1])
    spray_p100, mrc_p100 = np.array(spray_p100), np.array(mrc_p100)
    assert np.all(mrc_p100 <= spray_p100 + 1e-6), (mrc_p100, spray_p100)
    assert mrc_p100.mean() < spray_p100.mean() - 0.05, (mrc_p100.mean(), spray_p100.mean())
    assert np.all(spray_p100 > 1.0 + 1e-3)  # the case is imbalanced to begin with


def test_mrc_never_worse_than_spray_on_counterexample_seeds():
    for seed in (24, 43):
        scenario, fabric, flows = adapt_phase(seed)
        spray = solve_policy_phase("spray", scenario, fabric, flows, (0, 0))
        mrc = solve_policy_phase("mrc", scenario, fabric, flows, (0, 0))
        assert float(mrc.result.stats[0, 2]) <= float(spray.result.stats[0, 2]) + 1e-6, (
            seed, float(mrc.result.stats[0, 2]), float(spray.result.stats[0, 2]),
            mrc.adaptation.convergence)


# --------------------------------------------------------------------------- 4. determinism

def mrc_phase_args(scenario, fabric, flows, *, key_seed: int, draw_seed: int,
                   alive: np.ndarray | None = None):
    """What analyze passes to solve_mrc_phase, with its own key and initial-draw seeds."""
    geom = fabric.geometry
    cfg = scenario.mrc
    plane, spine = spread_slots(geom, flows.num_flows, cfg.evs,
                                np.random.default_rng([draw_seed, 2, 0, 0]))
    demand = offered_demand(flows, geom.nic_gbps, geom.gpus)
    if alive is None:
        alive = np.ones(fabric.num_links, dtype=bool)
    args = jax.device_put((
        flows.src, flows.dst, plane, spine, demand, flows.size.astype(np.float32),
        np.full_like(demand, geom.nic_gbps), fabric.capacity, alive, jax.random.key(key_seed),
        np.float32(cfg.threshold), np.float32(cfg.damping), np.float32(cfg.tol),
        np.float32(scenario.solver.eps), np.int32(scenario.solver.max_rounds)))
    static = dict(max_iters=cfg.max_iters, patience=cfg.patience,
                  tier_bounds=tuple((s, s + n) for s, n in zip(geom.tier_starts,
                                                                geom.tier_sizes)),
                  top_k=min(TOP_LINKS, fabric.num_links))
    return (plane, spine), args, static


def test_deterministic_given_key_and_no_recompile():
    scenario, fabric, flows = adapt_phase(3)
    geom = fabric.geometry
    (_, spine0), args, static = mrc_phase_args(scenario, fabric, flows, key_seed=1, draw_seed=3)
    first, _ = jax.device_get(solve_mrc_phase(geom, *args, **static))
    compiled = solve_mrc_phase._cache_size()
    again, _ = jax.device_get(solve_mrc_phase(geom, *args, **static))
    np.testing.assert_array_equal(again.spine, first.spine)
    assert int(again.iterations) == int(first.iterations)
    np.testing.assert_array_equal(again.trace, first.trace)
    assert int(first.iterations) > 0 and np.any(first.spine != spine0)  # something moved

    _, other_key, _ = mrc_phase_args(scenario, fabric, flows, key_seed=2, draw_seed=3)
    other, _ = jax.device_get(solve_mrc_phase(geom, *other_key, **static))
    assert np.any(other.spine != first.spine), "a different key gave the same EV swaps"
    (_, spine_b), other_draw, _ = mrc_phase_args(scenario, fabric, flows, key_seed=1,
                                                 draw_seed=99)
    assert np.any(spine_b != spine0)
    jax.block_until_ready(solve_mrc_phase(geom, *other_draw, **static))
    assert solve_mrc_phase._cache_size() == compiled, "new values of the same shapes retraced"

    # through analysis: another scenario seed (new key and new draw) reuses the compile
    solve_policy_phase("mrc", scenario, fabric, flows, (0, 0))
    compiled = run_phase._cache_size()
    other_scenario, _, other_flows = adapt_phase(4)
    solve_policy_phase("mrc", other_scenario, fabric, other_flows, (0, 0))
    assert run_phase._cache_size() == compiled


def test_same_key_same_spines_other_key_other_spines_small():
    cfg, flows, slots, max_iters, patience = INVARIANT_CASES[1]
    ref = reference_clos(cfg)
    case = random_case(ref, np.random.default_rng(11), flows=flows, slots=slots, dead_links=0)
    kw = dict(threshold=0.7, damping=0.5, tol=0.01, max_iters=max_iters, patience=patience)
    a = run_mrc(ref, case, seed=1, **kw)
    b = run_mrc(ref, case, seed=1, **kw)
    c = run_mrc(ref, case, seed=2, **kw)
    assert int(a.iterations) > 0
    np.testing.assert_array_equal(a.spine, b.spine)
    np.testing.assert_array_equal(a.trace, b.trace)
    assert int(a.iterations) == int(b.iterations) and int(a.status) == int(b.status)
    assert np.any(a.spine != c.spine)


# --------------------------------------------------------------------------- 5. eager vs jit

def test_eager_matches_jit():
    cfg, flows, slots, max_iters, patience = INVARIANT_CASES[0]
    ref = reference_clos(cfg)
    case = random_case(ref, np.random.default_rng(8), flows=flows, slots=slots, dead_links=1)
    kw = dict(seed=4, threshold=0.7, damping=0.5, tol=0.0, max_iters=max_iters,
              patience=patience)
    jitted = run_mrc(ref, case, **kw)
    with jax.disable_jit():
        eager = run_mrc(ref, case, jit=False, **kw)
    assert int(jitted.iterations) > 0 and np.any(jitted.spine != case["spine"])
    np.testing.assert_array_equal(eager.spine, jitted.spine)
    assert int(eager.iterations) == int(jitted.iterations)
    assert int(eager.status) == int(jitted.status)
    assert_close(eager.trace, jitted.trace)
    assert_close(eager.excess_trace, jitted.excess_trace)


# --------------------------------------------------------------------------- 6. dead paths

def dead_uplink_case(seed: int):
    """The adaptation scenario with the T0->T1 link that the most EVs use killed."""
    scenario, fabric, flows = adapt_phase(seed)
    ref = reference_clos(ClosConfig(**ADAPT_FABRIC))
    (plane, spine), _, _ = mrc_phase_args(scenario, fabric, flows, key_seed=seed,
                                          draw_seed=seed)
    paths = ref.ev_links(flows.src, flows.dst, plane, spine)
    uses = np.zeros(fabric.num_links, dtype=np.int64)
    for row in paths:
        for hops in row:
            for link in hops:
                uses[link] += 1
    uplinks = np.flatnonzero(ref.tier == TIER_T0_T1)
    dead = int(uplinks[np.argmax(uses[uplinks])])
    alive = np.ones(fabric.num_links, dtype=bool)
    alive[dead] = False
    (plane, spine), args, static = mrc_phase_args(scenario, fabric, flows, key_seed=seed,
                                                  draw_seed=seed, alive=alive)
    mrc, result = jax.device_get(solve_mrc_phase(fabric.geometry, *args, **static))
    return ref, flows, plane, spine, alive, dead, uses[dead], mrc, result


@pytest.mark.parametrize("seed", [0, 1])
def test_dead_uplink_carries_nothing_and_no_flow_stalls(seed):
    ref, flows, plane, spine, alive, dead, initial_uses, mrc, result = dead_uplink_case(seed)
    assert initial_uses >= 2  # the killed link did carry EVs of the initial draw
    geom = ref.geom
    links = clos_path_links(geom, flows.src[:, None], flows.dst[:, None], plane, mrc.spine)
    # the final paths from the reference walk agree with the library's ids
    library = [[[int(l) for l in hops if l != geom.sentinel] for hops in row] for row in links]
    assert library == ref.ev_links(flows.src, flows.dst, plane, mrc.spine)
    weights = np.asarray(uniform_live_split(jnp.asarray(links),
                                            jnp.asarray(np.append(alive, True))))
    on_dead = np.any(links == dead, axis=-1)
    assert np.all(weights[on_dead] == 0.0)
    assert np.all(weights.sum(axis=1) > 0.99), "a flow lost every live EV"
    assert int(result.stalled) == 0 and not int(result.status) & Status.STALLED
    assert np.all(result.rates > 0)
    for link, util in zip(result.top_links, result.top_util):
        assert link != dead or not np.isfinite(util)  # left out of the statistics
    # the EV count per flow and plane is kept: retired EVs are not dropped from the set
    assert mrc.spine.shape == spine.shape


def test_retired_evs_stay_retired_and_mrc_is_never_worse_than_spraying():
    """A dead EV whose flow has live EVs on its plane is retired where it stands (it carries
    nothing), and the settled P100 is never above spraying's over the same live EVs."""
    for seed in (0, 1):
        ref, flows, plane, spine, alive, dead, _, mrc, result = dead_uplink_case(seed)
        before = clos_path_links(ref.geom, flows.src[:, None], flows.dst[:, None], plane,
                                 spine)
        after = clos_path_links(ref.geom, flows.src[:, None], flows.dst[:, None], plane,
                                mrc.spine)
        on_dead_before = np.any(before == dead, axis=-1)
        on_dead_after = np.any(after == dead, axis=-1)
        assert on_dead_before.any()
        # no EV moves onto the dead link; those that were there and did not move are retired
        assert not np.any(on_dead_after & ~on_dead_before)
        case = dict(src=flows.src, dst=flows.dst, plane=plane, demand=np.ones(len(flows.src)),
                    capacity=ref.fabric.capacity, alive=alive)
        sprayed = measure(ref, case, spine, 1.0)
        settled = measure(ref, case, mrc.spine, 1.0)
        assert settled["p100"] <= sprayed["p100"] * (1 + 1e-6), (
            f"seed {seed}: {MRC_STATUS_NAMES[int(mrc.status)]}")


@pytest.mark.parametrize("fabric", [
    {"kind": "multiplane-clos", "gpus": 64, "planes": 2, "radix": 16},
    {"kind": "fat-tree", "tiers": 3, "gpus": 128, "radix": 8, "port_gbps": "400G",
     "planes": 1},
], ids=["clos", "fat-tree"])
def test_one_ev_a_plane_still_adapts(fabric):
    """With one EV a plane, a flow's mean over its own EVs of the plane is the EV's own
    utilisation: marked against it, no EV ever moved and mrc was spraying. Marked against its
    switch's alternatives, the hot EVs move and the busiest link comes down."""
    # one EV a plane (on the fat tree hashed onto its equal-cost paths: routed, spraying
    # takes every candidate path once)
    evs = {"evs": fabric["planes"], "placement": "hashed"}
    scenario = parse_scenario({
        "fabric": fabric, "workload": [{"collective": "permutation", "size": "4MiB"}],
        "policies": ["spray", "mrc"], "spray": evs, "mrc": evs, "seed": 3})
    fab = build(scenario)
    flows = build_workload(scenario, np.random.default_rng([3, 0]))[0].phases[0].flows
    spray = solve_policy_phase("spray", scenario, fab, flows, (0, 0))
    mrc = solve_policy_phase("mrc", scenario, fab, flows, (0, 0))
    spray_p100, mrc_p100 = float(spray.result.stats[0, 2]), float(mrc.result.stats[0, 2])
    assert spray_p100 >= 2.0          # hashed single paths collide
    assert mrc.adaptation.iterations > 0
    assert mrc_p100 <= 0.75 * spray_p100, (mrc_p100, spray_p100, mrc.adaptation.convergence)
