"""The dynamic level: a fluid model of one phase advanced in fixed time steps, on the device.

Contract. `simulate_dynamic` runs one bounded `lax.while_loop` of steps of `dt` seconds over F
flows x K slots x H hops (link ids `links` int32[F, K, H], padded with the sentinel L), every
shape fixed by the host. State: per flow the remaining wire bytes R, the congestion window W
(bytes) and NSCC's bookkeeping; per slot the flow's share s (sums to 1 over its live slots);
per link the queue Q (bytes) with capacity C, buffer B and ECN thresholds Kmin < Kmax (bytes).
One step:

1. the path signals of every slot, as the sender sees them `lag` steps late (ACKs come
   back): queueing delay (sum of Q/C plus the packet wait below), mark probability (RED
   between Kmin and Kmax on the fluid queue, or where that is empty averaged over the packet
   queue's spread around the packet wait, `_link_signals`; one draw per hop) and the share
   of its bytes trimmed;
2. rate r = min(W / RTT, NIC) with RTT = base RTT + the slots' mean queueing delay, the NIC
   shared by its GPU's flows as its per-packet round robin shares it (`nic_round_robin`: a
   flow its window stops waits an RTT and then for its turn), never more than R;
   a flow its NIC holds back sends some packets twice where its retransmission timer fires
   before the receiver's batched ACK comes back (`spurious_share`: packets further apart than
   about (rto - RTT) / 3, as in an all-to-all over ~90 peers or more), as whole packets at
   random (a timer's expiry resends one packet: drawn as the tail's trims are, below, and
   taken from the flow's next bytes, so a flow's resends vary as htsim's do and its NIC's
   round robin ends its flows apart, not together); each slot carries
   r s; a hop receives what the hops before it forwarded in the last step (their
   departures: a queue's output is its capacity, shared by what arrived), but a link never
   passes on more than its capacity of what the slots offer it now (the ratio of the last
   step's departures to arrivals, applied to flows that started since, would);
3. Q += (A - C) dt clipped to [0, B]: what overflows is trimmed (`pass` < 1), the slot's
   trimmed bytes stay in R and are sent again (over the slots as the shares say). A queue
   trims packets one at a time, so a flow loses a Poisson count of whole packets with the
   fluid's mean (`poisson_packets`, drawn from the run's key and taken from what it sent, as
   the tail's below): two flows with the same share of an overflow lose different numbers,
   and the most unlucky one ends last, as in htsim (bench/fidelity). Where
   several flows merge, packets also wait as in an M/D/1 queue at the link's utilisation
   (capped at RHO_MAX), never more than n - 1 packets for n merging paths (n = 1 / the
   paths' Herfindahl index of its arrivals), scaled by 1 - the flows' Herfindahl index (none
   for one flow's packets, nor on a NIC's own port): the queueing a fluid misses around full
   load, which htsim's sprayed packets meet (bench/fidelity). That queue's tail trims too:
   where the fluid queue is empty and more flows merge than the buffer B holds packets (n
   flows queue at most n - 1 packets), a packet finds the buffer full with the diffusion
   approximation's probability rho exp(-2 (1 - rho) B / (rho c2 pkt)) (`packet_tail`), c2
   the merging share above times the share of the arrivals sent in windows' bursts (a flow
   its NIC holds back sends its packets evenly spaced, a turn apart, and adds none); a flow
   loses whole packets to it, a NACK at a time (in a step with probability 1 - exp(-x) for
   x packets expected, then x / (1 - exp(-x)) of them, so the mean is x; a flow that sends
   less than that in the step owes the rest to the steps that follow), drawn from the
   run's key;
4. bytes that pass every hop leave R; a flow finishes when R reaches 0, at the step's
   fraction where it does, plus the queueing delay of the slowest slot it uses (its last
   packets are on every slot) as the queues stood when its last byte joined them (between
   the queue at the step's start and at its end, at that fraction), hop by hop: a later
   hop's queue drains at its capacity less what the other flows bring it (a growing one is
   held where it is) while the byte waits at the hops before it, so a later queue counts
   only what is left of it when the byte gets there, not all of it as it stood
   (`DRAIN_AHEAD`);
5. the window follows NSCC (below) on the ACKs and NACKs that come back in the step: those
   of the bytes delivered and trimmed `ack_lag` steps before (a round trip: here a byte
   crosses its path within the step it is sent), so a burst that overflows a queue is cut
   only once its NACKs are home, as in packets; and the policy picks the EVs of the next
   packets (`ev_mix`, the policy's function of the `EvSignals` the sender sees, moving the
   shares toward that mix within an RTT or one pass of the walk over the live EVs,
   whichever is longer: an EV is re-weighted only when the walk comes back to it):
   `held_mix` (spraying's EV cycle; ECMP, whose QPs the host runs as flows of their own)
   keeps its shares, trimmed bytes resent over all of them;
   `bitmap_mix`, htsim's bitmap walk (uec_mp.cpp, UecMpBitmap): the walk skips an EV once per
   ECN echo and BITMAP_NACK times per NACK, so an EV with mark probability m and trim share
   t gets 1 / (1 + m + 4 t) of its visits; a flow with no more packets than live EVs sends
   one on each and never comes back to one, so its mix stays (an all-to-all's short flows;
   a longer flow's mix moves from its start, though the walk's first pass is spraying:
   holding it that long is further from htsim on degraded fabrics, bench/fidelity);
   `reps_mix`, htsim's REPS (UecMpReps,
   buffer_reps.cpp): every clean ACK puts its EV back for one reuse, every other packet
   draws an EV uniformly at random, so the mix is (1 - q) uniform + q (the shares of the
   clean EVs) with q the clean ACKs per packet.

NSCC, as htsim's `uec.cpp` (github.com/ultraethernet/uet-htsim at 40ccb05,
`UecSrc::initNsccParams`, `updateCwndOnAck_NSCC`, `updateCwndOnNack_NSCC`, `quick_adapt`,
`update_delay`) implements the UEC specification's sender-based congestion control, with its
constants: reference BDP 100 Gbit/s x 12 us; a = network BDP / reference BDP; target
queueing delay 0.75 network RTT (trimming on); b = target / 12 us; per unmarked ACKed byte a
window increase of fi = 5 MSS a ("fair", when the delay >= target) or alpha (target - delay)
with alpha = 4 MSS a b / target ("proportional"), or fast increase 0.25 a per byte once a
full window came back with less than 1 us of delay; all applied as inc / W; eta = 0.15 MSS a
per network RTT; a marked ACK with delay >= target and the average delay above target cuts W
by max(1 - 0.8 (avg - target) / avg, 0.5) at most once per base RTT; the delay average is an
EWMA of weight 0.0125 per ACK (an ACK per 16 KiB, and one per marked packet) whose unmarked
samples above target count as a quarter base RTT (a packet that fills the window or ends the
backlog asks for an ACK at once, the AR flag of `UecSrc::sendNewPacket`, so the model ACKs a
window-limited flow and a flow's last bytes packet by packet: an upper bound, as htsim ACKs
0.36-0.79 of such a flow's unmarked packets, bench/fidelity/transport_stats.py; a flow held
back by its NIC every `ack_packets` packets, 16 KiB, `UecSink::shouldSack`); a NACK (trim)
removes its bytes from W and arms quick adapt until it fires (W = bytes ACKed in the last
base RTT + target, when below maxwnd / 8, at the end of that interval, armed or with a delay
past 4 targets then; the intervals start at the flow's first ACK or NACK). Where quick adapt
cuts a flow its NIC holds back from above its packets in flight (so none asked for an ACK at
once) to below them, fewer than an ACK's run, and the receiver holds back the last one's ACK
(unmarked and not a run's last: drawn with that chance from the run's key), nothing comes back
and the window lets nothing go: the flow stops until its timer fires, `rto` after that packet
left (half an RTT before), and sends it again, a duplicate (an ACK stall: htsim's slowest
all-to-all flows, bench/fidelity; counted per flow in `stalls`);
W stays within [one MTU, 1.5 BDP of the flow's own base RTT], and starts at the top. The
delays compared with the target are those of the marked and of the unmarked ACKs apart
(share-weighted over the slots), as each ACK carries its own path's delay.

A failure set may strike during the phase (`Strike`): from its step the dead links hold,
pass and signal nothing (what reaches them is black-holed: no trim, no mark, no ACK, and it
stays in R to be sent again), a flow whose every used slot died sends only a packet per
retransmission timeout, and from the policy's reaction step on the flows run on the split the
policy settles to (ECMP's re-hashed QPs, spraying's or mrc's live EVs). While nothing moves
before that reaction the loop jumps to it.

Units: bytes, seconds, bytes per second (the host converts Gbit/s). Returns `Dynamic`.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtri

from fabricjax.core.status import Status

RECORDS = 256           # time-series points (the host sets the stride)
FAST_DELAY_S = 1e-6     # htsim's fast increase: delay under 1 us for a whole window
TINY = 1e-30
TAIL_STREAM = 1 << 30   # the tail trims' draws: the run's key folded with this, then the step
DUP_STREAM = TAIL_STREAM + 1  # the twice-sent packets' draws, likewise
TRIM_STREAM = TAIL_STREAM + 2  # the fluid queue's trims, likewise
STALL_STREAM = TAIL_STREAM + 3  # whether quick adapt leaves a packet's ACK held back, likewise
MIN_THROUGH = 0.1      # the rate cap of a flow's last bytes assumes at least this gets through
LAST_BYTE = 1.0        # a flow with less than a wire byte left is done
NACK_DECREASE = 1.0    # a NACK takes its bytes off the window (htsim's rule)
QUICK_ADAPT = True
RANDOM_TRIMS = True    # the overflow trims whole packets at random (off: the fluid's share)
DRAIN_AHEAD = True     # a later hop's queue drains while the last byte waits before it
POISSON_TERMS = 12     # `poisson_packets` inverts the CDF over this many terms
PACKET_QUEUEING = 1.0  # the M/D/1 packet wait on top of the fluid queue (0: fluid only)
BITMAP_NACK = 4.0      # htsim's bitmap: a NACK's penalty in skipped visits (an ECN echo's: 1)
NIC_BISECTIONS = 14    # halvings of the NIC's fair level (to 2^-14 of its log range)
NIC_WINDOW_WAIT = True  # a window-limited flow also waits for its turn at the NIC
SPURIOUS_TIMEOUTS = True  # a timer that fires before a held-back ACK sends a packet twice
ACK_STALLS = True      # quick adapt below a held-back ACK stops the flow until its timer fires
ACK_RUN_MAX = 8        # the longest run of packets between two ACKs the model follows
PACKET_TRIMS = True    # the packet queue's tail trims (whole packets, at random)
MARK_SPREAD = True     # an empty fluid queue's marks: RED over the packet queue's spread
RHO_MAX = 0.98         # the utilisation at which that wait stops growing (24.5 packets)
STALL_SENT_RTT = 0.5   # an ACK stall's packet left this many RTTs before quick adapt ran


class DynamicParams(NamedTuple):
    """Traced settings of one run (float32 scalars unless noted): dt (s); pkt wire bytes per
    packet; mtu (bytes, the smallest window); target (s, target queueing delay); network_rtt
    (s); alpha (1/s), fi, eta (bytes), fi_scale, gamma, delay_alpha, ack_packets (packets
    per ACK of a flow its NIC holds back) (no unit); rto (s, the retransmission timeout);
    max_steps, stride (int32: steps between time-series records); seed (int32: the marks'
    draws); steady_steps (int32: the steady-state test's window in steps, 0: never skip) and
    steady_tol (the largest relative change of a flow's rate between two windows that still
    counts as steady; `_steady_jump`)."""

    dt: jax.Array
    pkt: jax.Array
    mtu: jax.Array
    target: jax.Array
    network_rtt: jax.Array
    alpha: jax.Array
    fi: jax.Array
    eta: jax.Array
    fi_scale: jax.Array
    gamma: jax.Array
    delay_alpha: jax.Array
    ack_packets: jax.Array
    rto: jax.Array
    max_steps: jax.Array
    stride: jax.Array
    seed: jax.Array
    steady_steps: jax.Array = 0     # int32: the steady-state test's window (0: never skip)
    steady_tol: jax.Array = 0.0     # a flow's largest relative change of rate between windows


class Strike(NamedTuple):
    """A failure set that strikes during the phase, and the policy's reaction in time (device
    arrays; `simulate_dynamic`'s `strike`).

    step, react: int32 scalars, the step the set strikes and the step the policy has reacted
    by (`Policy.reaction_window_s` later: ECMP's re-hash and spraying's withdrawn EVs after
    routing reconverges, mrc's retired EVs at its first loss). dead: bool[L+1] the links the
    set kills (the sentinel False): from `step` on they pass nothing and say nothing (no trim,
    no mark: the bytes sent onto them are lost, black-holed, and sent again). capacity,
    buffer, kmin, kmax: float32[L+1] the links from `step` on (a degraded cable's speed and
    its queue scaled with it). From `react` on the flows run on links_after int32[F, K, H],
    pair_after int32[F, K, H] (into the same `pair_link`), share_after float32[F, K] and
    live_after bool[F, K]: the split the policy settles on after the failure. doomed: bool[F]
    flows with no live path after it (they stall; the run ends without them). group:
    int32[F] the flow each sender belongs to (a flow's planes or QPs are senders of their
    own); resplit: bool[F] senders whose flow's bytes left are split anew at `react`, and
    inherit: float32[F] each one's share of them (a flow's planes: the shares its live EVs
    give each plane after the failure, 0 on a plane with none; a sender left with none is
    done, one given bytes sends again)."""

    step: jax.Array
    react: jax.Array
    dead: jax.Array
    capacity: jax.Array
    buffer: jax.Array
    kmin: jax.Array
    kmax: jax.Array
    links_after: jax.Array
    pair_after: jax.Array
    share_after: jax.Array
    live_after: jax.Array
    doomed: jax.Array
    group: jax.Array
    resplit: jax.Array
    inherit: jax.Array


class Dynamic(NamedTuple):
    """One phase under the dynamic level (device arrays).

    finish: float32[F] seconds from the phase start when the last byte reaches the receiver
    (its queueing delay included; propagation is the host's), inf if unfinished.
    delivered, trimmed, duplicated: float32[F] wire bytes delivered (equals the flow's bytes
    when it finishes), trimmed (then sent again) and delivered twice (a spurious timeout's
    duplicates). stalls: int32[F] the flow's ACK stalls (quick adapt left it waiting for its
    timer). blackholed: float32[F] wire bytes lost on links a strike killed (sent again).
    link_bytes: float32[L] bytes each link carried. max_fill: float32[L] the
    largest Q / B each link reached. steps: int32, the run's last step (stepped or skipped).
    status: int32 Status flags (EVENT_LIMIT: `max_steps` reached with bytes left). series:
    float32[RECORDS, 3] per record interval (between consecutive `edges`): the largest queue
    fill Q / B, the bytes delivered and the most flows sending. skipped: int32 the steps a
    steady state skipped (`_steady_jump`)."""

    finish: jax.Array
    delivered: jax.Array
    trimmed: jax.Array
    duplicated: jax.Array
    stalls: jax.Array
    blackholed: jax.Array
    link_bytes: jax.Array
    max_fill: jax.Array
    steps: jax.Array
    status: jax.Array
    series: jax.Array
    skipped: jax.Array


class _State(NamedTuple):
    step: jax.Array
    remaining: jax.Array
    window: jax.Array
    avg_delay: jax.Array
    fi_count: jax.Array
    since_dec: jax.Array
    marks: jax.Array
    achieved: jax.Array
    qa_clock: jax.Array
    qa_trigger: jax.Array
    owed: jax.Array         # bytes of packets the queue tail trimmed, still to be taken
    dup_owed: jax.Array     # bytes of packets the timer sends twice, still to be taken
    stall: jax.Array        # s: the flow sends nothing before this (its window waits for an
                            # ACK the receiver holds back, until the timer fires)
    echoes: jax.Array       # [ack_lag + 1, 2, F] bytes delivered, trimmed; newest at
                            # `step % (ack_lag + 1)`
    share: jax.Array
    queue: jax.Array
    forward: jax.Array
    history: jax.Array      # [lag + 1, L + 1, 3] link signals, newest at `step % (lag + 1)`
    finish: jax.Array
    delivered: jax.Array
    trimmed: jax.Array
    duplicated: jax.Array
    stalls: jax.Array
    blackholed: jax.Array
    link_bytes: jax.Array
    max_fill: jax.Array
    series: jax.Array
    # the steady-state test (`_steady_jump`): the window's first step, whether a flow started
    # or ended (or a failure struck) in it, the flows' delivery rate (bytes per step) over
    # the window before, and the totals as they stood at its start
    win_start: jax.Array
    win_events: jax.Array
    prev_rate: jax.Array
    n_sending: jax.Array
    at_start: jax.Array     # [5, F] delivered, trimmed, duplicated, blackholed, stalls
    link_at_start: jax.Array
    jumped: jax.Array       # int32: steps skipped


def utilisation(arrive, capacity):
    """float[L+1]: each link's utilisation as its packet queue sees it, capped at RHO_MAX
    (the share of packets that find that queue busy)."""
    return jnp.clip(arrive / capacity, 0.0, RHO_MAX)


def packet_wait(rho, capacity, pkt):
    """float[L+1] s: the mean wait of a packet in an M/D/1 queue at the link's utilisation
    `rho` (`utilisation`): the queueing that packets meet even where the fluid queue is
    empty."""
    return PACKET_QUEUEING * pkt / capacity * rho / (2.0 * (1.0 - rho))


def packet_tail(rho, buffer, pkt, variability, possible):
    """float[L+1]: the share of a link's packets that find its buffer full in the packet
    queue under the fluid one (where `possible`): rho exp(-2 (1 - rho) B / (rho c2 pkt)),
    the diffusion approximation of a GI/D/1 queue at utilisation `rho` (`utilisation`)
    whose arrivals have squared coefficient of variation c2 = `variability`."""
    decay = 2.0 * (1.0 - rho) / jnp.maximum(rho * variability * pkt, TINY)
    return jnp.where(possible & (variability > 0.0), rho * jnp.exp(-decay * buffer),
                     0.0) if PACKET_TRIMS else jnp.zeros_like(rho)


def whole_packets(key, expected, pkt):
    """float[F]: bytes in whole packets drawn at random for `expected` packets per flow in a
    step: at least one with a Poisson count's chance 1 - exp(-x), then x / (1 - exp(-x)) of
    them, so the mean is x (the tail's trims and the timer's duplicates)."""
    some = -jnp.expm1(-expected)
    hit = jax.random.uniform(key, expected.shape) < some
    return jnp.where(hit, pkt * expected / jnp.maximum(some, TINY), 0.0)


def poisson_packets(key, expected):
    """float[F]: a Poisson count of packets of mean `expected` per flow, by inversion over
    its first POISSON_TERMS terms and, past a mean of POISSON_TERMS / 3, the normal
    approximation (both from one uniform draw: `jax.random.poisson` costs ~30 of them)."""
    u = jax.random.uniform(key, expected.shape)
    lam = jnp.maximum(expected, TINY)[:, None]
    k = jnp.arange(POISSON_TERMS, dtype=jnp.float32)
    cdf = jnp.cumsum(jnp.exp(k * jnp.log(lam) - lam - jax.lax.lgamma(k + 1.0)), axis=-1)
    small = (u[:, None] > cdf).sum(-1).astype(jnp.float32)
    big = jnp.maximum(jnp.round(expected + jnp.sqrt(expected) * ndtri(u)), 0.0)
    return jnp.where(expected > POISSON_TERMS / 3.0, big, small)


def nic_round_robin(window, rtt, sending, src, nic, pkt, num_gpus: int, shared: bool = True):
    """(float[F] bytes/s, bool[F]): what each flow gets of its GPU's NIC (`nic` [N] bytes/s)
    and whether the round robin, not the window, holds it there.

    uec.cpp's UecNIC serves the sources that may send in a FIFO, a packet each; a source its
    window stops leaves the FIFO and joins its back when an ACK frees the window. So a turn
    comes every `cycle` = pkt / level, and a window-limited flow sends its W bytes per RTT
    plus the wait for its next turn (cycle - pkt / nic: none for a lone flow): its demand
    W / (rtt + cycle - pkt / nic) falls as the NIC gets busier. The level is where the
    demands, each capped at the level, fill the NIC (found by bisection, NIC_BISECTIONS
    halvings of its log between nic / flows and nic); a NIC its flows cannot fill gives
    every flow W / rtt. With NIC_WINDOW_WAIT off: max-min fair on W / rtt. `shared` (static)
    False: no NIC ever has two flows (the host knows: a permutation, a ring step), so there
    is no level to search (a vmapped run would compute the search for nothing)."""
    active = sending.astype(jnp.float32)
    count = jnp.maximum(jax.ops.segment_sum(active, src, num_segments=num_gpus), 1.0)
    own = pkt / nic[src]

    def demand(level):
        wait = jnp.maximum(pkt / level[src] - own, 0.0) if NIC_WINDOW_WAIT else 0.0
        return jnp.where(sending, window / (rtt + wait), 0.0)

    def filled(level):
        got = jnp.minimum(demand(level), level[src])
        return jax.ops.segment_sum(got, src, num_segments=num_gpus)

    def halve(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        over = filled(jnp.exp(mid)) >= nic
        return jnp.where(over, lo, mid), jnp.where(over, mid, hi)

    def bisect(_):
        bounds = (jnp.log(nic / count), jnp.log(nic))
        return jax.lax.fori_loop(0, NIC_BISECTIONS, halve, bounds)[1]

    # one flow per NIC (a permutation, a ring step) has the whole NIC: nothing to search;
    # nor where no shared NIC is full even at its whole rate (filled grows with the level, so
    # every level below leaves it unfilled too: no flow is held, whatever the search found)
    full = filled(nic) >= nic * (1.0 - 1e-6)
    hi = (jax.lax.cond(jnp.any((count > 1.0) & full), bisect, lambda _: jnp.log(nic), None)
          if shared else jnp.log(nic))
    top = jnp.minimum(jnp.exp(hi), nic)     # exactly the NIC where one flow has it all
    level = jnp.where(filled(top) >= nic * (1.0 - 1e-6), top, jnp.inf)
    want = demand(level)
    held = sending & (want > level[src])
    return jnp.where(held, level[src], want), held


def _link_signals(queue, capacity, kmin, kmax, passed, wait, busy):
    """float[L+1, 3]: queueing delay (s), ECN mark probability, share passed, per link.

    `wait` (s) is the packet-level wait on top of the fluid queue (set only where that is
    empty) and `busy` the share of packets that find the packet queue non-empty (the link's
    utilisation). RED marks linearly between Kmin and Kmax of the queue a packet finds. On a
    fluid queue that is its level; on the packet queue it is RED averaged over the queue's
    spread, taken as the diffusion approximation's exponential, P(Q > x) = busy exp(-x busy /
    mean) with the packet wait's mean: packets near full load find the queue now empty, now
    past Kmin, so a link just under full load marks some and one far past Kmin not all of them
    (MARK_SPREAD; off: RED on the mean)."""
    delay = queue / capacity + wait
    span = jnp.maximum(kmax - kmin, 1.0)
    mean = jnp.where(jnp.isfinite(capacity), wait * capacity, 0.0)   # bytes
    decay = busy / jnp.maximum(mean, TINY)
    spread = busy * (jnp.exp(-decay * kmin) - jnp.exp(-decay * kmax)) / jnp.maximum(
        decay * span, TINY)
    mark = jnp.where((mean > 0.0) & MARK_SPREAD, jnp.clip(spread, 0.0, 1.0),
                     jnp.clip((queue + mean - kmin) / span, 0.0, 1.0))
    return jnp.stack([delay, mark, passed], axis=-1)


def _path(signals_at):
    """Per slot from gathered link signals [F, K, H, 3]: (queueing delay, mark probability,
    share passed)."""
    delay = signals_at[..., 0].sum(-1)
    mark = 1.0 - jnp.prod(1.0 - signals_at[..., 1], axis=-1)
    passed = jnp.prod(signals_at[..., 2], axis=-1)
    return delay, mark, passed


def spurious_share(rate, rtt, mark, p):
    """float[F]: the share of each flow's packets that are duplicates (rate bytes/s, rtt s,
    mark: float[F]), sent because its retransmission timer fired while the receiver held
    their ACK back (nothing was lost).

    uec.cpp: `UecSink::shouldSack` ACKs every `ack_packets` packets, or at once on a marked
    packet or a duplicate; `UecSrc::startRTO` fires `rto` after the oldest unACKed packet
    left, and the duplicate waits for the flow's next send slot. A run of k packets up to the
    receiver's next ACK (marked at k, or k = ack_packets) times out when its first packet's
    ACK comes back after `rto`: (k - 1) gap + rtt > rto, with gap the time between the flow's
    packets. Then every packet of the run sent more than `rto` before the run's first ACK
    (its own, or the duplicate's) is sent again. Within 0.012 of a packet-by-packet
    simulation of those rules (tests/test_dynamic.py): the duplicates' own slots shift the
    packets after them a little."""
    gap = (p.pkt / jnp.maximum(rate, TINY))[:, None]
    rtt, mark = rtt[:, None], mark[:, None]
    no_mark = 1.0 - mark
    sent_before = jnp.ceil(p.rto / gap)                 # packets sent before the timer fires
    duplicate_acked = sent_before * gap + rtt            # the first duplicate's ACK is back
    run_max = jnp.minimum(jnp.ceil(p.ack_packets), ACK_RUN_MAX)
    k = jnp.arange(1, ACK_RUN_MAX + 1, dtype=gap.dtype)  # a run's length: the columns
    prob = jnp.where(k < run_max, mark * no_mark ** (k - 1),
                     jnp.where(k == run_max, no_mark ** (k - 1), 0.0))
    acked = (k - 1) * gap + rtt
    length = jnp.minimum(k, sent_before)
    late = jnp.ceil((jnp.minimum(acked, duplicate_acked) - p.rto) / gap)
    duplicates = (prob * jnp.where(acked > p.rto, jnp.clip(late, 1.0, length), 0.0)).sum(1)
    originals = (prob * length).sum(1)
    per_original = duplicates / jnp.maximum(originals, TINY)
    return per_original / (1.0 + per_original)


class _Run(NamedTuple):
    """What every step of one run reads and never changes: the inputs of `simulate_dynamic`
    (see there), the streams of its random draws and a few arrays derived once."""

    links: jax.Array
    start: jax.Array
    src: jax.Array
    nic: jax.Array
    base_rtt: jax.Array
    max_window: jax.Array
    capacity: jax.Array
    buffer: jax.Array
    kmin: jax.Array
    kmax: jax.Array
    multiplexed: jax.Array
    pair: jax.Array
    pair_link: jax.Array
    p: DynamicParams
    key: jax.Array          # the marked ACKs' draws; the others' streams fold it
    tail_key: jax.Array
    dup_key: jax.Array
    trim_key: jax.Array
    stall_key: jax.Array
    live_f: jax.Array       # float[F, K] the slots a recycling policy may move bytes to
    n_live: jax.Array       # float[F, 1] how many
    revisits: jax.Array     # bool[F]: the bitmap walk comes back to an EV (more packets than
                            # live EVs: one with fewer sends one on each and is done first)
    real: jax.Array         # bool[L+1]: not the sentinel
    edges: jax.Array        # int32[RECORDS + 1]: the steps where each record interval starts
    strike: Strike | None   # a failure during the phase (None: none)
    dead: jax.Array | None  # bool[L+1]: dead now (None without a strike)
    num_gpus: int
    ev_mix: Callable
    lag: int
    ack_lag: int
    shared_nics: bool


class _Send(NamedTuple):
    """Step 2, per flow: what it sends this step and what it knows (the signals `lag` steps
    late)."""

    now: jax.Array
    sending: jax.Array
    seen_delay: jax.Array   # [F, K]
    seen_mark: jax.Array    # [F, K]
    seen_pass: jax.Array    # [F, K]
    delay_f: jax.Array      # the slots' mean queueing delay
    rtt: jax.Array
    uncapped: jax.Array     # its NIC's share, before the cap at what is left
    held: jax.Array         # its NIC's round robin, not its window, holds it
    marked_w: jax.Array     # [F, K] share x passed x marked
    unmarked_w: jax.Array   # [F, K]
    mark_f: jax.Array
    dup: jax.Array          # the share of its packets the timer sends twice
    rate: jax.Array
    per_ack: jax.Array      # packets per clean ACK
    slot_rate: jax.Array    # [F, K]


class _Links(NamedTuple):
    """Step 3, per link: arrivals, the fluid queue and what the packet queue adds."""

    contrib: jax.Array      # [F*K*H] each entry's arrivals
    arrive: jax.Array
    busy: jax.Array         # the packet queue's utilisation
    merging: jax.Array      # the share of packets that meet others at random
    others: jax.Array       # merging paths less one: the packet queue's cap in packets
    queue: jax.Array
    passed: jax.Array
    link_bytes: jax.Array
    forward: jax.Array
    tail: jax.Array         # the share the packet queue's tail trims


class _Delivered(NamedTuple):
    """Step 4, per flow: the step's bytes delivered, trimmed and sent twice."""

    owed: jax.Array
    dup_owed: jax.Array
    dup_bytes: jax.Array
    black: jax.Array        # bytes sent onto a dead link (lost without a NACK, sent again)
    lost_bytes: jax.Array
    done_now: jax.Array
    frac: jax.Array
    gone: jax.Array
    remaining: jax.Array


class _Nscc(NamedTuple):
    """Step 5, per flow: NSCC's state after the step's ACKs and NACKs (`NsccState`), the echo
    ring, and the ACK stalls it starts."""

    echoes: jax.Array
    nscc: "NsccState"
    stall: jax.Array
    stalls: jax.Array
    dup_owed: jax.Array


def _send(run: _Run, s: _State) -> _Send:
    """Steps 1-2: the path signals as the sender sees them, its rate (the NIC's round robin,
    capped at what is left) and the share of its packets it sends twice."""
    p = run.p
    dt = p.dt
    now = s.step.astype(jnp.float32) * dt
    sending = (s.remaining > 0) & (run.start <= now)
    # a stalled flow is out of its NIC's round robin until its timer fires
    active = sending & (now >= s.stall)
    # what the sender knows: the link signals `lag` steps ago
    seen = s.history[(s.step + 1) % (run.lag + 1)]
    seen_delay, seen_mark, seen_pass = _path(seen[run.links])
    delay_f = (s.share * seen_delay).sum(1)
    rtt = run.base_rtt + delay_f
    # the NIC's round robin, a packet per turn to each flow its window lets send
    uncapped, held = nic_round_robin(s.window, rtt, active, run.src, run.nic, p.pkt,
                                     run.num_gpus, run.shared_nics)
    # never much past what is left: the last step sends what should get through
    through_seen = (s.share * seen_pass).sum(1)
    clean = s.share * seen_pass
    marked_w = clean * seen_mark
    unmarked_w = clean - marked_w
    mark_f = marked_w.sum(1) / jnp.maximum(clean.sum(1), TINY)
    # packets per clean ACK: a packet that fills the window or empties the backlog asks for an
    # ACK at once (uec.cpp, the AR flag), so a window-limited flow or one sending its last
    # bytes is ACKed packet by packet (an upper bound: htsim ACKs 0.36-0.79 of its unmarked
    # packets), one held back by its NIC every 16 KiB -- and the share of its packets it
    # sends twice when its timer fires first
    dup = jnp.where(held & SPURIOUS_TIMEOUTS, spurious_share(uncapped, rtt, mark_f, p), 0.0)
    rate = jnp.minimum(uncapped, (s.remaining + s.owed + s.dup_owed) / (
        dt * jnp.maximum(through_seen, MIN_THROUGH) * (1.0 - dup)))
    if run.dead is not None:
        # a flow whose every used slot died hears nothing back: past its window it sends only
        # what its timer resends, a packet every rto
        blind = (s.share * ~jnp.any(run.dead[run.links], axis=-1)).sum(1) <= 1e-6
        rate = jnp.where(blind, jnp.minimum(rate, p.pkt / p.rto), rate)
    per_ack = jnp.where(held & (rate >= uncapped), p.ack_packets, 1.0)
    dup = jnp.where(per_ack > 1.0, dup, 0.0)
    return _Send(now=now, sending=sending, seen_delay=seen_delay, seen_mark=seen_mark,
                 seen_pass=seen_pass, delay_f=delay_f, rtt=rtt, uncapped=uncapped, held=held,
                 marked_w=marked_w, unmarked_w=unmarked_w, mark_f=mark_f, dup=dup, rate=rate,
                 per_ack=per_ack, slot_rate=rate[:, None] * s.share)


def _queues(run: _Run, s: _State, send: _Send) -> _Links:
    """Step 3: every link's arrivals, fluid queue, trims, departures and packet queue."""
    p, links, capacity, buffer, real = run.p, run.links, run.capacity, run.buffer, run.real
    num_links = capacity.shape[0]
    dt = p.dt
    # arrivals: hop h gets what the hops before it forwarded in the last step; a link passes
    # on what it got times its last step's ratio (above 1 while its queue drains), but never
    # more than its capacity of what is offered to it now: the ratio was taken on the last
    # step's arrivals, and those sending change (flows start, end)
    flat = links.reshape(-1)
    offered = jax.ops.segment_sum(
        jnp.broadcast_to(send.slot_rate[..., None], links.shape).reshape(-1), flat,
        num_segments=num_links)
    ceiling = jnp.maximum(capacity / jnp.maximum(offered, TINY), 1.0)
    upstream = jnp.cumprod(jnp.minimum(s.forward, ceiling)[links], axis=-1)
    reach = jnp.concatenate([jnp.ones_like(upstream[..., :1]), upstream[..., :-1]], -1)
    contrib = (send.slot_rate[..., None] * reach).reshape(-1)
    arrive = jax.ops.segment_sum(contrib, flat, num_segments=num_links)
    arrive = jnp.where(real, arrive, 0.0)
    busy = utilisation(arrive, capacity)
    # packets meet at random only where several flows merge (1 - the flows' Herfindahl index
    # of the arrivals: 0 for one flow), and n paced paths queue at most n - 1 packets ahead
    # of one (n*D/D/1; n = 1 / the paths' Herfindahl index)
    per_pair = jax.ops.segment_sum(contrib, run.pair.reshape(-1),
                                   num_segments=run.pair_link.shape[0])
    flow_sq = jax.ops.segment_sum(per_pair * per_pair, run.pair_link, num_segments=num_links)
    path_sq = jax.ops.segment_sum(contrib * contrib, flat, num_segments=num_links)
    arrive_sq = jnp.maximum(arrive * arrive, TINY)
    merging = run.multiplexed * (1.0 - flow_sq / arrive_sq)
    others = arrive_sq / jnp.maximum(path_sq, TINY) - 1.0
    level = s.queue + arrive * dt - jnp.where(jnp.isfinite(capacity), capacity * dt, 0.0)
    over = jnp.maximum(level - buffer, 0.0)
    queue = jnp.where(real, jnp.clip(level, 0.0, buffer), 0.0)
    passed = jnp.where(real & (arrive > 0), 1.0 - over / jnp.maximum(arrive * dt, TINY), 1.0)
    departed = jnp.where(real, s.queue + arrive * dt - over - queue, 0.0)
    # what a link passes on relative to what it got (above 1 while its queue drains): the
    # next hops' arrivals are the departures, not the offered load
    forward = jnp.where(real & (arrive > 0), departed / jnp.maximum(arrive * dt, TINY), 1.0)
    if run.dead is not None:
        # a dead link holds and passes nothing, and trims nothing (no NACK: what reaches it
        # is black-holed, `_deliver`)
        queue = jnp.where(run.dead, 0.0, queue)
        departed = jnp.where(run.dead, 0.0, departed)
        forward = jnp.where(run.dead, 0.0, forward)
        passed = jnp.where(run.dead, 1.0, passed)
    # the packet queue's tail: a packet finds the buffer full where the fluid queue is empty
    # and more flows merge than the buffer holds packets
    flows_in = arrive_sq / jnp.maximum(flow_sq, TINY)   # 1 / the flows' Herfindahl index
    # a flow its NIC holds back sends evenly spaced packets (the round robin's turns): only
    # the windows' bursts make the packet queue's tail (their share of the arrivals)
    windowed = jnp.where(send.held, 0.0, 1.0)[:, None, None]
    bursts = jax.ops.segment_sum((contrib.reshape(links.shape) * windowed).reshape(-1),
                                 flat, num_segments=num_links)
    tail = packet_tail(busy, buffer, p.pkt, merging * bursts / jnp.maximum(arrive, TINY),
                       real & (queue <= 0.0) & ((flows_in - 1.0) * p.pkt > buffer))
    return _Links(contrib=contrib, arrive=arrive, busy=busy, merging=merging, others=others,
                  queue=queue, passed=passed, link_bytes=s.link_bytes + departed,
                  forward=forward, tail=tail)


def _deliver(run: _Run, s: _State, send: _Send, lk: _Links) -> _Delivered:
    """Step 4: the bytes that pass every hop leave R; the trimmed ones (fluid overflow and
    packet tail, whole packets at random) and the timer's duplicates do not."""
    p, links = run.p, run.links
    dt = p.dt
    # this step's bytes: those trimmed anywhere on their slot stay in R
    through = jnp.prod(lk.passed[links], axis=-1)                       # [F, K]
    sent = send.slot_rate * dt
    if run.dead is None:
        black = jnp.zeros(sent.shape[0])
    else:
        # a path through a dead link delivers nothing and hears nothing back
        path_alive = ~jnp.any(run.dead[links], axis=-1)
        black = (sent * ~path_alive).sum(1)
        sent = jnp.where(path_alive, sent, 0.0)
    arrived = (sent * through).sum(1)
    fluid_lost = (sent * (1.0 - through)).sum(1)
    if RANDOM_TRIMS:
        # the overflow trims whole packets at random: a flow loses a Poisson count of them
        # with the fluid's mean (taken from what it sent, as the tail's are)
        drawn = p.pkt * poisson_packets(jax.random.fold_in(run.trim_key, s.step),
                                        fluid_lost / p.pkt)
        arrived = arrived + fluid_lost
    else:
        drawn = jnp.zeros_like(fluid_lost)
    # the tail trims whole packets, a NACK at a time; a flow slower than a packet a step owes
    # the rest of it to the steps that follow
    expect = (sent * through * (1.0 - jnp.prod(1.0 - lk.tail[links], axis=-1))).sum(1) / p.pkt
    tail_bytes = whole_packets(jax.random.fold_in(run.tail_key, s.step), expect, p.pkt)
    owed = s.owed + tail_bytes + drawn
    taken = jnp.minimum(owed, arrived)
    owed = owed - taken
    arrived = arrived - taken
    # the timer resends whole packets, drawn as the tail's trims are (the mean is the share
    # `dup` of what arrived), and they go before the flow's next new bytes: the duplicates
    # arrive too, for nothing
    dup_owed = s.dup_owed + whole_packets(jax.random.fold_in(run.dup_key, s.step),
                                          arrived * send.dup / p.pkt, p.pkt)
    dup_bytes = jnp.minimum(dup_owed, arrived)
    dup_owed = dup_owed - dup_bytes
    ok_bytes = arrived - dup_bytes
    lost_bytes = (drawn if RANDOM_TRIMS else fluid_lost) + tail_bytes
    # a byte's tolerance: trimmed remainders would otherwise shrink geometrically
    done_now = send.sending & (ok_bytes >= s.remaining - LAST_BYTE)
    # the share of the step the flow needed at its uncapped rate
    got = ok_bytes * send.uncapped / jnp.maximum(send.rate, TINY)
    frac = jnp.where(done_now, jnp.minimum(s.remaining / jnp.maximum(got, TINY), 1.0), 1.0)
    gone = jnp.where(done_now, s.remaining, jnp.minimum(ok_bytes, s.remaining))
    return _Delivered(owed=owed, dup_owed=dup_owed, dup_bytes=dup_bytes, black=black,
                      lost_bytes=lost_bytes,
                      done_now=done_now, frac=frac, gone=gone,
                      remaining=jnp.where(done_now, 0.0, s.remaining - gone))


def _last_byte_wait(run: _Run, s: _State, lk: _Links, frac, wait):
    """float[F, K] s: the queueing a flow's last byte meets on each slot, as the queues stood
    when it joined them (`frac` into the step: between the step's start and end queues), not
    at the step's end: a short flow's last bytes leave while the queues they built drain."""
    links, capacity = run.links, run.capacity
    if not DRAIN_AHEAD:
        ends = jnp.stack([s.queue / capacity + wait, (lk.queue - s.queue) / capacity], -1)
        path_ends = ends[links].sum(2)                                   # [F, K, 2]
        return path_ends[..., 0] + frac[:, None] * path_ends[..., 1]
    # hop by hop: a later hop's queue drains (at its capacity less what the other flows bring
    # it, a growing one held where it is) while the byte waits at the hops before it; the
    # flow's own bytes there are still in those queues with it
    at = jnp.stack([s.queue, lk.queue - s.queue, capacity, wait, lk.arrive], -1)[links]
    others_in = at[..., 4] - lk.contrib.reshape(links.shape)
    drain = jnp.where(jnp.isfinite(at[..., 2]), jnp.maximum(at[..., 2] - others_in, 0.0), 0.0)

    def hop(waited, link):
        start_q, change, cap, link_wait, link_drain = link
        q = jnp.maximum(start_q + frac[:, None] * change - link_drain * waited, 0.0)
        return waited + q / cap + link_wait, None

    joined, _ = jax.lax.scan(hop, jnp.zeros(links.shape[:2]), tuple(
        jnp.moveaxis(x, 2, 0) for x in (*jnp.moveaxis(at[..., :4], -1, 0), drain)))
    return joined


class NsccState(NamedTuple):
    """A sender's NSCC state between steps, float[F] (uec.cpp's UecSrc): `window` (bytes,
    `_cwnd`); `avg_delay` (s, `_avg_delay`); `fi_count` (bytes ACKed with under 1 us of delay
    in a row, `_fi_count`); `marks` (marked ACKs since the last cut); `since_dec` (s since
    the last cut, `_last_dec_time`); `achieved` (bytes ACKed since quick adapt's clock last
    ran, `_achieved_bytes`); `qa_clock` (s, `_qa_endtime`; inf before the first ACK);
    `qa_trigger` bool[F] (a trim armed quick adapt, `_trigger_qa`)."""

    window: jax.Array
    avg_delay: jax.Array
    fi_count: jax.Array
    marks: jax.Array
    since_dec: jax.Array
    achieved: jax.Array
    qa_clock: jax.Array
    qa_trigger: jax.Array


class Acks(NamedTuple):
    """What comes back to a sender in one step, float[F]: `acked`, `nacked` the bytes
    delivered and trimmed a round trip before; `dup_bytes` bytes the timer sent twice;
    `mark` the share of its packets ECN-marked; `delay_marked`, `delay_clean` (s) the
    queueing delay its marked and unmarked ACKs carry (each the share-weighted mean over its
    slots); `delay` (s) its slots' mean queueing delay; `per_ack` packets per clean ACK;
    `rate` (bytes/s) and `rtt` (s) as it sends now; `sending` bool[F]; `hit`, `stall_draw`
    uniform [0, 1) draws: whether a marked ACK came back, whether quick adapt leaves the
    last packet's ACK held back."""

    acked: jax.Array
    nacked: jax.Array
    dup_bytes: jax.Array
    mark: jax.Array
    delay_marked: jax.Array
    delay_clean: jax.Array
    delay: jax.Array
    per_ack: jax.Array
    rate: jax.Array
    rtt: jax.Array
    sending: jax.Array
    hit: jax.Array
    stall_draw: jax.Array


def nscc_update(state: NsccState, acks: Acks, p: DynamicParams, base_rtt, max_window, now
                ) -> tuple[NsccState, jax.Array]:
    """(the state after the step's ACKs and NACKs, bool[F] an ACK stall starts): NSCC as
    the module states it (`UecSrc::updateCwndOnAck_NSCC`, `updateCwndOnNack_NSCC`,
    `quick_adapt`, `update_delay`, `can_send_NSCC`), one step of `p.dt` at a time. A pure
    function of its arguments (the draws come in `acks`); `_nscc` feeds it the echoes."""
    dt, mark_f, rtt = p.dt, acks.mark, acks.rtt
    acked, nacked = acks.acked, acks.nacked
    delay_marked, delay_clean = acks.delay_marked, acks.delay_clean
    unmarked = acked * (1.0 - mark_f)
    packets = acked / p.pkt
    ack_count = unmarked / (p.pkt * acks.per_ack) + mark_f * packets
    weight = 1.0 - (1.0 - p.delay_alpha) ** ack_count
    sample_clean = jnp.where(delay_clean > p.target, 0.25 * base_rtt, delay_clean)
    sample = mark_f * delay_marked + (1.0 - mark_f) * sample_clean
    nack_weight = 1.0 - (1.0 - p.delay_alpha) ** (nacked / p.pkt)
    avg = state.avg_delay + weight * (sample - state.avg_delay)
    avg = avg + nack_weight * (p.network_rtt - avg)
    window = state.window
    fast = acks.delay < FAST_DELAY_S
    fi_count = jnp.where(fast, state.fi_count + acked, 0.0)
    fast_inc = fast & (fi_count > window)
    inc = jnp.where(delay_clean >= p.target, p.fi * unmarked,
                    p.alpha * unmarked * jnp.maximum(p.target - delay_clean, 0.0))
    window = jnp.where(fast_inc, window + unmarked * p.fi_scale,
                       window + inc / jnp.maximum(window, p.mtu))
    window = window + p.eta * dt / p.network_rtt
    # whether a marked ACK came back this step: marks fall on packets at random, so flows
    # sharing a bottleneck cut at different times (NSCC's unfairness, which spreads their
    # completions)
    marked_ack = acks.hit < 1.0 - (1.0 - mark_f) ** packets
    marks = state.marks + jnp.where(marked_ack, 1.0, 0.0)
    since_dec = state.since_dec + dt
    cut = ((marks >= 1.0) & (since_dec > base_rtt) & (delay_marked >= p.target) &
           (avg > p.target))
    factor = jnp.maximum(1.0 - p.gamma * (avg - p.target) / jnp.maximum(avg, TINY), 0.5)
    window = jnp.where(cut, window * factor, window)
    marks = jnp.where(cut, 0.0, marks)
    since_dec = jnp.where(cut, 0.0, since_dec)
    # a timeout takes its packet off the window (`mark_packet_for_retransmission`)
    window = window - NACK_DECREASE * nacked - acks.dup_bytes
    # quick adapt: every base RTT + target from the flow's first ACK or NACK (which starts the
    # clock and is not counted), where a trim armed it (it stays armed until it fires: uec.cpp
    # clears `_trigger_qa` only then) or the delay is past 4 targets
    achieved = state.achieved + acked
    armed = state.qa_trigger | (nacked > 0)
    first = ~jnp.isfinite(state.qa_clock) & ((acked > 0.0) | (nacked > 0.0))
    due = (now >= state.qa_clock) | first
    adapt = (QUICK_ADAPT & due & ~first & (armed | (acks.delay > 4.0 * p.target)) &
             (achieved < max_window / 8.0))
    adapted = jnp.maximum(achieved, p.mtu)
    window = jnp.where(adapt, adapted, window)
    # the cut can leave the window below what is in flight: a flow its NIC holds back, its
    # window well above what it has in flight, sends no packet that asks for an ACK at once
    # (the AR flag goes on a packet that fills the window), so where the receiver holds back
    # the last one's (neither marked nor the run's last) and no more are on the way to end
    # the run (fewer in flight than `ack_packets`: a flow its NIC paces slowly), nothing comes
    # back and nothing may be sent until the timer fires, `rto` after that packet left (about
    # half an RTT before the ACK that ran quick adapt); then the packet goes again, a
    # duplicate (uec.cpp: `can_send_NSCC`, `UecSrc::sendNewPacket`, `UecSink::shouldSack`)
    in_flight = p.pkt + acks.rate * rtt
    held_ack = (1.0 - mark_f) * (1.0 - 1.0 / acks.per_ack)
    stalls = (ACK_STALLS & adapt & (acks.per_ack > 1.0) & (in_flight < acks.per_ack * p.pkt) &
              (adapted < in_flight + p.pkt) & (state.window >= in_flight + p.pkt) &
              (acks.stall_draw < held_ack))
    return NsccState(
        window=jnp.where(acks.sending, jnp.clip(window, p.mtu, max_window), state.window),
        avg_delay=avg, fi_count=fi_count, marks=marks, since_dec=since_dec,
        achieved=jnp.where(due, 0.0, achieved),
        qa_clock=jnp.where(due, now + base_rtt + p.target, state.qa_clock),
        qa_trigger=armed & ~adapt), stalls


def _nscc(run: _Run, s: _State, send: _Send, dl: _Delivered) -> _Nscc:
    """Step 5: NSCC (`nscc_update`) on what came back this step, the ACKs and NACKs of the
    bytes delivered and trimmed `ack_lag` steps ago (a byte crosses its path within its step
    here, so its echo is a round trip behind; the window must not react to trims it cannot
    know of), and the ACK stall it can cause."""
    p = run.p
    echoes = s.echoes.at[s.step % (run.ack_lag + 1)].set(jnp.stack([dl.gone, dl.lost_bytes]))
    acked, nacked = echoes[(s.step + 1) % (run.ack_lag + 1)]
    # the delay samples of the marked and of the unmarked ACKs (per slot, not the mean: an EV
    # on a slow path cuts the window when its marked ACK comes back late)
    delay_marked = ((send.marked_w * send.seen_delay).sum(1) /
                    jnp.maximum(send.marked_w.sum(1), TINY))
    delay_clean = ((send.unmarked_w * send.seen_delay).sum(1) /
                   jnp.maximum(send.unmarked_w.sum(1), TINY))
    # one draw per flow and step from the run's key for a marked ACK, one from its stall key
    state, stalls = nscc_update(
        NsccState(*(getattr(s, name) for name in NsccState._fields)),
        Acks(acked=acked, nacked=nacked, dup_bytes=dl.dup_bytes, mark=send.mark_f,
             delay_marked=delay_marked, delay_clean=delay_clean, delay=send.delay_f,
             per_ack=send.per_ack, rate=send.rate, rtt=send.rtt, sending=send.sending,
             hit=jax.random.uniform(jax.random.fold_in(run.key, s.step), acked.shape),
             stall_draw=jax.random.uniform(jax.random.fold_in(run.stall_key, s.step),
                                           acked.shape)),
        p, run.base_rtt, run.max_window, send.now)
    return _Nscc(
        echoes=echoes, nscc=state,
        stall=jnp.where(stalls, send.now + p.dt + p.rto - STALL_SENT_RTT * send.rtt, s.stall),
        stalls=stalls, dup_owed=dl.dup_owed + jnp.where(stalls, p.pkt, 0.0))


class EvSignals(NamedTuple):
    """What a policy's EV mix at ACK time reads (`simulate_dynamic`'s `ev_mix`), per sender
    (F) and slot (K), the links' signals `lag` steps late: `share` float[F, K] its split now;
    `seen_pass`, `seen_mark` float[F, K] the share of a slot's packets that got through and
    of those the share ECN-marked; `live` float[F, K] 1 on the slots it may move bytes to,
    `n_live` float[F, 1] how many; `per_ack` float[F] packets per clean ACK; `sending`
    bool[F]; `revisits` bool[F] whether the bitmap walk comes back to an EV (more packets
    than live EVs); `pace` float[F] the share of the way to a new mix one step covers: the
    walk re-weights an EV only when it comes back to it, once per pass over the live EVs, so
    a mix moves within an RTT or a pass, whichever is longer."""

    share: jax.Array
    seen_pass: jax.Array
    seen_mark: jax.Array
    live: jax.Array
    n_live: jax.Array
    per_ack: jax.Array
    sending: jax.Array
    revisits: jax.Array
    pace: jax.Array


def held_mix(sig: EvSignals):
    """The split `react` gave, held for the phase (spraying's EV cycle, ECMP's QPs)."""
    return sig.share


def _toward(sig: EvSignals, aim, moving):
    return sig.share + jnp.where(moving, sig.pace, 0.0)[:, None] * (aim - sig.share)


def reps_mix(sig: EvSignals):
    """REPS (htsim's uec_mp.cpp, UecMpReps): an EV comes back to the buffer with a clean ACK
    (one per `per_ack` unmarked packets, none with a marked or trimmed one) and is used once;
    every other packet draws a fresh EV uniformly at random."""
    clean_ev = sig.share * sig.seen_pass * (1.0 - sig.seen_mark) * sig.live
    clean_sum = clean_ev.sum(1, keepdims=True)
    reuse = jnp.clip(clean_sum / sig.per_ack[:, None], 0.0, 1.0)
    aim = ((1.0 - reuse) * sig.live / sig.n_live +
           reuse * clean_ev / jnp.maximum(clean_sum, TINY))
    return _toward(sig, aim, sig.sending)


def bitmap_mix(sig: EvSignals):
    """htsim's bitmap walk (uec_mp.cpp, UecMpBitmap): it skips an EV once per ECN echo and
    `BITMAP_NACK` times per NACK, so per visit it sends with probability 1 / (1 + marks + 4
    trims) per packet sent on it; a flow with fewer packets than live EVs never comes back
    to one."""
    penalty = sig.seen_mark * sig.seen_pass + BITMAP_NACK * (1.0 - sig.seen_pass)
    visits = sig.live / (1.0 + penalty)
    aim = visits / jnp.maximum(visits.sum(1, keepdims=True), TINY)
    return _toward(sig, aim, sig.sending & sig.revisits)


def _ev_mix(run: _Run, s: _State, send: _Send):
    """float[F, K]: the policy at ACK time, the EV mix the sender draws from (`run.ev_mix`
    of this step's `EvSignals`)."""
    p = run.p
    walk = run.n_live[:, 0] * p.pkt / jnp.maximum(send.rate, TINY)
    pace = jnp.minimum(p.dt / jnp.maximum(send.rtt, walk), 1.0)
    return run.ev_mix(EvSignals(
        share=s.share, seen_pass=send.seen_pass, seen_mark=send.seen_mark, live=run.live_f,
        n_live=run.n_live, per_ack=send.per_ack, sending=send.sending, revisits=run.revisits,
        pace=pace))


def _struck(run: _Run, s: _State) -> tuple[_Run, _State]:
    """The run as the failure set leaves it at this step (`Strike`): from its step the dead
    links and the degraded ones' capacity, from the policy's reaction on the split it settles
    on (the shares reset to it once, at that step)."""
    st = run.strike
    if st is None:
        return run, s
    struck = s.step >= st.step
    reacted = s.step >= st.react
    live_f = jnp.where(reacted, st.live_after.astype(jnp.float32), run.live_f)
    run = run._replace(
        links=jnp.where(reacted, st.links_after, run.links),
        pair=jnp.where(reacted, st.pair_after, run.pair),
        capacity=jnp.where(struck, st.capacity, run.capacity),
        buffer=jnp.where(struck, st.buffer, run.buffer),
        kmin=jnp.where(struck, st.kmin, run.kmin), kmax=jnp.where(struck, st.kmax, run.kmax),
        live_f=live_f, n_live=jnp.maximum(live_f.sum(1, keepdims=True), 1.0),
        dead=st.dead & struck)
    # the flow's bytes left, split anew over its senders (its planes) as the reaction's EVs
    # share them: a sender given none is done now, one given some sends (again)
    now = s.step == st.react
    left = jax.ops.segment_sum(jnp.where(st.resplit, s.remaining, 0.0), st.group,
                               num_segments=s.remaining.shape[0])
    split = st.inherit * left[st.group]
    resplit = now & st.resplit
    remaining = jnp.where(resplit, split, s.remaining)
    finish = jnp.where(resplit & (split <= 0.0) & (s.remaining > 0.0),
                       s.step.astype(jnp.float32) * run.p.dt,
                       jnp.where(resplit & (split > 0.0), jnp.inf, s.finish))
    return run, s._replace(share=jnp.where(now, st.share_after, s.share),
                           remaining=remaining, finish=finish)


def _record_slot(run: _Run, step):
    """The record interval a step falls in (`edges`)."""
    return jnp.clip(jnp.searchsorted(run.edges, step, side="right") - 1, 0, RECORDS - 1)


def _step(run: _Run, s: _State) -> _State:
    """One step of `dt` (the module's steps 1-5), then the records; with a strike, the
    policy's state as it stands at this step (`_struck`), and where nothing moves while the
    policy has yet to react (every flow left sends only onto dead paths, no queue holds a
    byte) the next step is the reaction's: nothing would change before it."""
    run, s = _struck(run, s)
    p, capacity, real = run.p, run.capacity, run.real
    dt = p.dt
    send = _send(run, s)
    lk = _queues(run, s, send)
    dl = _deliver(run, s, send, lk)
    # where the fluid queue holds bytes it is the queue: no packet wait on top of it
    wait = jnp.where(real & (lk.queue <= 0.0),
                     lk.merging * jnp.minimum(packet_wait(lk.busy, capacity, p.pkt),
                                              lk.others * p.pkt / capacity), 0.0)
    # the last byte is in whichever used slot's queue drains last: asked only in the steps
    # where a flow ends (a gather over every entry, most steps none does)
    def last_byte_delay(_):
        joined = _last_byte_wait(run, s, lk, dl.frac, wait)
        return jnp.max(jnp.where(s.share > 0, joined, 0.0), axis=1)

    now_delay = jax.lax.cond(jnp.any(dl.done_now), last_byte_delay,
                             lambda _: jnp.zeros_like(s.remaining), None)
    cc = _nscc(run, s, send, dl)
    # ---- records
    signals = _link_signals(lk.queue, capacity, run.kmin, run.kmax,
                            lk.passed * (1.0 - lk.tail), wait, lk.busy)
    fill = jnp.where(real, lk.queue / jnp.where(real, run.buffer, 1.0), 0.0)
    slot = _record_slot(run, s.step)
    row = s.series[slot]
    row = jnp.stack([jnp.maximum(row[0], fill.max()), row[1] + dl.gone.sum(),
                     jnp.maximum(row[2], send.sending.sum().astype(jnp.float32))])
    next_step = s.step + 1
    if run.strike is not None:
        idle = ((s.step >= run.strike.step) & (next_step < run.strike.react) &
                (dl.gone.sum() <= 0.0) & (jnp.max(lk.queue) <= 0.0) &
                (jnp.sum(cc.echoes) <= 0.0))
        next_step = jnp.where(idle, run.strike.react, next_step)
    # what the steady-state test must not average over: a flow starts or ends, a failure
    # strikes or the policy reacts to it
    n_sending = send.sending.sum().astype(jnp.int32)
    events = (n_sending != s.n_sending) | jnp.any(dl.done_now)
    if run.strike is not None:
        events = events | (next_step > run.strike.step) & (s.step <= run.strike.react)
    stepped = _State(
        step=next_step, remaining=dl.remaining, **cc.nscc._asdict(), owed=dl.owed,
        dup_owed=cc.dup_owed,
        stall=cc.stall, echoes=cc.echoes, share=_ev_mix(run, s, send), queue=lk.queue,
        forward=lk.forward, history=s.history.at[s.step % (run.lag + 1)].set(signals),
        finish=jnp.where(dl.done_now, send.now + dl.frac * dt + now_delay, s.finish),
        delivered=s.delivered + dl.gone, trimmed=s.trimmed + dl.lost_bytes,
        duplicated=s.duplicated + dl.dup_bytes, stalls=s.stalls + cc.stalls,
        blackholed=s.blackholed + dl.black, link_bytes=lk.link_bytes, max_fill=jnp.maximum(s.max_fill, fill),
        series=s.series.at[slot].set(row), win_start=s.win_start,
        win_events=s.win_events | events, prev_rate=s.prev_rate,
        n_sending=n_sending, at_start=s.at_start, link_at_start=s.link_at_start,
        jumped=s.jumped)
    return _steady_jump(run, stepped, fill, n_sending)


def _totals(s: _State):
    """float[5, F]: what `_steady_jump` integrates per flow (bytes delivered, trimmed,
    delivered twice and black-holed; ACK stalls)."""
    return jnp.stack([s.delivered, s.trimmed, s.duplicated, s.blackholed,
                      s.stalls.astype(jnp.float32)])


def _steady_jump(run: _Run, s: _State, fill, n_sending) -> _State:
    """At the end of each window of `steady_steps` steps (`_window_end`; off where
    `steady_steps` is 0): the steady-state test and, where it holds, the jump. Every other
    step leaves the state as it is and pays for none of the test's bookkeeping."""
    p = run.p
    at_end = (p.steady_steps > 0) & (s.step - s.win_start >= p.steady_steps)
    return jax.lax.cond(at_end, lambda s: _window_end(run, s, fill, n_sending),
                        lambda s: s, s)


def _window_end(run: _Run, s: _State, fill, n_sending) -> _State:
    """At a window's end: where every flow sending delivered at the same rate (within
    `steady_tol`) in this window and the one before, and no flow
    started or ended and no failure struck in this window, the state is a steady one (NSCC's
    windows and the queues may still oscillate, but around a cycle shorter than the window):
    jump to a window before the next event (the first flow's end at the two windows' mean
    rate, the next flow's start, the failure's step or its reaction, the step bound) with the
    rates held, every total (bytes delivered, trimmed, sent twice, black-holed, the links'
    bytes, the ACK stalls) integrated at its rate of the windows and the records filled as
    stepping would fill them; then step again. The window before the event is stepped, so a
    flow's end, its last bytes' queueing and what follows are as in full stepping. Either
    way the next window starts here."""
    p, dt = run.p, run.p.dt
    length = s.step - s.win_start
    span = jnp.maximum(length, 1).astype(jnp.float32)
    totals = _totals(s)
    rate = (totals - s.at_start) / span                 # per step, over this window
    now = s.step.astype(jnp.float32) * dt
    sending = (s.remaining > 0) & (run.start <= now)
    if run.strike is not None:      # a doomed flow's bytes never move after the reaction
        sending = sending & ~(run.strike.doomed & (s.step >= run.strike.react))
    delivering = rate[0]
    close = jnp.abs(delivering - s.prev_rate) <= p.steady_tol * delivering
    steady = (~s.win_events & jnp.any(sending) &
              jnp.all(jnp.where(sending, (delivering > 0.0) & close, True)))
    # the jump: up to a window before the first flow's end at the windows' mean rate
    mean = 0.5 * (delivering + s.prev_rate)
    to_end = jnp.min(jnp.where(sending, s.remaining / jnp.maximum(mean, TINY), jnp.inf))
    waiting = (s.remaining > 0) & (run.start > now)
    to_start = jnp.min(jnp.where(waiting, (run.start - now) / dt, jnp.inf))
    bound = jnp.minimum(jnp.minimum(to_end - p.steady_steps, to_start - 1.0),
                        (p.max_steps - s.step - 1).astype(jnp.float32))
    if run.strike is not None:
        to_strike = jnp.where(s.step < run.strike.step, run.strike.step - s.step,
                              jnp.where(s.step < run.strike.react,
                                        run.strike.react - s.step, 2**30))
        bound = jnp.minimum(bound, to_strike.astype(jnp.float32) - 1.0)
    n = jnp.floor(jnp.clip(bound, 0.0, 2.0**30)).astype(jnp.int32)
    jump = steady & (n >= p.steady_steps)
    n = jnp.where(jump, n, 0)
    nf = n.astype(jnp.float32)
    held = jnp.where(jump, nf, 0.0) * jnp.where(sending, 1.0, 0.0)
    add = jnp.concatenate([mean[None], rate[1:]], 0) * held
    link_rate = (s.link_bytes - s.link_at_start) / span
    # the records over the steps jumped: each interval gets its steps' bytes, the fill and
    # the flows sending as they stand
    lo = jnp.maximum(run.edges[:-1], s.step)
    hi = jnp.minimum(jnp.concatenate([run.edges[1:-1], jnp.array([2**31 - 1], jnp.int32)]),
                     s.step + n)
    overlap = jnp.maximum(hi - lo, 0).astype(jnp.float32)
    series = jnp.stack([
        jnp.where(overlap > 0, jnp.maximum(s.series[:, 0], fill.max()), s.series[:, 0]),
        s.series[:, 1] + overlap * add[0].sum() / jnp.maximum(nf, 1.0),
        jnp.where(overlap > 0, jnp.maximum(s.series[:, 2], n_sending.astype(jnp.float32)),
                  s.series[:, 2])], -1)
    later = nf * dt
    s = s._replace(
        step=s.step + n, remaining=jnp.maximum(s.remaining - add[0], 0.0),
        delivered=s.delivered + add[0], trimmed=s.trimmed + add[1],
        duplicated=s.duplicated + add[2], blackholed=s.blackholed + add[3],
        stalls=s.stalls + jnp.round(add[4]).astype(jnp.int32),
        link_bytes=s.link_bytes + link_rate * nf, series=series,
        since_dec=s.since_dec + later, qa_clock=s.qa_clock + later,
        stall=jnp.where(s.stall > now, s.stall + later, s.stall),
        # the ring buffers' newest entries stay the newest at the new step
        history=jnp.roll(s.history, n, axis=0), echoes=jnp.roll(s.echoes, n, axis=0),
        jumped=s.jumped + n)
    return s._replace(win_start=s.step, win_events=jnp.bool_(False), prev_rate=delivering,
                      at_start=_totals(s), link_at_start=s.link_bytes)


def simulate_dynamic(links, share, live, size, start, src, nic, num_gpus: int, base_rtt,
                     max_window, capacity, buffer, kmin, kmax, multiplexed, pair, pair_link,
                     params: DynamicParams, strike: Strike | None = None, edges=None, *,
                     ev_mix: Callable, lag: int, ack_lag: int, shared_nics: bool = True
                     ) -> Dynamic:
    """Run the phase until every flow is done or `params.max_steps` (see the module).

    links int32[F, K, H] (sentinel L); share float32[F, K] initial split (0 on dead slots);
    live bool[F, K] slots a recycling policy may move bytes to; size float32[F] wire bytes;
    start float32[F] s; src int32[F] sending GPU; nic float32[N] bytes/s per GPU (num_gpus
    static); base_rtt, max_window float32[F] (s, bytes); capacity, buffer, kmin, kmax
    float32[L+1] (bytes/s, bytes; the sentinel: capacity inf, buffer inf); multiplexed
    float32[L+1] 1 where packets of independent senders meet (0 on the NICs' own links, paced
    by the NIC, and the sentinel); pair int32[F, K, H] the (flow, link) pair of every entry
    and pair_link int32[P] its link (the host's np.unique). ev_mix (the policy's EV mix at
    ACK time: `held_mix`, `bitmap_mix`, `reps_mix`, a function of `EvSignals`), lag (steps
    the links' signals take to reach the sender), ack_lag (steps from a byte's delivery or
    trim to its ACK or NACK at the sender): static. strike: a failure set that strikes during
    the phase and the policy's reaction (`Strike`; None: none). edges:
    int32[RECORDS + 1] the first step of each record interval (None: every `params.stride`
    steps). shared_nics (static): False where no sender shares its NIC with another
    (`nic_round_robin`)."""
    num_flows = links.shape[0]
    num_links = capacity.shape[0]
    key = jax.random.key(params.seed)
    live_f = live.astype(jnp.float32)
    n_live = jnp.maximum(live_f.sum(1, keepdims=True), 1.0)
    run = _Run(links=links, start=start, src=src, nic=nic, base_rtt=base_rtt,
               max_window=max_window, capacity=capacity, buffer=buffer, kmin=kmin, kmax=kmax,
               multiplexed=multiplexed, pair=pair, pair_link=pair_link, p=params, key=key,
               tail_key=jax.random.fold_in(key, TAIL_STREAM),
               dup_key=jax.random.fold_in(key, DUP_STREAM),
               trim_key=jax.random.fold_in(key, TRIM_STREAM),
               stall_key=jax.random.fold_in(key, STALL_STREAM), live_f=live_f, n_live=n_live,
               revisits=size > n_live[:, 0] * params.pkt,
               real=jnp.arange(num_links) < num_links - 1,
               edges=(jnp.arange(RECORDS + 1, dtype=jnp.int32) * params.stride
                      if edges is None else edges),
               strike=strike, dead=None, num_gpus=num_gpus,
               ev_mix=ev_mix, lag=lag, ack_lag=ack_lag, shared_nics=shared_nics)
    signals0 = _link_signals(jnp.zeros(num_links), capacity, kmin, kmax, jnp.ones(num_links),
                              jnp.zeros(num_links), jnp.zeros(num_links))
    init = _State(
        step=jnp.int32(0), remaining=size, window=max_window,
        avg_delay=jnp.zeros(num_flows), fi_count=jnp.zeros(num_flows),
        since_dec=jnp.full(num_flows, jnp.inf), marks=jnp.zeros(num_flows),
        achieved=jnp.zeros(num_flows), qa_clock=jnp.full(num_flows, jnp.inf),
        qa_trigger=jnp.zeros(num_flows, bool), owed=jnp.zeros(num_flows),
        dup_owed=jnp.zeros(num_flows), stall=jnp.zeros(num_flows),
        echoes=jnp.zeros((ack_lag + 1, 2, num_flows)), share=share,
        queue=jnp.zeros(num_links), forward=jnp.ones(num_links),
        history=jnp.broadcast_to(signals0, (lag + 1, num_links, 3)),
        finish=jnp.where(size > 0, jnp.inf, start), delivered=jnp.zeros(num_flows),
        trimmed=jnp.zeros(num_flows), duplicated=jnp.zeros(num_flows),
        stalls=jnp.zeros(num_flows, jnp.int32), blackholed=jnp.zeros(num_flows),
        link_bytes=jnp.zeros(num_links),
        max_fill=jnp.zeros(num_links), series=jnp.zeros((RECORDS, 3)),
        win_start=jnp.int32(0), win_events=jnp.bool_(False),
        prev_rate=jnp.zeros(num_flows), n_sending=jnp.int32(0),
        at_start=jnp.zeros((5, num_flows)), link_at_start=jnp.zeros(num_links),
        jumped=jnp.int32(0))

    def cond(s: _State):
        left = s.remaining > 0
        if strike is not None:      # a flow with no live path after the reaction stalls
            left = left & ~(strike.doomed & (s.step >= strike.react))
        return (s.step < params.max_steps) & jnp.any(left)

    out = jax.lax.while_loop(cond, lambda s: _step(run, s), init)
    unfinished = out.remaining > 0
    if strike is not None:          # the host reports those as stalled
        unfinished = unfinished & ~strike.doomed
    status = jnp.where(jnp.any(unfinished), jnp.int32(int(Status.EVENT_LIMIT)), jnp.int32(0))
    return Dynamic(finish=out.finish, delivered=out.delivered, trimmed=out.trimmed,
                   duplicated=out.duplicated, stalls=out.stalls, blackholed=out.blackholed,
                   link_bytes=out.link_bytes[:-1],
                   max_fill=out.max_fill[:-1],
                   steps=out.step, status=status, series=out.series,
                   skipped=out.jumped)
