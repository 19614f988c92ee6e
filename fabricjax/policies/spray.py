"""`spray`: oblivious packet spraying. Each flow's packets cycle over its entropy values
(EVs), equally per plane, whatever the load; after a failure the dead EVs are dropped (once
routing withdraws their paths) and the rest carry the flow.

On the multi-plane Clos a flow has `spray.evs` EVs, slot k on plane k % P. `spray.placement`
says where they land: `routed` (the sender names the path, as MRC's SRv6 source routes do) on
distinct random spines within a plane (stratified, then a random rotation); `hashed` (every
switch hashes the EV onto an uplink, as UEC fabrics and htsim do) each on a uniformly random
spine, independently, so some spines get more than their share. On stored-path fabrics a
routed flow splits over its `fabric.paths` candidate paths (the K shortest of a graph, the
equal-cost ones of a fat tree), once each; a hashed one hashes its `spray.evs` EVs onto its
equal-cost paths. Its reaction window is routing reconvergence, like ECMP:
it keeps spraying onto dead EVs until routing withdraws them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricjax.config import Scenario
from fabricjax.core.registry import register
from fabricjax.policies.base import (Policy, Slots, evs_field, spraying_init, spraying_pool,
                                     spraying_slots)
from fabricjax.solver.aggregate import hashed_class_slots, plane_slot_counts, spray_class_slots


@dataclasses.dataclass(frozen=True)
class Spray(Policy):
    name: str = "spray"
    stream: int = 2
    label: str = "oblivious packet spraying"
    aggregatable: bool = True

    def slots_per_flow(self, scenario: Scenario) -> int:
        return spraying_slots(scenario.spray, scenario)

    def path_field(self, scenario: Scenario) -> tuple[str, str, int]:
        return evs_field("spray", scenario)

    def pool(self, scenario: Scenario) -> str:
        return spraying_pool(scenario.spray)

    def described(self, scenario: Scenario) -> dict:
        return {"placement": scenario.spray.placement}

    def init(self, scenario, fabric, flows, routes, rng) -> Slots:
        return spraying_init(scenario.spray, scenario, fabric, flows, routes, rng)

    def class_slots(self, geometry, classes, scenario, rng):
        """Each class's EVs per spine: routed, the expected split (exact when S divides K_p);
        hashed, Multinomial(n_c * K_p, 1/S) per (class, plane), the law of hashing every EV
        independently (exact in distribution)."""
        per_plane = plane_slot_counts(scenario.spray.evs, geometry.planes)
        if scenario.spray.placement == "hashed":
            return (hashed_class_slots(geometry, classes, per_plane.astype(np.int64), rng),
                    per_plane)
        return spray_class_slots(geometry, classes, scenario.spray.evs), per_plane


SPRAY = register(Spray())
