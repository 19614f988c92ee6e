"""What a fabric configuration must satisfy before anything is built (host, no arrays).

Contract: `check_fabric(cfg)` raises one `ScenarioError` naming the field (radix not even, a
down:up split that is not whole, more GPUs than the tiers reach, link ids beyond int32, a
fat tree that is not 1:1, a graph without a file) and returns None for a buildable fabric.
"""

from __future__ import annotations

from fabricjax.config import MAX_LINK_ID, FabricConfig, t0_count, two_tier_ports
from fabricjax.core.errors import ScenarioError


def bundled_switches(feeders: int, links_each: int, ports_down: int) -> int:
    """Switches that terminate `feeders` switches' `links_each` uplinks each, as a designer
    builds them below full size: the fewest whose `ports_down` take every uplink, rounded up
    to a divisor of `links_each`, so that every feeder reaches every switch with a bundle of
    links_each / count parallel cables. Equal bundles keep the tier non-blocking (with
    unequal ones some feeder pairs share fewer cables through a switch than they send into
    it); at full size the count is `links_each` (bundles of one)."""
    least = max(1, -(-feeders * links_each // ports_down))
    return next(n for n in range(least, links_each + 1) if links_each % n == 0)


def check_other_fabric(fabric: FabricConfig) -> None:
    """What a fat-tree or graph fabric needs (the graph file itself is checked when read)."""
    if fabric.kind == "graph":
        if fabric.file is None:
            raise ScenarioError("fabric.file", "kind graph needs a file: GraphML or an edge "
                                "list, relative to the scenario")
        return
    if fabric.file is not None:
        raise ScenarioError("fabric.file", f"only kind graph reads a file (kind is "
                            f"{fabric.kind!r})")
    if fabric.tiers != 3:
        raise ScenarioError("fabric.tiers", "kind fat-tree is the three-tier fat tree; allowed: "
                            "3 (two tiers: kind multiplane-clos with planes: 1)")
    k = fabric.radix
    if k % 2 or k < 4:
        raise ScenarioError("fabric.radix", f"a fat tree needs an even radix >= 4 (got {k})")
    if fabric.oversubscription != 1.0:
        raise ScenarioError("fabric.oversubscription", "fat trees are built 1:1; allowed: 1")
    if fabric.paths % fabric.planes:
        raise ScenarioError("fabric.paths", f"{fabric.paths} paths cannot be split equally "
                            f"over {fabric.planes} planes; allowed: multiples of fabric.planes")
    reach = 2 * (k // 2) ** fabric.tiers
    if fabric.gpus > reach:
        raise ScenarioError("fabric.gpus", f"{fabric.gpus} GPUs exceed what {fabric.tiers} "
                            f"tiers of radix {k} reach ({reach:,}); allowed: 2..{reach}")


def check_fabric(fabric: FabricConfig) -> None:
    """Raise a ScenarioError for a fabric that cannot be built."""
    if fabric.kind != "multiplane-clos":
        return check_other_fabric(fabric)
    if fabric.tiers != 2 or fabric.file is not None:
        raise ScenarioError("fabric.tiers" if fabric.tiers != 2 else "fabric.file",
                            "the multi-plane Clos has tiers: 2 and no file; allowed: kind "
                            "fat-tree for tiers: 3, kind graph for a file")
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
