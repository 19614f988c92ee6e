"""MRC against the clock in the static level: a flow is charged for the EV sets it lives
through while the fixed point converges (one iteration per reaction window), not only for the
settled set.

The host integration (`engine.timing.clocked_durations`) is checked against a flow-by-flow
walk through the states on small random cases; the device record (`policies.mrc.flow_speed`)
against the same speeds computed in numpy from the splits; the wiring end to end (the clocked
durations are the settled ones integrated over the recorded states, the P100 does not move,
`mrc.clock: false` gives the settled durations, and a policy that does not adapt is
untouched)."""

from __future__ import annotations

import numpy as np
import pytest

from fabricjax.engine.phase import slot_links_host, solve_policy_phase, window_speeds
from fabricjax.engine.timing import base_rtt_s, clocked_durations, relative_starts
from test_mrc import adapt_phase


def walk(duration, start, speeds, lengths):
    """The obvious reference: walk each flow through the states from its start."""
    opens = np.concatenate([[0.0], np.cumsum(lengths)])
    out = np.empty_like(duration)
    for f in range(duration.size):
        need, t = duration[f], start[f]
        if not np.isfinite(need) or need == 0:
            out[f] = need
            continue
        for i in range(lengths.size):
            if t >= opens[i + 1]:
                continue
            t = max(t, opens[i])
            avail = (opens[i + 1] - t) * speeds[i, f]
            if avail >= need:
                t += need / speeds[i, f]
                need = 0.0
                break
            need -= avail
            t = opens[i + 1]
        out[f] = t + need - start[f]
    return out


@pytest.mark.parametrize("seed", range(8))
def test_clocked_durations_match_a_walk_through_the_states(seed):
    rng = np.random.default_rng(seed)
    flows, states = int(rng.integers(1, 40)), int(rng.integers(1, 12))
    lengths = rng.uniform(0.5, 2.0, states) * 1e-6
    speeds = rng.uniform(0.0, 1.6, (states, flows))
    speeds[rng.random((states, flows)) < 0.15] = 0.0          # states where a flow is stuck
    duration = rng.uniform(0.0, 3.0 * lengths.sum(), flows)
    duration[rng.random(flows) < 0.1] = 0.0
    duration[rng.random(flows) < 0.1] = np.inf
    start = rng.uniform(0.0, 1.5 * lengths.sum(), flows)
    start[rng.random(flows) < 0.2] = 0.0
    got = clocked_durations(duration, start, speeds, lengths)
    want = walk(duration, start, speeds, lengths)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-15)


def test_clocked_durations_identity_cases():
    duration = np.array([1e-6, 5e-6, 0.0, np.inf])
    start = np.zeros(4)
    # no state, or states at the settled speed: unchanged
    assert np.array_equal(clocked_durations(duration, start, np.zeros((0, 4)), np.zeros(0)),
                          duration)
    same = clocked_durations(duration, start, np.ones((3, 4)), np.full(3, 1e-6))
    np.testing.assert_allclose(same, duration, rtol=1e-12)
    # half speed for 2 us: a flow outliving it loses 1 us; one inside it takes twice as long
    half = clocked_durations(duration, start, np.full((1, 4), 0.5), np.array([2e-6]))
    np.testing.assert_allclose(half[:2], [2e-6, 6e-6], rtol=1e-12)
    assert half[2] == 0.0 and half[3] == np.inf
    # a flow starting after the policy settled is untouched
    late = clocked_durations(duration[:1], np.array([3e-6]), np.full((1, 1), 0.5),
                             np.array([2e-6]))
    assert late[0] == duration[0]


def test_window_speeds_fold_the_record_tail():
    flows = 3
    record = np.arange(1, 5 * flows + 1, dtype=np.float32).reshape(5, flows)  # R = 4
    final = np.array([2.0, 0.0, 4.0], np.float32)
    speeds, lengths = window_speeds(record, final, 2, 1e-6)     # within the rows
    np.testing.assert_allclose(speeds, [[0.5, 1.0, 0.75], [2.0, 1.0, 1.5]])
    np.testing.assert_allclose(lengths, [1e-6, 1e-6])
    speeds, lengths = window_speeds(record, final, 6, 1e-6)     # 4 rows + the tail's 2
    assert speeds.shape == (5, flows)
    # the tail row sums the sets after 4, 5 and 6 iterations: their mean lasts 2 windows
    np.testing.assert_allclose(speeds[4], record[4] / 3 / np.where(final > 0, final, 1.0)
                               * np.where(final > 0, 1.0, 0.0) + np.where(final > 0, 0.0, 1.0))
    np.testing.assert_allclose(lengths, [1e-6] * 4 + [2e-6])


def phase(seed=3):
    return adapt_phase(seed)


def numpy_speed(fabric, flows, split, demand):
    """1 / max(1, worst utilisation over every hop of a flow's slots) at the offered load."""
    links = slot_links_host(fabric, flows, split)                       # [F, K, H]
    live = split.weights > 0
    share = demand[:, None] * live / np.maximum(live.sum(axis=1, keepdims=True), 1)
    load = np.zeros(fabric.num_links + 1)
    np.add.at(load, links.reshape(-1),
              np.broadcast_to(share[..., None], links.shape).reshape(-1))
    util = np.append(load[:-1] / np.asarray(fabric.capacity, np.float64), 0.0)
    worst = np.where(live, util[links].max(axis=-1), 0.0).max(axis=1)
    return 1.0 / np.maximum(worst, 1.0)


def test_device_record_matches_numpy_speeds():
    scenario, fabric, flows = phase()
    spray = solve_policy_phase("spray", scenario, fabric, flows, (0, 0))
    mrc = solve_policy_phase("mrc", scenario, fabric, flows, (0, 0), progressive=True)
    adaptation = mrc.adaptation
    assert adaptation.iterations > 0 and adaptation.window_speeds is not None
    demand = np.asarray(mrc.prepared.arrays.demand[:flows.num_flows], np.float64)
    # the first window runs on spraying's draw, relative to the set mrc returned
    first = numpy_speed(fabric, flows, spray.split, demand) / numpy_speed(
        fabric, flows, mrc.split, demand)
    np.testing.assert_allclose(adaptation.window_speeds[0], first, rtol=1e-5)
    assert adaptation.window_speeds.shape == (adaptation.iterations, flows.num_flows)
    window = float(base_rtt_s(scenario, mrc.hops))
    np.testing.assert_allclose(adaptation.window_lengths_s, window)
    # the imbalanced case: spraying's draw is slower than the settled set for some flows
    assert np.min(adaptation.window_speeds[0]) < 0.9


def test_clock_integrates_the_settled_durations_and_leaves_the_p100():
    scenario, fabric, flows = phase()
    off = scenario.model_copy(update={"mrc": scenario.mrc.model_copy(update={"clock": False})})
    settled = solve_policy_phase("mrc", off, fabric, flows, (0, 0), progressive=True)
    clocked = solve_policy_phase("mrc", scenario, fabric, flows, (0, 0), progressive=True)
    assert settled.adaptation.window_speeds is None
    np.testing.assert_array_equal(settled.result.stats, clocked.result.stats)
    np.testing.assert_array_equal(settled.split.choice, clocked.split.choice)
    adaptation = clocked.adaptation
    # the settled simulation is the same; the first step is it integrated over the states
    np.testing.assert_array_equal(settled.progressive.duration, clocked.progressive.duration)
    assert settled.first_step is None
    want = clocked_durations(settled.progressive.duration, relative_starts(flows),
                             adaptation.window_speeds, adaptation.window_lengths_s)
    np.testing.assert_allclose(clocked.first_step, want, rtol=1e-6)
    # a flow slower than settled in every state it lived through ends later, and faster
    # earlier; the clock moved some
    before, after = settled.progressive.duration, clocked.first_step
    slower = np.all(adaptation.window_speeds <= 1.0, axis=0)
    faster = np.all(adaptation.window_speeds >= 1.0, axis=0)
    assert np.all(after[slower] >= before[slower] * (1 - 1e-6))
    assert np.all(after[faster] <= before[faster] * (1 + 1e-6))
    assert np.any(slower & (after > before * (1 + 1e-5)))


@pytest.mark.parametrize("policy", ["ecmp", "spray"])
def test_policies_that_do_not_adapt_have_no_clock(policy):
    scenario, fabric, flows = phase()
    outcome = solve_policy_phase(policy, scenario, fabric, flows, (0, 0), progressive=True)
    assert outcome.adaptation is None
