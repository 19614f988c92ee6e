"""`ecmp`: per-flow ECMP. Each of a flow's queue pairs is hashed onto one path; after a
failure, routing reconverges and (resilient hashing) only the QPs whose path died are hashed
again onto a live path.

On the multi-plane Clos a flow has `ecmp.qps` QPs per plane (the NIC stripes a flow over its
ports, as multi-rail NCCL does), each hashed uniformly and independently onto a spine of its
plane (two QPs may collide, as real hashes do). On stored-path fabrics the QPs (`ecmp.qps`
per plane of a fat tree, per flow on a graph file) hash onto the flow's equal-cost shortest
paths, of any plane. Its reaction window is routing reconvergence (`failures.reconvergence_s`):
flows hashed onto a dead path are black-holed until then.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from pydantic import Field

from fabricjax.config import FabricKind, Scenario, Strict
from fabricjax.core.registry import register
from fabricjax.fabric.paths import hashed_slots
from fabricjax.policies.base import Display, Policy, Reaction, Slots
from fabricjax.solver.aggregate import hashed_class_slots


class EcmpSettings(Strict):
    """Per-flow ECMP: `qps` queue pairs per plane (per NIC port), each hashed onto one spine."""

    qps: int = Field(1, ge=1, le=1024, description=(
        "Queue pairs per flow and plane (per NIC port), each hashed onto one path."))


@dataclasses.dataclass(frozen=True)
class Ecmp(Policy):
    settings_model = EcmpSettings

    name: str = "ecmp"
    stream: int = 1
    path_pool: str = "equal-cost"
    display: Display = Display(label="per-flow ECMP hashing",
                               colour="#d62728",      # red: the hash collisions
                               line_style=":")
    aggregatable: bool = True
    slot_connections: bool = True   # every QP is its own connection (engine.dynamic)
    memory_profile: str = "rehash"

    def qps(self, scenario: Scenario) -> int:
        """QPs per flow on a stored-path fabric (per plane of a fat tree, per flow on a graph
        file, whose planes are not known)."""
        cfg = scenario.fabric
        return self.section(scenario).qps * (cfg.planes if cfg.kind == FabricKind.FAT_TREE else 1)

    def slots_per_flow(self, scenario: Scenario) -> int:
        if scenario.fabric.kind == FabricKind.CLOS:
            return self.section(scenario).qps * scenario.fabric.planes
        return self.qps(scenario)

    def path_field(self, scenario: Scenario) -> tuple[str, str, int]:
        return "ecmp", "qps", 1

    def init(self, scenario, fabric, flows, routes, rng) -> Slots:
        if routes is None:
            plane, spine = hashed_slots(fabric.geometry, flows.num_flows,
                                        self.section(scenario).qps, rng)
            return Slots(plane, spine)
        qps = self.qps(scenario)
        pick = (rng.random((flows.num_flows, qps)) *
                np.maximum(routes.distinct, 1)[:, None]).astype(np.int32)
        plane = np.take_along_axis(routes.plane, pick, axis=1).astype(np.int32)
        return Slots(plane, pick)

    def class_slots(self, geometry, classes, scenario, rng):
        """QP counts per (class, plane, spine): Multinomial(n_c * qps, 1/S) per (class,
        plane), the law of hashing every QP independently (exact in distribution)."""
        qps = self.section(scenario).qps
        return (hashed_class_slots(geometry, classes, np.full(geometry.planes, qps), rng),
                np.full(geometry.planes, qps, np.float32))

    def react(self, routes, phase, plane, choice, state, alive, capacity, key, options,
              settings, layout, clock_rows=0) -> Reaction:
        alive_ext = jnp.concatenate([alive, jnp.array([True])])
        # re-hash only when something died: one set at a time (the baseline, and failure sets
        # under lax.map) skips the draws when all is alive; vmapped sets turn the cond into a
        # select, which computes both branches and keeps the right one
        choice = jax.lax.cond(jnp.all(alive), lambda: choice,
                              lambda: routes.rehash(plane, choice, alive_ext, key))
        return Reaction(choice=choice, weights=routes.live_split(plane, choice, alive_ext))


ECMP = register(Ecmp())
