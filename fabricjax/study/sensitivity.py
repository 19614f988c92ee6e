"""Which links would most shorten a collective if upgraded: the gradient of its time and
P100 with respect to every link's capacity, ranked (`--sensitivity`).

Contract: `link_upgrades` gives, per policy and workload item, the top links; the split each
phase ran on comes from the engine (`engine.phase.phase_split`, the same incidence as the
phase program, so every fabric kind works) and the values and gradients from
`solver.gradients.sensitivity` (see its docstring for what is exact and what is a documented
subgradient). Items solved as classes are skipped (no per-flow split).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fabricjax.config import Scenario
from fabricjax.engine.phase import phase_split
from fabricjax.fabric.build import AnyFabric
from fabricjax.policies import get
from fabricjax.solver.gradients import PhaseSplit, Sensitivity, sensitivity
from fabricjax.workload.flows import Collective

# Relative distance from the max (min) within which links count as tied: the max-min solver's
# own saturation slack, a few float32 roundings of a sum of many terms.
TIE_RTOL = 1e-5


def outcome_split(fabric: AnyFabric, flows, outcome, policy: str, *,
                  alive: np.ndarray | None = None) -> PhaseSplit:
    """The fixed split `outcome` (an `engine.phase.PhaseOutcome` of `flows`) ran on: mrc's
    returned EVs, spray's / ecmp's slots, or a bound's weights (for a policy whose residual is
    a certified gap, links within that gap count as tied). Raises ValueError for a phase
    solved as classes (no per-flow slots: solve it with solver.aggregate: never)."""
    tie = TIE_RTOL
    upper = float(np.asarray(outcome.result.stats)[0, -1])
    if get(policy).gap_certified and outcome.adaptation is not None and upper > 0:
        tie = max(TIE_RTOL, float(outcome.adaptation.residual) / upper)
    return phase_split(fabric, outcome, alive=alive, tie_rtol=tie)


def _time_defined(flows) -> bool:
    """Whether `phase_time` is this phase's time: all flows start together, equal bytes."""
    sending = flows.size[flows.size > 0]
    return flows.start is None and bool(sending.size == 0 or np.all(sending == sending[0]))


def phase_sensitivity(scenario, fabric: AnyFabric, flows, outcome, policy: str, *,
                      alive: np.ndarray | None = None, temperature: float = 0.0
                      ) -> Sensitivity:
    """`sensitivity` of one phase at the fabric's capacities (numpy arrays). time and d_time
    are NaN when the phase's time is not the slowest-rate form (unequal sizes, start times);
    a phase without flows gives zeros."""
    num = fabric.num_links
    if flows.num_flows == 0:
        zeros = np.zeros(num, np.float32)
        return Sensitivity(np.float32(0), np.float32(0), zeros, zeros, zeros)
    split = outcome_split(fabric, flows, outcome, policy, alive=alive)
    out = jax.device_get(sensitivity(jnp.asarray(fabric.capacity, jnp.float32), split,
                                     np.float32(temperature)))
    if not _time_defined(flows):
        out = out._replace(time=np.float32(np.nan), d_time=np.full(num, np.nan, np.float32))
    return out


# --------------------------------------------------------------------------- rankings

def _ranked(fabric: AnyFabric, usable: np.ndarray, d_time: np.ndarray | None, d_p100: np.ndarray,
            utilisation: np.ndarray, top_k: int) -> list[dict]:
    """Rows of the `top_k` usable links: largest time saving per Gbit/s first, then largest
    P100 drop, then highest utilisation."""
    ids = np.flatnonzero(usable)
    time_key = np.zeros(ids.shape[0]) if d_time is None else d_time[ids]
    order = np.lexsort((-utilisation[ids], d_p100[ids], time_key))[:max(top_k, 0)]
    return [{"link": fabric.link_name(l),
             "d_time_d_gbps": None if d_time is None else float(d_time[l]),
             "d_p100_d_gbps": float(d_p100[l]),
             "utilisation": float(utilisation[l])} for l in ids[order]]   # top_k rows


def _usable_mask(fabric: AnyFabric, alive: np.ndarray | None) -> np.ndarray:
    alive = np.ones(fabric.num_links, bool) if alive is None else np.asarray(alive, bool)
    return alive & (fabric.capacity > 0)


def link_sensitivity(scenario, fabric: AnyFabric, flows, outcome, policy: str, *,
                     top_k: int = 10, alive: np.ndarray | None = None,
                     temperature: float = 0.0) -> list[dict]:
    """The links whose capacity increase most shortens this phase (then most lowers its P100):
    up to `top_k` rows {link, d_time_d_gbps (s per Gbit/s), d_p100_d_gbps (per Gbit/s),
    utilisation}, over alive links of positive capacity. d_time_d_gbps is None when the phase
    time is not the slowest-rate form (unequal sizes, start times) or the phase stalls.
    `temperature` > 0: the smoothed objectives (dense gradients; module docstring)."""
    sens = phase_sensitivity(scenario, fabric, flows, outcome, policy, alive=alive,
                             temperature=temperature)
    d_time = np.asarray(sens.d_time) if np.isfinite(sens.time) else None
    return _ranked(fabric, _usable_mask(fabric, alive), d_time, np.asarray(sens.d_p100),
                   np.asarray(sens.utilisation), top_k)


def collective_sensitivity(scenario, fabric: AnyFabric, collective, outcomes, policy: str, *,
                           top_k: int = 10, alive: np.ndarray | None = None,
                           temperature: float = 0.0) -> list[dict]:
    """`link_sensitivity` for a whole collective (`outcomes`: its phases' PhaseOutcomes, as
    `analyze` makes them).

    Time: the collective's time is the sum over phases of repeat x (max(fabric time (of the
    wire bytes) + transport latency, scale-up time) + step latency), so d_time sums
    repeat x the phase's d_time over phases whose fabric time exceeds their
    scale-up time (a phase bound by its scale-up flows gains nothing from
    the fabric: one-sided derivative 0). None when any fabric phase lacks a finite time.
    P100: the collective's P100 is its busiest phase's, so d_p100 is that phase's gradient
    (phases tied within TIE_RTOL share it equally), not a sum. utilisation: each link's
    highest over the phases. The max over phases stays hard at any temperature."""
    num = fabric.num_links
    d_time = np.zeros(num, np.float64)
    time_ok = True
    peaks, grads = [], []
    utilisation = np.zeros(num, np.float32)
    for phase, outcome in zip(collective.phases, outcomes):   # a handful of phases
        if phase.flows.num_flows == 0:
            continue
        sens = phase_sensitivity(scenario, fabric, phase.flows, outcome, policy, alive=alive,
                                 temperature=temperature)
        utilisation = np.maximum(utilisation, sens.utilisation)
        peaks.append(float(sens.p100))
        grads.append(np.asarray(sens.d_p100, np.float64))
        if not np.isfinite(sens.time):
            time_ok = False
        elif float(sens.time) > phase.scaleup_time * (1 + TIE_RTOL):
            d_time += phase.repeat * np.asarray(sens.d_time, np.float64)
    d_p100 = np.zeros(num, np.float64)
    if peaks:
        peaks_arr = np.asarray(peaks)
        top = peaks_arr.max()
        tied = peaks_arr >= top - TIE_RTOL * abs(top)
        d_p100 = np.mean(np.stack(grads)[tied], axis=0)
    return _ranked(fabric, _usable_mask(fabric, alive), d_time if time_ok else None, d_p100,
                   utilisation, top_k)


def link_upgrades(scenario: Scenario, fabric: AnyFabric, collectives: list[Collective],
                  baseline: dict, top_k: int = 5) -> list[dict]:
    """Per policy and workload item: the links whose capacity would most shorten it (the
    gradient of its time, then of its P100, with respect to each link's capacity). Items
    solved as classes are skipped (no per-flow split)."""
    rows = []
    for policy in scenario.policies:
        for item, collective in enumerate(collectives):
            outcomes = baseline[(policy, item)]
            if any(o.classes is not None for o in outcomes):
                continue
            links = collective_sensitivity(scenario, fabric, collective, outcomes, policy,
                                           top_k=top_k)
            rows.append({"policy": policy, "workload": collective.name, "links": links})
    return rows
