"""What a fabric configuration must satisfy before anything is built (host, no arrays).

Contract: `check_fabric(cfg)` raises one `ScenarioError` naming the field (radix not even, a
down:up split that is not whole, more GPUs than the tiers reach, link ids beyond int32, a
fat tree that is not 1:1 or whose graph would exceed MAX_EDGES edges, a graph without a
file) and returns None for a buildable fabric. Every size is decided in closed form, before
any array or graph exists: an oversized fabric is refused in microseconds with what would fit.
"""

from __future__ import annotations

from fabricjax.config import (MAX_LINK_ID, MAX_PATHS, FabricConfig, FabricKind, FatTreeConfig,
                              t0_count, two_tier_ports)
from fabricjax.core.errors import ScenarioError

# the largest graph (fat tree or file) built as a networkx graph: edges, one per switch pair
# or host cable (a bundle of parallel cables is one edge)
MAX_EDGES = 1_000_000


def bundled_switches(feeders: int, links_each: int, ports_down: int) -> int:
    """Switches that terminate `feeders` switches' `links_each` uplinks each, as a designer
    builds them below full size: the fewest whose `ports_down` take every uplink, rounded up
    to a divisor of `links_each`, so that every feeder reaches every switch with a bundle of
    links_each / count parallel cables. Equal bundles keep the tier non-blocking (with
    unequal ones some feeder pairs share fewer cables through a switch than they send into
    it); at full size the count is `links_each` (bundles of one)."""
    least = max(1, -(-feeders * links_each // ports_down))
    return next(n for n in range(least, links_each + 1) if links_each % n == 0)


def fat_tree_edges(gpus: int, radix: int, tiers: int = 3, planes: int = 1) -> int:
    """Edges of `graph.fat_tree_graph(gpus, radix, tiers=tiers, planes=planes)`, in closed
    form (h = radix/2, T = ceil(N/h) T0s). Two tiers: N + T * spines. Three tiers, per plane:
    N host edges; T0 to agg: h^2 per full pod, t * s for a last pod of t T0s and s aggs;
    agg to core: an agg at position j of a pod reaches the cores j*g + (T0 index mod g) of
    its group of g = ceil(pods/2), so h * min(T0s in the pod, g) edges per pod."""
    h = radix // 2
    t0s = -(-gpus // h)
    if tiers == 2:
        return planes * (gpus + t0s * bundled_switches(t0s, h, radix))
    pods = -(-t0s // h)
    group = -(-pods // 2)
    last = t0s - (pods - 1) * h
    aggs = bundled_switches(last, h, h)
    per_plane = (gpus + (pods - 1) * h * h + last * aggs
                 + (pods - 1) * h * min(h, group) + h * min(last, group))
    return planes * per_plane


def fat_tree_equal_cost_paths(gpus: int, radix: int, planes: int = 1) -> int:
    """The largest equal-cost set between two GPUs of `graph.fat_tree_graph(gpus, radix,
    tiers=3, planes=planes)`, in closed form (h = radix/2, T = ceil(N/h) T0s, pods =
    ceil(T/h), a core group of g = ceil(pods/2)). Per plane: one T0 alone, 1 (the path
    through it); one pod, its aggregation switches; more pods, h positions times the cores of
    a group that both pods' aggregation switches reach: g between two full pods, min(t, g)
    between a full pod and a last pod of t T0s (two pods whose second is partial)."""
    h = radix // 2
    t0s = -(-gpus // h)
    pods = -(-t0s // h)
    group = -(-pods // 2)
    last = t0s - (pods - 1) * h
    if t0s == 1:
        per_plane = 1
    elif pods == 1:
        per_plane = bundled_switches(last, h, h)
    else:
        per_plane = h * (group if pods >= 3 else min(last, group))
    return planes * per_plane


def capped_paths(equal_cost: int, planes: int) -> int:
    """The default candidate paths per pair: the whole equal-cost set, at most MAX_PATHS
    (rounded down to a multiple of the planes, which share a flow's paths equally)."""
    cap = max(planes, MAX_PATHS - MAX_PATHS % planes)
    return max(1, min(int(equal_cost), cap))


def _largest_fitting(gpus: int, edges_of) -> int:
    """The most GPUs (at most `gpus`) whose `edges_of(n)` stays within MAX_EDGES: a bisection
    over the closed form (edges grow with GPUs), 0 when not even 2 fit."""
    low, high = 1, gpus
    while low < high:                      # ~25 closed-form evaluations
        mid = (low + high + 1) // 2
        if edges_of(mid) <= MAX_EDGES:
            low = mid
        else:
            high = mid - 1
    return low if low >= 2 and edges_of(low) <= MAX_EDGES else 0


def check_fat_tree_size(gpus: int, radix: int, tiers: int = 3, planes: int = 1,
                        field: str = "fabric.gpus") -> None:
    """Refuse, before anything is built, a fat tree whose graph exceeds MAX_EDGES edges,
    naming how many GPUs would fit."""
    edges = fat_tree_edges(gpus, radix, tiers, planes)
    if edges <= MAX_EDGES:
        return
    fit = _largest_fitting(gpus, lambda n: fat_tree_edges(n, radix, tiers, planes))
    raise ScenarioError(field, f"a {tiers}-tier fat tree of {gpus:,} GPUs on {planes} "
                        f"plane{'s' if planes > 1 else ''} of radix {radix} is a graph of "
                        f"{edges:,} edges; allowed: at most {MAX_EDGES:,} edges, up to "
                        f"{fit:,} GPUs at this radix and planes (kind multiplane-clos is "
                        "sized by arithmetic, without a graph)")


def check_fat_tree(fabric: FatTreeConfig) -> None:
    """What a fat tree needs: an even radix, paths split equally over its planes, GPUs its
    tiers reach and a graph of bounded size."""
    k = fabric.radix
    if k % 2 or k < 4:
        raise ScenarioError("fabric.radix", f"a fat tree needs an even radix >= 4 (got {k})")
    if fabric.paths is not None and fabric.paths % fabric.planes:
        raise ScenarioError("fabric.paths", f"{fabric.paths} paths cannot be split equally "
                            f"over {fabric.planes} planes; allowed: multiples of fabric.planes")
    reach = 2 * (k // 2) ** fabric.tiers
    if fabric.gpus > reach:
        raise ScenarioError("fabric.gpus", f"{fabric.gpus} GPUs exceed what {fabric.tiers} "
                            f"tiers of radix {k} reach ({reach:,}); allowed: 2..{reach}")
    check_fat_tree_size(fabric.gpus, k, fabric.tiers, fabric.planes)


def check_fabric(fabric: FabricConfig) -> None:
    """Raise a ScenarioError for a fabric that cannot be built (a graph file is checked when
    it is read)."""
    if fabric.kind == FabricKind.FAT_TREE:
        return check_fat_tree(fabric)
    if fabric.kind == FabricKind.GRAPH:
        return None
    if fabric.radix % 2:
        raise ScenarioError("fabric.radix", f"must be even (got {fabric.radix})")
    up_exact = fabric.radix / (1.0 + fabric.oversubscription)
    if abs(up_exact - round(up_exact)) > 1e-9 or round(up_exact) < 1:
        raise ScenarioError(
            "fabric.oversubscription",
            f"{fabric.oversubscription:g} does not split radix {fabric.radix} into whole "
            f"down:up port counts; allowed: ratios d/u with d + u = {fabric.radix}, e.g. 1, 3",
        )
    down, up = two_tier_ports(fabric)
    reach = fabric.radix * down
    if fabric.gpus > reach:
        raise ScenarioError(
            "fabric.gpus",
            f"{fabric.gpus} GPUs exceed what two tiers of radix {fabric.radix} reach "
            f"({fabric.radix} T0s x {down} GPUs = {reach}); allowed: 2..{reach}",
        )
    t0s = t0_count(fabric.gpus, down, fabric.gpus_per_server if fabric.rail_optimised else 1)
    if fabric.rail_optimised and t0s > fabric.radix:
        raise ScenarioError(
            "fabric.rail_optimised",
            f"{fabric.gpus} GPUs in servers of {fabric.gpus_per_server} need {t0s} rail T0s per "
            f"plane, more than a spine's {fabric.radix} ports; allowed: a GPU count that fills "
            f"whole rail groups ({fabric.gpus_per_server} x {down} GPUs), or "
            "rail_optimised: false")
    links = 2 * fabric.planes * (fabric.gpus + t0s * up)
    if links > MAX_LINK_ID:
        raise ScenarioError(
            "fabric.gpus",
            f"{fabric.gpus} GPUs on {fabric.planes} planes make {links:,} directed links; "
            f"link ids are int32, allowed: up to {MAX_LINK_ID:,} links (fewer GPUs or planes)")
