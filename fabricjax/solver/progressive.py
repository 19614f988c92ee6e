"""Progressive (flow-level, event-driven) completion: finished flows release their bandwidth.

Contract: `progressive_completion` simulates one phase as a sequence of events inside one bounded
`jax.lax.while_loop`; at each event the max-min rates (`solver.max_min_rates`) are re-solved
over the active flows (started, not finished). Units as in `solver`: sizes in bytes, rates and
capacities in Gbit/s; start times in seconds from the phase start, durations from each flow's
own start. Each event finishes at least
one flow or admits at least one arrival, so a phase needs at most (flows with bytes) +
(distinct arrival times) + 1 events; `max_events` may cut that short (then
`Status.EVENT_LIMIT`).
`give_up_after` > 0 (traced) stops early, flagged `Status.SKIPPED`, at the first event from
that many on where both the share of the flows finished and the share of the first solve's span
simulated are below the share of `max_events` spent (on pace to pass the cap, where the result
would be an extrapolation anyway); the finish times are then not meaningful.
`batch` > 0 approximates: flows finishing within a factor (1 + batch) of the earliest finish
finish in the same event, each at its own time, but their bandwidth is released only when the
last of them finishes, so the others keep the older rates a little too long (on one shared
link that makes them late by at most a factor 1 + batch; across links max-min is not monotone,
so a few may also come out slightly early).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from fabricjax.core.status import Status
from fabricjax.solver.maxmin import GBIT_PER_BYTE, MaxMin, max_min_rates

OK, STALLED, EVENT_LIMIT = int(Status.OK), int(Status.STALLED), int(Status.EVENT_LIMIT)
SKIPPED = int(Status.SKIPPED)

# Flows whose time to finish lies within this relative distance of the event's horizon finish
# in that event even with batch = 0: f32 remainders of flows that tie exactly differ by a few
# ulps after some events, and without this each tie would cost an event of a few ulps.
SAME_TIME_RTOL = 1e-5


class Progressive(NamedTuple):
    """One phase under the progressive model (device arrays).

    finish: float32[F] start_s + duration (a convenience for small start times; the host
        adds its float64 starts to `duration` instead).
    duration: float32[F] seconds from each flow's own start to its finish (its FCT on the
        fabric); 0 for a flow with no bytes; inf only for a stalled flow (bytes left, rate 0,
        and nothing left that could change it).
    events: int32 scalar, rate solves inside the event loop (the last one, which finds a
        stalled phase with nothing left to change, counts too; the extra solve after
        EVENT_LIMIT does not).
    rounds: int32 scalar, the most max-min rounds any solve used.
    status: int32 scalar, Status flags (the max-min solves' and EVENT_LIMIT) combined with ``|``.
    """

    finish: jax.Array
    duration: jax.Array
    events: jax.Array
    rounds: jax.Array
    status: jax.Array


def _safe_divide(num: jax.Array, den: jax.Array, where: jax.Array) -> jax.Array:
    """num / den where `where`, inf elsewhere; the denominator is replaced before dividing so
    no 0/0 (NaN) is ever formed, even in the branch that is thrown away."""
    return jnp.where(where, num / jnp.where(where, den, 1.0), jnp.inf)


class _Events(NamedTuple):
    """The event loop's carry. Time is kept per flow, relative: `wait` until a pending flow
    arrives and `age` since an active one did, so a flow's duration is accurate to its own
    magnitude however late in the phase it starts (an absolute float32 clock at 1000 s
    resolves only ~60 us). elapsed: since the first arrival (only the give-up pace reads it);
    remaining: Gbit; span: the first solve's time to its slowest flow's end."""

    elapsed: jax.Array
    wait: jax.Array
    age: jax.Array
    remaining: jax.Array
    duration: jax.Array
    done: jax.Array
    events: jax.Array
    rounds: jax.Array
    status: jax.Array
    stalled: jax.Array
    span: jax.Array


def _behind(state: _Events, sending: jax.Array, max_events: jax.Array,
            give_up_after: jax.Array) -> jax.Array:
    """On pace to pass the cap: both the share of the flows finished and the share of the first
    solve's span (its slowest flow's end) simulated so far are below the share of the cap spent
    (flows alone misjudge a phase whose many flows all end late, time alone one whose few slow
    flows set a long span)."""
    f32 = jnp.float32
    spent = state.events.astype(f32) / max_events.astype(f32)
    finished = jnp.sum(state.done & sending).astype(f32)
    return ((give_up_after > 0) & (state.events >= give_up_after) &
            (finished < jnp.sum(sending).astype(f32) * spent) &
            (state.elapsed < state.span * spent))


def _event(state: _Events, active: jax.Array, mm, batch: jax.Array) -> _Events:
    """One event: advance to the earliest finish (a batch of them within 1 + batch) or the
    next arrival at the rates `mm` solved for the `active` flows."""
    moving = active & (mm.rates > 0)
    time_left = _safe_divide(state.remaining, mm.rates, moving)
    earliest = jnp.min(time_left)
    pending = ~state.done & (state.wait > 0)
    to_arrival = jnp.min(jnp.where(pending, state.wait, jnp.inf))   # inf: nothing pending
    # nothing moves and nobody arrives: the rate-0 flows would wait forever
    stalled = ~jnp.isfinite(jnp.minimum(earliest, to_arrival))
    # the batch never reaches past an arrival, so arrivals stay exact under batching
    horizon = jnp.minimum(earliest * (1.0 + batch), to_arrival)
    finishing = moving & (time_left <= horizon * (1.0 + SAME_TIME_RTOL))
    step = jnp.where(jnp.any(finishing),
                     jnp.minimum(jnp.max(jnp.where(finishing, time_left, 0.0)), horizon),
                     to_arrival)
    step = jnp.where(stalled, 0.0, step)
    # arrivals land exactly on 0 (x - x), so `wait <= 0` admits them next event
    arriving = pending & (state.wait <= step)
    new_wait = jnp.where(pending, jnp.where(arriving, 0.0, state.wait - step), state.wait)
    sent = jnp.where(moving & ~finishing, mm.rates * step, 0.0)
    new_remaining = jnp.where(finishing, 0.0, jnp.maximum(state.remaining - sent, 0.0))
    # a flow that was not in the batch but has nothing left (f32 rounding) is done now
    drained = active & ~finishing & (new_remaining <= 0)
    new_duration = jnp.where(finishing, state.age + time_left,
                             jnp.where(drained, state.age + step, state.duration))
    latest = jnp.max(jnp.where(moving, time_left, 0.0))
    return _Events(
        elapsed=state.elapsed + step, wait=new_wait,
        age=jnp.where(active, state.age + step, state.age), remaining=new_remaining,
        duration=new_duration, done=state.done | finishing | drained,
        events=state.events + 1, rounds=jnp.maximum(state.rounds, mm.rounds),
        status=state.status | mm.status | jnp.where(stalled, STALLED, 0).astype(jnp.int32),
        stalled=stalled, span=jnp.where(state.events == 0, latest, state.span))


def _unfinished(state: _Events, solve, hit_limit: jax.Array):
    """(duration, rounds, status) after the loop: past the event cap, every unfinished flow
    shares the fabric from now or its start, whichever is later, to its end (one solve);
    otherwise every flow is done, or the loop stalled and the flows left never finish."""
    def extrapolate(_):
        unfinished = ~state.done
        mm = solve(unfinished)
        moving = unfinished & (mm.rates > 0)
        left = _safe_divide(state.remaining, mm.rates, moving)
        out = jnp.where(unfinished, jnp.where(state.wait <= 0, state.age, 0.0) + left,
                        state.duration)
        flags = (EVENT_LIMIT | mm.status
                 | jnp.where(jnp.any(unfinished & ~moving), STALLED, 0))
        return out, mm.rounds, flags.astype(jnp.int32)

    def settle(_):
        return jnp.where(state.done, state.duration, jnp.inf), jnp.int32(0), jnp.int32(OK)

    return jax.lax.cond(hit_limit, extrapolate, settle, None)


def progressive_completion(links: jax.Array, weights: jax.Array, size_bytes: jax.Array,
                           start_s: jax.Array, flow_cap: jax.Array, capacity_ext: jax.Array, *,
                           eps: jax.Array | float, max_rounds: jax.Array | int,
                           max_events: jax.Array | int, batch: jax.Array | float,
                           give_up_after: jax.Array | int = 0,
                           rates: Callable[[jax.Array], MaxMin] | None = None) -> Progressive:
    """Finish time of every flow when rates are re-solved at every completion and arrival.

    links, weights: as `solver.max_min_rates` takes them (int32[F, K, H] link ids with
        float[F, K] slot weights, or the [F, E, 1] ids and [F, E] coefficients of
        `incidence.clos_incidence`). capacity_ext: float[L+1] Gbit/s, 0 on dead links, inf on the
        sentinel. size_bytes, start_s (arrival, seconds), flow_cap (Gbit/s): float[F].
    eps, max_rounds: the max-min solver's settings (each solve). max_events: bound on the event
        loop; if reached, the unfinished flows are extrapolated from one last solve in which all
        of them (pending arrivals included) share the fabric from their start or now, whichever
        is later. batch >= 0: see the module docstring; 0 is exact. give_up_after: see the
        module docstring (0: never). rates: a function of the active mask bool[F] that solves
        the rates instead (`incidence.RoutesMixin.split_rates`: a resending sprayer's); None:
        `max_min_rates` on links, weights.
    """
    f32 = jnp.float32
    size_bytes = jnp.asarray(size_bytes, f32)
    start_s = jnp.asarray(start_s, f32)
    flow_cap = jnp.asarray(flow_cap, f32)
    capacity_ext = jnp.asarray(capacity_ext, f32)
    batch = jnp.maximum(jnp.asarray(batch, f32), 0.0)
    max_events = jnp.asarray(max_events, jnp.int32)
    give_up_after = jnp.asarray(give_up_after, jnp.int32)
    # remaining work in Gbit, so remaining / rate is seconds
    bits = size_bytes * GBIT_PER_BYTE
    sending = bits > 0

    def solve(active):
        if rates is not None:
            return rates(active)
        # inactive flows get no weight, so the solver sees no path and freezes them at 0 at once
        return max_min_rates(links, weights * active[:, None].astype(weights.dtype), flow_cap,
                             capacity_ext, eps=eps, max_rounds=max_rounds)

    # time starts at the first arrival with bytes, so a late phase does not cost an empty event
    first = jnp.min(jnp.where(sending, start_s, jnp.inf))
    t0 = jnp.where(jnp.isfinite(first), first, 0.0)
    init = _Events(elapsed=f32(0.0), wait=jnp.maximum(start_s - t0, 0.0),
                   age=jnp.zeros_like(bits), remaining=bits, duration=jnp.zeros_like(bits),
                   done=~sending, events=jnp.int32(0), rounds=jnp.int32(0),
                   status=jnp.int32(OK), stalled=jnp.bool_(False), span=f32(jnp.inf))

    def behind(state):
        return _behind(state, sending, max_events, give_up_after)

    def cond(state):
        return (jnp.any(~state.done) & ~state.stalled & (state.events < max_events) &
                ~behind(state))

    def body(state):
        active = ~state.done & (state.wait <= 0)
        return _event(state, active, solve(active), batch)

    state = jax.lax.while_loop(cond, body, init)
    gave_up = jnp.any(~state.done) & ~state.stalled & behind(state)
    hit_limit = jnp.any(~state.done) & ~state.stalled & ~gave_up
    duration, extra_rounds, extra_status = _unfinished(state, solve, hit_limit)
    return Progressive(finish=start_s + duration, duration=duration, events=state.events,
                       rounds=jnp.maximum(state.rounds, extra_rounds),
                       status=state.status | extra_status | jnp.where(gave_up, SKIPPED, OK))
