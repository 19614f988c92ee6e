"""The engine's two entries tested directly: `phase_core` (the traced phase program) eager and
under jit, and the host entry (`prepare_phase` + `solve_prepared`) that every study calls,
on a Clos (padded to its shape bucket) and on a stored-path fabric."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from fabricjax.engine.phase import (phase_core, phase_key, phase_key_data, prepare_phase,
                                    solve_policy_phase, solve_prepared)
from fabricjax.engine.plan import slowest_only
from fabricjax.fabric.build import build
from fabricjax.policies import get
from fabricjax.scenario import parse_scenario
from fabricjax.solver.maxmin import TOP_LINKS
from fabricjax.workload.build import build_workload

CLOS = {"gpus": 24, "planes": 2, "radix": 8}
FAT = {"kind": "fat-tree", "gpus": 16, "radix": 4, "tiers": 3, "planes": 1}


def case(fabric: dict, policy: str):
    scenario = parse_scenario({"fabric": fabric, "policies": [policy], "seed": 3,
                               "workload": [{"collective": "permutation", "size": "1MiB"}],
                               "spray": {"evs": 4}, "mrc": {"evs": 4, "max_iters": 20}})
    fabric_obj = build(scenario)
    (collective,) = build_workload(scenario, np.random.default_rng([scenario.seed, 0]))
    return scenario, fabric_obj, collective.phases[0].flows


# op by op, each case takes 9-16 s of CPU warm and twice that with a cold compilation cache
# (every loop iteration dispatched from Python, every primitive compiled once): the quick run
# keeps one case, a fixed-share policy on the Clos (mrc's eager loop is test_mrc.py's
# test_eager_matches_jit); `make test-slow` runs all
EAGER_QUICK = {("ecmp", "clos")}


@pytest.mark.parametrize("policy, fabric", [
    pytest.param(policy, fabric, id=f"{policy}-{name}",
                 marks=() if (policy, name) in EAGER_QUICK else pytest.mark.slow)
    for policy in ("ecmp", "spray", "mrc")
    for name, fabric in (("clos", CLOS), ("fat-tree", FAT))])
def test_phase_core_eager_equals_the_host_entry(policy, fabric):
    scenario, fab, flows = case(fabric, policy)
    pol = get(policy)
    prepared = prepare_phase(pol, scenario, fab, flows, (0, 0))
    outcome = solve_prepared(prepared, scenario, fab, (0, 0))
    assert outcome.split.plane.shape[0] == flows.num_flows
    if fab.kind.arithmetic_routes:
        assert prepared.count >= flows.num_flows          # the shape bucket
    routes, arrays, cohort, offset = prepared.device
    alive = np.ones(fab.num_links, bool)
    key = jax.random.key_data(phase_key(scenario.seed, 0, 0))
    with jax.disable_jit():
        reaction, result = phase_core(
            pol, routes, arrays, prepared.slots.plane, prepared.slots.choice,
            prepared.slots.state, alive, fab.capacity, key, pol.options(scenario),
            np.float32(scenario.solver.eps), np.int32(scenario.solver.max_rounds), cohort,
            offset, settings=pol.settings(scenario), layout=fab.layout_bounds,
            tier_bounds=fab.tier_bounds, top_k=min(TOP_LINKS, fab.num_links),
            num_cohorts=prepared.cohorts.count, slowest_only=slowest_only(scenario, flows))
    real = flows.num_flows
    np.testing.assert_allclose(np.asarray(result.stats), outcome.result.stats, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(result.rates)[:real], outcome.result.rates,
                               rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(reaction.choice)[:real], outcome.split.choice)
    # the padding carries nothing and never stalls
    assert np.all(np.asarray(reaction.weights)[real:] == 0)
    assert int(result.stalled) == 0
    # the host entry is the same call
    again = solve_policy_phase(policy, scenario, fab, flows, (0, 0))
    assert again.fabric_end_s == outcome.fabric_end_s


def test_prepared_phase_is_uploaded_once():
    scenario, fab, flows = case(CLOS, "spray")
    prepared = prepare_phase(get("spray"), scenario, fab, flows, (0, 0))
    assert prepared.device is prepared.device


def test_phase_key_data_is_phase_keys_bits():
    """The compiled key program gives the eager key's bits, baseline and failure streams."""
    rng = np.random.default_rng(7)
    for seed, item, index, stream in [(0, 0, 0, 0), (2**31 - 1, 3, 9, 0),
                                      *rng.integers(0, 2**20, (6, 4)).tolist()]:
        want = np.asarray(jax.random.key_data(phase_key(seed, item, index, stream)))
        np.testing.assert_array_equal(phase_key_data(seed, item, index, stream), want)
