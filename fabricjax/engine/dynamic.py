"""The dynamic level's host entry: one phase under one policy, in time (solver.dynamic).

Contract. `solve_dynamic_phase` takes what the static level takes (scenario, fabric, flows, the
workload stream) and the same slots (`engine.phase.initial_slots`, through the same routes),
solves the static phase first (its P100, its completion, which bounds the horizon, and the
split a non-adaptive policy keeps), decides every shape and setting on the host (dt: an eighth
of the base RTT, finer where a flow is short, `step_share`; the buffers and ECN thresholds
from the BDP as htsim derives them, the steps the links' signals and the ACKs take to reach
the sender, the step bound), checks the memory estimate
(`dynamic_memory`, refused with advice past the limit) and runs one jitted
`solver.dynamic.simulate_dynamic`. It returns a `DynamicOutcome` of numpy arrays: per-flow
FCTs as the static level counts them (at the sender, the last ACK back), the phase's
completion, the time-averaged link utilisation's P100 beside the static P100, and the queue
and throughput over time.

htsim's derivations (main_uec.cpp at 40ccb05): network RTT = 2 x diameter x link latency +
diameter x (data packet + ACK) serialisation at the port rate; BDP in packets = ceil(RTT x
port rate / packet); queue = 1 BDP (trimming on); ECN Kmin / Kmax = ceil(0.2 / 0.8 BDP)
packets; a degraded link scales its queue and thresholds with its speed; the retransmission
timeout = 15 us + 6 queues' drain at the port rate (100.9 us at 100G, 14 us RTT). A policy
declares its reaction at ACK time: where it starts (`Policy.start_in_time`: mrc from an equal
split over its live initial EVs, the others from the static split) and its EV mix
(`Policy.ev_mix`, a `solver.dynamic` function: mrc's picks its EVs as htsim's bitmap walk
does, `dynamic.mrc_ev_rule`: skipping marked and trimmed EVs, or REPS's rule; the others
hold their split over one connection's slots); ECMP's (`Policy.slot_connections`) holds it
too, but every slot is a connection of its own
(ECMP's QPs: its own bytes, its own NSCC window bounded by 1.5 BDP of the port it leaves by,
as uec.cpp bounds a connection by its NIC port's speed), and the flow ends with its slowest
one. On a fabric of several planes the other policies run a connection per plane
(`dynamic.plane_windows`, `_per_plane`): the plane's share of the flow's bytes, its own
window at the port's rate and the port's own round robin, as the calibration's htsim runs a
plane at a time (bench/fidelity/HTSIM.md); the flow ends with its slowest plane, and under a
failure that strikes during the phase its bytes left are split anew over its planes as the
policy's live EVs share them once it reacts (none on a plane that lost every path).

`prepare_dynamic_phase` makes a phase ready on the host and `run_dynamic_phases` runs a list
of them: those that share a program (a failure study's sets of one phase) vmapped together
on an accelerator, one at a time through the same program on the CPU.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, NamedTuple

import jax
import numpy as np

from fabricjax.config import DynamicConfig, Scenario
from fabricjax.core.errors import ScenarioError
from fabricjax.core.executables import cached_jit
from fabricjax.core.status import Status
from fabricjax.core.units import format_bytes
from fabricjax.engine.phase import PhaseOutcome, initial_slots, solve_policy_phase
from fabricjax.engine.plan import (BYTES_PER_ENTRY, BYTES_PER_SLOT, available_memory,
                                   dynamic_memory, flow_bucket)
from fabricjax.engine.timing import (base_rtt_s, packet_bytes, relative_starts,
                                     transport_latency_s)
from fabricjax.fabric.build import AnyFabric
from fabricjax.policies import get
from fabricjax.policies.base import Policy, Slots
from fabricjax.solver.dynamic import (RECORDS, Dynamic, DynamicParams, Strike,
                                      simulate_dynamic)
from fabricjax.workload.flows import Flows

# One set of defaults for every case (calibrated on bench/fidelity, never per case); the
# step, the step bound and mrc's EV rule are the scenario's `dynamic` section (DynamicConfig).
LAG_RTT = 0.5           # the sender sees the links' state this many base RTTs late
ACK_LAG_RTT = 1.0       # and a byte's ACK or NACK a round trip after it crossed its path (a
                        # byte crosses it within its step in the fluid)
RTO_MIN_S = 15e-6       # htsim's retransmission timeout: 15 us plus six full buffers' drain
RTO_BUFFERS = 6         # at the port rate (datacenter/main_uec.cpp, UecSrc::_min_rto)
ACK_PAYLOAD = 16384     # htsim's receiver ACKs every 16 KiB of new data (UecSink)
REFERENCE_BDP = 100e9 / 8 * 12e-6   # NSCC's reference: 100 Gbit/s x 12 us (bytes)


@dataclasses.dataclass(frozen=True)
class DynamicOutcome:
    """One phase under the dynamic level (host numpy).

    fct_s: float64[F] flow completion times (s, at the sender: the last byte's ACK back),
    inf for a flow that did not finish. completion_s: the phase's end at the receivers (the
    last byte of the slowest flow). p100_time_avg / p100_static: the busiest link's
    utilisation averaged over the phase, and the static level's P100. delivered_bytes,
    size_bytes, trimmed_bytes (sent again), duplicated_bytes (delivered twice on a spurious
    timeout): float64[F] wire bytes. ack_stalls: int64[F] how often the flow stopped for its
    retransmission timer (quick adapt cut its window below a packet whose ACK the receiver held
    back). max_fill: the largest queue / buffer any link reached; link_fill float64[L] each
    link's. link_util: float64[L] each link's utilisation averaged over the phase (0 on a dead
    link). stalled: flows with bytes and no live path (never simulated, or, under a failure
    that strikes during the phase, none after the policy reacts: the job would hang; their
    FCT is inf and `status` has Status.STALLED). timeouts: packets the retransmission timer
    sent again (black-holed ones included). blackholed_bytes: float64[F] wire bytes lost on
    links a failure killed during the phase (sent again). stall_s: the longest a flow sent
    only onto dead paths (the policy's reaction window; 0 without a strike). series: float64[T, 4] (time s, largest queue fill, throughput Gbit/s,
    flows sending). steps, dt_s, status (core.status.Status flags) and the static level's
    outcome. skipped_steps: the steps of `steps` a steady state skipped
    (`dynamic.skip_steady`)."""

    fct_s: np.ndarray
    completion_s: float
    p100_time_avg: float
    p100_static: float
    delivered_bytes: np.ndarray
    size_bytes: np.ndarray
    trimmed_bytes: np.ndarray
    duplicated_bytes: np.ndarray
    ack_stalls: np.ndarray
    max_fill: float
    link_fill: np.ndarray
    link_util: np.ndarray
    stalled: int
    timeouts: int
    series: np.ndarray
    steps: int
    dt_s: float
    status: int
    static: object
    blackholed_bytes: np.ndarray | None = None
    stall_s: float = 0.0
    skipped_steps: int = 0


@dataclasses.dataclass(frozen=True)
class TimedFailure:
    """A failure set that strikes `at_s` seconds into the phase (host numpy): the links it
    leaves alive, bool[L], and their capacity, float[L] Gbit/s (degraded cables), and how long
    the policy takes to react, `window_s` (`Policy.reaction_window_s`: routing's
    reconvergence for ECMP and oblivious spraying, mrc's first loss; 0 for a bound)."""

    at_s: float
    alive: np.ndarray
    capacity: np.ndarray
    window_s: float


def step_share(shortest_life_s: float, network_rtt: float,
               cfg: DynamicConfig = DynamicConfig()) -> float:
    """The step as a share of the base RTT: 1 / `cfg.steps_per_rtt`, halved while the shortest
    flow's life (its bytes at its NICs' fair share) spans fewer than `cfg.flow_steps` steps,
    down to 1 / `cfg.max_steps_per_rtt`.
    The fluid's error is first order in the step over a flow's life (64 KiB ECMP flows on the
    1:1 fat tree: the max FCT +20.5%, +12.1%, +8.6%, +6.8% against htsim at 1/8, 1/16, 1/32,
    1/64 of the RTT); powers of two keep the compiled programs few (the feedback lag in steps
    is static)."""
    share, finest = 1.0 / cfg.steps_per_rtt, 1.0 / cfg.max_steps_per_rtt
    while share > finest and shortest_life_s < cfg.flow_steps * share * network_rtt:
        share /= 2
    return share


def retransmission_timeout_s(queue_bytes: float, port_bytes_s: float) -> float:
    """htsim's minimum retransmission timeout (s): 15 us plus the drain of six switch queues
    (`queue_bytes` each, one BDP in whole packets) at the port rate (main_uec.cpp)."""
    return RTO_MIN_S + RTO_BUFFERS * queue_bytes / port_bytes_s


def check_dynamic_memory(num_flows: int, slots: int, hops: int, limit: int | None,
                         policy: Policy, scenario: Scenario, num_links: int = 0,
                         lag: int = 0, ack_lag: int = 0) -> int:
    """The estimate, or a ScenarioError naming what would fit when it exceeds `limit`."""
    need = dynamic_memory(num_flows, slots, hops, num_links, lag, ack_lag)
    if limit is None or need <= limit:
        return need
    field = policy.path_field(scenario)
    # what does not scale with the slots: the links' signals and the flows' echoes
    fixed = dynamic_memory(num_flows, 0, 0, num_links, lag, ack_lag)
    fit = max((limit - fixed) // max(num_flows * (hops * BYTES_PER_ENTRY +
                                                  BYTES_PER_SLOT), 1), 0)
    advice = (f"{field[0]}.{field[1]} <= {fit}" if field is not None and fit >= 1
              else "fewer flows (fabric.gpus, workload[].gpus)")
    raise ScenarioError(
        "solver.model", f"the dynamic level needs about {format_bytes(need)} for "
        f"{num_flows:,} flows x {slots} slots x {hops} hops under '{policy.name}', more than "
        f"the {format_bytes(limit)} available; would fit: {advice}, or solver.model: static")


def flow_link_pairs(links: np.ndarray, num_links: int) -> tuple[np.ndarray, np.ndarray]:
    """(pair int32[F, K, H], pair_link int32[P]): every (flow, slot, hop) entry's index among
    the distinct (flow, link) pairs, and each pair's link (the solver sums a flow's slots per
    link with them)."""
    key = np.arange(links.shape[0], dtype=np.int64)[:, None, None] * (num_links + 1) + links
    unique, pair = np.unique(key.reshape(-1), return_inverse=True)
    return (pair.reshape(links.shape).astype(np.int32),
            (unique % (num_links + 1)).astype(np.int32))


def padded_pairs(pair_link: np.ndarray, num_links: int) -> np.ndarray:
    """`pair_link` padded with the sentinel to a power of two: its length is an array shape
    of the program, and failure sets (an ECMP re-hash moves a flow's QPs) change the count
    of distinct pairs; a padded pair carries nothing."""
    size = 1 << max(int(pair_link.size - 1).bit_length(), 0)
    return np.r_[pair_link, np.full(size - pair_link.size, num_links, np.int32)]


def padded_senders(inputs: tuple, strike: Strike | None, count: int
                   ) -> tuple[tuple, Strike | None]:
    """`inputs` (PreparedDynamic's, `pair_link` not yet padded) and `strike` with `count` -
    F' inert senders appended (`flow_bucket`: a program per bucket, not per sender count):
    no bytes, every slot on the sentinel link with no share and not live, their entries on
    one sentinel pair appended to `pair_link`, the first sender's RTT and window (no
    division meets a zero). An inert sender never sends, never shares a NIC and is done from
    the start, and the run's draws are prefix-stable along the sender axis
    (jax_threefry_partitionable), so the real senders' figures are those of the run unpadded.
    `run_dynamic_phases` cuts the outputs back to F'."""
    (links, share, live, size, start, src, nic, base, max_window, *per_link, pair,
     pair_link) = inputs
    extra = count - size.shape[0]
    if extra <= 0:
        return inputs, strike
    sentinel = per_link[0].shape[0] - 1
    inert_pair = pair_link.size

    def grow(a, fill):
        return np.concatenate([a, np.full((extra, *a.shape[1:]), fill, a.dtype)])

    inputs = (grow(links, sentinel), grow(share, 0.0), grow(live, False), grow(size, 0.0),
              grow(start, 0.0), grow(src, 0), nic, grow(base, base[0]),
              grow(max_window, max_window[0]), *per_link, grow(pair, inert_pair),
              np.r_[pair_link, sentinel].astype(np.int32))
    if strike is not None:
        strike = strike._replace(
            links_after=grow(strike.links_after, sentinel),
            pair_after=grow(strike.pair_after, inert_pair),
            share_after=grow(strike.share_after, 0.0),
            live_after=grow(strike.live_after, False), doomed=grow(strike.doomed, False),
            group=np.r_[strike.group, np.arange(size.shape[0], count)].astype(np.int32),
            resplit=grow(strike.resplit, False), inherit=grow(strike.inherit, 0.0))
    return inputs, strike


class _Sending(NamedTuple):
    """What the device simulates of one phase, on the host (numpy): per sender (a flow, or
    each slot of a flow whose slots are connections of their own) its slots' link ids
    int32[F', K', H], shares and liveness, wire bytes, start (s from the phase's first),
    source (a GPU's NIC, or its port of one plane: `nic`, bytes/s per source), base RTT and
    window cap; and the rate NSCC's constants scale with."""

    links: np.ndarray
    share: np.ndarray
    live: np.ndarray
    size: np.ndarray
    start: np.ndarray
    src: np.ndarray
    base: np.ndarray
    max_window: np.ndarray
    conn_rate: float
    nic: np.ndarray


def _split_in_time(policy: Policy, scenario: Scenario, fabric: AnyFabric, flows: Flows,
                   slots: Slots, static: PhaseOutcome, alive_mask: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(links int32[F, K, H], share float64[F, K], live bool[F, K]) of the slots the phase
    runs on. A recycling policy starts from its initial EVs (spraying's draw), not from the
    static level's fixed point; a fixed one keeps the static choice (ECMP re-hashed after
    failures). A flow of n packets cycles through its first n EVs only (packets are whole):
    fewer slots than its share spreads over, e.g. 32 of 128 EVs for 128 KiB."""
    split = static.split
    choice, share = policy.start_in_time(slots, split)
    links = fabric.slot_links(flows.src, flows.dst, slots.plane, choice,
                              split.pool).astype(np.int32)
    num_slots = links.shape[1]
    live = np.all(np.r_[alive_mask, True][links], axis=-1)
    if share is None:
        share = live / np.maximum(live.sum(1, keepdims=True), 1)
    packets = np.ceil(flows.size / scenario.transport.mtu_bytes)
    first = np.arange(num_slots)[None, :] < packets[:, None]
    first |= ~np.any(first & (share > 0), axis=1, keepdims=True)   # none live among them
    if np.any(~first):
        share = np.where(first, share, 0.0)
        live = live & first
        share = share / np.maximum(share.sum(1, keepdims=True), 1e-30)
    return links, share, live


def _step_lags(scenario: Scenario, fabric: AnyFabric, flows: Flows, size: np.ndarray,
               network_rtt: float) -> tuple[float, int, int]:
    """(step as a share of the base RTT, feedback lag and ACK lag in steps): `step_share` of
    the shortest a flow with bytes can live, at the fair share of the busier of its NICs."""
    nic = np.asarray(fabric.gpu_nic_gbps, np.float64) * 1e9 / 8
    flow_nic = nic[flows.src]
    sending_flow = size > 0
    per_src = np.bincount(flows.src[sending_flow], minlength=fabric.gpus)
    per_dst = np.bincount(flows.dst[sending_flow], minlength=fabric.gpus)
    fair = np.minimum(flow_nic / np.maximum(per_src[flows.src], 1),
                      nic[flows.dst] / np.maximum(per_dst[flows.dst], 1))
    life = np.where(sending_flow, size / np.maximum(fair, 1e-30), np.inf)
    step = step_share(float(life.min(initial=np.inf)), network_rtt, scenario.dynamic)
    return (step, max(int(round(LAG_RTT / step)), 0), max(int(round(ACK_LAG_RTT / step)), 0))


def _as_connections(sending: _Sending, link_gbps: np.ndarray, flow_nic: np.ndarray
                    ) -> _Sending:
    """Every slot as its own connection (a QP): its own bytes, its own window bounded by 1.5
    BDP of the port it leaves by (uec.cpp's update_base_rtt: the NIC's link speed); the flow
    is done when its slowest connection is."""
    links, share, base = sending.links, sending.share, sending.base
    num_slots, hops = links.shape[1], links.shape[2]
    num_links = link_gbps.shape[0]
    port_link = np.minimum(links[:, :, 0], num_links - 1)   # an empty slot carries 0
    slot_rate = np.asarray(link_gbps, np.float64)[port_link] * 1e9 / 8
    used = np.minimum(slot_rate, flow_nic[:, None])[share > 0]

    def expand(a):
        return np.repeat(a, num_slots, axis=0)

    flat = links.reshape(-1, 1, hops)
    return _Sending(
        links=flat, share=np.ones((flat.shape[0], 1)), live=np.ones((flat.shape[0], 1), bool),
        size=(sending.size[:, None] * share).reshape(-1), start=expand(sending.start),
        src=expand(sending.src), base=expand(base),
        max_window=(1.5 * base[:, None] * np.minimum(slot_rate, flow_nic[:, None])
                    ).reshape(-1),
        conn_rate=float(np.median(used)) if used.size else sending.conn_rate,
        nic=sending.nic)


def plane_windows(policy: Policy, scenario: Scenario, fabric: AnyFabric) -> bool:
    """Whether a flow runs one connection per plane (module `_per_plane`): every policy whose
    slots are not each a connection already (ECMP's QPs are hashed per plane), on a fabric
    of several planes, unless `dynamic.plane_windows` is off."""
    return (not policy.slot_connections and fabric.planes > 1 and
            scenario.dynamic.plane_windows)


def plane_groups(plane: np.ndarray, planes: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(row int64[F, K], col int64[F, K], width): where each slot of a flow lands when the
    flow's slots are regrouped a plane per row (row f x planes + its plane, `col` its rank
    among the flow's slots of that plane, in slot order), and the most slots a plane has."""
    num_flows, num_slots = plane.shape
    onehot = plane[..., None] == np.arange(planes)                  # [F, K, P]
    rank = np.cumsum(onehot, axis=1) - 1
    col = np.take_along_axis(rank, plane[..., None].astype(np.int64), axis=2)[..., 0]
    row = np.arange(num_flows)[:, None] * planes + plane
    width = int(onehot.sum(1).max(initial=1))
    return row.astype(np.int64), col.astype(np.int64), max(width, 1)


def _per_plane(sending: _Sending, plane: np.ndarray, planes: int, sentinel: int,
               groups: tuple[np.ndarray, np.ndarray, int] | None = None) -> _Sending:
    """Each flow's slots of one plane as a connection of their own (one NSCC window per plane,
    as the calibration's htsim runs a plane at a time and as its window is bounded by one
    port's BDP): the plane's share of the flow's bytes (its slots' shares, so a plane with
    no live slot carries none), its slots' shares renormalised within the plane, its GPU's
    port of that plane as its NIC (the GPU's NIC over `planes` ports, each port's round
    robin its own) and a window cap of 1.5 BDP at the port's rate. Connections are flow-major
    (flow f's plane p is row f x planes + p), so the flow ends with its slowest plane."""
    links, share, live = sending.links, sending.share, sending.live
    num_flows, _, hops = links.shape
    row, col, width = plane_groups(plane, planes) if groups is None else groups
    rows = num_flows * planes
    new_links = np.full((rows, width, hops), sentinel, links.dtype)
    new_links[row, col] = links
    new_share = np.zeros((rows, width))
    new_share[row, col] = share
    new_live = np.zeros((rows, width), bool)
    new_live[row, col] = live
    carried = new_share.sum(1)
    new_share = new_share / np.maximum(carried, 1e-30)[:, None]
    port = sending.nic / planes

    def expand(a):
        return np.repeat(a, planes, axis=0)

    src = expand(sending.src) * planes + np.tile(np.arange(planes), num_flows)
    return _Sending(
        links=new_links, share=new_share, live=new_live, size=expand(sending.size) * carried,
        start=expand(sending.start), src=src, base=expand(sending.base),
        max_window=1.5 * expand(sending.base) * port[expand(sending.src)],
        conn_rate=float(np.median(port)), nic=np.repeat(port, planes))


def _link_settings(scenario: Scenario, fabric: AnyFabric, alive_mask: np.ndarray,
                   network_rtt: float, link_gbps: np.ndarray
                   ) -> tuple[int, tuple[np.ndarray, ...]]:
    """(BDP in packets at the port rate, (capacity B/s, buffer, kmin, kmax, multiplexed)
    float64[L]): queues and ECN thresholds from the BDP in packets, scaled by each link's
    speed; a NIC paces its own port, so packets meet at random from the first switch on."""
    pkt = packet_bytes(scenario)
    port = scenario.fabric.port_gbps * 1e9 / 8
    bdp_pkts = math.ceil(network_rtt * port / pkt)
    capacity = np.where(alive_mask, link_gbps.astype(np.float64) * 1e9 / 8, 1.0)
    speed = capacity / port
    host_up = fabric.layout_bounds[0]
    multiplexed = np.ones(fabric.num_links)
    multiplexed[host_up[0]:host_up[1]] = 0.0
    return bdp_pkts, (capacity, bdp_pkts * pkt * speed,
                      math.ceil(0.2 * bdp_pkts) * pkt * speed,
                      math.ceil(0.8 * bdp_pkts) * pkt * speed, multiplexed)


def _params(scenario: Scenario, stream: tuple[int, int], network_rtt: float, step: float,
            conn_rate: float, bdp_pkts: int, static_s: float, last_start: float,
            react_s: float = 0.0) -> DynamicParams:
    """The simulation's settings: NSCC's constants (solver.dynamic) scaled by the network BDP
    at the connection's rate, the step, the retransmission timeout and the step bound."""
    pkt = packet_bytes(scenario)
    mss = scenario.transport.mtu_bytes
    port = scenario.fabric.port_gbps * 1e9 / 8
    scale_a = network_rtt * conn_rate / REFERENCE_BDP
    target = 0.75 * network_rtt
    scale_b = target / 12e-6
    dt = network_rtt * step
    cfg = scenario.dynamic
    horizon = (cfg.horizon_completions * static_s + cfg.horizon_rtts * network_rtt +
               last_start + react_s)
    # a failure's reaction (seconds of routing) is jumped over where nothing moves (2^30
    # steps of float32 time stay within a step of their clock only below 2^24: past it the
    # bound only stops a run that never ends)
    max_steps = int(min(math.ceil(horizon / dt), 2**24 if react_s == 0.0 else 2**30))
    return DynamicParams(
        dt=dt, pkt=float(pkt), mtu=float(pkt), target=target, network_rtt=network_rtt,
        alpha=4.0 * mss * scale_a * scale_b / target, fi=5.0 * mss * scale_a,
        eta=0.15 * mss * scale_a, fi_scale=0.25 * scale_a, gamma=0.8, delay_alpha=0.0125,
        ack_packets=ACK_PAYLOAD / mss,
        rto=retransmission_timeout_s(bdp_pkts * pkt, port), max_steps=max_steps,
        stride=max(math.ceil(max_steps / RECORDS), 1),
        seed=(scenario.seed * 7919 + 104729 * stream[0] + stream[1]) % 2**31,
        steady_steps=(math.ceil(cfg.steady_rtts / step) if cfg.skip_steady else 0),
        steady_tol=cfg.steady_tolerance)


def _outcome(out, scenario: Scenario, flows: Flows, flow_h: np.ndarray, size: np.ndarray,
             capacity: np.ndarray, alive_mask: np.ndarray, params: DynamicParams,
             static: PhaseOutcome, per_flow: int, stalled: np.ndarray, edges: np.ndarray,
             stall_s: float = 0.0, doomed: np.ndarray | None = None) -> DynamicOutcome:
    """The simulation's device outputs as a `DynamicOutcome`; `per_flow` > 1: each flow's
    slots ran as that many connections, so a flow ends with its slowest. `stalled`: bool[F]
    the flows left out for want of a live path (inf, and Status.STALLED)."""
    finish = np.asarray(out.finish, np.float64)
    delivered = np.asarray(out.delivered, np.float64)
    trimmed = np.asarray(out.trimmed, np.float64)
    duplicated = np.asarray(out.duplicated, np.float64)
    stalls = np.asarray(out.stalls, np.int64)
    black = np.asarray(out.blackholed, np.float64)
    start = relative_starts(flows)
    if per_flow > 1:
        num_flows = flows.num_flows
        last = np.argmax(finish.reshape(num_flows, per_flow), axis=1)   # its slowest QP
        finish = finish.reshape(num_flows, per_flow)[np.arange(num_flows), last]
        delivered = delivered.reshape(num_flows, per_flow).sum(1)
        trimmed = trimmed.reshape(num_flows, per_flow).sum(1)
        duplicated = duplicated.reshape(num_flows, per_flow).sum(1)
        stalls = stalls.reshape(num_flows, per_flow).sum(1)
        black = black.reshape(num_flows, per_flow).sum(1)
        size = size.reshape(num_flows, per_flow).sum(1)
    # FCT at the sender: its last byte acknowledged (0 extra with the transport off)
    if doomed is not None:      # no live path once the policy reacted, and unfinished then
        stalled = stalled | (doomed & ~np.isfinite(finish))
    finish = np.where(stalled, np.inf, finish)
    fct = np.where(np.isfinite(finish),
                   finish - start +
                   transport_latency_s(scenario, flow_h, acknowledged=True), np.inf)
    dt = params.dt
    end = float(np.max(np.where(flows.size > 0, finish, 0.0), initial=0.0))
    # a stalled phase has no end: the others' bytes over the time they took
    span = float(np.max(np.where((flows.size > 0) & np.isfinite(finish), finish, 0.0),
                        initial=0.0))
    util = np.where(alive_mask, np.asarray(out.link_bytes, np.float64) /
                    (capacity * max(span, dt)), 0.0)
    p100 = float(np.max(util, initial=0.0))
    status = int(out.status) | (int(Status.STALLED) if np.any(stalled) else 0)
    steps = int(out.steps)
    # the record intervals the run reached; the throughput is each one's bytes over its span
    used = int(min(RECORDS, np.searchsorted(edges, steps - 1, side="right")))
    series = np.asarray(out.series, np.float64)[:used]
    span_s = np.diff(edges[:used + 1].astype(np.float64)) * dt
    series = np.column_stack([edges[1:used + 1] * dt, series[:, 0],
                              series[:, 1] * 8e-9 / np.maximum(span_s, 1e-30), series[:, 2]])
    return DynamicOutcome(
        fct_s=fct, completion_s=end, p100_time_avg=p100,
        p100_static=float(static.result.stats[0, 2]),
        delivered_bytes=delivered, size_bytes=size, trimmed_bytes=trimmed,
        duplicated_bytes=duplicated, ack_stalls=stalls,
        max_fill=float(np.max(out.max_fill, initial=0.0)),
        link_fill=np.asarray(out.max_fill, np.float64), link_util=util,
        stalled=int(np.sum(stalled)),
        timeouts=int(round(float(duplicated.sum() + black.sum()) / float(params.pkt))),
        series=series, steps=steps, dt_s=dt, status=status, static=static,
        blackholed_bytes=black, stall_s=stall_s, skipped_steps=int(out.skipped))


def record_edges(max_steps: int, stride: int, geometric: bool) -> np.ndarray:
    """int64[RECORDS + 1]: the first step of each time-series interval. Every `stride` steps;
    `geometric` (a failure during the phase: microseconds of reaction and seconds of routing
    in one run) spaced evenly in log(1 + step) up to `max_steps`, one step at least apart."""
    if not geometric:
        return np.arange(RECORDS + 1, dtype=np.int64) * stride
    edges = np.floor(np.expm1(np.linspace(0.0, np.log1p(max_steps), RECORDS + 1)))
    edges = edges.astype(np.int64) + np.arange(RECORDS + 1)    # strictly increasing
    return np.minimum(edges, 2**31 - 1)


class _StrikeInputs(NamedTuple):
    """The host's side of `solver.dynamic.Strike`, and what the outcome needs of it."""

    strike: Strike
    pair_link: np.ndarray
    doomed_flow: np.ndarray
    stall_s: float
    react_s: float


def _strike_inputs(policy: Policy, scenario: Scenario, fabric: AnyFabric, flows: Flows,
                   stream: tuple[int, int], slots: Slots, failure: TimedFailure,
                   flow_level: _Sending, before: _Sending, flow_nic: np.ndarray,
                   network_rtt: float, dt: float, pair_link: np.ndarray) -> _StrikeInputs:
    """The failure set `failure` striking during the phase, as the solver takes it: the split
    the policy settles on after it (the static level's reaction on the set's fabric: ECMP's
    QPs re-hashed, spraying's dead EVs dropped, mrc's retired), from `window_s` after the
    strike; the flows with no live path after it; and the longest a flow sends only onto
    dead paths until then (its stall). `flow_level`: the senders before the failure, one a
    flow; `before`: as the solver runs them (each QP its own under ECMP)."""
    num_links = fabric.num_links
    after_fabric = dataclasses.replace(fabric, capacity=np.asarray(failure.capacity,
                                                                   np.float32))
    static_after = solve_policy_phase(policy, scenario, after_fabric, flows, stream,
                                      alive=failure.alive, slots=slots)
    links, share, live = _split_in_time(policy, scenario, fabric, flows, slots, static_after,
                                        failure.alive)
    after = flow_level._replace(links=links, share=share, live=live)
    connections = policy.slot_connections
    if connections:
        after = _as_connections(after, np.asarray(failure.capacity, np.float64), flow_nic)
    elif plane_windows(policy, scenario, fabric):
        after = _per_plane(after, slots.plane, fabric.planes, num_links)
    alive_ext = np.r_[failure.alive, True]
    path_after = np.all(alive_ext[after.links], axis=-1)
    reaches = np.any(path_after & (after.share > 0), axis=1)
    doomed = (before.size > 0) & ~reaches
    # a sender whose every used slot died sends into the void until the policy reacts
    path_before = np.all(alive_ext[before.links], axis=-1)
    blind = (before.size > 0) & ~np.any(path_before & (before.share > 0), axis=1)
    per_flow = before.size.shape[0] // flows.num_flows
    group = np.repeat(np.arange(flows.num_flows), per_flow)
    inherit = np.zeros(before.size.shape[0])
    resplit = np.zeros(before.size.shape[0], bool)
    if plane_windows(policy, scenario, fabric):
        # the flow's bytes left are split anew over its planes as the reaction's live EVs
        # share them (spraying's withdrawn EVs, mrc's retired ones: fewer on a plane that
        # lost some, none on one that lost all); the flow stalls only where no plane is left
        weight = np.where(reaches, after.size, 0.0)
        total = np.bincount(group, weight, minlength=flows.num_flows)
        lost = ~(total > 0)
        inherit = weight / np.maximum(total[group], 1e-30)
        resplit = ~lost[group]
        doomed = doomed & lost[group]
    doomed_flow = doomed.reshape(flows.num_flows, per_flow).any(1)
    pair_after, pair_link_after = flow_link_pairs(after.links, num_links)
    _, (capacity, buffer, kmin, kmax, _) = _link_settings(
        scenario, fabric, np.ones(num_links, bool), network_rtt,
        np.asarray(failure.capacity, np.float64))
    f32 = np.float32
    strike_step = int(round(failure.at_s / dt))
    react_step = strike_step + int(math.ceil(failure.window_s / dt))
    strike = Strike(
        step=np.int32(strike_step), react=np.int32(react_step), dead=~alive_ext,
        capacity=np.r_[capacity, np.inf].astype(f32), buffer=np.r_[buffer, np.inf].astype(f32),
        kmin=np.r_[kmin, 1e30].astype(f32), kmax=np.r_[kmax, 2e30].astype(f32),
        links_after=after.links.astype(np.int32),
        pair_after=(pair_after + pair_link.size).astype(np.int32),
        share_after=after.share.astype(f32), live_after=after.live.astype(bool),
        doomed=doomed, group=group.astype(np.int32), resplit=resplit,
        inherit=inherit.astype(f32))
    return _StrikeInputs(strike=strike,
                         pair_link=np.r_[pair_link, pair_link_after].astype(np.int32),
                         doomed_flow=doomed_flow,
                         stall_s=failure.window_s if np.any(blind) else 0.0,
                         react_s=react_step * dt)


@dataclasses.dataclass(frozen=True)
class PreparedDynamic:
    """One phase made ready for the device (host numpy): `inputs`, the positional arrays of
    `solver.dynamic.simulate_dynamic` up to its params (the GPU count left out: it is
    `num_gpus`, static), `senders` (F': the real ones, `inputs` padded past them to a bucket:
    `padded_senders`), `params`, `strike` (None: none) and `edges`; the static arguments;
    `memory` (bytes, `dynamic_memory`'s estimate); and what `_outcome` needs afterwards."""

    inputs: tuple
    senders: int
    params: DynamicParams
    strike: Strike | None
    edges: np.ndarray
    num_gpus: int
    ev_mix: Callable
    lag: int
    ack_lag: int
    shared_nics: bool
    memory: int
    finish: dict

    def key(self) -> tuple:
        """What must agree for runs to share one compiled program: the static arguments and
        every array's shape, `pair_link`'s apart (padded to the batch's longest)."""
        shapes = tuple(np.shape(a) for i, a in enumerate(self.inputs) if i != PAIR_LINK)
        strike = None if self.strike is None else tuple(np.shape(a) for a in self.strike)
        return (self.num_gpus, self.ev_mix, self.lag, self.ack_lag, self.shared_nics,
                shapes, strike)

    def static(self) -> dict:
        """The static arguments of its program."""
        return dict(num_gpus=self.num_gpus, ev_mix=self.ev_mix, lag=self.lag,
                    ack_lag=self.ack_lag, shared_nics=self.shared_nics)


PAIR_LINK = 15          # `pair_link`'s place among PreparedDynamic.inputs


def prepare_dynamic_phase(policy: str | Policy, scenario: Scenario, fabric: AnyFabric,
                          flows: Flows, stream: tuple[int, int], *,
                          alive: np.ndarray | None = None, capacity: np.ndarray | None = None,
                          slots: Slots | None = None, max_memory: int | None = None,
                          static: PhaseOutcome | None = None,
                          failure: TimedFailure | None = None) -> PreparedDynamic:
    """Everything `solve_dynamic_phase` decides on the host, without running it (see there
    for the arguments): `run_dynamic_phases` runs a list of them, batched."""
    policy = get(policy) if isinstance(policy, str) else policy
    if slots is None:
        slots = initial_slots(policy, scenario, fabric, flows, stream)
    if static is None:
        static = solve_policy_phase(policy, scenario, fabric, flows, stream, alive=alive,
                                    slots=slots)
    num_links = fabric.num_links
    alive_mask = np.ones(num_links, bool) if alive is None else np.asarray(alive, bool)
    link_gbps = np.asarray(fabric.capacity if capacity is None else capacity, np.float64)
    links, share, live = _split_in_time(policy, scenario, fabric, flows, slots, static,
                                        alive_mask)
    num_flows, num_slots, hops = links.shape
    stalled = (flows.size > 0) & ~np.any(live & (share > 0), axis=1)
    size = (flows.size.astype(np.float64) * (packet_bytes(scenario) /
                                             scenario.transport.mtu_bytes) *
            np.asarray(static.split.carried, np.float64))
    size = np.where(stalled, 0.0, size)
    flow_h = fabric.flow_hops(flows.src, flows.dst)
    network_rtt = float(base_rtt_s(scenario, int(flow_h.max(initial=1))))
    nic = np.asarray(fabric.gpu_nic_gbps, np.float64) * 1e9 / 8
    base = base_rtt_s(scenario, flow_h)
    step, lag, ack_lag = _step_lags(scenario, fabric, flows, size, network_rtt)
    # at the flow bucket the run is padded to (`padded_senders`)
    memory = check_dynamic_memory(flow_bucket(num_flows), num_slots, hops,
                                  available_memory() if max_memory is None else max_memory,
                                  policy, scenario, num_links, lag, ack_lag)
    # the device sees no absolute clock; NSCC's constants scale with the connection's rate
    # (a flow's, over the whole NIC, on one plane; a plane's, at its port's, on several)
    sending = _Sending(links=links, share=share, live=live, size=size,
                       start=relative_starts(flows), src=flows.src, base=base,
                       max_window=1.5 * base * nic[flows.src], conn_rate=float(np.median(nic)),
                       nic=nic)
    connections = policy.slot_connections
    flow_level = sending
    per_flow = 1
    if connections:
        sending = _as_connections(sending, link_gbps, nic[flows.src])
        per_flow = num_slots
    elif plane_windows(policy, scenario, fabric):
        sending = _per_plane(sending, slots.plane, fabric.planes, num_links)
        per_flow = fabric.planes
    bdp_pkts, (capacity, buffer, kmin, kmax, multiplexed) = _link_settings(
        scenario, fabric, alive_mask, network_rtt, link_gbps)
    pair, pair_link = flow_link_pairs(sending.links, num_links)
    timed = None
    if failure is not None:
        dt = network_rtt * step
        timed = _strike_inputs(policy, scenario, fabric, flows, stream, slots, failure,
                               flow_level, sending, nic[flows.src], network_rtt, dt,
                               pair_link)
        pair_link = timed.pair_link
    params = _params(scenario, stream, network_rtt, step, sending.conn_rate, bdp_pkts,
                     static.fabric_end_s, float(sending.start.max(initial=0.0)),
                     0.0 if timed is None else timed.react_s)
    edges = record_edges(params.max_steps, params.stride, timed is not None)
    f32 = np.float32

    def ext(a, fill):       # the sentinel's value
        return np.r_[a, fill].astype(f32)

    inputs = (sending.links, sending.share.astype(f32), sending.live,
              sending.size.astype(f32), sending.start.astype(f32),
              sending.src.astype(np.int32), sending.nic.astype(f32),
              sending.base.astype(f32), sending.max_window.astype(f32), ext(capacity, np.inf),
              ext(buffer, np.inf), ext(kmin, 1e30), ext(kmax, 2e30), ext(multiplexed, 0.0),
              pair, pair_link)
    senders = sending.size.shape[0]
    inputs, strike = padded_senders(inputs, None if timed is None else timed.strike,
                                    flow_bucket(senders))
    inputs = (*inputs[:PAIR_LINK], padded_pairs(inputs[PAIR_LINK], num_links),
              *inputs[PAIR_LINK + 1:])
    return PreparedDynamic(
        inputs=inputs, senders=senders,
        params=DynamicParams(*(np.int32(v) if name in ("max_steps", "stride", "seed", "steady_steps")
                               else f32(v) for name, v in zip(DynamicParams._fields, params))),
        strike=strike, edges=edges.astype(np.int32),
        num_gpus=int(sending.nic.shape[0]),
        ev_mix=policy.ev_mix(scenario),
        lag=lag,
        ack_lag=ack_lag, memory=memory,
        shared_nics=bool(np.bincount(sending.src[sending.size > 0],
                                     minlength=1).max(initial=0) > 1),
        finish=dict(scenario=scenario, flows=flows, flow_h=flow_h, size=sending.size,
                    capacity=capacity, alive_mask=alive_mask, params=params, static=static,
                    per_flow=per_flow, stalled=stalled, edges=edges,
                    stall_s=0.0 if timed is None else timed.stall_s,
                    doomed=None if timed is None else timed.doomed_flow))


def _simulate(inputs, params, strike, edges, *, num_gpus, **static):
    return simulate_dynamic(*inputs[:7], num_gpus, *inputs[7:], params, strike, edges,
                            **static)


def _simulate_many(inputs, params, strike, edges, **static):
    """`_simulate` vmapped over a leading axis of every array (a batch of failure sets)."""
    return jax.vmap(functools.partial(_simulate, **static))(inputs, params, strike, edges)


_STATIC = ("num_gpus", "ev_mix", "lag", "ack_lag", "shared_nics")
# kept on disk as the static level's programs are (core.executables): a warm process neither
# traces nor lowers them
_run_one = cached_jit(_simulate, static_argnames=_STATIC)
_run_many = cached_jit(_simulate_many, static_argnames=_STATIC)


def batch_bucket(count: int) -> int:
    """The batch a chunk of `count` runs is padded to (a power of two): a program per bucket,
    not per count."""
    return 1 << max(count - 1, 0).bit_length()


def run_dynamic_phases(prepared: list[PreparedDynamic], max_memory: int | None = None,
                       batched: bool | None = None) -> list[DynamicOutcome]:
    """Run prepared phases on the device, those that share a program (`PreparedDynamic.key`:
    a failure study's sets of one phase) vmapped together, as many at a time as the memory
    allows, each chunk padded to a power of two (`batch_bucket`) by repeating its last run.
    A vmapped run lasts as long as its slowest member; the others' state holds once they are
    done, so each result is the one it would have alone. Outcomes in `prepared`'s order.

    `batched` None: vmapped on an accelerator, one at a time on the CPU, where each set alone
    through the one program the healthy phase compiled measured faster (16 sets of a 64-GPU
    permutation, warm: 0.39 s one at a time against 0.47 s vmapped, and a second program to
    compile; docs/benchmarks.md)."""
    if batched is None:
        batched = jax.default_backend() != "cpu"
    limit = available_memory() if max_memory is None else max_memory
    groups: dict[tuple, list[int]] = {}
    for i, run in enumerate(prepared):
        groups.setdefault(run.key(), []).append(i)
    results: list = [None] * len(prepared)
    for members in groups.values():
        need = max(prepared[i].memory for i in members)
        per_chunk = len(members) if limit is None else max(1, min(len(members),
                                                                  limit // max(need, 1)))
        if not batched:
            per_chunk = 1
        for lo in range(0, len(members), per_chunk):
            chunk = members[lo:lo + per_chunk]
            if len(chunk) == 1:
                run = prepared[chunk[0]]
                outs = [_run_one(run.inputs, run.params, run.strike, run.edges,
                                 **run.static())]
            else:
                outs = _run_chunk([prepared[i] for i in chunk])
            for i, out in zip(chunk, outs):
                results[i] = _outcome(_real_senders(jax.device_get(out), prepared[i].senders),
                                      **prepared[i].finish)
    return results


def _real_senders(out: Dynamic, senders: int) -> Dynamic:
    """`out` with its per-sender arrays cut to the real senders (`padded_senders`)."""
    return out._replace(**{name: getattr(out, name)[:senders] for name in (
        "finish", "delivered", "trimmed", "duplicated", "stalls", "blackholed")})


def _run_chunk(chunk: list[PreparedDynamic]) -> list:
    """One vmapped run of `chunk` (same key), padded to its bucket; the device outputs of
    each member."""
    width = max(run.inputs[PAIR_LINK].size for run in chunk)
    sentinel = chunk[0].inputs[9].shape[0] - 1      # capacity: the links and the sentinel

    def padded(run):
        pair_link = run.inputs[PAIR_LINK]
        pad = np.full(width - pair_link.size, sentinel, np.int32)
        return run.inputs[:PAIR_LINK] + (np.r_[pair_link, pad],) + run.inputs[PAIR_LINK + 1:]

    members = chunk + [chunk[-1]] * (batch_bucket(len(chunk)) - len(chunk))

    def stack(*xs):
        return np.stack(xs)

    head = chunk[0]
    out = _run_many(jax.tree.map(stack, *[padded(r) for r in members]),
                    jax.tree.map(stack, *[r.params for r in members]),
                    None if head.strike is None else
                    jax.tree.map(stack, *[r.strike for r in members]),
                    np.stack([r.edges for r in members]), **head.static())
    return [jax.tree.map(lambda x, i=i: x[i], out) for i in range(len(chunk))]


def solve_dynamic_phase(policy: str | Policy, scenario: Scenario, fabric: AnyFabric,
                        flows: Flows, stream: tuple[int, int], *,
                        alive: np.ndarray | None = None, capacity: np.ndarray | None = None,
                        slots: Slots | None = None, max_memory: int | None = None,
                        static: PhaseOutcome | None = None,
                        failure: TimedFailure | None = None) -> DynamicOutcome:
    """Solve one phase under `policy` in time (see the module). `alive`: bool[L] (None:
    every link alive); `capacity`: float[L] Gbit/s of every link (None: the fabric's; a
    failure set's degraded cables). `max_memory`: bytes (None: what the machine has
    available). `static`: the static level's outcome of the same phase, slots and failure
    set, if already solved. A flow with bytes and no live path is not simulated: it is
    stalled (`DynamicOutcome.stalled`), and the others run to their end. `failure`: a
    failure set that strikes during the phase (`TimedFailure`; `alive` and `capacity` are
    then the fabric before it): the run goes on through the policy's reaction in time
    (`solver.dynamic.Strike`)."""
    prepared = prepare_dynamic_phase(policy, scenario, fabric, flows, stream, alive=alive,
                                     capacity=capacity, slots=slots, max_memory=max_memory,
                                     static=static, failure=failure)
    return run_dynamic_phases([prepared], max_memory)[0]


def fct_quantiles(outcome: DynamicOutcome, flows: Flows) -> tuple[float, float, float]:
    """Inverted-CDF P50, P99 and max of the sending flows' FCTs (s)."""
    values = outcome.fct_s[flows.size > 0]
    p50, p99 = np.quantile(values, [0.5, 0.99], method="inverted_cdf")
    return float(p50), float(p99), float(values.max())


def prepare_with_dynamic(policy: str | Policy, scenario: Scenario, fabric: AnyFabric,
                         flows: Flows, stream: tuple[int, int], outcome: PhaseOutcome, *,
                         alive: np.ndarray | None = None, capacity: np.ndarray | None = None,
                         failure: TimedFailure | None = None) -> PreparedDynamic | None:
    """The dynamic run of a phase whose static `outcome` is solved, on the same slots and
    failure set (`alive`, `capacity`), or with `failure` striking during it, made ready
    (`prepare_dynamic_phase`); None for a phase solved as classes (no per-flow slots) or
    without fabric flows."""
    if outcome.split is None or flows.num_flows == 0:
        return None
    policy = get(policy) if isinstance(policy, str) else policy
    slots = initial_slots(policy, scenario, fabric, flows, stream)
    return prepare_dynamic_phase(policy, scenario, fabric, flows, stream, alive=alive,
                                 capacity=capacity, slots=slots, static=outcome,
                                 failure=failure)


def with_dynamic(policy: str | Policy, scenario: Scenario, fabric: AnyFabric, flows: Flows,
                 stream: tuple[int, int], outcome: PhaseOutcome, *,
                 alive: np.ndarray | None = None, capacity: np.ndarray | None = None,
                 failure: TimedFailure | None = None) -> PhaseOutcome:
    """The static outcome of a phase with the dynamic level's beside it (`dynamic`), on the
    same slots and failure set (`alive`, `capacity`), or with `failure` striking during it.
    A phase solved as classes (no per-flow slots) or without fabric flows has none."""
    prepared = prepare_with_dynamic(policy, scenario, fabric, flows, stream, outcome,
                                    alive=alive, capacity=capacity, failure=failure)
    if prepared is None:
        return outcome
    return dataclasses.replace(outcome, dynamic=run_dynamic_phases([prepared])[0])
