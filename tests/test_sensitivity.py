"""Capacity gradients of P100 and phase time (`fabricjax.study.sensitivity`,
`fabricjax.solver.gradients`) against central finite differences of the same functions, the
solver's own values, and their invariants.

Hard (temperature 0) gradients are compared only where the max / min link is unique by a
clear margin (elsewhere the function has a kink and finite differences mean nothing); the
smoothed ones everywhere. The optimal bound is checked by re-solving `optimal_split` at
perturbed capacities, on a case built to have a single tight link (Danskin), and along the
scaling direction where many links are tight (homogeneity: the only thing that holds there).
Two fabric buckets with fixed shapes, so each jitted function compiles once per bucket.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fabricjax.engine.phase import initial_slots, offered_demand, solve_policy_phase
from fabricjax.solver.maxmin import TOP_LINKS
from fabricjax.fabric.clos import build_fabric
from fabricjax.policies.optimal import full_slot_grid, optimal_split
from fabricjax.fabric.paths import path_set, spread_slots
from fabricjax.config import ClosConfig
from fabricjax.scenario import parse_scenario
from fabricjax.policies import get
from fabricjax.solver.gradients import p100, phase_split, phase_time, sensitivity, tied_max
from fabricjax.study.sensitivity import (
    TIE_RTOL, collective_sensitivity, link_sensitivity, phase_sensitivity,
)
from fabricjax.solver.maxmin import uniform_live_split
from fabricjax.workload.build import build_workload
from fabricjax.workload.flows import Flows

from adapters import clos_phase_split, solve_clos_uniform_phase, solve_clos_weighted_phase

BUCKETS = {"g16": ClosConfig(gpus=16, planes=2, radix=8),
           "g32": ClosConfig(gpus=32, planes=2, radix=8)}
EVS = 8                 # spray slots per flow: 4 per plane, one per spine
SIZE = 2.0**20          # bytes per flow
STEP = 1e-3             # relative finite-difference step
MARGIN = 1e-2           # a max / min is "unique" when the runner-up is this far behind


@pytest.fixture(autouse=True)
def _strict(strict_promotion):
    yield


@functools.cache
def fabric_of(name):
    return build_fabric(BUCKETS[name])


def _tier_bounds(g):
    return tuple((s, s + n) for s, n in zip(g.tier_starts, g.tier_sizes))


@dataclasses.dataclass
class Case:
    fabric: object
    src: np.ndarray
    dst: np.ndarray
    plane: np.ndarray
    spine: np.ndarray
    demand: np.ndarray
    capacity: np.ndarray
    alive: np.ndarray

    def split(self, weights=None, tie_rtol=TIE_RTOL):
        g = self.fabric.geometry
        n = self.src.shape[0]
        return clos_phase_split(g, self.src, self.dst, self.plane, self.spine, weights,
                                self.demand, np.full(n, SIZE, np.float32),
                                np.full(n, g.nic_gbps, np.float32), self.alive,
                                np.float32(tie_rtol))


def random_case(name, seed, *, spread=0.5, dead=0):
    """A random permutation sprayed over EVS slots; capacities scaled by U(1 - spread,
    1 + spread) per link; `dead` random fabric links."""
    fabric = fabric_of(name)
    g = fabric.geometry
    rng = np.random.default_rng(seed)
    cycle = rng.permutation(g.gpus)
    src, dst = cycle.astype(np.int32), np.roll(cycle, -1).astype(np.int32)
    plane, spine = spread_slots(g, g.gpus, EVS, rng)
    demand = offered_demand(Flows(src, dst, np.full(g.gpus, SIZE)), g.nic_gbps, g.gpus)
    capacity = (fabric.capacity * rng.uniform(1 - spread, 1 + spread, fabric.num_links)
                ).astype(np.float32)
    alive = np.ones(fabric.num_links, bool)
    fabric_links = np.flatnonzero((fabric.tier == 1) | (fabric.tier == 2))
    alive[rng.choice(fabric_links, dead, replace=False)] = False
    return Case(fabric, src, dst, plane, spine, demand, capacity, alive)


@jax.jit
def perturbed(capacity, split, temperature, rel):
    """[p100, phase_time] float[2, L] with link l's capacity scaled by (1 + rel), l = 0..L-1."""
    bump = jnp.diag(rel * capacity)

    def both(c):
        return jnp.stack([p100(c, split, temperature), phase_time(c, split, temperature)])

    return jax.vmap(both)(capacity[None, :] + bump).T


def central_differences(capacity, split, temperature):
    """(f(c + h c_l e_l) - f(c - h c_l e_l)) / (2 h c_l) for every link l: float[2, L]."""
    up = perturbed(capacity, split, temperature, np.float32(STEP))
    down = perturbed(capacity, split, temperature, np.float32(-STEP))
    return np.asarray(up - down) / (2 * STEP * np.asarray(capacity))


def central_differences_f64(capacity, split, temperature, step=1e-4):
    """`central_differences` in float64 (a reference free of float32 rounding, which at a
    1e-3 step is ~1e-4 of P100 per Gbit/s: the size of the smoothed form's small entries)."""
    split = jax.device_get(split)
    with jax.enable_x64(True):
        wide = jax.tree.map(lambda a: np.asarray(a, np.float64)
                            if np.asarray(a).dtype == np.float32 else np.asarray(a), split)
        c = np.asarray(capacity, np.float64)
        t, h = np.float64(temperature), np.float64(step)
        diff = np.asarray(perturbed(c, wide, t, h)) - np.asarray(perturbed(c, wide, t, -h))
    return diff / (2 * step * c)


def _shares(case, split):
    usable = case.alive & (case.capacity > 0)
    growth = np.asarray(split.growth)
    return np.where(usable & (growth > 0), case.capacity / np.where(growth > 0, growth, 1),
                    np.inf)


def _runner_up_gap(values, best):
    """Relative distance from the best entry to the next one."""
    values = np.sort(np.asarray(values, np.float64))
    if best == "max":
        return (values[-1] - values[-2]) / values[-1]
    return (values[1] - values[0]) / values[0]


# --------------------------------------------------------------------------- values

def test_values_match_the_solver():
    """p100 and phase_time are exactly the solver's P100 and slowest-rate phase time, for
    uniform splits (spray) with dead links and for optimal's weights."""
    for seed in range(3):
        case = random_case("g16", seed, dead=seed)
        g = case.fabric.geometry
        n = case.src.shape[0]
        common = (np.full(n, SIZE, np.float32), np.full(n, g.nic_gbps, np.float32),
                  case.capacity, case.alive, np.float32(0), np.int32(1000))
        res = solve_clos_uniform_phase(g, case.src, case.dst, case.plane, case.spine,
                                       case.demand, *common, tier_bounds=_tier_bounds(g),
                                       top_k=TOP_LINKS, slowest_only=True)
        out = sensitivity(case.capacity, case.split(), np.float32(0))
        np.testing.assert_allclose(out.p100, res.stats[0, 2], rtol=1e-6)
        np.testing.assert_allclose(out.time, res.phase_time, rtol=1e-6)
        # the same from stored [F, K, H] link ids (any fabric's layout)
        links = path_set(g, case.src, case.dst, case.plane, case.spine).links
        weights = uniform_live_split(links, np.append(case.alive, True))
        stored = phase_split(links, weights, case.demand, *common[:2], case.alive,
                             np.float32(TIE_RTOL))
        np.testing.assert_allclose(np.asarray(stored.load), np.asarray(case.split().load),
                                   rtol=1e-6)
        again = sensitivity(case.capacity, stored, np.float32(0))
        np.testing.assert_allclose(again.d_time, out.d_time, rtol=1e-6)
    opt = optimal_split(g, case.src, case.dst, case.demand, case.capacity, case.alive)
    plane, spine = full_slot_grid(g, n)
    res = solve_clos_weighted_phase(g, case.src, case.dst, plane, spine, opt.weights,
                                    case.demand, *common, tier_bounds=_tier_bounds(g),
                                    top_k=TOP_LINKS, slowest_only=True)
    weighted = dataclasses.replace(case, plane=plane, spine=spine)
    out = sensitivity(case.capacity, weighted.split(opt.weights), np.float32(0))
    np.testing.assert_allclose(out.p100, res.stats[0, 2], rtol=1e-6)
    np.testing.assert_allclose(out.time, res.phase_time, rtol=1e-6)


# --------------------------------------------------------------------------- hard gradients

@pytest.mark.parametrize("name", sorted(BUCKETS))
def test_hard_gradient_matches_central_differences_where_unique(name):
    """At points with a unique bottleneck: jax.grad = central differences on every link,
    nonzero on that link alone, equal to -load/c^2 (P100) and -T/c (time)."""
    checked_p = checked_t = 0
    for seed in range(6):
        case = random_case(name, 10 + seed, dead=seed % 3)
        split = case.split()
        out = sensitivity(case.capacity, split, np.float32(0))
        fd = central_differences(case.capacity, split, np.float32(0))
        util = np.where(case.alive, np.asarray(split.load) / case.capacity, -np.inf)
        if _runner_up_gap(util, "max") > MARGIN:
            grad = np.asarray(out.d_p100)
            top = int(np.argmax(util))
            np.testing.assert_allclose(grad, fd[0], rtol=1e-3, atol=1e-3 * abs(grad[top]))
            assert np.flatnonzero(grad).tolist() == [top]
            np.testing.assert_allclose(grad[top], -split.load[top] / case.capacity[top] ** 2,
                                       rtol=1e-6)
            checked_p += 1
        shares = _shares(case, split)
        nic = case.fabric.geometry.nic_gbps
        if _runner_up_gap(shares, "min") > MARGIN and shares.min() * (1 + MARGIN) < nic:
            grad = np.asarray(out.d_time)
            low = int(np.argmin(shares))
            np.testing.assert_allclose(grad, fd[1], rtol=1e-3, atol=1e-3 * abs(grad[low]))
            assert np.flatnonzero(grad).tolist() == [low]
            np.testing.assert_allclose(grad[low], -out.time / case.capacity[low], rtol=1e-5)
            checked_t += 1
    assert checked_p >= 3 and checked_t >= 3, (checked_p, checked_t)


def test_tied_max_spreads_equally_where_jnp_max_does_not():
    """JAX's jnp.max splits only bitwise-equal ties; tied_max splits ties within rtol."""
    x = jnp.array([1.0, 3.0, 3.0 * (1 + 3e-7), 2.0, -jnp.inf])
    np.testing.assert_array_equal(jax.grad(jnp.max)(x), [0, 0, 1, 0, 0])
    np.testing.assert_array_equal(jax.grad(tied_max)(x, jnp.float32(1e-5)), [0, .5, .5, 0, 0])
    np.testing.assert_array_equal(jax.grad(tied_max)(x, jnp.float32(0)), [0, 0, 1, 0, 0])


def test_ties_share_the_gradient_and_keep_euler_identity():
    """Equal capacities: every host link is tied at P100 = 1 (with fully used uplinks); the
    gradient is spread equally over the tied set, zero elsewhere, and grad . c = -P100
    (P100 is homogeneous of degree -1). The NIC cap ties the host shares, so no upgrade speeds
    the phase: time gradient 0. With fabric links halved the fabric binds instead, and
    grad . c = -T."""
    case = random_case("g16", 3, spread=0.0)
    split = case.split()
    out = sensitivity(case.capacity, split, np.float32(0))
    util = np.asarray(split.load) / case.capacity
    tied = util >= util.max() * (1 - TIE_RTOL)
    assert tied.sum() >= 2 * case.fabric.geometry.gpus       # every host link at least
    expected = np.where(tied, -util / case.capacity / tied.sum(), 0.0)
    np.testing.assert_allclose(out.d_p100, expected, rtol=1e-5, atol=0)
    np.testing.assert_allclose(out.d_p100 @ case.capacity, -util.max(), rtol=1e-5)
    assert not np.any(np.asarray(out.d_time))

    fabric_tier = (case.fabric.tier == 1) | (case.fabric.tier == 2)
    halved = np.where(fabric_tier, case.capacity / 2, case.capacity).astype(np.float32)
    out = sensitivity(halved, split, np.float32(0))
    grad = np.asarray(out.d_time)
    assert np.all(grad[~fabric_tier] == 0) and np.all(grad <= 0)
    np.testing.assert_allclose(grad @ halved, -out.time, rtol=1e-5)


@pytest.mark.parametrize("temperature", [0.0, 0.05])
def test_upgrades_never_hurt(temperature):
    """Raising any one link's capacity never raises P100 or the time, and the gradients are
    never positive (hard and smoothed)."""
    t = np.float32(temperature)
    for seed in range(3):
        case = random_case("g32", 20 + seed, spread=0.3 * seed, dead=seed)
        split = case.split()
        out = sensitivity(case.capacity, split, t)
        assert np.all(np.asarray(out.d_p100) <= 0) and np.all(np.asarray(out.d_time) <= 0)
        upgraded = np.asarray(perturbed(case.capacity, split, t, np.float32(0.1)))
        assert np.all(upgraded[0] <= out.p100) and np.all(upgraded[1] <= out.time)


# --------------------------------------------------------------------------- smoothed

@pytest.mark.parametrize("temperature", [0.02, 0.2])
def test_smoothed_gradient_matches_central_differences_everywhere(temperature):
    """The log-sum-exp forms are smooth: jax.grad = central differences on every link, ties
    or not; they bound the hard values from above within n^tau; the gradient is dense."""
    t = np.float32(temperature)
    for seed, spread in [(30, 0.5), (31, 0.0), (32, 0.2)]:
        case = random_case("g16", seed, spread=spread, dead=1)
        split = case.split()
        out = sensitivity(case.capacity, split, t)
        hard = sensitivity(case.capacity, split, np.float32(0))
        fd = central_differences_f64(case.capacity, split, t)
        for grad, diff in ((out.d_p100, fd[0]), (out.d_time, fd[1])):
            grad = np.asarray(grad)
            np.testing.assert_allclose(grad, diff, rtol=1e-4, atol=1e-5 * np.abs(grad).max())
        n = int(np.sum(case.alive))
        assert hard.p100 <= out.p100 <= hard.p100 * (n ** temperature) * (1 + 1e-6)
        assert hard.time <= out.time * (1 + 1e-6)
        assert out.time <= hard.time * ((n + 1) ** temperature) * (1 + 1e-6)
        loaded = case.alive & (np.asarray(split.load) > 0)
        assert np.all(np.asarray(out.d_p100)[loaded] < 0)
        np.testing.assert_allclose(np.asarray(out.d_p100) @ case.capacity, -out.p100,
                                   rtol=1e-4)


# --------------------------------------------------------------------------- optimal

def _forced_case():
    """g16, shift-4 permutation (all flows cross T0s). Plane 0: T0 0 keeps only its uplink to
    spine 0, at a quarter of the port rate, so its 4 flows' plane-0 share must cross it: the
    unique tight link of the optimum whatever the split elsewhere."""
    fabric = fabric_of("g16")
    g = fabric.geometry
    rng = np.random.default_rng(5)
    src = np.arange(g.gpus, dtype=np.int32)
    dst = ((src + 4) % g.gpus).astype(np.int32)
    demand = offered_demand(Flows(src, dst, np.full(g.gpus, SIZE)), g.nic_gbps, g.gpus)
    capacity = (fabric.capacity * rng.uniform(0.8, 1.2, fabric.num_links)).astype(np.float32)
    alive = np.ones(fabric.num_links, bool)
    alive[[g.t0_up(0, 0, s) for s in (1, 2, 3)]] = False
    tight = g.t0_up(0, 0, 0)
    capacity[tight] = g.port_gbps / 4
    plane, spine = full_slot_grid(g, g.gpus)
    return Case(fabric, src, dst, plane, spine, demand, capacity, alive), tight


def _optimum(case, capacity, tol):
    return optimal_split(case.fabric.geometry, case.src, case.dst, case.demand, capacity,
                         case.alive, max_iters=5000, tol=tol)


def test_optimal_danskin_gradient_matches_resolving_where_one_link_is_tight():
    """d P*/d c_l by re-solving optimal_split at c +- h c_l = the gradient of max_l load_l(w*)
    / c_l with the optimal split w* held fixed (Danskin), within the solvers' gaps."""
    case, tight = _forced_case()
    tol = 1e-5
    opt = _optimum(case, case.capacity, tol)
    upper = float(opt.upper)
    split = case.split(opt.weights, tie_rtol=max(TIE_RTOL, float(opt.gap) / upper))
    out = sensitivity(case.capacity, split, np.float32(0))
    np.testing.assert_allclose(out.p100, upper, rtol=1e-5)
    grad = np.asarray(out.d_p100)
    assert np.flatnonzero(grad).tolist() == [tight]
    util = np.where(case.alive, np.asarray(split.load) / case.capacity, 0)
    g = case.fabric.geometry
    others = [int(np.argsort(util)[-2]), g.gpu_up(1, 3), g.t0_up(1, 2, 1)]
    h = 1e-2
    for link in [tight] + others:
        values, gaps = [], []
        for sign in (1, -1):
            bumped = case.capacity.copy()
            bumped[link] *= 1 + sign * h
            sol = _optimum(case, bumped, tol)
            values.append(float(sol.upper))
            gaps.append(float(sol.gap))
        fd = (values[0] - values[1]) / (2 * h * case.capacity[link])
        slack = (sum(gaps) + 2e-6 * upper) / (2 * h * case.capacity[link])
        assert abs(fd - grad[link]) <= 1e-3 * abs(grad[tight]) + slack, (link, fd, grad[link])
    assert grad[tight] < 0 and abs(grad[tight]) > 100 * slack


def test_optimal_gradient_keeps_homogeneity_where_many_links_are_tight():
    """A typical optimum (many links tight): P* is not differentiable, but it is homogeneous
    of degree -1, so re-solving at (1 +- h) c gives d/dh = -P*, and the spread gradient meets
    it (grad . c = -P*); it is supported on links within the solver's gap of the max."""
    case = random_case("g16", 40, spread=0.3)
    g = case.fabric.geometry
    host = (case.fabric.tier == 0) | (case.fabric.tier == 3)
    case.capacity[host] = 4 * g.port_gbps          # the fabric, not the NICs, binds
    case.plane, case.spine = full_slot_grid(g, case.src.shape[0])
    opt = _optimum(case, case.capacity, 1e-4)
    upper, gap = float(opt.upper), float(opt.gap)
    split = case.split(opt.weights, tie_rtol=max(TIE_RTOL, gap / upper))
    grad = np.asarray(sensitivity(case.capacity, split, np.float32(0)).d_p100)
    util = np.asarray(split.load) / case.capacity
    near = util >= upper - gap - 1e-6 * upper
    assert np.count_nonzero(grad) >= 2 and np.all(grad[~near] == 0) and np.all(grad <= 0)
    h = 1e-2
    plus = _optimum(case, case.capacity * (1 + h), 1e-4)
    minus = _optimum(case, case.capacity * (1 - h), 1e-4)
    fd = (float(plus.upper) - float(minus.upper)) / (2 * h)
    slack = (float(plus.gap) + float(minus.gap)) / (2 * h) + 1e-3 * upper
    assert abs(fd - grad @ case.capacity) <= slack
    np.testing.assert_allclose(grad @ case.capacity, -upper, rtol=1e-4)


# --------------------------------------------------------------------------- the API

def _scenario(workload, policies=("spray",)):
    # the gradients are those of the equal split over the slots (solver.gradients): spraying
    # is held to it here, without the resending sprayer's fixed point
    return parse_scenario({"fabric": BUCKETS["g16"].model_dump(), "workload": [workload],
                           "policies": list(policies),
                           "spray": {"evs": EVS, "trim_tolerance": 0.0},
                           "solver": {"eps": 0.0}})


def test_link_sensitivity_ranks_the_degraded_link_first():
    """One fabric uplink at 30 % capacity: it tops the ranking for both time and P100, with
    the closed-form derivatives; rows are sorted and name real links; unequal sizes leave
    d_time None and P100 unchanged; a smoothed ranking puts it first too."""
    scenario = _scenario({"collective": "permutation", "shift": 4})
    base = fabric_of("g16")
    g = base.geometry
    weak = g.t0_up(1, 2, 3)
    capacity = base.capacity.copy()
    capacity[weak] *= 0.3
    fabric = dataclasses.replace(base, capacity=capacity)
    (collective,) = build_workload(scenario, np.random.default_rng([scenario.seed, 0]))
    flows = collective.phases[0].flows
    outcome = solve_policy_phase("spray", scenario, fabric, flows, (0, 0))
    rows = link_sensitivity(scenario, fabric, flows, outcome, "spray", top_k=6)
    assert len(rows) == 6 and set(rows[0]) == {"link", "d_time_d_gbps", "d_p100_d_gbps",
                                               "utilisation"}
    assert rows[0]["link"] == fabric.link_name(weak) == "plane1/t0-2/up3"
    time = float(outcome.result.phase_time)
    np.testing.assert_allclose(rows[0]["d_time_d_gbps"], -time / capacity[weak], rtol=1e-5)
    np.testing.assert_allclose(rows[0]["utilisation"], outcome.result.stats[0, 2], rtol=1e-6)
    np.testing.assert_allclose(rows[0]["d_p100_d_gbps"],
                               -rows[0]["utilisation"] / capacity[weak], rtol=1e-5)
    assert all(r["d_time_d_gbps"] == 0 and r["d_p100_d_gbps"] == 0 for r in rows[1:])
    utils = [r["utilisation"] for r in rows[1:]]
    assert utils == sorted(utils, reverse=True)

    sens = phase_sensitivity(scenario, fabric, flows, outcome, "spray")
    np.testing.assert_allclose(sens.time, time, rtol=1e-6)

    smooth = link_sensitivity(scenario, fabric, flows, outcome, "spray", temperature=0.05)
    assert smooth[0]["link"] == rows[0]["link"]
    times = [r["d_time_d_gbps"] for r in smooth]
    assert times == sorted(times) and all(t < 0 for t in times)

    uneven = dataclasses.replace(flows, size=flows.size * np.linspace(1, 2, flows.num_flows))
    rows_uneven = link_sensitivity(scenario, fabric, uneven, outcome, "spray", top_k=6)
    assert all(r["d_time_d_gbps"] is None for r in rows_uneven)
    assert rows_uneven[0]["link"] == rows[0]["link"]
    assert rows_uneven[0]["d_p100_d_gbps"] == rows[0]["d_p100_d_gbps"]


def test_mrc_outcome_is_evaluated_on_its_returned_evs():
    """MRC moves EVs off a weak uplink; the sensitivity sees the EVs it returned (its P100
    and time are the outcome's, not those of the initial spray)."""
    scenario = _scenario({"collective": "permutation", "shift": 4}, policies=("mrc",))
    scenario = scenario.model_copy(update={"mrc": scenario.mrc.model_copy(
        update={"evs": EVS})})
    base = fabric_of("g16")
    capacity = base.capacity.copy()
    capacity[base.geometry.t0_up(1, 2, 3)] *= 0.3
    fabric = dataclasses.replace(base, capacity=capacity)
    (collective,) = build_workload(scenario, np.random.default_rng([scenario.seed, 0]))
    flows = collective.phases[0].flows
    outcome = solve_policy_phase("mrc", scenario, fabric, flows, (0, 0))
    assert outcome.adaptation.iterations > 0
    sens = phase_sensitivity(scenario, fabric, flows, outcome, "mrc")
    np.testing.assert_allclose(sens.p100, outcome.result.stats[0, 2], rtol=1e-6)
    np.testing.assert_allclose(sens.time, outcome.result.phase_time, rtol=1e-6)
    initial = dataclasses.replace(outcome, split=dataclasses.replace(
        outcome.split, choice=initial_slots(get("mrc"), scenario, fabric, flows, (0, 0)).choice))
    assert phase_sensitivity(scenario, fabric, flows, initial, "mrc").p100 > sens.p100


def test_collective_sensitivity_sums_phase_repeats():
    """A flat ring all-reduce: one step repeated 2(N - 1) times; the collective's d_time is
    that many times the step's, its d_p100 the step's."""
    scenario = _scenario({"collective": "all-reduce", "size": 2**24})
    fabric = fabric_of("g16")
    (collective,) = build_workload(scenario, np.random.default_rng([scenario.seed, 0]))
    (phase,) = collective.phases
    assert phase.repeat == 2 * (fabric.geometry.gpus - 1)
    outcome = solve_policy_phase("spray", scenario, fabric, phase.flows, (0, 0))
    step = {r["link"]: r for r in link_sensitivity(scenario, fabric, phase.flows, outcome,
                                                   "spray", top_k=fabric.num_links)}
    whole = collective_sensitivity(scenario, fabric, collective, [outcome], "spray",
                                   top_k=fabric.num_links)
    assert len(whole) == fabric.num_links
    for row in whole:
        one = step[row["link"]]
        np.testing.assert_allclose(row["d_time_d_gbps"], phase.repeat * one["d_time_d_gbps"],
                                   rtol=1e-6)
        assert row["d_p100_d_gbps"] == one["d_p100_d_gbps"]
        assert row["utilisation"] == one["utilisation"]


def test_optimal_outcome_ranking_keeps_euler_identity():
    """Through analysis' optimal outcome: its P100 and time are the solver's, the gradients
    are never positive and sum against the capacities to -P100."""
    scenario = _scenario({"collective": "permutation", "shift": 4}, policies=("optimal",))
    base = fabric_of("g16")
    capacity = base.capacity.copy()
    capacity[base.geometry.t0_up(0, 1, 2)] *= 0.5
    fabric = dataclasses.replace(base, capacity=capacity)
    (collective,) = build_workload(scenario, np.random.default_rng([scenario.seed, 0]))
    flows = collective.phases[0].flows
    outcome = solve_policy_phase("optimal", scenario, fabric, flows, (0, 0))
    sens = phase_sensitivity(scenario, fabric, flows, outcome, "optimal")
    np.testing.assert_allclose(sens.p100, outcome.result.stats[0, 2], rtol=1e-6)
    np.testing.assert_allclose(sens.time, outcome.result.phase_time, rtol=1e-6)
    assert np.all(sens.d_p100 <= 0) and np.all(sens.d_time <= 0)
    np.testing.assert_allclose(sens.d_p100 @ capacity, -sens.p100, rtol=1e-4)
    rows = link_sensitivity(scenario, fabric, flows, outcome, "optimal", top_k=3)
    assert len(rows) == 3 and rows[0]["d_p100_d_gbps"] < 0


def test_no_retrace_for_new_values():
    """New capacities, temperatures and splits of the same shapes reuse the compiled code."""
    case = random_case("g16", 50)
    sensitivity(case.capacity, case.split(), np.float32(0))
    before = (sensitivity._cache_size(), clos_phase_split._cache_size())
    other = random_case("g16", 51, dead=2)
    sensitivity(other.capacity * 2, other.split(tie_rtol=1e-3), np.float32(0.1))
    assert (sensitivity._cache_size(), clos_phase_split._cache_size()) == before
