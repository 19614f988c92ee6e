"""Time on the host: when a phase's flows start, what the transport adds, and how long the
phase lasts -- one finishing function for the no-failure baseline and every failure set.

Contract. Times on the host are float64 seconds relative to the phase's first start; the
device only ever sees durations and small offsets (an absolute clock of 1000 s in float32
has a resolution of about 60 us). `arrival_cohorts` groups a phase's flows by start time:
the device reports, per cohort, the latest end of its flows relative to the cohort's base
(`solver.maxmin.evaluate_split`'s `cohort_end`), and `fabric_end_s` adds the bases back in
float64. Every duration the device computes is already on the wire (`wire_bytes`: payload
plus headers), so the transport's overheads multiply durations, never start times.
`phase_duration_s` turns a phase's fabric end into the duration of all its steps (repeats,
scale-up flows, step latency, transport latency); `line_rate_time_s` (bytes at NIC rate,
no overheads) and `endpoint_bound_time_s` (the busiest NIC with the transport) are the two
references a completion is compared with.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fabricjax.config import Scenario
from fabricjax.workload.flows import Flows, Phase

# Distinct start times a phase keeps exactly; beyond it, starts share a cohort (its earliest
# start is the base, each flow keeps its float32 offset from it).
MAX_COHORTS = 64


class ArrivalCohorts(NamedTuple):
    """A phase's flows grouped by start time (host numpy).

    base: float64[C] each cohort's start, seconds after the phase's first start (0 for the
    first); cohort: int32[F] each flow's cohort; offset: float32[F] the flow's start after its
    cohort's base (0 where a cohort holds one start time). C is a power of two (shape
    buckets); unused cohorts repeat the last base and hold no flow."""

    base: np.ndarray
    cohort: np.ndarray
    offset: np.ndarray

    @property
    def count(self) -> int:
        return int(self.base.shape[0])


def relative_starts(flows: Flows) -> np.ndarray:
    """float64[F]: each flow's start, seconds after the phase's first start of a flow with
    bytes (all 0 without start times); an empty flow that starts earlier is clipped to 0."""
    if flows.start is None or flows.num_flows == 0:
        return np.zeros(flows.num_flows)
    start = np.asarray(flows.start, np.float64)
    sending = flows.size > 0
    first = start[sending].min() if np.any(sending) else start.min()
    return np.maximum(start - first, 0.0)


def arrival_cohorts(flows: Flows, padded: int | None = None) -> ArrivalCohorts:
    """The cohorts of `flows` (padded to `padded` flows: the padding joins cohort 0)."""
    count = flows.num_flows if padded is None else max(padded, flows.num_flows)
    if flows.start is None or flows.num_flows == 0:
        return ArrivalCohorts(np.zeros(1), np.zeros(count, np.int32), np.zeros(count, np.float32))
    relative = relative_starts(flows)
    times = np.unique(relative)
    if times.size <= MAX_COHORTS:
        bases = times
    else:   # equal-count groups of the distinct times: each cohort spans few of them
        bases = times[np.linspace(0, times.size, MAX_COHORTS, endpoint=False).astype(np.int64)]
    cohort = (np.searchsorted(bases, relative, side="right") - 1).astype(np.int32)
    offset = (relative - bases[cohort]).astype(np.float32)
    size = 1 << int(np.ceil(np.log2(bases.size))) if bases.size > 1 else 1
    base = np.concatenate([bases, np.full(size - bases.size, bases[-1])])
    extra = count - flows.num_flows
    return ArrivalCohorts(base, np.concatenate([cohort, np.zeros(extra, np.int32)]),
                          np.concatenate([offset, np.zeros(extra, np.float32)]))


def fabric_end_s(cohorts: ArrivalCohorts, cohort_end) -> np.ndarray | float:
    """When the phase's last fabric flow ends, seconds after its first start (float64):
    max over cohorts of base + the device's `cohort_end` (float[..., C]; -inf or 0 where a
    cohort has no flow with bytes). 0 when no flow sends."""
    end = np.asarray(cohort_end, np.float64)
    total = np.where(np.isfinite(end) & (end > 0), cohorts.base + end, 0.0)
    out = total.max(axis=-1)
    return out if out.ndim else float(out)


def wire_factor(scenario: Scenario) -> float:
    """Wire bytes per payload byte: every `mtu_bytes` of payload carry `header_bytes` (1 when
    the transport is off). A flow's bytes at its max-min rate take this much longer."""
    cfg = scenario.transport
    return 1.0 + cfg.header_bytes / cfg.mtu_bytes if cfg.enabled else 1.0


def wire_bytes(scenario: Scenario, size: np.ndarray) -> np.ndarray:
    """float32[F]: the bytes each flow puts on the wire (payload and headers): what the
    device's durations are computed from."""
    return (np.asarray(size, np.float64) * wire_factor(scenario)).astype(np.float32)


def transport_latency_s(scenario: Scenario, hops, *, acknowledged: bool = False):
    """What a flow over `hops` links pays beyond its wire bytes at its rate (float or numpy):
    the link latency of every hop and one packet's store-and-forward at every switch, until its
    last byte arrives (what a collective's next step waits for); `acknowledged` (a flow
    completion time, counted at the sender) adds the acknowledgement's way back when
    `transport.ack_return`. 0 for hops 0 or the transport off."""
    cfg = scenario.transport
    hops = np.asarray(hops, dtype=np.float64)
    if not cfg.enabled:
        return np.zeros_like(hops)
    link_s = cfg.link_latency_us * 1e-6
    packet_s = (cfg.mtu_bytes + cfg.header_bytes) * 8e-9 / scenario.fabric.port_gbps
    ways = 2.0 if acknowledged and cfg.ack_return else 1.0
    latency = hops * link_s * ways + np.maximum(hops - 1, 0) * packet_s
    return np.where(hops > 0, latency, 0.0)


ACK_WIRE_BYTES = 64     # an ACK's size on the wire (htsim's)


def packet_bytes(scenario: Scenario) -> int:
    """Wire bytes of a full data packet."""
    cfg = scenario.transport
    return cfg.mtu_bytes + cfg.header_bytes


def base_rtt_s(scenario: Scenario, hops) -> np.ndarray:
    """htsim's unloaded RTT over `hops` links: propagation both ways plus a data packet's and
    an ACK's serialisation at every hop (port rate)."""
    cfg = scenario.transport
    hops = np.asarray(hops, np.float64)
    serial = (packet_bytes(scenario) + ACK_WIRE_BYTES) * 8e-9 / scenario.fabric.port_gbps
    return hops * (2e-6 * cfg.link_latency_us + serial)


def clocked_durations(duration: np.ndarray, start: np.ndarray, speeds: np.ndarray,
                      lengths_s: np.ndarray) -> np.ndarray:
    """Flow durations when an adapting policy takes time to settle (float64[F]).

    `duration` float[F]: each flow's time on the fabric from its own start at the settled
    split (the progressive simulation's); `start` float64[F]: its start after the phase's
    first start. The policy passes through n states before it settles, back to back from the
    phase's start, state i lasting `lengths_s[i]` seconds (float[n]; its reaction windows): in
    it a flow moves `speeds[i, f]` times as fast as it will on the settled split (float[n, F]),
    and after the last at 1. A flow needs the same settled-split progress, `duration`, and
    ends where its accumulated progress reaches it: a flow that ends while the policy adapts is
    charged for the states it lived through, one that outlives them pays what they cost it. inf
    stays inf (a stalled flow) and 0 stays 0; with no state (n = 0) the durations are returned
    unchanged."""
    duration = np.asarray(duration, np.float64)
    start = np.asarray(start, np.float64)
    speeds = np.asarray(speeds, np.float64)
    lengths = np.asarray(lengths_s, np.float64)
    states = speeds.shape[0]
    if states == 0 or not np.any(lengths > 0):
        return duration
    cols = np.arange(speeds.shape[1])
    opens = np.concatenate([[0.0], np.cumsum(lengths)])                       # [n + 1]
    settled_at = opens[-1]
    # progress from the phase's start to every state's end, in settled seconds
    edge = np.concatenate([np.zeros((1, speeds.shape[1])),
                           np.cumsum(speeds * lengths[:, None], axis=0)])     # [n + 1, F]

    late = start >= settled_at             # starts after the policy settled: unchanged
    begin = np.where(late, 0.0, start)
    i = np.clip(np.searchsorted(opens, begin, side="right") - 1, 0, states - 1)
    begun = edge[i, cols] + (begin - opens[i]) * speeds[i, cols]
    target = begun + np.where(np.isfinite(duration), duration, 0.0)
    # the state in which the target is reached: the first whose end edge passes it
    j = np.sum(edge[1:] <= target[None, :], axis=0)                          # 0 .. n
    after = j >= states
    jj = np.minimum(j, states - 1)
    rate = speeds[jj, cols]
    within = opens[jj] + (target - edge[jj, cols]) / np.where(rate > 0, rate, 1.0)
    end = np.where(after, settled_at + (target - edge[-1]), within)
    out = np.where(late, duration, end - start)
    return np.where(np.isfinite(duration) & (duration > 0), out, duration)


def step_latency_s(scenario: Scenario, phase: Phase) -> float:
    """The fixed cost of one step of `phase`: a base plus a per-link latency over its
    longest path (solver.step_latency_us, solver.hop_latency_us), paid `latency_steps` times
    (a pipelined tree's chunks climb and descend its depth)."""
    cfg = scenario.solver
    return phase.latency_steps * (cfg.step_latency_us + cfg.hop_latency_us * phase.hops) * 1e-6


def phase_duration_s(scenario: Scenario, phase: Phase, fabric_end, hops: int):
    """All `repeat` steps of a phase (float, or numpy over failure sets): each lasts as long
    as the slower of its fabric flows and its scale-up flows, plus the step latency. The fabric
    flows' part is `fabric_end` (their wire bytes at the solved rates, from the phase's first
    start: `fabric_end_s`) plus the transport latency of the longest path (`hops` links) until
    the last byte arrives, when they send anything (the next step waits for the data, not its
    acknowledgement)."""
    fabric_end = np.asarray(fabric_end, dtype=np.float64)
    latency = transport_latency_s(scenario, hops)
    fabric_s = np.where(fabric_end > 0, fabric_end + latency, fabric_end)
    duration = phase.repeat * (np.maximum(fabric_s, phase.scaleup_time) +
                               step_latency_s(scenario, phase))
    return duration if duration.ndim else float(duration)


def _busiest_nic_s(gpu: np.ndarray, seconds: np.ndarray, begin: np.ndarray) -> float:
    """When the busiest NIC is done: each GPU's flows (`seconds` of line rate each, from
    `begin`) back to back through one NIC, work-conserving. A NIC finishes at max over its
    flows k of begin_k + (seconds of its flows beginning at or after begin_k)."""
    order = np.lexsort((-begin, gpu))          # per GPU, latest start first
    gpu, begin, seconds = gpu[order], begin[order], seconds[order]
    total = np.cumsum(seconds)
    first = np.flatnonzero(np.r_[True, gpu[1:] != gpu[:-1]])
    before = np.repeat(total[first] - seconds[first], np.diff(np.r_[first, gpu.size]))
    return float(np.max(begin + total - before))


def _nic_times(flows: Flows, nic_gbps: float | np.ndarray, side: str, wire: float) -> float:
    sending = flows.size > 0
    if not np.any(sending):
        return 0.0
    gpu = (flows.src if side == "src" else flows.dst)[sending]
    nic = nic_gbps[gpu] if np.ndim(nic_gbps) else nic_gbps
    begin = relative_starts(flows)[sending]
    return _busiest_nic_s(gpu, flows.size[sending] * wire * 8e-9 / nic, begin)


def line_rate_time_s(flows: Flows, nic_gbps: float | np.ndarray) -> float:
    """A phase at line rate: every GPU sends its payload back to back at its full NIC rate
    (work-conserving: a flow that starts later waits for nothing but the GPU's own bytes), with
    no transport overhead and nothing else contending -- no receiver NIC, no fabric link: the
    busiest sender's bytes x 8 / NIC rate. Seconds after the phase's first start."""
    return _nic_times(flows, nic_gbps, "src", 1.0)


def endpoint_bound_time_s(flows: Flows, nic_gbps: float | np.ndarray, wire: float) -> float:
    """A phase on a perfect network with the transport: no fabric link limits it, only the
    NICs, each of which must send (and receive) its wire bytes (`wire` per payload byte) at its
    line rate -- the busiest NIC's time, sending or receiving (an incast is bound by its
    receiver, a skewed all-to-all by its hot experts). A true lower bound on the static
    completion on any fabric, so completion / this bound -- the fabric's share -- is >= 1."""
    return max(_nic_times(flows, nic_gbps, "src", wire),
               _nic_times(flows, nic_gbps, "dst", wire))
