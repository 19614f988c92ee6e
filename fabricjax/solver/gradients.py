"""Gradients of a phase's P100 and completion time with respect to link capacities: "which
links would most shorten this collective if upgraded?"

Contract: for one phase under a FIXED split (spray, ECMP and MRC's final EVs: equal over the
live slots; optimal: its weights), `p100(capacity, split)` and `phase_time(capacity, split)`
are pure JAX functions of capacity float32[L] (Gbit/s, real links, no sentinel); `jax.grad` of
them is exact wherever the maximising / minimising link is unique, and a documented
subgradient where it is not. `study.sensitivity` ranks the links with them.

The two functions (load_l: offered Gbit/s on link l, capacity-independent; g_l: the split's
weight through l, so a rate r common to all flows puts r * g_l on it; cap: the NIC rate):

    p100(c)       = max over usable links of load_l / c_l          (usable: alive, c_l > 0)
    phase_time(c) = bits / rate,  rate = min(min over l with g_l > 0 of c_l / g_l, cap)

`phase_time` is the slowest max-min rate of `solver.slowest_rate`, which fixes the phase time
only when every sending flow sends the same bytes and all start together (`solver.rates: auto`
uses it then). For other phases it returns NaN: the general time, max over flows of
size_f / rate_f with max-min rates, is piecewise linear in c through a bottleneck structure
that `max_min_rates` decides by discrete freezing inside a `while_loop` (no reverse mode, and
forward mode would cost one solve per link), so no honest gradient is offered for it here.

What is exact and what is a subgradient (hard form, temperature 0):
  * unique arg max / arg min (generic capacities): the gradient is exact, -load_l / c_l^2 for
    P100 and -T / c_l for the time, both on that one link, 0 on every other link;
  * ties: links within a relative `tie_rtol` (1e-5, the solver's own saturation slack) of the
    max count as tied and share the gradient equally (`tied_max`; JAX's own jnp.max rule
    splits only bitwise-equal ties, so float32 rounding of equal sums would pick a link at
    random). The result lies in the (epsilon-)subdifferential; it is the exact derivative
    along the joint relative upgrade of the tied links (c_l -> (1 + h) c_l for each), and,
    P100 being homogeneous of degree -1, it satisfies grad . c = -P100 (to within tie_rtol).
    Upgrading one tied link alone does nothing (its one-sided derivative is 0);
  * the NIC cap: when it binds or ties the slowest link share, no link upgrade speeds the
    phase, and the time gradient is 0 (the one-sided derivative for upgrades);
  * optimal: the bound P*(c) = min over splits w of max_l load_l(w) / c_l. By Danskin's
    theorem its gradient is that of max_l load_l(w*) / c_l at the optimal split w* held fixed,
    valid when the tight set is a single link (then exact up to the solver's gap). At an
    optimum many links are typically tight, P* is not differentiable there, and the gradient
    is a one-sided estimate: here the links within the solver's certified gap of the max count
    as tied (it cannot tell which of them the exact optimum keeps tight), so grad . c = -P*
    still holds, but a single link's entry is not the effect of upgrading that link alone
    (the LP's dual prices would be). The time under optimal is the fixed-split time; when
    every flow offers the same demand d and the cap does not bind, rate = d / P100 and the
    optimal split minimises the time as well, so the same Danskin reading applies.

Smooth form (temperature tau > 0, dimensionless): max and min become log-sum-exp soft maxima
of the logarithms, P_tau = (sum_l u_l^(1/tau))^tau and 1 / rate_tau = (sum_l (g_l / c_l)^(1/tau)
+ cap^(-1/tau))^tau, so P <= P_tau <= n^tau P over n loaded links (likewise for the time). The
smoothing is relative, so one tau suits utilisations and rates of any scale; the gradient is
dense (every loaded link gets a share that falls off as (u_l / P)^(1/tau)) and exact for the
smoothed objective. Small tau (0.01-0.05) ranks the near-bottlenecks behind the bottleneck.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from fabricjax.solver.maxmin import GBIT_PER_BYTE, link_load

# Relative distance from the max (min) within which links count as tied: the max-min solver's
# own saturation slack, a few float32 roundings of a sum of many terms.
TIE_RTOL = 1e-5


class PhaseSplit(NamedTuple):
    """The capacity-independent part of one phase under a fixed split (device arrays, L links).

    load: float32[L] offered load per link, Gbit/s (sum of demand x split weight over flows).
    growth: float32[L] split weight through each link: link load per Gbit/s of a rate common
      to all flows (dimensionless).
    alive: bool[L].
    flow_cap: float32 scalar, the smallest rate cap of a flow with a path, Gbit/s (the NIC rate,
      times the carried share under optimal); inf when no flow has a path.
    bits: float32 scalar, Gbit each sending flow sends; 0 when none sends; NaN when sending
      flows send different bytes (then `phase_time` is NaN: see the module docstring).
    stalled: bool scalar, some sending flow has no path (the phase never finishes).
    tie_rtol: float32 scalar, relative distance from the max / min counted as a tie."""

    load: jax.Array
    growth: jax.Array
    alive: jax.Array
    flow_cap: jax.Array
    bits: jax.Array
    stalled: jax.Array
    tie_rtol: jax.Array


class Sensitivity(NamedTuple):
    """Values and gradients of one phase at one capacity vector (L links).

    p100: scalar max utilisation; time: scalar seconds (inf when stalled, NaN when sizes
    differ); d_p100: float32[L] per Gbit/s; d_time: float32[L] seconds per Gbit/s;
    utilisation: float32[L] load / capacity (0 on dead or zero-capacity links)."""

    p100: jax.Array
    time: jax.Array
    d_p100: jax.Array
    d_time: jax.Array
    utilisation: jax.Array


# --------------------------------------------------------------------------- tie-aware max

@jax.custom_jvp
def tied_max(x: jax.Array, rtol: jax.Array) -> jax.Array:
    """max(x) over a vector (-inf entries are masked out), whose derivative is spread equally
    over every finite entry within a relative `rtol` of the max (not differentiated in rtol,
    which the value does not depend on)."""
    del rtol
    return jnp.max(x)


@tied_max.defjvp
def _tied_max_jvp(primals, tangents):
    x, rtol = primals
    dx, _ = tangents
    top = jnp.max(x)
    tied = jnp.isfinite(x) & (x >= top - rtol * jnp.abs(top))
    count = jnp.maximum(jnp.sum(tied.astype(x.dtype)), jnp.ones((), x.dtype))
    return top, jnp.sum(jnp.where(tied, dx, jnp.zeros_like(dx))) / count


def tied_min(x: jax.Array, rtol: jax.Array) -> jax.Array:
    """min(x) (+inf entries masked out) with `tied_max`'s rule for ties."""
    return -tied_max(-x, rtol)


def _soft_max(x: jax.Array, mask: jax.Array, tau: jax.Array) -> jax.Array:
    """(sum over the masked entries of x^(1/tau))^tau = exp(tau * logsumexp(log x / tau)) for
    masked x > 0; 0 when the mask is empty (NaN-free gradients either way).

    The logs are taken of x / ref with ref the largest masked x (a constant to the gradient:
    the value does not depend on it), so they are near 0: log x / tau itself would be in the
    hundreds for rates of ~100 Gbit/s at tau = 0.02, and its float32 rounding (~1e-5) would
    swamp the small entries' gradients."""
    some = jnp.any(mask)
    ones = jnp.ones_like(x)
    ref = jax.lax.stop_gradient(jnp.max(jnp.where(mask, x, 0.0)))
    ref = jnp.where(ref > 0, ref, jnp.ones_like(ref))
    z = jnp.where(mask, jnp.log(jnp.where(mask, x, ones) / ref) / tau, -jnp.inf)
    z = jnp.where(some, z, jnp.zeros_like(z))
    value = ref * jnp.exp(tau * jax.nn.logsumexp(z))
    return jnp.where(some, value, jnp.zeros_like(value))


def _usable(capacity: jax.Array, split: PhaseSplit) -> tuple[jax.Array, jax.Array]:
    usable = split.alive & (capacity > 0)
    return usable, jnp.where(usable, capacity, jnp.ones_like(capacity))


# --------------------------------------------------------------------------- the objectives

def p100(capacity: jax.Array, split: PhaseSplit, temperature=0.0) -> jax.Array:
    """Max utilisation over usable links (soft maximum when temperature > 0; 0 when no usable
    link). Pure in `capacity` float32[L]; see the module docstring for its gradient."""
    usable, safe_cap = _usable(capacity, split)
    tau = jnp.asarray(temperature, capacity.dtype)

    def hard(_):
        u = jnp.where(usable, split.load / safe_cap, -jnp.inf)
        top = tied_max(u, split.tie_rtol)
        return jnp.where(jnp.isfinite(top), top, jnp.zeros_like(top))

    def soft(t):
        loaded = usable & (split.load > 0)
        return _soft_max(split.load / safe_cap, loaded, t)

    return jax.lax.cond(tau > 0, soft, hard, tau)


def phase_time(capacity: jax.Array, split: PhaseSplit, temperature=0.0) -> jax.Array:
    """Seconds until the slowest flow of an equal-size phase finishes: bits / slowest max-min
    rate (`solver.slowest_rate`; soft minimum of the rates when temperature > 0). inf when a
    sending flow stalls (no path, or weight on a dead link), NaN when sizes differ."""
    usable, safe_cap = _usable(capacity, split)
    tau = jnp.asarray(temperature, capacity.dtype)
    carries = split.growth > 0
    bound = carries & usable
    blocked = jnp.any(carries & ~usable) | split.stalled
    safe_growth = jnp.where(carries, split.growth, jnp.ones_like(split.growth))
    cap = split.flow_cap
    capped = jnp.isfinite(cap)

    def hard(_):
        share = jnp.where(bound, safe_cap / safe_growth, jnp.inf)
        rate = tied_min(share, split.tie_rtol)
        # the NIC binds (or ties): no link upgrade helps, the one-sided derivative is 0
        rate = jnp.where(cap <= rate * (1 + split.tie_rtol), cap, rate)
        return 1.0 / rate

    def soft(t):
        # the soft maximum of the inverse rates: 1 / share per link and 1 / cap
        inv_cap = 1.0 / jnp.where(capped, cap, jnp.ones_like(cap))
        return _soft_max(jnp.concatenate([safe_growth / safe_cap, inv_cap[None]]),
                         jnp.concatenate([bound, capped[None]]), t)

    inv_rate = jax.lax.cond(tau > 0, soft, hard, tau)
    bits = split.bits
    time = jnp.where(blocked, jnp.inf, bits * inv_rate)
    return jnp.where(bits == 0, jnp.zeros_like(time), time)


@jax.jit
def sensitivity(capacity: jax.Array, split: PhaseSplit, temperature) -> Sensitivity:
    """Both objectives and their gradients with respect to `capacity`, one jitted call
    (`temperature` is an array argument: sweeping it never recompiles)."""
    value_p, grad_p = jax.value_and_grad(p100)(capacity, split, temperature)
    value_t, grad_t = jax.value_and_grad(phase_time)(capacity, split, temperature)
    usable, safe_cap = _usable(capacity, split)
    utilisation = jnp.where(usable, split.load / safe_cap, jnp.zeros_like(safe_cap))
    return Sensitivity(p100=value_p, time=value_t, d_p100=grad_p, d_time=grad_t,
                       utilisation=utilisation)


# --------------------------------------------------------------------------- building splits

def split_of(ids, coef, num_links, demand, size_bytes, flow_cap, alive, tie_rtol):
    """PhaseSplit from per-entry link ids int[F, E, H] and weights float[F, E] (the solver's
    two layouts: stored [F, K, H] ids, or `incidence.clos_incidence`)."""
    load = link_load(ids, coef, demand, num_links + 1)[:num_links]
    growth = link_load(ids, coef, jnp.ones_like(demand), num_links + 1)[:num_links]
    has_path = coef.sum(axis=1) > 0
    sending = size_bytes > 0
    big = jnp.max(jnp.where(sending, size_bytes, -jnp.inf))
    small = jnp.min(jnp.where(sending, size_bytes, jnp.inf))
    bits = jnp.where(jnp.any(sending), jnp.where(big == small, big * GBIT_PER_BYTE, jnp.nan),
                     0.0).astype(demand.dtype)
    return PhaseSplit(load=load, growth=growth, alive=alive,
                      flow_cap=jnp.min(jnp.where(has_path, flow_cap, jnp.inf)),
                      bits=bits, stalled=jnp.any(sending & ~has_path),
                      tie_rtol=jnp.asarray(tie_rtol, demand.dtype))


@jax.jit
def phase_split(links, weights, demand, size_bytes, flow_cap, alive, tie_rtol) -> PhaseSplit:
    """The PhaseSplit of any fabric's paths, as `solver.evaluate_split` sees them: stored link
    ids int32[F, K, H] (sentinel L = alive.shape[0]), weights float32[F, K] (e.g.
    `solver.uniform_live_split`), demand, flow_cap float32[F] Gbit/s (used as given),
    size_bytes float32[F], alive bool[L], tie_rtol float32 scalar."""
    return split_of(links, weights, alive.shape[0], demand, size_bytes, flow_cap, alive,
                    tie_rtol)
