"""Slow, obvious reference implementations that the vectorised core is checked against.

Everything here is plain Python / numpy / networkx loops in float64, written from the textual
definitions of the domain (collectives as steps of flows, link load as a sum over paths,
max-min fairness by progressive filling) and never from the library's index arithmetic, so a
shared mistake is unlikely. Speed is irrelevant: inputs are a few dozen flows and links.
"""

from __future__ import annotations

import math
from fractions import Fraction

import networkx as nx
import numpy as np

TIER_GPU_T0, TIER_T0_T1, TIER_T1_T0, TIER_T0_GPU = 0, 1, 2, 3


# --------------------------------------------------------------------------- topology

def reference_ports(radix: int, oversubscription: float) -> tuple[int, int]:
    """(down, up) ports of a T0: down/up == oversubscription and down + up == radix."""
    for up in range(1, radix):
        down = radix - up
        if abs(down - oversubscription * up) < 1e-9:
            return down, up
    raise ValueError(f"radix {radix} does not split at {oversubscription}:1")


def reference_fabric_graph(cfg) -> nx.DiGraph:
    """The two-tier multi-plane Clos of `cfg` (a ClosConfig), node by node, link by link.

    Nodes are named ("gpu", g), ("t0", plane, t), ("t1", plane, s). GPU g has one port per
    plane, cabled to T0 number g // gpus_per_t0 of that plane; every T0 is cabled once to
    every T1 (spine) of its plane. A cable is two directed links, each with the port rate.
    Edge attributes: tier (0 gpu->t0, 1 t0->t1, 2 t1->t0, 3 t0->gpu), plane, capacity."""
    down, up = reference_ports(cfg.radix, cfg.oversubscription)
    gpus_per_t0 = down
    # rail-optimised: server k's GPU r (k = g // w, r = g % w) sits on rail r of its group of
    # D servers; each started group brings w T0s
    w = cfg.gpus_per_server if getattr(cfg, "rail_optimised", False) else 1
    groups = 0
    while groups * gpus_per_t0 * w < cfg.gpus:   # as many T0 groups as it takes
        groups += 1
    t0s = groups * w
    spines = up                            # one T1 per T0 up port

    def t0_of(g: int) -> int:
        server, rank = divmod(g, w)
        return (server // gpus_per_t0) * w + rank
    graph = nx.DiGraph()
    for g in range(cfg.gpus):
        graph.add_node(("gpu", g))
    for p in range(cfg.planes):
        for t in range(t0s):
            graph.add_node(("t0", p, t))
        for s in range(spines):
            graph.add_node(("t1", p, s))
    rate = float(cfg.port_gbps)
    for p in range(cfg.planes):
        for g in range(cfg.gpus):
            t0 = ("t0", p, t0_of(g))
            graph.add_edge(("gpu", g), t0, tier=TIER_GPU_T0, plane=p, capacity=rate)
            graph.add_edge(t0, ("gpu", g), tier=TIER_T0_GPU, plane=p, capacity=rate)
        for t in range(t0s):
            for s in range(spines):
                t0, t1 = ("t0", p, t), ("t1", p, s)
                graph.add_edge(t0, t1, tier=TIER_T0_T1, plane=p, capacity=rate)
                graph.add_edge(t1, t0, tier=TIER_T1_T0, plane=p, capacity=rate)
    graph.graph.update(gpus=cfg.gpus, planes=cfg.planes, t0s=t0s, spines=spines,
                       gpus_per_t0=gpus_per_t0, radix=cfg.radix)
    return graph


def node_name(node_id: int, gpus: int, planes: int, t0s: int, spines: int) -> tuple:
    """The reference name of a fabric node id, from fabric.py's documented numbering
    (GPUs 0..N-1, then T0 (p, t) at N + p*T + t, then T1 (p, s) at N + P*T + p*S + s)."""
    node_id = int(node_id)
    if node_id < gpus:
        return ("gpu", node_id)
    node_id -= gpus
    if node_id < planes * t0s:
        return ("t0", node_id // t0s, node_id % t0s)
    node_id -= planes * t0s
    if node_id < planes * spines:
        return ("t1", node_id // spines, node_id % spines)
    raise ValueError(f"node id {node_id} out of range")


def reference_paths(graph: nx.DiGraph, src: int, dst: int, plane: int, spine: int) -> list:
    """The (plane, spine) path from GPU src to GPU dst as a list of directed edges (u, v),
    found by walking the graph: up to the plane's T0, then straight down to dst if it hangs off
    the same T0, else up to T1 `spine`, down to dst's T0 and down to dst."""
    here = ("gpu", src)
    target = ("gpu", dst)
    t0_up = [v for v in graph.successors(here) if graph.edges[here, v]["plane"] == plane]
    assert len(t0_up) == 1, "a GPU has exactly one port per plane"
    first_t0 = t0_up[0]
    hops = [(here, first_t0)]
    if graph.has_edge(first_t0, target):
        hops.append((first_t0, target))
        return hops
    t1 = ("t1", plane, spine)
    assert graph.has_edge(first_t0, t1)
    hops.append((first_t0, t1))
    last_t0 = [v for v in graph.predecessors(target) if graph.edges[v, target]["plane"] == plane]
    assert len(last_t0) == 1
    hops.append((t1, last_t0[0]))
    hops.append((last_t0[0], target))
    return hops


# --------------------------------------------------------------------------- loads and rates

def reference_link_load(links, weights, demand, num_links: int) -> np.ndarray:
    """load[l] = sum over flows f, slots k, hops h with links[f][k][h] == l of
    demand[f] * weights[f][k]; float64[num_links] (num_links includes the sentinel)."""
    links = np.asarray(links)
    weights = np.asarray(weights, dtype=np.float64)
    demand = np.asarray(demand, dtype=np.float64)
    load = np.zeros(num_links, dtype=np.float64)
    num_flows, num_slots, num_hops = links.shape
    for f in range(num_flows):
        for k in range(num_slots):
            for h in range(num_hops):
                load[int(links[f, k, h])] += demand[f] * weights[f, k]
    return load


def reference_incidence(links, weights, num_links: int) -> np.ndarray:
    """a[l, f]: load that flow f puts on link l per unit of its rate (float64[L+1, F])."""
    links = np.asarray(links)
    weights = np.asarray(weights, dtype=np.float64)
    num_flows, num_slots, num_hops = links.shape
    a = np.zeros((num_links, num_flows))
    for f in range(num_flows):
        for k in range(num_slots):
            for h in range(num_hops):
                a[int(links[f, k, h]), f] += weights[f, k]
    return a


def reference_max_min(links, weights, flow_cap, capacity, *, tol: float = 1e-12):
    """Exact max-min fair rates by progressive filling, one level at a time, float64.

    `capacity` has L+1 entries: dead links 0, the sentinel (last) inf. A flow with no positive
    weight gets rate 0 and takes no part. All other flows rise together from 0; at each step
    the level rises to the lowest point where some link fills up or some flow reaches its cap,
    and every rising flow that crosses a full link (or has reached its cap) stops there.
    Returns (rates float64[F], rounds)."""
    capacity = np.asarray(capacity, dtype=np.float64)
    flow_cap = np.asarray(flow_cap, dtype=np.float64)
    num_links = capacity.shape[0]
    a = reference_incidence(links, weights, num_links)
    num_flows = a.shape[1]
    rates = np.zeros(num_flows)
    rising = [bool(a[:, f].sum() > 0) for f in range(num_flows)]
    level = 0.0
    rounds = 0
    while any(rising):
        rounds += 1
        next_level = math.inf
        for f in range(num_flows):
            if rising[f]:
                next_level = min(next_level, flow_cap[f])
        for l in range(num_links):
            rising_share = sum(a[l, f] for f in range(num_flows) if rising[f])
            if rising_share <= 0:
                continue
            fixed = sum(a[l, f] * rates[f] for f in range(num_flows) if not rising[f])
            fill_level = max(capacity[l] - fixed, 0.0) / rising_share
            next_level = min(next_level, fill_level)
        level = next_level
        for f in range(num_flows):
            if rising[f]:
                rates[f] = level
        stop = [False] * num_flows
        for l in range(num_links):
            if not math.isfinite(capacity[l]):
                continue
            used = sum(a[l, f] * rates[f] for f in range(num_flows))
            if used >= capacity[l] * (1 - tol) - tol:
                for f in range(num_flows):
                    if rising[f] and a[l, f] > 0:
                        stop[f] = True
        for f in range(num_flows):
            if rising[f] and (stop[f] or rates[f] >= flow_cap[f] * (1 - tol)):
                rising[f] = False
    return rates, rounds


def reference_resending(links, plane, weights, flow_cap, capacity, tolerance, *, planes: int,
                        congested_share: float, saturated_rtol: float, max_trimmed: float,
                        rounds: int):
    """A resending sprayer's goodputs (`solver.maxmin.resending_rates`), spelled out with
    loops over flows, slots, hops and links in float64 on `reference_max_min`. Returns
    float64[F]."""
    links = np.asarray(links)
    plane = np.asarray(plane)
    weights = np.asarray(weights, dtype=np.float64)
    capacity = np.asarray(capacity, dtype=np.float64)
    num_flows, num_slots, num_hops = links.shape
    num_links = capacity.shape[0]
    first_hops = {int(links[f, k, 0]) for f in range(num_flows) for k in range(num_slots)}
    trimmable = [math.isfinite(capacity[l]) and capacity[l] > 0 and l not in first_hops
                 for l in range(num_links)]

    def plane_total(split, f, p):
        return sum(split[f, k] for k in range(num_slots) if plane[f, k] == p)

    def delivered(q):
        kept = np.zeros_like(weights)
        for f in range(num_flows):
            for k in range(num_slots):
                kept[f, k] = weights[f, k] * (1.0 - max(q[int(links[f, k, h])]
                                                        for h in range(num_hops)))
        split = np.zeros_like(weights)
        for f in range(num_flows):
            for k in range(num_slots):
                p = plane[f, k]
                split[f, k] = kept[f, k] * plane_total(weights, f, p) / max(
                    plane_total(kept, f, p), 1e-30)
        return split

    def filled(split, rates, share):
        load = reference_link_load(links, split, rates, num_links)
        return [trimmable[l] and load[l] >= capacity[l] * (1 - share) for l in range(num_links)]

    def shares(split, rates, marked):
        phi = np.zeros((num_flows, num_slots))
        for f in range(num_flows):
            for k in range(num_slots):
                p = plane[f, k]
                hot = sum(weights[f, j] for j in range(num_slots) if plane[f, j] == p and
                          any(marked[int(links[f, j, h])] for h in range(num_hops)))
                phi[f, k] = hot / max(plane_total(weights, f, p), 1e-30)
        q = np.zeros(num_links)
        for l in range(num_links):
            num = den = 0.0
            for f in range(num_flows):
                for k in range(num_slots):
                    for h in range(num_hops):
                        if int(links[f, k, h]) == l:
                            num += split[f, k] * rates[f] * phi[f, k]
                            den += split[f, k] * rates[f]
            mean = num / max(den, 1e-30)
            if marked[l] and mean > 0:
                q[l] = min(tolerance / max(mean, 1e-30), max_trimmed)
        return q

    rates = reference_max_min(links, weights, flow_cap, capacity)[0]
    start = filled(weights, rates, congested_share)
    q = shares(weights, rates, start)
    for _ in range(rounds):
        split = delivered(q)
        rates = reference_max_min(links, split, flow_cap, capacity)[0]
        marked = [a or b for a, b in zip(filled(split, rates, saturated_rtol), start)]
        q_next = 0.5 * (q + shares(split, rates, marked))
        settled = np.max(np.abs(q_next - q)) <= 1e-3
        q = q_next
        if settled:
            break
    return reference_max_min(links, delivered(q), flow_cap, capacity)[0]


# --------------------------------------------------------------------------- ECMP

def ecmp_balls_in_bins_p100(balls: int, bins: int, groups: int, trials: int,
                            rng: np.random.Generator) -> tuple[float, float]:
    """Monte Carlo of E[max over `groups` independent experiments of the fullest bin], when
    `balls` balls fall uniformly and independently into `bins` bins in each experiment.

    With one flow per ball at the full port rate, the fullest bin is the most utilised link.
    Returns (mean, standard error of the mean)."""
    worst = np.zeros(trials)
    for g in range(groups):
        throws = rng.integers(0, bins, size=(trials, balls))
        counts = np.zeros((trials, bins), dtype=np.int64)
        for b in range(balls):
            counts[np.arange(trials), throws[:, b]] += 1
        worst = np.maximum(worst, counts.max(axis=1))
    return float(worst.mean()), float(worst.std(ddof=1) / math.sqrt(trials))


def balls_in_bins_max_cdf(balls: int, bins: int, m: int) -> Fraction:
    """Exact P(fullest bin <= m) for `balls` uniform balls in `bins` bins:
    balls! [x^balls] (sum_{j<=m} x^j / j!)^bins / bins^balls (labelled balls, counted)."""
    poly = [Fraction(1)]
    term = [Fraction(1, math.factorial(j)) for j in range(min(m, balls) + 1)]
    for _ in range(bins):
        out = [Fraction(0)] * min(len(poly) + len(term) - 1, balls + 1)
        for i, x in enumerate(poly):
            for j, y in enumerate(term):
                if i + j <= balls:
                    out[i + j] += x * y
        poly = out
    ways = poly[balls] * math.factorial(balls) if balls < len(poly) else Fraction(0)
    return ways / Fraction(bins) ** balls


def ecmp_balls_in_bins_exact(balls: int, bins: int, groups: int) -> float:
    """Exact E[max of `groups` iid fullest-bin counts] = sum_m P(max > m)."""
    return float(sum(1 - balls_in_bins_max_cdf(balls, bins, m) ** groups
                     for m in range(balls)))


# --------------------------------------------------------------------------- progressive

def reference_progressive(links, weights, size_bytes, start_s, flow_cap, capacity):
    """Finish time of every flow (seconds, float64[F]) when max-min rates are re-solved
    (`reference_max_min`) every time a flow finishes or arrives, one event at a time.

    A flow is active from its start until its bytes are sent; inactive flows take no part in
    the rates. A flow with no bytes finishes at its start. When no active flow has a positive
    rate and no flow is still to arrive, the flows left never finish (inf). Returns
    (finish, events) with events the number of rate solves."""
    weights = np.asarray(weights, dtype=np.float64)
    start = np.asarray(start_s, dtype=np.float64)
    remaining = np.asarray(size_bytes, dtype=np.float64) * 8e-9   # Gbit, so Gbit / (Gbit/s)
    num_flows = remaining.shape[0]
    finish = [math.inf] * num_flows
    done = [False] * num_flows
    for f in range(num_flows):
        if remaining[f] <= 0:
            finish[f] = float(start[f])
            done[f] = True
    starts_with_bytes = [start[f] for f in range(num_flows) if not done[f]]
    now = min(starts_with_bytes) if starts_with_bytes else 0.0
    events = 0
    while not all(done):
        active = [not done[f] and start[f] <= now for f in range(num_flows)]
        masked = weights * np.array(active, dtype=np.float64)[:, None]
        rates, _ = reference_max_min(links, masked, flow_cap, capacity)
        events += 1
        next_finish = math.inf
        for f in range(num_flows):
            if active[f] and rates[f] > 0:
                next_finish = min(next_finish, remaining[f] / rates[f])
        arrival = math.inf
        for f in range(num_flows):
            if not done[f] and start[f] > now:
                arrival = min(arrival, float(start[f]))
        step = min(next_finish, arrival - now)
        if math.isinf(step):
            break                                  # stalled: the flows left stay at inf
        for f in range(num_flows):
            if not active[f] or rates[f] <= 0:
                continue
            time_left = remaining[f] / rates[f]
            if time_left <= step * (1 + 1e-12):    # exact ties finish together
                finish[f] = now + time_left
                remaining[f] = 0.0
                done[f] = True
            else:
                remaining[f] -= rates[f] * step
        now = arrival if arrival - now <= next_finish else now + step   # land on arrivals
    return np.array(finish), events
