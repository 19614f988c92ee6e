"""The jitted numerical core: link loads, utilisation statistics, max-min rates, phase time.

Contract: every function here is pure JAX over fixed-shape arrays; nothing loops in Python
over flows, paths, links or rounds. Link ids index an array of L+1 links whose last entry is
the sentinel (infinite capacity, always alive) that pads short paths. Units: rates and
capacities in Gbit/s, sizes in bytes, times in seconds.

Status codes are bit flags (`STATUS_*`), combined with ``|``: solvers never raise inside jit,
they report and the host decides what to tell the user.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

STATUS_OK = 0
STATUS_ROUND_LIMIT = 1   # max-min filling stopped at max_rounds: unfrozen rates are lower bounds
STATUS_STALLED = 2       # some flow with bytes to send has rate 0 (no live path): the step stalls

QUANTILES = (0.5, 0.99, 1.0)
GBIT_PER_BYTE = 8e-9


def status_names(code: int) -> list[str]:
    names = []
    if code & STATUS_ROUND_LIMIT:
        names.append("round_limit")
    if code & STATUS_STALLED:
        names.append("stalled")
    return names or ["ok"]


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
    path_alive = jnp.all(alive[links], axis=-1)
    live = path_alive.astype(jnp.float32)
    return live / jnp.maximum(live.sum(axis=1, keepdims=True), 1.0)


class MaxMin(NamedTuple):
    rates: jax.Array      # float[F] Gbit/s
    rounds: jax.Array     # int32 scalar
    status: jax.Array     # int32 scalar (STATUS_ROUND_LIMIT or 0)


def max_min_rates(links: jax.Array, weights: jax.Array, flow_cap: jax.Array,
                  capacity: jax.Array, *, eps: jax.Array | float = 0.0,
                  max_rounds: jax.Array | int = 10_000) -> MaxMin:
    """Max-min fair flow rates for fixed per-flow path splits, by progressive filling.

    A flow at rate r puts r * weights[f, k] on every hop of slot k. All unfrozen flows rise
    together; a round raises them to the next level where a link saturates (or a flow reaches
    its cap, e.g. its NIC rate), then freezes every unfrozen flow that crosses a saturated link
    with positive weight. With eps > 0 every link that would saturate within a factor (1 + eps)
    of that level counts as saturated too, which bounds the number of rounds at the price of
    rates up to eps low (the slowest flow's rate is exact). `capacity` is float[L+1] with 0 on
    dead links and inf on the sentinel. Bertsekas & Gallager, Data Networks, sec. 6.5.2.

    Rather than re-scattering every round, per-link totals of the still-active flows (`growth`
    and an exact integer `count`) are kept and decremented by what the round froze, so a round
    costs one scatter and one gather over the F*K*H entries.
    """
    num_segments = capacity.shape[0]
    num_flows = links.shape[0]
    ids = links.reshape(-1)
    w = _entries(weights, links)
    uses = w > 0

    def segsum(x):
        return jax.ops.segment_sum(x, ids, num_segments=num_segments)

    growth0 = segsum(w)
    count0 = segsum(uses.astype(jnp.int32))
    has_path = weights.sum(axis=1) > 0
    eps = jnp.asarray(eps, jnp.float32)
    max_rounds = jnp.asarray(max_rounds, jnp.int32)

    # state: rates, frozen, level, growth, count, frozen_load, rounds
    init = (jnp.zeros(num_flows, jnp.float32), ~has_path, jnp.float32(0.0), growth0, count0,
            jnp.zeros(num_segments, jnp.float32), jnp.int32(0))

    def cond(state):
        _, frozen, _, _, _, _, rounds = state
        return jnp.any(~frozen) & (rounds < max_rounds)

    def body(state):
        rates, frozen, level, growth, count, frozen_load, rounds = state
        active = ~frozen
        carried = count > 0
        residual = jnp.maximum(capacity - frozen_load - level * growth, 0.0)
        ratio = jnp.where(carried & (growth > 0), residual / jnp.where(carried, growth, 1.0),
                          jnp.inf)
        ratio = jnp.where(carried & (growth <= 0), jnp.inf, ratio)
        link_step = jnp.min(ratio)
        flow_step = jnp.min(jnp.where(active, flow_cap - level, jnp.inf))
        step = jnp.maximum(jnp.minimum(link_step, flow_step), 0.0)
        new_level = level + step
        # f32 tolerance so that the argmin link itself always counts as saturated.
        bar = new_level * (1.0 + eps + 1e-5) + 1e-6
        saturated = carried & (level + ratio <= bar)
        hit = jnp.any((saturated[ids] & uses).reshape(num_flows, -1), axis=1)
        capped = new_level >= flow_cap * (1.0 - 1e-6)
        newly = active & (hit | capped)
        rates = jnp.where(active, new_level, rates)
        newly_e = jnp.broadcast_to(newly[:, None, None], links.shape).reshape(-1)
        dw = segsum(jnp.where(newly_e, w, 0.0))
        dc = segsum((newly_e & uses).astype(jnp.int32))
        count = count - dc
        growth = jnp.where(count > 0, growth - dw, 0.0)
        frozen_load = frozen_load + new_level * dw
        return rates, frozen | newly, new_level, growth, count, frozen_load, rounds + 1

    rates, frozen, _, _, _, _, rounds = jax.lax.while_loop(cond, body, init)
    status = jnp.where(jnp.all(frozen), STATUS_OK, STATUS_ROUND_LIMIT).astype(jnp.int32)
    return MaxMin(rates=rates, rounds=rounds, status=status)


def sorted_quantiles(sorted_values: jax.Array, n_skip: jax.Array,
                     qs: tuple[float, ...] = QUANTILES) -> jax.Array:
    """Linear-interpolated quantiles (numpy's default) of sorted_values[n_skip:], float[Q].

    The skipped prefix holds dead links (sorted first as -inf); an all-dead range gives 0."""
    n = sorted_values.shape[0] - n_skip
    out = []
    for q in qs:  # a static tuple of three quantiles, not a loop over data
        pos = n_skip + q * jnp.maximum(n - 1, 0)
        lo = jnp.floor(pos).astype(jnp.int32)
        hi = jnp.minimum(lo + 1, sorted_values.shape[0] - 1)
        frac = pos - lo
        v = sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac
        v = jnp.where(frac > 0, v, sorted_values[lo])
        out.append(jnp.where(n > 0, v, 0.0))
    return jnp.stack(out)


def link_statistics(utilisation: jax.Array, alive: jax.Array,
                    tier_bounds: tuple[tuple[int, int], ...]) -> jax.Array:
    """Quantiles (QUANTILES) of utilisation over alive links, float[1 + tiers, Q]:
    row 0 over all links, then one row per tier (each tier a contiguous [start, stop))."""
    masked = jnp.where(alive, utilisation, -jnp.inf)
    rows = [sorted_quantiles(jnp.sort(masked), jnp.sum(~alive))]
    for start, stop in tier_bounds:  # static: four tiers
        segment = masked[start:stop]
        rows.append(sorted_quantiles(jnp.sort(segment), jnp.sum(~alive[start:stop])))
    return jnp.stack(rows)


class PhaseResult(NamedTuple):
    """What one phase under one split reports (device arrays; one device_get on the host)."""

    stats: jax.Array          # float[1 + tiers, 3] utilisation P50/P99/P100, all then per tier
    top_links: jax.Array      # int32[top_k] most utilised links, worst first
    top_util: jax.Array       # float[top_k]
    total_load: jax.Array     # float scalar: sum of offered load over real links (Gbit/s)
    rates: jax.Array          # float[F] max-min rates (Gbit/s)
    phase_time: jax.Array     # float scalar: slowest non-stalled flow's time (s)
    ideal_time: jax.Array     # float scalar: slowest flow's time at its offered rate alone (s)
    stalled: jax.Array        # int32 scalar: flows with bytes to send and rate 0
    rounds: jax.Array         # int32 scalar: max-min rounds
    status: jax.Array         # int32 scalar: STATUS_* flags


def evaluate_split(links, weights, demand, size_bytes, flow_cap, capacity, alive, *,
                   eps, max_rounds, tier_bounds, top_k) -> PhaseResult:
    """Loads, utilisation statistics, max-min rates and phase time for a given split.

    capacity, alive: [L] for the real links (the sentinel is appended here)."""
    num_links = capacity.shape[0]
    cap_ext = jnp.concatenate([jnp.where(alive, capacity, 0.0), jnp.array([jnp.inf])])
    load = link_load(links, weights, demand, num_links + 1)[:num_links]
    safe_cap = jnp.where(capacity > 0, capacity, 1.0)
    # a dead or zero-capacity link carrying load is infinitely overloaded; one carrying none
    # is not counted (it is masked out of the statistics below)
    utilisation = jnp.where(capacity > 0, load / safe_cap, jnp.where(load > 0, jnp.inf, 0.0))
    usable = alive & (capacity > 0)
    stats = link_statistics(utilisation, usable, tier_bounds)
    top_util, top_links = jax.lax.top_k(jnp.where(usable, utilisation, -jnp.inf), top_k)

    mm = max_min_rates(links, weights, flow_cap, cap_ext, eps=eps, max_rounds=max_rounds)
    sending = size_bytes > 0
    stalled_mask = sending & (mm.rates <= 0)
    bits = size_bytes * GBIT_PER_BYTE
    flow_time = jnp.where(sending & ~stalled_mask, bits / jnp.where(stalled_mask, 1.0, mm.rates),
                          0.0)
    ideal = jnp.where(sending, bits / demand, 0.0)
    stalled = jnp.sum(stalled_mask).astype(jnp.int32)
    status = mm.status | jnp.where(stalled > 0, STATUS_STALLED, STATUS_OK).astype(jnp.int32)
    return PhaseResult(
        stats=stats, top_links=top_links.astype(jnp.int32), top_util=top_util,
        total_load=jnp.sum(load), rates=mm.rates, phase_time=jnp.max(flow_time),
        ideal_time=jnp.max(ideal), stalled=stalled, rounds=mm.rounds, status=status,
    )


@functools.partial(jax.jit, static_argnames=("tier_bounds", "top_k"))
def solve_uniform_phase(links, demand, size_bytes, flow_cap, capacity, alive, eps, max_rounds,
                        *, tier_bounds, top_k) -> PhaseResult:
    """ECMP and spraying: each flow split equally over its live path slots, then evaluated."""
    alive_ext = jnp.concatenate([alive, jnp.array([True])])
    weights = uniform_live_split(links, alive_ext)
    return evaluate_split(links, weights, demand, size_bytes, flow_cap, capacity, alive,
                          eps=eps, max_rounds=max_rounds, tier_bounds=tier_bounds, top_k=top_k)
