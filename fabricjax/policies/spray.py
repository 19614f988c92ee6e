"""`spray`: oblivious packet spraying. Each flow's packets cycle over its entropy values
(EVs), equally per plane, whatever the load; after a failure the dead EVs are dropped (once
routing withdraws their paths) and the rest carry the flow.

On the multi-plane Clos a flow has `spray.evs` EVs, slot k on plane k % P, placed on
distinct random spines within a plane (stratified, then a random rotation). On stored-path
fabrics it splits over the flow's `fabric.paths` candidate paths (the K shortest of a graph,
the equal-cost ones of a fat tree). Its reaction window is routing reconvergence, like ECMP:
it keeps spraying onto dead EVs until routing withdraws them.
"""

from __future__ import annotations

import dataclasses

from fabricjax.config import Scenario
from fabricjax.core.registry import register
from fabricjax.fabric.paths import spread_slots
from fabricjax.policies.base import Policy, Slots, evs_field, stored_spray_slots
from fabricjax.solver.aggregate import plane_slot_counts, spray_class_slots


@dataclasses.dataclass(frozen=True)
class Spray(Policy):
    name: str = "spray"
    stream: int = 2
    label: str = "oblivious packet spraying"
    aggregatable: bool = True

    def slots_per_flow(self, scenario: Scenario) -> int:
        if scenario.fabric.kind == "multiplane-clos":
            return scenario.spray.evs
        return scenario.fabric.paths

    def path_field(self, scenario: Scenario) -> tuple[str, str, int]:
        return evs_field("spray", scenario)

    def init(self, scenario, fabric, flows, routes, rng) -> Slots:
        if routes is None:
            plane, spine = spread_slots(fabric.geometry, flows.num_flows, scenario.spray.evs,
                                        rng)
            return Slots(plane, spine)
        return Slots(*stored_spray_slots(routes))

    def class_slots(self, geometry, classes, scenario, rng):
        """Each class's EVs per spine: the expected split (exact when S divides K_p)."""
        evs = scenario.spray.evs
        return (spray_class_slots(geometry, classes, evs),
                plane_slot_counts(evs, geometry.planes))


SPRAY = register(Spray())
