"""The jitted numerical core: link loads, utilisation statistics, max-min rates, phase time.

Contract: every function here is pure JAX over fixed-shape arrays; nothing loops in Python
over flows, paths, links or rounds. Link ids index an array of L+1 links whose last entry is
the sentinel (infinite capacity, always alive) that pads short paths. Units: rates and
capacities in Gbit/s, sizes in bytes, times in seconds.

Status codes are `core.status.Status` flags combined with ``|``: solvers never raise inside
jit, they report and the host decides what to tell the user.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from fabricjax.core.status import Status

OK, ROUND_LIMIT, STALLED = int(Status.OK), int(Status.ROUND_LIMIT), int(Status.STALLED)
QUANTILES = (0.5, 0.99, 1.0)
GBIT_PER_BYTE = 8e-9
TOP_LINKS = 5   # most utilised links every phase result keeps (bottleneck_links)


def _entries(weights: jax.Array, links: jax.Array) -> jax.Array:
    """weights[F, K] broadcast to one value per (flow, slot, hop) entry, flattened."""
    return jnp.broadcast_to(weights[:, :, None], links.shape).reshape(-1)


def link_load(links: jax.Array, weights: jax.Array, demand: jax.Array,
              num_segments: int) -> jax.Array:
    """Offered load per link, float[L+1] (Gbit/s; index L is the sentinel's).

    load[l] = sum over (f, k, h) with links[f, k, h] == l of demand[f] * weights[f, k]."""
    contrib = _entries(weights * demand[:, None], links)
    return jax.ops.segment_sum(contrib, links.reshape(-1), num_segments=num_segments)


def uniform_live_split(links: jax.Array, alive: jax.Array) -> jax.Array:
    """Weights float[F, K]: equal over the slots whose every hop is alive; 0 when none is."""
    return equal_live_split(jnp.all(alive[links], axis=-1))


def equal_live_split(path_alive: jax.Array) -> jax.Array:
    """Weights float[F, K]: equal over the slots where path_alive bool[F, K]; 0 when none."""
    live = path_alive.astype(jnp.float32)
    return live / jnp.maximum(live.sum(axis=1, keepdims=True), 1.0)


class Resend(NamedTuple):
    """What `resending_rates` needs beyond the incidence (see there): the split's slots hop by
    hop int32[F, K, H], their planes int32[F, K], the weights float32[F, K] and the tolerance
    (a traced scalar)."""

    slot_links: jax.Array
    slot_plane: jax.Array
    weights: jax.Array
    tolerance: jax.Array


class MaxMin(NamedTuple):
    rates: jax.Array      # float[F] Gbit/s
    rounds: jax.Array     # int32 scalar
    status: jax.Array     # int32 scalar (Status.ROUND_LIMIT or 0)


def max_min_rates(links: jax.Array, weights: jax.Array, flow_cap: jax.Array,
                  capacity: jax.Array, *, eps: jax.Array | float = 0.0,
                  max_rounds: jax.Array | int = 10_000) -> MaxMin:
    """Max-min fair flow rates for fixed per-flow path splits (progressive filling).

    A flow at rate r puts r * weights[f, k] on every hop of slot k; `flow_cap` (the NIC rate)
    bounds each flow; `capacity` is float[L+1], 0 on dead links and inf on the sentinel.

    Plain progressive filling (Bertsekas & Gallager, Data Networks, sec. 6.5.2) raises all
    unfrozen flows together and freezes the flows of one saturated link per round, so its
    round count grows with the number of distinct rate levels (hundreds at scale). Here every
    round freezes *every* local bottleneck at once: a link whose fair share (residual capacity
    / active weight through it) is the smallest share along every active flow that crosses it.
    Shares only grow as other flows freeze, so such a link saturates exactly at that share in
    the sequential algorithm too and the result is the same max-min allocation, in as many
    rounds as the bottleneck dependency chain is deep (the idea of the parallel water-filling
    algorithms, e.g. Ros-Giralt et al., "On the bottleneck structure of congestion-controlled
    networks", 2019). With eps > 0 a link within a factor (1 + eps) of being a local bottleneck
    counts as one: fewer rounds, no capacity is ever exceeded, and the slowest rate stays within
    [exact / (1 + eps), exact]; individual faster rates can move either way by more than eps
    (the errors compound along chains of bottlenecks and freed capacity goes to other flows).

    Per round: two gathers and two scatters over the F*K*H (flow, slot, hop) entries.
    """
    num_segments = capacity.shape[0]
    num_flows = links.shape[0]
    ids = links.reshape(-1)
    w = _entries(weights, links)
    uses = w > 0
    eps = jnp.asarray(eps, jnp.float32)
    max_rounds = jnp.asarray(max_rounds, jnp.int32)
    has_path = weights.sum(axis=1) > 0

    def per_entry(x):
        return jnp.broadcast_to(x[:, None, None], links.shape).reshape(-1)

    growth0 = jax.ops.segment_sum(w, ids, num_segments=num_segments)
    # state: rates, frozen, level (common rate of the active flows), growth (active weight per
    # link), frozen_load (load of the frozen flows per link), rounds
    init = (jnp.zeros(num_flows, jnp.float32), ~has_path, jnp.float32(0.0), growth0,
            jnp.zeros(num_segments, jnp.float32), jnp.int32(0))

    def cond(state):
        _, frozen, _, _, _, rounds = state
        return jnp.any(~frozen) & (rounds < max_rounds)

    def body(state):
        rates, frozen, level, growth, frozen_load, rounds = state
        active = ~frozen
        residual = jnp.maximum(capacity - frozen_load - level * growth, 0.0)
        share = jnp.where(growth > 0, residual / jnp.where(growth > 0, growth, 1.0), jnp.inf)
        live = uses & per_entry(active)
        # each active flow's tightest extra rate: its smallest link share, or its cap
        path_share = jnp.min(jnp.where(live, share[ids], jnp.inf).reshape(num_flows, -1), axis=1)
        room = flow_cap - level
        extra = jnp.where(active, jnp.maximum(jnp.minimum(path_share, room), 0.0), jnp.inf)
        # each link's most constrained active flow; a link is a local bottleneck when its own
        # share is that small (f32 tolerance so the global minimum always qualifies)
        link_extra = jax.ops.segment_min(jnp.where(live, per_entry(extra), jnp.inf), ids,
                                         num_segments=num_segments)
        slack = (level + link_extra) * (eps + 1e-5) + 1e-6
        bottleneck = jnp.isfinite(link_extra) & (share <= link_extra + slack)
        hit = jnp.any((bottleneck[ids] & live).reshape(num_flows, -1), axis=1)
        capped = room <= extra + (level + extra) * 1e-6 + 1e-6
        newly = active & (hit | capped)
        new_rates = jnp.where(newly, level + extra, rates)
        still = active & ~newly
        step = jnp.min(jnp.where(still, extra, jnp.inf))
        new_level = jnp.where(jnp.isfinite(step), level + step, level)
        new_rates = jnp.where(still, new_level, new_rates)
        frozen_w = jnp.where(per_entry(newly), w, 0.0)
        delta = jax.ops.segment_sum(
            jnp.stack([frozen_w, frozen_w * per_entry(new_rates)], axis=1), ids,
            num_segments=num_segments)
        growth = jnp.maximum(growth - delta[:, 0], 0.0)
        return (new_rates, frozen | newly, new_level, growth, frozen_load + delta[:, 1],
                rounds + 1)

    rates, frozen, _, _, _, rounds = jax.lax.while_loop(cond, body, init)
    status = jnp.where(jnp.all(frozen), OK, ROUND_LIMIT).astype(jnp.int32)
    return MaxMin(rates=rates, rounds=rounds, status=status)


# A resending sprayer lets a link take at most this many times its capacity in attempts (a
# trimmed share of 90%): beyond it the link is as good as gone and its EVs' bytes go elsewhere.
MAX_TRIMMED_SHARE = 0.9
# A link whose load is within this share of its capacity counts as saturated.
SATURATED_RTOL = 1e-3
# Rounds of `resending_rates`'s fixed point at most (each a max-min solve).
RESEND_ROUNDS = 6
# A link within this share of full at the rates of a round is congested in the next: the
# sprayers' windows, rising while their congested EVs resend, fill it.
CONGESTED_SHARE = 0.25


def resending_rates(slot_links: jax.Array, slot_plane: jax.Array, weights: jax.Array,
                    flow_cap: jax.Array, capacity: jax.Array, tolerance: jax.Array | float, *,
                    planes: int, eps: jax.Array | float = 0.0,
                    max_rounds: jax.Array | int = 10_000) -> MaxMin:
    """Max-min goodputs of oblivious sprayers that resend what a congested path trims.

    An oblivious sprayer sends the same share of its packets on every live EV, whatever each
    EV's path delivers. With that split fixed (`max_min_rates`) the flow moves at the pace of
    its slowest EV: on a link with a quarter of its capacity the flow's share there fixes its
    whole rate. A sprayer with packet trimming does better: the congested queue trims what it
    cannot hold, the sender resends those packets on its next EVs, and its window shrinks
    only with the share of its packets that come back trimmed. The equilibrium modelled: each
    flow's window settles where a share `tolerance` of its packets (on each plane it sprays:
    one window per plane, as the calibration's htsim runs each plane) is trimmed, and what a
    slot delivers is its share less what its most congested hop trims, the rest arriving on
    the flow's other slots (whose links carry it: the resends are charged).

    `resending_shares` finds the links' trimmed shares q; the goodputs are then the max-min
    rates on the split each flow delivers, weights x (1 - q at the slot's most trimming
    hop), renormalised (`delivered_split`). A flow whose every slot is congested (one path,
    or every EV) keeps the equal split; one with a few congested EVs moves its bytes to the
    others, as far as their links allow.

    slot_links int32[F, K, H] and slot_plane int32[F, K]: the split's slots hop by hop
    (sentinel-padded), on planes 0..planes-1 (static); weights float32[F, K]; capacity
    float[L+1] (0 dead, inf on the sentinel); tolerance: a traced scalar (0: the equal
    split's rates, exactly)."""
    q, rounds = resending_shares(slot_links, slot_plane, weights, flow_cap, capacity,
                                 tolerance, planes=planes, eps=eps, max_rounds=max_rounds)
    out = max_min_rates(slot_links, delivered_split(slot_links, slot_plane, weights, q, planes),
                        flow_cap, capacity, eps=eps, max_rounds=max_rounds)
    return out._replace(rounds=out.rounds + rounds)


def delivered_split(slot_links: jax.Array, slot_plane: jax.Array, weights: jax.Array,
                    q: jax.Array, planes: int) -> jax.Array:
    """float[F, K]: the share of each flow's bytes each slot delivers when its links trim the
    shares q float[L+1]: weights x (1 - q at the slot's most trimming hop; the first
    congested queue trims, the next sees what is left), renormalised within each plane to
    the plane's share (the resends stay on the plane)."""
    kept = weights * (1.0 - jnp.max(q[slot_links], axis=-1))
    scale = (_plane_sums(weights, slot_plane, planes) /
             jnp.maximum(_plane_sums(kept, slot_plane, planes), 1e-30))
    return kept * jnp.take_along_axis(scale, slot_plane.astype(jnp.int32), axis=1)


def _trimmable(slot_links: jax.Array, capacity: jax.Array) -> jax.Array:
    """bool[L+1]: links that can trim a sprayer's packets: finite, alive, and never a
    sender's first hop (its own port paces its packets and trims none)."""
    first_hop = jnp.zeros(capacity.shape[0], bool).at[slot_links[:, :, 0].reshape(-1)].set(True)
    return jnp.isfinite(capacity) & (capacity > 0) & ~first_hop


def resending_shares(slot_links, slot_plane, weights, flow_cap, capacity, tolerance, *,
                     planes: int, eps=0.0, max_rounds=10_000):
    """(q float[L+1], max-min rounds): the share of what reaches it each link trims where the
    sprayers' windows settle (`resending_rates`), 0 off the congested links.

    A fixed point of max-min solves. The first, on the equal split, marks the congested
    links: those within CONGESTED_SHARE of full (the windows that rise while their congested
    EVs resend fill them), never a sender's first hop. Per flow and plane, `phi` is the
    share of its packets on slots that cross a congested link, and a congested link trims
    q = tolerance / (the load-weighted mean `phi` of the slots through it), at most
    MAX_TRIMMED_SHARE: a flow's trimmed share is then the tolerance. Each further round
    solves on the delivered split, marks the links it fills (with the first round's) and
    moves q halfway to the shares they give (undamped, the map swings between two states),
    until q settles or RESEND_ROUNDS."""
    tolerance = jnp.asarray(tolerance, jnp.float32)
    num_segments = capacity.shape[0]
    finite = _trimmable(slot_links, capacity)
    plane_weight = _plane_sums(weights, slot_plane, planes)

    def trimmed_shares(split, rates, congested):
        # per slot: crosses a congested link; per (flow, plane): the share of its packets there
        slot_hot = jnp.any(congested[slot_links], axis=-1)
        plane_hot = _plane_sums(weights * slot_hot.astype(weights.dtype), slot_plane, planes)
        phi = jnp.take_along_axis(plane_hot / jnp.maximum(plane_weight, 1e-30),
                                  slot_plane.astype(jnp.int32), axis=1)
        # per link: the load-weighted mean phi of the slots through it
        entry_load = jnp.broadcast_to((split * rates[:, None])[:, :, None],
                                      slot_links.shape).reshape(-1)
        entry_phi = jnp.broadcast_to(phi[:, :, None], slot_links.shape).reshape(-1)
        sums = jax.ops.segment_sum(jnp.stack([entry_load, entry_load * entry_phi], axis=1),
                                   slot_links.reshape(-1), num_segments=num_segments)
        mean_phi = sums[:, 1] / jnp.maximum(sums[:, 0], 1e-30)
        return jnp.where(congested & (mean_phi > 0),
                         jnp.minimum(tolerance / jnp.maximum(mean_phi, 1e-30),
                                     MAX_TRIMMED_SHARE), 0.0)

    def filled(split, rates, share):
        load = link_load(slot_links, split, rates, num_segments)
        return finite & (load >= capacity * (1.0 - share))

    def solve(q):
        split = delivered_split(slot_links, slot_plane, weights, q, planes)
        return split, max_min_rates(slot_links, split, flow_cap, capacity, eps=eps,
                                    max_rounds=max_rounds)

    first = max_min_rates(slot_links, weights, flow_cap, capacity, eps=eps,
                          max_rounds=max_rounds)
    start = filled(weights, first.rates, CONGESTED_SHARE)
    q = trimmed_shares(weights, first.rates, start)

    def cond(state):
        _, changed, rounds, _ = state
        return changed & (rounds < RESEND_ROUNDS)

    def body(state):
        q, _, rounds, total = state
        split, mm = solve(q)
        congested = filled(split, mm.rates, SATURATED_RTOL) | start
        q_next = 0.5 * (q + trimmed_shares(split, mm.rates, congested))
        return q_next, jnp.max(jnp.abs(q_next - q)) > 1e-3, rounds + 1, total + mm.rounds

    q, _, _, total = jax.lax.while_loop(cond, body, (q, jnp.bool_(True), jnp.int32(0),
                                                     first.rounds))
    return q, total


def _plane_sums(values: jax.Array, slot_plane: jax.Array, planes: int) -> jax.Array:
    """float[F, P]: values float[F, K] summed over each flow's slots of each plane."""
    num_flows = values.shape[0]
    segment = (jnp.arange(num_flows, dtype=jnp.int32)[:, None] * planes +
               slot_plane.astype(jnp.int32)).reshape(-1)
    return jax.ops.segment_sum(values.reshape(-1), segment,
                               num_segments=num_flows * planes).reshape(num_flows, planes)


def slowest_rate(links: jax.Array, weights: jax.Array, flow_cap: jax.Array,
                 capacity: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(rate, has_path): the smallest max-min rate, exactly, in one pass; has_path bool[F].

    Progressive filling raises every flow together until the first link saturates or the first
    flow reaches its cap, and the flows frozen there are the slowest of the allocation. So the
    smallest rate is min(min over links of capacity / (weight crossing it), min flow_cap) over
    flows that have a path. When all flows send the same bytes this alone fixes the phase time
    (size / slowest rate), without the rounds of `max_min_rates`."""
    num_segments = capacity.shape[0]
    w = _entries(weights, links)
    growth = jax.ops.segment_sum(w, links.reshape(-1), num_segments=num_segments)
    share = jnp.where(growth > 0, capacity / jnp.where(growth > 0, growth, 1.0), jnp.inf)
    has_path = weights.sum(axis=1) > 0
    rate = jnp.minimum(jnp.min(jnp.where(growth > 0, share, jnp.inf)),
                       jnp.min(jnp.where(has_path, flow_cap, jnp.inf)))
    return jnp.where(jnp.isfinite(rate), rate, 0.0), has_path


def _sortable(x: jax.Array) -> jax.Array:
    """uint32 keys in the order of float32 x (no NaN; -0 folded into +0)."""
    bits = jax.lax.bitcast_convert_type(x + jnp.float32(0.0), jnp.uint32)
    return jnp.where(bits >> 31 == 1, ~bits, bits | jnp.uint32(0x80000000))


def _unsortable(key: jax.Array) -> jax.Array:
    """The float32 of a `_sortable` key."""
    bits = jnp.where(key >> 31 == 1, key & jnp.uint32(0x7FFFFFFF), ~key)
    return jax.lax.bitcast_convert_type(bits, jnp.float32)


class SortedLinks(NamedTuple):
    """Link utilisations in ascending order (unusable links as -inf), read by position with
    `take`: one sorted array, or the sorted tiers of a partition of the links, whose union's
    i-th smallest is found by bisection over the values (32 steps, each a binary search per
    tier): the tiers' own sorts then give the all-links order too, without sorting all links
    again (XLA's sort is the slowest step of a large evaluation: 1.1 s CPU for 4M links)."""

    parts: tuple            # sorted float32 arrays (the tiers in order, or one array)
    keys: tuple             # their `_sortable` keys (empty for one array)

    @property
    def size(self) -> int:
        return sum(int(p.shape[0]) for p in self.parts)

    def take(self, index: jax.Array) -> jax.Array:
        """The index-th smallest values (int32 positions of any shape)."""
        if not self.keys:
            return self.parts[0][index]
        target = index.astype(jnp.int32) + 1

        def halve(_, bounds):
            lo, hi = bounds
            mid = lo + (hi - lo) // 2
            count = sum(jnp.searchsorted(k, mid, side="right").astype(jnp.int32)
                        for k in self.keys)              # one per tier: a static few
            enough = count >= target
            return jnp.where(enough, lo, mid + 1), jnp.where(enough, mid, hi)

        start = (jnp.zeros(target.shape, jnp.uint32),
                 jnp.full(target.shape, 0xFFFFFFFF, jnp.uint32))
        return _unsortable(jax.lax.fori_loop(0, 32, halve, start)[0])


def sorted_quantiles(sorted_values: jax.Array | SortedLinks, n_skip: jax.Array,
                     qs: tuple[float, ...] = QUANTILES) -> jax.Array:
    """Linear-interpolated quantiles (numpy's default) of sorted_values[n_skip:], float[Q].

    The skipped prefix holds dead links (sorted first as -inf); an all-dead range gives 0."""
    if not isinstance(sorted_values, SortedLinks):
        sorted_values = SortedLinks((sorted_values,), ())
    size = sorted_values.size
    n = size - n_skip
    out = []
    for q in qs:  # a static tuple of three quantiles, not a loop over data
        pos = n_skip.astype(jnp.float32) + q * jnp.maximum(n - 1, 0).astype(jnp.float32)
        lo = jnp.floor(pos).astype(jnp.int32)
        hi = jnp.minimum(lo + 1, size - 1)
        frac = pos - lo.astype(jnp.float32)
        at_lo, at_hi = sorted_values.take(jnp.stack([lo, hi]))
        v = at_lo + (at_hi - at_lo) * frac
        v = jnp.where(frac > 0, v, at_lo)
        out.append(jnp.where(n > 0, v, 0.0))
    return jnp.stack(out)


CDF_POINTS = 101   # utilisation quantiles P0, P1, ..., P100 of the busiest phase, for plots


def sorted_utilisation(utilisation: jax.Array, usable: jax.Array,
                       tier_bounds: tuple[tuple[int, int], ...] = ()) -> SortedLinks:
    """utilisation with the unusable links as -inf, in order: what `link_statistics` and
    `utilisation_cdf` read, so that a phase sorts its links once (XLA did not merge the two
    sorts). When `tier_bounds` (static) partition the links in order, the tiers are sorted one
    by one and `link_statistics` reads its tier rows from them too."""
    masked = jnp.where(usable, utilisation, -jnp.inf)
    tiers = [(a, b) for a, b in tier_bounds if b > a]
    ends = [0] + [b for _, b in tiers]
    if len(tiers) < 2 or [a for a, _ in tiers] != ends[:-1] or ends[-1] != masked.shape[0]:
        return SortedLinks((jnp.sort(masked),), ())
    parts = tuple(jnp.sort(masked[a:b]) for a, b in tiers)
    return SortedLinks(parts, tuple(_sortable(p) for p in parts))


def utilisation_cdf(utilisation: jax.Array, usable: jax.Array,
                    ordered: SortedLinks | None = None) -> jax.Array:
    """float[CDF_POINTS]: linear-interpolated quantiles q = 0, 0.01, ..., 1 of utilisation over
    the usable links (numpy's default method), vectorised over q; zeros when none is usable.
    `ordered`: `sorted_utilisation(utilisation, usable, ...)` when the caller has it."""
    if ordered is None:
        ordered = sorted_utilisation(utilisation, usable)
    size = ordered.size
    skip = jnp.sum(~usable)
    n = size - skip
    q = jnp.linspace(0.0, 1.0, CDF_POINTS, dtype=jnp.float32)
    pos = skip.astype(jnp.float32) + q * jnp.maximum(n - 1, 0).astype(jnp.float32)
    lo = jnp.clip(jnp.floor(pos).astype(jnp.int32), 0, size - 1)
    hi = jnp.minimum(lo + 1, size - 1)
    frac = pos - lo.astype(jnp.float32)
    at_lo, at_hi = ordered.take(jnp.stack([lo, hi]))
    value = jnp.where(frac > 0, at_lo + (at_hi - at_lo) * frac, at_lo)
    return jnp.where(n > 0, value, 0.0)


def link_statistics(utilisation: jax.Array, alive: jax.Array,
                    tier_bounds: tuple[tuple[int, int], ...], p100_only: bool = False,
                    ordered: SortedLinks | None = None) -> jax.Array:
    """Quantiles (QUANTILES) of utilisation over alive links, float[1 + tiers, Q]:
    row 0 over all links, then one row per tier (each tier a contiguous [start, stop)).
    `ordered`: `sorted_utilisation(utilisation, alive, tier_bounds)` when the caller has it.

    `p100_only` (static): float[1 + tiers, 1], the maxima alone (0 where a range has no alive
    link). Five sorts of every link cost 65 ms at 8,192 GPUs, most of a failure set's time,
    and failure records report only the P100."""
    masked = jnp.where(alive, utilisation, -jnp.inf)
    # a tier may be empty (a graph fabric without switch-to-switch cables): its row is zeros
    if p100_only:
        ranges = [(0, masked.shape[0])] + list(tier_bounds)
        maxima = jnp.stack([jnp.max(masked[a:b]) if b > a else jnp.float32(-jnp.inf)
                            for a, b in ranges])  # five static ranges
        return jnp.where(jnp.isfinite(maxima), maxima, 0.0)[:, None]
    if ordered is None:
        ordered = sorted_utilisation(utilisation, alive, tier_bounds)
    tier_parts = iter(ordered.parts if ordered.keys else ())
    rows = [sorted_quantiles(ordered, jnp.sum(~alive))]
    for start, stop in tier_bounds:  # static: four tiers
        if stop <= start:
            rows.append(jnp.zeros(len(QUANTILES), utilisation.dtype))
            continue
        # the tier's own sort when `ordered` is made of them (in order), else one here
        part = next(tier_parts, None)
        rows.append(sorted_quantiles(jnp.sort(masked[start:stop]) if part is None else part,
                                     jnp.sum(~alive[start:stop])))
    return jnp.stack(rows)


class PhaseResult(NamedTuple):
    """What one phase under one split reports (device arrays; one device_get on the host)."""

    stats: jax.Array          # float[1 + tiers, 3] utilisation P50/P99/P100, all then per tier
    top_links: jax.Array      # int32[top_k] most utilised links, worst first
    top_util: jax.Array       # float[top_k]
    total_load: jax.Array     # float scalar: sum of offered load over real links (Gbit/s)
    rates: jax.Array          # float[F] max-min rates (Gbit/s)
    phase_time: jax.Array     # float scalar: slowest non-stalled flow's duration (s)
    cohort_end: jax.Array     # float[C]: per arrival cohort, the latest offset + duration of
                              # its non-stalled flows (-inf for none): engine.timing
    stalled: jax.Array        # int32 scalar: flows with bytes to send and rate 0
    rounds: jax.Array         # int32 scalar: max-min rounds
    status: jax.Array         # int32 scalar: Status flags
    cdf: jax.Array | None = None  # float[CDF_POINTS] utilisation quantiles (not p100_only)


def evaluate_split(links, weights, demand, size_bytes, flow_cap, capacity, alive, *,
                   eps, max_rounds, tier_bounds, top_k, slowest_only=False,
                   p100_only=False, cohort=None, offset=None, num_cohorts: int = 1,
                   resend: Resend | None = None, planes: int = 1) -> PhaseResult:
    """Loads, utilisation statistics, max-min rates and phase time for a given split.

    capacity, alive: [L] for the real links (the sentinel is appended here). size_bytes: the
    bytes each flow puts on the wire. cohort int32[F], offset float32[F]: each flow's arrival
    cohort and its start after the cohort's base (None: one cohort, all at 0); `cohort_end`
    holds, per cohort, the latest offset + duration (the host adds the bases in float64).
    `slowest_only` (static; only for flows that all send the same bytes): skip the max-min
    rounds and take the phase time from `slowest_rate`, which is then exact; `rates` holds that
    slowest rate for every flow with a path (a lower bound on each flow's own rate).
    `p100_only` (static): `stats` holds the P100s alone ([1 + tiers, 1]; see link_statistics).
    `resend`: the rates are a resending sprayer's goodputs (`resending_rates`, over `planes`,
    static; `slowest_only` then does not apply); the loads and utilisations stay the split's
    offered load."""
    num_links = capacity.shape[0]
    cap_ext = jnp.concatenate([jnp.where(alive, capacity, 0.0), jnp.array([jnp.inf])])
    load = link_load(links, weights, demand, num_links + 1)[:num_links]
    safe_cap = jnp.where(capacity > 0, capacity, 1.0)
    # dead and zero-capacity links are left out of the statistics; a split that still puts
    # load on one shows up as stalled flows (rate 0), not as a utilisation
    utilisation = jnp.where(capacity > 0, load / safe_cap, jnp.where(load > 0, jnp.inf, 0.0))
    usable = alive & (capacity > 0)
    ordered = None if p100_only else sorted_utilisation(utilisation, usable, tier_bounds)
    stats = link_statistics(utilisation, usable, tier_bounds, p100_only, ordered)
    top_util, top_links = jax.lax.top_k(jnp.where(usable, utilisation, -jnp.inf), top_k)

    if resend is not None:
        mm = resending_rates(resend.slot_links, resend.slot_plane, resend.weights, flow_cap,
                             cap_ext, resend.tolerance, planes=planes, eps=eps,
                             max_rounds=max_rounds)
    elif slowest_only:
        rate, has_path = slowest_rate(links, weights, flow_cap, cap_ext)
        mm = MaxMin(rates=jnp.where(has_path, rate, 0.0), rounds=jnp.int32(1),
                    status=jnp.int32(OK))
    else:
        mm = max_min_rates(links, weights, flow_cap, cap_ext, eps=eps, max_rounds=max_rounds)
    sending = size_bytes > 0
    stalled_mask = sending & (mm.rates <= 0)
    bits = size_bytes * GBIT_PER_BYTE
    flow_time = jnp.where(sending & ~stalled_mask, bits / jnp.where(stalled_mask, 1.0, mm.rates),
                          0.0)
    if cohort is None:
        cohort = jnp.zeros(flow_time.shape, jnp.int32)
        offset = jnp.zeros(flow_time.shape, flow_time.dtype)
    ends = jnp.where(sending & ~stalled_mask, offset + flow_time, -jnp.inf)
    cohort_end = jax.ops.segment_max(ends, cohort, num_segments=num_cohorts)
    stalled = jnp.sum(stalled_mask).astype(jnp.int32)
    status = mm.status | jnp.where(stalled > 0, STALLED, OK).astype(jnp.int32)
    return PhaseResult(
        stats=stats, top_links=top_links.astype(jnp.int32), top_util=top_util,
        total_load=jnp.sum(load), rates=mm.rates, phase_time=jnp.max(flow_time),
        cohort_end=cohort_end, stalled=stalled, rounds=mm.rounds, status=status,
        cdf=None if p100_only else utilisation_cdf(utilisation, usable, ordered),
    )
