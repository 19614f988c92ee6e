"""Failure sets under the dynamic level: the steady state of every set in time, a failure that
strikes during the phase (`failures.at_s`) and each policy's reaction to it as its rule says
(ECMP: its black-holed QPs wait for routing, then re-hash; oblivious spraying: keeps spraying
onto the dead EVs, losing their bytes, until routing withdraws them; mrc: retires them at its
first loss), and a flow left with no live path reported as stalled, not run to the horizon."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from fabricjax.api import Analysis
from fabricjax.core.errors import ScenarioError
from fabricjax.engine.dynamic import (PAIR_LINK, TimedFailure, padded_pairs, padded_senders,
                                      prepare_dynamic_phase, run_dynamic_phases)
from fabricjax.engine.plan import flow_bucket
from fabricjax.fabric.build import build
from fabricjax.fabric.failures import sample_failures
from fabricjax.policies import get as get_policy
from fabricjax.scenario import parse_scenario
from fabricjax.study.analyze import analyze
from fabricjax.study.resilience import set_fabric
from fabricjax.workload.build import build_workload

AT_S = 20e-6            # the set strikes 20 us into the phase
RECONVERGENCE_S = 0.5   # routing's reaction (ECMP, spraying)


def raw(**failures) -> dict:
    return {
        "name": "strike", "seed": 7,
        "fabric": {"gpus": 32, "planes": 2, "port_gbps": "100G", "radix": 8},
        "workload": [{"name": "perm", "collective": "permutation", "size": "4MiB",
                      "shift": 4}],
        "policies": ["ecmp", "spray", "mrc"],
        "solver": {"model": "dynamic"},
        "failures": {"samples": 1, "switches": {"names": ["plane0/t1-0"]},
                     "reconvergence_s": RECONVERGENCE_S, **failures}}


def scenario(**failures):
    return parse_scenario(raw(**failures))


@functools.lru_cache(maxsize=None)
def struck_run(**failures):
    scen = scenario(at_s=AT_S, **failures)
    return scen, analyze(scen)


def struck(**failures):
    _, report = struck_run(**failures)
    healthy = {r.policy: r.dynamic for r in report.records}
    hit = {r["policy"]: r["dynamic"] for r in report.failures.records}
    return healthy, hit


def test_ecmp_black_holes_its_qps_until_routing_reconverges_then_rehashes():
    healthy, hit = struck()
    ecmp = hit["ecmp"]
    # some QP hashed onto the dead spine sends into the void until reconvergence, then its
    # re-hashed bytes finish within a healthy phase's time
    assert ecmp["stall_s"] == RECONVERGENCE_S
    assert AT_S + RECONVERGENCE_S <= ecmp["completion_s"] <= (
        AT_S + RECONVERGENCE_S + 2 * healthy["ecmp"]["completion_s"])
    assert ecmp["blackholed_bytes"] > 0 and ecmp["status"] == "ok"
    # nothing is delivered between the last healthy QP's end and the re-hash
    series = np.asarray(ecmp["series"])
    quiet = (series[:, 0] > 2 * healthy["ecmp"]["completion_s"]) & (
        series[:, 0] < AT_S + RECONVERGENCE_S * 0.99)
    assert quiet.any() and np.all(series[quiet, 2] == 0.0)
    # a stalled QP sends only its timer's packets: its lost bytes are a few packets per
    # retransmission timeout, not its rate over the whole window
    assert ecmp["blackholed_bytes"] < 1e-3 * 100e9 / 8 * RECONVERGENCE_S
    assert not ecmp["crash"]


def test_a_stall_past_the_transport_timeout_crashes_the_job():
    _, hit = struck(transport_timeout_s=0.1)
    assert hit["ecmp"]["crash"] and not hit["mrc"]["crash"] and not hit["spray"]["crash"]


def test_spraying_loses_its_dead_evs_bytes_and_finishes_before_routing_withdraws_them():
    healthy, hit = struck()
    spray = hit["spray"]
    assert spray["stall_s"] == 0.0            # its live EVs keep every flow going
    assert spray["blackholed_bytes"] > 0 and spray["timeouts"] > 0
    assert healthy["spray"]["completion_s"] < spray["completion_s"] < RECONVERGENCE_S


def test_mrc_retires_its_dead_evs_at_its_first_loss():
    _, hit = struck()
    mrc, spray = hit["mrc"], hit["spray"]
    # it stops losing bytes after mrc_reaction_us (50 us) where spraying goes on
    assert 0 < mrc["blackholed_bytes"] < 0.5 * spray["blackholed_bytes"]
    assert mrc["completion_s"] <= spray["completion_s"]
    # with routing's reaction time it loses what spraying loses: the rule, not the policy,
    # makes the difference
    _, slow = struck(mrc_reaction_us=RECONVERGENCE_S * 1e6)
    assert slow["mrc"]["blackholed_bytes"] == pytest.approx(spray["blackholed_bytes"],
                                                            rel=0.35)


def test_a_flow_without_a_live_path_is_stalled_and_the_run_ends():
    """Both NIC ports of GPU 0 down: its flow stalls (no completion, the job would hang),
    the others finish, and the run stops with them instead of stepping to its bound."""
    report = analyze(parse_scenario({
        "name": "cut", "seed": 7, "fabric": {"gpus": 32, "planes": 2, "radix": 8},
        "workload": [{"name": "perm", "collective": "permutation", "size": "1MiB"}],
        "policies": ["spray"], "solver": {"model": "dynamic"},
        "failures": {"samples": 1, "nic_ports": {"names": ["plane0/gpu0", "plane1/gpu0"]}}}))
    healthy = report.records[0].dynamic
    cut = report.failures.records[0]["dynamic"]
    assert cut["stalled_flows"] >= 1 and cut["completion_s"] is None
    assert "stalled" in cut["status"]
    assert cut["steps"] <= 3 * healthy["steps"]


def test_a_failure_during_the_phase_needs_the_dynamic_level():
    with pytest.raises(ScenarioError, match="failures.at_s"):
        parse_scenario({**raw(at_s=AT_S), "solver": {"model": "static"}})


def test_the_api_gives_the_time_series_of_the_strike():
    scen, report = struck_run()
    analysis = Analysis(report, scen)
    frame = analysis.dynamic_series("ecmp", "perm", failure_set=0)
    assert list(frame.columns) == ["time_s", "queue_fill_max", "throughput_gbps",
                                   "flows_sending"]
    assert frame["time_s"].is_monotonic_increasing
    assert frame["time_s"].iloc[-1] >= AT_S + RECONVERGENCE_S * 0.99
    healthy = analysis.dynamic_series("mrc", "perm")
    assert healthy["throughput_gbps"].max() > 0
    row = next(r for r in analysis.to_records() if r["policy"] == "mrc")
    assert row["dynamic_completion_s"] == report.records[2].dynamic["completion_s"]
    with pytest.raises(KeyError):
        analysis.dynamic_series("optimal", "perm")



def slow_plane_report(**dynamic):
    """32 GPUs on 2 planes, every T0's uplinks on plane 0 at 25%: no EV of plane 0 escapes
    the slow cables, and every flow of the permutation leaves its T0."""
    names = [f"plane0/t0-{t}/up{s}" for t in range(8) for s in range(4)]
    return analyze(parse_scenario({
        "name": "slow-plane", "seed": 7,
        "fabric": {"gpus": 32, "planes": 2, "port_gbps": "100G", "radix": 8},
        "workload": [{"name": "perm", "collective": "permutation", "size": "4MiB",
                      "shift": 4}],
        "policies": ["spray", "mrc"], "solver": {"model": "dynamic"}, "dynamic": dynamic,
        "failures": {"samples": 1, "degraded": {"names": names, "factor": 0.25}}}))


def test_a_degraded_plane_paces_its_share_of_every_flow():
    """One window per plane: a flow's bytes stay on their planes (its trims are resent on its
    EVs of the same plane), so the slow plane's half of 4 MiB at 25 Gbit/s sets the pace,
    where one window over both planes would move them to the fast plane and end in about
    4 MiB at 125 Gbit/s."""
    report = slow_plane_report()
    half_at_a_quarter = 2 * 2**20 / (0.25 * 100e9 / 8)
    for rec in report.failures.records:
        dyn = rec["dynamic"]
        assert dyn["status"] == "ok", rec["policy"]
        assert dyn["completion_s"] >= 0.95 * half_at_a_quarter, rec["policy"]
        assert dyn["completion_s"] <= 1.5 * half_at_a_quarter, rec["policy"]


def test_a_plane_lost_mid_phase_hands_its_bytes_to_the_flows_other_planes():
    """GPU 0's port on plane 0 dies 20 us into the phase: its flows' plane-0 connections have
    no live path, and once the policy reacts their bytes left move to plane 1 (the flows
    finish, none stalls); under routing's reaction spraying waits for it, mrc does not."""
    report = analyze(parse_scenario({
        **raw(at_s=AT_S),
        "failures": {"samples": 1, "nic_ports": {"names": ["plane0/gpu0"]}, "at_s": AT_S,
                     "reconvergence_s": 1e-3}}))
    healthy = {r.policy: r.dynamic for r in report.records}
    hit = {r["policy"]: r["dynamic"] for r in report.failures.records}
    for policy in ("spray", "mrc"):
        dyn = hit[policy]
        assert dyn["status"] == "ok" and dyn["stalled_flows"] == 0, policy
        assert dyn["completion_s"] > healthy[policy]["completion_s"], policy
        assert dyn["blackholed_bytes"] > 0, policy
    assert hit["spray"]["completion_s"] >= AT_S + 1e-3
    assert hit["mrc"]["completion_s"] < AT_S + 1e-3


@pytest.mark.parametrize("policy", ["ecmp", "spray", "mrc"])
def test_failure_sets_run_together_as_each_would_alone(policy):
    """The sets of one phase share one vmapped program (`run_dynamic_phases`): each set's
    FCTs, bytes and steps are those of its run alone, whichever sets it runs beside (one
    finishes long before another: its state holds)."""
    scen = parse_scenario({**raw(), "failures": {"samples": 3, "links": {"random": 3},
                                                 "degraded": {"random": 2}}})
    fabric = build(scen)
    collective = build_workload(scen, np.random.default_rng([scen.seed, 0]))[0]
    flows, stream = collective.phases[0].flows, (collective.stream, 0)
    batch = sample_failures(scen, fabric=fabric)
    prepared = []
    for b in range(batch.size):
        alive, degraded = set_fabric(fabric, batch, b)
        prepared.append(prepare_dynamic_phase(policy, scen, degraded, flows, stream,
                                              alive=alive, capacity=degraded.capacity))
    together = run_dynamic_phases(prepared, batched=True)   # vmapped on the CPU too
    assert len({run.key() for run in prepared}) == 1
    for run, joint in zip(prepared, together):
        alone = run_dynamic_phases([run])[0]
        assert joint.steps == alone.steps and joint.status == alone.status
        np.testing.assert_allclose(joint.fct_s, alone.fct_s, rtol=1e-5)
        np.testing.assert_allclose(joint.trimmed_bytes, alone.trimmed_bytes, rtol=1e-4,
                                   atol=1.0)
    assert len({out.steps for out in together}) > 1     # they end apart


def test_one_window_over_every_plane_moves_a_slow_planes_bytes_to_the_fast_one():
    """`dynamic.plane_windows: false`, the what-if: one window per flow over its planes, its
    trims resent on either, ends well before the slow plane's half would at 25 Gbit/s."""
    per_plane = {r["policy"]: r["dynamic"]["completion_s"]
                 for r in slow_plane_report().failures.records}
    shared = {r["policy"]: r["dynamic"]["completion_s"]
              for r in slow_plane_report(plane_windows=False).failures.records}
    half_at_a_quarter = 2 * 2**20 / (0.25 * 100e9 / 8)
    for policy in ("spray", "mrc"):
        assert shared[policy] < 0.95 * half_at_a_quarter <= per_plane[policy], policy


def test_the_dynamic_settings_are_checked_with_the_field_named():
    base = {**raw(), "failures": None}
    with pytest.raises(ScenarioError, match="dynamic.steps_per_rtt"):
        parse_scenario({**base, "dynamic": {"steps_per_rtt": 12}})
    with pytest.raises(ScenarioError, match="max_steps_per_rtt"):
        parse_scenario({**base, "dynamic": {"steps_per_rtt": 16, "max_steps_per_rtt": 8}})
    with pytest.raises(ScenarioError, match="mrc_ev_rule"):
        parse_scenario({**base, "dynamic": {"mrc_ev_rule": "random"}})


@pytest.mark.parametrize("policy", ["ecmp", "spray", "mrc"])
@pytest.mark.parametrize("strikes", [False, True])
def test_inert_senders_padding_a_run_to_its_bucket_change_nothing(policy, strikes):
    """A run is padded to its flow bucket with inert senders (`padded_senders`) so that one
    program serves every sender count of the bucket: padded further, the real senders'
    FCTs, bytes, steps and links' figures are those of the run as it was, struck mid-phase
    or not."""
    scen = scenario(at_s=AT_S)
    fabric = build(scen)
    collective = build_workload(scen, np.random.default_rng([scen.seed, 0]))[0]
    flows, stream = collective.phases[0].flows, (collective.stream, 0)
    failure = None
    if strikes:
        alive, degraded = set_fabric(fabric, sample_failures(scen, fabric=fabric), 0)
        failure = TimedFailure(at_s=AT_S, alive=alive, capacity=degraded.capacity,
                               window_s=get_policy(policy).reaction_window_s(scen.failures) or 0.0)
    run = prepare_dynamic_phase(policy, scen, fabric, flows, stream, failure=failure)
    senders = run.senders
    inputs, strike = padded_senders(run.inputs, run.strike, senders + 13)
    padded = dataclasses.replace(run, inputs=(*inputs[:PAIR_LINK],
                                              padded_pairs(inputs[PAIR_LINK], fabric.num_links),
                                              *inputs[PAIR_LINK + 1:]), strike=strike)
    assert padded.inputs[0].shape[0] == senders + 13
    base, grown = run_dynamic_phases([run])[0], run_dynamic_phases([padded])[0]
    assert grown.steps == base.steps and grown.status == base.status
    assert grown.stalled == base.stalled
    np.testing.assert_allclose(grown.fct_s, base.fct_s, rtol=1e-6)
    np.testing.assert_allclose(grown.trimmed_bytes, base.trimmed_bytes, rtol=1e-5, atol=1.0)
    np.testing.assert_allclose(grown.blackholed_bytes, base.blackholed_bytes, rtol=1e-5,
                               atol=1.0)
    np.testing.assert_allclose(grown.link_util, base.link_util, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grown.series, base.series, rtol=1e-5, atol=1e-6)


def test_a_run_is_padded_to_its_flow_bucket():
    """Sender counts of one bucket share one program's shapes."""
    scen = scenario()
    fabric = build(scen)
    flows = build_workload(scen, np.random.default_rng([scen.seed, 0]))[0].phases[0].flows
    cut = flows.take(np.arange(flows.num_flows) < 27)
    run = prepare_dynamic_phase("spray", scen, fabric, cut, (0, 0))
    assert run.inputs[0].shape[0] == flow_bucket(run.senders) > run.senders
